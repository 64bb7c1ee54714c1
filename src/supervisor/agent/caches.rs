//! The build caches of a run on the host (`sandbox::plan::caches`): made before the launch,
//! owned by the user the sandbox writes as; a run's own caches are removed when it ends, a
//! workspace's kept ones are marked used and pruned with the workspace's other state after
//! [`UNUSED_DAYS`] days unused.
//!
//! Go makes its module cache read-only (directories 0555): removal makes each directory
//! writable first, never following a link.

use crate::sandbox::plan::SandboxPlan;
use crate::sandbox::plan::caches::{CACHES, PlannedCaches};
pub use crate::supervisor::agent::session_state::UNUSED_DAYS;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// The caches of a running launch; dropping it removes a run's own caches (not a workspace's).
#[derive(Debug)]
pub struct Caches {
    planned: PlannedCaches,
    /// Held (shared) while the run uses a workspace's caches: [`prune`] skips a locked one.
    _lock: Option<File>,
}

/// A step of making the caches that failed, with its path.
#[derive(Debug, thiserror::Error)]
#[error("{step} {path}: {source}")]
pub struct CachesError {
    pub step: &'static str,
    pub path: PathBuf,
    pub source: io::Error,
}

impl Caches {
    /// Makes the directories the plan binds (each cache's own below it), owned by the user the
    /// sandbox writes as; a kept one is marked used now and says whose it is.
    pub fn create(plan: &SandboxPlan) -> Result<Option<Caches>, CachesError> {
        let Some(planned) = plan.caches.clone() else {
            return Ok(None);
        };
        let fail = |step: &'static str, path: &Path| {
            let path = path.to_path_buf();
            move |source| CachesError { step, path, source }
        };
        let root = &planned.host;
        let (uid, gid) = (plan.identity.outside_uid, plan.identity.outside_gid);
        let mut lock = None;
        if planned.kept {
            // The markers are the supervisor's, beside the tree the sandbox sees (a sandbox
            // user who is the caller could otherwise replace them: a FIFO for the lock would
            // stall the next prune).
            let state = root.parent().unwrap_or(root);
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(state)
                .map_err(fail("creating the caches directory", state))?;
            let workspace = state.join("workspace");
            crate::supervisor::agent::session_state::write_unless_same(
                &workspace,
                plan.workspace.as_os_str().as_encoded_bytes(),
            )
            .map_err(fail("writing", &workspace))?;
            let used = state.join("last-used");
            crate::supervisor::agent::session_state::touch(&used)
                .map_err(fail("writing", &used))?;
            let path = state.join("lock");
            let file = OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
                .open(&path)
                .map_err(fail("opening", &path))?;
            file.lock_shared().map_err(fail("locking", &path))?;
            lock = Some(file);
            fs::set_permissions(state, fs::Permissions::from_mode(0o711))
                .map_err(fail("chmod", state))?;
        }
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(root)
            .map_err(fail("creating the caches directory", root))?;
        for (name, _) in CACHES {
            let dir = root.join(name);
            if create_owned_dir(&dir, uid, gid).map_err(fail("creating", &dir))? {
                continue;
            }
            // Kept from an earlier run (or made by a run beside this one): the sandbox user's
            // own directory, or refused (another identity's files below it would be unwritable;
            // chowning the top alone would hide that, and the sandbox user's files are not ours
            // to judge).
            let meta = fs::symlink_metadata(&dir).map_err(fail("reading", &dir))?;
            if !meta.is_dir() || meta.uid() != uid {
                return Err(CachesError {
                    step: "using the kept cache",
                    path: dir,
                    source: io::Error::other(format!(
                        "it is not a directory of the sandbox user (uid {uid}; found uid {}): remove it",
                        meta.uid()
                    )),
                });
            }
        }
        // The root stays the supervisor's (its markers with it); the sandbox user may enter it.
        fs::set_permissions(root, fs::Permissions::from_mode(0o711))
            .map_err(fail("chmod", root))?;
        Ok(Some(Caches {
            planned,
            _lock: lock,
        }))
    }
}

