//! The supervisor's work is bounded: whatever the agent shapes inside — a sparse file of 30 GiB
//! and hard links to it, a quarter of a million names, a tree ten thousand levels
//! deep, an evidence command that never ends — the run ends within `--timeout` plus a stated
//! bound, `run-end` is recorded, the chain verifies and the sweep ran. Judged from outside, as
//! root and as the test user, with a shell script as the agent calling `stepproof step …`.

mod support;

use std::fs;
use std::path::PathBuf;
use std::process::Output;
use std::time::{Duration, Instant};
use support::{STEPPROOF, Who, World, describe};

/// What the end of a run may add to `--timeout`: the relay's grace for the sandbox, the
/// servers' stop ([`SHUTDOWN_WAIT`](stepproof::supervisor::runbook::engine::SHUTDOWN_WAIT)),
/// the sweep of a small workspace and the records, with room for a loaded machine.
const END_BOUND: Duration = Duration::from_secs(12);

fn setup(w: &World, runbook: &str, script: &str) {
    fs::write(w.workspace.join("runbook.toml"), runbook).unwrap();
    fs::write(w.workspace.join("agent.sh"), script).unwrap();
    support::chown_tree(&w.workspace, w.owner);
}

/// `stepproof-run --runbook runbook.toml [extra…] -- sh agent.sh`, timed.
fn run(w: &World, extra: &[&str]) -> (Output, Duration) {
    let mut args = vec!["--runbook", "runbook.toml"];
    args.extend(extra);
    let started = Instant::now();
    let out = w
        .command(&args, &["/bin/sh", "agent.sh"])
        .output()
        .expect("start stepproof-run");
    let took = started.elapsed();
    // The figure for the record (`cargo test --test liveness -- --nocapture`).
    eprintln!("liveness: {:?} run ended after {took:.2?}", w.who);
    (out, took)
}

/// The run ended in order: `run-end` recorded, the sweep ran, the chain verifies.
fn ended_in_order(out: &Output) -> (PathBuf, Vec<serde_json::Value>) {
    let all = describe(out);
    let log = support::audit_log_named(&String::from_utf8_lossy(&out.stderr));
    let verify = std::process::Command::new(STEPPROOF)
        .args(["audit", "verify"])
        .arg(&log)
        .output()
        .unwrap();
    assert!(
        verify.status.success(),
        "audit verify: {}\n{all}",
        describe(&verify)
    );
    let records = support::records_in(&log);
    let kinds: Vec<&str> = records.iter().filter_map(|r| r["kind"].as_str()).collect();
    assert!(kinds.contains(&"sweep"), "no sweep: {kinds:?}\n{all}");
    assert_eq!(kinds.last(), Some(&"run-end"), "{kinds:?}\n{all}");
    (log, records)
}

fn evidence_budgets(records: &[serde_json::Value]) -> Vec<String> {
    records
        .iter()
        .filter(|r| r["kind"] == "runbook-evidence")
        .filter_map(|r| r["budget"].as_str())
        .map(str::to_string)
        .collect()
}

const FILES_RUNBOOK: &str = r#"
id = "liveness"
title = "Files the agent shapes"
owner = "tests"

[[steps]]
id = "files"
title = "Make the data"
instructions = "Make data/"
[[steps.evidence]]
files_exist = { paths = ["data/**"] }
"#;

both!(
    a_sparse_giant_and_its_hard_links_end_within_the_timeout,
    |w: &World| {
        // 30 GiB with no disk used (the default profile's file-size limit is 32 GiB), two more
        // names for it, a completion in the background, and the agent gone a second later.
        setup(
            w,
            FILES_RUNBOOK,
            "mkdir data && truncate -s 30G data/big && ln data/big data/big2 && ln data/big data/big3\n\
         /run/stepproof/stepproof step complete > complete.out 2>&1 &\n\
         sleep 1\n",
        );
        let (out, took) = run(w, &["--timeout", "8s"]);
        let all = describe(&out);
        assert!(
            took < Duration::from_secs(8) + END_BOUND,
            "took {took:?}\n{all}"
        );
        let (_, records) = ended_in_order(&out);
        // Refused by its size before a byte was read: the item failed naming the budget.
        let budgets = evidence_budgets(&records);
        assert_eq!(budgets, ["file_bytes"], "{all}");
        let evidence = records
            .iter()
            .find(|r| r["kind"] == "runbook-evidence")
            .unwrap()
            .to_string();
        assert!(evidence.contains("sparse"), "{evidence}");
        let answer = fs::read_to_string(w.workspace.join("complete.out")).unwrap_or_default();
        assert!(
            answer.contains("over the 1073741824 bytes the supervisor hashes of one file"),
            "{answer}\n{all}"
        );
    }
);

