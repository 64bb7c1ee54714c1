//! A signal from outside ends a run — an orchestrator's SIGTERM (`docker stop`, a Kubernetes pod
//! deleted, a CI job cancelled): the whole sandboxed tree ends (a grace period, then SIGKILL),
//! the audit chain ends in the run's `run-end` record saying so, and the exit code is 128 + the
//! signal (SIGTERM: 143). The agent here is a shell that starts children — one ignoring SIGTERM,
//! one in a session of its own — and waits; afterwards no process of the run may be left on the
//! host.

mod support;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};
use support::*;

/// The grace period of `supervisor::launch::relay::GRACE`.
const GRACE: Duration = Duration::from_secs(5);

/// A run going on: the marker in its processes' command lines, and the files it writes.
struct Going {
    marker: String,
    status: std::path::PathBuf,
    audit: std::path::PathBuf,
    summary: std::path::PathBuf,
}

/// Processes on the host whose command line holds `marker`.
fn left_over(marker: &str) -> Vec<String> {
    fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let cmdline = fs::read(e.path().join("cmdline")).ok()?;
            let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            text.contains(marker)
                .then(|| format!("{}: {text}", e.file_name().to_string_lossy()))
        })
        .collect()
}

/// Starts `stepproof-run [extra…]` with the agent: `trap` is the shell's own trap line (the
/// agent may ignore SIGTERM itself). Waits until the agent has started its children.
fn start(w: &World, extra: &[&str], trap: &str) -> (Child, Going) {
    start_with(w, extra, trap, false)
}

