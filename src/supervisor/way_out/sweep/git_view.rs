//! What the host's git shows is what is there (issue 38). A run can leave state in a git
//! directory that makes the host's own `git log`, `git diff` and `git status` show something
//! other than the commits and the files, without running any code: a replace ref
//! (`refs/replace/<id>`, loose or a line of `packed-refs`) shows another commit in place of one;
//! `info/grafts` gives a commit other parents and `shallow` cuts its history short;
//! `info/attributes` can make a changed file "binary", route it through a diff driver or a
//! filter, or hide it from an archive; `info/exclude` hides a new file from `git status`;
//! `info/sparse-checkout` (with the skip-worktree flag) takes files out of git's sight; an
//! index entry flagged assume-valid or skip-worktree makes git trust the file as unchanged; and
//! the index's untracked cache (`UNTR`) and fsmonitor (`FSMN`) extensions make git trust a
//! cached answer instead of looking. A person reviewing the run's work with git is then shown a
//! lie.
//!
//! These are judged like a repository's config: the launch records what is there in every git
//! directory it knows (the repositories the launch found, their submodules' git directories
//! `.git/modules/…` and their linked worktrees' `.git/worktrees/…`), and the sweep compares:
//!
//! * a replace ref that was not there at launch (by name and value, loose or packed: `git gc`
//!   packing a launch ref is not new) is moved to the quarantine; one in `packed-refs` is taken
//!   out of it (rewritten atomically, keeping its owner and mode; the lines removed are kept in
//!   the quarantine);
//! * `info/grafts` or `shallow` that gained a line, and `info/attributes`, `info/exclude` or
//!   `info/sparse-checkout` that changed at all, are moved to the quarantine and the launch
//!   version is put back (or none, when there was none). Lines removed from grafts or shallow
//!   show more history, which is the truth: carried as they are;
//! * index entries that carry assume-valid or skip-worktree and did not at launch have the flag
//!   cleared in place: the index is rewritten atomically with its trailing checksum recomputed
//!   (SHA-1, or SHA-256 for a SHA-256 repository), and the index as it was is kept in the
//!   quarantine. `UNTR` and `FSMN` that came or changed during the run are dropped from it,
//!   with a note, not a finding: git writes and updates them in ordinary work where the host's
//!   config asks (`core.untrackedCache`, `core.fsmonitor`), the sweep cannot tell that from a
//!   crafted one, and git writes them again. In a repository that was
//!   a sparse checkout at launch and whose `info/sparse-checkout` is unchanged, a new
//!   skip-worktree entry whose file is absent from the checkout is git's own (a checkout of
//!   files outside the sparse patterns) and is kept;
//! * an index entry needs no flag to be trusted: git takes a file as unchanged when the entry's
//!   stat data match it, and an index can pair the stat data of a file the run changed with the
//!   object id of its old content. An entry whose stat data match a file written during the run
//!   (with the ctime trusted, git's default, only entries whose own ctime is after the launch
//!   are looked at; when the host's or the repository's config names `core.trustctime`,
//!   `core.checkStat` or an include, every entry) has the file hashed as a blob (at most
//!   [`HASH_BUDGET`] bytes per sweep; beyond, taken unchecked); when the id is not the entry's,
//!   its size is set to 0, as git itself does for a racily clean entry, and the host's git
//!   reads the file. A note, not a finding: a filter (Git LFS) or an end-of-line conversion
//!   makes the same mismatch in ordinary work;
//! * a link where git reads one of these (`info`, `refs`, `refs/replace`, a view file,
//!   `packed-refs`, `index`) is moved as a link, never followed.
//!
//! A git directory that appeared during the run (a new repository, a submodule, a linked
//! worktree) is judged by content: replace refs, grafts, flagged entries and the two caches are
//! not inert; `info/exclude`, `info/attributes` and `info/sparse-checkout` are when they hold
//! only comments (what `git init` writes); `shallow` is (a `git clone --depth` writes it, and
//! the whole history of a new repository is the run's).
//!
//! Every action is a finding of the sweep (`replace-ref`, `git-view`, `index-flags`): the run
//! says it (exit 123), and the `sweep` record (or a repair's `run-end-recovered`) names it. An
//! index that cannot be judged or rewritten safely — larger than [`INDEX_READ_LIMIT`] or with
//! more than [`MAX_FLAGGED`] flagged entries at launch, larger at the end, a split index, a
//! sparse index whose directory entries gained the flag — is never guessed at: it is left as it
//! is and reported as a finding with an error (NOT handled; a repair keeps its marker), naming
//! what to do. Removing it instead would not be the truth either: without an index `git diff`
//! shows nothing and `git status` shows every file deleted and untracked. An index git itself
//! refuses (its checksum does not hold) shows nothing at all: it is left, with a note.

