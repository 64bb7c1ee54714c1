//! Files the supervisor writes for its caller (`--status-file`, `--report`, `--summary`,
//! `--summary-json`, `$GITHUB_STEP_SUMMARY`). They are opened before the sandbox starts and
//! written through those descriptors, so a link or FIFO the run plants at the name later
//! changes nothing. A name under a directory the sandbox can write (where this run, or an
//! earlier one, may have planted links) is resolved beneath that directory with no symlink at
//! all; a FIFO never blocks the supervisor.

use crate::sandbox::plan::SandboxPlan;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::Mode;
use std::fs::File;
use std::io::{self, Seek, Write};
use std::os::fd::AsFd;
use std::path::{Component, Path, PathBuf};

#[derive(Debug, thiserror::Error)]
#[error("opening {what} {path}: {reason}")]
pub struct OutputFileError {
    pub what: &'static str,
    pub path: PathBuf,
    pub reason: String,
}

/// Replace the content at the end of the run, or append to it (GitHub's step summary).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    Replace,
    Append,
}

#[derive(Debug)]
pub struct OutputFile {
    path: PathBuf,
    file: File,
    mode: WriteMode,
    regular: bool,
}

impl OutputFile {
    /// Opens `path` for writing now. `writable_roots` are the host directories the sandbox can
    /// write (canonical paths); beneath them nothing is followed and only a regular file with
    /// one link is accepted.
    pub fn open(
        what: &'static str,
        path: &Path,
        writable_roots: &[PathBuf],
        mode: WriteMode,
    ) -> Result<OutputFile, OutputFileError> {
        let fail = |reason: String| OutputFileError {
            what,
            path: path.to_path_buf(),
            reason,
        };
        let mut flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK;
        if mode == WriteMode::Append {
            flags |= OFlag::O_APPEND;
        }
        let file_mode = Mode::from_bits_truncate(0o644);
        let fd = match locate(path, writable_roots).map_err(|e| fail(e.to_string()))? {
            Location::Beneath { root, rel } => {
                let root_fd = nix::fcntl::open(
                    &root,
                    OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
                    Mode::empty(),
                )
                .map_err(|e| fail(format!("{}: {e}", root.display())))?;
                let how = OpenHow::new()
                    .flags(flags | OFlag::O_NOFOLLOW)
                    .mode(file_mode)
                    .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_SYMLINKS);
                let fd = nix::fcntl::openat2(root_fd.as_fd(), &rel, how).map_err(|e| {
                    fail(match e {
                        nix::errno::Errno::ELOOP | nix::errno::Errno::EXDEV => format!(
                            "a symbolic link on the way, inside {} where the sandbox writes: \
                             refusing to follow it ({e})",
                            root.display()
                        ),
                        e => e.to_string(),
                    })
                })?;
                let stat = nix::sys::stat::fstat(&fd).map_err(|e| fail(e.to_string()))?;
                if stat.st_mode & libc::S_IFMT != libc::S_IFREG {
                    return Err(fail(format!(
                        "not a regular file, inside {} where the sandbox writes",
                        root.display()
                    )));
                }
                if stat.st_nlink > 1 {
                    return Err(fail(format!(
                        "a file with {} hard links, inside {} where the sandbox writes: \
                         refusing to write through another name",
                        stat.st_nlink,
                        root.display()
                    )));
                }
                fd
            }
            Location::Outside(target) => {
                // Outside what the sandbox can write, a link in the directories is the user's
                // own. The last component is not followed either, except the caller's own
                // descriptors (`/dev/stdout`, `/proc/self/fd/N`).
                let flags = if may_follow_last(&target) {
                    flags
                } else {
                    flags | OFlag::O_NOFOLLOW
                };
                nix::fcntl::open(&target, flags, file_mode).map_err(|e| {
                    fail(match e {
                        nix::errno::Errno::ENXIO => "a FIFO nobody reads".to_string(),
                        nix::errno::Errno::ELOOP => "a symbolic link: name the file itself".into(),
                        e => e.to_string(),
                    })
                })?
            }
        };
        let file = File::from(fd);
        let regular = file.metadata().is_ok_and(|m| m.is_file());
        // Writes block normally from here on (only the open had to be non-blocking).
        if let Ok(bits) = nix::fcntl::fcntl(&file, nix::fcntl::FcntlArg::F_GETFL) {
            let cleared = OFlag::from_bits_truncate(bits) & !OFlag::O_NONBLOCK;
            let _ = nix::fcntl::fcntl(&file, nix::fcntl::FcntlArg::F_SETFL(cleared));
        }
        Ok(OutputFile {
            path: path.to_path_buf(),
            file,
            mode,
            regular,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `bytes` as the file's content (or appends them).
    pub fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        if self.mode == WriteMode::Replace && self.regular {
            self.file.set_len(0)?;
            self.file.rewind()?;
        }
        self.file.write_all(bytes)?;
        self.file.flush()
    }
}

/// The writable root `path` lies beneath once the user's own links outside the roots are
/// resolved (a directory that does not exist yet counts by its name), if any.
pub fn writable_root_of(path: &Path, writable_roots: &[PathBuf]) -> io::Result<Option<PathBuf>> {
    Ok(match locate(path, writable_roots)? {
        Location::Beneath { root, .. } => Some(root),
        Location::Outside(_) => None,
    })
}

pub use crate::audit::sink::may_follow_last;

enum Location {
    /// Beneath a directory the sandbox can write: `rel` is resolved from `root` with no link.
    Beneath {
        root: PathBuf,
        rel: PathBuf,
    },
    Outside(PathBuf),
}

/// Walks `path` from `/` (relative paths from the current directory). Outside the writable
/// roots a symlinked directory is the user's own and is resolved; once the walk enters a root,
/// the rest is handed to `openat2` beneath that root, which follows nothing.
fn locate(path: &Path, roots: &[PathBuf]) -> io::Result<Location> {
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()?.join(path)
    };
    let Some(name) = absolute.file_name().map(PathBuf::from) else {
        return Err(io::Error::other("names no file"));
    };
    let parent = absolute.parent().unwrap_or(Path::new("/"));
    let mut current = PathBuf::from("/");
    let mut rest: Vec<Component> = parent.components().collect();
    rest.reverse();
    loop {
        if let Some(root) = roots.iter().find(|r| current.starts_with(r)) {
            let mut rel = current
                .strip_prefix(root)
                .unwrap_or(Path::new(""))
                .to_path_buf();
            for component in rest.iter().rev() {
                match component {
                    Component::Normal(c) => rel.push(c),
                    Component::ParentDir if !rel.pop() => {
                        return Err(io::Error::other(format!(
                            "`..` leaves {}, where the sandbox writes",
                            root.display()
                        )));
                    }
                    _ => {}
                }
            }
            rel.push(&name);
            return Ok(Location::Beneath {
                root: root.clone(),
                rel,
            });
        }
        let Some(component) = rest.pop() else {
            return Ok(Location::Outside(current.join(name)));
        };
        match component {
            Component::Normal(c) => {
                current.push(c);
                if std::fs::symlink_metadata(&current).is_ok_and(|m| m.file_type().is_symlink()) {
                    current = current.canonicalize()?;
                }
            }
            Component::ParentDir => {
                current.pop();
            }
            _ => {}
        }
    }
}

