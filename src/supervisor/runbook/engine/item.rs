//! One evidence item checked at completion: the dispatch over its kind (files, command,
//! approval, invariants), each kind's verdict and the record it leaves.

use super::approval::give_answer;
use super::check_files::{
    FILES_RECORDED_MAX, attributions, confirm_gone, exceeded_item, files_digest, item_globs,
    recorded_files, walk_item,
};
use super::command::{CommandRun, build_state_words, evidence_view, run_command_evidence, tail};
use super::invariants::{InvariantCheck, invariant_item};
use super::{Approvals, Engine, GivenAnswer, OUTPUT_SHOWN_BYTES, OUTPUT_TAIL_KEY};
use crate::audit::sink::AuditSink;
use crate::runbook::ProtectedBy;
use crate::runbook::Step;
use crate::runbook::{ApprovalEvidence, ChangeEvidence, CommandEvidence, Evidence, FilesEvidence};
use crate::supervisor::runbook::files::IgnoreRules;
use crate::supervisor::runbook::files::glob_matches;
use crate::supervisor::runbook::webhook::Webhook;
use serde_json::Value;
use serde_json::json;
use sha2::Digest;
use sha2::Sha256;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;
use std::time::Instant;

/// What an item says: whether it held, its record, and why not.
type Judged = (bool, Value, String);

fn lock(engine: &Mutex<Engine>) -> MutexGuard<'_, Engine> {
    engine.lock().unwrap_or_else(|e| e.into_inner())
}

/// One evidence item (the `n`th of its step at `index`): whether it held, its record, and why
/// not. `held`: the agent is frozen already (commands run without thawing it).
pub(super) fn check_item(
    engine: &Arc<Mutex<Engine>>,
    approvals: &Arc<Approvals>,
    run_id: &str,
    (index, step, n): (usize, &Step, usize),
    item: &Evidence,
    invariants: Option<&InvariantCheck>,
    held: Option<&(bool, String)>,
) -> (bool, Value, String) {
    // An item is of one kind (`runbook check` refuses more); the kinds are tried in one order.
    if let Some(files) = &item.files_exist {
        return files_exist(engine, approvals, (index, step), files);
    }
    if let Some(files) = &item.files_changed {
        return files_changed(engine, approvals, (index, step), files);
    }
    if let Some(files) = &item.files_unchanged {
        // Judged on the invariants' walk, taken before any item.
        return invariant_item(invariants, &files.paths, None, |p| {
            p.by == ProtectedBy::Item(n)
        });
    }
    if let Some(command) = &item.command {
        return command_item(engine, approvals, step, command, (invariants, held));
    }
    if let Some(approval) = &item.approval {
        return approval_item(engine, approvals, run_id, (index, step), approval);
    }
    (
        false,
        json!({ "kind": "unsupported", "kinds": item.kinds() }),
        format!(
            "evidence of kind {} is not supported by this release",
            item.kinds().join(", ")
        ),
    )
}

/// `files_exist`: every glob names at least one regular file now (files the repository
/// ignored when the step opened do not count, unless the item says).
fn files_exist(
    engine: &Arc<Mutex<Engine>>,
    approvals: &Approvals,
    (index, step): (usize, &Step),
    files: &FilesEvidence,
) -> Judged {
    let include_ignored = files.include_ignored();
    let rules = match exist_rules(engine, index, files, include_ignored) {
        Ok(rules) => rules,
        Err(failed) => return failed,
    };
    let globs = item_globs(&files.paths, include_ignored);
    let (walked, ledger) = match walk_item(engine, approvals, &globs, Some(&rules)) {
        Ok(walked) => walked,
        Err(exceeded) => return exceeded_item("files_exist", &files.paths, &exceeded),
    };
    let mut missing = Vec::new();
    let mut found = BTreeMap::new();
    for (glob, hits) in files.paths.iter().zip(walked) {
        if hits.is_empty() {
            missing.push(glob.clone());
        }
        found.extend(hits);
    }
    let held = missing.is_empty();
    let attributed_to = attributions(&ledger, step.id.as_str(), &files.paths, &found);
    (
        held,
        json!({
            "kind": "files_exist",
            "paths": files.paths,
            "include_ignored": include_ignored,
            "ignore_rules_sha256": (!include_ignored).then(|| rules.digest()),
            "found": recorded_files(&found),
            "found_count": found.len(),
            "found_sha256": files_digest(&found),
            "missing": missing,
            "attributed_to": attributed_to,
        }),
        format!(
            "files_exist: nothing matches {}{}",
            missing.join(", "),
            if include_ignored {
                ""
            } else {
                " (files the repository ignores, as its rules were when the step opened, do not count)"
            }
        ),
    )
}

