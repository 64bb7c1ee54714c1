//! Continuing a runbook's run: a run of the same runbook in the same workspace that ended with
//! steps open (the command exited, was killed or timed out, or the supervisor itself was
//! killed) is continued by the next `stepproof-run --runbook`. Its state — which steps passed,
//! attempts, last verdicts, the baselines of the steps that were open — is rebuilt from the
//! earlier run's audit log after its hash chain is verified (as `stepproof audit verify`
//! does), from the supervisor's own records only (anything from inside is `source: "sandbox"`
//! and decides nothing), never from a state file.
//!
//! The earlier run is the newest run directory under the state dir whose log has a `run-start`
//! with this runbook's id and this workspace. Not continued (a fresh start, said on stderr):
//! no such run; its runbook had another hash (the file changed); it completed the runbook (and
//! its sweep voided nothing: a void completion is continued, its void steps open again); it
//! was stopped by a step whose evidence did not hold (117) or that abandons (116). Refused
//! (the launch stops): its chain is broken, or its log cannot be read, or another process is
//! still writing it — unless `--runbook-fresh` asks for a fresh start.

use crate::audit::chain::{self, LogLine, Status as ChainStatus};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::fs::TryLockError;
use std::io::BufReader;
use std::path::{Path, PathBuf};

/// One step as the earlier run left it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RebuiltStep {
    pub passed: bool,
    /// Open when the earlier run ended (it opens again at once).
    pub was_open: bool,
    pub attempts: u32,
    pub last_verdict: Option<String>,
    /// The supervisor's hashes taken when the step opened (for `files_changed`), when the
    /// record carried them.
    pub baseline: Option<BTreeMap<String, String>>,
}

/// The earlier run being continued.
#[derive(Debug, Clone)]
pub struct Earlier {
    /// Its run directory's name.
    pub run_id: String,
    pub log: PathBuf,
    /// The verified head of its log (hash of the last line).
    pub head: String,
    pub records: u64,
    /// The earlier run's log was complete (`run-end` written) or cut short (killed).
    pub ended_cleanly: bool,
    /// Per step of the runbook, in file order.
    pub steps: Vec<RebuiltStep>,
}

/// What the search found.
#[derive(Debug)]
pub enum Found {
    /// No earlier run of this runbook in this workspace.
    Nothing,
    /// One, continued.
    Continue(Earlier),
    /// One, not continued, and why (said on stderr; the run starts fresh).
    NotContinued(String),
}

/// What a log says about the last run of this runbook in it.
#[derive(Default)]
struct Scan {
    matched: bool,
    hash: String,
    steps: Vec<RebuiltStep>,
    completed: bool,
    stopped: Option<String>,
    ended_cleanly: bool,
    /// Per step: passed in this run itself (not restored from the run it continued), what a
    /// sweep's findings void.
    passed_here: Vec<bool>,
}

/// The file in a run's directory that names its audit log when `--audit-log` put it
/// elsewhere (written by the supervisor, in a directory no sandbox reaches).
const LOG_ELSEWHERE: &str = "audit-log-elsewhere";

/// Says, in the run's directory, where its audit log is when it is not there: a later run
/// continues the runbook from it.
pub fn record_log_elsewhere(run_dir: &Path, log: &Path) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let log = log.canonicalize()?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(run_dir.join(LOG_ELSEWHERE))?;
    file.write_all(log.as_os_str().as_encoded_bytes())
}

/// A run directory's audit log: `audit.jsonl` in it, or the log its [`LOG_ELSEWHERE`] names
/// (an absolute path to a regular file); never through a link.
pub fn run_log(dir: &Path) -> Option<PathBuf> {
    let is_file = |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file());
    let own = dir.join("audit.jsonl");
    if is_file(&own) {
        return Some(own);
    }
    let pointer = dir.join(LOG_ELSEWHERE);
    if !is_file(&pointer) {
        return None;
    }
    let named = crate::regular_file::read_to_string(&pointer, 4096).ok()?;
    let log = PathBuf::from(named.trim_end_matches('\n'));
    (log.is_absolute() && is_file(&log)).then_some(log)
}

