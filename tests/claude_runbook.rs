//! Runbooks with the real Claude Code (2.1.328) under `stepproof-run --runbook`, against the
//! mock Messages API: the agent starts oriented, stays oriented through `/compact`, completes
//! and abandons steps from the chat through the shipped slash commands, and the supervisor
//! (not the agent's own SessionEnd) records a runbook abandoned. As root and as the test user.

#[path = "support/e2e.rs"]
mod e2e;
mod support;
#[path = "support/tui.rs"]
mod tui;

use e2e::*;
use serde_json::{Value, json};
use std::fs;
use support::*;

const RUNBOOK: &str = r#"id = "oriented"
title = "Oriented from the start"
owner = "tests"

[[steps]]
id = "draft"
title = "Draft the notes"
instructions = "Write notes.md listing the three open questions"
acceptance = ["notes.md exists"]
[[steps.allow.bash]]
id = "only-echo"
reason = "this step only writes with echo"
commands = ["echo *"]
[[steps.evidence]]
files_exist = { paths = ["notes.md"] }

[[steps]]
id = "later"
title = "Later"
instructions = "Publish the notes somewhere far away"
depends_on = ["draft"]
[[steps.evidence]]
files_exist = { paths = ["published.md"] }
"#;

const CLIENT: &str = "/run/stepproof/stepproof";
const DRAFT_INSTRUCTIONS: &str = "Instructions: Write notes.md listing the three open questions";

fn setup(w: &World) {
    fs::write(w.workspace.join("runbook.toml"), RUNBOOK).unwrap();
    chown_tree(&w.workspace, w.owner);
}

/// Every string in a request's body (system prompt, messages, tool results), joined: what the
/// model read.
fn seen(request: &Value) -> String {
    fn walk(v: &Value, out: &mut String) {
        match v {
            Value::String(s) => {
                out.push_str(s);
                out.push('\n');
            }
            Value::Array(items) => items.iter().for_each(|i| walk(i, out)),
            Value::Object(map) => map.values().for_each(|i| walk(i, out)),
            _ => {}
        }
    }
    let mut out = String::new();
    walk(&request["body"], &mut out);
    out
}

fn runbook_run(w: &World, mock: &Mock, prompt: &str) -> Run {
    run_claude_prompt(w, &profile(w, mock, true, ""), prompt)
}

/// `stepproof-run --runbook runbook.toml --runbook-fresh -- claude -p PROMPT …`.
fn run_claude_prompt(w: &World, profile: &str, prompt: &str) -> Run {
    run_claude_as(
        w,
        &Launch {
            run_args: &["--runbook", "runbook.toml", "--runbook-fresh"],
            prompt: Some(prompt),
            ..Launch::default()
        },
        profile,
        &[],
    )
}

/// The records the hook sent from inside of one kind (the `reported` objects).
fn reported<'a>(run: &'a Run, kind: &str) -> Vec<&'a Value> {
    run.audit
        .iter()
        .filter(|r| r["source"] == "sandbox" && r["kind"] == kind)
        .map(|r| &r["reported"])
        .collect()
}

