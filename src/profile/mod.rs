//! Profiles: the TOML files security reviewers read. Loading (with `extends`), validation with
//! file/line/column errors, and the hash of the requested policy.

pub mod allow;
pub mod approvals;
pub mod budgets;
pub mod claude_settings;
pub mod credentials;
pub mod limits;
mod load;
pub mod login_paths;
mod merge;
mod parse;
mod paths;
pub mod presets;
mod resolve;

pub use load::{MAX_PROFILE_BYTES, builtin_names};
pub use paths::{PathSpec, PathSpecError};

use merge::append_unique;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use stepproof_hook::config::HookConfig;

/// Built-in profiles, compiled in. `default` is used when no profile is given.
pub const BUILTIN: &[(&str, &str)] = &[
    ("default", include_str!("../../profiles/default.toml")),
    ("ci", include_str!("../../profiles/ci.toml")),
    ("strict", include_str!("../../profiles/strict.toml")),
];

include!(concat!(env!("OUT_DIR"), "/builtin_profiles.rs"));

#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error(
        "reading profile {}: {source}{}",
        crate::audit::text::path(path),
        if source.kind() == std::io::ErrorKind::NotFound && !path.to_string_lossy().contains('/') {
            format!(" (and no built-in profile has that name: {})", builtin_names())
        } else {
            String::new()
        }
    )]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "--profile {name}: both the built-in profile {name} and the file ./{name} here; write ./{name} for the file, or run from another directory for the built-in"
    )]
    Ambiguous { name: String },
    #[error("{origin}:{line}:{column}: {message}")]
    Syntax {
        origin: String,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{origin}: {message}")]
    Invalid { origin: String, message: String },
    #[error("{origin}: `extends` chain is too deep or loops (at {name})")]
    ExtendsLoop { origin: String, name: String },
}

pub use limits::Limits;

/// How much of the kernel layers the profile insists on (`strict`: Landlock ABI 6 or refuse).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Assurance {
    /// Refuse to start below Landlock ABI 6 (Linux 6.12): scopes and every filesystem right up
    /// to ABI 6 are enforced or nothing runs.
    #[default]
    Strict,
    /// Run with what the kernel has and record what was dropped.
    BestEffort,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NetworkMode {
    /// A network namespace with loopback only.
    #[default]
    None,
    /// A network namespace with loopback only, and an HTTP(S) proxy served by the supervisor
    /// from outside that reaches only the allow-listed names.
    Allowlist,
    /// The host's network, unfiltered. Reported loudly.
    Host,
}

pub use allow::AllowList;
pub use credentials::CredentialRule;
pub use login_paths::LoginPath;

/// The optional credential gateway: the agent talks plain HTTP to a unix socket inside
/// (`ANTHROPIC_UNIX_SOCKET`), the supervisor forwards each request over TLS to `upstream` and
/// adds the real credential, which never enters the sandbox (the agent has a placeholder).
/// Only requests for the model API's paths get it (`supervisor::net::model_paths`), and those
/// of `login_paths`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GatewayConfig {
    /// `host` or `host:port` (443 unless named); the certificate is checked for `host`.
    pub upstream: String,
    /// Where to connect instead of resolving `upstream` (`ip:port`; a local test server).
    #[serde(default)]
    pub connect: Option<String>,
    /// Extra PEM roots to trust for `upstream` (a corporate or test CA); the public web roots
    /// otherwise.
    #[serde(default)]
    pub ca_file: Option<PathSpec>,
    /// `env:NAME` (the supervisor's environment, e.g. `env:ANTHROPIC_API_KEY`) or
    /// `claude-login` (the OAuth token in ~/.claude/.credentials.json).
    pub credential: String,
    /// Requests beyond the model API's that get the login (`network.gateway.login_paths`,
    /// honoured only from profiles outside the workspace); left out of the policy hash when
    /// there are none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub login_paths: Vec<LoginPath>,
}

/// `[network.gateway]` as written: either where the login goes (`upstream` and `credential`,
/// with `connect` and `ca_file`), or only `login_paths` for the gateway StepProof puts in for
/// an agent, or both.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct GatewayFile {
    upstream: Option<String>,
    connect: Option<String>,
    ca_file: Option<PathSpec>,
    credential: Option<String>,
    login_paths: Option<Vec<String>>,
}

impl GatewayFile {
    /// Whether it names where the login goes (any of the keys besides `login_paths`).
    fn names_route(&self) -> bool {
        self.upstream.is_some()
            || self.connect.is_some()
            || self.ca_file.is_some()
            || self.credential.is_some()
    }

