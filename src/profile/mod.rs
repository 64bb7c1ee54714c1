//! Profiles: the TOML files security reviewers read. Loading (with `extends`), validation with
//! file/line/column errors, and the hash of the requested policy.

pub mod allow;
pub mod approvals;
pub mod budgets;
pub mod claude_settings;
pub mod credentials;
pub mod limits;
pub mod login_paths;
mod paths;
pub mod presets;

pub use paths::{PathSpec, PathSpecError};

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

const MAX_EXTENDS_DEPTH: usize = 8;
pub const DEFAULT_SANDBOX_UID: u32 = 1000;

impl Profile {
    /// The built-in default profile.
    pub fn builtin_default() -> Result<Profile, ProfileError> {
        Profile::load(None)
    }

    /// Loads a profile file, or the built-in default when `path` is `None`.
    pub fn load(path: Option<&Path>) -> Result<Profile, ProfileError> {
        let mut layers = Vec::new();
        let mut files = Vec::new();
        let (mut origin, mut text, mut base_dir, mut json) = match path {
            None => builtin_source("default").expect("the default profile is compiled in"),
            Some(p) => match builtin_named(p)? {
                Some(builtin) => builtin,
                None => {
                    let source = file_source(p)?;
                    files.push(ProfileSource::of(p, &source.1));
                    source
                }
            },
        };
        // Each layer's name and text, outermost first: a problem found in the merged result is
        // placed at the line of the layer that set it.
        let mut texts: Vec<(String, String)> = Vec::new();
        loop {
            let file = parse_file(&origin, &text, json)?;
            check_reserved_paths(&origin, &text, &file)?;
            check_claude_keys(&origin, &text, &file)?;
            let extends = file.extends.clone();
            layers.push((origin.clone(), file));
            texts.push((origin.clone(), std::mem::take(&mut text)));
            let Some(parent) = extends else { break };
            if layers.len() > MAX_EXTENDS_DEPTH || layers.iter().any(|(o, _)| *o == parent) {
                return Err(ProfileError::ExtendsLoop {
                    origin,
                    name: parent,
                });
            }
            (origin, text, base_dir, json) = match builtin_source(&parent) {
                Some(found) => found,
                None => {
                    let parent_path = match &base_dir {
                        Some(dir) => dir.join(&parent),
                        None => PathBuf::from(&parent),
                    };
                    // Whatever is wrong with the file `extends` names is said at that line.
                    let (line, column) = texts
                        .last()
                        .and_then(|(_, t)| {
                            locate_setting(t, &["extends"], None).map(|at| line_column(t, at))
                        })
                        .unwrap_or((1, 1));
                    let at_extends = |message: String| ProfileError::Syntax {
                        origin: origin.clone(),
                        line,
                        column,
                        message: format!("extends = {parent:?}: {message}"),
                    };
                    if parent.trim().is_empty() {
                        return Err(at_extends(
                            "empty: name a built-in profile or a file".to_string(),
                        ));
                    }
                    if !parent_path.exists() {
                        return Err(at_extends(format!(
                            "no built-in profile of that name ({}) and no file at {}",
                            BUILTIN
                                .iter()
                                .map(|(n, _)| *n)
                                .collect::<Vec<_>>()
                                .join(", "),
                            parent_path.display()
                        )));
                    }
                    let source =
                        file_source(&parent_path).map_err(|e| at_extends(e.to_string()))?;
                    files.push(ProfileSource::of(&parent_path, &source.1));
                    source
                }
            };
        }
        // Merge from the root of the chain outwards.
        let mut merged = ProfileFile::default();
        let mut origins = Vec::new();
        for (origin, layer) in layers.into_iter().rev() {
            merged = merge(merged, layer);
            origins.push(origin);
        }
        let origin = origins.last().cloned().unwrap_or_default();
        let mut profile =
            resolve(merged, origins).map_err(|message| place_problem(&texts, origin, message))?;
        profile.files = files;
        Ok(profile)
    }

    /// Where a file of the chain sets `key` (`["network", "gateway", "login_paths"]`), as
    /// `file:line`, outermost file first; `None` when no file that can be read again sets it.
    /// For messages about a setting found in the merged profile (the files are read again).
    pub fn where_set(&self, key: &[&str]) -> Option<String> {
        self.files.iter().find_map(|file| {
            let text = crate::regular_file::read_to_string(&file.path, MAX_PROFILE_BYTES).ok()?;
            let offset = locate_setting(&text, key, None)?;
            let (line, _) = line_column(&text, offset);
            Some(format!("{}:{line}", file.path.display()))
        })
    }

