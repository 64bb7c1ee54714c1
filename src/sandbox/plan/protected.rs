//! The persistence paths of a workspace: the profile's protected names in the workspace and in
//! every nested repository, and each repository's `core.hooksPath`. Found at launch (a bounded
//! scan) and again by the sweep (from its complete walk). Every look goes through a directory
//! descriptor of the workspace and never follows a link: a link where a protected name or one
//! of its ancestors should be is listed itself, for the sweep to judge, never looked through.

use crate::profile::Profile;
use crate::sys::beneath::{self, DIR_LISTING, DIR_LOOKUP, FILE_READING};
use std::collections::VecDeque;
use std::ffi::OsStr;
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

const SCAN_ENTRY_LIMIT: usize = 20_000;
const NESTED_REPO_DEPTH: usize = 6;
/// A repository's config is small; more than this is not read (and not trusted).
const GIT_CONFIG_READ_LIMIT: u64 = 1 << 20;
/// When the workspace is the home: what runs code or grants access at the next login, the next
/// git command or the next ssh connection (shell rc files, git's config, ssh's, user services,
/// autostart entries, the user's own `bin` and desktop launchers).
const HOME_PERSISTENCE: &[&str] = &[
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    ".zlogout",
    ".config/fish",
    ".inputrc",
    ".gitconfig",
    ".config/git",
    ".ssh",
    ".config/systemd/user",
    ".config/autostart",
    ".config/environment.d",
    ".local/bin",
    ".local/share/applications",
    ".pam_environment",
    ".xprofile",
    ".xsessionrc",
];

/// What the launch's bounded scan of the workspace found.
pub(crate) struct WorkspaceScan {
    /// Every persistence path of the workspace and of the nested repositories, existing or not.
    pub protected_paths: Vec<PathBuf>,
    /// The workspace (when it has a `.git`) and the nested repositories reached.
    pub repositories: Vec<PathBuf>,
    /// Project `.env` files (not templates), when the profile hides them.
    pub env_files: Vec<PathBuf>,
}

/// One bounded walk of the workspace: its repositories, persistence paths and `.env` files.
pub(crate) fn scan_workspace(
    profile: &Profile,
    workspace: &Path,
    home: &Path,
    notes: &mut Vec<String>,
) -> WorkspaceScan {
    let mut env_files = Vec::new();
    let nested = nested_repositories(
        workspace,
        notes,
        profile.filesystem.hide_env_files.then_some(&mut env_files),
    );
    let paths = protected_paths_of(profile, workspace, home, &nested, notes);
    let mut repos = Vec::with_capacity(nested.len() + 1);
    if beneath::open_root(workspace, DIR_LOOKUP)
        .is_ok_and(|root| beneath::stat_at(root.as_fd(), OsStr::new(".git")).is_ok())
    {
        repos.push(workspace.to_path_buf());
    }
    repos.extend(nested);
    WorkspaceScan {
        protected_paths: paths,
        repositories: repos,
        env_files,
    }
}

/// Every persistence path of the workspace and of `repos` (absolute paths below it). Paths
/// that end up outside the workspace (`core.hooksPath = /elsewhere`, `../x`) stay in the list
/// (the plan binds them read-only where the sandbox sees them) with a note: the sweep never
/// moves them.
pub(crate) fn protected_paths_of(
    profile: &Profile,
    workspace: &Path,
    home: &Path,
    repos: &[PathBuf],
    notes: &mut Vec<String>,
) -> Vec<PathBuf> {
    expand_protected(
        &profile.filesystem.protected,
        workspace,
        home,
        repos,
        &|_| false,
        notes,
    )
}

/// The persistence paths of `repos` again, after a run: for a repository `expanded_before`
/// names (relative to the workspace, `""` for the workspace itself) only what depends on the
/// tree as it is now — the names with a `*` and `core.hooksPath` — since its fixed names are
/// the launch's; everything for a repository that appeared during the run. `protected` is the
/// profile's list of protected names (`filesystem.protected`), as recorded at launch.
pub(crate) fn protected_paths_after(
    protected: &[String],
    workspace: &Path,
    home: &Path,
    repos: &[PathBuf],
    expanded_before: &dyn Fn(&Path) -> bool,
    notes: &mut Vec<String>,
) -> Vec<PathBuf> {
    expand_protected(protected, workspace, home, repos, expanded_before, notes)
}

