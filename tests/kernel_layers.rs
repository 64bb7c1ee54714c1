//! Kernel layers, each tested on its own on the host, with a control that shows that layer is
//! the one acting: the same probe in a helper process without the layer (as root, so it
//! usually succeeds or fails differently) and with it (it must fail with the layer's errno).
//!
//! `harness = false` (see Cargo.toml): this binary is also the probe helper, re-executed with
//! `STEPPROOF_KERNEL_HELPER` set (see `support/kernel.rs`). Run a subset with a substring:
//! `cargo test --test kernel_layers -- landlock`.

#[path = "support/kernel.rs"]
mod kernel;

use std::os::fd::OwnedFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{SocketAddr, UnixListener};
use std::path::Path;
use std::process::{Command, Stdio};

use kernel::{ExecAs, HelperSpec, Sibling, probe_with, run_helper, skip_or_fail};
use stepproof::cli::probes::{Needs, all_probes, control_probes, seccomp_refused, typical_plan};
use stepproof::sandbox::landlock::{
    Assurance, FsAccess, LandlockPlan, LandlockRule, TcpPolicy, grant_except, kernel_abi, list_dir,
};
use stepproof::sandbox::rlimits::Limits;

type Test = (&'static str, fn());

/// Makes this binary call `skip_or_fail` and exit (see `skip_fails_under_ci`).
const SKIP_CHECK_ENV: &str = "STEPPROOF_KERNEL_SKIP_CHECK";

const TESTS: &[Test] = &[
    (
        "seccomp_each_probe_fails_only_under_the_filter",
        seccomp_each_probe_fails_only_under_the_filter,
    ),
    (
        "seccomp_leaves_ordinary_work_alone",
        seccomp_leaves_ordinary_work_alone,
    ),
    ("landlock_filesystem_controls", landlock_filesystem_controls),
    (
        "landlock_scopes_signals_and_abstract_sockets",
        landlock_scopes_signals_and_abstract_sockets,
    ),
    ("landlock_tcp_port_rules", landlock_tcp_port_rules),
    (
        "landlock_degraded_grant_except_hides_a_secret",
        landlock_degraded_grant_except_hides_a_secret,
    ),
    (
        "rlimits_applied_and_read_back",
        rlimits_applied_and_read_back,
    ),
    (
        "setuid_binaries_gain_nothing_under_no_new_privs",
        setuid_binaries_gain_nothing_under_no_new_privs,
    ),
    ("all_layers_stop_every_probe", all_layers_stop_every_probe),
    ("skip_fails_under_ci", skip_fails_under_ci),
];

fn main() {
    if let Ok(spec) = std::env::var(kernel::HELPER_ENV) {
        kernel::helper_main(&spec);
    }
    if let Ok(reason) = std::env::var(SKIP_CHECK_ENV) {
        skip_or_fail(&reason);
        return;
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list") {
        for (name, _) in TESTS {
            println!("{name}: test");
        }
        return;
    }
    let filter = args.iter().find(|a| !a.starts_with('-'));
    let selected: Vec<&Test> = TESTS
        .iter()
        .filter(|(name, _)| filter.is_none_or(|f| name.contains(f.as_str())))
        .collect();
    println!("\nrunning {} tests", selected.len());
    let mut failed = Vec::new();
    for (name, test) in &selected {
        let result = std::panic::catch_unwind(test);
        println!(
            "test {name} ... {}",
            if result.is_ok() { "ok" } else { "FAILED" }
        );
        if result.is_err() {
            failed.push(*name);
        }
    }
    println!(
        "\ntest result: {}. {} passed; {} failed",
        if failed.is_empty() { "ok" } else { "FAILED" },
        selected.len() - failed.len(),
        failed.len()
    );
    if !failed.is_empty() {
        println!("failures: {failed:?}");
        std::process::exit(101);
    }
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// A pseudo-terminal: the slave becomes the helper's stdin (for the TIOCSTI probes); the master
/// is kept open by the caller.
fn pty() -> Option<(OwnedFd, OwnedFd)> {
    match nix::pty::openpty(None, None) {
        Ok(p) => Some((p.master, p.slave)),
        Err(e) => {
            skip_or_fail(&format!("no pseudo-terminal for the TIOCSTI probes: {e}"));
            None
        }
    }
}

fn landlock_available(min: i32) -> bool {
    let abi = kernel_abi().unwrap_or(0);
    if abi < min {
        skip_or_fail(&format!(
            "Landlock ABI {min} needed, kernel has {abi} (Landlock ABI 6 needs Linux 6.12)"
        ));
        return false;
    }
    true
}

fn seccomp_each_probe_fails_only_under_the_filter() {
    if !is_root() {
        skip_or_fail("the seccomp controls run as root (so the control succeeds)");
        return;
    }
    let Some((_master, slave)) = pty() else {
        return;
    };
    let sibling = Sibling::spawn();
    let sib = sibling.pid();
    // Every probe seccomp refuses by itself, from the one table in `probes`.
    let cases: Vec<(String, i32)> = seccomp_refused()
        .map(|p| {
            let spec = match p.needs {
                Needs::Sibling => format!("{}:{sib}", p.name),
                _ => p.name.to_string(),
            };
            (spec, p.seccomp_errno.unwrap_or_default())
        })
        .collect();
    let bare = HelperSpec::default();
    let filtered = HelperSpec {
        seccomp: true,
        ..HelperSpec::default()
    };
    let mut problems = Vec::new();
    for (probe, expected) in &cases {
        let tty = || Some(slave.try_clone().expect("dup pty slave"));
        let without = probe_with(&bare, probe, tty());
        let with = probe_with(&filtered, probe, tty());
        println!(
            "  {probe:<22} without filter: {:<60} with: {}",
            without.detail, with.detail
        );
        if !without.attempted() {
            problems.push(format!(
                "{probe}: control not attempted: {}",
                without.detail
            ));
        } else if !without.escaped && without.errno == Some(*expected) {
            problems.push(format!(
                "{probe}: the host already answers errno {expected} without the filter, so this \
                 probe cannot show the filter acting: {}",
                without.detail
            ));
        }
        if with.escaped || with.errno != Some(*expected) {
            problems.push(format!(
                "{probe}: under the filter expected errno {expected}, got {}",
                with.detail
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

fn seccomp_leaves_ordinary_work_alone() {
    let Some((_master, slave)) = pty() else {
        return;
    };
    let filtered = HelperSpec {
        seccomp: true,
        ..HelperSpec::default()
    };
    for probe in control_probes() {
        let out = probe_with(&filtered, probe, Some(slave.try_clone().unwrap()));
        assert!(
            out.escaped,
            "{probe} must work under the filter: {}",
            out.detail
        );
    }
    // A shell pipeline, a fork-heavy script and git, under the filter.
    let script = "echo hello | tr a-z A-Z; for i in 1 2 3; do (true); done; \
                  git --version >/dev/null 2>&1 || true; \
                  (command -v python3 >/dev/null && python3 -c 'import socket,os; os.getpid()') || true; \
                  echo done";
    let out = run_raw(&HelperSpec {
        seccomp: true,
        exec_as: Some(ExecAs {
            uid: nix::unistd::geteuid().as_raw(),
            no_new_privs: false,
            argv: vec!["sh".into(), "-c".into(), script.into()],
        }),
        ..HelperSpec::default()
    });
    assert_eq!(out, "HELLO\ndone\n");
}

/// Runs the helper and returns its raw stdout (for `exec_as`, whose command replaces it).
fn run_raw(spec: &HelperSpec) -> String {
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(exe)
        .env(kernel::HELPER_ENV, serde_json::to_string(spec).unwrap())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn system_rules() -> Vec<LandlockRule> {
    ["/usr", "/bin", "/lib", "/lib64", "/etc", "/proc"]
        .into_iter()
        .map(|p| LandlockRule {
            path: p.into(),
            access: FsAccess::ReadExecute,
        })
        .collect()
}

fn landlock_filesystem_controls() {
    if !landlock_available(6) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let ro = tempfile::tempdir().unwrap();
    let hidden = tempfile::tempdir().unwrap();
    std::fs::write(ro.path().join("readme"), "visible").unwrap();
    std::fs::write(hidden.path().join("secret"), "s3cret").unwrap();
    let mut rules = system_rules();
    rules.push(LandlockRule {
        path: ro.path().into(),
        access: FsAccess::ReadExecute,
    });
    rules.push(LandlockRule {
        path: ws.path().into(),
        access: FsAccess::ReadWrite,
    });
    rules.push(LandlockRule {
        path: "/nonexistent/stepproof".into(),
        access: FsAccess::ReadWrite,
    });
    let plan = LandlockPlan {
        rules,
        scope_signals_and_abstract_unix: true,
        tcp: None,
        assurance: Assurance::Strict,
    };
    let p = |d: &Path, f: &str| d.join(f).display().to_string();
    let me = std::process::id();
    // (probe, works without Landlock, under Landlock: None = works, Some(errno))
    let cases: Vec<(String, Option<i32>)> = vec![
        (format!("write:{}", p(ws.path(), "new")), None),
        (format!("read:{}", p(ro.path(), "readme")), None),
        (format!("write:{}", p(ro.path(), "x")), Some(libc::EACCES)),
        (
            format!("read:{}", p(hidden.path(), "secret")),
            Some(libc::EACCES),
        ),
        (
            format!("write:{}", p(hidden.path(), "x")),
            Some(libc::EACCES),
        ),
        (format!("proc_mem:{me}"), Some(libc::EACCES)),
        ("write:/proc/self/comm".into(), Some(libc::EACCES)),
    ];
    let bare = HelperSpec::default();
    let locked = HelperSpec {
        landlock: Some(plan.clone()),
        ..HelperSpec::default()
    };
    for (probe, expected) in &cases {
        let without = probe_with(&bare, probe, None);
        assert!(
            without.escaped,
            "control {probe} must work: {}",
            without.detail
        );
        let with = probe_with(&locked, probe, None);
        match expected {
            None => assert!(
                with.escaped,
                "{probe} must work under Landlock: {}",
                with.detail
            ),
            Some(e) => assert!(
                !with.escaped && with.errno == Some(*e),
                "{probe} under Landlock: expected errno {e}, got {}",
                with.detail
            ),
        }
        println!("  {probe:<50} without: ok  with: {}", with.detail);
    }
    // The report says what was enforced and what was skipped.
    let out = run_helper(&locked, None);
    let report = out.landlock.expect("report");
    assert!(report.enforced && report.abi >= 6);
    for right in ["refer", "truncate", "ioctl_dev", "write_file"] {
        assert!(
            report.handled_rights.contains(&right.to_string()),
            "{right}"
        );
    }
    assert_eq!(report.scopes, ["signal", "abstract_unix_socket"]);
    assert!(
        report
            .skipped
            .iter()
            .any(|s| s.contains("/nonexistent/stepproof"))
    );
}

fn landlock_scopes_signals_and_abstract_sockets() {
    if !landlock_available(6) {
        return;
    }
    let sibling = Sibling::spawn();
    let name = format!("stepproof-test-{}", std::process::id());
    let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let listener = UnixListener::bind_addr(&addr).unwrap();
    listener.set_nonblocking(true).unwrap();
    let plan = |scoped| LandlockPlan {
        rules: vec![LandlockRule {
            path: "/".into(),
            access: FsAccess::ReadExecute,
        }],
        scope_signals_and_abstract_unix: scoped,
        tcp: None,
        assurance: Assurance::Strict,
    };
    for probe in [
        format!("kill:{}", sibling.pid()),
        format!("abstract_unix:{name}"),
    ] {
        let unscoped = HelperSpec {
            landlock: Some(plan(false)),
            ..HelperSpec::default()
        };
        let scoped = HelperSpec {
            landlock: Some(plan(true)),
            ..HelperSpec::default()
        };
        let without = probe_with(&unscoped, &probe, None);
        assert!(without.escaped, "control {probe}: {}", without.detail);
        let with = probe_with(&scoped, &probe, None);
        assert!(
            !with.escaped && with.errno == Some(libc::EPERM),
            "{probe} must get EPERM from the scope: {}",
            with.detail
        );
        println!("  {probe:<40} unscoped: ok  scoped: {}", with.detail);
    }
}

fn landlock_tcp_port_rules() {
    if !landlock_available(4) {
        return;
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let plan = |allowed: u16| LandlockPlan {
        rules: vec![LandlockRule {
            path: "/".into(),
            access: FsAccess::ReadExecute,
        }],
        scope_signals_and_abstract_unix: false,
        tcp: Some(TcpPolicy {
            bind: vec![],
            connect: vec![allowed],
        }),
        assurance: Assurance::BestEffort,
    };
    let probe = format!("tcp_connect:{port}");
    let allowed = HelperSpec {
        landlock: Some(plan(port)),
        ..HelperSpec::default()
    };
    let other = HelperSpec {
        landlock: Some(plan(port.wrapping_add(1).max(1))),
        ..HelperSpec::default()
    };
    let ok = probe_with(&allowed, &probe, None);
    assert!(ok.escaped, "listed port must connect: {}", ok.detail);
    let denied = probe_with(&other, &probe, None);
    assert_eq!(denied.errno, Some(libc::EACCES), "{}", denied.detail);
}

fn rlimits_applied_and_read_back() {
    let limits = Limits {
        core: 0,
        nproc: 512,
        nofile: 64,
        fsize: Some(stepproof::sandbox::rlimits::ByteSize(1 << 20)),
        cpu: Some(600),
        ..Limits::default()
    };
    let out = run_helper(
        &HelperSpec {
            limits: Some(limits),
            open_files: Some(200),
            read_limits: ["core", "nproc", "nofile", "fsize", "cpu"]
                .map(String::from)
                .to_vec(),
            ..HelperSpec::default()
        },
        None,
    );
    assert!(out.error.is_none(), "{:?}", out.error);
    let expect = [
        ("core", 0),
        ("nproc", 512),
        ("nofile", 64),
        ("fsize", 1 << 20),
        ("cpu", 600),
    ];
    for (name, value) in expect {
        let got = out.limits.iter().find(|l| l.0 == name).expect(name);
        assert_eq!(
            (got.1, got.2),
            (value, value),
            "{name}: soft = hard = {value}"
        );
    }
    let opened = out.opened.unwrap();
    assert!(
        (50..64).contains(&opened),
        "RLIMIT_NOFILE 64 must stop opening: {opened}"
    );
    // The defaults: core dumps off.
    let out = run_helper(
        &HelperSpec {
            limits: Some(Limits::default()),
            read_limits: vec!["core".into()],
            ..HelperSpec::default()
        },
        None,
    );
    assert_eq!(out.limits, [("core".to_string(), 0, 0)]);
}

fn setuid_binaries_gain_nothing_under_no_new_privs() {
    if !is_root() {
        skip_or_fail("planting a setuid-root binary needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let id = dir.path().join("id-setuid");
    std::fs::copy("/usr/bin/id", &id).unwrap();
    std::fs::set_permissions(&id, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let run = |no_new_privs: bool, seccomp: bool| {
        run_raw(&HelperSpec {
            seccomp,
            exec_as: Some(ExecAs {
                uid: 65534,
                no_new_privs,
                argv: vec![id.display().to_string(), "-u".into()],
            }),
            ..HelperSpec::default()
        })
    };
    let control = run(false, false);
    if control.trim() != "0" {
        skip_or_fail(&format!(
            "the temp dir does not honour setuid (nosuid mount?): control printed {control:?}"
        ));
        return;
    }
    assert_eq!(
        run(true, false).trim(),
        "65534",
        "no_new_privs must stop setuid"
    );
    // Installing our filters sets no_new_privs by itself.
    assert_eq!(
        run(false, true).trim(),
        "65534",
        "the seccomp layer implies no_new_privs"
    );
}

fn all_layers_stop_every_probe() {
    if !landlock_available(6) {
        return;
    }
    let Some((_master, slave)) = pty() else {
        return;
    };
    let ws = tempfile::tempdir().unwrap();
    let hidden = tempfile::Builder::new()
        .prefix("stepproof-hidden")
        .tempdir_in("/var/tmp")
        .unwrap();
    std::fs::write(hidden.path().join("secret"), "s3cret").unwrap();
    let sibling = Sibling::spawn();
    let name = format!("stepproof-all-{}", std::process::id());
    let _listener =
        UnixListener::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap()).unwrap();
    let spec = HelperSpec {
        limits: Some(Limits::default()),
        landlock: Some(typical_plan(ws.path())),
        seccomp: true,
        ..HelperSpec::default()
    };
    let sib = sibling.pid();
    let mut escaped = Vec::new();
    for probe in all_probes() {
        let probe = match probe {
            "ptrace" | "process_vm_readv" | "kill" => format!("{probe}:{sib}"),
            "abstract_unix" => format!("abstract_unix:{name}"),
            "tcp_connect" => continue, // a network matter (net namespace), not these layers
            "write" => "write:/usr/stepproof-probe".into(),
            "read" => format!("read:{}", hidden.path().join("secret").display()),
            other => other.to_string(),
        };
        let out = probe_with(&spec, &probe, Some(slave.try_clone().unwrap()));
        println!("  {probe:<40} {}", out.detail);
        if out.escaped || !out.attempted() {
            escaped.push(format!("{probe}: {}", out.detail));
        }
    }
    assert!(
        escaped.is_empty(),
        "escaped or not attempted:\n{}",
        escaped.join("\n")
    );
}

/// Degraded hosts: no mount hides `~/.ssh`, Landlock alone must, by granting its siblings.
fn landlock_degraded_grant_except_hides_a_secret() {
    if !landlock_available(6) {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let home = std::fs::canonicalize(d.path()).unwrap();
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::create_dir_all(home.join("src")).unwrap();
    std::fs::write(home.join(".ssh/id_ed25519"), "PRIVATE").unwrap();
    std::fs::write(home.join("src/main.rs"), "fn main() {}").unwrap();
    std::fs::write(home.join(".bashrc"), "# rc").unwrap();
    let hidden = vec![home.join(".ssh")];
    let expansion = grant_except(&home, FsAccess::ReadExecute, &hidden, &list_dir).unwrap();
    assert!(
        !expansion.losses.is_empty(),
        "the expansion must say what it loses"
    );
    let mut rules = system_rules();
    rules.extend(expansion.rules);
    let spec = HelperSpec {
        landlock: Some(LandlockPlan {
            rules,
            scope_signals_and_abstract_unix: true,
            tcp: None,
            assurance: Assurance::Strict,
        }),
        ..HelperSpec::default()
    };
    let secret = format!("read:{}", home.join(".ssh/id_ed25519").display());
    let control = probe_with(&HelperSpec::default(), &secret, None);
    assert!(control.escaped, "control: {}", control.detail);
    let out = probe_with(&spec, &secret, None);
    assert_eq!(out.errno, Some(libc::EACCES), "{}", out.detail);
    for visible in ["src/main.rs", ".bashrc"] {
        let probe = format!("read:{}", home.join(visible).display());
        let out = probe_with(&spec, &probe, None);
        assert!(out.escaped, "{probe}: {}", out.detail);
    }
}

/// The skip helper skips loudly locally and fails when `CI` is set.
fn skip_fails_under_ci() {
    let run = |ci: bool| {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.env(SKIP_CHECK_ENV, "feature X missing")
            .env_remove("CI");
        if ci {
            cmd.env("CI", "1");
        }
        cmd.output().unwrap()
    };
    let local = run(false);
    assert!(local.status.success());
    assert!(String::from_utf8_lossy(&local.stderr).contains("skipped: feature X missing"));
    let ci = run(true);
    assert!(!ci.status.success(), "under CI a skip must fail");
}