// An automatic compaction inside a `claude -p` turn — forced as it happens in real use: the API
// answers "prompt is too long", Claude Code compacts (its summary request is answered by the
// mock) and goes on in the same turn — is followed, at the first tool call after it, by a
// request that holds the open step again: no prompt comes in a single turn to carry it, so the
// tool call's answer does (PreCompact marked the session). The request right after the
// compaction holds the summary and not the step: what the re-orientation is for.
both_claude!(
    a_compaction_inside_a_turn_is_followed_by_the_open_step,
    |w: &World| {
        setup(w);
        let mock = Mock::start(
            w,
            json!({
                "summary": "SUMMARY-MARK: the user asked to follow the script; one echo ran.",
                "turns": [
                    bash("echo one"),
                    {"error": {"status": 400, "message": "prompt is too long: 210000 tokens > 200000 maximum"},
                     "tool": "Bash", "input": {"command": "echo two"}},
                    text("fin")
                ],
                "threads": [{"marker": "SUMMARY-MARK", "turns": [bash("echo after"), text("fin after")]}]
            }),
        );
        let run = runbook_run(w, &mock, "Follow the script.");
        let after: Vec<String> = mock
            .messages_requests()
            .iter()
            .map(seen)
            .filter(|s| s.contains("SUMMARY-MARK") && !s.contains("Respond with TEXT ONLY"))
            .collect();
        assert!(
            after.len() >= 2,
            "no turn went on after a compaction: {}",
            run.describe()
        );
        let first_after = &after[0];
        assert!(
            !first_after.contains(DRAFT_INSTRUCTIONS),
            "the compacted conversation already held the step (the test proves nothing): {first_after}"
        );
        let oriented = &after[1];
        for needle in [
            "Open step 'draft': Draft the notes",
            DRAFT_INSTRUCTIONS,
            "stepproof step complete",
        ] {
            assert!(
                oriented.contains(needle),
                "{needle:?} is not in the request after the first tool call that followed the compaction:\n{oriented}\n{}",
                run.describe()
            );
        }
    }
);

// The first request the model receives already holds the open step's instructions, its
// acceptance criteria and what it allows (the UserPromptSubmit observer: SessionStart's
// context cannot reach it, see `stepproof_hook::contract::oriented`), not the waiting step's;
// Claude Code offers StepProof's `runbook-author` agent and no `verifier`. The agent exits
// with the step open: its SessionEnd is recorded (from inside), and the supervisor records the
// runbook abandoned on its own account.
both_claude!(
    the_first_request_holds_the_open_steps_instructions,
    |w: &World| {
        setup(w);
        let mock = Mock::start(w, json!([text("fin")]));
        let run = runbook_run(w, &mock, "Follow the script.");
        let requests = mock.messages_requests();
        let first = seen(
            requests
                .first()
                .unwrap_or_else(|| panic!("no request reached the mock: {}", run.describe())),
        );
        for needle in [
            "Open step 'draft': Draft the notes (attempt 1 of 3).",
            DRAFT_INSTRUCTIONS,
            "Acceptance:\n- notes.md exists",
            "Runbook 'oriented', open step 'draft' (Draft the notes): it allows only bash `echo *`",
            "stepproof step complete",
        ] {
            assert!(
                first.contains(needle),
                "{needle:?} is not in the first request:\n{first}\n{}",
                run.describe()
            );
        }
        assert!(!first.contains("Publish the notes"), "{first}");
        // Claude Code read the agent definition from the run's config dir.
        assert!(
            first.contains("- runbook-author: Writes a StepProof runbook"),
            "{first}"
        );
        assert!(!first.contains("- verifier"), "{first}");
        // Exited with the step open: 116, and the supervisor's own record.
        assert_eq!(run.status.code(), Some(116), "{}", run.describe());
        let abandoned = run.records("runbook-abandoned");
        assert_eq!(abandoned.len(), 1, "{}", run.describe());
        assert_eq!(abandoned[0]["source"], "supervisor");
        assert_eq!(abandoned[0]["why"], "the agent exited with steps open");
        assert_eq!(abandoned[0]["open"], json!(["draft"]));
        assert_eq!(abandoned[0]["not_passed"], json!(["draft", "later"]));
        let ends = reported(&run, "session-end");
        assert_eq!(ends.len(), 1, "{:#?}", run.audit);
        assert_eq!(ends[0]["event"], "SessionEnd");
        assert!(ends[0]["reason"].is_string(), "{}", ends[0]);
        assert_eq!(ends[0]["ends_session"], true, "{}", ends[0]);
        let verified = std::process::Command::new(STEPPROOF)
            .args(["audit", "verify"])
            .arg(&run.audit_path)
            .output()
            .unwrap();
        assert!(verified.status.success(), "{}", describe(&verified));
    }
);