const SHAPES_RUNBOOK: &str = r#"
id = "shapes"
title = "Trees the agent shapes"
owner = "tests"

[[steps]]
id = "trees"
title = "Make the trees"
instructions = "Make many/ and deep/"
[[steps.evidence]]
files_exist = { paths = ["many/**"] }
[[steps.evidence]]
files_exist = { paths = ["deep/**"] }
[[steps.evidence]]
files_changed = { paths = ["many/**"] }
"#;

both!(many_names_and_a_deep_tree_are_named_budgets, |w: &World| {
    // 250,000 names in one directory (over the walk's 200,000 entries: a hard-link farm, four
    // files with 62,500 names each) and a tree 10,000 levels deep (over its 128 levels), there
    // when the run starts (an earlier run's work, made here outside: new inodes cost this
    // machine's disk ~0.3 ms each). Each item fails
    // naming its budget, at once; the baseline of `many/**` could not be taken either.
    setup(
        w,
        SHAPES_RUNBOOK,
        "/run/stepproof/stepproof step complete > complete.out 2>&1; echo \"complete=$?\"\n",
    );
    let made = std::process::Command::new("python3")
        .arg("-c")
        .arg(
            "import os, sys\nos.chdir(sys.argv[1])\nos.mkdir('many')\n\
             for k in range(4):\n    open('many/f%d' % k, 'w').close()\n    \
             for n in range(62500):\n        os.link('many/f%d' % k, 'many/%d-%d' % (k, n))\n\
             os.mkdir('deep')\nos.chdir('deep')\n\
             for n in range(10000):\n    os.mkdir('d')\n    os.chdir('d')\n\
             open('leaf', 'w').close()\n",
        )
        .arg(&w.workspace)
        .status()
        .unwrap();
    assert!(made.success());
    let owner = format!("{}:{}", w.owner.0, w.owner.1);
    for dir in ["many", "deep"] {
        let chowned = std::process::Command::new("chown")
            .args(["-R", &owner])
            .arg(w.workspace.join(dir))
            .status()
            .unwrap();
        assert!(chowned.success());
    }
    let (out, took) = run(w, &["--timeout", "60s"]);
    let all = describe(&out);
    assert!(
        took < Duration::from_secs(60) + END_BOUND,
        "took {took:?}\n{all}"
    );
    let (_, records) = ended_in_order(&out);
    let budgets = evidence_budgets(&records);
    let evidence: Vec<&serde_json::Value> = records
        .iter()
        .filter(|r| r["kind"] == "runbook-evidence" || r["kind"] == "runbook-step-opened")
        .collect();
    assert_eq!(
        budgets,
        ["entries", "depth", "entries"],
        "{evidence:#?}\n{all}"
    );
    let opened = records
        .iter()
        .find(|r| r["kind"] == "runbook-step-opened")
        .unwrap();
    assert_eq!(opened["baseline_budget"], "entries", "{opened}");
    let answer = fs::read_to_string(w.workspace.join("complete.out")).unwrap_or_default();
    assert!(
        answer.contains("200000 directory entries")
            && answer.contains("deeper than 128")
            && answer.contains("baseline could not be taken"),
        "{answer}\n{all}"
    );
    // Nothing of it is left in /tmp (`rm` walks 10,000 levels where a recursive remove could not).
    for dir in ["many", "deep"] {
        let _ = std::process::Command::new("rm")
            .args(["-rf"])
            .arg(w.workspace.join(dir))
            .status();
    }
});

const SLOW_RUNBOOK: &str = r#"
id = "slow"
title = "Evidence that never ends"
owner = "tests"

