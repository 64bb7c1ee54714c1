//! What in Claude Code's settings and environment would take StepProof's hook away. Claude Code
//! 2.1.328 reads one managed tier (`/etc/claude-code/managed-settings.json` with the drop-ins of
//! `managed-settings.d/` merged over it); some of its keys and variables switch hooks off or
//! choose where that tier comes from. StepProof owns those: a profile may not set them, the host's
//! managed file and drop-ins have them removed before the agent sees them (and `--ci` and a strict
//! profile refuse such a host), the gateway removes them from server-managed settings, and the
//! self-test checks that none is left inside.

use serde_json::{Map, Value};

/// Managed-settings keys StepProof owns (checked against 2.1.328's settings schema): which hooks
/// exist, which may run, every switch-off; every key that computes or selects the managed source
/// (a policy helper's output, the composition of sources, a startup that waits for the remote
/// source, WSL reading Windows' policy chain: any of them could replace StepProof's hooks); a
/// program prefixed to the processes Claude Code starts (`processWrapper`); and the helpers that
/// would fetch a real credential inside the sandbox, where StepProof keeps a placeholder and adds
/// the credential at the boundary (`apiKeyHelper`, the cloud providers' refresh and export
/// commands).
pub const OWNED_KEYS: &[&str] = &[
    "hooks",
    "allowManagedHooksOnly",
    "disableAllHooks",
    "policyHelper",
    "policyHelpers",
    "managedSourcesBehavior",
    "parentSettingsBehavior",
    "forceRemoteSettingsRefresh",
    "wslInheritsWindowsSettings",
    "processWrapper",
    "apiKeyHelper",
    "awsCredentialExport",
    "awsAuthRefresh",
    "gcpAuthRefresh",
];

/// Variables that switch managed hooks off (`CLAUDE_CODE_SIMPLE` is what `--bare` sets), point
/// Claude Code at other managed settings, or name a script its Bash tool sources before every
/// command (`CLAUDE_ENV_FILE`: a function defined there turns an allowed `git status` into
/// anything, unseen by the hook). Never passed from the caller, never set by a profile or by a
/// settings file's `env`.
pub const HOOK_DEFEATING_ENV: &[&str] = &[
    "CLAUDE_CODE_SIMPLE",
    "CLAUDE_CODE_MANAGED_SETTINGS_PATH",
    "CLAUDE_CODE_REMOTE_SETTINGS_PATH",
    "CLAUDE_CODE_MOCK_REMOTE_SETTINGS",
    "CLAUDE_CONFIG_DIR",
    "CLAUDE_ENV_FILE",
    "CLAUDE_CODE_PROCESS_WRAPPER",
];

/// Whether `name` is one of [`HOOK_DEFEATING_ENV`] (Claude Code upper-cases settings' `env`
/// names, so the comparison ignores case).
pub fn defeats_hook(name: &str) -> bool {
    HOOK_DEFEATING_ENV
        .iter()
        .any(|n| n.eq_ignore_ascii_case(name))
}

/// The owned keys `settings` sets, dotted (`disableAllHooks`, `env.CLAUDE_CODE_SIMPLE`).
pub fn owned_keys_in(settings: &Map<String, Value>) -> Vec<String> {
    let mut found: Vec<String> = OWNED_KEYS
        .iter()
        .filter(|k| settings.contains_key(**k))
        .map(|k| k.to_string())
        .collect();
    if let Some(Value::Object(env)) = settings.get("env") {
        found.extend(
            env.keys()
                .filter(|name| defeats_hook(name))
                .map(|name| format!("env.{name}")),
        );
    }
    found
}

/// `settings` without the keys StepProof owns; returns what was removed, dotted.
pub fn remove_owned_keys(settings: &mut Map<String, Value>) -> Vec<String> {
    let removed = owned_keys_in(settings);
    for key in &removed {
        match key.strip_prefix("env.") {
            Some(name) => {
                if let Some(Value::Object(env)) = settings.get_mut("env") {
                    env.remove(name);
                }
            }
            None => {
                settings.remove(key);
            }
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_keys_are_found_and_removed_and_nothing_else_is() {
        let mut settings = serde_json::json!({
            "disableAllHooks": true,
            "policyHelper": "/usr/local/bin/policy",
            "permissions": { "deny": ["Bash(git push:*)"] },
            "model": "opus",
            "env": { "claude_code_simple": "1", "CLAUDE_CODE_MANAGED_SETTINGS_PATH": "/tmp/x", "FOO": "bar" },
        })
        .as_object()
        .cloned()
        .unwrap();
        let mut removed = remove_owned_keys(&mut settings);
        removed.sort();
        assert_eq!(
            removed,
            [
                "disableAllHooks",
                "env.CLAUDE_CODE_MANAGED_SETTINGS_PATH",
                "env.claude_code_simple",
                "policyHelper"
            ]
        );
        assert_eq!(
            serde_json::Value::Object(settings),
            serde_json::json!({
                "permissions": { "deny": ["Bash(git push:*)"] },
                "model": "opus",
                "env": { "FOO": "bar" },
            })
        );
    }
}
