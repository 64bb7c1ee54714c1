//! A `complete` request judged: the step's evidence items checked in their order (cheap ones
//! first, the verifier last), the verdict recorded and the steps it opens.

use super::check_files::FILES_RECORDED_MAX;
use super::command::covered;
use super::freeze::freeze;
use super::invariants::{InvariantCheck, check_invariants, definitions_item, invariant_item};
use super::item::check_item;
use super::opening::take_baselines;
use super::verify::check_verifier;
use super::{Approvals, Ending, Engine, OUTPUT_TAIL_KEY, Status, refused};
use crate::runbook::client::Answer;
use crate::runbook::{Evidence, OnFail, Protected, ProtectedBy, Step};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

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
    // The attempt is counted before anything is checked; a refused request counts none.
    let attempt = match begin(&mut lock(engine), step, note, who) {
        Ok(attempt) => attempt,
        Err(refusal) => return refusal,
    };
    // With evidence commands, the agent stays frozen from the invariants' walk to the last
    // command's end: the commands run on the state the invariants were judged on.
    let (mut frozen, has_definitions) = Frozen::hold(engine, &attempt);
    // The step's invariants first: whatever changed its protected paths or what defines its
    // evidence commands (a tool the step allows, a build script, a recipe the agent rewrote),
    // the hook did not have to see it.
    let protected = attempt.step.protected_paths();
    let invariants = (!protected.is_empty() || has_definitions).then(|| {
        let held = frozen.held.as_ref();
        check_invariants(engine, approvals, attempt.index, &attempt.step, held)
    });
    let mut gathered = Gathered::default();
    // What the invariants' walk proves on its own: the step's deny rules held, and nothing
    // defining its evidence commands changed.
    judge_deny_rules(
        engine,
        &attempt,
        &protected,
        invariants.as_ref(),
        &mut gathered,
    );
    judge_definitions(engine, &attempt, invariants.as_ref(), &mut gathered);
    // Then the step's own items: the supervisor's evidence, approvals, model verifiers last.
    let judging = (run_id, invariants.as_ref());
    judge_items(
        engine,
        approvals,
        &attempt,
        judging,
        &mut frozen,
        &mut gathered,
    );
    frozen.thaw();
    let e = lock(engine);
    if gathered.failures.is_empty() {
        return passed(engine, approvals, e, &attempt, &gathered);
    }
    if approvals.closing.load(std::sync::atomic::Ordering::SeqCst) {
        return interrupted(e, &attempt);
    }
    // Only a person's approval missing: not the work's failure, and not its attempt.
    let mut e = e;
    if let Some(answer) = e.not_approved(
        attempt.index,
        &attempt.step,
        attempt.number,
        &gathered.records,
        &gathered.failures,
    ) {
        return answer;
    }
    failed(e, &attempt, &gathered)
}

/// The step a completion is for and which attempt this is.
struct Attempt {
    index: usize,
    step: Step,
    number: u32,
}

/// What the attempt's items gave so far: their records and command outputs (what a verifier is
/// shown), why those that failed did, and what verifiers and approvers said (for the answer).
#[derive(Default)]
struct Gathered {
    records: Vec<Value>,
    outputs: Vec<(String, String)>,
    failures: Vec<String>,
    verdicts: Vec<String>,
}

/// The agent's freeze while the step's evidence commands run.
struct Frozen {
    cgroup_dirs: Vec<PathBuf>,
    /// What freezing said; `None` when the step runs no command (nothing was frozen).
    held: Option<(bool, String)>,
    /// Frozen still: thawed before the first item that needs no frozen workspace.
    thaw: bool,
}

fn lock(engine: &Mutex<Engine>) -> MutexGuard<'_, Engine> {
    engine.lock().unwrap_or_else(|e| e.into_inner())
}

