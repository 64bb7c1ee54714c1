//! A completion whose only missing evidence is a person's approval: denied, no answer before the
//! deadline, or impossible (`--ci` without `--approve STEP`). Attempts are for fixing the work;
//! waiting on a person is not work, so such a completion gives its attempt back, records its own
//! verdict (`runbook-step-not-approved`) and tells the agent what will and will not help.

use super::{Ending, Engine, Status};
use crate::runbook::Step;
use crate::runbook::client::Answer;
use serde_json::{Value, json};

/// Why a step's approval is missing, kept on the step until it passes (the run's ending names it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Missing {
    /// A person said no (with their reason).
    Denied(String),
    /// Nobody answered before the deadline.
    Deadline(String),
    /// `--ci` without `--approve STEP`: nobody can be asked in this run.
    Impossible,
    /// Asked, and no answer yet.
    Pending,
}

impl Missing {
    /// The word on the record and in `state.json`.
    pub fn word(&self) -> &'static str {
        match self {
            Missing::Denied(_) => "denied",
            Missing::Deadline(_) => "deadline",
            Missing::Impossible => "impossible",
            Missing::Pending => "pending",
        }
    }
}

/// Of a completion's records, the approvals that did not hold, when nothing else failed (a
/// verifier not started because of them does not count as failing on its own). `None` when
/// other evidence failed too: then the attempt was the work's, and counts.
fn approvals_only(gathered: &[Value]) -> Option<Vec<&Value>> {
    let failed: Vec<&Value> = gathered.iter().filter(|r| r["held"] == false).collect();
    let approvals: Vec<&Value> = failed
        .iter()
        .copied()
        .filter(|r| r["kind"] == "approval")
        .collect();
    // A verifier not started because of the approval fails with it, not on its own.
    let not_started = |r: &Value| r["kind"] == "verifier" && !r["not_run"].is_null();
    let others = failed
        .iter()
        .filter(|r| r["kind"] != "approval" && !not_started(r))
        .count();
    (!approvals.is_empty() && others == 0).then_some(approvals)
}

/// What the approval record says is missing.
fn missing_of(record: &Value, reasons: &[String]) -> Missing {
    let reason_of = |prefix: &str| {
        reasons
            .iter()
            .find(|r| r.starts_with(prefix))
            .cloned()
            .unwrap_or_default()
    };
    if record["ci"] == true && record["pre_approved"] == false {
        return Missing::Impossible;
    }
    match record["answer"].as_str() {
        Some("deadline") => Missing::Deadline(reason_of("approval: no answer")),
        _ => Missing::Denied(
            reason_of("approval: denied: ")
                .trim_start_matches("approval: denied: ")
                .to_string(),
        ),
    }
}

impl Engine {
    /// The run's end, when the agent exits with steps not passed: if an open step's only
    /// missing evidence is a person's approval, the run ends with it missing (115), not
    /// abandoned. A question still pending is closed on the record, its attempt given back.
    pub(super) fn approval_ending(&mut self) -> Option<Ending> {
        for index in 0..self.steps.len() {
            if self.steps[index].approval_missing == Some(Missing::Pending) {
                let attempt = self.steps[index].attempts;
                self.steps[index].attempts = attempt.saturating_sub(1);
                let step = &self.runbook.steps[index];
                self.record_end(
                    "runbook-step-not-approved",
                    json!({
                        "step": step.id,
                        "attempt": attempt,
                        "missing": "pending",
                        "attempts_left": step.attempts().saturating_sub(attempt.saturating_sub(1)),
                        "attempt_counted": false,
                    }),
                );
            }
        }
        let (step, s) = self
            .runbook
            .steps
            .iter()
            .zip(&self.steps)
            .find(|(_, s)| s.status == Status::Open && s.approval_missing.is_some())?;
        Some(Ending::ApprovalMissing {
            step: step.id.to_string(),
            missing: s.approval_missing.as_ref().map(Missing::word)?.to_string(),
        })
    }

    /// The completion's verdict when only an approval is missing: the attempt given back, the
    /// step left open, its own record, and an answer that says what helps. `None` when other
    /// evidence failed too (the caller's usual verdict, which counts the attempt).
    pub(super) fn not_approved(
        &mut self,
        index: usize,
        step: &Step,
        attempt: u32,
        gathered: &[Value],
        failures: &[String],
    ) -> Option<Answer> {
        let approvals = approvals_only(gathered)?;
        let missing = missing_of(approvals[0], failures);
        // The attempt was not the work's: the next completion is this attempt again.
        self.steps[index].attempts = attempt.saturating_sub(1);
        self.steps[index].last_verdict = Some(format!("not approved ({})", missing.word()));
        self.steps[index].approval_missing = Some(missing.clone());
        let left = step.attempts().saturating_sub(self.steps[index].attempts);
        self.record(
            "runbook-step-not-approved",
            json!({
                "step": step.id,
                "attempt": attempt,
                "missing": missing.word(),
                "attempts_left": left,
                "attempt_counted": false,
            }),
        );
        let _ = self.publish();
        let others: Vec<String> = self
            .runbook
            .steps
            .iter()
            .zip(&self.steps)
            .filter(|(s, st)| st.status == Status::Open && s.id != step.id)
            .map(|(s, _)| s.id.to_string())
            .collect();
        let meanwhile = if others.is_empty() {
            "No other step is open: end your turn and say the step waits for a person's approval."
                .to_string()
        } else {
            format!(
                "Meanwhile you may work on the other open step(s): {}.",
                others.join(", ")
            )
        };
        let approvers = step
            .evidence
            .iter()
            .find_map(|e| e.approval.as_ref())
            .map(|a| a.approvers.clone())
            .unwrap_or_else(|| "a person".into());
        let (what, helps) = match &missing {
            Missing::Impossible => (
                format!(
                    "no person can approve it in this run: it runs with --ci and without `--approve {}`",
                    step.id
                ),
                format!(
                    "Asking again will not help, and changing the work will not either. {meanwhile} The run then ends with the approval missing (stepproof-run exit {}); a run started with `--approve {}` continues from here.",
                    crate::exit::ExitCode::ApprovalMissing.code(),
                    step.id
                ),
            ),
            Missing::Denied(reason) => (
                format!(
                    "{approvers} denied it: {}",
                    if reason.is_empty() {
                        "no reason given"
                    } else {
                        reason
                    }
                ),
                format!(
                    "If the reason asks for a change, make it and ask again (the person is asked again). Asking again without a change asks the same question of the same person. {meanwhile}"
                ),
            ),
            Missing::Pending => (
                "no answer yet".to_string(),
                format!("You will be told when {approvers} answers. {meanwhile}"),
            ),
            Missing::Deadline(why) => (
                why.trim_start_matches("approval: ")
                    .trim_end_matches(": denied")
                    .to_string(),
                format!(
                    "Changing the work will not help; asking again asks {approvers} again, with a new deadline. {meanwhile}"
                ),
            ),
        };
        Some(Answer {
            ok: false,
            message: format!(
                "step {} NOT approved: {what}.\nThis did not use an attempt (attempts are for fixing the work): {left} of {} left.\n{helps}",
                step.id,
                step.attempts()
            ),
            state: Some(self.state_json()),
        })
    }
}
