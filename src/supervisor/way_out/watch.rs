//! The window between the run and its sweep. A persistence path that does not exist at launch
//! cannot be bound read-only (a placeholder would be a mount per name on the launch path and an
//! entry in the user's checkout), so while the run is on the supervisor watches the directories
//! where such names would appear and moves one to the quarantine as soon as it shows: the
//! host's editor, direnv or another agent on the same checkout does not get to load it. Names
//! judged by their content (`.gitmodules`, a new repository's config and hooks, a worktree's
//! `commondir`) are left to the sweep, which sees the finished file.
//!
//! How: the supervisor's event loop looks every [`TICK`] at the modification time of each directory it watches (the
//! workspace, the directories on the way to a target, those at or below a target) and lists
//! again only those that changed. Not inotify: closing an inotify instance that had watches
//! waits for the kernel's SRCU grace period, 8–16 ms here, at the end of every run.
//!
//! Every look goes through descriptors of the workspace (`sys::beneath`), never following a
//! link.

use crate::supervisor::way_out::sweep::{Finding, Quarantine};
use crate::sys::beneath::{self, DIR_LISTING, DIR_LOOKUP};
use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How often the watched directories are looked at: the longest a created name stays.
pub const TICK: Duration = Duration::from_millis(20);
/// Watches at most this many directories.
const MAX_DIRS: usize = 4096;
/// How many times one name is moved away before the sweep is left to judge it.
const MAX_QUARANTINES: usize = 64;
/// A directory changed this recently is listed again even if its modification time looks the same
/// (the kernel's timestamps are coarse: two changes in one tick of its clock share one).
const RECENT: Duration = Duration::from_millis(50);

/// The watcher: the supervisor's event loop calls [`Watcher::tick`] when [`Watcher::next_look`]
/// says, and [`Watcher::finish`] once the run is over. Not a thread of its own: a second thread
/// in the supervisor cost the launch about a millisecond (its stack, the scheduler on two cores
/// while the init builds the view), and the event loop wakes anyway.
pub struct Watcher {
    state: State,
    /// When the next look is due.
    next: Instant,
}

struct State {
    workspace: PathBuf,
    root: OwnedFd,
    /// Persistence paths absent at launch, relative to the workspace.
    targets: BTreeSet<PathBuf>,
    /// Directory watched (relative to the workspace) → its modification time when last listed.
    dirs: BTreeMap<PathBuf, Option<(i64, i64)>>,
    /// `during-run`, then `during-run-2`, … (a name created again goes to the next one).
    quarantines: Vec<Quarantine>,
    quarantine_base: PathBuf,
    findings: Vec<Finding>,
}

impl Watcher {
    /// Starts watching for `targets` (relative to `workspace`); `None` when there is nothing
    /// to watch (the sweep still judges everything after the run).
    ///
    /// The first look is one tick away (or at the end): nothing is lost, since a listing finds
    /// what appeared meanwhile, and the launch's busiest milliseconds, when the init builds the
    /// view, are not spent here.
    pub fn start(workspace: &Path, targets: Vec<PathBuf>, quarantine: &Path) -> Option<Watcher> {
        if targets.is_empty() {
            return None;
        }
        let root = beneath::open_root(workspace, DIR_LOOKUP).ok()?;
        let mut state = State {
            workspace: workspace.to_path_buf(),
            root,
            targets: targets.into_iter().collect(),
            dirs: BTreeMap::new(),
            quarantines: Vec::new(),
            quarantine_base: quarantine.to_path_buf(),
            findings: Vec::new(),
        };
        state.dirs.insert(PathBuf::new(), None);
        Some(Watcher {
            state,
            next: Instant::now() + TICK,
        })
    }

    /// How long until the next look is due (zero when it is overdue).
    pub fn next_look(&self) -> Duration {
        self.next.saturating_duration_since(Instant::now())
    }

    /// Looks when a look is due; the event loop calls it whenever it wakes.
    pub fn tick(&mut self) {
        let now = Instant::now();
        if now >= self.next {
            self.state.look();
            self.next = Instant::now() + TICK;
        }
    }

    /// One last look, then what was moved.
    pub fn finish(mut self) -> Vec<Finding> {
        self.state.look();
        self.state.findings
    }
}

fn since_epoch_now() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

impl State {
    /// Lists again every watched directory whose modification time moved (or is recent).
    fn look(&mut self) {
        let now = since_epoch_now();
        let changed: Vec<PathBuf> = self
            .dirs
            .iter()
            .filter(|(dir, seen)| {
                let now_mtime = self.dir_mtime(dir);
                now_mtime != **seen
                    || now_mtime.is_some_and(|(s, n)| {
                        let t = Duration::new(s.max(0) as u64, n.clamp(0, 999_999_999) as u32);
                        now.saturating_sub(t) < RECENT
                    })
            })
            .map(|(dir, _)| dir.clone())
            .collect();
        for dir in changed {
            self.scan(&dir);
        }
    }

