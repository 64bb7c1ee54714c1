//! The audit log: the chain as `stepproof audit verify|show` (the real binary) sees it after
//! each kind of tampering, the sink and the hook receiver under concurrency, and the receiver's
//! credential checks against real foreign processes.

mod support;

use serde_json::{Value, json};
use std::collections::HashSet;
use std::fs;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use stepproof::audit::sink::AuditSink;
use stepproof::audit::{PeerCheck, ReceiverCounts, ReceiverHandle, serve_hook_socket};
use support::{STEPPROOF, skip_or_fail};

/// A small log with one record of each kind `show` summarises; returns its path and head.
fn sample_log(dir: &Path) -> (PathBuf, String) {
    let path = dir.join("audit.jsonl");
    let sink = AuditSink::open(&path).unwrap();
    sink.record(
        "supervisor",
        "run-start",
        &json!({ "argv": ["claude", "-p", "fix the tests"], "profile": "default",
                 "policy_hash": "ab".repeat(32), "stepproof_version": "0.1.0" }),
    );
    for (host, allowed) in [("api.anthropic.com", true), ("evil.example", false)] {
        sink.record(
            "supervisor",
            "network",
            &json!({ "method": "CONNECT", "host": host, "port": 443, "allowed": allowed,
                     "rule": if allowed { "api.anthropic.com" } else { "not in the allow-list" } }),
        );
    }
    for n in 0..3 {
        let body = json!({ "peer": { "pid": 100 + n, "uid": 1000, "gid": 1000 },
                           "reported": { "kind": "decision", "event": "PreToolUse", "tool": "Bash",
                                         "decision": "deny", "rule_id": format!("rule-{n}"),
                                         "reason": "curl is not allowed" } });
        sink.append("sandbox", "decision", body.as_object().unwrap())
            .unwrap();
    }
    sink.record(
        "supervisor",
        "run-end",
        &json!({ "outcome": { "status": "exited", "exit_code": 0, "command_exit_code": 0 } }),
    );
    sink.sync();
    (path, sink.head_hash())
}

fn lines(path: &Path) -> Vec<String> {
    fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

fn write_lines(path: &Path, lines: &[String]) {
    fs::write(
        path,
        lines.iter().map(|l| format!("{l}\n")).collect::<String>(),
    )
    .unwrap();
}

/// `stepproof audit ARGS…`: exit code and stdout.
fn audit(args: &[&str]) -> (i32, String) {
    let out = Command::new(STEPPROOF)
        .arg("audit")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

fn verify(path: &Path, head: Option<&str>) -> (i32, String) {
    let mut args = vec!["verify", path.to_str().unwrap()];
    if let Some(head) = head {
        args.extend(["--head", head]);
    }
    audit(&args)
}

/// Applies `damage` to a fresh copy of the sample log and verifies it.
fn damaged(damage: impl FnOnce(&mut Vec<String>), head: bool) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let (path, hash) = sample_log(dir.path());
    let mut l = lines(&path);
    damage(&mut l);
    write_lines(&path, &l);
    // A damaged log that lacks a run-end would read as "in progress" while a test thread's
    // forked child still holds the lock (see `reopen`).
    drop(reopen(&path));
    verify(&path, head.then_some(hash.as_str()))
}

#[test]
fn an_intact_log_verifies_with_and_without_its_head() {
    let dir = tempfile::tempdir().unwrap();
    let (path, head) = sample_log(dir.path());
    let (code, out) = verify(&path, None);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out, format!("intact: 7 records, head {head}\n"));
    let (code, out) = verify(&path, Some(&head.to_uppercase()));
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("matches --head"), "{out}");
    let (code, out) = audit(&["verify", path.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0);
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["intact"], true);
    assert_eq!(report["records"], 7);
    assert_eq!(report["head"], head.as_str());
}

#[test]
fn an_edited_line_breaks_the_chain_at_the_next_line() {
    let (code, out) = damaged(
        |l| l[2] = l[2].replace(r#""allowed":false"#, r#""allowed":true"#),
        false,
    );
    assert_eq!(code, 1, "{out}");
    assert!(out.starts_with("chain: BROKEN at line 4: "), "{out}");
    assert!(out.contains("line 3 was changed"), "{out}");
    // The last line has no successor: only the head shows an edit there.
    let edit_last = |l: &mut Vec<String>| {
        let last = l.len() - 1;
        l[last] = l[last].replace(r#""exit_code":0"#, r#""exit_code":1"#);
    };
    assert_eq!(damaged(edit_last, false).0, 0);
    let (code, out) = damaged(edit_last, true);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("not at the expected head"), "{out}");
}

#[test]
fn a_deleted_line_is_named() {
    let (code, out) = damaged(
        |l| {
            l.remove(2);
        },
        false,
    );
    assert_eq!(code, 1, "{out}");
    assert!(
        out.starts_with("chain: BROKEN at line 3: seq is 3, expected 2"),
        "{out}"
    );
    assert!(out.contains("the 2 records before it are intact"), "{out}");
}

#[test]
fn reordered_lines_are_named() {
    let (code, out) = damaged(|l| l.swap(3, 4), false);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.starts_with("chain: BROKEN at line 4: seq is 4, expected 3"),
        "{out}"
    );
}