use super::{Finding, Quarantine};
use crate::audit::owed::bytes;
use crate::sys::beneath::{self, DIR_LOOKUP, Stat};
use base64::Engine as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::fs;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

mod find;
mod index;
mod judge;
mod judge_index;
mod launch;
mod read;
mod write;
use find::{git_dirs, git_dirs_and_checkouts};
use launch::launch_dir;
pub(super) use write::write_whole;

/// A file of the view (grafts, shallow, attributes, exclude, sparse-checkout) is read this far;
/// beyond it, its size and ctime stand for the rest.
const VIEW_READ_LIMIT: u64 = 16 << 20;
/// A view file at launch is kept (to be put back) up to this size; a larger one is recorded by
/// its hash, and a change to it is moved to the quarantine without a launch version to put back.
const VIEW_KEEP_LIMIT: u64 = 1 << 20;
/// `packed-refs` is read this far; a larger one that changed is reported, not judged.
const PACKED_REFS_READ_LIMIT: u64 = 64 << 20;
/// At most this many git directories per workspace, and this deep below `modules/`.
const MAX_GIT_DIRS: usize = 1000;
const MODULES_DEPTH: usize = 8;
/// At most this many loose replace refs are looked at, this deep.
const MAX_REPLACE_REFS: usize = 100_000;
const REPLACE_DEPTH: usize = 8;
/// A finding names at most this many entries (the count is in its detail).
const NAMED_ENTRIES: usize = 100;
/// At most this many flagged entries of one index are recorded at launch (16 bytes each in the
/// marker); an index with more is recorded as unread (its flags are then not judged).
const MAX_FLAGGED: usize = 1_000_000;
/// At most this many bytes of files are hashed to check index entries, per sweep; entries
/// beyond it are smudged unchecked (git then reads the files itself).
const HASH_BUDGET: u64 = 256 << 20;
/// A git config is small; more than this is not read for its object format.
const CONFIG_READ_LIMIT: u64 = 1 << 20;
const GITFILE_READ_LIMIT: u64 = 4096;

/// The files of a git directory that decide what git shows, and how a change to each is judged.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Rule {
    /// A set of lines: only a line added is not inert (a line removed shows more history).
    Lines,
    /// Any change is not inert.
    Any,
}

/// (name relative to the git directory, rule, read in a linked worktree's own git directory,
/// what it does, in words).
const VIEW_FILES: &[(&str, Rule, bool, &str)] = &[
    (
        "info/grafts",
        Rule::Lines,
        false,
        "it gives commits other parents in the host's `git log`",
    ),
    (
        "shallow",
        Rule::Lines,
        false,
        "it cuts the history the host's `git log` shows short",
    ),
    (
        "info/attributes",
        Rule::Any,
        false,
        "it decides how the host's `git diff` shows files (binary, drivers, filters)",
    ),
    (
        "info/exclude",
        Rule::Any,
        false,
        "it hides files from the host's `git status`",
    ),
    (
        "info/sparse-checkout",
        Rule::Any,
        true,
        "it takes files out of the host's git's sight",
    ),
];

/// The directories git reads those through, which must stay directories (a link there is
/// moved): (name, read in a linked worktree's own git directory).
const VIEW_DIRS: &[(&str, bool)] = &[("info", true), ("refs", false), ("refs/replace", false)];

/// A repository's own git directory (with refs, objects, info) or a linked worktree's (only
/// its index, `HEAD` and `info/sparse-checkout` are its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum Kind {
    Repository,
    Worktree,
}

/// What stands at a name git reads, never through a link.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum Node {
    Absent,
    Dir {
        mode: u32,
        uid: u32,
        gid: u32,
    },
    /// A regular file: its size and hash (and its ctime, beyond [`VIEW_READ_LIMIT`]).
    File {
        digest: String,
    },
    Link(#[serde(with = "bytes::os")] OsString),
    /// Anything else, or what could not be looked at.
    Other(String),
}

