//! Server-managed settings: what the credential gateway does with Claude Code's
//! `GET /api/claude_code/settings` (2.1.328: the `BASE_API_URL`'s, fetched for Team/Enterprise
//! logins and API keys of an organisation). Claude Code takes one managed source, first wins:
//! server-managed settings win over `/etc/claude-code`, so with such a login StepProof's managed
//! file and its hook would be ignored. The gateway therefore lays StepProof's managed settings
//! over the server's answer — the same keys StepProof owns in `/etc`, removed from the server's
//! settings and set to StepProof's — or refuses it. Pure: the gateway feeds it the upstream's
//! status and body and forwards what it says.
//!
//! The answer's shape, as 2.1.328 reads it: status 200 with a JSON object `{"settings": {…},
//! "checksum": "…"}` (other members, such as `uuid`, are kept); 204 or 404: the organisation
//! has none (Claude Code then reads `/etc/claude-code`, StepProof's); 304 to a request with
//! `If-None-Match: "<checksum>"`: use the cached copy (`remote-settings.json` in the config
//! directory, which the agent can write — so the gateway strips `If-None-Match` from the
//! request and refuses a 304). The response header `x-claude-code-signature` signs the server's
//! bytes: it is dropped with the rewrite.

use crate::sandbox::plan::agent_layer::merge_managed;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// The path of the endpoint, below the upstream's base URL.
pub const ENDPOINT: &str = "/api/claude_code/settings";
/// Request headers the gateway removes on this endpoint (a 304 would send Claude Code to a
/// cached copy the agent could have written).
pub const STRIP_REQUEST_HEADERS: &[&str] = &["if-none-match"];
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
    /// Not forwarded: the agent gets an error (502), and the run is stopped with this reason
    /// (a strict profile and a server that sets keys StepProof owns, a body that is not the
    /// documented shape, a 304).
    Refuse(String),
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
                "the settings server answered 304 Not Modified: Claude Code would use its cached copy, which the agent can write; the gateway strips If-None-Match, so this answer cannot be taken".into(),
            );
        }
        _ => return ServerSettings::Forward,
    }
    let Ok(Value::Object(mut answer)) = serde_json::from_slice::<Value>(body) else {
        return ServerSettings::Refuse(
            "the settings server's answer is not a JSON object; Claude Code's reading of it is unknown, so it is not forwarded".into(),
        );
    };
    let Some(Value::Object(mut settings)) = answer.remove("settings") else {
        return ServerSettings::Refuse(
            "the settings server's answer has no `settings` object; Claude Code's reading of it is unknown, so it is not forwarded".into(),
        );
    };
    let mut removed = crate::profile::claude_settings::remove_owned_keys(&mut settings);
    let pinned: Vec<String> = ours["env"]
        .as_object()
        .map(|env| env.keys().cloned().collect())
        .unwrap_or_default();
    if let Some(Value::Object(env)) = settings.get_mut("env") {
        let names: Vec<String> = env
            .keys()
            .filter(|name| pinned.iter().any(|p| p.eq_ignore_ascii_case(name)))
            .cloned()
            .collect();
        for name in names {
            env.remove(&name);
            removed.push(format!("env.{name} (pinned by StepProof)"));
        }
    }
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
    answer.insert("settings".into(), merged);
    answer.insert("checksum".into(), checksum.into());
    ServerSettings::Replace {
        body: serde_json::to_vec(&Value::Object(answer)).expect("JSON values serialize"),
        removed,
    }
}

fn object_of(value: &Value) -> Map<String, Value> {
    value.as_object().cloned().unwrap_or_default()
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