    /// A child's `[network.gateway]` over its base's: where the login goes is taken whole from
    /// the child when it names any of it; `login_paths` is a union, like the other lists.
    fn merge(base: Option<GatewayFile>, child: Option<GatewayFile>) -> Option<GatewayFile> {
        let (base, child) = match (base, child) {
            (Some(b), Some(c)) => (b, c),
            (b, c) => return c.or(b),
        };
        let route = if child.names_route() { &child } else { &base };
        let login_paths = match (base.login_paths.clone(), child.login_paths.clone()) {
            (Some(b), Some(c)) => Some(append_unique(b, c)),
            (b, c) => c.or(b),
        };
        Some(GatewayFile {
            upstream: route.upstream.clone(),
            connect: route.connect.clone(),
            ca_file: route.ca_file.clone(),
            credential: route.credential.clone(),
            login_paths,
        })
    }
}

/// The port of the proxy inside the sandbox's own network namespace (loopback only).
pub const DEFAULT_PROXY_PORT: u16 = 3128;

/// Hosts where user namespaces are refused (some containers, Ubuntu's AppArmor restriction).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Degraded {
    /// Run under Landlock + seccomp only (no namespaces) instead of refusing; what that loses is
    /// reported.
    #[serde(default)]
    pub allow: bool,
    /// A profile with a hook is refused in that mode unless this is true: without a mount
    /// namespace the hook's managed settings cannot be made unremovable, so none is installed
    /// and the profile runs without its hook (a loss the launch and `explain` print).
    #[serde(default)]
    pub accept_removable_hook: bool,
    /// A profile whose workspace is `overlay` is refused in that mode unless this is true
    /// (Landlock cannot lay an overlay): the workspace is then read-only instead, never
    /// writable (left out of the policy hash when false).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub read_only_workspace: bool,
}

/// One profile file as written: every field optional so that `extends` can tell "unset" from
/// "set to the default".
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileFile {
    name: Option<String>,
    description: Option<String>,
    extends: Option<String>,
    assurance: Option<Assurance>,
    #[serde(default)]
    filesystem: FilesystemFile,
    #[serde(default)]
    process: ProcessFile,
    #[serde(default)]
    network: NetworkFile,
    hook: Option<HookConfig>,
    degraded: Option<Degraded>,
    claude: Option<ClaudeFile>,
    audit: Option<AuditFile>,
    approvals: Option<approvals::ApprovalsFile>,
    runbook: Option<budgets::RunbookFile>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct AuditFile {
    inside_max_mib: Option<u64>,
    inside_max_per_second: Option<u32>,
    export: Option<crate::audit::export_config::ExportSettings>,
}

/// The audit log.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Audit {
    /// Records the agent causes (hook reports, connections, model requests, runbook requests)
    /// are written up to this many MiB per run; beyond it they are counted, not written (a run
    /// cannot fill the host's disk, or the collector, through its own log).
    pub inside_max_mib: u64,
    /// ... and at most this many such records a second (a burst of ten seconds' worth); unset:
    /// [`crate::audit::caused::DEFAULT_PER_SECOND`]. Left out of the policy hash when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inside_max_per_second: Option<u32>,
    /// `[audit.export]`: every record also shipped over OTLP (see `audit::export`). Left out
    /// of the policy hash when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub export: Option<crate::audit::export_config::ExportSettings>,
}

impl Audit {
    /// Records the agent causes, a second, at most.
    pub fn inside_max_per_second(&self) -> u32 {
        self.inside_max_per_second
            .unwrap_or(crate::audit::caused::DEFAULT_PER_SECOND)
    }
}

/// Enough for hours of hook decisions and runbook evidence (a record is well under 1 KiB; the
/// largest, 64 KiB, are capped by the receiver).
pub const DEFAULT_INSIDE_MAX_MIB: u64 = 64;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClaudeFile {
    #[serde(default)]
    managed_settings: serde_json::Map<String, serde_json::Value>,
    keep_sessions: Option<bool>,
}

/// Claude Code, inside.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Claude {
    /// Extra keys for `/etc/claude-code/managed-settings.json` (e.g. `permissions.deny`).
    pub managed_settings: serde_json::Map<String, serde_json::Value>,
    /// Whether the workspace's session data (transcripts, prompt history, auto-memory, todos,
    /// plans) is kept outside the sandbox and seeded into the next run (`default`: yes; `ci`
    /// and `strict`: no). Never under `--ci`.
    pub keep_sessions: bool,
}

