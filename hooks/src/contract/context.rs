//! What the hook adds to the agent's context: the read-only notices, the refused hosts once each,
//! the runbook's state before a compaction and the orientation after one, the reminder on a prompt
//! while a step is open.

use super::{
    Args, HookInput, MAX_NAMED_READ_ONLY, MAX_NOTICES_READ, MAX_STATE_BYTES, NOTICE_SLACK_MS,
    REFUSED_HOSTS_FILE, RUNBOOK_DIR_NAME, Response,
};
use crate::decision::Decision;
use crate::policy::CompiledPolicy;
use serde_json::{Value, json};
use std::io::Read;
use std::path::{Path, PathBuf};

/// After a Bash call the kernel answered `Read-only file system` (EROFS): what that means under
/// StepProof, in words the model can act on. A protected file (git hooks and config, CI, editor,
/// agent and tool settings) is read-only inside, and git's checkout, rebase, merge, reset and
/// stash do not stop at one: they report `unable to unlink old '…'`, change everything else and
/// leave the file as it was, which then shows as modified. `None` when the output says nothing
/// of the kind.
pub fn read_only_context(input: &HookInput) -> Option<String> {
    if input.tool_name.as_deref() != Some("Bash") {
        return None;
    }
    let mut text = String::new();
    if let Some(response) = &input.tool_response {
        for key in ["stdout", "stderr"] {
            if let Some(part) = response.get(key).and_then(Value::as_str) {
                text.push_str(part);
                text.push('\n');
            }
        }
        if let Some(part) = response.as_str() {
            text.push_str(part);
        }
    }
    if let Some(error) = input.error.as_ref().and_then(Value::as_str) {
        text.push_str(error);
    }
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("Read-only file system"))
        .collect();
    if lines.is_empty() {
        return None;
    }
    let mut paths: Vec<String> = Vec::new();
    for line in &lines {
        // git quotes the path ('…'); sh and coreutils put it before a colon.
        let quoted = line.split('\'').nth(1).filter(|p| !p.is_empty());
        let named = quoted.or_else(|| {
            line.rsplit_once(": Read-only file system")
                .map(|(head, _)| head.rsplit(": ").next().unwrap_or(head).trim())
        });
        if let Some(path) = named.map(|p| p.trim_start_matches("cannot create ").to_string())
            && !path.is_empty()
            && !paths.contains(&path)
            && paths.len() < MAX_NAMED_READ_ONLY
        {
            paths.push(path);
        }
    }
    let git_partial = lines.iter().any(|l| l.contains("unable to unlink old"));
    let mut context = format!(
        "StepProof: `Read-only file system` means the command tried to change files that StepProof keeps read-only inside the sandbox because they run outside it later (git hooks and config, CI workflows, editor, agent and tool settings){}.",
        if paths.is_empty() {
            String::new()
        } else {
            format!(": {}", paths.join(", "))
        }
    );
    if git_partial {
        context.push_str(
            " git went on with everything else: the branch or state it switched to is in place, but these files kept their old content and `git status` shows them modified. Do not commit them as they are (that would undo this branch's change to them) and do not try to work around the protection; leave them, and tell the user which protected files the branch changes so they can update them outside the sandbox.",
        );
    } else {
        context.push_str(
            " Do not try to work around it: describe the change these files need to the user, who can make it outside the sandbox.",
        );
    }
    Some(context)
}

/// After a Bash call: the hosts the proxy refused while it ran, read from
/// [`REFUSED_HOSTS_FILE`] (only for Bash, so the other calls pay nothing).
pub(super) fn refused_hosts_notice(input: &HookInput) -> Option<String> {
    if input.tool_name.as_deref() != Some("Bash") {
        return None;
    }
    let mut text = String::new();
    std::fs::File::open(REFUSED_HOSTS_FILE)
        .ok()?
        .take(MAX_NOTICES_READ)
        .read_to_string(&mut text)
        .ok()?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_millis();
    refused_hosts_context(input, &text, now)
}

