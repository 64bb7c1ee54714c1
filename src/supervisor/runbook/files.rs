//! The workspace's files as evidence (`files_exist`, `files_changed`, a step's baseline, the
//! files `step evidence` names), read within budgets the agent cannot stretch. The agent
//! shapes the workspace: a 30 GiB sparse file, a farm of hard links to it, a million names, a
//! tree ten thousand levels deep or a file that grows while it is read would otherwise decide
//! how long the supervisor works. Every walk and hash here is bounded in entries, depth, bytes
//! and time, and stops when the run ends; running out is a named outcome ([`Exceeded`]) that
//! fails the item with its reason — never a hang, never a partial result taken as complete.
//!
//! Everything is resolved beneath the workspace from a directory descriptor, without following
//! a link (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`): a link is never evidence.
//! A file is judged by `fstat` before a byte is read (its size against the budget, its blocks
//! to say when it is sparse), read for at most the size it had, and checked again after: one
//! that changed meanwhile is [`Exceeded::Unstable`]. Hard links to one file are hashed once.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::profile::budgets;
use crate::sys::beneath::{self, DIR_LISTING, DIR_LOOKUP, FILE_READING};

/// What one walk (one evidence item, one baseline, one `step evidence` request) may cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Directory entries looked at.
    pub entries: u64,
    /// Directory levels below the workspace.
    pub depth: usize,
    /// The size of one file hashed.
    pub file_bytes: u64,
    /// Bytes hashed in all (each file once, however many names it has).
    pub walk_bytes: u64,
    /// Wall time.
    pub time: Duration,
}

/// How many walks' worth one run may spend in all ([`RunSpend`]): the agent may ask again and
/// again (`step evidence`, a completion per attempt), each request within its walk's budget.
pub const RUN_WALKS: u32 = 16;

/// What every walk of one run has spent, shared by them: bytes hashed and time walked, against
/// [`RUN_WALKS`] times one walk's budget; and the run's hashes ([`HashCache`]).
#[derive(Debug, Default)]
pub struct RunSpend {
    bytes: std::sync::atomic::AtomicU64,
    micros: std::sync::atomic::AtomicU64,
    hashes: std::sync::Arc<HashCache>,
}

impl RunSpend {
    /// A fresh account (nothing spent) that shares `other`'s hashes: the walks taken before
    /// the sandbox starts are not the run's to pay for, but what they hashed is not read again.
    pub fn sharing_hashes(other: &RunSpend) -> RunSpend {
        RunSpend {
            hashes: std::sync::Arc::clone(&other.hashes),
            ..RunSpend::default()
        }
    }
}

/// Files hashed at most once a run while they stay as they were: a file whose (device, inode,
/// size, mtime, ctime, mode) is what it was when it was hashed is not read again. The ctime is
/// what makes the key hard to forge: no call sets it, every change of content or metadata
/// moves it to the kernel's clock. Two gaps are closed before an entry is kept: a file changed
/// in the same clock tick as it was hashed would keep its ctime (so only files whose ctime is
/// [`HashCache::SETTLED`] older than the hash are kept, as git treats a racily clean file), and
/// a write through a shared writable mapping updates the times only at the page's first write
/// fault (so the file's dirty pages are written back first — which write-protects them — and
/// only filesystems whose write faults update the times keep entries: not tmpfs). Bounded:
/// after [`HashCache::MAX`] entries, no more are kept (an optimisation, not a verdict).
#[derive(Debug, Default)]
pub struct HashCache {
    entries: std::sync::Mutex<HashMap<StatKey, [u8; 32]>>,
    /// Each filesystem (by device) seen, and whether it may keep entries.
    filesystems: std::sync::Mutex<HashMap<u64, bool>>,
}

/// (device, inode, size, mtime, ctime, mode).
type StatKey = (u64, u64, u64, (i64, i64), (i64, i64), u32);

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
fn faults_update_times(file: BorrowedFd<'_>) -> bool {
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

impl Budget {
    /// The built-in budget: a large checkout's source and build output, not a disk's worth.
    pub const DEFAULT: Budget = Budget {
        entries: budgets::DEFAULT_EVIDENCE_ENTRIES,
        depth: budgets::DEFAULT_EVIDENCE_DEPTH as usize,
        file_bytes: budgets::DEFAULT_EVIDENCE_FILE_MIB << 20,
        walk_bytes: budgets::DEFAULT_EVIDENCE_WALK_MIB << 20,
        time: Duration::from_secs(budgets::DEFAULT_EVIDENCE_SECONDS),
    };

    /// The profile's `[runbook]` budgets (the defaults where it names none).
    pub fn from_profile(profile: &budgets::RunbookBudgets) -> Budget {
        Budget {
            entries: profile.entries(),
            depth: usize::try_from(profile.depth()).unwrap_or(usize::MAX),
            file_bytes: profile.file_bytes(),
            walk_bytes: profile.walk_bytes(),
            time: Duration::from_secs(profile.seconds()),
        }
    }
}

/// Why a walk or a hash stopped before it was complete. Each is the item's failure, in words
/// the agent can act on, and a `budget` name for the record and the run's summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exceeded {
    /// More directory entries than the budget.
    Entries { limit: u64 },
    /// A directory deeper than the budget.
    Depth { limit: usize, at: String },
    /// A file larger than one file's budget (sparse or not: its size is what reading costs).
    FileBytes {
        path: String,
        size: u64,
        allocated: u64,
        limit: u64,
    },
    /// More bytes to hash than the walk's budget.
    WalkBytes { limit: u64 },
    /// Longer than the walk's time.
    Time { limit: Duration },
    /// The run's walks together have hashed or walked their budget ([`RUN_WALKS`] walks').
    Run { what: &'static str },
    /// A file changed while it was hashed (it grew, shrank or was rewritten), or an entry
    /// changed while the walk looked at it (gone between its listing and its lookup, there
    /// when the walk did not list it).
    Unstable { path: String },
    /// A directory or entry the walk had to look at could not be (permissions, an I/O error):
    /// what is beneath it is unknown, so there is no verdict.
    Unreadable { path: String, error: String },
    /// More makefiles and script files to read for what defines the evidence than the
    /// supervisor reads for one step.
    Definitions { limit: usize },
    /// The run ended meanwhile.
    Stopped,
}

impl Exceeded {
    /// The budget's name, as records and summaries give it.
    pub fn budget(&self) -> &'static str {
        match self {
            Exceeded::Entries { .. } => "entries",
            Exceeded::Depth { .. } => "depth",
            Exceeded::FileBytes { .. } => "file_bytes",
            Exceeded::WalkBytes { .. } => "walk_bytes",
            Exceeded::Time { .. } => "time",
            Exceeded::Run { .. } => "run",
            Exceeded::Unstable { .. } => "unstable",
            Exceeded::Unreadable { .. } => "unreadable",
            Exceeded::Definitions { .. } => "definitions",
            Exceeded::Stopped => "stopped",
        }
    }

    /// What happened, for the agent and the person reading the record.
    pub fn sentence(&self) -> String {
        match self {
            Exceeded::Entries { limit } => format!(
                "the supervisor looked at {limit} directory entries (its budget) without finishing: evidence over that many files is not checked; narrow the paths"
            ),
            Exceeded::Depth { limit, at } => format!(
                "{at} is deeper than {limit} directory levels (the supervisor's budget): not walked"
            ),
            Exceeded::FileBytes {
                path,
                size,
                allocated,
                limit,
            } => {
                let sparse = if allocated.saturating_mul(2) < *size {
                    format!(" (sparse: {allocated} bytes allocated)")
                } else {
                    String::new()
                };
                format!(
                    "{path} is {size} bytes{sparse}, over the {limit} bytes the supervisor hashes of one file: not evidence"
                )
            }
            Exceeded::WalkBytes { limit } => format!(
                "the files to hash come to more than {limit} bytes (the supervisor's budget): not checked; narrow the paths"
            ),
            Exceeded::Time { limit } => format!(
                "the supervisor's walk took longer than {} s (its budget): not checked; narrow the paths",
                limit.as_secs()
            ),
            Exceeded::Run { what } => format!(
                "the supervisor has spent this run's budget for walking the workspace ({what}, {RUN_WALKS} walks' worth): no more files are checked in this run"
            ),
            Exceeded::Unstable { path } => {
                format!(
                    "{path} changed while the supervisor hashed or walked it: ask again once it is written"
                )
            }
            Exceeded::Unreadable { path, error } => format!(
                "the supervisor could not read {path} ({error}): what is beneath it is unknown, so there is no verdict"
            ),
            Exceeded::Definitions { limit } => format!(
                "what defines the evidence commands names more than {limit} makefiles, package scripts, recipes and tasks to read (the supervisor's budget): not all followed, so no verdict"
            ),
            Exceeded::Stopped => "the run ended while the files were being checked".to_string(),
        }
    }
}

