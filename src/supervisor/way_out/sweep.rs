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
use crate::sys::beneath::{self, DIR_LISTING, DIR_LOOKUP, FILE_READING, Stat};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

mod carry;
mod git_view;

pub use carry::{Layer, prepare_layers};

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

/// A file as it was at launch, to be put back.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct LaunchFile {
    text: String,
    mode: u32,
    uid: u32,
    gid: u32,
}

/// `rel` beneath `root` when it is a regular file of at most `limit` bytes in UTF-8.
fn launch_file(root: BorrowedFd<'_>, rel: &Path, limit: u64) -> Option<LaunchFile> {
    let parent = beneath::open_beneath(root, rel.parent()?, DIR_LOOKUP, 0).ok()?;
    let name = rel.file_name()?;
    let fd = beneath::open_beneath(parent.as_fd(), Path::new(name), FILE_READING, 0).ok()?;
    let st = beneath::stat_fd(fd.as_fd()).ok()?;
    if !st.is_file() || st.size > limit {
        return None;
    }
    let mut text = String::new();
    fs::File::from(fd)
        .take(limit)
        .read_to_string(&mut text)
        .ok()?;
    Some(LaunchFile {
        text,
        mode: st.mode & 0o7777,
        uid: st.uid,
        gid: st.gid,
    })
}

/// Whether `rel`'s directory is there (never through a link) and holds nothing at its name.
fn entry_missing(root: BorrowedFd<'_>, rel: &Path) -> bool {
    let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
        return false;
    };
    let Ok(dir) = beneath::open_beneath(root, parent, DIR_LOOKUP, 0) else {
        return false;
    };
    matches!(beneath::stat_at(dir.as_fd(), name), Err(e) if e.raw_os_error() == Some(libc::ENOENT))
}

/// Writes `file` at `rel` beneath `root` (where nothing is now), as the owner it had.
fn put_back(root: BorrowedFd<'_>, rel: &Path, file: &LaunchFile) -> io::Result<()> {
    let name = rel
        .file_name()
        .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
    let parent = beneath::open_beneath(root, rel.parent().unwrap_or(Path::new("")), DIR_LOOKUP, 0)?;
    // Whole or not at all: a supervisor killed part way leaves the name absent (a repair puts
    // it back), never a file cut short.
    git_view::write_whole(
        parent.as_fd(),
        name,
        file.text.as_bytes(),
        (file.mode & 0o777, file.uid, file.gid),
        false,
    )
}

