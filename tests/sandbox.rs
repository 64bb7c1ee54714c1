//! The sandbox core against the real kernel: each test starts the real `stepproof-run`, tries
//! the forbidden thing inside, and checks the errno or the evidence on the host. Every test runs
//! as root and as the dedicated unprivileged user.

mod support;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::time::{Duration, Instant};
use support::*;

both!(
    writes_outside_the_workspace_fail_and_leave_nothing,
    |w: &World| {
        let home_file = w.home.join("planted-by-agent");
        let probes = w.probe(&[
            ("usr", "open('/usr/stepproof-leak', 'w')"),
            ("etc", "open('/etc/stepproof-leak', 'w')"),
            ("root", "open('/stepproof-leak', 'w')"),
            (
                "home",
                &format!("open({:?}, 'w')", home_file.display().to_string()),
            ),
            (
                "home_rc",
                &format!(
                    "open({:?}, 'a')",
                    w.home.join(".bashrc").display().to_string()
                ),
            ),
            ("sys", "open('/sys/kernel/stepproof-leak', 'w')"),
            ("tmp", "open('/tmp/stepproof-inner-only', 'w').write('x')"),
            (
                "mkdir_home",
                &format!(
                    "os.mkdir({:?})",
                    w.home.join("newdir").display().to_string()
                ),
            ),
        ]);
        for name in ["usr", "etc", "root", "home", "home_rc", "mkdir_home"] {
            probes.expect_err(name, "EROFS");
        }
        assert!(probes.get("sys").starts_with("ERR"), "{}", probes.0);
        probes.expect_ok("tmp");
        for leaked in [
            "/usr/stepproof-leak",
            "/etc/stepproof-leak",
            "/stepproof-leak",
            "/tmp/stepproof-inner-only",
        ] {
            assert!(
                !std::path::Path::new(leaked).exists(),
                "{leaked} leaked to the host"
            );
        }
        assert!(!home_file.exists());
        assert_eq!(
            fs::read_to_string(w.home.join(".bashrc")).unwrap(),
            "# home rc\n"
        );
    }
);

both!(workspace_writes_work_and_keep_the_owner, |w: &World| {
    let out = w.sh("echo made-inside > made && mkdir -p d/e && echo x > d/e/f && cat made");
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "made-inside\n");
    for path in [w.workspace.join("made"), w.workspace.join("d/e/f")] {
        let meta = fs::metadata(&path).unwrap();
        assert_eq!(
            (meta.uid(), meta.gid()),
            w.owner,
            "{} has the wrong owner on the host",
            path.display()
        );
    }
});

