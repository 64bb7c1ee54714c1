//! Every audit record also goes out as an OpenTelemetry log record (OTLP over HTTP/protobuf),
//! through StepProof's own outbox: the sink appends each record it writes to the outbox file in
//! the run's directory (one `write`, under the chain's lock, so the outbox is in chain order),
//! and a thread of the supervisor ships what is there. Nothing on the audit write path waits
//! for the network. A collector that is down only delays delivery: the records wait in the
//! outbox, the end of the run waits at most `flush_timeout`, and `stepproof audit ship DIR`
//! sends what is left later. Delivery is at least once (a batch whose answer was lost is sent
//! again); every record carries `(run id, seq, hash)`, so duplicates are dropped by whoever
//! reads the export (`stepproof audit verify` on an export read back does).
//!
//! The run directory holds `export-outbox.jsonl` (a header line, then the run's records exactly
//! as in the log) and `export-sent` (how far the collector has taken it: bytes and records).

use crate::audit::export_config::{ExportConfig, ExportSettings, Redaction};
use crate::audit::export_http::{self, SendError};
use crate::audit::export_otlp::{self, RunIdentity};
use serde::{Deserialize, Serialize};
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub const OUTBOX_FILE: &str = "export-outbox.jsonl";
pub const SENT_FILE: &str = "export-sent";

/// Records per request, and bytes per request (a larger single record goes alone).
const MAX_BATCH: usize = 512;
const MAX_BATCH_BYTES: usize = 1 << 20;
/// How long the shipper lets records gather before a request, while the run is on.
const BATCH_DELAY: Duration = Duration::from_millis(200);
/// Retries of a failed request while the run is on: doubling up to this.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// The outbox's first line: what `stepproof audit ship` needs to send the rest (never a
/// header value: those are read from the environment again).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OutboxHeader {
    pub stepproof_outbox: u32,
    pub run_id: String,
    pub first_seq: u64,
    pub endpoint: String,
    pub redact: Redaction,
    #[serde(default)]
    pub redact_keys: Vec<String>,
    #[serde(default)]
    pub headers_env: Vec<String>,
    pub resource: Vec<(String, String)>,
}

impl OutboxHeader {
    fn identity(&self) -> RunIdentity {
        RunIdentity {
            run_id: self.run_id.clone(),
            first_seq: self.first_seq,
            redaction: self.redact,
            redact_keys: self.redact_keys.clone(),
            resource: self.resource.clone(),
        }
    }
}

/// A new run id: 128 random bits in hex.
pub fn new_run_id() -> String {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 16];
    if ring::rand::SystemRandom::new().fill(&mut bytes).is_err() {
        // No randomness: the time and pid still tell runs apart on one host.
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        bytes[..12].copy_from_slice(&nanos.to_le_bytes()[..12]);
        bytes[12..].copy_from_slice(&std::process::id().to_le_bytes());
    }
    hex::encode(bytes)
}

/// The outbox as the sink writes it and the shipper reads it.
pub struct Outbox {
    path: PathBuf,
    file: File,
    progress: Mutex<Progress>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct Progress {
    /// Records appended by this process.
    appended: u64,
    /// Records whose append failed (they are in the local log, not in the outbox).
    not_appended: u64,
    sent: u64,
    rejected: u64,
    /// Requests that failed (and were tried again, or left for later).
    failed_requests: u64,
    last_error: Option<String>,
    /// The run is ending: ship what is left until then.
    flush_until: Option<Instant>,
    /// The shipper stopped trying (the collector refused records for good, or was unreachable
    /// while the run ended).
    halted: bool,
    stop: bool,
}

impl Outbox {
    /// Appends one line (with its newline). Called by the sink under its lock: a local write.
    pub fn append(&self, line: &[u8]) {
        let result = (&self.file).write_all(line);
        let mut p = self.lock();
        match result {
            Ok(()) => p.appended += 1,
            Err(e) => {
                p.not_appended += 1;
                p.last_error = Some(format!("appending to {}: {e}", self.path.display()));
            }
        }
        drop(p);
        self.changed.notify_all();
    }

