//! The walk over everything the sandbox could write, from descriptors and in parallel: the
//! repositories found, and the second line against setuid files (bits the run set stripped, file
//! capabilities reported).

use super::{Finding, SweepScope, Walk, after};
use crate::sandbox::plan::SandboxPlan;
use crate::sys::beneath::{self, DIR_LISTING, DIR_LOOKUP, Stat};
use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Everything the sandbox could write on the host: the workspace (first: the repositories are
/// looked for there), the profile's writable binds, the agent's config dir (and, without
/// namespaces, what Landlock granted for writing, but the per-run scratch directory).
pub fn writable_roots(plan: &SandboxPlan) -> Vec<PathBuf> {
    let mut roots = plan.writable_host_paths();
    roots.retain(|r| plan.scratch_dir.as_ref() != Some(r));
    roots
}

/// Walks every writable root from descriptors (unbounded: it runs after the run, not on the
/// launch path), each directory once.
pub(super) fn walk_writable(scope: &SweepScope, launched: Duration) -> Walk {
    let mut walk = Walk::default();
    let mut visited = HashSet::new();
    for root in &scope.writable_roots {
        walk_root(
            root,
            *root == scope.workspace,
            launched,
            &mut visited,
            &mut walk,
        );
    }
    tracing::debug!(entries = walk.entries, "writable roots walked");
    walk
}

fn walk_root(
    root: &Path,
    is_workspace: bool,
    launched: Duration,
    visited: &mut HashSet<(u64, u64)>,
    walk: &mut Walk,
) {
    // The root itself, from its parent (the host's, never the sandbox's to change). A root
    // that is a file (Landlock grants a directory's entries one by one around a hidden path)
    // has nothing below it.
    if let (Some(parent), Some(name)) = (root.parent(), root.file_name())
        && let Ok(parent) = beneath::open_root(parent, DIR_LOOKUP)
        && let Ok(st) = beneath::stat_at(parent.as_fd(), name)
    {
        if !visited.insert((st.dev, st.ino)) {
            return;
        }
        if after(st.ctime, launched) {
            check_privilege(parent.as_fd(), name, &st, root, walk);
        }
        if !st.is_dir() && !st.is_symlink() {
            return;
        }
    }
    let fd = match beneath::open_root(root, DIR_LISTING) {
        Ok(fd) => fd,
        Err(e) if e.kind() == io::ErrorKind::NotFound && !is_workspace => return,
        Err(e) => return walk.findings.push(root_unchecked(root, e)),
    };
    let tree = Tree {
        root,
        is_workspace,
        launched,
        work: std::sync::Mutex::new(Work {
            pending: vec![Pending {
                dir: Dir::Open(fd),
                rel: PathBuf::new(),
                in_git: false,
                changed: true,
            }],
            busy: 0,
            visited: std::mem::take(visited),
        }),
        more: std::sync::Condvar::new(),
    };
    let helpers = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .clamp(1, WALKERS_MAX)
        - 1;
    let found: Vec<Walk> = std::thread::scope(|scope| {
        let tree = &tree;
        let (mut spawned, mut asked) = (Vec::new(), false);
        let mut ours = Walk::default();
        // This thread walks alone until there are directories enough to share (a small tree
        // is done before a thread could start), then the helpers join in.
        tree.walk(&mut ours, &mut || {
            if !std::mem::replace(&mut asked, true) {
                spawned = (0..helpers)
                    .filter_map(|_| {
                        std::thread::Builder::new()
                            .name("stepproof-sweep".into())
                            .spawn_scoped(scope, move || {
                                let mut theirs = Walk::default();
                                tree.walk(&mut theirs, &mut || {});
                                theirs
                            })
                            .ok()
                    })
                    .collect();
            }
        });
        let mut found = vec![ours];
        for thread in spawned {
            match thread.join() {
                Ok(theirs) => found.push(theirs),
                // What it had found is lost: the root is then unchecked, never clean.
                Err(_) => found.push(Walk {
                    findings: vec![root_unchecked(
                        root,
                        io::Error::other("a thread of the walk panicked"),
                    )],
                    ..Walk::default()
                }),
            }
        }
        found
    });
    let work = tree.work.into_inner().unwrap_or_else(|e| e.into_inner());
    *visited = work.visited;
    for part in found {
        walk.repos.extend(part.repos);
        walk.findings.extend(part.findings);
        walk.entries += part.entries;
    }
    // In the order of the paths, whichever thread found them.
    walk.repos.sort();
    walk.findings.sort_by(|a, b| a.path.cmp(&b.path));
}

/// A writable root the walk could not look at (or not wholly): reported, never clean.
fn root_unchecked(root: &Path, e: io::Error) -> Finding {
    let mut f = Finding::new(root.to_path_buf(), "unchecked");
    f.error = Some(format!("walking {}: {e}", root.display()));
    f
}

/// At most this many threads walk one writable root (the supervisor's and helpers: the walk
/// is the kernel's `getdents` and `fstatat`, which scale with the cores).
const WALKERS_MAX: usize = 8;

/// Directories waiting before the helpers are started.
const SHARE_FROM: usize = 8;

/// A directory waiting to be walked.
enum Dir {
    Open(OwnedFd),
    /// Its name in a directory whose descriptor stays open while any of its entries waits.
    At(std::sync::Arc<OwnedFd>, OsString),
}

struct Pending {
    dir: Dir,
    rel: PathBuf,
    in_git: bool,
    /// Its ctime is after the launch: a directory that cannot be entered is then a finding.
    changed: bool,
}

/// The walk's shared state: the directories waiting (taken last in, first out, so the
/// descriptors held stay about as many as the tree is deep), how many walkers hold one, and
/// every directory seen (each is walked once).
struct Work {
    pending: Vec<Pending>,
    busy: usize,
    visited: HashSet<(u64, u64)>,
}

/// A walker's hold on a directory, released by an unwinding panic.
struct Holding<'t, 'a>(&'t Tree<'a>);

impl Drop for Holding<'_, '_> {
    fn drop(&mut self) {
        self.0.lock().busy -= 1;
        self.0.more.notify_all();
    }
}

/// One writable root being walked, by one thread or several.
struct Tree<'a> {
    root: &'a Path,
    is_workspace: bool,
    launched: Duration,
    work: std::sync::Mutex<Work>,
    more: std::sync::Condvar,
}