// `/step-complete` in the chat: Claude Code expands StepProof's command (read from the run's
// config dir), the model runs the client, the hook lets exactly that through while the step
// allows only `echo`, the supervisor checks the evidence and its verdict is the tool result
// the model reads — a failure with why, then a pass that opens the next step with its
// instructions. A command the step does not allow is refused naming the step. Then the model
// abandons the runbook through the client: every later call is denied, the run exits 116, the
// record says it was asked for.
both_claude!(
    step_complete_from_the_chat_reaches_the_supervisor,
    |w: &World| {
        setup(w);
        let mock = Mock::start(
            w,
            json!([
                bash(&format!("{CLIENT} step complete")),
                bash("cat runbook.toml"),
                bash("echo 'q1 q2 q3' > notes.md"),
                bash(&format!("{CLIENT} step complete --note 'from the chat'")),
                bash(&format!("{CLIENT} step abandon --reason 'test over'")),
                bash("echo after"),
                text("fin")
            ]),
        );
        let run = runbook_run(w, &mock, "/step-complete");
        let first = seen(&mock.messages_requests()[0]);
        assert!(
            first.contains("<command-name>/step-complete</command-name>")
                && first.contains("Ask the supervisor to complete a runbook step"),
            "the expanded slash command is not in the first request:\n{first}\n{}",
            run.describe()
        );
        // The client's call is allowed by its own rule, though the step allows only echo.
        run.expect_decision(&call_id(None, 0), "allow", "runbook-client");
        let failed = mock.expect_result(&call_id(None, 0));
        assert!(
            failed
                .text
                .contains("step draft NOT passed (attempt 1 of 3)")
                && failed
                    .text
                    .contains("files_exist: nothing matches notes.md"),
            "{failed:?}"
        );
        // Refused by the step, which the reason names.
        let refused = mock.expect_result(&call_id(None, 1));
        assert!(
            refused.is_error
                && refused.text.contains("step draft")
                && refused.text.contains("`echo *`"),
            "{refused:?}"
        );
        let passed = mock.expect_result(&call_id(None, 3));
        assert!(
            !passed.is_error
                && passed.text.contains("step draft passed (attempt 2).")
                && passed.text.contains("Open now: later.")
                && passed
                    .text
                    .contains("Step later (Later): Publish the notes somewhere far away"),
            "{passed:?}"
        );
        let abandoned = mock.expect_result(&call_id(None, 4));
        assert!(
            abandoned
                .text
                .contains("abandoned at your request; abandoned: later"),
            "{abandoned:?}"
        );
        let after = mock.expect_result(&call_id(None, 5));
        assert!(
            after.is_error && after.text.contains("the run has stopped"),
            "{after:?}"
        );
        assert_eq!(run.status.code(), Some(116), "{}", run.describe());
        let requested = run.records("runbook-complete-requested");
        assert_eq!(requested.len(), 2, "{}", run.describe());
        assert_eq!(requested[1]["note"], "from the chat");
        assert_eq!(requested[1]["reported_from"], "inside");
        let record = run.records("runbook-abandoned");
        assert_eq!(record.len(), 1, "{}", run.describe());
        assert_eq!(record[0]["requested"], true);
        assert_eq!(record[0]["open"], json!(["later"]));
        assert_eq!(
            record[0]["why"],
            "abandoned by request from inside: test over"
        );
        assert_eq!(run.records("runbook-abandon-requested").len(), 1);
    }
);

