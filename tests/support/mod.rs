//! Shared helpers for the integration tests: the real binaries, a planted home and workspace,
//! runs as root and as the dedicated unprivileged test user, and the skip/fail rule.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

pub const RUN: &str = env!("CARGO_BIN_EXE_stepproof-run");
pub const STEPPROOF: &str = env!("CARGO_BIN_EXE_stepproof");

/// The dedicated unprivileged user (not 65534, the overflow id: ownership checks must mean
/// something). `.ci/run` creates it; the tests create it too when run as root by hand.
pub const TEST_USER: &str = "stepproof-test";
pub const TEST_UID: u32 = 4711;

#[path = "skip.rs"]
mod skip;
#[allow(unused_imports)] // not every test binary uses both
pub use skip::{in_ci, skip_or_fail};

pub fn is_root() -> bool {
    nix::unistd::getuid().is_root()
}

/// True when this machine can build the sandbox (user namespaces and friends); otherwise
/// skips (or fails in CI).
pub fn sandbox_available() -> bool {
    let out = Command::new(STEPPROOF)
        .arg("doctor")
        .output()
        .expect("run stepproof doctor");
    if out.status.success() {
        return true;
    }
    skip_or_fail(&format!(
        "the kernel cannot build the sandbox here: {}",
        String::from_utf8_lossy(&out.stdout)
    ));
    false
}

/// Makes sure the test user exists (as root); returns its uid and gid.
pub fn ensure_test_user() -> Option<(u32, u32)> {
    if !is_root() {
        skip_or_fail("running as the unprivileged test user needs the tests to run as root");
        return None;
    }
    if nix::unistd::User::from_name(TEST_USER)
        .ok()
        .flatten()
        .is_none()
    {
        let status = Command::new("useradd")
            .args([
                "--create-home",
                "--uid",
                &TEST_UID.to_string(),
                "--shell",
                "/bin/sh",
                "--user-group",
                TEST_USER,
            ])
            .status();
        if !status.is_ok_and(|s| s.success())
            && nix::unistd::User::from_name(TEST_USER)
                .ok()
                .flatten()
                .is_none()
        {
            skip_or_fail("could not create the test user with useradd");
            return None;
        }
    }
    let user = nix::unistd::User::from_name(TEST_USER).ok().flatten()?;
    Some((user.uid.as_raw(), user.gid.as_raw()))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Who {
    Root,
    User,
}

/// A copy of `stepproof-run` the test user can execute whatever the permissions of the
/// checkout's parent directories (CI clones wherever it likes). One copy per build, shared by
/// every test binary (a copy per test process filled the disk: the binaries are large), made
/// under a temporary name and renamed into place; copies of older builds are removed.
pub fn run_binary_for_user() -> &'static Path {
    static COPY: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    COPY.get_or_init(|| {
        use std::os::unix::fs::MetadataExt;
        // The hook is installed next to the launcher (profiles with a hook need it there).
        let hook = Path::new(RUN).with_file_name("stepproof-hook");
        let sources = [
            (Path::new(RUN), "stepproof-run"),
            (hook.as_path(), "stepproof-hook"),
            (Path::new(STEPPROOF), "stepproof"),
        ];
        let key = sources
            .iter()
            .map(|(from, _)| {
                let meta = fs::metadata(from)
                    .unwrap_or_else(|e| panic!("{}: {e} (build the workspace)", from.display()));
                format!("{:x}{:x}", meta.len(), meta.mtime_nsec() ^ meta.mtime())
            })
            .collect::<Vec<_>>()
            .join("-");
        let tmp = std::env::temp_dir();
        let dir = tmp.join(format!("stepproof-bin-{key}"));
        if !sources.iter().all(|(_, name)| dir.join(name).is_file()) {
            let staging = tmp.join(format!(".stepproof-bin-{key}.{}", std::process::id()));
            let _ = fs::remove_dir_all(&staging);
            fs::create_dir_all(&staging).unwrap();
            fs::set_permissions(&staging, fs::Permissions::from_mode(0o755)).unwrap();
            for (from, name) in sources {
                fs::copy(from, staging.join(name))
                    .unwrap_or_else(|e| panic!("copying {}: {e}", from.display()));
                fs::set_permissions(staging.join(name), fs::Permissions::from_mode(0o755)).unwrap();
            }
            // Another test process may have won the race: its copy is as good.
            if fs::rename(&staging, &dir).is_err() {
                let _ = fs::remove_dir_all(&staging);
            }
            // Copies of earlier builds, unused for a while.
            for entry in fs::read_dir(&tmp).into_iter().flatten().flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                let old = entry
                    .metadata()
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age > std::time::Duration::from_secs(600));
                if name.starts_with("stepproof-bin-") && entry.path() != dir && old {
                    let _ = fs::remove_dir_all(entry.path());
                }
            }
        }
        dir.join("stepproof-run")
    })
}