impl Tree<'_> {
    fn lock(&self) -> std::sync::MutexGuard<'_, Work> {
        self.work.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes directories until none waits and no walker holds one (which could add more);
    /// `crowded` is called when enough wait to share them.
    fn walk(&self, walk: &mut Walk, crowded: &mut dyn FnMut()) {
        loop {
            let next = {
                let mut work = self.lock();
                loop {
                    if let Some(next) = work.pending.pop() {
                        work.busy += 1;
                        break Some(next);
                    }
                    if work.busy == 0 {
                        break None;
                    }
                    work = self.more.wait(work).unwrap_or_else(|e| e.into_inner());
                }
            };
            let Some(next) = next else {
                self.more.notify_all();
                return;
            };
            // Held while the directory is looked at: should that panic, the others are told
            // it is no longer busy (and do not wait for it for ever).
            let holding = Holding(self);
            let subdirs = self.directory(next, walk);
            std::mem::forget(holding);
            let mut work = self.lock();
            work.busy -= 1;
            let added = subdirs.len();
            work.pending.extend(subdirs);
            let waiting = work.pending.len();
            let done = work.busy == 0 && waiting == 0;
            drop(work);
            if done {
                self.more.notify_all();
            } else {
                for _ in 0..added.min(WALKERS_MAX) {
                    self.more.notify_one();
                }
                if waiting >= SHARE_FROM {
                    crowded();
                }
            }
        }
    }

    /// Looks at every entry of one directory (setuid bits the run set, nested repositories);
    /// returns its subdirectories not seen before.
    fn directory(&self, at: Pending, walk: &mut Walk) -> Vec<Pending> {
        let root = self.root;
        let fd = match at.dir {
            Dir::Open(fd) => Ok(fd),
            Dir::At(parent, name) => {
                beneath::open_beneath(parent.as_fd(), Path::new(&name), DIR_LISTING, 0)
            }
        };
        let listed = fd.and_then(|fd| beneath::list_dir(fd.as_fd()).map(|entries| (fd, entries)));
        let (fd, entries) = match listed {
            Ok(listed) => listed,
            Err(e) if at.rel.as_os_str().is_empty() => {
                walk.findings.push(root_unchecked(root, e));
                return Vec::new();
            }
            // A directory nobody changed during the run that the supervisor cannot enter: the
            // sandbox, with no more rights, could not have written below it either. One gone
            // since its parent was listed (the sandbox is gone: the host removed it) holds
            // nothing any more, as an entry gone before its `fstatat`.
            Err(e)
                if e.kind() == io::ErrorKind::NotFound
                    || !at.changed
                        && !matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) =>
            {
                return Vec::new();
            }
            Err(e) => {
                let mut f = Finding::new(root.join(&at.rel), "unchecked");
                f.error = Some(format!("could not be walked: {e}"));
                walk.findings.push(f);
                return Vec::new();
            }
        };
        let fd = std::sync::Arc::new(fd);
        let mut subdirs = Vec::new();
        for (name, _) in entries {
            let st = match beneath::stat_at(fd.as_fd(), &name) {
                Ok(st) => st,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => {
                    let mut f = Finding::new(root.join(&at.rel).join(&name), "unchecked");
                    f.error = Some(format!("fstatat: {e}"));
                    walk.findings.push(f);
                    continue;
                }
            };
            walk.entries += 1;
            let changed = after(st.ctime, self.launched);
            if changed {
                let path = root.join(&at.rel).join(&name);
                check_privilege(fd.as_fd(), &name, &st, &path, walk);
            }
            if self.is_workspace && name == ".git" && !at.in_git && !at.rel.as_os_str().is_empty() {
                walk.repos.push(root.join(&at.rel));
            }
            if st.is_dir() {
                subdirs.push(((st.dev, st.ino), name, changed));
            }
        }
        if subdirs.is_empty() {
            return Vec::new();
        }
        let mut work = self.lock();
        subdirs
            .into_iter()
            .filter(|(id, _, _)| work.visited.insert(*id))
            .map(|(_, name, changed)| Pending {
                rel: at.rel.join(&name),
                in_git: at.in_git || name == ".git",
                dir: Dir::At(fd.clone(), name),
                changed,
            })
            .collect()
    }
}