#[test]
fn an_inserted_line_is_named() {
    let (code, out) = damaged(|l| l.insert(5, l[1].clone()), false);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.starts_with("chain: BROKEN at line 6: seq is 1, expected 5"),
        "{out}"
    );
    // A forged line with the right seq still has to hash to the next `prev`.
    let (code, out) = damaged(
        |l| {
            let forged = l[5].replace("rule-2", "rule-X");
            l[5] = forged;
        },
        false,
    );
    assert_eq!(code, 1, "{out}");
    assert!(out.starts_with("chain: BROKEN at line 7: "), "{out}");
}

#[test]
fn a_truncated_tail_shows_only_against_the_head() {
    let cut = |l: &mut Vec<String>| l.truncate(5);
    // Cut at a line boundary, the rest is a valid chain, but its run has no end.
    let (code, out) = damaged(cut, false);
    assert_eq!(code, 3, "{out}");
    assert!(
        out.starts_with("incomplete: the chain is intact (5 records"),
        "{out}"
    );
    let (code, out) = damaged(cut, true);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.starts_with("chain: BROKEN at line 5: the chain ends at "),
        "{out}"
    );
    assert!(out.contains("records were removed from the end"), "{out}");
    // Everything removed.
    let (code, out) = damaged(|l| l.clear(), true);
    assert_eq!(code, 1);
    assert!(out.starts_with("chain: BROKEN: the log is empty"), "{out}");
}

/// `stepproof audit ARGS…`: exit code, stdout and stderr.
fn audit_full(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(STEPPROOF)
        .arg("audit")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn an_empty_file_or_one_that_is_not_a_log_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let p = path.to_str().unwrap();
    for (content, message) in [
        ("", "empty: no records to verify"),
        (
            "hello\nworld\n",
            "not a StepProof audit log: line 1 is not a record: not JSON",
        ),
        (
            "{\"name\": \"a profile?\"}\n",
            "not a StepProof audit log: line 1 is not a record: no numeric `seq`",
        ),
    ] {
        fs::write(&path, content).unwrap();
        for command in ["verify", "show"] {
            let (code, out, err) = audit_full(&[command, p]);
            assert_eq!(code, 2, "{command} {content:?}: {out}{err}");
            assert_eq!(out, "", "{command} {content:?}");
            assert!(
                err.contains(&format!("stepproof audit: {p}: {message}")),
                "{command} {content:?}: {err}"
            );
        }
    }
}

#[test]
fn a_log_cut_before_run_end_is_incomplete() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = sample_log(dir.path());
    let p = path.to_str().unwrap();
    let mut l = lines(&path);
    l.pop();
    write_lines(&path, &l);
    let (code, out) = verify_unlocked(&path);
    assert_eq!(code, 3, "{out}");
    assert!(
        out.starts_with("incomplete: the chain is intact (6 records, head "),
        "{out}"
    );
    assert!(
        out.contains("the run that starts at line 1 has no run-end record"),
        "{out}"
    );
    drop(reopen(&path));
    let (code, out) = audit(&["verify", p, "--json"]);
    assert_eq!(code, 3);
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["status"], "incomplete");
    assert_eq!(report["intact"], true);
    assert_eq!(report["runs_without_end"], json!([1]));
    drop(reopen(&path));
    let (code, out) = audit(&["show", p]);
    assert_eq!(code, 3, "{out}");
    assert!(
        out.contains("INCOMPLETE: the run that starts at line 1 has no run-end record"),
        "{out}"
    );
}

