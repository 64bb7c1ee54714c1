//! The organisation's server-managed settings (`GET /api/claude_code/settings`, fetched for
//! Team/Enterprise logins), end to end with the real Claude Code (2.1.328) against the mock over
//! TLS, as root and as the unprivileged test user. Claude Code inside never fetches them (its
//! base URL is the gateway's); the launch fetches them outside with the real login and carries
//! them in as a managed drop-in: the organisation's permission rule and model apply, its keys
//! that would switch StepProof's hook off are removed and reported (a strict profile refuses
//! to start), the hook decides every call, and the caches a `claude` would fall back to are
//! read-only inside.

#[path = "support/e2e.rs"]
mod e2e;
mod support;

use e2e::*;
use serde_json::{Value, json};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use support::*;

const ACCESS: &str = "sk-ant-oat01-realServerSettingsAccess";

/// A claude.ai Enterprise login in the world's host store (mode 0600, the world's user's).
fn enterprise_login(w: &World) {
    let store = w.home.join(".claude/.credentials.json");
    fs::create_dir_all(store.parent().unwrap()).unwrap();
    fs::write(
        &store,
        json!({
            "claudeAiOauth": {
                "accessToken": ACCESS,
                "refreshToken": "sk-ant-ort01-realServerSettingsRefresh",
                "expiresAt": 4_102_444_800_000u64,
                "scopes": ["user:inference", "user:profile", "user:sessions:claude_code"],
                "subscriptionType": "enterprise",
            }
        })
        .to_string(),
    )
    .unwrap();
    fs::set_permissions(&store, fs::Permissions::from_mode(0o600)).unwrap();
    chown_tree(&w.home.join(".claude"), w.owner);
}

/// What the organisation's server serves: a permission rule, a model, and every way it could
/// take StepProof's hook away.
fn organisation_settings() -> Value {
    json!({
        "permissions": { "deny": ["Bash(echo org-denied:*)"] },
        "model": "org-model-s1",
        "disableAllHooks": true,
        "allowManagedHooksOnly": false,
        "hooks": { "PreToolUse": [] },
    })
}

/// Writes, moves and replaces each cache of server settings and policy limits in the config
/// directory; one line each says what happened.
const CACHES: &str = r#"#!/bin/sh
d=$CLAUDE_CONFIG_DIR
for f in remote-settings.json remote-settings-consent.json policy-limits.json; do
  if printf '{"settings":{"disableAllHooks":true}}' > "$d/$f" 2>/dev/null; then echo "WROTE $f"; else echo "REFUSED $f"; fi
  if mv "$d/$f" "$d/$f.moved" 2>/dev/null; then echo "MOVED $f"; else echo "KEPT $f"; fi
  if printf x > "$d/$f.new" 2>/dev/null && mv "$d/$f.new" "$d/$f" 2>/dev/null; then echo "REPLACED $f"; else echo "STAYED $f"; fi
done
true
"#;

/// A profile on `ci` whose model is reached through the gateway; `best_effort` drops what
/// StepProof owns instead of refusing; the cache script may run (the kernel must stop it).
fn server_profile(w: &World, best_effort: bool) -> String {
    let dir = scratch(w, "profile");
    let path = dir.join("profile.toml");
    let assurance = if best_effort {
        "assurance = \"best-effort\"\n"
    } else {
        ""
    };
    fs::write(
        &path,
        format!(
            "{assurance}extends = \"ci\"\n[process]\nset_env = {{ CLAUDE_CODE_MAX_RETRIES = \"1\" }}\n[hook]\nunknown = \"allow\"\n"
        ),
    )
    .unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    path.display().to_string()
}

fn run_with_server(w: &World, mock: &Mock, tls: &TestTls, best_effort: bool) -> Run {
    let url = mock.https_url();
    let settings_url = format!("{url}/api/claude_code/settings");
    let ca = tls.ca.display().to_string();
    let env = [
        ("ANTHROPIC_BASE_URL", url.as_str()),
        ("NODE_EXTRA_CA_CERTS", ca.as_str()),
        ("STEPPROOF_SERVER_SETTINGS_URL", settings_url.as_str()),
    ];
    run_claude_as(
        w,
        &Launch {
            env: &env,
            ..Launch::default()
        },
        &server_profile(w, best_effort),
        &[],
    )
}

