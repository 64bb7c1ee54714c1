//! A step's protected paths are a supervisor invariant, and changes that count are changes git
//! would see: `stepproof-run --runbook` with a shell script as the agent, which changes the
//! workspace by routes the hook never sees (a Makefile recipe it rewrote, plain shell) and asks
//! `stepproof step complete` after each. As root and as the test user. And a million names at
//! the workspace root neither forge nor hide a change in `src/` (the walks start at `src/`).

mod support;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use support::{STEPPROOF, Who, World, describe};

const RUNBOOK: &str = r#"
id = "protected"
title = "Fix the code, not the tests"
owner = "tests"

[[steps]]
id = "fix"
title = "Fix calc"
instructions = "Make src/calc.sh right; tests/ are the proof"
max_attempts = 8
[[steps.allow.bash]]
id = "only-make"
reason = "this step runs the tests with make"
commands = ["make test"]
[[steps.deny.files]]
id = "keep-tests"
reason = "the tests are the proof"
access = "write"
paths = ["tests/**"]
[[steps.evidence]]
command = { run = ["sh", "tests/test_calc.sh"] }
[[steps.evidence]]
files_changed = { paths = ["src/**"] }

[[steps]]
id = "notes"
title = "Change the code again"
instructions = "Change something under src/"
depends_on = ["fix"]
max_attempts = 5
[[steps.evidence]]
files_changed = { paths = ["src/**"] }

[[steps]]
id = "notes-exist"
title = "Write a note"
instructions = "Write src/n.*"
depends_on = ["notes"]
max_attempts = 5
[[steps.evidence]]
files_exist = { paths = ["src/*.rs"], include_ignored = true }
[[steps.evidence]]
files_exist = { paths = ["src/n*"] }
"#;

/// Each attempt prints `NAME=EXIT` after the completion's answer; every change is put back
/// exactly (content and mode) before the next, so each attempt fails for its own change only.
const AGENT: &str = r#"S=/run/stepproof/stepproof
hook() {
  printf '%s' "{\"hook_event_name\":\"PreToolUse\",\"session_id\":\"s\",\"tool_name\":\"$1\",\"tool_input\":$2,\"cwd\":\"$PWD\"}" | /run/stepproof/stepproof-hook --audit-socket /run/stepproof/audit.sock >/dev/null; echo "$3=$?"
}
complete() { echo "=== $1"; $S step complete $2; echo "$1=$?"; }
restore() { printf 'expect=4\n. ./src/calc.sh\ntest "$answer" = "$expect"\n' > tests/test_calc.sh; printf 'helper\n' > tests/helper.sh; chmod 644 tests/test_calc.sh tests/helper.sh; }
hook Bash '{"command":"make test"}' make-hook
hook Write '{"file_path":"'"$PWD"'/tests/test_calc.sh","content":"x"}' write-hook
# The recipe rewritten to make the test expect the buggy value; the hook saw `make test` only.
printf 'test:\n\tsed -i s/expect=4/expect=5/ tests/test_calc.sh\n' > Makefile
make test >/dev/null 2>&1; echo "make=$?"
printf '# tidied\nanswer=5\n' > src/calc.sh
complete content
restore
chmod 755 tests/test_calc.sh
complete mode
restore
echo new > tests/test_new.sh
complete new-file
rm tests/test_new.sh
rm tests/helper.sh
complete removed
restore
rm tests/helper.sh; ln -s ../src/calc.sh tests/helper.sh
complete link
rm tests/helper.sh; restore
# The real fix, with Python's bytecode cache written under the protected tests/ (ignored).
mkdir -p tests/__pycache__; echo pyc > tests/__pycache__/test_calc.cpython-312.pyc
printf 'answer=4\n' > src/calc.sh
complete fixed
# files_changed: only ignored files changed, then the rules rewritten: neither counts.
mkdir -p src/__pycache__; echo pyc > src/__pycache__/calc.cpython-312.pyc
complete only-ignored "--step notes"
: > .gitignore; echo pyc > src/__pycache__/more.cpython-312.pyc
complete rules-rewritten "--step notes"
# A real change, which a .gitignore written during the step does not hide.
printf 'src/*.rs\nsrc/n*.txt\n' >> .gitignore; echo 'fn a() {}' >> src/a.rs
complete real-change "--step notes"
# files_exist: an ignored file does not hold it, before or after the agent rewrote the rules;
# with include_ignored, an ignored one does (src/a.rs).
echo n > src/n.txt
complete exists-ignored "--step notes-exist"
: > .gitignore
complete exists-rules-rewritten "--step notes-exist"
echo n > src/n.md
complete exists "--step notes-exist"
"#;

