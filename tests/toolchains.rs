//! Typical Rust, Node, Python and Go projects build and test offline inside `ci`, whose home
//! shows only what `home_allow` lists. Rust runs as root only (rustup's toolchains live under
//! /root, which the test user cannot reach); Node, Python and Go come from the system
//! (Debian's packages; `scripts/test` installs `golang-go`) and run as both.

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

/// Runs `script` in `ws` (a directory in the workspace) on `ci`, and checks it printed `done`.
fn builds(w: &World, ws: &Path, what: &str, script: &str) {
    chown_tree(&w.home, w.owner);
    let profile = ci_profile();
    let out = w
        .command(
            &["--profile", &profile, "--workspace", ws.to_str().unwrap()],
            &["/bin/sh", "-c", &format!("set -e\n{script}\necho done")],
        )
        .current_dir(ws)
        .output()
        .unwrap();
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("done"),
        "{what} does not build offline on ci: {}",
        describe(&out)
    );
}

#[test]
fn rust_builds_offline_on_ci_as_root() {
    let Some(w) = World::new(Who::Root) else {
        return;
    };
    let cargo_home = Path::new("/root/.cargo");
    if !cargo_home.join("bin/cargo").exists() {
        skip_or_fail("rustup's cargo is not in /root/.cargo/bin");
        return;
    }
    let ws = w.workspace.join("rust");
    write_files(
        &ws,
        &[
            (
                "Cargo.toml",
                "[package]\nname = \"demo\"\nversion = \"0.1.0\"\nedition = \"2021\"\n[dependencies]\nlibc = \"0.2\"\n",
            ),
            (
                "src/main.rs",
                "fn main() { println!(\"{}\", unsafe { libc::getpid() } > 0); }\n#[test]\nfn works() { assert!(true); }\n",
            ),
        ],
    );
    // The lock file of StepProof itself names a libc the registry cache holds (it was built).
    fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.lock"),
        ws.join("Cargo.lock"),
    )
    .unwrap();
    builds(
        &w,
        &ws,
        "a Rust project with a registry dependency",
        "PATH=$HOME/.cargo/bin:$PATH cargo test --offline -q && ./target/debug/demo",
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
        &ws,
        "a Node project",
        "npm test --offline --no-update-notifier",
    );
});

both!(python_tests_run_offline_on_ci, |w: &World| {
    let ws = w.workspace.join("python");
    write_files(
        &ws,
        &[
            ("demo/__init__.py", "def add(a, b):\n    return a + b\n"),
            (
                "tests/test_demo.py",
                "import unittest\nfrom demo import add\nclass T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(1, 2), 3)\n",
            ),
        ],
    );
    builds(
        w,
        &ws,
        "a Python project",
        "/usr/bin/python3 -m unittest discover -s tests -t . && /usr/bin/python3 -m compileall -q demo",
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
        &ws,
        "a Go module",
        "GOPROXY=off GOFLAGS=-mod=mod go test ./... && go build -o demo . && ./demo && test \"$(go env GOCACHE)\" = /run/stepproof-caches/go-build && test -n \"$(ls /run/stepproof-caches/go-build)\" && test ! -e \"$HOME/.cache/go-build\"",
    );
    assert!(!w.home.join(".cache/go-build").exists());
});
