//! What defines an evidence command is not the agent's to change during the step: the files a
//! tool reads to decide what runs (a Makefile, a GNUmakefile hidden from git, a module that
//! shadows `unittest`) are step invariants, read-only inside the evidence sandbox (a build
//! script the evidence runs cannot rewrite a test there), unless the step names them as its
//! work; the evidence's environment does not say it is one, and the caches' configuration the
//! agent wrote is hidden from it. `stepproof-run --runbook` with a shell script as the agent,
//! as root and as the test user.

mod support;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use support::{STEPPROOF, Who, World, describe};

const RUNBOOK: &str = r#"
id = "definitions"
title = "Fix the code, not what runs the tests"
owner = "tests"

[[steps]]
id = "fix"
title = "Fix calc"
instructions = "Make src/calc.sh right; make test is the proof"
max_attempts = 8
[[steps.deny.files]]
id = "keep-tests"
reason = "the tests are the proof"
access = "write"
paths = ["tests/**"]
[[steps.evidence]]
command = { run = ["make", "test"] }
[[steps.evidence]]
files_changed = { paths = ["src/**"] }

[[steps]]
id = "py"
title = "Fix calc.py"
instructions = "Make src/calc.py right"
depends_on = ["fix"]
max_attempts = 5
[[steps.evidence]]
command = { run = ["python3", "-m", "unittest", "discover", "-s", "pytests"] }

[[steps]]
id = "rework"
title = "Change the build"
instructions = "The Makefile is this step's work"
depends_on = ["py"]
[[steps.evidence]]
files_changed = { paths = ["Makefile"] }
[[steps.evidence]]
command = { run = ["make", "test"] }

[[steps]]
id = "probe"
title = "Nothing says it is evidence"
instructions = "-"
depends_on = ["rework"]
[[steps.evidence]]
command = { run = ["sh", "-c", "env | grep -i evidence && exit 7; test \"$PYTHONDONTWRITEBYTECODE\" = 1 || exit 8; test \"$STEPPROOF_PROFILE\" = \"$(cat .agent-profile)\" || exit 9; test -f \"$CARGO_HOME/marker\" || exit 11; cat \"$CARGO_HOME/config.toml\" 2>/dev/null | grep -q runner && exit 10; exit 0"] }
"#;

const MAKEFILE: &str = "test:\n\tsh src/build.sh\n\tsh tests/test_calc.sh\n";

/// Each attempt prints `NAME=EXIT` after the completion's answer.
const AGENT: &str = r#"S=/run/stepproof/stepproof
complete() { echo "=== $1"; $S step complete $2; echo "$1=$?"; }
printf '%s' "$STEPPROOF_PROFILE" > .agent-profile
mkdir -p "$CARGO_HOME"; echo m > "$CARGO_HOME/marker"
printf '[target.x86_64-unknown-linux-gnu]\nrunner = "/bin/true"\n' > "$CARGO_HOME/config.toml"
# make prefers a GNUmakefile, which git is told not to see.
printf 'test:\n\ttrue\n' > GNUmakefile; echo GNUmakefile >> .git/info/exclude
printf '# tidied\nanswer=5\n' > src/calc.sh
echo "status=[$(git status --porcelain --untracked-files=all GNUmakefile 2>&1)]"
complete gnumakefile
rm GNUmakefile
# The tracked recipe replaced.
printf 'test:\n\ttrue\n' > Makefile
complete makefile
printf 'test:\n\tsh src/build.sh\n\tsh tests/test_calc.sh\n' > Makefile
# The script the recipe runs (a definition too now) rewrites the test inside the evidence sandbox.
printf 'sed -i s/expect=4/expect=5/ tests/test_calc.sh; echo rewrite=$?\n' > src/build.sh
complete in-evidence
# The real fix.
printf ':\n' > src/build.sh
printf 'answer=4\n' > src/calc.sh
complete fixed
# A module that shadows unittest in the directory python -m runs in.
printf 'raise SystemExit(0)\n' > unittest.py
printf 'def answer():\n    return 5\n' > src/calc.py
complete unittest-shadow
rm unittest.py
printf 'def answer():\n    return 4\n' > src/calc.py
complete py-fixed
# The Makefile is the next step's work: it may change.
printf 'test:\n\tsh src/build.sh\n\tsh tests/test_calc.sh\n\ttrue\n' > Makefile
complete rework
complete probe
"#;

