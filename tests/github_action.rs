//! StepProof's GitHub Action (`action/`) and the example workflows: actionlint checks the
//! workflows, with `uses:` pointed at this repository's action so that its metadata (inputs,
//! outputs) is checked against how the example uses it; shellcheck checks the action's script;
//! and the script's `run` and `record` steps run for real (root and the test user) — a command
//! under `stepproof-run --ci`, then the step outputs, the head hash beside the log and the job
//! summary; its `install` step against a loopback server serving a release (the checksum
//! checked); and actionlint on the release workflow.

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
    assert!(
        text.contains("uses: OWNER/stepproof/action@v0.1.0"),
        "{text}"
    );
    text.replace("OWNER/stepproof/action@v0.1.0", "./action")
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

/// A loopback HTTP server standing in for GitHub's release downloads: `GET /PATH` answers the
/// file DIR/PATH, anything else 404. It serves until the test process ends.
fn serve_files(dir: PathBuf) -> String {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut request = String::new();
            if reader.read_line(&mut request).is_err() {
                continue;
            }
            loop {
                let mut header = String::new();
                if reader.read_line(&mut header).unwrap_or(0) <= 2 {
                    break;
                }
            }
            let path = request.split_whitespace().nth(1).unwrap_or("/");
            let body = (!path.contains(".."))
                .then(|| fs::read(dir.join(path.trim_start_matches('/'))).ok())
                .flatten();
            let _ = match body {
                Some(body) => stream
                    .write_all(
                        format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                            body.len()
                        )
                        .as_bytes(),
                    )
                    .and_then(|()| stream.write_all(&body)),
                None => stream.write_all(
                    b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                ),
            };
        }
    });
    format!("http://{address}")
}

/// A release as the workflow publishes one, in DIR/vVERSION/: a tarball laid out as
/// scripts/build-tarball lays it out (stand-in programs that say who they are) and SHA256SUMS
/// with the line SUMS_LINE gives for it (the tarball's name and its real digest).
fn publish_release(dir: &Path, version: &str, sums_line: impl Fn(&str, &str) -> String) -> String {
    let arch = std::env::consts::ARCH;
    let name = format!("stepproof-{version}-{arch}-linux");
    let tree = dir.join("tree").join(&name);
    for program in ["stepproof-run", "stepproof", "stepproof-hook"] {
        let file = tree.join("bin").join(program);
        fs::create_dir_all(file.parent().unwrap()).unwrap();
        fs::write(&file, format!("#!/bin/sh\necho {program} {version}\n")).unwrap();
        fs::set_permissions(&file, fs::Permissions::from_mode(0o755)).unwrap();
    }
    for (file, text) in [
        ("share/man/man1/stepproof-run.1.gz", "page"),
        (
            "share/bash-completion/completions/stepproof-run",
            "complete -F _x stepproof-run",
        ),
        ("share/stepproof/profiles/default.toml", "# default"),
    ] {
        fs::create_dir_all(tree.join(file).parent().unwrap()).unwrap();
        fs::write(tree.join(file), text).unwrap();
    }
    let release = dir.join(format!("v{version}"));
    fs::create_dir_all(&release).unwrap();
    let tarball = format!("{name}.tar.gz");
    let tar = Command::new("tar")
        .arg("-czf")
        .arg(release.join(&tarball))
        .arg("-C")
        .arg(dir.join("tree"))
        .arg(&name)
        .output()
        .unwrap();
    assert!(tar.status.success(), "{}", describe(&tar));
    let digest = {
        use sha2::Digest as _;
        hex::encode(sha2::Sha256::digest(
            fs::read(release.join(&tarball)).unwrap(),
        ))
    };
    fs::write(release.join("SHA256SUMS"), sums_line(&tarball, &digest)).unwrap();
    tarball
}

