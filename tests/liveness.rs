//! The supervisor's work is bounded: whatever the agent shapes inside — a sparse file of 30 GiB
//! and hard links to it, a quarter of a million names, a tree ten thousand levels
//! deep, an evidence command that never ends — the run ends within `--timeout` plus a stated
//! bound, `run-end` is recorded, the chain verifies and the sweep ran. Judged from outside, as
//! root and as the test user, with a shell script as the agent calling `stepproof step …`.

mod support;

use std::fs;
use std::path::{Path, PathBuf};
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

fn records(log: &Path) -> Vec<serde_json::Value> {
    fs::read_to_string(log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
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
    let records = records(&log);
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
