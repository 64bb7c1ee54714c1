//! Claude Code's hook contract: what each event gets as an answer and how each one fails.
//!
//! | event | answer | on any failure |
//! | --- | --- | --- |
//! | PreToolUse | the decision JSON; deny also exits 2 with the reason on stderr | deny, exit 2 |
//! | ConfigChange | refuse the reload: exit 2 | refuse |
//! | PostToolUse, PostToolUseFailure | an evidence record; `additionalContext` after a Bash call the kernel refused as read-only, or during which the proxy refused a host (the supervisor's notices) | exit 0, failure record |
//! | SessionStart, UserPromptSubmit, PreCompact | with a runbook, `additionalContext` (its open steps; a prompt gets one line per open step, and the whole orientation on a session's first prompt, after a compaction and when the open steps change: see [`oriented`]) | exit 0, no context (where the session runs is in the managed `CLAUDE.md`) |
//! | SubagentStart, SubagentStop | with a runbook, a record naming `agent_id`/`agent_type` | exit 0 |
//! | SessionEnd | a record with its reason (`clear` is not an end) | exit 0 |
//! | anything else (Stop, …) | nothing | exit 0: exit 2 on Stop loops the agent |
//!
//! Everything here is pure (bytes in, `Response` out) so tests can drive it without a process;
//! `main.rs` only reads stdin, sends the records and exits.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use thiserror::Error;

use crate::decision::{Decision, Verdict};
use crate::load::Needs;
use crate::policy::{CallContext, CompiledPolicy, FORMAT_VERSION, RULE_DEFAULT};

/// Where the launcher mounts the compiled policy inside the sandbox.
pub const DEFAULT_POLICY_PATH: &str = "/run/stepproof/policy";
/// Largest hook input accepted; more is denied (a tool call that big is not worth the risk).
pub const MAX_INPUT_BYTES: usize = 4 << 20;
/// Largest compiled policy the hook reads.
pub const MAX_POLICY_BYTES: u64 = 64 << 20;
/// Rule id of ConfigChange refusals.
pub const RULE_CONFIG_LOCKED: &str = "config-locked";

/// Set once the event is known to be an observer, so that a later panic exits 0 instead of
/// blocking (a Stop hook exiting 2 would keep the agent going).
static OBSERVER_EVENT: AtomicBool = AtomicBool::new(false);

/// The exit code a panic must end with, given what the call had learned before it.
pub fn exit_code_after_panic() -> i32 {
    if OBSERVER_EVENT.load(Ordering::SeqCst) {
        0
    } else {
        2
    }
}

/// The answer to a panic for a blocking event: the same deny a rule would give.
pub fn panic_response() -> Response {
    let verdict = Verdict::fail_closed(
        "StepProof denied this call: the hook hit an internal error (rule fail-closed).",
    );
    if exit_code_after_panic() == 0 {
        Response::silent()
    } else {
        pre_tool_use_answer(&verdict)
    }
}

/// Command-line arguments of `stepproof-hook`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Args {
    /// The compiled policy (`--policy FILE`).
    pub policy: PathBuf,
    /// The supervisor's audit socket (`--audit-socket PATH`).
    pub audit_socket: Option<PathBuf>,
    /// The event to assume when the input does not name one (`--event NAME`).
    pub event: Option<String>,
}

/// A bad command line: the hook fails closed rather than guessing.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ArgsError {
    /// An option this hook does not know.
    #[error(
        "unknown argument `{0}` (usage: stepproof-hook [--policy FILE] [--audit-socket PATH] [--event NAME])"
    )]
    Unknown(String),
    /// An option without its value.
    #[error("`{0}` needs a value")]
    MissingValue(String),
}

impl Args {
    /// Parses argv (without the program name). Hand-written to keep the binary small and
    /// quick to start.
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Args, ArgsError> {
        let mut parsed = Args {
            policy: PathBuf::from(DEFAULT_POLICY_PATH),
            audit_socket: None,
            event: None,
        };
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            let (flag, inline) = match arg.split_once('=') {
                Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
                _ => (arg.clone(), None),
            };
            let mut value = || {
                inline
                    .clone()
                    .or_else(|| args.next())
                    .ok_or_else(|| ArgsError::MissingValue(flag.clone()))
            };
            match flag.as_str() {
                "--policy" => parsed.policy = PathBuf::from(value()?),
                "--audit-socket" => parsed.audit_socket = Some(PathBuf::from(value()?)),
                "--event" => parsed.event = Some(value()?),
                _ => return Err(ArgsError::Unknown(arg)),
            }
        }
        Ok(parsed)
    }
}