    fn lock(&self) -> MutexGuard<'_, Progress> {
        self.progress.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What became of a run's export, for its status.
#[derive(Debug, Clone, Serialize)]
pub struct ExportSummary {
    pub endpoint: String,
    pub outbox: String,
    pub records: u64,
    pub sent: u64,
    pub unsent: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub rejected: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub not_in_outbox: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub failed_requests: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The run's exporter: the outbox the sink writes and the thread that ships it.
pub struct Exporter {
    outbox: Arc<Outbox>,
    dir: PathBuf,
    endpoint: String,
    flush_timeout: Duration,
}

impl Exporter {
    /// Creates the outbox in `dir` (the run's directory, outside the sandbox) and starts the
    /// shipper thread. `first_seq` is the `seq` the run's first record will have.
    pub fn start(
        dir: &Path,
        config: ExportConfig,
        run_id: &str,
        first_seq: u64,
        resource: Vec<(String, String)>,
        quiet: &'static std::sync::RwLock<()>,
    ) -> Result<Exporter, String> {
        use std::os::unix::fs::DirBuilderExt;
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let path = dir.join(OUTBOX_FILE);
        let header = OutboxHeader {
            stepproof_outbox: 1,
            run_id: run_id.to_string(),
            first_seq,
            endpoint: config.endpoint.url(),
            redact: config.redaction,
            redact_keys: config.redact_keys.clone(),
            headers_env: config.headers_env.clone(),
            resource,
        };
        let file = OpenOptions::new()
            .create_new(true)
            .append(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| format!("creating the outbox {}: {e}", path.display()))?;
        let mut first = serde_json::to_vec(&header).unwrap_or_default();
        first.push(b'\n');
        (&file)
            .write_all(&first)
            .map_err(|e| format!("writing the outbox {}: {e}", path.display()))?;
        let outbox = Arc::new(Outbox {
            path: path.clone(),
            file,
            progress: Mutex::new(Progress::default()),
            changed: Condvar::new(),
        });
        let shipper = Shipper::open(dir, header, config.clone())?;
        let shared = outbox.clone();
        let (started, running) = std::sync::mpsc::channel::<()>();
        std::thread::Builder::new()
            .name("audit-export".into())
            .spawn(move || {
                let _ = started.send(());
                ship_while_running(&shared, shipper, quiet)
            })
            .map_err(|e| format!("starting the export thread: {e}"))?;
        // The sandbox's init is cloned later from a copy of this process's memory (not a
        // fork: glibc does not tidy its thread list there). A thread glibc still counts as
        // being created in that copy makes the init's `setgroups` wait for it forever, so the
        // thread must be running before this returns.
        running
            .recv()
            .map_err(|_| "the export thread did not start".to_string())?;
        Ok(Exporter {
            outbox,
            dir: dir.to_path_buf(),
            endpoint: config.endpoint.url(),
            flush_timeout: config.flush_timeout,
        })
    }

    /// The outbox the sink appends to.
    pub fn outbox(&self) -> Arc<Outbox> {
        self.outbox.clone()
    }

