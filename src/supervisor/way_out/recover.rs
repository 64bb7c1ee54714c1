//! The end a run owes, made to survive its supervisor. The way out (the sweep: quarantine,
//! repository configs put back) runs at the run's end; a supervisor killed with SIGKILL (a
//! user, a CI job's timeout, the OOM killer, a reboot) never gets there, and what the agent
//! left — `core.fsmonitor` in `.git/config` — would stay for the host's next `git status`, and
//! be taken by the next run as its launch version.
//!
//! So at launch, before the command starts, the run records in its run directory what its end
//! owes ([`Owed::record`]): the launch [`Snapshot`] and the [`SweepScope`] the sweep needs,
//! the workspace, its audit log and where its `run-start` record is, its id and its pid, in the
//! marker `owed.json` (written atomically and durably), while it holds the run directory's lock
//! (see [`crate::audit::owed`]). Once its sweep is done it says so (`owed-swept.json`, with
//! what the sweep found), and at a normal end the marker goes once the `run-end` record is on
//! disk ([`Owed::discharge`]).
//!
//! [`recover`] finishes a run that died: when the marker is there and the lock is free (the
//! supervisor and everything that held the lock are gone; a held lock means alive, or a repair
//! at work), it takes the lock, runs the same sweep with the saved snapshot (unless the run had
//! swept already), appends `run-end-recovered` to the run's audit log, and removes the marker.
//! Its work is bounded as the sweep's is (one walk of what the run could write). Whatever it
//! cannot finish — a finding it could not move or put back, a log it cannot write — leaves the
//! marker, and says why; a sweep that was done is not done again (its result is kept beside the
//! marker), so the next attempt only writes the record.
//!
//! `stepproof repair [WORKSPACE]` calls it for the runs of a workspace (or every run), and
//! `stepproof-run` for the runs of its workspace before it takes its own snapshot, so that a
//! run never takes a config the agent poisoned as its launch version.

use crate::audit::chain::{self, RUN_END_RECOVERED};
use crate::audit::owed::{self, Header, MARKER, SWEPT};
use crate::audit::sink::AuditSink;
use crate::supervisor::way_out::sweep::{Finding, Snapshot, SweepScope};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::fs::{self, File, TryLockError};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Who finished a run's end (`via` in `run-end-recovered`).
pub const VIA_REPAIR: &str = "stepproof-repair";
pub const VIA_RUN: &str = "stepproof-run";

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1u32 << 20))
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The marker as the run writes it.
#[derive(Serialize)]
struct MarkerOut<'a> {
    #[serde(flatten)]
    header: &'a Header,
    scope: &'a SweepScope,
    snapshot: &'a Snapshot,
}

/// The marker as a repair reads it.
#[derive(Deserialize)]
struct Marker {
    #[serde(flatten)]
    header: Header,
    scope: SweepScope,
    snapshot: Snapshot,
}

/// What a sweep of an owed run found, kept beside the marker once it is done (by the run
/// itself, or by a repair whose record could not be written yet), and carried into the
/// `run-end-recovered` record as the `sweep` record would have carried it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Swept {
    /// `run` (the run swept before it died) or `recovery`.
    pub swept_by: String,
    pub swept_at_ms: u64,
    /// Each finding as the `sweep` record writes it.
    pub findings: Vec<Value>,
    pub host_edits: Vec<String>,
    /// The files put back as they were at launch (repository configs, what decides what the
    /// host's git shows).
    pub restored: Vec<String>,
    pub proposed_changes: Option<String>,
    /// What the repair noted (a workspace that is gone, a patch that could not be written).
    #[serde(default)]
    pub notes: Vec<String>,
}

impl Swept {
    pub fn of(
        swept_by: &str,
        findings: &[Finding],
        host_edits: &[PathBuf],
        restored: &[PathBuf],
        proposed: Option<&Path>,
    ) -> Swept {
        let text = |p: &Path| crate::audit::text::path(p).into_owned();
        Swept {
            swept_by: swept_by.into(),
            swept_at_ms: now_ms(),
            findings: findings
                .iter()
                .map(|f| serde_json::to_value(f).unwrap_or_default())
                .collect(),
            host_edits: host_edits.iter().map(|p| text(p)).collect(),
            restored: restored.iter().map(|p| text(p)).collect(),
            proposed_changes: proposed.map(text),
            notes: Vec::new(),
        }
    }

