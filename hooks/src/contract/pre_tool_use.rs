//! PreToolUse: the call judged by the compiled policy, narrowed by the runbook's open steps, and
//! the runbook client's own calls let through only as themselves.

use super::records::{base_record, summarize_input};
use super::{
    Args, HookInput, LoadError, MAX_STEP_POLICIES, RULE_RUNBOOK_CLIENT, RUNBOOK_CLIENT_NAME,
    RUNBOOK_CLIENT_SUBCOMMANDS, RUNBOOK_DIR_NAME, Response, evaluate_analysed, load_policy_for,
};
use crate::decision::{Decision, Verdict};
use crate::load::Needs;
use crate::policy::RULE_DEFAULT;
use serde_json::json;
use std::path::Path;

pub(super) fn pre_tool_use(args: &Args, input: Result<HookInput, String>) -> Response {
    let mut needs = input
        .as_ref()
        .map(needs_of)
        .unwrap_or_else(|_| Needs::minimal());
    if let (Some(effects), Some(control)) = (needs.effects.as_mut(), args.policy.parent()) {
        vouch_for_the_client(control, effects);
    }
    let (verdict, policy, input) = match input {
        Err(why) => (
            Verdict::fail_closed(format!(
                "StepProof denied this call: {why} (rule fail-closed)."
            )),
            None,
            HookInput::default(),
        ),
        Ok(input) => match load_policy_for(&args.policy, &needs) {
            Err(e) => (
                Verdict::fail_closed(format!(
                    "StepProof denied this call: {e} (rule fail-closed)."
                )),
                None,
                input,
            ),
            Ok(policy) => {
                let verdict = runbook_client_call(&args.policy, &input, needs.effects.as_deref())
                    .unwrap_or_else(|| {
                        narrow_by_steps(
                            &args.policy,
                            evaluate_analysed(&policy, &input, needs.effects.as_deref()),
                            &input,
                            &needs,
                        )
                    });
                // A write the policy would let through to what the run holds read-only fails
                // in the kernel; denied here instead, in words (an earlier denial stands).
                let verdict = match args.policy.parent() {
                    Some(control) if verdict.decision != Decision::Deny => {
                        super::held_read_only::held_read_only(
                            control,
                            &input,
                            needs.effects.as_deref(),
                        )
                        .unwrap_or(verdict)
                    }
                    _ => verdict,
                };
                (verdict, Some(policy), input)
            }
        },
    };
    let mut response = pre_tool_use_answer(&verdict);
    // Records are built only when there is somewhere to send them.
    if args.audit_socket.is_some() {
        let mut record = base_record("decision", "PreToolUse", &input, policy.as_ref());
        record["tool"] = json!(input.tool_name);
        record["decision"] = json!(verdict.decision);
        record["rule_id"] = json!(verdict.rule_id);
        record["reason"] = json!(verdict.reason);
        let (summary, truncated) =
            summarize_input(input.tool_name.as_deref(), input.tool_input.as_ref());
        record["input"] = json!(summary);
        if truncated {
            record["input_truncated"] = json!(true);
        }
        response.records.push(record);
        // Written now, while the policy is loaded; used only if the supervisor's answer calls
        // this deny one of a loop.
        response.restatement = super::denial_loop::restatement(args, &verdict, policy.as_ref());
    }
    // The process exits right after answering: freeing thousands of small allocations of a
    // large policy is measurable and buys nothing.
    std::mem::forget(policy);
    response
}

/// While a runbook runs, a Bash call that runs only the runbook's own client — by its exact
/// path beside the policy, `step` and one of its subcommands, no variable assigned, nothing
/// redirected, nothing else in the line — is allowed whatever the profile and the open steps
/// say: it is how the agent reports to the supervisor (the slash commands run it), and all it
/// can do is ask. Anything more in the command (a pipe, a `$(…)` running another program, a
/// redirection) and the call is judged as any other. `None` when this is not such a call.
fn runbook_client_call(
    profile_policy: &Path,
    input: &HookInput,
    effects: Option<&[crate::shell::Effect]>,
) -> Option<Verdict> {
    use crate::pattern::Arg;
    use crate::shell::Effect;
    if input.tool_name.as_deref() != Some("Bash") {
        return None;
    }
    let effects = effects.filter(|e| !e.is_empty())?;
    let control = profile_policy.parent()?;
    let client = control.join(RUNBOOK_CLIENT_NAME);
    let client = client.to_str()?;
    if !control.join(RUNBOOK_DIR_NAME).is_dir() {
        return None;
    }
    let mut asked = Vec::new();
    for effect in effects {
        let Effect::Exec(call) = effect else {
            return None;
        };
        let program = crate::pattern::normalize(Path::new(&call.program))?;
        match call.args.as_slice() {
            [Arg::Static(step), Arg::Static(sub), ..]
                if program == client
                    && call.assigns.is_empty()
                    && step == "step"
                    && RUNBOOK_CLIENT_SUBCOMMANDS.contains(&sub.as_str()) =>
            {
                asked.push(sub.clone());
            }
            _ => return None,
        }
    }
    Some(Verdict {
        decision: Decision::Allow,
        rule_id: RULE_RUNBOOK_CLIENT.to_string(),
        reason: format!(
            "StepProof allowed the runbook's client (`stepproof step {}`): it only asks the supervisor, which decides (rule {RULE_RUNBOOK_CLIENT}).",
            asked.join("`, `stepproof step ")
        ),
    })
}

