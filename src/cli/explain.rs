//! `stepproof explain` (and `stepproof-run --explain`): the effective policy, as text a reviewer
//! reads in order or as JSON.

use crate::profile::{NetworkMode, Profile, WorkspaceMode};
use crate::sandbox::plan::SandboxPlan;
use crate::sandbox::report::namespaces;
use crate::supervisor::launch::start::describe_identity;
use std::path::Path;

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
            "network presets: {}",
            if profile.network.presets.is_empty() {
                "(none)".to_string()
            } else {
                profile.network.presets.join(" ")
            }
        ));
        line(format!(
            "network allow: {}",
            profile.network.allow.hosts().join(" ")
        ));
        if !plan.read_only.is_empty() {
            line(format!(
                "network read-only (GET and HEAD; TLS terminated with the run's CA): {}",
                plan.read_only.join(" ")
            ));
        }
        if !profile.network.allow.addresses().is_empty() {
            line(format!(
                "network allow_addresses: {}",
                profile.network.allow.addresses().join(" ")
            ));
        }
    }
    line(format!(
        "workspace: {} ({})",
        plan.workspace.display(),
        match plan.workspace_mode {
            WorkspaceMode::Writable => "read-write",
            WorkspaceMode::ReadOnly => "read-only",
            WorkspaceMode::Overlay =>
                "overlay: writable inside, every write thrown away after the run; nothing reaches the checkout",
        }
    ));
    line(format!("home: {}", plan.home.display()));
    match &plan.caches {
        Some(caches) => line(format!(
            "caches: {} at {} ({}): {}",
            caches.host.display(),
            crate::sandbox::plan::caches::CACHES_DIR,
            if caches.kept {
                "the workspace's, kept between runs"
            } else {
                "the run's own, removed when it ends"
            },
            crate::sandbox::plan::caches::CACHES
                .iter()
                .map(|(_, var)| *var)
                .collect::<Vec<_>>()
                .join(" ")
        )),
        None => line("caches: the toolchains' own defaults (no mount namespace)".into()),
    }
    line(format!("cwd: {}", plan.cwd.display()));
    if let Some(agent) = &plan.agent {
        line(match &agent.sessions {
            Some(dir) => format!(
                "sessions: kept per workspace in {} (transcripts, prompt history, auto-memory, todos, plans; seeded before each run, taken back after; not under --ci)",
                dir.display()
            ),
            None => "sessions: not kept (claude.keep_sessions = false, or a --ci run, the self-test, a verifier): every run starts without earlier sessions or memory".into(),
        });
        line(format!(
            "agent: Claude Code's managed settings at {} are StepProof's (hook for every event, managed hooks only) with the host's managed-settings.json and drop-ins laid over them, in their order, without the keys StepProof owns ({})",
            crate::sandbox::plan::agent_layer::MANAGED_DIR,
            crate::profile::claude_settings::OWNED_KEYS.join(", ")
        ));
        for removed in &plan.managed_settings_removed {
            line(format!(
                "  REMOVED from the host's managed settings: {removed}"
            ));
        }
        if let Some(slot) = plan.server_settings_slot() {
            line(format!(
                "  when the command is Claude Code and Claude Code on this host would fetch the organisation's server-managed settings, the launch fetches them outside with the real login and writes them to {} in place of the host's drop-ins, without the keys StepProof owns (a fetch that fails is a WARNING; the run goes on without them)",
                slot.display()
            ));
        }
        if let Some(merged) = &plan.managed_settings {
            let mut shown = merged.clone();
            if let Some(hooks) = shown.get_mut("hooks") {
                *hooks = "StepProof's hook for every event (above)".into();
            }
            line("managed settings inside, merged as Claude Code merges them:".into());
            for text in serde_json::to_string_pretty(&shown)
                .unwrap_or_default()
                .lines()
            {
                line(format!("  {text}"));
            }
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
    for l in crate::sandbox::seccomp::describe(plan.seccomp) {
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
    let host = crate::supervisor::launch::cgroup::CgroupHost::discover(Path::new("/proc"));
    let cgroup = crate::supervisor::launch::cgroup::plan(
        &host,
        &crate::supervisor::launch::cgroup::CgroupLimits::from(&request),
        &host.run_name("explain"),
    );
    for entry in &cgroup.entries {
        use crate::supervisor::launch::cgroup::describe;
        let how = if crate::supervisor::launch::cgroup::is_named(&request, entry.limit) {
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
        line(format!(
            "the real login goes only with the model API's requests: {}; every other request to the gateway is refused (403)",
            crate::supervisor::net::model_paths::model_paths().join(", ")
        ));
        if !gateway.login_paths.is_empty() {
            line(format!(
                "and with these the profile adds (network.gateway.login_paths): {}",
                gateway
                    .login_paths
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        let mut held: Vec<&str> = plan.held_outside.iter().map(|(n, _)| n.as_str()).collect();
        held.dedup();
        if !held.is_empty() {
            line(format!(
                "kept outside for the gateway (never passed): {}",
                held.join(" ")
            ));
        }
    }
    for planned in &plan.credentials {
        use crate::profile::credentials::Injection;
        let rule = &planned.rule;
        let (host, port) = rule.host_port();
        let sent = match rule.injection() {
            Injection::Header { name, format } => format!("header {name}: {format}"),
            Injection::Basic { user } => format!("basic auth, user {user}"),
        };
        let mut inside = Vec::new();
        if let Some(name) = &rule.placeholder_env {
            inside.push(format!("${name}"));
        }
        if rule.git {
            inside.push("git's credential helper".to_string());
        }
        line(format!(
            "credential {}: https://{host}:{port} {} for {}; sent as {sent}; from {} (read outside at launch, never inside); placeholder in {}; TLS terminated for this host with the run's CA",
            rule.name,
            rule.paths.join(" "),
            rule.methods
                .as_ref()
                .map_or("every method".to_string(), |m| m.join(" ")),
            rule.source_spec().describe(),
            if inside.is_empty() {
                "nothing (the proxy adds the header)".to_string()
            } else {
                inside.join(" and ")
            },
        ));
    }
    if let Some(webhook) = &profile.approvals {
        line(format!(
            "approval webhook: {} (key from {}, read outside; answers polled, signed; {} in stepproof-run's environment win over it)",
            webhook.webhook,
            webhook.key_source().describe(),
            crate::profile::approvals::WEBHOOK_VAR
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

/// `stepproof explain --json`. Fails only where JSON cannot hold the plan: a path that is not
/// UTF-8 (the text form shows it).
pub fn explain_json(
    profile: &Profile,
    plan: &SandboxPlan,
) -> Result<serde_json::Value, serde_json::Error> {
    Ok(serde_json::json!({
        "profile": profile.name,
        "origins": profile.origins,
        "policy_hash": plan.policy_hash,
        "requested": serde_json::to_value(profile)?,
        "namespaces": namespaces(plan),
        "plan": serde_json::to_value(plan)?,
        "seccomp": crate::sandbox::seccomp::describe(plan.seccomp),
    }))
}
