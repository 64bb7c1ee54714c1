//! Records the hook sends to the supervisor's audit socket.
//!
//! The socket path comes only from the hook's command line (`--audit-socket PATH`, written in
//! the read-only managed settings), never from the environment: the agent can set environment
//! variables through its settings and would otherwise point the records elsewhere.
//!
//! # Format
//! The hook connects a unix `SOCK_STREAM` socket, writes one JSON object per line (UTF-8,
//! `\n`-terminated), shuts down its writing side and reads the supervisor's one-line answer
//! until end of file (the supervisor checks the sender when it reads); one connection per hook call, usually one record. Every
//! record has:
//!
//! * `kind`: `"decision"` (PreToolUse, ConfigChange), `"evidence"` (PostToolUse,
//!   PostToolUseFailure) or `"failure"` (an observer event the hook could not handle: bad input,
//!   unreadable policy; it still exited 0)
//! * `event`: the hook event name (`"PreToolUse"`, …), `session_id`, `tool_use_id` (or null),
//!   `profile` (or null when the policy could not be read), `hook_pid`, `ts_ms` (unix time, ms)
//!
//! Decision records add `tool`, `decision` (`allow`/`ask`/`deny`), `rule_id`, `reason` and
//! `input` (a summary: the Bash command, the file path, the URL, or compact JSON, cut at 4 KiB
//! with `input_truncated: true`).
//!
//! Evidence records add `tool` and, for Write/Edit/MultiEdit/NotebookEdit, `path` and `sha256`
//! (hex of the file's content after the change, null with `error` when it cannot be read); for
//! Bash, `command`, `exit_status` (integer or null when Claude Code did not report one),
//! `interrupted`, `stdout_sha256`, `stderr_sha256`; for PostToolUseFailure also `error` (the
//! error text Claude Code reported). The file is hashed without following a link at its name,
//! only when it is a regular file of at most 64 MiB (else `sha256` null and `error`). Under
//! `stepproof-run --runbook` every evidence record adds `open_steps` (the step ids open when the
//! tool ran, from `/run/stepproof/runbook/state.json`, read only when that directory exists).
//! Failure records add `error`.
//!
//! These records are *reported from inside*: the agent can run the hook binary itself, so they
//! show what was decided, not who asked. A send that fails or takes longer than the timeout
//! (200 ms) is dropped; it never changes a decision.
//!
//! # The answer
//! The supervisor answers each connection with one JSON line: `{"accepted":N,"malformed":M}`,
//! and `"denial_loop": {"rule_id", "denials", "after", "stop"}` when a deny in it was one of a
//! run of denials under one rule in one session (the supervisor counts them: the hook is a new
//! process per call, and a count kept inside would be the agent's to reset). The hook then adds
//! to that deny's reason what the profile or the open step allows and how to go on
//! (`contract::with_supervisor_answer`). It only ever adds to a deny: no answer, a late or a
//! malformed one, and the deny stands as it was.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;
use thiserror::Error;

/// How long the hook waits for the supervisor before giving up on a record.
pub const SEND_TIMEOUT: Duration = Duration::from_millis(200);

/// Why records did not reach the supervisor.
#[derive(Debug, Error)]
pub enum AuditError {
    /// Connecting or writing failed.
    #[error("sending audit records to {socket}: {source}")]
    Io {
        socket: PathBuf,
        source: std::io::Error,
    },
    /// The supervisor did not take the records in time.
    #[error("sending audit records to {socket} timed out")]
    Timeout { socket: PathBuf },
}

/// The most of the supervisor's answer read (it is one short line).
const MAX_ANSWER: u64 = 64 << 10;

/// Sends records, one JSON line each, within `timeout`, and returns the supervisor's answer
/// (`None` when it is not a JSON object). The connect runs on a helper thread because std
/// offers no connect timeout for unix sockets and a full backlog would block.
pub fn send(
    socket: &Path,
    records: &[Value],
    timeout: Duration,
) -> Result<Option<Value>, AuditError> {
    if records.is_empty() {
        return Ok(None);
    }
    let mut payload = Vec::new();
    for record in records {
        // Serializing a Value cannot fail; a failure would only drop the record.
        if serde_json::to_writer(&mut payload, record).is_ok() {
            payload.push(b'\n');
        }
    }
    let (done, result) = mpsc::channel();
    let path = socket.to_path_buf();
    std::thread::spawn(move || {
        let outcome = UnixStream::connect(&path).and_then(|mut stream| {
            stream.set_write_timeout(Some(timeout))?;
            stream.set_read_timeout(Some(timeout))?;
            stream.write_all(&payload)?;
            stream.flush()?;
            // Wait for the supervisor's answer: it checks the sender's credentials (and its
            // executable through /proc/<pid>/exe) when it reads, so the hook must still exist.
            stream.shutdown(std::net::Shutdown::Write)?;
            let mut answer = Vec::new();
            std::io::Read::read_to_end(
                &mut std::io::Read::take(&mut stream, MAX_ANSWER),
                &mut answer,
            )?;
            Ok(serde_json::from_slice::<Value>(&answer)
                .ok()
                .filter(Value::is_object))
        });
        let _ = done.send(outcome);
    });
    match result.recv_timeout(timeout) {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(source)) => Err(AuditError::Io {
            socket: socket.to_path_buf(),
            source,
        }),
        Err(_) => Err(AuditError::Timeout {
            socket: socket.to_path_buf(),
        }),
    }
}
