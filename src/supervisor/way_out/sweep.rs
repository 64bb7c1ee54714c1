//! The persistence sweep and the second line against setuid files. A persistence path that
//! does not exist at start cannot be mounted read-only, so the supervisor records every one
//! before the run and compares after it: anything created or changed is moved to a quarantine
//! directory outside the workspace and reported, and the run says so in its exit code. The
//! same pass walks everything the sandbox could write and strips the setuid/setgid bits the
//! run set (seccomp refuses them first; this is what remains if that line ever fails). Last, what
//! would make the host's git show something other than what is there (replace refs, grafts,
//! shallow, `info/attributes`, `info/exclude`, sparse-checkout patterns, index flags and caches)
//! is judged against its launch record (`git_view`).
//!
//! Nothing here follows a link the agent may have planted: every path is resolved beneath the
//! workspace (or a writable root) from a directory descriptor with `sys::beneath`, a link where
//! a protected path or one of its ancestors should be is the finding itself (the link is moved,
//! never its target), and files are opened `O_NOFOLLOW | O_NONBLOCK` and hashed only when
//! `fstat` on the descriptor says they are regular, and only so far.

use crate::audit::owed::bytes;
use crate::profile::Profile;
use crate::sandbox::plan::SandboxPlan;
use crate::sandbox::plan::protected::{is_git_config, protected_paths_after, relative_beneath};
use crate::sys::beneath::{self, DIR_LISTING, DIR_LOOKUP, FILE_READING};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

mod carry;
mod git_entries;
mod git_rules;
mod git_view;
mod quarantine;
mod state;
mod walk;

pub use carry::{Layer, prepare_layers};
use git_entries::{GitEntry, entry_missing, git_entry, launch_file, put_back};
use git_rules::{inert_config_change, stays_below};
pub(crate) use quarantine::Quarantine;
use state::{since_epoch, state_of};
use walk::{walk_writable, writable_roots};

/// Exit code of a run whose sweep found tampering (whatever the command's own code was).
pub const EXIT_TAMPERING: i32 = 123;

/// Kernel timestamps come from a coarse clock (a tick behind the real time): an entry changed
/// right after the launch may carry a ctime a few milliseconds before it.
const LAUNCH_MARGIN: Duration = Duration::from_millis(20);
/// How much of a file is hashed; the size (and, beyond this, the ctime) stands for the rest,
/// so a huge file planted at a protected name cannot stall the end of the run.
const HASH_LIMIT: u64 = 4 << 20;
/// A repository's config is small; more than this is not read (and not inert).
const GIT_CONFIG_READ_LIMIT: u64 = 1 << 20;
const MAX_ENTRIES: usize = 10_000;

/// What the walk over the writable roots found.
#[derive(Debug, Default)]
struct Walk {
    /// Directories below the workspace with a `.git` entry (at any depth, not inside a `.git`).
    repos: Vec<PathBuf>,
    findings: Vec<Finding>,
    entries: u64,
}

/// A file as it was at launch, to be put back.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct LaunchFile {
    text: String,
    mode: u32,
    uid: u32,
    gid: u32,
}