fn setup(w: &World) {
    let ws = &w.workspace;
    let git = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(ws)
        .status();
    assert!(git.is_ok_and(|s| s.success()), "git init");
    fs::write(ws.join("runbook.toml"), RUNBOOK).unwrap();
    fs::write(ws.join("agent.sh"), AGENT).unwrap();
    fs::write(ws.join(".gitignore"), "__pycache__/\n").unwrap();
    fs::write(ws.join("Makefile"), MAKEFILE).unwrap();
    for d in ["src", "tests", "pytests"] {
        fs::create_dir_all(ws.join(d)).unwrap();
    }
    fs::write(ws.join("src/calc.sh"), "answer=5\n").unwrap();
    fs::write(ws.join("src/build.sh"), ":\n").unwrap();
    fs::write(ws.join("src/calc.py"), "def answer():\n    return 5\n").unwrap();
    fs::write(
        ws.join("tests/test_calc.sh"),
        "expect=4\n. ./src/calc.sh\ntest \"$answer\" = \"$expect\"\n",
    )
    .unwrap();
    fs::write(
        ws.join("pytests/test_calc.py"),
        "import sys, unittest\nsys.path.insert(0, 'src')\nfrom calc import answer\n\nclass T(unittest.TestCase):\n    def test(self):\n        self.assertEqual(answer(), 4)\n",
    )
    .unwrap();
    for f in ["tests/test_calc.sh", "Makefile"] {
        fs::set_permissions(ws.join(f), fs::Permissions::from_mode(0o644)).unwrap();
    }
    support::chown_tree(ws, w.owner);
}

both!(what_defines_the_evidence_is_frozen, |w: &World| {
    setup(w);
    let out = w
        .command(&["--runbook", "runbook.toml"], &["/bin/sh", "agent.sh"])
        .output()
        .expect("start stepproof-run");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let all = describe(&out);
    // git does not see the GNUmakefile; make would run it.
    assert!(text.contains("status=[]"), "{all}");
    for (name, named) in [
        ("gnumakefile", "GNUmakefile (new file)"),
        ("makefile", "Makefile (content)"),
        ("unittest-shadow", "unittest.py (new file)"),
    ] {
        let said = support::attempt_answer(&text, name);
        assert!(
            said.contains(&format!("\n{name}=1"))
                && said.contains("files_unchanged (what defines the evidence commands)")
                && said.contains(named),
            "{name} should name {named}: {said}\n{all}"
        );
    }
    // Inside the evidence sandbox the test is read-only: the rewrite fails, the test with it.
    let inside = support::attempt_answer(&text, "in-evidence");
    assert!(
        inside.contains("\nin-evidence=1")
            && inside.contains("command `make test` exited 2")
            && inside.contains("Read-only file system")
            && inside.contains("src/build.sh (content)")
            && inside.contains("rewrite=")
            && !inside.contains("rewrite=0"),
        "{inside}\n{all}"
    );
    for name in ["fixed", "py-fixed", "rework", "probe"] {
        let said = support::attempt_answer(&text, name);
        assert!(
            said.contains(&format!("\n{name}=0")),
            "{name}: {said}\n{all}"
        );
    }
    // The exclude line it left is the run's sweep's to find (the host's git view).
    assert_eq!(out.status.code(), Some(123), "{all}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("info/exclude changed during the run"),
        "{all}"
    );

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
    let frozen = opened["definitions_frozen"].as_array().unwrap();
    for f in ["GNUmakefile", "makefile", "Makefile"] {
        assert!(frozen.iter().any(|v| v == f), "{f}: {opened}");
    }
    let passed = records
        .iter()
        .find(|r| r["kind"] == "runbook-step-passed" && r["step"] == "fix")
        .unwrap();
    // make reuses no build state: nothing was discarded, nothing trusted.
    assert_eq!(passed["covered"]["build_state"], "none reused", "{passed}");
    assert!(
        passed["covered"]["definitions_frozen"]
            .as_array()
            .is_some_and(|d| d.iter().any(|v| v == "Makefile")),
        "{passed}"
    );
    // The step that names the Makefile as its work changed it, and said so.
    let rework = records
        .iter()
        .find(|r| {
            r["kind"] == "runbook-evidence" && r["step"] == "rework" && r["item"] == "definitions"
        })
        .unwrap();
    assert_eq!(rework["held"], true, "{rework}");
    assert_eq!(
        rework["changed_as_work"],
        serde_json::json!(["Makefile"]),
        "{rework}"
    );
});

/// A package.json script's inner tool: `npm test` runs `python3 -m pytest`, so what pytest
/// reads (a `conftest.py` that makes every test pass) defines the evidence too, though no
/// evidence names pytest; a step that names `conftest.py` as its work may change it.
const NPM_RUNBOOK: &str = r#"
id = "npm-script"
title = "Fix the code, not what the script's tool reads"
owner = "tests"

[[steps]]
id = "fix"
title = "Fix calc.py"
instructions = "npm test is the proof"
max_attempts = 5
[[steps.deny.files]]
id = "keep-tests"
reason = "the tests are the proof"
access = "write"
paths = ["tests/**"]
[[steps.evidence]]
command = { run = ["npm", "test", "--offline", "--no-update-notifier"] }
[[steps.evidence]]
files_changed = { paths = ["src/**"] }

