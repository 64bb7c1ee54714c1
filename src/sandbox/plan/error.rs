//! Why a plan is refused: each failure names the operation and the path, and says whether the
//! profile (configuration) or this host (environment) is at fault.

use std::path::PathBuf;

/// Why no plan could be made. Each variant names the operation and the path where there is
/// one, and says which of two kinds it is ([`PlanError::is_configuration`]):
///
/// * **configuration**: the profile or the command line asks for something StepProof never
///   does, on any host; only changing them helps, a retry never does;
/// * **environment**: this host lacks what the request needs (user namespaces, idmapped
///   mounts, an installed binary, a path the profile names) or the file system answered with
///   an error; the same request can run on a host that has it.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// Environment: the file system answered with an error (a link that cannot be read, a
    /// `filesystem.writable` or `filesystem.read_only` path this host lacks).
    #[error("{what} {}: {source}", crate::audit::text::one_line(path))]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    /// Configuration: a profile with a hook needs the workspace and the home as UTF-8 paths
    /// (the hook's input and policy are JSON); without a hook byte paths work.
    #[error(
        "the {what} {} is not UTF-8, and this profile's hook reads JSON, which holds only UTF-8 paths: rename it, or use a profile without a [hook] section",
        crate::audit::text::path(path)
    )]
    NotUtf8ForHook { what: &'static str, path: PathBuf },
    /// Configuration: `--workspace` (or the current directory) cannot be the one directory the
    /// run writes.
    #[error(
        "--workspace {}: {reason}; choose a project directory",
        crate::audit::text::one_line(path)
    )]
    WorkspaceRefused {
        path: PathBuf,
        reason: WorkspaceRefusal,
    },
    /// A rule the view needs is one Landlock must never be given (a relative path, a writable
    /// part of /proc or /sys, as `filesystem.writable` could ask): configuration, unless the
    /// Landlock error itself is an I/O error (see [`PlanError::is_configuration`]).
    #[error("Landlock rule for {path}: {source}")]
    LandlockRule {
        path: PathBuf,
        source: crate::sandbox::plan::landlock::LandlockError,
    },
    /// Environment (as a rule: listing a directory to grant it entry by entry failed): the
    /// Landlock-only grants of a directory with hidden paths below it.
    #[error("Landlock rules for {root}: {source}")]
    LandlockGrant {
        root: PathBuf,
        source: crate::sandbox::plan::landlock::LandlockError,
    },
    /// Configuration: the hook's policy was asked of a profile without one.
    #[error("the profile has no [hook] section")]
    NoHookSection,
    /// Configuration: the profile's `[hook]` section does not compile.
    #[error("the [hook] section does not compile: {reason}")]
    HookPolicy { reason: String },
    /// Environment: the installation lacks `stepproof-hook` next to `stepproof-run`.
    #[error(
        "this profile installs the hook, but stepproof-hook is not installed next to stepproof-run (scripts/install puts it there)"
    )]
    HookBinaryMissing,
    /// Environment: invoked as root where idmapped mounts do not work, and the profile does not
    /// allow the root fallback; where they work (or run as a normal user) the profile runs.
    #[error(
        "invoked as root, but idmapped mounts do not work for the workspace or home here, so the command cannot run as an unprivileged user that owns them: run stepproof-run as the user who owns the workspace, or keep it on a file system that supports idmapped mounts (ext4, xfs, btrfs, tmpfs); `stepproof doctor` tells"
    )]
    RootWithoutIdmappedMounts,
    /// Environment: as above, with the fallback allowed but a hook in the profile (Claude Code
    /// run as uid 0 ignores parts of its managed settings); only hosts without idmapped mounts
    /// come here.
    #[error(
        "the root fallback is not allowed for a profile with a hook: Claude Code ignores parts of its managed settings when it runs as uid 0"
    )]
    RootFallbackWithHook,
    /// Environment: this host refuses user namespaces and the profile does not allow the
    /// Landlock + seccomp-only plan.
    #[error(
        "user namespaces are not available here and the profile does not allow the Landlock + seccomp-only mode ([degraded] allow = true); run `stepproof doctor`"
    )]
    NoUserNamespaces,
    /// Environment: without user namespaces, a profile with a hook that does not accept a
    /// removable one.
    #[error(
        "without user namespaces the hook's managed settings cannot be mounted where the agent cannot change them; this profile has a hook, so it is refused unless [degraded] accept_removable_hook = true (it then runs without the hook)"
    )]
    HookNeedsNamespaces,
    /// Configuration: a profile file inside the workspace (it may have come with a checkout)
    /// names where the model login is sent.
    #[error(
        "the profile {path} is inside the workspace and {what}: that would send your model login where a checked-out file says; put the profile outside the workspace, or set ANTHROPIC_BASE_URL in your own environment"
    )]
    ModelRouteFromWorkspace { path: PathBuf, what: &'static str },
    /// Configuration: a profile file inside the workspace, and the profile raises a budget of
    /// what the agent can make the supervisor do.
    #[error(
        "the profile {path} is inside the workspace and the profile raises {keys}: a budget of the supervisor's work for the agent is raised only from a profile outside the workspace (a checked-out file must not decide how much the agent can make the supervisor do); move the profile out of the workspace"
    )]
    BudgetRaisedFromWorkspace { path: PathBuf, keys: String },
    /// Configuration: a profile file inside the workspace, and the profile adds requests that
    /// get the model login (`network.gateway.login_paths`).
    #[error(
        "{set_at}: network.gateway.login_paths lends the agent your model login beyond the model API, and the profile {} is inside the workspace: paths that get the login are added only by a profile outside the workspace (a checked-out file must not decide what your login is used for); move the profile out of the workspace",
        path.display()
    )]
    LoginPathsFromWorkspace { path: PathBuf, set_at: String },
    /// Environment: without user namespaces, a profile with the credential gateway.
    #[error(
        "the credential gateway needs the sandbox's private /run: not available without namespaces"
    )]
    GatewayNeedsNamespaces,
    /// Configuration: a profile with credential rules loaded from a file inside the workspace.
    #[error(
        "{} declares or pulls in [[network.credentials]] from inside the workspace: credential rules are honoured only from profiles outside it (a checkout's profile must not send host credentials or run host commands); move the profile out of the workspace",
        file.display()
    )]
    CredentialsFromWorkspace { file: PathBuf },
    /// Environment: credential rules need the sandbox's private /run for the run's trust files.
    #[error(
        "[[network.credentials]] needs the sandbox's private /run (for the run's CA): not available without namespaces"
    )]
    CredentialsNeedNamespaces,
    /// Environment: the system's random source failed (placeholders are random per run).
    #[error("reading the system's random source for the credential placeholders failed")]
    Random,
    /// Environment: without user namespaces, a profile whose workspace is an overlay and that
    /// does not accept a read-only one instead.
    #[error(
        "filesystem.workspace = \"overlay\" needs a mount namespace, which this host refuses; the profile does not accept a read-only workspace instead ([degraded] read_only_workspace = true)"
    )]
    OverlayNeedsNamespaces,
    /// Environment: invoked as root without user namespaces, and the profile does not allow
    /// the command to run as uid 0.
    #[error(
        "invoked as root on a host without user namespaces: the command would run as uid 0; refused unless process.allow_root_fallback = true"
    )]
    RootWithoutUserNamespaces,
    /// Configuration: a `filesystem.read_only` or `filesystem.writable` entry names a path
    /// that does not exist (a typo, or a tool this host does not have): placed at the profile's
    /// line where it is a file's.
    #[error(
        "{}{key} \"{spelled}\": {} does not exist here; create it, correct the entry, or remove it",
        at.as_ref().map(|at| format!("{at}: ")).unwrap_or_default(),
        crate::audit::text::one_line(path)
    )]
    NoSuchPath {
        key: &'static str,
        spelled: String,
        path: PathBuf,
        at: Option<String>,
    },
    /// Environment: a runbook's state and client are bound under the agent's layer
    /// (`/run/stepproof`), which this plan does not have (no hook, or no namespaces).
    #[error(
        "--runbook: this plan has no agent layer (/run/stepproof) to carry the runbook's state"
    )]
    RunbookWithoutAgentLayer,
}

