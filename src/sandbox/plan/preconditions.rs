//! What a profile and this host must hold before anything is planned: the model's route, the
//! limits' budgets, the login's paths, and a workspace the sandbox may be given.

use super::NEVER_A_WORKSPACE;
use super::error::{PlanError, WorkspaceRefusal};
use crate::profile::Profile;
pub use crate::profile::STATE_DIR;
use std::path::{Path, PathBuf};

/// Where the model login is sent is the user's to say, never a file that may have come with a
/// checkout: a profile inside the workspace may not name the gateway's upstream (its
/// `[network.gateway]`, or `ANTHROPIC_BASE_URL` in `set_env` when the gateway is on).
pub(super) fn check_model_route(
    profile: &Profile,
    workspace: &Path,
    model_gateway: bool,
) -> Result<(), PlanError> {
    let what = if profile.network.gateway.is_some() {
        "has a [network.gateway] section"
    } else if model_gateway && profile.process.set_env.contains_key("ANTHROPIC_BASE_URL") {
        "sets ANTHROPIC_BASE_URL"
    } else {
        return Ok(());
    };
    match file_in_workspace(profile, workspace) {
        Some(file) => Err(PlanError::ModelRouteFromWorkspace {
            path: file.path.clone(),
            what,
        }),
        None => Ok(()),
    }
}

/// The first file of the profile's chain that lies inside the workspace (what the agent could
/// have written), if any.
fn file_in_workspace<'p>(
    profile: &'p Profile,
    workspace: &Path,
) -> Option<&'p crate::profile::ProfileSource> {
    let workspace = workspace
        .canonicalize()
        .unwrap_or_else(|_| workspace.to_path_buf());
    profile
        .files
        .iter()
        .find(|f| f.path.starts_with(&workspace))
}

/// The budgets of what the agent can make the supervisor do (its records, its evidence walks)
/// are raised only by a profile the person running StepProof chose: with any file of the chain
/// inside the workspace, a raise is refused.
pub(super) fn check_budgets(profile: &Profile, workspace: &Path) -> Result<(), PlanError> {
    let mut raised: Vec<&str> = profile.runbook.raised();
    if profile.audit.inside_max_mib > crate::profile::DEFAULT_INSIDE_MAX_MIB {
        raised.push("audit.inside_max_mib");
    }
    if profile.audit.inside_max_per_second() > crate::audit::caused::DEFAULT_PER_SECOND {
        raised.push("audit.inside_max_per_second");
    }
    if raised.is_empty() {
        return Ok(());
    }
    match file_in_workspace(profile, workspace) {
        Some(file) => Err(PlanError::BudgetRaisedFromWorkspace {
            path: file.path.clone(),
            keys: raised.join(", "),
        }),
        None => Ok(()),
    }
}

/// What the model login is used for beyond the model API (`network.gateway.login_paths`) is
/// the user's to say: with any file of the chain inside the workspace, an added path is refused.
pub(super) fn check_login_paths(profile: &Profile, workspace: &Path) -> Result<(), PlanError> {
    if profile.network.login_paths.is_empty() {
        return Ok(());
    }
    match file_in_workspace(profile, workspace) {
        Some(file) => Err(PlanError::LoginPathsFromWorkspace {
            path: file.path.clone(),
            set_at: profile
                .where_set(&["network", "gateway", "login_paths"])
                .unwrap_or_else(|| file.path.display().to_string()),
        }),
        None => Ok(()),
    }
}

/// A workspace is the one directory the run may write, so it can be neither the whole file
/// system, nor a directory that holds the home (the home's secrets and rc files would be the
/// agent's), nor anything under the system directories the view shows read-only (`--workspace
/// /etc` would make the host's `/etc` writable), nor StepProof's own state (the audit logs).
/// The home itself is allowed: its persistence paths are protected and its secrets hidden.
pub(crate) fn check_workspace(
    profile: &Profile,
    workspace: &Path,
    home: &Path,
) -> Result<(), PlanError> {
    let refuse = |reason| {
        Err(PlanError::WorkspaceRefused {
            path: workspace.to_path_buf(),
            reason,
        })
    };
    if workspace == Path::new("/") {
        return refuse(WorkspaceRefusal::FileSystemRoot);
    }
    if home.starts_with(workspace) && home != workspace {
        return refuse(WorkspaceRefusal::HoldsTheHome {
            home: home.to_path_buf(),
        });
    }
    let system = profile
        .filesystem
        .system
        .iter()
        .map(|spec| spec.resolve(home, workspace))
        .chain(NEVER_A_WORKSPACE.iter().map(PathBuf::from));
    for dir in system {
        let canonical = dir.canonicalize().unwrap_or_else(|_| dir.clone());
        if workspace.starts_with(&canonical) || workspace.starts_with(&dir) {
            return refuse(WorkspaceRefusal::UnderSystemDirectory { dir });
        }
    }
    let state = home.join(STATE_DIR);
    if workspace.starts_with(&state) || state.starts_with(workspace) && workspace != home {
        return refuse(WorkspaceRefusal::StepProofState { state });
    }
    Ok(())
}
