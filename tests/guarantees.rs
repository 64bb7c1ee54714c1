//! No value silently removes a guarantee: flags that would take one away are refused before
//! anything runs (exit 120, refused: the same invocation gets the same answer), with a message that names what they would remove.

mod support;

use std::fs;
use std::path::Path;
use support::*;

fn refused(w: &World, extra: &[&str], needle: &str) {
    let marker = w.base.join("ran");
    let _ = fs::remove_file(&marker);
    let out = w
        .command(
            extra,
            &["/bin/sh", "-c", &format!("touch {}", marker.display())],
        )
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(120),
        "{extra:?}: {}",
        describe(&out)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(needle),
        "{extra:?}: wanted {needle:?} in {stderr}"
    );
    assert!(!marker.exists(), "{extra:?}: the command ran");
}

// A workspace is one project directory: never `/`, a system directory the view shows from the
// host, a directory holding the home, or StepProof's own state.
both!(
    workspaces_that_would_remove_a_guarantee_are_refused,
    |w: &World| {
        let state = w.home.join(".local/state/stepproof");
        fs::create_dir_all(&state).unwrap();
        chown_tree(&w.home, w.owner);
        let base = w.base.to_str().unwrap().to_string();
        let state = state.to_str().unwrap().to_string();
        for (workspace, needle) in [
            ("/", "cannot be `/`"),
            ("/etc", "under /etc"),
            ("/usr", "under /usr"),
            ("/usr/share", "under /usr"),
            ("/bin", "read-only from the host"),
            ("/proc", "under /proc"),
            (base.as_str(), "contains the home"),
            (state.as_str(), "StepProof's own state"),
        ] {
            refused(w, &["--workspace", workspace], needle);
        }
        assert!(!Path::new("/etc/ran").exists());
        // The home itself is a workspace (its persistence paths are protected).
        let out = w
            .command(&["--workspace", w.home.to_str().unwrap()], &["/bin/true"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    }
);

// The audit log is resolved once, before the sandbox starts: not in the workspace however the
// path is spelled (a directory that does not exist yet, a link to the workspace), and never
// through a link at its own name.
both!(audit_log_bypasses_are_refused, |w: &World| {
    let outside = w.base.join("via");
    let _ = fs::remove_file(&outside);
    std::os::unix::fs::symlink(&w.workspace, &outside).unwrap();
    let through_link = outside.join("audit.jsonl");
    let victim = w.base.join("victim.log");
    fs::write(&victim, "precious\n").unwrap();
    chown_tree(&w.base.join("victim.log"), w.owner);
    let planted = w.base.join("planted.jsonl");
    let _ = fs::remove_file(&planted);
    std::os::unix::fs::symlink(&victim, &planted).unwrap();
    for (path, needle) in [
        (
            "not-yet/audit.jsonl",
            "where the sandbox could read and write it",
        ),
        (
            "./a/../b/audit.jsonl",
            "where the sandbox could read and write it",
        ),
        (
            through_link.to_str().unwrap(),
            "where the sandbox could read and write it",
        ),
    ] {
        refused(w, &["--audit-log", path], needle);
    }
    refused(w, &["--audit-log", planted.to_str().unwrap()], "audit log");
    assert_eq!(fs::read_to_string(&victim).unwrap(), "precious\n");
    assert!(!w.workspace.join("not-yet").exists());
});

// Records from inside are capped per run: a flood through the hook binary stops at
// `audit.inside_max_mib`, the supervisor says how many were not written (in the log, on stderr
// and in the job summary), and the log stays a verifiable chain.
both!(
    a_flood_of_records_from_inside_stops_at_the_cap,
    |w: &World| {
        let profile = w.base.join("cap.toml");
        fs::write(
            &profile,
            "name = \"cap\"\nextends = \"default\"\n[audit]\ninside_max_mib = 1\n",
        )
        .unwrap();
        let log = w.base.join("audit.jsonl");
        let summary = w.base.join("summary.json");
        chown_tree(&w.base.join("cap.toml"), w.owner);
        // 450 calls of ~4.5 KiB records each: about twice the cap.
        let flood = r#"
import subprocess, json, os
cmd = "echo " + "x" * 8000
inp = json.dumps({"session_id": "s", "transcript_path": "/tmp/t", "cwd": os.getcwd(),
                  "hook_event_name": "PreToolUse", "tool_name": "Bash",
                  "tool_input": {"command": cmd}, "tool_use_id": "t1"})
for i in range(450):
    subprocess.run(["/run/stepproof/stepproof-hook", "--policy", "/run/stepproof/policy",
                    "--audit-socket", "/run/stepproof/audit.sock", "--event", "PreToolUse"],
                   input=inp.encode(), capture_output=True)
"#;
        // The log and the summary live outside the workspace, in a directory the owner may write.
        let dir = w.base.join("out");
        fs::create_dir_all(&dir).unwrap();
        chown_tree(&dir, w.owner);
        let log = dir.join(log.file_name().unwrap());
        let summary = dir.join(summary.file_name().unwrap());
        let out = w
            .command(
                &[
                    "--profile",
                    profile.to_str().unwrap(),
                    "--audit-log",
                    log.to_str().unwrap(),
                    "--summary-json",
                    summary.to_str().unwrap(),
                    "--status-file",
                    dir.join("status.json").to_str().unwrap(),
                ],
                &["/usr/bin/python3", "-c", flood],
            )
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        let size = fs::metadata(&log).unwrap().len();
        assert!(
            size < (1 << 20) + (64 << 10),
            "the log grew to {size} bytes"
        );
        let text = fs::read_to_string(&log).unwrap();
        let capped: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter(|r| r["kind"] == "inside-records-over-cap")
            .collect();
        let last = capped.last().expect("no over-cap record");
        assert_eq!(last["source"], "supervisor");
        let not_written = last["not_written"].as_u64().unwrap();
        assert!(not_written > 150, "{last}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!(
                "{not_written} records the agent caused were NOT written"
            )),
            "{stderr}"
        );
        let summary: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(&summary).unwrap()).unwrap();
        assert_eq!(summary["summary"]["inside_not_written"], not_written);
        let status: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(dir.join("status.json")).unwrap()).unwrap();
        assert_eq!(
            status["inside_records_not_written"], not_written,
            "{status}"
        );
        assert_eq!(status["status"], "exited", "{status}");
        // What was not written is not part of the chain: the head the run printed still
        // verifies, and the run has its end.
        let head = summary["summary"]["audit_head"].as_str().unwrap();
        let verify = std::process::Command::new(STEPPROOF)
            .args(["audit", "verify"])
            .arg(&log)
            .args(["--head", head])
            .output()
            .unwrap();
        assert!(verify.status.success(), "{}", describe(&verify));
        let stdout = String::from_utf8_lossy(&verify.stdout);
        assert!(stdout.starts_with("intact: "), "{stdout}");
    }
);

