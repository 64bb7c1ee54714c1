//! The supervisor's record of a run: a hash chain of JSON Lines appended to a per-run file
//! outside the sandbox (under `~/.local/state/stepproof/runs/`, which the sandbox cannot see).
//! The format is described in [`crate::audit`]; this is the writer. Every record is written
//! with one `write` on an `O_APPEND` file, under the same lock that advances the chain, so the
//! order of the lines is the order of the chain and lines never interleave. A line torn by the
//! kill of its writer is cut off by the next writer, which records that it did.

use crate::audit::chain::{self, GENESIS};
use serde::Serialize;
use serde_json::{Map, Value};
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Debug, thiserror::Error)]
#[error("opening the audit log {path}: {source}")]
pub struct AuditSinkError {
    pub path: PathBuf,
    pub source: io::Error,
}

/// Cheap to share: clones append to the same file and the same chain (threads of the proxy,
/// the hook receiver, the main loop).
pub struct AuditSink {
    path: PathBuf,
    state: Arc<Mutex<ChainWriter>>,
}

/// The file and the chain position, changed together under one lock.
struct ChainWriter {
    /// Holds an exclusive `flock` for as long as the sink lives: two writers would fork the
    /// chain.
    file: File,
    /// A regular file (not `/dev/stdout` or a pipe): a failed write can be taken back.
    regular: bool,
    next_seq: u64,
    head: String,
    /// Records whose write failed since the last one that was written, and the last error:
    /// said in the log by the next record that can be written.
    not_written: u64,
    last_error: Option<String>,
    /// The first record that could not be written (or the flush that failed), and why: the
    /// run's outcome says the log is incomplete even when later records were written.
    failed: Option<String>,
    /// The export's outbox: every record written is appended there too (in chain order).
    outbox: Option<Arc<crate::audit::export::Outbox>>,
    /// The budget of what the agent causes to be recorded (`audit::caused`), once set.
    caused: Option<crate::audit::caused::Caused>,
}

