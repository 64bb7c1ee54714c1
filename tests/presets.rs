//! The network presets against their registries: a fresh project of each preset fetches its
//! dependencies inside the sandbox, through the real allow-list proxy, from a stand-in on the
//! host's loopback (`support/registry.rs`) that answers for the preset's real names
//! (`STEPPROOF_TEST_RESOLVE`, the caller's own test resolver, sends them there; the profile
//! admits the stand-in's address). The default profile's presets (rust, python, go, node) are
//! the ones used. The tools trust the stand-in's test CA through the sandbox's CA bundle, which
//! holds stepproof-run's own `SSL_CERT_FILE` (the caller's, here the test CA) and the run's CA:
//! the default's read-only host (npm's registry) is reached through the proxy's TLS
//! termination, which trusts the test CA onward through the caller's
//! `STEPPROOF_TEST_ONWARD_CA` (tests only). `npm publish` is refused there, and recorded.
//!
//! Each run also checks the caches: the downloads land in StepProof's per-workspace caches
//! (`~/.local/state/stepproof/caches/<id>`), and the host's home — its cargo registry, Go module
//! and build caches, pip's and npm's caches — is unchanged, listing and times.
//!
//! Rust runs as root only: rustup's toolchains live under /root (0700), which the test user
//! cannot reach (the same as `tests/toolchains.rs`). Python, Go and Node are the system's and
//! run as both.

#[path = "support/registry.rs"]
mod registry;
mod support;

use base64::Engine as _;
use registry::{Registry, archive, hex, served, sha256};
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use support::*;

/// A profile on top of `default` (its presets) that admits the stand-in's address and shows the
/// test CA (and `read_only`); `network` is added to `[network]`. The tools' CA variables are
/// StepProof's (its bundle), not set here.
fn profile(w: &World, reg: &Registry, read_only: &[&Path], network: &str) -> String {
    let ca = reg.ca.to_str().unwrap();
    let mut shown = vec![format!("{ca:?}")];
    shown.extend(
        read_only
            .iter()
            .map(|p| format!("{:?}", p.to_str().unwrap())),
    );
    let path = w.base.join("presets-profile.toml");
    fs::write(
        &path,
        format!(
            "extends = \"default\"\n[filesystem]\nread_only = [{}]\n\
             [network]\nallow_addresses = [\"{}\"]\n{network}\n",
            shown.join(", "),
            reg.ip,
        ),
    )
    .unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    path.display().to_string()
}

/// The host caches a build could use, planted in the test home with something in each.
const HOST_CACHES: &[&str] = &[
    ".cargo/registry",
    ".cargo/git",
    "go/pkg/mod",
    ".cache/go-build",
    ".cache/pip",
    ".cache/uv",
    ".npm",
];

/// Every entry under `root` (not following links): its kind, size, mode, owner and times.
fn snapshot(root: &Path, skip: &[PathBuf]) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for entry in fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if skip.contains(&path) {
                continue;
            }
            let m = fs::symlink_metadata(&path).unwrap();
            out.insert(
                path.clone(),
                format!(
                    "{:o} {} {}:{} mtime {}.{} ctime {}.{}",
                    m.mode(),
                    m.len(),
                    m.uid(),
                    m.gid(),
                    m.mtime(),
                    m.mtime_nsec(),
                    m.ctime(),
                    m.ctime_nsec()
                ),
            );
            if m.is_dir() {
                todo.push(path);
            }
        }
    }
    out
}