/// The fields of Claude Code's hook input this hook reads; unknown fields are ignored.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct HookInput {
    /// The event (`PreToolUse`, …).
    #[serde(default)]
    pub hook_event_name: Option<String>,
    /// Claude Code's session id.
    #[serde(default)]
    pub session_id: Option<Value>,
    /// The agent's working directory.
    #[serde(default)]
    pub cwd: Option<String>,
    /// Tool events: the tool's name.
    #[serde(default)]
    pub tool_name: Option<String>,
    /// Tool events: the tool's input.
    #[serde(default)]
    pub tool_input: Option<Value>,
    /// Tool events: the call's id.
    #[serde(default)]
    pub tool_use_id: Option<Value>,
    /// PostToolUse: what the tool returned.
    #[serde(default)]
    pub tool_response: Option<Value>,
    /// PostToolUseFailure: the error.
    #[serde(default)]
    pub error: Option<Value>,
    /// PostToolUse: how long the tool ran, in milliseconds.
    #[serde(default)]
    pub duration_ms: Option<Value>,
    /// Inside a subagent: its id and type (the audit record says which agent asked).
    #[serde(default)]
    pub agent_id: Option<Value>,
    #[serde(default)]
    pub agent_type: Option<Value>,
    /// ConfigChange: which settings changed (`project_settings`, …) and their file.
    #[serde(default)]
    pub source: Option<Value>,
    #[serde(default)]
    pub file_path: Option<Value>,
    /// UserPromptSubmit: what the user typed.
    #[serde(default)]
    pub prompt: Option<Value>,
    /// SessionEnd: why the session ended (`clear`, `logout`, `prompt_input_exit`, `other`, …).
    #[serde(default)]
    pub reason: Option<Value>,
}

/// Judges a PreToolUse input: missing fields deny (fail closed).
pub fn evaluate(policy: &CompiledPolicy, input: &HookInput) -> Verdict {
    evaluate_analysed(policy, input, None)
}

/// `evaluate` with the Bash command's analysis already done (see `load::Needs`).
pub fn evaluate_analysed(
    policy: &CompiledPolicy,
    input: &HookInput,
    effects: Option<&[crate::shell::Effect]>,
) -> Verdict {
    let Some(tool) = input.tool_name.as_deref().filter(|t| !t.is_empty()) else {
        return Verdict::fail_closed(
            "StepProof denied this call: the hook input has no `tool_name` (rule fail-closed).",
        );
    };
    let Some(tool_input) = input.tool_input.as_ref().filter(|v| v.is_object()) else {
        return Verdict::fail_closed(format!(
            "StepProof denied {tool}: the hook input has no `tool_input` object (rule fail-closed)."
        ));
    };
    policy.check(
        tool,
        tool_input,
        &CallContext {
            cwd: input.cwd.as_deref(),
            effects,
        },
    )
}

/// Judges a tool call outside Claude Code (`stepproof check`), with the workspace as cwd.
pub fn check_tool(policy: &CompiledPolicy, tool_name: &str, tool_input: &Value) -> Verdict {
    if !tool_input.is_object() {
        return Verdict::fail_closed(format!(
            "StepProof denied {tool_name}: the tool input is not a JSON object (rule fail-closed)."
        ));
    }
    policy.check(tool_name, tool_input, &CallContext::default())
}

/// What the hook process prints and how it exits, plus the records it sends.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    /// Printed on stdout (JSON or nothing).
    pub stdout: String,
    /// Printed on stderr (the deny reason or nothing).
    pub stderr: String,
    /// Process exit code.
    pub exit_code: i32,
    /// Audit records to send.
    pub records: Vec<Value>,
}

impl Response {
    fn silent() -> Response {
        Response {
            stdout: String::new(),
            stderr: String::new(),
            exit_code: 0,
            records: Vec::new(),
        }
    }
}