/// What the model reads about the hosts refused during the call: the hosts in `notices` whose
/// time falls in the call (PostToolUse: its `duration_ms`; PostToolUseFailure, which has none:
/// the command's `timeout`, two minutes unless set), each with the profile key that would allow
/// it. `None` when there are none.
pub fn refused_hosts_context(input: &HookInput, notices: &str, now_ms: u128) -> Option<String> {
    let ran_ms = input
        .duration_ms
        .as_ref()
        .and_then(Value::as_u64)
        .or_else(|| {
            input
                .tool_input
                .as_ref()
                .and_then(|i| i.get("timeout"))
                .and_then(Value::as_u64)
                .map(|t| t.min(600_000))
        })
        .unwrap_or(120_000);
    let since = now_ms.saturating_sub(u128::from(ran_ms) + NOTICE_SLACK_MS);
    let mut refused: Vec<(&str, &str)> = Vec::new();
    for line in notices.lines() {
        let mut fields = line.splitn(3, '\t');
        let (Some(at), Some(host), Some(hint)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let Ok(at) = at.parse::<u128>() else { continue };
        if at >= since && at <= now_ms + NOTICE_SLACK_MS && !refused.iter().any(|(h, _)| *h == host)
        {
            refused.push((host, hint));
        }
    }
    if refused.is_empty() {
        return None;
    }
    let listed: Vec<String> = refused
        .iter()
        .take(MAX_NAMED_READ_ONLY)
        .map(|(host, hint)| format!("{host} ({hint})"))
        .collect();
    Some(format!(
        "StepProof: during this command the sandbox's network proxy refused {}: not in this profile's network allow-list. That is what \"CONNECT tunnel failed, response 403\" (or a 403 from the proxy) means here; retrying or another tool will not get through. Tell the user which host the task needs and the profile setting that would allow it; do not try to work around the allow-list.",
        listed.join(", ")
    ))
}

pub(super) fn context(args: &Args, event: &str, input: Result<HookInput, String>) -> Response {
    let Ok(input) = input else {
        return Response::silent();
    };
    // Read only when the runbook directory exists: without a runbook this costs one stat.
    let state = runbook_dir(&args.policy)
        .filter(|d| d.is_dir())
        .and_then(|d| read_runbook_state(&d));
    if event == "PreCompact" {
        return pre_compact(&input, state.as_ref());
    }
    // Where the session runs is the managed CLAUDE.md's to say (once per session, kept through
    // compaction): the prompt's context carries the runbook alone.
    let runbook = state.as_ref().and_then(|state| match event {
        "UserPromptSubmit" => {
            let reminder = prompt_reminder(
                state,
                input.prompt.as_ref().and_then(Value::as_str).unwrap_or(""),
            );
            // SessionStart's context never reaches the model here (see `oriented`): the first
            // prompt of a session, and the first after a compaction or a change of the open
            // steps, carries the whole orientation.
            if super::oriented::needs_orientation(state, input.session_id.as_ref()) {
                Some(match reminder {
                    Some(line) => format!("{}\n\n{line}", orientation_text(state)),
                    None => orientation_text(state),
                })
            } else {
                reminder
            }
        }
        _ => Some(orientation_text(state)),
    });
    // A verdict that came while the agent waited, told once on the next prompt.
    let notice = (event == "UserPromptSubmit")
        .then(|| super::approval_notice::approval_notice(args, &input))
        .flatten();
    let runbook = match (notice, runbook) {
        (Some(notice), Some(text)) => Some(format!("{notice}\n\n{text}")),
        (notice, text) => notice.or(text),
    };
    let Some(text) = runbook else {
        return Response::silent();
    };
    let answer = json!({
        "hookSpecificOutput": {
            "hookEventName": event,
            "additionalContext": text,
        }
    });
    Response {
        stdout: format!("{answer}\n"),
        ..Response::silent()
    }
}

/// Before a compaction. Claude Code 2.1.328 takes no `hookSpecificOutput` from PreCompact (it
/// refuses the answer as invalid and shows the refusal); plain text on stdout with exit 0 is
/// its documented answer: "Additional Instructions" for the model that writes the summary. So
/// with a runbook, the summary is asked to keep the runbook's state word for word; and the
/// session's next prompt carries the whole orientation again ([`super::oriented::forget`]), whatever
/// the summary kept. Without a runbook: nothing (every prompt already says where it runs).
fn pre_compact(input: &HookInput, state: Option<&Value>) -> Response {
    let Some(state) = state else {
        return Response::silent();
    };
    super::oriented::forget(input.session_id.as_ref());
    Response {
        stdout: format!(
            "StepProof: this session follows a runbook whose state the supervisor holds outside the sandbox. Keep the following in the summary, word for word, so the conversation does not lose its step:\n\n{}\n",
            orientation_text(state)
        ),
        ..Response::silent()
    }
}

/// What the model is told once per session (the supervisor writes it into the managed
/// `CLAUDE.md`): where it runs and what it may do — the shell commands allowed without asking
/// only when the run gives it a shell (`shell`: Claude Code's Bash tool; a verifier has none).
pub fn context_text(policy: &CompiledPolicy, shell: bool) -> String {
    let mut text = format!(
        "This session runs under StepProof, profile '{}': a Linux sandbox plus a hook that checks every tool call.",
        policy.profile
    );
    if !policy.summary.is_empty() {
        text.push(' ');
        text.push_str(&policy.summary);
    }
    text.push_str(&format!(" Workspace: {}.", policy.workspace));
    if !shell {
        text.push_str(&format!(
            " Anything else is {}.",
            match policy.default {
                Decision::Allow => "allowed",
                Decision::Ask => "asked about",
                Decision::Deny => "denied",
            }
        ));
        text.push_str(
            " A denial names its rule; do not try to get around it, ask the user instead.",
        );
        return text;
    }
    text.push_str(&format!(
        " Shell commands allowed without asking: {}.",
        policy.allowed_summary()
    ));
    text.push_str(&format!(
        " Anything else is {}; commands whose name or script cannot be read before running ($VAR as a command, eval of variables, piping into sh) are {}.",
        match policy.default {
            Decision::Allow => "allowed",
            Decision::Ask => "asked about",
            Decision::Deny => "denied",
        },
        match policy.unknown {
            Decision::Allow => "allowed",
            Decision::Ask => "asked about",
            Decision::Deny => "denied",
        },
    ));
    text.push_str(" A denial names its rule; do not try to get around it, ask the user instead.");
    text
}

/// After a compaction (PreCompact marked the session), the first tool call's answer carries the
/// runbook's whole orientation: the compacted conversation holds only the summary, and in a
/// `claude -p` turn no prompt follows to carry it. Not a subagent's call (its context is not the
/// session's).
pub(super) fn reorientation(args: &Args, input: &HookInput) -> Option<String> {
    if input.agent_id.is_some() || !super::oriented::take_compacted(input.session_id.as_ref()) {
        return None;
    }
    let state = runbook_dir(&args.policy)
        .filter(|d| d.is_dir())
        .and_then(|d| read_runbook_state(&d))?;
    // The next prompt, if one comes, need not say it again.
    super::oriented::needs_orientation(&state, input.session_id.as_ref());
    Some(orientation_text(&state))
}

/// The runbook directory beside the profile's policy (`/run/stepproof/runbook` inside).
pub(super) fn runbook_dir(policy: &Path) -> Option<PathBuf> {
    Some(policy.parent()?.join(RUNBOOK_DIR_NAME))
}

/// The runbook's read-only `state.json` in `dir`; `None` when it cannot be read as JSON (an
/// observer then says nothing of the runbook rather than something wrong).
pub(super) fn read_runbook_state(dir: &Path) -> Option<Value> {
    let file = std::fs::File::open(dir.join("state.json")).ok()?;
    let mut bytes = Vec::new();
    file.take(MAX_STATE_BYTES).read_to_end(&mut bytes).ok()?;
    serde_json::from_slice::<Value>(&bytes)
        .ok()
        .filter(Value::is_object)
}

pub(super) fn str_of<'a>(value: &'a Value, key: &str) -> &'a str {
    value.get(key).and_then(Value::as_str).unwrap_or("")
}