/// Runs `script` in a fresh project `ws` (files `files`) on `profile` with the stand-in as the
/// registry; checks it printed `want`, that the host home is unchanged outside the workspace
/// and StepProof's state, and returns StepProof's caches directory of the workspace and the
/// run's output.
fn fetches(
    w: &World,
    reg: &Registry,
    profile: &str,
    name: &str,
    files: &[(&str, &str)],
    script: &str,
    want: &str,
) -> (PathBuf, std::process::Output) {
    let ws = w.workspace.join(name);
    for (rel, body) in files {
        let p = ws.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, body).unwrap();
    }
    // A fresh project is a repository of its own (Go stamps builds with its state).
    let git = std::process::Command::new("git")
        .args(["init", "-q"])
        .arg(&ws)
        .status()
        .unwrap();
    assert!(git.success(), "git init {}", ws.display());
    for cache in HOST_CACHES {
        let dir = w.home.join(cache);
        fs::create_dir_all(dir.join("host-entry")).unwrap();
        fs::write(dir.join("host-entry/file"), b"the host's own cache").unwrap();
    }
    // StepProof's state directory, made first (its parents' times are then the host's).
    let state = w.home.join(".local/state/stepproof");
    fs::create_dir_all(&state).unwrap();
    chown_tree(&w.home, w.owner);
    let skip = [w.workspace.clone(), state.clone()];
    let before = snapshot(&w.home, &skip);
    let out = w
        .command(
            &["--profile", profile, "--workspace", ws.to_str().unwrap()],
            &["/bin/sh", "-c", &format!("set -e\n{script}")],
        )
        .env("STEPPROOF_TEST_RESOLVE", reg.resolve())
        // The sandbox's bundle: this CA (as the caller's own trust) and the run's.
        .env("SSL_CERT_FILE", &reg.ca)
        // The proxy's onward trust for read-only hosts (tests only).
        .env("STEPPROOF_TEST_ONWARD_CA", &reg.ca)
        .current_dir(&ws)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.lines().any(|l| l == want),
        "{name}: wanted {want:?}: {}\nthe stand-in saw: {:#?}",
        describe(&out),
        reg.requests()
    );
    let after = snapshot(&w.home, &skip);
    let changed: Vec<_> = before
        .iter()
        .filter(|(p, v)| after.get(*p) != Some(v))
        .map(|(p, _)| p)
        .chain(after.keys().filter(|p| !before.contains_key(*p)))
        .collect();
    assert!(
        changed.is_empty(),
        "{name}: the host's home changed outside the workspace and StepProof's state: {changed:#?}"
    );
    // The workspace's kept caches: one directory, owned by StepProof, the tools' below it.
    let kept: Vec<PathBuf> = fs::read_dir(state.join("caches"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(kept.len(), 1, "{name}: {kept:?}");
    (kept.into_iter().next().unwrap().join("tree"), out)
}

/// Some file named `name` below `root`.
fn find(root: &Path, name: &str) -> Option<PathBuf> {
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for entry in fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if entry.file_name() == name {
                return Some(path);
            }
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                todo.push(path);
            }
        }
    }
    None
}

