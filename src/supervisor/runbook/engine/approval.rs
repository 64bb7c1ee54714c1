//! The approval item's answers: a person's at `approve.sock`, or the webhook's.

use super::{Approvals, Engine, peer, read_request, refused, reply};
use crate::runbook::client::Answer;
use crate::runbook::client::ApprovalRequest;
use serde_json::Value;
use serde_json::json;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::Mutex;

/// An answer from a channel: counted when the step still waits and no answer came first (and,
/// for the webhook, its wait is not over); recorded either way, under the answers' lock so that
/// the record comes before the step's evidence record.
pub(super) fn give_answer(
    engine: &Arc<Mutex<Engine>>,
    approvals: &Arc<Approvals>,
    step: &str,
    answer: Result<(), String>,
    detail: Value,
    over: Option<&std::sync::atomic::AtomicBool>,
) -> bool {
    let mut answers = approvals.answers.lock().unwrap_or_else(|e| e.into_inner());
    let waiting = approvals
        .waiting
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let counted = waiting.as_deref() == Some(step)
        && !answers.contains_key(step)
        && !over.is_some_and(|o| o.load(std::sync::atomic::Ordering::SeqCst));
    let mut record = json!({ "step": step, "approved": answer.is_ok(), "reason": answer.clone().err(), "counted": counted });
    if let (Some(record), Value::Object(detail)) = (record.as_object_mut(), &detail) {
        for (k, v) in detail {
            record.insert(k.clone(), v.clone());
        }
    }
    engine
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .record("runbook-approval", record);
    if counted {
        answers.insert(step.to_string(), (answer, detail));
        approvals.arrived.notify_all();
    }
    counted
}

pub(super) fn serve_approval(
    engine: &Arc<Mutex<Engine>>,
    approvals: &Arc<Approvals>,
    stream: UnixStream,
) {
    let who = peer(&stream);
    let request = read_request(&stream).and_then(|raw| {
        serde_json::from_value::<ApprovalRequest>(raw).map_err(|e| format!("not a request: {e}"))
    });
    let request = match request {
        Ok(request) => request,
        Err(why) => {
            reply(&stream, &refused(&why));
            return;
        }
    };
    let (step, answer, sudo_user) = match &request {
        ApprovalRequest::Approve { step, sudo_user } => (step.clone(), Ok(()), sudo_user),
        ApprovalRequest::Deny {
            step,
            reason,
            sudo_user,
        } => (step.clone(), Err(reason.clone()), sudo_user),
    };
    let approver = approver_name(&who, sudo_user.as_deref());
    let waiting = approvals
        .waiting
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    if waiting.as_deref() != Some(step.as_str()) {
        let why = format!(
            "step {step:?} is not waiting for approval{}",
            waiting
                .map(|w| format!(" (step {w} is)"))
                .unwrap_or_default()
        );
        reply(&stream, &refused(&why));
        return;
    }
    let approved = answer.is_ok();
    let counted = give_answer(
        engine,
        approvals,
        &step,
        answer,
        json!({ "from": "host terminal", "peer": who, "approver": approver }),
        None,
    );
    if !counted {
        reply(
            &stream,
            &refused(&format!(
                "step {step:?}: another answer came first (or the wait is over)"
            )),
        );
        return;
    }
    reply(
        &stream,
        &Answer {
            ok: true,
            message: format!(
                "step {step}: {}",
                if approved { "approved" } else { "denied" }
            ),
            state: None,
        },
    );
}

/// Who answered at a host terminal, by name: the login name behind the peer's uid (the password
/// database), and for root the `SUDO_USER` its terminal gave (`alice (sudo)`). `None` when the
/// peer's credentials could not be read.
fn approver_name(peer: &Value, sudo_user: Option<&str>) -> Option<String> {
    let uid = peer["uid"].as_u64().and_then(|u| u32::try_from(u).ok())?;
    let login = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map_or_else(|| format!("uid {uid}"), |u| u.name);
    Some(match sudo_user {
        Some(by)
            if uid == 0
                && by
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)) =>
        {
            format!("{by} (sudo)")
        }
        _ => login,
    })
}
