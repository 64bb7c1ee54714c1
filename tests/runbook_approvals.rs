//! Approvals people can act on, with a shell script as the agent (it calls `stepproof step …`
//! inside and runs the real hook binary with Claude Code's JSON input): a completion that needs
//! a person answers at once, the verdict reaches the agent on its next tool call or prompt, and
//! `stepproof approvals` lists what waits. As root and as the test user.

mod support;

#[path = "support/webhook.rs"]
mod webhook;

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use support::{STEPPROOF, Who, World, describe};

const RUNBOOK: &str = r#"
id = "gated"
title = "Fix, then a person approves"
owner = "tests"

[[steps]]
id = "fix"
title = "Fix the code"
instructions = "Make code.txt say fixed"
[[steps.evidence]]
command = { run = ["sh", "-c", "echo checked-ok; grep -q fixed code.txt"] }
[[steps.evidence]]
files_changed = { paths = ["code.txt"] }

[[steps]]
id = "gate"
title = "A person approves"
instructions = "Ask for approval"
depends_on = ["fix"]
on_fail = "block"
[[steps.evidence]]
command = { run = ["sh", "-c", "echo gate-check-ok; grep -q fixed code.txt"] }
[[steps.evidence]]
approval = { approvers = "the tester", deadline = "DEADLINE" }
"#;

/// A PostToolUse call as Claude Code makes it after a Bash call, through the real hook.
const POST_TOOL_USE: &str = r#"printf '%s' '{"hook_event_name":"PostToolUse","session_id":"s","tool_name":"Bash","tool_input":{"command":"true"},"tool_response":{"stdout":"","stderr":""},"cwd":"'"$PWD"'"}' | /run/stepproof/stepproof-hook --event PostToolUse"#;
/// A prompt in another session (each session is told the verdict once).
const PROMPT: &str = r#"printf '%s' '{"hook_event_name":"UserPromptSubmit","session_id":"s2","prompt":"go on","cwd":"'"$PWD"'"}' | /run/stepproof/stepproof-hook --event UserPromptSubmit"#;

fn setup(w: &World, deadline: &str, script: &str) {
    fs::write(
        w.workspace.join("runbook.toml"),
        RUNBOOK.replace("DEADLINE", deadline),
    )
    .unwrap();
    fs::write(w.workspace.join("code.txt"), "broken\n").unwrap();
    fs::write(w.workspace.join("agent.sh"), script).unwrap();
    // The agent's "I have my answer" of an earlier run in this workspace.
    let _ = fs::remove_file(w.workspace.join("asked.txt"));
    support::chown_tree(&w.workspace, w.owner);
}

/// The agent: fixes the code, asks for the gate's completion (answered at once), says it has
/// its answer (the test approves only then), and polls its next tool calls' context until the
/// verdict is there; then a prompt.
fn waiting_agent() -> String {
    format!(
        r#"S=/run/stepproof/stepproof
echo fixed > code.txt
$S step complete --step fix; echo "complete-fix=$?"
start=$(date +%s%N)
$S step complete --step gate; echo "complete-gate=$?"
echo "gate-answered-ms=$(( ($(date +%s%N) - start) / 1000000 ))"
$S step status; echo "status=$?"
$S step complete --step gate; echo "complete-again=$?"
printf '%s' '{{"hook_event_name":"UserPromptSubmit","session_id":"s","prompt":"what now","cwd":"'"$PWD"'"}}' | /run/stepproof/stepproof-hook --event UserPromptSubmit; echo
echo "asked" > asked.txt
i=0
while [ $i -lt 200 ]; do
  out=$({POST_TOOL_USE})
  case "$out" in *"has been answered"*) echo "notice-after-call=$i"; printf "%s\\n" "$out"; break;; esac
  i=$((i+1)); sleep 0.1
done
{PROMPT}; echo
$S step status
"#
    )
}

/// Runs the agent without --ci; approves (or denies) once the agent has its "waiting" answer.
fn run_and_answer(w: &World, verb: Option<&str>) -> (String, String, i32, PathBuf, Duration) {
    run_inspect_answer(w, verb, &|_, _| {})
}

/// `run_and_answer` with `env` added to `stepproof-run`'s environment.
fn run_and_answer_with(
    w: &World,
    verb: Option<&str>,
    env: &[(&str, &str)],
) -> (String, String, i32, PathBuf, Duration) {
    ENV.with(|e| {
        *e.borrow_mut() = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    });
    let out = run_inspect_answer(w, verb, &|_, _| {});
    ENV.with(|e| e.borrow_mut().clear());
    out
}

