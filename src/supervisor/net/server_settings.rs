//! Server-managed settings: the organisation's settings that Claude Code fetches from
//! `GET <BASE_API_URL>/api/claude_code/settings` for Team/Enterprise claude.ai logins, logins of
//! unknown plan and API keys. Claude Code takes one managed source, first wins: server-managed
//! settings win over `/etc/claude-code`, so a claude inside that fetched them would ignore
//! StepProof's managed file and its hook.
//!
//! What 2.1.328 does (read in its code, then seen running): it fetches them only when its model
//! API is Anthropic's own (`ANTHROPIC_BASE_URL` unset or `api.anthropic.com`), and always from
//! `https://api.anthropic.com` (`BASE_API_URL`, not the model's base URL), through
//! `HTTPS_PROXY` — a CONNECT tunnel, never the gateway's socket. Inside StepProof its base URL is
//! the gateway's (`http://localhost`), so it fetches nothing; and a claude the agent starts with
//! another base URL reaches Anthropic only with the placeholder, which Anthropic refuses. So the
//! organisation's settings would silently not apply inside. The launch therefore fetches them
//! itself, outside, with the real login, when Claude Code on this host would ([`fetches`]),
//! and carries them in as a managed drop-in without the keys StepProof owns ([`carry_in`]):
//! they take the place of the host's managed files, as they do on the host.
//!
//! The gateway also answers the endpoint, for a client that asks it there (a later Claude Code,
//! or a request made inside): [`merge_server_settings`] lays StepProof's managed settings over
//! the answer, or refuses it.
//!
//! The answer's shape, as 2.1.328 reads it: status 200 with a JSON object `{"settings": {…},
//! "checksum": "…"}` (other members, such as `uuid`, are kept); 204 or 404: the organisation
//! has none (Claude Code then reads `/etc/claude-code`, StepProof's); 304 to a request with
//! `If-None-Match: "<checksum>"`: use the cached copy (`remote-settings.json` in the config
//! directory — read-only inside, see `agent_layer::READ_ONLY_CACHES` — so the gateway strips
//! `If-None-Match` from the request and refuses a 304). The response header
//! `x-claude-code-signature` signs the server's bytes: it is dropped with the rewrite.

use crate::sandbox::plan::SandboxPlan;
use crate::sandbox::plan::agent_layer::{merge_managed, remove_owned_from_document};
pub use crate::sandbox::plan::server_managed::{DROP_IN_NAME, Fetched};
use crate::supervisor::net::login::{Credential, ModelLogin, Source};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::path::PathBuf;

/// The path of the endpoint, below the upstream's base URL.
pub const ENDPOINT: &str = "/api/claude_code/settings";
/// Where Claude Code 2.1.328 fetches them (`BASE_API_URL`).
pub const URL: &str = "https://api.anthropic.com/api/claude_code/settings";
/// Another endpoint, read from `stepproof-run`'s own environment only (tests; never from a
/// profile: the real credential is sent there). Set, it is fetched for any login.
pub const URL_ENV: &str = "STEPPROOF_SERVER_SETTINGS_URL";
/// The beta header Claude Code sends with an OAuth token.
const OAUTH_BETA: &str = "oauth-2025-04-20";
/// The most of an answer the gateway reads before it gives up on it.
pub const BODY_MAX: u64 = 1 << 20;
/// Request headers the gateway removes on this endpoint: a 304 would send Claude Code to a
/// cached copy, and an encoded body could not be read and rewritten.
pub const STRIP_REQUEST_HEADERS: &[&str] = &["if-none-match", "accept-encoding"];
/// Response headers the gateway removes when it replaces the body (they describe the server's
/// bytes, not ours).
pub const STRIP_RESPONSE_HEADERS: &[&str] = &[
    "x-claude-code-signature",
    "content-length",
    "etag",
    "content-encoding",
    "transfer-encoding",
];