    /// The end of the run: ships what is left for at most the flush timeout (less when the
    /// collector cannot be reached at all), then stops the shipper. What is not sent stays in
    /// the outbox.
    pub fn finish(self) -> ExportSummary {
        let until = Instant::now() + self.flush_timeout;
        let mut p = self.outbox.lock();
        p.flush_until = Some(until);
        self.outbox.changed.notify_all();
        loop {
            let now = Instant::now();
            if p.sent >= p.appended || p.halted || now >= until {
                break;
            }
            p = self
                .outbox
                .changed
                .wait_timeout(p, until - now)
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        }
        p.stop = true;
        self.outbox.changed.notify_all();
        ExportSummary {
            endpoint: self.endpoint.clone(),
            outbox: crate::audit::text::path(&self.dir).into_owned(),
            records: p.appended,
            sent: p.sent.min(p.appended),
            unsent: p.appended.saturating_sub(p.sent),
            rejected: p.rejected,
            not_in_outbox: p.not_appended,
            failed_requests: p.failed_requests,
            last_error: p.last_error.clone(),
        }
    }
}

impl Drop for Exporter {
    /// A run that ends without `finish` (an error after the start record) leaves what is not
    /// sent in the outbox.
    fn drop(&mut self) {
        self.outbox.lock().stop = true;
        self.outbox.changed.notify_all();
    }
}

/// The shipper thread: waits for records, lets a batch gather, sends it, backs off on failure.
/// `quiet` is held for reading while a batch is shipped (see [`Exporter::start`]'s caller: the
/// sandbox's init must never be cloned from a copy of this process while this thread holds a
/// lock of the process, the allocator's included).
fn ship_while_running(outbox: &Outbox, mut shipper: Shipper, quiet: &std::sync::RwLock<()>) {
    // Started before the supervisor blocks the signals it reads through its signalfd: a signal
    // must never land here (Ctrl-C or SIGTERM would take the default action and end the
    // supervisor without its end record; SIGCHLD would be lost; a read would fail with EINTR).
    let _ = nix::sys::signal::SigSet::all().thread_block();
    let mut backoff = Duration::ZERO;
    let mut retry_at: Option<Instant> = None;
    // The end of the run does not wait out a backoff taken while the run was on.
    let mut flush_tried = false;
    loop {
        let flush_until = {
            let mut p = outbox.lock();
            loop {
                if p.stop {
                    return;
                }
                let now = Instant::now();
                let ready =
                    retry_at.is_none_or(|t| now >= t) || (p.flush_until.is_some() && !flush_tried);
                if p.appended > shipper.sent && ready && !p.halted {
                    break;
                }
                let wait = match retry_at {
                    Some(t) if !p.halted => t.saturating_duration_since(now),
                    _ => Duration::from_secs(3600),
                };
                p = outbox
                    .changed
                    .wait_timeout(p, wait.max(Duration::from_millis(1)))
                    .map(|(g, _)| g)
                    .unwrap_or_else(|e| e.into_inner().0);
            }
            if p.flush_until.is_none() {
                // Let records gather unless a full batch is already there.
                let gathered = outbox
                    .changed
                    .wait_timeout_while(p, BATCH_DELAY, |p| {
                        !p.stop
                            && p.flush_until.is_none()
                            && p.appended.saturating_sub(shipper.sent) < MAX_BATCH as u64
                    })
                    .map(|(g, _)| g)
                    .unwrap_or_else(|e| e.into_inner().0);
                gathered.flush_until
            } else {
                p.flush_until
            }
        };
        flush_tried |= flush_until.is_some();
        // Held to the end of this round (what follows the batch allocates too).
        let _quiet = quiet.read().unwrap_or_else(|e| e.into_inner());
        let result = shipper.ship_batch(flush_until);
        let mut p = outbox.lock();
        match result {
            Ok(Batch::Sent { records, rejected }) => {
                p.sent = shipper.sent;
                p.rejected += rejected;
                p.last_error = None;
                backoff = Duration::ZERO;
                retry_at = None;
                tracing::debug!(records, "audit records exported");
            }
            Ok(Batch::Nothing) => {
                // A line still being written: look again shortly.
                retry_at = Some(Instant::now() + Duration::from_millis(5));
            }
            Err(e) => {
                let ending = flush_until.is_some();
                let past = flush_until.is_some_and(|t| Instant::now() >= t);
                match &e {
                    SendError::Refused(_) => p.halted = true,
                    SendError::Unreachable(_) if ending => p.halted = true,
                    _ if past => p.halted = true,
                    _ => {}
                }
                tracing::debug!("audit export: {e}");
                p.failed_requests += 1;
                p.last_error = Some(e.to_string());
                backoff = (backoff * 2).clamp(Duration::from_millis(250), MAX_BACKOFF);
                if ending {
                    backoff = backoff.min(Duration::from_millis(250));
                }
                retry_at = Some(Instant::now() + backoff);
            }
        }
        drop(p);
        outbox.changed.notify_all();
    }
}

enum Batch {
    Nothing,
    Sent { records: usize, rejected: u64 },
}

/// Reads the outbox from where the collector's acknowledgements end, and sends it on.
struct Shipper {
    reader: File,
    sent_path: PathBuf,
    /// Bytes of the outbox taken by the collector (the header included).
    offset: u64,
    /// Records taken.
    sent: u64,
    identity: RunIdentity,
    config: ExportConfig,
    tls: Option<Arc<rustls::ClientConfig>>,
}

#[derive(Debug, thiserror::Error)]
enum OpenError {
    #[error("{0}")]
    Busy(String),
    #[error("{0}")]
    Other(String),
}

impl Shipper {
    /// The outbox in `dir`, locked for this shipper alone (a run's own thread, or `audit ship`).
    fn open(dir: &Path, header: OutboxHeader, config: ExportConfig) -> Result<Shipper, String> {
        Shipper::open_locked(dir, header, config).map_err(|e| e.to_string())
    }