// Interactive, on a terminal: after `/compact` the conversation is a summary, and the next
// request still holds the open step's instructions (PreCompact makes the next prompt carry the
// whole orientation again).
both_claude!(after_compact_the_step_is_still_in_context, |w: &World| {
    setup(w);
    let mock = Mock::start(
        w,
        json!([
            text("First-answer-done."),
            text("Second-answer-done."),
            text("SUMMARY-OF-THE-CONVERSATION")
        ]),
    );
    let profile = profile(w, &mock, true, "");
    let dir = scratch(w, "tui");
    chown_tree(&dir, w.owner);
    let audit = dir.join("audit.jsonl");
    let mut tui = tui::Tui::start(
        w,
        &[
            "--runbook",
            "runbook.toml",
            "--runbook-fresh",
            "--profile",
            &profile,
            "--audit-log",
            audit.to_str().unwrap(),
        ],
        "Follow the script.",
    );
    tui.until(60, "the first answer", |t| {
        t.screen.contains("First-answer-done.")
    });
    let first = seen(&mock.messages_requests()[0]);
    assert!(first.contains(DRAFT_INSTRUCTIONS), "{first}");
    // Claude Code keeps each prompt's context in the session's system prompt (until a
    // compaction): the last one is this prompt's.
    let prompt_context = |request: &str| {
        let parts: Vec<&str> = request
            .split("UserPromptSubmit hook additional context:")
            .collect();
        assert!(parts.len() > 1, "no prompt context in:\n{request}");
        parts.last().unwrap().to_string()
    };
    // The session's next prompt: one line, not the whole orientation again.
    tui.pump(std::time::Duration::from_millis(1500));
    tui.type_line("second-prompt");
    tui.until(60, "the second answer", |t| {
        t.screen.contains("Second-answer-done.")
    });
    let second = mock
        .messages_requests()
        .iter()
        .map(seen)
        .find(|s| s.contains("second-prompt"))
        .expect("the second prompt's request");
    let second = prompt_context(&second);
    assert!(
        second.contains("Runbook 'oriented', open step 'draft'")
            && !second.contains(DRAFT_INSTRUCTIONS),
        "{second}"
    );
    tui.pump(std::time::Duration::from_millis(1500));
    tui.type_line("/compact");
    tui.until(90, "the compaction request", |_| {
        mock.messages_requests().iter().any(|r| {
            seen(r).contains("SUMMARY") || seen(r).contains("Keep the following in the summary")
        })
    });
    tui.pump(std::time::Duration::from_millis(3000));
    tui.type_line("next-prompt-after-compaction");
    let after = |mock: &Mock| {
        mock.messages_requests()
            .iter()
            .map(seen)
            .find(|s| s.contains("next-prompt-after-compaction"))
    };
    tui.until(60, "the request after the compaction", |_| {
        after(&mock).is_some()
    });
    let after = after(&mock).unwrap();
    assert!(
        after.contains("SUMMARY-OF-THE-CONVERSATION"),
        "the conversation was not compacted: {after}"
    );
    // The prompt after the compaction carries the whole orientation again (the observer's
    // context for this prompt, not only what the conversation kept).
    let prompt_context = prompt_context(&after);
    assert!(
        prompt_context.contains(DRAFT_INSTRUCTIONS) && prompt_context.contains("Open step 'draft'"),
        "the step is not in the request after /compact:\n{after}"
    );
    // The summary was asked to keep the step (PreCompact's plain-text instructions).
    let compaction = mock
        .messages_requests()
        .iter()
        .map(seen)
        .find(|s| s.contains("Keep the following in the summary, word for word"))
        .unwrap_or_else(|| panic!("no compaction request asked to keep the step"));
    assert!(compaction.contains(DRAFT_INSTRUCTIONS), "{compaction}");
    tui.pump(std::time::Duration::from_millis(1500));
    let status = tui.exit();
    assert_eq!(status.code(), Some(116), "{:?}", tui.screen);
    // No observer failed on screen (a SessionStart hook cannot run here; PreCompact's answer
    // is one Claude Code takes).
    assert!(!tui.screen.contains("hook failed"), "{:?}", tui.screen);
    let records: Vec<Value> = fs::read_to_string(&audit)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        records
            .iter()
            .any(|r| r["kind"] == "runbook-abandoned"
                && r["why"] == "the agent exited with steps open"),
        "{records:#?}"
    );
});

