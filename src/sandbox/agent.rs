//! The agent inside (profiles with a hook): Claude Code's managed settings laid over `/etc`
//! read-only, so the hook is registered where the agent cannot remove it and applies to any
//! `claude` started inside; the hook binary, its compiled policy and the audit socket on a
//! read-only `/run/stepproof`; and the agent's own state in a fresh per-run config directory
//! that the supervisor seeds and reads back.

use crate::profile::Profile;
use crate::sandbox::plan::{Access, HostFacts, MountOp, PlanError};
use serde::Serialize;
use std::path::{Path, PathBuf};

pub const CONTROL_DIR: &str = "/run/stepproof";
pub const HOOK_BINARY: &str = "/run/stepproof/stepproof-hook";
pub const POLICY_FILE: &str = "/run/stepproof/policy.json";
pub const AUDIT_SOCKET: &str = "/run/stepproof/audit.sock";
/// `CLAUDE_CONFIG_DIR` inside: the per-run config directory, writable.
pub const CONFIG_DIR: &str = "/run/claude-config";
/// Hooks must answer quickly; Claude Code's default is 600 s.
const HOOK_TIMEOUT_SECONDS: u32 = 5;

/// Gates block the tool call when the hook fails; observers never block and never loop.
const EVENTS: &[(&str, bool, bool)] = &[
    // (event, takes a matcher, fails closed)
    ("PreToolUse", true, true),
    ("ConfigChange", false, true),
    ("PostToolUse", true, false),
    ("PostToolUseFailure", true, false),
    ("SessionStart", false, false),
    ("UserPromptSubmit", false, false),
    ("PreCompact", false, false),
    ("Stop", false, false),
    ("SessionEnd", false, false),
];

/// What the supervisor prepares on the host for the agent, and reads back after the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AgentState {
    pub run_dir: PathBuf,
    /// Bound read-write at `CONFIG_DIR`; seeded before, credentials carried back after.
    pub config_dir: PathBuf,
    /// The socket the hook's records arrive on (bound read-only at `AUDIT_SOCKET`).
    pub hook_socket: PathBuf,
    pub hook_binary: PathBuf,
    pub workspace: PathBuf,
    pub home: PathBuf,
}

/// The parts of the plan the agent needs.
pub struct AgentPlan {
    pub etc_files: Vec<(PathBuf, String)>,
    pub mounts: Vec<MountOp>,
    pub env: Vec<(String, String)>,
    pub state: AgentState,
}

/// Claude Code's managed settings: only managed hooks, every event StepProof handles, each in
/// exec form with an explicit timeout; the gates with `onFailure: block`.
pub fn managed_settings(extra: &serde_json::Map<String, serde_json::Value>) -> serde_json::Value {
    let mut hooks = serde_json::Map::new();
    for (event, matcher, blocks) in EVENTS {
        let mut entry = serde_json::json!({
            "type": "command",
            "command": HOOK_BINARY,
            "args": ["--policy", POLICY_FILE, "--audit-socket", AUDIT_SOCKET, "--event", event],
            "timeout": HOOK_TIMEOUT_SECONDS,
        });
        if *blocks {
            entry["onFailure"] = "block".into();
        }
        let mut group = serde_json::json!({ "hooks": [entry] });
        if *matcher {
            group["matcher"] = "*".into();
        }
        hooks.insert(event.to_string(), serde_json::json!([group]));
    }
    // The profile's own keys first; StepProof's are written last, so they always stand.
    let mut settings = extra.clone();
    settings.insert("allowManagedHooksOnly".into(), true.into());
    settings.insert("hooks".into(), serde_json::Value::Object(hooks));
    serde_json::Value::Object(settings)
}

/// The compiled hook policy, as the hook binary reads it.
pub fn compiled_policy(
    profile: &Profile,
    home: &Path,
    workspace: &Path,
) -> Result<String, PlanError> {
    let Some(config) = &profile.hook else {
        return Err(PlanError::Refused(
            "the profile has no [hook] section".into(),
        ));
    };
    crate::hook_policy::compile_json(config, home, workspace, &profile.name)
        .map_err(|e| PlanError::Refused(format!("the [hook] section does not compile: {e}")))
}

pub fn plan_agent(
    profile: &Profile,
    facts: &HostFacts,
    home: &Path,
    workspace: &Path,
) -> Result<Option<AgentPlan>, PlanError> {
    if profile.hook.is_none() {
        return Ok(None);
    }
    let hook_binary = facts.hook_binary.clone().ok_or_else(|| {
        PlanError::Refused(
            "this profile installs the hook, but stepproof-hook is not installed next to stepproof-run (scripts/install puts it there)"
                .into(),
        )
    })?;
    let policy = compiled_policy(profile, home, workspace)?;
    let settings =
        serde_json::to_string_pretty(&managed_settings(&profile.claude.managed_settings))
            .expect("JSON values serialize");
    let state = AgentState {
        run_dir: facts.run_dir.clone(),
        config_dir: facts.run_dir.join("claude-config"),
        hook_socket: facts.run_dir.join("hook.sock"),
        hook_binary: hook_binary.clone(),
        workspace: workspace.to_path_buf(),
        home: home.to_path_buf(),
    };
    let mounts = vec![
        MountOp::Tmpfs {
            dst: CONTROL_DIR.into(),
            mode: 0o755,
            size_mib: Some(1),
        },
        MountOp::File {
            dst: POLICY_FILE.into(),
            contents: policy,
        },
        MountOp::FromSupervisor {
            src: hook_binary,
            dst: HOOK_BINARY.into(),
            access: Access::ReadOnly,
        },
        MountOp::FromSupervisor {
            src: state.hook_socket.clone(),
            dst: AUDIT_SOCKET.into(),
            access: Access::ReadOnly,
        },
        MountOp::SealReadOnly {
            dst: CONTROL_DIR.into(),
        },
        MountOp::FromSupervisor {
            src: state.config_dir.clone(),
            dst: CONFIG_DIR.into(),
            access: Access::ReadWrite,
        },
    ];
    let env = vec![
        ("CLAUDE_CONFIG_DIR".to_string(), CONFIG_DIR.to_string()),
        ("CLAUDE_CODE_TMPDIR".to_string(), "/tmp".to_string()),
    ];
    Ok(Some(AgentPlan {
        etc_files: vec![(PathBuf::from("claude-code/managed-settings.json"), settings)],
        mounts,
        env,
        state,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn managed_settings_register_every_event_and_gates_fail_closed() {
        let mut extra = serde_json::Map::new();
        extra.insert(
            "permissions".into(),
            serde_json::json!({ "deny": ["Bash(rm -rf *)"] }),
        );
        extra.insert("hooks".into(), serde_json::json!({}));
        let settings = managed_settings(&extra);
        assert_eq!(settings["permissions"]["deny"][0], "Bash(rm -rf *)");
        assert_eq!(settings["allowManagedHooksOnly"], true);
        for (event, _, blocks) in EVENTS {
            let entry = &settings["hooks"][event][0]["hooks"][0];
            assert_eq!(entry["command"], HOOK_BINARY, "{event}");
            assert!(entry["timeout"].as_u64().unwrap() <= 30, "{event}");
            assert_eq!(entry.get("onFailure").is_some(), *blocks, "{event}");
            let args: Vec<&str> = entry["args"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap())
                .collect();
            assert!(
                args.contains(&AUDIT_SOCKET) && args.contains(&POLICY_FILE),
                "{event}"
            );
        }
        assert_eq!(settings["hooks"]["PreToolUse"][0]["matcher"], "*");
    }
}