/// One walk's account: what it has spent, against its budget, and the run's stop flag.
pub struct Walk<'a> {
    budget: &'a Budget,
    stop: &'a AtomicBool,
    spent: &'a RunSpend,
    started: Instant,
    entries: u64,
    bytes: u64,
    /// Hashes by (device, inode, size, mtime): a hard-link farm costs one read.
    by_inode: HashMap<(u64, u64, u64, (i64, i64)), String>,
    /// Directory names this walk neither enters nor names (see [`Walk::not_entering`]).
    not_entered: &'static [&'static str],
}

/// What a walk does with each entry it names: the walk, the entry's directory, its name, its
/// workspace-relative path and its `lstat`.
type Found<'f, 'a> = dyn FnMut(&mut Walk<'a>, BorrowedFd<'_>, &OsStr, &str, beneath::Stat) -> Result<(), Exceeded>
    + 'f;

/// Bytes read between two looks at the clock and the stop flag.
const CHUNK: usize = 1 << 20;

impl Drop for Walk<'_> {
    /// What the walk took is the run's.
    fn drop(&mut self) {
        let micros = u64::try_from(self.started.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.spent.micros.fetch_add(micros, Ordering::SeqCst);
    }
}

impl<'a> Walk<'a> {
    pub fn new(budget: &'a Budget, stop: &'a AtomicBool, spent: &'a RunSpend) -> Walk<'a> {
        Walk {
            budget,
            stop,
            spent,
            started: Instant::now(),
            entries: 0,
            bytes: 0,
            by_inode: HashMap::new(),
            not_entered: &[],
        }
    }

    /// From now on, directories with one of these names are neither entered nor named by a
    /// glob's walk (the definition files of evidence commands: `.git` and build state, which
    /// the evidence sandbox empties, are not where they are read).
    pub fn not_entering(&mut self, names: &'static [&'static str]) {
        self.not_entered = names;
    }

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
    fn admit_whole(&self, rel: &str, stat: &beneath::Stat, max: u64) -> Result<(), Exceeded> {
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

    /// What `rules` ignore beneath `start` (a workspace-relative directory): the topmost
    /// ignored entries (an ignored directory is named, not entered), and whether each is a
    /// directory. Links are named when ignored, never followed. Strict, like
    /// [`Walk::inventory`]: what cannot be read ends the walk.
    pub fn ignored_under(
        &mut self,
        root: BorrowedFd<'_>,
        start: &str,
        rules: &IgnoreRules,
    ) -> Result<Vec<(String, bool)>, Exceeded> {
        let mut found = Vec::new();
        let mut stack: Vec<(PathBuf, usize)> = vec![(PathBuf::from(start), 0)];
        let mut first = true;
        while let Some((rel, depth)) = stack.pop() {
            self.check_time()?;
            let shown = rel.to_string_lossy().into_owned();
            let dir = match beneath::open_beneath(root, &rel, DIR_LISTING, 0) {
                Ok(dir) => dir,
                Err(e) if first && is_absence(&e) => return Ok(found),
                Err(e) => return Err(vanished_or_unreadable(&shown, &e)),
            };
            first = false;
            let left = self.budget.entries.saturating_sub(self.entries);
            let (entries, more) =
                beneath::list_dir_up_to(dir.as_fd(), usize::try_from(left).unwrap_or(usize::MAX))
                    .map_err(|e| unreadable(&shown, &e))?;
            self.entries += entries.len() as u64;
            if more {
                return Err(Exceeded::Entries {
                    limit: self.budget.entries,
                });
            }
            for (name, _) in entries {
                let child = rel.join(&name);
                let Some(text) = child.to_str() else {
                    return Err(Exceeded::Unreadable {
                        path: child.to_string_lossy().into_owned(),
                        error: "the name is not UTF-8".into(),
                    });
                };
                let stat = beneath::stat_at(dir.as_fd(), &name)
                    .map_err(|e| vanished_or_unreadable(text, &e))?;
                if rules.path_ignored(text, stat.is_dir()) {
                    found.push((text.to_string(), stat.is_dir()));
                } else if stat.is_dir() {
                    if depth + 1 > self.budget.depth {
                        return Err(Exceeded::Depth {
                            limit: self.budget.depth,
                            at: text.to_string(),
                        });
                    }
                    stack.push((child, depth + 1));
                }
            }
        }
        Ok(found)
    }

    fn check_time(&self) -> Result<(), Exceeded> {
        if self.stop.load(Ordering::SeqCst) {
            return Err(Exceeded::Stopped);
        }
        let elapsed = self.started.elapsed();
        if elapsed > self.budget.time {
            return Err(Exceeded::Time {
                limit: self.budget.time,
            });
        }
        let run_micros = self
            .spent
            .micros
            .load(Ordering::SeqCst)
            .saturating_add(u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX));
        let run_time = self.budget.time.saturating_mul(RUN_WALKS);
        if run_micros > u64::try_from(run_time.as_micros()).unwrap_or(u64::MAX) {
            return Err(Exceeded::Run { what: "time" });
        }
        Ok(())
    }