// The home as the workspace: what runs code at the next login, git command or ssh connection
// stays read-only, and what did not exist is swept; the secret catalogue stays hidden.
both!(
    home_as_workspace_keeps_its_persistence_paths,
    |w: &World| {
        fs::write(w.home.join(".gitconfig"), "[user]\n\tname = me\n").unwrap();
        fs::write(w.home.join(".ssh/authorized_keys"), "ssh-ed25519 AAAA me\n").unwrap();
        fs::create_dir_all(w.home.join(".local/bin")).unwrap();
        chown_tree(&w.home, w.owner);
        let before: Vec<_> = [".gitconfig", ".ssh/authorized_keys", ".bashrc"]
            .iter()
            .map(|p| fs::read(w.home.join(p)).unwrap())
            .collect();
        let attacks = [
            "echo '[core]\n\tfsmonitor = evil' >> .gitconfig",
            "echo 'ssh-ed25519 EVIL' >> .ssh/authorized_keys",
            "echo evil >> .bashrc",
            "echo '#!/bin/sh' > .local/bin/git && chmod 755 .local/bin/git",
            "mkdir -p .config/systemd/user && echo '[Service]' > .config/systemd/user/evil.service",
            "mkdir -p .config/autostart && echo x > .config/autostart/evil.desktop",
            "cat .ssh/id_rsa",
        ];
        let mut script = String::new();
        for a in attacks {
            script.push_str(&format!("({a}) 2>/dev/null && echo WROTE: {a:?}; "));
        }
        let out = w
            .command(
                &["--workspace", w.home.to_str().unwrap()],
                &["/bin/sh", "-c", &script],
            )
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        for a in &attacks[..4] {
            assert!(
                !stdout.contains(&format!("WROTE: {a:?}")),
                "{a}: {}",
                describe(&out)
            );
        }
        assert!(!stdout.contains(SECRET), "{}", describe(&out));
        let after: Vec<_> = [".gitconfig", ".ssh/authorized_keys", ".bashrc"]
            .iter()
            .map(|p| fs::read(w.home.join(p)).unwrap())
            .collect();
        assert_eq!(before, after);
        // What was created where nothing existed is quarantined, and the run says so.
        assert_eq!(out.status.code(), Some(123), "{}", describe(&out));
        for created in [
            ".config/systemd/user/evil.service",
            ".config/autostart/evil.desktop",
        ] {
            assert!(!w.home.join(created).exists(), "{created} left in the home");
        }
    }
);