/// A planted home (with secrets) and a workspace inside it, owned by whoever runs the sandbox.
pub struct World {
    pub who: Who,
    pub base: PathBuf,
    pub home: PathBuf,
    pub workspace: PathBuf,
    pub owner: (u32, u32),
}

pub const SECRET: &str = "TOP-SECRET-7c1d";

impl World {
    pub fn new(who: Who) -> Option<World> {
        if !sandbox_available() {
            return None;
        }
        let owner = match who {
            Who::Root => {
                if !is_root() {
                    skip_or_fail("root runs need the tests to run as root");
                    return None;
                }
                (0, 0)
            }
            Who::User => ensure_test_user()?,
        };
        let base = tempfile::Builder::new()
            .prefix("stepproof-test-")
            .tempdir()
            .unwrap()
            .keep();
        fs::set_permissions(&base, fs::Permissions::from_mode(0o755)).unwrap();
        let home = base.join("home");
        let workspace = home.join("src/project");
        fs::create_dir_all(&workspace).unwrap();
        fs::create_dir_all(home.join("src/other-project")).unwrap();
        fs::write(home.join("src/other-project/notes.txt"), SECRET).unwrap();
        fs::write(home.join(".bashrc"), "# home rc\n").unwrap();
        for (path, contents) in [
            (".ssh/id_rsa", SECRET),
            (".aws/credentials", SECRET),
            (".netrc", SECRET),
            (".config/gh/hosts.yml", SECRET),
            (".docker/config.json", SECRET),
            (".git-credentials", SECRET),
            (".claude.json", SECRET),
        ] {
            let p = home.join(path);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(&p, contents).unwrap();
        }
        fs::create_dir_all(workspace.join(".git/hooks")).unwrap();
        fs::write(workspace.join(".git/config"), "[core]\n\tbare = false\n").unwrap();
        fs::write(
            workspace.join(".git/hooks/pre-commit"),
            "#!/bin/sh\nexit 0\n",
        )
        .unwrap();
        fs::create_dir_all(workspace.join(".vscode")).unwrap();
        fs::write(workspace.join(".vscode/tasks.json"), "{}").unwrap();
        fs::write(workspace.join("README"), "project\n").unwrap();
        std::os::unix::fs::symlink(home.join(".ssh/id_rsa"), workspace.join("innocent-link"))
            .unwrap();
        chown_tree(&home, owner);
        fs::set_permissions(&home, fs::Permissions::from_mode(0o700)).unwrap();
        Some(World {
            who,
            base,
            home,
            workspace,
            owner,
        })
    }

    /// `program` started as whoever this world runs as (the test user through setpriv).
    pub fn as_owner(&self, program: &Path) -> Command {
        match self.who {
            Who::Root => Command::new(program),
            Who::User => {
                let mut c = Command::new("setpriv");
                c.arg(format!("--reuid={}", self.owner.0))
                    .arg(format!("--regid={}", self.owner.1))
                    .arg("--clear-groups")
                    .arg("--")
                    .arg(program);
                c
            }
        }
    }