/// The action's install step as the runner runs it: the release VERSION from BASE_URL into a
/// fresh RUNNER_TEMP, Claude Code's install skipped.
fn install_step(base_url: &str, runner_temp: &Path, env: &[(&str, &str)]) -> std::process::Output {
    fs::create_dir_all(runner_temp).unwrap();
    let github_path = runner_temp.join("github-path");
    fs::write(&github_path, "").unwrap();
    Command::new("bash")
        .arg(Path::new(ROOT).join("action/stepproof-action.sh"))
        .arg("install")
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", runner_temp)
        .env("RUNNER_TEMP", runner_temp)
        .env("GITHUB_PATH", &github_path)
        .env("INPUT_RELEASE_BASE_URL", base_url)
        .env("INPUT_CLAUDE_CODE_VERSION", "")
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

/// The action installs a release by version: the tarball and SHA256SUMS downloaded (here from
/// a loopback server), the tarball installed only when its digest is the one SHA256SUMS gives
/// for it; a wrong digest, or no line for it, is refused before anything is unpacked.
#[test]
fn the_action_installs_a_release_only_when_its_checksum_matches() {
    let served = tempfile::tempdir().unwrap();
    let base_url = serve_files(served.path().to_path_buf());
    let work = tempfile::tempdir().unwrap();

    // The right digest: installed, on the job's PATH, `uses: …@v1.2.3` naming the version.
    publish_release(&served.path().join("good"), "1.2.3", |name, digest| {
        format!("{}  other-file.deb\n{digest}  {name}\n", "0".repeat(64))
    });
    let temp = work.path().join("good");
    let out = install_step(
        &format!("{base_url}/good"),
        &temp,
        &[("ACTION_REF", "v1.2.3")],
    );
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("matches SHA256SUMS"),
        "{}",
        describe(&out)
    );
    let bin = temp.join("stepproof-install/bin");
    let ran = Command::new(bin.join("stepproof-run")).output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&ran.stdout),
        "stepproof-run 1.2.3\n"
    );
    assert!(bin.join("stepproof-hook").is_file());
    let share = temp.join("stepproof-install/share");
    assert!(share.join("man/man1/stepproof-run.1.gz").is_file());
    assert!(
        share
            .join("bash-completion/completions/stepproof-run")
            .is_file()
    );
    assert_eq!(
        fs::read_to_string(temp.join("github-path")).unwrap(),
        format!("{}\n", bin.display())
    );

    // A wrong digest: refused, nothing installed.
    publish_release(&served.path().join("bad"), "1.2.4", |name, digest| {
        let wrong: String = digest.chars().rev().collect();
        format!("{wrong}  {name}\n")
    });
    let temp = work.path().join("bad");
    let out = install_step(
        &format!("{base_url}/bad"),
        &temp,
        &[("INPUT_VERSION", "1.2.4")],
    );
    assert!(!out.status.success(), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("does not match the release's SHA256SUMS")
            && stderr.contains("refusing to install it"),
        "{stderr}"
    );
    assert!(!temp.join("stepproof-install").exists());

    // No line for this tarball: refused too.
    publish_release(&served.path().join("unlisted"), "1.2.5", |_, digest| {
        format!("{digest}  stepproof-1.2.5-other-linux.tar.gz\n")
    });
    let temp = work.path().join("unlisted");
    let out = install_step(
        &format!("{base_url}/unlisted"),
        &temp,
        &[("INPUT_VERSION", "v1.2.5")],
    );
    assert!(!out.status.success(), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("has no line for"),
        "{}",
        describe(&out)
    );
    assert!(!temp.join("stepproof-install").exists());

    // No version and the action used at a branch: it says what to set rather than guess.
    let temp = work.path().join("unversioned");
    let out = install_step(&base_url, &temp, &[("ACTION_REF", "main")]);
    assert!(!out.status.success(), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("set the version input"),
        "{}",
        describe(&out)
    );

    // Plain http goes only to the loopback address.
    let temp = work.path().join("remote");
    let out = install_step(
        "http://example.invalid/releases",
        &temp,
        &[("INPUT_VERSION", "1.2.3")],
    );
    assert!(!out.status.success(), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("downloading http://example.invalid"),
        "{}",
        describe(&out)
    );
}

/// The release workflow: actionlint-clean (its shell steps through shellcheck).
#[test]
fn actionlint_passes_the_release_workflow() {
    let Some(actionlint) = actionlint() else {
        return;
    };
    let release =
        fs::read_to_string(Path::new(ROOT).join(".github/workflows/release.yml")).unwrap();
    let repo = lint_repo(&[("release.yml", release)]);
    let out = run_actionlint(&actionlint, repo.path());
    assert!(out.status.success(), "actionlint: {}", describe(&out));
}
