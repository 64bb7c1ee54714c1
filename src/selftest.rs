//! `stepproof selftest`: the built-in escape probes, run inside the very sandbox a profile
//! describes (the `stepproof` binary is bound read-only into it), each of which must fail.
//! `stepproof-run --ci` runs it before starting the agent.

use crate::probes::{ProbeOutcome, all_probes, run_probe};
use crate::sandbox::plan::{Access, MountOp, SandboxPlan};
use std::ffi::OsString;

const DIR: &str = "/run/stepproof-selftest";
const BINARY: &str = "/run/stepproof-selftest/stepproof";

/// Probes that need a terminal or a peer outside the sandbox's domain are left to the test
/// suite; the rest run here.
const NEEDS_SETUP: &[&str] = &[
    "tiocsti",
    "tiocsti_high",
    "tioclinux",
    "abstract_unix",
    "tcp_connect",
    "write",
    "read",
];

/// Adds the `stepproof` binary (next to `stepproof-run`) to the plan and returns the command
/// that runs every probe.
pub fn install_probe_binary(plan: &mut SandboxPlan) -> Result<Vec<OsString>, String> {
    let exe = std::env::current_exe().map_err(|e| format!("finding stepproof-run: {e}"))?;
    let probe = exe.with_file_name("stepproof");
    if !probe.is_file() {
        return Err(format!(
            "the self-test needs {} (installed next to stepproof-run)",
            probe.display()
        ));
    }
    let at = plan
        .mounts
        .iter()
        .position(|m| matches!(m, MountOp::ReadOnlyRoot))
        .unwrap_or(plan.mounts.len());
    let ops = [
        MountOp::Tmpfs {
            dst: DIR.into(),
            mode: 0o755,
            size_mib: Some(1),
        },
        MountOp::FromSupervisor {
            src: probe,
            dst: BINARY.into(),
            access: Access::ReadOnly,
        },
        MountOp::SealReadOnly { dst: DIR.into() },
    ];
    for (i, op) in ops.into_iter().enumerate() {
        plan.mounts.insert(at + i, op);
    }
    Ok(vec![BINARY.into(), "__probe-all".into()])
}

/// Inside the sandbox: every probe, one JSON line each. A sibling process is the ptrace target;
/// pid 1 (the init, outside the Landlock domain) is the signal and /proc/<pid>/mem target.
pub fn probe_all() -> i32 {
    let sibling = std::process::Command::new("/bin/sleep")
        .arg("10")
        .spawn()
        .ok();
    let sibling_pid = sibling.as_ref().map(|c| c.id().to_string());
    let mut escaped = false;
    let mut results: Vec<ProbeOutcome> = Vec::new();
    for name in all_probes() {
        if NEEDS_SETUP.contains(name) {
            continue;
        }
        let spec = match (*name, &sibling_pid) {
            ("ptrace" | "process_vm_readv", Some(pid)) => format!("{name}:{pid}"),
            ("proc_mem" | "kill", _) => format!("{name}:1"),
            _ => name.to_string(),
        };
        results.push(run_probe(&spec));
    }
    let home = std::env::var("HOME").unwrap_or_default();
    results.push(run_probe("write:/etc/stepproof-selftest"));
    results.push(run_probe(&format!("write:{home}/.stepproof-selftest")));
    results.push(run_probe(&format!("read:{home}/.ssh/id_rsa")));
    if let Some(mut child) = sibling {
        let _ = child.kill();
        let _ = child.wait();
    }
    for r in &results {
        // A secret file that does not exist cannot leak: that read "escapes" nothing.
        let leaked = r.escaped && !(r.name.starts_with("read:") && r.errno == Some(libc::ENOENT));
        escaped |= leaked;
        println!("{}", serde_json::to_string(r).unwrap_or_default());
    }
    i32::from(escaped)
}

/// One probe's line as `stepproof-run --selftest` printed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelftestResult {
    pub name: String,
    pub escaped: bool,
    pub detail: String,
}

pub fn parse_results(stdout: &str) -> Vec<SelftestResult> {
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["name"].is_string())
        .map(|v| SelftestResult {
            name: v["name"].as_str().unwrap_or_default().to_string(),
            escaped: v["escaped"].as_bool().unwrap_or(true),
            detail: v["detail"].as_str().unwrap_or_default().to_string(),
        })
        .collect()
}