/// The state's steps that are open, in runbook order.
pub(super) fn open_steps_of(state: &Value) -> Vec<&Value> {
    state
        .get("steps")
        .and_then(Value::as_array)
        .map(|steps| {
            steps
                .iter()
                .filter(|s| str_of(s, "status") == "open")
                .collect()
        })
        .unwrap_or_default()
}

/// What the model is told of the runbook at session start, after a `/clear` and around a
/// compaction: the runbook, its open steps with their instructions, acceptance criteria and
/// what they allow, where every step stands and the last verdicts, and how to complete a step.
pub fn orientation_text(state: &Value) -> String {
    let mut text = format!(
        "This run follows the StepProof runbook '{}' ({}). The supervisor outside the sandbox holds its state; only it decides when a step is complete.",
        str_of(state, "runbook"),
        str_of(state, "title"),
    );
    if let Some(ended) = state.get("ended").filter(|e| !e.is_null()) {
        text.push_str(&format!(
            "\nThe run has stopped ({} at step {}): no tool call is allowed any more.",
            str_of(ended, "ending"),
            str_of(ended, "step"),
        ));
    }
    let open = open_steps_of(state);
    if open.is_empty() && state.get("ended").is_none_or(Value::is_null) {
        text.push_str("\nNo step is open.");
    }
    for step in &open {
        text.push_str(&format!(
            "\n\nOpen step '{}': {} (attempt {} of {}).",
            str_of(step, "id"),
            str_of(step, "title"),
            // An attempt waiting for a person is still the current one.
            step.get("attempts").and_then(Value::as_u64).unwrap_or(0)
                + u64::from(str_of(step, "approval") != "pending"),
            step.get("max_attempts")
                .and_then(Value::as_u64)
                .unwrap_or(1),
        ));
        let instructions = str_of(step, "instructions").trim();
        if !instructions.is_empty() {
            text.push_str(&format!("\nInstructions: {instructions}"));
        }
        // A list of criteria (a single string is taken too).
        let acceptance: Vec<&str> = match step.get("acceptance") {
            Some(Value::Array(items)) => items
                .iter()
                .filter_map(Value::as_str)
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .collect(),
            Some(Value::String(c)) if !c.trim().is_empty() => vec![c.trim()],
            _ => Vec::new(),
        };
        if !acceptance.is_empty() {
            text.push_str("\nAcceptance:");
            for criterion in acceptance {
                text.push_str(&format!("\n- {criterion}"));
            }
        }
        text.push_str(&format!(
            "\nWhile it is open it allows {}.",
            str_of(step, "allows")
        ));
        text.extend(super::approval_notice::waiting_line(step));
    }
    if let Some(steps) = state.get("steps").and_then(Value::as_array) {
        let standing: Vec<String> = steps
            .iter()
            .map(|s| {
                let verdict = s
                    .get("last_verdict")
                    .and_then(Value::as_str)
                    .map(|v| format!(", last verdict {v}"))
                    .unwrap_or_default();
                format!("{} {}{verdict}", str_of(s, "id"), str_of(s, "status"))
            })
            .collect();
        if !standing.is_empty() {
            text.push_str(&format!("\n\nSteps: {}.", standing.join("; ")));
        }
    }
    text.push_str(
        "\nWhen the open step's work is done, ask for its completion with `/run/stepproof/stepproof step complete` (add `--step STEP` when several are open; `/run/stepproof/stepproof step status` shows the run): the supervisor checks the evidence itself.",
    );
    text
}

