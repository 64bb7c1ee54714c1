//! The Landlock + seccomp-only mode, for real: inside a child user namespace whose
//! `user.max_user_namespaces` is 0 (what a container that refuses user namespaces looks like),
//! as the unprivileged test user. No mount hides anything here, so a hidden secret giving
//! EACCES is Landlock's doing.

mod support;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output};
use support::*;

const NO_USERNS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/no-userns.py");

fn run_without_userns(w: &World, profile: &str, args: &[&str]) -> Output {
    run_without_userns_with(w, profile, &[], args)
}

/// [`run_without_userns`] with more of `stepproof-run`'s flags.
fn run_without_userns_with(w: &World, profile: &str, flags: &[&str], args: &[&str]) -> Output {
    let mut extra = vec!["--profile", profile];
    extra.extend_from_slice(flags);
    let report = w.base.join("report.json");
    let report_s = report.to_str().unwrap().to_string();
    extra.extend(["--report", &report_s]);
    let mut cmd = Command::new("python3");
    cmd.arg(NO_USERNS)
        .arg(run_binary_for_user())
        .args(&extra)
        .arg("--")
        .args(args);
    w.clean_env(&mut cmd)
        .env("NO_USERNS_UID", w.owner.0.to_string())
        .output()
        .unwrap()
}