impl Default for Claude {
    fn default() -> Claude {
        Claude {
            managed_settings: serde_json::Map::new(),
            keep_sessions: true,
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FilesystemFile {
    #[serde(default)]
    system: Vec<PathSpec>,
    #[serde(default)]
    read_only: Vec<PathSpec>,
    #[serde(default)]
    writable: Vec<PathSpec>,
    #[serde(default)]
    hidden: Vec<PathSpec>,
    #[serde(default)]
    protected: Vec<String>,
    #[serde(default)]
    hidden_names: Vec<String>,
    home: Option<HomeMode>,
    #[serde(default)]
    home_allow: Vec<PathSpec>,
    hide_env_files: Option<bool>,
    #[serde(default)]
    env_files_visible: Vec<String>,
    hide_other_projects: Option<bool>,
    mask_home_sockets: Option<bool>,
    tmp_size_mib: Option<u64>,
    workspace: Option<WorkspaceMode>,
}

/// How much of the home the sandbox shows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HomeMode {
    /// All of it, read-only, minus the secret catalogue and what looks like a secret.
    #[default]
    ReadOnly,
    /// Only `home_allow`, read-only, on a private empty home that the run may write (its
    /// caches are the run's own, never the host's).
    Allowlist,
}

/// How the run sees the workspace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkspaceMode {
    /// Read-write: what the run writes is in the checkout afterwards.
    #[default]
    Writable,
    /// Through an overlay whose upper layer is a private tmpfs of the run (`tmp_size_mib`):
    /// the run can write, build and test, and all of it is thrown away when the run ends —
    /// nothing reaches the checkout. Needs a mount namespace.
    Overlay,
    /// Read-only.
    ReadOnly,
}

impl WorkspaceMode {
    pub fn is_writable(&self) -> bool {
        *self == WorkspaceMode::Writable
    }

