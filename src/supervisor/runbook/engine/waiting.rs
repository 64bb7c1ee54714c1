//! A completion that needs a person never holds the agent: it runs on a thread of its own, and
//! once it reaches the approval wait the request is answered at once ("waiting for approval;
//! you will be told"). Claude Code moves a Bash call to the background after its timeout (two
//! minutes by default) while an approval deadline is hours. The verdict, when it comes, is
//! published as a notice (`approval-notice` beside `state.json`) that the hook adds to the
//! agent's context on its next tool call or prompt.

use super::complete::complete;
use super::state::write_atomic;
use super::{Approvals, Engine, refused};
use crate::runbook::client::Answer;
use serde_json::{Value, json};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

/// The notice's file name in the runbook directory (read-only inside), as the hook reads it.
pub const NOTICE_FILE: &str = stepproof_hook::contract::APPROVAL_NOTICE_FILE;

/// What the completion's thread tells the request that started it.
pub(super) enum Said {
    /// Another completion is being checked.
    Busy,
    /// The approval wait began for this step (its approvers, its deadline in words).
    Waiting {
        step: String,
        approvers: String,
        deadline: String,
    },
    /// The verdict, before any wait began (or none was needed).
    Done(Answer),
}

/// Where the thread says it: the request's channel until it has answered ("waiting"); then
/// nothing, and the verdict becomes a notice.
pub(super) type Listener = Arc<Mutex<Option<mpsc::Sender<Said>>>>;

impl Approvals {
    /// The approval wait of `step` began: the request that asked is answered now.
    pub(super) fn began_waiting(&self, step: &str, approvers: &str, deadline: &str) {
        let listener = self
            .listener
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(listener) = listener
            && let Some(tx) = listener.lock().unwrap_or_else(|e| e.into_inner()).as_ref()
        {
            let _ = tx.send(Said::Waiting {
                step: step.to_string(),
                approvers: approvers.to_string(),
                deadline: deadline.to_string(),
            });
        }
    }
}

/// A `complete` request: checked on a thread of its own; answered with its verdict, or with
/// "waiting" as soon as a person is asked (the verdict then reaches the agent as a notice).
pub(super) fn complete_or_wait(
    engine: &Arc<Mutex<Engine>>,
    approvals: &Arc<Approvals>,
    completing: &Arc<Mutex<()>>,
    run_id: &str,
    (step, note, wait): (Option<String>, Option<String>, bool),
    who: Value,
) -> Answer {
    let (tx, rx) = mpsc::channel();
    let listener: Listener = Arc::new(Mutex::new(Some(tx)));
    let (engine_t, approvals_t, completing_t, run_id_t, listener_t) = (
        Arc::clone(engine),
        Arc::clone(approvals),
        Arc::clone(completing),
        run_id.to_string(),
        Arc::clone(&listener),
    );
    let (step_t, who_t) = (step.clone(), who.clone());
    // Counted until the verdict: the end of the run waits for it (bounded) before closing.
    approvals
        .checking
        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let spawned = std::thread::Builder::new()
        .name("stepproof-complete".into())
        .spawn(move || {
            let say = |said: Said| -> Option<Said> {
                match listener_t
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .as_ref()
                {
                    Some(tx) => tx.send(said).err().map(|e| e.0),
                    None => Some(said),
                }
            };
            let _counted = Uncount(&approvals_t.checking);
            let Ok(_one) = completing_t.try_lock() else {
                let _ = say(Said::Busy);
                return;
            };
            *approvals_t
                .listener
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = Some(Arc::clone(&listener_t));
            let answer = complete(
                &engine_t,
                &approvals_t,
                &run_id_t,
                step_t.as_deref(),
                note,
                who_t,
            );
            *approvals_t
                .listener
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = None;
            // The request was answered "waiting" (or is gone): the verdict is a notice.
            if let Some(Said::Done(answer)) = say(Said::Done(answer)) {
                engine_t
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .notify(&answer);
            }
        });
    if spawned.is_err() {
        approvals
            .checking
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        return refused("the supervisor could not start a thread to check the completion");
    }
    // `--wait`: the approval's start is not an answer; the verdict is.
    let first = loop {
        match rx.recv() {
            Ok(Said::Waiting { .. }) if wait => continue,
            other => break other,
        }
    };
    // From here the thread says nothing more to this request; what it said meanwhile is read.
    listener.lock().unwrap_or_else(|e| e.into_inner()).take();
    let said = match first {
        Ok(waiting @ Said::Waiting { .. }) => match rx.try_recv() {
            Ok(done @ Said::Done(_)) => Ok(done),
            _ => Ok(waiting),
        },
        other => other,
    };
    match said {
        Ok(Said::Done(answer)) => answer,
        Ok(Said::Busy) => {
            let waiting = approvals
                .waiting
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            let why = match waiting {
                Some(waiting) => format!(
                    "step {waiting} waits for a person's approval: a completion is taken again once it is answered (you will be told on your next tool call or prompt). Meanwhile work on the open steps, or end your turn"
                ),
                None => "a completion is being checked already: wait for its answer (`step status` answers meanwhile), then ask again if it did not pass".to_string(),
            };
            engine
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .record_inside(
                    "runbook-complete-refused",
                    json!({ "step": step, "why": why, "peer": who }),
                );
            refused(&why)
        }
        Ok(Said::Waiting {
            step,
            approvers,
            deadline,
        }) => {
            let e = engine.lock().unwrap_or_else(|e| e.into_inner());
            Answer {
                ok: false,
                message: waiting_text(&e, &step, &approvers, &deadline),
                state: Some(e.state_json()),
            }
        }
        Err(_) => refused("the completion's check ended without an answer"),
    }
}

/// What the agent reads when its completion waits for a person.
fn waiting_text(e: &Engine, step: &str, approvers: &str, deadline: &str) -> String {
    let others: Vec<String> = e.open_ids().into_iter().filter(|s| s != step).collect();
    format!(
        "step {step}: its other evidence held; waiting for approval by {approvers} (deadline {deadline}). You will be told the answer on your next tool call or prompt; `step status` shows it too. Do not ask for this completion again meanwhile (it changes nothing). {}",
        if others.is_empty() {
            "No other step is open: end your turn now, saying the step waits for approval."
                .to_string()
        } else {
            format!(
                "Meanwhile work on the other open step(s): {} (their completion is taken once this answer has come).",
                others.join(", ")
            )
        }
    )
}

impl Engine {
    /// A verdict reached after its request was answered "waiting": published for the hook
    /// (one notice, numbered, replacing the last) and on the record.
    pub(super) fn notify(&mut self, answer: &Answer) {
        self.notices += 1;
        // Named by run and number: a session resumed in a later run is told that run's notice.
        let run = self
            .context
            .run_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let notice = json!({
            "id": format!("{run}/{}", self.notices),
            "passed": answer.ok,
            "text": format!("StepProof: the approval you were waiting for has been answered.\n{}", answer.message.trim_end()),
        });
        self.record(
            "runbook-notice",
            json!({ "notice": self.notices, "passed": answer.ok }),
        );
        if self.closed {
            return;
        }
        if let Ok(bytes) = serde_json::to_vec(&notice)
            && let Err(why) = write_atomic(&self.dir, NOTICE_FILE, &bytes)
        {
            crate::say!("stepproof-run: runbook: writing the approval notice: {why}");
        }
    }
}

/// Takes a completion off the count when its thread ends, however it ends.
struct Uncount<'a>(&'a std::sync::atomic::AtomicUsize);

impl Drop for Uncount<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}
