//! The degraded strategy, for hosts that refuse user namespaces (some containers; Ubuntu's
//! `apparmor_restrict_unprivileged_userns`), where a profile allows it: Landlock and seccomp
//! only, over the host's own file system. Landlock cannot carve an exception out of a granted
//! directory, so the directories on the way to a hidden path are granted entry by entry; TCP is
//! confined by Landlock port rules (there is no network namespace); and every loss against the
//! namespace sandbox is written down in the plan, the report and `explain`.

use crate::profile::{NetworkMode, Profile};
use crate::sandbox::plan::agent_layer::AgentPlan;
use crate::sandbox::plan::landlock::{FsAccess, LandlockRule, TcpPolicy, grant_except, list_dir};
use crate::sandbox::plan::secrets::Listings;
use crate::sandbox::plan::{
    Access, DEVICE_NODES, HideReason, HostFacts, Identity, IdentityMode, Isolation,
    IsolationStrategy, PlanError, Realized, Scope, choose_identity, landlock_rule,
};
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// The Landlock rules as they are built, and what they lose.
pub(crate) struct LandlockView {
    rules: Vec<LandlockRule>,
    /// Directories to grant, kept until what must not be seen is known: each is then granted
    /// whole or, where a hidden path lies below it, entry by entry.
    grants: Vec<(PathBuf, FsAccess)>,
    losses: Vec<String>,
    /// The per-run directory the command gets as TMPDIR (the host's /tmp is not writable).
    scratch: Option<PathBuf>,
}

impl IsolationStrategy for LandlockView {
    const ISOLATION: Isolation = Isolation::LandlockSeccompOnly;
    /// Without a UTS namespace the host name is the host's.
    const HOSTNAME: &'static str = "";
    /// Nothing can be mounted where the agent could not change it; a profile with a hook runs
    /// here only with `[degraded] accept_removable_hook = true`, and without the agent's layer.
    const PLANS_AGENT: bool = false;
    /// Not yet: the whole home is granted (minus what is hidden), as before the core was shared.
    /// [`IsolationStrategy::private_home`] is ready for it.
    const HONOURS_HOME_ALLOWLIST: bool = false;
    /// Not yet: only the catalogue, other projects and sockets are hidden here.
    const HIDES_CREDENTIAL_NAMES: bool = false;
    /// Not yet, as above.
    const HIDES_ENV_FILES: bool = false;
    /// Not yet: no `.git` is pinned here, and the sweep is not given the repositories.
    const RECORDS_REPOSITORIES: bool = false;

    fn refuse(profile: &Profile) -> Result<(), PlanError> {
        if !profile.degraded.allow {
            return Err(PlanError::NoUserNamespaces);
        }
        if profile.hook.is_some() && !profile.degraded.accept_removable_hook {
            return Err(PlanError::HookNeedsNamespaces);
        }
        if profile.network.gateway.is_some() {
            return Err(PlanError::GatewayNeedsNamespaces);
        }
        Ok(())
    }

    /// Invoked as root there is no unprivileged user to become: uid 0, only where the profile
    /// allows the root fallback.
    fn identity(
        profile: &Profile,
        facts: &HostFacts,
        notes: &mut Vec<String>,
    ) -> Result<Identity, PlanError> {
        let mut identity = choose_identity(profile, facts, notes)?;
        if facts.uid == 0 {
            if !profile.process.allow_root_fallback {
                return Err(PlanError::RootWithoutUserNamespaces);
            }
            identity.mode = IdentityMode::RootFallback;
            identity.inside_uid = 0;
            identity.inside_gid = 0;
            identity.outside_uid = 0;
            identity.outside_gid = 0;
        }
        Ok(identity)
    }

    fn masks_home_sockets(
        profile: &Profile,
        _home_visible: bool,
        _workspace_is_home: bool,
    ) -> bool {
        profile.filesystem.mask_home_sockets
    }

    fn start(_scope: &Scope<'_>, _agent: Option<&AgentPlan>) -> Self {
        LandlockView {
            rules: Vec::new(),
            grants: Vec::new(),
            losses: vec![
                "no mount namespace: the host's file system is what Landlock grants, not a rebuilt view".to_string(),
                "no pid namespace: the host's processes are visible in /proc (Landlock's signal scope and seccomp's ptrace rule still stop signals and tracing)".to_string(),
                "no user namespace: the command runs with the caller's uid and groups, and the capability bounding set cannot be emptied without privileges (no_new_privs keeps execve from gaining anything)".to_string(),
                "`ls /` and `ls /dev` are refused (only the granted entries are reachable)".to_string(),
            ],
            scratch: None,
        }
    }