/// StepProof's own `stepproof` beside the policy (bound there read-only by the supervisor, as
/// the policy is) is the supervisor's program, not one the agent wrote: allow rules vouch for
/// it as for a program in the system's directories, so that the profile's `runbook-check`
/// (`stepproof runbook check *`) covers `/run/stepproof/stepproof runbook check FILE`. What
/// the profile says of its other subcommands is unchanged (no allow rule names them).
fn vouch_for_the_client(control: &Path, effects: &mut [crate::shell::Effect]) {
    let client = control.join(RUNBOOK_CLIENT_NAME);
    for effect in effects {
        if let crate::shell::Effect::Exec(call) = effect
            && call.untrusted_path
            && crate::pattern::normalize(Path::new(&call.program)).as_deref() == client.to_str()
        {
            call.untrusted_path = false;
        }
    }
}

/// The profile's verdict narrowed by every open runbook step's policy (none when the run has
/// no runbook: the first file is missing): the stricter decision wins, and a step's denial
/// names the step and what it allows. A step policy that cannot be read denies.
fn narrow_by_steps(
    profile_policy: &Path,
    verdict: Verdict,
    input: &HookInput,
    needs: &Needs,
) -> Verdict {
    if verdict.decision == Decision::Deny {
        return verdict;
    }
    let Some(dir) = profile_policy.parent() else {
        return verdict;
    };
    let dir = dir.join(RUNBOOK_DIR_NAME);
    let mut verdict = verdict;
    for n in 0..MAX_STEP_POLICIES {
        let path = dir.join(format!("policy-{n}"));
        let step = match load_policy_for(&path, needs) {
            Ok(step) => step,
            Err(LoadError::Read { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                break;
            }
            Err(e) => {
                return Verdict::fail_closed(format!(
                    "StepProof denied this call: {e} (rule fail-closed)."
                ));
            }
        };
        let narrowed = evaluate_analysed(&step, input, needs.effects.as_deref());
        if narrowed.decision > verdict.decision {
            // Outside the step's allow rules: the step, not a profile, is what left it out
            // (the policy's own wording says "profile" and lists command names).
            let uncovered = format!(
                " is not covered by profile '{}' (rule {RULE_DEFAULT}).",
                step.profile
            );
            let reason = match narrowed.reason.find(&uncovered) {
                Some(at) if narrowed.rule_id == RULE_DEFAULT => format!(
                    "{} is not among what {} allows (rule {RULE_DEFAULT}): while it is open, it allows {}.",
                    &narrowed.reason[..at],
                    step.profile,
                    step.summary
                ),
                _ => format!(
                    "{} While {} is open, it allows {}.",
                    narrowed.reason, step.profile, step.summary
                ),
            };
            verdict = Verdict { reason, ..narrowed };
        }
        std::mem::forget(step);
        if verdict.decision == Decision::Deny {
            break;
        }
    }
    verdict
}

fn needs_of(input: &HookInput) -> Needs {
    match (&input.tool_name, &input.tool_input) {
        (Some(tool), Some(tool_input)) => Needs::for_call(tool, tool_input),
        _ => Needs::minimal(),
    }
}

/// The PreToolUse answer: JSON on stdout; a deny also exits 2 with the reason on stderr so
/// that it blocks even where the JSON is not read.
pub fn pre_tool_use_answer(verdict: &Verdict) -> Response {
    let answer = json!({
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": verdict.decision.as_str(),
            "permissionDecisionReason": verdict.reason,
        }
    });
    let deny = verdict.decision == Decision::Deny;
    Response {
        stdout: format!("{answer}\n"),
        stderr: if deny {
            format!("{}\n", verdict.reason)
        } else {
            String::new()
        },
        exit_code: if deny { 2 } else { 0 },
        records: Vec::new(),
        restatement: None,
    }
}
