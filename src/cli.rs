//! What the two binaries share: finding the facts of this machine, building the plan, printing
//! it, and logging.

use crate::audit::sink::AuditSink;
use crate::profile::{NetworkMode, Profile, ProfileError};
use crate::sandbox::plan::{HostFacts, PlanError, SandboxPlan, build_plan};
use crate::supervisor::spawn::{describe_identity, idmapped_mounts_work};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(transparent)]
    Profile(#[from] ProfileError),
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Quiet by default; `-v` for info, `-vv` for debug, or `STEPPROOF_LOG` for anything finer.
pub fn init_logging(verbosity: u8) {
    use tracing_subscriber::EnvFilter;
    use tracing_subscriber::filter::LevelFilter;
    // Only STEPPROOF_LOG needs the directive parser; a plain level is cheaper to set up, and
    // this runs before every launch.
    if let Ok(directives) = std::env::var("STEPPROOF_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(EnvFilter::new(directives))
            .with_writer(std::io::stderr)
            // Timestamps show where launch time goes.
            .with_timer(tracing_subscriber::fmt::time::uptime())
            .try_init();
        return;
    }
    let level = match verbosity {
        0 => LevelFilter::WARN,
        1 => LevelFilter::INFO,
        _ => LevelFilter::DEBUG,
    };
    let _ = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .without_time()
        .try_init();
}

fn canonical(path: &Path, what: &'static str) -> Result<PathBuf, CliError> {
    path.canonicalize().map_err(|source| CliError::Io {
        what,
        path: path.to_path_buf(),
        source,
    })
}

/// The caller's home: `$HOME` when it is an absolute path, else the password database.
fn caller_home(uid: u32) -> PathBuf {
    if let Some(home) = std::env::var_os("HOME").map(PathBuf::from)
        && home.is_absolute()
    {
        return home.canonicalize().unwrap_or(home);
    }
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map(|u| u.dir)
        .unwrap_or_else(|| PathBuf::from("/"))
}

/// The facts of this machine. Invoked as root, whether idmapped mounts work is probed only with
/// `probe_idmap` (explain, and profiles that allow the root fallback): a probe costs detached
/// mount trees whose teardown waits for an RCU grace period, and a launch that needs them
/// prepares them anyway and stops (exit 125) if the file system refuses.
pub fn gather_facts(workspace: Option<&Path>, probe_idmap: bool) -> Result<HostFacts, CliError> {
    let cwd_raw = std::env::current_dir().map_err(|source| CliError::Io {
        what: "reading the current directory",
        path: ".".into(),
        source,
    })?;
    let cwd = canonical(&cwd_raw, "resolving the current directory")?;
    let workspace = match workspace {
        Some(w) => canonical(w, "resolving the workspace")?,
        None => cwd.clone(),
    };
    if !workspace.is_dir() {
        return Err(CliError::Io {
            what: "the workspace is not a directory:",
            path: workspace,
            source: std::io::Error::from(std::io::ErrorKind::NotADirectory),
        });
    }
    let uid = nix::unistd::getuid().as_raw();
    let gid = nix::unistd::getgid().as_raw();
    let home = caller_home(uid);
    let home_for_facts = home.clone();
    let idmapped_mounts = uid == 0
        && (!probe_idmap
            || (idmapped_mounts_work(&workspace)
                && (!home.is_dir() || idmapped_mounts_work(&home))));
    Ok(HostFacts {
        uid,
        gid,
        groups: nix::unistd::getgroups()
            .map(|g| g.into_iter().map(|g| g.as_raw()).collect())
            .unwrap_or_default(),
        home,
        workspace,
        cwd,
        env: std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect(),
        idmapped_mounts,
        passwd: std::fs::read_to_string("/etc/passwd").unwrap_or_default(),
        group: std::fs::read_to_string("/etc/group").unwrap_or_default(),
        run_dir: AuditSink::default_run_dir(&home_for_facts),
        hook_binary: std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(|d| d.join("stepproof-hook")))
            .filter(|p| p.is_file()),
        claude_managed_dir: PathBuf::from(crate::sandbox::plan::agent::MANAGED_DIR),
    })
}

pub fn load_plan(
    profile: Option<&Path>,
    workspace: Option<&Path>,
) -> Result<(Profile, SandboxPlan), CliError> {
    let profile = Profile::load(profile)?;
    tracing::debug!("profile loaded");
    let facts = gather_facts(workspace, true)?;
    tracing::debug!("facts gathered");
    let plan = plan_for(&profile, &facts)?;
    Ok((profile, plan))
}

/// The namespace sandbox, or — where user namespaces are refused and the profile allows it —
/// the Landlock + seccomp-only plan.
pub fn plan_for(profile: &Profile, facts: &HostFacts) -> Result<SandboxPlan, PlanError> {
    if profile.degraded.allow && !crate::sandbox::namespaces::user_namespaces_available() {
        return crate::sandbox::degraded::build_degraded_plan(profile, facts);
    }
    build_plan(profile, facts)
}

pub use crate::sandbox::report::namespaces;