#[test]
fn rust_fetches_from_the_sparse_index_as_root() {
    let Some(w) = World::new(Who::Root) else {
        return;
    };
    // The toolchain that built these tests (rustup's, under /root), shown read-only inside.
    let cargo = Path::new(env!("CARGO"));
    let Some(toolchain) = cargo
        .parent()
        .and_then(Path::parent)
        .filter(|t| t.join("bin/rustc").exists())
    else {
        skip_or_fail(&format!("no rustc beside {}", cargo.display()));
        return;
    };
    let manifest = "[package]\nname = \"sptiny\"\nversion = \"0.1.0\"\nedition = \"2021\"\n";
    let krate = archive(
        "tgz",
        &[
            ("sptiny-0.1.0/Cargo.toml", manifest.as_bytes()),
            (
                "sptiny-0.1.0/src/lib.rs",
                b"pub fn answer() -> u32 {\n    42\n}\n",
            ),
        ],
    );
    let cksum = hex(&sha256(&krate));
    let index_line = serde_json::json!({
        "name": "sptiny", "vers": "0.1.0", "deps": [], "cksum": cksum,
        "features": {}, "yanked": false,
    });
    let reg = Registry::start(
        &w.base.join("registry"),
        vec![
            served(
                "index.crates.io",
                "/config.json",
                "application/json",
                br#"{"dl":"https://static.crates.io/crates","api":"https://crates.io"}"#.to_vec(),
            ),
            served(
                "index.crates.io",
                "/sp/ti/sptiny",
                "text/plain",
                format!("{index_line}\n").into_bytes(),
            ),
            served(
                "static.crates.io",
                "/crates/sptiny/0.1.0/download",
                "application/gzip",
                krate.clone(),
            ),
            served(
                "static.crates.io",
                "/crates/sptiny/sptiny-0.1.0.crate",
                "application/gzip",
                krate,
            ),
        ],
    );
    let profile = profile(&w, &reg, &[toolchain], "");
    let (caches, _) = fetches(
        &w,
        &reg,
        &profile,
        "rust",
        &[
            (
                "Cargo.toml",
                "[package]\nname = \"demo\"\nversion = \"0.1.0\"\nedition = \"2021\"\n[dependencies]\nsptiny = \"0.1\"\n",
            ),
            (
                "src/main.rs",
                "fn main() {\n    println!(\"answer {}\", sptiny::answer());\n}\n",
            ),
        ],
        &format!(
            "export PATH={}/bin:$PATH\ntest \"$CARGO_HOME\" = /run/stepproof-caches/cargo\ncargo fetch\ncargo build --offline\n./target/debug/demo",
            toolchain.display()
        ),
        "answer 42",
    );
    assert!(reg.served("index.crates.io", "/sp/ti/sptiny"));
    assert!(reg.served("static.crates.io", "/crates/sptiny/0.1.0/download"));
    // Cargo recorded the index's checksum, and kept the crate in StepProof's cache.
    let lock = fs::read_to_string(w.workspace.join("rust/Cargo.lock")).unwrap();
    assert!(lock.contains(&cksum), "{lock}");
    let kept = find(&caches.join("cargo/registry"), "sptiny-0.1.0.crate");
    assert!(
        kept.is_some(),
        "no sptiny-0.1.0.crate in {}",
        caches.display()
    );
}

both!(go_downloads_modules_from_the_module_proxy, |w: &World| {
    if !Path::new("/usr/bin/go").exists() {
        skip_or_fail("Go is not installed (scripts/test installs Debian's golang-go)");
        return;
    }
    let gomod = "module example.com/gotiny\n\ngo 1.19\n";
    let zip = archive(
        "zip",
        &[
            ("example.com/gotiny@v1.0.0/go.mod", gomod.as_bytes()),
            (
                "example.com/gotiny@v1.0.0/tiny.go",
                b"package gotiny\n\nfunc Answer() int { return 42 }\n",
            ),
        ],
    );
    let base = "/example.com/gotiny/@v";
    let reg = Registry::start(
        &w.base.join("registry"),
        vec![
            served(
                "proxy.golang.org",
                &format!("{base}/list"),
                "text/plain",
                b"v1.0.0\n".to_vec(),
            ),
            served(
                "proxy.golang.org",
                &format!("{base}/v1.0.0.info"),
                "application/json",
                br#"{"Version":"v1.0.0","Time":"2024-01-01T00:00:00Z"}"#.to_vec(),
            ),
            served(
                "proxy.golang.org",
                &format!("{base}/v1.0.0.mod"),
                "text/plain",
                gomod.as_bytes().to_vec(),
            ),
            served(
                "proxy.golang.org",
                &format!("{base}/v1.0.0.zip"),
                "application/zip",
                zip,
            ),
        ],
    );
    let profile = profile(w, &reg, &[], "");
    // GOSUMDB=off is this test's choice: the stand-in serves the module proxy, not a checksum
    // database (sum.golang.org's signed tree); go.sum is still written from the download.
    let (caches, _) = fetches(
        w,
        &reg,
        &profile,
        "go",
        &[
            (
                "go.mod",
                "module example.com/demo\n\ngo 1.19\n\nrequire example.com/gotiny v1.0.0\n",
            ),
            (
                "main.go",
                "package main\n\nimport (\n\t\"fmt\"\n\n\t\"example.com/gotiny\"\n)\n\nfunc main() { fmt.Println(\"answer\", gotiny.Answer()) }\n",
            ),
        ],
        "export GOSUMDB=off\ntest \"$(go env GOPROXY)\" = https://proxy.golang.org,direct\ngo mod download -x\ngo mod tidy\ngo build -o demo .\n./demo",
        "answer 42",
    );
    assert!(reg.served("proxy.golang.org", &format!("{base}/v1.0.0.zip")));
    let sum = fs::read_to_string(w.workspace.join("go/go.sum")).unwrap();
    assert!(sum.contains("example.com/gotiny v1.0.0 h1:"), "{sum}");
    assert!(
        find(&caches.join("go-mod"), "v1.0.0.zip").is_some(),
        "no module zip in {}",
        caches.display()
    );
});

