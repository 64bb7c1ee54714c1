//! A deny that is one of a run of denials under the same rule: the supervisor, which sees every
//! decision the hook reports, counts them per session and rule and says so in its answer
//! (`audit`'s "The answer"); this adds to the deny's reason what the open runbook step or the
//! profile allows and how to go on. The model retrying a refused call in new spellings has read
//! the reason once already: what it lacks is the way out, not the refusal.
//!
//! Which part of the answer reaches the model, tried on Claude Code 2.1.328 with a hook that
//! denies: `permissionDecisionReason` becomes the call's `tool_result` ("PreToolUse:Bash hook
//! error: …"), also when the hook exits 2 — its stderr is then not shown; a PreToolUse
//! `additionalContext` arrives too, but as a separate "hook additional context" message apart
//! from the call. So the restatement rides on the reason, next to the refusal it explains
//! (tests/claude_denial_loop.rs shows it arriving). The decision is never changed, only its
//! reason made longer, and without the supervisor's answer the deny stands as it was.

use super::context::{open_steps_of, read_runbook_state, runbook_dir, str_of};
use super::pre_tool_use_answer;
use super::{Args, Response};
use crate::decision::{Decision, Verdict};
use crate::policy::CompiledPolicy;
use serde_json::Value;

/// What a deny's reason becomes if the supervisor calls it a loop: the verdict as given, and
/// what the profile or the open step allows and how to go on (written when the deny is made,
/// while the policy is loaded).
#[derive(Debug, Clone, PartialEq)]
pub struct Restatement {
    pub verdict: Verdict,
    pub text: String,
}

/// The restatement for a deny, from the open runbook steps (when a runbook runs) or the profile.
pub(super) fn restatement(
    args: &Args,
    verdict: &Verdict,
    policy: Option<&CompiledPolicy>,
) -> Option<Restatement> {
    if verdict.decision != Decision::Deny {
        return None;
    }
    let state = runbook_dir(&args.policy)
        .filter(|d| d.is_dir())
        .and_then(|d| read_runbook_state(&d));
    Some(Restatement {
        verdict: verdict.clone(),
        text: restatement_text(policy, state.as_ref()),
    })
}

/// What is allowed and how to go on, in words the model can act on.
pub fn restatement_text(policy: Option<&CompiledPolicy>, state: Option<&Value>) -> String {
    let client = "/run/stepproof/stepproof step";
    if let Some(state) = state {
        if let Some(ended) = state.get("ended").filter(|e| !e.is_null()) {
            return format!(
                "The runbook's run has stopped ({} at step {}): no tool call is allowed any more. End here and report what was done.",
                str_of(ended, "ending"),
                str_of(ended, "step"),
            );
        }
        let open = open_steps_of(state);
        if !open.is_empty() {
            let allows: Vec<String> = open
                .iter()
                .map(|step| {
                    format!(
                        "step '{}' ({}) allows {}",
                        str_of(step, "id"),
                        str_of(step, "title"),
                        str_of(step, "allows")
                    )
                })
                .collect();
            return format!(
                "What is allowed now: runbook '{}', open {}. To go on: do the step's work with what it allows; when it is done, ask for its completion with `{client} complete` (`{client} status` shows the run); if the step cannot be done with what it allows, stop and tell the user why instead of trying other spellings.",
                str_of(state, "runbook"),
                allows.join("; ")
            );
        }
    }
    let Some(policy) = policy else {
        return "The hook cannot read its policy, so every call is denied: stop and tell the user."
            .to_string();
    };
    let mut text = format!("What is allowed now: profile '{}'", policy.profile);
    if !policy.summary.is_empty() {
        text.push_str(&format!(" ({})", policy.summary.trim_end_matches('.')));
    }
    let allowed = policy.allowed_summary();
    if !allowed.is_empty() {
        text.push_str(&format!(
            "; shell commands allowed without asking: {allowed}"
        ));
    }
    text.push_str(
        ". To go on: use an allowed alternative, or stop and tell the user what the task needs and which rule denied it; the same call in another spelling is denied by the same rule.",
    );
    text
}

/// The response with the supervisor's answer applied: a deny it calls one of a loop gets the
/// restatement added to its reason (on stdout's JSON and on stderr alike). Anything else —
/// an allow, an ask, no `denial_loop` in the answer, a malformed one — leaves it as it was.
pub fn with_supervisor_answer(response: Response, answer: &Value) -> Response {
    let Some(restatement) = &response.restatement else {
        return response;
    };
    let Some(seen) = answer.get("denial_loop").filter(|v| v.is_object()) else {
        return response;
    };
    if restatement.verdict.decision != Decision::Deny {
        return response;
    }
    let rule = seen
        .get("rule_id")
        .and_then(Value::as_str)
        .unwrap_or(&restatement.verdict.rule_id);
    let denials = seen.get("denials").and_then(Value::as_u64).unwrap_or(0);
    let mut note = format!(
        "StepProof has denied {denials} calls under rule {rule} in this session: retrying it another way will be denied again. {}",
        restatement.text
    );
    if seen.get("stop").and_then(Value::as_bool) == Some(true) {
        note.push_str(
            " This is a --ci run: StepProof ends it now (exit 121) rather than let it spend its budget on denied calls.",
        );
    }
    let verdict = Verdict {
        reason: format!("{}\n\n{note}", restatement.verdict.reason),
        ..restatement.verdict.clone()
    };
    Response {
        records: response.records,
        restatement: None,
        ..pre_tool_use_answer(&verdict)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// With a runbook, what the open steps allow and the client's commands; a stopped run says
    /// so; without a readable policy, to stop.
    #[test]
    fn the_restatement_names_the_open_steps_and_the_way_on() {
        let state = json!({
            "runbook": "release", "title": "Release",
            "steps": [
                {"id": "build", "title": "Build it", "status": "passed", "allows": "cargo"},
                {"id": "docs", "title": "Write the notes", "status": "open",
                 "allows": "Write under docs/"},
            ],
        });
        let text = restatement_text(None, Some(&state));
        for told in [
            "runbook 'release', open step 'docs' (Write the notes) allows Write under docs/",
            "/run/stepproof/stepproof step complete",
            "/run/stepproof/stepproof step status",
            "stop and tell the user",
        ] {
            assert!(text.contains(told), "{told:?} missing from {text}");
        }
        assert!(!text.contains("'build'"), "{text}");
        let ended = json!({"runbook": "release", "steps": [],
            "ended": {"ending": "blocked", "step": "build"}});
        let text = restatement_text(None, Some(&ended));
        assert!(
            text.contains("has stopped (blocked at step build)") && text.contains("End here"),
            "{text}"
        );
        // No step open and no policy: the hook cannot say what is allowed.
        let idle = json!({"runbook": "release", "steps": []});
        assert!(restatement_text(None, Some(&idle)).contains("cannot read its policy"));
    }

    /// Only a deny gets a restatement to offer.
    #[test]
    fn only_a_deny_is_restated() {
        let args = Args::parse(["--policy".to_string(), "/nonexistent/policy".into()]).unwrap();
        for decision in [Decision::Allow, Decision::Ask] {
            let verdict = Verdict {
                decision,
                rule_id: "r".into(),
                reason: "why".into(),
            };
            assert_eq!(restatement(&args, &verdict, None), None);
        }
        let denied = Verdict::fail_closed("no");
        assert!(restatement(&args, &denied, None).is_some());
    }
}