    /// Where a file of the chain lists `value` under `keys` (`filesystem.read_only`), as
    /// `file:line:column` of the entry; `None` when no file that can be read again spells it
    /// (a built-in's entry, or a file changed since).
    pub fn where_listed(&self, keys: &[&str], value: &str) -> Option<String> {
        self.files.iter().find_map(|file| {
            let text = crate::regular_file::read_to_string(&file.path, MAX_PROFILE_BYTES).ok()?;
            let at = locate_setting(&text, keys, Some(value))?;
            // The key alone is not the entry: only a spelled value places it.
            let spelled = [format!("\"{value}\""), format!("'{value}'")];
            spelled
                .iter()
                .any(|q| text[at..].starts_with(q.as_str()))
                .then(|| {
                    let (line, column) = line_column(&text, at);
                    format!(
                        "{}:{line}:{column}",
                        crate::audit::text::one_line(&file.path)
                    )
                })
        })
    }

    /// `sha256:` of the canonical JSON of the requested policy: the profile serialized field by
    /// field (in declaration order; every list in the order the profile gives it), streamed into
    /// the hash without building a JSON tree (this runs before every launch).
    pub fn policy_hash(&self) -> String {
        struct HashWriter(Sha256);
        impl std::io::Write for HashWriter {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.update(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut digest = HashWriter(Sha256::new());
        serde_json::to_writer(&mut digest, self).expect("a profile always serializes");
        format!("sha256:{}", hex::encode(digest.0.finalize()))
    }
}

/// Where a layer of a profile comes from: its name for messages, its text, the directory its
/// `extends` is relative to, and for a built-in its JSON form (see build.rs).
type Source = (String, String, Option<PathBuf>, Option<&'static str>);

/// The built-in profiles' names, as a list to show.
pub fn builtin_names() -> String {
    BUILTIN
        .iter()
        .map(|(name, _)| *name)
        .collect::<Vec<_>>()
        .join(", ")
}

fn builtin_source(name: &str) -> Option<Source> {
    let text = BUILTIN.iter().find(|(n, _)| *n == name)?.1;
    let json = BUILTIN_JSON
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, json)| *json);
    Some((format!("<built-in {name}>"), text.to_string(), None, json))
}

/// The largest profile file read (each file of an `extends` chain): far more than any profile
/// needs, small enough that `--profile /dev/zero` or a huge file ends in an error, not in the
/// out-of-memory killer.
pub const MAX_PROFILE_BYTES: u64 = 4 << 20;

/// `--profile NAME`: a bare name of a built-in profile (`default`, `ci`, `strict`) is that
/// profile; a file of the same name here makes it ambiguous (`./NAME` names the file).
fn builtin_named(path: &Path) -> Result<Option<Source>, ProfileError> {
    let Some(name) = path.to_str().filter(|n| !n.contains('/')) else {
        return Ok(None);
    };
    let Some(source) = builtin_source(name) else {
        return Ok(None);
    };
    if std::fs::symlink_metadata(path).is_ok() {
        return Err(ProfileError::Ambiguous { name: name.into() });
    }
    Ok(Some(source))
}

/// A profile file's text: a regular file (a FIFO is refused, not waited on) of at most
/// [`MAX_PROFILE_BYTES`].
fn file_source(path: &Path) -> Result<Source, ProfileError> {
    let text = crate::regular_file::read_to_string(path, MAX_PROFILE_BYTES).map_err(|source| {
        ProfileError::Read {
            path: path.to_path_buf(),
            source,
        }
    })?;
    let dir = path.parent().map(Path::to_path_buf);
    Ok((path.display().to_string(), text, dir, None))
}

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

/// Refuses, with file and line, `read_only`, `writable` and `hidden` entries that cover a
/// reserved path, and writable entries that cover StepProof's own state in the home.
fn check_reserved_paths(origin: &str, text: &str, file: &ProfileFile) -> Result<(), ProfileError> {
    let fs = &file.filesystem;
    let lists = [
        ("read_only", &fs.read_only),
        ("writable", &fs.writable),
        ("hidden", &fs.hidden),
    ];
    for (key, list) in lists {
        for spec in list.iter() {
            let covered = match spec {
                PathSpec::Absolute(rel) => {
                    let path = Path::new("/").join(rel);
                    RESERVED_PATHS
                        .iter()
                        .find(|r| Path::new(r).starts_with(&path) || path.starts_with(r))
                        .map(|r| r.to_string())
                }
                PathSpec::Home(rel) if key == "writable" => {
                    let state = Path::new(STATE_DIR);
                    (state.starts_with(rel) || rel.starts_with(state))
                        .then(|| format!("~/{} (StepProof's audit logs)", state.display()))
                }
                _ => None,
            };
            if let Some(reserved) = covered {
                let spelled = String::from(spec.clone());
                let (line, column) = text
                    .find(&format!("\"{spelled}\""))
                    .or_else(|| text.find(&format!("'{spelled}'")))
                    .map(|at| line_column(text, at + 1))
                    .unwrap_or((1, 1));
                return Err(ProfileError::Syntax {
                    origin: origin.to_string(),
                    line,
                    column,
                    message: format!(
                        "filesystem.{key}: {spelled:?} covers {reserved}, which StepProof places itself; \
                         the entry would remove it (and with it the hook or the record): name a path that does not contain it"
                    ),
                });
            }
        }
    }
    Ok(())
}

fn owned_key_message(key: &str) -> String {
    format!(
        "claude.managed_settings.{key}: StepProof owns this key (it keeps StepProof's hook installed and running); profiles may add other keys only"
    )
}

/// Refuses, with file and line, managed-settings keys StepProof owns and variables that would
/// switch Claude Code's managed hooks off or point it at other managed settings.
fn check_claude_keys(origin: &str, text: &str, file: &ProfileFile) -> Result<(), ProfileError> {
    let at = |needle: &str, message: String| {
        let (line, column) = text
            .find(needle)
            .map(|at| line_column(text, at))
            .unwrap_or((1, 1));
        ProfileError::Syntax {
            origin: origin.to_string(),
            line,
            column,
            message,
        }
    };
    if let Some(claude) = &file.claude
        && let Some(key) = claude_settings::owned_keys_in(&claude.managed_settings).first()
    {
        let last = key.rsplit('.').next().unwrap_or(key);
        return Err(at(last, owned_key_message(key)));
    }
    let process = &file.process;
    for (key, name) in process
        .env
        .iter()
        .map(|n| ("env", n))
        .chain(process.set_env.keys().map(|n| ("set_env", n)))
    {
        if claude_settings::defeats_hook(name) {
            return Err(at(
                name,
                format!(
                    "process.{key}: {name:?} would switch Claude Code's managed hooks off, point it at other managed settings, or name a script it runs before every command; StepProof keeps it out of every run"
                ),
            ));
        }
    }
    Ok(())
}

fn parse_file(origin: &str, text: &str, json: Option<&str>) -> Result<ProfileFile, ProfileError> {
    // A built-in's JSON form loads to the same profile, faster; should it ever not load, the
    // TOML gives the error with its line.
    if let Some(file) = json.and_then(|json| serde_json::from_str(json).ok()) {
        return Ok(file);
    }
    parse_toml(origin, text)
}

fn parse_toml(origin: &str, text: &str) -> Result<ProfileFile, ProfileError> {
    toml::from_str::<ProfileFile>(text).map_err(|e| {
        let (line, column) = e
            .span()
            .map(|span| line_column(text, span.start))
            .unwrap_or((1, 1));
        ProfileError::Syntax {
            origin: origin.to_string(),
            line,
            column,
            message: e.message().trim().to_string(),
        }
    })
}

/// 1-based line and column of a byte offset.
/// A problem with the merged profile, placed at the file and line that set the value: the
/// message starts with the setting's dotted name (`network.proxy_port = 0 …`) and may quote the
/// entry at fault (`` `…` `` or `"…"`); the outermost layer that sets it is named. When no layer
/// spells it (a default), the profile's own name is given without a line.
fn place_problem(texts: &[(String, String)], origin: String, message: String) -> ProfileError {
    let key: String = message
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '.')
        .collect();
    let key = key.trim_end_matches('.');
    let path: Vec<&str> = key.split('.').filter(|k| !k.is_empty()).collect();
    let quoted = quoted_value(&message[key.len()..]);
    for (layer, text) in texts {
        if let Some(offset) = locate_setting(text, &path, quoted.as_deref()) {
            let (line, column) = line_column(text, offset);
            return ProfileError::Syntax {
                origin: layer.clone(),
                line,
                column,
                message,
            };
        }
    }
    ProfileError::Invalid { origin, message }
}