both!(the_command_never_runs_as_root, |w: &World| {
    let out = w.sh("id -u; id -g; id -G");
    assert!(out.status.success(), "{}", describe(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    let ids: Vec<&str> = text.lines().collect();
    assert_ne!(ids[0], "0", "uid 0 inside: {text}");
    assert_ne!(ids[1], "0", "gid 0 inside: {text}");
    if w.who == Who::Root {
        assert_eq!(
            ids[2].trim(),
            ids[1],
            "root's supplementary groups came along: {text}"
        );
    } else {
        assert_eq!(ids[0], w.owner.0.to_string());
    }
});

both!(home_is_readable_but_not_writable, |w: &World| {
    let rc = w.home.join(".bashrc").display().to_string();
    let probes = w.probe(&[
        ("read", &format!("open({rc:?}).read()")),
        ("write", &format!("open({rc:?}, 'w')")),
        ("unlink", &format!("os.unlink({rc:?})")),
    ]);
    assert_eq!(probes.expect_ok("read"), "OK '# home rc\\n'");
    probes.expect_err("write", "EROFS");
    probes.expect_err("unlink", "EROFS");
});

both!(
    hidden_secrets_are_unreadable_even_through_a_workspace_symlink,
    |w: &World| {
        let h = |p: &str| w.home.join(p).display().to_string();
        let probes = w.probe(&[
            ("ssh_key", &format!("open({:?}).read()", h(".ssh/id_rsa"))),
            ("ssh_dir", &format!("os.listdir({:?})", h(".ssh"))),
            ("aws", &format!("open({:?}).read()", h(".aws/credentials"))),
            ("netrc", &format!("open({:?}).read()", h(".netrc"))),
            (
                "gh",
                &format!("open({:?}).read()", h(".config/gh/hosts.yml")),
            ),
            (
                "docker",
                &format!("open({:?}).read()", h(".docker/config.json")),
            ),
            (
                "git_credentials",
                &format!("open({:?}).read()", h(".git-credentials")),
            ),
            (
                "claude_json",
                &format!("open({:?}).read()", h(".claude.json")),
            ),
            ("via_symlink", "open('innocent-link').read()"),
            (
                "other_project",
                &format!("open({:?}).read()", h("src/other-project/notes.txt")),
            ),
            (
                "other_project_dir",
                &format!("os.listdir({:?})", h("src/other-project")),
            ),
        ]);
        for name in [
            "ssh_key",
            "ssh_dir",
            "aws",
            "netrc",
            "gh",
            "docker",
            "git_credentials",
            "claude_json",
            "via_symlink",
            "other_project",
            "other_project_dir",
        ] {
            probes.expect_err(name, "EACCES");
        }
        assert!(
            !probes.0.contains(SECRET),
            "a secret was read:\n{}",
            probes.0
        );
    }
);

both!(persistence_paths_stay_read_only, |w: &World| {
    let probes = w.probe(&[
        ("hook", "open('.git/hooks/pre-commit', 'a')"),
        ("new_hook", "open('.git/hooks/post-checkout', 'w')"),
        ("vscode", "open('.vscode/tasks.json', 'w')"),
        ("ordinary", "open('src.rs', 'w').write('fn main() {}')"),
    ]);
    // (`.git/config` stays writable: git writes it in ordinary work, and the sweep puts the
    // launch version back when a run adds keys that can run code: tests/git_redirects.rs.)
    for name in ["hook", "new_hook", "vscode"] {
        probes.expect_err(name, "EROFS");
    }
    probes.expect_ok("ordinary");
    assert_eq!(
        fs::read_to_string(w.workspace.join(".git/hooks/pre-commit")).unwrap(),
        "#!/bin/sh\nexit 0\n"
    );
    assert!(!w.workspace.join(".git/hooks/post-checkout").exists());
});

both!(only_sandbox_processes_are_visible, |w: &World| {
    let out = w.sh("sleep 0.2 & ls /proc | grep -E '^[0-9]+$' | sort -n | tr '\\n' ' '; echo; cat /proc/1/cmdline | tr '\\0' ' '");
    assert!(out.status.success(), "{}", describe(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    let pids: Vec<u32> = text
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    assert!(pids.contains(&1), "{text}");
    assert!(
        pids.len() <= 10 && pids.iter().all(|p| *p < 50),
        "host processes visible: {text}"
    );
    let host_pid = std::process::id();
    assert!(!pids.contains(&host_pid) || host_pid < 50);
});

both!(secret_environment_variables_do_not_pass, |w: &World| {
    let out = w
        .command(&[], &["/usr/bin/env"])
        .env("AWS_SECRET_ACCESS_KEY", SECRET)
        .env("GITHUB_TOKEN", SECRET)
        .env("NPM_TOKEN", SECRET)
        .env("MY_SERVICE_SECRET", SECRET)
        .env("LD_LIBRARY_PATH", "/nonexistent")
        .env("TERM", "xterm-256color")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    let env = String::from_utf8_lossy(&out.stdout);
    assert!(!env.contains(SECRET), "a secret passed:\n{env}");
    assert!(!env.contains("LD_LIBRARY_PATH"), "{env}");
    assert!(env.contains("TERM=xterm-256color"), "{env}");
    assert!(env.contains(&format!("HOME={}", w.home.display())), "{env}");
});

both!(the_init_holds_no_secrets_in_reach, |w: &World| {
    let out = w
        .command(&[], &["/usr/bin/python3", "-c", "import errno\ntry:\n print(open('/proc/1/environ','rb').read())\nexcept OSError as e:\n print('ERR', errno.errorcode[e.errno])\ntry:\n open('/proc/1/mem','rb')\n print('mem OK')\nexcept OSError as e:\n print('mem ERR', errno.errorcode[e.errno])"])
        .env("GITHUB_TOKEN", SECRET)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains(SECRET), "{text}");
    assert!(text.contains("ERR EACCES"), "{text}");
    assert!(text.contains("mem ERR"), "{text}");
});

both!(inherited_descriptors_are_closed, |w: &World| {
    let file = fs::File::open("/etc/hostname").unwrap();
    let mut cmd = w.command(&[], &["/usr/bin/python3", "-c", "import os\ntry:\n os.fstat(7); print('open')\nexcept OSError as e:\n print('closed', e.errno)\nprint(sorted(int(f) for f in os.listdir('/proc/self/fd')))"]);
    let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
    // SAFETY: dup2 in the child between fork and exec, on descriptors that exist.
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(fd, 7) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("closed 9"),
        "fd 7 reached the command: {}",
        describe(&out)
    );
    assert!(text.contains("[0, 1, 2, 3]"), "{text}");
});

both!(no_capabilities_and_no_new_privs, |w: &World| {
    let out = w.sh("grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs)' /proc/self/status");
    let text = String::from_utf8_lossy(&out.stdout);
    for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert!(
            text.contains(&format!("{set}:\t0000000000000000")),
            "{set} not empty:\n{text}"
        );
    }
    assert!(text.contains("NoNewPrivs:\t1"), "{text}");
});

both!(exit_codes_and_signals_pass_through, |w: &World| {
    let code = |args: &[&str]| w.run(args).status.code();
    assert_eq!(code(&["/bin/sh", "-c", "exit 7"]), Some(7));
    assert_eq!(code(&["/bin/true"]), Some(0));
    assert_eq!(code(&["/bin/sh", "-c", "kill -TERM $$"]), Some(128 + 15));
    assert_eq!(code(&["/bin/sh", "-c", "kill -KILL $$"]), Some(128 + 9));
    assert_eq!(code(&["no-such-command-anywhere"]), Some(127));
    fs::write(w.workspace.join("not-exec.sh"), "#!/bin/sh\necho hi\n").unwrap();
    support::chown_tree(&w.workspace.join("not-exec.sh"), w.owner);
    assert_eq!(code(&["./not-exec.sh"]), Some(126));
    let status = w.base.join("status.json");
    fs::set_permissions(&w.base, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let out = w
        .command(
            &["--status-file", status.to_str().unwrap()],
            &["/bin/sh", "-c", "exit 125"],
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    let json: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(&status).unwrap()).unwrap();
    assert_eq!(json["status"], "exited", "{json}");
    assert_eq!(json["command_exit_code"], 125, "{json}");
});

both!(a_bad_profile_is_refused_with_file_and_line, |w: &World| {
    let profile = w.base.join("bad.toml");
    fs::write(
        &profile,
        "name = \"bad\"\n[filesystem]\nwritable = [\"~/.ssh\"]\nreadonly = []\n",
    )
    .unwrap();
    fs::set_permissions(
        &profile,
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    let out = w
        .command(
            &["--profile", profile.to_str().unwrap()],
            &["/bin/sh", "-c", "touch ran"],
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(120), "{}", describe(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("{}:4:1", profile.display())), "{err}");
    assert!(err.contains("readonly"), "{err}");
    assert!(!w.workspace.join("ran").exists());
});

both!(killing_the_supervisor_kills_the_command, |w: &World| {
    let marker = format!(
        "{}",
        900_000 + std::process::id() % 90_000 + u32::from(w.who == Who::User)
    );
    let mut child = w
        .command(&[], &["/bin/sh", "-c", &format!("sleep {marker}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let find = || process_running(&["sleep", &marker]);
    let start = Instant::now();
    while !find() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the command never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // With setpriv in front, the supervisor is setpriv's exec: the same pid.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let _ = child.wait();
    let start = Instant::now();
    while find() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the command outlived the supervisor"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
});

#[test]
fn root_only_secrets_are_out_of_reach_when_invoked_as_root() {
    let Some(w) = World::new(Who::Root) else {
        return;
    };
    // A root-owned daemon socket in the home (masked) and in /run (absent).
    let home_sock = w.home.join(".cache/daemon.sock");
    fs::create_dir_all(home_sock.parent().unwrap()).unwrap();
    let _l1 = std::os::unix::net::UnixListener::bind(&home_sock).unwrap();
    let run_sock =
        std::path::PathBuf::from(format!("/run/stepproof-test-{}.sock", std::process::id()));
    let _l2 = std::os::unix::net::UnixListener::bind(&run_sock).unwrap();
    let connect = |p: &std::path::Path| {
        format!(
            "socket.socket(socket.AF_UNIX).connect({:?})",
            p.display().to_string()
        )
    };
    let probes = w.probe(&[
        ("shadow", "open('/etc/shadow').read()"),
        ("home_sock", &connect(&home_sock)),
        ("run_sock", &connect(&run_sock)),
        ("root_home_ssh", "os.listdir('/root/.ssh')"),
    ]);
    probes.expect_err("shadow", "EACCES");
    // The socket is covered by a mode-000 stand-in: connect needs write permission on it.
    probes.expect_err("home_sock", "EACCES");
    probes.expect_err("run_sock", "ENOENT");
    assert!(
        probes.get("root_home_ssh").starts_with("ERR"),
        "{}",
        probes.0
    );
    let _ = fs::remove_file(run_sock);
}

#[test]
fn explain_prints_the_plan_and_a_stable_hash() {
    if !sandbox_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let run = |home: &std::path::Path| {
        let out = std::process::Command::new(STEPPROOF)
            .args(["explain", "--json", "--workspace"])
            .arg(dir.path())
            .env("HOME", home)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", describe(&out));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let a = run(std::path::Path::new("/root"));
    let b = run(dir.path());
    assert_eq!(
        a["policy_hash"], b["policy_hash"],
        "the hash depends on the machine"
    );
    assert!(a["policy_hash"].as_str().unwrap().starts_with("sha256:"));
    let mounts = a["plan"]["mounts"].as_array().unwrap();
    assert!(mounts.iter().any(|m| m["op"] == "proc"));
    let text = std::process::Command::new(STEPPROOF)
        .args(["explain"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("policy-hash: sha256:")
            && text.contains("hidden")
            && text.contains("tmpfs     /tmp"),
        "{text}"
    );
}