/// Why a directory cannot be the workspace (see [`check_workspace`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkspaceRefusal {
    #[error("the workspace cannot be `/`")]
    FileSystemRoot,
    #[error("it contains the home {home} (whose secrets and startup files would become writable)")]
    HoldsTheHome { home: PathBuf },
    #[error("it is under {dir}, which the sandbox shows read-only from the host")]
    UnderSystemDirectory { dir: PathBuf },
    #[error("it holds or is inside StepProof's own state {state} (audit logs, quarantine)")]
    StepProofState { state: PathBuf },
    #[error(
        "it is inside {}, which the profile hides from the sandbox ({why}); the command could not even enter it",
        crate::audit::text::path(hidden)
    )]
    UnderHidden { hidden: PathBuf, why: String },
}

impl PlanError {
    /// Whether the profile or the command line asks for something impossible (do not retry;
    /// change them), as opposed to something this host lacks or an I/O error. Each variant's
    /// documentation says which it is.
    pub fn is_configuration(&self) -> bool {
        use crate::sandbox::plan::landlock::LandlockError;
        match self {
            PlanError::WorkspaceRefused { .. }
            | PlanError::NotUtf8ForHook { .. }
            | PlanError::NoHookSection
            | PlanError::ModelRouteFromWorkspace { .. }
            | PlanError::BudgetRaisedFromWorkspace { .. }
            | PlanError::LoginPathsFromWorkspace { .. }
            | PlanError::HookPolicy { .. }
            | PlanError::CredentialsFromWorkspace { .. }
            | PlanError::NoSuchPath { .. } => true,
            PlanError::LandlockRule { source, .. } | PlanError::LandlockGrant { source, .. } => {
                matches!(
                    source,
                    LandlockError::RelativePath { .. } | LandlockError::WritableKernelFs { .. }
                )
            }
            PlanError::Io { .. }
            | PlanError::HookBinaryMissing
            | PlanError::RootWithoutIdmappedMounts
            | PlanError::RootFallbackWithHook
            | PlanError::NoUserNamespaces
            | PlanError::HookNeedsNamespaces
            | PlanError::GatewayNeedsNamespaces
            | PlanError::CredentialsNeedNamespaces
            | PlanError::Random
            | PlanError::OverlayNeedsNamespaces
            | PlanError::RootWithoutUserNamespaces
            | PlanError::RunbookWithoutAgentLayer => false,
        }
    }
}