    /// The findings the sweep could not handle (not moved, not put back, not looked at): what
    /// a repair has not repaired.
    pub fn failures(&self) -> Vec<String> {
        self.findings
            .iter()
            .filter_map(|f| {
                let error = f.get("error").and_then(Value::as_str)?;
                Some(format!(
                    "{} {}: {error}",
                    f.get("change").and_then(Value::as_str).unwrap_or("?"),
                    f.get("path").and_then(Value::as_str).unwrap_or("?")
                ))
            })
            .collect()
    }

    /// One line per finding, as the run's end says them.
    pub fn lines(&self) -> Vec<String> {
        self.findings
            .iter()
            .map(|f| {
                let s = |k: &str| f.get(k).and_then(Value::as_str);
                let detail = s("detail").map(|d| format!(" ({d})")).unwrap_or_default();
                let change = s("change").unwrap_or("?");
                let path = s("path").unwrap_or("?");
                match (s("quarantined_to"), s("error")) {
                    (Some(q), _) => format!("{change} {path}{detail} -> quarantined to {q}"),
                    (None, Some(e)) => format!("{change} {path}{detail} (NOT handled: {e})"),
                    (None, None) => format!("{change} {path}{detail}"),
                }
            })
            .collect()
    }
}

/// The run's hold on its marker: the lock, held until the process ends, and the directory.
pub struct Owed {
    run_dir: PathBuf,
    _lock: File,
}

impl Owed {
    /// Takes the run directory's lock (created, mode 0700, when missing) and writes the marker:
    /// what the end owes. Refused (the run must not start) when the lock is held or the marker
    /// cannot be written, or when it would be larger than [`owed::MAX_BYTES`].
    pub fn record(
        run_dir: &Path,
        run_id: &str,
        audit_log: Option<&Path>,
        run_start_seq: Option<u64>,
        scope: &SweepScope,
        snapshot: &Snapshot,
    ) -> Result<Owed, String> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(run_dir)
            .map_err(|e| format!("creating the run directory {}: {e}", run_dir.display()))?;
        let lock = owed::open_lock(run_dir)?;
        // A reader probing the lock (`doctor`, the retention rule) holds it for an instant.
        let mut tries = 0;
        loop {
            match lock.try_lock() {
                Ok(()) => break,
                Err(TryLockError::WouldBlock) if tries < 100 => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err(e) => {
                    return Err(format!(
                        "locking {}: {}",
                        run_dir.join(owed::LOCK).display(),
                        match e {
                            TryLockError::WouldBlock => "another process holds it".to_string(),
                            TryLockError::Error(e) => e.to_string(),
                        }
                    ));
                }
            }
        }
        let me = std::process::id();
        // Only a log a repair can append to (a regular file, not `/dev/stdout` or a pipe).
        let audit_log = audit_log
            .filter(|p| fs::metadata(p).is_ok_and(|m| m.is_file()))
            .map(Path::to_path_buf);
        let header = Header {
            format: owed::FORMAT.into(),
            version: owed::VERSION,
            run_id: run_id.into(),
            pid: me,
            pid_start: owed::process_start(me),
            boot_id: owed::boot_id(),
            started_at_ms: now_ms(),
            workspace: scope.workspace.clone(),
            audit_log,
            run_start_seq,
        };
        let bytes = serde_json::to_vec(&MarkerOut {
            header: &header,
            scope,
            snapshot,
        })
        .map_err(|e| format!("recording what the run's end owes: {e}"))?;
        if bytes.len() as u64 > owed::MAX_BYTES {
            return Err(format!(
                "the launch state of the workspace's persistence paths and repository configs is {}, more than the {} a run records in {} for its repair after a kill: refusing to start the command (a run whose end could not be finished if its supervisor died is not started); fewer or smaller repository configs or protected paths in {} fit",
                mib(bytes.len() as u64),
                mib(owed::MAX_BYTES),
                run_dir.join(MARKER).display(),
                scope.workspace.display()
            ));
        }
        owed::write_atomic(run_dir, MARKER, &bytes)?;
        Ok(Owed {
            run_dir: run_dir.to_path_buf(),
            _lock: lock,
        })
    }

    /// The run's sweep is done: what it found is kept beside the marker, so that a repair after
    /// a kill from here on only writes the record.
    pub fn swept(&self, swept: &Swept) -> Result<(), String> {
        let bytes = serde_json::to_vec(swept).map_err(|e| e.to_string())?;
        owed::write_atomic(&self.run_dir, SWEPT, &bytes)
    }

    /// The end is done (the sweep, and the `run-end` record on disk): the marker goes.
    pub fn discharge(self) -> Result<(), String> {
        owed::remove_durably(&self.run_dir, &[MARKER, SWEPT])
    }
}

