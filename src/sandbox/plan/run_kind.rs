//! What the kind of run adds to the view, planned with the rest from the facts: a runbook's
//! state and client under the agent's layer and its file read-only, and the self-test's probe
//! binary. (What an unattended run starts from nothing — no kept sessions, caches of its own —
//! is decided where sessions and caches are planned, from [`Fresh`].) The contents are the
//! launch's — the runbook's engine fills its directory, the probe is the installed binary —
//! the way [`MountOp::TrustFiles`] is: the plan names every mount that will exist, so
//! `stepproof explain --runbook FILE` and `--selftest` print the view the launch makes, and no
//! code outside `plan/` edits a plan.

use crate::sandbox::plan::agent_layer::{CLIENT_BINARY, CONTROL_DIR};
use crate::sandbox::plan::{Access, HostFacts, Isolation, MountOp, PlanError, SandboxPlan};
use std::path::{Path, PathBuf};

/// The self-test's own directory inside, and its probe binary there.
pub const SELFTEST_DIR: &str = "/run/stepproof-selftest";
pub const SELFTEST_BINARY: &str = "/run/stepproof-selftest/stepproof";

/// A runbook's run, as the plan needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunbookFacts {
    /// The runbook file (canonical): read-only inside where the run could write it.
    pub file: PathBuf,
    /// The `stepproof` client, bound beside the control socket (installed next to
    /// `stepproof-run`).
    pub client: PathBuf,
}

/// What a run starts from nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fresh {
    /// No kept sessions: an unattended run (`--ci`), the self-test, a model verifier.
    pub sessions: bool,
    /// Build caches that start empty and go with the run: `--ci`, the self-test.
    pub caches: bool,
}

/// The additions, in the order the view needs them: the self-test's probe before the root
/// becomes read-only; the runbook's state and client before the agent's layer is sealed; the
/// runbook file's pins last (after the writable binds they narrow).
pub(super) fn add(plan: &mut SandboxPlan, facts: &HostFacts) -> Result<(), PlanError> {
    if let Some(probe) = &facts.selftest_probe {
        selftest(plan, probe);
    }
    if let Some(runbook) = &facts.runbook {
        runbook_view(plan, runbook, &facts.run_dir)?;
    }
    Ok(())
}

/// The probe binary in a directory of its own, read-only, before the root is sealed.
fn selftest(plan: &mut SandboxPlan, probe: &Path) {
    let at = plan
        .mounts
        .iter()
        .position(|m| matches!(m, MountOp::ReadOnlyRoot))
        .unwrap_or(plan.mounts.len());
    plan.mounts.splice(
        at..at,
        [
            MountOp::Tmpfs {
                dst: SELFTEST_DIR.into(),
                mode: 0o755,
                size_mib: Some(1),
            },
            MountOp::FromSupervisor {
                src: probe.to_path_buf(),
                dst: SELFTEST_BINARY.into(),
                access: Access::ReadOnly,
            },
            MountOp::SealReadOnly {
                dst: SELFTEST_DIR.into(),
            },
        ],
    );
}

/// The runbook's directory and the `stepproof` client under the agent's layer (before its
/// seal), the slash commands that act on the run beside the agents, and the runbook file
/// read-only where the run could write it, its directories pinned (as the profile's files
/// are): its hash is compared after the run.
fn runbook_view(
    plan: &mut SandboxPlan,
    runbook: &RunbookFacts,
    run_dir: &Path,
) -> Result<(), PlanError> {
    let seal = plan
        .mounts
        .iter()
        .position(|op| matches!(op, MountOp::SealReadOnly { dst } if dst == Path::new(CONTROL_DIR)))
        .ok_or(PlanError::RunbookWithoutAgentLayer)?;
    let mut ops = vec![MountOp::FromSupervisor {
        src: crate::runbook::client::state_dir(run_dir),
        dst: crate::runbook::client::RUNBOOK_DIR.into(),
        access: Access::ReadOnly,
    }];
    // The agent's layer binds the client already where it is installed beside the hook.
    let client_bound = plan.mounts.iter().any(
        |op| matches!(op, MountOp::FromSupervisor { dst, .. } if dst == Path::new(CLIENT_BINARY)),
    );
    if !client_bound {
        ops.push(MountOp::FromSupervisor {
            src: runbook.client.clone(),
            dst: CLIENT_BINARY.into(),
            access: Access::ReadOnly,
        });
    }
    plan.mounts.splice(seal..seal, ops);
    if let Some(agent) = plan.agent.as_mut() {
        agent.shipped.extend(
            crate::runbook::chat::COMMANDS
                .iter()
                .map(|(path, _)| path.to_string()),
        );
    }
    if plan.isolation != Isolation::Namespaces {
        return Ok(());
    }
    let roots: Vec<PathBuf> = plan
        .writable_host_paths()
        .into_iter()
        .map(|root| root.canonicalize().unwrap_or(root))
        .collect();
    let Some(root) = roots.iter().filter(|r| runbook.file.starts_with(r)).max() else {
        return Ok(());
    };
    let rel = runbook.file.strip_prefix(root).unwrap_or(&runbook.file);
    let parts: Vec<_> = rel.components().collect();
    let mut dir = root.clone();
    for part in &parts[..parts.len().saturating_sub(1)] {
        dir.push(part);
        plan.mounts.push(MountOp::PinInPlace { path: dir.clone() });
    }
    plan.mounts.push(MountOp::ReadOnlyInPlace {
        path: runbook.file.clone(),
    });
    Ok(())
}