/// What the gateway answers the agent.
#[derive(Debug, Clone, PartialEq)]
pub enum ServerSettings {
    /// The upstream's answer as it is (no settings configured, or an error Claude Code handles
    /// itself: without server settings it reads StepProof's `/etc/claude-code`).
    Forward,
    /// Status 200 with this JSON body instead (headers of [`STRIP_RESPONSE_HEADERS`] removed,
    /// `content-type: application/json`, the new length); `removed`: the server's keys StepProof
    /// owns, dropped (to be said and recorded, as for `/etc`).
    Replace { body: Vec<u8>, removed: Vec<String> },
    /// Not forwarded: the agent gets an error (502) and the refusal is said and recorded (a
    /// strict profile and a server that sets keys StepProof owns, a body that is not the
    /// documented shape, a 304).
    Refuse(String),
}

/// A 200 answer read: its other members, its settings without the keys StepProof owns, and
/// those keys.
struct Answer {
    rest: Map<String, Value>,
    settings: Map<String, Value>,
    removed: Vec<String>,
}

fn read_answer(body: &[u8], pinned: &[String]) -> Result<Answer, String> {
    let Ok(Value::Object(mut rest)) = serde_json::from_slice::<Value>(body) else {
        return Err(
            "the settings server's answer is not a JSON object; Claude Code's reading of it is unknown, so it is not used".into(),
        );
    };
    let Some(Value::Object(mut settings)) = rest.remove("settings") else {
        return Err(
            "the settings server's answer has no `settings` object; Claude Code's reading of it is unknown, so it is not used".into(),
        );
    };
    let removed = remove_owned_from_document(&mut settings, pinned);
    Ok(Answer {
        rest,
        settings,
        removed,
    })
}

/// The variables StepProof pins: the names of `ours["env"]`.
fn pinned_of(ours: &Value) -> Vec<String> {
    ours["env"]
        .as_object()
        .map(|env| env.keys().cloned().collect())
        .unwrap_or_default()
}

/// The upstream's answer to `GET` [`ENDPOINT`], with StepProof's managed settings (`ours`: the
/// object StepProof writes to `/etc/claude-code/managed-settings.json`, hooks, pins and the
/// profile's keys) laid over the server's settings; the variables StepProof pins are the names
/// of `ours["env"]`. `strict`: the profile's `assurance = "strict"`, under which a server that
/// sets a key StepProof owns is refused instead of dropped.
pub fn merge_server_settings(
    status: u16,
    body: &[u8],
    ours: &Value,
    strict: bool,
) -> ServerSettings {
    match status {
        200 => {}
        304 => {
            return ServerSettings::Refuse(
                "the settings server answered 304 Not Modified: Claude Code would use its cached copy; the gateway strips If-None-Match, so this answer cannot be taken".into(),
            );
        }
        _ => return ServerSettings::Forward,
    }
    let Answer {
        mut rest,
        settings,
        removed,
    } = match read_answer(body, &pinned_of(ours)) {
        Ok(answer) => answer,
        Err(why) => return ServerSettings::Refuse(why),
    };
    if strict && !removed.is_empty() {
        return ServerSettings::Refuse(format!(
            "the organisation's server-managed settings set keys that would weaken StepProof ({}); refusing under assurance = \"strict\"",
            removed.join(", ")
        ));
    }
    // The server's settings, then StepProof's over them (its keys are the server's no more:
    // removed above, so StepProof's hooks and pins are what stands).
    let merged = merge_managed(&Value::Object(settings), &[object_of(ours)]);
    let checksum = hex::encode(Sha256::digest(
        serde_json::to_vec(&merged).expect("JSON values serialize"),
    ));
    rest.insert("settings".into(), merged);
    rest.insert("checksum".into(), checksum.into());
    ServerSettings::Replace {
        body: serde_json::to_vec(&Value::Object(rest)).expect("JSON values serialize"),
        removed,
    }
}

fn object_of(value: &Value) -> Map<String, Value> {
    value.as_object().cloned().unwrap_or_default()
}