thread_local! {
    /// Extra environment for the next run (see [`run_and_answer_with`]).
    static ENV: std::cell::RefCell<Vec<(String, String)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// `run_and_answer`, calling `inspect(w, run_id)` while the approval waits, before answering.
fn run_inspect_answer(
    w: &World,
    verb: Option<&str>,
    inspect: &dyn Fn(&World, &str),
) -> (String, String, i32, PathBuf, Duration) {
    let mut command = w.command(&["--runbook", "runbook.toml"], &["/bin/sh", "agent.sh"]);
    ENV.with(|e| {
        for (k, v) in e.borrow().iter() {
            command.env(k, v);
        }
    });
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut said = String::new();
    let mut waited = Duration::ZERO;
    for line in BufReader::new(stderr).lines() {
        let line = line.unwrap();
        said.push_str(&line);
        said.push('\n');
        if let (Some(verb), Some(at)) = (verb, line.find("`stepproof approve ")) {
            let run_id = line[at..].split(' ').nth(2).unwrap().to_string();
            // The person answers only after the agent has had its answer: a completion that
            // blocked on the person would never get here (the deadline is an hour).
            let since = Instant::now();
            while !w.workspace.join("asked.txt").exists() {
                assert!(
                    since.elapsed() < Duration::from_secs(30),
                    "the agent's completion blocked on the person:\n{said}"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
            waited = since.elapsed();
            inspect(w, &run_id);
            let mut cmd = w.as_owner(&w.run_binary().with_file_name("stepproof"));
            w.clean_env(&mut cmd);
            cmd.args([verb, &run_id, "gate"]);
            if verb == "deny" {
                cmd.args(["--reason", "not today"]);
            }
            let out = cmd.output().unwrap();
            assert!(out.status.success(), "{verb}: {}", describe(&out));
            said.push_str(&format!(
                "$ stepproof {verb} {run_id} gate\n{}",
                String::from_utf8_lossy(&out.stdout)
            ));
        }
    }
    let out = child.wait_with_output().unwrap();
    let log = support::audit_log_named(&said);
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        said,
        out.status.code().unwrap_or(-1),
        log,
        waited,
    )
}

/// The approver by name: the login behind the uid that ran `stepproof approve`.
fn approver(w: &World) -> &'static str {
    match w.who {
        Who::Root => "root",
        Who::User => support::TEST_USER,
    }
}

fn verify(log: &Path) {
    let out = std::process::Command::new(STEPPROOF)
        .args(["audit", "verify"])
        .arg(log)
        .output()
        .unwrap();
    assert!(out.status.success(), "audit verify: {}", describe(&out));
}

fn answered_ms(text: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix("gate-answered-ms="))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(u64::MAX)
}

// The completion of a step that needs a person answers at once ("waiting for approval"), status
// answers meanwhile, a second ask is answered at once too; the approval given afterwards reaches
// the agent on its next tool call (PostToolUse context) and on its next prompt, and the run
// completes.
both!(a_completion_never_blocks_on_a_person, |w: &World| {
    setup(w, "1h", &waiting_agent());
    let (text, said, code, log, _) = run_and_answer(w, Some("approve"));
    let all = format!("{text}\n{said}");
    assert!(text.contains("complete-fix=0"), "{all}");
    assert!(text.contains("complete-gate=1"), "{all}");
    assert!(
        text.contains("step gate: its other evidence held; waiting for approval by the tester (deadline 1h). You will be told the answer on your next tool call or prompt")
            && text.contains("No other step is open: end your turn now"),
        "{all}"
    );
    assert!(answered_ms(&text) < 5_000, "{all}");
    assert!(
        text.contains("waiting for a person's approval: you will be told")
            && text.contains("status=0"),
        "{all}"
    );
    assert!(
        text.contains("complete-again=1")
            && text.contains("step gate waits for a person's approval: a completion is taken again once it is answered"),
        "{all}"
    );
    // The prompt while it waits carries the orientation's line on what to do meanwhile.
    assert!(
        text.contains("Open step 'gate': A person approves (attempt 1 of 1).") && text.contains("Its completion waits for a person's approval: you will be told the answer on your next tool call or prompt. Do not ask for its completion again meanwhile"),
        "{all}"
    );
    // The verdict, on the next tool call's context, and on the prompt after it.
    assert!(text.contains("notice-after-call="), "{all}");
    let contexts: Vec<String> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| {
            v["hookSpecificOutput"]["additionalContext"]
                .as_str()
                .map(str::to_string)
        })
        .filter(|c| c.contains("has been answered"))
        .collect();
    // Once on the tool call, once on the other session's prompt; not again in the same session.
    assert_eq!(contexts.len(), 2, "{all}");
    for context in &contexts {
        assert!(
            context.contains(&format!("StepProof: the approval you were waiting for has been answered.\nstep gate passed (attempt 1).\napproval: approved by {} (from host terminal)", approver(w)))
                && context.contains("No step is open: the runbook is complete."),
            "{context}"
        );
    }
    assert_eq!(code, 0, "{all}");
    verify(&log);
    let records = support::records_in(&log);
    let notice = records
        .iter()
        .find(|r| r["kind"] == "runbook-notice")
        .unwrap();
    assert_eq!(notice["passed"], true, "{notice}");
    assert!(records.iter().any(|r| r["kind"] == "runbook-complete"));
});

