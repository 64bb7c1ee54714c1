//! Reading a named file beneath the workspace: resolved without following a link, admitted
//! whole only within its budget, and looked up again to confirm a removal.

use super::{Exceeded, Walk};

use std::ffi::OsStr;
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use crate::sys::beneath::{self, DIR_LOOKUP, FILE_READING};

impl<'a> Walk<'a> {
    /// The first `max` bytes of the regular file `rel` beneath `root` (no link followed), or
    /// `None` when there is no such file; within the walk's budget.
    pub fn read_named(
        &mut self,
        root: BorrowedFd<'_>,
        rel: &str,
        max: u64,
    ) -> Result<Option<Vec<u8>>, Exceeded> {
        let Some((fd, _)) = self.open_named(root, rel)? else {
            return Ok(None);
        };
        let take = max.min(self.budget.walk_bytes.saturating_sub(self.bytes));
        let mut bytes = Vec::new();
        std::fs::File::from(fd)
            .take(take)
            .read_to_end(&mut bytes)
            .map_err(|e| unreadable(rel, &e))?;
        self.bytes += bytes.len() as u64;
        Ok(Some(bytes))
    }

    /// The regular file `rel` beneath `root` opened (no link followed) with its `fstat`, one
    /// entry of the walk; `None` when there is no such regular file.
    fn open_named(
        &mut self,
        root: BorrowedFd<'_>,
        rel: &str,
    ) -> Result<Option<(OwnedFd, beneath::Stat)>, Exceeded> {
        self.check_time()?;
        self.entries += 1;
        let fd = match beneath::open_beneath(root, Path::new(rel), FILE_READING, 0) {
            Ok(fd) => fd,
            Err(e) if is_absence(&e) => return Ok(None),
            Err(e) => return Err(unreadable(rel, &e)),
        };
        match beneath::stat_fd(fd.as_fd()) {
            Ok(stat) if stat.is_file() => Ok(Some((fd, stat))),
            Ok(_) => Ok(None),
            Err(e) => Err(unreadable(rel, &e)),
        }
    }

    /// Whether a file of `stat`'s size may be read whole: at most `max` bytes (`FileBytes`,
    /// naming it, with what it really occupies), within what the walk may still read.
    pub(super) fn admit_whole(
        &self,
        rel: &str,
        stat: &beneath::Stat,
        max: u64,
    ) -> Result<(), Exceeded> {
        if stat.size > max {
            return Err(Exceeded::FileBytes {
                path: rel.to_string(),
                size: stat.size,
                allocated: stat.blocks.saturating_mul(512),
                limit: max,
            });
        }
        if self.bytes.saturating_add(stat.size) > self.budget.walk_bytes {
            return Err(Exceeded::WalkBytes {
                limit: self.budget.walk_bytes,
            });
        }
        Ok(())
    }

    /// The whole regular file `rel` beneath `root` (no link followed), or `None` when there is
    /// no such file; a file over `max` bytes is refused (`FileBytes`, naming it), not cut: what
    /// was not read would be what decides. Within the walk's budget.
    pub fn read_whole(
        &mut self,
        root: BorrowedFd<'_>,
        rel: &str,
        max: u64,
    ) -> Result<Option<Vec<u8>>, Exceeded> {
        let Some((fd, stat)) = self.open_named(root, rel)? else {
            return Ok(None);
        };
        self.admit_whole(rel, &stat, max)?;
        let mut bytes = Vec::new();
        // One byte more than the size it had: a file that grew meanwhile is not cut either.
        std::fs::File::from(fd)
            .take(stat.size + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| unreadable(rel, &e))?;
        if bytes.len() as u64 != stat.size {
            return Err(Exceeded::Unstable {
                path: rel.to_string(),
            });
        }
        self.bytes += bytes.len() as u64;
        Ok(Some(bytes))
    }

    /// What is at `rel` beneath `root` now, by one lookup that follows no link (`openat2`
    /// beneath, `O_PATH | O_NOFOLLOW`): `None` when nothing is — the name is absent, a
    /// component above it is not a directory, or a link is on the way (the path as git sees
    /// it holds no such entry). Only this confirms that a baseline entry was removed: a walk
    /// that missed it never does.
    pub fn lookup(
        &mut self,
        root: BorrowedFd<'_>,
        rel: &str,
    ) -> Result<Option<beneath::Stat>, Exceeded> {
        self.check_time()?;
        self.entries += 1;
        match beneath::open_beneath(root, Path::new(rel), libc::O_PATH, 0) {
            Ok(fd) => beneath::stat_fd(fd.as_fd())
                .map(Some)
                .map_err(|e| unreadable(rel, &e)),
            Err(e) if is_absence(&e) => Ok(None),
            Err(e) => Err(unreadable(rel, &e)),
        }
    }
}

/// An error that says the path holds nothing a walk beneath could reach: absent, a
/// component that is not a directory, a link on the way.
pub(super) fn is_absence(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOENT | libc::ENOTDIR | libc::ELOOP)
    )
}

pub(super) fn unreadable(path: &str, e: &std::io::Error) -> Exceeded {
    Exceeded::Unreadable {
        path: if path.is_empty() { "." } else { path }.to_string(),
        error: e.to_string(),
    }
}

/// An entry the walk listed that is gone (or replaced) when it looks at it is a change in
/// progress; any other error is an entry it cannot read.
pub(super) fn vanished_or_unreadable(path: &str, e: &std::io::Error) -> Exceeded {
    if is_absence(e) {
        Exceeded::Unstable {
            path: path.to_string(),
        }
    } else {
        unreadable(path, e)
    }
}

pub(super) fn open_entry(dir: BorrowedFd<'_>, name: &OsStr) -> std::io::Result<OwnedFd> {
    beneath::open_beneath(dir, Path::new(name), FILE_READING, 0)
}

/// Opens the workspace for walks beneath it.
pub fn open_workspace(workspace: &Path) -> std::io::Result<OwnedFd> {
    beneath::open_root(workspace, DIR_LOOKUP)
}
