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
/// [`RUN_WALKS`] times one walk's budget.
#[derive(Debug, Default)]
pub struct RunSpend {
    bytes: std::sync::atomic::AtomicU64,
    micros: std::sync::atomic::AtomicU64,
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
    /// A file changed while it was hashed (it grew, shrank or was rewritten).
    Unstable { path: String },
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
                    "{path} changed while the supervisor hashed it: ask again once it is written"
                )
            }
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
}

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
        }
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
    /// cannot hold a match are not entered.
    pub fn glob(
        &mut self,
        root: BorrowedFd<'_>,
        glob: &str,
    ) -> Result<BTreeMap<String, String>, Exceeded> {
        // Split as the hook's `PathGlob` splits it (which [`glob_matches`] judges files by).
        let pattern: Vec<&str> = glob
            .trim_start_matches("./")
            .split('/')
            .filter(|c| !c.is_empty())
            .collect();
        let mut found = BTreeMap::new();
        let mut stack: Vec<(PathBuf, usize)> = vec![(PathBuf::new(), 0)];
        while let Some((rel, depth)) = stack.pop() {
            self.check_time()?;
            let Ok(dir) = beneath::open_beneath(root, &rel, DIR_LISTING, 0) else {
                continue;
            };
            let left = self.budget.entries.saturating_sub(self.entries);
            let (entries, more) =
                beneath::list_dir_up_to(dir.as_fd(), usize::try_from(left).unwrap_or(usize::MAX))
                    .unwrap_or_default();
            self.entries += entries.len() as u64;
            if more {
                return Err(Exceeded::Entries {
                    limit: self.budget.entries,
                });
            }
            for (name, _) in entries {
                let child = rel.join(&name);
                let Some(text) = child.to_str() else { continue };
                let parts: Vec<&str> = text.split('/').collect();
                let Ok(stat) = beneath::stat_at(dir.as_fd(), &name) else {
                    continue;
                };
                if stat.is_dir() {
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
                } else if stat.is_file() && glob_matches(glob, text) {
                    let Ok(fd) = open_entry(dir.as_fd(), &name) else {
                        continue;
                    };
                    if let Some(hash) = self.hash_open(fd, text)? {
                        found.insert(text.to_string(), hash);
                    }
                }
            }
        }
        Ok(found)
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
        Walk::new(budget, &stop, &RunSpend::default()).glob(root.as_fd(), glob)
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
            Walk::new(&Budget::DEFAULT, &stop, &RunSpend::default()).glob(root.as_fd(), "data/**"),
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
}
