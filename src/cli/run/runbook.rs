//! The runbook's part of a run: the file read and checked against the profile, its engine
//! prepared (an earlier run of it here continued), the approval webhook, and a model
//! verifier's agent. The view it adds is the plan's (`sandbox::plan::run_kind`).

use super::*;

pub(super) type Webhook = Option<std::sync::Arc<crate::supervisor::runbook::webhook::Webhook>>;

/// The approval webhook: named only from outside the workspace, https, out of the agent's
/// reach; its key read now when the runbook has an approval step to ask it.
pub(super) fn approval_webhook(known: &Known<'_>) -> Result<Webhook, Failure> {
    let webhook = crate::supervisor::runbook::webhook::prepare(
        &known.profile,
        &known.facts.env,
        &known.facts.home,
        &known.facts.workspace,
        known.runbook.as_ref().is_some_and(|r| {
            r.runbook
                .steps
                .iter()
                .any(|s| s.evidence.iter().any(|e| e.approval.is_some()))
        }),
    )
    .map_err(Failure::refused)?
    .map(std::sync::Arc::new);
    for note in webhook.iter().flat_map(|w| &w.notes) {
        crate::say!("stepproof-run: {note}");
    }
    Ok(webhook)
}

/// A model verifier run: its agent definition, for its own config directory only.
pub(super) fn verifier_agent(
    args: &Request,
    plan: &crate::sandbox::plan::SandboxPlan,
) -> Result<Option<String>, Failure> {
    match &args.verifier_agent {
        None => Ok(None),
        Some(_) if plan.agent.is_none() => Err(Failure::refused(
            "--verifier-agent: the profile has no agent layer (no [hook]) to install it in",
        )),
        Some(path) => crate::regular_file::read_to_string(path, 64 << 10)
            .map(Some)
            .map_err(|e| Failure::host(format!("--verifier-agent {}: {e}", path.display()))),
    }
}

/// The runbook's run, when there is one (see [`prepare_runbook`]).
pub(super) fn runbook_run(
    known: &Known<'_>,
    plan: &crate::sandbox::plan::SandboxPlan,
    audit: Option<&AuditSink>,
    limits: &crate::supervisor::launch::cgroup::RunLimits,
    approval_webhook: &Webhook,
) -> Result<Option<crate::supervisor::runbook::engine::RunbookRun>, Failure> {
    let Some(loaded) = &known.runbook else {
        return Ok(None);
    };
    // Where a pending approval is announced: named outside the workspace, out of the agent's
    // reach (refused before anything runs otherwise).
    let notify = crate::supervisor::runbook::notify::prepare(&known.profile, &known.facts.env)
        .map_err(Failure::refused)?
        .map(|n| std::sync::Arc::new(n.with_audit(audit)));
    prepare_runbook(
        known.args,
        loaded,
        plan,
        &known.facts,
        audit,
        limits.cgroup.as_ref(),
        limits.no_freezer.clone(),
        (approval_webhook.clone(), notify),
        crate::supervisor::runbook::files::Budget::from_profile(&known.profile.runbook),
    )
    .map(Some)
}

/// Reads and checks the runbook against the profile: a runbook that is missing, unreadable or
/// wrong is the caller's to fix, refused (120) before anything is made.
pub(super) fn load_runbook(
    path: &std::path::Path,
    profile: &Profile,
) -> Result<LoadedRunbook, Failure> {
    host::load_runbook(path, profile).map_err(Failure::refused)
}

/// The runbook's run: its directory and sockets (the plan binds them inside with the
/// `stepproof` client, and its file read-only: `run_kind`).
#[allow(clippy::too_many_arguments)]
pub(super) fn prepare_runbook(
    args: &Request,
    loaded: &LoadedRunbook,
    plan: &crate::sandbox::plan::SandboxPlan,
    facts: &crate::sandbox::plan::HostFacts,
    audit: Option<&AuditSink>,
    cgroup: Option<&crate::supervisor::launch::cgroup::RunCgroup>,
    no_freezer: Option<String>,
    (approval_webhook, notify): (
        Option<std::sync::Arc<crate::supervisor::runbook::webhook::Webhook>>,
        Option<std::sync::Arc<crate::supervisor::runbook::notify::Notifier>>,
    ),
    budget: crate::supervisor::runbook::files::Budget,
) -> Result<crate::supervisor::runbook::engine::RunbookRun, Failure> {
    let exe = std::env::current_exe()
        .map_err(|e| Failure::host(format!("finding stepproof-run: {e}")))?;
    let profile = match &args.profile {
        Some(p) => p
            .canonicalize()
            .unwrap_or_else(|_| p.clone())
            .display()
            .to_string(),
        None => "default".to_string(),
    };
    // An earlier run of this runbook here that ended with steps open is continued, its state
    // rebuilt from its verified audit chain.
    let continued = if args.runbook_fresh {
        None
    } else {
        earlier_run(loaded, facts, plan)?
    };
    let run = crate::supervisor::runbook::engine::RunbookRun::prepare(
        loaded.runbook.clone(),
        audit,
        &facts.run_dir,
        (plan.identity.outside_uid, plan.identity.outside_gid),
        &plan.home,
        &plan.workspace,
        crate::supervisor::runbook::engine::EvidenceContext {
            run_binary: exe,
            profile,
            profile_name: plan.profile.clone(),
            workspace: plan.workspace.clone(),
            run_dir: facts.run_dir.clone(),
            ci: args.ci,
            pre_approved: args.approve.clone(),
            cgroup_dirs: cgroup.map(|c| c.dirs()).unwrap_or_default(),
            no_freezer,
            // The run's own --timeout, from about now: model verifiers count inside it.
            deadline: args.timeout.map(|t| std::time::Instant::now() + t),
            approval_webhook,
            notify,
            budget,
        },
        continued,
    )
    .map_err(|e| Failure::host(format!("--runbook: {e}")))?;
    Ok(run)
}

/// The earlier run of this runbook in this workspace that ended with steps open, when its
/// audit chain verifies; what is not continued is said.
fn earlier_run(
    loaded: &LoadedRunbook,
    facts: &crate::sandbox::plan::HostFacts,
    plan: &crate::sandbox::plan::SandboxPlan,
) -> Result<Option<crate::supervisor::runbook::continuation::Earlier>, Failure> {
    use crate::supervisor::runbook::continuation::{Found, find};
    Ok(
        match find(
            &facts.run_dir,
            &loaded.runbook,
            &loaded.runbook.hash(),
            &crate::audit::text::path(&plan.workspace),
        )
        .map_err(|e| Failure::refused(format!("--runbook: {e}")))?
        {
            Found::Nothing => None,
            Found::NotContinued(why) => {
                crate::say!("stepproof-run: runbook {}: {why}", loaded.runbook.id);
                None
            }
            Found::Continue(earlier) => {
                let passed: Vec<&str> = loaded
                    .runbook
                    .steps
                    .iter()
                    .zip(&earlier.steps)
                    .filter(|(_, s)| s.passed)
                    .map(|(step, _)| step.id.as_str())
                    .collect();
                crate::say!(
                    "stepproof-run: runbook {}: continuing run {} (its audit log verified, head {}); passed already: {}",
                    loaded.runbook.id,
                    earlier.run_id,
                    earlier.head,
                    if passed.is_empty() {
                        "none".to_string()
                    } else {
                        passed.join(", ")
                    }
                );
                Some(earlier)
            }
        },
    )
}