fn setup(w: &World) {
    let ws = &w.workspace;
    fs::write(ws.join("runbook.toml"), RUNBOOK).unwrap();
    fs::write(ws.join("agent.sh"), AGENT).unwrap();
    fs::write(ws.join(".gitignore"), "__pycache__/\n").unwrap();
    fs::write(ws.join("Makefile"), "test:\n\tsh tests/test_calc.sh\n").unwrap();
    fs::create_dir_all(ws.join("src")).unwrap();
    fs::create_dir_all(ws.join("tests")).unwrap();
    fs::write(ws.join("src/calc.sh"), "answer=5\n").unwrap();
    fs::write(ws.join("src/a.rs"), "fn main() {}\n").unwrap();
    fs::write(
        ws.join("tests/test_calc.sh"),
        "expect=4\n. ./src/calc.sh\ntest \"$answer\" = \"$expect\"\n",
    )
    .unwrap();
    fs::write(ws.join("tests/helper.sh"), "helper\n").unwrap();
    for f in ["tests/test_calc.sh", "tests/helper.sh"] {
        fs::set_permissions(ws.join(f), fs::Permissions::from_mode(0o644)).unwrap();
    }
    support::chown_tree(ws, w.owner);
}

both!(protected_paths_hold_whatever_changes_them, |w: &World| {
    setup(w);
    let out = w
        .command(&["--runbook", "runbook.toml"], &["/bin/sh", "agent.sh"])
        .output()
        .expect("start stepproof-run");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let all = describe(&out);
    // The hook allows `make test` and denies a write to tests/: it is not what catches this.
    assert!(text.contains("make-hook=0"), "{all}");
    assert!(text.contains("write-hook=2"), "{all}");
    assert!(text.contains("make=0"), "{all}");
    for (name, path, change) in [
        (
            "content",
            "tests/test_calc.sh",
            "tests/test_calc.sh (content)",
        ),
        (
            "mode",
            "tests/test_calc.sh",
            "tests/test_calc.sh (mode 644 → 755)",
        ),
        (
            "new-file",
            "tests/test_new.sh",
            "tests/test_new.sh (new file)",
        ),
        (
            "removed",
            "tests/helper.sh",
            "tests/helper.sh (removed (file))",
        ),
        (
            "link",
            "tests/helper.sh",
            "tests/helper.sh (was a file, now a link (to ../src/calc.sh))",
        ),
    ] {
        let said = support::attempt_answer(&text, name);
        assert!(
            said.contains(&format!("\n{name}=1")),
            "{name}: {said}\n{all}"
        );
        assert!(
            said.contains("files_unchanged (protected by deny rule `keep-tests`: tests/**)")
                && said.contains(change),
            "{name} should name {path}: {said}\n{all}"
        );
    }
    // The rewritten test made the command pass and src/ changed: the invariant alone failed
    // the step (without it, this attempt passed with the code still wrong).
    let content = support::attempt_answer(&text, "content");
    assert!(
        !content.contains("command `sh tests/test_calc.sh` exited")
            && !content.contains("files_changed:"),
        "{content}"
    );
    assert!(
        content.contains("1 path the step protects changed"),
        "{content}"
    );
    // The real fix passes, with __pycache__ written under the protected tests/.
    let fixed = support::attempt_answer(&text, "fixed");
    assert!(
        fixed.contains("\nfixed=0") && fixed.contains("step fix passed"),
        "{fixed}\n{all}"
    );
    // files_changed: ignored files alone do not hold it, before or after the agent rewrote
    // .gitignore; a real change does, though .gitignore now names it.
    for name in ["only-ignored", "rules-rewritten"] {
        let said = support::attempt_answer(&text, name);
        assert!(
            said.contains(&format!("\n{name}=1"))
                && said.contains("files_changed: nothing under src/** changed"),
            "{name}: {said}\n{all}"
        );
    }
    let real = support::attempt_answer(&text, "real-change");
    assert!(real.contains("\nreal-change=0"), "{real}\n{all}");
    // files_exist: an ignored file does not hold it (the rules as the step opened); the item
    // with include_ignored holds with an ignored file.
    for name in ["exists-ignored", "exists-rules-rewritten"] {
        let said = support::attempt_answer(&text, name);
        assert!(
            said.contains(&format!("\n{name}=1"))
                && said.contains("files_exist: nothing matches src/n*")
                && !said.contains("src/*.rs"),
            "{name}: {said}\n{all}"
        );
    }
    let exists = support::attempt_answer(&text, "exists");
    assert!(exists.contains("\nexists=0"), "{exists}\n{all}");
    assert_eq!(out.status.code(), Some(0), "{all}");

    let log = support::audit_log_named(&String::from_utf8_lossy(&out.stderr));
    let verified = std::process::Command::new(STEPPROOF)
        .args(["audit", "verify"])
        .arg(&log)
        .output()
        .unwrap();
    assert!(verified.status.success(), "{}", describe(&verified));
    let records = support::records_in(&log);
    let opened = records
        .iter()
        .find(|r| r["kind"] == "runbook-step-opened" && r["step"] == "fix")
        .unwrap();
    assert_eq!(
        opened["invariants"],
        serde_json::json!(["tests/**"]),
        "{opened}"
    );
    assert_eq!(opened["ignore"]["repository"], true, "{opened}");
    assert!(
        opened["ignore"]["files"]
            .as_array()
            .is_some_and(|f| f.iter().any(|p| p == ".gitignore")),
        "{opened}"
    );
    // The verdicts' own records name what changed.
    let failed: Vec<&serde_json::Value> = records
        .iter()
        .filter(|r| r["kind"] == "runbook-step-failed" && r["step"] == "fix")
        .collect();
    assert_eq!(failed.len(), 5, "{failed:#?}");
    assert_eq!(
        failed[0]["invariants_changed"],
        serde_json::json!([{ "path": "tests/test_calc.sh", "change": "content" }]),
        "{:#?}",
        failed[0]
    );
    let passed = records
        .iter()
        .filter(|r| {
            r["kind"] == "runbook-evidence"
                && r["step"] == "fix"
                && r["item"] == "deny-rules"
                && r["held"] == true
        })
        .count();
    assert_eq!(passed, 1);
});

