//! What the sandbox must not see: the home directory's secrets and sockets, the environment files
//! and the other projects beside the workspace, and the protected paths that exist.

use super::{HideReason, HomeShown, SCAN_ENTRY_LIMIT, SOCKET_SCAN_DEPTH, Scope};
use crate::profile::Profile;
use crate::sandbox::plan::secrets::Listings;
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

/// What must not be seen, with why: the profile's catalogue of secrets, names that look like
/// secrets, other projects, unix sockets, `.env` files — the same for both isolations (each
/// realizes it its own way, and says what it cannot). Also the names found, for `explain`.
pub(super) fn hidden_paths(
    scope: &Scope<'_>,
    home_shown: &HomeShown<'_>,
    listings: &mut Listings,
    repositories: &[PathBuf],
    env_files: Vec<PathBuf>,
    notes: &mut Vec<String>,
) -> (
    BTreeMap<PathBuf, HideReason>,
    Vec<crate::sandbox::plan::secrets::CredentialName>,
) {
    let (profile, home, workspace) = (scope.profile, scope.home, scope.workspace);
    let resolve = |spec: &crate::profile::PathSpec| spec.resolve(home, workspace);
    let mut hidden = BTreeMap::new();
    for path in crate::sandbox::plan::secrets::existing_catalogue(
        &profile.filesystem.hidden,
        home,
        workspace,
        listings,
    ) {
        hidden.entry(path).or_insert(HideReason::Secret);
    }
    // StepProof's own state, whatever the catalogue says (and whether or not it exists yet:
    // the run makes it before it plans, so `explain` on a fresh home shows the same view).
    if home_shown.visible {
        let state = home.join(crate::profile::STATE_DIR);
        if !hidden
            .keys()
            .any(|h: &PathBuf| state.starts_with(h) && *h != state)
        {
            // What a profile hides inside it is hidden with it (no mount point in the stand-in).
            hidden.retain(|h, _| !(h.starts_with(&state) && *h != state));
            hidden.insert(state, HideReason::StepProofState);
        }
    }
    tracing::debug!("plan: catalogue");
    let credential_names = if home_shown.visible {
        let mut keep = vec![workspace.to_path_buf()];
        keep.extend(
            profile
                .filesystem
                .read_only
                .iter()
                .chain(&profile.filesystem.writable)
                .map(resolve),
        );
        keep.extend(home_shown.allowed.iter().cloned());
        crate::sandbox::plan::secrets::credential_names(
            home,
            &profile.filesystem.hidden_names,
            &keep,
            listings,
        )
    } else {
        Vec::new()
    };
    for found in &credential_names {
        hidden
            .entry(found.path.clone())
            .or_insert(HideReason::CredentialName);
    }
    tracing::debug!("plan: credential names");
    if profile.filesystem.hide_other_projects {
        // What the profile names itself (read_only, writable, home_allow) is no other project:
        // a named path, or a directory holding one, stays.
        let named: Vec<PathBuf> = profile
            .filesystem
            .read_only
            .iter()
            .chain(&profile.filesystem.writable)
            .map(resolve)
            .chain(home_shown.allowed.iter().cloned())
            .collect();
        for path in other_projects(workspace, home, notes) {
            if named.iter().any(|n| n.starts_with(&path)) {
                continue;
            }
            hidden.entry(path).or_insert(HideReason::OtherProject);
        }
    }
    if masks_home_sockets(profile, home_shown.visible, workspace == home) {
        let skip: Vec<PathBuf> = hidden.keys().cloned().collect();
        for path in home_sockets(home, &skip, notes) {
            hidden.entry(path).or_insert(HideReason::UnixSocket);
        }
    }
    for path in hidden_env_files(profile, workspace, repositories, env_files, notes) {
        hidden.entry(path).or_insert(HideReason::EnvFile);
    }
    // With an allow-listed home, only what is shown needs hiding.
    if home_shown.allowlist {
        hidden.retain(|path, _| {
            !path.starts_with(home)
                || path.starts_with(workspace)
                || home_shown.allowed.iter().any(|a| path.starts_with(a))
        });
    }
    (hidden, credential_names)
}

/// Whether the home's unix sockets are hidden, for both isolations: where the profile masks
/// them and the home is shown beside the workspace; and wherever the workspace is the home
/// (the run's writable view), whatever `mask_home_sockets` says.
fn masks_home_sockets(profile: &Profile, home_visible: bool, workspace_is_home: bool) -> bool {
    profile.filesystem.mask_home_sockets && home_visible || workspace_is_home
}

/// The persistence paths that exist now as what they name (not a link: the sweep judges a
/// link, and nothing is bound onto one), known from the listings of their parents (most names
/// are absent: one listing a directory, not a lookup a name). A repository's own config is
/// left out: git writes it during the run, and the sweep judges what it gained.
pub(crate) fn existing_protected<'p>(
    protected_paths: &'p [PathBuf],
    listings: &mut Listings,
) -> Vec<&'p PathBuf> {
    protected_paths
        .iter()
        .filter(|path| !crate::sandbox::plan::protected::is_git_config(path))
        .filter(|path| {
            let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
                return false;
            };
            listings
                .names(parent)
                .is_some_and(|names| names.contains(name))
                && fs::symlink_metadata(path).is_ok_and(|m| !m.file_type().is_symlink())
        })
        .collect()
}