/// The ignore rules as the step opened, for `files_exist`: a file the agent made ignored
/// since, or an ignored build artefact the glob happens to name, does not satisfy it. Rules
/// that could not be read then fail the item, unless it counts ignored files anyway.
fn exist_rules(
    engine: &Mutex<Engine>,
    index: usize,
    files: &FilesEvidence,
    include_ignored: bool,
) -> Result<IgnoreRules, Judged> {
    let (rules, unread) = {
        let e = lock(engine);
        let unread = e.steps[index]
            .rules_unread
            .iter()
            .find(|(glob, _)| files.paths.contains(glob))
            .map(|(_, exceeded)| exceeded.clone());
        (e.steps[index].ignore.clone(), unread)
    };
    match unread.map_or(rules, Err) {
        Ok(rules) => Ok(rules),
        Err(exceeded) if !include_ignored => {
            let mut failed = exceeded_item("files_exist", &files.paths, &exceeded);
            failed.2 = format!(
                "files_exist: the workspace's ignore rules could not be read when the step opened: {}",
                exceeded.sentence()
            );
            Err(failed)
        }
        Err(_) => Ok(IgnoreRules::none()),
    }
}

/// `files_changed`: under every glob, some file differs from the step's baseline (by the
/// supervisor's hashes; a removal only when a lookup confirms it).
fn files_changed(
    engine: &Arc<Mutex<Engine>>,
    approvals: &Approvals,
    (index, step): (usize, &Step),
    files: &ChangeEvidence,
) -> Judged {
    let include_ignored = files.include_ignored();
    let (baseline, rules) = match changed_inputs(engine, index, files, include_ignored) {
        Ok(inputs) => inputs,
        Err(failed) => return failed,
    };
    let globs = item_globs(&files.paths, include_ignored);
    let (walked, ledger) = match walk_item(engine, approvals, &globs, Some(&rules)) {
        Ok(walked) => walked,
        Err(exceeded) => return exceeded_item("files_changed", &files.paths, &exceeded),
    };
    let Compared {
        unchanged,
        mut changed,
        gone,
        current,
    } = compare_with_baseline(&baseline, &rules, include_ignored, &files.paths, walked);
    // A baseline file the walk did not name counts only when a lookup confirms it is no
    // longer a regular file there: a walk that missed it never forges a change.
    if let Err(exceeded) = confirm_gone(engine, approvals, &gone) {
        return exceeded_item("files_changed", &files.paths, &exceeded);
    }
    changed.sort();
    changed.dedup();
    let held = unchanged.is_empty();
    let attributed_to = attributions(&ledger, step.id.as_str(), &files.paths, &current);
    (
        held,
        json!({
            "kind": "files_changed",
            "paths": files.paths,
            "include_ignored": include_ignored,
            "ignore_rules_sha256": (!include_ignored).then(|| rules.digest()),
            "changed": changed.iter().take(FILES_RECORDED_MAX).collect::<Vec<_>>(),
            "changed_count": changed.len(),
            "current_sha256": files_digest(&current),
            "unchanged": unchanged,
            "attributed_to": attributed_to,
        }),
        format!(
            "files_changed: nothing under {} changed since the step opened (by the supervisor's hashes{})",
            unchanged.join(", "),
            if include_ignored {
                ""
            } else {
                "; files the repository ignores, as its rules were when the step opened, do not count"
            }
        ),
    )
}