    /// From the workspace, with only HOME (the planted one), PATH and LANG, and no stdin.
    pub fn clean_env<'c>(&self, cmd: &'c mut Command) -> &'c mut Command {
        cmd.current_dir(&self.workspace)
            .env_clear()
            .env("HOME", &self.home)
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("LANG", "C.UTF-8")
            .envs(field_ledger())
            .stdin(Stdio::null())
    }

    /// The `stepproof-run` this world uses (a copy the test user can execute).
    pub fn run_binary(&self) -> &'static Path {
        match self.who {
            Who::Root => Path::new(RUN),
            Who::User => run_binary_for_user(),
        }
    }

    /// `stepproof-run [extra…] -- args…` from the workspace, as `who`, with HOME = the planted home.
    pub fn command<S: AsRef<OsStr>>(&self, extra: &[&str], args: &[S]) -> Command {
        let mut cmd = self.as_owner(self.run_binary());
        cmd.args(extra).arg("--").args(args);
        self.clean_env(&mut cmd);
        cmd
    }

    pub fn run<S: AsRef<OsStr>>(&self, args: &[S]) -> Output {
        self.command(&[], args)
            .output()
            .expect("start stepproof-run")
    }

    pub fn sh(&self, script: &str) -> Output {
        self.run(&["/bin/sh", "-c", script])
    }

    /// Runs Python probes inside: `checks` is a list of (name, expression); each line of the
    /// result says `name OK value` or `name ERR ERRNO_NAME`.
    pub fn probe(&self, checks: &[(&str, &str)]) -> Probes {
        let mut code = String::from(
            "import os, errno, socket\ndef t(n, f):\n    try:\n        r = f()\n        print(n, 'OK', repr(r))\n    except OSError as e:\n        print(n, 'ERR', errno.errorcode.get(e.errno, e.errno))\n",
        );
        for (name, expr) in checks {
            code.push_str(&format!("t({name:?}, lambda: {expr})\n"));
        }
        let out = self.run(&["/usr/bin/python3", "-c", &code]);
        assert!(out.status.success(), "probe failed: {}", describe(&out));
        Probes(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

impl Drop for World {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.base);
    }
}

pub struct Probes(pub String);

impl Probes {
    pub fn get(&self, name: &str) -> &str {
        self.0
            .lines()
            .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(' ')))
            .unwrap_or_else(|| panic!("no probe {name} in:\n{}", self.0))
    }

    #[track_caller]
    pub fn expect_err(&self, name: &str, errno: &str) {
        let got = self.get(name);
        assert_eq!(
            got,
            format!("ERR {errno}"),
            "probe {name}: wanted {errno}, got {got}\n{}",
            self.0
        );
    }

    #[track_caller]
    pub fn expect_ok(&self, name: &str) -> &str {
        let got = self.get(name);
        assert!(
            got.starts_with("OK"),
            "probe {name}: wanted success, got {got}\n{}",
            self.0
        );
        got
    }
}

/// Whether any process on the host has exactly this command line (`["sleep", "123"]`).
pub fn process_running(argv: &[&str]) -> bool {
    let wanted: Vec<u8> = argv.iter().flat_map(|a| a.bytes().chain([0])).collect();
    fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .any(|e| fs::read(e.path().join("cmdline")).is_ok_and(|c| c == wanted))
}

pub fn chown_tree(path: &Path, (uid, gid): (u32, u32)) {
    let _ = std::os::unix::fs::lchown(path, Some(uid), Some(gid));
    if path.is_dir() && !path.is_symlink() {
        for entry in fs::read_dir(path).unwrap().flatten() {
            chown_tree(&entry.path(), (uid, gid));
        }
    }
}

/// What a script-driven runbook agent printed for its attempt `name`: from its `=== name` line
/// to the line with its exit (`name=CODE`).
pub fn attempt_answer<'t>(text: &'t str, name: &str) -> &'t str {
    let start = text
        .find(&format!("=== {name}\n"))
        .unwrap_or_else(|| panic!("no attempt {name} in:\n{text}"));
    let rest = &text[start..];
    let end = rest
        .find(&format!("\n{name}="))
        .map_or(rest.len(), |e| e + name.len() + 4);
    &rest[..end.min(rest.len())]
}