/// Why a policy could not be loaded.
#[derive(Debug, Error)]
pub enum LoadError {
    /// The file cannot be read.
    #[error("cannot read the policy {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The file is not a compiled policy, or a damaged one.
    #[error("the policy {path} is not a compiled StepProof policy: {source}")]
    Parse {
        path: PathBuf,
        source: crate::load::DecodeError,
    },
    /// A policy compiled by another version.
    #[error("the policy {path} has format {found}, this hook reads format {FORMAT_VERSION}")]
    Format { path: PathBuf, found: u32 },
}

/// Reads the compiled policy, parsing only what `needs` asks for (see `load`).
pub fn load_policy_for(path: &Path, needs: &Needs) -> Result<CompiledPolicy, LoadError> {
    let read = |source| LoadError::Read {
        path: path.to_path_buf(),
        source,
    };
    let mut file = std::fs::File::open(path).map_err(read)?;
    // Sized from the file's length, one byte more to see the end: two reads in all.
    let size = file.metadata().map_or(0, |m| m.len()).min(MAX_POLICY_BYTES);
    let mut bytes = vec![0; usize::try_from(size).unwrap_or(0) + 1];
    let mut filled = 0;
    while filled < bytes.len() {
        match file.read(&mut bytes[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(read(e)),
        }
    }
    bytes.truncate(filled);
    if filled as u64 > size {
        // Longer than its length said: read the rest, still bounded.
        let rest = MAX_POLICY_BYTES.saturating_sub(filled as u64);
        file.take(rest).read_to_end(&mut bytes).map_err(read)?;
    }
    crate::load::parse(&bytes, needs).map_err(|source| match source {
        crate::load::DecodeError::Version { found } => LoadError::Format {
            path: path.to_path_buf(),
            found,
        },
        source => LoadError::Parse {
            path: path.to_path_buf(),
            source,
        },
    })
}

/// Events that are gates: they fail closed.
fn is_gate(event: &str) -> bool {
    matches!(event, "PreToolUse" | "ConfigChange")
}

/// Handles one hook call. `stdin` holds at most `MAX_INPUT_BYTES + 1` bytes; more means the
/// input was too large. Meant for the hook process: a PreToolUse call leaks its policy on
/// purpose instead of freeing it just before the process exits.
pub fn respond(args: &Args, stdin: &[u8]) -> Response {
    let (named, input) = match read_input_directly(stdin) {
        Some(input) => (input.hook_event_name.clone(), Ok(input)),
        None => read_input(stdin),
    };
    // The event this hook was registered for (`--event`) and the one the input names must
    // agree, or the input is malformed: the registration then decides the role (a gate denies,
    // an observer records and stays out of the way).
    let mismatch = match (&args.event, &named) {
        (Some(registered), Some(named)) if registered != named => Some(format!(
            "the hook input names the event {named:?} but this hook is registered for {registered}"
        )),
        _ => None,
    };
    // Unknown and unreadable input is treated as the most dangerous event, a PreToolUse.
    let event = if mismatch.is_some() {
        args.event.clone()
    } else {
        named.or_else(|| args.event.clone())
    }
    .unwrap_or_else(|| "PreToolUse".to_string());
    if !is_gate(&event) {
        OBSERVER_EVENT.store(true, Ordering::SeqCst);
    }
    if let Some(why) = mismatch {
        return match event.as_str() {
            "PreToolUse" => pre_tool_use(args, Err(why)),
            "ConfigChange" => config_change(args, None),
            _ => observe(args, &event, Err(why), evidence),
        };
    }
    match event.as_str() {
        "PreToolUse" => pre_tool_use(args, input),
        "ConfigChange" => config_change(args, input.ok()),
        "PostToolUse" | "PostToolUseFailure" => {
            let context = input.as_ref().ok().and_then(|input| {
                let parts: Vec<String> = [
                    reorientation(args, input),
                    read_only_context(input),
                    refused_hosts_notice(input),
                ]
                .into_iter()
                .flatten()
                .collect();
                (!parts.is_empty()).then(|| parts.join("\n\n"))
            });
            let mut response = observe(args, &event, input, evidence);
            if let Some(context) = context {
                response.stdout = json!({
                    "hookSpecificOutput": {
                        "hookEventName": event,
                        "additionalContext": context,
                    }
                })
                .to_string();
            }
            response
        }
        "SessionStart" | "UserPromptSubmit" | "PreCompact" => {
            let turn_record = (event == "UserPromptSubmit" && args.audit_socket.is_some())
                .then(|| input.as_ref().ok().map(|i| turn(&event, i, None)))
                .flatten();
            let mut response = context(args, &event, input);
            response.records.extend(turn_record);
            response
        }
        // The end of a turn: the audit log learns that asks still open were not approved.
        "Stop" => observe(args, &event, input, turn),
        // Recorded with its reason; a `clear` starts a new session, it ends nothing. Reported
        // from inside, so it proves nothing: the supervisor decides, from the agent's exit, whether
        // a runbook was abandoned.
        "SessionEnd" => observe(args, &event, input, session_end),
        // Dispatches and results of subagents, recorded while a runbook runs.
        "SubagentStart" | "SubagentStop"
            if runbook_dir(&args.policy).is_some_and(|d| d.is_dir()) =>
        {
            observe(args, &event, input, subagent)
        }
        _ => Response::silent(),
    }
}

/// The usual case in one pass: a JSON object whose fields all have their types. Anything else
/// (`None`) goes through [`read_input`], which says what is wrong.
fn read_input_directly(stdin: &[u8]) -> Option<HookInput> {
    let object = stdin.len() <= MAX_INPUT_BYTES
        && stdin.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
    object
        .then(|| serde_json::from_slice::<HookInput>(stdin).ok())
        .flatten()
}

/// The input's event name (when it names one as a string) and the input, or why it is not
/// one.
fn read_input(stdin: &[u8]) -> (Option<String>, Result<HookInput, String>) {
    let parsed: Result<Value, String> = if stdin.len() > MAX_INPUT_BYTES {
        Err(format!(
            "the hook input is larger than {MAX_INPUT_BYTES} bytes"
        ))
    } else {
        serde_json::from_slice::<Value>(stdin)
            .map_err(|e| format!("the hook input is not JSON: {e}"))
    };
    let parsed = parsed.and_then(|v| {
        if v.is_object() {
            Ok(v)
        } else {
            Err("the hook input is not a JSON object".to_string())
        }
    });
    let named = parsed
        .as_ref()
        .ok()
        .and_then(|v| v.get("hook_event_name"))
        .and_then(Value::as_str)
        .map(str::to_string);
    let input = parsed.and_then(|v| {
        serde_json::from_value::<HookInput>(v)
            .map_err(|e| format!("the hook input has a malformed field: {e}"))
    });
    (named, input)
}

fn pre_tool_use(args: &Args, input: Result<HookInput, String>) -> Response {
    let needs = input
        .as_ref()
        .map(needs_of)
        .unwrap_or_else(|_| Needs::minimal());
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
            Ok(policy) => (
                runbook_client_call(&args.policy, &input, needs.effects.as_deref()).unwrap_or_else(
                    || {
                        narrow_by_steps(
                            &args.policy,
                            evaluate_analysed(&policy, &input, needs.effects.as_deref()),
                            &input,
                            &needs,
                        )
                    },
                ),
                Some(policy),
                input,
            ),
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
    }
    // The process exits right after answering: freeing thousands of small allocations of a
    // large policy is measurable and buys nothing.
    std::mem::forget(policy);
    response
}

