//! What a person is shown before answering an approval: the step's diff since it opened
//! (bounded, from the step-open content store), each evidence item's verdict and its output's
//! tail, the verifier's verdict and reasons. Written to `approvals/STEP.json` in the run's
//! directory (0600, the supervisor's; no sandbox can reach it) when the person is asked, and
//! removed when the wait ends: `stepproof approvals` lists the files of live runs.

use super::{Approvals, Engine};
use crate::runbook::Step;
use serde_json::{Value, json};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The briefs' directory in the run's directory.
pub const BRIEFS_DIR: &str = "approvals";
/// The diff a person is shown: at most this many bytes (the rest is named, not shown).
pub const BRIEF_DIFF_MAX: usize = 24 << 10;
/// Each output tail: its last this many bytes.
pub const BRIEF_TAIL_MAX: usize = 2 << 10;

fn brief_path(run_dir: &Path, step: &str) -> PathBuf {
    run_dir.join(BRIEFS_DIR).join(format!("{step}.json"))
}

/// The last `max` bytes of `text`, cut at a character boundary.
fn tail(text: &str, max: usize) -> &str {
    let mut start = text.len().saturating_sub(max);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// Writes the brief of `step`'s approval (the other evidence of this attempt held: `gathered`,
/// the command outputs' tails in `outputs`). Failing to write it costs the person the detail,
/// never the run: said on the terminal, and the approval is asked regardless.
pub(super) fn write_brief(
    engine: &Arc<Mutex<Engine>>,
    approvals: &Arc<Approvals>,
    run_id: &str,
    (index, step, attempt): (usize, &Step, u32),
    (gathered, outputs): (&[Value], &[(String, String)]),
) {
    let lock = || engine.lock().unwrap_or_else(|e| e.into_inner());
    let (context, base, store, runbook_id, runbook_title) = {
        let e = lock();
        (
            e.context.clone(),
            e.diff_base(index),
            e.store.clone(),
            e.runbook.id.to_string(),
            e.runbook.title.clone(),
        )
    };
    // The same walk a verifier's diff takes, outside the engine's lock and within its budget.
    let diff = match (base, store) {
        (Ok(base), Some(store)) => super::opening::diff_since(&store, &context, &approvals.closing, &base)
            .map(|d| {
                let (text, masked) = crate::supervisor::runbook::masking::mask(&d.text);
                let shown = first_bytes(&text, BRIEF_DIFF_MAX);
                json!({
                    "since": format!("step {} opened", base.step),
                    "files_changed": d.changed,
                    "text": shown,
                    "truncated": shown.len() < text.len(),
                    "not_shown": d.not_shown,
                    "masked_tokens": masked,
                })
            })
            .unwrap_or_else(|e| json!({ "error": format!("the walk of the workspace did not finish ({})", e.sentence()) })),
        (Err(why), _) => json!({ "error": why }),
        (_, None) => json!({ "error": "the runbook's openings were not kept" }),
    };
    let approval = step.evidence.iter().find_map(|e| e.approval.as_ref());
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let deadline_ms = approval.map_or(0, |a| now_ms + a.deadline.seconds * 1000);
    let mut commands = outputs.iter();
    let evidence: Vec<Value> = gathered
        .iter()
        .filter(|r| r["kind"] != "verifier")
        .map(|r| {
            let mut as_logged = r.clone();
            as_logged["body_kind"] = r["kind"].clone();
            let output_tail = (r["kind"] == "command")
                .then(|| commands.next())
                .flatten()
                .map(|(_, out)| {
                    crate::supervisor::runbook::masking::mask(tail(out, BRIEF_TAIL_MAX)).0
                });
            json!({
                "item": r["item"],
                "kind": r["kind"],
                "held": r["held"],
                "summary": crate::audit::runbook_steps::evidence_text(&as_logged),
                "output_tail": output_tail,
            })
        })
        .collect();
    let verifier: Vec<Value> = gathered
        .iter()
        .filter(|r| r["kind"] == "verifier")
        .map(|r| {
            json!({
                "tier": r["tier"],
                "verdict": r["verdict"],
                "model": r["model_used"].as_str().or(r["model"].as_str()),
                "reasons": r["reasons"],
            })
        })
        .collect();
    // The changed files' names the items recorded (a notification posts them only if asked).
    let changed_files: Vec<Value> = gathered
        .iter()
        .filter(|r| r["kind"] == "files_changed")
        .flat_map(|r| r["changed"].as_array().cloned().unwrap_or_default())
        .collect();
    let brief = json!({
        "run": run_id,
        "run_dir": context.run_dir,
        "workspace": context.workspace,
        "runbook": runbook_id,
        "runbook_title": runbook_title,
        "step": step.id,
        "step_title": step.title,
        "attempt": attempt,
        "approvers": approval.map(|a| a.approvers.clone()),
        "deadline": approval.map(|a| a.deadline.render()),
        "requested_at_ms": now_ms,
        "deadline_at_ms": deadline_ms,
        "approve": format!("stepproof approve {run_id} {}", step.id),
        "deny": format!("stepproof deny {run_id} {} --reason …", step.id),
        "evidence": evidence,
        "verifier": verifier,
        "diff": diff,
        "changed_files": changed_files,
    });
    if let Err(why) = write_private(&brief_path(&context.run_dir, step.id.as_str()), &brief) {
        crate::say!("stepproof-run: runbook: writing what the approver is shown: {why}");
    }
    // People are told something waits (a summary by allow-list), on a thread of its own.
    if let Some(notify) = &context.notify {
        notify.post(brief);
    }
}

/// The first `max` bytes of `text`, cut at a character boundary.
fn first_bytes(text: &str, max: usize) -> String {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

fn write_private(path: &Path, brief: &Value) -> Result<(), String> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let tmp = path.with_extension("json.tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)
        .map_err(|e| format!("writing {}: {e}", tmp.display()))?;
    let bytes = serde_json::to_vec_pretty(brief).map_err(|e| e.to_string())?;
    file.write_all(&bytes)
        .map_err(|e| format!("writing {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("renaming into place {}: {e}", path.display()))
}

/// Whether completing `step` asks a person (not pre-approved, and not `--ci` without a
/// webhook): only then is a brief written.
pub(super) fn asks_a_person(engine: &Arc<Mutex<Engine>>, step: &Step) -> bool {
    let e = engine.lock().unwrap_or_else(|e| e.into_inner());
    let pre = e.context.pre_approved.iter().any(|s| s == step.id.as_str());
    !(pre || (e.context.ci && e.context.approval_webhook.is_none()))
}

/// The wait is over (answered, out of time, the run ended): the brief goes.
pub(super) fn remove_brief(engine: &Arc<Mutex<Engine>>, step: &str) {
    let run_dir = engine
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .context
        .run_dir
        .clone();
    let path = brief_path(&run_dir, step);
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => crate::say!("stepproof-run: runbook: removing {}: {e}", path.display()),
    }
}
