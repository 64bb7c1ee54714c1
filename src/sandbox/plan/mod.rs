//! The sandbox plan: the profile and the facts of this machine turned into plain data — every
//! mount in order, the identity, the environment, the Landlock and seccomp rules. It is what
//! `stepproof explain` prints and what the thin executor in `mounts.rs` and
//! `supervisor/launch/start.rs` applies. Building it reads the file system (what exists, what is a
//! socket) but changes nothing. One procedure ([`build_plan`], [`build_degraded_plan`]) builds
//! both kinds of plan; an `IsolationStrategy` realizes the view: mounts ([`namespaces`]) or
//! Landlock rules alone ([`degraded`]).

pub mod agent_layer;
pub mod caches;
pub mod credentials;
pub mod degraded;
pub mod env;
pub mod evidence_view;
pub mod git_index;
pub mod hook_policy;
pub mod landlock;
pub mod namespaces;
pub mod protected;
pub mod secrets;

use crate::profile::{HomeMode, Limits, NetworkMode, Profile, WorkspaceMode};
use crate::sandbox::plan::agent_layer::AgentPlan;
use crate::sandbox::plan::env::build_environment;
use crate::sandbox::plan::landlock::{FsAccess, LandlockPlan, LandlockRule, TcpPolicy};
use crate::sandbox::plan::secrets::Listings;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

pub(crate) use crate::sandbox::plan::protected::{WorkspaceScan, scan_workspace};

mod display;
mod error;
mod hidden;
mod preconditions;
pub mod run_kind;
pub mod server_managed;

pub use error::{PlanError, WorkspaceRefusal};
pub(crate) use hidden::existing_protected;
use hidden::hidden_paths;
use preconditions::{check_budgets, check_login_paths, check_model_route, check_workspace};

/// Facts about the caller and this machine the plan depends on.
#[derive(Debug, Clone)]
pub struct HostFacts {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
    /// Canonical home directory of the caller.
    pub home: PathBuf,
    /// Canonical workspace directory.
    pub workspace: PathBuf,
    /// Canonical current directory.
    pub cwd: PathBuf,
    pub env: Vec<(String, String)>,
    /// Whether idmapped mounts work for the workspace and home (only asked when invoked as root).
    pub idmapped_mounts: bool,
    /// The host's /etc/passwd and /etc/group, for the generated copies in root mode.
    pub passwd: String,
    pub group: String,
    /// The run's own directory on the host (audit log, hook socket, the agent's config dir);
    /// outside the sandbox's view.
    pub run_dir: PathBuf,
    /// `stepproof-hook`, installed next to `stepproof-run`.
    pub hook_binary: Option<PathBuf>,
    /// The host's Claude Code managed-settings directory (`/etc/claude-code`), read to build
    /// the agent's own copy.
    pub claude_managed_dir: PathBuf,
    /// A runbook runs (`stepproof-run --runbook`): its state and client are bound under the
    /// agent's layer and its file is read-only ([`run_kind`]); its observers answer in the
    /// model's context, so Claude Code waits for them (see `agent_layer::managed_settings`).
    pub runbook: Option<run_kind::RunbookFacts>,
    /// The self-test runs in place of a command: the probe binary its view binds ([`run_kind`]).
    pub selftest_probe: Option<PathBuf>,
    /// What this run starts from nothing (an unattended run, the self-test, a model verifier).
    pub fresh: run_kind::Fresh,
    /// The command is Claude Code taking one prompt (`claude -p PROMPT`): its one turn is the
    /// run's start record (see `agent_layer::single_turn`).
    pub single_turn: bool,
    /// The command leaves Claude Code its Bash tool (`agent_layer::offers_bash`): the managed
    /// `CLAUDE.md` lists the shell commands allowed only then.
    pub shell_tool: bool,
    /// Which kept sessions the agent's config directory is seeded with
    /// (`agent_layer::session_seeding`).
    pub session_seeding: agent_layer::SessionSeeding,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum IdentityMode {
    /// Invoked by a normal user: runs as that user's uid and gid.
    Caller,
    /// Invoked as root: runs as an unprivileged uid; workspace and home through idmapped mounts.
    RootRemapped,
    /// Invoked as root where idmapped mounts are impossible and the profile allows it: uid 0
    /// inside, with no capabilities.
    RootFallback,
}

/// Who the command is, inside and on the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Identity {
    pub mode: IdentityMode,
    pub inside_uid: u32,
    pub inside_gid: u32,
    pub outside_uid: u32,
    pub outside_gid: u32,
    /// Supplementary groups that stay (an unprivileged caller cannot drop them).
    pub kept_groups: Vec<u32>,
}