/// Which open step the request means (named, or the only one open), its attempt counted and
/// the request recorded; a refusal, recorded, when it names no open step.
fn begin(
    e: &mut Engine,
    step: Option<&str>,
    note: Option<String>,
    who: Value,
) -> Result<Attempt, Answer> {
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
        return Err(refused(&why));
    };
    e.steps[index].attempts += 1;
    let number = e.steps[index].attempts;
    let step = e.runbook.steps[index].clone();
    e.record_inside(
        "runbook-complete-requested",
        json!({ "step": step.id, "attempt": number, "max_attempts": step.attempts(), "note": note, "peer": who }),
    );
    Ok(Attempt {
        index,
        step,
        number,
    })
}

impl Frozen {
    /// Freezes the agent when the step has evidence commands; also says whether the step has
    /// definitions to watch (read under the same lock as the cgroups).
    fn hold(engine: &Mutex<Engine>, attempt: &Attempt) -> (Frozen, bool) {
        let (cgroup_dirs, no_freezer, has_definitions) = {
            let e = lock(engine);
            (
                e.context.cgroup_dirs.clone(),
                e.context.no_freezer.clone(),
                !e.steps[attempt.index].definitions.is_empty(),
            )
        };
        let held = attempt
            .step
            .evidence
            .iter()
            .any(|e| e.command.is_some())
            .then(|| freeze(&cgroup_dirs, true, no_freezer.as_deref()));
        let thaw = held.is_some();
        let frozen = Frozen {
            cgroup_dirs,
            held,
            thaw,
        };
        (frozen, has_definitions)
    }

    /// Thaws before an item that neither runs a command nor reads the workspace (an approval
    /// waits on a person, a verifier on a model: the agent is not kept frozen meanwhile).
    fn thaw_before(&mut self, item: &Evidence) {
        if item.command.is_none()
            && item.files_exist.is_none()
            && item.files_changed.is_none()
            && item.files_unchanged.is_none()
        {
            self.thaw();
        }
    }

    fn thaw(&mut self) {
        if self.thaw {
            freeze(&self.cgroup_dirs, false, None);
            self.thaw = false;
        }
    }
}

impl Gathered {
    /// One item's result: a command's output tail kept for the verifiers (never for the
    /// chain), its record in the chain with the step, attempt and item, its failure said.
    fn add(
        &mut self,
        engine: &Mutex<Engine>,
        attempt: &Attempt,
        item: Value,
        (held, mut record, why): (bool, Value, String),
    ) {
        let e = lock(engine);
        if let Some(output) = record
            .as_object_mut()
            .and_then(|r| r.remove(OUTPUT_TAIL_KEY))
        {
            self.outputs.push((
                crate::audit::text::command_line(
                    &serde_json::from_value::<Vec<String>>(record["run"].clone())
                        .unwrap_or_default(),
                ),
                output.as_str().unwrap_or_default().to_string(),
            ));
        }
        record["step"] = json!(attempt.step.id);
        record["attempt"] = json!(attempt.number);
        record["item"] = item;
        record["held"] = json!(held);
        self.records.push(record.clone());
        e.record("runbook-evidence", record);
        drop(e);
        if !held {
            self.failures.push(why);
        }
    }
}

/// The paths the step's deny rules protect, unchanged: one item for all of them.
fn judge_deny_rules(
    engine: &Mutex<Engine>,
    attempt: &Attempt,
    protected: &[Protected],
    invariants: Option<&InvariantCheck>,
    gathered: &mut Gathered,
) {
    let mut deny_rules: Vec<String> = Vec::new();
    let mut deny_globs: Vec<String> = Vec::new();
    for p in protected {
        if let ProtectedBy::DenyRule(rule) = &p.by {
            if !deny_rules.contains(rule) {
                deny_rules.push(rule.clone());
            }
            if !deny_globs.contains(&p.glob) {
                deny_globs.push(p.glob.clone());
            }
        }
    }
    if deny_rules.is_empty() {
        return;
    }
    let result = invariant_item(invariants, &deny_globs, Some(&deny_rules), |p| {
        matches!(p.by, ProtectedBy::DenyRule(_))
    });
    gathered.add(engine, attempt, json!("deny-rules"), result);
}

