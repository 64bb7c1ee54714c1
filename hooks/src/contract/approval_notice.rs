//! The supervisor's verdict on a completion that waited for a person: `step complete` was
//! answered "waiting for approval" at once, and the verdict came later. The supervisor writes
//! it to `approval-notice` beside the runbook's `state.json` (read-only inside; named by run
//! and number, the last replacing the one before); the hook adds it to the agent's context on
//! the next tool call or prompt, once per session (a marker beside the orientation's holds the
//! last one told). Without a session marker (no `CLAUDE_CONFIG_DIR`) it is told on every call:
//! repeated beats never told.

use super::{Args, HookInput, runbook_dir};
use serde_json::Value;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;

/// The notice's file name in the runbook directory (the supervisor's `NOTICE_FILE`).
pub const NOTICE_FILE: &str = "approval-notice";
/// A notice is one answer's message: more than this is not read.
const MAX_NOTICE_BYTES: u64 = 64 << 10;

/// The notice not yet told to this session, if any. One failed open when there is none.
pub(super) fn approval_notice(args: &Args, input: &HookInput) -> Option<String> {
    // A subagent's context is not the session's.
    if input.agent_id.is_some() {
        return None;
    }
    let path = runbook_dir(&args.policy)?.join(NOTICE_FILE);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    let mut bytes = Vec::new();
    file.take(MAX_NOTICE_BYTES).read_to_end(&mut bytes).ok()?;
    let notice: Value = serde_json::from_slice(&bytes).ok()?;
    // The run and the notice's number in it: told once per session, whichever run it is.
    let id = notice
        .get("id")
        .and_then(Value::as_str)
        .filter(|id| !id.is_empty() && id.len() <= 128)?;
    let text = notice.get("text").and_then(Value::as_str)?.to_string();
    let Some(marker) =
        super::oriented::marker(input.session_id.as_ref()).map(|m| m.with_extension("notice"))
    else {
        return Some(text);
    };
    let told = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&marker)
        .ok()
        .and_then(|f| {
            let mut s = String::new();
            f.take(256).read_to_string(&mut s).ok()?;
            Some(s)
        });
    if told.as_deref() == Some(id) {
        return None;
    }
    if let Some(dir) = marker.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    // A new file each time, never through a link or into a FIFO someone left there.
    let _ = std::fs::remove_file(&marker);
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&marker)
    {
        let _ = f.write_all(id.as_bytes());
    }
    Some(text)
}

/// The orientation's line for an open step whose approval is pending: what to do meanwhile.
pub fn waiting_line(step: &Value) -> Option<String> {
    (step.get("approval").and_then(Value::as_str) == Some("pending")).then(|| {
        "\nIts completion waits for a person's approval: you will be told the answer on your next tool call or prompt. Do not ask for its completion again meanwhile; work on another open step, or end your turn.".to_string()
    })
}
