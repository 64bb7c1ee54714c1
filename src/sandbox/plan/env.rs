//! The command's environment: built from the profile's allow-list, never inherited whole.

use crate::profile::{NetworkMode, Profile};
use crate::sandbox::plan::{HostFacts, Identity, IdentityMode, SANDBOX_USER_NAME};
use std::path::Path;

/// Where the credential gateway listens inside the sandbox (on its private /run).
pub const GATEWAY_SOCKET: &str = "/run/stepproof-gateway/anthropic.sock";
/// Variables that carry a model login, in Claude Code's order of precedence. With the gateway
/// they never enter the sandbox: the supervisor keeps their values and the launch sets a
/// placeholder (random per run) in the login's place.
pub const LOGIN_VARIABLES: &[&str] = &[
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_API_KEY",
    "CLAUDE_CODE_OAUTH_TOKEN",
];
/// With the gateway, these are StepProof's to set or keep out: where the model API is, and
/// the other ways Claude Code takes a login (a refresh token, descriptors of a token or key).
const MODEL_ROUTE_VARIABLES: &[&str] = &[
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_UNIX_SOCKET",
    "CLAUDE_CODE_OAUTH_REFRESH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN_FILE_DESCRIPTOR",
    "CLAUDE_CODE_API_KEY_FILE_DESCRIPTOR",
];
/// The model API when the user names none.
pub const DEFAULT_MODEL_API: &str = "https://api.anthropic.com";

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

/// The audit export's variables (`OTEL_*`: the collector's address, the credentials in its
/// headers; and the variables `[audit.export] headers_env` names) are `stepproof-run`'s own:
/// never passed inside, whatever the allow-list or `set_env` say.
fn export_variable(profile: &Profile, name: &str) -> bool {
    name.starts_with(crate::audit::export_config::OTEL_VARIABLE_PREFIX)
        || profile
            .audit
            .export
            .as_ref()
            .is_some_and(|e| e.headers_env.iter().any(|h| h == name))
}

fn allowed(name: &str, allow: &[String]) -> bool {
    // Whatever the allow-list says: the loader's variables, and those that would take Claude
    // Code's managed hooks away, never pass.
    // Nor do the approval webhook's URL and key (the agent must never answer for a person).
    if name.starts_with("LD_")
        || name.starts_with(crate::profile::approvals::VARIABLE_PREFIX)
        || crate::profile::claude_settings::defeats_hook(name)
    {
        return false;
    }
    allow.iter().any(|pattern| match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix) && !looks_secret(name),
        None => pattern == name,
    })
}

/// The command's environment, and what stays outside.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Environment {
    pub env: Vec<(String, String)>,
    /// Names of the caller's variables left out.
    pub dropped: Vec<String>,
    /// With the gateway: the login variables and `ANTHROPIC_BASE_URL` the command would have
    /// had (from the profile or passed from the caller), then the caller's own; the supervisor
    /// uses them, the command never sees them.
    pub held_outside: Vec<(String, String)>,
}

impl Environment {
    /// The first value held outside for `name`.
    pub fn held(&self, name: &str) -> Option<&str> {
        self.held_outside
            .iter()
            .find(|(n, v)| n == name && !v.trim().is_empty())
            .map(|(_, v)| v.as_str())
    }
}

/// Builds the command's environment; with `model_gateway` Claude Code's API traffic goes to
/// the gateway's socket and the login stays outside.
pub fn build_environment(
    profile: &Profile,
    facts: &HostFacts,
    identity: &Identity,
    home: &Path,
    model_gateway: bool,
) -> Environment {
    let mut env: Vec<(String, String)> = Vec::new();
    let mut dropped = Vec::new();
    for (name, value) in &facts.env {
        if allowed(name, &profile.process.env) && !export_variable(profile, name) {
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
    set("STEPPROOF", "1".into());
    set("STEPPROOF_PROFILE", profile.name.clone());
    for (name, value) in &profile.process.set_env {
        if name.starts_with(crate::profile::approvals::VARIABLE_PREFIX) {
            continue;
        }
        set(name, value.clone());
    }
    let mut held_outside = Vec::new();
    if model_gateway {
        // The login and the API's address stay with the supervisor: first what the command
        // would have had, then the caller's own (Claude Code on this host would use those).
        for name in LOGIN_VARIABLES.iter().chain(["ANTHROPIC_BASE_URL"].iter()) {
            for source in [&env, &facts.env] {
                if let Some((_, value)) = source.iter().find(|(n, _)| n == name) {
                    held_outside.push((name.to_string(), value.clone()));
                }
            }
        }
        env.retain(|(n, _)| {
            !LOGIN_VARIABLES.contains(&n.as_str()) && !MODEL_ROUTE_VARIABLES.contains(&n.as_str())
        });
        // The agent talks to the gateway's socket.
        env.push(("ANTHROPIC_UNIX_SOCKET".into(), GATEWAY_SOCKET.into()));
        env.push(("ANTHROPIC_BASE_URL".into(), "http://localhost".into()));
    }
    env.retain(|(n, _)| {
        !n.starts_with("LD_")
            && !NEVER_PASSED.iter().any(|(v, _)| n == v)
            && !export_variable(profile, n)
    });
    env.sort();
    dropped.sort();
    dropped.dedup();
    Environment {
        env,
        dropped,
        held_outside,
    }
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
        // The approval webhook's variables, listed exactly or by pattern: never.
        let allow = vec![
            "STEPPROOF_*".to_string(),
            "STEPPROOF_APPROVAL_HMAC_KEY".to_string(),
            "STEPPROOF_APPROVAL_WEBHOOK".to_string(),
        ];
        assert!(allowed("STEPPROOF_OTHER", &allow));
        for name in [
            crate::profile::approvals::WEBHOOK_VAR,
            crate::profile::approvals::KEY_VAR,
            crate::profile::approvals::KEY_FILE_VAR,
        ] {
            assert!(!allowed(name, &allow), "{name}");
        }
    }
}
