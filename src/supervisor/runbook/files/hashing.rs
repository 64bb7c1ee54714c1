//! Hashing a file within the byte budget: judged by `fstat` first, read for at most the size
//! it had, checked again after; and the run's cache, so an unchanged file is hashed once.

use super::{CHUNK, Exceeded, HashCache, RUN_WALKS, StatKey, Walk};

use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::sys::beneath::{self, FILE_READING};

impl HashCache {
    /// Entries kept at most (about 100 bytes each).
    pub const MAX: usize = 1_000_000;
    /// How much older than the hash a file's ctime must be for the hash to be kept.
    pub const SETTLED: Duration = Duration::from_secs(2);

    fn key(stat: &beneath::Stat) -> StatKey {
        (
            stat.dev, stat.ino, stat.size, stat.mtime, stat.ctime, stat.mode,
        )
    }

    fn get(&self, stat: &beneath::Stat) -> Option<String> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.get(&Self::key(stat)).map(hex::encode)
    }

    /// Whether the hash of `file` (stat `before`), read after this returns, may be kept:
    /// settled, on a filesystem whose write faults update the times, written back.
    fn may_keep(&self, file: BorrowedFd<'_>, before: &beneath::Stat) -> bool {
        let settled = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .ok()
            .and_then(|now| now.checked_sub(Self::SETTLED))
            .is_some_and(|limit| {
                let (secs, nanos) = before.ctime;
                u64::try_from(secs)
                    .is_ok_and(|s| Duration::new(s, u32::try_from(nanos).unwrap_or(0)) < limit)
            });
        if !settled || self.entries.lock().unwrap_or_else(|e| e.into_inner()).len() >= Self::MAX {
            return false;
        }
        let keeps = *self
            .filesystems
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(before.dev)
            .or_insert_with(|| faults_update_times(file));
        keeps && beneath::write_back(file).is_ok()
    }

    fn keep(&self, before: &beneath::Stat, hash: &str) {
        let mut digest = [0u8; 32];
        if hex::decode_to_slice(hash, &mut digest).is_err() {
            return;
        }
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.len() < Self::MAX {
            entries.insert(Self::key(before), digest);
        }
    }

    /// Entries kept.
    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Whether the filesystem of `file` updates a file's times on a write fault of a shared
/// mapping (its writeback write-protects pages again): ext4, xfs, btrfs, f2fs. tmpfs does not
/// (a write through a mapping never moves the times there); others are not relied on.
pub(super) fn faults_update_times(file: BorrowedFd<'_>) -> bool {
    use nix::sys::statfs::{
        BTRFS_SUPER_MAGIC, EXT4_SUPER_MAGIC, F2FS_SUPER_MAGIC, XFS_SUPER_MAGIC, fstatfs,
    };
    fstatfs(file).is_ok_and(|fs| {
        let kind = fs.filesystem_type();
        kind == EXT4_SUPER_MAGIC
            || kind == XFS_SUPER_MAGIC
            || kind == BTRFS_SUPER_MAGIC
            || kind == F2FS_SUPER_MAGIC
    })
}

impl<'a> Walk<'a> {
    /// The sha256 of the regular file open as `file` (named `shown`), within the budget;
    /// `Ok(None)` when it is not a regular file.
    pub(super) fn hash_open(
        &mut self,
        file: OwnedFd,
        shown: &str,
    ) -> Result<Option<String>, Exceeded> {
        let Ok(before) = beneath::stat_fd(file.as_fd()) else {
            return Ok(None);
        };
        if !before.is_file() {
            return Ok(None);
        }
        let key = (before.dev, before.ino, before.size, before.mtime);
        if let Some(hash) = self.by_inode.get(&key) {
            return Ok(Some(hash.clone()));
        }
        // Hashed earlier in the run and unchanged since: not read again.
        if let Some(hash) = self.spent.hashes.get(&before) {
            self.by_inode.insert(key, hash.clone());
            return Ok(Some(hash));
        }
        if before.size > self.budget.file_bytes {
            return Err(Exceeded::FileBytes {
                path: shown.to_string(),
                size: before.size,
                allocated: before.blocks.saturating_mul(512),
                limit: self.budget.file_bytes,
            });
        }
        if self.bytes.saturating_add(before.size) > self.budget.walk_bytes {
            return Err(Exceeded::WalkBytes {
                limit: self.budget.walk_bytes,
            });
        }
        let run_bytes = self.budget.walk_bytes.saturating_mul(u64::from(RUN_WALKS));
        let spent = self.spent.bytes.fetch_add(before.size, Ordering::SeqCst);
        if spent.saturating_add(before.size) > run_bytes {
            return Err(Exceeded::Run { what: "bytes" });
        }
        self.bytes += before.size;
        let keep = self.spent.hashes.may_keep(file.as_fd(), &before);
        let mut hasher = Sha256::new();
        let mut reader = std::fs::File::from(file);
        let mut left = before.size;
        let mut buf = vec![
            0u8;
            CHUNK
                .min(usize::try_from(before.size).unwrap_or(CHUNK))
                .max(1)
        ];
        while left > 0 {
            self.check_time()?;
            let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
            match reader.read(&mut buf[..want]) {
                Ok(0) => break,
                Ok(n) => {
                    hasher.update(&buf[..n]);
                    left -= n as u64;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return Ok(None),
            }
        }
        let after = beneath::stat_fd(reader.as_fd()).ok();
        let more = reader.read(&mut [0u8; 1]).is_ok_and(|n| n > 0);
        if left > 0
            || more
            || after.is_none_or(|a| {
                (a.size, a.mtime, a.ctime) != (before.size, before.mtime, before.ctime)
            })
        {
            return Err(Exceeded::Unstable {
                path: shown.to_string(),
            });
        }
        let hash = hex::encode(hasher.finalize());
        self.by_inode.insert(key, hash.clone());
        if keep {
            self.spent.hashes.keep(&before, &hash);
        }
        Ok(Some(hash))
    }

    /// The sha256 of `rel` beneath `root` (a link anywhere on the way, or `..` out of it, is
    /// not followed); `Ok(None)` when it is not a regular file the walk could open.
    pub fn hash_named(
        &mut self,
        root: BorrowedFd<'_>,
        rel: &Path,
    ) -> Result<Option<String>, Exceeded> {
        self.check_time()?;
        match beneath::open_beneath(root, rel, FILE_READING, 0) {
            Ok(fd) => self.hash_open(fd, &rel.to_string_lossy()),
            Err(_) => Ok(None),
        }
    }
}
