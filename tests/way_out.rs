//! What crosses back out of a run (issue "the way back out, part 1"): the supervisor's own
//! output files, the credentials carry-back, the profile that confines the run, and long homes.
//! Every attack runs inside the real sandbox; every verdict is taken from outside, after it.

mod support;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};
use support::*;

/// A host file outside the workspace that the world's owner may write: what a planted link
/// would make the supervisor overwrite.
fn victim(w: &World) -> (PathBuf, String) {
    let path = w.home.join(".bashrc");
    (path.clone(), fs::read_to_string(&path).unwrap())
}

fn stdout_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `cmd` with a deadline: a hang fails the test instead of the suite.
fn output_within(mut cmd: std::process::Command, limit: Duration) -> Output {
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("start stepproof-run");
    let started = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("still running after {limit:?}: {}", describe(&out));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

// The four output files named inside the workspace, each replaced during the run by a link to
// a host file: the victim stays as it was and the results land in the files opened before.
both!(output_files_planted_as_links_during_the_run, |w: &World| {
    let (victim, before) = victim(w);
    let names = ["status.json", "report.json", "summary.md", "summary.json"];
    let mut cmd = w.command(
        &[
            "--status-file",
            "status.json",
            "--report",
            "report.json",
            "--summary",
            "summary.md",
            "--summary-json",
            "summary.json",
        ],
        &[
            "/bin/sh",
            "-c",
            &format!(
                "for f in {}; do rm -f $f; ln -s {} $f || exit 9; done",
                names.join(" "),
                victim.display()
            ),
        ],
    );
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(
        fs::read_to_string(&victim).unwrap(),
        before,
        "victim overwritten"
    );
    // The links are the run's; the files the supervisor wrote are the ones it opened before.
    for name in names {
        assert!(
            fs::symlink_metadata(w.workspace.join(name))
                .unwrap()
                .file_type()
                .is_symlink(),
            "{name}"
        );
    }
});

// Links and FIFOs left at those names by an earlier run: the launch refuses to write through
// them (exit 120, before anything runs) and never blocks.
both!(
    output_files_planted_before_the_run_are_refused,
    |w: &World| {
        let (victim, before) = victim(w);
        let marker = w.workspace.join("ran");
        for (flag, plant) in [
            ("--status-file", "link"),
            ("--report", "link"),
            ("--summary", "dirlink"),
            ("--summary-json", "fifo"),
            ("--status-file", "hardlink"),
        ] {
            let name = match plant {
                "dirlink" => "out/planted".to_string(),
                _ => format!("planted-{plant}"),
            };
            let path = w.workspace.join(&name);
            let _ = fs::remove_file(&path);
            match plant {
                "link" => std::os::unix::fs::symlink(&victim, &path).unwrap(),
                "dirlink" => {
                    let _ = fs::remove_file(w.workspace.join("out"));
                    std::os::unix::fs::symlink(victim.parent().unwrap(), w.workspace.join("out"))
                        .unwrap();
                }
                "fifo" => {
                    nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o644))
                        .unwrap()
                }
                "hardlink" => {
                    fs::write(w.workspace.join("plain"), "x").unwrap();
                    fs::hard_link(w.workspace.join("plain"), &path).unwrap();
                }
                _ => unreachable!(),
            }
            chown_tree(&w.workspace, w.owner);
            let rel = if plant == "dirlink" {
                "out/.bashrc".to_string()
            } else {
                name.clone()
            };
            let cmd = w.command(&[flag, &rel], &["/bin/sh", "-c", "touch ran"]);
            let out = output_within(cmd, Duration::from_secs(60));
            assert_eq!(
                out.status.code(),
                Some(120),
                "{flag} {plant}: {}",
                describe(&out)
            );
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(stderr.contains(&rel), "{flag} {plant}: {stderr}");
            assert!(!marker.exists(), "{flag} {plant}: the command ran");
            assert_eq!(
                fs::read_to_string(&victim).unwrap(),
                before,
                "{flag} {plant}"
            );
        }
    }
);

// An ordinary status file in the workspace, written over what the run put there.
both!(status_file_in_the_workspace_still_works, |w: &World| {
    let out = w
        .command(
            &["--status-file", "status.json"],
            &[
                "/bin/sh",
                "-c",
                "echo planted-by-the-run > status.json; exit 3",
            ],
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    let status: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(w.workspace.join("status.json")).unwrap())
            .unwrap();
    assert_eq!(status["status"], "exited", "{status}");
    assert_eq!(status["exit_code"], 3, "{status}");
});

fn oauth(token: &str) -> String {
    serde_json::json!({"claudeAiOauth": {
        "accessToken": token,
        "refreshToken": format!("{token}-refresh"),
        "expiresAt": 4_102_444_800_000u64,
        "scopes": ["user:inference", "user:profile"],
        "subscriptionType": "max"
    }})
    .to_string()
}