/// `stepproof explain` as text: everything the sandbox will do, in order.
pub fn explain_text(profile: &Profile, plan: &SandboxPlan) -> String {
    let mut out = String::new();
    let mut line = |s: String| {
        out.push_str(&s);
        out.push('\n');
    };
    line(format!(
        "profile: {} ({})",
        profile.name,
        profile.origins.join(" <- ")
    ));
    if !profile.description.is_empty() {
        line(format!("  {}", profile.description));
    }
    line(format!("policy-hash: {}", plan.policy_hash));
    line(format!("assurance: {:?}", profile.assurance).to_lowercase());
    line(format!("identity: {}", describe_identity(plan)));
    line(format!("namespaces: {}", namespaces(plan).join(" ")));
    if plan.isolation == crate::sandbox::plan::Isolation::LandlockSeccompOnly {
        line("isolation: LANDLOCK + SECCOMP ONLY (user namespaces are refused on this host); what that loses:".into());
        for loss in &plan.losses {
            line(format!("  lost: {loss}"));
        }
    }
    line(format!(
        "network: {}",
        match plan.network {
            NetworkMode::None => "none (loopback only)".to_string(),
            NetworkMode::Allowlist => format!(
                "allowlist (loopback only; HTTP(S) proxy on 127.0.0.1:{} served from outside)",
                profile.network.proxy_port
            ),
            NetworkMode::Host => "HOST (unfiltered access to the host's network)".to_string(),
        }
    ));
    if plan.network == NetworkMode::Allowlist {
        line(format!(
            "network allow: {}",
            profile.network.allow.allow.join(" ")
        ));
        if !profile.network.allow.allow_addresses.is_empty() {
            line(format!(
                "network allow_addresses: {}",
                profile.network.allow.allow_addresses.join(" ")
            ));
        }
    }
    line(format!(
        "workspace: {} (read-write)",
        plan.workspace.display()
    ));
    line(format!("home: {}", plan.home.display()));
    line(format!("cwd: {}", plan.cwd.display()));
    if plan.agent.is_some() {
        line(format!(
            "agent: Claude Code's managed settings at {} are StepProof's (hook for every event, managed hooks only) plus the host's drop-ins without the keys StepProof owns ({})",
            crate::sandbox::plan::agent::MANAGED_DIR,
            crate::profile::claude_settings::OWNED_KEYS.join(", ")
        ));
        for removed in &plan.managed_settings_removed {
            line(format!(
                "  REMOVED from the host's managed settings: {removed}"
            ));
        }
    }
    line("mounts, in order:".into());
    for op in &plan.mounts {
        line(format!("  {op}"));
    }
    if !plan.credential_names.is_empty() {
        line("names in the home that look like secrets (hidden; filesystem.hidden_names):".into());
        for found in &plan.credential_names {
            line(format!(
                "  {} (matches {})",
                found.path.display(),
                found.pattern
            ));
        }
    }
    line("protected paths (read-only where they exist; checked after the run):".into());
    for p in &plan.protected_paths {
        let state = if p.exists() { "exists" } else { "absent" };
        line(format!("  {} ({state})", p.display()));
    }
    for l in crate::sandbox::landlock::describe(&plan.landlock) {
        line(l);
    }
    for l in crate::sandbox::seccomp::describe() {
        line(l);
    }
    let limits = &plan.limits;
    line(format!(
        "limits (per process): core={} nproc={} nofile={} fsize={} cpu={}",
        limits.core,
        limits.nproc,
        limits.nofile,
        limits.fsize_bytes(),
        limits
            .cpu
            .map_or("inherited".to_string(), |v| v.to_string())
    ));
    // The run's cgroup as this host would make it now.
    // As a `--ci` run would get them (an interactive one gets only those the profile names).
    let request = limits.cgroup(true);
    let host = crate::supervisor::cgroup::CgroupHost::discover(Path::new("/proc"));
    let cgroup = crate::supervisor::cgroup::plan(
        &host,
        &crate::supervisor::cgroup::CgroupLimits::from(&request),
        &host.run_name("explain"),
    );
    for entry in &cgroup.entries {
        use crate::supervisor::cgroup::describe;
        let how = if crate::supervisor::cgroup::is_named(&request, entry.limit) {
            "required"
        } else {
            "default: --ci runs, best-effort"
        };
        line(format!(
            "limit (whole run): {} {} ({how}): {}",
            entry.limit,
            describe(entry.limit, entry.value),
            entry.place.words()
        ));
    }
    if let Some(gateway) = &plan.gateway {
        line(format!(
            "credential gateway: {} <- {} (credential {}; the agent holds a placeholder)",
            gateway.upstream,
            crate::sandbox::plan::env::GATEWAY_SOCKET,
            gateway.credential
        ));
    }
    line(format!(
        "environment allow-list: {}",
        profile.process.env.join(" ")
    ));
    line(format!(
        "environment passed: {}",
        plan.env
            .iter()
            .map(|(k, _)| k.as_str())
            .collect::<Vec<_>>()
            .join(" ")
    ));
    line(format!(
        "environment dropped: {}",
        plan.env_dropped.join(" ")
    ));
    for note in &plan.notes {
        line(format!("note: {note}"));
    }
    out
}

/// `stepproof explain --json`.
pub fn explain_json(profile: &Profile, plan: &SandboxPlan) -> serde_json::Value {
    serde_json::json!({
        "profile": profile.name,
        "origins": profile.origins,
        "policy_hash": plan.policy_hash,
        "requested": profile,
        "namespaces": namespaces(plan),
        "plan": plan,
        "seccomp": crate::sandbox::seccomp::describe(),
    })
}
