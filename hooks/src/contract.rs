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
use thiserror::Error;

use crate::decision::{Decision, Verdict};
use crate::load::Needs;
use crate::policy::{CallContext, CompiledPolicy, FORMAT_VERSION};

mod approval_notice;
pub use approval_notice::NOTICE_FILE as APPROVAL_NOTICE_FILE;
mod context;
mod denial_loop;
mod held_read_only;
mod pre_tool_use;
mod records;

use context::{context, refused_hosts_notice, reorientation, runbook_dir};
pub use context::{
    context_text, orientation_text, prompt_reminder, read_only_context, refused_hosts_context,
};
pub use denial_loop::{Restatement, restatement_text, with_supervisor_answer};
pub use held_read_only::{READ_ONLY_NOTICE, RULE_HELD_READ_ONLY};
use pre_tool_use::pre_tool_use;
pub use pre_tool_use::pre_tool_use_answer;
use records::{base_record, evidence, observe, session_end, subagent, turn};

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
    // The same `$TMPDIR` as `load::Needs::for_call` analysed the command with.
    let tmpdir = crate::policy::environment_tmpdir();
    policy.check_with_tmpdir(
        tool,
        tool_input,
        &CallContext {
            cwd: input.cwd.as_deref(),
            effects,
        },
        tmpdir.as_deref(),
    )
}

/// Judges a tool call outside Claude Code (`stepproof check`), with the workspace as cwd.
pub fn check_tool(policy: &CompiledPolicy, tool_name: &str, tool_input: &Value) -> Verdict {
    if !tool_input.is_object() {
        return Verdict::fail_closed(format!(
            "StepProof denied {tool_name}: the tool input is not a JSON object (rule fail-closed)."
        ));
    }
    let tmpdir = Some(crate::policy::SANDBOX_TMPDIR);
    policy.check_with_tmpdir(tool_name, tool_input, &CallContext::default(), tmpdir)
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
    /// A PreToolUse deny: what its reason adds if the supervisor's answer calls it one of a
    /// loop ([`with_supervisor_answer`]).
    pub restatement: Option<Restatement>,
}

impl Response {
    fn silent() -> Response {
        Response {
            stdout: String::new(),
            stderr: String::new(),
            exit_code: 0,
            records: Vec::new(),
            restatement: None,
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
        // Claude Code 2.1.328, with its hooks in managed settings (as StepProof registers them),
        // follows a failed call's PostToolUseFailure with a PostToolUse for the same call whose
        // `tool_response` is only the error text again (`"Error: Exit code 1\n…"`): the
        // failure was recorded, with its exit status and the text's digest, and its context
        // given, by the first; a second record (`exit null`) and a second context would make
        // one call look like two.
        "PostToolUse" if input.as_ref().is_ok_and(records::echoes_a_failure) => Response::silent(),
        "PostToolUse" | "PostToolUseFailure" => {
            let context = input.as_ref().ok().and_then(|input| {
                let parts: Vec<String> = [
                    reorientation(args, input),
                    approval_notice::approval_notice(args, input),
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

/// Rule id of the runbook client's calls.
pub const RULE_RUNBOOK_CLIENT: &str = "runbook-client";
/// The client's name beside the profile's policy (`/run/stepproof/stepproof` inside), bound
/// read-only by the supervisor in a run with a runbook.
pub const RUNBOOK_CLIENT_NAME: &str = "stepproof";
/// What the client may be asked: `stepproof step SUBCOMMAND …`.
pub const RUNBOOK_CLIENT_SUBCOMMANDS: &[&str] = &["status", "complete", "evidence", "abandon"];

/// The directory beside the profile's policy where a run with a runbook publishes the open
/// steps' policies (`policy-0`, `policy-1`, …, in the hook's format).
pub const RUNBOOK_DIR_NAME: &str = "runbook";
/// The most step policies read.
const MAX_STEP_POLICIES: usize = 64;

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
        restatement: None,
    }
}

/// At most this many protected paths are named in the context.
const MAX_NAMED_READ_ONLY: usize = 20;

/// Where the supervisor lists the hosts its proxy refused (read-only inside; see the
/// supervisor's `agent_layer::NOTICES_DIR`): `<unix ms>\t<host>\t<key to add>` a line.
pub const REFUSED_HOSTS_FILE: &str = "/run/stepproof/notices/refused-hosts";
/// The most of it read (the supervisor stops appending at this size).
const MAX_NOTICES_READ: u64 = 64 << 10;
/// Refusals this long before a call began still count as its own (clocks, process start).
const NOTICE_SLACK_MS: u128 = 2_000;

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
pub mod oriented;

/// The largest `state.json` read.
const MAX_STATE_BYTES: u64 = 1 << 20;

const SUMMARY_LIMIT: usize = 4096;

/// The ledger hashes at most this much of a file; a larger one is recorded without a hash.
const LEDGER_HASH_MAX_BYTES: u64 = 64 << 20;

/// The runbook's state inside the sandbox (`stepproof-run --runbook`), bound read-only.
const RUNBOOK_STATE: &str = "/run/stepproof/runbook/state.json";

#[cfg(test)]
mod tests;