/// What a repository's `.git` is. A gitfile's content is its redirect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
enum GitEntry {
    Absent,
    Dir,
    File(String),
    Link(#[serde(with = "bytes::os")] OsString),
    /// Anything else, or what could not be looked at (with why).
    Other(String),
}

/// A gitfile is small; more than this is not a gitfile git would read as one.
const GITFILE_READ_LIMIT: u64 = 4096;

/// `.git` of the repository `repo` (relative to the workspace `root`), never through a link.
fn git_entry(root: BorrowedFd<'_>, repo: &Path) -> GitEntry {
    let dir = if repo.as_os_str().is_empty() {
        beneath::open_beneath(root, Path::new("."), DIR_LOOKUP, 0)
    } else {
        beneath::open_beneath(root, repo, DIR_LOOKUP, 0)
    };
    let dir = match dir {
        Ok(dir) => dir,
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => {
            return GitEntry::Absent;
        }
        Err(e) => return GitEntry::Other(format!("{}: {e}", repo.display())),
    };
    let name = OsStr::new(".git");
    match beneath::stat_at(dir.as_fd(), name) {
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => GitEntry::Absent,
        Err(e) => GitEntry::Other(e.to_string()),
        Ok(st) if st.is_dir() => GitEntry::Dir,
        Ok(st) if st.is_symlink() => {
            GitEntry::Link(beneath::read_link_at(dir.as_fd(), name).unwrap_or_default())
        }
        Ok(st) if st.is_file() => match read_regular(dir.as_fd(), name, GITFILE_READ_LIMIT + 1) {
            Ok(bytes) if bytes.len() as u64 <= GITFILE_READ_LIMIT => {
                GitEntry::File(String::from_utf8_lossy(&bytes).into_owned())
            }
            Ok(_) => GitEntry::Other("a .git file larger than a gitfile".into()),
            Err(e) => GitEntry::Other(e.to_string()),
        },
        Ok(st) => GitEntry::Other(format!("a .git of mode {:o}", st.mode)),
    }
}

/// Whether a gitfile written during the run is what git itself writes: `gitdir:` naming a
/// submodule's or a linked worktree's directory inside a repository of the workspace
/// (`…/.git/modules/…`, `…/.git/worktrees/…`, whose config, hooks and `commondir` the sweep
/// judges as persistence paths). Anything else redirects the host's git.
/// The git directory a gitfile names, relative to the workspace, when it is one git itself
/// makes: inside a repository's `.git/modules/…` (a submodule) or `.git/worktrees/…` (a linked
/// worktree). `None` for anything else, which redirects the host's git.
fn gitfile_target(workspace: &Path, repo: &Path, content: &str) -> Option<PathBuf> {
    let target = content.trim_end().strip_prefix("gitdir:").map(str::trim)?;
    if target.is_empty() || target.contains('\n') {
        return None;
    }
    let resolved = if Path::new(target).is_absolute() {
        PathBuf::from(target)
    } else {
        workspace.join(repo).join(target)
    };
    let rel = relative_beneath(workspace, &resolved)?;
    let parts: Vec<&OsStr> = rel.iter().collect();
    let ordinary = parts
        .windows(3)
        .any(|w| w[0] == ".git" && (w[1] == "modules" || w[1] == "worktrees") && !w[2].is_empty());
    ordinary.then_some(rel)
}

/// What in a git directory decides what git runs (and where its common part is).
const GIT_DIR_PERSISTENCE: &[&str] = &["config", "config.worktree", "commondir", "hooks"];

/// Keys `git init` and ordinary work write to a repository's config; anything else (fsmonitor,
/// hooksPath, sshCommand, pagers, editors, `!` aliases, filters, credential helpers, includes, …)
/// can run code and makes a new config a finding.
const INERT_GIT_CONFIG_KEYS: &[&str] = &[
    "core.repositoryformatversion",
    "core.filemode",
    "core.bare",
    "core.logallrefupdates",
    "core.ignorecase",
    "core.precomposeunicode",
    "core.symlinks",
    "extensions.objectformat",
    "init.defaultbranch",
    "user.name",
    "user.email",
];

/// Keys of the subsections `git clone` and `git submodule` write (`[remote "origin"]`,
/// `[branch "main"]`, `[submodule "lib"]`): where to fetch from and what to track. Not
/// `uploadpack`, `receivepack`, `vcs`, `proxy` or `submodule.*.update` (which can name a command).
const INERT_GIT_SUBSECTION_KEYS: &[&str] = &[
    "remote.url",
    "remote.fetch",
    "remote.pushurl",
    "remote.tagopt",
    "branch.remote",
    "branch.merge",
    "branch.rebase",
    "submodule.url",
    "submodule.active",
    "submodule.branch",
];

/// One `section[.subsection].key = value` of a git config file.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ConfigEntry {
    section: String,
    subsection: Option<String>,
    key: String,
    value: String,
}

/// The entries of a git config file, or `None` when a line is anything but a plain header
/// (`[section]`, `[section "sub"]`), a `key = value` or a comment: what is not understood is
/// never inert (`[core] key = v` on one line, continuation lines, …).
fn git_config_entries(text: &str) -> Option<Vec<ConfigEntry>> {
    let mut entries = Vec::new();
    let mut section: Option<(String, Option<String>)> = None;
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if line.ends_with('\\') {
            return None;
        }
        if let Some(header) = line.strip_prefix('[') {
            let header = header.strip_suffix(']')?;
            let (name, sub) = match header.split_once([' ', '\t', '.']) {
                Some((name, sub)) => (name, Some(sub.trim().to_string())),
                None => (header.trim(), None),
            };
            if sub
                .as_ref()
                .is_some_and(|s| s.is_empty() || s.contains(['\\', '\n']))
            {
                return None;
            }
            section = Some((name.to_ascii_lowercase(), sub));
            continue;
        }
        let (name, sub) = section.clone()?;
        let (key, value) = match line.split_once('=') {
            Some((key, value)) => (key.trim().to_ascii_lowercase(), value.trim().to_string()),
            None => (line.to_ascii_lowercase(), String::new()),
        };
        entries.push(ConfigEntry {
            section: name,
            subsection: sub,
            key,
            value,
        });
    }
    Some(entries)
}