/// Python probes (as [`World::probe`]) run in the degraded mode under `profile`; the probes'
/// lines and the launch's stderr.
fn probe_without_userns(w: &World, profile: &str, checks: &[(&str, &str)]) -> (Probes, String) {
    let mut code = String::from(
        "import os, errno, socket\ndef t(n, f):\n    try:\n        r = f()\n        print(n, 'OK', repr(r))\n    except OSError as e:\n        print(n, 'ERR', errno.errorcode.get(e.errno, e.errno))\n",
    );
    for (name, expr) in checks {
        code.push_str(&format!("t({name:?}, lambda: {expr})\n"));
    }
    let out = run_without_userns(w, profile, &["/usr/bin/python3", "-c", &code]);
    assert!(out.status.success(), "{}", describe(&out));
    (
        Probes(String::from_utf8_lossy(&out.stdout).into_owned()),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The degraded mode of the default profile without its hook, with more `[filesystem]` keys.
fn degraded_profile(w: &World, filesystem: &str) -> String {
    write_profile(
        w,
        "degraded.toml",
        &format!(
            "extends = \"default\"\n[degraded]\nallow = true\naccept_removable_hook = true\n[network]\nmode = \"none\"\n[filesystem]\n{filesystem}"
        ),
    )
}

/// Writes `contents` at `path` (and the directories above it), owned by the world's owner.
fn plant(w: &World, path: &std::path::Path, contents: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, contents).unwrap();
    chown_tree(&w.home, w.owner);
}

fn write_profile(w: &World, name: &str, text: &str) -> String {
    let path = w.base.join(name);
    fs::write(&path, text).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    path.display().to_string()
}

fn world() -> Option<World> {
    let w = World::new(Who::User)?;
    // The report is written by the test user.
    fs::set_permissions(&w.base, fs::Permissions::from_mode(0o777)).unwrap();
    Some(w)
}

#[test]
fn landlock_alone_hides_secrets_and_reports_what_is_lost() {
    let Some(w) = world() else { return };
    let profile = write_profile(
        &w,
        "degraded.toml",
        "extends = \"default\"\n[degraded]\nallow = true\naccept_removable_hook = true\n[network]\nmode = \"none\"\n",
    );
    let h = |p: &str| w.home.join(p).display().to_string();
    let code = format!(
        "import os, errno\ndef t(n, f):\n    try:\n        r = f(); print(n, 'OK', repr(r))\n    except OSError as e:\n        print(n, 'ERR', errno.errorcode[e.errno])\nt('ssh', lambda: open({:?}).read())\nt('aws', lambda: open({:?}).read())\nt('other', lambda: open({:?}).read())\nt('rc', lambda: open({:?}).read())\nt('home_write', lambda: open({:?}, 'w'))\nt('ws_write', lambda: open('made', 'w').write('x'))\nt('link', lambda: open('innocent-link').read())\nimport socket\nt('tcp', lambda: socket.create_connection(('127.0.0.1', 9), timeout=2))\n",
        h(".ssh/id_rsa"),
        h(".aws/credentials"),
        h("src/other-project/notes.txt"),
        h(".bashrc"),
        h("planted"),
    );
    let out = run_without_userns(&w, &profile, &["/usr/bin/python3", "-c", &code]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", describe(&out));
    let probes = Probes(text.into_owned());
    for name in ["ssh", "aws", "other", "home_write", "link", "tcp"] {
        probes.expect_err(name, "EACCES");
    }
    assert_eq!(probes.expect_ok("rc"), "OK '# home rc\\n'");
    probes.expect_ok("ws_write");
    assert!(!probes.0.contains(SECRET));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("Landlock + seccomp only") && stderr.contains("lost: no mount namespace"),
        "{stderr}"
    );
    assert!(
        stderr.contains("persistence paths inside the workspace cannot be made read-only"),
        "{stderr}"
    );
    // The default profile has a hook, accepted as lost here: said, not silently dropped.
    assert!(stderr.contains("lost: no hook:"), "{stderr}");
    assert!(stderr.contains("lost: named unix sockets"), "{stderr}");
    let report: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(w.base.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["isolation"], "landlock-seccomp-only", "{report}");
    assert!(
        report["dropped"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d.as_str().unwrap().contains("no pid namespace")),
        "{report}"
    );
    assert_eq!(report["command"]["landlock"]["enforced"], true, "{report}");
}

#[test]
fn without_the_profile_allowing_it_nothing_runs() {
    let Some(w) = world() else { return };
    let profile = write_profile(&w, "plain.toml", "extends = \"default\"\n");
    let out = run_without_userns(&w, &profile, &["/bin/sh", "-c", "touch ran"]);
    assert_eq!(out.status.code(), Some(125), "{}", describe(&out));
    assert!(!w.workspace.join("ran").exists());
}

#[test]
fn a_hooked_profile_is_refused_unless_it_accepts_a_removable_hook() {
    let Some(w) = world() else { return };
    let profile = write_profile(
        &w,
        "hooked.toml",
        "extends = \"default\"\n[degraded]\nallow = true\n",
    );
    let out = run_without_userns(&w, &profile, &["/bin/sh", "-c", "touch ran"]);
    assert_eq!(out.status.code(), Some(125), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("accept_removable_hook"),
        "{}",
        describe(&out)
    );
    assert!(!w.workspace.join("ran").exists());
}

#[test]
fn a_refused_network_namespace_stops_the_launch() {
    // User namespaces work here, network namespaces do not: a profile that asks for its own
    // network must not run on the host's.
    let Some(w) = world() else { return };
    let profile = write_profile(
        &w,
        "no-netns.toml",
        "extends = \"default\"\n[network]\nmode = \"none\"\n",
    );
    let marker = w.workspace.join("ran");
    let mut cmd = Command::new("python3");
    cmd.arg(NO_USERNS)
        .arg(run_binary_for_user())
        .args(["--profile", &profile, "--"])
        .args(["/usr/bin/touch", marker.to_str().unwrap()]);
    let out = w
        .clean_env(&mut cmd)
        .env("NO_USERNS_UID", w.owner.0.to_string())
        .env("NO_USERNS_LIMIT", "max_net_namespaces")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("creating the sandbox's network namespace"),
        "{stderr}"
    );
    assert!(!marker.exists(), "the command ran: {}", describe(&out));
}