/// Finds the earlier run among the run directories beside `own` (the current run's), and
/// rebuilds its state. `Err`: a run that must not be continued silently (broken chain,
/// unreadable log, still being written).
pub fn find(
    own: &Path,
    runbook: &crate::runbook::Runbook,
    hash: &str,
    workspace: &str,
) -> Result<Found, String> {
    let Some(runs) = own.parent() else {
        return Ok(Found::Nothing);
    };
    let step_ids: Vec<String> = runbook.steps.iter().map(|s| s.id.to_string()).collect();
    for dir in crate::audit::runs::run_dirs(runs) {
        if dir == own {
            continue;
        }
        // Never through a link; a run directory without a log (an evidence run's) is passed
        // over; one whose log went elsewhere (`--audit-log`) says where.
        let Some(log) = run_log(&dir) else {
            continue;
        };
        let run_id = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let file = crate::regular_file::open(&log)
            .map_err(|e| format!("reading the earlier run's log {}: {e}", log.display()))?;
        let scan = scan(&file, runbook.id.as_str(), workspace, &step_ids)
            .map_err(|e| format!("reading the earlier run's log {}: {e}", log.display()))?;
        if !scan.matched {
            continue;
        }
        // The earlier run of this runbook here: its chain first.
        let file = crate::regular_file::open(&log)
            .map_err(|e| format!("reading the earlier run's log {}: {e}", log.display()))?;
        let report = chain::verify(BufReader::new(&file), None)
            .map_err(|e| format!("reading the earlier run's log {}: {e}", log.display()))?;
        if report.status == ChainStatus::Broken {
            let broken = report
                .broken
                .as_ref()
                .map(|b| format!("line {}: {}", b.line, b.problem))
                .unwrap_or_default();
            return Err(format!(
                "the earlier run {run_id} of runbook {} in this workspace cannot be continued: its audit log {} is broken ({broken}), so its state cannot be trusted. Start afresh with --runbook-fresh (recorded), or look at it with `stepproof audit verify {}`",
                runbook.id,
                log.display(),
                log.display()
            ));
        }
        if matches!(file.try_lock_shared(), Err(TryLockError::WouldBlock)) {
            return Err(format!(
                "the earlier run {run_id} of runbook {} in this workspace is still being written ({}): wait for it to end, or start afresh with --runbook-fresh",
                runbook.id,
                log.display()
            ));
        }
        let _ = file.unlock();
        if scan.hash != hash {
            return Ok(Found::NotContinued(format!(
                "the runbook changed since run {run_id} (hash {} then, {hash} now): not continued, starting afresh",
                scan.hash
            )));
        }
        if scan.completed {
            return Ok(Found::NotContinued(format!(
                "run {run_id} completed the runbook: starting afresh"
            )));
        }
        if let Some(step) = scan.stopped {
            return Ok(Found::NotContinued(format!(
                "run {run_id} was stopped by step {step} (its evidence did not hold and no attempt was left, or it abandons): a stopped run is not continued, starting afresh"
            )));
        }
        return Ok(Found::Continue(Earlier {
            run_id,
            log,
            head: report.head,
            records: report.records,
            ended_cleanly: scan.ended_cleanly,
            steps: scan.steps,
        }));
    }
    Ok(Found::Nothing)
}