/// Reads the answer to the launch's fetch; `pinned`: the variables StepProof pins.
pub fn fetched_of(status: u16, body: &[u8], pinned: &[String]) -> Fetched {
    match status {
        200 => match read_answer(body, pinned) {
            Ok(answer) if answer.settings.is_empty() && answer.removed.is_empty() => {
                Fetched::NoneConfigured
            }
            Ok(answer) => Fetched::Settings {
                settings: answer.settings,
                removed: answer.removed,
            },
            Err(why) => Fetched::Failed(why),
        },
        204 | 404 => Fetched::NoneConfigured,
        status => Fetched::Failed(format!("the settings server answered {status}")),
    }
}

/// Whether Claude Code 2.1.328 on this host would fetch server-managed settings with this
/// login, its model API being `upstream_host`: only when that is Anthropic's own API; then for
/// an API key, an OAuth token from the environment (its plan unknown), or a claude.ai login
/// whose plan is Team, Enterprise or not recorded (Pro and Max plans have none).
pub fn fetches(login: &ModelLogin, upstream_host: &str) -> bool {
    if !upstream_host.eq_ignore_ascii_case("api.anthropic.com") {
        return false;
    }
    login_fetches(login)
}

fn login_fetches(login: &ModelLogin) -> bool {
    match login.source() {
        Source::None | Source::Fixed => false,
        Source::Env(_) => true,
        Source::ClaudeAi { .. } => {
            let plan = login
                .placeholder()
                .credentials
                .as_ref()
                .and_then(|c| c["claudeAiOauth"]["subscriptionType"].as_str());
            matches!(plan, None | Some("team" | "enterprise"))
        }
    }
}

/// Fetches the organisation's settings from `url` with the login (once more after a 401 that
/// the login answers with a fresh credential).
pub fn fetch(
    login: &ModelLogin,
    url: &str,
    tls: &std::sync::Arc<rustls::ClientConfig>,
) -> Result<(u16, Vec<u8>), String> {
    let mut credential = login.credential().map_err(|e| e.to_string())?;
    let mut retried = false;
    loop {
        let bearer;
        let headers: Vec<(&str, &str)> = match &credential {
            Credential::ApiKey(key) => vec![("x-api-key", key.as_str())],
            Credential::Bearer(token) => {
                bearer = format!("Bearer {token}");
                vec![
                    ("Authorization", bearer.as_str()),
                    ("anthropic-beta", OAUTH_BETA),
                ]
            }
        };
        let (status, body) = crate::supervisor::net::login::https_request(
            url,
            tls,
            "GET",
            &[headers.as_slice(), &[("Cache-Control", "no-cache")]].concat(),
            b"",
        )?;
        if status == 401
            && !retried
            && let Ok(Some(fresh)) = login.rejected(&credential)
        {
            credential = fresh;
            retried = true;
            continue;
        }
        return Ok((status, body));
    }
}