    /// The profile's word for it.
    pub fn name(self) -> &'static str {
        match self {
            WorkspaceMode::Writable => "writable",
            WorkspaceMode::Overlay => "overlay",
            WorkspaceMode::ReadOnly => "read-only",
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProcessFile {
    #[serde(default)]
    env: Vec<String>,
    #[serde(default)]
    set_env: std::collections::BTreeMap<String, String>,
    sandbox_uid: Option<u32>,
    allow_root_fallback: Option<bool>,
    limits: Option<Limits>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct NetworkFile {
    mode: Option<NetworkMode>,
    #[serde(default)]
    allow: Vec<String>,
    /// Replaced whole by a child profile that sets it (narrowing is safe), unlike `allow`.
    presets: Option<Vec<String>>,
    /// Hosts reached with GET and HEAD only (the proxy terminates TLS and reads each request).
    #[serde(default)]
    read_only: Vec<String>,
    #[serde(default)]
    allow_addresses: Vec<String>,
    proxy_port: Option<u16>,
    gateway: Option<GatewayFile>,
    #[serde(default)]
    credentials: Vec<CredentialRule>,
}

/// A profile file that was read, by its canonical path, and the sha256 of what was read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProfileSource {
    pub path: PathBuf,
    pub sha256: String,
}

impl ProfileSource {
    /// The file at `path` as `text` was read from it: its absolute path and sha256.
    pub fn of(path: &Path, text: &str) -> ProfileSource {
        let absolute = path
            .canonicalize()
            .or_else(|_| std::env::current_dir().map(|d| d.join(path)))
            .unwrap_or_else(|_| path.to_path_buf());
        ProfileSource {
            path: absolute,
            sha256: hex::encode(Sha256::digest(text.as_bytes())),
        }
    }
}

/// The effective, merged profile: what the user asked for, with `~` and the workspace still
/// symbolic. Its canonical JSON is what the policy hash covers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Profile {
    pub name: String,
    pub description: String,
    /// Where each layer came from, outermost first (for `explain`; not hashed).
    #[serde(skip)]
    pub origins: Vec<String>,
    /// The files of the chain as they were read: what a run must not be able to change.
    #[serde(skip)]
    pub files: Vec<ProfileSource>,
    pub assurance: Assurance,
    pub filesystem: Filesystem,
    pub process: Process,
    pub network: Network,
    pub hook: Option<HookConfig>,
    pub degraded: Degraded,
    pub claude: Claude,
    pub audit: Audit,
    /// `[approvals]`: the webhook a runbook's approval steps are also asked at (honoured only
    /// from profiles outside the workspace); left out of the policy hash when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approvals: Option<approvals::ApprovalWebhook>,
    /// `[runbook]`: the budgets of the supervisor's walks over the evidence's files; left out of
    /// the policy hash when unset.
    #[serde(skip_serializing_if = "budgets::RunbookBudgets::is_unset")]
    pub runbook: budgets::RunbookBudgets,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Filesystem {
    /// Host system directories shown read-only (a missing one is skipped: distributions differ).
    pub system: Vec<PathSpec>,
    /// Further paths shown read-only; each must exist.
    pub read_only: Vec<PathSpec>,
    /// Further paths shown read-write; each must exist.
    pub writable: Vec<PathSpec>,
    /// Paths replaced by an empty, unreadable stand-in (the secret catalogue).
    pub hidden: Vec<PathSpec>,
    /// Persistence paths, relative to the workspace and to every nested repository.
    pub protected: Vec<String>,
    /// Name patterns (`*`, `?`, any letter case) hidden where found directly in `~`,
    /// `~/.config` and `~/.local/share`.
    pub hidden_names: Vec<String>,
    pub home: HomeMode,
    /// With `home = "allowlist"`: the parts of the home shown (read-only); missing ones skipped.
    pub home_allow: Vec<PathSpec>,
    /// The workspace's `.env` files (not templates) are hidden at the kernel.
    pub hide_env_files: bool,
    /// `.env` files (relative to the workspace) shown even so.
    pub env_files_visible: Vec<String>,
    pub hide_other_projects: bool,
    pub mask_home_sockets: bool,
    pub tmp_size_mib: u64,
    /// How the run sees the workspace (left out of the policy hash when it is the default, so
    /// that profiles that do not set it keep their hash).
    #[serde(skip_serializing_if = "WorkspaceMode::is_writable")]
    pub workspace: WorkspaceMode,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Process {
    /// Environment variables passed through (exact names, or a prefix ending in `*`).
    pub env: Vec<String>,
    /// Variables set inside whatever the caller has.
    pub set_env: std::collections::BTreeMap<String, String>,
    /// The uid and gid the command gets inside when StepProof is invoked as root.
    pub sandbox_uid: u32,
    /// Invoked as root on a file system without idmapped mounts: run as uid 0 without
    /// capabilities instead of refusing. Never for a profile with a hook.
    pub allow_root_fallback: bool,
    /// Resource limits (a `[process.limits]` table in a child profile replaces the parent's).
    pub limits: Limits,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Network {
    pub mode: NetworkMode,
    /// `network.presets`, by name; their hosts are in `allow`.
    pub presets: Vec<String>,
    /// For `allowlist`: the names (and special addresses) the proxy lets through.
    pub allow: AllowList,
    /// Hosts (`host` for port 443, else `host:port`; in `allow` too) the proxy lets through
    /// with GET and HEAD only: the read-only hosts of the presets and `network.read_only`. The
    /// proxy terminates TLS for them with the run's CA. Left out of the policy hash when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub read_only: Vec<String>,
    pub proxy_port: u16,
    /// `[network.gateway]` when it names where the login goes (`upstream`, `credential`).
    pub gateway: Option<GatewayConfig>,
    /// `network.gateway.login_paths`: requests beyond the model API's that get the model login,
    /// for whichever gateway the run has (this one, or the one StepProof puts in for an agent).
    /// Left out of the policy hash when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub login_paths: Vec<LoginPath>,
    /// Service credentials the proxy adds at the boundary (`[[network.credentials]]`); left out
    /// of the policy hash when there are none, so that other profiles keep their hash.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub credentials: Vec<CredentialRule>,
}

pub const DEFAULT_SANDBOX_UID: u32 = 1000;

// StepProof's own state under the home (run directories, audit logs, quarantine).
pub use crate::audit::STATE_DIR;

/// Paths StepProof itself places inside the sandbox: the managed settings that register the
/// hook, the hook's control directory, the agent's config directory, the gateway's socket.
/// An entry that covers one of them (itself, an ancestor such as `/etc`, or a path below it)
/// would replace what StepProof put there — Claude Code would run without the hook.
pub const RESERVED_PATHS: &[&str] = &[
    "/etc/claude-code",
    "/run/stepproof",
    "/run/claude-config",
    "/run/stepproof-gateway",
    "/run/stepproof-trust",
];

#[cfg(test)]
mod tests;