    fn system_directory(&mut self, path: PathBuf) -> Result<(), PlanError> {
        if fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_dir()) {
            self.rules.push(landlock_rule(path, FsAccess::ReadExecute)?);
        }
        Ok(())
    }

    fn kernel_interfaces(&mut self) -> Result<(), PlanError> {
        self.rules
            .push(landlock_rule("/proc", FsAccess::ReadExecute)?);
        self.rules
            .push(landlock_rule("/sys", FsAccess::ReadExecute)?);
        Ok(())
    }

    /// The host's device nodes of the minimal /dev and its terminals, where they exist.
    fn devices(&mut self) -> Result<(), PlanError> {
        let devices = DEVICE_NODES
            .iter()
            .map(|n| format!("/dev/{n}"))
            .chain(["/dev/pts".into(), "/dev/ptmx".into()]);
        for device in devices {
            if Path::new(&device).exists() {
                self.rules.push(landlock_rule(device, FsAccess::Device)?);
            }
        }
        Ok(())
    }

    /// The per-run scratch directory, named here; the launch creates it and removes it after
    /// the run. Its rule comes last (see [`Self::finish`]).
    fn scratch_space(&mut self, scope: &Scope<'_>) -> Result<(), PlanError> {
        let scratch = scratch_dir(scope.facts);
        self.losses.push(format!(
            "no private /tmp: the host's /tmp is not writable; TMPDIR is the per-run directory {}",
            scratch.display()
        ));
        self.scratch = Some(scratch);
        Ok(())
    }

    /// Nothing of the home is granted; what the profile lists there is shown next.
    fn private_home(&mut self, _scope: &Scope<'_>) {}

    fn show(&mut self, path: &Path, access: Access) -> Result<(), PlanError> {
        let access = match access {
            Access::ReadOnly => FsAccess::ReadExecute,
            Access::ReadWrite => FsAccess::ReadWrite,
        };
        self.grants.push((path.to_path_buf(), access));
        Ok(())
    }

    /// Every directory shown so far, granted around what must not be seen.
    fn hide(&mut self, hidden: BTreeMap<PathBuf, HideReason>) -> Result<(), PlanError> {
        let hidden: Vec<PathBuf> = hidden.into_keys().collect();
        for (root, access) in std::mem::take(&mut self.grants) {
            let expansion = grant_except(&root, access, &hidden, &list_dir)
                .map_err(|source| PlanError::LandlockGrant { root, source })?;
            self.rules.extend(expansion.rules);
            self.losses.extend(expansion.losses);
        }
        Ok(())
    }

    /// Nothing can be made read-only inside a granted directory: what would be is written down.
    fn protect(
        &mut self,
        scope: &Scope<'_>,
        protected_paths: &[PathBuf],
        _repositories: &[PathBuf],
        _listings: &mut Listings,
        _notes: &mut Vec<String>,
    ) {
        let writable_protected: Vec<String> = protected_paths
            .iter()
            .filter(|p| p.exists())
            .map(|p| p.display().to_string())
            .collect();
        if !writable_protected.is_empty() {
            self.losses.push(format!(
                "persistence paths inside the workspace cannot be made read-only (Landlock grants the whole workspace): {}",
                writable_protected.join(", ")
            ));
        }
        let writable_profile: Vec<String> = scope
            .profile
            .files
            .iter()
            .filter(|f| f.path.starts_with(scope.workspace))
            .map(|f| f.path.display().to_string())
            .collect();
        if !writable_profile.is_empty() {
            self.losses.push(format!(
                "the profile's own files inside the workspace cannot be made read-only (checked after the run instead): {}",
                writable_profile.join(", ")
            ));
        }
    }

    /// TCP through Landlock's port rules (there is no network namespace), and the scratch
    /// directory's rule.
    fn finish(mut self, scope: &Scope<'_>) -> Result<Realized, PlanError> {
        debug_assert!(
            self.grants.is_empty(),
            "hide() grants what show() asked for"
        );
        let profile = scope.profile;
        let tcp = match profile.network.mode {
            NetworkMode::None => {
                self.losses.push("network none: no network namespace; Landlock denies every TCP bind and connect, but UDP and unix sockets are not restricted".into());
                Some(TcpPolicy::default())
            }
            NetworkMode::Allowlist => {
                self.losses.push(format!(
                    "network allowlist: no network namespace; Landlock allows TCP connect only to port {} (the proxy, on any address) and no bind; UDP and unix sockets are not restricted",
                    profile.network.proxy_port
                ));
                Some(TcpPolicy {
                    bind: Vec::new(),
                    connect: vec![profile.network.proxy_port],
                })
            }
            NetworkMode::Host => None,
        };
        if let Some(scratch) = &self.scratch {
            self.rules
                .push(landlock_rule(scratch.clone(), FsAccess::ReadWrite)?);
        }
        Ok(Realized {
            mounts: Vec::new(),
            landlock_rules: self.rules,
            tcp,
            losses: self.losses,
            scratch_dir: self.scratch,
        })
    }
}

/// The per-run scratch directory's name: in the supervisor's temporary directory, after the
/// run, with a random part, so that nobody can take the name in a shared /tmp beforehand (the
/// launch refuses a directory that already exists).
fn scratch_dir(facts: &HostFacts) -> PathBuf {
    use std::hash::{BuildHasher, RandomState};
    let run = facts.run_dir.file_name().unwrap_or_default();
    let random = RandomState::new().hash_one(run);
    std::env::temp_dir().join(format!(
        "stepproof-scratch-{}-{random:016x}",
        run.to_string_lossy()
    ))
}