/// What `files_changed` compares against, as the step opened: its baseline and ignore rules.
/// Rules that could not be read then fail the item (unless every file counts), and so does a
/// baseline that could not be taken.
fn changed_inputs(
    engine: &Mutex<Engine>,
    index: usize,
    files: &ChangeEvidence,
    include_ignored: bool,
) -> Result<(BTreeMap<String, String>, IgnoreRules), Judged> {
    let (baseline, baseline_exceeded, rules) = {
        let e = lock(engine);
        (
            e.steps[index].baseline.clone(),
            e.steps[index].baseline_exceeded.clone(),
            e.steps[index].ignore.clone(),
        )
    };
    let rules = match rules {
        Ok(rules) => rules,
        Err(exceeded) if !include_ignored => {
            let mut failed = exceeded_item("files_changed", &files.paths, &exceeded);
            failed.2 = format!(
                "files_changed: the workspace's ignore rules could not be read when the step opened: {}",
                exceeded.sentence()
            );
            return Err(failed);
        }
        // Not needed: every file counts.
        Err(_) => IgnoreRules::none(),
    };
    if let Some(exceeded) = baseline_exceeded {
        let mut failed = exceeded_item("files_changed", &files.paths, &exceeded);
        failed.2 = format!(
            "files_changed: the step's baseline could not be taken when it opened: {}",
            exceeded.sentence()
        );
        return Err(failed);
    }
    Ok((baseline, rules))
}

/// A `files_changed` item's globs against the baseline: which globs saw no change, what
/// changed, what the walk no longer named (to be confirmed gone), and the files now.
struct Compared {
    unchanged: Vec<String>,
    changed: Vec<String>,
    gone: Vec<String>,
    current: BTreeMap<String, String>,
}

/// Compares each glob's files now with the baseline. What counts, on both sides: what the
/// glob names and (unless the item says) the rules as they were when the step opened do not
/// ignore.
fn compare_with_baseline(
    baseline: &BTreeMap<String, String>,
    rules: &IgnoreRules,
    include_ignored: bool,
    globs: &[String],
    walked: Vec<BTreeMap<String, String>>,
) -> Compared {
    let counts = |glob: &str, path: &str| {
        glob_matches(glob, path) && (include_ignored || !rules.path_ignored(path, false))
    };
    let mut compared = Compared {
        unchanged: Vec::new(),
        changed: Vec::new(),
        gone: Vec::new(),
        current: BTreeMap::new(),
    };
    for (glob, now) in globs.iter().zip(walked) {
        compared.current.extend(now.clone());
        let mut glob_changed: Vec<String> = now
            .iter()
            .filter(|(p, h)| baseline.get(*p) != Some(*h))
            .map(|(p, _)| p.clone())
            .collect();
        let missing: Vec<String> = baseline
            .keys()
            .filter(|p| counts(glob, p) && !now.contains_key(*p))
            .cloned()
            .collect();
        glob_changed.extend(missing.iter().cloned());
        compared.gone.extend(missing);
        if glob_changed.is_empty() {
            compared.unchanged.push(glob.clone());
        }
        compared.changed.extend(glob_changed);
    }
    compared
}

/// `command`: run in a fresh evidence sandbox on the workspace as it is now; it holds when it
/// exits as the item wants. Its output tail goes to the verifiers, never to the chain.
fn command_item(
    engine: &Mutex<Engine>,
    approvals: &Approvals,
    step: &Step,
    command: &CommandEvidence,
    (invariants, held): (Option<&InvariantCheck>, Option<&(bool, String)>),
) -> Judged {
    let (context, n) = {
        let mut e = lock(engine);
        e.evidence_runs += 1;
        (e.context.clone(), e.evidence_runs)
    };
    let view = evidence_view(step, command, invariants, &context.workspace);
    let ran = run_command_evidence(
        &context,
        step,
        command,
        (n, &view),
        &approvals.closing,
        held,
    );
    let held = ran.exit_code == Some(command.exit_code.unwrap_or(0));
    let why = command_why(command, &ran);
    (
        held,
        json!({
            OUTPUT_TAIL_KEY: own_lines_out(tail(&ran.output, crate::supervisor::runbook::verifier::OUTPUT_TAIL_SHOWN * 2)),
            "kind": "command",
            "run": command.run,
            "exit_code": ran.exit_code,
            "expected_exit_code": command.exit_code.unwrap_or(0),
            "duration_ms": ran.duration.as_millis() as u64,
            "output_sha256": format!("sha256:{}", hex::encode(Sha256::digest(&ran.output))),
            "output_bytes": ran.output.len(),
            "network": command.network.unwrap_or(false),
            "workspace": "overlay, upper layer thrown away",
            "read_only": view.read_only,
            "hidden_count": view.hidden.len(),
            "build_state": build_state_words(&view, command),
            "frozen": ran.frozen.0,
            "agent_frozen": ran.frozen.1,
            "audit_log": crate::audit::text::path(&ran.audit_log),
            "error": ran.error,
        }),
        why,
    )
}

