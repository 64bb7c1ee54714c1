//! The orientation markers: one per session under `$CLAUDE_CONFIG_DIR/stepproof-oriented/`, holding
//! the open-step set the agent was oriented on.

use serde_json::Value;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The markers' directory under `CLAUDE_CONFIG_DIR`.
pub const DIR: &str = "stepproof-oriented";

pub(super) fn marker(session: Option<&Value>) -> Option<PathBuf> {
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
