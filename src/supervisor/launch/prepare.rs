//! What the launch makes ready before the sandbox starts, each on its own: the namespace seed
//! forked early, the idmapped trees, the run's scratch directory, the gateway with its login
//! (and the records of the login's refreshes), the credential broker, and the reaping of
//! children the run left.

use super::error::*;
use crate::audit::sink::AuditSink;
use crate::sandbox::mounts::IdmappedTrees;
use crate::sandbox::namespaces::{self, USERNS_HINT};
use crate::sandbox::plan::{Access, MountOp, ROOT_MODE_OUTSIDE_ID, SandboxPlan};
use crate::supervisor::net::{credentials, gateway};
use crate::sys::{self, MountFlags};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use std::io;
use std::os::fd::OwnedFd;
use std::sync::OnceLock;

/// The user namespace idmapped mounts borrow their mapping from (host root → the sandbox
/// user's host id). Creating one costs a clone and a wait, so a run makes it once and uses it
/// for the capability check and for every tree.
pub(super) fn idmap_userns() -> Result<&'static OwnedFd, LaunchError> {
    static USERNS: OnceLock<Result<OwnedFd, String>> = OnceLock::new();
    USERNS
        .get_or_init(|| {
            namespaces::root_to_sandbox_userns(ROOT_MODE_OUTSIDE_ID).map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|message| LaunchError::Os {
            step: "creating the idmap user namespace",
            source: io::Error::other(message.clone()),
            hint: USERNS_HINT,
        })
}

/// The namespace seed started early (see [`start_namespace_seed`]), waiting for the launch.
pub(super) static EARLY_SEED: std::sync::Mutex<Option<(bool, sys::seed::NamespaceSeed)>> =
    std::sync::Mutex::new(None);

/// Starts the sandbox's user namespace and its network namespace first thing, before the
/// profile is read: the kernel builds them (the network namespace costs about half a
/// millisecond) on the other core while this process reads the profile and builds the plan. A
/// profile that shares the host's network gets a new seed without one at launch; a run that
/// ends before its launch stops the seed. A failure here is not reported: the launch tries
/// again and reports it then (or runs without namespaces where the profile allows that).
pub fn start_namespace_seed() {
    let new_net = true;
    if let Ok(seed) = sys::seed::NamespaceSeed::spawn(new_net)
        && let Ok(mut slot) = EARLY_SEED.lock()
    {
        *slot = Some((new_net, seed));
    }
}

/// The early seed if it fits, else a new one.
pub(super) fn take_seed(new_net: bool) -> io::Result<sys::seed::NamespaceSeed> {
    let early = EARLY_SEED.lock().ok().and_then(|mut slot| slot.take());
    match early {
        Some((net, seed)) if net == new_net => Ok(seed),
        _ => sys::seed::NamespaceSeed::spawn(new_net),
    }
}