/// What [`recover`] did with a run directory.
#[derive(Debug)]
pub enum Recovered {
    /// No marker: nothing is owed (or the run finished meanwhile).
    Nothing,
    /// Its lock is held: the run is not dead (`alive`: its supervisor is running), or another
    /// process is repairing it.
    Live { alive: bool },
    /// Finished.
    Done(Box<Repair>),
}

/// A run's end, finished.
#[derive(Debug)]
pub struct Repair {
    pub run_dir: PathBuf,
    pub header: Header,
    pub swept: Swept,
    pub recorded: Recorded,
    /// The runbook passes (and completion) of the run its recovered end voided.
    pub voided: Voided,
}

/// What a killed run's recovered end voided, as the run's own end would have: the steps the
/// run passed itself, and whether it had completed its runbook.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Voided {
    pub steps: Vec<String>,
    pub completion: bool,
}

/// Where the `run-end-recovered` record went.
#[derive(Debug)]
pub enum Recorded {
    /// Appended to the run's log: its `seq`.
    InLog { log: PathBuf, seq: u64 },
    /// Nowhere, and why (the run had no log a repair can append to, or it is gone).
    Nowhere(String),
}

/// Why a run's end could not be finished; the marker stays.
#[derive(Debug)]
pub struct Unfinished {
    pub run_dir: PathBuf,
    pub workspace: Option<PathBuf>,
    /// The sweep is done (kept beside the marker): the workspace is safe, only the record is
    /// missing.
    pub swept: bool,
    pub why: String,
}

impl std::fmt::Display for Unfinished {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the end of run {} {}: {}; its marker stays, `stepproof repair` tries again",
            self.run_dir.display(),
            if self.swept {
                "was swept but not recorded"
            } else {
                "could not be finished"
            },
            self.why
        )
    }
}