/// Makes `dir` (mode 0700) owned by `uid`:`gid` in one step as another run sees it: made under
/// a name of this process's, given away, then renamed into place unless something is there
/// already. Runs of one workspace started together would otherwise see each other's directory
/// between its creation and its chown, still root's, and refuse it. False when `dir` exists.
fn create_owned_dir(dir: &Path, uid: u32, gid: u32) -> io::Result<bool> {
    match fs::symlink_metadata(dir) {
        Ok(_) => return Ok(false),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let name = dir.file_name().unwrap_or_default().to_string_lossy();
    static STAGED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let staged = dir.with_file_name(format!(
        ".{name}.new-{}-{}",
        std::process::id(),
        STAGED.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    // Left by a run with this pid that ended here: it was never in use.
    let _ = fs::remove_dir(&staged);
    fs::DirBuilder::new().mode(0o700).create(&staged)?;
    let placed = std::os::unix::fs::lchown(&staged, Some(uid), Some(gid)).and_then(|()| {
        nix::fcntl::renameat2(
            nix::fcntl::AT_FDCWD,
            &staged,
            nix::fcntl::AT_FDCWD,
            dir,
            nix::fcntl::RenameFlags::RENAME_NOREPLACE,
        )
        .map_err(io::Error::from)
    });
    match placed {
        Ok(()) => Ok(true),
        Err(e) => {
            let _ = fs::remove_dir(&staged);
            if e.kind() == io::ErrorKind::AlreadyExists {
                Ok(false)
            } else {
                Err(e)
            }
        }
    }
}

impl Drop for Caches {
    fn drop(&mut self) {
        if !self.planned.kept {
            let _ = remove_tree(&self.planned.host);
        }
    }
}

/// Removes `path` and everything below it, making each directory writable first (Go's module
/// cache is read-only); a link is removed, never followed.
pub fn remove_tree(path: &Path) -> io::Result<()> {
    let meta = fs::symlink_metadata(path)?;
    if !meta.is_dir() {
        return fs::remove_file(path);
    }
    if meta.permissions().mode() & 0o700 != 0o700 {
        fs::set_permissions(path, fs::Permissions::from_mode(0o700))?;
    }
    for entry in fs::read_dir(path)? {
        remove_tree(&entry?.path())?;
    }
    fs::remove_dir(path)
}

/// Removes the caches of workspaces no run used for [`UNUSED_DAYS`] days (by their
/// `last-used`) from `root` (`~/.local/state/stepproof/caches`), skipping one a run holds;
/// returns what was removed. Nothing else there is touched.
pub fn prune(root: &Path, now: SystemTime) -> Vec<PathBuf> {
    crate::supervisor::agent::session_state::prune_unused(root, now, remove_tree)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    // Runs of one workspace started together: every one takes the directory, none sees it
    // half made (root's, before its chown), one of them made it.
    #[test]
    fn a_cache_directory_made_by_runs_started_together_is_the_sandbox_users() {
        use std::os::unix::fs::MetadataExt;
        let root = tempfile::tempdir().unwrap();
        let uid = if nix::unistd::geteuid().is_root() {
            4711
        } else {
            nix::unistd::geteuid().as_raw()
        };
        let gid = nix::unistd::getegid().as_raw();
        for round in 0..20 {
            let dir = root.path().join(format!("cargo-{round}"));
            let made: Vec<bool> = std::thread::scope(|scope| {
                let handles: Vec<_> = (0..8)
                    .map(|_| {
                        scope.spawn(|| {
                            let made = super::create_owned_dir(&dir, uid, gid).unwrap();
                            // What the caller checks next: never a directory still root's.
                            assert_eq!(fs::symlink_metadata(&dir).unwrap().uid(), uid);
                            made
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            assert_eq!(made.iter().filter(|m| **m).count(), 1, "{made:?}");
            let meta = fs::symlink_metadata(&dir).unwrap();
            assert!(meta.is_dir() && meta.uid() == uid, "round {round}");
        }
        // Nothing staged is left beside them.
        let left: Vec<_> = fs::read_dir(root.path())
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn read_only_trees_are_removed_and_links_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        fs::create_dir(&outside).unwrap();
        fs::write(outside.join("keep"), b"x").unwrap();
        let tree = dir.path().join("tree");
        let module = tree.join("go-mod/example.com/m@v1.0.0");
        fs::create_dir_all(&module).unwrap();
        fs::write(module.join("go.mod"), b"module m\n").unwrap();
        std::os::unix::fs::symlink(&outside, tree.join("go-mod/link")).unwrap();
        for d in [&module, &module.parent().unwrap().to_path_buf()] {
            fs::set_permissions(d, fs::Permissions::from_mode(0o555)).unwrap();
        }
        remove_tree(&tree).unwrap();
        assert!(!tree.exists());
        assert!(outside.join("keep").exists());
    }

    #[test]
    fn unused_caches_are_pruned_and_held_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let now = SystemTime::now();
        let long_ago = now - Duration::from_secs((UNUSED_DAYS + 1) * 86_400);
        let make = |name: &str, used: SystemTime| {
            let path = dir.path().join(name);
            fs::create_dir_all(path.join("go-mod/x")).unwrap();
            fs::set_permissions(path.join("go-mod/x"), fs::Permissions::from_mode(0o555)).unwrap();
            fs::write(path.join("lock"), b"").unwrap();
            let f = File::create(path.join("last-used")).unwrap();
            f.set_modified(used).unwrap();
            path
        };
        let old = make("0123456789abcdef0123456789abcdef", long_ago);
        let held = make("00000000000000000000000000000000", long_ago);
        let fresh = make("fedcba9876543210fedcba9876543210", now);
        let other = make("notes", long_ago);
        let lock = File::open(held.join("lock")).unwrap();
        lock.lock_shared().unwrap();
        assert_eq!(prune(dir.path(), now), std::slice::from_ref(&old));
        assert!(held.is_dir() && fresh.is_dir() && other.is_dir() && !old.exists());
        drop(lock);
    }
}
