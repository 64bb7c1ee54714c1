//! Denial loops with the real Claude Code (2.1.328) against the mock Messages API: the scripted
//! model retries a command the `ci` profile denies, in a new spelling each time. From the
//! `denial_loop_after`-th denial under the rule the reason the model reads (the call's
//! tool_result, as the mock receives it) restates what is allowed and how to go on; the audit
//! log has the supervisor's `denial-loop` record; under `--ci` the run ends with exit 121. As
//! root and as the dedicated unprivileged user.

#[path = "support/e2e.rs"]
mod e2e;
mod support;

use e2e::*;
use serde_json::Value;
use support::*;

/// One command in the spellings a model tries after a denial; every one is denied under
/// `net-tools-unattended` in `ci`.
const SPELLINGS: [&str; 6] = [
    "curl -s -o fetched.html http://127.0.0.2:@PORT@/denied-probe",
    "/usr/bin/curl -s -o fetched.html http://127.0.0.2:@PORT@/denied-probe",
    "env curl -s -o fetched.html http://127.0.0.2:@PORT@/denied-probe",
    "timeout 5 curl -s -o fetched.html http://127.0.0.2:@PORT@/denied-probe",
    "sh -c 'curl -s -o fetched.html http://127.0.0.2:@PORT@/denied-probe'",
    "wget -q -O fetched.html http://127.0.0.2:@PORT@/denied-probe",
];
const RULE: &str = "net-tools-unattended";
const RESTATED: &str = "StepProof has denied";

/// The script: `calls` of the spellings, one a turn, then a last word.
fn script(calls: usize) -> Value {
    let mut turns: Vec<Value> = SPELLINGS.iter().take(calls).map(|c| bash(c)).collect();
    turns.push(text("fin"));
    Value::Array(turns)
}

#[track_caller]
fn assert_never_fetched(w: &World, mock: &Mock) {
    assert!(!w.workspace.join("fetched.html").exists());
    assert!(
        !mock.requests().iter().any(|r| r["path"] == "/denied-probe"),
        "a denied spelling reached the mock"
    );
}

// The first two denials read as before; from the third (the default `denial_loop_after`) the
// reason adds the count, what profile 'ci' allows and how to go on — in the tool_result the
// model receives. One `denial-loop` record, from the supervisor, names the rule, the session and
// the decision that made it a loop. Not --ci: the run goes on to the end.
both_claude!(
    a_denial_retried_in_new_spellings_restates_what_is_allowed,
    |w: &World| {
        let calls = 5;
        let mock = Mock::start(w, script(calls));
        let run = run_claude(w, &profile(w, &mock, true, ""), &[]);
        assert!(run.status.success(), "{}", run.describe());
        for turn in 0..calls {
            let id = call_id(None, turn);
            run.expect_decision(&id, "deny", RULE);
            let result = mock.expect_result(&id);
            assert!(result.is_error, "{result:?}");
            assert!(
                result.text.contains(&format!("(rule {RULE})")),
                "{result:?}"
            );
            if turn < 2 {
                assert!(!result.text.contains(RESTATED), "call {turn}: {result:?}");
                continue;
            }
            for told in [
                format!(
                    "StepProof has denied {} calls under rule {RULE} in this session",
                    turn + 1
                ),
                "What is allowed now: profile 'ci'".to_string(),
                "shell commands allowed without asking:".to_string(),
                "To go on: use an allowed alternative".to_string(),
            ] {
                assert!(
                    result.text.contains(&told),
                    "call {turn}: {told:?} in {result:?}"
                );
            }
            assert!(!result.text.contains("exit 121"), "{result:?}");
        }
        assert_never_fetched(w, &mock);
        let loops = run.records("denial-loop");
        assert_eq!(loops.len(), 1, "one record, at the restatement: {loops:#?}");
        let record = loops[0];
        let third = call_id(None, 2);
        let decision_seq = run
            .audit
            .iter()
            .find(|r| r["kind"] == "decision" && r["reported"]["tool_use_id"] == third.as_str())
            .and_then(|r| r["seq"].as_u64())
            .expect("the third decision's record");
        assert_eq!(record["source"], "supervisor", "{record:#}");
        assert_eq!(
            (
                record["rule_id"].as_str(),
                record["stage"].as_str(),
                record["denials"].as_u64(),
                record["after"].as_u64(),
                record["stop"].as_bool(),
                record["tool"].as_str(),
                record["tool_use_id"].as_str(),
                record["decision_seq"].as_u64(),
            ),
            (
                Some(RULE),
                Some("restated"),
                Some(3),
                Some(3),
                Some(false),
                Some("Bash"),
                Some(third.as_str()),
                Some(decision_seq),
            ),
            "{record:#}"
        );
        assert_eq!(
            record["session_id"],
            run.decision(&third)["session_id"],
            "{record:#}"
        );
        assert_eq!(run.status_file["status"], "exited", "{}", run.status_file);
        let verify = std::process::Command::new(STEPPROOF)
            .args(["audit", "verify"])
            .arg(&run.audit_path)
            .output()
            .unwrap();
        assert!(verify.status.success(), "{verify:?}");
    }
);

// Under --ci, with `denial_loop_after = 2`: the second denial restates, the fourth says the run
// ends and the run is ended (exit 121, status `denial-loop`) before the model's remaining
// retries; both stages are recorded.
both_claude!(
    a_ci_run_that_keeps_looping_is_ended_with_121,
    |w: &World| {
        let mock = Mock::start(w, script(SPELLINGS.len()));
        let profile = profile(w, &mock, true, "[hook]\ndenial_loop_after = 2\n");
        let run = run_claude_as(
            w,
            &Launch {
                run_args: &["--ci"],
                ..Launch::default()
            },
            &profile,
            &[],
        );
        assert_eq!(run.status.code(), Some(121), "{}", run.describe());
        assert!(
            run.stderr.contains("under rule net-tools-unattended")
                && run.stderr.contains("exit 121"),
            "{}",
            run.describe()
        );
        assert_eq!(
            run.status_file["status"], "denial-loop",
            "{}",
            run.status_file
        );
        assert_eq!(run.status_file["rule_id"], RULE, "{}", run.status_file);
        assert_eq!(run.status_file["denials"], 4, "{}", run.status_file);
        let restated = mock.expect_result(&call_id(None, 1));
        assert!(
            restated.text.contains("StepProof has denied 2 calls")
                && !restated.text.contains("exit 121"),
            "{restated:?}"
        );
        let stages: Vec<(&str, u64, bool)> = run
            .records("denial-loop")
            .iter()
            .map(|r| {
                (
                    r["stage"].as_str().unwrap(),
                    r["denials"].as_u64().unwrap(),
                    r["stop"].as_bool().unwrap(),
                )
            })
            .collect();
        assert_eq!(stages, [("restated", 2, false), ("stopped", 4, true)]);
        // The run ended at the fourth denial: the model's fifth and sixth spellings never came.
        for turn in 4..SPELLINGS.len() {
            assert!(
                mock.tool_result(&call_id(None, turn)).is_none(),
                "call {turn} was answered after the stop"
            );
        }
        assert!(
            !run.decisions()
                .iter()
                .any(|d| d["tool_use_id"] == call_id(None, 5).as_str()),
            "{:#?}",
            run.decisions()
        );
        let end = run.records("run-end");
        assert_eq!(end.len(), 1, "{}", run.describe());
        assert_eq!(end[0]["outcome"]["status"], "denial-loop", "{:#}", end[0]);
        assert_never_fetched(w, &mock);
    }
);