/// Finishes the end of the run in `run_dir` when it owes one and its supervisor is gone (see
/// the module's documentation). `via` names who does it in the record.
pub fn recover(run_dir: &Path, via: &str) -> Result<Recovered, Unfinished> {
    let unfinished = |workspace: Option<&Path>, swept: bool, why: String| Unfinished {
        run_dir: run_dir.to_path_buf(),
        workspace: workspace.map(Path::to_path_buf),
        swept,
        why,
    };
    let header = match owed::read_header(run_dir) {
        Ok(Some(header)) => header,
        Ok(None) => return Ok(Recovered::Nothing),
        Err(why) => return Err(unfinished(None, false, why)),
    };
    let me = std::process::id();
    if header.pid == me && header.pid_start == owed::process_start(me) {
        return Ok(Recovered::Live { alive: true });
    }
    let ws = Some(header.workspace.as_path());
    let lock = owed::open_lock(run_dir).map_err(|why| unfinished(ws, false, why))?;
    match lock.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            return Ok(Recovered::Live {
                alive: owed::supervisor_alive(&header),
            });
        }
        Err(TryLockError::Error(e)) => {
            return Err(unfinished(
                ws,
                false,
                format!("locking {}: {e}", run_dir.join(owed::LOCK).display()),
            ));
        }
    }
    // Under the lock: the marker as it is now (the run may have finished meanwhile).
    let bytes = match owed::read_marker(run_dir) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Ok(Recovered::Nothing),
        Err(why) => return Err(unfinished(ws, false, why)),
    };
    let marker: Marker = serde_json::from_slice(&bytes).map_err(|e| {
        unfinished(
            ws,
            false,
            format!("reading the marker {}: {e}", run_dir.join(MARKER).display()),
        )
    })?;
    if marker.header.version != owed::VERSION {
        return Err(unfinished(
            ws,
            false,
            format!(
                "the marker {} is of version {}, this StepProof reads version {}: repair it with the StepProof that wrote it",
                run_dir.join(MARKER).display(),
                marker.header.version,
                owed::VERSION
            ),
        ));
    }
    let kept = owed::read_small(&run_dir.join(SWEPT), owed::MAX_BYTES)
        .ok()
        .flatten()
        .and_then(|bytes| serde_json::from_slice::<Swept>(&bytes).ok());
    let swept = match kept {
        Some(swept) => swept,
        None => {
            let swept = sweep(run_dir, &marker);
            let failures = swept.failures();
            if !failures.is_empty() {
                // Not kept: the next attempt sweeps again, once what stood in the way is fixed.
                return Err(unfinished(
                    ws,
                    false,
                    format!(
                        "the sweep could not handle what the run left: {}",
                        failures.join("; ")
                    ),
                ));
            }
            if let Err(why) = serde_json::to_vec(&swept)
                .map_err(|e| e.to_string())
                .and_then(|bytes| owed::write_atomic(run_dir, SWEPT, &bytes))
            {
                tracing::warn!("keeping the repair's sweep: {why}");
            }
            swept
        }
    };
    let (recorded, voided) =
        record(&marker.header, &swept, via).map_err(|why| unfinished(ws, true, why))?;
    owed::remove_durably(run_dir, &[MARKER, SWEPT]).map_err(|why| unfinished(ws, true, why))?;
    drop(lock);
    Ok(Recovered::Done(Box::new(Repair {
        run_dir: run_dir.to_path_buf(),
        header: marker.header,
        swept,
        recorded,
        voided,
    })))
}

/// The sweep the run did not do, with its saved snapshot and scope: the same code as at a
/// normal end, moving what it finds to the run directory's quarantine (a new one beside it when
/// the run had started one).
fn sweep(run_dir: &Path, marker: &Marker) -> Swept {
    let workspace = &marker.scope.workspace;
    if matches!(fs::symlink_metadata(workspace), Err(e) if e.kind() == std::io::ErrorKind::NotFound)
    {
        let mut swept = Swept::of("recovery", &[], &[], &[], None);
        swept.notes.push(format!(
            "the workspace {} is gone: nothing to sweep",
            workspace.display()
        ));
        return swept;
    }
    let mut quarantine = run_dir.join("quarantine");
    if fs::symlink_metadata(&quarantine).is_ok() {
        quarantine = run_dir.join(format!("quarantine-recovered-{}", now_ms()));
    }
    let result = marker.snapshot.sweep_in(&marker.scope, &quarantine);
    let mut notes = result.notes.clone();
    let proposed =
        crate::supervisor::way_out::proposed::write_patch(workspace, &result.findings, run_dir)
            .unwrap_or_else(|e| {
                notes.push(format!("writing the proposed changes: {e}"));
                None
            });
    let mut swept = Swept::of(
        "recovery",
        &result.findings,
        &result.host_edits,
        &result.restored,
        proposed.as_deref(),
    );
    swept.notes = notes;
    swept
}