    /// The sha256 of the regular file open as `file` (named `shown`), within the budget;
    /// `Ok(None)` when it is not a regular file.
    fn hash_open(&mut self, file: OwnedFd, shown: &str) -> Result<Option<String>, Exceeded> {
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

    /// The regular files beneath `root` that `glob` names, with their sha256. Directories that
    /// cannot hold a match are not entered. With `rules`, what they ignore is neither entered
    /// nor named. A directory that cannot be read is passed over: this names what exists, and
    /// a file it misses can only make `files_exist` fail (a removal `files_changed` counts is
    /// confirmed by [`lookup`] first).
    pub fn glob(
        &mut self,
        root: BorrowedFd<'_>,
        glob: &str,
        rules: Option<&mut IgnoreRules>,
    ) -> Result<BTreeMap<String, String>, Exceeded> {
        let mut found = BTreeMap::new();
        self.visit(
            root,
            glob,
            rules,
            false,
            &mut |walk, dir, name, rel, stat| {
                if !stat.is_file() {
                    return Ok(());
                }
                let Ok(fd) = open_entry(dir, name) else {
                    return Ok(());
                };
                if let Some(hash) = walk.hash_open(fd, rel)? {
                    found.insert(rel.to_string(), hash);
                }
                Ok(())
            },
        )?;
        Ok(found)
    }

    /// The rule files a walk of `glob` would read, read into `rules` now (nothing hashed):
    /// what a `files_exist` item is judged by, taken when its step opens.
    pub fn read_rules_for(
        &mut self,
        root: BorrowedFd<'_>,
        glob: &str,
        rules: &mut IgnoreRules,
    ) -> Result<(), Exceeded> {
        self.visit(root, glob, Some(rules), false, &mut |_, _, _, _, _| Ok(()))
    }

    /// Every entry beneath `root` that one of `globs` names — regular files, directories,
    /// links (recorded as links, never followed), anything else — by `lstat`, regular files
    /// with their sha256: what a step's invariants are compared by. Strict: an entry or
    /// directory that cannot be read, or one that changes meanwhile, is the walk's end
    /// ([`Exceeded::Unreadable`], [`Exceeded::Unstable`]), never an entry left out. Each glob
    /// says whether `rules` apply to it (`true`: what they ignore is not walked).
    pub fn inventory(
        &mut self,
        root: BorrowedFd<'_>,
        globs: &[(String, bool)],
        mut rules: Option<&mut IgnoreRules>,
    ) -> Result<BTreeMap<String, Entry>, Exceeded> {
        let mut found = BTreeMap::new();
        for (glob, ignoring) in globs {
            let rules = if *ignoring {
                rules.as_deref_mut()
            } else {
                None
            };
            self.visit(
                root,
                glob,
                rules,
                true,
                &mut |walk, dir, name, rel, stat| {
                    let entry = walk.entry(dir, name, rel, stat)?;
                    found.insert(rel.to_string(), entry);
                    Ok(())
                },
            )?;
        }
        Ok(found)
    }

    /// What one entry is, for [`Walk::inventory`].
    fn entry(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &OsStr,
        rel: &str,
        stat: beneath::Stat,
    ) -> Result<Entry, Exceeded> {
        let unstable = || Exceeded::Unstable {
            path: rel.to_string(),
        };
        if stat.is_file() {
            let fd = open_entry(dir, name).map_err(|e| vanished_or_unreadable(rel, &e))?;
            let sha256 = self.hash_open(fd, rel)?.ok_or_else(unstable)?;
            Ok(Entry::File {
                mode: stat.mode & 0o7777,
                size: stat.size,
                sha256,
            })
        } else if stat.is_symlink() {
            let target =
                beneath::read_link_at(dir, name).map_err(|e| vanished_or_unreadable(rel, &e))?;
            Ok(Entry::Link {
                target: target.into_vec(),
            })
        } else if stat.is_dir() {
            Ok(Entry::Dir {
                mode: stat.mode & 0o7777,
            })
        } else {
            Ok(Entry::Special { mode: stat.mode })
        }
    }

    /// Calls `found` for every entry `glob` names beneath `root`. The walk starts at the glob's
    /// literal prefix (`tests/unit` of `tests/unit/**/*.py`): what is beside it costs nothing;
    /// a glob without a wildcard is one lookup. `strict`: an entry or directory that cannot be
    /// looked at ends the walk (see [`Walk::inventory`]); otherwise it is passed over.
    fn visit(
        &mut self,
        root: BorrowedFd<'_>,
        glob: &str,
        mut rules: Option<&mut IgnoreRules>,
        strict: bool,
        found: &mut Found<'_, 'a>,
    ) -> Result<(), Exceeded> {
        // Split as the hook's `PathGlob` splits it (which [`glob_matches`] judges files by).
        let pattern: Vec<&str> = glob
            .trim_start_matches("./")
            .split('/')
            .filter(|c| !c.is_empty())
            .collect();
        if pattern.is_empty() {
            return Ok(());
        }
        let literal = pattern
            .iter()
            .take_while(|c| !stepproof_hook::pattern::has_wildcard(c))
            .count();
        // The walk's start: the literal prefix (all but the last component of a glob with no
        // wildcard, which is looked up), and the rules of every directory above it.
        let start_len = literal.min(pattern.len() - 1);
        if start_len > self.budget.depth {
            return Err(Exceeded::Depth {
                limit: self.budget.depth,
                at: pattern[..start_len].join("/"),
            });
        }
        if let Some(rules) = rules.as_deref_mut() {
            for n in 0..=start_len {
                if n > 0 && rules.path_ignored(&pattern[..n].join("/"), true) {
                    return Ok(());
                }
                rules.look_in(self, root, &pattern[..n].join("/"))?;
            }
        }
        let start = pattern[..start_len].join("/");
        // The last component of a literal glob, or the start itself (`dir/**` names `dir`).
        let single = if literal == pattern.len() {
            Some(pattern.join("/"))
        } else {
            (!start.is_empty() && glob_matches(glob, &start)).then(|| start.clone())
        };
        if let Some(rel) = single {
            let (parent, name) = rel.rsplit_once('/').unwrap_or(("", &rel));
            self.check_time()?;
            match beneath::open_beneath(root, Path::new(parent), DIR_LOOKUP, 0) {
                Ok(dir) => match beneath::stat_at(dir.as_fd(), OsStr::new(name)) {
                    Ok(stat) => {
                        self.entries += 1;
                        let ignored = rules
                            .as_deref()
                            .is_some_and(|r| r.path_ignored(&rel, stat.is_dir()));
                        if !ignored {
                            found(self, dir.as_fd(), OsStr::new(name), &rel, stat)?;
                        }
                    }
                    Err(e) if strict && !is_absence(&e) => {
                        return Err(unreadable(&rel, &e));
                    }
                    Err(_) => {}
                },
                Err(e) if strict && !is_absence(&e) => return Err(unreadable(parent, &e)),
                Err(_) => {}
            }
            if literal == pattern.len() {
                return Ok(());
            }
        }
        let mut stack: Vec<(PathBuf, usize)> = vec![(PathBuf::from(&start), start_len)];
        let mut first = true;
        while let Some((rel, depth)) = stack.pop() {
            self.check_time()?;
            let shown = rel.to_string_lossy().into_owned();
            let dir = match beneath::open_beneath(root, &rel, DIR_LISTING, 0) {
                Ok(dir) => dir,
                // The start need not exist (or be a directory: a link is not entered).
                Err(e) if first && is_absence(&e) => return Ok(()),
                Err(e) if strict => return Err(vanished_or_unreadable(&shown, &e)),
                Err(_) => continue,
            };
            first = false;
            if let Some(rules) = rules.as_deref_mut() {
                rules.look_in(self, root, &shown)?;
            }
            let left = self.budget.entries.saturating_sub(self.entries);
            let listed =
                beneath::list_dir_up_to(dir.as_fd(), usize::try_from(left).unwrap_or(usize::MAX));
            let (entries, more) = match listed {
                Ok(listed) => listed,
                Err(e) if strict => return Err(unreadable(&shown, &e)),
                Err(_) => continue,
            };
            self.entries += entries.len() as u64;
            if more {
                return Err(Exceeded::Entries {
                    limit: self.budget.entries,
                });
            }
            for (name, _) in entries {
                let child = rel.join(&name);
                let Some(text) = child.to_str() else {
                    if strict {
                        return Err(Exceeded::Unreadable {
                            path: child.to_string_lossy().into_owned(),
                            error: "the name is not UTF-8".into(),
                        });
                    }
                    continue;
                };
                let stat = match beneath::stat_at(dir.as_fd(), &name) {
                    Ok(stat) => stat,
                    Err(e) if strict => return Err(vanished_or_unreadable(text, &e)),
                    Err(_) => continue,
                };
                if rules
                    .as_deref()
                    .is_some_and(|r| r.ignored(text, stat.is_dir()))
                {
                    continue;
                }
                if stat.is_dir() && self.not_entered.iter().any(|n| name == OsStr::new(n)) {
                    continue;
                }
                if glob_matches(glob, text) {
                    found(self, dir.as_fd(), &name, text, stat)?;
                }
                if stat.is_dir() {
                    let parts: Vec<&str> = text.split('/').collect();
                    if !may_hold(&pattern, &parts) {
                        continue;
                    }
                    if depth + 1 > self.budget.depth {
                        return Err(Exceeded::Depth {
                            limit: self.budget.depth,
                            at: text.to_string(),
                        });
                    }
                    stack.push((child, depth + 1));
                }
            }
        }
        Ok(())
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
fn is_absence(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOENT | libc::ENOTDIR | libc::ELOOP)
    )
}

fn unreadable(path: &str, e: &std::io::Error) -> Exceeded {
    Exceeded::Unreadable {
        path: if path.is_empty() { "." } else { path }.to_string(),
        error: e.to_string(),
    }
}

/// An entry the walk listed that is gone (or replaced) when it looks at it is a change in
/// progress; any other error is an entry it cannot read.
fn vanished_or_unreadable(path: &str, e: &std::io::Error) -> Exceeded {
    if is_absence(e) {
        Exceeded::Unstable {
            path: path.to_string(),
        }
    } else {
        unreadable(path, e)
    }
}

fn open_entry(dir: BorrowedFd<'_>, name: &OsStr) -> std::io::Result<OwnedFd> {
    beneath::open_beneath(dir, Path::new(name), FILE_READING, 0)
}

/// Opens the workspace for walks beneath it.
pub fn open_workspace(workspace: &Path) -> std::io::Result<OwnedFd> {
    beneath::open_root(workspace, DIR_LOOKUP)
}

/// Whether a workspace-relative path matches a glob (`*` within a component, `**` any number
/// of components), as file rules match.
pub fn glob_matches(glob: &str, relative: &str) -> bool {
    stepproof_hook::pattern::PathGlob::new(0, &format!("/{}", glob.trim_start_matches("./")))
        .matches(&format!("/{relative}"))
}

/// Whether a directory with these components can hold a file the glob matches.
fn may_hold(pattern: &[&str], dir: &[&str]) -> bool {
    for (i, component) in dir.iter().enumerate() {
        match pattern.get(i) {
            Some(&"**") => return true,
            Some(part) if stepproof_hook::pattern::wildcard(part, component) => {}
            _ => return false,
        }
    }
    pattern.len() > dir.len()
}

/// What one path is, by `lstat`: a link is recorded as a link (its target as written, never
/// followed), a regular file by its content's sha256. Modes are the permission bits
/// (`0o7777`); a special file keeps its whole `st_mode`, so its type is in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    File {
        mode: u32,
        size: u64,
        sha256: String,
    },
    Link {
        target: Vec<u8>,
    },
    Dir {
        mode: u32,
    },
    Special {
        mode: u32,
    },
}

