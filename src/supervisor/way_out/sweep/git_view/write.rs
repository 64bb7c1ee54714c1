//! Writing in a git directory, never through a link: a new file with its mode and owner, a
//! directory made again, and the one atomic write whole the sweep's rewrites go through.

use super::{named, open_dir};
use crate::sys::beneath::{self, DIR_LISTING, Stat};
use std::ffi::OsStr;
use std::fs;
use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

/// Writes `bytes` at `path` (relative to `dir`; nothing must be there), with `mode` and the
/// owner it had.
pub(super) fn write_new(
    dir: BorrowedFd<'_>,
    path: &Path,
    bytes: &[u8],
    mode: u32,
    uid: u32,
    gid: u32,
) -> io::Result<()> {
    let parent = open_dir(dir, path.parent().unwrap_or(Path::new("")))?;
    let last = path
        .file_name()
        .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL;
    let fd = beneath::open_beneath(parent.as_fd(), Path::new(last), flags, 0o600)?;
    own(&fd, mode, uid, gid)?;
    let mut out = fs::File::from(fd);
    out.write_all(bytes)?;
    out.sync_all()
}

/// Gives an open entry `mode` (exactly, whatever the umask) and, when the supervisor may, the
/// owner it had.
pub(super) fn own(fd: &OwnedFd, mode: u32, uid: u32, gid: u32) -> io::Result<()> {
    if nix::unistd::geteuid().is_root() {
        nix::unistd::fchown(
            fd,
            Some(nix::unistd::Uid::from_raw(uid)),
            Some(nix::unistd::Gid::from_raw(gid)),
        )?;
    }
    nix::sys::stat::fchmod(fd, nix::sys::stat::Mode::from_bits_truncate(mode & 0o7777))?;
    Ok(())
}

/// Makes the directory `name` in `gd` as it was (mode and owner).
pub(super) fn make_dir(
    gd: BorrowedFd<'_>,
    name: &str,
    mode: u32,
    uid: u32,
    gid: u32,
) -> io::Result<()> {
    let path = named(name);
    let parent = open_dir(gd, path.parent().unwrap_or(Path::new("")))?;
    let last = path
        .file_name()
        .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
    beneath::mkdir_at(parent.as_fd(), last, 0o700)?;
    let fd = beneath::open_beneath(parent.as_fd(), Path::new(last), DIR_LISTING, 0)?;
    own(&fd, mode, uid, gid)
}

/// Replaces `name` in `gd` with `bytes` atomically (a new file renamed over it), with the mode
/// and owner `st` says it had.
pub(super) fn rewrite(gd: BorrowedFd<'_>, name: &str, bytes: &[u8], st: &Stat) -> io::Result<()> {
    write_whole(gd, OsStr::new(name), bytes, (st.mode, st.uid, st.gid), true)
}

/// Writes `bytes` as `name` in `dir` whole: under a temporary name beside it (mode and, when
/// the supervisor may, owner as given), synced, renamed into place — over what `name` holds
/// when `over`, never over anything otherwise — and the directory synced. A supervisor killed
/// part way leaves `name` as it was (absent, or the old file) or whole, never cut short. The
/// sweep's launch versions put back and the index and lists rewritten here all go through it.
pub(in crate::supervisor::way_out::sweep) fn write_whole(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    bytes: &[u8],
    (mode, uid, gid): (u32, u32, u32),
    over: bool,
) -> io::Result<()> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mut temp = name.to_os_string();
    temp.push(format!(".stepproof-{}-{nanos}", std::process::id()));
    write_new(dir, Path::new(&temp), bytes, mode, uid, gid)?;
    let done = if over {
        beneath::rename_over(dir, &temp, dir, name)
    } else {
        match beneath::rename_noreplace(dir, &temp, dir, name) {
            // A file system without RENAME_NOREPLACE: the caller took the name away, and the
            // sandbox that could have made it again is gone.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                beneath::rename_over(dir, &temp, dir, name)
            }
            other => other,
        }
    };
    if done.is_err() {
        let _ = beneath::unlink_at(dir, &temp, false);
    }
    done?;
    let listing = beneath::open_beneath(dir, Path::new(""), DIR_LISTING, 0)?;
    fs::File::from(listing).sync_all()
}