#[test]
fn an_allowlisted_home_shows_only_what_it_lists() {
    let Some(w) = world() else { return };
    plant(&w, &w.home.join(".local/bin/tool"), "tool\n");
    plant(&w, &w.home.join("notes/todo.txt"), SECRET);
    let profile = degraded_profile(
        &w,
        "home = \"allowlist\"\nhome_allow = [\"~/.local/bin\"]\n",
    );
    let h = |p: &str| format!("{:?}", w.home.join(p).display().to_string());
    let (probes, stderr) = probe_without_userns(
        &w,
        &profile,
        &[
            ("tool", &format!("open({}).read()", h(".local/bin/tool"))),
            ("rc", &format!("open({}).read()", h(".bashrc"))),
            ("notes", &format!("open({}).read()", h("notes/todo.txt"))),
            ("list_home", &format!("os.listdir({})", h(""))),
            ("ws_write", "open('made', 'w').write('x')"),
        ],
    );
    assert_eq!(probes.expect_ok("tool"), "OK 'tool\\n'");
    for name in ["rc", "notes", "list_home"] {
        probes.expect_err(name, "EACCES");
    }
    probes.expect_ok("ws_write");
    assert!(!probes.0.contains(SECRET));
    assert!(stderr.contains("lost: home = \"allowlist\""), "{stderr}");
}

#[test]
fn names_that_look_like_secrets_and_env_files_are_hidden() {
    let Some(w) = world() else { return };
    plant(&w, &w.home.join(".config/deploy-token"), SECRET);
    for env in [".env", "app/.env.local"] {
        plant(&w, &w.workspace.join(env), SECRET);
    }
    plant(&w, &w.workspace.join(".env.example"), "KEY=\n");
    plant(&w, &w.workspace.join("lib/lib.rs"), "\n");
    // A link beside the hidden `.env` gives no more than its target has.
    std::os::unix::fs::symlink(w.home.join(".bashrc"), w.workspace.join("rc-link")).unwrap();
    chown_tree(&w.home, w.owner);
    let profile = degraded_profile(&w, "hide_env_files = true\n");
    let (probes, stderr) = probe_without_userns(
        &w,
        &profile,
        &[
            (
                "token",
                &format!(
                    "open({:?}).read()",
                    w.home.join(".config/deploy-token").display().to_string()
                ),
            ),
            ("env", "open('.env').read()"),
            ("env_local", "open('app/.env.local').read()"),
            ("example", "open('.env.example').read()"),
            ("lib_write", "open('lib/made', 'w').write('x')"),
            ("top_create", "open('made', 'w').write('x')"),
            ("rc_read", "open('rc-link').read()"),
            ("rc_write", "open('rc-link', 'a').write('x')"),
        ],
    );
    // What the split costs: nothing can be created beside a hidden `.env` (the loss says so).
    for name in ["token", "env", "env_local", "top_create", "rc_write"] {
        probes.expect_err(name, "EACCES");
    }
    assert_eq!(probes.expect_ok("rc_read"), "OK '# home rc\\n'");
    probes.expect_ok("example");
    probes.expect_ok("lib_write");
    assert!(!probes.0.contains(SECRET));
    // The workspace's top is granted entry by entry around `.env`: said at launch.
    let top = format!(
        "lost: {} (read-write): granted entry by entry",
        w.workspace.display()
    );
    assert!(stderr.contains(&top), "{stderr}");
}