/// Appends `run-end-recovered` to the run's log, when it has one that is still there; before
/// it, when the sweep found tampering, the void records the run's own end would have written
/// (`runbook-step-void` for each step the run passed itself, `runbook-void`): a pass is final
/// only with the run, whoever finishes its end.
fn record(header: &Header, swept: &Swept, via: &str) -> Result<(Recorded, Voided), String> {
    let nowhere = |why: String| Ok((Recorded::Nowhere(why), Voided::default()));
    let Some(log) = &header.audit_log else {
        return nowhere("the run had no audit log a repair can append to".into());
    };
    match fs::symlink_metadata(log) {
        Ok(m) if m.is_file() => {}
        Ok(_) => {
            return nowhere(format!(
                "its audit log {} is no longer a regular file",
                log.display()
            ));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return nowhere(format!("its audit log {} is gone", log.display()));
        }
        Err(e) => return Err(format!("the audit log {}: {e}", log.display())),
    }
    if let Some(start) = header.run_start_seq
        && ended_in(log, start)
            .map_err(|e| format!("reading the audit log {}: {e}", log.display()))?
    {
        return nowhere(format!(
            "the run's own end is in its audit log {} (it was killed after writing it, before removing its marker)",
            log.display()
        ));
    }
    let sink = AuditSink::open(log).map_err(|e| e.to_string())?;
    let mut voided = Voided::default();
    if !swept.findings.is_empty()
        && let Some(start) = header.run_start_seq
    {
        let passes = runbook_passes(log, start)
            .map_err(|e| format!("reading the audit log {}: {e}", log.display()))?;
        voided = void_passes(&sink, &passes, swept, via)
            .map_err(|e| format!("writing the void records to {}: {e}", log.display()))?;
    }
    let body = json!({
        "run_id": header.run_id,
        chain::RUN_START_SEQ: header.run_start_seq,
        "pid": header.pid,
        "started_at_ms": header.started_at_ms,
        "workspace": crate::audit::text::path(&header.workspace),
        "recovered_by": std::process::id(),
        "recovered_at_ms": now_ms(),
        "via": via,
        "swept_by": swept.swept_by,
        "swept_at_ms": swept.swept_at_ms,
        "findings": swept.findings,
        "host_edits": swept.host_edits,
        "restored": swept.restored,
        "proposed_changes": swept.proposed_changes,
        "notes": swept.notes,
    });
    let seq = sink
        .append("supervisor", RUN_END_RECOVERED, &chain::body_object(body))
        .map_err(|e| format!("writing {RUN_END_RECOVERED} to {}: {e}", log.display()))?;
    sink.sync();
    if let Some(why) = sink.failure() {
        return Err(format!(
            "writing {RUN_END_RECOVERED} to {}: {why}",
            log.display()
        ));
    }
    Ok((
        Recorded::InLog {
            log: log.clone(),
            seq,
        },
        voided,
    ))
}

/// A run's runbook as its own log tells it after its `run-start`: the steps it passed itself
/// (with the attempt, not voided since) and whether it completed the runbook.
#[derive(Debug, Default)]
struct Passes {
    runbook: Option<String>,
    passed: Vec<(String, u64)>,
    completed: bool,
}

/// Reads the supervisor's runbook records of the run whose `run-start` has `seq` `start` in
/// `log` (a record from inside, `source: "sandbox"`, decides nothing), up to the next run's
/// start.
fn runbook_passes(log: &Path, start: u64) -> std::io::Result<Passes> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(log)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut passes = Passes::default();
    chain::for_each_line(std::io::BufReader::new(file), |line| {
        let chain::LogLine::Terminated(bytes) = line else {
            return true;
        };
        let Ok(record) = serde_json::from_slice::<Value>(bytes) else {
            return true;
        };
        let seq = record["seq"].as_u64().unwrap_or(0);
        if seq < start || record["source"] != "supervisor" {
            return true;
        }
        let kind = record["kind"].as_str().unwrap_or_default();
        let step = record["step"].as_str().map(str::to_string);
        match kind {
            "run-start" if seq == start => {
                passes.runbook = record["runbook"]["id"].as_str().map(str::to_string);
            }
            "run-start" => return false,
            "runbook-step-passed" => {
                if let Some(step) = step {
                    passes.passed.retain(|(s, _)| *s != step);
                    passes
                        .passed
                        .push((step, record["attempt"].as_u64().unwrap_or(0)));
                }
            }
            "runbook-step-void" => passes.passed.retain(|(s, _)| Some(s) != step.as_ref()),
            "runbook-complete" => passes.completed = true,
            "runbook-void" => passes.completed = false,
            _ => {}
        }
        true
    })?;
    Ok(passes)
}