[[steps]]
id = "fixture"
title = "Add a fixture"
instructions = "conftest.py is this step's work"
depends_on = ["fix"]
[[steps.evidence]]
files_changed = { paths = ["conftest.py"] }
[[steps.evidence]]
command = { run = ["npm", "test", "--offline", "--no-update-notifier"] }
"#;

const PASS_ALL: &str = "import pytest\n\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n    outcome = yield\n    outcome.get_result().outcome = 'passed'\n";

const NPM_AGENT: &str = r#"S=/run/stepproof/stepproof
complete() { echo "=== $1"; $S step complete $2; echo "$1=$?"; }
printf '# tidied\ndef answer():\n    return 5\n' > src/calc.py
cp conftest.txt conftest.py
complete conftest
rm conftest.py
printf 'def answer():\n    return 4\n' > src/calc.py
complete fixed
printf 'import pytest\n\n\n@pytest.fixture\ndef four():\n    return 4\n' > conftest.py
complete fixture
"#;

fn npm_tools_or_skip() -> bool {
    let npm = std::process::Command::new("sh")
        .args(["-c", "command -v npm && command -v node"])
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .output()
        .is_ok_and(|o| o.status.success());
    let pytest = std::process::Command::new("/usr/bin/python3")
        .args(["-m", "pytest", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !npm || !pytest {
        support::skip_or_fail("npm, node and pytest for /usr/bin/python3 are needed");
        return false;
    }
    true
}

both!(what_a_package_script_runs_is_frozen, |w: &World| {
    if !npm_tools_or_skip() {
        return;
    }
    let ws = &w.workspace;
    let git = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(ws)
        .status();
    assert!(git.is_ok_and(|s| s.success()), "git init");
    // pytest lists the workspace: a link to a secret it may not read is no part of this test.
    let _ = fs::remove_file(ws.join("innocent-link"));
    fs::write(ws.join("runbook.toml"), NPM_RUNBOOK).unwrap();
    fs::write(ws.join("agent.sh"), NPM_AGENT).unwrap();
    fs::write(ws.join("conftest.txt"), PASS_ALL).unwrap();
    fs::write(ws.join(".gitignore"), "__pycache__/\n").unwrap();
    fs::write(
        ws.join("package.json"),
        r#"{"name": "calc", "version": "1.0.0", "private": true, "scripts": {"pretest": "true", "test": "python3 -m pytest -q -p no:cacheprovider tests"}}"#,
    )
    .unwrap();
    for d in ["src", "tests"] {
        fs::create_dir_all(ws.join(d)).unwrap();
    }
    fs::write(ws.join("src/calc.py"), "def answer():\n    return 5\n").unwrap();
    fs::write(
        ws.join("tests/test_calc.py"),
        "import sys\nsys.path.insert(0, 'src')\nfrom calc import answer\n\n\ndef test_answer():\n    assert answer() == 4\n",
    )
    .unwrap();
    support::chown_tree(ws, w.owner);

    let out = w
        .command(&["--runbook", "runbook.toml"], &["/bin/sh", "agent.sh"])
        .output()
        .expect("start stepproof-run");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let all = describe(&out);
    let said = support::attempt_answer(&text, "conftest");
    assert!(
        said.contains("\nconftest=1")
            && said.contains("files_unchanged (what defines the evidence commands)")
            && said.contains("conftest.py (new file)"),
        "a conftest.py that pytest (run by the npm script) reads should fail the step: {said}\n{all}"
    );
    for name in ["fixed", "fixture"] {
        let said = support::attempt_answer(&text, name);
        assert!(
            said.contains(&format!("\n{name}=0")),
            "{name}: {said}\n{all}"
        );
    }
    assert_eq!(out.status.code(), Some(0), "{all}");
    let log = support::audit_log_named(&String::from_utf8_lossy(&out.stderr));
    let records = support::records_in(&log);
    let opened = records
        .iter()
        .find(|r| r["kind"] == "runbook-step-opened" && r["step"] == "fix")
        .unwrap();
    let frozen = opened["definitions_frozen"].as_array().unwrap();
    for f in ["package.json", "**/conftest.py", "pytest.ini"] {
        assert!(frozen.iter().any(|v| v == f), "{f}: {opened}");
    }
    let fixture = records
        .iter()
        .find(|r| {
            r["kind"] == "runbook-evidence" && r["step"] == "fixture" && r["item"] == "definitions"
        })
        .unwrap();
    assert_eq!(fixture["held"], true, "{fixture}");
    assert_eq!(
        fixture["changed_as_work"],
        serde_json::json!(["conftest.py"]),
        "{fixture}"
    );
});
