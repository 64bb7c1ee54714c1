//! Removing states no run has used for [`UNUSED_DAYS`] days, and sessions aged out of a state.

use super::seeding::aged_out;
use super::state_dir::files_dir;
use super::taking_back::remove_settled;
use super::{UNUSED_DAYS, Walk};

use crate::sys::beneath::{self, DIR_LISTING};
use std::fs::{self};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// Removes the states of workspaces no run used for [`UNUSED_DAYS`] days (by the mtime of
/// their `last-used`) from `root` (`~/.local/state/stepproof/sessions`), skipping one a run
/// holds; returns what was removed. Nothing else there is touched, and a link is never
/// followed.
pub fn prune(root: &Path, now: SystemTime) -> Vec<PathBuf> {
    prune_unused(root, now, |path| fs::remove_dir_all(path))
}

/// In each workspace's state no run holds at the moment, the sessions that have aged out
/// ([`aged_out`]) are removed (by descriptor, beneath the state's `files/`); returns how many
/// files went. Run with the hourly look for unused states.
pub fn prune_aged_sessions(root: &Path, now: SystemTime) -> usize {
    let mut removed = 0;
    each_free_state(
        root,
        |_| true,
        |state| {
            let Ok(files) = beneath::open_root(&files_dir(state), DIR_LISTING) else {
                return;
            };
            let walk = Walk::of(files.as_fd(), None);
            let aged = aged_out(&walk.found, now);
            removed += remove_settled(files.as_fd(), &aged);
        },
    );
    removed
}

/// What [`prune`] and the build caches' prune share: each `<32 hex digits>` directory of
/// `root` whose `last-used` (or, without one, the directory itself) is older than
/// [`UNUSED_DAYS`] days and whose `lock` no run holds is removed with `remove`; returns what
/// was removed.
pub(crate) fn prune_unused(
    root: &Path,
    now: SystemTime,
    remove: impl Fn(&Path) -> std::io::Result<()>,
) -> Vec<PathBuf> {
    let unused = |path: &Path| {
        let used = fs::symlink_metadata(path.join("last-used"))
            .or_else(|_| fs::symlink_metadata(path))
            .and_then(|m| m.modified());
        used.ok()
            .and_then(|t| now.duration_since(t).ok())
            .is_some_and(|age| age > Duration::from_secs(UNUSED_DAYS * 86_400))
    };
    let mut removed = Vec::new();
    each_free_state(root, unused, |path| {
        if remove(path).is_ok() {
            removed.push(path.to_path_buf());
        }
    });
    removed
}

/// Calls `f` with each `<32 hex digits>` directory of `root` that `wanted` accepts and whose
/// `lock` no run holds: opened without following a link or waiting on a FIFO, and held
/// (exclusive) while `f` runs.
fn each_free_state(root: &Path, wanted: impl Fn(&Path) -> bool, mut f: impl FnMut(&Path)) {
    let Ok(entries) = fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let shaped = name.len() == 32 && name.as_bytes().iter().all(u8::is_ascii_hexdigit);
        if !shaped || !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let path = entry.path();
        if !wanted(&path) {
            continue;
        }
        let Ok(lock) = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path.join("lock"))
        else {
            continue;
        };
        if lock.try_lock().is_err() {
            continue;
        }
        f(&path);
    }
}