/// Why a command item failed, for the agent: how it ended and the end of its output (without
/// the evidence sandbox's own closing line: its log is in the chain record).
fn command_why(command: &CommandEvidence, ran: &CommandRun) -> String {
    let shown = own_lines_out(tail(&ran.output, OUTPUT_SHOWN_BYTES));
    let shown = if shown.trim().is_empty() {
        "(none)\n".to_string()
    } else {
        shown
    };
    format!(
        "command `{}` {} (wanted exit {}); its output (last {} bytes):\n{}",
        crate::audit::text::command_line(&command.run),
        match ran.exit_code {
            Some(code) => format!("exited {code}"),
            None => format!("did not finish: {}", ran.error.clone().unwrap_or_default()),
        },
        command.exit_code.unwrap_or(0),
        OUTPUT_SHOWN_BYTES,
        shown
    )
}

/// `approval`: a person says yes before the deadline, at a host terminal or through the
/// webhook; the engine stays unlocked meanwhile (the status stays answerable).
fn approval_item(
    engine: &Arc<Mutex<Engine>>,
    approvals: &Arc<Approvals>,
    run_id: &str,
    (index, step): (usize, &Step),
    approval: &ApprovalEvidence,
) -> Judged {
    let (ci, pre, webhook) = {
        let e = lock(engine);
        (
            e.context.ci,
            e.context.pre_approved.iter().any(|s| s == step.id.as_str()),
            e.context.approval_webhook.clone(),
        )
    };
    // `--ci` asks nobody but a webhook; a pre-approval needs no asking.
    if pre || (ci && webhook.is_none()) {
        let held = pre;
        return (
            held,
            json!({ "kind": "approval", "approvers": approval.approvers, "ci": ci, "pre_approved": pre, "by": if pre { "--approve" } else { "nobody" } }),
            "approval: denied in --ci without pre-approval (`stepproof-run --ci --approve STEP`)"
                .to_string(),
        );
    }
    let deadline = Instant::now() + Duration::from_secs(approval.deadline.seconds);
    announce_approval(engine, index, run_id, step, approval, webhook.as_ref());
    *approvals.waiting.lock().unwrap_or_else(|e| e.into_inner()) = Some(step.id.to_string());
    // The agent's request is answered now; the verdict reaches it as a notice.
    approvals.began_waiting(
        step.id.as_str(),
        &approval.approvers,
        &approval.deadline.render(),
    );
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let asking = webhook
        .map(|webhook| ask_webhook(engine, approvals, (run_id, step, approval), webhook, &stop));
    let answer = wait_for_answer(approvals, step, deadline, &stop);
    // The webhook's last records (a poll in flight ends within its timeout) come before the
    // step's evidence record.
    if let Some(asking) = asking {
        let _ = asking.join();
    }
    approval_verdict(approvals, approval, answer)
}

/// The request recorded (the step marked as waiting for a person) and said at the host's
/// terminal, with the commands that answer it.
fn announce_approval(
    engine: &Mutex<Engine>,
    index: usize,
    run_id: &str,
    step: &Step,
    approval: &ApprovalEvidence,
    webhook: Option<&Arc<Webhook>>,
) {
    {
        let mut e = lock(engine);
        e.steps[index].approval_missing = Some(super::not_approved::Missing::Pending);
        let _ = e.publish();
        e.record(
            "runbook-approval-requested",
            json!({ "step": step.id, "approvers": approval.approvers, "deadline": approval.deadline.render() }),
        );
    }
    crate::say!(
        "stepproof-run: step {} waits for approval by {} (deadline {}): `stepproof approve {run_id} {}` or `stepproof deny {run_id} {} --reason …`{}",
        step.id,
        approval.approvers,
        approval.deadline.render(),
        step.id,
        step.id,
        webhook
            .map(|w| format!("; the webhook {} is asked too", w.url()))
            .unwrap_or_default()
    );
}