// A denial after the agent was answered "waiting": the verdict it reads says the attempt was not
// used; the agent ends, and the run ends with the approval missing (115).
both!(a_denial_after_waiting_reaches_the_agent, |w: &World| {
    setup(w, "1h", &waiting_agent());
    let (text, said, code, log, _) = run_and_answer(w, Some("deny"));
    let all = format!("{text}\n{said}");
    assert!(text.contains("notice-after-call="), "{all}");
    assert!(
        text.contains("step gate NOT approved: the tester denied it: not today.")
            && text.contains("This did not use an attempt"),
        "{all}"
    );
    assert_eq!(code, 115, "{all}");
    verify(&log);
});

// The agent exits while its approval is pending (a `claude -p` turn that ended): the run ends
// with a stated outcome and 115, the attempt given back; a later run continues from the step.
both!(a_turn_that_ends_while_waiting_exits_115, |w: &World| {
    setup(
        w,
        "1h",
        "S=/run/stepproof/stepproof\necho fixed > code.txt\n$S step complete --step fix\n$S step complete --step gate; echo \"complete-gate=$?\"\n",
    );
    let out = w
        .command(&["--runbook", "runbook.toml"], &["/bin/sh", "agent.sh"])
        .output()
        .unwrap();
    let all = describe(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("complete-gate=1") && text.contains("waiting for approval"),
        "{all}"
    );
    assert_eq!(out.status.code(), Some(115), "{all}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "step gate waits for a person's approval (pending); the step stays open (exit 115"
        ),
        "{all}"
    );
    let log = support::audit_log_named(&stderr);
    verify(&log);
    let records = support::records_in(&log);
    let not_approved: Vec<_> = records
        .iter()
        .filter(|r| r["kind"] == "runbook-step-not-approved")
        .collect();
    assert_eq!(not_approved.len(), 1, "{records:?}");
    assert_eq!(not_approved[0]["missing"], "pending");
    // The next run continues: fix has passed, gate opens again with its attempt unspent.
    fs::write(
        w.workspace.join("agent.sh"),
        "/run/stepproof/stepproof step status\n",
    )
    .unwrap();
    support::chown_tree(&w.workspace, w.owner);
    let out = w
        .command(
            &["--runbook", "runbook.toml", "--ci", "--approve", "gate"],
            &["/bin/sh", "agent.sh"],
        )
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("passed   fix")
            && text.contains("OPEN     gate — A person approves (attempts 0/1)"),
        "{}",
        describe(&out)
    );
});

/// `stepproof approvals` as the run's owner (its home), with `args`.
fn approvals(w: &World, args: &[&str]) -> std::process::Output {
    let mut cmd = w.as_owner(&w.run_binary().with_file_name("stepproof"));
    w.clean_env(&mut cmd);
    cmd.arg("approvals").args(args);
    cmd.output().unwrap()
}