// `/runbook-abandon REASON` in the chat: the expanded command carries the reason, the model
// looks at the run (`step status`) and abandons it through the client; the supervisor records
// the request with its reason and the run exits 116.
both_claude!(runbook_abandon_from_the_chat, |w: &World| {
    setup(w);
    let mock = Mock::start(
        w,
        json!([
            bash(&format!("{CLIENT} step status")),
            bash(&format!("{CLIENT} step abandon --reason 'not today'")),
            text("fin")
        ]),
    );
    let run = runbook_run(w, &mock, "/runbook-abandon not today");
    let first = seen(&mock.messages_requests()[0]);
    assert!(
        first.contains("<command-name>/runbook-abandon</command-name>")
            && first.contains("Reason given: not today"),
        "{first}\n{}",
        run.describe()
    );
    let status = mock.expect_result(&call_id(None, 0));
    assert!(
        status.text.contains("OPEN     draft") && status.text.contains("waiting  later"),
        "{status:?}"
    );
    let abandoned = mock.expect_result(&call_id(None, 1));
    assert!(
        abandoned
            .text
            .contains("runbook oriented abandoned at your request; abandoned: draft"),
        "{abandoned:?}"
    );
    assert_eq!(run.status.code(), Some(116), "{}", run.describe());
    let record = run.records("runbook-abandoned");
    assert_eq!(record.len(), 1, "{}", run.describe());
    assert_eq!(
        record[0]["why"],
        "abandoned by request from inside: not today"
    );
    assert_eq!(record[0]["open"], json!(["draft"]));
});

// ---- Approvals by webhook, with the real Claude Code as the worker ----

#[path = "support/webhook.rs"]
mod webhook;

const HOOK_KEY: &str = "0123456789abcdef0123456789abcdef-e2e-key";

// The worker asks for completion of an approval step; the supervisor asks the webhook (an HTTPS
// stand-in on the host's loopback) and answers the tool call at once: "waiting for approval"
// (Claude Code's Bash timeout never meets an approval's deadline). The signed approval is
// counted, and the model reads the pass — naming the approver — in the context of its next tool
// call. The model never had the URL or the key.
both_claude!(a_webhook_approval_reaches_the_model, |w: &World| {
    fs::write(
        w.workspace.join("runbook.toml"),
        r#"id = "gated"
title = "A person says yes"
owner = "tests"

[[steps]]
id = "ship"
title = "Ship it"
instructions = "Ask for the release manager's approval"
on_fail = "block"
[[steps.evidence]]
approval = { approvers = "the release manager", deadline = "1m" }
"#,
    )
    .unwrap();
    let key = w.home.join("work-notes/hook.txt");
    fs::create_dir_all(key.parent().unwrap()).unwrap();
    fs::write(&key, format!("{HOOK_KEY}\n")).unwrap();
    chown_tree(&w.home, w.owner);
    chown_tree(&w.workspace, w.owner);
    let hook = webhook::Webhook::start(
        &w.base.join("hook"),
        HOOK_KEY,
        Box::new(|request, _, _| {
            webhook::answer(HOOK_KEY, request, "approve", "ship it", "alice@example.com")
        }),
    );
    let mock = Mock::start(
        w,
        json!([
            bash(&format!("{CLIENT} step complete")),
            bash(&format!("{CLIENT} step status")),
            bash(&format!("{CLIENT} step status")),
            text("fin")
        ]),
    );
    let ca = hook.ca.display().to_string();
    let key = key.display().to_string();
    let run = run_claude_as(
        w,
        &Launch {
            run_args: &["--runbook", "runbook.toml", "--runbook-fresh"],
            env: &[
                ("STEPPROOF_TEST_ONWARD_CA", &ca),
                ("STEPPROOF_APPROVAL_WEBHOOK", &hook.url),
                ("STEPPROOF_APPROVAL_HMAC_KEY_FILE", &key),
            ],
            ..Launch::default()
        },
        &profile(w, &mock, true, ""),
        &[],
    );
    assert_eq!(run.status.code(), Some(0), "{}", run.describe());
    run.expect_decision(&call_id(None, 0), "allow", "runbook-client");
    let result = mock.expect_result(&call_id(None, 0));
    assert!(
        result.text.contains(
            "step ship: its other evidence held; waiting for approval by the release manager (deadline 1m). You will be told the answer on your next tool call or prompt"
        ),
        "{result:?}\n{}",
        run.describe()
    );
    // The verdict reached the model once, in a later tool call's context.
    let everything = mock.raw();
    assert!(
        everything.contains("the approval you were waiting for has been answered."),
        "{everything}\n{}",
        run.describe()
    );
    let told = mock.requests().iter().skip(2).any(|r| {
        r.to_string()
            .contains("approval: approved by alice@example.com (from webhook)")
    });
    assert!(told, "{everything}");
    // One signed request to the stand-in, for this step; its answer counted.
    let requests = hook.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_eq!(requests[0]["step"], "ship");
    let approvals = run.records("runbook-approval");
    assert_eq!(approvals.len(), 1, "{}", run.describe());
    assert_eq!(approvals[0]["from"], "webhook");
    assert_eq!(approvals[0]["counted"], true);
    assert_eq!(approvals[0]["nonce"], requests[0]["nonce"]);
    assert_eq!(approvals[0]["approver"], "alice@example.com");
    assert_eq!(
        run.records("runbook-complete").len(),
        1,
        "{}",
        run.describe()
    );
    // What the model read: neither the URL nor the key.
    assert!(
        !everything.contains(&hook.url) && !everything.contains(HOOK_KEY),
        "the webhook's URL or key reached the model"
    );
});