/// Appends the void records of `passes` (the run's own end would have written them, see
/// `Engine::void`), saying who wrote them.
fn void_passes(
    sink: &AuditSink,
    passes: &Passes,
    swept: &Swept,
    via: &str,
) -> Result<Voided, String> {
    let Some(runbook) = &passes.runbook else {
        return Ok(Voided::default());
    };
    let n = swept.findings.len();
    let why = format!(
        "the recovered sweep of the killed run found tampering ({n} finding{}): a pass is final only with the run",
        if n == 1 { "" } else { "s" },
    );
    let named: Vec<String> = swept
        .findings
        .iter()
        .take(1024)
        .map(|f| {
            format!(
                "{} {}",
                f["change"].as_str().unwrap_or("?"),
                f["path"].as_str().unwrap_or("?")
            )
        })
        .collect();
    let append = |kind: &str, body: Value| {
        sink.append("supervisor", kind, &chain::body_object(body))
            .map(|_| ())
            .map_err(|e| format!("{kind}: {e}"))
    };
    let mut voided = Voided {
        steps: Vec::new(),
        completion: passes.completed,
    };
    for (step, attempt) in &passes.passed {
        append(
            "runbook-step-void",
            json!({ "step": step, "attempt": attempt, "why": why, "findings": named, "via": via }),
        )?;
        voided.steps.push(step.clone());
    }
    if voided.completion || !voided.steps.is_empty() {
        append(
            "runbook-void",
            json!({
                "runbook": runbook,
                "completion_void": voided.completion,
                "steps": voided.steps,
                "why": why,
                "via": via,
            }),
        )?;
    }
    Ok(voided)
}

/// Whether the run whose `run-start` has `seq` `start` in `log` has an end there already (a
/// `run-end` or `run-end-recovered` from the supervisor before the next run's start). Reads the
/// log a line at a time, as opening it to append does.
fn ended_in(log: &Path, start: u64) -> std::io::Result<bool> {
    #[derive(Deserialize)]
    struct Envelope {
        seq: u64,
        source: String,
        kind: String,
    }
    use std::os::unix::fs::OpenOptionsExt;
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(log)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut ended = false;
    chain::for_each_line(std::io::BufReader::new(file), |line| {
        let chain::LogLine::Terminated(bytes) = line else {
            return true;
        };
        let Ok(envelope) = serde_json::from_slice::<Envelope>(bytes) else {
            return true;
        };
        if envelope.seq <= start || envelope.source != "supervisor" {
            return true;
        }
        match envelope.kind.as_str() {
            "run-end" | RUN_END_RECOVERED => {
                ended = true;
                false
            }
            "run-start" => false,
            _ => true,
        }
    })?;
    Ok(ended)
}

/// What [`finish`] did with one run directory that owes work.
#[derive(Debug)]
pub enum Finished {
    Done(Box<Repair>),
    /// Its supervisor is running: not owed yet.
    Live(PathBuf),
    Unfinished(Unfinished),
}

/// Finishes every owed run in `runs` (of `workspace`, or of every workspace): each whose lock
/// is free is recovered; one whose lock is held while its supervisor is gone (a repair at work,
/// or the last processes of the run) is waited for, at most `wait`. A marker that cannot be
/// read is said only when every workspace is asked for (whose it is cannot be told).
pub fn finish(runs: &Path, workspace: Option<&Path>, via: &str, wait: Duration) -> Vec<Finished> {
    let mut finished = Vec::new();
    for dir in crate::audit::runs::run_dirs(runs) {
        if !owed::has_marker(&dir) {
            continue;
        }
        match (owed::read_header(&dir), workspace) {
            (Ok(None), _) => continue,
            (Ok(Some(h)), Some(ws)) if h.workspace != ws => continue,
            (Err(_), Some(_)) => continue,
            _ => {}
        }
        let deadline = Instant::now() + wait;
        loop {
            match recover(&dir, via) {
                Ok(Recovered::Nothing) => {}
                Ok(Recovered::Done(repair)) => finished.push(Finished::Done(repair)),
                Ok(Recovered::Live { alive: true }) => finished.push(Finished::Live(dir.clone())),
                Ok(Recovered::Live { alive: false }) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                }
                Ok(Recovered::Live { alive: false }) => {
                    finished.push(Finished::Unfinished(Unfinished {
                        run_dir: dir.clone(),
                        workspace: workspace.map(Path::to_path_buf),
                        swept: false,
                        why: format!(
                            "its supervisor is gone, but its lock {} is still held (a repair at work, or a process the run left) after {} s",
                            dir.join(owed::LOCK).display(),
                            wait.as_secs()
                        ),
                    }));
                }
                Err(unfinished) => finished.push(Finished::Unfinished(unfinished)),
            }
            break;
        }
    }
    finished
}