pub fn describe(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Declares a test twice: once as root, once as the dedicated unprivileged user.
#[macro_export]
macro_rules! both {
    ($name:ident, $body:expr) => {
        mod $name {
            use super::*;
            #[test]
            fn as_root() {
                if let Some(w) = World::new(Who::Root) {
                    ($body)(&w)
                }
            }
            #[test]
            fn as_user() {
                if let Some(w) = World::new(Who::User) {
                    ($body)(&w)
                }
            }
        }
    };
}

/// A certificate authority of its own (named `common_name`), written to `ca_file` (0644) when
/// one is given, and a server configuration for `hosts` signed by it, serving the chain with the
/// CA: what the HTTPS stand-ins answer with.
pub fn server_tls(
    common_name: &str,
    hosts: Vec<String>,
    ca_file: Option<&Path>,
) -> std::sync::Arc<rustls::ServerConfig> {
    let (ca_cert, server) = ca_and_server(Some(common_name), hosts);
    if let Some(path) = ca_file {
        fs::write(path, ca_cert.pem()).unwrap();
        fs::set_permissions(path, fs::Permissions::from_mode(0o644)).unwrap();
    }
    server
}

/// A CA of its own (named `common_name` when one is given) and a server configuration for
/// `hosts` signed by it, serving the chain with the CA; the CA's certificate is returned for the
/// caller to trust or to write out.
pub fn ca_and_server(
    common_name: Option<&str>,
    hosts: Vec<String>,
) -> (rcgen::Certificate, std::sync::Arc<rustls::ServerConfig>) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    if let Some(name) = common_name {
        ca_params.distinguished_name.push(DnType::CommonName, name);
    }
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(hosts)
        .unwrap()
        .signed_by(&leaf_key, &issuer)
        .unwrap();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into());
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let server = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![leaf.der().clone(), ca_cert.der().clone()], key)
        .unwrap();
    (ca_cert, std::sync::Arc::new(server))
}

/// The line of a run's last words on standard error that names its audit log
/// (`stepproof-run: audit log PATH head HASH`, or `… INCOMPLETE: … head HASH (incomplete)`).
fn audit_log_line(stderr: &str) -> &str {
    stderr
        .lines()
        .rfind(|l| l.starts_with("stepproof-run: audit log "))
        .unwrap_or_else(|| panic!("no audit log named in:\n{stderr}"))
}

/// Every record of an audit log, parsed.
pub fn records_in(log: &Path) -> Vec<serde_json::Value> {
    fs::read_to_string(log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The audit log a run names in its last words on standard error.
pub fn audit_log_named(stderr: &str) -> PathBuf {
    PathBuf::from(
        audit_log_line(stderr)
            .trim_start_matches("stepproof-run: audit log ")
            .split(' ')
            .next()
            .unwrap(),
    )
}

/// The head hash of the audit log a run names in its last words on standard error.
pub fn audit_head_named(stderr: &str) -> String {
    let line = audit_log_line(stderr);
    line.rsplit_once(" head ")
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no head in: {line}"))
        .to_string()
}

/// The suite's ledger of record fields the export table does not declare (`scripts/test` sets
/// it; debug builds of the supervisor append to it): passed through every cleaned environment.
pub fn field_ledger() -> Vec<(&'static str, String)> {
    std::env::var("STEPPROOF_FIELD_LEDGER")
        .map(|v| vec![("STEPPROOF_FIELD_LEDGER", v)])
        .unwrap_or_default()
}

/// The host's everyday git in `dirs` (those that exist), as the world's owner, with every
/// ownership check off (the most trusting host): status, add, commit, checkout. A test asserts
/// on what it left (a payload's marker file), not on its output.
pub fn host_git(w: &World, dirs: &[PathBuf]) -> std::process::Output {
    const GIT: &str =
        "git -c user.name=t -c user.email=t@t -c protocol.file.allow=always -c safe.directory=*";
    let mut script = String::from("set +e\n");
    for dir in dirs.iter().filter(|d| d.is_dir()) {
        script.push_str(&format!(
            "cd {d} && for c in status 'add -A' 'commit -q -m host' 'checkout -q -b host-branch'; do \
             {GIT} -c safe.directory='*' $c >/dev/null 2>&1; done\n",
            d = dir.display()
        ));
    }
    let mut cmd = w.as_owner(Path::new("/bin/sh"));
    cmd.args(["-c", &script])
        .env_clear()
        .env("HOME", &w.home)
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .envs(field_ledger());
    cmd.output().unwrap()
}