    /// Whether `rel` is a target or lies below one.
    fn inside_target(&self, rel: &Path) -> bool {
        rel.ancestors().any(|a| self.targets.contains(a))
    }

    /// `rel` appeared. At or below a target: a file, link or anything else is moved at once
    /// (a writer that still has it open goes on writing into the quarantined file, so the
    /// quarantine gets the finished content); a directory is watched and emptied the same way,
    /// and the sweep takes what is left. On the way to a target: a directory is watched.
    fn arrived(&mut self, rel: &Path) {
        let Some(st) = self.stat(rel) else {
            return;
        };
        if self.inside_target(rel) {
            if st.is_dir() {
                self.watch(rel);
                return;
            }
            let mut finding = Finding::new(self.workspace.join(rel), "created");
            finding.detail = Some(
                "created during the run: moved to the quarantine as soon as it appeared".into(),
            );
            let Some(to) = self.move_away(rel) else {
                // Gone already, or moved by the run: the sweep judges what is left.
                return;
            };
            finding.quarantined_to = Some(to);
            self.findings.push(finding);
        } else if st.is_dir() && self.targets.iter().any(|t| t.starts_with(rel)) {
            self.watch(rel);
        }
    }

    fn open_dir(&self, rel: &Path, flags: libc::c_int) -> Option<OwnedFd> {
        let rel = if rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            rel
        };
        beneath::open_beneath(self.root.as_fd(), rel, flags, 0).ok()
    }

    /// What `rel` is (never through a link).
    fn stat(&self, rel: &Path) -> Option<beneath::Stat> {
        let (parent, name) = (rel.parent()?, rel.file_name()?);
        beneath::stat_at(self.open_dir(parent, DIR_LOOKUP)?.as_fd(), name).ok()
    }

    /// A watched directory's modification time (its entries changed), if it is one.
    fn dir_mtime(&self, rel: &Path) -> Option<(i64, i64)> {
        let fd = self.open_dir(rel, DIR_LOOKUP)?;
        beneath::stat_fd(fd.as_fd()).ok().map(|st| st.mtime)
    }

    /// Moves `rel` to the first quarantine that has no entry of that name yet.
    fn move_away(&mut self, rel: &Path) -> Option<PathBuf> {
        for i in 0..MAX_QUARANTINES {
            if i == self.quarantines.len() {
                let name = match i {
                    0 => "during-run".to_string(),
                    n => format!("during-run-{}", n + 1),
                };
                self.quarantines
                    .push(Quarantine::new(&self.quarantine_base.join(name)));
            }
            match self.quarantines[i].take_in(self.root.as_fd(), rel) {
                Ok(to) => return Some(to),
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => continue,
                Err(_) => return None,
            }
        }
        None
    }

    /// Watches `dir` (relative to the workspace) and lists it at once.
    fn watch(&mut self, dir: &Path) {
        if self.dirs.len() >= MAX_DIRS || self.dirs.contains_key(dir) {
            return;
        }
        self.dirs.insert(dir.to_path_buf(), None);
        self.scan(dir);
    }

    /// What is in `dir` now, as if it had just arrived: everything, in a directory at or below
    /// a target; the targets and directories on the way to them, elsewhere.
    fn scan(&mut self, dir: &Path) {
        let mtime = self.dir_mtime(dir);
        if let Some(seen) = self.dirs.get_mut(dir) {
            *seen = mtime;
        }
        // One listing; elsewhere than at or below a target, only the names on the way to one.
        let present: Vec<PathBuf> = self
            .open_dir(dir, DIR_LISTING)
            .and_then(|fd| beneath::list_dir(fd.as_fd()).ok())
            .map(|entries| {
                entries
                    .into_iter()
                    .map(|(name, _)| dir.join(name))
                    .collect()
            })
            .unwrap_or_default();
        let children: Vec<PathBuf> = if self.inside_target(dir) {
            present
        } else {
            let wanted: BTreeSet<PathBuf> = self
                .targets
                .iter()
                .filter_map(|t| {
                    let rest = t.strip_prefix(dir).ok()?;
                    rest.components().next().map(|c| dir.join(c))
                })
                .collect();
            present.into_iter().filter(|c| wanted.contains(c)).collect()
        };
        for child in children {
            self.arrived(&child);
        }
    }
}