/// A protected name that is a plain relative path (no `*`, no empty or `.` component): joined
/// to a repository it is already the lexical path, with no directory to read.
fn is_fixed(pattern: &str) -> bool {
    !pattern.contains('*') && !pattern.split('/').any(|c| c.is_empty() || c == ".")
}

fn expand_protected(
    protected: &[String],
    workspace: &Path,
    home: &Path,
    repos: &[PathBuf],
    fixed_known: &dyn Fn(&Path) -> bool,
    notes: &mut Vec<String>,
) -> Vec<PathBuf> {
    // Protected names are relative without `..` (the profile refuses others), and the
    // workspace and the repositories found below it are lexical paths: a name joined to them
    // needs no normalising and cannot leave the workspace. Only `core.hooksPath` can.
    let mut patterns: Vec<&str> = protected.iter().map(String::as_str).collect();
    if workspace == home {
        patterns.extend(HOME_PERSISTENCE.iter().copied());
    }
    let root = beneath::open_root(workspace, DIR_LOOKUP).ok();
    let mut roots = vec![Path::new("")];
    roots.extend(
        repos
            .iter()
            .filter_map(|r| r.strip_prefix(workspace).ok())
            .filter(|r| !r.as_os_str().is_empty()),
    );
    let mut out = Vec::with_capacity(roots.len() * (patterns.len() + 1));
    for repo in roots {
        let known = fixed_known(repo);
        let base = workspace.join(repo);
        for pattern in &patterns {
            if is_fixed(pattern) {
                if !known {
                    out.push(base.join(pattern));
                }
                continue;
            }
            for rel in expand_pattern(root.as_ref().map(AsFd::as_fd), repo, pattern) {
                out.push(workspace.join(rel));
            }
        }
        let hooks = root
            .as_ref()
            .and_then(|fd| core_hooks_path(fd.as_fd(), repo))
            .map(|value| hooks_path_location(workspace, home, repo, &value));
        if let Some(hooks) = hooks {
            if relative_beneath(workspace, &hooks).is_none() {
                notes.push(format!(
                    "core.hooksPath of {} is {}, outside the workspace: not watched or moved by the sweep",
                    base.display(),
                    hooks.display()
                ));
            }
            out.push(hooks);
        }
    }
    out.sort();
    out.dedup();
    out
}

/// A repository's own config (`.git/config`, a submodule's `.git/modules/…/config`): git writes
/// it in ordinary work (`submodule update`, `remote add`, `config`), so it stays writable inside;
/// the sweep judges what a run added and puts back the launch version when that can run code.
pub(crate) fn is_git_config(path: &Path) -> bool {
    path.file_name() == Some(OsStr::new("config"))
        && path.components().any(|c| c.as_os_str() == ".git")
}

/// `path` relative to `root` after resolving `.` and `..` lexically (without links, which the
/// supervisor never follows, that is what the kernel would resolve too); `None` when it is not
/// at or below `root`.
pub(crate) fn relative_beneath(root: &Path, path: &Path) -> Option<PathBuf> {
    let normal = lexical(path);
    normal
        .strip_prefix(lexical(root))
        .ok()
        .map(Path::to_path_buf)
}

fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// Where git would look for hooks given `core.hooksPath = value` in the repository `repo`
/// (relative to the workspace).
fn hooks_path_location(workspace: &Path, home: &Path, repo: &Path, value: &str) -> PathBuf {
    let path = if let Some(rest) = value.strip_prefix("~/") {
        home.join(rest)
    } else if Path::new(value).is_absolute() {
        PathBuf::from(value)
    } else {
        workspace.join(repo).join(value)
    };
    lexical(&path)
}