/// Reads a log once, one line at a time: the last `run-start` of this runbook in this
/// workspace, and the supervisor's runbook records after it.
fn scan(
    file: &std::fs::File,
    id: &str,
    workspace: &str,
    step_ids: &[String],
) -> std::io::Result<Scan> {
    let mut scan = Scan::default();
    let mut inside = false;
    chain::for_each_line(BufReader::new(file), |line| {
        let LogLine::Terminated(bytes) = line else {
            return true;
        };
        let Ok(record) = serde_json::from_slice::<Value>(bytes) else {
            return true;
        };
        // What came from inside decides nothing.
        if record["source"] != "supervisor" {
            return true;
        }
        let kind = record["kind"].as_str().unwrap_or_default();
        if kind == "run-start" {
            inside = record["runbook"]["id"] == id && record["workspace"] == workspace;
            if inside {
                scan = Scan {
                    matched: true,
                    hash: record["runbook"]["hash"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    steps: vec![RebuiltStep::default(); step_ids.len()],
                    passed_here: vec![false; step_ids.len()],
                    ..Scan::default()
                };
            }
            return true;
        }
        if inside {
            apply(&mut scan, kind, &record, step_ids);
        }
        true
    })?;
    Ok(scan)
}

fn apply(scan: &mut Scan, kind: &str, record: &Value, step_ids: &[String]) {
    let index = record["step"]
        .as_str()
        .and_then(|s| step_ids.iter().position(|id| id == s));
    let attempt = record["attempt"]
        .as_u64()
        .and_then(|a| u32::try_from(a).ok());
    match (kind, index) {
        ("run-end", _) => scan.ended_cleanly = true,
        // A run killed before its end, swept by a repair (or the next launch) that found
        // tampering: its passes are void as its own end would have made them.
        ("run-end-recovered", _)
            if record["findings"].as_array().is_some_and(|f| !f.is_empty()) =>
        {
            for (i, s) in scan.steps.iter_mut().enumerate() {
                if scan.passed_here[i] && s.passed {
                    s.passed = false;
                    s.was_open = true;
                    s.last_verdict = Some("void".into());
                }
            }
            scan.completed = false;
        }
        ("runbook-complete", _) => scan.completed = true,
        // The run's sweep found tampering after the passes: the completion does not count.
        ("runbook-void", _) => scan.completed = false,
        ("runbook-continued", _) => {
            for step in record["state"].as_array().into_iter().flatten() {
                let Some(i) = step["step"]
                    .as_str()
                    .and_then(|s| step_ids.iter().position(|id| id == s))
                else {
                    continue;
                };
                let s = &mut scan.steps[i];
                s.passed = step["status"] == "passed";
                s.attempts = step["attempts"]
                    .as_u64()
                    .and_then(|a| u32::try_from(a).ok())
                    .unwrap_or(0);
                s.last_verdict = step["last_verdict"].as_str().map(str::to_string);
            }
        }
        ("runbook-ended", _) if record["ending"] == "evidence-failed" => {
            scan.stopped = record["step"].as_str().map(str::to_string);
        }
        ("runbook-step-opened", Some(i)) => {
            let s = &mut scan.steps[i];
            s.was_open = true;
            s.baseline = record["baseline"].as_object().map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            });
        }
        ("runbook-evidence", Some(i)) => {
            let s = &mut scan.steps[i];
            s.attempts = s.attempts.max(attempt.unwrap_or(0));
        }
        ("runbook-step-passed", Some(i)) => {
            scan.passed_here[i] = true;
            let s = &mut scan.steps[i];
            s.passed = true;
            s.was_open = false;
            s.attempts = s.attempts.max(attempt.unwrap_or(0));
            s.last_verdict = Some("passed".into());
        }
        // Void: not passed; it opens again with the baseline of its opening (the work it
        // did still counts as a change, the proof is taken again).
        ("runbook-step-void", Some(i)) => {
            let s = &mut scan.steps[i];
            s.passed = false;
            s.was_open = true;
            s.last_verdict = Some("void".into());
        }
        // Only a person's approval was missing: that attempt was given back.
        ("runbook-step-not-approved", Some(i)) => {
            let s = &mut scan.steps[i];
            s.attempts = attempt.unwrap_or(1).saturating_sub(1);
            s.last_verdict = Some(format!(
                "not approved ({})",
                record["missing"].as_str().unwrap_or("unknown")
            ));
        }
        ("runbook-step-failed", Some(i)) => {
            let s = &mut scan.steps[i];
            s.attempts = s.attempts.max(attempt.unwrap_or(0));
            s.last_verdict = Some("failed".into());
            if record["final"] == true {
                scan.stopped = record["step"].as_str().map(str::to_string);
            }
        }
        _ => {}
    }
}