/// The line added to a prompt while a step is open: the step and what it allows, and a notice
/// when the prompt names, as whole words, a command a step rule denies. `None` when no step is
/// open.
pub fn prompt_reminder(state: &Value, prompt: &str) -> Option<String> {
    let open = open_steps_of(state);
    if open.is_empty() {
        return None;
    }
    let words: Vec<&str> = prompt
        .split(|c: char| !(c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | '/')))
        .filter(|w| !w.is_empty())
        .map(|w| w.rsplit('/').next().unwrap_or(w))
        .collect();
    let mut lines = Vec::new();
    for step in &open {
        lines.push(format!(
            "Runbook '{}', open step '{}' ({}): it allows {}.",
            str_of(state, "runbook"),
            str_of(step, "id"),
            str_of(step, "title"),
            str_of(step, "allows"),
        ));
        let denied = step
            .get("denied_words")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        for phrase in denied.iter().filter_map(Value::as_str) {
            let phrase: Vec<&str> = phrase.split_whitespace().collect();
            if !phrase.is_empty() && words.windows(phrase.len()).any(|w| w == phrase.as_slice()) {
                lines.push(format!(
                    "Note: step '{}' denies `{}`; such a call will be refused while the step is open.",
                    str_of(step, "id"),
                    phrase.join(" "),
                ));
            }
        }
    }
    Some(lines.join("\n"))
}