/// Rule id of the runbook client's calls.
pub const RULE_RUNBOOK_CLIENT: &str = "runbook-client";
/// The client's name beside the profile's policy (`/run/stepproof/stepproof` inside), bound
/// read-only by the supervisor in a run with a runbook.
pub const RUNBOOK_CLIENT_NAME: &str = "stepproof";
/// What the client may be asked: `stepproof step SUBCOMMAND …`.
pub const RUNBOOK_CLIENT_SUBCOMMANDS: &[&str] = &["status", "complete", "evidence", "abandon"];

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

/// The directory beside the profile's policy where a run with a runbook publishes the open
/// steps' policies (`policy-0`, `policy-1`, …, in the hook's format).
pub const RUNBOOK_DIR_NAME: &str = "runbook";
/// The most step policies read.
const MAX_STEP_POLICIES: usize = 64;

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
    }
}

fn config_change(args: &Args, input: Option<HookInput>) -> Response {
    let input = input.unwrap_or_default();
    let policy = load_policy_for(&args.policy, &Needs::minimal()).ok();
    let reason = "StepProof refused the settings change: hooks and permissions are fixed for this run (rule config-locked).";
    let mut record = base_record("decision", "ConfigChange", &input, policy.as_ref());
    record["decision"] = json!(Decision::Deny);
    record["rule_id"] = json!(RULE_CONFIG_LOCKED);
    record["reason"] = json!(reason);
    record["settings_source"] = json!(input.source);
    record["file_path"] = json!(input.file_path);
    Response {
        stdout: String::new(),
        stderr: format!("{reason}\n"),
        exit_code: 2,
        records: vec![record],
    }
}