[[steps]]
id = "wait"
title = "Wait"
instructions = "Nothing"
[[steps.evidence]]
command = { run = ["sh", "-c", "sleep 600; : TOKEN"], timeout = "20m" }
"#;

/// The agent asks for a completion in the background, asks for the status while it is being
/// checked (printing how long the answer took), then outlives the run.
const SLOW_AGENT: &str = r#"S=/run/stepproof/stepproof
$S step complete > complete.out 2>&1 &
sleep 2
python3 - <<'EOF'
import subprocess, time
t = time.monotonic()
r = subprocess.run(["/run/stepproof/stepproof", "step", "status"], capture_output=True, text=True)
print("status-ms=%d exit=%d" % ((time.monotonic() - t) * 1000, r.returncode))
r = subprocess.run(["/run/stepproof/stepproof", "step", "complete"], capture_output=True, text=True)
print("second-complete:", r.stdout.strip(), r.stderr.strip())
EOF
sleep 300
"#;

/// The evidence sandbox of a completion still in flight is ended with the run: the record says
/// the step was interrupted, and nothing of it is left running.
fn interrupted(w: &World, out: &Output, records: &[serde_json::Value]) {
    let all = describe(out);
    let kinds: Vec<&str> = records.iter().filter_map(|r| r["kind"].as_str()).collect();
    assert!(
        kinds.contains(&"runbook-step-interrupted"),
        "{kinds:?}\n{all}"
    );
    assert!(
        !support::process_running(&["sh", "-c", &format!("sleep 600; : {}", token(w))]),
        "the evidence command outlived the run\n{all}"
    );
}

/// This world's mark on its evidence command (the root and user tests run at once).
fn token(w: &World) -> String {
    w.base.file_name().unwrap().to_string_lossy().into_owned()
}

both!(
    an_endless_evidence_command_ends_with_the_timeout,
    |w: &World| {
        setup(w, &SLOW_RUNBOOK.replace("TOKEN", &token(w)), SLOW_AGENT);
        let (out, took) = run(w, &["--timeout", "8s"]);
        let all = describe(&out);
        assert!(
            took < Duration::from_secs(8) + END_BOUND,
            "took {took:?}\n{all}"
        );
        let (_, records) = ended_in_order(&out);
        interrupted(w, &out, &records);
        // The status was answered while the completion was being checked (a frozen agent, where
        // the run has a freezer, asks nothing meanwhile: then there is no line).
        let text = String::from_utf8_lossy(&out.stdout);
        if let Some(line) = text.lines().find(|l| l.starts_with("status-ms=")) {
            let ms: u64 = line["status-ms=".len()..]
                .split(' ')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            assert!(ms < 3000 && line.ends_with("exit=0"), "{line}\n{all}");
            assert!(
                text.contains("a completion is being checked already"),
                "a second completion waits for nothing: {all}"
            );
        } else {
            assert!(w.who == Who::Root, "the status was never answered: {all}");
        }
    }
);