// Nothing the run leaves in its credentials file reaches the host's store: not a link, a forged
// or broken file, a hard link, a huge file, a FIFO, a directory — and not a well-formed
// "refreshed" login either (the supervisor refreshes the real login itself; the sandbox only
// ever held a placeholder).
both!(
    nothing_the_run_leaves_in_its_credentials_file_reaches_the_host,
    |w: &World| {
        let creds = w.home.join(".claude/.credentials.json");
        fs::create_dir_all(creds.parent().unwrap()).unwrap();
        let login = oauth("sk-ant-oat01-the-users-own");
        fs::write(&creds, &login).unwrap();
        fs::set_permissions(&creds, fs::Permissions::from_mode(0o600)).unwrap();
        chown_tree(&w.home.join(".claude"), w.owner);
        // Another user's login, readable only by root, outside the sandbox's view.
        let foreign = w.base.join("other-user-credentials.json");
        fs::write(&foreign, oauth("sk-ant-oat01-someone-else")).unwrap();
        fs::set_permissions(&foreign, fs::Permissions::from_mode(0o600)).unwrap();
        let c = "/run/claude-config/.credentials.json";
        let attacks = [
            (
                "what the sandbox holds",
                format!("grep -q STEPPROOF-PLACEHOLDER {c} && ! grep -q the-users-own {c}"),
            ),
            (
                "symlink",
                format!("rm -f {c}; ln -s {} {c}", foreign.display()),
            ),
            (
                "forged shape",
                format!(
                    "printf '%s' '{{\"claudeAiOauth\":{{\"accessToken\":\"x\",\"expiresAt\":1,\"apiKeyHelper\":\"evil\"}}}}' > {c}"
                ),
            ),
            ("not json", format!("echo 'not json' > {c}")),
            (
                "hard link",
                format!(
                    "printf '%s' '{}' > /run/claude-config/a; rm -f {c}; ln /run/claude-config/a {c}",
                    oauth("sk-ant-oat01-hardlinked")
                ),
            ),
            ("100 MB", format!("head -c 100000000 /dev/zero > {c}")),
            ("fifo", format!("rm -f {c}; mkfifo {c}")),
            ("directory", format!("rm -f {c}; mkdir {c}")),
            (
                "a well-formed refreshed login",
                format!("printf '%s' '{}' > {c}", oauth("sk-ant-oat01-refreshed")),
            ),
        ];
        for (name, script) in attacks {
            let cmd = w.command(&[], &["/bin/sh", "-c", &script]);
            let out = output_within(cmd, Duration::from_secs(60));
            assert_eq!(out.status.code(), Some(0), "{name}: {}", describe(&out));
            assert_eq!(fs::read_to_string(&creds).unwrap(), login, "{name}");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(!stderr.contains("carried back"), "{name}: {stderr}");
        }
    }
);

// A run never brings a login of its own into a home that had none.
both!(credentials_are_not_created_by_a_run, |w: &World| {
    let c = "/run/claude-config/.credentials.json";
    let out = w
        .command(
            &[],
            &[
                "/bin/sh",
                "-c",
                &format!("printf '%s' '{}' > {c}", oauth("sk-ant-oat01-planted")),
            ],
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(!w.home.join(".claude/.credentials.json").exists());
});

// A profile reviewed in the repository, kept in the workspace with its `extends` chain: the
// run cannot edit, replace, remove or move it (or a directory above it), and it is the same
// after the run.
both!(
    a_profile_in_the_workspace_cannot_be_changed_by_the_run,
    |w: &World| {
        fs::create_dir_all(w.workspace.join("policy")).unwrap();
        let base = "name = \"base\"\nextends = \"default\"\n";
        let repo = "name = \"repo\"\nextends = \"../base.toml\"\n";
        fs::write(w.workspace.join("base.toml"), base).unwrap();
        fs::write(w.workspace.join("policy/stepproof.toml"), repo).unwrap();
        chown_tree(&w.workspace, w.owner);
        let attacks = [
            "echo 'network = { mode = \"host\" }' >> policy/stepproof.toml",
            "echo x > base.toml",
            "mv policy policy.old",
            "mv policy/stepproof.toml policy/old.toml",
            "rm -f base.toml",
            "rm -rf policy",
            "mv base.toml b.toml && echo 'name = \"evil\"' > base.toml",
            "ln -sf /etc/passwd base.toml",
            "python3 -c \"import os; os.rename('policy', 'p2'); os.mkdir('policy'); open('policy/stepproof.toml','w').write('evil')\"",
        ];
        let mut script = String::new();
        for a in attacks {
            script.push_str(&format!("{a} 2>/dev/null && echo ESCAPED: {a:?}; "));
        }
        script.push_str("cat policy/stepproof.toml base.toml");
        let out = w
            .command(
                &["--profile", "policy/stepproof.toml"],
                &["/bin/sh", "-c", &script],
            )
            .output()
            .unwrap();
        assert!(!stdout_of(&out).contains("ESCAPED"), "{}", describe(&out));
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        assert_eq!(
            fs::read_to_string(w.workspace.join("policy/stepproof.toml")).unwrap(),
            repo
        );
        assert_eq!(
            fs::read_to_string(w.workspace.join("base.toml")).unwrap(),
            base
        );
        // Ordinary work beside it goes on.
        let out = w
            .command(
                &["--profile", "policy/stepproof.toml"],
                &[
                    "/bin/sh",
                    "-c",
                    "echo ok > policy/notes.txt && mkdir -p src && echo fn > src/a.rs",
                ],
            )
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        assert!(w.workspace.join("policy/notes.txt").exists());
    }
);

// Every socket binds whatever the home's length.
both!(a_long_home_still_launches_hooked_profiles, |w: &World| {
    let long = w
        .base
        .join(format!("h-{}", "x".repeat(120)))
        .join(format!("home-{}", "y".repeat(60)));
    fs::create_dir_all(&long).unwrap();
    chown_tree(&w.base.join(format!("h-{}", "x".repeat(120))), w.owner);
    assert!(long.as_os_str().len() > 200);
    let mut cmd = w.command(
        &[],
        &[
            "/bin/sh",
            "-c",
            "test -S /run/stepproof/audit.sock && echo hooked",
        ],
    );
    cmd.env("HOME", &long);
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(stdout_of(&out).contains("hooked"), "{}", describe(&out));
    let runs = long.join(".local/state/stepproof/runs");
    assert!(
        Path::new(&runs).is_dir(),
        "no run directory under the long home"
    );
});
