//! Contract tests: the real `stepproof-hook` binary fed recorded Claude Code inputs for every
//! event, and the fail-closed paths.
mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use stepproof_hook::policy::{Context, compile};

const HOOK: &str = env!("CARGO_BIN_EXE_stepproof-hook");

struct Setup {
    dir: tempfile::TempDir,
    policy: PathBuf,
}

impl Setup {
    fn new(profile: &str) -> Setup {
        let dir = tempfile::tempdir().expect("tempdir");
        let workspace = dir.path().join("ws");
        std::fs::create_dir_all(workspace.join("src")).expect("mkdir");
        let context = Context {
            workspace: workspace.clone(),
            home: PathBuf::from(common::HOME),
            profile_name: profile.to_string(),
        };
        let policy = compile(&common::builtin_config(profile), &context).expect("compiles");
        let path = dir.path().join("policy");
        let bytes = stepproof_hook::load::encode(&policy).expect("encodes");
        std::fs::write(&path, bytes).expect("write policy");
        Setup { dir, policy: path }
    }

    fn workspace(&self) -> PathBuf {
        self.dir.path().join("ws")
    }

    fn fixture(&self, name: &str) -> Vec<u8> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name);
        let text = std::fs::read_to_string(&path).expect("fixture");
        text.replace("{{WS}}", &self.workspace().to_string_lossy())
            .into_bytes()
    }
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {:?}", self.stdout))
    }

    fn decision(&self) -> String {
        self.json()["hookSpecificOutput"]["permissionDecision"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
}

/// The records `connections` hook runs send to `listener`, in order, as JSON.
fn collect_records(
    listener: UnixListener,
    connections: usize,
) -> std::thread::JoinHandle<Vec<Value>> {
    std::thread::spawn(move || {
        let mut records = Vec::new();
        for _ in 0..connections {
            let (stream, _) = listener.accept().expect("accept");
            for line in BufReader::new(stream).lines() {
                records.push(
                    serde_json::from_str::<Value>(&line.expect("line")).expect("record is JSON"),
                );
            }
        }
        records
    })
}

fn run(args: &[&str], stdin: &[u8]) -> Run {
    run_with_config(args, stdin, None)
}

/// The hook as Claude Code runs it, with `CLAUDE_CONFIG_DIR` (where the hook keeps which
/// sessions it oriented) set or not.
fn run_with_config(args: &[&str], stdin: &[u8], config: Option<&std::path::Path>) -> Run {
    let mut command = Command::new(HOOK);
    match config {
        Some(dir) => command.env("CLAUDE_CONFIG_DIR", dir),
        None => command.env_remove("CLAUDE_CONFIG_DIR"),
    };
    let mut child = command
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn hook");
    let mut input = child.stdin.take().expect("stdin");
    // The hook may stop reading early (oversized input); a broken pipe is fine.
    let _ = input.write_all(stdin);
    drop(input);
    let out = child.wait_with_output().expect("hook output");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).to_string(),
        stderr: String::from_utf8_lossy(&out.stderr).to_string(),
    }
}

fn run_fixture(setup: &Setup, name: &str) -> Run {
    run(
        &["--policy", setup.policy.to_str().expect("utf8")],
        &setup.fixture(name),
    )
}

