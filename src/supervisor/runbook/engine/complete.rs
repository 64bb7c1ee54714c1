//! A `complete` request judged: the step's evidence items checked in their order (cheap ones
//! first, the verifier last), the verdict recorded and the steps it opens.

use super::check_files::FILES_RECORDED_MAX;
use super::command::covered;
use super::freeze::freeze;
use super::invariants::{check_invariants, definitions_item, invariant_item};
use super::item::check_item;
use super::opening::take_baselines;
use super::verify::check_verifier;
use super::{Approvals, Ending, Engine, OUTPUT_TAIL_KEY, Status, refused};
use crate::runbook::OnFail;
use crate::runbook::ProtectedBy;
use crate::runbook::client::Answer;
use serde_json::Value;
use serde_json::json;
use std::sync::Arc;
use std::sync::Mutex;

/// A completion request: attempt counted, every evidence item checked by the supervisor, the
/// verdict recorded and published. The engine is unlocked while a command runs or an approval
/// is awaited (the status stays answerable).
pub(super) fn complete(
    engine: &Arc<Mutex<Engine>>,
    approvals: &Arc<Approvals>,
    run_id: &str,
    step: Option<&str>,
    note: Option<String>,
    who: Value,
) -> Answer {
    let lock = || engine.lock().unwrap_or_else(|e| e.into_inner());
    let (index, step, attempt) = {
        let mut e = lock();
        let open: Vec<usize> = (0..e.steps.len())
            .filter(|&i| e.steps[i].status == Status::Open)
            .collect();
        let index = match step {
            Some(id) => e.runbook.steps.iter().position(|s| s.id.as_str() == id),
            None if open.len() == 1 => Some(open[0]),
            None => None,
        };
        let Some(index) = index.filter(|i| open.contains(i)) else {
            let why = match step {
                Some(id) => format!(
                    "step {id:?} is not open (open: {})",
                    e.open_ids().join(", ")
                ),
                None if open.is_empty() => "no step is open".to_string(),
                None => format!(
                    "several steps are open ({}): name one with --step",
                    e.open_ids().join(", ")
                ),
            };
            e.record_inside(
                "runbook-complete-refused",
                json!({ "step": step, "why": why, "peer": who }),
            );
            return refused(&why);
        };
        e.steps[index].attempts += 1;
        let attempt = e.steps[index].attempts;
        let step = e.runbook.steps[index].clone();
        e.record_inside(
            "runbook-complete-requested",
            json!({ "step": step.id, "attempt": attempt, "max_attempts": step.attempts(), "note": note, "peer": who }),
        );
        (index, step, attempt)
    };
    let mut failures = Vec::new();
    // The supervisor's own evidence first; model verifiers last, each given what was gathered
    // (and not started when that already failed: nothing a model says could pass the step).
    let mut gathered = Vec::new();
    let mut outputs = Vec::new();
    let mut verdicts = Vec::new();
    let (verifier_items, other_items): (Vec<_>, Vec<_>) = step
        .evidence
        .iter()
        .enumerate()
        .partition(|(_, item)| item.verifier.is_some());
    // Approvals after the supervisor's own evidence: a person is asked with the agent thawed.
    let (approval_items, other_items): (Vec<_>, Vec<_>) = other_items
        .into_iter()
        .partition(|(_, item)| item.approval.is_some());
    // With evidence commands, the agent stays frozen from the invariants' walk to the last
    // command's end: the commands run on the state the invariants were judged on.
    let (cgroup_dirs, no_freezer, has_definitions) = {
        let e = lock();
        (
            e.context.cgroup_dirs.clone(),
            e.context.no_freezer.clone(),
            !e.steps[index].definitions.is_empty(),
        )
    };
    let held = step
        .evidence
        .iter()
        .any(|e| e.command.is_some())
        .then(|| freeze(&cgroup_dirs, true, no_freezer.as_deref()));
    // The step's invariants first: whatever changed its protected paths or what defines its
    // evidence commands (a tool the step allows, a build script, a recipe the agent rewrote),
    // the hook did not have to see it.
    let protected = step.protected_paths();
    let invariants = (!protected.is_empty() || has_definitions)
        .then(|| check_invariants(engine, approvals, index, &step, held.as_ref()));
    let mut deny_rules: Vec<String> = Vec::new();
    let mut deny_globs: Vec<String> = Vec::new();
    for p in &protected {
        if let ProtectedBy::DenyRule(rule) = &p.by {
            if !deny_rules.contains(rule) {
                deny_rules.push(rule.clone());
            }
            if !deny_globs.contains(&p.glob) {
                deny_globs.push(p.glob.clone());
            }
        }
    }
    if !deny_rules.is_empty() {
        let (held, mut record, why) =
            invariant_item(invariants.as_ref(), &deny_globs, Some(&deny_rules), |p| {
                matches!(p.by, ProtectedBy::DenyRule(_))
            });
        record["step"] = json!(step.id);
        record["attempt"] = json!(attempt);
        record["item"] = json!("deny-rules");
        record["held"] = json!(held);
        gathered.push(record.clone());
        lock().record("runbook-evidence", record);
        if !held {
            failures.push(why);
        }
    }
    if let Some(check) = invariants.as_ref().filter(|c| !c.definitions.is_empty()) {
        let (held, mut record, why) = definitions_item(check, &step);
        record["step"] = json!(step.id);
        record["attempt"] = json!(attempt);
        record["item"] = json!("definitions");
        record["held"] = json!(held);
        gathered.push(record.clone());
        lock().record("runbook-evidence", record);
        if !held {
            failures.push(why);
        }
    }
    let mut thaw = held.is_some();
    // A person last: shown the verifier's verdict with the rest, and not asked when it failed.
    for (n, item) in other_items
        .into_iter()
        .chain(verifier_items)
        .chain(approval_items)
    {
        if thaw
            && item.command.is_none()
            && item.files_exist.is_none()
            && item.files_changed.is_none()
            && item.files_unchanged.is_none()
        {
            freeze(&cgroup_dirs, false, None);
            thaw = false;
        }
        let (held, record, why) = match &item.verifier {
            Some(verifier) if failures.is_empty() => {
                let (held, record, why, said) = check_verifier(
                    engine,
                    approvals,
                    (index, &step, attempt),
                    verifier.tier,
                    (&gathered, &outputs),
                );
                verdicts.push(said);
                (held, record, why)
            }
            Some(verifier) => (
                false,
                json!({ "kind": "verifier", "tier": verifier.tier, "verdict": null, "not_run": "other evidence of this attempt did not hold" }),
                format!(
                    "verifier (tier {}): not started, the other evidence did not hold",
                    verifier.tier
                ),
            ),
            // A person is not asked about work whose own evidence did not hold.
            None if item.approval.is_some() && !failures.is_empty() => (
                false,
                json!({ "kind": "approval", "approvers": item.approval.as_ref().map(|a| &a.approvers), "answer": null, "not_run": "other evidence of this attempt did not hold" }),
                "approval: not asked, the other evidence did not hold".to_string(),
            ),
            None => {
                // What the person is shown while asked (`stepproof approvals`).
                let briefed = item.approval.is_some() && super::brief::asks_a_person(engine, &step);
                if briefed {
                    super::brief::write_brief(
                        engine,
                        approvals,
                        run_id,
                        (index, &step, attempt),
                        (&gathered, &outputs),
                    );
                }
                let checked = check_item(
                    engine,
                    approvals,
                    run_id,
                    (index, &step, n),
                    item,
                    invariants.as_ref(),
                    held.as_ref(),
                );
                if briefed {
                    super::brief::remove_brief(engine, step.id.as_str());
                }
                if checked.0 && checked.1["kind"] == "approval" {
                    // Who said yes, in the agent's answer (a denial says why among the failures).
                    let from = checked.1["from"].as_str().unwrap_or("a person");
                    verdicts.push(match checked.1["approver"].as_str() {
                        _ if checked.1["pre_approved"] == true => {
                            "approval: pre-approved (--approve)".to_string()
                        }
                        Some(who) => format!("approval: approved by {who} (from {from})"),
                        None => format!("approval: approved (from {from})"),
                    });
                }
                checked
            }
        };
        let e = lock();
        let mut record = record;
        // A command's output tail is for the verifiers, never for the chain.
        if let Some(output) = record
            .as_object_mut()
            .and_then(|r| r.remove(OUTPUT_TAIL_KEY))
        {
            outputs.push((
                crate::audit::text::command_line(
                    &serde_json::from_value::<Vec<String>>(record["run"].clone())
                        .unwrap_or_default(),
                ),
                output.as_str().unwrap_or_default().to_string(),
            ));
        }
        record["step"] = json!(step.id);
        record["attempt"] = json!(attempt);
        record["item"] = json!(n);
        record["held"] = json!(held);
        gathered.push(record.clone());
        e.record("runbook-evidence", record);
        drop(e);
        if !held {
            failures.push(why);
        }
    }
    if thaw {
        freeze(&cgroup_dirs, false, None);
    }
    let mut e = lock();
    if failures.is_empty() {
        e.steps[index].status = Status::Passed;
        e.steps[index].passed_here = true;
        e.steps[index].approval_missing = None;
        e.steps[index].last_verdict = Some("passed".into());
        let covered = covered(
            &step,
            (&e.steps[index].definitions, &e.steps[index].recipes.unknown),
            &gathered,
        );
        e.record(
            "runbook-step-passed",
            json!({ "step": step.id, "attempt": attempt, "covered": covered }),
        );
        // The next steps' baselines are walked outside the lock (a status is answered
        // meanwhile), within their budget, and stop when the run ends.
        let ready = e.ready();
        let (workspace, budget, runbook, store) = (
            e.context.workspace.clone(),
            e.context.budget,
            e.runbook.clone(),
            e.store.clone(),
        );
        drop(e);
        let baselines = take_baselines(
            &workspace,
            &budget,
            &runbook,
            &ready,
            (&approvals.closing, &approvals.spent),
            store.as_deref(),
        );
        let mut e = lock();
        e.open_with(baselines);
        let published = e.publish();
        let mut message = format!("step {} passed (attempt {attempt}).", step.id);
        for said in &verdicts {
            message.push_str(&format!("\n{said}"));
        }
        if let Err(why) = published {
            message.push_str(&format!(" (publishing the state failed: {why})"));
        }
        let opened = e.open_ids();
        if opened.is_empty() {
            message.push_str("\nNo step is open: the runbook is complete.");
        } else {
            message.push_str(&format!("\nOpen now: {}.", opened.join(", ")));
            // What the agent needs next, without waiting for the next prompt's orientation.
            for (next, s) in e.runbook.steps.iter().zip(&e.steps) {
                if s.status == Status::Open && next.id != step.id {
                    message.push_str(&format!(
                        "\nStep {} ({}): {}\nIt allows {}.",
                        next.id,
                        next.title,
                        next.instructions.trim(),
                        crate::runbook::policy::allows_text(next)
                    ));
                }
            }
        }
        return Answer {
            ok: true,
            message,
            state: Some(e.state_json()),
        };
    }
    if approvals.closing.load(std::sync::atomic::Ordering::SeqCst) {
        // The run ended during the wait: not a verdict. The step stays open (the run is
        // abandoned, and a later run continues it).
        e.record(
            "runbook-step-interrupted",
            json!({ "step": step.id, "attempt": attempt, "why": "the run ended while the step's evidence was being checked" }),
        );
        return Answer {
            ok: false,
            message: format!(
                "step {} not completed: the run ended while its evidence was being checked",
                step.id
            ),
            state: Some(e.state_json()),
        };
    }
    // Only a person's approval missing: not the work's failure, and not its attempt.
    if let Some(answer) = e.not_approved(index, &step, attempt, &gathered, &failures) {
        return answer;
    }
    let left = step.attempts().saturating_sub(attempt);
    let why = failures.join("\n");
    e.steps[index].last_verdict = Some("failed".into());
    let final_failure = left == 0;
    if final_failure {
        e.steps[index].status = Status::Failed;
        e.ending = Some(match step.on_fail() {
            OnFail::Abandon => Ending::Abandoned {
                step: step.id.to_string(),
                requested: None,
            },
            OnFail::Retry | OnFail::Block => Ending::Blocked {
                step: step.id.to_string(),
            },
        });
    }
    // What of the step's protected paths changed, named in the verdict's own record.
    let mut invariants_changed: Vec<&Value> = Vec::new();
    for change in gathered
        .iter()
        .filter(|r| r["kind"] == "files_unchanged" && r["held"] == false)
        .flat_map(|r| r["changed"].as_array().into_iter().flatten())
    {
        if invariants_changed.len() < FILES_RECORDED_MAX && !invariants_changed.contains(&change) {
            invariants_changed.push(change);
        }
    }
    e.record(
        "runbook-step-failed",
        json!({
            "step": step.id,
            "attempt": attempt,
            "attempts_left": left,
            "final": final_failure,
            "on_fail": step.on_fail().name(),
            "invariants_changed": invariants_changed,
        }),
    );
    let _ = e.publish();
    let tail = if final_failure {
        format!(
            "No attempt is left (on_fail = {}): the run stops; every further tool call is denied.",
            step.on_fail().name()
        )
    } else {
        format!(
            "{left} attempt(s) left; fix it and ask again (`/run/stepproof/stepproof step complete`, in the chat /step-complete)."
        )
    };
    Answer {
        ok: false,
        message: format!(
            "step {} NOT passed (attempt {attempt} of {}):\n{why}\n{tail}",
            step.id,
            step.attempts()
        ),
        state: Some(e.state_json()),
    }
}