// A `claude -p` turn that ends while its approval is pending (nobody answers the webhook): the
// model was answered "waiting" at once and told to end its turn; the run ends at once with its
// stated outcome (115, approval missing), not at the approval's hour-long deadline.
both_claude!(a_turn_that_ends_while_waiting_exits_115, |w: &World| {
    fs::write(
        w.workspace.join("runbook.toml"),
        r#"id = "gated"
title = "A person says yes"
owner = "tests"

[[steps]]
id = "ship"
title = "Ship it"
instructions = "Ask for the release manager's approval"
on_fail = "block"
[[steps.evidence]]
approval = { approvers = "the release manager", deadline = "1h" }
"#,
    )
    .unwrap();
    let key = w.home.join("work-notes/hook.txt");
    fs::create_dir_all(key.parent().unwrap()).unwrap();
    fs::write(&key, format!("{HOOK_KEY}\n")).unwrap();
    chown_tree(&w.home, w.owner);
    chown_tree(&w.workspace, w.owner);
    let hook = webhook::Webhook::start(
        &w.base.join("hook"),
        HOOK_KEY,
        Box::new(|_, _, _| webhook::Reply::Pending),
    );
    let mock = Mock::start(
        w,
        json!([
            bash(&format!("{CLIENT} step complete")),
            text("The step waits for the release manager's approval.")
        ]),
    );
    let ca = hook.ca.display().to_string();
    let key = key.display().to_string();
    let started = std::time::Instant::now();
    let run = run_claude_as(
        w,
        &Launch {
            run_args: &["--runbook", "runbook.toml", "--runbook-fresh"],
            env: &[
                ("STEPPROOF_TEST_ONWARD_CA", &ca),
                ("STEPPROOF_APPROVAL_WEBHOOK", &hook.url),
                ("STEPPROOF_APPROVAL_HMAC_KEY_FILE", &key),
            ],
            ..Launch::default()
        },
        &profile(w, &mock, true, ""),
        &[],
    );
    assert_eq!(run.status.code(), Some(115), "{}", run.describe());
    assert!(started.elapsed().as_secs() < 120, "{}", run.describe());
    let result = mock.expect_result(&call_id(None, 0));
    assert!(
        result
            .text
            .contains("waiting for approval by the release manager (deadline 1h)")
            && result
                .text
                .contains("No other step is open: end your turn now"),
        "{result:?}"
    );
    let ended = run.records("runbook-ended");
    assert_eq!(ended[0]["ending"], "approval-missing", "{}", run.describe());
    assert_eq!(ended[0]["missing"], "pending", "{}", run.describe());
});

