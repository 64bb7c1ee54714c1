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
    let mut extra = vec!["--profile", profile];
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