impl Entry {
    pub fn kind(&self) -> &'static str {
        match self {
            Entry::File { .. } => "file",
            Entry::Link { .. } => "link",
            Entry::Dir { .. } => "directory",
            Entry::Special { .. } => "special file",
        }
    }

    /// How `self` differs from `before`, in words (`None`: it does not).
    pub fn change_from(&self, before: &Entry) -> Option<String> {
        if self == before {
            return None;
        }
        Some(match (before, self) {
            (Entry::File { mode: a, .. }, Entry::File { mode: b, .. })
            | (Entry::Dir { mode: a }, Entry::Dir { mode: b })
                if a != b =>
            {
                let content = matches!((before, self), (Entry::File { sha256: x, .. }, Entry::File { sha256: y, .. }) if x != y);
                format!(
                    "mode {a:o} → {b:o}{}",
                    if content { ", and its content" } else { "" }
                )
            }
            (Entry::File { .. }, Entry::File { .. }) => "content".to_string(),
            (Entry::Link { target: a }, Entry::Link { target: b }) => format!(
                "link retargeted: {} → {}",
                String::from_utf8_lossy(a),
                String::from_utf8_lossy(b)
            ),
            (Entry::Link { target }, _) => format!(
                "was a link (to {}), now a {}",
                String::from_utf8_lossy(target),
                self.kind()
            ),
            (_, Entry::Link { target }) => format!(
                "was a {}, now a link (to {})",
                before.kind(),
                String::from_utf8_lossy(target)
            ),
            _ => format!("was a {}, now a {}", before.kind(), self.kind()),
        })
    }

    /// One line of the inventory's digest.
    fn digest_line(&self, path: &str) -> String {
        match self {
            Entry::File { mode, size, sha256 } => format!("file {mode:o} {size} {sha256} {path}"),
            Entry::Link { target } => format!("link {} {path}", hex::encode(target)),
            Entry::Dir { mode } => format!("dir {mode:o} {path}"),
            Entry::Special { mode } => format!("special {mode:o} {path}"),
        }
    }
}

/// `sha256:` of an inventory, one line an entry in path order: what a record binds when it
/// does not list the entries.
pub fn inventory_digest(entries: &BTreeMap<String, Entry>) -> String {
    let mut hasher = Sha256::new();
    for (path, entry) in entries {
        hasher.update(entry.digest_line(path).as_bytes());
        hasher.update(b"\n");
    }
    format!("sha256:{}", hex::encode(hasher.finalize()))
}

/// The changes from `before` to `now`, path by path, in words: new, removed, or how it
/// changed. An entry of `before` that `now` lacks counts as removed only when a lookup beneath
/// `root` confirms nothing is there ([`Walk::lookup`]); one that is there after all means the
/// walk missed it, and there is no verdict.
pub fn compare(
    walk: &mut Walk<'_>,
    root: BorrowedFd<'_>,
    before: &BTreeMap<String, Entry>,
    now: &BTreeMap<String, Entry>,
) -> Result<BTreeMap<String, String>, Exceeded> {
    let mut changes = BTreeMap::new();
    for (path, entry) in now {
        match before.get(path) {
            None => {
                changes.insert(path.clone(), format!("new {}", entry.kind()));
            }
            Some(old) => {
                if let Some(change) = entry.change_from(old) {
                    changes.insert(path.clone(), change);
                }
            }
        }
    }
    for (path, old) in before {
        if now.contains_key(path) {
            continue;
        }
        if walk.lookup(root, path)?.is_some() {
            return Err(Exceeded::Unstable { path: path.clone() });
        }
        changes.insert(path.clone(), format!("removed ({})", old.kind()));
    }
    Ok(changes)
}

/// The largest ignore file read (`.gitignore`, `.git/info/exclude`); a larger one ends the walk
/// ([`Exceeded::FileBytes`]): what it would ignore is unknown.
pub const IGNORE_FILE_MAX_BYTES: u64 = 1 << 20;

/// What counts as ignored outside a repository (no `.git` at the workspace's top): the build
/// output and caches of the common tool chains, in `.gitignore` syntax.
pub const DEFAULT_IGNORED: &[&str] = &[
    "__pycache__/",
    "*.py[cod]",
    ".pytest_cache/",
    ".mypy_cache/",
    ".ruff_cache/",
    ".tox/",
    ".venv/",
    "node_modules/",
    "target/",
    "*.o",
    ".gradle/",
    ".DS_Store",
];

/// The ignore rules of a step: the workspace's `.gitignore` files and `.git/info/exclude` as
/// they were when the step opened (git's precedence: a deeper `.gitignore` over a shallower
/// one, every `.gitignore` over `info/exclude`), or [`DEFAULT_IGNORED`] outside a repository.
/// Captured by the step's opening walks — each directory's `.gitignore` read (beneath, never
/// through a link, like git) when a walk first enters it — and then frozen: a `.gitignore` the
/// agent writes during the step changes nothing. `core.excludesFile` and
/// `$XDG_CONFIG_HOME/git/ignore` are not read: they are the host's per-person configuration
/// (and the sandbox's home is the agent's to write), so a verdict would depend on whose
/// machine it ran on. `.git` itself is always ignored, as git never reports it.
#[derive(Debug, Clone)]
pub struct IgnoreRules {
    repository: bool,
    /// Each directory's `.gitignore` (`""`: the workspace's own), as read.
    dirs: BTreeMap<String, ignore::gitignore::Gitignore>,
    /// The directories whose `.gitignore` was looked for.
    looked: std::collections::BTreeSet<String>,
    exclude: ignore::gitignore::Gitignore,
    /// Each rule file read, with the sha256 of what was read.
    sources: BTreeMap<String, String>,
    frozen: bool,
}