/// The project's `.env` files to hide: those the scan found, minus the ones the profile shows
/// and the tracked ones (hidden, a tracked file would look emptied to git inside, and
/// `git commit -a` would record that): those are reported instead.
fn hidden_env_files(
    profile: &Profile,
    workspace: &Path,
    repositories: &[PathBuf],
    found: Vec<PathBuf>,
    notes: &mut Vec<String>,
) -> Vec<PathBuf> {
    let mut tracked_by_repo: std::collections::HashMap<&Path, Result<BTreeSet<Vec<u8>>, String>> =
        std::collections::HashMap::new();
    let mut hide = Vec::new();
    for path in found {
        let rel = path.strip_prefix(workspace).unwrap_or(&path);
        if profile
            .filesystem
            .env_files_visible
            .iter()
            .any(|v| Path::new(v) == rel)
        {
            continue;
        }
        // The innermost repository holding it, and whether its index lists it.
        let repo = repositories
            .iter()
            .filter(|r| path.starts_with(r))
            .max_by_key(|r| r.as_os_str().len());
        let tracked = repo.and_then(|repo| {
            let git_dir = repo.join(".git");
            if !git_dir.is_dir() {
                return Some(Err("its repository's .git is not a directory".to_string()));
            }
            let in_repo = path
                .strip_prefix(repo)
                .ok()?
                .as_os_str()
                .as_bytes()
                .to_vec();
            let listed = tracked_by_repo
                .entry(repo.as_path())
                .or_insert_with(|| crate::sandbox::plan::git_index::tracked_in(&git_dir));
            Some(
                listed
                    .as_ref()
                    .map(|set| set.contains(&in_repo))
                    .map_err(Clone::clone),
            )
        });
        match tracked {
            Some(Ok(true)) => notes.push(format!(
                "WARNING: {} is a .env file tracked by git: it stays visible (hidden, git inside would see it emptied); take the secrets out of the repository",
                path.display()
            )),
            Some(Err(why)) => {
                notes.push(format!(
                    "{}: hidden, though whether git tracks it is unknown ({why})",
                    path.display()
                ));
                hide.push(path);
            }
            _ => hide.push(path),
        }
    }
    hide
}

/// Siblings of the workspace and of each ancestor up to the home: other people's projects.
/// Dot-entries are configuration (the secret catalogue covers those that matter), not projects.
/// A symbolic link is no project either (and a mount onto it would land on its target): what it
/// points to is judged where it is — in the home, a sibling of some ancestor or a catalogued
/// secret, hidden by its own rule; elsewhere, shown only if the view shows it.
pub(crate) fn other_projects(
    workspace: &Path,
    home: &Path,
    notes: &mut Vec<String>,
) -> Vec<PathBuf> {
    let mut found = Vec::new();
    if !workspace.starts_with(home) || workspace == home {
        return found;
    }
    let mut current = workspace;
    while let Some(parent) = current.parent() {
        if let Ok(entries) = fs::read_dir(parent) {
            for entry in entries.flatten() {
                let path = entry.path();
                let name = entry.file_name();
                let link = entry.file_type().is_ok_and(|t| t.is_symlink());
                if path != current && !link && !name.to_string_lossy().starts_with('.') {
                    found.push(path);
                    if found.len() >= SCAN_ENTRY_LIMIT {
                        notes.push(format!(
                            "other projects: stopped after {SCAN_ENTRY_LIMIT} entries under {}",
                            parent.display()
                        ));
                        return found;
                    }
                }
            }
        }
        if parent == home {
            break;
        }
        current = parent;
    }
    found
}

/// Unix sockets under the home: every bound one the kernel lists in /proc/net/unix (any depth),
/// plus a shallow breadth-first scan for socket files whose listener lives in another network
/// namespace (connect() on a path crosses namespaces).
pub(crate) fn home_sockets(home: &Path, skip: &[PathBuf], notes: &mut Vec<String>) -> Vec<PathBuf> {
    let mut found: BTreeSet<PathBuf> = fs::read_to_string("/proc/net/unix")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter_map(|line| line.split_whitespace().nth(7))
        .map(PathBuf::from)
        .filter(|path| path.starts_with(home) && !skip.iter().any(|s| path.starts_with(s)))
        .filter(|path| fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()))
        .collect();
    let mut queue = std::collections::VecDeque::from([(home.to_path_buf(), 0usize)]);
    let mut seen = 0usize;
    while let Some((dir, depth)) = queue.pop_front() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            seen += 1;
            if seen > SCAN_ENTRY_LIMIT {
                notes.push(format!(
                    "socket scan of {} stopped after {SCAN_ENTRY_LIMIT} entries",
                    home.display()
                ));
                return found.into_iter().collect();
            }
            let path = entry.path();
            if skip.iter().any(|s| path.starts_with(s)) {
                continue;
            }
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_socket() {
                found.insert(path);
            } else if kind.is_dir() && depth + 1 < SOCKET_SCAN_DEPTH {
                queue.push_back((path, depth + 1));
            }
        }
    }
    found.into_iter().collect()
}