/// A pure-Python wheel: `sptiny` 1.0, `answer()` is 42.
fn wheel() -> Vec<u8> {
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sha256(bytes));
    let files: [(&str, &[u8]); 3] = [
        ("sptiny/__init__.py", b"def answer():\n    return 42\n"),
        (
            "sptiny-1.0.dist-info/METADATA",
            b"Metadata-Version: 2.1\nName: sptiny\nVersion: 1.0\n",
        ),
        (
            "sptiny-1.0.dist-info/WHEEL",
            b"Wheel-Version: 1.0\nGenerator: stepproof-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        ),
    ];
    let mut record = String::new();
    for (name, body) in &files {
        record.push_str(&format!("{name},sha256={},{}\n", b64(body), body.len()));
    }
    record.push_str("sptiny-1.0.dist-info/RECORD,,\n");
    let mut all = files.to_vec();
    all.push(("sptiny-1.0.dist-info/RECORD", record.as_bytes()));
    archive("zip", &all)
}

both!(python_installs_from_the_simple_index, |w: &World| {
    let whl = wheel();
    let file = "/packages/00/11/sptiny-1.0-py3-none-any.whl";
    let index = format!(
        "<!DOCTYPE html>\n<html><body>\n<a href=\"https://files.pythonhosted.org{file}#sha256={}\">sptiny-1.0-py3-none-any.whl</a>\n</body></html>\n",
        hex(&sha256(&whl))
    );
    let reg = Registry::start(
        &w.base.join("registry"),
        vec![
            served(
                "pypi.org",
                "/simple/sptiny/",
                "text/html",
                index.into_bytes(),
            ),
            served(
                "files.pythonhosted.org",
                file,
                "application/octet-stream",
                whl,
            ),
        ],
    );
    let profile = profile(w, &reg, &[], "");
    let (caches, _) = fetches(
        w,
        &reg,
        &profile,
        "python",
        &[("requirements.txt", "sptiny==1.0\n")],
        "export PIP_DISABLE_PIP_VERSION_CHECK=1\n\
         /usr/bin/python3 -m pip download --no-deps -d downloads -r requirements.txt\n\
         test -f downloads/sptiny-1.0-py3-none-any.whl\n\
         /usr/bin/python3 -m pip install --no-build-isolation --no-deps --target vendor -r requirements.txt\n\
         PYTHONPATH=vendor /usr/bin/python3 -c 'import sptiny; print(\"answer\", sptiny.answer())'",
        "answer 42",
    );
    assert!(reg.served("pypi.org", "/simple/sptiny/"));
    assert!(reg.served("files.pythonhosted.org", file));
    let pip = fs::read_dir(caches.join("pip")).map_or(0, |d| d.count());
    assert!(pip > 0, "pip's cache in {} is empty", caches.display());
});

