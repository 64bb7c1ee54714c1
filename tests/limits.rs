//! Limits on memory, processes and file size, judged from outside: a memory hog and a fork bomb
//! are stopped and the status says so in words; a file over the size limit fails as described;
//! a kill -9 of the supervisor leaves nothing behind once the next run has started; a limit the
//! profile requires that the host cannot enforce stops the launch.
//!
//! This host is hybrid (cgroup v1 controllers, a v2 hierarchy without them): root gets a v1
//! cgroup; the test user cannot create one here (nothing is delegated to it), so for it a
//! required limit stops a strict launch and a default one is recorded as dropped. The v2 path is
//! tested as plan data (`supervisor::launch::cgroup` unit tests): `skipped: no cgroup v2 controllers`.

mod support;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::*;

/// The cgroups a supervisor with this pid made (tests run in parallel: others have their own).
fn cgroups_of(pid: u32) -> Vec<PathBuf> {
    let prefix = format!("stepproof-{pid}-");
    stepproof_cgroups()
        .into_iter()
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(&prefix))
        })
        .collect()
}

/// Runs `cmd` to the end; its output and the supervisor's pid (setpriv execs it: same pid).
fn output_and_pid(mut cmd: Command) -> (std::process::Output, u32) {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    (child.wait_with_output().unwrap(), pid)
}

/// `stepproof-*` cgroups below this process's own cgroup in the v1 hierarchies used.
fn stepproof_cgroups() -> Vec<PathBuf> {
    let own = fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mut found = Vec::new();
    for line in own.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next(), parts.next(), parts.next());
        let (Some(controllers), Some(path)) = (controllers, path) else {
            continue;
        };
        for c in ["memory", "pids", "cpu"] {
            if controllers.split(',').any(|x| x == c) {
                let dir = Path::new("/sys/fs/cgroup")
                    .join(controllers)
                    .join(path.trim_start_matches('/'));
                if let Ok(entries) = fs::read_dir(&dir) {
                    for e in entries.flatten() {
                        if e.file_name().to_string_lossy().starts_with("stepproof-") {
                            found.push(e.path());
                        }
                    }
                }
            }
        }
    }
    found
}

fn can_enforce(w: &World) -> bool {
    w.who == Who::Root && Path::new("/sys/fs/cgroup/memory").is_dir()
}

fn limits_profile(w: &World, name: &str, body: &str) -> String {
    let path = w.base.join(name);
    fs::write(&path, format!("extends = \"default\"\n{body}")).unwrap();
    path.to_str().unwrap().to_string()
}

fn status_of(w: &World, file: &str) -> serde_json::Value {
    serde_json::from_str(&fs::read_to_string(w.base.join(file)).unwrap()).unwrap()
}

fn status_arg(w: &World, file: &str) -> String {
    let path = w.base.join(file);
    let _ = fs::remove_file(&path);
    // The test user writes it: the directory must be its.
    chown_tree(&w.base, w.owner);
    path.to_str().unwrap().to_string()
}

both!(a_memory_hog_is_stopped_and_reported, |w: &World| {
    let profile = limits_profile(w, "mem.toml", "[process.limits]\nmemory = \"64M\"\n");
    let status = status_arg(w, "mem-status.json");
    let hog = "x = bytearray(512 << 20); print('survived')";
    let summary = status_arg(w, "mem-summary.md");
    let (out, pid) = output_and_pid(w.command(
        &[
            "--profile",
            &profile,
            "--status-file",
            &status,
            "--summary",
            &summary,
        ],
        &["/usr/bin/python3", "-c", hog],
    ));
    if !can_enforce(w) {
        // Required by the profile, not enforceable for this user here: the launch stops.
        assert_eq!(out.status.code(), Some(125), "{}", describe(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("memory limit (64 MiB) cannot be enforced here")
                && stderr.contains("requires it"),
            "{}",
            describe(&out)
        );
        assert!(!String::from_utf8_lossy(&out.stdout).contains("survived"));
        return;
    }
    assert_eq!(out.status.code(), Some(137), "{}", describe(&out));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("survived"));
    let s = status_of(w, "mem-status.json");
    assert_eq!(
        s["limits"][0], "1 process killed by the memory limit (64 MiB)",
        "{s}"
    );
    assert!(cgroups_of(pid).is_empty(), "{:?}", cgroups_of(pid));
    // The CI summary says it too, and where the limit was enforced.
    let md = fs::read_to_string(&summary).unwrap();
    assert!(
        md.contains("### Limits that acted")
            && md.contains("**1 process killed by the memory limit (64 MiB)**")
            && md.contains("- limit memory 64 MiB: cgroup v1 /sys/fs/cgroup/memory"),
        "{md}"
    );
});

