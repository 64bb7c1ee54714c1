//! Runbooks run for real: `stepproof-run --runbook` with a shell script as the agent, which
//! calls `stepproof step …` inside and makes tool calls through the real hook binary with
//! Claude Code's JSON input. As root and as the test user.

mod support;

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use support::{RUN, STEPPROOF, Who, World, describe};

const RUNBOOK: &str = r#"
id = "three-steps"
title = "Three steps"
owner = "tests"

[[steps]]
id = "write"
title = "Fix the code"
instructions = "Make code.txt say fixed"
[[steps.allow.bash]]
id = "only-echo"
reason = "this step only writes with echo"
commands = ["echo *", "cat *"]
[[steps.deny.bash]]
id = "no-rm"
reason = "nothing is removed in this step"
commands = ["rm *"]
[[steps.evidence]]
files_exist = { paths = ["code.txt"] }
[[steps.evidence]]
command = { run = ["sh", "-c", "echo EVIDENCE-RAN; echo scratch > evidence-wrote.txt; grep -q fixed code.txt"] }

[[steps]]
id = "notes"
title = "Write notes"
instructions = "Change notes/a.md"
depends_on = ["write"]
[[steps.evidence]]
files_changed = { paths = ["notes/*.md"] }

[[steps]]
id = "gate"
title = "A person approves"
instructions = "Wait"
depends_on = ["notes"]
on_fail = "block"
[[steps.evidence]]
approval = { approvers = "the tester", deadline = "DEADLINE" }
"#;

fn client_binary(w: &World) -> PathBuf {
    w.run_binary().with_file_name("stepproof")
}

fn setup(w: &World, deadline: &str, script: &str) {
    fs::write(
        w.workspace.join("runbook.toml"),
        RUNBOOK.replace("DEADLINE", deadline),
    )
    .unwrap();
    fs::write(w.workspace.join("code.txt"), "broken\n").unwrap();
    fs::create_dir_all(w.workspace.join("notes")).unwrap();
    fs::write(w.workspace.join("notes/a.md"), "old\n").unwrap();
    fs::write(w.workspace.join("agent.sh"), script).unwrap();
    support::chown_tree(&w.workspace, w.owner);
}

fn verify(log: &Path) {
    let out = std::process::Command::new(STEPPROOF)
        .args(["audit", "verify"])
        .arg(log)
        .output()
        .unwrap();
    assert!(out.status.success(), "audit verify: {}", describe(&out));
}

fn records(log: &Path) -> Vec<serde_json::Value> {
    support::records_in(log)
}

fn kinds(log: &Path) -> Vec<String> {
    records(log)
        .iter()
        .map(|r| r["kind"].as_str().unwrap_or_default().to_string())
        .collect()
}

const HOOK_CALL: &str = r#"printf '%s' '{"hook_event_name":"PreToolUse","session_id":"s","tool_name":"Bash","tool_input":{"command":"rm -rf build"},"cwd":"'"$PWD"'"}' | /run/stepproof/stepproof-hook --audit-socket /run/stepproof/audit.sock; echo "hook-exit=$?""#;

/// The observer hooks Claude Code runs at session start and on prompts, as it runs them: the
/// session's first prompt and its second.
const ORIENTATION_CALLS: &str = r#"printf '%s' '{"hook_event_name":"SessionStart","session_id":"s","source":"startup","cwd":"'"$PWD"'"}' | /run/stepproof/stepproof-hook --event SessionStart; echo "start-exit=$?"
printf '%s' '{"hook_event_name":"UserPromptSubmit","session_id":"s","prompt":"start","cwd":"'"$PWD"'"}' | /run/stepproof/stepproof-hook --event UserPromptSubmit; echo "first-prompt-exit=$?"
printf '%s' '{"hook_event_name":"UserPromptSubmit","session_id":"s","prompt":"then rm the build dir","cwd":"'"$PWD"'"}' | /run/stepproof/stepproof-hook --event UserPromptSubmit; echo "prompt-exit=$?""#;

fn agent_script() -> String {
    format!(
        r#"S=/run/stepproof/stepproof
{ORIENTATION_CALLS}
{HOOK_CALL}
python3 -c 'import socket; s=socket.socket(socket.AF_UNIX); s.connect("/run/stepproof/runbook/step.sock"); s.sendall(b"{{\"op\":\"complete\",\"verdict\":\"passed\"}}\n"); print("forged:", s.recv(4096).decode())'
$S step complete --note first; echo "complete-1=$?"
$S step status
echo fixed > code.txt
$S step complete; echo "complete-2=$?"
echo tampered > /run/stepproof/runbook/state.json; echo "state-write=$?"
mv /run/stepproof/runbook/policy-0 /run/stepproof/runbook/x; echo "policy-move=$?"
echo tampered >> runbook.toml; echo "runbook-write=$?"
test -e evidence-wrote.txt; echo "evidence-wrote=$?"
echo new > notes/a.md
$S step complete --step notes; echo "complete-3=$?"
$S step complete --step gate --wait; echo "complete-4=$?"
"#
    )
}

fn run(w: &World, extra: &[&str]) -> Output {
    let mut args = vec!["--runbook", "runbook.toml"];
    args.extend(extra);
    w.command(&args, &["/bin/sh", "agent.sh"])
        .output()
        .expect("start stepproof-run")
}