/// A key `git init`, `git clone` or `git submodule` writes. `core.worktree` (a submodule's
/// config names its checkout) is inert only when `worktree_inside` accepts its value: the
/// host's `git checkout` writes wherever it points.
fn inert_entry(entry: &ConfigEntry, worktree_inside: &dyn Fn(&str) -> bool) -> bool {
    let full = format!("{}.{}", entry.section, entry.key);
    if entry.subsection.is_some() {
        INERT_GIT_SUBSECTION_KEYS.contains(&full.as_str())
    } else if full == "core.worktree" {
        worktree_inside(entry.value.trim_matches('"'))
    } else {
        INERT_GIT_CONFIG_KEYS.contains(&full.as_str())
    }
}

/// A repository's `config` with only inert keys.
fn inert_git_config(text: &str, worktree_inside: &dyn Fn(&str) -> bool) -> bool {
    git_config_entries(text)
        .is_some_and(|entries| entries.iter().all(|e| inert_entry(e, worktree_inside)))
}

/// Whether every entry `after` has that `before` did not is inert (entries removed are: less
/// configuration runs less).
fn inert_config_change(before: &str, after: &str, worktree_inside: &dyn Fn(&str) -> bool) -> bool {
    let (Some(mut old), Some(new)) = (git_config_entries(before), git_config_entries(after)) else {
        return false;
    };
    new.iter()
        .all(|entry| match old.iter().position(|o| o == entry) {
            Some(i) => {
                old.swap_remove(i);
                true
            }
            None => inert_entry(entry, worktree_inside),
        })
}

/// A `.gitmodules` as `git submodule add` writes it: each submodule's path, URL and tracking
/// options, with no URL that starts an option or names a transport helper (`ext::…`) and no
/// `update` that is a command.
fn inert_gitmodules(text: &str) -> bool {
    let mut in_submodule = false;
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(header) = line.strip_prefix('[') {
            let Some(header) = header.strip_suffix(']') else {
                return false;
            };
            in_submodule = header.split_once([' ', '\t']).is_some_and(|(name, sub)| {
                name.eq_ignore_ascii_case("submodule") && !sub.trim().is_empty()
            });
            if !in_submodule {
                return false;
            }
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            return false;
        };
        let value = value.trim().trim_matches('"');
        let inert = in_submodule
            && match key.trim().to_ascii_lowercase().as_str() {
                "path" | "branch" | "shallow" | "ignore" | "fetchrecursesubmodules" => true,
                "url" => !value.starts_with('-') && !value.contains("::"),
                "update" => matches!(value, "checkout" | "rebase" | "merge" | "none"),
                _ => false,
            };
        if !inert {
            return false;
        }
    }
    true
}

/// Whether `value`, a path relative to `base` (itself relative to the workspace), names
/// something at or below the workspace, lexically (`..` never climbs above it; absolute paths
/// are not).
fn stays_below(base: &Path, value: &str) -> bool {
    let mut depth = base
        .components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .count();
    for component in Path::new(value).components() {
        match component {
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::ParentDir if depth > 0 => depth -= 1,
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => return false,
        }
    }
    true
}

