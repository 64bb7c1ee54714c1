//! The audit records of the observing events: a tool's outcome and its evidence, a session's end,
//! subagents, turns, each with the input summarized and hashed.

use super::{
    Args, HookInput, LEDGER_HASH_MAX_BYTES, RUNBOOK_STATE, Response, SUMMARY_LIMIT, load_policy_for,
};
use crate::load::Needs;
use crate::policy::CompiledPolicy;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::{Path, PathBuf};

/// Observer events: whatever happens, exit 0 and print nothing; failures become a record.
pub(super) fn observe(
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

fn failure_record(event: &str, why: &str, policy: Option<&CompiledPolicy>) -> Value {
    let mut record = base_record("failure", event, &HookInput::default(), policy);
    record["error"] = json!(why);
    record
}

/// Whether a PostToolUse is Claude Code's echo of a failure already reported by
/// PostToolUseFailure: a built-in tool (whose result is an object when it succeeds) answered
/// with a string that is Claude Code's rendering of an error. An MCP tool's result may be any
/// text, so its calls are never taken for an echo.
pub(super) fn echoes_a_failure(input: &HookInput) -> bool {
    let builtin = input
        .tool_name
        .as_deref()
        .is_some_and(|t| !t.is_empty() && !t.starts_with("mcp__"));
    builtin
        && input.error.is_none()
        && matches!(&input.tool_response, Some(Value::String(text)) if text.starts_with("Error: "))
}

/// PostToolUse / PostToolUseFailure evidence.
pub(super) fn evidence(event: &str, input: &HookInput, policy: Option<&CompiledPolicy>) -> Value {
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
pub(super) fn exit_status_from_error(error: Option<&Value>) -> Option<i64> {
    let text = error?.as_str()?;
    let rest = text.trim_start().strip_prefix("Exit code ")?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// The end of a session, with Claude Code's reason; `ends_session` is false for `clear` (a new
/// session starts in the same process).
pub(super) fn session_end(
    event: &str,
    input: &HookInput,
    policy: Option<&CompiledPolicy>,
) -> Value {
    let mut record = base_record("session-end", event, input, policy);
    let reason = input.reason.as_ref().and_then(Value::as_str);
    record["reason"] = json!(reason);
    record["ends_session"] = json!(reason != Some("clear"));
    record
}

/// A subagent dispatched or finished, while a runbook runs (`agent_id`, `agent_type`).
pub(super) fn subagent(event: &str, input: &HookInput, policy: Option<&CompiledPolicy>) -> Value {
    base_record("subagent", event, input, policy)
}

/// A turn's boundary (a prompt submitted, the agent stopped): what it tells the audit log is
/// that the asks before it that did not run were refused.
pub(super) fn turn(event: &str, input: &HookInput, policy: Option<&CompiledPolicy>) -> Value {
    base_record("turn", event, input, policy)
}

pub(super) fn base_record(
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

/// A short, readable account of a tool input for the audit record.
pub(super) fn summarize_input(tool: Option<&str>, input: Option<&Value>) -> (String, bool) {
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
