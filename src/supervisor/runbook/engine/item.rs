//! One evidence item checked at completion: the dispatch over its kind (files, command,
//! approval, invariants), each kind's verdict and the record it leaves.

use super::approval::give_answer;
use super::check_files::{
    FILES_RECORDED_MAX, attributions, confirm_gone, exceeded_item, files_digest, item_globs,
    recorded_files, walk_item,
};
use super::command::{build_state_words, evidence_view, run_command_evidence, tail};
use super::invariants::{InvariantCheck, invariant_item};
use super::{Approvals, Engine, OUTPUT_SHOWN_BYTES, OUTPUT_TAIL_KEY};
use crate::audit::sink::AuditSink;
use crate::runbook::Evidence;
use crate::runbook::ProtectedBy;
use crate::runbook::Step;
use crate::supervisor::runbook::files::IgnoreRules;
use crate::supervisor::runbook::files::glob_matches;
use serde_json::Value;
use serde_json::json;
use sha2::Digest;
use sha2::Sha256;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use std::time::Instant;

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
    let lock = || engine.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(files) = &item.files_exist {
        let include_ignored = files.include_ignored();
        // The ignore rules as the step opened: a file the agent made ignored since, or an
        // ignored build artefact the glob happens to name, does not satisfy it.
        let (rules, unread) = {
            let e = lock();
            let unread = e.steps[index]
                .rules_unread
                .iter()
                .find(|(glob, _)| files.paths.contains(glob))
                .map(|(_, exceeded)| exceeded.clone());
            (e.steps[index].ignore.clone(), unread)
        };
        let rules = match unread.map_or(rules, Err) {
            Ok(rules) => rules,
            Err(exceeded) if !include_ignored => {
                let mut failed = exceeded_item("files_exist", &files.paths, &exceeded);
                failed.2 = format!(
                    "files_exist: the workspace's ignore rules could not be read when the step opened: {}",
                    exceeded.sentence()
                );
                return failed;
            }
            Err(_) => IgnoreRules::none(),
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
        return (
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
        );
    }
    if let Some(files) = &item.files_changed {
        let (baseline, baseline_exceeded, rules) = {
            let e = lock();
            (
                e.steps[index].baseline.clone(),
                e.steps[index].baseline_exceeded.clone(),
                e.steps[index].ignore.clone(),
            )
        };
        let include_ignored = files.include_ignored();
        let rules = match rules {
            Ok(rules) => rules,
            Err(exceeded) if !include_ignored => {
                let mut failed = exceeded_item("files_changed", &files.paths, &exceeded);
                failed.2 = format!(
                    "files_changed: the workspace's ignore rules could not be read when the step opened: {}",
                    exceeded.sentence()
                );
                return failed;
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
            return failed;
        }
        let globs = item_globs(&files.paths, include_ignored);
        let (walked, ledger) = match walk_item(engine, approvals, &globs, Some(&rules)) {
            Ok(walked) => walked,
            Err(exceeded) => return exceeded_item("files_changed", &files.paths, &exceeded),
        };
        // What counts, on both sides: what the glob names and (unless the item says) the rules
        // as they were when the step opened do not ignore.
        let counts = |glob: &str, path: &str| {
            glob_matches(glob, path) && (include_ignored || !rules.path_ignored(path, false))
        };
        let mut unchanged = Vec::new();
        let mut changed = Vec::new();
        let mut gone = Vec::new();
        let mut current = BTreeMap::new();
        for (glob, now) in files.paths.iter().zip(walked) {
            current.extend(now.clone());
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
            gone.extend(missing);
            if glob_changed.is_empty() {
                unchanged.push(glob.clone());
            }
            changed.extend(glob_changed);
        }
        // A baseline file the walk did not name counts only when a lookup confirms it is no
        // longer a regular file there: a walk that missed it never forges a change.
        if let Err(exceeded) = confirm_gone(engine, approvals, &gone) {
            return exceeded_item("files_changed", &files.paths, &exceeded);
        }
        changed.sort();
        changed.dedup();
        let held = unchanged.is_empty();
        let attributed_to = attributions(&ledger, step.id.as_str(), &files.paths, &current);
        return (
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
        );
    }
    if let Some(files) = &item.files_unchanged {
        return invariant_item(invariants, &files.paths, None, |p| {
            p.by == ProtectedBy::Item(n)
        });
    }
    if let Some(command) = &item.command {
        let (context, n) = {
            let mut e = lock();
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
        // The evidence sandbox's own closing line (its log is in the chain record) is not the
        // command's output.
        let shown = own_lines_out(tail(&ran.output, OUTPUT_SHOWN_BYTES));
        let shown = if shown.trim().is_empty() {
            "(none)\n".to_string()
        } else {
            shown
        };
        let why = format!(
            "command `{}` {} (wanted exit {}); its output (last {} bytes):\n{}",
            crate::audit::text::command_line(&command.run),
            match ran.exit_code {
                Some(code) => format!("exited {code}"),
                None => format!("did not finish: {}", ran.error.clone().unwrap_or_default()),
            },
            command.exit_code.unwrap_or(0),
            OUTPUT_SHOWN_BYTES,
            shown
        );
        return (
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
        );
    }
    if let Some(approval) = &item.approval {
        let (ci, pre, webhook) = {
            let e = lock();
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
        {
            let mut e = lock();
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
                .as_ref()
                .map(|w| format!("; the webhook {} is asked too", w.url()))
                .unwrap_or_default()
        );
        *approvals.waiting.lock().unwrap_or_else(|e| e.into_inner()) = Some(step.id.to_string());
        // The agent's request is answered now; the verdict reaches it as a notice.
        approvals.began_waiting(
            step.id.as_str(),
            &approval.approvers,
            &approval.deadline.render(),
        );
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut asking = None;
        if let Some(webhook) = webhook {
            let (question, audit) = {
                let e = lock();
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
                Arc::clone(&stop),
                step.id.to_string(),
            );
            asking = Some(crate::supervisor::runbook::webhook::ask(
                webhook,
                question,
                audit,
                Arc::clone(&stop),
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
            ));
        }
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
        // Under the answers' lock: no answer can arrive for this wait once it is over.
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        *approvals.waiting.lock().unwrap_or_else(|e| e.into_inner()) = None;
        drop(answers);
        // The webhook's last records (a poll in flight ends within its timeout) come before the
        // step's evidence record.
        if let Some(asking) = asking {
            let _ = asking.join();
        }
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
        return (
            held,
            json!({ "kind": "approval", "approvers": approval.approvers, "answer": by, "from": detail["from"], "approver": detail["approver"], "nonce": detail["nonce"] }),
            why,
        );
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

/// A command's output without the evidence sandbox's own closing line (its log is in the chain
/// record; the line names a host path), for the agent's answer and the verifiers alike.
fn own_lines_out(output: &[u8]) -> String {
    String::from_utf8_lossy(output)
        .lines()
        .filter(|l| !l.starts_with("stepproof-run: audit log "))
        .map(|l| format!("{l}\n"))
        .collect()
}
