//! Which git directories a workspace has: each repository's own, its submodules' below `modules/`
//! and its linked worktrees' below `worktrees/`, found never through a link.

use super::super::read_regular;
use super::{GITFILE_READ_LIMIT, Kind, MAX_GIT_DIRS, MODULES_DEPTH, named, open_dir};
use crate::sandbox::plan::protected::relative_beneath;
use crate::sys::beneath::{self, DIR_LISTING, DIR_LOOKUP};
use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

/// The git directories of `repos` (relative to the workspace): each one's `.git` directory, or
/// the one its gitfile names inside the workspace, with the submodules' git directories below
/// their `modules/` and the linked worktrees' below `worktrees/`. Never through a link.
pub(super) fn git_dirs(
    root: BorrowedFd<'_>,
    workspace: &Path,
    repos: &[PathBuf],
) -> BTreeMap<PathBuf, Kind> {
    git_dirs_and_checkouts(root, workspace, repos).0
}

/// [`git_dirs`], and the checkout of each git directory a repository's `.git` names (the
/// directory holding that `.git`).
pub(super) fn git_dirs_and_checkouts(
    root: BorrowedFd<'_>,
    workspace: &Path,
    repos: &[PathBuf],
) -> (BTreeMap<PathBuf, Kind>, BTreeMap<PathBuf, PathBuf>) {
    let mut found = BTreeMap::new();
    let mut checkouts = BTreeMap::new();
    for repo in repos {
        let Ok(dir) = open_dir(
            root,
            if repo.as_os_str().is_empty() {
                named(".")
            } else {
                repo
            },
        ) else {
            continue;
        };
        let git = OsStr::new(".git");
        let Ok(st) = beneath::stat_at(dir.as_fd(), git) else {
            continue;
        };
        let git_dir = if st.is_dir() {
            repo.join(".git")
        } else if st.is_file() {
            let Ok(content) = read_regular(dir.as_fd(), git, GITFILE_READ_LIMIT) else {
                continue;
            };
            let content = String::from_utf8_lossy(&content);
            let Some(target) = content
                .trim_end()
                .strip_prefix("gitdir:")
                .map(str::trim)
                .filter(|t| !t.is_empty() && !t.contains('\n'))
            else {
                continue;
            };
            let Some(rel) = relative_beneath(workspace, &workspace.join(repo).join(target)) else {
                continue;
            };
            rel
        } else {
            continue;
        };
        if open_dir(root, &git_dir).is_err() {
            continue;
        }
        let worktree = git_dir
            .parent()
            .and_then(Path::file_name)
            .is_some_and(|n| n == "worktrees");
        let kind = if worktree {
            Kind::Worktree
        } else {
            Kind::Repository
        };
        checkouts
            .entry(git_dir.clone())
            .or_insert_with(|| repo.clone());
        add_git_dir(root, git_dir, kind, &mut found);
    }
    (found, checkouts)
}

/// `git_dir` and, for a repository's, the git directories below its `modules/` and
/// `worktrees/`.
fn add_git_dir(
    root: BorrowedFd<'_>,
    git_dir: PathBuf,
    kind: Kind,
    found: &mut BTreeMap<PathBuf, Kind>,
) {
    if found.len() >= MAX_GIT_DIRS || found.contains_key(&git_dir) {
        return;
    }
    found.insert(git_dir.clone(), kind);
    if kind == Kind::Worktree {
        return;
    }
    for (sub, _) in subdirs(root, &git_dir.join("worktrees")) {
        add_git_dir(
            root,
            git_dir.join("worktrees").join(sub),
            Kind::Worktree,
            found,
        );
    }
    add_modules(root, &git_dir.join("modules"), MODULES_DEPTH, found);
}

/// Below `modules/`: a directory with a `HEAD` is a submodule's git directory (a submodule's
/// name may hold slashes: the others are walked into).
fn add_modules(
    root: BorrowedFd<'_>,
    dir: &Path,
    depth: usize,
    found: &mut BTreeMap<PathBuf, Kind>,
) {
    for (sub, fd) in subdirs(root, dir) {
        let path = dir.join(&sub);
        if beneath::stat_at(fd.as_fd(), OsStr::new("HEAD")).is_ok() {
            add_git_dir(root, path, Kind::Repository, found);
        } else if depth > 0 {
            add_modules(root, &path, depth - 1, found);
        }
    }
}

/// The directories in `dir` (not links), each with its descriptor.
fn subdirs(root: BorrowedFd<'_>, dir: &Path) -> Vec<(OsString, OwnedFd)> {
    let Ok(fd) = beneath::open_beneath(root, dir, DIR_LISTING, 0) else {
        return Vec::new();
    };
    let Ok((entries, _)) = beneath::list_dir_up_to(fd.as_fd(), MAX_GIT_DIRS) else {
        return Vec::new();
    };
    let mut out: Vec<(OsString, OwnedFd)> = entries
        .into_iter()
        .filter(|(_, t)| matches!(*t, libc::DT_DIR | libc::DT_UNKNOWN))
        .filter_map(|(name, _)| {
            let st = beneath::stat_at(fd.as_fd(), &name).ok()?;
            if !st.is_dir() {
                return None;
            }
            let sub = beneath::open_beneath(fd.as_fd(), Path::new(&name), DIR_LOOKUP, 0).ok()?;
            Some((name, sub))
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}