// While the approval waits, `stepproof approvals` lists it — run, workspace, step, who is asked,
// the deadline, each evidence item's verdict and output tail, the step's diff, the commands —
// in words and as JSON, on this host and under a directory of runs; once answered it is gone.
// The answer is recorded with the approver's login name, and `audit show` names them.
both!(
    approvals_lists_what_waits_with_what_the_step_did,
    |w: &World| {
        setup(w, "1h", &waiting_agent());
        let inspect = |w: &World, run_id: &str| {
            let out = approvals(w, &["--json"]);
            assert!(out.status.success(), "{}", describe(&out));
            let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            let mine: Vec<&serde_json::Value> = listed["pending"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|b| b["run"] == run_id)
                .collect();
            assert_eq!(mine.len(), 1, "{listed}");
            let brief = mine[0];
            assert_eq!(brief["step"], "gate", "{brief}");
            assert_eq!(brief["approvers"], "the tester", "{brief}");
            assert_eq!(brief["deadline"], "1h", "{brief}");
            assert_eq!(
                brief["workspace"].as_str().map(Path::new),
                Some(w.workspace.as_path())
            );
            assert_eq!(
                brief["approve"],
                format!("stepproof approve {run_id} gate"),
                "{brief}"
            );
            // The step rests on fix: its diff runs from fix's opening, code.txt's change in it.
            assert_eq!(brief["diff"]["since"], "step fix opened", "{brief}");
            let diff = brief["diff"]["text"].as_str().unwrap();
            assert!(
                diff.contains("-broken") && diff.contains("+fixed"),
                "{brief}"
            );
            // The text, as a person reads it.
            let out = approvals(w, &[]);
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            for line in [
                format!("run {run_id} · workspace {}", w.workspace.display()),
                "runbook gated (Fix, then a person approves)".to_string(),
                "  step gate — A person approves (attempt 1) · asks the tester · deadline 1h, "
                    .to_string(),
                "  evidence (this attempt):".to_string(),
            "    [0] command `sh -c 'echo gate-check-ok; grep -q fixed code.txt'` exit 0 (wanted 0) in ".to_string(),
            "        | gate-check-ok".to_string(),
            "  diff since step fix opened (1 file(s) changed):".to_string(),
                "    +fixed".to_string(),
                format!("  approve: stepproof approve {run_id} gate"),
                format!("  deny:    stepproof deny {run_id} gate --reason …"),
            ] {
                assert!(text.contains(&line), "{line:?} not in:\n{text}");
            }
            // Under a directory of runs (the runs/ of the run's home).
            let runs = w.home.join(".local/state/stepproof/runs");
            let out = approvals(w, &[runs.to_str().unwrap(), "--json"]);
            let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(listed["pending"].as_array().unwrap().len(), 1, "{listed}");
            eprintln!("--- stepproof approvals, as a person reads it ---\n{text}");
        };
        let (text, said, code, log, _) = run_inspect_answer(w, Some("approve"), &inspect);
        eprintln!("--- the terminal ---\n{said}");
        assert_eq!(code, 0, "{text}\n{said}");
        verify(&log);
        // Answered: nothing waits any more.
        let runs = w.home.join(".local/state/stepproof/runs");
        let out = approvals(w, &[runs.to_str().unwrap()]);
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("No approval is waiting."),
            "{}",
            describe(&out)
        );
        let records = support::records_in(&log);
        let answer = records
            .iter()
            .find(|r| r["kind"] == "runbook-approval")
            .unwrap();
        assert_eq!(answer["approver"], approver(w), "{answer}");
        let shown = std::process::Command::new(STEPPROOF)
            .args(["audit", "show"])
            .arg(&log)
            .output()
            .unwrap();
        let shown = String::from_utf8_lossy(&shown.stdout);
        assert!(
            shown.contains(&format!(
                "approval: approved at a host terminal by {}",
                approver(w)
            )) && shown.contains(&format!("from host terminal · by {}", approver(w))),
            "{shown}"
        );
    }
);