/// Host ids that the sandbox user of a root invocation owns on the host. Chosen far above any
/// normal allocation (and checked against /etc/passwd) so that no host account shares them.
pub const ROOT_MODE_OUTSIDE_ID: u32 = 2_147_000_000;
pub const SANDBOX_USER_NAME: &str = "stepproof";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Access {
    ReadOnly,
    ReadWrite,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum HideReason {
    Secret,
    /// Its name looks like a secret (`filesystem.hidden_names`).
    CredentialName,
    /// A project `.env` file (`filesystem.hide_env_files`).
    EnvFile,
    OtherProject,
    UnixSocket,
    /// Not an input an evidence command may read: an ignored file under a path the step
    /// protects, a build cache's configuration (`[runbook.evidence_view]`).
    EvidenceInput,
    /// StepProof's own state (run directories, audit logs, kept sessions): hidden whatever
    /// the profile lists; a run makes it before it plans, so it is a directory by then.
    StepProofState,
}

/// One step of building the sandbox's file system view, in order. `dst` is the path inside.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum MountOp {
    Bind {
        src: PathBuf,
        dst: PathBuf,
        access: Access,
    },
    /// A bind whose files owned by host root appear as the sandbox user's (root invocations).
    IdmappedBind {
        src: PathBuf,
        dst: PathBuf,
        access: Access,
    },
    Tmpfs {
        dst: PathBuf,
        mode: u32,
        size_mib: Option<u64>,
    },
    Proc {
        dst: PathBuf,
    },
    Devpts {
        dst: PathBuf,
    },
    DevNode {
        src: PathBuf,
        dst: PathBuf,
    },
    Symlink {
        target: PathBuf,
        dst: PathBuf,
    },
    /// An empty, read-only directory with mode 000 over `dst`.
    HideDir {
        dst: PathBuf,
        reason: HideReason,
    },
    /// An empty, read-only file with mode 000 over `dst` (also used over sockets).
    HideFile {
        dst: PathBuf,
        reason: HideReason,
    },
    /// The path as the view already shows it, bound onto itself read-only (persistence paths:
    /// taken from the new view so that an idmapped workspace keeps its mapping).
    ReadOnlyInPlace {
        path: PathBuf,
    },
    /// The directory as the view already shows it, bound onto itself with its access unchanged:
    /// a mount point cannot be renamed or removed (EBUSY), so what is bound below it stays put
    /// (the ancestors of a profile file kept in the workspace).
    PinInPlace {
        path: PathBuf,
    },
    /// `dst` read-only, as the host has it, with generated files laid over it (an overlay with
    /// two lower layers and no upper one): how StepProof adds `/etc/claude-code/…` and the
    /// sandbox account without touching the host's `/etc`. Paths in `files` are relative to dst.
    Overlay {
        src: PathBuf,
        dst: PathBuf,
        files: Vec<(PathBuf, String)>,
    },
    /// A host path the supervisor opened before the clone (through an O_PATH descriptor, so
    /// the init needs no access to the directories above it), bound at `dst`.
    FromSupervisor {
        src: PathBuf,
        dst: PathBuf,
        access: Access,
    },
    /// `dst`, as the view shows it just before (read-only), becomes the lower layer of an
    /// overlay mounted over it whose upper layer is a private tmpfs of `size_mib`: the run can
    /// write there, and all it wrote goes with the sandbox's mount namespace, nothing reaches
    /// the host (`filesystem.workspace = "overlay"`).
    ScratchOverlay {
        dst: PathBuf,
        size_mib: u64,
    },
    /// A repository's `.git` directory seen through an overlay: the host's `.git` read-only
    /// beneath, the run's changes in `layer` (`upper/`, `work/`, in the run directory, outside
    /// the sandbox), and the directories in `through` (object stores, relative to `git`) bound
    /// back over it writable, so objects go straight to the host's store. The host's tools
    /// never see what the run wrote in `.git` until the end judges it and carries back what is
    /// inert (`supervisor::way_out::sweep::carry`); a supervisor that dies leaves it in the run
    /// directory, for the repair.
    GitLayer {
        git: PathBuf,
        layer: PathBuf,
        through: Vec<PathBuf>,
    },
    /// Everything at and below `dst` becomes read-only (after it was populated).
    SealReadOnly {
        dst: PathBuf,
    },
    /// A read-only tmpfs at `dst` holding only the files StepProof generated (paths relative to
    /// dst): what the agent reads there is StepProof's alone (`/etc/claude-code`).
    Generated {
        dst: PathBuf,
        files: Vec<(PathBuf, String)>,
    },
    /// A read-only tmpfs at `dst` holding the run's trust files (the bundle that trusts the
    /// run's CA, and the CA alone): the launch makes them after the plan (the CA is the run's)
    /// and hands them to the init beside it; nothing of them is written on the host.
    TrustFiles {
        dst: PathBuf,
    },
    /// A file generated by StepProof, read-only.
    File {
        dst: PathBuf,
        contents: Vec<u8>,
    },
    /// The rebuilt root itself becomes read-only (last).
    ReadOnlyRoot,
}

