//! Work owed survives the supervisor (issue 38): a run whose supervisor is killed with SIGKILL
//! after the agent wrote a key that runs code (`core.fsmonitor`) into the workspace's
//! repository config and a nested repository's, at several phases (while the command runs,
//! and at each step of the end after the write), owes its end. `stepproof doctor`, `stepproof
//! state show` and `stepproof audit show` say so and name `stepproof repair`; then `stepproof
//! repair` — or the next `stepproof-run` on the workspace, before it takes its own snapshot —
//! finishes it: judged from outside, the host's `git status`, `git add` and `git commit` in
//! every repository run no payload, the configs are as they were at launch, an ordinary change
//! (`git config user.name x` in a third repository) is kept as the sweep keeps it, the killed
//! run's log ends in `run-end-recovered`, and `stepproof audit verify` says it ended by
//! recovery (exit 5). Nothing is owed afterwards. A normal run leaves no marker. Root and the
//! unprivileged test user.
//!
//! The host's git is run before the repair too: the repositories' `.git` are seen through
//! layers kept in the run directory, so between the kill and the repair the host's git sees its
//! configs as they were at launch and runs nothing of the run's.

mod support;

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use support::*;

const GIT: &str = "git -c user.name=t -c user.email=t@t -c safe.directory=*";

/// The workspace as a real repository with one commit, and two nested ones: `sub` (poisoned by
/// the run) and `plain` (an ordinary change only).
fn real_repositories(w: &World) {
    fs::remove_dir_all(w.workspace.join(".git")).unwrap();
    let script = format!(
        "set -e; cd {ws}; {GIT} init -q; {GIT} add README; {GIT} commit -q -m init; \
         for r in sub plain; do mkdir $r; (cd $r && {GIT} init -q && echo x > f && {GIT} add f && {GIT} commit -q -m $r); done",
        ws = w.workspace.display()
    );
    let out = Command::new("/bin/sh")
        .args(["-c", &script])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    chown_tree(&w.workspace, w.owner);
}

/// `stepproof` as the world's owner (a copy the test user can execute).
fn stepproof(w: &World, args: &[&str]) -> Output {
    let program = match w.who {
        Who::Root => PathBuf::from(STEPPROOF),
        Who::User => run_binary_for_user().with_file_name("stepproof"),
    };
    let mut cmd = w.as_owner(&program);
    cmd.args(args);
    w.clean_env(&mut cmd);
    cmd.output().unwrap()
}

fn runs_dir(w: &World) -> PathBuf {
    w.home.join(".local/state/stepproof/runs")
}

/// Run directories that hold a marker of work owed.
fn owed_dirs(w: &World) -> Vec<PathBuf> {
    fs::read_dir(runs_dir(w))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|d| d.join("owed.json").is_file())
        .collect()
}

/// Whether a process of session `sid` is alive (zombies aside).
fn session_alive(sid: u32) -> bool {
    fs::read_dir("/proc").unwrap().flatten().any(|e| {
        fs::read_to_string(e.path().join("stat")).is_ok_and(|stat| {
            let Some((_, rest)) = stat.rsplit_once(')') else {
                return false;
            };
            let fields: Vec<&str> = rest.split_whitespace().collect();
            fields.first() != Some(&"Z") && fields.get(3) == Some(&sid.to_string().as_str())
        })
    })
}

/// Where the supervisor is killed.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kill {
    /// While the command runs, once its writes show from outside.
    WhileRunning,
    /// Once the supervisor printed this debug line (the command wrote and exited before).
    After(String),
}

/// Starts a run whose command poisons the workspace's and `sub`'s configs and changes `plain`'s
/// name, and kills its supervisor with SIGKILL at `kill`. Returns whether the supervisor died
/// of the kill (not having ended on its own first).
fn run_and_kill(w: &World, payload: &str, kill: &Kill) -> bool {
    run_and_kill_with(w, &[], payload, kill)
}

