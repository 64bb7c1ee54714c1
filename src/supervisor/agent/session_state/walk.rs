//! Finding the kept files beneath a config directory: by kind and place, each checked by its
//! `fstatat` (owner, one link, a regular file, its cap) before it is opened without following
//! a link, and read for at most the size it had.

use super::{Dropped, Found, HISTORY, Kind, MAX_FILES, MAX_TOTAL_BYTES, MEMORY_DEPTH_MAX, Walk};

use crate::sys::beneath::{self, DIR_LISTING, FILE_READING, Stat};
use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// What an entry is, in words (`fstatat`'s type).
fn what(st: &Stat) -> &'static str {
    match st.mode & libc::S_IFMT {
        libc::S_IFLNK => "a symbolic link",
        libc::S_IFIFO => "a FIFO",
        libc::S_IFSOCK => "a socket",
        libc::S_IFCHR => "a character device",
        libc::S_IFBLK => "a block device",
        libc::S_IFDIR => "a directory",
        _ => "not a regular file",
    }
}

/// A project key as Claude Code 2.1.328 makes one: the directory's path with every character
/// but ASCII letters and digits turned into `-` (a path longer than 200 characters: cut, then
/// `-` and a hash in base 36).
fn is_project_key(name: &OsStr) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 255
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'-')
}

impl Walk {
    /// Walks the kept names beneath `root` (a config directory, or a state's `files/`):
    /// nothing is followed, nothing opened; `owner`: the uid every kept file must have.
    pub fn of(root: BorrowedFd<'_>, owner: Option<u32>) -> Walk {
        Walk::kinds(root, owner, true)
    }

    /// [`Walk::of`]; without `sessions`, only the prompt history and auto-memory (the
    /// transcripts, todo lists and plans are not looked at: a single turn's seeding does not
    /// pay for every kept session).
    pub(super) fn kinds(root: BorrowedFd<'_>, owner: Option<u32>, sessions: bool) -> Walk {
        let mut walk = Walk::default();
        walk.entry(
            root,
            OsStr::new(HISTORY),
            Path::new(HISTORY),
            Kind::History,
            owner,
        );
        let session_dirs: &[(&str, Kind)] = if sessions {
            &[("todos", Kind::Todo), ("plans", Kind::Plan)]
        } else {
            &[]
        };
        for &(dir, kind) in session_dirs {
            if let Some(fd) = walk.open_dir(root, Path::new(dir)) {
                for name in names(fd.as_fd()) {
                    let rel = Path::new(dir).join(&name);
                    walk.entry(fd.as_fd(), &name, &rel, kind, owner);
                }
            }
        }
        let Some(projects) = walk.open_dir(root, Path::new("projects")) else {
            return walk;
        };
        for key in names(projects.as_fd()) {
            let is_dir = beneath::stat_at(projects.as_fd(), &key).is_ok_and(|st| st.is_dir());
            if !is_project_key(&key) || !is_dir {
                continue;
            }
            let rel_key = Path::new("projects").join(&key);
            let Some(project) = walk.open_dir(projects.as_fd(), Path::new(&key)) else {
                continue;
            };
            for name in names(project.as_fd()) {
                let rel = rel_key.join(&name);
                if name == "memory" {
                    walk.memory(project.as_fd(), &name, &rel, owner, 0);
                } else if sessions && name.as_bytes().ends_with(b".jsonl") {
                    walk.entry(project.as_fd(), &name, &rel, Kind::Transcript, owner);
                }
            }
        }
        walk
    }

    /// A directory beneath `dir`, or None (absent: silently; anything else: dropped).
    fn open_dir(&mut self, dir: BorrowedFd<'_>, rel: &Path) -> Option<OwnedFd> {
        match beneath::stat_at(dir, rel.as_os_str()) {
            Ok(st) if st.is_dir() => {}
            Ok(st) => {
                self.drop(rel, what(&st).to_string());
                return None;
            }
            Err(_) => return None,
        }
        beneath::open_beneath(dir, rel, DIR_LISTING, 0)
            .inspect_err(|e| self.drop(rel, format!("not opened ({e})")))
            .ok()
    }

