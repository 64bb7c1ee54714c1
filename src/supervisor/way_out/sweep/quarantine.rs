//! The quarantine: where what the sweep takes away is moved (outside the workspace, never through a
//! link), copied or made again beneath it.

use super::Finding;
use crate::sys::beneath::{self, DIR_LISTING, DIR_LOOKUP, FILE_READING};
use std::ffi::OsStr;
use std::fs;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Component, Path, PathBuf};

/// The quarantine directory: created by the supervisor outside the workspace when first
/// needed, entries moved in by `renameat2` between directory descriptors.
pub(crate) struct Quarantine {
    path: PathBuf,
    fd: Option<OwnedFd>,
}

impl Quarantine {
    pub(crate) fn new(path: &Path) -> Quarantine {
        Quarantine {
            path: path.to_path_buf(),
            fd: None,
        }
    }

    pub(super) fn root(&mut self) -> io::Result<BorrowedFd<'_>> {
        if self.fd.is_none() {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&self.path)?;
            self.fd = Some(beneath::open_root(&self.path, DIR_LOOKUP)?);
        }
        Ok(self.fd.as_ref().expect("opened above").as_fd())
    }

    /// Moves `rel` (beneath the workspace `root`; the entry itself, a link as a link) to the
    /// same place in the quarantine.
    /// [`take_in`](Self::take_in) for `finding`: where it went, or why it could not be moved.
    /// Returns whether it was moved.
    pub(super) fn take_for(
        &mut self,
        root: BorrowedFd<'_>,
        rel: &Path,
        finding: &mut Finding,
    ) -> bool {
        match self.take_in(root, rel) {
            Ok(to) => {
                finding.quarantined_to = Some(to);
                true
            }
            Err(e) => {
                finding.error = Some(format!(
                    "moving {} to the quarantine {}: {e}",
                    finding.path.display(),
                    self.path.display()
                ));
                false
            }
        }
    }

    /// Writes `bytes` as a new file at `rel` in the quarantine (what the sweep took out of a
    /// file it rewrote, or the file as it was).
    pub(super) fn write_in(&mut self, rel: &Path, bytes: &[u8]) -> io::Result<PathBuf> {
        let name = rel
            .file_name()
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        let quarantine = self.root()?;
        let dir = make_dirs_beneath(quarantine, rel.parent().unwrap_or(Path::new("")))?;
        let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL;
        let fd = beneath::open_beneath(dir.as_fd(), Path::new(name), flags, 0o600)?;
        let mut out = fs::File::from(fd);
        io::Write::write_all(&mut out, bytes)?;
        out.sync_all()?;
        Ok(self.path.join(rel))
    }

    /// Moves `name` in `dir` (outside the workspace: a run's git layer) to `rel` in the
    /// quarantine.
    pub(super) fn take_from(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &OsStr,
        rel: &Path,
    ) -> io::Result<PathBuf> {
        let quarantine = self.root()?;
        let to = make_dirs_beneath(quarantine, rel.parent().unwrap_or(Path::new("")))?;
        let last = rel
            .file_name()
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        match beneath::rename_noreplace(dir, name, to.as_fd(), last) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
                copy_tree_at(dir, name, to.as_fd())?;
                remove_tree_at(dir, name)?;
            }
            Err(e) => return Err(e),
        }
        Ok(self.path.join(rel))
    }

    /// Moves the directory `path` (outside the workspace) to `rel` in the quarantine.
    pub(super) fn take_from_path(&mut self, path: &Path, rel: &Path) -> io::Result<PathBuf> {
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        };
        let dir = beneath::open_root(parent, DIR_LOOKUP)?;
        self.take_from(dir.as_fd(), name, rel)
    }

    pub(crate) fn take_in(&mut self, root: BorrowedFd<'_>, rel: &Path) -> io::Result<PathBuf> {
        let name = rel
            .file_name()
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        let parent_rel = rel.parent().unwrap_or(Path::new(""));
        let from = beneath::open_beneath(root, parent_rel, DIR_LOOKUP, 0)?;
        let quarantine = self.root()?;
        let to = make_dirs_beneath(quarantine, parent_rel)?;
        match beneath::rename_noreplace(from.as_fd(), name, to.as_fd(), name) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
                copy_tree_at(from.as_fd(), name, to.as_fd())?;
                remove_tree_at(from.as_fd(), name)?;
            }
            Err(e) => return Err(e),
        }
        Ok(self.path.join(rel))
    }
}

/// `rel`'s directories beneath `dir`, created where missing (mode 0700), never through a link.
fn make_dirs_beneath(dir: BorrowedFd<'_>, rel: &Path) -> io::Result<OwnedFd> {
    let mut current = beneath::open_beneath(dir, Path::new(""), DIR_LOOKUP, 0)?;
    for component in rel.components() {
        let Component::Normal(name) = component else {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        };
        match beneath::mkdir_at(current.as_fd(), name, 0o700) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        current = beneath::open_beneath(current.as_fd(), Path::new(name), DIR_LOOKUP, 0)?;
    }
    Ok(current)
}

/// Copies `name` from `from` into `to` across file systems: directories, regular files (mode
/// without setuid/setgid bits) and links as links; FIFOs, sockets and devices are not copied.
pub(super) fn copy_tree_at(
    from: BorrowedFd<'_>,
    name: &OsStr,
    to: BorrowedFd<'_>,
) -> io::Result<()> {
    let st = beneath::stat_at(from, name)?;
    if st.is_symlink() {
        beneath::symlink_at(&beneath::read_link_at(from, name)?, to, name)
    } else if st.is_dir() {
        beneath::mkdir_at(to, name, 0o700)?;
        let src = beneath::open_beneath(from, Path::new(name), DIR_LISTING, 0)?;
        let dst = beneath::open_beneath(to, Path::new(name), DIR_LOOKUP, 0)?;
        for (entry, _) in beneath::list_dir(src.as_fd())? {
            copy_tree_at(src.as_fd(), &entry, dst.as_fd())?;
        }
        Ok(())
    } else if st.is_file() {
        let src = beneath::open_beneath(from, Path::new(name), FILE_READING, 0)?;
        if !beneath::stat_fd(src.as_fd())?.is_file() {
            return Ok(());
        }
        let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL;
        let dst = beneath::open_beneath(to, Path::new(name), flags, st.mode & 0o777)?;
        io::copy(&mut fs::File::from(src), &mut fs::File::from(dst)).map(drop)
    } else {
        Ok(())
    }
}

/// Removes `name` in `dir` and everything below it, from descriptors.
pub(super) fn remove_tree_at(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<()> {
    let st = beneath::stat_at(dir, name)?;
    if st.is_dir() {
        let sub = beneath::open_beneath(dir, Path::new(name), DIR_LISTING, 0)?;
        for (entry, _) in beneath::list_dir(sub.as_fd())? {
            remove_tree_at(sub.as_fd(), &entry)?;
        }
    }
    beneath::unlink_at(dir, name, st.is_dir())
}