impl Node {
    /// The same for the host's git: two directories are (their modes aside).
    fn same(&self, other: &Node) -> bool {
        matches!((self, other), (Node::Dir { .. }, Node::Dir { .. })) || self == other
    }
}

/// A view file as it was at launch, to be put back.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Kept {
    #[serde(with = "bytes::os")]
    bytes: OsString,
    mode: u32,
    uid: u32,
    gid: u32,
}

/// What identifies a file's content without reading it: the sandbox can change neither the
/// inode nor the ctime back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct StatId {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl StatId {
    fn of(st: &Stat) -> StatId {
        StatId {
            dev: st.dev,
            ino: st.ino,
            size: st.size,
            mtime: st.mtime,
            ctime: st.ctime,
        }
    }
}

/// Paths, each as the first 16 bytes of its SHA-256, sorted; written as one base64 string
/// (a sparse checkout flags most of its entries: the marker stays small).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Digests(Vec<[u8; 16]>);

impl Digests {
    fn of(name: &[u8]) -> [u8; 16] {
        let hash = Sha256::digest(name);
        let mut out = [0u8; 16];
        out.copy_from_slice(&hash[..16]);
        out
    }

    fn from_unsorted(mut all: Vec<[u8; 16]>) -> Digests {
        all.sort_unstable();
        all.dedup();
        Digests(all)
    }

    fn contains(&self, name: &[u8]) -> bool {
        self.0.binary_search(&Digests::of(name)).is_ok()
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Serialize for Digests {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let flat: Vec<u8> = self.0.iter().flatten().copied().collect();
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(flat))
    }
}

impl<'de> Deserialize<'de> for Digests {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Digests, D::Error> {
        let text = String::deserialize(d)?;
        let flat = base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(serde::de::Error::custom)?;
        if flat.len() % 16 != 0 {
            return Err(serde::de::Error::custom("digests of 16 bytes"));
        }
        Ok(Digests::from_unsorted(
            flat.chunks_exact(16)
                .map(|c| c.try_into().expect("16 bytes"))
                .collect(),
        ))
    }
}

/// The index as it was at launch.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum IndexView {
    Absent,
    Read {
        stat: StatId,
        assume_valid: Digests,
        skip_worktree: Digests,
        /// `UNTR` and `FSMN`, each as the SHA-256 of its bytes.
        caches: BTreeMap<String, String>,
    },
    /// Larger than [`INDEX_READ_LIMIT`], not a regular file, or not an index this parser
    /// reads: which flags it had cannot be told.
    Unread {
        stat: Option<StatId>,
        why: String,
    },
}

/// One git directory as it was at launch.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct GitDir {
    kind: Kind,
    /// `info`, `refs`, `refs/replace` and the view files.
    nodes: BTreeMap<String, Node>,
    /// The view files' launch versions (those of at most [`VIEW_KEEP_LIMIT`] bytes).
    kept: BTreeMap<String, Kept>,
    /// Loose refs below `refs/replace` (their names below it) and what each holds.
    #[serde(with = "bytes::path_map")]
    loose_replace: BTreeMap<PathBuf, String>,
    /// `packed-refs`: its identity, and its lines that name a replace ref (hex of the bytes).
    packed: Option<StatId>,
    packed_replace: BTreeSet<String>,
    /// Why `packed-refs` could not be read (then which replace refs it held is not known).
    packed_unread: Option<String>,
    index: IndexView,
}

/// Every git directory the launch knows, as it was (relative to the workspace).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct GitViews {
    #[serde(with = "bytes::path_map")]
    dirs: BTreeMap<PathBuf, GitDir>,
}

/// What of the host's git configuration decides how far the sweep looks into an index.
#[derive(Debug, Default)]
pub(super) struct HostConfig {
    /// The system's or the user's git config names `core.trustctime` or `core.checkStat`:
    /// the host's git may then trust an entry whose ctime is not the file's.
    pub ctime_not_trusted: bool,
}

impl HostConfig {
    /// Read from `/etc/gitconfig` and the user's (`home`) `.gitconfig` and
    /// `.config/git/config`, as far as they are readable (a file that cannot be read counts as
    /// naming them: the sweep then looks at every entry).
    pub(super) fn of(home: &Path) -> HostConfig {
        let names = |text: &str| {
            let text = text.to_ascii_lowercase();
            text.contains("trustctime") || text.contains("checkstat") || text.contains("include")
        };
        let ctime_not_trusted = [
            PathBuf::from("/etc/gitconfig"),
            home.join(".gitconfig"),
            home.join(".config/git/config"),
        ]
        .iter()
        .any(|path| match fs::File::open(path) {
            Ok(file) => {
                let mut text = String::new();
                file.take(CONFIG_READ_LIMIT)
                    .read_to_string(&mut text)
                    .map_or(true, |_| names(&text))
            }
            Err(e) => e.kind() != io::ErrorKind::NotFound,
        });
        HostConfig { ctime_not_trusted }
    }
}