/// Opens a log again after its last writer went. A process another test spawns in the
/// meantime holds a copy of every descriptor of this one between its fork and its exec, and
/// with it the log's lock: waits that out.
fn reopen(path: &Path) -> AuditSink {
    let start = Instant::now();
    loop {
        match AuditSink::open(path) {
            Ok(sink) => return sink,
            Err(e) if e.source.kind() == std::io::ErrorKind::WouldBlock => {
                assert!(start.elapsed() < Duration::from_secs(10), "{e}");
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("{e}"),
        }
    }
}

/// `verify` once no process holds the log's lock any more (see [`reopen`]).
fn verify_unlocked(path: &Path) -> (i32, String) {
    drop(reopen(path));
    verify(path, None)
}

/// Appends a run to the log at `path` (through the sink, as `stepproof-run` does); `end`
/// says whether it gets its `run-end`. Returns the head.
fn append_run(path: &Path, end: bool) -> String {
    let sink = reopen(path);
    sink.record("supervisor", "run-start", &json!({ "argv": ["true"] }));
    sink.record("supervisor", "network", &json!({ "host": "example.com" }));
    if end {
        sink.record("supervisor", "run-end", &json!({ "outcome": {} }));
    }
    sink.head_hash()
}

#[test]
fn each_run_in_a_log_is_checked_for_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    append_run(&path, true);
    let first_head = append_run(&path, true);
    let (code, out) = verify(&path, None);
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("intact: 6 records"), "{out}");
    // Cut between the two runs: only the head shows it.
    let mut l = lines(&path);
    l.truncate(3);
    write_lines(&path, &l);
    assert_eq!(verify(&path, None).0, 0);
    assert_eq!(verify(&path, Some(&first_head)).0, 1);

    // A run that crashed before its end, then one that ended: still incomplete.
    let path = dir.path().join("crashed.jsonl");
    append_run(&path, false);
    let head = append_run(&path, true);
    drop(reopen(&path));
    let (code, out) = verify(&path, Some(&head));
    assert_eq!(code, 3, "{out}");
    assert!(
        out.contains("(5 records, head ") && out.contains("matches --head"),
        "{out}"
    );
    assert!(
        out.contains("the run that starts at line 1 has no run-end record"),
        "{out}"
    );
}

#[test]
fn a_run_still_being_written_is_in_progress() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    append_run(&path, true);
    let sink = reopen(&path);
    sink.record(
        "supervisor",
        "run-start",
        &json!({ "argv": ["sleep", "1"] }),
    );
    let (code, out) = verify(&path, None);
    assert_eq!(code, 4, "{out}");
    assert!(
        out.starts_with("in progress: the chain is intact so far (4 records, head "),
        "{out}"
    );
    assert!(
        out.contains("the run that starts at line 4 has no run-end record yet"),
        "{out}"
    );
    let (code, out) = audit(&["show", path.to_str().unwrap()]);
    assert_eq!(code, 4, "{out}");
    assert!(
        out.contains("IN PROGRESS: the run that starts at line 4"),
        "{out}"
    );
    // The writer is not disturbed: it goes on, and its end completes the log.
    sink.record("supervisor", "run-end", &json!({ "outcome": {} }));
    let head = sink.head_hash();
    assert_eq!(verify(&path, Some(&head)).0, 0);
    // A writer that went away without its end: incomplete.
    sink.record("supervisor", "run-start", &json!({ "argv": ["true"] }));
    drop(sink);
    let (code, out) = verify_unlocked(&path);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("line 6 has no run-end record:"), "{out}");
}

/// Set in the child of [`records_that_could_not_be_written_leave_a_verifiable_log`]: the log
/// to write under a file size limit.
const FSIZE_CHILD: &str = "STEPPROOF_TEST_FSIZE_CHILD";

/// A write that fails half way (here: the file size limit, as a full disk would) must not
/// leave half a record in the log: the head the run prints still verifies, and the log says
/// how many records were not written.
#[test]
fn records_that_could_not_be_written_leave_a_verifiable_log() {
    if let Ok(log) = std::env::var(FSIZE_CHILD) {
        let log = PathBuf::from(log);
        let sink = AuditSink::open(&log).unwrap();
        sink.record("supervisor", "run-start", &json!({ "argv": ["true"] }));
        // Larger than the limit: part of it is written, then the write fails.
        sink.record(
            "supervisor",
            "sweep",
            &json!({ "pad": "x".repeat(100 << 10) }),
        );
        sink.record("supervisor", "limits", &json!({ "acted": [] }));
        sink.record("supervisor", "run-end", &json!({ "outcome": {} }));
        fs::write(log.with_extension("head"), sink.head_hash()).unwrap();
        return;
    }
    let Some(prlimit) = tool(&["/usr/bin/prlimit", "/bin/prlimit"]) else {
        skip_or_fail("prlimit is not installed: no file size limit for the writer");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.jsonl");
    // SIGXFSZ ignored (kept across exec): the write fails with EFBIG instead of killing.
    let out = Command::new("sh")
        .args(["-c", "trap '' XFSZ; exec \"$@\"", "sh"])
        .arg(prlimit)
        .arg("--fsize=65536")
        .arg("--")
        .arg(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "records_that_could_not_be_written_leave_a_verifiable_log",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(FSIZE_CHILD, &log)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let head = fs::read_to_string(log.with_extension("head")).unwrap();
    let (code, text) = verify(&log, Some(&head));
    assert_eq!(code, 0, "{text}");
    let records = records(&log);
    let kinds: Vec<&str> = records
        .iter()
        .map(|r| r["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["run-start", "records-not-written", "limits", "run-end"]
    );
    assert_eq!(records[1]["source"], "supervisor");
    assert_eq!(records[1]["not_written"], 1);
    assert!(
        records[1]["last_error"]
            .as_str()
            .unwrap()
            .contains("File too large"),
        "{}",
        records[1]
    );
}

#[test]
fn a_torn_last_line_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = sample_log(dir.path());
    let bytes = fs::read(&path).unwrap();
    fs::write(&path, &bytes[..bytes.len() - 20]).unwrap();
    let (code, out) = verify(&path, None);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.starts_with("chain: BROKEN at line 7: cut short"),
        "{out}"
    );
}

#[test]
fn usage_and_io_errors_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = sample_log(dir.path());
    assert_eq!(verify(&path, Some("abc")).0, 2);
    assert_eq!(verify(&dir.path().join("missing.jsonl"), None).0, 2);
    assert_eq!(audit(&["show", "/nonexistent/audit.jsonl"]).0, 2);
    assert_eq!(audit(&["verify"]).0, 2);
}