/// Expands `*` in single components (`.git/modules/*/hooks`) of `pattern` below `base`
/// (relative to the workspace); other paths are returned as they are, existing or not. A `*`
/// behind a link lists nothing: the link is returned instead, to be judged itself.
fn expand_pattern(root: Option<BorrowedFd<'_>>, base: &Path, pattern: &str) -> Vec<PathBuf> {
    let mut current = vec![base.to_path_buf()];
    let mut links = Vec::new();
    for component in pattern.split('/').filter(|c| !c.is_empty() && *c != ".") {
        let mut next = Vec::new();
        for dir in current {
            if component != "*" {
                next.push(dir.join(component));
                continue;
            }
            let Some(root) = root else {
                continue;
            };
            match beneath::open_beneath(root, &dir, DIR_LISTING, 0) {
                Ok(fd) => {
                    let entries = beneath::list_dir(fd.as_fd()).unwrap_or_default();
                    next.extend(entries.into_iter().map(|(name, _)| dir.join(name)));
                }
                Err(_) => links.extend(first_link(root, &dir)),
            }
        }
        current = next;
    }
    current.extend(links);
    current
}

/// The first link on the way to `rel` beneath `root`, if one is.
fn first_link(root: BorrowedFd<'_>, rel: &Path) -> Option<PathBuf> {
    let mut dir: Option<OwnedFd> = None;
    let mut walked = PathBuf::new();
    for component in rel.components() {
        let Component::Normal(name) = component else {
            return None;
        };
        let at = dir.as_ref().map_or(root, AsFd::as_fd);
        walked.push(name);
        let st = beneath::stat_at(at, name).ok()?;
        if st.is_symlink() {
            return Some(walked);
        }
        dir = Some(beneath::open_beneath(at, Path::new(name), DIR_LOOKUP, 0).ok()?);
    }
    None
}

/// Directories below the workspace that are repositories of their own (they have a `.git`
/// entry of any kind: a directory, a gitfile, or a link, which is recorded but never entered).
/// Bounded: it runs on the launch path (the sweep's walk is complete).
fn nested_repositories(
    workspace: &Path,
    notes: &mut Vec<String>,
    mut env_files: Option<&mut Vec<PathBuf>>,
) -> Vec<PathBuf> {
    let Ok(root) = beneath::open_root(workspace, DIR_LOOKUP) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    // A directory below the workspace is a repository when it has a `.git` entry: seen in its
    // own listing when it is queued (no look of its own), looked up where it is not listed
    // (the last level, one that cannot be read, those still queued when the scan stops).
    let is_repo = |rel: &Path| {
        beneath::open_beneath(root.as_fd(), rel, DIR_LOOKUP, 0)
            .and_then(|dir| beneath::stat_at(dir.as_fd(), OsStr::new(".git")))
            .is_ok()
    };
    let mut queue = VecDeque::from([(PathBuf::new(), 0usize)]);
    let mut seen = 0usize;
    while let Some((dir, depth)) = queue.pop_front() {
        let nested = !dir.as_os_str().is_empty();
        let listed = beneath::open_beneath(root.as_fd(), &dir, DIR_LISTING, 0)
            .and_then(|fd| beneath::list_dir(fd.as_fd()).map(|entries| (fd, entries)));
        let Ok((fd, entries)) = listed else {
            if nested && is_repo(&dir) {
                found.push(workspace.join(&dir));
            }
            continue;
        };
        if nested && entries.iter().any(|(name, _)| name == ".git") {
            found.push(workspace.join(&dir));
        }
        for (name, d_type) in entries {
            seen += 1;
            if seen > SCAN_ENTRY_LIMIT {
                notes.push(format!(
                    "nested repository scan of {} stopped after {SCAN_ENTRY_LIMIT} entries",
                    workspace.display()
                ));
                // Those queued were reached before the scan stopped: each is still looked at.
                for (rel, _) in queue {
                    if is_repo(&rel) {
                        found.push(workspace.join(rel));
                    }
                }
                return found;
            }
            if let Some(env_files) = env_files.as_deref_mut()
                && d_type != libc::DT_DIR
                && crate::sandbox::plan::secrets::is_env_file(&name)
            {
                env_files.push(workspace.join(dir.join(&name)));
            }
            if name == ".git" || !is_dir(fd.as_fd(), &name, d_type) {
                continue;
            }
            let rel = dir.join(&name);
            if depth + 1 < NESTED_REPO_DEPTH {
                queue.push_back((rel, depth + 1));
            } else if has_git_entry(fd.as_fd(), &name) {
                found.push(workspace.join(&rel));
            }
        }
    }
    found
}