/// The launch's part: with an agent and the model gateway, fetches the organisation's
/// server-managed settings when Claude Code on this host would; the plan takes the answer
/// ([`SandboxPlan::take_server_settings`]). What cannot be fetched is said (a WARNING note)
/// and the run goes on without them: they are the organisation's policy, not StepProof's, and
/// without them StepProof's managed file stands. `None`: nothing was asked.
pub fn at_launch(
    plan: &SandboxPlan,
    upstream_host: &str,
    login: &ModelLogin,
) -> Option<(String, Fetched)> {
    let ours = plan.managed_ours.as_ref()?;
    let caller = std::env::var(URL_ENV).ok().filter(|v| !v.trim().is_empty());
    let url = match caller {
        Some(url) if login_fetches(login) => url,
        None if fetches(login, upstream_host) => URL.to_owned(),
        _ => return None,
    };
    let extra: Vec<PathBuf> = std::env::var(crate::supervisor::net::login::EXTRA_CA_ENV)
        .ok()
        .filter(|v| !v.trim().is_empty())
        .map(PathBuf::from)
        .into_iter()
        .collect();
    let answer = crate::supervisor::net::login::client_config(&extra)
        .and_then(|tls| fetch(login, &url, &tls));
    let fetched = match answer {
        Ok((status, body)) => fetched_of(status, &body, &pinned_of(ours)),
        Err(why) => Fetched::Failed(why),
    };
    Some((url, fetched))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::plan::agent_layer::{managed_settings, managed_settings_problems};

    fn ours() -> Value {
        let mut extra = Map::new();
        extra.insert(
            "permissions".into(),
            serde_json::json!({ "deny": ["WebSearch"] }),
        );
        managed_settings(
            &extra,
            &[
                ("PATH".into(), "/usr/bin:/bin".into()),
                ("BASH_ENV".into(), String::new()),
            ],
            false,
            false,
        )
    }

    fn replaced(outcome: ServerSettings) -> (Value, Vec<String>) {
        match outcome {
            ServerSettings::Replace { body, removed } => {
                (serde_json::from_slice(&body).unwrap(), removed)
            }
            other => panic!("not replaced: {other:?}"),
        }
    }

    #[test]
    fn stepproofs_keys_are_laid_over_the_servers_and_the_rest_is_kept() {
        let server = serde_json::json!({
            "uuid": "u-1",
            "checksum": "server-sum",
            "settings": {
                "model": "org-model",
                "permissions": { "deny": ["Bash(git push:*)"] },
                "disableAllHooks": true,
                "allowManagedHooksOnly": false,
                "hooks": { "PreToolUse": [] },
                "env": { "PATH": "/evil", "CLAUDE_CODE_SIMPLE": "1", "TEAM": "a" },
            },
        });
        let body = serde_json::to_vec(&server).unwrap();
        let (answer, mut removed) = replaced(merge_server_settings(200, &body, &ours(), false));
        removed.sort();
        assert_eq!(
            removed,
            [
                "allowManagedHooksOnly",
                "disableAllHooks",
                "env.CLAUDE_CODE_SIMPLE",
                "env.PATH (pinned by StepProof)",
                "hooks",
            ]
        );
        let settings = &answer["settings"];
        assert_eq!(answer["uuid"], "u-1");
        assert_ne!(answer["checksum"], "server-sum");
        assert_eq!(
            answer["checksum"],
            hex::encode(Sha256::digest(serde_json::to_vec(settings).unwrap()))
        );
        assert_eq!(settings["model"], "org-model");
        assert_eq!(
            settings["permissions"]["deny"],
            serde_json::json!(["Bash(git push:*)", "WebSearch"])
        );
        assert_eq!(settings["env"]["PATH"], "/usr/bin:/bin");
        assert_eq!(settings["env"]["TEAM"], "a");
        assert_eq!(settings["hooks"], ours()["hooks"]);
        assert!(settings.get("disableAllHooks").is_none());
        // What Claude Code reads is what the self-test accepts of StepProof's own file.
        assert_eq!(
            managed_settings_problems(settings, false),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_strict_profile_refuses_a_server_that_sets_owned_keys() {
        let body = br#"{"checksum":"c","settings":{"policyHelper":"/bin/x","model":"m"}}"#;
        match merge_server_settings(200, body, &ours(), true) {
            ServerSettings::Refuse(why) => {
                assert!(
                    why.contains("policyHelper") && why.contains("strict"),
                    "{why}"
                )
            }
            other => panic!("{other:?}"),
        }
        // Nothing owned: strict or not, merged.
        let body = br#"{"checksum":"c","settings":{"model":"m"}}"#;
        let (answer, removed) = replaced(merge_server_settings(200, body, &ours(), true));
        assert!(removed.is_empty());
        assert_eq!(answer["settings"]["allowManagedHooksOnly"], true);
    }

    #[test]
    fn the_launchs_fetch_keeps_the_servers_settings_without_owned_keys() {
        let pinned = vec!["PATH".to_string()];
        let body = br#"{"checksum":"c","settings":{"model":"m","disableAllHooks":true,"env":{"PATH":"/x","BASH_FUNC_git%%":"() { :; }","TEAM":"a"}}}"#;
        let Fetched::Settings {
            settings,
            mut removed,
        } = fetched_of(200, body, &pinned)
        else {
            panic!("not settings")
        };
        removed.sort();
        assert_eq!(
            removed,
            [
                "disableAllHooks",
                "env.BASH_FUNC_git%% (pinned by StepProof)",
                "env.PATH (pinned by StepProof)"
            ]
        );
        assert_eq!(
            Value::Object(settings),
            serde_json::json!({ "model": "m", "env": { "TEAM": "a" } })
        );
        for (status, body) in [
            (204, &b""[..]),
            (404, b"nothing"),
            (200, br#"{"settings":{}}"#),
        ] {
            assert_eq!(
                fetched_of(status, body, &pinned),
                Fetched::NoneConfigured,
                "{status}"
            );
        }
        for (status, body) in [
            (401, &b""[..]),
            (500, b""),
            (304, b""),
            (200, b"[]"),
            (200, b"{}"),
        ] {
            assert!(
                matches!(fetched_of(status, body, &pinned), Fetched::Failed(_)),
                "{status}"
            );
        }
    }

    #[test]
    fn logins_fetch_as_claude_code_decides() {
        use crate::supervisor::net::login::{RefreshEndpoint, Sources, client_config};
        let refresh = RefreshEndpoint {
            url: crate::supervisor::net::login::TOKEN_URL.into(),
            tls: client_config(&[]).unwrap(),
        };
        let claude_ai = |plan: Option<&str>| {
            let dir = tempfile::tempdir().unwrap();
            let mut oauth = serde_json::json!({
                "accessToken": "a", "refreshToken": "r", "expiresAt": 4102444800000u64,
                "scopes": ["user:inference"],
            });
            if let Some(plan) = plan {
                oauth["subscriptionType"] = plan.into();
            }
            std::fs::write(
                dir.path().join(".credentials.json"),
                serde_json::json!({ "claudeAiOauth": oauth }).to_string(),
            )
            .unwrap();
            ModelLogin::claude_ai(dir.path(), refresh.clone()).unwrap()
        };
        let anthropic = "api.anthropic.com";
        assert!(fetches(&claude_ai(Some("enterprise")), anthropic));
        assert!(fetches(&claude_ai(Some("team")), anthropic));
        assert!(fetches(&claude_ai(None), anthropic));
        assert!(!fetches(&claude_ai(Some("max")), anthropic));
        assert!(!fetches(&claude_ai(Some("pro")), anthropic));
        // A custom model API (a corporate gateway): Claude Code fetches nothing.
        assert!(!fetches(&claude_ai(Some("enterprise")), "llm.corp.example"));
        let key = ModelLogin::discover(&Sources {
            env: &[("ANTHROPIC_API_KEY".into(), "sk-ant-api03-x".into())],
            claude_dir: "/nonexistent".into(),
            user_config: "/nonexistent/.claude.json".into(),
            refresh: refresh.clone(),
        })
        .unwrap();
        assert!(fetches(&key, anthropic));
        assert!(!fetches(&ModelLogin::none(), anthropic));
    }

    #[test]
    fn other_answers_are_forwarded_or_refused() {
        for status in [204, 404, 401, 500] {
            assert_eq!(
                merge_server_settings(status, b"", &ours(), true),
                ServerSettings::Forward,
                "{status}"
            );
        }
        for (status, body) in [
            (304, &b""[..]),
            (200, b"not json"),
            (200, b"[]"),
            (200, br#"{"checksum":"c"}"#),
            (200, br#"{"settings":"x"}"#),
        ] {
            assert!(
                matches!(
                    merge_server_settings(status, body, &ours(), false),
                    ServerSettings::Refuse(_)
                ),
                "{status} {}",
                String::from_utf8_lossy(body)
            );
        }
    }
}
