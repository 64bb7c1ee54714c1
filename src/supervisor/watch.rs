//! The window between the run and its sweep. A persistence path that does not exist at launch
//! cannot be bound read-only (a placeholder would be a mount per name on the launch path and an
//! entry in the user's checkout), so while the run is on the supervisor watches the directories
//! where such names would appear (inotify, one watch per directory) and moves one to the
//! quarantine as soon as it is created: the host's editor, direnv or another agent on the same
//! checkout never gets to load it. Names judged by their content (`.gitmodules`, a new
//! repository's config and hooks, a worktree's `commondir`) are left to the sweep, which sees
//! the finished file.
//!
//! Every look goes through descriptors of the workspace (`sys::beneath`); a watch is added on
//! `/proc/self/fd/N` of a directory opened beneath the workspace, never on a path an agent
//! could redirect with a link.

use crate::sandbox::sys::beneath::{self, DIR_LOOKUP};
use crate::supervisor::sweep::{Finding, Quarantine};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use std::collections::{BTreeSet, HashMap};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

/// Watches at most this many directories (each costs the kernel a little memory).
const MAX_WATCHES: usize = 4096;

/// The running watcher: stop it to get what it moved.
pub struct Watcher {
    stop: OwnedFd,
    thread: std::thread::JoinHandle<Vec<Finding>>,
}

struct State {
    inotify: Inotify,
    workspace: PathBuf,
    root: OwnedFd,
    /// Persistence paths absent at launch, relative to the workspace.
    targets: BTreeSet<PathBuf>,
    /// Directory watched → its path relative to the workspace.
    watched: HashMap<WatchDescriptor, PathBuf>,
    /// `during-run`, then `during-run-2`, … (a name created again goes to the next one).
    quarantines: Vec<Quarantine>,
    quarantine_base: PathBuf,
    findings: Vec<Finding>,
}

/// How many times one name is moved away before the sweep is left to judge it.
const MAX_QUARANTINES: usize = 64;

impl Watcher {
    /// Starts watching for `targets` (relative to `workspace`); `None` when there is nothing
    /// to watch or inotify is unavailable (the sweep still judges everything after the run).
    pub fn start(workspace: &Path, targets: Vec<PathBuf>, quarantine: &Path) -> Option<Watcher> {
        if targets.is_empty() {
            return None;
        }
        let inotify = Inotify::init(InitFlags::IN_CLOEXEC | InitFlags::IN_NONBLOCK)
            .inspect_err(|e| tracing::warn!("inotify unavailable ({e}): the sweep alone judges"))
            .ok()?;
        let root = beneath::open_root(workspace, DIR_LOOKUP).ok()?;
        let (stop_read, stop_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).ok()?;
        let mut state = State {
            inotify,
            workspace: workspace.to_path_buf(),
            root,
            targets: targets.into_iter().collect(),
            watched: HashMap::new(),
            quarantines: Vec::new(),
            quarantine_base: quarantine.to_path_buf(),
            findings: Vec::new(),
        };
        // Every existing directory on the way to a target, and what is already there.
        let dirs: BTreeSet<PathBuf> = state
            .targets
            .iter()
            .flat_map(|t| {
                t.ancestors()
                    .skip(1)
                    .map(Path::to_path_buf)
                    .collect::<Vec<_>>()
            })
            .collect();
        for dir in dirs {
            state.watch(&dir);
        }
        let thread = std::thread::Builder::new()
            .name("stepproof-watch".into())
            .spawn(move || state.run(stop_read))
            .ok()?;
        Some(Watcher {
            stop: stop_write,
            thread,
        })
    }

    /// Stops watching (one last pass over pending events) and returns what was moved.
    pub fn stop(self) -> Vec<Finding> {
        let _ = nix::unistd::write(&self.stop, b"x");
        self.thread.join().unwrap_or_default()
    }
}

impl State {
    fn run(mut self, stop: OwnedFd) -> Vec<Finding> {
        loop {
            let mut fds = [
                PollFd::new(self.inotify.as_fd(), PollFlags::POLLIN),
                PollFd::new(stop.as_fd(), PollFlags::POLLIN),
            ];
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => {
                    tracing::warn!("polling inotify: {e}");
                    break;
                }
            }
            let stopping = fds[1].revents().is_some_and(|r| !r.is_empty());
            self.drain();
            if stopping {
                break;
            }
        }
        self.findings
    }

    fn drain(&mut self) {
        while let Ok(events) = self.inotify.read_events() {
            if events.is_empty() {
                break;
            }
            for event in events {
                if event.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                    // Events were lost: look at every target again.
                    let dirs: Vec<PathBuf> = self.watched.values().cloned().collect();
                    for dir in dirs {
                        self.scan(&dir);
                    }
                    continue;
                }
                let (Some(dir), Some(name)) = (self.watched.get(&event.wd).cloned(), event.name)
                else {
                    continue;
                };
                self.arrived(&dir.join(name));
            }
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

    /// What `rel` is (never through a link).
    fn stat(&self, rel: &Path) -> Option<beneath::Stat> {
        let (parent, name) = (rel.parent()?, rel.file_name()?);
        let parent_fd = if parent.as_os_str().is_empty() {
            beneath::open_beneath(self.root.as_fd(), Path::new("."), DIR_LOOKUP, 0)
        } else {
            beneath::open_beneath(self.root.as_fd(), parent, DIR_LOOKUP, 0)
        };
        beneath::stat_at(parent_fd.ok()?.as_fd(), name).ok()
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

    /// Watches `dir` (relative to the workspace), then looks at what is in it already (it may
    /// have been filled before the watch).
    fn watch(&mut self, dir: &Path) {
        if self.watched.len() >= MAX_WATCHES || self.watched.values().any(|d| d == dir) {
            return;
        }
        let opened = if dir.as_os_str().is_empty() {
            beneath::open_beneath(self.root.as_fd(), Path::new("."), DIR_LOOKUP, 0)
        } else {
            beneath::open_beneath(self.root.as_fd(), dir, DIR_LOOKUP, 0)
        };
        let Ok(fd) = opened else {
            return;
        };
        use std::os::fd::AsRawFd;
        let proc_path = format!("/proc/self/fd/{}", fd.as_raw_fd());
        let flags =
            AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO | AddWatchFlags::IN_ONLYDIR;
        match self.inotify.add_watch(proc_path.as_str(), flags) {
            Ok(wd) => {
                self.watched.insert(wd, dir.to_path_buf());
            }
            Err(e) => {
                tracing::debug!(dir = %dir.display(), "not watched: {e}");
                return;
            }
        }
        self.scan(dir);
    }

    /// What is in `dir` already, as if it had just arrived: everything, in a directory at or
    /// below a target; the targets and directories on the way to them, elsewhere.
    fn scan(&mut self, dir: &Path) {
        let children: Vec<PathBuf> = if self.inside_target(dir) {
            let opened = beneath::open_beneath(self.root.as_fd(), dir, beneath::DIR_LISTING, 0);
            opened
                .and_then(|fd| beneath::list_dir(fd.as_fd()))
                .map(|entries| {
                    entries
                        .into_iter()
                        .map(|(name, _)| dir.join(name))
                        .collect()
                })
                .unwrap_or_default()
        } else {
            self.targets
                .iter()
                .filter_map(|t| {
                    let rest = t.strip_prefix(dir).ok()?;
                    rest.components().next().map(|c| dir.join(c))
                })
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect()
        };
        for child in children {
            self.arrived(&child);
        }
    }
}