/// What a protected path was (paths relative to the workspace).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
enum State {
    Absent,
    /// Every entry at and below it with its content hash (`""` is the path itself).
    Entries(#[serde(with = "bytes::path_map")] BTreeMap<PathBuf, String>),
    /// A link stands where the path or one of its ancestors should be: the link and its
    /// target, which is never followed.
    Link {
        #[serde(with = "bytes::path")]
        link: PathBuf,
        #[serde(with = "bytes::os")]
        target: OsString,
    },
    /// It could not be looked at (with what `fstatat` said about the entry, so that a change
    /// still shows).
    Unreadable(String),
}

/// What the sweep compares the end with: the persistence paths, the repositories' `.git` and
/// configs as they were at launch. It serialises whole (paths as their exact bytes) into the
/// run directory's marker of work owed (`supervisor::way_out::recover`), so that a repair after
/// the supervisor's death sweeps with the same launch state.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Snapshot {
    /// Relative to the workspace; protected paths outside it are never recorded nor moved.
    #[serde(with = "bytes::path_map")]
    paths: BTreeMap<PathBuf, State>,
    /// What the `.git` of each repository found at launch was (relative to the workspace).
    #[serde(with = "bytes::path_map")]
    git: BTreeMap<PathBuf, GitEntry>,
    /// The repositories' own configs as they were at launch (writable inside; see
    /// [`is_git_config`]).
    #[serde(with = "bytes::path_map")]
    configs: BTreeMap<PathBuf, LaunchFile>,
    /// The persistence paths bound read-only inside, with the identity of every directory from
    /// the workspace down to them: while that chain is the same after the run, the path was
    /// read-only to the run all along, and a change to it is the host's.
    #[serde(with = "bytes::path_map")]
    bound: BTreeMap<PathBuf, Vec<(u64, u64)>>,
    /// The launch, less the margin, since the epoch: a setuid bit on an entry changed after
    /// this is the run's.
    launched: Duration,
    /// What decides what the host's git shows (replace refs, grafts, shallow, attributes,
    /// exclude, sparse-checkout, index flags) in every git directory found at launch; `None` in
    /// a marker written before it was recorded (then it is not judged).
    #[serde(default)]
    views: Option<git_view::GitViews>,
    /// The repositories' `.git` seen through a layer during the run: what the run wrote there
    /// waits in the layer, carried back by the sweep (first, before anything is judged).
    #[serde(default)]
    layers: Vec<Layer>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    #[serde(serialize_with = "crate::audit::text::serialize")]
    pub path: PathBuf,
    /// `created`, `changed` or `removed` (persistence paths); `symlink` (a link where a
    /// persistence path or one of its ancestors should be: the link was moved, never its
    /// target); `setuid`, `setgid` (bits the run set, stripped); `file-capability` (an
    /// executable with file capabilities, reported and left); `unchecked` (something the sweep
    /// could not look at); `replace-ref`, `git-view`, `index-flags` (what would make the host's
    /// git show something other than what is there: see `git_view`).
    pub change: &'static str,
    /// Where it was moved (created and changed paths, links).
    #[serde(serialize_with = "crate::audit::text::serialize_opt")]
    pub quarantined_to: Option<PathBuf>,
    pub error: Option<String>,
    /// What was found and done, in words (a link's target, the mode before and after).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// What inside the file was acted on (at most 100): the replace refs taken out, the index
    /// entries whose flags were cleared (`assume-valid PATH`, `skip-worktree PATH`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub entries: Vec<String>,
}

impl Finding {
    pub(crate) fn new(path: PathBuf, change: &'static str) -> Finding {
        Finding {
            path,
            change,
            quarantined_to: None,
            error: None,
            detail: None,
            entries: Vec::new(),
        }
    }
}

/// The (device, inode) of `root` and of every directory on the way to `rel`'s parent, looked
/// up one component at a time, never through a link.
fn ancestry(root: BorrowedFd<'_>, rel: &Path) -> Option<Vec<(u64, u64)>> {
    let st = beneath::stat_fd(root).ok()?;
    let mut ids = vec![(st.dev, st.ino)];
    let mut dir: Option<OwnedFd> = None;
    for component in rel.parent()?.components() {
        let Component::Normal(name) = component else {
            return None;
        };
        let at = dir.as_ref().map_or(root, AsFd::as_fd);
        let st = beneath::stat_at(at, name).ok()?;
        if !st.is_dir() {
            return None;
        }
        ids.push((st.dev, st.ino));
        dir = Some(beneath::open_beneath(at, Path::new(name), DIR_LOOKUP, 0).ok()?);
    }
    Some(ids)
}

/// What the sweep found: what the run left (each a finding) and what the host changed
/// meanwhile at paths that were read-only to the run (kept, never quarantined).
#[derive(Debug, Default)]
pub struct Sweep {
    pub findings: Vec<Finding>,
    pub host_edits: Vec<PathBuf>,
    /// The repository configs (and the files of git's view) put back as they were at launch.
    pub restored: Vec<PathBuf>,
    /// What the sweep did that is not a finding, in words (see `git_view`).
    pub notes: Vec<String>,
}