/// What defines the step's evidence commands, unchanged since the step opened.
fn judge_definitions(
    engine: &Mutex<Engine>,
    attempt: &Attempt,
    invariants: Option<&InvariantCheck>,
    gathered: &mut Gathered,
) {
    if let Some(check) = invariants.filter(|c| !c.definitions.is_empty()) {
        let result = definitions_item(check, &attempt.step);
        gathered.add(engine, attempt, json!("definitions"), result);
    }
}

/// The step's own items in their order: the supervisor's evidence first, model verifiers after
/// it (not started when that already failed: nothing a model says could pass), a person last —
/// shown the verifier's verdict with the rest, asked with the agent thawed, and not asked when
/// the work's own evidence did not hold.
fn judge_items(
    engine: &Arc<Mutex<Engine>>,
    approvals: &Arc<Approvals>,
    attempt: &Attempt,
    (run_id, invariants): (&str, Option<&InvariantCheck>),
    frozen: &mut Frozen,
    gathered: &mut Gathered,
) {
    let (verifier_items, other_items): (Vec<_>, Vec<_>) = attempt
        .step
        .evidence
        .iter()
        .enumerate()
        .partition(|(_, item)| item.verifier.is_some());
    let (approval_items, other_items): (Vec<_>, Vec<_>) = other_items
        .into_iter()
        .partition(|(_, item)| item.approval.is_some());
    for (n, item) in other_items
        .into_iter()
        .chain(verifier_items)
        .chain(approval_items)
    {
        frozen.thaw_before(item);
        let result = match &item.verifier {
            Some(verifier) if gathered.failures.is_empty() => {
                let (held, record, why, said) = check_verifier(
                    engine,
                    approvals,
                    (attempt.index, &attempt.step, attempt.number),
                    verifier.tier,
                    (&gathered.records, &gathered.outputs),
                );
                gathered.verdicts.push(said);
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
            None if item.approval.is_some() && !gathered.failures.is_empty() => (
                false,
                json!({ "kind": "approval", "approvers": item.approval.as_ref().map(|a| &a.approvers), "answer": null, "not_run": "other evidence of this attempt did not hold" }),
                "approval: not asked, the other evidence did not hold".to_string(),
            ),
            None => {
                let at = (attempt.index, &attempt.step, n);
                let held = frozen.held.as_ref();
                // What the person is shown while asked (`stepproof approvals`).
                let briefed =
                    item.approval.is_some() && super::brief::asks_a_person(engine, &attempt.step);
                if briefed {
                    super::brief::write_brief(
                        engine,
                        approvals,
                        run_id,
                        (attempt.index, &attempt.step, attempt.number),
                        (&gathered.records, &gathered.outputs),
                    );
                }
                let checked = check_item(engine, approvals, run_id, at, item, invariants, held);
                if briefed {
                    super::brief::remove_brief(engine, attempt.step.id.as_str());
                }
                if let Some(said) = approved_by(&checked) {
                    gathered.verdicts.push(said);
                }
                checked
            }
        };
        gathered.add(engine, attempt, json!(n), result);
    }
}

/// Who said yes to an approval item, for the agent's answer (a denial says why among the
/// failures).
fn approved_by((held, record, _): &(bool, Value, String)) -> Option<String> {
    if !*held || record["kind"] != "approval" {
        return None;
    }
    let from = record["from"].as_str().unwrap_or("a person");
    Some(match record["approver"].as_str() {
        _ if record["pre_approved"] == true => "approval: pre-approved (--approve)".to_string(),
        Some(who) => format!("approval: approved by {who} (from {from})"),
        None => format!("approval: approved (from {from})"),
    })
}

/// Every item held: the step passes, the steps it was waited on by open (their baselines
/// walked outside the lock, within their budget), and the agent is told what is open now.
fn passed(
    engine: &Mutex<Engine>,
    approvals: &Approvals,
    mut e: MutexGuard<'_, Engine>,
    attempt: &Attempt,
    gathered: &Gathered,
) -> Answer {
    let (index, step) = (attempt.index, &attempt.step);
    e.steps[index].status = Status::Passed;
    e.steps[index].passed_here = true;
    e.steps[index].approval_missing = None;
    e.steps[index].last_verdict = Some("passed".into());
    let covered = covered(
        step,
        (&e.steps[index].definitions, &e.steps[index].recipes.unknown),
        &gathered.records,
    );
    e.record(
        "runbook-step-passed",
        json!({ "step": step.id, "attempt": attempt.number, "covered": covered }),
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
    let mut e = lock(engine);
    e.open_with(baselines);
    let published = e.publish();
    let message = passed_message(&e, attempt, &gathered.verdicts, published);
    Answer {
        ok: true,
        message,
        state: Some(e.state_json()),
    }
}

/// The answer to a pass: what the verifiers and approvers said, and each step open now with
/// its instructions (what the agent needs next, without waiting for the next prompt).
fn passed_message(
    e: &Engine,
    attempt: &Attempt,
    verdicts: &[String],
    published: Result<(), String>,
) -> String {
    let step = &attempt.step;
    let mut message = format!("step {} passed (attempt {}).", step.id, attempt.number);
    for said in verdicts {
        message.push_str(&format!("\n{said}"));
    }
    if let Err(why) = published {
        message.push_str(&format!(" (publishing the state failed: {why})"));
    }
    let opened = e.open_ids();
    if opened.is_empty() {
        message.push_str("\nNo step is open: the runbook is complete.");
        return message;
    }
    message.push_str(&format!("\nOpen now: {}.", opened.join(", ")));
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
    message
}

/// The run ended during the wait: not a verdict. The step stays open (the run is abandoned,
/// and a later run continues it).
fn interrupted(e: MutexGuard<'_, Engine>, attempt: &Attempt) -> Answer {
    let step = &attempt.step;
    e.record(
        "runbook-step-interrupted",
        json!({ "step": step.id, "attempt": attempt.number, "why": "the run ended while the step's evidence was being checked" }),
    );
    Answer {
        ok: false,
        message: format!(
            "step {} not completed: the run ended while its evidence was being checked",
            step.id
        ),
        state: Some(e.state_json()),
    }
}

/// An item failed: the attempt is spent; the last one fails the step and ends the run as its
/// `on_fail` says. The agent is told why and what is left.
fn failed(mut e: MutexGuard<'_, Engine>, attempt: &Attempt, gathered: &Gathered) -> Answer {
    let (index, step) = (attempt.index, &attempt.step);
    let left = step.attempts().saturating_sub(attempt.number);
    let why = gathered.failures.join("\n");
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
    e.record(
        "runbook-step-failed",
        json!({
            "step": step.id,
            "attempt": attempt.number,
            "attempts_left": left,
            "final": final_failure,
            "on_fail": step.on_fail().name(),
            "invariants_changed": invariants_changed(&gathered.records),
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
            "step {} NOT passed (attempt {} of {}):\n{why}\n{tail}",
            step.id,
            attempt.number,
            step.attempts()
        ),
        state: Some(e.state_json()),
    }
}

/// What of the step's protected paths changed, named in the verdict's own record (at most
/// [`FILES_RECORDED_MAX`], each once).
fn invariants_changed(records: &[Value]) -> Vec<&Value> {
    let mut changed: Vec<&Value> = Vec::new();
    for change in records
        .iter()
        .filter(|r| r["kind"] == "files_unchanged" && r["held"] == false)
        .flat_map(|r| r["changed"].as_array().into_iter().flatten())
    {
        if changed.len() < FILES_RECORDED_MAX && !changed.contains(&change) {
            changed.push(change);
        }
    }
    changed
}