both!(
    node_installs_from_the_registry_with_the_node_preset,
    |w: &World| {
        if !Path::new("/usr/bin/npm").exists() {
            skip_or_fail("npm is not installed (scripts/test installs Claude Code with it)");
            return;
        }
        let tgz = archive(
            "tgz",
            &[
                (
                    "package/package.json",
                    br#"{"name":"sptiny","version":"1.0.0","main":"index.js"}"#,
                ),
                ("package/index.js", b"module.exports = () => 42;\n"),
            ],
        );
        let sha1 =
            hex(ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, &tgz).as_ref());
        let sha512 = base64::engine::general_purpose::STANDARD
            .encode(ring::digest::digest(&ring::digest::SHA512, &tgz));
        let tarball = "/sptiny/-/sptiny-1.0.0.tgz";
        let document = serde_json::json!({
            "name": "sptiny",
            "dist-tags": { "latest": "1.0.0" },
            "versions": { "1.0.0": {
                "name": "sptiny", "version": "1.0.0", "main": "index.js",
                "dist": {
                    "tarball": format!("https://registry.npmjs.org{tarball}"),
                    "shasum": sha1,
                    "integrity": format!("sha512-{sha512}"),
                },
            } },
        });
        let reg = Registry::start(
            &w.base.join("registry"),
            vec![
                served(
                    "registry.npmjs.org",
                    "/sptiny",
                    "application/json",
                    document.to_string().into_bytes(),
                ),
                served(
                    "registry.npmjs.org",
                    tarball,
                    "application/octet-stream",
                    tgz,
                ),
            ],
        );
        // The default's presets: node's registry is read-only (GET and HEAD).
        let profile = profile(w, &reg, &[], "");
        let (caches, out) = fetches(
            w,
            &reg,
            &profile,
            "node",
            &[(
                "package.json",
                "{\"name\":\"demo\",\"version\":\"1.0.0\",\"dependencies\":{\"sptiny\":\"^1.0.0\"}}\n",
            )],
            "test \"$NODE_EXTRA_CA_CERTS\" = /run/stepproof-trust/run-ca.pem\n\
         npm install --no-audit --no-fund --no-update-notifier\n\
         node -e 'console.log(\"answer\", require(\"sptiny\")())'\n\
         printf '//registry.npmjs.org/:_authToken=npm_agent_own_token\\n' > /tmp/npmrc\n\
         if NPM_CONFIG_USERCONFIG=/tmp/npmrc npm publish --no-update-notifier > /tmp/publish.out 2>&1; then echo published; exit 1; fi\n\
         cat /tmp/publish.out\n\
         grep -q 'StepProof refused PUT to registry.npmjs.org: read-only host' /tmp/publish.out\n\
         code=$(curl -sS -o /tmp/put.out -w '%{http_code}' -X PUT --data '{}' https://registry.npmjs.org/sptiny)\n\
         test \"$code\" = 403\n\
         grep -q 'read-only in this profile (GET and HEAD): PUT refused' /tmp/put.out\n\
         echo publish refused",
            "answer 42",
        );
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("publish refused"),
            "{}",
            describe(&out)
        );
        // Nothing but GETs reached the stand-in.
        let seen = reg.requests();
        assert!(seen.iter().all(|r| r.starts_with("GET ")), "{seen:#?}");
        // The refusals are in the audit log: method, host, reason.
        let audit = audit_log_of(&out);
        let refused: Vec<&str> = audit
            .lines()
            .filter(|l| {
                l.contains("\"method\":\"PUT\"") && l.contains("\"host\":\"registry.npmjs.org\"")
            })
            .collect();
        assert!(
            refused.len() >= 2
                && refused.iter().all(|l| l.contains("\"allowed\":false")
                    && l.contains("\"status\":403")
                    && l.contains("read-only in this profile")),
            "{refused:#?}"
        );
        assert!(reg.served("registry.npmjs.org", tarball));
        let lock = fs::read_to_string(w.workspace.join("node/package-lock.json")).unwrap();
        assert!(lock.contains(&format!("sha512-{sha512}")), "{lock}");
        assert!(
            caches.join("npm/_cacache").is_dir(),
            "no npm cache in {}",
            caches.display()
        );
    }
);

fn audit_log_of(out: &std::process::Output) -> String {
    fs::read_to_string(support::audit_log_named(&String::from_utf8_lossy(
        &out.stderr,
    )))
    .unwrap()
}
