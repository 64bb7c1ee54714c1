//! The plan for hosts that refuse user namespaces (some containers; Ubuntu's
//! `apparmor_restrict_unprivileged_userns`), where a profile allows it: Landlock and seccomp
//! only. Landlock cannot carve an exception out of a granted directory, so the directories on
//! the way to a hidden path are granted entry by entry; TCP is confined by Landlock port rules
//! (there is no network namespace); and every loss against the namespace sandbox is written
//! down in the plan, the report and `explain`.

use crate::profile::{NetworkMode, Profile};
use crate::sandbox::landlock::{self, FsAccess, LandlockPlan, LandlockRule, TcpPolicy};
use crate::sandbox::plan::env::build_environment;
use crate::sandbox::plan::{
    DEVICE_NODES, HostFacts, IdentityMode, Isolation, PlanError, SandboxPlan, choose_identity,
    existing, hide_target, home_sockets, landlock_rule, other_projects, protected_paths,
};
use std::fs;
use std::path::{Path, PathBuf};

pub fn build_degraded_plan(profile: &Profile, facts: &HostFacts) -> Result<SandboxPlan, PlanError> {
    if !profile.degraded.allow {
        return Err(PlanError::Refused(
            "user namespaces are not available here and the profile does not allow the Landlock + seccomp-only mode ([degraded] allow = true); run `stepproof doctor`".into(),
        ));
    }
    if profile.hook.is_some() && !profile.degraded.accept_removable_hook {
        return Err(PlanError::Refused(
            "without user namespaces the hook's managed settings cannot be mounted where the agent cannot change them; this profile has a hook, so it is refused unless [degraded] accept_removable_hook = true".into(),
        ));
    }
    if profile.network.gateway.is_some() {
        return Err(PlanError::Refused(
            "the credential gateway needs the sandbox's private /run: not available without namespaces".into(),
        ));
    }
    let mut notes = Vec::new();
    let mut identity = choose_identity(profile, facts, &mut notes)?;
    if facts.uid == 0 {
        if !profile.process.allow_root_fallback {
            return Err(PlanError::Refused(
                "invoked as root on a host without user namespaces: the command would run as uid 0; refused unless process.allow_root_fallback = true".into(),
            ));
        }
        identity.mode = IdentityMode::RootFallback;
        identity.inside_uid = 0;
        identity.inside_gid = 0;
        identity.outside_uid = 0;
        identity.outside_gid = 0;
    }
    let home = facts.home.clone();
    let workspace = facts.workspace.clone();
    crate::sandbox::plan::check_workspace(profile, &workspace, &home)?;
    let resolve = |spec: &crate::profile::PathSpec| spec.resolve(&home, &workspace);
    let mut losses = vec![
        "no mount namespace: the host's file system is what Landlock grants, not a rebuilt view".to_string(),
        "no pid namespace: the host's processes are visible in /proc (Landlock's signal scope and seccomp's ptrace rule still stop signals and tracing)".to_string(),
        "no user namespace: the command runs with the caller's uid and groups, and the capability bounding set cannot be emptied without privileges (no_new_privs keeps execve from gaining anything)".to_string(),
        "`ls /` and `ls /dev` are refused (only the granted entries are reachable)".to_string(),
    ];

    // What must not be seen, as in the namespace plan.
    let mut hidden: Vec<PathBuf> = profile
        .filesystem
        .hidden
        .iter()
        .filter_map(|s| hide_target(&resolve(s)))
        .collect();
    if profile.filesystem.hide_other_projects {
        hidden.extend(other_projects(&workspace, &home, &mut notes));
    }
    if profile.filesystem.mask_home_sockets {
        let sockets = home_sockets(&home, &hidden, &mut notes);
        hidden.extend(sockets);
    }
    hidden.sort();
    hidden.dedup();

    let scratch = tempfile::Builder::new()
        .prefix("stepproof-scratch-")
        .tempdir()
        .map_err(|source| PlanError::Io {
            what: "creating the per-run scratch directory in",
            path: std::env::temp_dir(),
            source,
        })?
        .keep();
    losses.push(format!(
        "no private /tmp: the host's /tmp is not writable; TMPDIR is the per-run directory {}",
        scratch.display()
    ));

    let mut rules = Vec::new();
    for spec in &profile.filesystem.system {
        let path = resolve(spec);
        if fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_dir()) {
            rules.push(landlock_rule(path, FsAccess::ReadExecute)?);
        }
    }
    rules.push(landlock_rule("/proc", FsAccess::ReadExecute)?);
    rules.push(landlock_rule("/sys", FsAccess::ReadExecute)?);
    let devices = DEVICE_NODES
        .iter()
        .map(|n| format!("/dev/{n}"))
        .chain(["/dev/pts".into(), "/dev/ptmx".into()]);
    for device in devices {
        if Path::new(&device).exists() {
            rules.push(landlock_rule(device, FsAccess::Device)?);
        }
    }
    let list_dir = |dir: &Path| landlock::list_dir(dir);
    let mut grant =
        |root: &Path, access: FsAccess, rules: &mut Vec<LandlockRule>| -> Result<(), PlanError> {
            let expansion =
                landlock::grant_except(root, access, &hidden, &list_dir).map_err(|e| {
                    PlanError::Refused(format!("Landlock rules for {}: {e}", root.display()))
                })?;
            rules.extend(expansion.rules);
            losses.extend(expansion.losses);
            Ok(())
        };
    if home != Path::new("/") && home.is_dir() && home != workspace {
        grant(&home, FsAccess::ReadExecute, &mut rules)?;
    }
    grant(&workspace, FsAccess::ReadWrite, &mut rules)?;
    for spec in &profile.filesystem.writable {
        let path = existing(resolve(spec), "filesystem.writable")?;
        grant(&path, FsAccess::ReadWrite, &mut rules)?;
    }
    for spec in &profile.filesystem.read_only {
        let path = existing(resolve(spec), "filesystem.read_only")?;
        grant(&path, FsAccess::ReadExecute, &mut rules)?;
    }
    rules.push(landlock_rule(scratch.clone(), FsAccess::ReadWrite)?);

    let protected_paths = protected_paths(profile, &workspace, &home, &mut notes);
    let writable_protected: Vec<String> = protected_paths
        .iter()
        .filter(|p| p.exists())
        .map(|p| p.display().to_string())
        .collect();
    if !writable_protected.is_empty() {
        losses.push(format!(
            "persistence paths inside the workspace cannot be made read-only (Landlock grants the whole workspace): {}",
            writable_protected.join(", ")
        ));
    }
    let writable_profile: Vec<String> = profile
        .files
        .iter()
        .filter(|f| f.path.starts_with(&workspace))
        .map(|f| f.path.display().to_string())
        .collect();
    if !writable_profile.is_empty() {
        losses.push(format!(
            "the profile's own files inside the workspace cannot be made read-only (checked after the run instead): {}",
            writable_profile.join(", ")
        ));
    }

    let tcp = match profile.network.mode {
        NetworkMode::None => {
            losses.push("network none: no network namespace; Landlock denies every TCP bind and connect, but UDP and unix sockets are not restricted".into());
            Some(TcpPolicy::default())
        }
        NetworkMode::Allowlist => {
            losses.push(format!(
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

    let (mut env, env_dropped) = build_environment(profile, facts, &identity, &home);
    for (name, value) in env.iter_mut() {
        if name == "TMPDIR" {
            *value = scratch.display().to_string();
        }
    }
    let cwd = if facts.cwd.starts_with(&workspace) {
        facts.cwd.clone()
    } else {
        workspace.clone()
    };
    Ok(SandboxPlan {
        agent: None,
        managed_settings_removed: Vec::new(),
        repositories: Vec::new(),
        credential_names: Vec::new(),
        isolation: Isolation::LandlockSeccompOnly,
        losses,
        scratch_dir: Some(scratch),
        profile: profile.name.clone(),
        policy_hash: profile.policy_hash(),
        identity,
        hostname: String::new(),
        network: profile.network.mode,
        proxy_port: profile.network.proxy_port,
        allow: profile.network.allow.clone(),
        gateway: None,
        workspace,
        home,
        cwd,
        mounts: Vec::new(),
        protected_paths,
        env,
        env_dropped,
        landlock: LandlockPlan {
            rules,
            scope_signals_and_abstract_unix: true,
            tcp,
            assurance: profile.assurance,
        },
        limits: profile.process.limits.clone(),
        notes,
    })
}
