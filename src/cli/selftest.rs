//! `stepproof selftest`: the built-in escape probes, run inside the very sandbox a profile
//! describes (the `stepproof` binary is bound read-only into it), each of which must fail.
//! `stepproof-run --ci` runs it before starting the agent.

use crate::cli::probes::{Needs, PROBES, ProbeOutcome, run_probe};
use crate::sandbox::plan::run_kind::SELFTEST_BINARY;
use crate::sandbox::plan::{Access, MountOp, SandboxPlan};
use std::ffi::OsString;

/// The command that runs every probe (and, for a profile with a hook, the checks of the
/// agent's layer) from the probe binary the plan binds (`plan::run_kind`).
pub fn probe_command(plan: &SandboxPlan) -> Vec<OsString> {
    let mut command = vec![SELFTEST_BINARY.into(), "__probe-all".into()];
    if plan.agent.is_some() {
        command.push("--agent".into());
    }
    // An allow-listed home is a private tmpfs the run may write: the probe writes instead into
    // a read-only part of it (an allow-listed directory), or nowhere when there is none.
    let home_is_private = plan
        .mounts
        .iter()
        .any(|m| matches!(m, MountOp::Tmpfs { dst, .. } if *dst == plan.home));
    if home_is_private {
        let shown = plan.mounts.iter().find_map(|m| match m {
            MountOp::Bind { dst, access, .. } | MountOp::IdmappedBind { dst, access, .. }
                if *access == Access::ReadOnly && dst.starts_with(&plan.home) && dst.is_dir() =>
            {
                Some(dst.clone())
            }
            _ => None,
        });
        command.push("--private-home".into());
        if let Some(shown) = shown {
            command.push("--read-only-in-home".into());
            command.push(shown.into());
        }
    }
    command
}

fn finding(name: &str, problems: Vec<String>, fine: &str) -> ProbeOutcome {
    ProbeOutcome {
        name: name.to_string(),
        escaped: !problems.is_empty(),
        errno: None,
        detail: if problems.is_empty() {
            fine.to_string()
        } else {
            problems.join("; ")
        },
    }
}

/// Inside, for a profile with a hook: the agent's layer as Claude Code will find it. The managed
/// settings are StepProof's (its hook for every event, managed hooks only, the gates fail
/// closed) and no drop-in sets a key StepProof owns; none of it can be written; nothing in the
/// environment switches managed hooks off or points elsewhere; the hook binary runs and decides
/// with the policy in place. A finding counts as an escape.
fn agent_layer() -> Vec<ProbeOutcome> {
    use crate::sandbox::plan::agent_layer::{
        DROP_IN_DIR, HOOK_BINARY, MANAGED_DIR, MANAGED_FILE, POLICY_FILE, managed_settings_problems,
    };
    let dir = std::path::Path::new(MANAGED_DIR);
    let read_json = |path: &std::path::Path| -> Result<serde_json::Value, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("{}: not JSON: {e}", path.display()))
    };
    let mut results = Vec::new();

    let file = dir.join(MANAGED_FILE);
    let problems = match read_json(&file) {
        Ok(settings) => managed_settings_problems(&settings, false)
            .into_iter()
            .map(|p| format!("{}: {p}", file.display()))
            .collect(),
        Err(e) => vec![e],
    };
    results.push(finding(
        "agent:managed_settings",
        problems,
        "StepProof's hook is registered for every event, managed hooks only",
    ));

    let drop_ins = dir.join(DROP_IN_DIR);
    let mut problems = Vec::new();
    if let Ok(entries) = std::fs::read_dir(&drop_ins) {
        for entry in entries.filter_map(Result::ok) {
            let path = entry.path();
            match read_json(&path) {
                Ok(settings) => problems.extend(
                    managed_settings_problems(&settings, true)
                        .into_iter()
                        .map(|p| format!("{}: {p}", path.display())),
                ),
                Err(e) => problems.push(e),
            }
        }
    }
    results.push(finding(
        "agent:drop_ins",
        problems,
        "no drop-in sets a key StepProof owns",
    ));

    let mut problems = Vec::new();
    for path in [
        dir.to_path_buf(),
        file.clone(),
        drop_ins.join("zz-selftest.json"),
    ] {
        let created = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path);
        if created.is_ok() {
            problems.push(format!("{} can be written", path.display()));
        }
    }
    results.push(finding(
        "agent:managed_read_only",
        problems,
        "the managed settings cannot be written",
    ));

    let problems = std::env::vars_os()
        .filter_map(|(name, _)| name.into_string().ok())
        .filter(|name| {
            crate::profile::claude_settings::defeats_hook(name)
                && !(name == "CLAUDE_CONFIG_DIR"
                    && std::env::var(name).as_deref()
                        == Ok(crate::sandbox::plan::agent_layer::CONFIG_DIR))
        })
        .map(|name| format!("{name} is set"))
        .collect();
    results.push(finding(
        "agent:environment",
        problems,
        "nothing in the environment switches managed hooks off or points elsewhere",
    ));

    results.push(finding(
        "agent:hook",
        hook_decides(HOOK_BINARY, POLICY_FILE)
            .err()
            .into_iter()
            .collect(),
        "the hook runs and decides with the policy in place",
    ));
    results
}

