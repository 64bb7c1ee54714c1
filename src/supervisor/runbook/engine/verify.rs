//! The `verifier` item: a separate read-only Claude Code run that judges the step's diff.

use super::freeze::freeze;
use super::{Approvals, Engine};
use crate::runbook::Step;
use serde_json::Value;
use serde_json::json;
use sha2::Digest;
use sha2::Sha256;
use std::sync::Arc;
use std::sync::Mutex;

/// A model verifier item: a separate read-only Claude Code run judges the acceptance
/// criteria with the evidence gathered in this attempt, while the agent's processes are frozen
/// (one state of the workspace). Whether it held (`pass` only), its record (verdict, reasons,
/// model, each attempt of the chain, transcript digest), why not, and the verdict in words for
/// the worker's answer.
pub(super) fn check_verifier(
    engine: &Arc<Mutex<Engine>>,
    approvals: &Arc<Approvals>,
    (index, step, attempt): (usize, &Step, u32),
    tier: u8,
    (gathered, outputs): (&[Value], &[(String, String)]),
) -> (bool, Value, String, String) {
    use crate::supervisor::runbook::verifier::{self, Verdict};
    let lock = || engine.lock().unwrap_or_else(|e| e.into_inner());
    let (context, n, runbook, base, store) = {
        let mut e = lock();
        e.evidence_runs += 1;
        (
            e.context.clone(),
            e.evidence_runs,
            e.runbook.clone(),
            e.diff_base(index),
            e.store.clone(),
        )
    };
    let verifiers = runbook.verifiers.clone().unwrap_or_default();
    // The agent's processes are frozen from the diff's walk to the verdict: one state of the
    // workspace.
    let frozen = freeze(&context.cgroup_dirs, true, context.no_freezer.as_deref());
    let diff = match (base, store) {
        (Ok(base), Some(store)) => {
            super::opening::diff_since(&store, &context, &approvals.closing, &base)
                .map(|diff| (base.step.clone(), diff))
                .map_err(|e| {
                    format!(
                        "the walk of the workspace did not finish ({})",
                        e.sentence()
                    )
                })
        }
        (Err(why), _) => Err(why),
        (_, None) => Err("the runbook's openings were not kept".into()),
    };
    let work = verifier::Work {
        show: verifiers.show(),
        diff,
        outputs: outputs.to_vec(),
    };
    let request = verifier::Request {
        runbook: &runbook,
        step,
        tier,
        attempt,
        evidence: gathered,
        work: &work,
    };
    let (prompt, shown) = verifier::shown(&request);
    {
        let e = lock();
        e.record(
            "runbook-verifier-started",
            json!({
                "step": step.id,
                "attempt": attempt,
                "tier": tier,
                "models": verifiers.models(tier),
                "timeout": verifiers.timeout().render(),
                "max_tokens": verifiers.max_tokens(),
                "prompt_sha256": format!("sha256:{}", hex::encode(Sha256::digest(prompt.as_bytes()))),
                "shown": shown,
            }),
        );
    }
    let launcher = verifier::Launcher {
        run_binary: context.run_binary.clone(),
        profile: context.profile.clone(),
        workspace: context.workspace.clone(),
        run_dir: context.run_dir.clone(),
        deadline: context.deadline,
        stop: Arc::clone(&approvals.closing),
    };
    let verification = verifier::verify(&launcher, &verifiers, (&request, &prompt), n, &mut |r| {
        lock().record("runbook-verifier-attempt", r.clone());
    });
    freeze(&context.cgroup_dirs, false, None);
    let held = verification.verdict == Verdict::Pass;
    let model = match (&verification.model, &verification.model_used) {
        (Some(asked), Some(used)) if verification.model_differs => {
            format!("{used}, asked for {asked}")
        }
        (Some(asked), _) => asked.clone(),
        (None, _) => "none".into(),
    };
    let said = format!(
        "verifier (tier {tier}, model {model}): {}\n{}",
        verification.verdict.name(),
        verification
            .reasons
            .iter()
            .map(|r| format!("  - {r}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let record = json!({
        "kind": "verifier",
        "tier": tier,
        "verdict": verification.verdict.name(),
        "reasons": verification.reasons,
        "model": verification.model,
        "model_used": verification.model_used,
        "model_differs": verification.model_differs,
        "models_tried": verification.attempts.iter().map(|a| a["model"].clone()).collect::<Vec<_>>(),
        "chain": verification.attempts.iter().map(|a| json!({ "model": a["model"], "outcome": a["outcome"] })).collect::<Vec<_>>(),
        "tokens": verification.tokens,
        "duration_ms": verification.duration.as_millis() as u64,
        "transcript_sha256": verification.transcript_sha256,
        "frozen": frozen.0,
        "agent_frozen": frozen.1,
        "workspace": "read-only",
    });
    (held, record, said.clone(), said)
}