// `explain` and `doctor` show each limit and whether this host can enforce it.
both!(explain_and_doctor_show_the_limits, |w: &World| {
    let stepproof = Path::new(env!("CARGO_BIN_EXE_stepproof-run")).with_file_name("stepproof");
    let profile = limits_profile(w, "shown.toml", "[process.limits]\nmemory = \"1G\"\n");
    let mut explain = w.as_owner(&stepproof);
    explain.args(["explain", "--profile", &profile]);
    w.clean_env(&mut explain);
    let out = explain.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let memory = text
        .lines()
        .find(|l| l.starts_with("limit (whole run): memory 1 GiB (required)"))
        .unwrap_or_else(|| panic!("no memory line in {text}"));
    assert!(
        text.contains("limit (whole run): pids 4096 processes (default: --ci runs, best-effort)"),
        "{text}"
    );
    assert!(text.contains("fsize=34359738368"), "{text}");
    let mut doctor = w.as_owner(&stepproof);
    doctor.arg("doctor");
    w.clean_env(&mut doctor);
    let out = doctor.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.contains("cgroup memory limit"))
        .unwrap_or_else(|| panic!("no memory limit in doctor: {text}"));
    if can_enforce(w) {
        assert!(
            memory.contains(": cgroup v1 /sys/fs/cgroup/memory"),
            "{memory}"
        );
        assert!(
            line.starts_with("ok") && line.contains("cgroup v1"),
            "{line}"
        );
    } else {
        assert!(memory.contains("NOT enforceable here"), "{memory}");
        assert!(line.contains("EACCES"), "{line}");
    }
});

both!(a_fork_bomb_is_stopped_and_reported, |w: &World| {
    // Root: the cgroup's pids limit. The test user (no cgroup here): RLIMIT_NPROC, which the
    // kernel counts per user, set as low.
    let nproc = if can_enforce(w) { "" } else { "nproc = 64\n" };
    let profile = limits_profile(
        w,
        "pids.toml",
        &format!("assurance = \"best-effort\"\n[process.limits]\npids = 64\n{nproc}"),
    );
    let status = status_arg(w, "pids-status.json");
    let started = Instant::now();
    let (out, pid) = output_and_pid(w.command(
        &[
            "--profile",
            &profile,
            "--status-file",
            &status,
            "--timeout",
            "20s",
        ],
        &[
            "/bin/bash",
            "-c",
            // The shell forks once, before the bomb starts (an async pipeline started by the
            // shell itself would have it fork twice, racing its own bomb for the last pids),
            // and `exec`s: it needs no new process to end the run.
            "(bomb() { bomb | bomb & }; bomb) & exec /bin/sleep 2",
        ],
    ));
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{}",
        describe(&out)
    );
    assert!(out.status.success(), "{}", describe(&out));
    // The host still forks.
    assert!(Command::new("/bin/true").status().unwrap().success());
    let s = status_of(w, "pids-status.json");
    if can_enforce(w) {
        let said = s["limits"][0].as_str().unwrap_or_default();
        assert!(
            said.ends_with("forks refused by the process limit (64 processes)"),
            "{s}"
        );
    }
    assert!(cgroups_of(pid).is_empty(), "{:?}", cgroups_of(pid));
});