impl IgnoreRules {
    /// The rules at the workspace's top: whether it is a repository (`.git` there, looked at
    /// without following a link), its `.git/info/exclude` (when `.git` is a directory), or the
    /// default set.
    pub fn capture(walk: &mut Walk<'_>, root: BorrowedFd<'_>) -> Result<IgnoreRules, Exceeded> {
        let git = walk.lookup(root, ".git")?;
        let repository = git.is_some();
        let mut rules = IgnoreRules {
            repository,
            dirs: BTreeMap::new(),
            looked: Default::default(),
            exclude: ignore::gitignore::Gitignore::empty(),
            sources: BTreeMap::new(),
            frozen: false,
        };
        if !repository {
            rules.exclude = build(DEFAULT_IGNORED.iter().copied());
        } else if git.is_some_and(|s| s.is_dir())
            && let Some(text) = read_rules(walk, root, ".git/info/exclude")?
        {
            rules.exclude = build(text.lines());
            rules
                .sources
                .insert(".git/info/exclude".into(), sha256_text(&text));
        }
        Ok(rules)
    }

    /// No rules at all (where every file counts).
    pub fn none() -> IgnoreRules {
        IgnoreRules {
            repository: false,
            dirs: BTreeMap::new(),
            looked: Default::default(),
            exclude: ignore::gitignore::Gitignore::empty(),
            sources: BTreeMap::new(),
            frozen: true,
        }
    }

    /// No rule file is read from now on: the rules are as the step opened.
    pub fn freeze(&mut self) {
        self.frozen = true;
    }

    pub fn repository(&self) -> bool {
        self.repository
    }

    /// The rule files read, each with its sha256.
    pub fn sources(&self) -> &BTreeMap<String, String> {
        &self.sources
    }

    /// `sha256:` of the rules: the mode and every rule file's path and hash.
    pub fn digest(&self) -> String {
        let mut hasher = Sha256::new();
        hasher.update(if self.repository {
            "repository\n"
        } else {
            "default set\n"
        });
        for (path, hash) in &self.sources {
            hasher.update(format!("{hash}  {path}\n").as_bytes());
        }
        format!("sha256:{}", hex::encode(hasher.finalize()))
    }

    /// Reads `dir/.gitignore` (once; not once frozen) into the rules.
    fn look_in(
        &mut self,
        walk: &mut Walk<'_>,
        root: BorrowedFd<'_>,
        dir: &str,
    ) -> Result<(), Exceeded> {
        if self.frozen || !self.looked.insert(dir.to_string()) {
            return Ok(());
        }
        let path = if dir.is_empty() {
            ".gitignore".to_string()
        } else {
            format!("{dir}/.gitignore")
        };
        if let Some(text) = read_rules(walk, root, &path)? {
            self.dirs.insert(dir.to_string(), build(text.lines()));
            self.sources.insert(path, sha256_text(&text));
        }
        Ok(())
    }

    /// Whether the rules ignore the entry `rel` itself (its directories above taken as not
    /// ignored: a walk never enters an ignored one). The deepest `.gitignore` that says
    /// something about it decides, then `info/exclude` (or the default set).
    pub fn ignored(&self, rel: &str, is_dir: bool) -> bool {
        let parts: Vec<&str> = rel.split('/').collect();
        if parts.last() == Some(&".git") {
            return true;
        }
        for depth in (0..parts.len()).rev() {
            if let Some(rules) = self.dirs.get(&parts[..depth].join("/")) {
                match rules.matched(parts[depth..].join("/"), is_dir) {
                    ignore::Match::Ignore(_) => return true,
                    ignore::Match::Whitelist(_) => return false,
                    ignore::Match::None => {}
                }
            }
        }
        self.exclude.matched(rel, is_dir).is_ignore()
    }

    /// Whether `rel` or a directory above it is ignored (git never looks inside an ignored
    /// directory, so nothing beneath one can be re-included).
    pub fn path_ignored(&self, rel: &str, is_dir: bool) -> bool {
        let parts: Vec<&str> = rel.split('/').filter(|p| !p.is_empty()).collect();
        (1..=parts.len()).any(|n| self.ignored(&parts[..n].join("/"), n < parts.len() || is_dir))
    }
}

/// A matcher of `.gitignore` lines, each taken as git takes it (a line that is not a valid
/// pattern is passed over, as git does). Root `.`: paths are given relative to the file's
/// directory.
fn build<'l>(lines: impl Iterator<Item = &'l str>) -> ignore::gitignore::Gitignore {
    let mut builder = ignore::gitignore::GitignoreBuilder::new(".");
    for line in lines {
        let _ = builder.add_line(None, line);
    }
    builder
        .build()
        .unwrap_or_else(|_| ignore::gitignore::Gitignore::empty())
}

fn sha256_text(text: &str) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(text.as_bytes())))
}