/// Waits until every child of this process is gone and reaped (the sandbox init, whose own exit
/// is the namespaces' teardown; the namespace seed and its network maker; the idmap user
/// namespace's holders): called just before `stepproof-run` exits, so that nothing it started
/// outlives it, orphaned or a zombie for a pid 1 that might not reap (as in some containers).
/// Bounded: after `limit` it says what is left and returns.
pub fn reap_children(limit: std::time::Duration) {
    // A run that ended before its launch (a refusal, a bad profile) never took the early seed:
    // it is stopped here, or it would wait for a launch that does not come.
    if let Ok(mut slot) = EARLY_SEED.lock() {
        drop(slot.take());
    }
    let deadline = std::time::Instant::now() + limit;
    loop {
        match waitpid(
            Pid::from_raw(-1),
            Some(WaitPidFlag::WNOHANG | WaitPidFlag::__WALL),
        ) {
            Ok(WaitStatus::StillAlive) => {
                if std::time::Instant::now() >= deadline {
                    crate::say!(
                        "stepproof-run: a process this run started was still running after {} s; not waiting longer",
                        limit.as_secs()
                    );
                    return;
                }
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
            Ok(_) => {}
            Err(_) => return,
        }
    }
}

/// Detached idmapped copies of the trees the plan binds through an id mapping (root
/// invocations), created here because only host root may create them.
pub fn prepare_idmapped_trees(plan: &SandboxPlan) -> Result<IdmappedTrees, LaunchError> {
    let mut trees = IdmappedTrees::new();
    for op in &plan.mounts {
        let MountOp::IdmappedBind { src, access, .. } = op else {
            continue;
        };
        let userns = idmap_userns()?;
        let tree = sys::open_tree_clone(src).map_err(|source| LaunchError::OnPath {
            step: "open_tree",
            path: src.clone(),
            source,
            hint: "",
        })?;
        let flags = MountFlags {
            read_only: *access == Access::ReadOnly,
            nosuid: true,
            nodev: true,
        };
        sys::idmap_detached_tree(&tree, userns, flags).map_err(|source| LaunchError::OnPath {
            step: "idmapping",
            path: src.clone(),
            source,
            hint: " (this file system does not support idmapped mounts, which a root invocation needs to run the command as an unprivileged user: run stepproof-run as the user who owns the workspace, or keep the workspace on a file system that supports them — ext4, xfs, btrfs, tmpfs; `stepproof doctor` tells)",
        })?;
        trees.push_back(tree);
    }
    Ok(trees)
}

/// Whether idmapped mounts work for `path` here (asked only when invoked as root).
pub fn idmapped_mounts_work(path: &std::path::Path) -> bool {
    let Ok(userns) = idmap_userns() else {
        return false;
    };
    let Ok(tree) = sys::open_tree_clone(path) else {
        return false;
    };
    sys::idmap_detached_tree(&tree, userns, MountFlags::default()).is_ok()
}

/// The audit record of a refresh of the host's model login, or of a refusal to refresh it.
pub const LOGIN_REFRESH: &str = "login-refresh";

/// Every refresh of the host's model login, and every refusal to refresh it, becomes a
/// [`LOGIN_REFRESH`] record. One that sent the host's refresh token (a refresh, an attempt that
/// failed at the token endpoint) is written whatever the budget: each is a use of the user's
/// login, and the rule bounds how many there can be (`login::after_401`). The others — refusals,
/// a token taken from the store, a failure before anything was sent — spend nothing, and
/// refusals follow the agent's requests one for one: they are charged to the run's budget of
/// what the agent causes, so a flood of 401s is counted, not written (`inside-records-over-cap`).
pub fn record_login_refreshes(
    login: &crate::supervisor::net::login::ModelLogin,
    audit: &AuditSink,
) {
    let audit = audit.clone_handle();
    login.record_refreshes(move |record| {
        if record.refresh_token_sent {
            audit.record("supervisor", LOGIN_REFRESH, record);
        } else {
            audit.record_caused("supervisor", LOGIN_REFRESH, record);
        }
    });
}

/// The per-run scratch directory a plan names (hosts without a mount namespace, where /tmp is
/// the host's): the plan only describes it; the launch creates it, mode 0700 and never over a
/// name that exists already (one taken beforehand stops the launch), and it is removed with
/// everything in it when this is dropped, after the run or on the way out of a failed launch.
#[derive(Debug)]
pub struct ScratchDir(std::path::PathBuf);

impl ScratchDir {
    /// Creates the directory `plan.scratch_dir` names, if it names one.
    pub fn create(plan: &SandboxPlan) -> Result<Option<ScratchDir>, LaunchError> {
        use std::os::unix::fs::DirBuilderExt;
        let Some(path) = &plan.scratch_dir else {
            return Ok(None);
        };
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(path)
            .map_err(|source| LaunchError::OnPath {
                step: "creating the per-run scratch directory",
                path: path.clone(),
                source,
                hint: "",
            })?;
        Ok(Some(ScratchDir(path.clone())))
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The gateway's upstream and the model login for a plan with a gateway (a credential the
/// profile names but the environment lacks, or an unreadable CA, is an error): before the
/// launch, which needs the login's placeholder, and before the plan is final (the organisation's
/// server-managed settings are fetched with the login).
pub fn prepare_gateway(
    plan: &SandboxPlan,
) -> Result<
    Option<(
        gateway::Upstream,
        std::sync::Arc<crate::supervisor::net::login::ModelLogin>,
    )>,
    String,
> {
    plan.gateway
        .as_ref()
        .map(|config| gateway::prepare(config, &plan.home, &plan.held_outside))
        .transpose()
        .map_err(|e| format!("setting up the credential gateway: {e}"))
}

/// The broker the proxy uses: the service credentials' (if any), with the model login's
/// placeholders, which only the gateway accepts: the proxy blocks them anywhere.
pub(super) fn broker_with_model_placeholders(
    credentials: Option<credentials::Prepared>,
    placeholder: &crate::supervisor::net::login::Placeholder,
) -> Option<std::sync::Arc<credentials::Broker>> {
    let model_placeholders: Vec<(String, String)> = placeholder
        .values()
        .into_iter()
        .map(|value| ("model-login".to_string(), value))
        .collect();
    match credentials {
        Some(prepared) if model_placeholders.is_empty() => Some(prepared.broker),
        Some(prepared) => {
            let broker = std::sync::Arc::try_unwrap(prepared.broker)
                .expect("the broker is not shared before the proxy starts");
            Some(std::sync::Arc::new(credentials::Broker {
                elsewhere: model_placeholders,
                ..broker
            }))
        }
        None if model_placeholders.is_empty() => None,
        None => Some(std::sync::Arc::new(credentials::Broker {
            credentials: Vec::new(),
            authority: None,
            read_only: Vec::new(),
            elsewhere: model_placeholders,
        })),
    }
}

/// The `service-credentials` record: each rule (never a secret), the read-only hosts, the notes.
pub(super) fn record_service_credentials(
    plan: &SandboxPlan,
    prepared: &credentials::Prepared,
    audit: &AuditSink,
) {
    let rules: Vec<serde_json::Value> = prepared
        .broker
        .credentials
        .iter()
        .map(|c| {
            serde_json::json!({
                "name": c.name,
                "host": format!("{}:{}", c.host, c.port),
                "paths": c.rule.paths,
                "methods": c.rule.methods,
                "source": c.rule.source_spec().describe(),
            })
        })
        .collect();
    audit.record(
        "supervisor",
        "service-credentials",
        &serde_json::json!({
            "rules": rules,
            "read_only": plan.read_only,
            "notes": prepared.notes,
        }),
    );
}
