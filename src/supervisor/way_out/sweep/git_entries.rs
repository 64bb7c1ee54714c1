//! A repository's `.git` entry and its config, at launch and at the end: what stands there, a
//! gitfile's redirect judged (git's own for a submodule or a linked worktree), and a config's
//! launch version put back.

use super::git_rules::GIT_DIR_PERSISTENCE;
use super::read_regular;
use super::state::state_of;
use super::{LaunchFile, Snapshot, State};
use crate::audit::owed::bytes;
use crate::sandbox::plan::protected::relative_beneath;
use crate::sys::beneath::{self, DIR_LOOKUP, FILE_READING};
use serde::{Deserialize, Serialize};
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};

/// `rel` beneath `root` when it is a regular file of at most `limit` bytes in UTF-8.
pub(super) fn launch_file(root: BorrowedFd<'_>, rel: &Path, limit: u64) -> Option<LaunchFile> {
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
pub(super) fn entry_missing(root: BorrowedFd<'_>, rel: &Path) -> bool {
    let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
        return false;
    };
    let Ok(dir) = beneath::open_beneath(root, parent, DIR_LOOKUP, 0) else {
        return false;
    };
    matches!(beneath::stat_at(dir.as_fd(), name), Err(e) if e.raw_os_error() == Some(libc::ENOENT))
}

/// Writes `file` at `rel` beneath `root` (where nothing is now), as the owner it had.
pub(super) fn put_back(root: BorrowedFd<'_>, rel: &Path, file: &LaunchFile) -> io::Result<()> {
    let name = rel
        .file_name()
        .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
    let parent = beneath::open_beneath(root, rel.parent().unwrap_or(Path::new("")), DIR_LOOKUP, 0)?;
    // Whole or not at all: a supervisor killed part way leaves the name absent (a repair puts
    // it back), never a file cut short.
    super::git_view::write_whole(
        parent.as_fd(),
        name,
        file.text.as_bytes(),
        (file.mode & 0o777, file.uid, file.gid),
        false,
    )
}

/// What a repository's `.git` is. A gitfile's content is its redirect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) enum GitEntry {
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
pub(super) fn git_entry(root: BorrowedFd<'_>, repo: &Path) -> GitEntry {
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

impl Snapshot {
    /// A persistence path that appeared in a nested checkout (a linked worktree, a clone of
    /// the workspace) exactly as the workspace's own one was at launch: git checked out what
    /// the host already had, not something the run wrote.
    pub(super) fn checked_out_copy(
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
    pub(super) fn judge_git_entries(
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
