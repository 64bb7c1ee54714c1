//! A workspace's state directory: its kept tree, its lock (seeding shared, taking back
//! exclusive), the mark of its last use, and writing a file only when its bytes change.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub(super) fn mtime_of(time: (i64, i64)) -> SystemTime {
    let (secs, nanos) = time;
    if secs >= 0 {
        UNIX_EPOCH + Duration::new(secs as u64, nanos.clamp(0, 999_999_999) as u32)
    } else {
        UNIX_EPOCH
    }
}

pub(super) fn files_dir(state: &Path) -> PathBuf {
    state.join("files")
}

/// Opens (creating) the state's lock file and takes the lock.
pub(super) fn lock(state: &Path, exclusive: bool) -> io::Result<File> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(state)?;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(state.join("lock"))?;
    if exclusive {
        file.lock()?;
    } else {
        file.lock_shared()?;
    }
    Ok(file)
}

/// Marks the state as used now (for [`prune`]) and says whose it is.
pub(super) fn mark_used(state: &Path, workspace: &Path) {
    let _ = touch(&state.join("last-used"));
    let mut text = workspace.as_os_str().as_bytes().to_vec();
    text.push(b'\n');
    let _ = write_unless_same(&state.join("workspace"), &text);
}

/// Sets `path`'s mtime to now, creating it empty if it is missing (never following a link).
/// Not a rewrite: that would be a truncate each run.
pub(crate) fn touch(path: &Path) -> std::io::Result<()> {
    touch_at(path, SystemTime::now())
}

/// [`touch`] with the mtime given.
pub(crate) fn touch_at(path: &Path, at: SystemTime) -> std::io::Result<()> {
    fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?
        .set_modified(at)
}

/// Writes `bytes` to `path` unless it holds them already: a marker every run writes the same
/// way is read, not rewritten (on ext4 the truncate of a rewrite frees a block, a discard
/// where the disk is mounted so: the slowest write of a launch).
pub(crate) fn write_unless_same(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if fs::read(path).is_ok_and(|held| held == bytes) {
        return Ok(());
    }
    fs::write(path, bytes)
}