/// A real directory (a link to one is not).
fn is_dir(dir: BorrowedFd<'_>, name: &OsStr, d_type: u8) -> bool {
    match d_type {
        libc::DT_DIR => true,
        libc::DT_UNKNOWN => beneath::stat_at(dir, name).is_ok_and(|s| s.is_dir()),
        _ => false,
    }
}

fn has_git_entry(dir: BorrowedFd<'_>, name: &OsStr) -> bool {
    beneath::open_beneath(dir, Path::new(name), DIR_LOOKUP, 0)
        .and_then(|sub: OwnedFd| beneath::stat_at(sub.as_fd(), OsStr::new(".git")))
        .is_ok()
}

/// The value of `core.hooksPath` in the repository `repo`'s `.git/config` (relative to the
/// workspace), read without following a link (a `.git` or `config` that is one is not read).
fn core_hooks_path(root: BorrowedFd<'_>, repo: &Path) -> Option<String> {
    let fd = beneath::open_beneath(root, &repo.join(".git/config"), FILE_READING, 0).ok()?;
    if !beneath::stat_fd(fd.as_fd()).is_ok_and(|s| s.is_file()) {
        return None;
    }
    let mut config = String::new();
    std::fs::File::from(fd)
        .take(GIT_CONFIG_READ_LIMIT)
        .read_to_string(&mut config)
        .ok()?;
    let mut in_core = false;
    for line in config.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_core = line
                .trim_start_matches('[')
                .trim_end_matches(']')
                .trim()
                .eq_ignore_ascii_case("core");
            continue;
        }
        if !in_core {
            continue;
        }
        if let Some((key, value)) = line.split_once('=')
            && key.trim().eq_ignore_ascii_case("hookspath")
        {
            return Some(value.trim().trim_matches('"').to_string());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn default_paths(ws: &Path, notes: &mut Vec<String>) -> Vec<PathBuf> {
        let profile = Profile::builtin_default().unwrap();
        scan_workspace(&profile, ws, Path::new("/nonexistent-home"), notes).protected_paths
    }

    /// The scan as it was before its repositories were seen in their own listings: each
    /// directory's subdirectories looked up one by one. Both find the same repositories.
    fn reference_scan(workspace: &Path) -> (Vec<PathBuf>, bool) {
        let root = beneath::open_root(workspace, DIR_LOOKUP).unwrap();
        let (mut found, mut queue, mut seen) = (
            Vec::new(),
            VecDeque::from([(PathBuf::new(), 0usize)]),
            0usize,
        );
        while let Some((dir, depth)) = queue.pop_front() {
            let Ok(fd) = beneath::open_beneath(root.as_fd(), &dir, DIR_LISTING, 0) else {
                continue;
            };
            for (name, d_type) in beneath::list_dir(fd.as_fd()).unwrap() {
                seen += 1;
                if seen > SCAN_ENTRY_LIMIT {
                    return (found, true);
                }
                if name == ".git" || !is_dir(fd.as_fd(), &name, d_type) {
                    continue;
                }
                let rel = dir.join(&name);
                if has_git_entry(fd.as_fd(), &name) {
                    found.push(workspace.join(&rel));
                }
                if depth + 1 < NESTED_REPO_DEPTH {
                    queue.push_back((rel, depth + 1));
                }
            }
        }
        (found, false)
    }

    #[test]
    fn nested_repositories_are_those_the_lookups_found() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap();
        // A repository at every depth down to past the last level scanned, one in a directory
        // the scan cannot list (found by its lookup when not run as root; root lists it), a
        // `.git` file (a worktree) and a link named `.git`.
        let mut deep = ws.clone();
        for level in 0..NESTED_REPO_DEPTH + 1 {
            deep = deep.join(format!("l{level}"));
            fs::create_dir_all(deep.join(".git")).unwrap();
            fs::create_dir_all(deep.join("plain")).unwrap();
        }
        fs::create_dir_all(ws.join("closed/inner/.git")).unwrap();
        fs::set_permissions(ws.join("closed/inner"), fs::Permissions::from_mode(0o311)).unwrap();
        fs::create_dir_all(ws.join("worktree")).unwrap();
        fs::write(ws.join("worktree/.git"), "gitdir: /elsewhere\n").unwrap();
        fs::create_dir_all(ws.join("linked")).unwrap();
        std::os::unix::fs::symlink("/nonexistent", ws.join("linked/.git")).unwrap();
        let sorted = |mut v: Vec<PathBuf>| {
            v.sort();
            v
        };
        let mut notes = Vec::new();
        let ours = nested_repositories(&ws, &mut notes, None);
        let (theirs, stopped) = reference_scan(&ws);
        assert!(!stopped && notes.is_empty(), "{notes:?}");
        assert_eq!(sorted(ours.clone()), sorted(theirs));
        for repo in ["worktree", "linked", "closed/inner", "l0/l1/l2/l3/l4/l5"] {
            assert!(ours.contains(&ws.join(repo)), "{repo}: {ours:?}");
        }
        // A parent is found before what is below it.
        let at = |p: &Path| ours.iter().position(|f| f == p).unwrap();
        assert!(at(&ws.join("l0")) < at(&ws.join("l0/l1/l2/l3/l4/l5")));
        // Past the entry limit both stop at the same place, with the same repositories.
        for many in 0..(SCAN_ENTRY_LIMIT / 100 + 5) {
            let wide = ws.join(format!("w{many:03}"));
            fs::create_dir_all(wide.join(".git")).unwrap();
            for file in 0..98 {
                fs::write(wide.join(format!("f{file}")), "").unwrap();
            }
        }
        let mut notes = Vec::new();
        let ours = nested_repositories(&ws, &mut notes, None);
        let (theirs, stopped) = reference_scan(&ws);
        assert!(stopped && notes.len() == 1, "{notes:?}");
        assert_eq!(sorted(ours), sorted(theirs));
        fs::set_permissions(ws.join("closed/inner"), fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn hooks_path_is_protected_inside_and_only_noted_outside() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap();
        fs::create_dir_all(ws.join(".git")).unwrap();
        fs::write(
            ws.join(".git/config"),
            "[core]\n\thooksPath = tools/hooks\n",
        )
        .unwrap();
        let mut notes = Vec::new();
        assert!(default_paths(&ws, &mut notes).contains(&ws.join("tools/hooks")));
        assert!(notes.is_empty(), "{notes:?}");

        fs::write(ws.join(".git/config"), "[core]\n\thooksPath = ../../x\n").unwrap();
        let paths = default_paths(&ws, &mut notes);
        let outside = lexical(&ws.join("../../x"));
        assert!(paths.contains(&outside), "{paths:?}");
        assert!(notes.iter().any(|n| n.contains("outside the workspace")));
    }

    #[test]
    fn scans_never_follow_links() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        let victim = dir.path().join("victim");
        fs::create_dir_all(victim.join("modules/evil/hooks")).unwrap();
        fs::write(victim.join("config"), "[core]\n\thooksPath = /etc\n").unwrap();
        fs::create_dir_all(victim.join("repo/.git")).unwrap();
        fs::create_dir_all(ws.join("sub")).unwrap();
        fs::create_dir_all(ws.join(".git")).unwrap();
        // `sub/.git` a link: sub is recorded (its protected names are judged), nothing read
        // through the link.
        std::os::unix::fs::symlink(&victim, ws.join("sub/.git")).unwrap();
        // `.git/modules` a link: the link itself is listed for `.git/modules/*/hooks`.
        std::os::unix::fs::symlink(victim.join("modules"), ws.join(".git/modules")).unwrap();
        // A linked directory is not descended into.
        std::os::unix::fs::symlink(&victim, ws.join("linked")).unwrap();
        let mut notes = Vec::new();
        let paths = default_paths(&ws, &mut notes);
        assert!(paths.contains(&ws.join("sub/.git/hooks")), "{paths:?}");
        assert!(paths.contains(&ws.join(".git/modules")), "{paths:?}");
        assert!(!paths.iter().any(|p| p.starts_with(ws.join("linked"))));
        assert!(!paths.iter().any(|p| p.ends_with("evil/hooks")));
        assert!(!paths.iter().any(|p| p == Path::new("/etc")));
        assert!(notes.is_empty(), "{notes:?}");
    }
}