/// How the sandbox is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Isolation {
    /// User, mount, pid, ipc, uts, cgroup (and net) namespaces, plus Landlock and seccomp.
    Namespaces,
    /// Hosts that refuse user namespaces, where the profile allows it: Landlock and seccomp
    /// only. `SandboxPlan::losses` says what that gives up.
    LandlockSeccompOnly,
}

/// Which seccomp rule table the launch compiles (`sandbox::seccomp::rules_for`) and `explain`
/// prints. There is one today: no profile setting and neither isolation changes which system
/// calls are denied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SeccompRules {
    /// The deny table (`sandbox::seccomp::rule_table`): ptrace and its kin, mounts, new
    /// namespaces, kernel keyrings, terminal injection, setuid/setgid modes, …
    Standard,
}

impl SeccompRules {
    /// The name `explain` shows.
    pub fn name(self) -> &'static str {
        match self {
            SeccompRules::Standard => "standard",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SandboxPlan {
    /// The hook and the agent's own state (profiles with a hook).
    pub agent: Option<crate::sandbox::plan::agent_layer::AgentState>,
    /// Keys StepProof owns that the host's managed settings set (removed inside; `--ci` and a
    /// strict profile refuse to start, a best-effort one warns), as `<file>: <key>`.
    pub managed_settings_removed: Vec<String>,
    /// The managed settings Claude Code reads inside, merged as it merges them: StepProof's,
    /// then the host's `managed-settings.json` and drop-ins without the keys StepProof owns.
    pub managed_settings: Option<serde_json::Value>,
    /// Exactly what StepProof writes to `/etc/claude-code/managed-settings.json`: the gateway
    /// and the launch lay it over the organisation's server-managed settings.
    pub managed_ours: Option<serde_json::Value>,
    /// The repositories found at launch (the workspace's and the nested ones the bounded scan
    /// reached): the sweep compares what their `.git` is after the run.
    pub repositories: Vec<PathBuf>,
    pub isolation: Isolation,
    /// What this plan cannot enforce that the namespace sandbox would (degraded hosts).
    pub losses: Vec<String>,
    /// A per-run scratch directory (degraded hosts, where /tmp is the host's): named here,
    /// created by the launch and removed after the run (`supervisor::launch::start::ScratchDir`).
    pub scratch_dir: Option<PathBuf>,
    /// The build caches (`caches::CACHES`), bound read-write at `caches::CACHES_DIR`: created by
    /// the launch, removed after the run unless kept for the workspace.
    pub caches: Option<crate::sandbox::plan::caches::PlannedCaches>,
    pub profile: String,
    pub policy_hash: String,
    pub identity: Identity,
    pub hostname: String,
    pub network: NetworkMode,
    /// The proxy's port on the sandbox's loopback (`allowlist`).
    pub proxy_port: u16,
    /// What the proxy lets through (`allowlist`).
    pub allow: crate::profile::AllowList,
    /// The credential gateway, with `ca_file` resolved: the profile's `[network.gateway]`, or
    /// for an agent (a profile with a hook, in namespaces) the model gateway StepProof puts in
    /// by default (`credential = "model-login"`, upstream the user's `ANTHROPIC_BASE_URL` or
    /// Anthropic's API).
    pub gateway: Option<crate::profile::GatewayConfig>,
    /// Service credentials the proxy adds (`[[network.credentials]]`), each with this run's
    /// placeholder; the values are read by the supervisor at launch, never planned.
    pub credentials: Vec<crate::sandbox::plan::credentials::PlannedCredential>,
    /// Hosts the proxy lets through with GET and HEAD only (`allowlist`: the profile's
    /// `network.read_only`, the presets' upload hosts), TLS terminated with the run's CA.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub read_only: Vec<String>,
    /// With the gateway: the login variables and `ANTHROPIC_BASE_URL` kept outside, for the
    /// supervisor (never printed: values may be secrets).
    #[serde(skip)]
    pub held_outside: Vec<(String, String)>,
    pub workspace: PathBuf,
    /// How the run sees the workspace (an overlay the host's isolation cannot give is
    /// read-only, where the profile accepts that).
    pub workspace_mode: WorkspaceMode,
    pub home: PathBuf,
    pub cwd: PathBuf,
    pub mounts: Vec<MountOp>,
    /// Names in the home hidden because they look like secrets, with the pattern each matched
    /// (also `hide` entries in `mounts`).
    pub credential_names: Vec<crate::sandbox::plan::secrets::CredentialName>,
    /// Every persistence path looked at (existing ones are also read-only binds in `mounts`);
    /// the end-of-run sweep compares them.
    pub protected_paths: Vec<PathBuf>,
    /// Serialized as names only: a value may be a secret the profile chose to pass.
    #[serde(serialize_with = "names_only")]
    pub env: Vec<(String, String)>,
    /// Names of variables of the caller that were not passed (values never recorded).
    pub env_dropped: Vec<String>,
    /// Landlock, mirroring the view at mount granularity (hidden paths are the mounts' job:
    /// Landlock cannot carve an exception out of a granted directory).
    pub landlock: LandlockPlan,
    /// The seccomp rules the launch compiles and the init installs last, before `execve`.
    pub seccomp: SeccompRules,
    pub limits: Limits,
    /// Things a reader should know (bounds reached, groups kept, …).
    pub notes: Vec<String>,
}

fn names_only<S: serde::Serializer>(env: &[(String, String)], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(env.iter().map(|(name, _)| name))
}

/// The device nodes of the minimal /dev (besides the terminal devices of a new devpts).
pub const DEVICE_NODES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

const SCAN_ENTRY_LIMIT: usize = 20_000;
const SOCKET_SCAN_DEPTH: usize = 2;

/// `[network.gateway] credential` of the gateway StepProof puts in for an agent: the login
/// Claude Code on this host would use, found by the supervisor at launch.
pub const MODEL_LOGIN: &str = "model-login";

/// How much of the home the view shows.
struct HomeShown<'a> {
    visible: bool,
    /// `home = "allowlist"`: only `allowed` is shown.
    allowlist: bool,
    allowed: &'a [PathBuf],
}

/// The plan of the namespace sandbox.
pub fn build_plan(profile: &Profile, facts: &HostFacts) -> Result<SandboxPlan, PlanError> {
    plan_with::<namespaces::MountView>(profile, facts)
}

/// The plan for hosts that refuse user namespaces, where the profile allows it: Landlock and
/// seccomp only, with what that loses (see [`degraded`]).
pub fn build_degraded_plan(profile: &Profile, facts: &HostFacts) -> Result<SandboxPlan, PlanError> {
    plan_with::<degraded::LandlockView>(profile, facts)
}

/// What every step of planning reads: the request, this host, and what was decided first.
pub(crate) struct Scope<'a> {
    pub profile: &'a Profile,
    pub facts: &'a HostFacts,
    pub identity: &'a Identity,
    pub home: &'a Path,
    pub workspace: &'a Path,
}