both!(sigterm_during_an_evidence_run_ends_in_order, |w: &World| {
    setup(w, &SLOW_RUNBOOK.replace("TOKEN", &token(w)), SLOW_AGENT);
    let mut args = vec!["--runbook", "runbook.toml"];
    args.extend(["--timeout", "5m"]);
    let started = Instant::now();
    let child = w
        .command(&args, &["/bin/sh", "agent.sh"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(4));
    let signalled = Instant::now();
    // The run's own stepproof-run (as the test user, setpriv execs it: same pid).
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    let all = describe(&out);
    eprintln!(
        "liveness: {:?} run ended {:.2?} after SIGTERM",
        w.who,
        signalled.elapsed()
    );
    assert!(
        signalled.elapsed() < END_BOUND,
        "the end took {:?} after SIGTERM\n{all}",
        signalled.elapsed()
    );
    assert!(started.elapsed() < Duration::from_secs(60), "{all}");
    let (_, records) = ended_in_order(&out);
    interrupted(w, &out, &records);
});

both!(
    a_flood_of_what_the_agent_causes_stays_within_the_record_budget,
    |w: &World| {
        // 1 MiB and 50 records a second (a burst of 500) for what the agent causes: 3,000 requests
        // the proxy refuses, as fast as one process makes them, then 200 hook reports.
        let dir = w.base.join("out");
        fs::create_dir_all(&dir).unwrap();
        support::chown_tree(&dir, w.owner);
        let profile = dir.join("budget.toml");
        fs::write(
            &profile,
            "extends = \"default\"\n[audit]\ninside_max_mib = 1\ninside_max_per_second = 50\n",
        )
        .unwrap();
        let log = dir.join("audit.jsonl");
        let status = dir.join("status.json");
        let flood = r#"
import json, os, socket, subprocess, time
host, port = os.environ["HTTPS_PROXY"].rsplit("/", 1)[-1].rsplit(":", 1)
started = time.monotonic()
for n in range(3000):
    s = socket.create_connection((host, int(port)))
    s.sendall(b"CONNECT evil-%d.example:443 HTTP/1.1\r\nHost: evil.example:443\r\n\r\n" % n)
    s.recv(4096)
    s.close()
print("flood-seconds=%.2f" % (time.monotonic() - started))
inp = json.dumps({"session_id": "s", "transcript_path": "/tmp/t", "cwd": os.getcwd(),
                  "hook_event_name": "PreToolUse", "tool_name": "Bash",
                  "tool_input": {"command": "ls"}, "tool_use_id": "t1"})
for i in range(200):
    subprocess.run(["/run/stepproof/stepproof-hook", "--policy", "/run/stepproof/policy",
                    "--audit-socket", "/run/stepproof/audit.sock", "--event", "PreToolUse"],
                   input=inp.encode(), capture_output=True)
"#;
        let started = Instant::now();
        let out = w
            .command(
                &[
                    "--profile",
                    profile.to_str().unwrap(),
                    "--audit-log",
                    log.to_str().unwrap(),
                    "--status-file",
                    status.to_str().unwrap(),
                ],
                &["/usr/bin/python3", "-c", flood],
            )
            .output()
            .unwrap();
        let all = describe(&out);
        eprintln!(
            "liveness: {:?} flood run ended after {:.2?}",
            w.who,
            started.elapsed()
        );
        assert_eq!(out.status.code(), Some(0), "{all}");
        let records = support::records_in(&log);
        let network = records.iter().filter(|r| r["kind"] == "network").count();
        let hook = records.iter().filter(|r| r["source"] == "sandbox").count();
        // The burst and what trickled in at 50 a second, not 3,200 records.
        assert!(
            network + hook < 1500,
            "{network} network and {hook} hook records\n{all}"
        );
        assert!(network >= 400, "{network}");
        let summary = records
            .iter()
            .rfind(|r| r["kind"] == "inside-records-over-cap")
            .unwrap_or_else(|| panic!("no summary of what was not written\n{all}"));
        let not_written = summary["not_written"].as_u64().unwrap();
        assert_eq!(
            not_written as usize + network + hook,
            3200,
            "every record the agent caused is written or counted: {summary}"
        );
        assert!(
            summary["not_written_by_kind"]["network"].as_u64().unwrap() > 1000,
            "{summary}"
        );
        let end = records.last().unwrap();
        assert_eq!(end["kind"], "run-end");
        assert_eq!(
            end["records_over_budget"]["not_written"], not_written,
            "{end}"
        );
        let status: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(&status).unwrap()).unwrap();
        assert_eq!(
            status["inside_records_not_written"], not_written,
            "{status}"
        );
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(&format!(
                "{not_written} records the agent caused were NOT written"
            )),
            "{all}"
        );
        let verify = std::process::Command::new(STEPPROOF)
            .args(["audit", "verify"])
            .arg(&log)
            .output()
            .unwrap();
        assert!(verify.status.success(), "{}", describe(&verify));
    }
);

