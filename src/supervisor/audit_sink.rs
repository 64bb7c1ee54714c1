//! The supervisor's record of a run, in its simplest form: JSON Lines appended to a per-run file
//! outside the sandbox (under `~/.local/state/stepproof/runs/`, which the sandbox cannot see).
//! Every record says where it came from; each is written with one `write` so lines never tear.

use serde::Serialize;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Debug, thiserror::Error)]
#[error("opening the audit log {path}: {source}")]
pub struct AuditSinkError {
    pub path: PathBuf,
    pub source: io::Error,
}

/// Cheap to share: clones append to the same file (threads of the proxy, the main loop).
pub struct AuditSink {
    path: PathBuf,
    file: std::sync::Arc<Mutex<File>>,
}

#[derive(Serialize)]
struct Envelope<'a, T: Serialize> {
    ts_ms: u128,
    /// `supervisor` (trusted) or `sandbox` (reported from inside: shows what was decided, not who
    /// asked).
    source: &'a str,
    kind: &'a str,
    #[serde(flatten)]
    body: &'a T,
}

impl AuditSink {
    /// `~/.local/state/stepproof/runs/<unix-seconds>-<pid>/audit.jsonl`.
    pub fn default_path(home: &Path) -> PathBuf {
        Self::default_run_dir(home).join("audit.jsonl")
    }

    /// `~/.local/state/stepproof/runs/<unix-seconds>-<pid>`: the run's own directory (hidden
    /// from the sandbox with the rest of `~/.local/state/stepproof`). Stable within a process.
    pub fn default_run_dir(home: &Path) -> PathBuf {
        static STARTED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
        let secs = *STARTED.get_or_init(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0)
        });
        home.join(".local/state/stepproof/runs")
            .join(format!("{secs}-{}", std::process::id()))
    }

    pub fn open(path: &Path) -> Result<AuditSink, AuditSinkError> {
        let fail = |source| AuditSinkError {
            path: path.to_path_buf(),
            source,
        };
        if let Some(dir) = path.parent() {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(fail)?;
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(path)
            .map_err(fail)?;
        Ok(AuditSink {
            path: path.to_path_buf(),
            file: std::sync::Arc::new(Mutex::new(file)),
        })
    }

    pub fn clone_handle(&self) -> AuditSink {
        AuditSink {
            path: self.path.clone(),
            file: self.file.clone(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one record; a failure is logged, never fatal to the run.
    pub fn record<T: Serialize>(&self, source: &str, kind: &str, body: &T) {
        let envelope = Envelope {
            ts_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis())
                .unwrap_or(0),
            source,
            kind,
            body,
        };
        let Ok(mut line) = serde_json::to_vec(&envelope) else {
            return;
        };
        line.push(b'\n');
        let mut file = self
            .file
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Err(e) = file.write_all(&line) {
            tracing::warn!(path = %self.path.display(), "writing the audit log: {e}");
        }
    }

    pub fn sync(&self) {
        let file = self
            .file
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let _ = file.sync_all();
    }
}