/// The view as a strategy built it.
pub(crate) struct Realized {
    pub mounts: Vec<MountOp>,
    pub landlock_rules: Vec<LandlockRule>,
    pub tcp: Option<TcpPolicy>,
    pub losses: Vec<String>,
    pub scratch_dir: Option<PathBuf>,
}

/// What differs between the two isolations; the rest is one procedure, [`plan_with`]. The core
/// decides what the sandbox shows, hides and protects, and in which order; a strategy says what
/// its isolation refuses, who the command runs as, which of the core's sources of hidden paths
/// it uses, and how each part of the view is realized: mounts in a new mount namespace
/// ([`namespaces::MountView`]) or Landlock rules over the host's own file system
/// ([`degraded::LandlockView`]), with what that loses.
pub(crate) trait IsolationStrategy: Sized {
    const ISOLATION: Isolation;
    /// The host name inside (empty: the host's own).
    const HOSTNAME: &'static str;
    /// Whether the agent's layer (the hook's managed settings, the agent's state) is built.
    const PLANS_AGENT: bool;

    /// What this isolation cannot give the profile at all (by default, nothing).
    fn refuse(_profile: &Profile) -> Result<(), PlanError> {
        Ok(())
    }
    /// Who the command runs as (by default, [`choose_identity`]'s answer).
    fn identity(
        profile: &Profile,
        facts: &HostFacts,
        notes: &mut Vec<String>,
    ) -> Result<Identity, PlanError> {
        choose_identity(profile, facts, notes)
    }
    /// The empty view.
    fn start(scope: &Scope<'_>, agent: Option<&AgentPlan>) -> Self;
    /// A system directory (`filesystem.system`), read-only as the host has it.
    fn system_directory(&mut self, path: PathBuf) -> Result<(), PlanError>;
    /// /proc and /sys, read-only.
    fn kernel_interfaces(&mut self) -> Result<(), PlanError>;
    /// The device nodes and terminals.
    fn devices(&mut self) -> Result<(), PlanError>;
    /// Where the command writes temporary files.
    fn scratch_space(&mut self, scope: &Scope<'_>) -> Result<(), PlanError>;
    /// A home that shows only what is shown in it next (`home = "allowlist"`).
    fn private_home(&mut self, scope: &Scope<'_>);
    /// A host directory (the home, the workspace, the profile's extras), with `access`.
    fn show(&mut self, path: &Path, access: Access) -> Result<(), PlanError>;
    /// The workspace, as `filesystem.workspace` asks (writable, read-only, or an overlay whose
    /// writes are thrown away); returns how it is shown.
    fn workspace(&mut self, scope: &Scope<'_>) -> Result<WorkspaceMode, PlanError>;
    /// What must not be seen, and why; called once, after everything is shown.
    fn hide(&mut self, hidden: BTreeMap<PathBuf, HideReason>) -> Result<(), PlanError>;
    /// The persistence paths, the repositories' `.git` and the profile's own files.
    fn protect(
        &mut self,
        scope: &Scope<'_>,
        protected_paths: &[PathBuf],
        repositories: &[PathBuf],
        listings: &mut Listings,
        notes: &mut Vec<String>,
    );
    /// The finished view.
    fn finish(self, scope: &Scope<'_>) -> Result<Realized, PlanError>;
}

/// The one planning procedure, in order: what the isolation refuses, who the command is, the
/// workspace check, the agent's layer, then the view (system directories, kernel interfaces,
/// devices, scratch space, home, workspace and extras), what must not be seen, what must not be
/// changed, and the environment. `S` realizes each part.
fn plan_with<S: IsolationStrategy>(
    profile: &Profile,
    facts: &HostFacts,
) -> Result<SandboxPlan, PlanError> {
    // Before anything is looked at: what this isolation cannot give this profile.
    S::refuse(profile)?;
    let mut notes = Vec::new();
    // Who the command is decides who owns what the view shows.
    let identity = S::identity(profile, facts, &mut notes)?;
    let home = facts.home.clone();
    let workspace = facts.workspace.clone();
    // The one directory the run may write must be a project, before it is scanned.
    check_workspace(profile, &workspace, &home)?;
    let scope = Scope {
        profile,
        facts,
        identity: &identity,
        home: &home,
        workspace: &workspace,
    };
    let resolve = |spec: &crate::profile::PathSpec| spec.resolve(&home, &workspace);
    // The model's login stays outside: an agent's API traffic goes to the gateway by default.
    let model_gateway =
        profile.network.gateway.is_some() || (S::PLANS_AGENT && profile.hook.is_some());
    check_model_route(profile, &workspace, model_gateway)?;
    check_budgets(profile, &workspace)?;
    check_login_paths(profile, &workspace)?;
    // Service credentials: honoured only from profiles outside the workspace; a placeholder
    // each. The command's environment carries them (and never the variables they are read from).
    let credentials = credentials::plan_credentials(profile, facts)?;
    let environment = {
        let mut environment = build_environment(profile, facts, &identity, &home, model_gateway);
        let sources = credentials::source_variables(profile);
        let crate::sandbox::plan::env::Environment { env, dropped, .. } = &mut environment;
        env.retain(|(name, _)| {
            let source = sources.contains(name);
            if source {
                dropped.push(name.clone());
            }
            !source
        });
        let trust = S::ISOLATION == Isolation::Namespaces && credentials::needs_trust(profile);
        for (name, value) in credentials::credential_env(&credentials, trust, env) {
            if value.starts_with(credentials::TRUST_DIR)
                && let Some((_, before)) = env.iter().find(|(n, v)| *n == name && *v != value)
            {
                // The bundle holds the caller's own SSL_CERT_FILE (or the system's roots) and
                // the run's CA; a file the profile named is not in it.
                notes.push(format!(
                    "process: {name}={before} is replaced by the run's CA bundle ({value}: stepproof-run's SSL_CERT_FILE or the system's roots, and the run's CA)"
                ));
            }
            env.retain(|(n, _)| *n != name);
            env.push((name, value));
        }
        env.sort();
        dropped.sort();
        dropped.dedup();
        environment
    };

    // The agent inside: the hook where the agent cannot remove it, and its own state.
    let agent = if S::PLANS_AGENT {
        agent_layer::plan_agent(profile, facts, &home, &workspace, &environment.env)?
    } else {
        None
    };
    let managed_settings_removed = agent
        .as_ref()
        .map(|a| a.managed_removed.clone())
        .unwrap_or_default();
    let managed_settings = agent.as_ref().map(|a| a.managed_merged.clone());
    let managed_ours = agent.as_ref().map(|a| a.managed_ours.clone());
    if let Some(agent) = &agent {
        notes.extend(agent.notes.iter().cloned());
    }
    tracing::debug!("plan: agent planned");

    // What every process needs, read-only; then private scratch space.
    let mut view = S::start(&scope, agent.as_ref());
    for spec in &profile.filesystem.system {
        view.system_directory(resolve(spec))?;
    }
    view.kernel_interfaces()?;
    view.devices()?;
    view.scratch_space(&scope)?;

    // The home: read-only (unless it is the workspace), or with `home = "allowlist"` a private
    // one that shows only what the profile lists. Then the workspace, read-write, and the
    // profile's extras.
    let home_visible = home != Path::new("/") && home.is_dir() && home != workspace;
    let allowlist = home_visible && profile.filesystem.home == HomeMode::Allowlist;
    let home_allowed: Vec<PathBuf> = if allowlist {
        profile.filesystem.home_allow.iter().map(&resolve).collect()
    } else {
        Vec::new()
    };
    if allowlist {
        view.private_home(&scope);
    } else if home_visible {
        view.show(&home, Access::ReadOnly)?;
    }
    let workspace_mode = view.workspace(&scope)?;
    for spec in &profile.filesystem.writable {
        view.show(
            &existing(profile, spec, resolve(spec), "writable")?,
            Access::ReadWrite,
        )?;
    }
    for spec in &profile.filesystem.read_only {
        view.show(
            &existing(profile, spec, resolve(spec), "read_only")?,
            Access::ReadOnly,
        )?;
    }
    let mut listings = Listings::default();
    let mut missing = Vec::new();
    for path in &home_allowed {
        // Toolchains differ between machines: a listed path this host lacks is skipped.
        if listings.exists_below(&home, path) {
            view.show(path, Access::ReadOnly)?;
        } else {
            missing.push(path.display().to_string());
        }
    }
    if !missing.is_empty() {
        notes.push(format!(
            "home_allow: not on this host, skipped: {}",
            missing.join(", ")
        ));
    }
    tracing::debug!("plan: home and workspace");

    let WorkspaceScan {
        protected_paths,
        repositories,
        env_files,
    } = scan_workspace(profile, &workspace, &home, &mut notes);
    tracing::debug!("plan: workspace scanned");

    // What must not be seen, once everything that could show it is in the view.
    let shown = HomeShown {
        visible: home_visible,
        allowlist,
        allowed: &home_allowed,
    };
    let (hidden, credential_names) = hidden_paths(
        &scope,
        &shown,
        &mut listings,
        &repositories,
        env_files,
        &mut notes,
    );
    tracing::debug!("plan: hidden found");
    // The files credentials are read from are the supervisor's to read, never the sandbox's.
    let mut hidden = hidden;
    // So is the approval webhook's key file (the supervisor signs with it).
    let approval_key_file =
        crate::profile::approvals::setting(profile.approvals.as_ref(), &facts.env)
            .ok()
            .flatten()
            .and_then(|s| match s.key {
                crate::profile::credentials::SourceSpec::File(spec) => {
                    Some(spec.resolve(&facts.home, &facts.workspace))
                }
                _ => None,
            });
    for path in credentials::source_files(profile, facts)
        .into_iter()
        .chain(approval_key_file)
    {
        // Inside a directory hidden whole (another project, a secret directory) it is hidden
        // already, and has no mount point in the empty directory.
        if let Some(target) = crate::sandbox::plan::secrets::hide_target(&path)
            && !hidden.keys().any(|h| target.starts_with(h))
        {
            hidden.insert(target, HideReason::Secret);
        }
    }
    // A workspace the view would hide could not even be entered: the caller's to choose again.
    if let Some((path, reason)) = hidden.iter().find(|(h, _)| workspace.starts_with(h)) {
        return Err(PlanError::WorkspaceRefused {
            path: workspace.clone(),
            reason: WorkspaceRefusal::UnderHidden {
                hidden: path.clone(),
                why: reason.to_string(),
            },
        });
    }
    view.hide(hidden)?;
    // What must not be changed: persistence paths, the repositories' .git, the profile.
    view.protect(
        &scope,
        &protected_paths,
        &repositories,
        &mut listings,
        &mut notes,
    );
    let realized = view.finish(&scope)?;
    tracing::debug!("plan: view");

    let gateway = match &profile.network.gateway {
        Some(config) => Some(config.clone()),
        None if model_gateway => Some(crate::profile::GatewayConfig {
            upstream: environment
                .held("ANTHROPIC_BASE_URL")
                .unwrap_or(crate::sandbox::plan::env::DEFAULT_MODEL_API)
                .trim()
                .to_owned(),
            connect: None,
            ca_file: None,
            credential: MODEL_LOGIN.into(),
            login_paths: Vec::new(),
        }),
        None => None,
    }
    .map(|mut config| {
        config.login_paths = profile.network.login_paths.clone();
        config
    });
    let crate::sandbox::plan::env::Environment {
        mut env,
        dropped: env_dropped,
        held_outside,
    } = environment;
    notes.extend(crate::sandbox::plan::env::never_passed_notes(
        profile, facts,
    ));
    if let Some(agent) = &agent {
        for (name, value) in &agent.env {
            env.retain(|(n, _)| n != name);
            env.push((name.clone(), value.clone()));
        }
        env.sort();
    }
    // The build caches are StepProof's, never the host's (a mount of the namespace view; a
    // degraded host keeps the toolchains' defaults, in the read-only home). A variable the
    // profile sets itself wins.
    let caches = (S::ISOLATION == Isolation::Namespaces)
        .then(|| crate::sandbox::plan::caches::plan_caches(profile, facts));
    if caches.is_some() {
        for (name, value) in crate::sandbox::plan::caches::cache_env() {
            if !profile.process.set_env.contains_key(&name) {
                env.retain(|(n, _)| *n != name);
                env.push((name, value));
            }
        }
        env.sort();
    }
    // An evidence run: Python neither writes bytecode nor reads the workspace's.
    if scope.profile.runbook.evidence_view.is_some() {
        for (name, value) in crate::sandbox::plan::evidence_view::evidence_env() {
            env.retain(|(n, _)| n != name);
            env.push((name.to_owned(), value.to_owned()));
        }
        env.sort();
    }
    // Where /tmp is the host's, TMPDIR names the per-run directory.
    if let Some(scratch) = &realized.scratch_dir {
        for (name, value) in env.iter_mut() {
            if name == "TMPDIR" {
                *value = scratch.display().to_string();
            }
        }
    }
    let cwd = if facts.cwd.starts_with(&workspace) {
        facts.cwd.clone()
    } else {
        workspace.clone()
    };
    let mut plan = SandboxPlan {
        agent: agent.map(|a| a.state),
        managed_settings_removed,
        managed_settings,
        managed_ours,
        repositories,
        isolation: S::ISOLATION,
        losses: realized.losses,
        scratch_dir: realized.scratch_dir,
        caches,
        profile: profile.name.clone(),
        policy_hash: profile.policy_hash(),
        identity,
        hostname: S::HOSTNAME.into(),
        network: profile.network.mode,
        proxy_port: profile.network.proxy_port,
        allow: profile.network.allow.clone(),
        held_outside,
        gateway: gateway.map(|mut g| {
            g.ca_file = g.ca_file.map(|spec| {
                let path = spec.resolve(&home, &workspace);
                crate::profile::PathSpec::Absolute(
                    path.strip_prefix("/").unwrap_or(&path).to_path_buf(),
                )
            });
            g
        }),
        credentials,
        read_only: if profile.network.mode == crate::profile::NetworkMode::Allowlist {
            profile.network.read_only.clone()
        } else {
            Vec::new()
        },
        workspace,
        workspace_mode,
        home,
        cwd,
        mounts: realized.mounts,
        credential_names,
        protected_paths,
        env,
        env_dropped,
        landlock: LandlockPlan {
            rules: realized.landlock_rules,
            scope_signals_and_abstract_unix: true,
            tcp: realized.tcp,
            assurance: profile.assurance,
        },
        // One rule table, for both isolations and every profile.
        seccomp: SeccompRules::Standard,
        limits: profile.process.limits.clone(),
        notes,
    };
    // What the kind of run (a runbook, the self-test) adds, planned here like the rest.
    run_kind::add(&mut plan, facts)?;
    Ok(plan)
}

/// A checked Landlock rule; a path Landlock must not be given (a writable /proc, …) refuses the
/// plan.
pub(crate) fn landlock_rule(
    path: impl Into<PathBuf>,
    access: FsAccess,
) -> Result<LandlockRule, PlanError> {
    let path = path.into();
    LandlockRule::new(path.clone(), access)
        .map_err(|source| PlanError::LandlockRule { path, source })
}

pub(crate) fn choose_identity(
    profile: &Profile,
    facts: &HostFacts,
    notes: &mut Vec<String>,
) -> Result<Identity, PlanError> {
    if facts.uid != 0 {
        let kept_groups: Vec<u32> = facts
            .groups
            .iter()
            .copied()
            .filter(|g| *g != facts.gid)
            .collect();
        if !kept_groups.is_empty() {
            notes.push(format!(
                "supplementary groups {kept_groups:?} are kept: an unprivileged caller cannot drop them (they show as nogroup inside)"
            ));
        }
        return Ok(Identity {
            mode: IdentityMode::Caller,
            inside_uid: facts.uid,
            inside_gid: facts.gid,
            outside_uid: facts.uid,
            outside_gid: facts.gid,
            kept_groups,
        });
    }
    if facts.idmapped_mounts {
        let uid = profile.process.sandbox_uid;
        return Ok(Identity {
            mode: IdentityMode::RootRemapped,
            inside_uid: uid,
            inside_gid: uid,
            outside_uid: ROOT_MODE_OUTSIDE_ID,
            outside_gid: ROOT_MODE_OUTSIDE_ID,
            kept_groups: Vec::new(),
        });
    }
    if !profile.process.allow_root_fallback {
        return Err(PlanError::RootWithoutIdmappedMounts);
    }
    if profile.hook.is_some() {
        return Err(PlanError::RootFallbackWithHook);
    }
    notes.push("ROOT FALLBACK: the command runs as uid 0 (no capabilities) because idmapped mounts are unavailable".into());
    Ok(Identity {
        mode: IdentityMode::RootFallback,
        inside_uid: 0,
        inside_gid: 0,
        outside_uid: 0,
        outside_gid: 0,
        kept_groups: Vec::new(),
    })
}

pub use crate::profile::STATE_DIR;

/// Kernel and device trees a workspace can never be in, besides the profile's system directories.
const NEVER_A_WORKSPACE: &[&str] = &["/proc", "/sys", "/dev", "/boot"];

impl SandboxPlan {
    /// Everything a run of this plan can write on the host, the workspace first: the view's
    /// read-write binds (writable extras), the agent's config directory, and, without a mount
    /// namespace, what Landlock grants for writing (the per-run scratch directory included):
    /// beneath the workspace those are the entries of a directory granted entry by entry around
    /// a hidden path, covered by the workspace itself; elsewhere one can be a file.
    pub fn writable_host_paths(&self) -> Vec<PathBuf> {
        let mut paths = vec![self.workspace.clone()];
        paths.extend(writable_binds(&self.mounts));
        if let Some(caches) = &self.caches {
            paths.push(caches.host.clone());
        }
        if let Some(agent) = &self.agent {
            paths.push(agent.config_dir.clone());
        }
        if self.isolation == Isolation::LandlockSeccompOnly {
            paths.extend(
                self.landlock
                    .rules
                    .iter()
                    .filter(|r| r.access == FsAccess::ReadWrite)
                    .filter(|r| r.path == self.workspace || !r.path.starts_with(&self.workspace))
                    .map(|r| r.path.clone()),
            );
        }
        let mut seen = BTreeSet::new();
        paths.retain(|p| seen.insert(p.clone()));
        paths
    }
}

/// Host directories the view binds read-write (workspace, writable extras).
pub(crate) fn writable_binds(mounts: &[MountOp]) -> Vec<PathBuf> {
    mounts
        .iter()
        .filter_map(|op| match op {
            MountOp::Bind {
                src,
                access: Access::ReadWrite,
                ..
            }
            | MountOp::IdmappedBind {
                src,
                access: Access::ReadWrite,
                ..
            } => Some(src.clone()),
            _ => None,
        })
        .collect()
}

/// A `filesystem.<key>` entry's path, canonical; one that does not exist is the profile's to
/// fix, placed at its line ([`PlanError::NoSuchPath`]).
pub(crate) fn existing(
    profile: &Profile,
    spec: &crate::profile::PathSpec,
    path: PathBuf,
    key: &'static str,
) -> Result<PathBuf, PlanError> {
    path.canonicalize().map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            let spelled = String::from(spec.clone());
            return PlanError::NoSuchPath {
                key: if key == "writable" {
                    "filesystem.writable"
                } else {
                    "filesystem.read_only"
                },
                at: profile.where_listed(&["filesystem", key], &spelled),
                spelled,
                path,
            };
        }
        PlanError::Io {
            what: if key == "writable" {
                "filesystem.writable: resolving"
            } else {
                "filesystem.read_only: resolving"
            },
            path,
            source,
        }
    })
}

#[cfg(test)]
mod tests;