both!(
    budgets_are_the_profiles_and_raised_only_from_outside,
    |w: &World| {
        // Lowered by the person's own profile (outside the workspace): a 2 MiB file is over a
        // 1 MiB budget.
        let dir = w.base.join("profiles");
        fs::create_dir_all(&dir).unwrap();
        let outside = dir.join("low.toml");
        fs::write(
            &outside,
            "extends = \"default\"\n[runbook]\nevidence_file_mib = 1\n",
        )
        .unwrap();
        support::chown_tree(&dir, w.owner);
        setup(
            w,
            FILES_RUNBOOK,
            "mkdir data && head -c 2097152 /dev/zero > data/two-mib\n\
         /run/stepproof/stepproof step complete > complete.out 2>&1\n",
        );
        let (out, _) = run(w, &["--profile", outside.to_str().unwrap()]);
        let (_, records) = ended_in_order(&out);
        assert_eq!(
            evidence_budgets(&records),
            ["file_bytes"],
            "{}",
            describe(&out)
        );
        let answer = fs::read_to_string(w.workspace.join("complete.out")).unwrap_or_default();
        assert!(answer.contains("over the 1048576 bytes"), "{answer}");
        // Raised by a profile inside the workspace (a checked-out file): refused before anything
        // runs, naming the file and every key raised.
        for raise in [
            "[runbook]\nevidence_seconds = 3600\n",
            "[audit]\ninside_max_mib = 1024\n",
            "[audit]\ninside_max_per_second = 100000\n",
        ] {
            let inside = w.workspace.join("raise.toml");
            fs::write(&inside, format!("extends = \"default\"\n{raise}")).unwrap();
            support::chown_tree(&inside, w.owner);
            let out = w
                .command(&["--profile", inside.to_str().unwrap()], &["/bin/true"])
                .output()
                .unwrap();
            let all = describe(&out);
            assert_eq!(out.status.code(), Some(120), "{raise}: {all}");
            let key = raise.lines().nth(1).unwrap().split(' ').next().unwrap();
            assert!(
                all.contains("is inside the workspace and the profile raises") && all.contains(key),
                "{raise}: {all}"
            );
        }
        // Lowered from inside: fine.
        let inside = w.workspace.join("lower.toml");
        fs::write(
            &inside,
            "extends = \"default\"\n[runbook]\nevidence_seconds = 5\n[audit]\ninside_max_mib = 8\n",
        )
        .unwrap();
        support::chown_tree(&inside, w.owner);
        let out = w
            .command(&["--profile", inside.to_str().unwrap()], &["/bin/true"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    }
);

both!(
    special_files_long_names_and_a_stalled_client_hang_nothing,
    |w: &World| {
        // In data/: a FIFO (opening it to read would wait for a writer), a unix socket, a name of
        // 255 bytes and a regular file. A client holds the step socket open without a word while
        // the agent asks for the status and completes the step.
        setup(w, FILES_RUNBOOK, SPECIAL_AGENT);
        let (out, took) = run(w, &["--timeout", "60s"]);
        let all = describe(&out);
        assert!(took < Duration::from_secs(30), "took {took:?}\n{all}");
        assert_eq!(out.status.code(), Some(0), "{all}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("complete-exit=0"), "{all}");
        let status_ms: u64 = text
            .lines()
            .find_map(|l| l.strip_prefix("status-ms="))
            .and_then(|l| l.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(u64::MAX);
        assert!(status_ms < 3000, "{all}");
        let (_, records) = ended_in_order(&out);
        let evidence = records
            .iter()
            .find(|r| r["kind"] == "runbook-evidence")
            .unwrap();
        // Only the regular files are evidence: the FIFO and the socket are not opened.
        let found: Vec<&str> = evidence["found"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(found.len(), 2, "{evidence}");
        assert!(found.contains(&"data/regular"), "{evidence}");
        assert!(
            found.iter().any(|f| f.len() == "data/".len() + 255),
            "{evidence}"
        );
    }
);

const SPECIAL_AGENT: &str = r#"mkdir data && mkfifo data/fifo && echo ok > data/regular
python3 - <<'PY'
import socket, subprocess, time
s = socket.socket(socket.AF_UNIX)
s.bind("data/sock")
open("data/" + "n" * 255, "w").write("long")
stalled = socket.socket(socket.AF_UNIX)
stalled.connect("/run/stepproof/runbook/step.sock")
t = time.monotonic()
r = subprocess.run(["/run/stepproof/stepproof", "step", "status"], capture_output=True, text=True)
print("status-ms=%d exit=%d" % ((time.monotonic() - t) * 1000, r.returncode))
r = subprocess.run(["/run/stepproof/stepproof", "step", "complete"], capture_output=True, text=True)
print("complete-exit=%d" % r.returncode)
print(r.stdout)
PY
"#;
