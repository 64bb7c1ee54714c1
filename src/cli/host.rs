//! The facts of this machine (the caller, the workspace, the home, what the kernel allows) and
//! the plan built from them and a profile: what both binaries do before anything else.

use crate::audit::sink::AuditSink;
use crate::profile::{Profile, ProfileError};
use crate::sandbox::plan::{HostFacts, PlanError, SandboxPlan, build_degraded_plan, build_plan};
use crate::supervisor::launch::start::idmapped_mounts_work;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error(transparent)]
    Profile(#[from] ProfileError),
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// A runbook that does not read or does not check against the profile.
    #[error("{0}")]
    Runbook(String),
    #[error("{what} {}: {source}", crate::audit::text::one_line(path))]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

impl HostError {
    /// The profile or the flags are to fix (do not retry), rather than this host.
    pub fn is_configuration(&self) -> bool {
        match self {
            HostError::Profile(_) | HostError::Io { .. } | HostError::Runbook(_) => true,
            HostError::Plan(e) => e.is_configuration(),
        }
    }
}

fn canonical(path: &Path, what: &'static str) -> Result<PathBuf, HostError> {
    path.canonicalize().map_err(|source| HostError::Io {
        what,
        path: path.to_path_buf(),
        source,
    })
}

/// The caller's home: `$HOME` when it is an absolute path, else the password database.
pub fn caller_home(uid: u32) -> PathBuf {
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
pub fn gather_facts(workspace: Option<&Path>, probe_idmap: bool) -> Result<HostFacts, HostError> {
    let cwd_raw = std::env::current_dir().map_err(|source| HostError::Io {
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
        return Err(HostError::Io {
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
        claude_managed_dir: PathBuf::from(crate::sandbox::plan::agent_layer::MANAGED_DIR),
        runbook: None,
        selftest_probe: None,
        fresh: crate::sandbox::plan::run_kind::Fresh::default(),
        single_turn: false,
        shell_tool: true,
        session_seeding: crate::sandbox::plan::agent_layer::SessionSeeding::Every,
    })
}

/// The kind of run `stepproof explain` plans for: by default an interactive run of a command;
/// `--runbook FILE`, `--selftest` and `--ci` add what those runs add to the view.
#[derive(Debug, Default, Clone)]
pub struct ExplainAs {
    pub runbook: Option<PathBuf>,
    pub selftest: bool,
    pub ci: bool,
}

pub fn load_plan(
    profile: Option<&Path>,
    workspace: Option<&Path>,
    kind: &ExplainAs,
) -> Result<(Profile, SandboxPlan), HostError> {
    let profile = Profile::load(profile)?;
    tracing::debug!("profile loaded");
    let mut facts = gather_facts(workspace, true)?;
    tracing::debug!("facts gathered");
    // The `stepproof` binary explaining is the one a run binds (the runbook's client, the
    // self-test's probe): both are installed beside stepproof-run.
    let us = std::env::current_exe().map_err(|source| HostError::Io {
        what: "finding the stepproof binary",
        path: "/proc/self/exe".into(),
        source,
    })?;
    if let Some(path) = &kind.runbook {
        let loaded = load_runbook(path, &profile).map_err(HostError::Runbook)?;
        facts.runbook = Some(crate::sandbox::plan::run_kind::RunbookFacts {
            file: loaded.path,
            client: us.clone(),
        });
    }
    if kind.selftest {
        facts.selftest_probe = Some(us);
    }
    facts.fresh = crate::sandbox::plan::run_kind::Fresh {
        sessions: kind.ci || kind.selftest,
        caches: kind.ci || kind.selftest,
    };
    let plan = plan_for(&profile, &facts)?;
    Ok((profile, plan))
}

/// A runbook as `--runbook` named it, checked against the run's profile.
pub struct LoadedRunbook {
    pub runbook: crate::runbook::Runbook,
    pub path: PathBuf,
    /// The file as read: what the run must not be able to change.
    pub source: crate::profile::ProfileSource,
}

/// Reads and checks the runbook against the profile: its errors, each at its
/// file:line:column, refuse it.
pub fn load_runbook(path: &Path, profile: &Profile) -> Result<LoadedRunbook, String> {
    let text = crate::runbook::read(path).map_err(|e| format!("--runbook: {e}"))?;
    let report = crate::runbook::check(&text, profile);
    let origin = path.display().to_string();
    let errors: Vec<String> = report
        .problems
        .iter()
        .filter(|p| p.severity == crate::runbook::Severity::Error)
        .map(|p| p.render(&origin))
        .collect();
    let runbook = match report.runbook {
        Some(runbook) if errors.is_empty() => runbook,
        _ => {
            return Err(format!(
                "--runbook {origin} has errors against profile {}:\n{}",
                profile.name,
                errors.join("\n")
            ));
        }
    };
    if profile.hook.is_none() {
        return Err(format!(
            "--runbook {origin}: profile {} has no [hook]: nothing would enforce the steps",
            profile.name
        ));
    }
    Ok(LoadedRunbook {
        source: crate::profile::ProfileSource::of(path, &text),
        path: path.canonicalize().unwrap_or_else(|_| path.to_path_buf()),
        runbook,
    })
}

/// The namespace sandbox, or — where user namespaces are refused and the profile allows it —
/// the Landlock + seccomp-only plan.
pub fn plan_for(profile: &Profile, facts: &HostFacts) -> Result<SandboxPlan, PlanError> {
    if profile.degraded.allow && !crate::sandbox::namespaces::user_namespaces_available() {
        return build_degraded_plan(profile, facts);
    }
    build_plan(profile, facts)
}