/// A fresh repository's `hooks` (only regular `*.sample` files, which git never runs) and
/// inert `config` are what `git init` makes: not persistence. They count as absent. `dir` is
/// the directory holding `rel`'s last component.
fn inert_git_path(dir: BorrowedFd<'_>, rel: &Path, st: &Stat) -> bool {
    if rel.file_name() == Some(OsStr::new(".gitmodules")) {
        return st.is_file()
            && read_regular(dir, OsStr::new(".gitmodules"), GIT_CONFIG_READ_LIMIT + 1).is_ok_and(
                |bytes| {
                    (bytes.len() as u64) <= GIT_CONFIG_READ_LIMIT
                        && std::str::from_utf8(&bytes).is_ok_and(inert_gitmodules)
                },
            );
    }
    let grandparent = rel
        .parent()
        .and_then(Path::parent)
        .and_then(Path::file_name);
    let in_linked_worktree = grandparent.is_some_and(|m| m == "worktrees");
    let in_git_dir = rel.parent().and_then(Path::file_name).is_some_and(|n| {
        n == ".git" || grandparent.is_some_and(|m| m == "modules") || in_linked_worktree
    });
    let Some(name) = rel.file_name() else {
        return false;
    };
    if !in_git_dir {
        return false;
    }
    match name.to_str() {
        // What `git worktree add` writes: the common directory is two levels up.
        Some("commondir") if in_linked_worktree && st.is_file() => {
            read_regular(dir, name, 64).is_ok_and(|bytes| bytes.trim_ascii() == b"../..")
        }
        Some("hooks") if st.is_dir() => {
            let Ok(fd) = beneath::open_beneath(dir, Path::new(name), DIR_LISTING, 0) else {
                return false;
            };
            beneath::list_dir(fd.as_fd()).is_ok_and(|entries| {
                entries.iter().all(|(entry, _)| {
                    entry.to_string_lossy().ends_with(".sample")
                        && beneath::stat_at(fd.as_fd(), entry).is_ok_and(|s| s.is_file())
                })
            })
        }
        Some("config") if st.is_file() => {
            // `core.worktree`, relative to this git directory, must stay in the workspace.
            let git_dir = rel.parent().unwrap_or(Path::new(""));
            let worktree_inside = |value: &str| !value.is_empty() && stays_below(git_dir, value);
            read_regular(dir, name, GIT_CONFIG_READ_LIMIT + 1).is_ok_and(|bytes| {
                (bytes.len() as u64) <= GIT_CONFIG_READ_LIMIT
                    && std::str::from_utf8(&bytes)
                        .is_ok_and(|text| inert_git_config(text, &worktree_inside))
            })
        }
        _ => false,
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

fn errno_text(e: &io::Error) -> String {
    e.raw_os_error()
        .map(|n| format!("errno {n}"))
        .unwrap_or_else(|| e.to_string())
}

/// The state of `rel` beneath the workspace `root`, looked at one component at a time, never
/// through a link.
fn state_of(root: BorrowedFd<'_>, rel: &Path) -> State {
    let components: Vec<&OsStr> = rel
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect();
    let Some((last, ancestors)) = components.split_last() else {
        return State::Unreadable("the workspace itself is not a persistence path".into());
    };
    let mut dir: Option<OwnedFd> = None;
    let mut walked = PathBuf::new();
    for (i, name) in components.iter().enumerate() {
        let at = dir.as_ref().map_or(root, AsFd::as_fd);
        walked.push(name);
        let st = match beneath::stat_at(at, name) {
            Ok(st) => st,
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => {
                return State::Absent;
            }
            Err(e) => return State::Unreadable(format!("{}: {e}", walked.display())),
        };
        if st.is_symlink() {
            let target = beneath::read_link_at(at, name).unwrap_or_default();
            return State::Link {
                link: walked,
                target,
            };
        }
        if i == ancestors.len() {
            if inert_git_path(at, rel, &st) {
                return State::Absent;
            }
            let mut entries = BTreeMap::new();
            collect(at, last, &st, Path::new(""), &mut entries);
            return State::Entries(entries);
        }
        if !st.is_dir() {
            return State::Absent;
        }
        match beneath::open_beneath(at, Path::new(name), DIR_LOOKUP, 0) {
            Ok(fd) => dir = Some(fd),
            Err(e) => {
                return State::Unreadable(format!(
                    "{}: {e} (mode {:o}, ctime {:?})",
                    walked.display(),
                    st.mode,
                    st.ctime
                ));
            }
        }
    }
    State::Absent
}

/// Records `name` in `dir` (and everything below it) as `rel` → kind, content hash and mode.
fn collect(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    st: &Stat,
    rel: &Path,
    out: &mut BTreeMap<PathBuf, String>,
) {
    if out.len() >= MAX_ENTRIES {
        return;
    }
    let digest = if st.is_symlink() {
        let target = beneath::read_link_at(dir, name).unwrap_or_default();
        format!("link:{}", target.to_string_lossy())
    } else if st.is_file() {
        file_digest(dir, name, st)
    } else if st.is_dir() {
        "dir".to_string()
    } else {
        "special".to_string()
    };
    out.insert(rel.to_path_buf(), format!("{digest}:{:o}", st.mode));
    if !st.is_dir() {
        return;
    }
    let listing = beneath::open_beneath(dir, Path::new(name), DIR_LISTING, 0)
        .and_then(|fd| beneath::list_dir(fd.as_fd()).map(|entries| (fd, entries)));
    let (fd, mut entries) = match listing {
        Ok(listing) => listing,
        Err(e) => {
            out.insert(
                rel.to_path_buf(),
                format!(
                    "dir-unlistable:{}:{:o}:{:?}",
                    errno_text(&e),
                    st.mode,
                    st.ctime
                ),
            );
            return;
        }
    };
    entries.sort();
    for (entry, _) in entries {
        if let Ok(st) = beneath::stat_at(fd.as_fd(), &entry) {
            collect(fd.as_fd(), &entry, &st, &rel.join(&entry), out);
        }
    }
}

/// The size and the hash of the first `HASH_LIMIT` bytes (beyond that, the ctime too: the
/// sandbox cannot set it back).
fn file_digest(dir: BorrowedFd<'_>, name: &OsStr, st: &Stat) -> String {
    let fd = match beneath::open_beneath(dir, Path::new(name), FILE_READING, 0) {
        Ok(fd) => fd,
        Err(e) => {
            return format!(
                "file-unreadable:{}:{}:{:?}",
                errno_text(&e),
                st.size,
                st.ctime
            );
        }
    };
    match beneath::stat_fd(fd.as_fd()) {
        Ok(now) if now.is_file() => {}
        _ => return "special".into(),
    }
    let mut hasher = Sha256::new();
    let mut reader = fs::File::from(fd).take(HASH_LIMIT);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => hasher.update(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return format!("file-unreadable:{}:{}", errno_text(&e), st.size),
        }
    }
    let hash = hex::encode(hasher.finalize());
    if st.size > HASH_LIMIT {
        format!("file:{}:{:?}:{hash}", st.size, st.ctime)
    } else {
        format!("file:{}:{hash}", st.size)
    }
}

fn since_epoch((secs, nanos): (i64, i64)) -> Option<Duration> {
    Some(Duration::new(
        u64::try_from(secs).ok()?,
        u32::try_from(nanos).ok()?,
    ))
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

    /// A persistence path that appeared in a nested checkout (a linked worktree, a clone of
    /// the workspace) exactly as the workspace's own one was at launch: git checked out what
    /// the host already had, not something the run wrote.
    fn checked_out_copy(
        &self,
        rel: &Path,
        before: &State,
        after: &State,
        nested: &[PathBuf],
    ) -> bool {
        if *before != State::Absent || !matches!(after, State::Entries(_)) {
            return false;
        }
        nested
            .iter()
            .find_map(|repo| rel.strip_prefix(repo).ok())
            .is_some_and(|name| self.paths.get(name) == Some(after))
    }

    /// A new gitfile is ordinary when it names a submodule's or a linked worktree's git
    /// directory in the workspace whose config, hooks and `commondir` are inert or as they
    /// were at launch (at any depth: nested submodules are judged by content too).
    fn ordinary_gitfile(
        &self,
        root: BorrowedFd<'_>,
        workspace: &Path,
        repo: &Path,
        content: &str,
    ) -> bool {
        let Some(git_dir) = gitfile_target(workspace, repo, content) else {
            return false;
        };
        GIT_DIR_PERSISTENCE.iter().all(|name| {
            let rel = git_dir.join(name);
            let now = state_of(root, &rel);
            now == State::Absent || self.paths.get(&rel) == Some(&now)
        })
    }

    /// Every repository's `.git`, those recorded at launch and those the walk found: one that
    /// changed kind (a directory replaced by a gitfile or a link), a link, and a gitfile that
    /// is not what git itself writes are findings, moved to the quarantine. A new directory is
    /// ordinary (its config and hooks are judged as persistence paths).
    fn judge_git_entries(
        &self,
        found: &[PathBuf],
        workspace: &Path,
        root: BorrowedFd<'_>,
    ) -> Vec<(PathBuf, GitEntry, &'static str, String)> {
        let mut repos: Vec<PathBuf> = found
            .iter()
            .filter_map(|p| relative_beneath(workspace, p))
            .collect();
        repos.push(PathBuf::new());
        repos.extend(self.git.keys().cloned());
        repos.sort();
        repos.dedup();
        let mut verdicts = Vec::new();
        for repo in repos {
            let before = self.git.get(&repo).cloned().unwrap_or(GitEntry::Absent);
            let after = git_entry(root, &repo);
            if before == after {
                continue;
            }
            let (change, detail) = match (&before, &after) {
                (_, GitEntry::Absent) | (GitEntry::Absent, GitEntry::Dir) => continue,
                (GitEntry::Absent, GitEntry::File(content))
                    if self.ordinary_gitfile(root, workspace, &repo, content) =>
                {
                    continue;
                }
                (_, GitEntry::Link(target)) => (
                    "symlink",
                    format!(
                        "a .git that is a link to {}: moved as a link, its target never touched",
                        target.to_string_lossy()
                    ),
                ),
                (_, GitEntry::File(content)) => (
                    "redirect",
                    format!(
                        "a gitfile the host's git would follow ({:?}): moved",
                        content.trim_end()
                    ),
                ),
                (_, GitEntry::Dir) => ("changed", "the .git file became a directory: moved".into()),
                (_, GitEntry::Other(what)) => ("changed", format!("the .git is now {what}")),
            };
            verdicts.push((repo, after, change, detail));
        }
        verdicts
    }
}

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

    fn root(&mut self) -> io::Result<BorrowedFd<'_>> {
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
    fn take_for(&mut self, root: BorrowedFd<'_>, rel: &Path, finding: &mut Finding) -> bool {
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
    fn write_in(&mut self, rel: &Path, bytes: &[u8]) -> io::Result<PathBuf> {
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
    fn take_from(&mut self, dir: BorrowedFd<'_>, name: &OsStr, rel: &Path) -> io::Result<PathBuf> {
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
    fn take_from_path(&mut self, path: &Path, rel: &Path) -> io::Result<PathBuf> {
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
fn copy_tree_at(from: BorrowedFd<'_>, name: &OsStr, to: BorrowedFd<'_>) -> io::Result<()> {
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
fn remove_tree_at(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<()> {
    let st = beneath::stat_at(dir, name)?;
    if st.is_dir() {
        let sub = beneath::open_beneath(dir, Path::new(name), DIR_LISTING, 0)?;
        for (entry, _) in beneath::list_dir(sub.as_fd())? {
            remove_tree_at(sub.as_fd(), &entry)?;
        }
    }
    beneath::unlink_at(dir, name, st.is_dir())
}

/// What the walk over the writable roots found.
#[derive(Debug, Default)]
struct Walk {
    /// Directories below the workspace with a `.git` entry (at any depth, not inside a `.git`).
    repos: Vec<PathBuf>,
    findings: Vec<Finding>,
    entries: u64,
}

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
fn walk_writable(scope: &SweepScope, launched: Duration) -> Walk {
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

fn after(ctime: (i64, i64), launched: Duration) -> bool {
    since_epoch(ctime).is_some_and(|t| t >= launched)
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

#[cfg(test)]
mod tests;