#[test]
fn a_git_replaced_during_the_run_is_moved_by_the_sweep() {
    // Nothing pins `.git` without a mount namespace: the sweep is the guard. A gitfile naming
    // what looks like a submodule's git directory is ordinary only where `.git` was one.
    let Some(w) = world() else { return };
    let profile = degraded_profile(&w, "");
    let out = run_without_userns(
        &w,
        &profile,
        &[
            "/bin/sh",
            "-c",
            "mkdir -p x/.git/modules/m && mv .git moved-git && printf 'gitdir: x/.git/modules/m\\n' > .git && echo swapped",
        ],
    );
    let text = describe(&out);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("swapped"),
        "{text}"
    );
    assert_eq!(out.status.code(), Some(123), "{text}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let git = w.workspace.join(".git").display().to_string();
    assert!(
        stderr
            .lines()
            .any(|l| l.contains(&format!("redirect {git} ")) && l.contains("quarantined to")),
        "the gitfile is not reported: {text}"
    );
    assert!(
        !w.workspace.join(".git").exists(),
        "the gitfile stayed: {text}"
    );
    assert!(stderr.contains(".git cannot be pinned"), "{text}");
}

/// `workspace = "overlay"` (strict) cannot be laid without a mount namespace: the launch is
/// refused (125) before anything runs, unless the profile accepts a read-only workspace
/// instead, which it then gets — never a writable one.
#[test]
fn an_overlay_workspace_is_refused_or_read_only() {
    let Some(w) = world() else { return };
    let profile = degraded_profile(&w, "workspace = \"overlay\"\n");
    let out = run_without_userns(&w, &profile, &["/bin/sh", "-c", "touch ran"]);
    assert_eq!(out.status.code(), Some(125), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("needs a mount namespace"),
        "{}",
        describe(&out)
    );
    assert!(!w.workspace.join("ran").exists());

    let profile = write_profile(
        &w,
        "read-only.toml",
        "extends = \"default\"\n[degraded]\nallow = true\naccept_removable_hook = true\nread_only_workspace = true\n[network]\nmode = \"none\"\n[filesystem]\nworkspace = \"overlay\"\n",
    );
    let (probes, stderr) = probe_without_userns(
        &w,
        &profile,
        &[
            ("read", "open('README').read()"),
            ("write", "open('made', 'w').write('x')"),
        ],
    );
    assert_eq!(probes.expect_ok("read"), "OK 'project\\n'");
    probes.expect_err("write", "EACCES");
    assert!(!w.workspace.join("made").exists());
    assert!(stderr.contains("lost: workspace = \"overlay\""), "{stderr}");
}