/// What the judgment did, for the sweep to report.
#[derive(Debug, Default)]
pub(super) struct Judged {
    pub findings: Vec<Finding>,
    pub restored: Vec<PathBuf>,
    pub notes: Vec<String>,
}

fn named(name: &str) -> &Path {
    Path::new(name)
}

/// `rel`'s directory (relative to `root`), never through a link.
fn open_dir(root: BorrowedFd<'_>, rel: &Path) -> io::Result<OwnedFd> {
    beneath::open_beneath(root, rel, DIR_LOOKUP, 0)
}

/// Whether `e` says that nothing is at the name (or that an ancestor is not a directory).
fn is_absent(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR))
}

impl GitViews {
    /// Records every git directory of `repos` (relative to the workspace) as it is now.
    pub(super) fn take(root: BorrowedFd<'_>, workspace: &Path, repos: &[PathBuf]) -> GitViews {
        let dirs = git_dirs(root, workspace, repos)
            .into_iter()
            .filter_map(|(rel, kind)| {
                let gd = open_dir(root, &rel).ok()?;
                Some((rel.clone(), launch_dir(root, gd.as_fd(), &rel, kind)))
            })
            .collect();
        GitViews { dirs }
    }

    /// Judges every git directory of `repos` now (relative to the workspace): see the module's
    /// documentation.
    pub(super) fn judge(
        &self,
        root: BorrowedFd<'_>,
        workspace: &Path,
        repos: &[PathBuf],
        launched: Duration,
        host_config: &HostConfig,
        quarantine: &mut Quarantine,
    ) -> Judged {
        let mut judged = Judged::default();
        let mut all: Vec<PathBuf> = repos.to_vec();
        // The launch's own git directories: their repositories are judged again.
        all.extend(
            self.dirs
                .keys()
                .filter(|gd| gd.ends_with(".git"))
                .map(|gd| gd.parent().unwrap_or(Path::new("")).to_path_buf()),
        );
        all.sort();
        all.dedup();
        let (dirs, checkouts) = git_dirs_and_checkouts(root, workspace, &all);
        let mut hash_budget = HASH_BUDGET;
        for (rel, kind) in dirs {
            let Ok(gd) = open_dir(root, &rel) else {
                continue;
            };
            let mut at = At {
                root,
                workspace,
                rel: &rel,
                gd: gd.as_fd(),
                kind,
                checkout: checkouts.get(&rel).map(PathBuf::as_path),
                launched,
                host_config,
                hash_budget: &mut hash_budget,
                launch: self.dirs.get(&rel),
                quarantine,
                judged: &mut judged,
            };
            at.judge();
        }
        judged
    }
}

/// One git directory being judged.
struct At<'a, 'q> {
    root: BorrowedFd<'a>,
    workspace: &'a Path,
    /// The git directory, relative to the workspace.
    rel: &'a Path,
    gd: BorrowedFd<'a>,
    kind: Kind,
    /// Its checkout (relative to the workspace), when a `.git` there names it.
    checkout: Option<&'a Path>,
    /// The launch, less the margin, since the epoch.
    launched: Duration,
    host_config: &'a HostConfig,
    /// What is left of the bytes the sweep may hash to check index entries.
    hash_budget: &'q mut u64,
    /// As it was at launch; `None` for one that appeared during the run.
    launch: Option<&'a GitDir>,
    quarantine: &'q mut Quarantine,
    judged: &'q mut Judged,
}

#[cfg(test)]
mod tests;

/// The launch's added cost on a checkout of 50,000 tracked files (500 directories of 100), as
/// it is and with every entry flagged skip-worktree (the worst case for the digests), and the
/// judgment at the end with the index unchanged and rewritten by git:
/// `cargo test --release --lib git_view_cost -- --ignored --nocapture`
/// (`STEPPROOF_BENCH_DIR` chooses the file system; /tmp by default).
#[cfg(test)]
mod bench;