    fn open_locked(
        dir: &Path,
        header: OutboxHeader,
        config: ExportConfig,
    ) -> Result<Shipper, OpenError> {
        let path = dir.join(OUTBOX_FILE);
        let reader = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&path)
            .map_err(|e| OpenError::Other(format!("opening {}: {e}", path.display())))?;
        reader.try_lock().map_err(|e| match e {
            fs::TryLockError::WouldBlock => OpenError::Busy(format!(
                "{}: its run (or another `audit ship`) is shipping it now",
                path.display()
            )),
            fs::TryLockError::Error(e) => {
                OpenError::Other(format!("locking {}: {e}", path.display()))
            }
        })?;
        let sent_path = dir.join(SENT_FILE);
        let (offset, sent) = match fs::read_to_string(&sent_path) {
            Ok(text) => parse_sent(&text).ok_or_else(|| {
                OpenError::Other(format!(
                    "{}: not a StepProof export cursor",
                    sent_path.display()
                ))
            })?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => (0, 0),
            Err(e) => {
                return Err(OpenError::Other(format!(
                    "reading {}: {e}",
                    sent_path.display()
                )));
            }
        };
        let tls = export_http::tls_config(&config).map_err(OpenError::Other)?;
        let mut shipper = Shipper {
            reader,
            sent_path,
            offset,
            sent,
            identity: header.identity(),
            config,
            tls,
        };
        if shipper.offset == 0 {
            // Past the header line.
            let mut header_len = 0u64;
            shipper
                .seek(0)
                .map_err(|e| OpenError::Other(e.to_string()))?;
            crate::audit::chain::for_each_line(BufReader::new(&shipper.reader), |line| {
                if let crate::audit::chain::LogLine::Terminated(b) = line {
                    header_len = b.len() as u64 + 1;
                }
                false
            })
            .map_err(|e| OpenError::Other(e.to_string()))?;
            shipper.offset = header_len;
        }
        Ok(shipper)
    }

    fn seek(&mut self, to: u64) -> io::Result<()> {
        self.reader.seek(SeekFrom::Start(to)).map(|_| ())
    }

    /// The next complete lines after the offset: at most a batch.
    fn next_lines(&mut self) -> io::Result<(Vec<Vec<u8>>, u64)> {
        self.seek(self.offset)?;
        let mut lines = Vec::new();
        let mut bytes = 0u64;
        crate::audit::chain::for_each_line(BufReader::new(&self.reader), |line| {
            match line {
                crate::audit::chain::LogLine::Terminated(b) => {
                    bytes += b.len() as u64 + 1;
                    lines.push(b.to_vec());
                }
                // A line still being written, or one longer than any record (cannot be, from
                // our writer): stop before it.
                _ => return false,
            }
            lines.len() < MAX_BATCH && bytes < MAX_BATCH_BYTES as u64
        })?;
        Ok((lines, bytes))
    }

    /// Sends the next batch; `until` bounds the request (the end of the run's flush).
    fn ship_batch(&mut self, until: Option<Instant>) -> Result<Batch, SendError> {
        let (lines, bytes) = self
            .next_lines()
            .map_err(|e| SendError::Transient(format!("reading the outbox: {e}")))?;
        if lines.is_empty() {
            return Ok(Batch::Nothing);
        }
        let observed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let records: Vec<_> = lines
            .iter()
            .filter_map(|l| export_otlp::log_record(l, &self.identity, observed))
            .collect();
        let body = prost::Message::encode_to_vec(&export_otlp::request(&self.identity, records));
        let deadline = export_http::request_deadline(&self.config, until);
        let delivered = export_http::post(
            &self.config.endpoint,
            &self.config.headers,
            self.tls.as_ref(),
            &body,
            deadline,
        )?;
        if let Some(message) = &delivered.message {
            tracing::warn!("the collector rejected some audit records: {message}");
        }
        self.offset += bytes;
        self.sent += lines.len() as u64;
        if let Err(e) = self.persist() {
            // Sent again next time: at least once.
            tracing::warn!("{}: {e}", self.sent_path.display());
        }
        Ok(Batch::Sent {
            records: lines.len(),
            rejected: delivered.rejected,
        })
    }