/// The webhook asked on a thread of its own; its verdict is given like a terminal's answer,
/// and `stop` ends its polling once the wait is over.
fn ask_webhook(
    engine: &Arc<Mutex<Engine>>,
    approvals: &Arc<Approvals>,
    (run_id, step, approval): (&str, &Step, &ApprovalEvidence),
    webhook: Arc<Webhook>,
    stop: &Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<()> {
    let (question, audit) = {
        let e = lock(engine);
        (
            crate::supervisor::runbook::webhook::Question {
                run: run_id.to_string(),
                step: step.id.to_string(),
                step_title: step.title.clone(),
                runbook: e.runbook.id.to_string(),
                runbook_hash: e.hash.clone(),
                approvers: approval.approvers.clone(),
                deadline: Duration::from_secs(approval.deadline.seconds),
            },
            e.audit.as_ref().map(AuditSink::clone_handle),
        )
    };
    let (engine, approvals, stop_seen, id) = (
        Arc::clone(engine),
        Arc::clone(approvals),
        Arc::clone(stop),
        step.id.to_string(),
    );
    crate::supervisor::runbook::webhook::ask(
        webhook,
        question,
        audit,
        Arc::clone(stop),
        move |verdict| {
            let answer = if verdict.approved {
                Ok(())
            } else {
                Err(verdict
                    .reason
                    .clone()
                    .unwrap_or_else(|| "denied at the webhook".into()))
            };
            give_answer(
                &engine,
                &approvals,
                &id,
                answer,
                verdict.detail,
                Some(&stop_seen),
            )
        },
    )
}

/// Waits for the step's answer until the deadline or the run's end. The wait is closed under
/// the answers' lock: no answer can arrive for it once it is over.
fn wait_for_answer(
    approvals: &Approvals,
    step: &Step,
    deadline: Instant,
    stop: &std::sync::atomic::AtomicBool,
) -> Option<GivenAnswer> {
    let mut answers = approvals.answers.lock().unwrap_or_else(|e| e.into_inner());
    let answer = loop {
        if let Some(answer) = answers.remove(step.id.as_str()) {
            break Some(answer);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || approvals.closing.load(std::sync::atomic::Ordering::SeqCst) {
            break None;
        }
        answers = approvals
            .arrived
            .wait_timeout(answers, left)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    };
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    *approvals.waiting.lock().unwrap_or_else(|e| e.into_inner()) = None;
    drop(answers);
    answer
}

/// The approval item's verdict from the answer: approved, denied with its reason, or no
/// answer (the run ended, or the deadline passed): denied.
fn approval_verdict(
    approvals: &Approvals,
    approval: &ApprovalEvidence,
    answer: Option<GivenAnswer>,
) -> Judged {
    let detail = answer
        .as_ref()
        .map(|(_, d)| d.clone())
        .unwrap_or(Value::Null);
    let (held, by, why) = match answer.map(|(a, _)| a) {
        Some(Ok(())) => (true, "approved", String::new()),
        Some(Err(reason)) => (false, "denied", format!("approval: denied: {reason}")),
        None if approvals.closing.load(std::sync::atomic::Ordering::SeqCst) => (
            false,
            "run-ended",
            "approval: the run ended before an answer: denied".to_string(),
        ),
        None => (
            false,
            "deadline",
            format!(
                "approval: no answer before the deadline ({}): denied",
                approval.deadline.render()
            ),
        ),
    };
    (
        held,
        json!({ "kind": "approval", "approvers": approval.approvers, "answer": by, "from": detail["from"], "approver": detail["approver"], "nonce": detail["nonce"] }),
        why,
    )
}

/// A command's output without the evidence sandbox's own closing line (its log is in the chain
/// record; the line names a host path), for the agent's answer and the verifiers alike.
fn own_lines_out(output: &[u8]) -> String {
    String::from_utf8_lossy(output)
        .lines()
        .filter(|l| !l.starts_with("stepproof-run: audit log "))
        .map(|l| format!("{l}\n"))
        .collect()
}