/// Observer events: whatever happens, exit 0 and print nothing; failures become a record.
fn observe(
    args: &Args,
    event: &str,
    input: Result<HookInput, String>,
    make: fn(&str, &HookInput, Option<&CompiledPolicy>) -> Value,
) -> Response {
    // Without an audit socket there is nobody to give evidence to: skip the hashing.
    if args.audit_socket.is_none() {
        return Response::silent();
    }
    let policy = load_policy_for(&args.policy, &Needs::minimal()).ok();
    let record = match input {
        Ok(input) => make(event, &input, policy.as_ref()),
        Err(why) => failure_record(event, &why, policy.as_ref()),
    };
    Response {
        records: vec![record],
        ..Response::silent()
    }
}

/// At most this many protected paths are named in the context.
const MAX_NAMED_READ_ONLY: usize = 20;

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

/// Where the supervisor lists the hosts its proxy refused (read-only inside; see the
/// supervisor's `agent_layer::NOTICES_DIR`): `<unix ms>\t<host>\t<key to add>` a line.
pub const REFUSED_HOSTS_FILE: &str = "/run/stepproof/notices/refused-hosts";
/// The most of it read (the supervisor stops appending at this size).
const MAX_NOTICES_READ: u64 = 64 << 10;
/// Refusals this long before a call began still count as its own (clocks, process start).
const NOTICE_SLACK_MS: u128 = 2_000;