// `/step-evidence FILE` in the chat: Claude Code expands StepProof's command with the file, the
// model runs the client (allowed by its own rule while the step allows only `echo`), the
// supervisor hashes the file itself and its answer is the tool result the model reads.
both_claude!(
    step_evidence_from_the_chat_reaches_the_supervisor,
    |w: &World| {
        setup(w);
        fs::write(w.workspace.join("notes.md"), "q1 q2 q3\n").unwrap();
        // Two names for a file outside the workspace: the supervisor hashes neither.
        let outside = w.workspace.parent().unwrap().join("outside.txt");
        fs::write(&outside, "not the workspace's\n").unwrap();
        std::os::unix::fs::symlink(&outside, w.workspace.join("link.md")).unwrap();
        chown_tree(&w.workspace, w.owner);
        let mock = Mock::start(
            w,
            json!([
                bash(&format!(
                    "{CLIENT} step evidence 'notes.md' '../outside.txt' 'link.md'"
                )),
                text("fin")
            ]),
        );
        let run = runbook_run(w, &mock, "/step-evidence notes.md");
        let first = seen(&mock.messages_requests()[0]);
        assert!(
            first.contains("<command-name>/step-evidence</command-name>")
                && first.contains("Files given: notes.md"),
            "the expanded slash command is not in the first request:\n{first}\n{}",
            run.describe()
        );
        run.expect_decision(&call_id(None, 0), "allow", "runbook-client");
        let answer = mock.expect_result(&call_id(None, 0));
        assert!(
            !answer.is_error && answer.text.contains("noted") && answer.text.contains("notes.md"),
            "{answer:?}\n{}",
            run.describe()
        );
        let named = run.records("runbook-evidence-named");
        assert_eq!(named.len(), 1, "{}", run.describe());
        assert_eq!(named[0]["reported_from"], "inside");
        let digest = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(b"q1 q2 q3\n"));
        assert_eq!(named[0]["files"][0]["path"], "notes.md", "{}", named[0]);
        assert_eq!(
            named[0]["files"][0]["sha256"],
            digest.as_str(),
            "{}",
            named[0]
        );
        for n in [1, 2] {
            assert!(named[0]["files"][n]["sha256"].is_null(), "{}", named[0]);
        }
        assert!(
            answer
                .text
                .contains("../outside.txt (not a regular file in the workspace)")
                && answer
                    .text
                    .contains("link.md (not a regular file in the workspace)"),
            "{answer:?}"
        );
        // Naming a file completes nothing: the step is still open when the agent exits.
        assert_eq!(run.status.code(), Some(116), "{}", run.describe());
        assert!(run.records("runbook-step-passed").is_empty());
    }
);

// ---- The walk-through of docs/runbooks.md ----

/// The walk-through's runbook (docs/runbooks.md, "A whole session").
const WALKTHROUGH_RUNBOOK: &str = r#"id = "fix-greeting"
title = "Fix the greeting"
owner = "docs-team"

[verifiers]
tier2 = ["claude-haiku-4-5"]

[[steps]]
id = "fix"
title = "Fix the typo in greeting.txt"
instructions = "greeting.txt says 'Helo, world'. Make it say 'Hello, world'; change nothing else."
acceptance = ["greeting.txt says exactly 'Hello, world'", "no other file changed"]
[[steps.allow.bash]]
id = "sed-only"
reason = "this step edits greeting.txt with sed and nothing else"
commands = ["sed *", "cat *"]
[[steps.evidence]]
command = { run = ["grep", "-qx", "Hello, world", "greeting.txt"] }
[[steps.evidence]]
verifier = { tier = 2 }
"#;

