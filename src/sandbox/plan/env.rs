//! The command's environment: built from the profile's allow-list, never inherited whole.

use crate::profile::{NetworkMode, Profile};
use crate::sandbox::plan::{HostFacts, Identity, IdentityMode, SANDBOX_USER_NAME};
use std::path::Path;

/// Where the credential gateway listens inside the sandbox (on its private /run).
pub const GATEWAY_SOCKET: &str = "/run/stepproof-gateway/anthropic.sock";
/// What the agent holds instead of the real key when the gateway is on.
pub const GATEWAY_PLACEHOLDER_KEY: &str = "sk-ant-stepproof-placeholder-the-real-key-stays-outside";

const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin";

/// Words that make a variable name look like it holds a secret. Such a variable passes only
/// when the profile lists its exact name, never through a `PREFIX*` pattern.
const SECRET_MARKERS: &[&str] = &[
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "CREDENTIAL",
    "_KEY",
    "APIKEY",
    "PRIVATE",
    "SESSION",
    "COOKIE",
    "AUTH",
];

pub fn looks_secret(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    upper.starts_with("AWS_") || SECRET_MARKERS.iter().any(|m| upper.contains(m))
}

/// Variables that never reach the command, whoever sets them, each with the note the start
/// record carries when one was set.
pub const NEVER_PASSED: &[(&str, &str)] = &[(
    "CLAUDE_CODE_SUBPROCESS_ENV_SCRUB",
    "CLAUDE_CODE_SUBPROCESS_ENV_SCRUB was set: dropped, because Claude Code's own sandbox for Bash cannot start inside StepProof's (every Bash call would fail, and the files it leaves would be reported as tampering); StepProof's sandbox takes its place",
)];

/// The notes for the [`NEVER_PASSED`] variables the caller or the profile set.
pub fn never_passed_notes(profile: &Profile, facts: &HostFacts) -> Vec<String> {
    NEVER_PASSED
        .iter()
        .filter(|(name, _)| {
            facts.env.iter().any(|(n, _)| n == name) || profile.process.set_env.contains_key(*name)
        })
        .map(|(_, note)| note.to_string())
        .collect()
}

fn allowed(name: &str, allow: &[String]) -> bool {
    // Whatever the allow-list says: the loader's variables, and those that would take Claude
    // Code's managed hooks away, never pass.
    if name.starts_with("LD_") || crate::profile::claude_settings::defeats_hook(name) {
        return false;
    }
    allow.iter().any(|pattern| match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix) && !looks_secret(name),
        None => pattern == name,
    })
}

/// Returns the environment to pass and the names of the caller's variables left out.
pub fn build_environment(
    profile: &Profile,
    facts: &HostFacts,
    identity: &Identity,
    home: &Path,
) -> (Vec<(String, String)>, Vec<String>) {
    let mut env: Vec<(String, String)> = Vec::new();
    let mut dropped = Vec::new();
    for (name, value) in &facts.env {
        if allowed(name, &profile.process.env) {
            env.push((name.clone(), value.clone()));
        } else {
            dropped.push(name.clone());
        }
    }
    let mut set = |name: &str, value: String| {
        env.retain(|(n, _)| n != name);
        env.push((name.to_string(), value));
    };
    set("HOME", home.display().to_string());
    if identity.mode == IdentityMode::RootRemapped {
        set("USER", SANDBOX_USER_NAME.into());
        set("LOGNAME", SANDBOX_USER_NAME.into());
    }
    if !facts.env.iter().any(|(n, _)| n == "PATH")
        || !profile.process.env.iter().any(|p| p == "PATH")
    {
        set("PATH", DEFAULT_PATH.into());
    }
    set("TMPDIR", "/tmp".into());
    if profile.network.mode == NetworkMode::Allowlist {
        // Everything that honours a proxy goes through the supervisor's; nothing else leaves.
        let proxy = format!("http://127.0.0.1:{}", profile.network.proxy_port);
        for name in [
            "HTTPS_PROXY",
            "https_proxy",
            "HTTP_PROXY",
            "http_proxy",
            "ALL_PROXY",
            "all_proxy",
        ] {
            set(name, proxy.clone());
        }
        for name in ["NO_PROXY", "no_proxy"] {
            set(name, "localhost,127.0.0.1,::1".into());
        }
    }
    if profile.network.gateway.is_some() {
        // The agent talks to the gateway's socket; the real credential stays outside.
        set("ANTHROPIC_UNIX_SOCKET", GATEWAY_SOCKET.into());
        set("ANTHROPIC_BASE_URL", "http://localhost".into());
        set("ANTHROPIC_API_KEY", GATEWAY_PLACEHOLDER_KEY.into());
    }
    set("STEPPROOF", "1".into());
    set("STEPPROOF_PROFILE", profile.name.clone());
    for (name, value) in &profile.process.set_env {
        set(name, value.clone());
    }
    env.retain(|(n, _)| !n.starts_with("LD_") && !NEVER_PASSED.iter().any(|(v, _)| n == v));
    env.sort();
    dropped.sort();
    dropped.dedup();
    (env, dropped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_need_an_exact_listing() {
        let allow = vec![
            "GITHUB_TOKEN".to_string(),
            "MY_*".to_string(),
            "LD_PRELOAD".to_string(),
        ];
        assert!(allowed("GITHUB_TOKEN", &allow));
        assert!(allowed("MY_SETTING", &allow));
        assert!(!allowed("MY_API_KEY", &allow));
        assert!(!allowed("MY_SECRET", &allow));
        assert!(!allowed("LD_PRELOAD", &allow));
        assert!(!allowed("AWS_SECRET_ACCESS_KEY", &allow));
        // Through a pattern or not, nothing that takes Claude Code's managed hooks away.
        let allow = vec!["CLAUDE_*".to_string(), "CLAUDE_CODE_SIMPLE".to_string()];
        assert!(allowed("CLAUDE_CODE_EFFORT_LEVEL", &allow));
        for name in crate::profile::claude_settings::HOOK_DEFEATING_ENV {
            assert!(!allowed(name, &allow), "{name}");
        }
        assert!(looks_secret("NPM_TOKEN") && looks_secret("DB_PASSWORD") && !looks_secret("PATH"));
    }
}