/// What the sweep needs of the profile and the plan, taken at launch with the [`Snapshot`] and
/// recorded with it: the same scope at a normal end and in a repair after a kill.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SweepScope {
    #[serde(with = "bytes::path")]
    pub workspace: PathBuf,
    #[serde(with = "bytes::path")]
    pub home: PathBuf,
    /// The repositories the launch found (absolute).
    #[serde(with = "bytes::paths")]
    pub repositories: Vec<PathBuf>,
    /// The profile's protected names (`filesystem.protected`).
    pub protected: Vec<String>,
    /// Everything the sandbox could write on the host (see [`writable_roots`]).
    #[serde(with = "bytes::paths")]
    pub writable_roots: Vec<PathBuf>,
}

impl SweepScope {
    pub fn of(profile: &Profile, plan: &SandboxPlan) -> SweepScope {
        SweepScope {
            workspace: plan.workspace.clone(),
            home: plan.home.clone(),
            repositories: plan.repositories.clone(),
            protected: profile.filesystem.protected.clone(),
            writable_roots: writable_roots(plan),
        }
    }
}

/// Directory listings beneath the workspace, each taken once: most persistence names are
/// absent, and one listing of their parent says so for all of them at once.
pub(crate) struct Listings<'a> {
    root: BorrowedFd<'a>,
    /// Directory (relative) → its entries and their types, `None` when it cannot be listed.
    cache: HashMap<PathBuf, Option<HashMap<OsString, u8>>>,
}

impl<'a> Listings<'a> {
    pub(crate) fn new(root: BorrowedFd<'a>) -> Listings<'a> {
        Listings {
            root,
            cache: HashMap::new(),
        }
    }

    fn listing(&mut self, dir: &Path) -> Option<&HashMap<OsString, u8>> {
        let root = self.root;
        self.cache
            .entry(dir.to_path_buf())
            .or_insert_with(|| {
                let at = if dir.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    dir
                };
                beneath::open_beneath(root, at, DIR_LISTING, 0)
                    .and_then(|fd| beneath::list_dir(fd.as_fd()))
                    .ok()
                    .map(|entries| entries.into_iter().collect())
            })
            .as_ref()
    }

    /// False only when `rel` is certainly absent: a component is missing from the listing of a
    /// real directory. A link, an unknown entry type or a directory that cannot be listed is
    /// left for a closer look (`true`).
    pub(crate) fn may_exist(&mut self, rel: &Path) -> bool {
        let mut dir = PathBuf::new();
        for component in rel.components() {
            let Component::Normal(name) = component else {
                return true;
            };
            let Some(listing) = self.listing(&dir) else {
                return true;
            };
            match listing.get(name) {
                None => return false,
                Some(&libc::DT_DIR) => dir.push(name),
                Some(_) => return true,
            }
        }
        true
    }
}

impl Snapshot {
    /// Records the plan's persistence paths as they are now, and the launch time.
    pub fn take(plan: &SandboxPlan) -> Snapshot {
        let launched = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .saturating_sub(LAUNCH_MARGIN);
        let root = beneath::open_root(&plan.workspace, DIR_LOOKUP);
        let mut listings = root.as_ref().ok().map(|r| Listings::new(r.as_fd()));
        // The plan's protected paths are lexical: below the workspace is a prefix.
        let paths: BTreeMap<PathBuf, State> = plan
            .protected_paths
            .iter()
            .filter_map(|p| p.strip_prefix(&plan.workspace).ok())
            .filter(|rel| !rel.as_os_str().is_empty())
            .map(|rel| {
                let rel = rel.to_path_buf();
                let absent = listings.as_mut().is_some_and(|l| !l.may_exist(&rel));
                let state = match &root {
                    Ok(_) if absent => State::Absent,
                    Ok(root) => state_of(root.as_fd(), &rel),
                    Err(e) => State::Unreadable(format!("the workspace: {e}")),
                };
                (rel, state)
            })
            .collect();
        drop(listings);
        let git = plan
            .repositories
            .iter()
            .filter_map(|p| relative_beneath(&plan.workspace, p))
            .map(|rel| {
                let entry = match &root {
                    Ok(root) => git_entry(root.as_fd(), &rel),
                    Err(e) => GitEntry::Other(format!("the workspace: {e}")),
                };
                (rel, entry)
            })
            .collect();
        let configs = match &root {
            Ok(root) => paths
                .keys()
                .filter(|rel| is_git_config(rel))
                .filter_map(|rel| {
                    launch_file(root.as_fd(), rel, GIT_CONFIG_READ_LIMIT).map(|f| (rel.clone(), f))
                })
                .collect(),
            Err(_) => BTreeMap::new(),
        };
        let bound = match &root {
            Ok(root) => plan
                .mounts
                .iter()
                .filter_map(|m| match m {
                    crate::sandbox::plan::MountOp::ReadOnlyInPlace { path } => {
                        relative_beneath(&plan.workspace, path)
                    }
                    _ => None,
                })
                .filter(|rel| paths.contains_key(rel))
                .filter_map(|rel| ancestry(root.as_fd(), &rel).map(|ids| (rel, ids)))
                .collect(),
            Err(_) => BTreeMap::new(),
        };
        let views = root.as_ref().ok().map(|root| {
            let repos: Vec<PathBuf> = plan
                .repositories
                .iter()
                .filter_map(|p| relative_beneath(&plan.workspace, p))
                .collect();
            git_view::GitViews::take(root.as_fd(), &plan.workspace, &repos)
        });
        let layers = plan
            .mounts
            .iter()
            .filter_map(|m| match m {
                crate::sandbox::plan::MountOp::GitLayer { git, layer, .. } => Some(Layer {
                    git: relative_beneath(&plan.workspace, git)?,
                    dir: layer.clone(),
                }),
                _ => None,
            })
            .collect();
        Snapshot {
            paths,
            git,
            configs,
            bound,
            launched,
            views,
            layers,
        }
    }