#[test]
fn show_prints_a_timeline_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let (path, head) = sample_log(dir.path());
    let (code, out) = audit(&["show", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    let text: Vec<&str> = out.lines().collect();
    assert!(text[0].ends_with(" (UTC)"), "{out}");
    assert!(text[1].contains("#0     supervisor run-start      argv: claude -p 'fix the tests' · profile default · policy abababababab · stepproof 0.1.0"), "{out}");
    assert!(
        text[2].contains("CONNECT api.anthropic.com:443 allowed (api.anthropic.com)"),
        "{out}"
    );
    assert!(
        text[3].contains("CONNECT evil.example:443 DENIED (not in the allow-list)"),
        "{out}"
    );
    assert!(text[4].contains("sandbox    decision       PreToolUse Bash → deny · [rule-0] curl is not allowed (reported by pid 100)"), "{out}");
    assert!(text[7].contains("run-end        exited (exit 0)"), "{out}");
    assert!(
        out.ends_with(&format!("chain: intact, 7 records, head {head}\n")),
        "{out}"
    );

    let (code, out) = audit(&["show", path.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0);
    let value: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(value["chain"]["intact"], true);
    let records = value["records"].as_array().unwrap();
    assert_eq!(records.len(), 7);
    assert_eq!(records[3]["kind"], "decision");
    assert_eq!(records[3]["record"]["reported"]["rule_id"], "rule-0");
    assert!(records[0]["time"].as_str().unwrap().ends_with('Z'));

    // A damaged log still shows, and says where it broke.
    let mut l = lines(&path);
    l.remove(1);
    write_lines(&path, &l);
    let (code, out) = audit(&["show", path.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(
        out.contains("chain: BROKEN at line 2: seq is 2, expected 1"),
        "{out}"
    );
}

/// Every line of the file as a record; checks `seq` runs 0.. without gaps.
fn records(path: &Path) -> Vec<Value> {
    let text = fs::read_to_string(path).unwrap();
    assert!(text.ends_with('\n'));
    let records: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("torn line {l:?}: {e}")))
        .collect();
    for (i, r) in records.iter().enumerate() {
        assert_eq!(r["seq"], i as u64);
    }
    records
}

#[test]
fn sixteen_threads_through_one_sink_lose_and_tear_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let sink = AuditSink::open(&path).unwrap();
    let threads: Vec<_> = (0..16)
        .map(|t| {
            let sink = sink.clone_handle();
            std::thread::spawn(move || {
                for n in 0..1000 {
                    sink.record(
                        "supervisor",
                        "network",
                        &json!({ "thread": t, "n": n, "pad": "x".repeat(n % 300) }),
                    );
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    sink.sync();
    let (seq, head) = sink.head().unwrap();
    assert_eq!(seq, 15_999);
    let records = records(&path);
    assert_eq!(records.len(), 16_000);
    let mut next = [0u64; 16];
    for r in &records {
        let t = r["thread"].as_u64().unwrap() as usize;
        assert_eq!(r["n"], next[t], "one thread's records stay in its order");
        next[t] += 1;
    }
    assert_eq!(next, [1000; 16]);
    let (code, out) = verify(&path, Some(&head));
    assert_eq!(code, 0, "{out}");
}

/// A receiver on a fresh socket whose peers must run `expected`.
struct Served {
    _dir: tempfile::TempDir,
    socket: PathBuf,
    log: PathBuf,
    sink: AuditSink,
    handle: ReceiverHandle,
}

fn serve(expected: &Path) -> Served {
    serve_with(expected, None)
}

fn serve_with(
    expected: &Path,
    loops: Option<stepproof::audit::denial_loops::DenialLoops>,
) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("hook.sock");
    let log = dir.path().join("audit.jsonl");
    let listener = UnixListener::bind(&socket).unwrap();
    let sink = AuditSink::open(&log).unwrap();
    let handle = serve_hook_socket(
        listener,
        sink.clone_handle(),
        PeerCheck::for_executable(expected).unwrap(),
        u64::MAX,
        loops,
    );
    Served {
        _dir: dir,
        socket,
        log,
        sink,
        handle,
    }
}

/// The hook's side of the protocol: write, shut down writing, read the answer. (A refused
/// peer may find the connection closed before it writes: the answer is still there to read.)
fn send_lines(socket: &Path, payload: &[u8]) -> String {
    let mut stream = UnixStream::connect(socket).unwrap();
    let _ = stream.write_all(payload);
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer
}

fn wait_for(handle: &ReceiverHandle, what: impl Fn(&ReceiverCounts) -> bool) {
    let start = Instant::now();
    while !what(&handle.counts()) {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{:?}",
            handle.counts()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

// A hook that connects the moment the receiver is served keeps its credentials: the listener
// has SO_PASSCRED before `serve_hook_socket` returns. A connection made before that gets a
// socket without it, and what the peer writes between the accept and the receiver's own
// setsockopt arrives with pid 0 and is refused (seen once in the sixteen-client test below).
#[test]
fn the_listener_passes_credentials_before_anyone_can_connect() {
    let dir = tempfile::tempdir().unwrap();
    let listener = UnixListener::bind(dir.path().join("hook.sock")).unwrap();
    let same = listener.try_clone().unwrap();
    let sink = AuditSink::open(&dir.path().join("audit.jsonl")).unwrap();
    let handle = serve_hook_socket(
        listener,
        sink.clone_handle(),
        PeerCheck::for_executable(Path::new("/proc/self/exe")).unwrap(),
        u64::MAX,
        None,
    );
    let passcred =
        nix::sys::socket::getsockopt(&same, nix::sys::socket::sockopt::PassCred).unwrap();
    handle.shutdown();
    assert!(passcred, "SO_PASSCRED is not on the listener yet");
}

#[test]
fn sixteen_hook_clients_and_the_supervisor_share_one_chain() {
    let served = serve(Path::new("/proc/self/exe"));
    let clients: Vec<_> = (0..16)
        .map(|c| {
            let socket = served.socket.clone();
            let log = served.log.clone();
            std::thread::spawn(move || {
                let line = |n: u32| {
                    format!(
                        "{}\n",
                        json!({ "kind": "decision", "client": c, "n": n, "tool": "Bash",
                                "pad": "y".repeat((n % 200) as usize) })
                    )
                };
                if c % 2 == 0 {
                    // One connection, one write per line.
                    let mut stream = UnixStream::connect(&socket).unwrap();
                    for n in 0..1000 {
                        if let Err(e) = stream.write_all(line(n).as_bytes()) {
                            // Say why the receiver let go (seen once under load, not explained).
                            panic!(
                                "client {c}, line {n}: {e}; refused peers: {:?}",
                                refused_records(&log)
                            );
                        }
                    }
                    stream.shutdown(std::net::Shutdown::Write).unwrap();
                    let mut answer = String::new();
                    stream.read_to_string(&mut answer).unwrap();
                    assert_eq!(answer, "{\"accepted\":1000,\"malformed\":0}\n");
                } else {
                    // A connection per record, as a hook run per tool call does.
                    for n in 0..1000 {
                        let answer = send_lines(&socket, line(n).as_bytes());
                        assert_eq!(answer, "{\"accepted\":1,\"malformed\":0}\n");
                    }
                }
            })
        })
        .collect();
    let supervisor: Vec<_> = (0..4)
        .map(|t| {
            let sink = served.sink.clone_handle();
            std::thread::spawn(move || {
                for n in 0..250 {
                    sink.record("supervisor", "network", &json!({ "thread": t, "n": n }));
                }
            })
        })
        .collect();
    for t in clients.into_iter().chain(supervisor) {
        t.join().unwrap();
    }
    let counts = served.handle.shutdown();
    assert_eq!(
        counts,
        ReceiverCounts {
            connections: 8 + 8 * 1000,
            accepted: 16_000,
            refused_peers: 0,
            malformed: 0,
            incomplete: 0,
            empty: 0,
            over_cap: 0,
            accepted_bytes: counts.accepted_bytes,
        }
    );
    assert!(counts.accepted_bytes >= 16_000);
    served.sink.sync();
    let records = records(&served.log);
    assert_eq!(records.len(), 17_000);
    let mut seen = HashSet::new();
    for r in records.iter().filter(|r| r["source"] == "sandbox") {
        assert_eq!(r["kind"], "decision");
        assert_eq!(r["peer"]["pid"], std::process::id());
        let reported = &r["reported"];
        assert!(seen.insert((reported["client"].as_u64(), reported["n"].as_u64())));
    }
    assert_eq!(seen.len(), 16_000);
    let (code, out) = verify(&served.log, Some(&served.sink.head_hash()));
    assert_eq!(code, 0, "{out}");
}

#[test]
fn malformed_incomplete_and_empty_connections_are_counted() {
    let served = serve(Path::new("/proc/self/exe"));
    let mut payload = Vec::new();
    payload.extend_from_slice(b"{\"kind\":\"evidence\",\"path\":\"a\"}\n");
    payload.extend_from_slice(b"not json\n[1,2]\n");
    payload.extend(std::iter::repeat_n(b'x', 70 * 1024));
    payload.extend_from_slice(b"\n{\"kind\":\"\\u001b[2J\",\"seq\":-1}\n");
    let answer = send_lines(&served.socket, &payload);
    assert_eq!(answer, "{\"accepted\":2,\"malformed\":3}\n");
    // A connection that ends in the middle of a record.
    assert_eq!(
        send_lines(&served.socket, b"{\"kind\":\"decision\",\"tool\":"),
        "{\"accepted\":0,\"malformed\":0}\n"
    );
    // One that sends nothing.
    drop(UnixStream::connect(&served.socket).unwrap());
    wait_for(&served.handle, |c| c.empty == 1);
    let counts = served.handle.shutdown();
    assert_eq!(
        (counts.connections, counts.accepted, counts.malformed),
        (3, 2, 3)
    );
    assert_eq!(
        (counts.incomplete, counts.empty, counts.refused_peers),
        (1, 1, 0)
    );
    let records = records(&served.log);
    assert_eq!(records.len(), 2);
    assert_eq!(records[0]["kind"], "evidence");
    // A kind that is not a plain name becomes `hook`; envelope fields cannot be forged.
    assert_eq!(records[1]["kind"], "hook");
    assert_eq!(records[1]["seq"], 1);
    assert_eq!(records[1]["source"], "sandbox");
    assert_eq!(records[1]["reported"]["seq"], -1);
}

/// The first of `candidates` that exists.
fn tool(candidates: &[&str]) -> Option<PathBuf> {
    candidates.iter().map(PathBuf::from).find(|p| p.exists())
}

fn refused_records(log: &Path) -> Vec<Value> {
    records(log)
        .into_iter()
        .filter(|r| r["kind"] == "refused-peer")
        .collect()
}

#[test]
fn a_peer_that_is_not_the_hook_is_refused_and_recorded() {
    // The hook is `stepproof` here; this test binary is not it.
    let served = serve(Path::new(STEPPROOF));
    let answer = send_lines(
        &served.socket,
        b"{\"kind\":\"decision\",\"decision\":\"allow\"}\n",
    );
    assert!(answer.starts_with("{\"refused\":"), "{answer}");
    wait_for(&served.handle, |c| c.refused_peers == 1);

    // A foreign program connecting on its own.
    let foreign = tool(&["/usr/bin/python3", "/usr/bin/socat"]);
    if let Some(program) = &foreign {
        let line = "{\"kind\":\"decision\",\"decision\":\"allow\",\"from\":\"foreign\"}";
        let out = if program.ends_with("python3") {
            Command::new(program)
                .args(["-c", "import socket,sys\ns=socket.socket(socket.AF_UNIX)\ns.connect(sys.argv[1])\ntry:\n s.sendall(sys.argv[2].encode()+b'\\n')\n s.shutdown(socket.SHUT_WR)\nexcept OSError:\n pass\nprint(s.recv(4096).decode(),end='')"])
                .arg(&served.socket)
                .arg(line)
                .output()
                .unwrap()
        } else {
            let mut child = Command::new(program)
                .arg("-")
                .arg(format!("UNIX-CONNECT:{}", served.socket.display()))
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            child
                .stdin
                .take()
                .unwrap()
                .write_all(format!("{line}\n").as_bytes())
                .unwrap();
            child.wait_with_output().unwrap()
        };
        let answer = String::from_utf8_lossy(&out.stdout);
        assert!(answer.starts_with("{\"refused\":"), "{answer}");
        wait_for(&served.handle, |c| c.refused_peers == 2);
    } else {
        skip_or_fail("neither python3 nor socat is installed: no foreign client");
    }

    let counts = served.handle.shutdown();
    assert_eq!(counts.accepted, 0);
    let refused = refused_records(&served.log);
    assert_eq!(refused.len(), if foreign.is_some() { 2 } else { 1 });
    let me = fs::read_link("/proc/self/exe").unwrap();
    assert_eq!(refused[0]["source"], "supervisor");
    assert_eq!(refused[0]["pid"], std::process::id());
    assert_eq!(refused[0]["exe"], me.to_str().unwrap());
    assert_eq!(refused[0]["stage"], "connect");
    assert!(
        refused[0]["reason"]
            .as_str()
            .unwrap()
            .contains("not the hook")
    );
    if let Some(program) = foreign {
        let exe = refused[1]["exe"].as_str().unwrap();
        let real = fs::canonicalize(program).unwrap();
        assert_eq!(Path::new(exe), real, "{:?}", refused[1]);
    }
    assert!(
        !fs::read_to_string(&served.log)
            .unwrap()
            .contains("\"allow\"")
    );
}

/// The per-message check: this test binary (the expected "hook") connects and sends a record,
/// then hands the connected socket to a child that execs a shell, which writes a record on it.
/// The connection passed the check at connect; the shell's line must still be refused.
#[test]
fn a_child_that_inherits_the_socket_and_execs_something_else_is_refused() {
    let served = serve(Path::new("/proc/self/exe"));
    let mut stream = UnixStream::connect(&served.socket).unwrap();
    stream
        .write_all(b"{\"kind\":\"decision\",\"decision\":\"deny\",\"from\":\"hook\"}\n")
        .unwrap();
    wait_for(&served.handle, |c| c.accepted == 1);

    let shell = tool(&["/bin/sh", "/usr/bin/sh"]).expect("a shell");
    let inherited: OwnedFd = stream.try_clone().unwrap().into();
    // The shell writes on its stdin (the socket), then waits for the receiver's answer, so it
    // is alive when its line is checked.
    let out = Command::new(&shell)
        .args([
            "-c",
            "printf '%s\\n' '{\"kind\":\"decision\",\"decision\":\"allow\",\"from\":\"child\"}' >&0; \
             IFS= read -r answer; printf '%s' \"$answer\"",
        ])
        .stdin(Stdio::from(inherited))
        .stdout(Stdio::piped())
        .output()
        .unwrap();
    let answer = String::from_utf8_lossy(&out.stdout);
    assert!(answer.starts_with("{\"refused\":"), "{answer}");
    wait_for(&served.handle, |c| c.refused_peers == 1);
    // The connection is closed: nothing more from it counts, the hook's own lines included.
    let _ = stream.write_all(b"{\"kind\":\"decision\",\"from\":\"after\"}\n");
    drop(stream);

    let counts = served.handle.shutdown();
    assert_eq!(
        (counts.connections, counts.accepted, counts.refused_peers),
        (1, 1, 1),
        "{counts:?}"
    );
    let text = fs::read_to_string(&served.log).unwrap();
    assert!(
        !text.contains("\"child\"") && !text.contains("\"after\""),
        "{text}"
    );
    let refused = refused_records(&served.log);
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0]["stage"], "message");
    assert_ne!(refused[0]["pid"], std::process::id());
    assert_eq!(
        Path::new(refused[0]["exe"].as_str().unwrap()),
        fs::canonicalize(shell).unwrap()
    );
    let (code, out) = verify(&served.log, Some(&served.sink.head_hash()));
    assert_eq!(code, 0, "{out}");
}

/// The person's answer to an `ask`, read from what followed: the call's PostToolUse or
/// PostToolUseFailure means approved; the next prompt or Stop, or the run's end, without either,
/// means refused. Each answer is a supervisor record naming the ask and what it was inferred from.
#[test]
fn the_answer_to_an_ask_is_recorded() {
    let served = serve(Path::new("/proc/self/exe"));
    let ask = |id: &str| json!({ "kind": "decision", "event": "PreToolUse", "decision": "ask", "tool_use_id": id });
    let lines = [
        ask("t1"),
        ask("t2"),
        json!({ "kind": "decision", "event": "PreToolUse", "decision": "allow", "tool_use_id": "t9" }),
        json!({ "kind": "evidence", "event": "PostToolUse", "tool_use_id": "t9" }),
        json!({ "kind": "evidence", "event": "PostToolUseFailure", "tool_use_id": "t1" }),
        json!({ "kind": "turn", "event": "UserPromptSubmit" }),
        ask("t3"),
        json!({ "kind": "evidence", "event": "PostToolUse", "tool_use_id": "t3" }),
        ask("t4"),
        json!({ "kind": "turn", "event": "Stop" }),
        ask("t5"),
    ];
    for line in lines {
        send_lines(&served.socket, format!("{line}\n").as_bytes());
    }
    served.handle.shutdown();
    let log = records(&served.log);
    let answers: Vec<(String, String, String)> = log
        .iter()
        .filter(|r| r["kind"] == "ask-answer")
        .map(|r| {
            assert_eq!(r["source"], "supervisor");
            let asked = r["ask_seq"].as_u64().unwrap() as usize;
            assert_eq!(log[asked]["reported"]["tool_use_id"], r["tool_use_id"]);
            (
                r["tool_use_id"].as_str().unwrap().to_string(),
                r["answer"].as_str().unwrap().to_string(),
                r["inferred_from"]
                    .as_str()
                    .unwrap()
                    .split(' ')
                    .next()
                    .unwrap()
                    .to_string(),
            )
        })
        .collect();
    let expected = [
        ("t1", "approved", "PostToolUseFailure"),
        ("t2", "refused", "UserPromptSubmit"),
        ("t3", "approved", "PostToolUse"),
        ("t4", "refused", "Stop"),
        ("t5", "refused", "the"),
    ];
    assert_eq!(
        answers,
        expected.map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
    );
}

/// The receiver counts denials per session and rule as it takes them: the answer to the
/// connection carrying the loop's denials says so (the hook lengthens the reason from it), the
/// first restatement and the --ci stop are `denial-loop` records naming the decision's `seq`,
/// and other sessions, rules and decisions are answered as before.
#[test]
fn a_loop_of_denials_is_answered_and_recorded_by_the_receiver() {
    use stepproof::audit::denial_loops::{DenialLoops, LoopSettings};
    let (loops, watch) = DenialLoops::new(LoopSettings {
        after: 2,
        stop: true,
    });
    let served = serve_with(Path::new("/proc/self/exe"), Some(loops));
    let line = |session: &str, rule: &str, decision: &str, id: &str| {
        format!(
            "{}\n",
            json!({ "kind": "decision", "event": "PreToolUse", "decision": decision,
                    "session_id": session, "rule_id": rule, "tool": "Bash",
                    "tool_use_id": id, "input": "curl x" })
        )
    };
    let answer = |text: String| -> Value { serde_json::from_str(&text).unwrap() };
    let first = answer(send_lines(
        &served.socket,
        line("s", "r", "deny", "t1").as_bytes(),
    ));
    assert_eq!(first, json!({"accepted": 1, "malformed": 0}));
    // Another session, another rule, an allow: none of them is the loop.
    for (session, rule, decision) in [
        ("s2", "r", "deny"),
        ("s", "r2", "deny"),
        ("s", "r", "allow"),
    ] {
        let other = answer(send_lines(
            &served.socket,
            line(session, rule, decision, "t").as_bytes(),
        ));
        assert!(other.get("denial_loop").is_none(), "{other}");
    }
    let second = answer(send_lines(
        &served.socket,
        line("s", "r", "deny", "t2").as_bytes(),
    ));
    assert_eq!(
        second["denial_loop"],
        json!({"rule_id": "r", "denials": 2, "after": 2, "stop": false})
    );
    let third = answer(send_lines(
        &served.socket,
        line("s", "r", "deny", "t3").as_bytes(),
    ));
    assert_eq!(third["denial_loop"]["stop"], false);
    // Two on one connection: the answer is the last one's, the stop.
    let both = format!(
        "{}{}",
        line("s", "r", "deny", "t4"),
        line("s", "r", "deny", "t5")
    );
    let fifth = answer(send_lines(&served.socket, both.as_bytes()));
    assert_eq!(
        fifth["denial_loop"],
        json!({"rule_id": "r", "denials": 5, "after": 2, "stop": true})
    );
    served.handle.shutdown();
    let stop = watch.stopped().expect("the stop was asked for");
    assert_eq!((stop.rule_id.as_str(), stop.denials), ("r", 4));
    let log = records(&served.log);
    let loops: Vec<&Value> = log.iter().filter(|r| r["kind"] == "denial-loop").collect();
    let seq_of = |id: &str| {
        log.iter()
            .find(|r| r["kind"] == "decision" && r["reported"]["tool_use_id"] == id)
            .map(|r| r["seq"].clone())
            .unwrap()
    };
    assert_eq!(loops.len(), 2, "{loops:#?}");
    assert_eq!(
        (
            &loops[0]["stage"],
            &loops[0]["denials"],
            &loops[0]["decision_seq"]
        ),
        (&json!("restated"), &json!(2), &seq_of("t2"))
    );
    assert_eq!(
        (
            &loops[1]["stage"],
            &loops[1]["stop"],
            &loops[1]["decision_seq"]
        ),
        (&json!("stopped"), &json!(true), &seq_of("t4"))
    );
    assert!(
        loops
            .iter()
            .all(|r| r["source"] == "supervisor" && r["session_id"] == "s")
    );
}
