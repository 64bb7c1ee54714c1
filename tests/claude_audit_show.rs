//! `stepproof audit show` after a run with the real Claude Code (2.1.328): one evidence line per
//! tool call, a failed one included. As root and as the test user.

#[path = "support/e2e.rs"]
mod e2e;
mod support;

use e2e::*;
use serde_json::json;
use support::*;

// Claude Code follows a failed call's PostToolUseFailure with a PostToolUse echoing its error
// (its hooks being managed settings): the log holds one evidence record for the call, with the
// exit status, and `audit show` one line — not `exit 2` and then `exit null`.
both_claude!(a_failed_call_is_one_evidence_line, |w: &World| {
    let mock = Mock::start(
        w,
        json!([bash("ls /nonexistent-dir"), bash("echo fine"), text("fin")]),
    );
    let run = run_claude(w, &profile(w, &mock, true, ""), &[]);
    assert!(run.status.success(), "{}", run.describe());
    let failed = call_id(None, 0);
    let evidence: Vec<_> = run
        .audit
        .iter()
        .filter(|r| r["kind"] == "evidence" && r["reported"]["tool_use_id"] == failed.as_str())
        .map(|r| &r["reported"])
        .collect();
    assert_eq!(evidence.len(), 1, "{evidence:#?}");
    assert_eq!(evidence[0]["event"], "PostToolUseFailure");
    assert_eq!(evidence[0]["exit_status"], 2);
    let shown = std::process::Command::new(STEPPROOF)
        .args(["audit", "show"])
        .arg(&run.audit_path)
        .output()
        .unwrap();
    assert!(shown.status.success(), "{}", describe(&shown));
    let text = String::from_utf8_lossy(&shown.stdout);
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("evidence") && l.contains("ls /nonexistent-dir"))
        .collect();
    assert_eq!(lines.len(), 1, "{text}");
    assert!(lines[0].contains("exit 2"), "{text}");
    assert_eq!(
        text.lines()
            .filter(|l| l.contains("evidence") && l.contains("echo fine"))
            .count(),
        1,
        "{text}"
    );
});
