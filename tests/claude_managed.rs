//! The organisation's managed settings inside, end to end with the real Claude Code (2.1.328)
//! against the mock Messages API, as root and as the unprivileged test user: the host's
//! `/etc/claude-code/managed-settings.json` and drop-ins (an `/etc` layer laid over the real one
//! in a private mount namespace) apply inside, merged with StepProof's; a drop-in that tries to
//! switch the hook off changes nothing and is reported; under `assurance = "strict"` such a host
//! stops the launch.

#[path = "support/e2e.rs"]
mod e2e;
mod support;

use e2e::*;
use serde_json::json;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use support::*;

/// An organisation's managed settings: a permission rule and a model in the file, a second rule
/// in one drop-in and a switch-off (with a policy helper and bare mode) in another.
fn organisation_etc_layer(w: &World) -> std::path::PathBuf {
    let layer = scratch(w, "etc-org");
    let dir = layer.join("claude-code");
    let drop_ins = dir.join("managed-settings.d");
    fs::create_dir_all(&drop_ins).unwrap();
    for (path, text) in [
        (
            dir.join("managed-settings.json"),
            r#"{"permissions": {"deny": ["Bash(git push:*)"]}, "model": "org-model-x1"}"#,
        ),
        (
            drop_ins.join("10-team.json"),
            r#"{"permissions": {"deny": ["Bash(echo org-denied:*)"]}}"#,
        ),
        (
            drop_ins.join("50-off.json"),
            r#"{"disableAllHooks": true, "env": {"CLAUDE_CODE_SIMPLE": "1"}, "policyHelper": "/bin/true"}"#,
        ),
    ] {
        fs::write(&path, text).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    }
    for d in [&dir, &drop_ins] {
        fs::set_permissions(d, fs::Permissions::from_mode(0o755)).unwrap();
    }
    layer
}

/// The e2e profile with `assurance = "best-effort"` (a top-level key: before the tables).
pub fn best_effort_profile(w: &World, mock: &Mock) -> String {
    let path = profile(w, mock, true, "");
    let text = fs::read_to_string(&path).unwrap();
    fs::write(&path, format!("assurance = \"best-effort\"\n{text}")).unwrap();
    path
}

both_claude!(
    the_organisations_rules_and_model_apply_and_its_switch_off_does_not,
    |w: &World| {
        let layer = organisation_etc_layer(w);
        let mock = Mock::start(
            w,
            json!([
                bash("git push origin main"),
                bash("echo org-denied now"),
                bash("echo allowed-by-both"),
                text("fin")
            ]),
        );
        // Under a strict profile (ci extends default: strict) the launch stops, nothing ran.
        let strict = run_claude_as(
            w,
            &Launch {
                etc_layer: Some(&layer),
                ..Launch::default()
            },
            &profile(w, &mock, true, ""),
            &[],
        );
        assert_eq!(strict.status.code(), Some(125), "{}", strict.describe());
        assert!(
            strict
                .stderr
                .contains("refusing to start under assurance = \"strict\"")
                && strict.stderr.contains("50-off.json: disableAllHooks"),
            "{}",
            strict.describe()
        );
        assert!(mock.messages_requests().is_empty(), "the agent ran");

        // Best effort: the switch-off is dropped and reported, the rest applies.
        let best_effort = best_effort_profile(w, &mock);
        let run = run_claude_as(
            w,
            &Launch {
                etc_layer: Some(&layer),
                ..Launch::default()
            },
            &best_effort,
            &[],
        );
        assert!(run.status.success(), "{}", run.describe());
        for key in [
            "50-off.json: disableAllHooks",
            "50-off.json: env.CLAUDE_CODE_SIMPLE",
            "50-off.json: policyHelper",
        ] {
            assert!(
                run.stderr.contains(key),
                "{key} not reported: {}",
                run.describe()
            );
        }
        let start = &run.records("run-start")[0];
        assert_eq!(
            start["managed_settings_removed"].as_array().unwrap().len(),
            3,
            "{start:#}"
        );
        // The hook still decides every call (it was not switched off) ...
        for turn in 0..3 {
            assert_eq!(run.decision(&call_id(None, turn))["decision"], "allow");
        }
        // ... and the organisation's rules refuse what they deny, from the file and the drop-in.
        for turn in [0, 1] {
            let result = mock.expect_result(&call_id(None, turn));
            assert!(
                result.is_error && !result.text.contains("StepProof"),
                "turn {turn}: {result:?}"
            );
        }
        let result = mock.expect_result(&call_id(None, 2));
        assert!(
            !result.is_error && result.text.contains("allowed-by-both"),
            "{result:?}"
        );
        // The organisation's model is the one asked for.
        let requests = mock.messages_requests();
        assert!(
            requests
                .iter()
                .all(|r| r["body"]["model"] == "org-model-x1"),
            "{:?}",
            requests
                .iter()
                .map(|r| &r["body"]["model"])
                .collect::<Vec<_>>()
        );
    }
);