/// [`start`], under `nohup` when `nohup` (SIGHUP ignored from the start).
fn start_with(w: &World, extra: &[&str], trap: &str, nohup: bool) -> (Child, Going) {
    // Files the test user writes: in a directory of the world's base it may write.
    let out = w.base.join("out");
    fs::create_dir_all(&out).unwrap();
    fs::set_permissions(&out, fs::Permissions::from_mode(0o777)).unwrap();
    let marker = format!(
        "{}{:06}",
        7_000_000 + std::process::id() % 1000,
        rand_suffix()
    );
    let status = out.join("status.json");
    let audit = out.join("audit.jsonl");
    let summary = out.join("summary.md");
    let script = format!(
        "{trap}\n\
         (trap '' TERM; exec sleep {marker}1) &\n\
         setsid sleep {marker}2 &\n\
         sleep {marker}3 &\n\
         echo started > started\n\
         wait\n\
         echo the agent went on\n"
    );
    let mut args: Vec<&str> = vec![
        "--status-file",
        status.to_str().unwrap(),
        "--audit-log",
        audit.to_str().unwrap(),
        "--summary",
        summary.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let mut command = if nohup {
        let mut c = w.as_owner(Path::new("/usr/bin/nohup"));
        c.arg(w.run_binary()).args(&args).arg("--");
        c.args(["/bin/sh", "-c", &script]);
        w.clean_env(&mut c);
        c
    } else {
        w.command(&args, &["/bin/sh", "-c", &script])
    };
    let child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start stepproof-run");
    let mut child = child;
    let started = w.workspace.join("started");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !started.exists() {
        if child.try_wait().unwrap().is_some() || Instant::now() > deadline {
            let _ = child.kill();
            panic!(
                "the agent never started: {}",
                describe(&child.wait_with_output().unwrap())
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // Its three children are there (the proof that the check afterwards can see them).
    let deadline = Instant::now() + Duration::from_secs(10);
    while sleepers(&marker) < 3 {
        assert!(
            Instant::now() < deadline,
            "the agent's children: {:?}",
            left_over(&marker)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    (
        child,
        Going {
            marker,
            status,
            audit,
            summary,
        },
    )
}

/// The agent's children still running.
fn sleepers(marker: &str) -> usize {
    left_over(marker)
        .iter()
        .filter(|p| p.contains(&format!(": sleep {marker}")))
        .count()
}

fn rand_suffix() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_micros()
}

fn signal(child: &Child, sig: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), sig).unwrap();
}

/// Waits for the run to end (a run still going a minute later fails the test); its output
/// and how long it took.
fn finish(mut child: Child, since: Instant) -> (Output, Duration) {
    while child.try_wait().unwrap().is_none() {
        if since.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!(
                "the run did not end: {}",
                describe(&child.wait_with_output().unwrap())
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let took = since.elapsed();
    (child.wait_with_output().unwrap(), took)
}

/// The log's `run-end` record, the run's last word: only the supervisor's own records may
/// follow it (the record's export seals the chain with one), none from inside.
fn run_end(audit: &Path) -> serde_json::Value {
    let log = fs::read_to_string(audit).unwrap();
    let records: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let at = records
        .iter()
        .rposition(|r| r["kind"] == "run-end")
        .unwrap_or_else(|| panic!("no run-end record in {log}"));
    for after in &records[at + 1..] {
        assert_eq!(after["source"], "supervisor", "after the run-end: {after}");
    }
    records[at].clone()
}

/// The end of a terminated run: exit 128 + N, nothing of it left, the status file and the
/// audit chain say so (`audit verify --head` passes, the last record is the `run-end`).
fn check_ended(out: &Output, going: &Going, signal_name: &str, code: i32) {
    let text = describe(out);
    assert_eq!(out.status.code(), Some(code), "{text}");
    let left = left_over(&going.marker);
    assert!(
        left.is_empty(),
        "processes of the run left: {left:?}\n{text}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("the agent went on"), "{text}");
    let status: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(&going.status).unwrap()).unwrap();
    assert_eq!(status["status"], "terminated", "{status}");
    assert_eq!(status["signal_name"], signal_name, "{status}");
    assert_eq!(status["exit_code"], code, "{status}");
    // The chain verifies against the head printed at the end, and its last record is the
    // supervisor's run-end saying who ended the run.
    let stderr = String::from_utf8_lossy(&out.stderr);
    let head = audit_head_named(&stderr);
    assert_eq!(status["audit_head"], head.as_str(), "{status}");
    let verify = Command::new(STEPPROOF)
        .args(["audit", "verify"])
        .arg(&going.audit)
        .args(["--head", &head])
        .output()
        .unwrap();
    assert!(verify.status.success(), "{}", describe(&verify));
    let last = run_end(&going.audit);
    assert_eq!(last["source"], "supervisor", "{last}");
    assert_eq!(last["outcome"]["status"], "terminated", "{last}");
    assert_eq!(last["outcome"]["signal_name"], signal_name, "{last}");
    assert!(
        stderr.contains(&format!("{signal_name} from outside ended the run")),
        "{text}"
    );
}

both!(
    sigterm_ends_an_agent_that_ignores_it_within_the_grace,
    |w: &World| {
        // The agent ignores SIGTERM itself, as does one of its children: both are killed when the
        // grace period is up, the child in a session of its own with them. In CI mode: the cgroup,
        // the self-test, the job summary.
        let (child, going) = start(w, &["--ci"], "trap '' TERM");
        let since = Instant::now();
        signal(&child, nix::sys::signal::Signal::SIGTERM);
        let (out, took) = finish(child, since);
        check_ended(&out, &going, "SIGTERM", 143);
        assert!(
            took >= GRACE - Duration::from_millis(500) && took < GRACE + Duration::from_secs(5),
            "ended after {took:?}, the grace period is {GRACE:?}: {}",
            describe(&out)
        );
        // The command itself was killed when the grace was up.
        let status: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(&going.status).unwrap()).unwrap();
        assert_eq!(status["command"]["status"], "signaled", "{status}");
        assert_eq!(status["command"]["signal"], 9, "{status}");
        // The run's cgroups (named in its first record) are gone: nothing was left in them.
        let log = fs::read_to_string(&going.audit).unwrap();
        let first: serde_json::Value = serde_json::from_str(log.lines().next().unwrap()).unwrap();
        let dirs: Vec<String> = first["limits"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|l| l["place"].as_object().into_iter().flatten())
            .filter_map(|(_, place)| place["dir"].as_str().map(str::to_string))
            .collect();
        if w.who == Who::Root {
            assert!(!dirs.is_empty(), "no cgroup in {first}");
        }
        for dir in &dirs {
            assert!(!Path::new(dir).exists(), "the run's cgroup {dir} is left");
        }
        let summary = fs::read_to_string(&going.summary).unwrap();
        assert!(summary.contains("**terminated** (exit 143)"), "{summary}");
        assert!(
            summary.contains("Terminated: SIGTERM from outside ended the run"),
            "{summary}"
        );
    }
);

both!(an_agent_that_ends_on_sigterm_ends_at_once, |w: &World| {
    // The shell dies of SIGTERM at once; its children (one ignoring SIGTERM, one in its own
    // session) go with it, without waiting for the grace period.
    let (child, going) = start(w, &[], "");
    let since = Instant::now();
    signal(&child, nix::sys::signal::Signal::SIGTERM);
    let (out, took) = finish(child, since);
    check_ended(&out, &going, "SIGTERM", 143);
    assert!(
        took < GRACE - Duration::from_secs(1),
        "ended after {took:?}: {}",
        describe(&out)
    );
    let status: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(&going.status).unwrap()).unwrap();
    assert_eq!(status["command"]["status"], "signaled", "{status}");
    assert_eq!(status["command"]["signal"], 15, "{status}");
});

both!(
    sigint_then_sigterm_as_a_cancelled_ci_job_sends_them,
    |w: &World| {
        // GitHub's runner cancels a step with SIGINT, then SIGTERM 7.5 s later, then kills it 2.5 s
        // after that. SIGINT alone is the command's to act on: an agent that ignores it goes on.
        // The grace counts from the SIGINT, so the SIGTERM that follows it by more than the grace
        // ends the sandbox at once.
        let (child, going) = start(w, &[], "trap '' INT TERM");
        signal(&child, nix::sys::signal::Signal::SIGINT);
        std::thread::sleep(GRACE + Duration::from_millis(500));
        assert_eq!(
            sleepers(&going.marker),
            3,
            "SIGINT alone ended the run: {:?}",
            left_over(&going.marker)
        );
        let since = Instant::now();
        signal(&child, nix::sys::signal::Signal::SIGTERM);
        let (out, took) = finish(child, since);
        check_ended(&out, &going, "SIGTERM", 143);
        assert!(
            took < Duration::from_millis(2500),
            "ended {took:?} after the SIGTERM: {}",
            describe(&out)
        );
    }
);

both!(a_hangup_ends_the_run_with_129, |w: &World| {
    let (child, going) = start(w, &[], "trap '' HUP");
    let since = Instant::now();
    signal(&child, nix::sys::signal::Signal::SIGHUP);
    // A second signal while the run is ending kills the sandbox at once.
    std::thread::sleep(Duration::from_millis(300));
    signal(&child, nix::sys::signal::Signal::SIGTERM);
    let (out, took) = finish(child, since);
    check_ended(&out, &going, "SIGHUP", 129);
    assert!(
        took < GRACE - Duration::from_secs(1),
        "ended after {took:?}: {}",
        describe(&out)
    );
});

both!(a_hangup_ignored_at_start_stays_ignored, |w: &World| {
    // Under nohup the hang-up is not the run's end (nor the command's: it is not passed on);
    // a SIGTERM still is.
    let (child, going) = start_with(w, &[], "", true);
    signal(&child, nix::sys::signal::Signal::SIGHUP);
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        sleepers(&going.marker),
        3,
        "the hang-up ended the run: {:?}",
        left_over(&going.marker)
    );
    let since = Instant::now();
    signal(&child, nix::sys::signal::Signal::SIGTERM);
    let (out, _) = finish(child, since);
    check_ended(&out, &going, "SIGTERM", 143);
});

both!(
    a_sigterm_before_the_command_starts_ends_the_run_there,
    |w: &World| {
        // In CI mode the self-test runs first (its own stepproof-run, whose command line names the
        // workspace): a SIGTERM then is held, and the run ends before the command is started, with
        // its end record.
        let out_dir = w.base.join("out");
        fs::create_dir_all(&out_dir).unwrap();
        fs::set_permissions(&out_dir, fs::Permissions::from_mode(0o777)).unwrap();
        let status = out_dir.join("status.json");
        let audit = out_dir.join("audit.jsonl");
        let workspace = w.workspace.to_str().unwrap().to_string();
        let mut child = w
            .command(
                &[
                    "--ci",
                    "--workspace",
                    &workspace,
                    "--status-file",
                    status.to_str().unwrap(),
                    "--audit-log",
                    audit.to_str().unwrap(),
                ],
                &["/bin/sh", "-c", "echo ran > ran"],
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let selftest_running = || {
            left_over(&workspace)
                .iter()
                .any(|p| p.contains("--selftest"))
        };
        while !selftest_running() {
            if child.try_wait().unwrap().is_some() || Instant::now() > deadline {
                let _ = child.kill();
                panic!(
                    "the self-test was not seen: {}",
                    describe(&child.wait_with_output().unwrap())
                );
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        signal(&child, nix::sys::signal::Signal::SIGTERM);
        let (out, _) = finish(child, Instant::now());
        let text = describe(&out);
        assert_eq!(out.status.code(), Some(143), "{text}");
        assert!(!w.workspace.join("ran").exists(), "the command ran: {text}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("SIGTERM before the command started"),
            "{text}"
        );
        let status: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(&status).unwrap()).unwrap();
        assert_eq!(status["status"], "terminated", "{status}");
        assert!(status["command"].is_null(), "{status}");
        let verify = Command::new(STEPPROOF)
            .args(["audit", "verify"])
            .arg(&audit)
            .args(["--head", status["audit_head"].as_str().unwrap()])
            .output()
            .unwrap();
        assert!(verify.status.success(), "{}", describe(&verify));
        let last = run_end(&audit);
        assert_eq!(last["outcome"]["status"], "terminated", "{last}");
    }
);