/// The summary record of what the agent caused and the budget kept out of the log.
pub const CAUSED_REPORT: &str = "inside-records-over-cap";

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
        home.join(crate::audit::STATE_DIR)
            .join("runs")
            .join(format!("{secs}-{}", std::process::id()))
    }

    /// Opens (or creates, mode 0600 in a 0700 directory) the log. An existing log is continued
    /// where its chain ends (`seq` and `prev` go on, so it still verifies as one chain); a record
    /// cut short at its end is removed and said (see `remove_torn_record`); a last line that is
    /// not the start of the next record is refused, as is a log another process holds.
    pub fn open(path: &Path) -> Result<AuditSink, AuditSinkError> {
        let fail = |source| AuditSinkError {
            path: path.to_path_buf(),
            source,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(fail)?;
        }
        // Never through a link (bar the caller's own descriptors, `/dev/stdout`), and a FIFO
        // nobody reads is an error, not a hang.
        let no_follow = if may_follow_last(path) {
            0
        } else {
            libc::O_NOFOLLOW
        };
        let file = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .mode(0o600)
            .custom_flags(no_follow | libc::O_NONBLOCK)
            .open(path)
            .map_err(fail)?;
        clear_nonblocking(&file);
        // Only a regular file is locked and continued; anything else (`/dev/stdout`, a pipe)
        // cannot be read back and starts a chain of its own.
        let regular = file.metadata().map_err(fail)?.is_file();
        let resume = if regular {
            file.try_lock().map_err(|e| {
                fail(match e {
                    fs::TryLockError::WouldBlock => io::Error::new(
                        io::ErrorKind::WouldBlock,
                        "another process is writing to this log",
                    ),
                    fs::TryLockError::Error(e) => e,
                })
            })?;
            chain::resume_point(BufReader::new(&file)).map_err(fail)?
        } else {
            chain::Resume {
                next_seq: 0,
                head: GENESIS.to_string(),
                torn: None,
            }
        };
        let mut writer = ChainWriter {
            file,
            regular,
            next_seq: resume.next_seq,
            head: resume.head,
            not_written: 0,
            last_error: None,
            failed: None,
            outbox: None,
            caused: None,
        };
        if let Some(torn) = resume.torn {
            writer.remove_torn_record(&torn).map_err(fail)?;
        }
        Ok(AuditSink {
            path: path.to_path_buf(),
            state: Arc::new(Mutex::new(writer)),
        })
    }

    pub fn clone_handle(&self) -> AuditSink {
        AuditSink {
            path: self.path.clone(),
            state: self.state.clone(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn lock(&self) -> MutexGuard<'_, ChainWriter> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Appends one record; a failure is logged, never fatal to the run.
    pub fn record<T: Serialize>(&self, source: &str, kind: &str, body: &T) {
        self.record_at(source, kind, body);
    }

    /// [`AuditSink::record`], returning the record's `seq` when it was written.
    pub fn record_at<T: Serialize>(&self, source: &str, kind: &str, body: &T) -> Option<u64> {
        let body = match serde_json::to_value(body) {
            Ok(value) => chain::body_object(value),
            Err(e) => {
                tracing::warn!(kind, "audit record not serialisable: {e}");
                Map::from_iter([("unserialisable".to_string(), Value::from(e.to_string()))])
            }
        };
        self.append(source, kind, &body)
            .inspect_err(|e| {
                tracing::warn!(path = %self.path.display(), "writing the audit log: {e}");
            })
            .ok()
    }

    /// Why the log is incomplete: the first record that could not be written (or the flush
    /// that failed; later records may have been written after a `records-not-written` one).
    /// `None` while every record so far is on disk as far as the kernel said.
    pub fn failure(&self) -> Option<String> {
        self.lock().failed.clone()
    }

    /// Appends one record whose body is already an object (envelope keys in it are renamed,
    /// see [`chain::body_object`]) and returns its `seq`. After records could not be written,
    /// a `records-not-written` record saying how many goes first.
    pub fn append(&self, source: &str, kind: &str, body: &Map<String, Value>) -> io::Result<u64> {
        match self.append_charged(source, kind, body, false)? {
            Some(seq) => Ok(seq),
            // Not reached: an uncharged record is written or fails.
            None => Err(io::Error::other("record not written")),
        }
    }

    /// [`AuditSink::append`], and when `charged`, the line as it would be written counts
    /// against the budget of what the agent causes: `Ok(None)` when over it.
    fn append_charged(
        &self,
        source: &str,
        kind: &str,
        body: &Map<String, Value>,
        charged: bool,
    ) -> io::Result<Option<u64>> {
        let mut state = self.lock();
        if state.not_written > 0 {
            let lost = Map::from_iter([
                ("not_written".to_string(), Value::from(state.not_written)),
                (
                    "last_error".to_string(),
                    Value::from(state.last_error.clone()),
                ),
            ]);
            if let Err(e) = state.write_record("supervisor", "records-not-written", &lost) {
                return Err(state.count_lost(e));
            }
            state.not_written = 0;
            state.last_error = None;
        }
        let (seq, line) = state.format_record(source, kind, body);
        if charged
            && let Some(caused) = state.caused.as_mut()
            && !caused.admit(kind, line.len() as u64 + 1)
        {
            if let Some(report) = caused.report(false) {
                let report = chain::body_object(report);
                let _ = state.write_record("supervisor", CAUSED_REPORT, &report);
            }
            return Ok(None);
        }
        state
            .write_line(seq, line)
            .map(Some)
            .map_err(|e| state.count_lost(e))
    }

    /// From now on, records the agent causes ([`AuditSink::append_caused`]) share one budget
    /// of `max_bytes` and `per_second`; the first call sets it, later ones change nothing.
    pub fn limit_caused(&self, max_bytes: u64, per_second: u32) {
        let mut state = self.lock();
        if state.caused.is_none() {
            state.caused = Some(crate::audit::caused::Caused::new(max_bytes, per_second));
        }
    }

    /// Appends a record the agent caused (a hook report, a connection, a runbook request):
    /// charged to the run's budget, `Ok(None)` when over it (counted by kind, not written; the
    /// summary record `inside-records-over-cap` goes first when one is due).
    pub fn append_caused(
        &self,
        source: &str,
        kind: &str,
        body: &Map<String, Value>,
    ) -> io::Result<Option<u64>> {
        self.append_charged(source, kind, body, true)
    }

    /// [`AuditSink::append_caused`] for any serialisable body; failures are logged.
    pub fn record_caused<T: Serialize>(&self, source: &str, kind: &str, body: &T) {
        let body = match serde_json::to_value(body) {
            Ok(value) => chain::body_object(value),
            Err(e) => {
                tracing::warn!(kind, "audit record not serialisable: {e}");
                return;
            }
        };
        if let Err(e) = self.append_caused(source, kind, &body) {
            tracing::warn!(path = %self.path.display(), "writing the audit log: {e}");
        }
    }

    /// The run's end: the last summary of what was not written (when there is news), and the
    /// counts. `None` when no budget was set.
    pub fn finish_caused(&self) -> Option<crate::audit::caused::CausedCounts> {
        let mut state = self.lock();
        let caused = state.caused.as_mut()?;
        let counts = caused.counts();
        if let Some(report) = caused.report(true) {
            let report = chain::body_object(report);
            let _ = state.write_record("supervisor", CAUSED_REPORT, &report);
        }
        Some(counts)
    }

    /// From now on every record written also goes to the export's outbox; returns the `seq`
    /// the next record will have.
    pub fn attach_outbox(&self, outbox: Arc<crate::audit::export::Outbox>) -> u64 {
        let mut state = self.lock();
        state.outbox = Some(outbox);
        state.next_seq
    }

    /// The `seq` the next record will have.
    pub fn next_seq(&self) -> u64 {
        self.lock().next_seq
    }

    /// `(seq, hash)` of the last record, or `None` before the first.
    pub fn head(&self) -> Option<(u64, String)> {
        let state = self.lock();
        state
            .next_seq
            .checked_sub(1)
            .map(|seq| (seq, state.head.clone()))
    }

    /// Hash of the last record (the genesis hash, 64 zeros, before the first): what the run
    /// prints at its end, for `stepproof audit verify --head`.
    pub fn head_hash(&self) -> String {
        let state = self.lock();
        if state.next_seq == 0 {
            GENESIS.to_string()
        } else {
            state.head.clone()
        }
    }

    /// Flushes the log to disk (at run end).
    pub fn sync(&self) {
        let mut state = self.lock();
        match state.file.sync_all() {
            // Not a regular file (/dev/null, a pipe): nothing to flush.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
            Err(e) => {
                tracing::warn!(path = %self.path.display(), "syncing the audit log: {e}");
                if state.failed.is_none() {
                    state.failed = Some(format!("flushing to disk: {e}"));
                }
            }
            Ok(()) => {}
        }
    }
}

impl ChainWriter {
    /// Writes one record and advances the chain, or leaves both file and chain as they were.
    fn write_record(
        &mut self,
        source: &str,
        kind: &str,
        body: &Map<String, Value>,
    ) -> io::Result<u64> {
        let (seq, line) = self.format_record(source, kind, body);
        self.write_line(seq, line)
    }

    /// The next record's `seq` and its line, without the newline (a body too long for a
    /// reader stands as its size and hash).
    fn format_record(&self, source: &str, kind: &str, body: &Map<String, Value>) -> (u64, Vec<u8>) {
        let ts_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let seq = self.next_seq;
        let mut line = chain::format_line(seq, &self.head, ts_ms, source, kind, body);
        if line.len() > chain::MAX_RECORD_LINE {
            // Longer than a reader takes: its size and hash stand for it.
            tracing::warn!(
                kind,
                bytes = line.len(),
                "audit record longer than {} bytes: only its size and hash are written",
                chain::MAX_RECORD_LINE
            );
            let stand_in = chain::oversized_body(&line);
            line = chain::format_line(seq, &self.head, ts_ms, source, kind, &stand_in);
        }
        (seq, line)
    }

    /// Writes a line [`ChainWriter::format_record`] made and advances the chain, or leaves
    /// both file and chain as they were.
    fn write_line(&mut self, seq: u64, mut line: Vec<u8>) -> io::Result<u64> {
        let hash = chain::line_hash(&line);
        crate::audit::export_fields::note_undeclared(&line);
        line.push(b'\n');
        let end = if self.regular {
            Some(self.file.metadata()?.len())
        } else {
            None
        };
        // One `write` for the whole line (regular files do not return short writes short of
        // an error, but a fatal signal can end the copy part way: the next opener cuts that
        // off, see `remove_torn_record`); the chain advances only when it succeeded.
        if let Err(e) = (&self.file).write_all(&line) {
            // A short write (disk full, a file size limit) left part of the line: cut it off,
            // so the next record starts a line of its own and the chain stays verifiable.
            if let Some(end) = end
                && let Err(cut) = self.file.set_len(end)
            {
                tracing::warn!("removing a partly written audit record: {cut}");
            }
            return Err(e);
        }
        self.next_seq = seq + 1;
        self.head = hash;
        if let Some(outbox) = &self.outbox {
            // A local append, no network: the shipper thread sends it.
            outbox.append(&line);
        }
        Ok(seq)
    }

    /// A record its writer was killed while writing (a fatal signal stops a `write` between
    /// two pages of the copy, so even one `write` of a line can end part way): the file is cut
    /// back to the end of the last complete record, under the lock that was free (so its writer
    /// is gone), and a `torn-record-removed` record with the cut bytes' length and SHA-256
    /// says so in the chain. The cut record was never part of the chain (its writer had not
    /// advanced the chain past it), and no run goes on from a log that ends in half a line.
    fn remove_torn_record(&mut self, torn: &[u8]) -> io::Result<()> {
        let len = self.file.metadata()?.len();
        let end = len
            .checked_sub(torn.len() as u64)
            .ok_or_else(|| io::Error::other("the log shrank while it was read"))?;
        tracing::warn!(
            bytes = torn.len(),
            "the audit log ends in a record cut short (its writer was killed while writing it): \
             cutting it off and recording its length and hash"
        );
        self.file
            .set_len(end)
            .map_err(|e| io::Error::new(e.kind(), format!("cutting off a torn record: {e}")))?;
        let body = Map::from_iter([(
            "torn_record".to_string(),
            serde_json::json!({
                "bytes": torn.len(),
                "sha256": chain::line_hash(torn),
                "at_offset": end,
            }),
        )]);
        self.write_record("supervisor", "torn-record-removed", &body)
            .map(|_| ())
    }

    fn count_lost(&mut self, e: io::Error) -> io::Error {
        self.not_written += 1;
        self.last_error = Some(e.to_string());
        if self.failed.is_none() {
            self.failed = Some(format!("record {}: {e}", self.next_seq));
        }
        e
    }
}

/// Writes to the log block normally; only its open had to be non-blocking.
fn clear_nonblocking(file: &File) {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    if let Ok(bits) = fcntl(file, FcntlArg::F_GETFL) {
        let _ = fcntl(
            file,
            FcntlArg::F_SETFL(OFlag::from_bits_truncate(bits) & !OFlag::O_NONBLOCK),
        );
    }
}

/// Whether the last component of an output path may be followed: only the caller's own
/// descriptors (`/dev/stdout`, `/proc/self/fd/N`), never a link the sandbox could have made.
pub fn may_follow_last(path: &Path) -> bool {
    path.starts_with("/dev") || path.starts_with("/proc/self/fd")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::chain::verify;

    #[test]
    fn records_chain_and_a_reopened_log_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runs/x/audit.jsonl");
        let sink = AuditSink::open(&path).unwrap();
        assert_eq!(sink.head(), None);
        assert_eq!(sink.head_hash(), GENESIS);
        sink.record(
            "supervisor",
            "run-start",
            &serde_json::json!({ "argv": ["true"] }),
        );
        sink.clone_handle()
            .record("supervisor", "network", &serde_json::json!({ "seq": 99 }));
        let (seq, head) = sink.head().unwrap();
        assert_eq!(seq, 1);
        assert!(
            AuditSink::open(&path).is_err(),
            "a second writer is refused"
        );
        sink.sync();
        drop(sink);

        let again = AuditSink::open(&path).unwrap();
        assert_eq!(again.head(), Some((1, head)));
        again.record("supervisor", "run-end", &());
        let text = fs::read_to_string(&path).unwrap();
        let report = verify(text.as_bytes(), Some(&again.head_hash())).unwrap();
        assert!(report.intact, "{report:?}");
        assert_eq!(report.records, 3);
        assert!(text.contains(r#""body_seq":99"#));
    }

    #[test]
    fn a_record_longer_than_a_reader_takes_is_written_as_its_size_and_hash() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let sink = AuditSink::open(&path).unwrap();
        let huge = "x".repeat(chain::MAX_RECORD_LINE);
        sink.record(
            "supervisor",
            "sweep",
            &serde_json::json!({ "findings": [huge] }),
        );
        sink.record("supervisor", "run-end", &());
        let text = fs::read_to_string(&path).unwrap();
        assert!(text.len() < 1024, "{} bytes written", text.len());
        let first: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(first["kind"], "sweep");
        let stand_in = &first["record_too_long"];
        assert!(stand_in["bytes"].as_u64().unwrap() > chain::MAX_RECORD_LINE as u64);
        assert_eq!(stand_in["sha256"].as_str().unwrap().len(), 64);
        let report = verify(text.as_bytes(), Some(&sink.head_hash())).unwrap();
        assert!(report.intact, "{report:?}");
    }

    #[test]
    fn a_record_cut_short_is_removed_and_said_in_the_chain() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let sink = AuditSink::open(&path).unwrap();
        sink.record("supervisor", "run-start", &());
        sink.record("supervisor", "run-end", &());
        drop(sink);
        let whole = fs::read(&path).unwrap();
        // A third record cut short by the kill of its writer.
        let torn = br#"{"seq":2,"prev":"ab"#;
        fs::write(&path, [whole.as_slice(), torn].concat()).unwrap();
        let sink = AuditSink::open(&path).unwrap();
        sink.record("supervisor", "run-start", &());
        let text = fs::read_to_string(&path).unwrap();
        assert!(text.starts_with(std::str::from_utf8(&whole).unwrap()));
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert_eq!(lines[2]["kind"], "torn-record-removed");
        let cut = &lines[2]["torn_record"];
        assert_eq!(cut["bytes"], torn.len());
        assert_eq!(cut["sha256"], chain::line_hash(torn));
        assert_eq!(cut["at_offset"], whole.len());
        let report = verify(text.as_bytes(), Some(&sink.head_hash())).unwrap();
        assert!(report.intact, "{report:?}");
        // Not the start of a record: not a StepProof log, left alone.
        let other = dir.path().join("other.jsonl");
        fs::write(&other, [whole.as_slice(), b"hello"].concat()).unwrap();
        let err = AuditSink::open(&other).err().unwrap();
        assert!(err.to_string().contains("cut short"), "{err}");
        assert!(fs::read(&other).unwrap().ends_with(b"hello"));
    }
}
