//! Typical Rust, Node, Python and Go projects build and test offline inside `ci`, whose home
//! shows only what `home_allow` lists and whose build caches start empty (StepProof's own, per
//! run): so the projects here have no registry dependency (`tests/presets.rs` fetches those
//! through the proxy). Rust runs as root only (rustup's toolchains live under /root, which the
//! test user cannot reach; the test shows the toolchain that built it read-only); Node, Python
//! and Go come from the system (Debian's packages; `scripts/test` installs `golang-go`) and run
//! as both.
//!
//! Each script runs under `set -e` one command a line (a failure on the left of `&&` would not
//! stop it) and prints a result the test checks.

mod support;

use std::fs;
use std::path::Path;
use support::*;

fn ci_profile() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("profiles/ci.toml")
        .to_str()
        .unwrap()
        .to_string()
}

fn write_files(root: &Path, files: &[(&str, &str)]) {
    for (rel, body) in files {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, body).unwrap();
    }
}

/// Runs `script` in `ws` (a directory in the workspace) on `profile`, and checks it printed the
/// line `want` and then `done`.
fn builds(w: &World, profile: &str, ws: &Path, what: &str, script: &str, want: &str) {
    chown_tree(&w.home, w.owner);
    let out = w
        .command(
            &["--profile", profile, "--workspace", ws.to_str().unwrap()],
            &["/bin/sh", "-c", &format!("set -e\n{script}\necho done")],
        )
        .current_dir(ws)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        out.status.success() && lines.contains(&want) && lines.last() == Some(&"done"),
        "{what} does not build offline on ci (wanted {want:?}): {}",
        describe(&out)
    );
}

#[test]
fn rust_builds_offline_on_ci_as_root() {
    let Some(w) = World::new(Who::Root) else {
        return;
    };
    // The toolchain that built these tests (rustup's, under /root), shown read-only inside:
    // the test home has no ~/.rustup of its own.
    let cargo = Path::new(env!("CARGO"));
    let Some(toolchain) = cargo
        .parent()
        .and_then(Path::parent)
        .filter(|t| t.join("bin/rustc").exists())
    else {
        skip_or_fail(&format!("no rustc beside {}", cargo.display()));
        return;
    };
    let ws = w.workspace.join("rust");
    write_files(
        &ws,
        &[
            (
                "Cargo.toml",
                "[package]\nname = \"demo\"\nversion = \"0.1.0\"\nedition = \"2021\"\n[dependencies]\nhelper = { path = \"helper\" }\n",
            ),
            (
                "src/main.rs",
                "fn main() {\n    println!(\"answer {}\", helper::answer());\n}\n#[test]\nfn works() {\n    assert_eq!(helper::answer(), 42);\n}\n",
            ),
            (
                "helper/Cargo.toml",
                "[package]\nname = \"helper\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
            ),
            ("helper/src/lib.rs", "pub fn answer() -> u32 {\n    42\n}\n"),
        ],
    );
    let profile = w.base.join("ci-rust.toml");
    fs::write(
        &profile,
        format!(
            "extends = \"ci\"\n[filesystem]\nread_only = [{:?}]\n",
            toolchain.to_str().unwrap()
        ),
    )
    .unwrap();
    // CARGO_HOME is the run's own, empty cache: a registry dependency could not resolve
    // offline, a path dependency does.
    builds(
        &w,
        profile.to_str().unwrap(),
        &ws,
        "a Rust project with a path dependency",
        &format!(
            "export PATH={}/bin:$PATH\ntest \"$CARGO_HOME\" = /run/stepproof-caches/cargo\ncargo test --offline -q\ncargo build --offline -q\n./target/debug/demo",
            toolchain.display()
        ),
        "answer 42",
    );
}

both!(node_tests_run_offline_on_ci, |w: &World| {
    let ws = w.workspace.join("node");
    write_files(
        &ws,
        &[
            (
                "package.json",
                "{\"name\":\"demo\",\"version\":\"1.0.0\",\"scripts\":{\"test\":\"node test.js\"}}\n",
            ),
            ("index.js", "module.exports = (a, b) => a + b;\n"),
            (
                "test.js",
                "const add = require('./index'); if (add(1, 2) !== 3) process.exit(1); console.log('ok');\n",
            ),
        ],
    );
    builds(
        w,
        &ci_profile(),
        &ws,
        "a Node project",
        "npm test --offline --no-update-notifier",
        "ok",
    );
});

both!(python_tests_run_offline_on_ci, |w: &World| {
    let ws = w.workspace.join("python");
    write_files(
        &ws,
        &[
            ("demo/__init__.py", "def add(a, b):\n    return a + b\n"),
            ("tests/__init__.py", ""),
            (
                "tests/test_demo.py",
                "import unittest\nfrom demo import add\nclass T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(1, 2), 3)\n",
            ),
        ],
    );
    builds(
        w,
        &ci_profile(),
        &ws,
        "a Python project",
        "/usr/bin/python3 -m unittest discover -s tests -t .\n/usr/bin/python3 -m compileall -q demo\ntest -f demo/__pycache__/__init__.cpython-*.pyc && echo compiled",
        "compiled",
    );
});

both!(go_builds_offline_on_ci, |w: &World| {
    if !Path::new("/usr/bin/go").exists() {
        skip_or_fail("Go is not installed (scripts/test installs Debian's golang-go)");
        return;
    }
    let ws = w.workspace.join("go");
    write_files(
        &ws,
        &[
            ("go.mod", "module example.com/demo\n\ngo 1.19\n"),
            (
                "main.go",
                "package main\n\nimport \"fmt\"\n\nfunc add(a, b int) int { return a + b }\n\nfunc main() { fmt.Println(add(1, 2)) }\n",
            ),
            (
                "main_test.go",
                "package main\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {\n\tif add(1, 2) != 3 {\n\t\tt.Fatal(\"add\")\n\t}\n}\n",
            ),
        ],
    );
    // The build cache lands in StepProof's caches (GOCACHE), never the home's.
    builds(
        w,
        &ci_profile(),
        &ws,
        "a Go module",
        "export GOPROXY=off GOFLAGS=-mod=mod\ngo test ./...\ngo build -o demo .\n./demo\ntest \"$(go env GOCACHE)\" = /run/stepproof-caches/go-build\ntest -n \"$(ls /run/stepproof-caches/go-build)\"\ntest ! -e \"$HOME/.cache/go-build\"",
        "3",
    );
    assert!(!w.home.join(".cache/go-build").exists());
});