both!(
    a_file_over_the_size_limit_fails_as_described,
    |w: &World| {
        let profile = limits_profile(w, "fsize.toml", "[process.limits]\nfsize = \"1M\"\n");
        let status = status_arg(w, "fsize-status.json");
        // A writer that takes the default SIGXFSZ dies of it, and the status says why.
        let out = w
            .command(
                &["--profile", &profile, "--status-file", &status],
                &["/bin/dd", "if=/dev/zero", "of=big", "bs=1M", "count=2"],
            )
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(128 + libc::SIGXFSZ),
            "{}",
            describe(&out)
        );
        let s = status_of(w, "fsize-status.json");
        assert!(
            s["limits"][0]
                .as_str()
                .unwrap_or_default()
                .contains("killed by the file size limit (1 MiB)"),
            "{s}"
        );
        assert_eq!(
            fs::metadata(w.workspace.join("big")).unwrap().len(),
            1 << 20
        );
        // One that ignores it (Python does) gets EFBIG.
        let out = w
            .command(
                &["--profile", &profile],
                &[
                    "/usr/bin/python3",
                    "-c",
                    "open('big2', 'wb').write(b'x' * (2 << 20))",
                ],
            )
            .output()
            .unwrap();
        assert!(!out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("File too large"),
            "{}",
            describe(&out)
        );
    }
);

both!(
    a_killed_supervisor_leaves_no_cgroup_after_the_next_run,
    |w: &World| {
        // A duration of its own: the other variant runs at the same time.
        let seconds = format!(
            "{}",
            1000 + std::process::id() % 10_000 * 2 + u32::from(w.who == Who::User)
        );
        let seconds = seconds.as_str();
        // Limits named (best-effort: the test user has no cgroup here), so that runs make one.
        let profile = limits_profile(
            w,
            "named.toml",
            "assurance = \"best-effort\"\n[process.limits]\npids = 1000\n",
        );
        let mut child = w
            .command(&["--profile", &profile], &["/bin/sleep", seconds])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let pid = child.id();
        // Killed whatever happens, so that a failing check leaves nothing running.
        struct KillOnDrop(u32);
        impl Drop for KillOnDrop {
            fn drop(&mut self) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(self.0 as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        let _guard = KillOnDrop(pid);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !(process_running(&["/bin/sleep", seconds])
            && (!can_enforce(w) || !cgroups_of(pid).is_empty()))
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            process_running(&["/bin/sleep", seconds]),
            "the run did not start"
        );
        if can_enforce(w) {
            assert!(!cgroups_of(pid).is_empty(), "the run made no cgroup");
        }
        // SIGKILL to the supervisor (setpriv execs it: same pid); its sandbox dies with it.
        unsafe_kill(child.id());
        let _ = child.wait();
        // The sandbox goes with its supervisor (the init's lifeline closes)…
        let deadline = Instant::now() + Duration::from_secs(10);
        while process_running(&["/bin/sleep", seconds]) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!process_running(&["/bin/sleep", seconds]));
        // … and the next launch with limits removes the cgroup it left.
        let out = w
            .command(&["--profile", &profile], &["/bin/true"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", describe(&out));
        assert!(cgroups_of(pid).is_empty(), "{:?}", cgroups_of(pid));
    }
);

fn unsafe_kill(pid: u32) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
}

// A host made unable for real: as root, the memory hierarchy read-only in a mount namespace of
// the test's own; as the test user, this host delegates nothing. Strict stops; best-effort runs
// and records the limit as dropped.
both!(
    a_required_limit_the_host_cannot_enforce_stops_the_launch,
    |w: &World| {
        let strict = limits_profile(w, "req.toml", "[process.limits]\nmemory = \"256M\"\n");
        let relaxed = limits_profile(
            w,
            "relaxed.toml",
            "assurance = \"best-effort\"\n[process.limits]\nmemory = \"256M\"\n",
        );
        let run = |profile: &str| {
            let marker = w.workspace.join("ran");
            let _ = fs::remove_file(&marker);
            let touch = format!("touch {}", marker.display());
            let out = if w.who == Who::Root {
                let script = format!(
                    "mount -o remount,bind,ro /sys/fs/cgroup/memory && exec \"$0\" --profile {profile} -- /bin/sh -c '{touch}'"
                );
                let mut cmd = Command::new("unshare");
                cmd.args(["-m", "--propagation", "private", "/bin/sh", "-c", &script])
                    .arg(w.run_binary());
                w.clean_env(&mut cmd);
                cmd.output().unwrap()
            } else {
                w.command(&["--profile", profile], &["/bin/sh", "-c", &touch])
                    .output()
                    .unwrap()
            };
            (out, marker.exists())
        };
        let (out, ran) = run(&strict);
        assert_eq!(out.status.code(), Some(125), "{}", describe(&out));
        assert!(!ran, "the command ran without its required limit");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("the memory limit (256 MiB) cannot be enforced here")
                && stderr.contains("assurance is \"strict\""),
            "{}",
            describe(&out)
        );
        let (out, ran) = run(&relaxed);
        assert!(out.status.success() && ran, "{}", describe(&out));
        let log = String::from_utf8_lossy(&out.stderr)
            .lines()
            .find_map(|l| {
                l.split("audit log ")
                    .nth(1)
                    .and_then(|r| r.split(' ').next())
                    .map(str::to_string)
            })
            .expect("the run names its audit log");
        let text = fs::read_to_string(&log).unwrap();
        assert!(
            text.contains("limits_dropped")
                && text.contains("the memory limit (256 MiB) cannot be enforced here"),
            "{text}"
        );
    }
);