/// The container case: a runtime that refuses nested user namespaces (Docker's default seccomp
/// profile, `user.max_user_namespaces = 0`) puts the run on the Landlock + seccomp-only tier,
/// and the run's FIRST audit record says so — the tier, every loss, and why user namespaces
/// were refused — before anything of the command ran.
#[test]
fn the_first_record_names_the_tier_and_what_is_lost() {
    let Some(w) = world() else { return };
    let profile = degraded_profile(&w, "");
    let log = w.base.join("audit.jsonl");
    let out = run_without_userns_with(
        &w,
        &profile,
        &["--audit-log", log.to_str().unwrap()],
        &["/bin/true"],
    );
    assert!(out.status.success(), "{}", describe(&out));
    let text = fs::read_to_string(&log).unwrap();
    let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(first["seq"], 0, "{first}");
    assert_eq!(first["kind"], "run-start", "{first}");
    assert_eq!(first["isolation"], "landlock-seccomp-only", "{first}");
    let lost: Vec<&str> = first["lost"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    for wanted in ["no mount namespace", "no pid namespace", "no hook"] {
        assert!(
            lost.iter().any(|l| l.contains(wanted)),
            "{wanted:?} not among the losses: {lost:#?}"
        );
    }
    let why = first["user_namespaces"].as_str().unwrap();
    assert!(
        why.contains("cannot create a user namespace") && why.contains("max_user_namespaces = 0"),
        "{why}"
    );
}

/// The same host as a container's, under a namespace sandbox run normally: the first record
/// says `namespaces` and lists nothing lost.
#[test]
fn the_first_record_of_a_full_run_lists_nothing_lost() {
    let Some(w) = World::new(Who::Root) else {
        return;
    };
    let log = w.base.join("audit.jsonl");
    let out = w
        .command(&["--audit-log", log.to_str().unwrap()], &["/bin/true"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    let text = fs::read_to_string(&log).unwrap();
    let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(first["isolation"], "namespaces", "{first}");
    assert_eq!(first["lost"], serde_json::json!([]), "{first}");
    assert!(first["user_namespaces"].is_null(), "{first}");
}

/// `--ci` in such a container, with a profile that requires namespaces (the built-in `ci`
/// does: no `[degraded]`): refused with 125 — "infrastructure", another host may run it —
/// and the command never starts.
#[test]
fn ci_refuses_a_profile_that_requires_namespaces() {
    let Some(w) = world() else { return };
    let profile = write_profile(&w, "ci-like.toml", "extends = \"ci\"\n");
    let marker = w.workspace.join("ran");
    let out = run_without_userns_with(
        &w,
        &profile,
        &["--ci"],
        &["/bin/sh", "-c", &format!("touch {}", marker.display())],
    );
    assert_eq!(out.status.code(), Some(125), "{}", describe(&out));
    assert!(!marker.exists(), "the command ran: {}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("user namespace"), "{}", describe(&out));
}

/// SIGTERM from outside on the Landlock + seccomp-only tier: no pid namespace ends the tree
/// here, the init (a subreaper) kills the command's group and every orphan it adopted, a child
/// in a session of its own and one ignoring SIGTERM among them.
#[test]
fn sigterm_ends_the_tree_without_namespaces() {
    let Some(w) = world() else { return };
    let profile = degraded_profile(&w, "");
    let marker = format!("{}", 8_100_000_000u64 + u64::from(std::process::id()));
    let script = format!(
        "trap '' TERM\n(trap '' TERM; exec sleep {marker}1) &\nsetsid sleep {marker}2 &\necho started > started\nwait\n"
    );
    let mut cmd = Command::new("python3");
    cmd.arg(NO_USERNS).arg(run_binary_for_user()).args([
        "--profile",
        &profile,
        "--",
        "/bin/sh",
        "-c",
        &script,
    ]);
    let mut child = w
        .clean_env(&mut cmd)
        .env("NO_USERNS_UID", w.owner.0.to_string())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let with_marker = || -> Vec<(i32, String)> {
        fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| {
                let pid: i32 = e.file_name().to_str()?.parse().ok()?;
                let text = String::from_utf8_lossy(&fs::read(e.path().join("cmdline")).ok()?)
                    .replace('\0', " ");
                text.contains(&marker).then_some((pid, text))
            })
            .collect()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while with_marker()
        .iter()
        .filter(|(_, t)| t.starts_with("sleep "))
        .count()
        < 2
    {
        if child.try_wait().unwrap().is_some() || std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!(
                "never started: {}",
                describe(&child.wait_with_output().unwrap())
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // The supervisor: the stepproof-run whose parent is not a stepproof-run (the init is its
    // child, with the same command line).
    let runs: Vec<i32> = with_marker()
        .into_iter()
        .filter(|(_, t)| t.starts_with(run_binary_for_user().to_str().unwrap()))
        .map(|(pid, _)| pid)
        .collect();
    let parent = |pid: i32| -> i32 {
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        after.split(' ').nth(1).unwrap().parse().unwrap()
    };
    let supervisor = *runs
        .iter()
        .find(|pid| !runs.contains(&parent(**pid)))
        .unwrap_or_else(|| panic!("no supervisor among {runs:?}"));
    let since = std::time::Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(supervisor),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    while child.try_wait().unwrap().is_none() {
        if since.elapsed() > std::time::Duration::from_secs(60) {
            let _ = child.kill();
            panic!("the run did not end: {:?}", with_marker());
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let took = since.elapsed();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(143), "{}", describe(&out));
    assert!(
        took < std::time::Duration::from_secs(10),
        "ended after {took:?}"
    );
    let left = with_marker();
    assert!(left.is_empty(), "processes of the run left: {left:?}");
}