/// What a person is told of a repair, one line each.
pub fn describe(repair: &Repair) -> Vec<String> {
    let mut lines = vec![format!(
        "finished the end of run {} in {}: its supervisor (pid {}) died before it; {}",
        repair.run_dir.display(),
        repair.header.workspace.display(),
        repair.header.pid,
        match (repair.swept.swept_by.as_str(), repair.swept.findings.len()) {
            ("run", 0) => "the run had swept and found nothing".to_string(),
            ("run", n) => format!("the run had swept ({n} findings, below)"),
            (_, 0) => "the sweep found nothing".to_string(),
            (_, n) => format!(
                "the sweep found {n} (TAMPERING: what the run left for the host to act on):"
            ),
        }
    )];
    lines.extend(repair.swept.lines().into_iter().map(|l| format!("  {l}")));
    lines.extend(repair.swept.notes.iter().map(|n| format!("  note: {n}")));
    if let Some(patch) = &repair.swept.proposed_changes {
        lines.push(format!(
            "  what the run wrote there, as a patch to review and apply if you want it: {patch}"
        ));
    }
    if repair.voided.completion || !repair.voided.steps.is_empty() {
        lines.push(format!(
            "  runbook: VOID because of the tampering above: {}{} (a later run of the same runbook and workspace proves {} again)",
            if repair.voided.completion {
                "the runbook's completion, "
            } else {
                ""
            },
            if repair.voided.steps.is_empty() {
                "no step passed in the run".to_string()
            } else {
                format!("the passes of {}", repair.voided.steps.join(", "))
            },
            if repair.voided.steps.len() == 1 {
                "it"
            } else {
                "them"
            }
        ));
    }
    lines.push(match &repair.recorded {
        Recorded::InLog { log, seq } => format!(
            "  recorded: {RUN_END_RECOVERED} in {} (seq {seq}); `stepproof audit verify` says the run ended by recovery",
            log.display()
        ),
        Recorded::Nowhere(why) => format!("  not recorded: {why}"),
    });
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_marker_reads_back_and_a_normal_end_removes_it() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        fs::create_dir_all(ws.join(".git")).unwrap();
        fs::write(ws.join(".git/config"), "[core]\n\tbare = false\n").unwrap();
        let run = dir.path().join("runs/1-2");
        let scope = SweepScope {
            workspace: ws.clone(),
            home: dir.path().to_path_buf(),
            repositories: vec![ws.clone()],
            protected: vec![".git/config".into(), ".git/hooks".into()],
            writable_roots: vec![ws.clone()],
        };
        let owed = Owed::record(&run, "id", None, Some(3), &scope, &Snapshot::default()).unwrap();
        assert!(owed::has_marker(&run) && owed::lock_held(&run));
        let bytes = owed::read_marker(&run).unwrap().unwrap();
        let marker: Marker = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(marker.scope, scope);
        assert_eq!(marker.header.run_start_seq, Some(3));
        assert_eq!(marker.header.pid, std::process::id());
        // Ours, alive: not recovered.
        assert!(matches!(
            recover(&run, VIA_REPAIR),
            Ok(Recovered::Live { alive: true })
        ));
        owed.swept(&Swept::of("run", &[], &[], &[], None)).unwrap();
        assert!(run.join(SWEPT).is_file());
        owed.discharge().unwrap();
        assert!(!owed::has_marker(&run) && !run.join(SWEPT).exists());
        assert!(matches!(recover(&run, VIA_REPAIR), Ok(Recovered::Nothing)));
    }
}