const MILLION_RUNBOOK: &str = r#"
id = "million"
title = "A change in src/, beside a million names"
owner = "tests"

[[steps]]
id = "change"
title = "Change src/"
instructions = "Change something under src/"
[[steps.evidence]]
files_changed = { paths = ["src/**"] }
"#;

const MILLION_AGENT: &str = r#"S=/run/stepproof/stepproof
$S step complete; echo "unchanged=$?"
echo 'fn b() {}' >> src/a.rs
$S step complete; echo "changed=$?"
"#;

/// Names at the workspace root: five times the old walk's silent cap (200,000 entries).
const MILLION: usize = 1_000_000;

/// A tmpfs mounted over the workspace for the test (1,000,000 names cost ~5 s to make there,
/// and nothing to remove), unmounted when dropped.
struct Tmpfs(std::path::PathBuf);

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

both!(
    a_million_entries_neither_forge_nor_hide_a_change,
    |w: &World| {
        let ws = &w.workspace;
        let mounted = std::process::Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                "mode=0755,size=1g",
                "stepproof-million",
            ])
            .arg(ws)
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            support::skip_or_fail("mounting a tmpfs over the workspace (needs root)");
            return;
        }
        let _tmpfs = Tmpfs(ws.clone());
        fs::write(ws.join("runbook.toml"), MILLION_RUNBOOK).unwrap();
        fs::write(ws.join("agent.sh"), MILLION_AGENT).unwrap();
        fs::create_dir_all(ws.join("src")).unwrap();
        fs::write(ws.join("src/a.rs"), "fn a() {}\n").unwrap();
        fs::write(ws.join("empty"), "").unwrap();
        support::chown_tree(ws, w.owner);
        // One inode (owned by the run's user already), a million names for it.
        let made = std::time::Instant::now();
        for n in 0..MILLION {
            fs::hard_link(ws.join("empty"), ws.join(format!("e{n}"))).unwrap();
        }
        eprintln!(
            "million: {:?} made {MILLION} names in {:.1?}",
            w.who,
            made.elapsed()
        );
        let started = std::time::Instant::now();
        let out = w
            .command(
                &["--runbook", "runbook.toml", "--timeout", "300s"],
                &["/bin/sh", "agent.sh"],
            )
            .output()
            .expect("start stepproof-run");
        let took = started.elapsed();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let all = describe(&out);
        // (a) src/ unchanged: the item fails — a million names elsewhere forge nothing.
        assert!(
            text.contains("unchanged=1")
                && text.contains("files_changed: nothing under src/** changed"),
            "{all}"
        );
        // (b) a real change in src/ passes — a million names elsewhere hide nothing.
        assert!(text.contains("changed=0"), "{all}");
        assert_eq!(out.status.code(), Some(0), "{all}");
        let log = support::audit_log_named(&String::from_utf8_lossy(&out.stderr));
        let records = support::records_in(&log);
        let changed: Vec<&serde_json::Value> = records
            .iter()
            .filter(|r| r["kind"] == "runbook-evidence" && r["body_kind"] == "files_changed")
            .collect();
        assert_eq!(changed.len(), 2, "{changed:#?}");
        assert_eq!(changed[0]["held"], false, "{}", changed[0]);
        assert_eq!(changed[1]["held"], true, "{}", changed[1]);
        assert!(
            changed[1]["changed"].to_string().contains("src/a.rs")
                && !changed[1]["changed"].to_string().contains("\"e"),
            "{}",
            changed[1]
        );
        // The figures: the step's opening walk, each completion (the supervisor's own clock,
        // request to verdict), and the whole run with its sweep.
        let at = |kind: &str, attempt: u64| {
            records
                .iter()
                .find(|r| r["kind"] == kind && r["attempt"] == attempt)
                .and_then(|r| r["ts_ms"].as_u64())
                .unwrap_or_else(|| panic!("no {kind} attempt {attempt}"))
        };
        let opened = records
            .iter()
            .find(|r| r["kind"] == "runbook-step-opened")
            .unwrap();
        eprintln!(
            "million: {:?} step open {} ms; completion, src/ unchanged {} ms, changed {} ms; whole run {:.1?}",
            w.who,
            opened["opening_ms"],
            at("runbook-step-failed", 1) - at("runbook-complete-requested", 1),
            at("runbook-step-passed", 2) - at("runbook-complete-requested", 2),
            took
        );
    }
);