both!(a_runbook_runs_step_by_step, |w: &World| {
    setup(w, "1h", &agent_script());
    let out_dir = w.base.join("out");
    fs::create_dir_all(&out_dir).unwrap();
    fs::set_permissions(
        &out_dir,
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let summary = out_dir.join("summary.md");
    let out = run(
        w,
        &[
            "--ci",
            "--approve",
            "gate",
            "--summary",
            summary.to_str().unwrap(),
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let all = describe(&out);
    // The observers orient the agent from the read-only state: the open step's instructions
    // and what it allows at session start and on the session's first prompt, then one line
    // and the denied word on a prompt.
    assert!(
        text.contains("start-exit=0")
            && text.contains("first-prompt-exit=0")
            && text.contains("prompt-exit=0"),
        "{all}"
    );
    let contexts: Vec<String> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| {
            v["hookSpecificOutput"]["additionalContext"]
                .as_str()
                .map(str::to_string)
        })
        .collect();
    assert_eq!(contexts.len(), 3, "{all}");
    for context in &contexts[..2] {
        assert!(
            context.contains("Open step 'write': Fix the code")
                && context.contains("Instructions: Make code.txt say fixed")
                && context.contains("`echo *`"),
            "{all}"
        );
    }
    assert!(
        contexts[2].contains("open step 'write' (Fix the code)")
            && contexts[2].contains("Note: step 'write' denies `rm`")
            && !contexts[2].contains("Instructions:"),
        "{all}"
    );
    // A denied call names the step and what it allows.
    assert!(text.contains("hook-exit=2"), "{all}");
    assert!(
        text.contains("runbook three-steps, step write") && text.contains("`echo *`"),
        "{all}"
    );
    // A hand-made message claiming a verdict is refused.
    assert!(
        text.contains("forged:") && text.contains("refused: not a request"),
        "{all}"
    );
    // Failing evidence: refused with the command's output; the dependent step waits.
    assert!(text.contains("complete-1=1"), "{all}");
    assert!(text.contains("EVIDENCE-RAN"), "{all}");
    assert!(text.contains("waiting  notes"), "{all}");
    // After the fix it passes and the next step opens.
    assert!(text.contains("complete-2=0"), "{all}");
    assert!(text.contains("Open now: notes"), "{all}");
    // The state, the policy and the runbook cannot be changed from inside.
    for what in ["state-write", "policy-move", "runbook-write"] {
        assert!(!text.contains(&format!("{what}=0")), "{what}: {all}");
    }
    // The evidence command's writes did not reach the workspace.
    assert!(text.contains("evidence-wrote=1"), "{all}");
    assert!(!w.workspace.join("evidence-wrote.txt").exists());
    assert!(text.contains("complete-3=0"), "{all}");
    // Pre-approved in CI, recorded, and the agent reads it as a pre-approval (nobody was asked).
    assert!(text.contains("complete-4=0"), "{all}");
    assert!(
        text.contains("approval: pre-approved (--approve)")
            && !text.contains("approval: approved (from"),
        "{all}"
    );
    assert_eq!(out.status.code(), Some(0), "{all}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let log = support::audit_log_named(&stderr);
    verify(&log);
    let kinds = kinds(&log);
    for kind in [
        "runbook-step-opened",
        "runbook-request-refused",
        "runbook-complete-requested",
        "runbook-evidence",
        "runbook-step-failed",
        "runbook-step-passed",
        "runbook-complete",
    ] {
        assert!(kinds.iter().any(|k| k == kind), "{kind}: {kinds:?}");
    }
    let records = records(&log);
    let start = records.iter().find(|r| r["kind"] == "run-start").unwrap();
    assert!(
        start["runbook"]["hash"]
            .as_str()
            .unwrap()
            .starts_with("sha256:"),
        "{start}"
    );
    let refused = records
        .iter()
        .find(|r| r["kind"] == "runbook-request-refused")
        .unwrap();
    assert_eq!(refused["source"], "sandbox", "{refused}");
    assert_eq!(refused["reported_from"], "inside", "{refused}");
    let approval = records
        .iter()
        .find(|r| r["kind"] == "runbook-evidence" && r["pre_approved"] == true);
    assert!(approval.is_some(), "pre-approval recorded");

    // The timeline: each runbook record on its line, then the steps.
    let shown = std::process::Command::new(STEPPROOF)
        .args(["audit", "show"])
        .arg(&log)
        .output()
        .unwrap();
    assert!(shown.status.success(), "{}", describe(&shown));
    let shown = String::from_utf8_lossy(&shown.stdout).into_owned();
    for row in [
        "runbook-step-opened step write · Fix the code",
        "runbook-complete-requested step write · attempt 1",
        "step write · attempt 1 · command `sh -c",
        "exit 1 (wanted 0) in ",
        "step write · attempt 1 · FAILED, 2 attempt(s) left",
        "step write · attempt 2 · passed",
        "runbook three-steps (sha256:",
        ", ended: complete",
        "step write            passed   attempts 2 · ",
        "step notes            passed   attempts 1 · ",
        "step gate             passed   attempts 1 · ",
        "evidence: files_changed notes/*.md (1 changed) · held",
        "evidence: approval by the tester: pre-approved (--approve) · held",
    ] {
        assert!(shown.contains(row), "{row:?} not in:\n{shown}");
    }
    // The CI summary: a table of the steps.
    let md = fs::read_to_string(&summary).unwrap();
    for row in [
        "### Runbook `three-steps`",
        "| step | verdict | attempts | evidence (last attempt) | duration |",
        "| `write` | passed | 2 | files_exist code.txt · held<br>command `sh -c",
        "exit 0 (wanted 0) in ",
        "| `gate` | passed | 1 | approval by the tester: pre-approved (--approve) · held<br>**passed, covering its evidence items only** | ",
    ] {
        assert!(md.contains(row), "{row:?} not in:\n{md}");
    }
});

/// The agent asks for the gate's approval again (twice more): what a missing approval costs.
fn asking_again() -> String {
    format!(
        "{}$S step complete --step gate --wait; echo \"complete-5=$?\"\n$S step complete --step gate --wait; echo \"complete-6=$?\"\n$S step status\n",
        agent_script()
    )
}

/// The gate step's records: no `runbook-step-failed`, one `runbook-step-not-approved` per ask,
/// each with the attempt given back; the run ends with the approval missing.
fn no_attempt_spent(log: &Path, asks: usize, missing: &str) {
    let records = records(log);
    let of = |kind: &str| -> Vec<&serde_json::Value> {
        records
            .iter()
            .filter(|r| r["kind"] == kind && r["step"] == "gate")
            .collect()
    };
    assert!(of("runbook-step-failed").is_empty(), "{records:?}");
    let not_approved = of("runbook-step-not-approved");
    assert_eq!(not_approved.len(), asks, "{not_approved:?}");
    for r in &not_approved {
        assert_eq!(r["attempt"], 1, "{r}");
        assert_eq!(r["attempt_counted"], false, "{r}");
        assert_eq!(r["missing"], missing, "{r}");
    }
    let ended = records
        .iter()
        .find(|r| r["kind"] == "runbook-ended")
        .unwrap();
    assert_eq!(ended["ending"], "approval-missing", "{ended}");
    assert_eq!(ended["missing"], missing, "{ended}");
}

// In --ci without --approve nobody can approve: the completion says so, uses no attempt (the
// step has one: on_fail = "block"), asking again gets the same answer, and the run ends with
// the approval missing (115), the step open for a run with --approve to continue.
both!(ci_denies_an_approval_without_pre_approval, |w: &World| {
    setup(w, "1h", &asking_again());
    let out = run(w, &["--ci"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let all = describe(&out);
    for n in 4..=6 {
        assert!(text.contains(&format!("complete-{n}=1")), "{all}");
    }
    assert_eq!(
        text.matches("step gate NOT approved: no person can approve it in this run: it runs with --ci and without `--approve gate`").count(),
        3,
        "{all}"
    );
    assert!(
        text.contains(
            "This did not use an attempt (attempts are for fixing the work): 1 of 1 left."
        ) && text.contains("Asking again will not help, and changing the work will not either.")
            && text.contains("No other step is open: end your turn")
            && text.contains("a run started with `--approve gate` continues from here"),
        "{all}"
    );
    assert!(!text.contains("No attempt is left"), "{all}");
    assert!(text.contains("OPEN     gate"), "{all}");
    assert_eq!(out.status.code(), Some(115), "{all}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("step gate waits for a person's approval (impossible)")
            && stderr.contains("with `--approve gate` in --ci"),
        "{all}"
    );
    let log = support::audit_log_named(&stderr);
    verify(&log);
    no_attempt_spent(&log, 3, "impossible");
    // The summary and the timeline say it too.
    let shown = std::process::Command::new(STEPPROOF)
        .args(["audit", "show"])
        .arg(&log)
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout).into_owned();
    assert!(
        shown.contains("NOT approved (impossible): the attempt not counted, 1 attempt(s) left")
            && shown.contains("ended: approval-missing")
            && shown.contains("not approved (impossible)"),
        "{shown}"
    );
});

/// Runs the agent without --ci and answers the approval from outside (or not at all).
fn approval_run(w: &World, deadline: &str, answer: Option<&str>) -> (String, i32, PathBuf) {
    approval_run_with(w, deadline, answer, &agent_script())
}

fn approval_run_with(
    w: &World,
    deadline: &str,
    answer: Option<&str>,
    script: &str,
) -> (String, i32, PathBuf) {
    setup(w, deadline, script);
    let mut child = w
        .command(&["--runbook", "runbook.toml"], &["/bin/sh", "agent.sh"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut said = String::new();
    for line in BufReader::new(stderr).lines() {
        let line = line.unwrap();
        said.push_str(&line);
        said.push('\n');
        if let (Some(verb), Some(at)) = (answer, line.find("`stepproof approve ")) {
            let run_id = line[at..].split(' ').nth(2).unwrap().to_string();
            let mut cmd = w.as_owner(&client_binary(w));
            w.clean_env(&mut cmd);
            cmd.args([verb, &run_id, "gate"]);
            if verb == "deny" {
                cmd.args(["--reason", "not today"]);
            }
            let out = cmd.output().unwrap();
            assert!(out.status.success(), "{verb}: {}", describe(&out));
        }
    }
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (
        format!("{text}\n{said}"),
        out.status.code().unwrap_or(-1),
        support::audit_log_named(&said),
    )
}

both!(approval_waits_for_a_person_outside, |w: &World| {
    let (text, code, log) = approval_run(w, "1h", Some("approve"));
    assert!(text.contains("complete-4=0"), "{text}");
    assert_eq!(code, 0, "{text}");
    verify(&log);
    assert!(
        records(&log)
            .iter()
            .any(|r| r["kind"] == "runbook-approval" && r["approved"] == true)
    );
});

// No answer before the deadline: not approved, no attempt spent; asking again asks again.
both!(a_deadline_denies_an_approval, |w: &World| {
    let (text, code, log) = approval_run_with(w, "2s", None, &asking_again());
    for n in 4..=6 {
        assert!(text.contains(&format!("complete-{n}=1")), "{text}");
    }
    assert_eq!(
        text.matches("step gate NOT approved: no answer before the deadline (2s).")
            .count(),
        3,
        "{text}"
    );
    assert!(
        text.contains("Changing the work will not help; asking again asks the tester again, with a new deadline."),
        "{text}"
    );
    assert_eq!(code, 115, "{text}");
    verify(&log);
    no_attempt_spent(&log, 3, "deadline");
});

// A person's denial: its reason reaches the agent, no attempt is spent, and the run ends with
// the approval missing.
both!(a_denial_spends_no_attempt, |w: &World| {
    let (text, code, log) = approval_run(w, "1h", Some("deny"));
    assert!(text.contains("complete-4=1"), "{text}");
    assert!(
        text.contains("step gate NOT approved: the tester denied it: not today.")
            && text.contains("If the reason asks for a change, make it and ask again"),
        "{text}"
    );
    assert_eq!(code, 115, "{text}");
    verify(&log);
    no_attempt_spent(&log, 1, "denied");
});

both!(modelless_verifiers_and_errors_stop_launch, |w: &World| {
    fs::write(
        w.workspace.join("runbook.toml"),
        "id = \"v\"\ntitle = \"t\"\nowner = \"o\"\n[[steps]]\nid = \"s\"\ntitle = \"t\"\ninstructions = \"i\"\nacceptance = [\"a\"]\n[[steps.evidence]]\nverifier = { tier = 2 }\n[[steps.evidence]]\nfiles_exist = { paths = [\"x\"] }\n",
    )
    .unwrap();
    support::chown_tree(&w.workspace, w.owner);
    let out = w
        .command(&["--runbook", "runbook.toml"], &["true"])
        .output()
        .unwrap();
    // The runbook is the caller's to fix: refused, not an infrastructure failure.
    assert_eq!(out.status.code(), Some(120), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("10:14: error: step `s`: verifier tier 2 names no model"),
        "{}",
        describe(&out)
    );
    fs::write(
        w.workspace.join("runbook.toml"),
        "id = \"v\"\ntitle = \"t\"\nowner = \"o\"\n[[steps]]\nid = \"s\"\ntitle = \"t\"\ninstructions = \"i\"\ndepends_on = [\"nope\"]\n[[steps.evidence]]\nfiles_exist = { paths = [\"x\"] }\n",
    )
    .unwrap();
    let out = w
        .command(&["--runbook", "runbook.toml"], &["true"])
        .output()
        .unwrap();
    // The runbook is the caller's to fix: refused, not an infrastructure failure.
    assert_eq!(out.status.code(), Some(120), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("runbook.toml:8:"),
        "{}",
        describe(&out)
    );
    let _ = RUN;
});

fn line_hash_of_last(text: &str) -> String {
    use sha2::Digest;
    let last = text.lines().last().unwrap();
    hex::encode(sha2::Sha256::digest(last.as_bytes()))
}

/// The log under the home's run directories whose `run-start` names a runbook (the killed
/// run's: its supervisor never said where its log was).
fn runbook_logs(w: &World) -> Vec<PathBuf> {
    let runs = w.home.join(".local/state/stepproof/runs");
    let mut logs: Vec<PathBuf> = fs::read_dir(&runs)
        .unwrap()
        .flatten()
        .map(|e| e.path().join("audit.jsonl"))
        .filter(|log| {
            fs::read_to_string(log).is_ok_and(|t| {
                t.lines().any(|l| {
                    serde_json::from_str::<serde_json::Value>(l)
                        .is_ok_and(|r| r["kind"] == "run-start" && r["runbook"]["id"].is_string())
                })
            })
        })
        .collect();
    logs.sort();
    logs
}

both!(
    a_killed_run_is_continued_from_its_verified_log,
    |w: &World| {
        let first = r#"S=/run/stepproof/stepproof
echo fixed > code.txt
$S step complete; echo "complete-1=$?"
echo step1-done
sleep 60
"#;
        setup(w, "1h", first);
        let mut child = w
            .command(&["--runbook", "runbook.toml"], &["/bin/sh", "agent.sh"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut said = String::new();
        for line in BufReader::new(stdout).lines() {
            let line = line.unwrap();
            said.push_str(&line);
            said.push('\n');
            if line == "step1-done" {
                // The supervisor dies mid-run: no run-end, no runbook-ended.
                nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(child.id() as i32),
                    nix::sys::signal::Signal::SIGKILL,
                )
                .unwrap();
                break;
            }
        }
        let _ = child.wait();
        assert!(said.contains("complete-1=0"), "{said}");
        let logs = runbook_logs(w);
        assert_eq!(logs.len(), 1, "{logs:?}");
        let earlier = logs[0].clone();
        let kinds_before = kinds(&earlier);
        assert!(
            !kinds_before.iter().any(|k| k == "run-end"),
            "{kinds_before:?}"
        );
        let text = fs::read_to_string(&earlier).unwrap();
        let head = line_hash_of_last(&text);

        // A tampered earlier log: refused, nothing runs.
        let second = r#"S=/run/stepproof/stepproof
$S step status
echo new > notes/a.md
$S step complete --step notes; echo "complete-notes=$?"
$S step complete --step gate; echo "complete-gate=$?"
"#;
        fs::write(w.workspace.join("agent.sh"), second).unwrap();
        support::chown_tree(&w.workspace, w.owner);
        let tampered = text.replacen("\"attempt\":1", "\"attempt\":2", 1);
        assert_ne!(tampered, text);
        fs::write(&earlier, &tampered).unwrap();
        let out = run(w, &["--ci", "--approve", "gate"]);
        assert_eq!(out.status.code(), Some(120), "{}", describe(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("cannot be continued") && err.contains("--runbook-fresh"),
            "{}",
            describe(&out)
        );
        assert!(!String::from_utf8_lossy(&out.stdout).contains("complete-notes"));

        // The log as it was: continued, step 1 passed and step 2 open.
        fs::write(&earlier, &text).unwrap();
        let out = run(w, &["--ci", "--approve", "gate"]);
        let all = describe(&out);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("continuing run"),
            "{all}"
        );
        assert!(stdout.contains("passed   write"), "{all}");
        assert!(stdout.contains("OPEN     notes"), "{all}");
        assert!(stdout.contains("complete-notes=0"), "{all}");
        assert!(stdout.contains("complete-gate=0"), "{all}");
        assert_eq!(out.status.code(), Some(0), "{all}");
        let log = support::audit_log_named(&String::from_utf8_lossy(&out.stderr));
        verify(&log);
        let records = records(&log);
        let continued = records
            .iter()
            .find(|r| r["kind"] == "runbook-continued")
            .unwrap_or_else(|| panic!("no runbook-continued: {all}"));
        assert_eq!(continued["log_head"], head.as_str(), "{continued}");
        assert_eq!(continued["state"][0]["status"], "passed", "{continued}");
        assert_eq!(continued["state"][0]["attempts"], 1, "{continued}");
        assert_eq!(continued["state"][1]["status"], "open", "{continued}");
        // The first step did not open again.
        let opened: Vec<&str> = records
            .iter()
            .filter(|r| r["kind"] == "runbook-step-opened")
            .filter_map(|r| r["step"].as_str())
            .collect();
        assert_eq!(opened, ["notes", "gate"], "{all}");

        // Completed: the next run starts afresh.
        setup(w, "1h", "/run/stepproof/stepproof step status\n");
        let out = run(w, &["--ci"]);
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("completed the runbook: starting afresh"),
            "{}",
            describe(&out)
        );
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("OPEN     write"),
            "{}",
            describe(&out)
        );
    }
);

const FREEZE_RUNBOOK: &str = r#"
id = "freeze"
title = "Evidence on one state"
owner = "tests"

[[steps]]
id = "check"
title = "Check"
instructions = "Ask for completion"
[[steps.evidence]]
command = { run = ["sh", "-c", "sleep 1; true"] }
"#;

// The agent's background loop writes a tick every 50 ms; while the evidence command runs
// (~1 s) the agent's processes are frozen, so the ticks show a gap over that window, and
// continue after it (thawed).
both!(the_agent_is_frozen_while_evidence_runs, |w: &World| {
    fs::write(w.workspace.join("runbook.toml"), FREEZE_RUNBOOK).unwrap();
    fs::write(
        w.workspace.join("agent.sh"),
        r#"( while :; do date +%s%N >> ticks.txt; sleep 0.05; done ) &
LOOP=$!
sleep 0.5
/run/stepproof/stepproof step complete; echo "complete=$?"
sleep 0.5
kill $LOOP
"#,
    )
    .unwrap();
    support::chown_tree(&w.workspace, w.owner);
    let out = run(w, &[]);
    let all = describe(&out);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("complete=0"),
        "{all}"
    );
    let log = support::audit_log_named(&String::from_utf8_lossy(&out.stderr));
    verify(&log);
    let records = records(&log);
    let evidence = records
        .iter()
        .find(|r| r["kind"] == "runbook-evidence" && r.get("agent_frozen").is_some())
        .unwrap_or_else(|| panic!("no command evidence record: {records:?}"));
    if evidence["frozen"] != true {
        // Only where the host gives this user no cgroup to freeze in: the record says why.
        let why = evidence["agent_frozen"].as_str().unwrap_or_default();
        assert!(
            matches!(w.who, Who::User) && why.starts_with("not frozen: the run has no cgroup"),
            "{evidence}"
        );
        println!("skipped: the freezer check as the test user ({why})");
        return;
    }
    let ticks: Vec<u64> = fs::read_to_string(w.workspace.join("ticks.txt"))
        .unwrap()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    let gaps: Vec<(u64, usize)> = ticks
        .windows(2)
        .enumerate()
        .map(|(i, p)| (p[1].saturating_sub(p[0]), i))
        .collect();
    let (gap, at) = gaps.iter().copied().max().expect("ticks");
    assert!(gap >= 800_000_000, "largest gap {gap} ns in {ticks:?}");
    // Thawed afterwards: the loop went on ticking after the gap.
    assert!(ticks.len() > at + 3, "no ticks after the gap: {ticks:?}");
});

const LEDGER_RUNBOOK: &str = r#"
id = "ledger"
title = "Writes attributed"
owner = "tests"

[[steps]]
id = "notes"
title = "Write notes"
instructions = "Change notes/a.md"
[[steps.evidence]]
files_changed = { paths = ["notes/*.md"] }
"#;

/// Claude Code's PostToolUse input for a Write of `notes/a.md`, through the real hook.
const POST_WRITE: &str = r#"printf '%s' '{"hook_event_name":"PostToolUse","session_id":"s","tool_use_id":"toolu_TAG","tool_name":"Write","tool_input":{"file_path":"'"$PWD"'/notes/a.md","content":"x"},"tool_response":{"type":"update","filePath":"'"$PWD"'/notes/a.md"},"cwd":"'"$PWD"'"}' | /run/stepproof/stepproof-hook --audit-socket /run/stepproof/audit.sock; echo "post-TAG=$?""#;

// The PostToolUse ledger attributes a write to the step open when it was made; a ledger entry
// claiming a write the supervisor's hashes do not confirm does not make files_changed hold.
both!(
    the_ledger_attributes_writes_but_never_proves,
    |w: &World| {
        fs::write(w.workspace.join("runbook.toml"), LEDGER_RUNBOOK).unwrap();
        fs::create_dir_all(w.workspace.join("notes")).unwrap();
        fs::write(w.workspace.join("notes/a.md"), "old\n").unwrap();
        fs::write(
        w.workspace.join("agent.sh"),
        format!(
            "{}\n/run/stepproof/stepproof step complete; echo \"complete-1=$?\"\necho new > notes/a.md\n{}\n/run/stepproof/stepproof step complete; echo \"complete-2=$?\"\n",
            POST_WRITE.replace("TAG", "claim"),
            POST_WRITE.replace("TAG", "real"),
        ),
    )
    .unwrap();
        support::chown_tree(&w.workspace, w.owner);
        let out = run(w, &[]);
        let all = describe(&out);
        let stdout = String::from_utf8_lossy(&out.stdout);
        for line in ["post-claim=0", "post-real=0", "complete-2=0"] {
            assert!(stdout.contains(line), "{line}: {all}");
        }
        assert!(
            !stdout.contains("complete-1=0"),
            "a claim alone passed: {all}"
        );
        let log = support::audit_log_named(&String::from_utf8_lossy(&out.stderr));
        verify(&log);
        let records = records(&log);
        let evidence: Vec<&serde_json::Value> = records
            .iter()
            .filter(|r| r["kind"] == "runbook-evidence" && r.get("attributed_to").is_some())
            .collect();
        assert_eq!(evidence.len(), 2, "{records:?}");
        // First attempt: the ledger claims a write, the file is as it was when the step opened.
        let first = evidence[0];
        assert_eq!(first["held"], false, "{first}");
        let claim = &first["attributed_to"][0];
        let inside: Vec<&serde_json::Value> = records
            .iter()
            .filter(|r| r["source"] == "sandbox")
            .collect();
        assert_eq!(
            claim["tool_use_id"], "toolu_claim",
            "{first}\n{inside:?}\n{all}"
        );
        assert_eq!(claim["step"], "notes", "{first}");
        assert_eq!(claim["reported_from"], "inside", "{first}");
        assert_eq!(claim["path"], "notes/a.md", "{first}");
        // Second: the real write, named with its step and confirmed by the supervisor's hash.
        let second = evidence[1];
        assert_eq!(second["held"], true, "{second}");
        let real = second["attributed_to"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["tool_use_id"] == "toolu_real")
            .unwrap_or_else(|| panic!("{second}"));
        assert_eq!(real["open_steps"], serde_json::json!(["notes"]), "{second}");
        assert_eq!(real["matches_supervisor_hash"], true, "{second}");
        let new_hash = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(b"new\n"));
        assert_eq!(real["sha256"], new_hash.as_str(), "{second}");
    }
);

/// A worker that tries to get past its runbook from inside, with what its shell can do.
fn tamper_script(runs: &Path) -> String {
    let forged = [
        r#"{"op":"approve","step":"gate"}"#,
        r#"{"op":"complete","step":"write","approved":true}"#,
        r#"{"op":"verdict","step":"write","verdict":"pass","model":"verifier"}"#,
        r#"{"op":"complete","verdict":"pass","reasons":["looks good"]}"#,
    ];
    let mut script = format!(
        r#"S=/run/stepproof/stepproof
D=/run/stepproof/runbook
echo '{{"open":[],"steps":[]}}' > $D/state.json; echo "state-write=$?"
cp $D/state.json $D/.state.json.tmp && mv $D/.state.json.tmp $D/state.json; echo "state-replace=$?"
cat /dev/null > $D/policy-0; echo "policy-write=$?"
rm -f $D/policy-0; echo "policy-rm=$?"
ln -s /dev/null $D/policy-1; echo "policy-add=$?"
umount $D 2>/dev/null; echo "umount=$?"
ls {runs} >/dev/null 2>&1; echo "runs-visible=$?"
test -n "$(find /run /tmp "$HOME" -name approve.sock 2>/dev/null)"; echo "approve-sock-found=$?"
$S approve 1-1 gate; echo "client-approve=$?"
ls /run/claude-config/agents
echo '---' > /run/claude-config/agents/verifier.md; echo "verifier-def=$?"
echo 'run anything' >> /run/claude-config/commands/step-complete.md; echo "command-write=$?"
echo 'tools: Bash' >> /run/claude-config/agents/runbook-author.md; echo "author-write=$?"
mv /run/claude-config/agents /run/claude-config/agents-old; echo "agents-move=$?"
test -e /run/claude-config/agents/verifier.md; echo "verifier-exists=$?"
"#,
        runs = runs.display()
    );
    for (n, message) in forged.iter().enumerate() {
        script.push_str(&format!(
            "python3 -c 'import socket; s=socket.socket(socket.AF_UNIX); s.connect(\"/run/stepproof/runbook/step.sock\"); s.sendall(b\"\"\"{message}\\n\"\"\"); print(\"forged-{n}:\", s.recv(4096).decode())'\n"
        ));
    }
    script.push_str("$S step status\n");
    script
}

// The worker cannot write the state or a step's policy, cannot reach the approval channel,
// cannot give itself a verdict or an approval by message, cannot install a verifier agent or
// change the shipped commands; what reached the supervisor is on the record, the chain
// verifies, and the step is where it was.
both!(a_worker_cannot_tamper_with_its_runbook, |w: &World| {
    let runs = w.home.join(".local/state/stepproof/runs");
    setup(w, "1h", &tamper_script(&runs));
    let out = run(w, &[]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let all = describe(&out);
    for what in [
        "state-write",
        "state-replace",
        "policy-write",
        "policy-rm",
        "policy-add",
        "umount",
        "runs-visible",
        "approve-sock-found",
        "client-approve",
        "verifier-def",
        "command-write",
        "author-write",
        "agents-move",
        "verifier-exists",
    ] {
        assert!(
            text.contains(&format!("{what}=")),
            "{what} did not run: {all}"
        );
        assert!(
            !text.contains(&format!("{what}=0")),
            "{what} succeeded: {all}"
        );
    }
    // The agents StepProof ships, and no verifier among them.
    assert!(text.contains("runbook-author.md"), "{all}");
    assert!(!text.contains("verifier.md\n"), "{all}");
    for n in 0..4 {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("forged-{n}:")))
            .unwrap_or_else(|| panic!("forged-{n} did not run: {all}"));
        assert!(line.contains("refused: not a request"), "{line}");
    }
    // Nothing moved: the first step is open, nothing passed.
    assert!(text.contains("OPEN     write"), "{all}");
    assert!(text.contains("waiting  notes"), "{all}");
    assert_eq!(out.status.code(), Some(116), "{all}");
    let log = support::audit_log_named(&String::from_utf8_lossy(&out.stderr));
    verify(&log);
    let records = records(&log);
    let refused: Vec<&serde_json::Value> = records
        .iter()
        .filter(|r| r["kind"] == "runbook-request-refused")
        .collect();
    assert_eq!(refused.len(), 4, "{records:#?}");
    for r in &refused {
        assert_eq!(r["source"], "sandbox", "{r}");
        assert!(
            r["message"].as_str().is_some_and(|m| m.contains("\"op\"")),
            "{r}"
        );
    }
    assert!(
        refused
            .iter()
            .any(|r| r["message"].as_str().unwrap().contains("verifier")),
        "{refused:#?}"
    );
    assert!(
        !records
            .iter()
            .any(|r| r["kind"] == "runbook-step-passed" || r["kind"] == "runbook-approval")
    );
    let abandoned = records
        .iter()
        .find(|r| r["kind"] == "runbook-abandoned")
        .unwrap_or_else(|| panic!("{records:#?}"));
    assert_eq!(
        abandoned["open"],
        serde_json::json!(["write"]),
        "{abandoned}"
    );
    assert_eq!(abandoned["why"], "the agent exited with steps open");
});

// `stepproof step abandon` from inside: recorded, the open steps abandoned, every later tool
// call denied by the hook, exit 116; a second abandon is refused.
both!(abandon_by_request_stops_the_run, |w: &World| {
    setup(
        w,
        "1h",
        &format!(
            "S=/run/stepproof/stepproof\n$S step abandon --reason 'not today'; echo \"abandon-1=$?\"\n$S step abandon; echo \"abandon-2=$?\"\n$S step status\n{HOOK_CALL}\n"
        )
        .replace("rm -rf build", "echo hi"),
    );
    let out = run(w, &[]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let all = describe(&out);
    assert!(
        text.contains("abandon-1=0") && text.contains("abandoned at your request"),
        "{all}"
    );
    assert!(
        text.contains("abandon-2=1") && text.contains("nothing to abandon"),
        "{all}"
    );
    assert!(text.contains("ABANDONED write"), "{all}");
    assert!(text.contains("hook-exit=2"), "{all}");
    assert_eq!(out.status.code(), Some(116), "{all}");
    let log = support::audit_log_named(&String::from_utf8_lossy(&out.stderr));
    verify(&log);
    let kinds = kinds(&log);
    for kind in [
        "runbook-abandon-requested",
        "runbook-abandon-refused",
        "runbook-abandoned",
        "runbook-ended",
    ] {
        assert!(kinds.iter().any(|k| k == kind), "{kind}: {kinds:?}");
    }
    let records = records(&log);
    let abandoned = records
        .iter()
        .find(|r| r["kind"] == "runbook-abandoned")
        .unwrap();
    assert_eq!(abandoned["requested"], true, "{abandoned}");
    assert_eq!(
        abandoned["open"],
        serde_json::json!(["write"]),
        "{abandoned}"
    );
    assert_eq!(
        abandoned["why"],
        "abandoned by request from inside: not today"
    );
});

const VOID_RUNBOOK: &str = r#"
id = "void"
title = "A pass is final only with the run"
owner = "tests"

[[steps]]
id = "write"
title = "Fix the code"
instructions = "Make code.txt say fixed"
[[steps.deny.files]]
id = "keep-notes"
reason = "notes are not this step's work"
access = "write"
paths = ["notes/**"]
[[steps.evidence]]
command = { run = ["grep", "-q", "fixed", "code.txt"] }
"#;

/// The step passes, then (the first time) the agent plants what the host would act on: the
/// sweep finds it (exit 123), and the pass is void — in the chain, `audit show`, the summary
/// and for the next run, which opens the step again and proves it.
const VOID_AGENT: &str = r#"S=/run/stepproof/stepproof
$S step status
echo fixed > code.txt
$S step complete; echo "complete=$?"
if [ ! -e second-run ]; then echo 'export EVIL=1' > .envrc; echo "planted=$?"; fi
"#;

both!(
    a_pass_is_void_when_the_runs_sweep_finds_tampering,
    |w: &World| {
        fs::write(w.workspace.join("runbook.toml"), VOID_RUNBOOK).unwrap();
        fs::write(w.workspace.join("code.txt"), "broken\n").unwrap();
        fs::create_dir_all(w.workspace.join("notes")).unwrap();
        fs::write(w.workspace.join("notes/a.md"), "old\n").unwrap();
        fs::write(w.workspace.join("agent.sh"), VOID_AGENT).unwrap();
        support::chown_tree(&w.workspace, w.owner);
        let out_dir = w.base.join("out");
        fs::create_dir_all(&out_dir).unwrap();
        fs::set_permissions(
            &out_dir,
            std::os::unix::fs::PermissionsExt::from_mode(0o777),
        )
        .unwrap();
        let summary = out_dir.join("summary.md");
        let out = run(w, &["--summary", summary.to_str().unwrap()]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let all = describe(&out);
        // The step passed, the runbook completed; then the sweep found the planted file.
        assert!(
            text.contains("complete=0") && text.contains("the runbook is complete"),
            "{all}"
        );
        assert!(text.contains("planted=0"), "{all}");
        assert_eq!(out.status.code(), Some(123), "{all}");
        assert!(
        stderr.contains("TAMPERING")
            && stderr.contains("runbook: VOID because of the tampering above: the runbook's completion, the passes of write"),
        "{all}"
    );
        // The chain: the pass, the completion, the sweep naming .envrc, then the void records,
        // then the run's end.
        let log = support::audit_log_named(&stderr);
        verify(&log);
        let records = records(&log);
        let at = |kind: &str| {
            records
                .iter()
                .position(|r| r["kind"] == kind && r["source"] == "supervisor")
                .unwrap_or_else(|| panic!("no {kind} in {records:#?}"))
        };
        let (passed, complete, sweep, void, runbook_void, end) = (
            at("runbook-step-passed"),
            at("runbook-complete"),
            at("sweep"),
            at("runbook-step-void"),
            at("runbook-void"),
            at("run-end"),
        );
        assert!(
            passed < complete
                && complete < sweep
                && sweep < void
                && void < runbook_void
                && runbook_void < end,
            "{records:#?}"
        );
        assert!(
            records[sweep]["findings"].to_string().contains(".envrc"),
            "{}",
            records[sweep]
        );
        assert_eq!(records[void]["step"], "write", "{}", records[void]);
        assert!(
            records[void]["findings"].to_string().contains(".envrc"),
            "{}",
            records[void]
        );
        assert_eq!(records[runbook_void]["completion_void"], true);
        assert_eq!(records[runbook_void]["steps"], serde_json::json!(["write"]));
        // What the pass covered is in its record.
        assert_eq!(
            records[passed]["covered"]["protected"],
            serde_json::json!(["notes/**"]),
            "{}",
            records[passed]
        );
        // `audit show`: the pass with what it covered, then void; the steps table says VOID.
        let shown = std::process::Command::new(STEPPROOF)
            .args(["audit", "show"])
            .arg(&log)
            .output()
            .unwrap();
        assert!(shown.status.success(), "{}", describe(&shown));
        let shown = String::from_utf8_lossy(&shown.stdout).into_owned();
        for line in [
            "step write · attempt 1 · passed, covering protected notes/** unchanged",
            "runbook-step-void step write · attempt 1 · pass VOID: the run's sweep found tampering (1 finding; exit 123)",
            "VOID, the runbook's completion with it: the run's sweep found tampering",
            ", ended: VOID (was complete):",
            "step write            VOID     attempts 1",
            "      proof: passed, covering protected notes/** unchanged",
        ] {
            assert!(shown.contains(line), "{line:?} not in:\n{shown}");
        }
        // The summary says so too.
        let md = fs::read_to_string(&summary).unwrap();
        for row in [
            "ended: **VOID (was complete)**",
            "**VOID**: the run's sweep found tampering",
            "| `write` | VOID | 1 |",
            "**passed, covering protected notes/** unchanged",
        ] {
            assert!(md.contains(row), "{row:?} not in:\n{md}");
        }

        // The next run continues it: the void step is open again, not passed, and is proven anew.
        fs::write(w.workspace.join("second-run"), "").unwrap();
        support::chown_tree(&w.workspace, w.owner);
        let out = run(w, &[]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let all = describe(&out);
        assert!(stderr.contains("continuing run"), "{all}");
        assert!(text.contains("OPEN     write"), "{all}");
        assert!(text.contains("complete=0"), "{all}");
        assert_eq!(out.status.code(), Some(0), "{all}");
        let log = support::audit_log_named(&stderr);
        verify(&log);
        let records = records_of_last_run(&log);
        let continued = records
            .iter()
            .find(|r| r["kind"] == "runbook-continued")
            .unwrap();
        assert_eq!(continued["state"][0]["status"], "open", "{continued}");
        assert_eq!(continued["state"][0]["last_verdict"], "void", "{continued}");
        assert!(records.iter().any(|r| r["kind"] == "runbook-complete"));
        assert!(!records.iter().any(|r| r["kind"] == "runbook-void"));
    }
);

/// The records of the last run in a log (from its last `run-start`).
fn records_of_last_run(log: &Path) -> Vec<serde_json::Value> {
    let all = records(log);
    let start = all
        .iter()
        .rposition(|r| r["kind"] == "run-start")
        .unwrap_or(0);
    all[start..].to_vec()
}

// A run whose log went elsewhere (`--audit-log`) is continued by the next run of the runbook in
// the workspace: its run directory names the log (it once was passed over without a word).
both!(a_run_logged_elsewhere_is_continued, |w: &World| {
    setup(
        w,
        "1h",
        "S=/run/stepproof/stepproof\necho fixed > code.txt\n$S step complete; echo \"complete-1=$?\"\n",
    );
    let logs = w.base.join("logs");
    fs::create_dir_all(&logs).unwrap();
    fs::set_permissions(&logs, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let elsewhere = logs.join("first.jsonl");
    let out = run(w, &["--audit-log", elsewhere.to_str().unwrap()]);
    let all = describe(&out);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("complete-1=0"),
        "{all}"
    );
    assert_eq!(out.status.code(), Some(116), "{all}");
    let second = "S=/run/stepproof/stepproof\n$S step status\necho new > notes/a.md\n$S step complete --step notes; echo \"complete-notes=$?\"\n";
    fs::write(w.workspace.join("agent.sh"), second).unwrap();
    support::chown_tree(&w.workspace, w.owner);
    let out = run(w, &["--ci"]);
    let all = describe(&out);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("continuing run"),
        "{all}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("passed   write"), "{all}");
    assert!(stdout.contains("complete-notes=0"), "{all}");
    let log = support::audit_log_named(&String::from_utf8_lossy(&out.stderr));
    let continued = records(&log)
        .into_iter()
        .find(|r| r["kind"] == "runbook-continued")
        .unwrap_or_else(|| panic!("no runbook-continued: {all}"));
    assert_eq!(continued["state"][0]["status"], "passed", "{continued}");
});