/// [`run_and_kill`] with `stepproof-run` options.
fn run_and_kill_with(w: &World, options: &[&str], payload: &str, kill: &Kill) -> bool {
    // A key that runs code in two repositories' configs, and a protected name that redirects
    // git (`commondir`, last: git inside would follow it), beside an ordinary change.
    let write = format!(
        "{GIT} config core.fsmonitor '{payload}' && {GIT} -C sub config core.fsmonitor '{payload}' && \
         {GIT} -C plain config user.name x && printf '../elsewhere\\n' > sub/.git/commondir"
    );
    let script = match kill {
        Kill::WhileRunning => format!("{write} && touch written && exec sleep 60"),
        Kill::After(_) => write,
    };
    spawn_and_kill(w, options, &script, kill)
}

/// Starts `stepproof-run OPTIONS -- sh -c SCRIPT` and kills its supervisor with SIGKILL at
/// `kill` (`WhileRunning`: once SCRIPT has created `written` in the workspace).
fn spawn_and_kill(w: &World, options: &[&str], script: &str, kill: &Kill) -> bool {
    let mut cmd = w.as_owner(Path::new("setsid"));
    cmd.arg(w.run_binary())
        .args(options)
        .args(["--", "/bin/sh", "-c", script]);
    w.clean_env(&mut cmd)
        .env("STEPPROOF_LOG", "debug")
        .env("NO_COLOR", "1");
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let sid = child.id();
    let stderr = child.stderr.take().unwrap();
    let mut seen = Vec::new();
    match kill {
        Kill::WhileRunning => {
            // Drained on a thread, so that the supervisor never blocks on a full pipe.
            std::thread::spawn(move || for _ in BufReader::new(stderr).lines() {});
            let deadline = Instant::now() + Duration::from_secs(30);
            // Said by the run itself: the host's configs never show what it wrote.
            let written = || w.workspace.join("written").exists();
            while !written() {
                assert!(Instant::now() < deadline, "the run never wrote its configs");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        Kill::After(marker) => {
            let mut lines = BufReader::new(stderr).lines();
            loop {
                match lines.next() {
                    Some(Ok(line)) => {
                        let found = line.contains(marker.as_str());
                        seen.push(line);
                        if found {
                            break;
                        }
                    }
                    _ => panic!(
                        "the run ended without printing {marker:?}:\n{}",
                        seen.join("\n")
                    ),
                }
            }
            std::thread::spawn(move || for _ in lines {});
        }
    }
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(sid as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
    let status = child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while session_alive(sid) {
        assert!(
            Instant::now() < deadline,
            "processes of the killed run are left ({kill:?})"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    use std::os::unix::process::ExitStatusExt;
    status.signal() == Some(libc::SIGKILL)
}

fn says_owed(out: &Output) -> bool {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    text.contains("OWED") && text.contains("stepproof repair")
}

both!(
    a_killed_run_is_finished_by_repair_or_the_next_run,
    |w: &World| {
        real_repositories(w);
        let pwned = w.home.join("PWNED");
        let payload = format!("touch {}; false #", pwned.display());
        let dirs: Vec<PathBuf> = ["", "sub", "plain"]
            .iter()
            .map(|d| w.workspace.join(d))
            .collect();
        // The payload works: planted on the host in a repository of its own, the host's git runs it.
        let control = w.home.join("control");
        fs::create_dir_all(&control).unwrap();
        let out = Command::new("/bin/sh")
            .args([
                "-c",
                &format!(
                    "cd {} && {GIT} init -q && {GIT} config core.fsmonitor '{payload}'",
                    control.display()
                ),
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", describe(&out));
        chown_tree(&control, w.owner);
        host_git(w, std::slice::from_ref(&control));
        assert!(pwned.exists(), "the payload does not run in the host's git");
        fs::remove_file(&pwned).unwrap();
        fs::remove_dir_all(&control).unwrap();

        let launch: Vec<String> = [".git/config", "sub/.git/config"]
            .iter()
            .map(|p| fs::read_to_string(w.workspace.join(p)).unwrap())
            .collect();
        // Every step of the end after the command wrote and exited: the supervisor's debug
        // lines from "sandbox gone" on, as a whole run (whose own end puts the config back)
        // prints them.
        let script = format!("{GIT} config core.fsmonitor '{payload}'");
        let mut whole = w.command(&[], &["/bin/sh", "-c", &script]);
        whole.env("STEPPROOF_LOG", "debug").env("NO_COLOR", "1");
        let whole = whole.output().unwrap();
        assert_eq!(whole.status.code(), Some(123), "{}", describe(&whole));
        let mut phases = vec![Kill::WhileRunning];
        let mut after = false;
        for line in String::from_utf8_lossy(&whole.stderr).lines() {
            let Some((_, message)) = line.split_once(" DEBUG ") else {
                continue;
            };
            after |= message.contains("sandbox gone");
            // Lines whose text is the same in every run (no counts, times or fields).
            let fixed = !message.contains(|c: char| c.is_ascii_digit() || c == '=');
            let phase = Kill::After(message.to_string());
            if after && fixed && !phases.contains(&phase) {
                phases.push(phase);
            }
        }
        assert!(phases.len() > 5, "{phases:?}\n{}", describe(&whole));
        let started = Instant::now();
        let mut owed_phases = 0;
        for (round, kill) in phases.iter().enumerate() {
            let killed = run_and_kill(w, &payload, kill);
            let owed = owed_dirs(w);
            assert!(owed.len() <= 1, "{kill:?}: {owed:?}");
            // Killed while the command runs, the run certainly owes its end; after a line of
            // the end, it may have finished first (the later the line, the likelier).
            if *kill == Kill::WhileRunning {
                assert!(
                    killed && owed.len() == 1,
                    "{kill:?}: killed {killed}, owed {owed:?}"
                );
            }
            let via_next_run = round % 2 == 1;
            let _ = fs::remove_file(w.workspace.join("written"));
            // Before any repair: the host's configs are their launch versions and its git, in
            // every repository, runs nothing of the run's.
            for (rel, text) in [".git/config", "sub/.git/config"].iter().zip(&launch) {
                assert_eq!(
                    &fs::read_to_string(w.workspace.join(rel)).unwrap(),
                    text,
                    "{kill:?}: {rel} before the repair"
                );
            }
            assert!(
                !w.workspace.join("sub/.git/commondir").exists(),
                "{kill:?}: the run's commondir reached the host before the repair"
            );
            let host = host_git(w, &dirs);
            assert!(
                !pwned.exists(),
                "{kill:?}: before the repair, the host's git ran the run's payload: {}",
                describe(&host)
            );
            if let Some(run_dir) = owed.first() {
                owed_phases += 1;
                let log = run_dir.join("audit.jsonl");
                // Before the repair: every command that looks says that work is owed.
                let doctor = stepproof(w, &["doctor"]);
                assert!(
                    says_owed(&doctor)
                        && String::from_utf8_lossy(&doctor.stdout)
                            .contains(&w.workspace.display().to_string()),
                    "{kill:?}: doctor: {}",
                    describe(&doctor)
                );
                let state = stepproof(w, &["state", "show"]);
                assert!(says_owed(&state), "{kill:?}: state: {}", describe(&state));
                let show = stepproof(w, &["audit", "show", log.to_str().unwrap()]);
                assert!(
                    says_owed(&show),
                    "{kill:?}: audit show: {}",
                    describe(&show)
                );
                // Killed after its own end record, before its marker went: the repair adds none.
                let had_end = records_in(&log).iter().any(|r| r["kind"] == "run-end");
                // The repair.
                if via_next_run {
                    let out = w.run(&["/bin/true"]);
                    assert_eq!(out.status.code(), Some(0), "{kill:?}: {}", describe(&out));
                    let stderr = String::from_utf8_lossy(&out.stderr);
                    assert!(
                        stderr.contains("stepproof-run: finished the end of run")
                            && stderr.contains(&run_dir.display().to_string()),
                        "{kill:?}: {stderr}"
                    );
                } else {
                    let out = stepproof(w, &["repair"]);
                    assert_eq!(out.status.code(), Some(0), "{kill:?}: {}", describe(&out));
                    assert!(
                        String::from_utf8_lossy(&out.stdout).contains("finished the end of run"),
                        "{kill:?}: {}",
                        describe(&out)
                    );
                }
                assert!(owed_dirs(w).is_empty(), "{kill:?}: still owed");
                // Recorded, and said by verify.
                let records = records_in(&log);
                let recovered: Vec<&serde_json::Value> = records
                    .iter()
                    .filter(|r| r["kind"] == "run-end-recovered")
                    .collect();
                let verify = stepproof(w, &["audit", "verify", log.to_str().unwrap()]);
                if had_end {
                    assert!(recovered.is_empty(), "{kill:?}: {records:#?}");
                    assert_eq!(
                        verify.status.code(),
                        Some(0),
                        "{kill:?}: {}",
                        describe(&verify)
                    );
                } else {
                    assert_eq!(recovered.len(), 1, "{kill:?}: {records:#?}");
                    let r = recovered[0];
                    assert_eq!(r["source"], "supervisor");
                    assert_eq!(r["run_start_seq"], 0, "{r}");
                    assert!(
                        r["recovered_by"].as_u64().is_some()
                            && r["recovered_at_ms"].as_u64().is_some()
                    );
                    assert_eq!(
                        r["via"],
                        if via_next_run {
                            "stepproof-run"
                        } else {
                            "stepproof-repair"
                        }
                    );
                    assert_eq!(
                        verify.status.code(),
                        Some(5),
                        "{kill:?}: {}",
                        describe(&verify)
                    );
                    assert!(
                        String::from_utf8_lossy(&verify.stdout).contains("ended by recovery"),
                        "{kill:?}: {}",
                        describe(&verify)
                    );
                }
                // Nothing owed any more, anywhere.
                for args in [
                    vec!["doctor"],
                    vec!["state", "show"],
                    vec!["audit", "show", log.to_str().unwrap()],
                ] {
                    let out = stepproof(w, &args);
                    assert!(!says_owed(&out), "{kill:?}: {args:?}: {}", describe(&out));
                }
            }
            // Judged from outside, after the repair (or the run's own end).
            for (rel, text) in [".git/config", "sub/.git/config"].iter().zip(&launch) {
                assert_eq!(
                    &fs::read_to_string(w.workspace.join(rel)).unwrap(),
                    text,
                    "{kill:?}: {rel} is not its launch version"
                );
            }
            assert!(
                fs::read_to_string(w.workspace.join("plain/.git/config"))
                    .unwrap()
                    .contains("name = x"),
                "{kill:?}: the ordinary change was not kept"
            );
            assert!(
                !w.workspace.join("sub/.git/commondir").exists(),
                "{kill:?}: the run's commondir was carried"
            );
            let host = host_git(w, &dirs);
            assert!(
                !pwned.exists(),
                "{kill:?}: the host's git ran the run's payload: {}",
                describe(&host)
            );
        }
        assert!(
            owed_phases >= 3,
            "only {owed_phases} of {} phases left work owed",
            phases.len()
        );
        eprintln!(
            "{} kills, {owed_phases} repaired, in {:?}",
            phases.len(),
            started.elapsed()
        );
    }
);

// A run that ends normally leaves no marker (and no record of a sweep kept for a repair), and
// `stepproof repair` then has nothing to do.
both!(a_normal_run_owes_nothing, |w: &World| {
    let out = w.sh("git config --global --list >/dev/null 2>&1; true");
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let dirs: Vec<PathBuf> = fs::read_dir(runs_dir(w))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    assert!(!dirs[0].join("owed.json").exists() && !dirs[0].join("owed-swept.json").exists());
    let out = stepproof(w, &["repair"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("nothing owed in"),
        "{}",
        describe(&out)
    );
    let log = dirs[0].join("audit.jsonl");
    let verify = stepproof(w, &["audit", "verify", log.to_str().unwrap()]);
    assert_eq!(verify.status.code(), Some(0), "{}", describe(&verify));
});

// A repair that cannot write its record (the killed run's log is held by a run of another
// workspace) still sweeps — the host's git runs nothing afterwards — but keeps the marker and
// says why (exit 1); the next repair, once the log is free, writes the record from the sweep it
// kept, without sweeping again.
both!(a_repair_that_cannot_record_keeps_the_marker, |w: &World| {
    real_repositories(w);
    let dir = w.base.join("audit");
    fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::chown(&dir, Some(w.owner.0), Some(w.owner.1)).unwrap();
    let log = dir.join("shared.jsonl");
    let log_arg = log.to_str().unwrap();
    let pwned = w.home.join("PWNED");
    let payload = format!("touch {}; false #", pwned.display());
    assert!(run_and_kill_with(
        w,
        &["--audit-log", log_arg],
        &payload,
        &Kill::WhileRunning
    ));
    let owed = owed_dirs(w);
    assert_eq!(owed.len(), 1, "{owed:?}");
    // The killed run's sandbox (its init holds the log's open file, and so its lock, until the
    // kernel has torn the namespace down) is gone before another run takes the log.
    let deadline = Instant::now() + Duration::from_secs(10);
    while fs::File::open(&log).unwrap().try_lock().is_err() {
        assert!(
            Instant::now() < deadline,
            "the killed run's lock on the log stayed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // A run of another workspace holds the log for a while.
    let other = w.home.join("src/other-project");
    let mut holder = w.command(
        &[
            "--workspace",
            other.to_str().unwrap(),
            "--audit-log",
            log_arg,
        ],
        &["/bin/sleep", "3"],
    );
    let mut holder = holder
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while fs::read_to_string(&log)
        .unwrap_or_default()
        .matches(r#""kind":"run-start""#)
        .count()
        < 2
    {
        assert!(Instant::now() < deadline, "the second run never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = stepproof(w, &["repair"]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("was swept but not recorded")
            && stderr.contains("another process is writing to this log"),
        "{}",
        describe(&out)
    );
    assert!(owed[0].join("owed.json").is_file(), "the marker must stay");
    assert!(owed[0].join("owed-swept.json").is_file());
    // Swept: the host's git is safe already.
    let dirs: Vec<PathBuf> = ["", "sub", "plain"]
        .iter()
        .map(|d| w.workspace.join(d))
        .collect();
    host_git(w, &dirs);
    assert!(!pwned.exists(), "the host's git ran the run's payload");
    let doctor = stepproof(w, &["doctor"]);
    assert!(says_owed(&doctor), "{}", describe(&doctor));
    assert!(holder.wait().unwrap().success());
    // The log is free: the record is written from the sweep kept, not a second sweep.
    let out = stepproof(w, &["repair"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(owed_dirs(w).is_empty());
    let records = records_in(&log);
    let recovered: Vec<&serde_json::Value> = records
        .iter()
        .filter(|r| r["kind"] == "run-end-recovered")
        .collect();
    assert_eq!(recovered.len(), 1, "{records:#?}");
    assert_eq!(recovered[0]["swept_by"], "recovery");
    assert_eq!(recovered[0]["run_start_seq"], 0);
    let changes: Vec<&str> = recovered[0]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["change"].as_str())
        .collect();
    // The two configs with the key, and the nested repository's `commondir`.
    assert_eq!(
        changes,
        ["changed", "created", "changed"],
        "{}",
        recovered[0]
    );
    // The first run is ended by recovery, the second by its own end.
    let verify = stepproof(w, &["audit", "verify", log_arg]);
    assert_eq!(verify.status.code(), Some(5), "{}", describe(&verify));
});

const VOID_RUNBOOK: &str = r#"
id = "owed"
title = "A pass is final only with the run"
owner = "tests"

[[steps]]
id = "a"
title = "Write the code"
instructions = "Write code.txt"
[[steps.evidence]]
files_exist = { paths = ["code.txt"] }

[[steps]]
id = "b"
title = "Write the notes"
instructions = "Write notes.txt"
depends_on = ["a"]
[[steps.evidence]]
files_exist = { paths = ["notes.txt"] }
"#;

// A run killed (SIGKILL of its supervisor) after a step passed and the agent then poisoned the
// repository's config: the repair's sweep finds it, and writes the void records the run's own
// end would have written into the killed run's log (hash-chained, before `run-end-recovered`);
// the next run of the runbook opens the voided step again.
both!(
    a_killed_runs_passes_are_void_when_its_recovered_sweep_finds_tampering,
    |w: &World| {
        real_repositories(w);
        fs::write(w.workspace.join("runbook.toml"), VOID_RUNBOOK).unwrap();
        chown_tree(&w.workspace, w.owner);
        let script = format!(
            "echo x > code.txt && /run/stepproof/stepproof step complete && \
             {GIT} config core.fsmonitor 'false #' && touch written && exec sleep 60"
        );
        assert!(spawn_and_kill(
            w,
            &["--runbook", "runbook.toml"],
            &script,
            &Kill::WhileRunning
        ));
        // The run's own log, in its run directory (where a continuation reads it).
        let owed = owed_dirs(w);
        assert_eq!(owed.len(), 1, "{owed:?}");
        let log = owed[0].join("audit.jsonl");
        let log_arg = log.to_str().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while fs::File::open(&log).unwrap().try_lock().is_err() {
            assert!(
                Instant::now() < deadline,
                "the killed run's lock on the log stayed"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = stepproof(w, &["repair"]);
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            said.contains("runbook: VOID") && said.contains("the passes of a"),
            "{said}"
        );
        let records = records_in(&log);
        let kinds: Vec<&str> = records
            .iter()
            .filter(|r| r["source"] == "supervisor")
            .filter_map(|r| r["kind"].as_str())
            .filter(|k| {
                [
                    "runbook-step-passed",
                    "runbook-step-void",
                    "runbook-void",
                    "run-end-recovered",
                ]
                .contains(k)
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "runbook-step-passed",
                "runbook-step-void",
                "runbook-void",
                "run-end-recovered"
            ],
            "{records:#?}"
        );
        let void = records
            .iter()
            .find(|r| r["kind"] == "runbook-step-void")
            .unwrap();
        assert_eq!(void["step"], "a", "{void}");
        assert_eq!(void["via"], "stepproof-repair", "{void}");
        assert!(
            void["findings"].to_string().contains(".git/config"),
            "{void}"
        );
        let runbook_void = records
            .iter()
            .find(|r| r["kind"] == "runbook-void")
            .unwrap();
        assert_eq!(runbook_void["steps"], serde_json::json!(["a"]));
        assert_eq!(runbook_void["completion_void"], false);
        // The chain holds; the run ended by recovery.
        let verify = stepproof(w, &["audit", "verify", log_arg]);
        assert_eq!(verify.status.code(), Some(5), "{}", describe(&verify));
        // `audit show` says the pass is void.
        let show = stepproof(w, &["audit", "show", log_arg]);
        assert!(
            String::from_utf8_lossy(&show.stdout).contains("VOID"),
            "{}",
            describe(&show)
        );
        // A repair again writes nothing more.
        let again = stepproof(w, &["repair"]);
        assert_eq!(again.status.code(), Some(0), "{}", describe(&again));
        assert_eq!(records_in(&log).len(), records.len());
        // The next run continues it: step a opens again (its pass is void), not b.
        let next = w
            .command(
                &["--runbook", "runbook.toml"],
                &["/bin/sh", "-c", "/run/stepproof/stepproof step complete"],
            )
            .output()
            .unwrap();
        let after = records_in(&audit_log_named(&String::from_utf8_lossy(&next.stderr)));
        let continued = after
            .iter()
            .find(|r| r["kind"] == "runbook-continued")
            .unwrap_or_else(|| panic!("not continued: {}", describe(&next)));
        let a = continued["state"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["step"] == "a")
            .unwrap();
        assert_eq!(a["status"], "open", "{continued}");
        assert!(
            String::from_utf8_lossy(&next.stdout).contains("step a passed"),
            "{}",
            describe(&next)
        );
    }
);
