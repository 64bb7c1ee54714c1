//! The assurance report: what was actually enforced, as opposed to what was asked for. The
//! command's own process reports its part (Landlock, limits) right before `execve`; the
//! supervisor adds what it did itself and writes the whole with `--report`.

use crate::sandbox::landlock::LandlockReport;
use crate::sandbox::plan::{Identity, SandboxPlan};
use crate::sandbox::rlimits::AppliedLimit;
use crate::sandbox::seccomp::SeccompReport;
use serde::{Deserialize, Serialize};

/// Measured in the command's process, after every layer and right before `execve`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandEnforcement {
    pub landlock: LandlockReport,
    pub limits: Vec<AppliedLimit>,
    pub no_new_privs: bool,
    pub capabilities_empty: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct AssuranceReport {
    pub stepproof_version: &'static str,
    pub profile: String,
    pub policy_hash: String,
    pub isolation: crate::sandbox::plan::Isolation,
    pub namespaces: Vec<&'static str>,
    pub identity: Identity,
    pub network: crate::profile::NetworkMode,
    /// `None` when the filter could not be compiled (the command then never started).
    pub seccomp: Option<SeccompReport>,
    /// `None` when the command never started.
    pub command: Option<CommandEnforcement>,
    /// Anything asked for but not enforced, and why.
    pub dropped: Vec<String>,
    pub notes: Vec<String>,
}

impl AssuranceReport {
    pub fn new(
        plan: &SandboxPlan,
        seccomp: Option<SeccompReport>,
        command: Option<CommandEnforcement>,
    ) -> AssuranceReport {
        let mut dropped: Vec<String> = plan
            .losses
            .iter()
            .map(|l| format!("isolation: {l}"))
            .collect();
        if let Some(c) = &command {
            dropped.extend(c.landlock.dropped.iter().map(|d| format!("landlock: {d}")));
        }
        AssuranceReport {
            stepproof_version: env!("CARGO_PKG_VERSION"),
            profile: plan.profile.clone(),
            policy_hash: plan.policy_hash.clone(),
            isolation: plan.isolation,
            namespaces: namespaces(plan),
            identity: plan.identity.clone(),
            network: plan.network,
            seccomp,
            command,
            dropped,
            notes: plan.notes.clone(),
        }
    }
}

/// The namespaces the sandbox of this plan has.
pub fn namespaces(plan: &SandboxPlan) -> Vec<&'static str> {
    if plan.isolation == crate::sandbox::plan::Isolation::LandlockSeccompOnly {
        return Vec::new();
    }
    let mut list = vec!["user", "mount", "pid", "ipc", "uts", "cgroup"];
    if plan.network != crate::profile::NetworkMode::Host {
        list.push("net");
    }
    list
}