/// The host directories a run of this plan can write: what is bound read-write into the view
/// (workspace, writable extras, the agent's config directory), or, without a mount namespace,
/// what Landlock lets it write.
pub fn writable_roots(plan: &SandboxPlan) -> Vec<PathBuf> {
    let mut roots = plan.writable_host_paths();
    for root in &mut roots {
        if let Ok(canonical) = root.canonicalize() {
            *root = canonical;
        }
    }
    roots.sort();
    roots.dedup();
    roots
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn beneath_a_root_no_link_is_followed_and_no_fifo_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let ws = base.join("ws");
        let victim = base.join("victim");
        fs::create_dir_all(ws.join("out")).unwrap();
        fs::write(&victim, "precious").unwrap();
        let roots = vec![ws.clone()];
        std::os::unix::fs::symlink(&victim, ws.join("status.json")).unwrap();
        std::os::unix::fs::symlink(&base, ws.join("linkdir")).unwrap();
        for name in ["status.json", "linkdir/victim"] {
            let err = OutputFile::open(
                "the status file",
                &ws.join(name),
                &roots,
                WriteMode::Replace,
            )
            .unwrap_err();
            assert!(err.reason.contains("symbolic link"), "{name}: {err}");
        }
        nix::unistd::mkfifo(&ws.join("fifo"), Mode::from_bits_truncate(0o600)).unwrap();
        let err = OutputFile::open("x", &ws.join("fifo"), &roots, WriteMode::Replace).unwrap_err();
        assert!(
            err.to_string().contains("FIFO")
                || err.to_string().contains("ENXIO")
                || err.to_string().contains("regular"),
            "{err}"
        );
        fs::hard_link(&victim, ws.join("hard")).unwrap();
        assert!(OutputFile::open("x", &ws.join("hard"), &roots, WriteMode::Replace).is_err());
        assert_eq!(fs::read_to_string(&victim).unwrap(), "precious");
        // An ordinary file: replaced at write time, through the descriptor opened before.
        let mut out =
            OutputFile::open("x", &ws.join("out/s.json"), &roots, WriteMode::Replace).unwrap();
        fs::write(
            ws.join("out/s.json"),
            "planted by the run, longer than the status",
        )
        .unwrap();
        out.write(b"{}\n").unwrap();
        assert_eq!(fs::read_to_string(ws.join("out/s.json")).unwrap(), "{}\n");
        // Replaced by a link during the run: the write goes to the file opened before.
        let mut out =
            OutputFile::open("x", &ws.join("r.json"), &roots, WriteMode::Replace).unwrap();
        fs::remove_file(ws.join("r.json")).unwrap();
        std::os::unix::fs::symlink(&victim, ws.join("r.json")).unwrap();
        out.write(b"{}\n").unwrap();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "precious");
    }

    #[test]
    fn outside_the_roots_links_in_directories_are_the_user_s() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        fs::create_dir_all(base.join("real")).unwrap();
        std::os::unix::fs::symlink(base.join("real"), base.join("via")).unwrap();
        let mut out =
            OutputFile::open("x", &base.join("via/a.md"), &[], WriteMode::Append).unwrap();
        out.write(b"one\n").unwrap();
        out.write(b"two\n").unwrap();
        assert_eq!(
            fs::read_to_string(base.join("real/a.md")).unwrap(),
            "one\ntwo\n"
        );
        // A root reached through the user's link is still a root.
        let ws = base.join("real");
        std::os::unix::fs::symlink("/etc", ws.join("etc")).unwrap();
        assert!(OutputFile::open("x", &base.join("via/etc/x"), &[ws], WriteMode::Replace).is_err());
        // `..` out of a root is refused rather than followed.
        let ws = base.join("real");
        assert!(matches!(
            locate(&ws.join("sub/../../x"), std::slice::from_ref(&ws)),
            Ok(Location::Outside(_)) | Err(_)
        ));
    }
}
