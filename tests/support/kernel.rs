//! Test support for the kernel layers: a helper mode of the test binary itself (re-executed
//! with `STEPPROOF_KERNEL_HELPER=<json>`), which installs the requested layers on its own
//! single thread and runs probes, and the skip-loudly-but-never-in-CI helper.
//!
//! Why re-exec: the test binary runs with `harness = false`, so in helper mode it is a plain
//! single-threaded process (no libtest threads): `unshare(CLONE_NEWUSER)` behaves as in the
//! sandbox, Landlock and seccomp restrict the one thread that runs the probes, and nothing that
//! happens there (a new user namespace, a stacked filter) touches the test process.

#![allow(dead_code)]

use std::os::fd::OwnedFd;
use std::process::{Child, Command, Stdio};

use serde::{Deserialize, Serialize};
use stepproof::cli::probes::{ProbeOutcome, run_probe};
use stepproof::sandbox::landlock::{LandlockPlan, LandlockReport, apply_landlock};
use stepproof::sandbox::rlimits::{Limits, apply_limits, read_limit};
use stepproof::sandbox::seccomp::{Arch, apply_seccomp_on_current_thread, compile_filters};

pub const HELPER_ENV: &str = "STEPPROOF_KERNEL_HELPER";

#[path = "skip.rs"]
mod skip;
pub use skip::skip_or_fail;

/// What the helper process should do, in order: limits, Landlock, seccomp, then the probes.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct HelperSpec {
    pub limits: Option<Limits>,
    pub landlock: Option<LandlockPlan>,
    pub seccomp: bool,
    pub probes: Vec<String>,
    /// After the layers: open this many files, report how many succeeded (RLIMIT_NOFILE).
    pub open_files: Option<usize>,
    /// Read these limits back with getrlimit.
    pub read_limits: Vec<String>,
    /// Switch to this uid/gid, set no_new_privs if asked, then exec this command (setuid tests).
    pub exec_as: Option<ExecAs>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExecAs {
    pub uid: u32,
    pub no_new_privs: bool,
    pub argv: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct HelperOutput {
    pub error: Option<String>,
    pub landlock: Option<LandlockReport>,
    pub outcomes: Vec<ProbeOutcome>,
    pub opened: Option<usize>,
    pub limits: Vec<(String, u64, u64)>,
}

/// The helper's main: never returns.
pub fn helper_main(spec_json: &str) -> ! {
    let mut out = HelperOutput::default();
    let spec: HelperSpec = match serde_json::from_str(spec_json) {
        Ok(s) => s,
        Err(e) => {
            out.error = Some(format!("bad helper spec: {e}"));
            finish(&out)
        }
    };
    // Compiled before any layer is installed, as the launcher does before forking.
    let filters = spec.seccomp.then(|| compile_filters(Arch::native()));
    if let Some(limits) = &spec.limits
        && let Err(e) = apply_limits(limits)
    {
        out.error = Some(e.to_string());
        finish(&out)
    }
    if let Some(plan) = &spec.landlock {
        match apply_landlock(plan) {
            Ok(report) => out.landlock = Some(report),
            Err(e) => {
                out.error = Some(e.to_string());
                finish(&out)
            }
        }
    }
    if let Some(filters) = filters {
        let res = filters
            .map_err(|e| e.to_string())
            .and_then(|f| apply_seccomp_on_current_thread(&f).map_err(|e| e.to_string()));
        if let Err(e) = res {
            out.error = Some(e);
            finish(&out)
        }
    }
    for p in &spec.probes {
        out.outcomes.push(run_probe(p));
    }
    if let Some(n) = spec.open_files {
        let files: Vec<_> = (0..n)
            .map_while(|_| std::fs::File::open("/dev/null").ok())
            .collect();
        out.opened = Some(files.len());
    }
    for name in &spec.read_limits {
        if let Some((soft, hard)) = read_limit(name) {
            out.limits.push((name.clone(), soft, hard));
        }
    }
    if let Some(exec) = &spec.exec_as {
        use std::os::unix::process::CommandExt;
        let gid = nix::unistd::Gid::from_raw(exec.uid);
        let uid = nix::unistd::Uid::from_raw(exec.uid);
        let r = nix::unistd::setgroups(&[])
            .and_then(|_| nix::unistd::setgid(gid))
            .and_then(|_| nix::unistd::setuid(uid))
            .and_then(|_| {
                if exec.no_new_privs {
                    nix::sys::prctl::set_no_new_privs()
                } else {
                    Ok(())
                }
            });
        if let Err(e) = r {
            out.error = Some(format!("dropping to uid {}: {e}", exec.uid));
            finish(&out)
        }
        let err = Command::new(&exec.argv[0]).args(&exec.argv[1..]).exec();
        out.error = Some(format!("exec {:?}: {err}", exec.argv));
    }
    finish(&out)
}

fn finish(out: &HelperOutput) -> ! {
    println!(
        "{}",
        serde_json::to_string(out).expect("helper output serializes")
    );
    std::process::exit(0)
}

/// Runs the test binary in helper mode with `spec`, stdin from `stdin` (else /dev/null).
pub fn run_helper(spec: &HelperSpec, stdin: Option<OwnedFd>) -> HelperOutput {
    let exe = std::env::current_exe().expect("test binary path");
    let mut cmd = Command::new(exe);
    cmd.env(HELPER_ENV, serde_json::to_string(spec).unwrap())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    match stdin {
        Some(fd) => cmd.stdin(Stdio::from(fd)),
        None => cmd.stdin(Stdio::null()),
    };
    let output = cmd.output().expect("spawn helper");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "helper {spec:?} died: {:?}, stdout {text}",
        output.status
    );
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("helper output {text:?}: {e}"))
}

/// Runs one probe in a helper with the given layers and returns its outcome.
pub fn probe_with(spec: &HelperSpec, probe: &str, stdin: Option<OwnedFd>) -> ProbeOutcome {
    let mut spec = spec.clone();
    spec.probes = vec![probe.to_string()];
    let out = run_helper(&spec, stdin);
    assert!(out.error.is_none(), "helper for {probe}: {:?}", out.error);
    out.outcomes.into_iter().next().expect("one outcome")
}

/// A process outside every layer the helper installs (`sleep`), killed on drop.
pub struct Sibling(pub Child);

impl Sibling {
    pub fn spawn() -> Sibling {
        Sibling(
            Command::new("sleep")
                .arg("120")
                .stdin(Stdio::null())
                .spawn()
                .expect("spawn sleep"),
        )
    }

    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Sibling {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