/// One whole session for docs/runbooks.md (`scripts/runbook-walkthrough.sh` runs it): the real Claude
/// Code against the mock, a refused call, a failed and a passed `/step-complete`, a verifier's
/// verdict, and the summaries. Writes what it saw to `$STEPPROOF_WALKTHROUGH_OUT` (a directory)
/// or prints it. Ignored by default: it documents, the tests above hold the behaviour.
#[test]
#[ignore = "regenerates the walk-through of docs/runbooks.md: scripts/runbook-walkthrough.sh"]
fn walkthrough() {
    let Some(w) = world(Who::Root) else {
        return;
    };
    fs::write(w.workspace.join("runbook.toml"), WALKTHROUGH_RUNBOOK).unwrap();
    fs::write(w.workspace.join("greeting.txt"), "Helo, world\n").unwrap();
    chown_tree(&w.workspace, w.owner);
    let greeting = w.workspace.join("greeting.txt").display().to_string();
    let answer = json!({
        "verdict": "pass",
        "reasons": ["greeting.txt is exactly 'Hello, world'", "the supervisor's command evidence shows no other change was needed"]
    })
    .to_string();
    let mock = Mock::start(
        &w,
        json!({
            "turns": [
                bash("python3 -c \"open('greeting.txt','w').write('Hello, world\\n')\""),
                bash(&format!("{CLIENT} step complete")),
                bash("sed -i 's/^Helo, world$/Hello, world/' greeting.txt"),
                bash(&format!("{CLIENT} step complete --note 'typo fixed with sed'")),
                text("greeting.txt now says 'Hello, world'; the supervisor passed step fix and the runbook is complete."),
            ],
            "models": { "claude-haiku-4-5": { "turns": [
                tool("Read", json!({ "file_path": greeting })),
                text(&answer),
            ]}},
        }),
    );
    let dir = scratch(&w, "walkthrough");
    chown_tree(&dir, w.owner);
    let summary = dir.join("summary.md");
    let summary_arg = summary.display().to_string();
    let run = run_claude_as(
        &w,
        &Launch {
            run_args: &[
                "--runbook",
                "runbook.toml",
                "--runbook-fresh",
                "--summary",
                &summary_arg,
            ],
            prompt: Some("Fix the greeting."),
            ..Launch::default()
        },
        &profile(&w, &mock, true, ""),
        &[],
    );
    let requests = mock.messages_requests();
    let first = requests
        .iter()
        .find(|r| r["body"]["model"] != "claude-haiku-4-5")
        .unwrap_or_else(|| panic!("no request reached the mock: {}", run.describe()));
    let marker = "UserPromptSubmit hook additional context:";
    let orientation = seen(first)
        .split_once(marker)
        .map(|(_, after)| after.trim().to_string())
        .unwrap_or_else(|| panic!("no prompt context in the first request: {}", seen(first)));
    let result = |turn| {
        let r = mock.expect_result(&call_id(None, turn));
        format!("{}{}", if r.is_error { "[is_error] " } else { "" }, r.text)
    };
    let shown = std::process::Command::new(STEPPROOF)
        .args(["audit", "show"])
        .arg(&run.audit_path)
        .output()
        .unwrap();
    let verdicts: Vec<String> = run
        .audit
        .iter()
        .filter(|r| {
            r["kind"] == "runbook-verifier-attempt"
                || (r["kind"] == "runbook-evidence" && r["verdict"].is_string())
        })
        .map(|r| serde_json::to_string_pretty(r).unwrap())
        .collect();
    let parts = [
        ("runbook.toml", WALKTHROUGH_RUNBOOK.to_string()),
        ("orientation.txt", orientation),
        ("refused.txt", result(0)),
        ("complete-failed.txt", result(1)),
        ("complete-passed.txt", result(3)),
        ("verifier-records.json", verdicts.join("\n")),
        ("stderr.txt", run.stderr.clone()),
        ("stdout.json", run.stdout.clone()),
        (
            "audit-show.txt",
            String::from_utf8_lossy(&shown.stdout).into_owned(),
        ),
        (
            "summary.md",
            fs::read_to_string(&summary).unwrap_or_default(),
        ),
        (
            "models.txt",
            requests
                .iter()
                .map(|r| r["body"]["model"].as_str().unwrap_or("?").to_string())
                .collect::<Vec<_>>()
                .join("\n"),
        ),
    ];
    match std::env::var_os("STEPPROOF_WALKTHROUGH_OUT") {
        Some(out) => {
            let out = std::path::PathBuf::from(out);
            fs::create_dir_all(&out).unwrap();
            for (name, text) in &parts {
                fs::write(out.join(name), text).unwrap();
            }
            println!("walk-through written to {}", out.display());
        }
        None => {
            for (name, text) in &parts {
                println!("==== {name}\n{text}\n");
            }
        }
    }
    assert_eq!(run.status.code(), Some(0), "{}", run.describe());
    assert!(shown.status.success(), "{}", describe(&shown));
}