fn settings_requests(mock: &Mock) -> Vec<Value> {
    mock.requests()
        .into_iter()
        .filter(|r| {
            r["path"]
                .as_str()
                .is_some_and(|p| p.starts_with("/api/claude_code/settings"))
        })
        .collect()
}

both_claude!(
    server_settings_apply_and_never_take_the_hook_away,
    |w: &World| {
        enterprise_login(w);
        fs::write(w.workspace.join("caches.sh"), CACHES).unwrap();
        chown_tree(&w.workspace, w.owner);
        let tls = test_tls(w);
        let mock = Mock::start_tls(
            w,
            json!({
                "turns": [
                    bash("echo org-denied now"),
                    bash("sh caches.sh"),
                    bash("echo allowed-by-both"),
                    text("fin")
                ],
                "accept": [format!("Bearer {ACCESS}")],
                "server_settings": organisation_settings(),
            }),
            &tls,
        );

        // Strict (ci extends default: strict): a server that sets keys StepProof owns stops the
        // launch, and nothing ran.
        let strict = run_with_server(w, &mock, &tls, false);
        assert_eq!(strict.status.code(), Some(125), "{}", strict.describe());
        assert!(
            strict
                .stderr
                .contains("refusing to start under assurance = \"strict\"")
                && strict
                    .stderr
                    .contains("server-managed settings: disableAllHooks"),
            "{}",
            strict.describe()
        );
        assert!(mock.messages_requests().is_empty(), "the agent ran");

        // Best effort: the switch-offs are removed and reported, the rest applies.
        let run = run_with_server(w, &mock, &tls, true);
        assert!(run.status.success(), "{}", run.describe());
        let start = &run.records("run-start")[0];
        let mut removed: Vec<&str> = start["managed_settings_removed"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        removed.sort();
        assert_eq!(
            removed,
            [
                "server-managed settings: allowManagedHooksOnly",
                "server-managed settings: disableAllHooks",
                "server-managed settings: hooks",
            ],
            "{start:#}"
        );
        assert!(
            run.stderr
                .contains("server-managed settings: disableAllHooks"),
            "{}",
            run.describe()
        );
        // Fetched outside, with the real login; never with the placeholder from inside.
        let fetched = settings_requests(&mock);
        assert_eq!(fetched.len(), 2, "{fetched:#?}");
        for request in &fetched {
            assert_eq!(
                request["headers"]["authorization"],
                format!("Bearer {ACCESS}"),
                "{request:#}"
            );
        }
        // The hook decides every call ...
        for turn in 0..3 {
            assert_eq!(
                run.decision(&call_id(None, turn))["decision"],
                "allow",
                "turn {turn}"
            );
        }
        // ... and the organisation's rule refuses what it denies.
        let denied = mock.expect_result(&call_id(None, 0));
        assert!(
            denied.is_error && !denied.text.contains("StepProof"),
            "{denied:?}"
        );
        let allowed = mock.expect_result(&call_id(None, 2));
        assert!(
            !allowed.is_error && allowed.text.contains("allowed-by-both"),
            "{allowed:?}"
        );
        // The caches a claude would fall back to cannot be written, moved or replaced.
        let caches = mock.expect_result(&call_id(None, 1));
        for word in ["WROTE", "MOVED", "REPLACED"] {
            assert!(!caches.text.contains(word), "{caches:?}");
        }
        for f in [
            "remote-settings.json",
            "remote-settings-consent.json",
            "policy-limits.json",
        ] {
            for word in ["REFUSED", "KEPT", "STAYED"] {
                assert!(
                    caches.text.contains(&format!("{word} {f}")),
                    "{word} {f}: {caches:?}"
                );
            }
        }
        // The organisation's model is the one asked for.
        let requests = mock.messages_requests();
        assert!(
            !requests.is_empty()
                && requests
                    .iter()
                    .all(|r| r["body"]["model"] == "org-model-s1"),
            "{:?}",
            requests
                .iter()
                .map(|r| &r["body"]["model"])
                .collect::<Vec<_>>()
        );
    }
);