/// After a Bash call: the hosts the proxy refused while it ran, read from
/// [`REFUSED_HOSTS_FILE`] (only for Bash, so the other calls pay nothing).
fn refused_hosts_notice(input: &HookInput) -> Option<String> {
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

fn failure_record(event: &str, why: &str, policy: Option<&CompiledPolicy>) -> Value {
    let mut record = base_record("failure", event, &HookInput::default(), policy);
    record["error"] = json!(why);
    record
}

/// PostToolUse / PostToolUseFailure evidence.
fn evidence(event: &str, input: &HookInput, policy: Option<&CompiledPolicy>) -> Value {
    let mut record = base_record("evidence", event, input, policy);
    let tool = input.tool_name.as_deref().unwrap_or_default();
    record["tool"] = json!(tool);
    let tool_input = input.tool_input.clone().unwrap_or(Value::Null);
    let response = input.tool_response.clone().unwrap_or(Value::Null);
    match tool {
        "Write" | "Edit" | "MultiEdit" | "NotebookEdit" => {
            let path = tool_input
                .get("file_path")
                .or_else(|| tool_input.get("notebook_path"))
                .or_else(|| response.get("filePath"))
                .and_then(Value::as_str);
            match path {
                Some(path) => {
                    let absolute = match (Path::new(path).is_absolute(), input.cwd.as_deref()) {
                        (false, Some(cwd)) => Path::new(cwd).join(path),
                        _ => PathBuf::from(path),
                    };
                    record["path"] = json!(absolute.to_string_lossy());
                    match sha256_file(&absolute) {
                        Ok(hash) => record["sha256"] = json!(hash),
                        Err(e) => {
                            record["sha256"] = Value::Null;
                            record["error"] =
                                json!(format!("cannot hash {}: {e}", absolute.display()));
                        }
                    }
                }
                None => record["error"] = json!("no file path in the tool input"),
            }
        }
        "Bash" => {
            record["command"] = json!(tool_input.get("command").and_then(Value::as_str));
            let text = |key: &str| {
                response
                    .get(key)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            let status = ["exit_code", "exitCode", "returnCode", "code"]
                .iter()
                .find_map(|k| response.get(*k).and_then(Value::as_i64))
                .or_else(|| exit_status_from_error(input.error.as_ref()));
            record["exit_status"] = json!(status);
            record["interrupted"] = json!(
                response
                    .get("interrupted")
                    .and_then(Value::as_bool)
                    .unwrap_or(false)
            );
            record["stdout_sha256"] = json!(sha256_hex(text("stdout").as_bytes()));
            record["stderr_sha256"] = json!(sha256_hex(text("stderr").as_bytes()));
        }
        _ => {}
    }
    if let Some(open) = open_steps() {
        record["open_steps"] = json!(open);
    }
    if event == "PostToolUseFailure" {
        // Claude Code's error text carries what the command printed (`Exit code 3\nAPI_TOKEN=…`):
        // a record holds its digest and length, never the text (the exit status is above).
        let text = match &input.error {
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => Some(other.to_string()),
            None => None,
        };
        record["error_sha256"] = json!(text.as_ref().map(|t| sha256_hex(t.as_bytes())));
        record["error_bytes"] = json!(text.as_ref().map(String::len));
    }
    record
}

/// Claude Code reports a failed command as `Exit code N` at the start of the error text.
fn exit_status_from_error(error: Option<&Value>) -> Option<i64> {
    let text = error?.as_str()?;
    let rest = text.trim_start().strip_prefix("Exit code ")?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

fn context(args: &Args, event: &str, input: Result<HookInput, String>) -> Response {
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
            if oriented::needs_orientation(state, input.session_id.as_ref()) {
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
/// session's next prompt carries the whole orientation again ([`oriented::forget`]), whatever
/// the summary kept. Without a runbook: nothing (every prompt already says where it runs).
fn pre_compact(input: &HookInput, state: Option<&Value>) -> Response {
    let Some(state) = state else {
        return Response::silent();
    };
    oriented::forget(input.session_id.as_ref());
    Response {
        stdout: format!(
            "StepProof: this session follows a runbook whose state the supervisor holds outside the sandbox. Keep the following in the summary, word for word, so the conversation does not lose its step:\n\n{}\n",
            orientation_text(state)
        ),
        ..Response::silent()
    }
}

/// What the model is told once per session (the supervisor writes it into the managed
/// `CLAUDE.md`): where it runs and what it may do.
pub fn context_text(policy: &CompiledPolicy) -> String {
    let mut text = format!(
        "This session runs under StepProof, profile '{}': a Linux sandbox plus a hook that checks every tool call.",
        policy.profile
    );
    if !policy.summary.is_empty() {
        text.push(' ');
        text.push_str(&policy.summary);
    }
    text.push_str(&format!(
        " Workspace: {}. Shell commands allowed without asking: {}.",
        policy.workspace,
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

/// Which sessions have been given the runbook's orientation, and for which open steps.
///
/// Claude Code 2.1.328 makes `$CLAUDE_CONFIG_DIR/session-env/<session>/` before it runs any
/// SessionStart hook (for `CLAUDE_ENV_FILE`), and StepProof keeps `session-env` read-only (its
/// scripts are sourced before every Bash command, see the supervisor's `SOURCED_DIRS`): so a
/// SessionStart hook could never run (`EROFS`), at `startup` as after `compact` or `clear`, and
/// the supervisor does not register one (this hook still answers it, for other setups). The
/// UserPromptSubmit observer carries the orientation instead, once per session and open-step set:
/// a marker per session in `$CLAUDE_CONFIG_DIR/stepproof-oriented/` holds the state it was
/// oriented on. The marker is the agent's to write, and that is fine: orientation is advice, the
/// hook's gate and the supervisor's state are what hold; a marker that cannot be read or written
/// means the orientation is given again.
pub mod oriented {
    use serde_json::Value;
    use std::io::{Read, Write};
    use std::os::unix::fs::OpenOptionsExt;
    use std::path::{Path, PathBuf};

    /// The markers' directory under `CLAUDE_CONFIG_DIR`.
    pub const DIR: &str = "stepproof-oriented";

    fn marker(session: Option<&Value>) -> Option<PathBuf> {
        let session = session?.as_str()?;
        if session.is_empty()
            || session.len() > 128
            || !session
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return None;
        }
        // Only an absolute directory: an empty or relative value would put markers in the cwd.
        let config = PathBuf::from(std::env::var_os("CLAUDE_CONFIG_DIR")?);
        if !config.is_absolute() {
            return None;
        }
        Some(config.join(DIR).join(session))
    }

    /// What the session was oriented on: the runbook's hash, the open steps and the ending.
    pub fn key(state: &Value) -> String {
        format!(
            "{} {} {}",
            state.get("hash").and_then(Value::as_str).unwrap_or(""),
            state.get("open").map(Value::to_string).unwrap_or_default(),
            state.get("ended").map(Value::to_string).unwrap_or_default(),
        )
    }

    /// Whether this prompt should carry the whole orientation (and note that it does).
    pub fn needs_orientation(state: &Value, session: Option<&Value>) -> bool {
        let Some(path) = marker(session) else {
            return true;
        };
        let key = key(state);
        if read_marker(&path).is_some_and(|seen| seen == key.as_bytes()) {
            return false;
        }
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        // A new file each time, never through a link or into a FIFO someone left there.
        let _ = std::fs::remove_file(&path);
        if let Ok(mut file) = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&path)
        {
            let _ = file.write_all(key.as_bytes());
        }
        true
    }

    /// The marker's content (a regular file, at most 4 KiB), without waiting on a FIFO.
    fn read_marker(path: &Path) -> Option<Vec<u8>> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
            .ok()?;
        if !file.metadata().ok()?.is_file() {
            return None;
        }
        let mut bytes = Vec::new();
        file.take(4096).read_to_end(&mut bytes).ok()?;
        Some(bytes)
    }

    /// Before a compaction: the next prompt orients the compacted conversation again, and so
    /// does the next tool call's answer ([`take_compacted`]): a compaction in the middle of a
    /// turn (`claude -p`) has no next prompt.
    pub fn forget(session: Option<&Value>) {
        let Some(path) = marker(session) else {
            return;
        };
        // The marker rewritten in place (no new file: PreCompact stays cheap); made if missing.
        let open = |create: bool| {
            std::fs::OpenOptions::new()
                .write(true)
                .truncate(!create)
                .create_new(create)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
                .open(&path)
        };
        let file = open(false).or_else(|_| {
            if let Some(dir) = path.parent() {
                let _ = std::fs::create_dir_all(dir);
            }
            open(true)
        });
        if let Ok(mut file) = file
            && file.metadata().is_ok_and(|m| m.is_file())
        {
            let _ = file.write_all(COMPACTED);
        }
    }

    /// What a compaction leaves in the session's marker: no key reads like it, so the next
    /// prompt orients again, and the next tool call's observer sees it ([`take_compacted`]).
    const COMPACTED: &[u8] = b"compacted";

    /// Whether the session was compacted since it was last oriented (the observer that orients
    /// it then rewrites the marker with [`needs_orientation`]). One small read.
    pub fn take_compacted(session: Option<&Value>) -> bool {
        marker(session)
            .and_then(|path| read_marker(&path))
            .is_some_and(|seen| seen == COMPACTED)
    }
}

/// After a compaction (PreCompact marked the session), the first tool call's answer carries the
/// runbook's whole orientation: the compacted conversation holds only the summary, and in a
/// `claude -p` turn no prompt follows to carry it. Not a subagent's call (its context is not the
/// session's).
fn reorientation(args: &Args, input: &HookInput) -> Option<String> {
    if input.agent_id.is_some() || !oriented::take_compacted(input.session_id.as_ref()) {
        return None;
    }
    let state = runbook_dir(&args.policy)
        .filter(|d| d.is_dir())
        .and_then(|d| read_runbook_state(&d))?;
    // The next prompt, if one comes, need not say it again.
    oriented::needs_orientation(&state, input.session_id.as_ref());
    Some(orientation_text(&state))
}

/// The runbook directory beside the profile's policy (`/run/stepproof/runbook` inside).
fn runbook_dir(policy: &Path) -> Option<PathBuf> {
    Some(policy.parent()?.join(RUNBOOK_DIR_NAME))
}

/// The largest `state.json` read.
const MAX_STATE_BYTES: u64 = 1 << 20;

/// The runbook's read-only `state.json` in `dir`; `None` when it cannot be read as JSON (an
/// observer then says nothing of the runbook rather than something wrong).
fn read_runbook_state(dir: &Path) -> Option<Value> {
    let file = std::fs::File::open(dir.join("state.json")).ok()?;
    let mut bytes = Vec::new();
    file.take(MAX_STATE_BYTES).read_to_end(&mut bytes).ok()?;
    serde_json::from_slice::<Value>(&bytes)
        .ok()
        .filter(Value::is_object)
}

fn str_of<'a>(value: &'a Value, key: &str) -> &'a str {
    value.get(key).and_then(Value::as_str).unwrap_or("")
}

/// The state's steps that are open, in runbook order.
fn open_steps_of(state: &Value) -> Vec<&Value> {
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
            step.get("attempts").and_then(Value::as_u64).unwrap_or(0) + 1,
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

/// The end of a session, with Claude Code's reason; `ends_session` is false for `clear` (a new
/// session starts in the same process).
fn session_end(event: &str, input: &HookInput, policy: Option<&CompiledPolicy>) -> Value {
    let mut record = base_record("session-end", event, input, policy);
    let reason = input.reason.as_ref().and_then(Value::as_str);
    record["reason"] = json!(reason);
    record["ends_session"] = json!(reason != Some("clear"));
    record
}

/// A subagent dispatched or finished, while a runbook runs (`agent_id`, `agent_type`).
fn subagent(event: &str, input: &HookInput, policy: Option<&CompiledPolicy>) -> Value {
    base_record("subagent", event, input, policy)
}

/// A turn's boundary (a prompt submitted, the agent stopped): what it tells the audit log is
/// that the asks before it that did not run were refused.
fn turn(event: &str, input: &HookInput, policy: Option<&CompiledPolicy>) -> Value {
    base_record("turn", event, input, policy)
}

fn base_record(
    kind: &str,
    event: &str,
    input: &HookInput,
    policy: Option<&CompiledPolicy>,
) -> Value {
    let ts_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    json!({
        "kind": kind,
        "event": event,
        "session_id": input.session_id,
        "tool_use_id": input.tool_use_id,
        "agent_id": input.agent_id,
        "agent_type": input.agent_type,
        "profile": policy.map(|p| p.profile.clone()),
        "hook_pid": std::process::id(),
        "ts_ms": ts_ms,
    })
}

const SUMMARY_LIMIT: usize = 4096;

/// A short, readable account of a tool input for the audit record.
fn summarize_input(tool: Option<&str>, input: Option<&Value>) -> (String, bool) {
    let Some(input) = input else {
        return (String::new(), false);
    };
    let field = |k: &str| input.get(k).and_then(Value::as_str).map(str::to_string);
    let text = match tool {
        Some("Bash") => field("command"),
        Some("Read" | "Write" | "Edit" | "MultiEdit") => field("file_path"),
        Some("NotebookEdit" | "NotebookRead") => field("notebook_path"),
        Some("WebFetch") => field("url"),
        _ => None,
    }
    .unwrap_or_else(|| input.to_string());
    if text.len() <= SUMMARY_LIMIT {
        return (text, false);
    }
    let mut cut = SUMMARY_LIMIT;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    (text[..cut].to_string(), true)
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    out
}

/// The ledger hashes at most this much of a file; a larger one is recorded without a hash.
const LEDGER_HASH_MAX_BYTES: u64 = 64 << 20;

/// The sha256 of a regular file the tool wrote: the last component is not followed (a link
/// is refused), a FIFO or device is not opened for reading (O_NONBLOCK, then refused as not a
/// regular file), a file over 64 MiB is not hashed.
fn sha256_file(path: &Path) -> std::io::Result<String> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    if meta.len() > LEDGER_HASH_MAX_BYTES {
        return Err(std::io::Error::other(format!(
            "larger than {LEDGER_HASH_MAX_BYTES} bytes ({}), not hashed",
            meta.len()
        )));
    }
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 64 * 1024];
    let mut reader = (&mut file).take(LEDGER_HASH_MAX_BYTES + 1);
    loop {
        let n = reader.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
    }
    Ok(hex(&hasher.finalize()))
}

/// The runbook's state inside the sandbox (`stepproof-run --runbook`), bound read-only.
const RUNBOOK_STATE: &str = "/run/stepproof/runbook/state.json";

/// The runbook steps open when the tool ran, from the runbook's read-only `state.json` —
/// read only when the runbook directory exists (a run without a runbook costs one stat).
fn open_steps() -> Option<Vec<String>> {
    let dir = Path::new(RUNBOOK_STATE).parent()?;
    if !dir.is_dir() {
        return None;
    }
    let file = std::fs::File::open(RUNBOOK_STATE).ok()?;
    let mut text = String::new();
    file.take(1 << 20).read_to_string(&mut text).ok()?;
    let state: Value = serde_json::from_str(&text).ok()?;
    Some(
        state
            .get("open")?
            .as_array()?
            .iter()
            .filter_map(|s| s.as_str().map(str::to_string))
            .collect(),
    )
}

#[cfg(test)]
mod tests;