#[test]
fn cgroup_v2_controllers() {
    let controllers = fs::read_to_string("/sys/fs/cgroup/unified/cgroup.controllers")
        .or_else(|_| fs::read_to_string("/sys/fs/cgroup/cgroup.controllers"))
        .unwrap_or_default();
    if !controllers.split_whitespace().any(|c| c == "memory") {
        // The one exemption from "fails in CI": this hybrid host's v2 hierarchy has no
        // controllers; the v2 path is covered as plan data in supervisor::launch::cgroup's tests.
        eprintln!("skipped: no cgroup v2 controllers");
        return;
    }
    let Some(w) = World::new(Who::Root) else {
        return;
    };
    // A v2 host: the hog is stopped where the own cgroup lets StepProof enable the controller
    // (alone in it, or below the root), and the launch says why not elsewhere.
    let profile = limits_profile(&w, "mem.toml", "[process.limits]\nmemory = \"64M\"\n");
    let out = w
        .command(
            &["--profile", &profile],
            &["/usr/bin/python3", "-c", "x = bytearray(512 << 20)"],
        )
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(137) && stderr.contains("killed by the memory limit")
            || out.status.code() == Some(125) && stderr.contains("cannot be enforced here"),
        "{}",
        describe(&out)
    );
}

// A process inside cannot leave the run's cgroup: every cgroup file it could write to move
// itself is the host's, read-only inside.
both!(nothing_inside_moves_out_of_the_cgroup, |w: &World| {
    let profile = limits_profile(
        w,
        "stay.toml",
        "assurance = \"best-effort\"\n[process.limits]\npids = 1000\n",
    );
    let script = "for f in /sys/fs/cgroup/*/cgroup.procs /sys/fs/cgroup/*/tasks \
                  /sys/fs/cgroup/memory/*/*/cgroup.procs /sys/fs/cgroup/unified/cgroup.procs; do \
                  [ -e \"$f\" ] || continue; \
                  if echo $$ 2>/dev/null > \"$f\"; then echo \"MOVED $f\"; fi; done; echo checked";
    let (out, pid) =
        output_and_pid(w.command(&["--profile", &profile], &["/bin/sh", "-c", script]));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("checked"),
        "{}",
        describe(&out)
    );
    assert!(!stdout.contains("MOVED"), "{}", describe(&out));
    assert!(cgroups_of(pid).is_empty(), "{:?}", cgroups_of(pid));
});