    /// `export-sent`, replaced whole (a crash leaves the old or the new one).
    fn persist(&self) -> io::Result<()> {
        let tmp = self.sent_path.with_extension("tmp");
        let _ = fs::remove_file(&tmp);
        let mut file = OpenOptions::new()
            .create_new(true)
            .write(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(format!("{} {}\n", self.offset, self.sent).as_bytes())?;
        fs::rename(&tmp, &self.sent_path)
    }

    /// Records in the outbox after the offset (counted by reading the rest).
    fn left(&mut self) -> io::Result<u64> {
        self.seek(self.offset)?;
        let mut n = 0;
        crate::audit::chain::for_each_line(BufReader::new(&self.reader), |line| {
            if matches!(line, crate::audit::chain::LogLine::Terminated(_)) {
                n += 1;
            }
            true
        })?;
        Ok(n)
    }
}

fn parse_sent(text: &str) -> Option<(u64, u64)> {
    let mut parts = text.split_whitespace();
    let offset = parts.next()?.parse().ok()?;
    let sent = parts.next()?.parse().ok()?;
    parts.next().is_none().then_some((offset, sent))
}

/// What `stepproof audit ship` did with one outbox.
#[derive(Debug, Serialize)]
pub struct Shipped {
    pub outbox: String,
    pub run_id: Option<String>,
    pub sent: u64,
    pub left: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Another process (the run itself) holds the outbox.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub busy: bool,
}

/// The outboxes under `dir`: its own, or those of the run directories in it.
pub fn outboxes_under(dir: &Path) -> Vec<PathBuf> {
    if dir.join(OUTBOX_FILE).is_file() {
        return vec![dir.to_path_buf()];
    }
    let mut found: Vec<PathBuf> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .filter(|p| p.join(OUTBOX_FILE).is_file())
        .collect();
    found.sort();
    found
}

/// Sends what is left in the outbox of the run directory `dir`, with the endpoint and headers
/// of this environment (the endpoint the run used when none is named), until it is empty or
/// a request fails.
pub fn ship_outbox(dir: &Path, env: &dyn Fn(&str) -> Option<String>) -> Shipped {
    let outbox = crate::audit::text::path(dir).into_owned();
    let mut shipped = Shipped {
        outbox,
        run_id: None,
        sent: 0,
        left: 0,
        error: None,
        busy: false,
    };
    let header = match read_header(&dir.join(OUTBOX_FILE)) {
        Ok(h) => h,
        Err(e) => {
            shipped.error = Some(e);
            return shipped;
        }
    };
    shipped.run_id = Some(header.run_id.clone());
    let config = match config_for_ship(&header, env) {
        Ok(c) => c,
        Err(e) => {
            shipped.error = Some(e);
            return shipped;
        }
    };
    let mut shipper = match Shipper::open_locked(dir, header, config) {
        Ok(s) => s,
        Err(OpenError::Busy(e)) => {
            shipped.busy = true;
            shipped.error = Some(e);
            return shipped;
        }
        Err(OpenError::Other(e)) => {
            shipped.error = Some(e);
            return shipped;
        }
    };
    loop {
        match shipper.ship_batch(None) {
            Ok(Batch::Sent { records, .. }) => shipped.sent += records as u64,
            Ok(Batch::Nothing) => break,
            Err(e) => {
                shipped.error = Some(e.to_string());
                break;
            }
        }
    }
    shipped.left = shipper.left().unwrap_or(0);
    shipped
}

fn read_header(path: &Path) -> Result<OutboxHeader, String> {
    let file = crate::regular_file::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut first = None;
    crate::audit::chain::for_each_line(BufReader::new(&file), |line| {
        if let crate::audit::chain::LogLine::Terminated(b) = line {
            first = Some(b.to_vec());
        }
        false
    })
    .map_err(|e| format!("reading {}: {e}", path.display()))?;
    first
        .and_then(|b| serde_json::from_slice::<OutboxHeader>(&b).ok())
        .filter(|h| h.stepproof_outbox == 1)
        .ok_or_else(|| format!("{}: not a StepProof export outbox", path.display()))
}

/// This environment's export settings, the run's endpoint when it names none, and always the
/// run's redaction (a record is shipped the same way whoever ships it).
fn config_for_ship(
    header: &OutboxHeader,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<ExportConfig, String> {
    let named = [
        "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ]
    .iter()
    .any(|n| env(n).is_some_and(|v| !v.trim().is_empty()));
    let env_with_run = |name: &str| {
        if !named && name == "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT" {
            return Some(header.endpoint.clone());
        }
        if matches!(name, "OTEL_SDK_DISABLED" | "OTEL_LOGS_EXPORTER") {
            return None;
        }
        env(name)
    };
    let settings = ExportSettings {
        headers_env: header.headers_env.clone(),
        ..ExportSettings::default()
    };
    let mut config = crate::audit::export_config::resolve(Some(&settings), &env_with_run)?
        .ok_or_else(|| "no endpoint to ship to".to_string())?;
    config.redaction = header.redact;
    config.redact_keys = header.redact_keys.clone();
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cursor_reads_back() {
        assert_eq!(parse_sent("120 3\n"), Some((120, 3)));
        assert_eq!(parse_sent("120"), None);
        assert_eq!(parse_sent("1 2 3"), None);
        assert_eq!(new_run_id().len(), 32);
        assert_ne!(new_run_id(), new_run_id());
    }
}