    /// The persistence paths absent at launch whose mere creation is a finding (not those
    /// judged by content: `.gitmodules` and what git writes in a git directory, except a
    /// repository's `commondir` and `config.worktree`), for the watcher.
    pub fn watch_targets(&self) -> Vec<PathBuf> {
        self.paths
            .iter()
            .filter(|(_, state)| **state == State::Absent)
            .map(|(rel, _)| rel)
            .filter(|rel| {
                let in_git = rel.components().any(|c| c.as_os_str() == ".git");
                let name = rel.file_name().unwrap_or_default();
                let repo_level = rel
                    .parent()
                    .and_then(Path::file_name)
                    .is_some_and(|p| p == ".git");
                name != ".gitmodules"
                    && (!in_git || repo_level && (name == "commondir" || name == "config.worktree"))
            })
            .cloned()
            .collect()
    }

    /// [`Snapshot::sweep_in`] with the scope of `profile` and `plan`.
    pub fn sweep(&self, profile: &Profile, plan: &SandboxPlan, quarantine: &Path) -> Sweep {
        self.sweep_in(&SweepScope::of(profile, plan), quarantine)
    }

    /// One walk over everything the sandbox could write (stripping setuid/setgid bits the run
    /// set and finding every nested repository), then a comparison of the paths recorded and
    /// those of the repositories found, quarantining what was created or changed.
    pub fn sweep_in(&self, scope: &SweepScope, quarantine: &Path) -> Sweep {
        let workspace = &scope.workspace;
        // First what the run wrote in the repositories' `.git`, kept in their layers until now:
        // what is inert is carried, so that everything after judges the workspace as it is.
        let mut carried = carry::Carried::default();
        if !self.layers.is_empty() {
            let mut quarantine = Quarantine::new(quarantine);
            match beneath::open_root(workspace, DIR_LOOKUP) {
                Ok(root) => {
                    carried = carry::carry_layers(
                        root.as_fd(),
                        workspace,
                        &self.layers,
                        &self.configs,
                        &scope.protected,
                        // The launch itself, not less the margin: a host commit just before
                        // the launch (`git commit && stepproof-run …`) is not a change the
                        // host made during the run.
                        self.launched + LAUNCH_MARGIN,
                        &mut quarantine,
                    );
                }
                Err(e) => {
                    let mut f = Finding::new(workspace.clone(), "unchecked");
                    f.error = Some(format!(
                        "opening the workspace {} to carry the run's git layers: {e}",
                        workspace.display()
                    ));
                    carried.findings.push(f);
                }
            }
            tracing::debug!("sweep: git layers carried");
        }
        let walk = walk_writable(scope, self.launched);
        tracing::debug!("sweep: writable roots walked");
        let mut findings = carried.findings;
        findings.extend(walk.findings);
        let mut notes = Vec::new();
        // The launch's repositories had their fixed names expanded then (the snapshot's
        // keys); only what depends on the tree now is expanded again for them.
        let launch_repos: Vec<&Path> = scope
            .repositories
            .iter()
            .filter_map(|p| p.strip_prefix(workspace).ok())
            .collect();
        let expanded_before =
            |repo: &Path| repo.as_os_str().is_empty() || launch_repos.contains(&repo);
        let mut paths: Vec<PathBuf> = protected_paths_after(
            &scope.protected,
            workspace,
            &scope.home,
            &walk.repos,
            &expanded_before,
            &mut notes,
        )
        .iter()
        .filter_map(|p| p.strip_prefix(workspace).ok())
        .filter(|rel| !rel.as_os_str().is_empty())
        .map(Path::to_path_buf)
        .collect();
        paths.extend(self.paths.keys().cloned());
        paths.sort();
        paths.dedup();
        tracing::debug!(paths = paths.len(), "sweep: protected paths expanded");
        let root = match beneath::open_root(workspace, DIR_LOOKUP) {
            Ok(root) => root,
            Err(e) => {
                let mut f = Finding::new(workspace.clone(), "unchecked");
                f.error = Some(format!(
                    "opening the workspace {}: {e}",
                    workspace.display()
                ));
                findings.push(f);
                return Sweep {
                    findings,
                    ..Sweep::default()
                };
            }
        };
        let mut host_edits = Vec::new();
        let mut restored = Vec::new();
        let mut quarantine = Quarantine::new(quarantine);
        // Repositories below the workspace, longest first (the innermost holds a path).
        let mut nested: Vec<PathBuf> = walk
            .repos
            .iter()
            .filter_map(|p| relative_beneath(workspace, p))
            .filter(|p| !p.as_os_str().is_empty())
            .collect();
        nested.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
        // Taken before anything moves; a path whose parent changed since is looked at directly
        // (listings only ever say "absent" for what was absent when they were taken, and
        // nothing is created in the workspace by the sweep except by putting a config back).
        let mut listings = Listings::new(root.as_fd());
        // Judged before anything moves: a gitfile is ordinary only while what it names is.
        let git_verdicts = self.judge_git_entries(&walk.repos, workspace, root.as_fd());
        tracing::debug!("sweep: git entries judged");
        // A path inside another one that changed is reported with its outermost changed parent
        // (or the link in its way).
        let mut judged: Vec<PathBuf> = Vec::new();
        for rel in paths {
            if judged.iter().any(|j| rel.starts_with(j)) {
                continue;
            }
            let before = self.paths.get(&rel).cloned().unwrap_or(State::Absent);
            let after = if listings.may_exist(&rel) {
                state_of(root.as_fd(), &rel)
            } else {
                State::Absent
            };
            if after == State::Absent
                && let Some(launch) = self.configs.get(&rel)
                && entry_missing(root.as_fd(), &rel)
            {
                // A repository's config that is gone (removed by the run, or moved to the
                // quarantine by an end that was killed before it put the launch version back):
                // the launch version is put back, so that the host's git finds the repository
                // it had. A repository that is gone altogether is judged as before.
                match put_back(root.as_fd(), &rel, launch) {
                    Ok(()) => {
                        restored.push(workspace.join(&rel));
                        let mut finding = Finding::new(workspace.join(&rel), "removed");
                        finding.detail = Some(
                            "the repository's config was gone: the launch version is back in place"
                                .into(),
                        );
                        judged.push(rel.clone());
                        findings.push(finding);
                        continue;
                    }
                    Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => {}
                    Err(e) => {
                        let mut finding = Finding::new(workspace.join(&rel), "removed");
                        finding.error = Some(format!(
                            "putting the launch version of {} back: {e}",
                            workspace.join(&rel).display()
                        ));
                        judged.push(rel.clone());
                        findings.push(finding);
                        continue;
                    }
                }
            }
            if before == after || self.checked_out_copy(&rel, &before, &after, &nested) {
                continue;
            }
            if self
                .bound
                .get(&rel)
                .is_some_and(|launch| ancestry(root.as_fd(), &rel).as_ref() == Some(launch))
            {
                // Read-only to the run from start to end: the host's editor, not the agent.
                host_edits.push(workspace.join(&rel));
                judged.push(rel.clone());
                continue;
            }
            if let (State::Entries(_), Some(launch)) = (&after, self.configs.get(&rel)) {
                // A repository's own config, written by git during the run: what it added is
                // judged; when that can run code, the launch version is put back.
                let git_dir = rel.parent().unwrap_or(Path::new("")).to_path_buf();
                let inside = |value: &str| !value.is_empty() && stays_below(&git_dir, value);
                let now = launch_file(root.as_fd(), &rel, GIT_CONFIG_READ_LIMIT);
                if now.is_some_and(|now| inert_config_change(&launch.text, &now.text, &inside)) {
                    continue;
                }
                let mut finding = Finding::new(workspace.join(&rel), "changed");
                if quarantine.take_for(root.as_fd(), &rel, &mut finding) {
                    finding.detail = Some(match put_back(root.as_fd(), &rel, launch) {
                        Ok(()) => {
                            restored.push(workspace.join(&rel));
                            "keys that can run code were added: the launch version is back in place"
                                .into()
                        }
                        Err(e) => format!(
                            "keys that can run code were added; putting the launch version back failed: {e}"
                        ),
                    });
                }
                judged.push(rel.clone());
                findings.push(finding);
                continue;
            }
            let (subject, change, detail) = match (&before, &after) {
                (_, State::Link { link, target }) => {
                    if judged.iter().any(|j| link.starts_with(j)) {
                        continue;
                    }
                    let detail = format!(
                        "a symlink to {} at or above the persistence path {}: moved as a link, its target never touched",
                        target.to_string_lossy(),
                        rel.display()
                    );
                    (link.clone(), "symlink", Some(detail))
                }
                (State::Absent, _) => (rel.clone(), "created", None),
                (_, State::Absent) => (rel.clone(), "removed", None),
                (_, State::Unreadable(why)) => {
                    (rel.clone(), "changed", Some(format!("unreadable: {why}")))
                }
                _ => (rel.clone(), "changed", None),
            };
            let mut finding = Finding::new(workspace.join(&subject), change);
            finding.detail = detail;
            if after != State::Absent {
                quarantine.take_for(root.as_fd(), &subject, &mut finding);
            }
            judged.push(subject);
            findings.push(finding);
        }
        for (repo, entry, change, detail) in git_verdicts {
            // Moved already (a link at `.git` is also a link above its hooks).
            if git_entry(root.as_fd(), &repo) != entry {
                continue;
            }
            let rel = repo.join(".git");
            let mut finding = Finding::new(workspace.join(&rel), change);
            finding.detail = Some(detail);
            quarantine.take_for(root.as_fd(), &rel, &mut finding);
            findings.push(finding);
        }
        // Last: the configs are back as they were, the redirecting `.git`s moved.
        let mut sweep_notes = Vec::new();
        if let Some(views) = &self.views {
            let mut repos: Vec<PathBuf> = walk
                .repos
                .iter()
                .filter_map(|p| relative_beneath(workspace, p))
                .collect();
            repos.push(PathBuf::new());
            repos.extend(self.git.keys().cloned());
            let judged = views.judge(
                root.as_fd(),
                workspace,
                &repos,
                self.launched,
                &git_view::HostConfig::of(&scope.home),
                &mut quarantine,
            );
            findings.extend(judged.findings);
            restored.extend(judged.restored);
            sweep_notes = judged.notes;
            tracing::debug!("sweep: git views judged");
        }
        let mut all_notes = carried.notes;
        all_notes.extend(sweep_notes);
        Sweep {
            findings,
            host_edits,
            restored,
            notes: all_notes,
        }
    }
}

/// Up to `limit` bytes of a regular file (a link, FIFO or device is refused, never opened for
/// reading in a way that could block).
fn read_regular(dir: BorrowedFd<'_>, name: &OsStr, limit: u64) -> io::Result<Vec<u8>> {
    let fd = beneath::open_beneath(dir, Path::new(name), FILE_READING, 0)?;
    if !beneath::stat_fd(fd.as_fd())?.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    let mut bytes = Vec::new();
    fs::File::from(fd).take(limit).read_to_end(&mut bytes)?;
    Ok(bytes)
}

fn after(ctime: (i64, i64), launched: Duration) -> bool {
    since_epoch(ctime).is_some_and(|t| t >= launched)
}

#[cfg(test)]
mod tests;