#[test]
fn pre_tool_use_answers_allow_ask_deny() {
    let setup = Setup::new("default");
    for (fixture, decision) in [
        ("pre_bash_allow.json", "allow"),
        ("pre_write.json", "allow"),
        ("pre_edit.json", "allow"),
        ("pre_read.json", "allow"),
        ("pre_webfetch.json", "allow"),
        ("pre_subagent.json", "allow"),
        ("pre_bash_ask.json", "ask"),
    ] {
        let r = run_fixture(&setup, fixture);
        assert_eq!(r.code, 0, "{fixture}: {}", r.stderr);
        assert_eq!(r.decision(), decision, "{fixture}: {}", r.stdout);
        assert_eq!(
            r.json()["hookSpecificOutput"]["hookEventName"],
            "PreToolUse"
        );
        assert!(
            r.stderr.is_empty(),
            "{fixture} printed on stderr: {}",
            r.stderr
        );
    }
    for (fixture, rule) in [
        ("pre_bash_deny.json", "privilege"),
        ("pre_write_protected.json", "protected-paths"),
        ("pre_mcp.json", "unknown-tool"),
        ("pre_missing_input.json", "fail-closed"),
    ] {
        let r = run_fixture(&setup, fixture);
        assert_eq!(r.code, 2, "{fixture}");
        assert_eq!(r.decision(), "deny", "{fixture}");
        let reason = r.json()["hookSpecificOutput"]["permissionDecisionReason"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(
            reason.contains(&format!("(rule {rule})")),
            "{fixture}: {reason}"
        );
        assert_eq!(r.stderr.trim(), reason, "deny repeats the reason on stderr");
    }
}

#[test]
fn ci_denies_what_default_asks() {
    let setup = Setup::new("ci");
    let r = run_fixture(&setup, "pre_bash_ask.json");
    assert_eq!((r.code, r.decision()), (2, "deny".to_string()));
}

// Where the session runs is said once, in the managed CLAUDE.md the supervisor writes (see
// `contract::context_text`); without a runbook a prompt's hook answers nothing.
#[test]
fn without_a_runbook_context_events_answer_nothing() {
    let setup = Setup::new("default");
    for fixture in ["session_start.json", "user_prompt_submit.json"] {
        let r = run_fixture(&setup, fixture);
        assert_eq!(
            (r.code, r.stdout.as_str(), r.stderr.as_str()),
            (0, "", ""),
            "{fixture}"
        );
    }
}

#[test]
fn the_session_context_names_the_profile_and_what_runs_freely() {
    let setup = Setup::new("default");
    let policy = stepproof_hook::contract::load_policy_for(
        &setup.policy,
        &stepproof_hook::load::Needs::minimal(),
    )
    .expect("policy");
    let text = stepproof_hook::contract::context_text(&policy, true);
    assert!(
        text.contains("StepProof") && text.contains("'default'") && text.contains("git"),
        "{text}"
    );
    // Without a shell (a verifier's tools), no shell commands are listed.
    let text = stepproof_hook::contract::context_text(&policy, false);
    assert!(
        text.contains("'default'")
            && !text.contains("Shell commands")
            && !text.contains("git status"),
        "{text}"
    );
}

#[test]
fn observers_exit_zero_and_print_nothing() {
    let setup = Setup::new("default");
    for fixture in [
        // Without a runbook (2.1.328 takes no hookSpecificOutput from PreCompact).
        "pre_compact.json",
        "post_write.json",
        "post_bash.json",
        "post_failure.json",
        "post_compact.json",
        "stop.json",
        "subagent_start.json",
        "subagent_stop.json",
        "session_end.json",
        "permission_request.json",
        "future_event.json",
    ] {
        let r = run_fixture(&setup, fixture);
        assert_eq!(
            (r.code, r.stdout.as_str(), r.stderr.as_str()),
            (0, "", ""),
            "{fixture}"
        );
    }
}

// A Bash call the kernel refused as read-only (a protected file): the observer answers with
// context the model can act on, still exit 0.
#[test]
fn a_read_only_refusal_tells_the_model_what_it_means() {
    let setup = Setup::new("default");
    for event in ["PostToolUse", "PostToolUseFailure"] {
        let input = serde_json::json!({
            "hook_event_name": event,
            "session_id": "s",
            "cwd": setup.workspace(),
            "tool_name": "Bash",
            "tool_input": {"command": "git checkout other"},
            "tool_use_id": "t1",
            "tool_response": {"stdout": "", "stderr": "error: unable to unlink old '.github/workflows/ci.yml': Read-only file system\nSwitched to branch 'other'"},
            "error": "error: unable to unlink old '.github/workflows/ci.yml': Read-only file system",
        });
        let r = run(
            &["--policy", setup.policy.to_str().expect("utf8")],
            input.to_string().as_bytes(),
        );
        assert_eq!(r.code, 0, "{event}: {}", r.stderr);
        let out = r.json();
        assert_eq!(out["hookSpecificOutput"]["hookEventName"], event);
        let context = out["hookSpecificOutput"]["additionalContext"]
            .as_str()
            .expect("context");
        assert!(
            context.contains(".github/workflows/ci.yml") && context.contains("Do not commit"),
            "{context}"
        );
    }
}

#[test]
fn config_change_is_refused() {
    let setup = Setup::new("default");
    let r = run_fixture(&setup, "config_change.json");
    assert_eq!(r.code, 2);
    assert!(r.stdout.is_empty());
    assert!(r.stderr.contains("config-locked"));
    // Refused even when the policy cannot be read.
    let r = run(
        &["--policy", "/nonexistent/policy.json"],
        &setup.fixture("config_change.json"),
    );
    assert_eq!(r.code, 2);
    // The record names the settings and the file that changed.
    let socket = setup.dir.path().join("audit.sock");
    let listener = UnixListener::bind(&socket).expect("bind");
    let collector = collect_records(listener, 1);
    let policy = setup.policy.to_str().expect("utf8");
    let r = run(
        &[
            "--policy",
            policy,
            "--audit-socket",
            socket.to_str().expect("utf8"),
        ],
        &setup.fixture("config_change.json"),
    );
    assert_eq!(r.code, 2);
    let records = collector.join().expect("collector");
    assert_eq!(records.len(), 1, "{records:#?}");
    assert_eq!(records[0]["settings_source"], "project_settings");
    let file = setup.workspace().join(".claude/settings.json");
    assert_eq!(records[0]["file_path"], file.to_str().expect("utf8"));
}

// A failed Bash call's error text is what the command printed: its record carries a digest and
// a length, never the text (records leave the sandbox for the log and the collector).
#[test]
fn a_failures_error_text_is_recorded_as_a_digest() {
    let setup = Setup::new("default");
    let socket = setup.dir.path().join("audit.sock");
    let listener = UnixListener::bind(&socket).expect("bind");
    let collector = collect_records(listener, 1);
    let error = "Exit code 3\nAPI_TOKEN=planted-7f3e";
    let input = serde_json::json!({
        "hook_event_name": "PostToolUseFailure",
        "session_id": "s",
        "cwd": setup.workspace(),
        "tool_name": "Bash",
        "tool_input": {"command": "cat config.ini; exit 3"},
        "tool_use_id": "t1",
        "error": error,
    });
    let r = run(
        &[
            "--policy",
            setup.policy.to_str().expect("utf8"),
            "--audit-socket",
            socket.to_str().expect("utf8"),
            "--event",
            "PostToolUseFailure",
        ],
        input.to_string().as_bytes(),
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let records = collector.join().expect("collector");
    assert_eq!(records.len(), 1, "{records:#?}");
    let text = records[0].to_string();
    assert!(!text.contains("planted-7f3e"), "{text}");
    assert_eq!(records[0]["exit_status"], 3, "{text}");
    assert_eq!(records[0]["error_bytes"], error.len(), "{text}");
    let digest: String = <sha2::Sha256 as sha2::Digest>::digest(error.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(records[0]["error_sha256"], digest, "{text}");
}

// Claude Code 2.1.328 follows a failed call's PostToolUseFailure with a PostToolUse whose
// result is only the error text again (its hooks in managed settings, as StepProof registers
// them): that echo is neither recorded nor answered, so one call is one evidence record. An MCP
// tool's text result that happens to read "Error: …" is still recorded, as is every success.
#[test]
fn the_echo_of_a_failure_is_not_a_second_record() {
    let setup = Setup::new("default");
    let socket = setup.dir.path().join("audit.sock");
    let listener = UnixListener::bind(&socket).expect("bind");
    let collector = collect_records(listener, 2);
    let args = |event: &'static str| {
        vec![
            "--policy".to_string(),
            setup.policy.to_str().expect("utf8").to_string(),
            "--audit-socket".to_string(),
            socket.to_str().expect("utf8").to_string(),
            "--event".to_string(),
            event.to_string(),
        ]
    };
    let post = args("PostToolUse");
    let post: Vec<&str> = post.iter().map(String::as_str).collect();
    let echo = run(&post, &setup.fixture("post_failure_echo.json"));
    assert_eq!(
        (echo.code, echo.stdout.as_str()),
        (0, ""),
        "{}",
        echo.stderr
    );
    let mcp = serde_json::json!({
        "hook_event_name": "PostToolUse", "session_id": "s", "cwd": setup.workspace(),
        "tool_name": "mcp__notes__read", "tool_input": {}, "tool_use_id": "t2",
        "tool_response": "Error: is what the note says",
    });
    assert_eq!(run(&post, mcp.to_string().as_bytes()).code, 0);
    assert_eq!(run(&post, &setup.fixture("post_bash.json")).code, 0);
    let records = collector.join().expect("collector");
    let tools: Vec<&str> = records
        .iter()
        .map(|r| r["tool"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(tools, ["mcp__notes__read", "Bash"], "{records:#?}");
    assert_eq!(records[1]["tool_use_id"], "toolu_01ABCdef");
}

fn assert_fail_closed(r: &Run, what: &str) {
    assert_eq!(r.code, 2, "{what}: exit code");
    assert_eq!(r.decision(), "deny", "{what}");
    assert!(r.stdout.contains("fail-closed"), "{what}: {}", r.stdout);
    assert!(
        !r.stderr.is_empty(),
        "{what}: a deny explains itself on stderr"
    );
}

#[test]
fn fails_closed() {
    let setup = Setup::new("default");
    let policy = setup.policy.to_str().expect("utf8");
    assert_fail_closed(&run(&["--policy", policy], b"this is not json"), "garbage");
    assert_fail_closed(&run(&["--policy", policy], b""), "empty stdin");
    assert_fail_closed(&run(&["--policy", policy], b"[1, 2, 3]"), "not an object");
    assert_fail_closed(
        &run(
            &["--policy", policy],
            b"{\"hook_event_name\": \"PreToolUse\", \"tool_name\": 5}",
        ),
        "wrong field type",
    );
    let mut big = br#"{"hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"ls"},"pad":""#.to_vec();
    big.extend(std::iter::repeat_n(b'a', 5 << 20));
    big.extend(b"\"}");
    assert_fail_closed(&run(&["--policy", policy], &big), "oversized");
    assert_fail_closed(
        &run(
            &["--policy", "/nonexistent/policy.json"],
            &setup.fixture("pre_bash_allow.json"),
        ),
        "missing policy",
    );
    // Policy files it cannot use: each is refused with its reason, never read as a policy.
    let good = std::fs::read(&setup.policy).expect("read policy");
    let mut other_version = good.clone();
    other_version[16..20].copy_from_slice(&2u32.to_le_bytes());
    let mut bad_decision = good.clone();
    let profile_len = u32::from_le_bytes(good[20..24].try_into().expect("4 bytes")) as usize;
    let after_names = {
        let mut at = 24 + profile_len;
        for _ in 0..2 {
            let len = u32::from_le_bytes(good[at..at + 4].try_into().expect("4 bytes")) as usize;
            at += 4 + len;
        }
        at
    };
    bad_decision[after_names] = 7;
    let old_json = serde_json::to_vec(&common::builtin("default")).expect("json");
    for (what, bytes, reason) in [
        (
            "empty policy",
            b"".to_vec(),
            "does not start with \"STEPPROOF-POLICY\"",
        ),
        (
            "JSON policy of format 1",
            old_json,
            "it looks like JSON: a policy written by an older StepProof",
        ),
        (
            "other format version",
            other_version,
            "has format 2, this hook reads format 3",
        ),
        (
            "truncated policy",
            good[..good.len() - 1].to_vec(),
            "is not a compiled StepProof policy: ",
        ),
        (
            "bad decision",
            bad_decision,
            "a decision (0, 1 or 2) at byte",
        ),
        (
            "trailing bytes",
            [good.as_slice(), b"x"].concat(),
            "the end of the file at byte",
        ),
    ] {
        let path = setup.dir.path().join("bad-policy");
        std::fs::write(&path, &bytes).expect("write");
        let r = run(
            &["--policy", path.to_str().expect("utf8")],
            &setup.fixture("pre_bash_allow.json"),
        );
        assert_fail_closed(&r, what);
        assert!(r.stderr.contains(reason), "{what}: {}", r.stderr);
    }
    assert_fail_closed(
        &run(&["--bogus-flag"], &setup.fixture("pre_bash_allow.json")),
        "bad argv",
    );
    // Unknown tool and unknown event.
    let r = run_fixture(&setup, "pre_mcp.json");
    assert_eq!((r.code, r.decision()), (2, "deny".to_string()));
    let r = run_fixture(&setup, "future_event.json");
    assert_eq!((r.code, r.stdout.as_str()), (0, ""));
}

#[test]
fn observers_fail_open() {
    // A Stop hook that exits 2 would keep the agent going: garbage and a missing policy
    // still exit 0 for observer events.
    let r = run(&["--policy", "/nonexistent", "--event", "Stop"], b"garbage");
    assert_eq!((r.code, r.stdout.as_str(), r.stderr.as_str()), (0, "", ""));
    let setup = Setup::new("default");
    for fixture in [
        "stop.json",
        "session_start.json",
        "post_write.json",
        "session_end.json",
    ] {
        let r = run(&["--policy", "/nonexistent"], &setup.fixture(fixture));
        assert_eq!(
            (r.code, r.stdout.as_str(), r.stderr.as_str()),
            (0, "", ""),
            "{fixture}"
        );
    }
}

/// `--event` and the input's `hook_event_name` disagree: the input is malformed. Registered
/// as a gate, the hook denies (whatever the input claims to be); as an observer, it records the
/// malformed input and exits 0 with nothing on stdout.
#[test]
fn a_disagreeing_event_name_is_malformed_input() {
    let setup = Setup::new("default");
    let policy = setup.policy.to_str().expect("utf8");
    // A PreToolUse call of an allowed command, presented to the PreToolUse gate as a Stop.
    let allowed = String::from_utf8(setup.fixture("pre_bash_allow.json")).expect("utf8");
    let as_stop = allowed.replace("\"PreToolUse\"", "\"Stop\"");
    assert_ne!(allowed, as_stop);
    let r = run(
        &["--policy", policy, "--event", "PreToolUse"],
        as_stop.as_bytes(),
    );
    assert_fail_closed(&r, "PreToolUse gate, input says Stop");
    assert!(
        r.stdout.contains("registered for PreToolUse"),
        "{}",
        r.stdout
    );
    let r = run(
        &["--policy", policy, "--event", "ConfigChange"],
        allowed.as_bytes(),
    );
    assert_eq!(r.code, 2, "ConfigChange gate, input says PreToolUse");
    // The observer: nothing on stdout, exit 0, and a record of the malformed input.
    let socket = setup.dir.path().join("audit.sock");
    let listener = UnixListener::bind(&socket).expect("bind");
    let collector = collect_records(listener, 1);
    let r = run(
        &[
            "--policy",
            policy,
            "--event",
            "Stop",
            "--audit-socket",
            socket.to_str().expect("utf8"),
        ],
        allowed.as_bytes(),
    );
    assert_eq!((r.code, r.stdout.as_str()), (0, ""));
    let records = collector.join().expect("collector");
    assert_eq!(records.len(), 1, "{records:#?}");
    assert_eq!(records[0]["event"], "Stop");
    assert!(
        records[0].to_string().contains("registered for Stop"),
        "{records:#?}"
    );
    // Agreeing, or no --event: as before.
    let r = run(
        &["--policy", policy, "--event", "PreToolUse"],
        allowed.as_bytes(),
    );
    assert_eq!((r.code, r.decision()), (0, "allow".to_string()));
}

#[test]
fn records_reach_the_audit_socket() {
    let setup = Setup::new("default");
    let socket = setup.dir.path().join("audit.sock");
    let listener = UnixListener::bind(&socket).expect("bind");
    let collector = collect_records(listener, 4);
    std::fs::write(setup.workspace().join("src/new.rs"), "pub fn f() {}\n").expect("write");
    let policy = setup.policy.to_str().expect("utf8");
    let sock = socket.to_str().expect("utf8");
    for fixture in [
        "pre_bash_deny.json",
        "post_write.json",
        "post_bash.json",
        "post_failure.json",
    ] {
        let r = run(
            &["--policy", policy, "--audit-socket", sock],
            &setup.fixture(fixture),
        );
        assert!(r.code == 0 || r.code == 2, "{fixture}");
    }
    let records = collector.join().expect("collector");
    assert_eq!(records.len(), 4, "{records:#?}");
    let decision = &records[0];
    assert_eq!(decision["kind"], "decision");
    assert_eq!(decision["event"], "PreToolUse");
    assert_eq!(decision["tool"], "Bash");
    assert_eq!(decision["decision"], "deny");
    assert_eq!(decision["rule_id"], "privilege");
    assert_eq!(decision["input"], "sudo rm -rf /var/lib/x");
    assert_eq!(decision["profile"], "default");
    let write = &records[1];
    assert_eq!(write["kind"], "evidence");
    assert_eq!(write["tool"], "Write");
    use sha2::Digest;
    let expected: String = sha2::Sha256::digest(b"pub fn f() {}\n")
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(write["sha256"], expected.as_str());
    assert_eq!(
        write["path"],
        setup
            .workspace()
            .join("src/new.rs")
            .to_string_lossy()
            .as_ref()
    );
    let bash = &records[2];
    assert_eq!(bash["command"], "cargo test");
    assert_eq!(bash["stdout_sha256"].as_str().map(str::len), Some(64));
    assert_eq!(records[3]["event"], "PostToolUseFailure");
    assert_eq!(records[3]["exit_status"], 101);
}

#[test]
fn a_dead_audit_socket_changes_nothing() {
    let setup = Setup::new("default");
    let policy = setup.policy.to_str().expect("utf8");
    let started = std::time::Instant::now();
    let r = run(
        &[
            "--policy",
            policy,
            "--audit-socket",
            "/nonexistent/audit.sock",
        ],
        &setup.fixture("pre_bash_allow.json"),
    );
    assert_eq!((r.code, r.decision()), (0, "allow".to_string()));
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn the_socket_path_never_comes_from_the_environment() {
    let setup = Setup::new("default");
    let socket = setup.dir.path().join("env.sock");
    let listener = UnixListener::bind(&socket).expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let mut child = Command::new(HOOK)
        .args(["--policy", setup.policy.to_str().expect("utf8")])
        .env("STEPPROOF_AUDIT_SOCKET", &socket)
        .env("AUDIT_SOCKET", &socket)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(&setup.fixture("pre_bash_allow.json"))
        .expect("write");
    child.wait().expect("wait");
    assert!(
        listener.accept().is_err(),
        "the hook connected to a socket named in the environment"
    );
}

// The binary's own entry point (`#![no_main]`, see src/main.rs): what std's runtime start did
// must still hold.

/// Spawns the hook with `stdout`/`stderr` as given, feeds it `stdin`, and returns how it ended.
fn run_with(args: &[&str], stdin: &[u8], stdout: Stdio, stderr: Stdio) -> std::process::ExitStatus {
    let mut child = Command::new(HOOK)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
        .expect("spawn hook");
    let mut input = child.stdin.take().expect("stdin");
    let _ = input.write_all(stdin);
    drop(input);
    child.wait().expect("wait for the hook")
}

/// A pipe whose reading end is already closed: writing to it raises SIGPIPE.
fn broken_pipe() -> Stdio {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    Stdio::from(writer)
}

#[test]
fn arguments_reach_the_hook() {
    // std reads argv from glibc's .init_array call, not from `main`'s parameters.
    let setup = Setup::new("default");
    let policy = setup.policy.to_str().expect("utf8");
    let allowed = setup.fixture("pre_bash_allow.json");
    let r = run(&["--policy", policy, "--event", "PreToolUse"], &allowed);
    assert_eq!((r.code, r.decision()), (0, "allow".to_string()));
    // The fourth argument was read: registered as Stop, a PreToolUse input is malformed.
    let r = run(&["--policy", policy, "--event", "Stop"], &allowed);
    assert_eq!((r.code, r.stdout.as_str()), (0, ""));
    let r = run(&["--policy", policy, "--no-such-flag"], &allowed);
    assert_fail_closed(&r, "unknown flag");
    assert!(r.stderr.contains("`--no-such-flag`"), "{}", r.stderr);
}

#[test]
fn a_panic_is_a_deny() {
    // `std::env::args()` panics on an argument that is not UTF-8: the hook's one panic a caller
    // can cause. It must end in the fail-closed deny, not an abort.
    use std::os::unix::ffi::OsStrExt;
    let setup = Setup::new("default");
    let out = Command::new(HOOK)
        .arg("--policy")
        .arg(std::ffi::OsStr::from_bytes(b"/policy-\xff"))
        .stdin(Stdio::null())
        .output()
        .expect("run hook");
    let r = Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).to_string(),
        stderr: String::from_utf8_lossy(&out.stderr).to_string(),
    };
    assert_fail_closed(&r, "non-UTF-8 argument");
    assert!(r.stderr.contains("internal error"), "{}", r.stderr);
    drop(setup);
}

#[test]
fn the_answer_arrives_whole_on_a_pipe_and_in_a_file() {
    // Nothing flushes stdout at exit any more: the hook must.
    let setup = Setup::new("default");
    let policy = setup.policy.to_str().expect("utf8");
    for fixture in ["pre_bash_allow.json", "pre_bash_deny.json"] {
        let piped = run(&["--policy", policy], &setup.fixture(fixture));
        assert!(
            piped.stdout.ends_with("}\n"),
            "{fixture}: {:?}",
            piped.stdout
        );
        let _: Value = serde_json::from_str(&piped.stdout).expect("JSON");
        let path = setup.dir.path().join("answer");
        let file = std::fs::File::create(&path).expect("create");
        let status = run_with(
            &["--policy", policy],
            &setup.fixture(fixture),
            Stdio::from(file),
            Stdio::null(),
        );
        assert_eq!(status.code(), Some(piped.code), "{fixture}");
        let written = std::fs::read_to_string(&path).expect("read answer");
        assert_eq!(written, piped.stdout, "{fixture}");
    }
}

#[test]
fn a_closed_stdout_ends_the_hook_only_after_its_records_are_sent() {
    // SIGPIPE keeps its default: the records go out first, over the audit socket; then the
    // answer meets a stdout nobody reads and the hook ends by SIGPIPE (its answer could reach
    // no one; a gate's death blocks the call). An answer with nothing to say writes nothing
    // and exits as usual.
    use std::os::unix::process::ExitStatusExt;
    let setup = Setup::new("default");
    let policy = setup.policy.to_str().expect("utf8");
    let socket = setup.dir.path().join("records.sock");
    let listener = UnixListener::bind(&socket).expect("bind");
    for (fixture, signal, code) in [
        ("pre_bash_allow.json", Some(libc_sigpipe()), None),
        ("pre_bash_deny.json", Some(libc_sigpipe()), None),
        ("stop.json", None, Some(0)),
    ] {
        let receiver = {
            let listener = listener.try_clone().expect("listener");
            std::thread::spawn(move || {
                let (mut stream, _) = listener.accept().expect("accept");
                let mut got = String::new();
                let _ = stream.read_to_string(&mut got);
                got
            })
        };
        let status = run_with(
            &[
                "--policy",
                policy,
                "--audit-socket",
                socket.to_str().expect("utf8"),
            ],
            &setup.fixture(fixture),
            broken_pipe(),
            broken_pipe(),
        );
        assert_eq!(
            (status.signal(), status.code()),
            (signal, code),
            "{fixture}"
        );
        let records = receiver.join().expect("receiver");
        assert!(!records.trim().is_empty(), "{fixture}: no record was sent");
    }
}

/// SIGPIPE's number on Linux.
fn libc_sigpipe() -> i32 {
    13
}

#[test]
fn a_closed_audit_socket_does_not_kill_the_hook() {
    // The supervisor closes the connection without reading. The record (a Bash command of
    // 3 MiB, kept whole in evidence) is larger than the socket's buffer, so the hook's write
    // meets the closed end whatever the timing: EPIPE (std's `UnixStream` sends with
    // MSG_NOSIGNAL), never a signal.
    use std::os::unix::process::ExitStatusExt;
    let setup = Setup::new("default");
    let socket = setup.dir.path().join("audit.sock");
    let listener = UnixListener::bind(&socket).expect("bind");
    let closer = std::thread::spawn(move || {
        let (stream, _) = listener.accept().expect("accept");
        drop(stream);
    });
    let mut input: Value = serde_json::from_slice(&setup.fixture("post_bash.json")).expect("JSON");
    input["tool_input"]["command"] = "x".repeat(3 << 20).into();
    let status = run_with(
        &[
            "--policy",
            setup.policy.to_str().expect("utf8"),
            "--audit-socket",
            socket.to_str().expect("utf8"),
        ],
        &serde_json::to_vec(&input).expect("JSON"),
        Stdio::null(),
        Stdio::null(),
    );
    closer.join().expect("closer");
    assert_eq!((status.code(), status.signal()), (Some(0), None));
}

#[test]
fn a_closed_standard_fd_is_reopened_on_dev_null() {
    // As std's start did: with fd 1 closed, the next file the hook opens would become its
    // stdout. While it waits for its input, fd 1 must already be /dev/null.
    let setup = Setup::new("default");
    let mut child = Command::new("/bin/sh")
        .args(["-c", "exec \"$0\" --policy \"$1\" >&-", HOOK])
        .arg(&setup.policy)
        .stdin(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn hook");
    let proc = PathBuf::from(format!("/proc/{}", child.id()));
    let hook = std::fs::canonicalize(HOOK).expect("hook path");
    let started = std::time::Instant::now();
    let target = loop {
        // Before sh runs, fd 1 is the test's own; once sh has exec'd the hook, fd 1 is closed
        // until the hook reopens it.
        let exec_done = std::fs::read_link(proc.join("exe")).is_ok_and(|exe| exe == hook);
        if let (true, Ok(target)) = (exec_done, std::fs::read_link(proc.join("fd/1"))) {
            break Some(target);
        }
        if started.elapsed() > Duration::from_secs(10) {
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    drop(child.stdin.take());
    let status = child.wait().expect("wait");
    assert_eq!(target.as_deref(), Some(Path::new("/dev/null")));
    assert_eq!(status.code(), Some(2), "empty input is denied");
}

/// A runbook's `state.json` as the supervisor writes it (src/supervisor/runbook/engine.rs,
/// `state_json`), beside `setup`'s policy: `schema` passed, `migrate` open.
fn write_runbook_state(setup: &Setup) -> PathBuf {
    let dir = setup.dir.path().join("runbook");
    std::fs::create_dir_all(&dir).expect("mkdir runbook");
    let state = serde_json::json!({
        "runbook": "schema-migration",
        "title": "Add the orders table",
        "hash": "ab12",
        "open": ["migrate"],
        "ended": null,
        "steps": [
            { "id": "schema", "title": "Design the schema", "status": "passed", "attempts": 1,
              "max_attempts": 1, "depends_on": [], "instructions": "Write docs/schema.md.",
              "acceptance": [], "allows": "what the profile allows (it names no allow rule)",
              "denied_words": [], "last_verdict": "passed" },
            { "id": "migrate", "title": "Write the migration", "status": "open", "attempts": 1,
              "max_attempts": 3, "depends_on": ["schema"],
              "instructions": "Write db/migrations/0007_orders.sql from docs/schema.md.",
              "acceptance": ["The migration applies to an empty database.", "It can be rolled back."],
              "allows": "only bash `sqlite3 *`; writing `db/**`; other kinds as the profile says",
              "denied_words": ["git push", "rm"], "last_verdict": "failed" },
            { "id": "pr", "title": "Open the PR", "status": "waiting", "attempts": 0,
              "max_attempts": 1, "depends_on": ["migrate"], "instructions": "Open a PR.",
              "acceptance": [], "allows": "", "denied_words": [], "last_verdict": null }
        ]
    });
    std::fs::write(dir.join("state.json"), state.to_string()).expect("write state");
    dir
}

fn with_field(setup: &Setup, fixture: &str, key: &str, value: &str) -> Vec<u8> {
    let mut input: Value = serde_json::from_slice(&setup.fixture(fixture)).expect("fixture");
    input[key] = Value::from(value);
    input.to_string().into_bytes()
}

/// The answer's context; an empty answer (no context) is "".
fn context_of(r: &Run) -> String {
    assert_eq!((r.code, r.stderr.as_str()), (0, ""), "{}", r.stdout);
    if r.stdout.is_empty() {
        return String::new();
    }
    r.json()["hookSpecificOutput"]["additionalContext"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn a_runbook_orients_the_model_at_session_start_and_compaction() {
    let setup = Setup::new("default");
    let policy = setup.policy.to_str().expect("utf8");
    // Without a runbook: nothing (where the session runs is in the managed CLAUDE.md).
    let before = context_of(&run_fixture(&setup, "session_start.json"));
    assert_eq!(before, "");
    write_runbook_state(&setup);
    let mut inputs: Vec<(String, Vec<u8>)> = ["startup", "resume", "clear", "compact"]
        .iter()
        .map(|s| {
            (
                format!("SessionStart/{s}"),
                with_field(&setup, "session_start.json", "source", s),
            )
        })
        .collect();
    inputs.push(("PreCompact".into(), setup.fixture("pre_compact.json")));
    for (what, input) in inputs {
        let r = run(&["--policy", policy], &input);
        let event = what.split('/').next().unwrap_or_default();
        let context = if event == "PreCompact" {
            // Plain text: the summary's additional instructions.
            assert_eq!((r.code, r.stderr.as_str()), (0, ""), "{what}");
            assert!(
                r.stdout
                    .starts_with("StepProof: this session follows a runbook")
                    && r.stdout
                        .contains("Keep the following in the summary, word for word"),
                "{}",
                r.stdout
            );
            r.stdout.clone()
        } else {
            assert_eq!(
                r.json()["hookSpecificOutput"]["hookEventName"],
                event,
                "{what}"
            );
            context_of(&r)
        };
        for needle in [
            "runbook 'schema-migration' (Add the orders table)",
            "Open step 'migrate': Write the migration (attempt 2 of 3)",
            "Instructions: Write db/migrations/0007_orders.sql from docs/schema.md.",
            "Acceptance:\n- The migration applies to an empty database.\n- It can be rolled back.",
            "allows only bash `sqlite3 *`; writing `db/**`",
            "schema passed, last verdict passed",
            "migrate open, last verdict failed",
            "pr waiting",
            "stepproof step complete",
        ] {
            assert!(
                context.contains(needle),
                "{what}: {needle:?} missing in {context}"
            );
        }
        // Only the open step's instructions.
        assert!(!context.contains("Open a PR."), "{what}: {context}");
    }
}

#[test]
fn a_prompt_gets_the_open_step_and_a_notice_of_denied_words() {
    let setup = Setup::new("default");
    let policy = setup.policy.to_str().expect("utf8");
    let config = setup.dir.path().join("claude-config");
    let prompt = |text: &str| {
        context_of(&run_with_config(
            &["--policy", policy],
            &with_field(&setup, "user_prompt_submit.json", "prompt", text),
            Some(&config),
        ))
    };
    let before = prompt("then git push it");
    assert!(
        !before.contains("runbook") && !before.contains("Note:"),
        "{before}"
    );
    write_runbook_state(&setup);
    let line = "Runbook 'schema-migration', open step 'migrate' (Write the migration): it allows only bash `sqlite3 *`; writing `db/**`; other kinds as the profile says.";
    // The session's first prompt carries the whole orientation, then one line a prompt.
    let first = prompt("Start");
    assert!(
        first.contains("Instructions: Write db/migrations") && first.contains(line),
        "{first}"
    );
    let plain = prompt("Fix the failing test in src/lib.rs");
    assert!(plain.contains(line) && !plain.contains("Note:"), "{plain}");
    // Not the whole instructions on every prompt.
    assert!(!plain.contains("Instructions:"), "{plain}");
    let pushed = prompt("When it works, git push it to origin");
    assert!(pushed.contains(line), "{pushed}");
    assert!(
        pushed.contains("Note: step 'migrate' denies `git push`"),
        "{pushed}"
    );
    assert!(!pushed.contains("denies `rm`"), "{pushed}");
    let removed = prompt("rm the old file, via /bin/rm if need be");
    assert!(removed.contains("denies `rm`"), "{removed}");
    // Exact words only: `git pushed`, `rmdir`, `git` then `push` apart, `confirm` do not count.
    for text in [
        "I git pushed it",
        "rmdir build",
        "git status, then push",
        "confirm",
    ] {
        let r = prompt(text);
        assert!(r.contains(line) && !r.contains("Note:"), "{text}: {r}");
    }
    // No open step: no line (a state with every step passed; the first prompt after the
    // change says so, the next one nothing).
    let dir = setup.dir.path().join("runbook");
    std::fs::write(
        dir.join("state.json"),
        r#"{"runbook":"r","title":"t","open":[],"ended":null,"steps":[{"id":"a","status":"passed","denied_words":["git push"]}]}"#,
    )
    .expect("write");
    let changed = prompt("git push");
    assert!(changed.contains("No step is open."), "{changed}");
    let done = prompt("git push");
    assert!(
        !done.contains("Runbook 'r'") && !done.contains("Note:"),
        "{done}"
    );
    // A damaged state: the observer still answers, exit 0, without a word of it.
    std::fs::write(dir.join("state.json"), "{not json").expect("write");
    let damaged = prompt("git push");
    assert_eq!(damaged, "");
}

#[test]
fn subagents_are_recorded_with_their_id_and_type_while_a_runbook_runs() {
    let setup = Setup::new("default");
    let policy = setup.policy.to_str().expect("utf8");
    let socket = setup.dir.path().join("audit.sock");
    let listener = UnixListener::bind(&socket).expect("bind");
    let sock = socket.to_str().expect("utf8");
    // Without a runbook: silent, and no record (the listener would see a connection).
    for fixture in ["subagent_start.json", "subagent_stop.json"] {
        let r = run(
            &["--policy", policy, "--audit-socket", sock],
            &setup.fixture(fixture),
        );
        assert_eq!((r.code, r.stdout.as_str(), r.stderr.as_str()), (0, "", ""));
    }
    listener.set_nonblocking(true).expect("nonblocking");
    let pending = listener.accept();
    assert!(
        pending
            .as_ref()
            .is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock),
        "a record without a runbook: {pending:?}"
    );
    listener.set_nonblocking(false).expect("blocking");
    write_runbook_state(&setup);
    let collector = collect_records(listener, 2);
    for fixture in ["subagent_start.json", "subagent_stop.json"] {
        let r = run(
            &["--policy", policy, "--audit-socket", sock],
            &setup.fixture(fixture),
        );
        assert_eq!((r.code, r.stdout.as_str(), r.stderr.as_str()), (0, "", ""));
    }
    let records = collector.join().expect("collector");
    assert_eq!(records.len(), 2, "{records:#?}");
    for (record, event) in records.iter().zip(["SubagentStart", "SubagentStop"]) {
        assert_eq!(record["kind"], "subagent", "{record}");
        assert_eq!(record["event"], event);
        assert_eq!(record["agent_id"], "agent-7");
        assert_eq!(record["agent_type"], "Explore");
    }
}

/// Median wall time of `n` runs of the hook on `input`.
fn median_run(args: &[&str], input: &[u8], n: usize) -> Duration {
    let mut times: Vec<Duration> = (0..n)
        .map(|_| {
            let start = std::time::Instant::now();
            let r = run(args, input);
            let took = start.elapsed();
            assert_eq!(r.code, 0);
            took
        })
        .collect();
    times.sort();
    times[n / 2]
}

// Observers must answer in under 2 ms (RUNBOOKS.md, "Speed"): that budget is measured by the
// benchmark (`scripts/bench-hook.sh`, the static build, ratios against a baseline in the same
// run), not here — a debug build on a loaded machine moves by more than the budget. What this
// asserts is only that a runbook adds no pathological cost to an observer (a walk, a wait, a
// read of something large: tens of milliseconds), each observer with a runbook against the same
// call without one.
#[test]
fn runbook_observers_add_no_pathological_cost() {
    let setup = Setup::new("default");
    let policy = setup.policy.to_str().expect("utf8");
    let args = ["--policy", policy];
    let inputs = [
        ("SessionStart", setup.fixture("session_start.json")),
        ("PreCompact", setup.fixture("pre_compact.json")),
        (
            "UserPromptSubmit",
            with_field(&setup, "user_prompt_submit.json", "prompt", "git push it"),
        ),
        ("SubagentStart", setup.fixture("subagent_start.json")),
    ];
    let dir = setup.dir.path().join("runbook");
    for (event, input) in &inputs {
        let _ = std::fs::remove_dir_all(&dir);
        let without = median_run(&args, input, 41);
        write_runbook_state(&setup);
        let with = median_run(&args, input, 41);
        eprintln!("{event}: {with:?} with a runbook, {without:?} without (median of 41 runs)");
        assert!(
            with < without + Duration::from_millis(20),
            "{event}: {with:?} with a runbook, {without:?} without"
        );
    }
}

/// The marker the hook leaves per session, under `CLAUDE_CONFIG_DIR`.
fn oriented_marker(config: &std::path::Path) -> PathBuf {
    config
        .join("stepproof-oriented")
        .join("8f2c1d3e-5b7a-4c9e-9f1a-2d3e4f5a6b7c")
}

// SessionStart's context never reaches the model under StepProof (Claude Code cannot make
// its `session-env/<session>` directory, which StepProof keeps read-only): the prompt carries
// the orientation instead, once per session and open-step set, again after a compaction,
// again for another session; without a place to note it, on every prompt.
#[test]
fn the_first_prompt_of_a_session_carries_the_orientation() {
    let setup = Setup::new("default");
    let policy = setup.policy.to_str().expect("utf8");
    let config = setup.dir.path().join("claude-config");
    write_runbook_state(&setup);
    let prompt = |session: &str, config: Option<&std::path::Path>| {
        let mut input: Value =
            serde_json::from_slice(&setup.fixture("user_prompt_submit.json")).expect("fixture");
        input["session_id"] = Value::from(session);
        context_of(&run_with_config(
            &["--policy", policy],
            input.to_string().as_bytes(),
            config,
        ))
    };
    let session = "8f2c1d3e-5b7a-4c9e-9f1a-2d3e4f5a6b7c";
    let full = "Instructions: Write db/migrations/0007_orders.sql";
    assert!(prompt(session, Some(&config)).contains(full));
    assert!(!prompt(session, Some(&config)).contains(full));
    assert!(oriented_marker(&config).is_file());
    // Another session (a `/clear`, a subagent's own): oriented on its first prompt.
    assert!(prompt("another-session", Some(&config)).contains(full));
    assert!(!prompt(session, Some(&config)).contains(full));
    // A compaction: the next prompt is oriented again.
    let r = run_with_config(
        &["--policy", policy],
        &setup.fixture("pre_compact.json"),
        Some(&config),
    );
    assert_eq!(r.code, 0);
    assert!(r.stdout.contains(full), "{}", r.stdout);
    assert_eq!(
        std::fs::read(oriented_marker(&config)).expect("marker"),
        b"compacted"
    );
    assert!(prompt(session, Some(&config)).contains(full));
    assert!(!prompt(session, Some(&config)).contains(full));
    // A compaction in the middle of a turn: no prompt follows, the first tool call's answer
    // carries the orientation (once), never a subagent's.
    let tool_call = |agent: Option<&str>| {
        let mut input = serde_json::json!({
            "hook_event_name": "PostToolUse", "session_id": session, "cwd": setup.workspace(),
            "tool_name": "Bash", "tool_input": {"command": "echo hi"}, "tool_use_id": "t",
            "tool_response": {"stdout": "hi", "stderr": "", "interrupted": false},
        });
        if let Some(agent) = agent {
            input["agent_id"] = Value::from(agent);
        }
        run_with_config(
            &["--policy", policy],
            input.to_string().as_bytes(),
            Some(&config),
        )
        .stdout
    };
    assert!(
        !tool_call(None).contains(full),
        "no compaction, no orientation"
    );
    let r = run_with_config(
        &["--policy", policy],
        &setup.fixture("pre_compact.json"),
        Some(&config),
    );
    assert_eq!(r.code, 0);
    assert!(
        !tool_call(Some("agent-1")).contains(full),
        "a subagent's call"
    );
    let oriented = tool_call(None);
    assert!(
        oriented.contains(full) && oriented.contains("additionalContext"),
        "{oriented}"
    );
    assert!(!tool_call(None).contains(full), "once");
    assert!(
        !prompt(session, Some(&config)).contains(full),
        "the prompt after it need not"
    );
    // The open steps change: oriented on the new ones.
    let state = setup.dir.path().join("runbook/state.json");
    let text = std::fs::read_to_string(&state).expect("state");
    std::fs::write(
        &state,
        text.replace("\"open\":[\"migrate\"]", "\"open\":[\"migrate\",\"pr\"]"),
    )
    .expect("write");
    assert!(prompt(session, Some(&config)).contains(full));
    // A FIFO or a link where the marker goes is not waited on or followed: oriented again.
    let marker = oriented_marker(&config);
    std::fs::remove_file(&marker).expect("rm");
    let fifo = std::process::Command::new("mkfifo")
        .arg(&marker)
        .status()
        .expect("mkfifo");
    assert!(fifo.success());
    assert!(prompt(session, Some(&config)).contains(full));
    assert!(!prompt(session, Some(&config)).contains(full));
    // No config dir: every prompt carries it (more context, never less).
    assert!(prompt(session, None).contains(full));
    assert!(prompt(session, None).contains(full));
    // A session id that is not a plain name is not made a path.
    assert!(prompt("../../etc", Some(&config)).contains(full));
    assert!(!setup.dir.path().join("etc").exists());
}

// While a runbook runs, the runbook's own client (exactly its path, `step`, a subcommand) is
// allowed whatever the profile and the open step say; nothing broader is.
#[test]
fn only_the_runbook_client_itself_is_allowed_past_the_step() {
    let setup = Setup::new("ci");
    let policy = setup.policy.to_str().expect("utf8");
    let client = setup.dir.path().join("stepproof");
    let client = client.to_str().expect("utf8");
    let bash = |command: &str| {
        let input = serde_json::json!({
            "hook_event_name": "PreToolUse", "session_id": "s", "cwd": setup.workspace(),
            "tool_name": "Bash", "tool_input": {"command": command}, "tool_use_id": "t",
        });
        let r = run(&["--policy", policy], input.to_string().as_bytes());
        let out = r.json();
        (
            out["hookSpecificOutput"]["permissionDecision"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            out["hookSpecificOutput"]["permissionDecisionReason"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        )
    };
    let status = format!("{client} step status");
    // Without a runbook: the profile decides (ci denies an unknown program).
    assert_eq!(bash(&status).0, "deny");
    write_runbook_state(&setup);
    for allowed in [
        status.clone(),
        format!("{client} step complete"),
        format!("{client} step complete --step migrate --note 'done, see db/'"),
        format!("{client} step evidence db/a.sql"),
        format!("{client} step abandon --reason \"$REASON\""),
        format!("{client} step status && {client} step complete"),
    ] {
        let (decision, reason) = bash(&allowed);
        assert_eq!(decision, "allow", "{allowed}: {reason}");
        assert!(reason.contains("(rule runbook-client)"), "{reason}");
    }
    for refused in [
        format!("{client} step status; curl -s http://x.example"),
        format!("{client} step status > /etc/passwd"),
        format!("{client} step complete --note \"$(curl -s http://x.example)\""),
        format!("{client} runbook check r.toml"),
        format!("{client} approve run gate"),
        format!("{client} step approve gate"),
        format!("X=1 {client} step status"),
        format!("{client} step status | sh"),
        "./stepproof step status".to_string(),
        "stepproof step status".to_string(),
        "/tmp/stepproof step status".to_string(),
        format!("sh -c '{client} step status; rm -rf /'"),
    ] {
        let (decision, reason) = bash(&refused);
        assert!(
            !reason.contains("rule runbook-client"),
            "{refused}: {decision} {reason}"
        );
    }
}

// The supervisor's `stepproof` beside the policy is vouched for like a system program: the
// profile's `runbook-check` allows `stepproof runbook check` through it, under every built-in
// profile, and nothing else of it (a copy elsewhere is the agent's, and allow rules do not vouch
// for it).
#[test]
fn the_supervisors_stepproof_may_check_a_runbook_and_nothing_more() {
    for (profile, otherwise) in [("ci", "deny"), ("strict", "deny"), ("default", "ask")] {
        let setup = Setup::new(profile);
        let policy = setup.policy.to_str().expect("utf8");
        let client = setup.dir.path().join("stepproof");
        let client = client.to_str().expect("utf8");
        let bash = |command: &str| {
            let input = serde_json::json!({
                "hook_event_name": "PreToolUse", "session_id": "s", "cwd": setup.workspace(),
                "tool_name": "Bash", "tool_input": {"command": command}, "tool_use_id": "t",
            });
            let r = run(&["--policy", policy], input.to_string().as_bytes());
            let out = r.json();
            (
                out["hookSpecificOutput"]["permissionDecision"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                out["hookSpecificOutput"]["permissionDecisionReason"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        };
        for allowed in [
            format!("{client} runbook check runbooks/fix.toml"),
            format!("{client} runbook check --profile /etc/p.toml runbooks/fix.toml"),
            format!(
                "cd {} && {client} runbook check a.toml",
                setup.workspace().display()
            ),
        ] {
            let (decision, reason) = bash(&allowed);
            assert_eq!(decision, "allow", "{profile}: {allowed}: {reason}");
            // (An allowed line's reason names its first allowed command's rule.)
            assert!(
                allowed.starts_with("cd ") || reason.contains("(rule runbook-check)"),
                "{reason}"
            );
        }
        for other in [
            format!("{client} runbook explain runbooks/fix.toml"),
            format!("{client} runbook schema"),
            format!("{client} approve run gate"),
            format!("{client} runbook check a.toml; {client} runbook explain a.toml"),
            format!(
                "{}/stepproof runbook check a.toml",
                setup.workspace().display()
            ),
            "./stepproof runbook check a.toml".to_string(),
        ] {
            let (decision, reason) = bash(&other);
            assert_eq!(decision, otherwise, "{profile}: {other}: {reason}");
            assert!(!reason.contains("rule runbook-check"), "{other}: {reason}");
        }
    }
}

// A write to what the supervisor lists as held read-only (its notices beside the policy) is
// denied naming the path and the running runbook, by every file tool and by a shell write the
// hook can see, through a relative path or a link too; a write elsewhere, and a read, are
// judged as before. Inputs as Claude Code 2.1.328 sends them.
#[test]
fn writes_to_what_the_run_holds_read_only_are_denied_in_words() {
    let setup = Setup::new("ci");
    let policy = setup.policy.to_str().expect("utf8");
    let ws = setup.workspace();
    let runbook = ws.join("runbook.toml");
    std::fs::write(&runbook, "id = \"schema-migration\"\n").expect("runbook");
    std::fs::create_dir_all(ws.join("held")).expect("held dir");
    std::os::unix::fs::symlink(&runbook, ws.join("link.toml")).expect("link");
    let notices = setup.dir.path().join("notices");
    std::fs::create_dir_all(&notices).expect("notices");
    std::fs::write(
        notices.join("read-only"),
        format!("{}\n{}\n", runbook.display(), ws.join("held").display()),
    )
    .expect("list");
    let call = |tool: &str, input: serde_json::Value| {
        let input = serde_json::json!({
            "session_id": "s", "transcript_path": "/tmp/t.jsonl", "cwd": ws,
            "permission_mode": "bypassPermissions", "hook_event_name": "PreToolUse",
            "tool_name": tool, "tool_input": input, "tool_use_id": "toolu_1",
        });
        let r = run(&["--policy", policy], input.to_string().as_bytes());
        let out = r.json();
        (
            out["hookSpecificOutput"]["permissionDecision"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            out["hookSpecificOutput"]["permissionDecisionReason"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            r.code,
        )
    };
    let file = runbook.to_str().expect("utf8");
    let denied = [
        (
            "Write",
            serde_json::json!({"file_path": file, "content": "x"}),
        ),
        (
            "Edit",
            serde_json::json!({"file_path": file, "old_string": "a", "new_string": "b"}),
        ),
        (
            "MultiEdit",
            serde_json::json!({"file_path": file, "edits": [{"old_string": "a", "new_string": "b"}]}),
        ),
        (
            "NotebookEdit",
            serde_json::json!({"notebook_path": file, "new_source": "x"}),
        ),
        (
            "Write",
            serde_json::json!({"file_path": ws.join("link.toml"), "content": "x"}),
        ),
        (
            "Bash",
            serde_json::json!({"command": "echo x >> runbook.toml"}),
        ),
        (
            "Bash",
            serde_json::json!({"command": "cp other.toml runbook.toml"}),
        ),
        (
            "Bash",
            serde_json::json!({"command": "sed -i s/a/b/ ./runbook.toml"}),
        ),
    ];
    for (tool, input) in &denied {
        let (decision, reason, code) = call(tool, input.clone());
        assert_eq!(
            (decision.as_str(), code),
            ("deny", 2),
            "{tool} {input}: {reason}"
        );
        assert!(
            reason.contains(&format!("{file} is read-only for the whole run"))
                && reason.contains("(rule held-read-only)")
                && !reason.contains("While runbook"),
            "{tool} {input}: {reason}"
        );
    }
    // Below a held directory; and with a runbook running, the reason names it.
    write_runbook_state(&setup);
    let (decision, reason, _) = call(
        "Write",
        serde_json::json!({"file_path": ws.join("held/notes.md"), "content": "x"}),
    );
    assert_eq!(decision, "deny", "{reason}");
    assert!(
        reason.contains("is inside") && reason.contains("/held,"),
        "{reason}"
    );
    let (_, reason, _) = call(
        "Write",
        serde_json::json!({"file_path": file, "content": "x"}),
    );
    assert!(
        reason.contains("While runbook 'schema-migration' runs, its file cannot change"),
        "{reason}"
    );
    for (tool, input) in [
        (
            "Write",
            serde_json::json!({"file_path": ws.join("src/new.rs"), "content": "x"}),
        ),
        ("Read", serde_json::json!({"file_path": file})),
        ("Bash", serde_json::json!({"command": "cat runbook.toml"})),
        (
            "Bash",
            serde_json::json!({"command": "echo x > runbook.toml.new"}),
        ),
    ] {
        let (decision, reason, _) = call(tool, input.clone());
        assert_eq!(decision, "allow", "{tool} {input}: {reason}");
    }
}

// SessionEnd is recorded with its reason; a `/clear` is not an end.
#[test]
fn session_end_is_recorded_with_its_reason() {
    let setup = Setup::new("default");
    let policy = setup.policy.to_str().expect("utf8");
    let socket = setup.dir.path().join("audit.sock");
    let listener = UnixListener::bind(&socket).expect("bind");
    let sock = socket.to_str().expect("utf8");
    let collector = collect_records(listener, 2);
    for reason in ["prompt_input_exit", "clear"] {
        let r = run(
            &["--policy", policy, "--audit-socket", sock],
            &with_field(&setup, "session_end.json", "reason", reason),
        );
        assert_eq!((r.code, r.stdout.as_str(), r.stderr.as_str()), (0, "", ""));
    }
    let records = collector.join().expect("collector");
    assert_eq!(records.len(), 2, "{records:#?}");
    assert_eq!(records[0]["kind"], "session-end");
    assert_eq!(records[0]["reason"], "prompt_input_exit");
    assert_eq!(records[0]["ends_session"], true);
    assert_eq!(records[1]["reason"], "clear");
    assert_eq!(records[1]["ends_session"], false);
}

/// A supervisor that reads each of `connections` hook connections to its end and answers with
/// `answer` (`None`: it never answers, holding the connection for `hold`).
fn supervisor_answering(
    listener: UnixListener,
    connections: usize,
    answer: Option<Value>,
    hold: Duration,
) -> std::thread::JoinHandle<Vec<Value>> {
    std::thread::spawn(move || {
        let mut records = Vec::new();
        for _ in 0..connections {
            let (mut stream, _) = listener.accept().expect("accept");
            let mut text = String::new();
            stream.read_to_string(&mut text).expect("read records");
            records.extend(
                text.lines()
                    .map(|l| serde_json::from_str::<Value>(l).expect("record is JSON")),
            );
            match &answer {
                Some(answer) => {
                    let _ = stream.write_all(format!("{answer}\n").as_bytes());
                }
                None => std::thread::sleep(hold),
            }
        }
        records
    })
}

/// The hook run against a supervisor answering `answer`: its output and what it reported.
fn run_against(setup: &Setup, fixture: &str, answer: Option<Value>) -> (Run, Vec<Value>) {
    let socket = setup.dir.path().join(format!(
        "s-{}.sock",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    let listener = UnixListener::bind(&socket).expect("bind");
    let supervisor = supervisor_answering(listener, 1, answer, Duration::from_secs(2));
    let policy = setup.policy.to_str().expect("utf8");
    let r = run(
        &[
            "--policy",
            policy,
            "--audit-socket",
            socket.to_str().expect("utf8"),
        ],
        &setup.fixture(fixture),
    );
    (r, supervisor.join().expect("supervisor"))
}

/// The reason the model reads, from the JSON answer, and that stderr says the same.
#[track_caller]
fn reason_of(r: &Run) -> String {
    let reason = r.json()["hookSpecificOutput"]["permissionDecisionReason"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if r.code == 2 {
        assert_eq!(r.stderr.trim_end(), reason, "stderr and JSON disagree");
    }
    reason
}

// The supervisor's answer naming a loop makes the deny's reason longer: the count, what the
// profile allows and how to go on, after the rule's own reason. The decision, the exit code and
// the record sent are the same as without it.
#[test]
fn a_loop_in_the_supervisors_answer_restates_what_is_allowed() {
    let setup = Setup::new("ci");
    let (plain, plain_records) = run_against(
        &setup,
        "pre_bash_deny.json",
        Some(serde_json::json!({"accepted": 1, "malformed": 0})),
    );
    assert_eq!((plain.code, plain.decision().as_str()), (2, "deny"));
    let plain_reason = reason_of(&plain);
    assert!(plain_reason.contains("(rule privilege)"), "{plain_reason}");
    assert!(
        !plain_reason.contains("StepProof has denied"),
        "{plain_reason}"
    );

    let looped = serde_json::json!({"accepted": 1, "malformed": 0,
        "denial_loop": {"rule_id": "privilege", "denials": 3, "after": 3, "stop": false}});
    let (r, records) = run_against(&setup, "pre_bash_deny.json", Some(looped));
    assert_eq!((r.code, r.decision().as_str()), (2, "deny"));
    let reason = reason_of(&r);
    assert!(reason.starts_with(&plain_reason), "{reason}");
    for told in [
        "StepProof has denied 3 calls under rule privilege in this session",
        "What is allowed now: profile 'ci'",
        "shell commands allowed without asking:",
        "To go on: use an allowed alternative, or stop and tell the user",
    ] {
        assert!(reason.contains(told), "{told:?} missing from {reason}");
    }
    assert!(!reason.contains("--ci run"), "{reason}");
    assert_eq!(records.len(), 1);
    assert_eq!(records[0]["reason"], plain_records[0]["reason"]);

    let stopping = serde_json::json!({"accepted": 1, "malformed": 0,
        "denial_loop": {"rule_id": "privilege", "denials": 6, "after": 3, "stop": true}});
    let (r, _) = run_against(&setup, "pre_bash_deny.json", Some(stopping));
    let reason = reason_of(&r);
    assert!(
        reason.contains("denied 6 calls") && reason.contains("ends it now (exit 121)"),
        "{reason}"
    );
}

// Fail closed: a supervisor that does not answer in time, or answers nonsense, leaves the deny
// exactly as it was; and an answer naming a loop never touches a call that was allowed.
#[test]
fn without_the_supervisors_answer_the_deny_stands_and_an_allow_is_never_changed() {
    let setup = Setup::new("ci");
    let (plain, _) = run_against(&setup, "pre_bash_deny.json", None);
    assert_eq!((plain.code, plain.decision().as_str()), (2, "deny"));
    let reason = reason_of(&plain);
    assert!(
        reason.contains("(rule privilege)") && !reason.contains("StepProof has denied"),
        "{reason}"
    );
    let looped = serde_json::json!({
        "denial_loop": {"rule_id": "x", "denials": 9, "after": 3, "stop": true}});
    for garbage in [
        serde_json::json!("denial_loop"),
        serde_json::json!({"denial_loop": "stop"}),
        serde_json::json!([looped.clone()]),
    ] {
        let (r, _) = run_against(&setup, "pre_bash_deny.json", Some(garbage.clone()));
        assert_eq!((r.code, reason_of(&r)), (2, reason.clone()), "{garbage}");
    }
    let (allowed, _) = run_against(&setup, "pre_bash_allow.json", Some(looped));
    assert_eq!((allowed.code, allowed.decision().as_str()), (0, "allow"));
    assert!(!reason_of(&allowed).contains("StepProof has denied"));
}