// When a person is asked, the chat's incoming webhook (an HTTPS stand-in on the host's loopback,
// named in stepproof-run's environment) gets a summary: in Slack's shape, the allow-list only
// (run, step, deadline, counts, the commands), no file name; in the generic shape with the
// operator's opt-ins, the changed files too. A webhook that fails is recorded and said; the
// approval is asked and the run completes regardless. An http:// URL is refused before anything
// runs (120).
both!(a_pending_approval_is_announced, |w: &World| {
    let chat = webhook::Webhook::start(
        &w.base.join("chat"),
        "0123456789abcdef0123456789abcdef-notify",
        Box::new(|_, _, _| webhook::Reply::Pending),
    );
    let ca = chat.ca.display().to_string();
    let slack = chat.url.replace("/hook", "/notify/slack");
    setup(w, "1h", &waiting_agent());
    let (text, said, code, log, _) = run_and_answer_with(
        w,
        Some("approve"),
        &[
            ("STEPPROOF_TEST_ONWARD_CA", &ca),
            ("STEPPROOF_APPROVAL_NOTIFY_URL", &slack),
            ("STEPPROOF_APPROVAL_NOTIFY_FORMAT", "slack"),
        ],
    );
    assert_eq!(code, 0, "{text}\n{said}");
    let posts: Vec<webhook::Seen> = chat
        .seen()
        .into_iter()
        .filter(|s| s.method == "POST" && s.path == "/notify/slack")
        .collect();
    assert_eq!(posts.len(), 1, "{said}");
    let body: serde_json::Value = serde_json::from_slice(&posts[0].body).unwrap();
    // The run's id as the terminal printed it.
    let at = said.find("`stepproof approve ").unwrap();
    let run_id = said[at..].split(' ').nth(2).unwrap().to_string();
    let message = body["text"].as_str().unwrap();
    eprintln!("--- the Slack post ---\n{body}");
    assert!(
        message.starts_with("StepProof: step gate of run ")
            && message.contains("waits for approval (deadline 1h). Evidence: 1 of 1 item(s) held; 1 file(s) changed; verifier: -.")
            && message.contains("`stepproof approve ")
            && !message.contains("code.txt"),
        "{body}"
    );
    assert!(
        message.contains(&format!("step gate of run {run_id} "))
            && message.contains(&format!("`stepproof approve {run_id} gate`")),
        "{body}"
    );
    let records = support::records_in(&log);
    let posted = records
        .iter()
        .find(|r| r["kind"] == "runbook-notification")
        .unwrap();
    assert_eq!(posted["status"], 200, "{posted}");
    assert_eq!(posted["format"], "slack", "{posted}");

    // Generic, with file names opted in; and a second, failing URL is only recorded.
    let generic = chat.url.replace("/hook", "/notify/generic");
    setup(w, "1h", &waiting_agent());
    fs::write(w.workspace.join("code.txt"), "broken\n").unwrap();
    let (text, said, code, _, _) = run_and_answer_with(
        w,
        Some("approve"),
        &[
            ("STEPPROOF_TEST_ONWARD_CA", &ca),
            ("STEPPROOF_APPROVAL_NOTIFY_URL", &generic),
            ("STEPPROOF_APPROVAL_NOTIFY_INCLUDE", "files,reasons"),
        ],
    );
    assert_eq!(code, 0, "{text}\n{said}");
    let post = chat
        .seen()
        .into_iter()
        .find(|s| s.method == "POST" && s.path == "/notify/generic")
        .unwrap();
    let body: serde_json::Value = serde_json::from_slice(&post.body).unwrap();
    eprintln!("--- the generic post ---\n{body}");
    assert_eq!(body["type"], "stepproof.approval.pending", "{body}");
    assert_eq!(body["step"], "gate", "{body}");
    assert_eq!(body["counts"]["evidence_items"], 1, "{body}");
    assert_eq!(body["counts"]["evidence_held"], 1, "{body}");
    assert_eq!(body["reasons"], serde_json::json!([]), "{body}");
    assert!(
        body["approve"]
            .as_str()
            .unwrap()
            .starts_with("stepproof approve "),
        "{body}"
    );

    let failing = chat.url.replace("/hook", "/missing");
    setup(w, "1h", &waiting_agent());
    let (text, said, code, log, _) = run_and_answer_with(
        w,
        Some("approve"),
        &[
            ("STEPPROOF_TEST_ONWARD_CA", &ca),
            ("STEPPROOF_APPROVAL_NOTIFY_URL", &failing),
            ("STEPPROOF_APPROVAL_NOTIFY_FORMAT", "discord"),
        ],
    );
    assert_eq!(code, 0, "{text}\n{said}");
    assert!(
        said.contains(
            "of step gate's approval failed: answered HTTP 404 (the approval is asked regardless)"
        ),
        "{said}"
    );
    let records = support::records_in(&log);
    let posted = records
        .iter()
        .find(|r| r["kind"] == "runbook-notification")
        .unwrap();
    assert_eq!(posted["status"], 404, "{posted}");

    // http:// is refused before anything runs.
    let out = w
        .command(&["--runbook", "runbook.toml"], &["/bin/sh", "agent.sh"])
        .env("STEPPROOF_APPROVAL_NOTIFY_URL", "http://127.0.0.1:9/notify")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(120), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("a notification webhook must be https://"),
        "{}",
        describe(&out)
    );
});
