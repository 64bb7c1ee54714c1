//! From the merged file to a `Profile`: every value checked against its range and its rules,
//! with defaults filled in.

use super::allow::AllowList;
use super::login_paths::LoginPath;
use super::parse::owned_key_message;
use super::{
    Audit, AuditFile, Claude, ClaudeFile, DEFAULT_INSIDE_MAX_MIB, DEFAULT_PROXY_PORT,
    DEFAULT_SANDBOX_UID, Filesystem, FilesystemFile, GatewayConfig, GatewayFile, Network,
    NetworkFile, NetworkMode, Process, ProcessFile, Profile, ProfileFile, allow, approvals,
    budgets, claude_settings, credentials, presets,
};

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

/// The merged file checked and filled in, section by section in the order a reader meets them
/// (the first problem found is the one said).
pub(super) fn resolve(file: ProfileFile, origins: Vec<String>) -> Result<Profile, String> {
    let filesystem = resolve_filesystem(file.filesystem)?;
    let process = resolve_process(file.process)?;
    let network = resolve_network(file.network)?;
    let claude = resolve_claude(file.claude)?;
    let audit = resolve_audit(file.audit)?;
    Ok(Profile {
        name: file.name.unwrap_or_else(|| "unnamed".into()),
        description: file.description.unwrap_or_default(),
        origins,
        files: Vec::new(),
        assurance: file.assurance.unwrap_or_default(),
        filesystem,
        process,
        network,
        hook: file.hook,
        degraded: file.degraded.unwrap_or_default(),
        claude,
        audit,
        approvals: approvals::resolve(file.approvals)?,
        runbook: budgets::resolve(file.runbook)?,
    })
}

/// `[filesystem]`: workspace-relative lists stay inside it, name patterns are names (and not
/// every name), `home_allow` is in the home, `/` is never writable, `/tmp` has a sane size.
fn resolve_filesystem(fs: FilesystemFile) -> Result<Filesystem, String> {
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
    Ok(Filesystem {
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
    })
}

/// `[process]`: variable names, a sandbox uid that is neither root nor the overflow uid, and
/// limits within the kernel's ranges.
fn resolve_process(process: ProcessFile) -> Result<Process, String> {
    for name in process.env.iter().chain(process.set_env.keys()) {
        let bare = name.strip_suffix('*').unwrap_or(name);
        if bare.is_empty() && name != "*" || bare.contains(['=', '\0', '*']) {
            return Err(format!(
                "process.env: {name:?} is not a variable name or prefix*"
            ));
        }
    }
    let sandbox_uid = process.sandbox_uid.unwrap_or(DEFAULT_SANDBOX_UID);
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
    if let Some(limits) = &process.limits {
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
    Ok(Process {
        env: process.env,
        set_env: process.set_env,
        sandbox_uid,
        allow_root_fallback: process.allow_root_fallback.unwrap_or(false),
        limits: process.limits.unwrap_or_default(),
    })
}

/// `[network]`: the allow-list with what the presets and `read_only` add, the credential
/// rules (which need the allowlist mode), the proxy port, and the gateway.
fn resolve_network(network: NetworkFile) -> Result<Network, String> {
    let presets = network.presets.unwrap_or_default();
    let (mut allow_entries, read_only) =
        with_presets_and_read_only(network.allow, &presets, &network.read_only)?;
    let credentials = network.credentials;
    credentials::check(&credentials, &mut allow_entries)?;
    let allow = AllowList::new(allow_entries, network.allow_addresses)
        .map_err(|e| format!("network.{e}"))?;
    let proxy_port = network.proxy_port.unwrap_or(DEFAULT_PROXY_PORT);
    in_range("network.proxy_port", u64::from(proxy_port), 1, 65535)?;
    let mode = network.mode.unwrap_or_default();
    let (gateway, login_paths) = resolve_gateway(network.gateway.unwrap_or_default(), mode)?;
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
    Ok(Network {
        mode,
        presets,
        allow,
        read_only,
        proxy_port,
        gateway,
        login_paths,
        credentials,
    })
}

/// The allow-list's entries with the presets' hosts and every `read_only` entry (the presets'
/// and the profile's) added, and the `read_only` hosts in their normal spelling (`host`, or
/// `host:port` when the port is not 443).
fn with_presets_and_read_only(
    mut allow_entries: Vec<String>,
    presets: &[String],
    profile_read_only: &[String],
) -> Result<(Vec<String>, Vec<String>), String> {
    for host in presets::hosts_of(presets)? {
        if !allow_entries.contains(&host) {
            allow_entries.push(host);
        }
    }
    let mut read_only: Vec<String> = Vec::new();
    let written = presets::read_only_of(presets)
        .into_iter()
        .chain(profile_read_only.iter().cloned());
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
    Ok((allow_entries, read_only))
}

/// `[network.gateway]`: its `login_paths`, and — when it names where the login goes — its
/// upstream and credential (refused with the host's network, which would bypass it).
fn resolve_gateway(
    gateway_file: GatewayFile,
    mode: NetworkMode,
) -> Result<(Option<GatewayConfig>, Vec<LoginPath>), String> {
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
    Ok((gateway, login_paths))
}

/// `[claude]`: the merged managed settings hold no key StepProof owns (each layer was checked
/// with its line; this is the merged result's).
fn resolve_claude(claude: Option<ClaudeFile>) -> Result<Claude, String> {
    let claude = claude.unwrap_or_default();
    let managed_settings = claude.managed_settings;
    if let Some(key) = claude_settings::owned_keys_in(&managed_settings).first() {
        return Err(owned_key_message(key));
    }
    Ok(Claude {
        managed_settings,
        keep_sessions: claude.keep_sessions.unwrap_or(true),
    })
}

/// `[audit]`: the inside reports' size and rate within range, and the export's settings.
fn resolve_audit(audit: Option<AuditFile>) -> Result<Audit, String> {
    let audit = audit.unwrap_or_default();
    let inside_max_mib = audit.inside_max_mib.unwrap_or(DEFAULT_INSIDE_MAX_MIB);
    in_range("audit.inside_max_mib", inside_max_mib, 1, 1 << 16)?;
    if let Some(rate) = audit.inside_max_per_second {
        in_range("audit.inside_max_per_second", u64::from(rate), 1, 100_000)?;
    }
    if let Some(export) = &audit.export {
        export.validate()?;
    }
    Ok(Audit {
        inside_max_mib,
        inside_max_per_second: audit.inside_max_per_second,
        export: audit.export,
    })
}