    fn memory(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &OsStr,
        rel: &Path,
        owner: Option<u32>,
        depth: usize,
    ) {
        match beneath::stat_at(dir, name) {
            Ok(st) if st.is_dir() => {}
            Ok(_) => return self.entry(dir, name, rel, Kind::Memory, owner),
            Err(e) => return self.drop(rel, format!("not looked at ({e})")),
        }
        if depth >= MEMORY_DEPTH_MAX {
            return self.drop(rel, format!("deeper than {MEMORY_DEPTH_MAX} directories"));
        }
        let Some(fd) = self.open_dir(dir, Path::new(name)) else {
            return;
        };
        for child in names(fd.as_fd()) {
            self.memory(fd.as_fd(), &child, &rel.join(&child), owner, depth + 1);
        }
    }

    /// One file at a kept name: kept if it is a regular file with one link, owned by `owner`,
    /// under its kind's cap and the totals.
    fn entry(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &OsStr,
        rel: &Path,
        kind: Kind,
        owner: Option<u32>,
    ) {
        let st = match beneath::stat_at(dir, name) {
            Ok(st) => st,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return,
            Err(e) => return self.drop(rel, format!("not looked at ({e})")),
        };
        if let Err(why) = check(&st, kind, owner) {
            return self.drop(rel, why);
        }
        if self.found.len() >= MAX_FILES {
            return self.drop(rel, format!("more than {MAX_FILES} files"));
        }
        if self.total + st.size > MAX_TOTAL_BYTES {
            return self.drop(rel, format!("more than {MAX_TOTAL_BYTES} bytes in all"));
        }
        self.total += st.size;
        self.found.push(Found {
            rel: rel.to_path_buf(),
            kind,
            size: st.size,
            mtime: st.mtime,
        });
    }

    fn drop(&mut self, rel: &Path, why: String) {
        self.dropped.push(Dropped {
            path: crate::audit::text::path(rel).into_owned(),
            why,
        });
    }
}

/// The entries of a directory, sorted (an error lists nothing: the directory is then empty to
/// the walk).
fn names(dir: BorrowedFd<'_>) -> Vec<std::ffi::OsString> {
    let mut names: Vec<_> = beneath::list_dir(dir)
        .unwrap_or_default()
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    names.sort();
    names
}

/// Why a file at a kept name is not kept, if it is not.
fn check(st: &Stat, kind: Kind, owner: Option<u32>) -> Result<(), String> {
    if !st.is_file() {
        return Err(what(st).to_string());
    }
    if let Some(owner) = owner
        && st.uid != owner
    {
        return Err(format!(
            "owned by uid {}, not the sandbox user ({owner})",
            st.uid
        ));
    }
    if st.nlink != 1 {
        return Err(format!("{} hard links", st.nlink));
    }
    if st.size > kind.cap() {
        return Err(format!(
            "{} bytes, over the cap of {} for {}: dropped whole",
            st.size,
            kind.cap(),
            kind.word()
        ));
    }
    Ok(())
}

/// Opens a found file again beneath `root` (no link anywhere on the way, no blocking) and
/// checks it as the walk did.
pub(super) fn open_checked(
    root: BorrowedFd<'_>,
    found: &Found,
    owner: Option<u32>,
) -> Result<File, String> {
    let fd = beneath::open_beneath(root, &found.rel, FILE_READING, 0)
        .map_err(|e| format!("not opened ({e})"))?;
    let st = beneath::stat_fd(fd.as_fd()).map_err(|e| format!("fstat: {e}"))?;
    check(&st, found.kind, owner)?;
    Ok(File::from(fd))
}

/// Reads a found file whole, at most its cap (one that grew past it is dropped).
pub(super) fn read_checked(
    root: BorrowedFd<'_>,
    found: &Found,
    owner: Option<u32>,
) -> Result<Vec<u8>, String> {
    let file = open_checked(root, found, owner)?;
    let mut bytes = Vec::new();
    file.take(found.kind.cap() + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("reading: {e}"))?;
    if bytes.len() as u64 > found.kind.cap() {
        return Err(format!(
            "grew past the cap of {} while read",
            found.kind.cap()
        ));
    }
    Ok(bytes)
}