/// Runs the hook on a harmless PreToolUse call: it must answer with a decision of the policy
/// (not the fail-closed one a missing or broken policy gives).
fn hook_decides(hook: &str, policy: &str) -> Result<(), String> {
    use std::io::Write;
    let cwd = std::env::current_dir().unwrap_or_default();
    let input = serde_json::json!({
        "hook_event_name": "PreToolUse",
        "session_id": "stepproof-selftest",
        "cwd": cwd,
        "tool_name": "Bash",
        "tool_input": { "command": "true" },
        "tool_use_id": "selftest",
    });
    let mut child = std::process::Command::new(hook)
        .args(["--policy", policy, "--event", "PreToolUse"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("running {hook}: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(input.to_string().as_bytes());
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("waiting for {hook}: {e}"))?;
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|_| {
        format!(
            "{hook} gave no answer (exit {:?}): {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).trim()
        )
    })?;
    let output = &answer["hookSpecificOutput"];
    let reason = output["permissionDecisionReason"]
        .as_str()
        .unwrap_or_default();
    if output["permissionDecision"].as_str().is_none() || reason.contains("(rule fail-closed)") {
        return Err(format!("{hook} did not decide with {policy}: {answer}"));
    }
    Ok(())
}

/// Inside the sandbox: every probe, one JSON line each. A sibling process is the ptrace target;
/// pid 1 (the init, outside the Landlock domain) is the signal and /proc/<pid>/mem target.
/// `private_home`: the home inside is private, with this read-only part of it (if any).
pub fn probe_all(agent: bool, private_home: Option<Option<&std::path::Path>>) -> i32 {
    let sibling = std::process::Command::new("/bin/sleep")
        .arg("10")
        .spawn()
        .ok();
    let sibling_pid = sibling.as_ref().map(|c| c.id().to_string());
    let mut escaped = false;
    let mut results: Vec<ProbeOutcome> = Vec::new();
    // Probes that need a terminal, a peer or a path outside the sandbox's domain are left to
    // the test suite (the paths below are this run's own).
    for probe in PROBES {
        let name = probe.name;
        let spec = match (probe.needs, &sibling_pid) {
            (Needs::Terminal | Needs::Peer | Needs::Path, _) => continue,
            (Needs::Sibling, Some(pid)) => format!("{name}:{pid}"),
            (Needs::Init, _) => format!("{name}:1"),
            _ => name.to_string(),
        };
        results.push(run_probe(&spec));
    }
    let home = std::env::var("HOME").unwrap_or_default();
    results.push(run_probe("write:/etc/stepproof-selftest"));
    match private_home {
        None => results.push(run_probe(&format!("write:{home}/.stepproof-selftest"))),
        Some(Some(shown)) => results.push(run_probe(&format!(
            "write:{}/.stepproof-selftest",
            shown.display()
        ))),
        Some(None) => {}
    }
    results.push(run_probe(&format!("read:{home}/.ssh/id_rsa")));
    if agent {
        results.extend(agent_layer());
    }
    if let Some(mut child) = sibling {
        let _ = child.kill();
        let _ = child.wait();
    }
    for r in &results {
        // A secret file that does not exist cannot leak: that read "escapes" nothing.
        let leaked = r.escaped && !(r.name.starts_with("read:") && r.errno == Some(libc::ENOENT));
        escaped |= leaked;
        crate::out!("{}", serde_json::to_string(r).unwrap_or_default());
    }
    i32::from(escaped)
}

/// One probe's line as `stepproof-run --selftest` printed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelftestResult {
    pub name: String,
    pub escaped: bool,
    pub detail: String,
}

pub fn parse_results(stdout: &str) -> Vec<SelftestResult> {
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["name"].is_string())
        .map(|v| SelftestResult {
            name: v["name"].as_str().unwrap_or_default().to_string(),
            escaped: v["escaped"].as_bool().unwrap_or(true),
            detail: v["detail"].as_str().unwrap_or_default().to_string(),
        })
        .collect()
}