/// The `runbook-continued` record's state: what the continuing run starts from.
pub fn state_record(earlier: &Earlier, step_ids: &[String]) -> Value {
    json!(
        step_ids
            .iter()
            .zip(&earlier.steps)
            .map(|(id, s)| json!({
                "step": id,
                "status": if s.passed { "passed" } else if s.was_open { "open" } else { "waiting" },
                "attempts": s.attempts,
                "last_verdict": s.last_verdict,
                "baseline_kept": s.baseline.is_some(),
            }))
            .collect::<Vec<_>>()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    /// What `scan` rebuilds from these supervisor records after a run-start of `rb` in `/w`.
    fn rebuilt(records: &[Value]) -> Scan {
        let mut file = tempfile::tempfile().unwrap();
        let start = json!({"source":"supervisor","kind":"run-start","workspace":"/w","runbook":{"id":"rb","hash":"sha256:x"}});
        for r in std::iter::once(&start).chain(records) {
            writeln!(file, "{r}").unwrap();
        }
        use std::io::Seek as _;
        file.rewind().unwrap();
        scan(&file, "rb", "/w", &["a".into(), "b".into()]).unwrap()
    }

    fn passed(step: &str) -> Value {
        json!({"source":"supervisor","kind":"runbook-step-passed","step":step,"attempt":1})
    }

    fn opened(step: &str) -> Value {
        json!({"source":"supervisor","kind":"runbook-step-opened","step":step,"baseline":{"src/a.rs":"h"}})
    }

    #[test]
    fn a_void_pass_is_not_passed_and_its_step_opens_again() {
        let scan = rebuilt(&[
            opened("a"),
            passed("a"),
            opened("b"),
            passed("b"),
            json!({"source":"supervisor","kind":"runbook-complete","runbook":"rb"}),
            json!({"source":"supervisor","kind":"sweep","findings":[{"change":"created"}]}),
            json!({"source":"supervisor","kind":"runbook-step-void","step":"a","attempt":1}),
            json!({"source":"supervisor","kind":"runbook-step-void","step":"b","attempt":1}),
            json!({"source":"supervisor","kind":"runbook-void","runbook":"rb","completion_void":true}),
            json!({"source":"supervisor","kind":"run-end"}),
        ]);
        assert!(!scan.completed, "a void completion is continued");
        for s in &scan.steps {
            assert!(!s.passed && s.was_open, "{s:?}");
            assert_eq!(s.last_verdict.as_deref(), Some("void"));
            assert!(s.baseline.is_some(), "the baseline of its opening is kept");
        }
        // Without the void records, the same run completed.
        let scan = rebuilt(&[
            opened("a"),
            passed("a"),
            json!({"source":"supervisor","kind":"runbook-complete","runbook":"rb"}),
        ]);
        assert!(scan.completed && scan.steps[0].passed);
        // A void record from inside decides nothing.
        let scan = rebuilt(&[
            opened("a"),
            passed("a"),
            json!({"source":"sandbox","kind":"runbook-step-void","step":"a","attempt":1}),
        ]);
        assert!(scan.steps[0].passed);
    }

    #[test]
    fn a_killed_runs_passes_are_void_when_its_repair_found_tampering() {
        let continued = json!({"source":"supervisor","kind":"runbook-continued","state":[{"step":"a","status":"passed","attempts":1}]});
        let found = |findings: Value| {
            rebuilt(&[
                continued.clone(),
                opened("b"),
                passed("b"),
                json!({"source":"supervisor","kind":"run-end-recovered","findings":findings}),
            ])
        };
        let scan = found(json!([{"change":"created","path":"/w/.envrc"}]));
        // The pass restored from the run it continued stands; its own is void.
        assert!(scan.steps[0].passed, "{:?}", scan.steps[0]);
        assert!(!scan.steps[1].passed && scan.steps[1].was_open);
        assert_eq!(scan.steps[1].last_verdict.as_deref(), Some("void"));
        let clean = found(json!([]));
        assert!(clean.steps[1].passed);
    }
}