/// The first `` `…` `` or `"…"` in `text`.
fn quoted_value(text: &str) -> Option<String> {
    let start = text.find(['`', '"'])?;
    let quote = text[start..].chars().next()?;
    let rest = &text[start + 1..];
    let end = rest.find(quote)?;
    Some(rest[..end].to_string()).filter(|v| !v.is_empty())
}

/// Where `text` sets the setting `path` (its key; with `value`, the entry that spells it),
/// as a byte offset; `None` when this text does not set it.
fn locate_setting(text: &str, path: &[&str], value: Option<&str>) -> Option<usize> {
    use toml::de::{DeTable, DeValue};
    let document = DeTable::parse(text).ok()?;
    let mut table = document.get_ref();
    let mut found = None;
    for (depth, name) in path.iter().enumerate() {
        let (key, item) = table.iter().find(|(k, _)| k.get_ref().as_ref() == *name)?;
        found = Some((key.span(), item.span()));
        match item.get_ref() {
            DeValue::Table(inner) if depth + 1 < path.len() => table = inner,
            _ => break,
        }
    }
    let (key_span, item_span) = found?;
    if let Some(value) = value {
        // The entry inside the value's text, else anywhere in the layer.
        for spelled in [format!("\"{value}\""), format!("'{value}'")] {
            let inside = text.get(item_span.clone()).and_then(|t| t.find(&spelled));
            if let Some(at) = inside {
                return Some(item_span.start + at);
            }
        }
        for spelled in [format!("\"{value}\""), format!("'{value}'")] {
            if let Some(at) = text.find(&spelled) {
                return Some(at);
            }
        }
    }
    Some(key_span.start)
}

fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

fn append_unique<T: Eq + std::hash::Hash>(mut base: Vec<T>, more: Vec<T>) -> Vec<T> {
    // A set, not `contains` per item: the secret catalogue has hundreds of entries, and path
    // comparisons are not cheap (this runs before every launch). The set borrows; nothing is
    // cloned.
    base.extend(more);
    let keep: Vec<bool> = {
        let mut seen = std::collections::HashSet::with_capacity(base.len());
        base.iter().map(|item| seen.insert(item)).collect()
    };
    let mut index = 0;
    base.retain(|_| {
        index += 1;
        keep[index - 1]
    });
    base
}

/// A child layer overrides scalars it sets; lists are unions, so that extending a profile can
/// never silently un-hide a secret or un-protect a path. `network.presets` is the exception: a
/// child that sets it replaces it, so that `ci` and `strict` do not inherit default's downloads
/// (narrowing the network is safe).
fn merge(base: ProfileFile, child: ProfileFile) -> ProfileFile {
    let mut set_env = base.process.set_env;
    set_env.extend(child.process.set_env);
    ProfileFile {
        name: child.name.or(base.name),
        description: child.description.or(base.description),
        extends: None,
        assurance: child.assurance.or(base.assurance),
        filesystem: FilesystemFile {
            system: append_unique(base.filesystem.system, child.filesystem.system),
            read_only: append_unique(base.filesystem.read_only, child.filesystem.read_only),
            writable: append_unique(base.filesystem.writable, child.filesystem.writable),
            hidden: append_unique(base.filesystem.hidden, child.filesystem.hidden),
            protected: append_unique(base.filesystem.protected, child.filesystem.protected),
            hidden_names: append_unique(
                base.filesystem.hidden_names,
                child.filesystem.hidden_names,
            ),
            home: child.filesystem.home.or(base.filesystem.home),
            home_allow: append_unique(base.filesystem.home_allow, child.filesystem.home_allow),
            hide_env_files: child
                .filesystem
                .hide_env_files
                .or(base.filesystem.hide_env_files),
            env_files_visible: append_unique(
                base.filesystem.env_files_visible,
                child.filesystem.env_files_visible,
            ),
            hide_other_projects: child
                .filesystem
                .hide_other_projects
                .or(base.filesystem.hide_other_projects),
            mask_home_sockets: child
                .filesystem
                .mask_home_sockets
                .or(base.filesystem.mask_home_sockets),
            tmp_size_mib: child
                .filesystem
                .tmp_size_mib
                .or(base.filesystem.tmp_size_mib),
            workspace: child.filesystem.workspace.or(base.filesystem.workspace),
        },
        process: ProcessFile {
            env: append_unique(base.process.env, child.process.env),
            set_env,
            sandbox_uid: child.process.sandbox_uid.or(base.process.sandbox_uid),
            allow_root_fallback: child
                .process
                .allow_root_fallback
                .or(base.process.allow_root_fallback),
            limits: child.process.limits.or(base.process.limits),
        },
        network: NetworkFile {
            mode: child.network.mode.or(base.network.mode),
            allow: append_unique(base.network.allow, child.network.allow),
            presets: child.network.presets.or(base.network.presets),
            read_only: append_unique(base.network.read_only, child.network.read_only),
            allow_addresses: append_unique(
                base.network.allow_addresses,
                child.network.allow_addresses,
            ),
            proxy_port: child.network.proxy_port.or(base.network.proxy_port),
            gateway: GatewayFile::merge(base.network.gateway, child.network.gateway),
            // A union, like the other lists: a rule's name is its identity (two with one name
            // are refused when the profile resolves).
            credentials: {
                let mut rules = base.network.credentials;
                rules.extend(child.network.credentials);
                rules
            },
        },
        degraded: child.degraded.or(base.degraded),
        claude: match (base.claude, child.claude) {
            (Some(mut b), Some(c)) => {
                b.managed_settings.extend(c.managed_settings);
                b.keep_sessions = c.keep_sessions.or(b.keep_sessions);
                Some(b)
            }
            (b, c) => c.or(b),
        },
        hook: match (base.hook, child.hook) {
            (Some(b), Some(c)) => Some(HookConfig::merge(b, c)),
            (b, c) => c.or(b),
        },
        approvals: approvals::merge(base.approvals, child.approvals),
        runbook: budgets::merge(base.runbook, child.runbook),
        audit: match (base.audit, child.audit) {
            (Some(b), Some(c)) => Some(AuditFile {
                inside_max_mib: c.inside_max_mib.or(b.inside_max_mib),
                inside_max_per_second: c.inside_max_per_second.or(b.inside_max_per_second),
                export: c.export.or(b.export),
            }),
            (b, c) => c.or(b),
        },
    }
}

