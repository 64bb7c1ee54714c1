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

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::profile::budgets;
use crate::sys::beneath;

mod glob_walk;
mod hashing;
mod ignore;
mod inventory;
mod reading;

pub use glob_walk::glob_matches;
pub use ignore::{DEFAULT_IGNORED, IGNORE_FILE_MAX_BYTES, IgnoreRules};
pub use inventory::{Entry, compare, inventory_digest};
pub use reading::open_workspace;

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
}

#[cfg(test)]
mod tests;