/// The second line against setuid files: on an entry the run changed (its ctime is after the
/// launch: the caller asks), setuid and setgid bits are stripped (on a directory only setuid: setgid there only passes
/// the group on, as `mkdir -m 2775` asks) and reported; file capabilities are reported.
fn check_privilege(dir: BorrowedFd<'_>, name: &OsStr, st: &Stat, path: &Path, walk: &mut Walk) {
    if st.is_symlink() {
        return;
    }
    let strip = if st.is_dir() {
        libc::S_ISUID
    } else {
        libc::S_ISUID | libc::S_ISGID
    };
    let bits = st.mode & strip;
    if bits != 0 {
        let change = if bits & libc::S_ISUID != 0 {
            "setuid"
        } else {
            "setgid"
        };
        let (old, new) = (st.mode & 0o7777, st.mode & 0o7777 & !strip);
        let mut f = Finding::new(path.to_path_buf(), change);
        match beneath::chmod_at(dir, name, new) {
            Ok(()) => {
                f.detail = Some(format!(
                    "mode {old:o} set during the run: stripped to {new:o}"
                ))
            }
            Err(e) => {
                f.detail = Some(format!("mode {old:o} set during the run"));
                f.error = Some(format!("stripping it to {new:o}: {e}"));
            }
        }
        walk.findings.push(f);
    }
    if st.is_file() && beneath::has_xattr_at(dir, name, c"security.capability").unwrap_or(false) {
        let mut f = Finding::new(path.to_path_buf(), "file-capability");
        f.detail = Some(
            "a security.capability attribute set during the run (left in place: `setcap -r` removes it)"
                .into(),
        );
        walk.findings.push(f);
    }
}