/// 1 TiB: a larger private /tmp is a mistake, and the size has to fit tmpfs's byte count.
const MAX_TMP_SIZE_MIB: u64 = 1 << 20;
/// The kernel's largest pid_max.
const MAX_NPROC: u64 = 4_194_304;
/// The kernel's default fs.nr_open.
const MAX_NOFILE: u64 = 1 << 20;
const MAX_SANDBOX_UID: u32 = i32::MAX as u32 - 1;
const OVERFLOW_UID: u32 = 65534;

/// Every number a profile sets is checked against its range, named in the error.
fn in_range(key: &str, value: u64, min: u64, max: u64) -> Result<(), String> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(format!(
            "{key} = {value} is outside the allowed range {min} to {max}"
        ))
    }
}

fn resolve(file: ProfileFile, origins: Vec<String>) -> Result<Profile, String> {
    let fs = file.filesystem;
    for p in &fs.protected {
        if p.starts_with('/') || p.starts_with('~') || p.split('/').any(|c| c == "..") {
            return Err(format!(
                "filesystem.protected: {p:?} must be relative to the workspace (no `/`, `~` or `..`)"
            ));
        }
    }
    for p in &fs.env_files_visible {
        if p.starts_with('/') || p.starts_with('~') || p.split('/').any(|c| c == "..") {
            return Err(format!(
                "filesystem.env_files_visible: {p:?} must be relative to the workspace (no `/`, `~` or `..`)"
            ));
        }
    }
    for pattern in &fs.hidden_names {
        if pattern.is_empty() || pattern.contains(['/', '\0']) {
            return Err(format!(
                "filesystem.hidden_names: {pattern:?} must be a file name pattern (no `/`)"
            ));
        }
        if pattern.chars().all(|c| c == '*' || c == '?') {
            return Err(format!(
                "filesystem.hidden_names: {pattern:?} matches every name: it would hide the whole home (use home = \"allowlist\" for that)"
            ));
        }
    }
    for spec in &fs.home_allow {
        if !spec.is_in_home() {
            return Err(format!(
                "filesystem.home_allow: {spec} must be a path in the home (`~/…`); other paths go in read_only"
            ));
        }
    }
    for spec in fs.writable.iter() {
        if spec.is_filesystem_root() {
            return Err("filesystem.writable: `/` cannot be writable".into());
        }
    }
    let tmp_size_mib = fs.tmp_size_mib.unwrap_or(1024);
    in_range("filesystem.tmp_size_mib", tmp_size_mib, 1, MAX_TMP_SIZE_MIB)?;
    for name in file.process.env.iter().chain(file.process.set_env.keys()) {
        let bare = name.strip_suffix('*').unwrap_or(name);
        if bare.is_empty() && name != "*" || bare.contains(['=', '\0', '*']) {
            return Err(format!(
                "process.env: {name:?} is not a variable name or prefix*"
            ));
        }
    }
    let sandbox_uid = file.process.sandbox_uid.unwrap_or(DEFAULT_SANDBOX_UID);
    if sandbox_uid == 0 {
        return Err("process.sandbox_uid must not be 0: the command never runs as root".into());
    }
    in_range(
        "process.sandbox_uid",
        u64::from(sandbox_uid),
        1,
        u64::from(MAX_SANDBOX_UID),
    )?;
    if sandbox_uid == OVERFLOW_UID {
        return Err(format!(
            "process.sandbox_uid must not be {OVERFLOW_UID}, the kernel's overflow uid (what unmapped owners appear as)"
        ));
    }
    if let Some(limits) = &file.process.limits {
        in_range("process.limits.nproc", limits.nproc, 1, MAX_NPROC)?;
        in_range("process.limits.nofile", limits.nofile, 16, MAX_NOFILE)?;
        if let Some(fsize) = limits.fsize {
            in_range("process.limits.fsize", fsize.0, 1, u64::MAX - 1)?;
        }
        if let Some(pids) = limits.pids {
            in_range("process.limits.pids", pids, 1, MAX_NPROC)?;
        }
        if let Some(memory) = limits.memory {
            // Below a few MiB nothing starts; the kernel counts in bytes up to i64::MAX.
            in_range("process.limits.memory", memory.0, 4 << 20, i64::MAX as u64)?;
        }
        if let Some(cpu) = limits.cpu {
            in_range("process.limits.cpu", cpu, 1, u64::MAX - 1)?;
        }
    }
    Ok(Profile {
        name: file.name.unwrap_or_else(|| "unnamed".into()),
        description: file.description.unwrap_or_default(),
        origins,
        files: Vec::new(),
        assurance: file.assurance.unwrap_or_default(),
        filesystem: Filesystem {
            system: fs.system,
            read_only: fs.read_only,
            writable: fs.writable,
            hidden: fs.hidden,
            protected: fs.protected,
            hidden_names: fs.hidden_names,
            home: fs.home.unwrap_or_default(),
            home_allow: fs.home_allow,
            hide_env_files: fs.hide_env_files.unwrap_or(false),
            env_files_visible: fs.env_files_visible,
            hide_other_projects: fs.hide_other_projects.unwrap_or(true),
            mask_home_sockets: fs.mask_home_sockets.unwrap_or(true),
            tmp_size_mib,
            workspace: fs.workspace.unwrap_or_default(),
        },
        process: Process {
            env: file.process.env,
            set_env: file.process.set_env,
            sandbox_uid,
            allow_root_fallback: file.process.allow_root_fallback.unwrap_or(false),
            limits: file.process.limits.unwrap_or_default(),
        },
        network: {
            let mut allow_entries = file.network.allow;
            let presets = file.network.presets.unwrap_or_default();
            for host in presets::hosts_of(&presets)? {
                if !allow_entries.contains(&host) {
                    allow_entries.push(host);
                }
            }
            let mut read_only: Vec<String> = Vec::new();
            let written = presets::read_only_of(&presets)
                .into_iter()
                .chain(file.network.read_only.iter().cloned());
            for entry in written {
                let (host, port) = allow::host::parse_authority(&entry, Some(443))
                    .map_err(|e| format!("network.read_only: \"{entry}\": {e}"))?;
                let normal = if port == 443 {
                    host.to_string()
                } else {
                    format!("{host}:{port}")
                };
                if !read_only.contains(&normal) {
                    read_only.push(normal);
                }
                if !allow_entries.contains(&entry) {
                    allow_entries.push(entry);
                }
            }
            let credentials = file.network.credentials;
            credentials::check(&credentials, &mut allow_entries)?;
            let allow = AllowList::new(allow_entries, file.network.allow_addresses)
                .map_err(|e| format!("network.{e}"))?;
            let proxy_port = file.network.proxy_port.unwrap_or(DEFAULT_PROXY_PORT);
            in_range("network.proxy_port", u64::from(proxy_port), 1, 65535)?;
            let mode = file.network.mode.unwrap_or_default();
            let gateway_file = file.network.gateway.unwrap_or_default();
            let mut login_paths = Vec::new();
            for entry in gateway_file.login_paths.iter().flatten() {
                let path = LoginPath::parse(entry)
                    .map_err(|e| format!("network.gateway.login_paths: \"{entry}\": {e}"))?;
                if !login_paths.contains(&path) {
                    login_paths.push(path);
                }
            }
            let gateway = if gateway_file.names_route() {
                if mode == NetworkMode::Host {
                    return Err("network.gateway needs mode \"allowlist\" or \"none\": with the host's network the agent could reach the API directly".into());
                }
                let Some(upstream) = gateway_file.upstream else {
                    return Err("network.gateway: `upstream` is missing; a [network.gateway] that names where the login goes needs `upstream` and `credential` (for the gateway StepProof puts in for an agent, set only `login_paths`)".into());
                };
                let Some(credential) = gateway_file.credential else {
                    return Err("network.gateway: `credential` is missing; a [network.gateway] that names where the login goes needs `upstream` and `credential` (for the gateway StepProof puts in for an agent, set only `login_paths`)".into());
                };
                if !(credential == "claude-login"
                    || credential
                        .strip_prefix("env:")
                        .is_some_and(|n| !n.is_empty()))
                {
                    return Err(format!(
                        "network.gateway.credential = {credential:?}: expected \"env:NAME\" or \"claude-login\""
                    ));
                }
                Some(GatewayConfig {
                    upstream,
                    connect: gateway_file.connect,
                    ca_file: gateway_file.ca_file,
                    credential,
                    // The plan gives the run's gateway the profile's `login_paths`.
                    login_paths: Vec::new(),
                })
            } else {
                None
            };
            if !credentials.is_empty() && mode != NetworkMode::Allowlist {
                let word = if mode == NetworkMode::Host {
                    "host"
                } else {
                    "none"
                };
                return Err(format!(
                    "network.credentials: credential rules need mode \"allowlist\" (the proxy adds them), not \"{word}\""
                ));
            }
            Network {
                mode,
                presets,
                allow,
                read_only,
                proxy_port,
                gateway,
                login_paths,
                credentials,
            }
        },
        hook: file.hook,
        degraded: file.degraded.unwrap_or_default(),
        claude: {
            let claude = file.claude.unwrap_or_default();
            let managed_settings = claude.managed_settings;
            // Each layer was checked with its line; this is the merged result's.
            if let Some(key) = claude_settings::owned_keys_in(&managed_settings).first() {
                return Err(owned_key_message(key));
            }
            Claude {
                managed_settings,
                keep_sessions: claude.keep_sessions.unwrap_or(true),
            }
        },
        audit: {
            let audit = file.audit.unwrap_or_default();
            let inside_max_mib = audit.inside_max_mib.unwrap_or(DEFAULT_INSIDE_MAX_MIB);
            in_range("audit.inside_max_mib", inside_max_mib, 1, 1 << 16)?;
            if let Some(rate) = audit.inside_max_per_second {
                in_range("audit.inside_max_per_second", u64::from(rate), 1, 100_000)?;
            }
            if let Some(export) = &audit.export {
                export.validate()?;
            }
            Audit {
                inside_max_mib,
                inside_max_per_second: audit.inside_max_per_second,
                export: audit.export,
            }
        },
        approvals: approvals::resolve(file.approvals)?,
        runbook: budgets::resolve(file.runbook)?,
    })
}

#[cfg(test)]
mod tests;