/// An ignore file's text: `None` when there is none (absent, a link — git does not follow
/// one either —, not a regular file). Read within the walk's byte budget, at most
/// [`IGNORE_FILE_MAX_BYTES`]; one that cannot be read ends the walk.
fn read_rules(
    walk: &mut Walk<'_>,
    root: BorrowedFd<'_>,
    rel: &str,
) -> Result<Option<String>, Exceeded> {
    walk.check_time()?;
    let fd = match beneath::open_beneath(root, Path::new(rel), FILE_READING, 0) {
        Ok(fd) => fd,
        Err(e) if is_absence(&e) => return Ok(None),
        Err(e) => return Err(unreadable(rel, &e)),
    };
    let stat = beneath::stat_fd(fd.as_fd()).map_err(|e| unreadable(rel, &e))?;
    if !stat.is_file() {
        return Ok(None);
    }
    walk.admit_whole(rel, &stat, IGNORE_FILE_MAX_BYTES)?;
    walk.bytes += stat.size;
    let mut bytes = Vec::new();
    std::fs::File::from(fd)
        .take(IGNORE_FILE_MAX_BYTES)
        .read_to_end(&mut bytes)
        .map_err(|e| unreadable(rel, &e))?;
    Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let w = dir.path();
        std::fs::create_dir_all(w.join("data/sub")).unwrap();
        std::fs::create_dir_all(w.join("src")).unwrap();
        std::fs::write(w.join("data/a.txt"), "a").unwrap();
        std::fs::write(w.join("data/sub/b.txt"), "b").unwrap();
        std::fs::write(w.join("src/lib.rs"), "x").unwrap();
        symlink("/etc/passwd", w.join("data/link")).unwrap();
        dir
    }

    fn glob(w: &Path, glob: &str, budget: &Budget) -> Result<BTreeMap<String, String>, Exceeded> {
        let stop = AtomicBool::new(false);
        let root = open_workspace(w).unwrap();
        Walk::new(budget, &stop, &RunSpend::default()).glob(root.as_fd(), glob, None)
    }

    /// A file hashed once in a run, unchanged since (same stat, ctime included), is not read
    /// again by a later walk; any change (content at the same size with the mtime put back,
    /// mode) moves the ctime and is read again; a file whose ctime is fresh is not kept.
    #[test]
    fn an_unchanged_file_is_hashed_once_a_run() {
        let dir = tempfile::tempdir().unwrap();
        let w = dir.path();
        std::fs::write(w.join("a.txt"), "a").unwrap();
        let root = open_workspace(w).unwrap();
        let keeps = faults_update_times(root.as_fd());
        let stop = AtomicBool::new(false);
        let spent = RunSpend::default();
        // Fresh: hashed, not kept (a change in the same clock tick would keep its ctime).
        let mut walk = Walk::new(&Budget::DEFAULT, &stop, &spent);
        let first = walk.glob(root.as_fd(), "*.txt", None).unwrap();
        assert_eq!(walk.bytes, 1);
        assert!(spent.hashes.is_empty());
        drop(walk);
        std::thread::sleep(HashCache::SETTLED + Duration::from_millis(200));
        let mut walk = Walk::new(&Budget::DEFAULT, &stop, &spent);
        assert_eq!(walk.glob(root.as_fd(), "*.txt", None).unwrap(), first);
        assert_eq!(walk.bytes, 1);
        drop(walk);
        if !keeps {
            // tmpfs and the like: a write through a mapping would not move the times.
            assert!(spent.hashes.is_empty());
            return;
        }
        assert_eq!(spent.hashes.len(), 1);
        // Another walk of the run (one sharing the hashes too): nothing read.
        let shared = RunSpend::sharing_hashes(&spent);
        for spent in [&spent, &shared] {
            let mut walk = Walk::new(&Budget::DEFAULT, &stop, spent);
            assert_eq!(walk.glob(root.as_fd(), "*.txt", None).unwrap(), first);
            assert_eq!(walk.bytes, 0, "read again");
        }
        // New content of the same size, the mtime put back: the ctime moved, read again.
        let mtime = std::fs::metadata(w.join("a.txt"))
            .unwrap()
            .modified()
            .unwrap();
        std::fs::write(w.join("a.txt"), "b").unwrap();
        std::fs::File::options()
            .write(true)
            .open(w.join("a.txt"))
            .unwrap()
            .set_modified(mtime)
            .unwrap();
        let mut walk = Walk::new(&Budget::DEFAULT, &stop, &spent);
        let now = walk.glob(root.as_fd(), "*.txt", None).unwrap();
        assert_eq!(walk.bytes, 1);
        assert_eq!(now["a.txt"], hex::encode(Sha256::digest(b"b")));
        // Fresh again: not kept.
        assert_eq!(spent.hashes.len(), 1);
    }

    #[test]
    fn globs_name_regular_files_and_never_a_link() {
        let dir = tree();
        let found = glob(dir.path(), "data/**", &Budget::DEFAULT).unwrap();
        let names: Vec<&str> = found.keys().map(String::as_str).collect();
        assert_eq!(names, ["data/a.txt", "data/sub/b.txt"]);
        assert_eq!(
            found["data/a.txt"],
            hex::encode(Sha256::digest(b"a")),
            "the hash is the content's"
        );
        let found = glob(dir.path(), "*/lib.rs", &Budget::DEFAULT).unwrap();
        assert_eq!(found.keys().collect::<Vec<_>>(), ["src/lib.rs"]);
    }

    #[test]
    fn globs_match_like_file_rules() {
        assert!(glob_matches("tests/**", "tests/a/b.rs"));
        assert!(glob_matches("src/*.rs", "src/lib.rs"));
        assert!(!glob_matches("src/*.rs", "src/a/lib.rs"));
        assert!(glob_matches("**/*.md", "a/b/c.md"));
        assert!(!glob_matches("tests/**", "src/x.rs"));
    }

    #[test]
    fn a_directory_that_cannot_hold_a_match_is_not_entered() {
        assert!(may_hold(&["data", "**"], &["data", "x", "y"]));
        assert!(may_hold(&["src", "*.rs"], &["src"]));
        assert!(!may_hold(&["src", "*.rs"], &["src", "a"]));
        assert!(!may_hold(&["src", "*.rs"], &["data"]));
        assert!(may_hold(&["**", "*.md"], &["a", "b"]));
        // Too many entries elsewhere do not count against a walk that never goes there.
        let dir = tree();
        for n in 0..50 {
            std::fs::write(dir.path().join(format!("src/f{n}")), "").unwrap();
        }
        let small = Budget {
            entries: 10,
            ..Budget::DEFAULT
        };
        assert!(glob(dir.path(), "data/**", &small).is_ok());
        assert_eq!(
            glob(dir.path(), "src/*", &small),
            Err(Exceeded::Entries { limit: 10 })
        );
    }

    #[test]
    fn a_sparse_giant_is_refused_before_a_byte_is_read() {
        let dir = tree();
        let big = dir.path().join("data/big");
        let file = std::fs::File::create(&big).unwrap();
        file.set_len(1 << 40).unwrap();
        std::fs::hard_link(&big, dir.path().join("data/big2")).unwrap();
        let started = Instant::now();
        let got = glob(dir.path(), "data/**", &Budget::DEFAULT);
        assert!(started.elapsed() < Duration::from_secs(5));
        match got {
            Err(Exceeded::FileBytes {
                size, allocated, ..
            }) => {
                assert_eq!(size, 1 << 40);
                assert!(allocated < 1 << 20, "{allocated}");
                assert!(got.unwrap_err().sentence().contains("sparse"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn hard_links_are_hashed_once_and_the_walk_is_counted_in_bytes() {
        let dir = tree();
        std::fs::write(dir.path().join("data/one"), vec![7u8; 4096]).unwrap();
        for n in 0..20 {
            std::fs::hard_link(
                dir.path().join("data/one"),
                dir.path().join(format!("data/l{n}")),
            )
            .unwrap();
        }
        let budget = Budget {
            walk_bytes: 8192,
            ..Budget::DEFAULT
        };
        let found = glob(dir.path(), "data/**", &budget).unwrap();
        assert_eq!(found.len(), 23);
        std::fs::write(dir.path().join("data/two"), vec![8u8; 8192]).unwrap();
        assert_eq!(
            glob(dir.path(), "data/**", &budget),
            Err(Exceeded::WalkBytes { limit: 8192 })
        );
    }

    #[test]
    fn depth_time_and_the_stop_are_named_outcomes() {
        let dir = tree();
        let mut deep = dir.path().join("data");
        for _ in 0..10 {
            deep = deep.join("d");
        }
        std::fs::create_dir_all(&deep).unwrap();
        let shallow = Budget {
            depth: 5,
            ..Budget::DEFAULT
        };
        assert!(matches!(
            glob(dir.path(), "data/**", &shallow),
            Err(Exceeded::Depth { limit: 5, .. })
        ));
        let no_time = Budget {
            time: Duration::ZERO,
            ..Budget::DEFAULT
        };
        std::thread::sleep(Duration::from_millis(2));
        assert!(matches!(
            glob(dir.path(), "data/**", &no_time),
            Err(Exceeded::Time { .. })
        ));
        let stop = AtomicBool::new(true);
        let root = open_workspace(dir.path()).unwrap();
        assert_eq!(
            Walk::new(&Budget::DEFAULT, &stop, &RunSpend::default()).glob(
                root.as_fd(),
                "data/**",
                None
            ),
            Err(Exceeded::Stopped)
        );
    }

    #[test]
    fn a_file_that_grows_while_it_is_hashed_is_unstable() {
        let dir = tree();
        let path = dir.path().join("data/log");
        std::fs::write(&path, vec![1u8; 16 << 20]).unwrap();
        let done = std::sync::Arc::new(AtomicBool::new(false));
        let writer = {
            let (path, done) = (path.clone(), std::sync::Arc::clone(&done));
            std::thread::spawn(move || {
                use std::io::Write;
                let mut file = std::fs::OpenOptions::new().append(true).open(path).unwrap();
                while !done.load(Ordering::SeqCst) {
                    file.write_all(b"x").unwrap();
                    std::thread::sleep(Duration::from_micros(200));
                }
            })
        };
        let got = glob(dir.path(), "data/log", &Budget::DEFAULT);
        done.store(true, Ordering::SeqCst);
        writer.join().unwrap();
        assert_eq!(
            got,
            Err(Exceeded::Unstable {
                path: "data/log".into()
            })
        );
    }

    #[test]
    fn the_runs_walks_share_one_budget() {
        let dir = tree();
        std::fs::write(dir.path().join("data/k"), vec![1u8; 1024]).unwrap();
        let budget = Budget {
            walk_bytes: 1024,
            ..Budget::DEFAULT
        };
        let stop = AtomicBool::new(false);
        let spent = RunSpend::default();
        let root = open_workspace(dir.path()).unwrap();
        // One walk may hash 1024 bytes, the run RUN_WALKS times that: data/k (1024 bytes) is
        // named by RUN_WALKS walks, each within its own budget, then by one walk more.
        for _ in 0..RUN_WALKS {
            let mut walk = Walk::new(&budget, &stop, &spent);
            assert!(
                walk.hash_named(root.as_fd(), Path::new("data/k"))
                    .unwrap()
                    .is_some()
            );
        }
        let mut walk = Walk::new(&budget, &stop, &spent);
        assert_eq!(
            walk.hash_named(root.as_fd(), Path::new("data/k")),
            Err(Exceeded::Run { what: "bytes" })
        );
    }

    #[test]
    fn a_named_file_is_resolved_beneath_without_links() {
        let dir = tree();
        let stop = AtomicBool::new(false);
        let root = open_workspace(dir.path()).unwrap();
        let spent = RunSpend::default();
        let mut walk = Walk::new(&Budget::DEFAULT, &stop, &spent);
        assert!(
            walk.hash_named(root.as_fd(), Path::new("data/a.txt"))
                .unwrap()
                .is_some()
        );
        assert_eq!(
            walk.hash_named(root.as_fd(), Path::new("data/link")),
            Ok(None)
        );
        assert_eq!(
            walk.hash_named(root.as_fd(), Path::new("../etc/passwd")),
            Ok(None)
        );
        assert_eq!(walk.hash_named(root.as_fd(), Path::new("data")), Ok(None));
    }

    /// The step's rules and its inventory of `globs`, taken as a step opens them.
    fn open_step(
        w: &Path,
        globs: &[&str],
        budget: &Budget,
    ) -> (IgnoreRules, Result<BTreeMap<String, Entry>, Exceeded>) {
        let stop = AtomicBool::new(false);
        let spent = RunSpend::default();
        let root = open_workspace(w).unwrap();
        let mut walk = Walk::new(budget, &stop, &spent);
        let mut rules = IgnoreRules::capture(&mut walk, root.as_fd()).unwrap();
        let globs: Vec<(String, bool)> = globs.iter().map(|g| (g.to_string(), true)).collect();
        let taken = walk.inventory(root.as_fd(), &globs, Some(&mut rules));
        rules.freeze();
        (rules, taken)
    }

    /// The inventory of `globs` now, under rules taken earlier, compared with `before`.
    fn changes_since(
        w: &Path,
        globs: &[&str],
        rules: &IgnoreRules,
        before: &BTreeMap<String, Entry>,
    ) -> Result<BTreeMap<String, String>, Exceeded> {
        let stop = AtomicBool::new(false);
        let spent = RunSpend::default();
        let root = open_workspace(w).unwrap();
        let mut walk = Walk::new(&Budget::DEFAULT, &stop, &spent);
        let mut rules = rules.clone();
        let globs: Vec<(String, bool)> = globs.iter().map(|g| (g.to_string(), true)).collect();
        let now = walk.inventory(root.as_fd(), &globs, Some(&mut rules))?;
        compare(&mut walk, root.as_fd(), before, &now)
    }

    #[test]
    fn an_inventory_records_links_as_links_and_every_kind_of_entry() {
        let dir = tree();
        let (_, taken) = open_step(dir.path(), &["data/**"], &Budget::DEFAULT);
        let taken = taken.unwrap();
        let names: Vec<&str> = taken.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "data",
                "data/a.txt",
                "data/link",
                "data/sub",
                "data/sub/b.txt"
            ]
        );
        assert_eq!(
            taken["data/link"],
            Entry::Link {
                target: b"/etc/passwd".to_vec()
            }
        );
        assert!(matches!(taken["data"], Entry::Dir { .. }));
        match &taken["data/a.txt"] {
            Entry::File { size, sha256, .. } => {
                assert_eq!(*size, 1);
                assert_eq!(*sha256, hex::encode(Sha256::digest(b"a")));
            }
            other => panic!("{other:?}"),
        }
        // A literal glob is one lookup; a link named by it is a link, not its target.
        let (_, taken) = open_step(dir.path(), &["data/link", "src/lib.rs"], &Budget::DEFAULT);
        let taken = taken.unwrap();
        assert_eq!(taken.len(), 2);
        assert!(matches!(taken["data/link"], Entry::Link { .. }));
    }

    #[test]
    fn every_change_under_a_protected_path_is_named() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tree();
        let w = dir.path();
        std::fs::write(w.join("data/mode"), "m").unwrap();
        std::fs::write(w.join("data/gone"), "g").unwrap();
        std::fs::write(w.join("data/becomes-link"), "l").unwrap();
        let globs = ["data/**"];
        let (rules, before) = open_step(w, &globs, &Budget::DEFAULT);
        let before = before.unwrap();
        assert_eq!(
            changes_since(w, &globs, &rules, &before).unwrap(),
            BTreeMap::new(),
            "nothing changed"
        );
        std::fs::write(w.join("data/a.txt"), "A").unwrap();
        std::fs::set_permissions(w.join("data/mode"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        std::fs::write(w.join("data/sub/new"), "").unwrap();
        std::fs::remove_file(w.join("data/gone")).unwrap();
        std::fs::remove_file(w.join("data/becomes-link")).unwrap();
        symlink("a.txt", w.join("data/becomes-link")).unwrap();
        std::fs::remove_file(w.join("data/link")).unwrap();
        symlink("/etc/hostname", w.join("data/link")).unwrap();
        let changes = changes_since(w, &globs, &rules, &before).unwrap();
        let expected: BTreeMap<String, String> = [
            ("data/a.txt", "content"),
            ("data/becomes-link", "was a file, now a link (to a.txt)"),
            ("data/gone", "removed (file)"),
            ("data/link", "link retargeted: /etc/passwd → /etc/hostname"),
            ("data/mode", "mode 644 → 755"),
            ("data/sub/new", "new file"),
        ]
        .into_iter()
        .map(|(p, c)| (p.to_string(), c.to_string()))
        .collect();
        // The umask may give files another mode than 644: compare that one by its shape.
        let mut changes = changes;
        let mode = changes.remove("data/mode").unwrap();
        assert!(
            mode.starts_with("mode ") && mode.ends_with(" → 755"),
            "{mode}"
        );
        let mut expected = expected;
        expected.remove("data/mode");
        assert_eq!(changes, expected);
        // A directory replaced by a link: the directory's type changed, and what was beneath
        // it is confirmed gone (a link on the way is not followed).
        std::fs::rename(w.join("data/sub"), w.join("moved")).unwrap();
        symlink("../moved", w.join("data/sub")).unwrap();
        let changes = changes_since(w, &globs, &rules, &before).unwrap();
        assert_eq!(
            changes["data/sub"],
            "was a directory, now a link (to ../moved)"
        );
        assert_eq!(changes["data/sub/b.txt"], "removed (file)");
    }

    #[test]
    fn a_removal_counts_only_when_a_lookup_confirms_it() {
        let dir = tree();
        let w = dir.path();
        let stop = AtomicBool::new(false);
        let spent = RunSpend::default();
        let root = open_workspace(w).unwrap();
        let mut walk = Walk::new(&Budget::DEFAULT, &stop, &spent);
        let before: BTreeMap<String, Entry> = [
            ("data/a.txt", Entry::Dir { mode: 0o755 }),
            ("data/never", Entry::Dir { mode: 0o755 }),
        ]
        .into_iter()
        .map(|(p, e)| (p.to_string(), e))
        .collect();
        // A walk that did not name data/a.txt (it is there): no verdict, never "removed".
        assert_eq!(
            compare(&mut walk, root.as_fd(), &before, &BTreeMap::new()),
            Err(Exceeded::Unstable {
                path: "data/a.txt".into()
            })
        );
        let before: BTreeMap<String, Entry> = before.into_iter().skip(1).collect();
        assert_eq!(
            compare(&mut walk, root.as_fd(), &before, &BTreeMap::new()).unwrap()["data/never"],
            "removed (directory)"
        );
        // Beneath a link, nothing is: `data/link/x` is absent, as git would see it.
        assert_eq!(walk.lookup(root.as_fd(), "data/link/passwd"), Ok(None));
        assert!(
            walk.lookup(root.as_fd(), "data/link")
                .unwrap()
                .unwrap()
                .is_symlink()
        );
    }

    #[test]
    fn an_inventory_that_does_not_finish_gives_no_verdict() {
        let dir = tree();
        let w = dir.path();
        for n in 0..30 {
            std::fs::write(w.join(format!("data/f{n}")), "").unwrap();
        }
        let small = Budget {
            entries: 10,
            ..Budget::DEFAULT
        };
        let (_, taken) = open_step(w, &["data/**"], &small);
        assert_eq!(taken, Err(Exceeded::Entries { limit: 10 }));
        // Entries beside the literal prefix cost nothing.
        for n in 0..30 {
            std::fs::write(w.join(format!("top{n}")), "").unwrap();
        }
        let (_, taken) = open_step(w, &["data/sub/**"], &small);
        assert_eq!(taken.unwrap().len(), 2);
        let shallow = Budget {
            depth: 1,
            ..Budget::DEFAULT
        };
        let (_, taken) = open_step(w, &["data/**"], &shallow);
        assert!(
            matches!(taken, Err(Exceeded::Depth { limit: 1, .. })),
            "{taken:?}"
        );
        let stop = AtomicBool::new(true);
        let root = open_workspace(w).unwrap();
        assert_eq!(
            Walk::new(&Budget::DEFAULT, &stop, &RunSpend::default()).inventory(
                root.as_fd(),
                &[("data/**".into(), false)],
                None
            ),
            Err(Exceeded::Stopped)
        );
        // A directory the supervisor cannot read (it only can't when it is not root).
        if !nix::unistd::getuid().is_root() {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(w.join("data/sub"), std::fs::Permissions::from_mode(0o000))
                .unwrap();
            let (_, taken) = open_step(w, &["data/**"], &Budget::DEFAULT);
            std::fs::set_permissions(w.join("data/sub"), std::fs::Permissions::from_mode(0o755))
                .unwrap();
            assert!(
                matches!(&taken, Err(Exceeded::Unreadable { path, .. }) if path == "data/sub"),
                "{taken:?}"
            );
        }
    }

    #[test]
    fn ignore_rules_are_the_repositorys_as_the_step_opened() {
        let dir = tree();
        let w = dir.path();
        std::fs::create_dir_all(w.join(".git/info")).unwrap();
        std::fs::write(w.join(".git/info/exclude"), "*.tmp\n").unwrap();
        std::fs::write(w.join(".gitignore"), "__pycache__/\n*.log\n!keep.log\n").unwrap();
        std::fs::create_dir_all(w.join("src/gen")).unwrap();
        std::fs::write(w.join("src/.gitignore"), "gen/\n!x.tmp\n").unwrap();
        std::fs::create_dir_all(w.join("tests/__pycache__")).unwrap();
        std::fs::write(w.join("tests/__pycache__/t.pyc"), "c").unwrap();
        std::fs::write(w.join("tests/t.py"), "t").unwrap();
        let (rules, taken) = open_step(w, &["tests/**", "src/**"], &Budget::DEFAULT);
        let taken = taken.unwrap();
        assert!(rules.repository());
        assert!(taken.contains_key("tests/t.py"));
        assert!(
            !taken
                .keys()
                .any(|p| p.contains("__pycache__") || p.contains("gen")),
            "{taken:?}"
        );
        // The agent rewrites the rules during the step: nothing changes what counts.
        std::fs::write(w.join(".gitignore"), "src/*.rs\n*.py\n").unwrap();
        std::fs::write(w.join("src/.gitignore"), "*\n").unwrap();
        assert!(!rules.path_ignored("src/lib.rs", false));
        assert!(!rules.path_ignored("tests/t.py", false));
        assert!(rules.path_ignored("tests/__pycache__/t.pyc", false));
        assert!(rules.path_ignored("a/b.log", false));
        assert!(!rules.path_ignored("a/keep.log", false));
        assert!(rules.path_ignored("a.tmp", false), "info/exclude");
        assert!(
            !rules.path_ignored("src/x.tmp", false),
            "a deeper .gitignore decides"
        );
        assert!(
            rules.path_ignored("src/gen/x.rs", false),
            "beneath an ignored directory"
        );
        assert!(rules.path_ignored(".git/index", false));
        // A .gitignore written during the step in a directory new since it opened: not read.
        std::fs::create_dir_all(w.join("tests/new")).unwrap();
        std::fs::write(w.join("tests/new/.gitignore"), "*\n").unwrap();
        std::fs::write(w.join("tests/new/x.py"), "x").unwrap();
        let changes = changes_since(w, &["tests/**", "src/**"], &rules, &taken).unwrap();
        assert!(changes.contains_key("tests/new/x.py"), "{changes:?}");
        assert!(changes.contains_key("tests/new/.gitignore"), "{changes:?}");
        assert!(changes.contains_key("src/.gitignore"), "{changes:?}");
        // Written under the ignored __pycache__: no change.
        std::fs::write(w.join("tests/__pycache__/t.pyc"), "forged").unwrap();
        let changes = changes_since(w, &["tests/**", "src/**"], &rules, &taken).unwrap();
        assert!(
            !changes.keys().any(|p| p.contains("__pycache__")),
            "{changes:?}"
        );
    }

    #[test]
    fn outside_a_repository_the_default_set_is_ignored() {
        let dir = tree();
        let w = dir.path();
        std::fs::write(w.join(".gitignore"), "*.bak\n").unwrap();
        let (rules, _) = open_step(w, &["src/**"], &Budget::DEFAULT);
        assert!(!rules.repository());
        for ignored in [
            "src/__pycache__/x.pyc",
            "x.pyc",
            "node_modules/a/b.js",
            "target/debug/app",
            ".venv/bin/python",
            ".pytest_cache/v",
            "src/a.o",
            "src/a.bak",
        ] {
            assert!(rules.path_ignored(ignored, false), "{ignored}");
        }
        for counted in ["src/lib.rs", "src/target.rs", "tests/test_a.py"] {
            assert!(!rules.path_ignored(counted, false), "{counted}");
        }
        // A link named .gitignore is not read (git does not follow one either).
        std::fs::remove_file(w.join(".gitignore")).unwrap();
        std::fs::write(w.join("elsewhere"), "*.rs\n").unwrap();
        symlink("elsewhere", w.join(".gitignore")).unwrap();
        let (rules, _) = open_step(w, &["src/**"], &Budget::DEFAULT);
        assert!(!rules.path_ignored("src/lib.rs", false));
    }
}
