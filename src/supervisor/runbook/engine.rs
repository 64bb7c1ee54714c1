//! A runbook's run, held by the supervisor: which steps are open (a step opens when every step
//! it depends on has passed), attempts, evidence and verdicts. Every transition is a record in
//! the audit chain, and is published to the sandbox in a supervisor-owned directory bound
//! read-only *as a directory* at `/run/stepproof/runbook` (`state.json`, and one compiled
//! policy per open step, `policy-N`, that the hook intersects with the profile's), each file
//! replaced atomically (a temporary name, then a rename), so the next hook call sees it.
//!
//! The agent acts on the run through `stepproof step …` over `step.sock` in that directory;
//! a `complete` is a request, whoever sends it: the supervisor checks the evidence itself.
//! A person approves at a host terminal (`stepproof approve RUN STEP`) over `approve.sock` in
//! the run's directory, which no sandbox can reach, or through the approval webhook
//! (`webhook`) when one is configured; the first valid answer counts. `verifier`
//! evidence is judged by a separate read-only Claude Code run the supervisor starts
//! (`verifier`), after the other items.

use crate::audit::sink::AuditSink;
use crate::runbook::Runbook;
use crate::runbook::client::{APPROVAL_SOCKET, Answer, STEP_SOCKET};
use crate::supervisor::runbook::files::{self, Budget, Entry, Exceeded, IgnoreRules};
use crate::supervisor::runbook::step_open;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

mod approval;
mod brief;
mod check_files;
mod command;
mod complete;
mod freeze;
mod invariants;
mod item;
mod not_approved;
mod opening;
mod serve;
mod state;
mod verify;
mod waiting;

#[cfg(test)]
mod tests;

use check_files::FILES_RECORDED_MAX;
use invariants::Recipes;
use state::write_atomic;

/// Output of a failing evidence command shown to the agent: its last this many bytes.
pub const OUTPUT_SHOWN_BYTES: usize = 8 << 10;
/// Output of an evidence command read at all (the digest covers what was read).
const OUTPUT_READ_BYTES: u64 = 16 << 20;
/// The key under which a command item hands its output's tail to the verifiers (taken out
/// before the record is written: output is never in the chain).
const OUTPUT_TAIL_KEY: &str = "__output_tail";

/// Where a step is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Waiting,
    Open,
    Passed,
    Failed,
    /// Open when the agent asked to abandon the runbook.
    Abandoned,
    /// Passed in a run whose sweep then found tampering: the pass does not count (a
    /// continued run opens the step again).
    Void,
}

#[derive(Debug, Clone)]
struct StepState {
    status: Status,
    attempts: u32,
    /// `files_changed`: the workspace-relative paths the globs named when the step opened,
    /// with their sha256.
    baseline: BTreeMap<String, String>,
    last_verdict: Option<String>,
    /// A continued run: the baseline the earlier run took when it opened this step.
    restored_baseline: Option<BTreeMap<String, String>>,
    /// The baseline could not be taken within the supervisor's budget: `files_changed` cannot
    /// hold for this opening of the step.
    baseline_exceeded: Option<Exceeded>,
    /// What the step's protected paths were when it opened (`Err`: the walk did not finish,
    /// and the step cannot pass in this opening).
    invariants: Result<BTreeMap<String, Entry>, Exceeded>,
    /// The workspace's ignore rules as they were when the step opened (`Err`: they could not
    /// be read, and nothing judged by them can hold).
    ignore: Result<IgnoreRules, Exceeded>,
    /// The `files_exist` globs along which the rules could not all be read when the step
    /// opened, with why: an item over one fails naming that (its rules are not known), while
    /// the others are judged.
    rules_unread: Vec<(String, Exceeded)>,
    /// The globs of the files that define the step's evidence commands, as the step opened
    /// (make's literal includes and what its recipes run, read then); recorded among the
    /// invariants.
    definitions: Vec<String>,
    /// What the makefiles' recipes run, as the step opened (their build state).
    recipes: Recipes,
    /// Passed in this run (not restored from an earlier one): what this run's sweep voids.
    passed_here: bool,
    /// The workspace as this step opened in this run, kept for the verifiers' diff (`Err`:
    /// why not), and when it opened among the run's openings.
    snapshot: Result<Arc<step_open::Snapshot>, String>,
    opened_seq: u64,
    /// Its approval was asked and not given (until the step passes): the run's ending says so.
    approval_missing: Option<not_approved::Missing>,
}

/// Baselines up to this many files go into the `runbook-step-opened` record (so that a
/// continued run judges `files_changed` against them); a larger one is taken again.
const BASELINE_RECORDED_MAX: usize = 1024;

/// How a runbook's run ended early.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// A step's evidence did not hold and its attempts ran out (117).
    Blocked { step: String },
    /// A step with `on_fail = "abandon"` failed, the agent asked to abandon the runbook
    /// (`requested`: its reason), or it exited with steps open (116).
    Abandoned {
        step: String,
        requested: Option<String>,
    },
    /// The agent exited while a step's only missing evidence was a person's approval: asked and
    /// not yet answered, denied, out of time, or impossible in `--ci` (115). A later run
    /// continues it.
    ApprovalMissing { step: String, missing: String },
}

/// What running evidence needs beyond the runbook.
#[derive(Debug, Clone)]
pub struct EvidenceContext {
    /// `stepproof-run`, to run evidence commands in a fresh sandbox.
    pub run_binary: PathBuf,
    /// The profile the run uses: a file, or a built-in name.
    pub profile: String,
    /// Its name, as the agent's environment has it (`STEPPROOF_PROFILE`): an evidence run is
    /// named the same, so nothing in its environment says it is one.
    pub profile_name: String,
    /// The workspace on the host.
    pub workspace: PathBuf,
    /// The run's directory on the host (evidence runs' audit logs and the derived profile).
    pub run_dir: PathBuf,
    /// `--ci`: approvals are denied unless pre-approved.
    pub ci: bool,
    /// `--approve STEP`: steps whose approval a CI job gave beforehand.
    pub pre_approved: Vec<String>,
    /// The run's cgroup directories (the freezer), when it has some.
    pub cgroup_dirs: Vec<PathBuf>,
    /// Why the run has no freezer, when the host could not give it one.
    pub no_freezer: Option<String>,
    /// When the run's own `--timeout` ends it: a model verifier never runs past it.
    pub deadline: Option<Instant>,
    /// The approval webhook (from outside the workspace), asked beside the host terminal.
    pub approval_webhook: Option<Arc<crate::supervisor::runbook::webhook::Webhook>>,
    /// Where a pending approval is announced (from outside the workspace), if anywhere.
    pub notify: Option<Arc<crate::supervisor::runbook::notify::Notifier>>,
    /// What one walk over the evidence's files may cost (the profile's `[runbook]`).
    pub budget: Budget,
}

struct Engine {
    runbook: Runbook,
    hash: String,
    steps: Vec<StepState>,
    audit: Option<AuditSink>,
    /// The host directory bound at `/run/stepproof/runbook`.
    dir: PathBuf,
    /// The workspace and home as the sandbox sees them (what step policies are compiled for).
    inside_home: PathBuf,
    inside_workspace: PathBuf,
    context: EvidenceContext,
    ending: Option<Ending>,
    /// `runbook-complete` was recorded (every step passed).
    completed: bool,
    policies_written: usize,
    evidence_runs: u32,
    /// The earlier run this one continues.
    continued: Option<crate::supervisor::runbook::continuation::Earlier>,
    /// The steps' openings kept for the verifiers' diffs (only when the runbook has a
    /// verifier), and how many steps this run has opened.
    store: Option<Arc<Mutex<step_open::Store>>>,
    openings: u64,
    /// The servers have stopped: a request still in flight past their deadline writes no
    /// record and publishes nothing (the run's end records come after them, never between).
    closed: bool,
    /// Verdicts published as notices (`approval-notice`) after a request was answered "waiting".
    notices: u64,
}

/// An answer (approved, or denied with a reason) and what its record says of it.
type GivenAnswer = (Result<(), String>, Value);

/// Answers given at a host terminal or by the webhook, waited for by the step being completed:
/// the first valid answer counts, with what its record says of it.
#[derive(Default)]
struct Approvals {
    answers: Mutex<HashMap<String, GivenAnswer>>,
    arrived: Condvar,
    waiting: Mutex<Option<String>>,
    /// The run is ending: a wait stops (denied) instead of holding the end up to its deadline.
    closing: Arc<AtomicBool>,
    /// What the run's walks over the evidence's files have spent in all.
    spent: files::RunSpend,
    /// The request of the completion being checked, told when its approval wait begins.
    listener: Mutex<Option<waiting::Listener>>,
    /// Completions being checked on threads of their own (the end of the run waits for them
    /// as for the requests in flight).
    checking: std::sync::atomic::AtomicUsize,
}

impl Approvals {
    /// The run is ending: a completion waiting for an approval ends now (under the answers'
    /// lock: its wait cannot miss the wake-up), and every other wait sees the flag.
    fn close(&self) {
        let _answers = self.answers.lock().unwrap_or_else(|e| e.into_inner());
        self.closing
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.arrived.notify_all();
    }
}

/// The run of one runbook.
pub struct RunbookRun {
    engine: Arc<Mutex<Engine>>,
    approvals: Arc<Approvals>,
    step_listener: Mutex<Option<UnixListener>>,
    approval_listener: Mutex<Option<UnixListener>>,
    run_id: String,
}

impl std::fmt::Debug for RunbookRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunbookRun")
            .field("run_id", &self.run_id)
            .finish_non_exhaustive()
    }
}

/// The servers' threads, stopped at the end of the run.
pub struct Serving {
    threads: Vec<(PathBuf, std::thread::JoinHandle<()>)>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    approvals: Arc<Approvals>,
    engine: Arc<Mutex<Engine>>,
    /// Step requests being answered, each on a thread of its own.
    in_flight: Arc<std::sync::atomic::AtomicUsize>,
}

/// Step requests answered at once; one more is told the supervisor is busy.
const STEP_CLIENTS_MAX: usize = 16;

/// How long the end of a run waits for step requests in flight once told to stop (each walk,
/// hash, evidence run and wait looks at the stop flag; this bounds what does not).
pub const SHUTDOWN_WAIT: Duration = Duration::from_secs(3);

fn io_err(step: &str, path: &Path) -> impl FnOnce(std::io::Error) -> String {
    let what = format!("{step} {}", path.display());
    move |e| format!("{what}: {e}")
}

impl RunbookRun {
    /// Makes the run's runbook directory (0755, the supervisor's) and both sockets: the step
    /// socket owned by the sandbox user (`owner`), the approval socket by whoever runs the
    /// supervisor. No thread is started here (the sandbox is cloned from this process later).
    #[allow(clippy::too_many_arguments)]
    pub fn prepare(
        runbook: Runbook,
        audit: Option<&AuditSink>,
        run_dir: &Path,
        owner: (u32, u32),
        inside_home: &Path,
        inside_workspace: &Path,
        context: EvidenceContext,
        continued: Option<crate::supervisor::runbook::continuation::Earlier>,
    ) -> Result<RunbookRun, String> {
        // Where the plan binds it (`stepproof explain --runbook` prints the same mount).
        let dir = crate::runbook::client::state_dir(run_dir);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(run_dir)
            .map_err(io_err("creating", run_dir))?;
        std::fs::DirBuilder::new()
            .mode(0o755)
            .create(&dir)
            .map_err(io_err("creating", &dir))?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
            .map_err(io_err("chmod", &dir))?;
        let step_socket = dir.join(STEP_SOCKET);
        let step_listener =
            UnixListener::bind(&step_socket).map_err(io_err("binding", &step_socket))?;
        std::fs::set_permissions(&step_socket, std::fs::Permissions::from_mode(0o600))
            .map_err(io_err("chmod", &step_socket))?;
        std::os::unix::fs::lchown(&step_socket, Some(owner.0), Some(owner.1))
            .map_err(io_err("chown", &step_socket))?;
        let approval_socket = run_dir.join(APPROVAL_SOCKET);
        let approval_listener =
            UnixListener::bind(&approval_socket).map_err(io_err("binding", &approval_socket))?;
        std::fs::set_permissions(&approval_socket, std::fs::Permissions::from_mode(0o600))
            .map_err(io_err("chmod", &approval_socket))?;
        let hash = runbook.hash();
        let approvals = Approvals::default();
        let steps = runbook
            .steps
            .iter()
            .map(|_| StepState {
                status: Status::Waiting,
                attempts: 0,
                baseline: BTreeMap::new(),
                last_verdict: None,
                restored_baseline: None,
                baseline_exceeded: None,
                invariants: Ok(BTreeMap::new()),
                ignore: Err(Exceeded::Stopped),
                rules_unread: Vec::new(),
                definitions: Vec::new(),
                recipes: Recipes::default(),
                passed_here: false,
                snapshot: Err("the step has not opened in this run".into()),
                opened_seq: 0,
                approval_missing: None,
            })
            .collect();
        let store = runbook
            .steps
            .iter()
            .flat_map(|s| &s.evidence)
            // A person asked to approve is shown the step's diff too.
            .any(|e| e.verifier.is_some() || e.approval.is_some())
            .then(|| Arc::new(Mutex::new(step_open::Store::new(run_dir, &approvals.spent))));
        let engine = Engine {
            runbook,
            hash,
            steps,
            audit: audit.map(AuditSink::clone_handle),
            dir,
            inside_home: inside_home.to_path_buf(),
            inside_workspace: inside_workspace.to_path_buf(),
            context,
            ending: None,
            completed: false,
            policies_written: 0,
            closed: false,
            evidence_runs: 0,
            continued,
            store,
            openings: 0,
            notices: 0,
        };
        Ok(RunbookRun {
            engine: Arc::new(Mutex::new(engine)),
            approvals: Arc::new(approvals),
            step_listener: Mutex::new(Some(step_listener)),
            approval_listener: Mutex::new(Some(approval_listener)),
            run_id: run_dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
        })
    }

    /// The host directory bound at `/run/stepproof/runbook`.
    pub fn dir(&self) -> PathBuf {
        self.lock().dir.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Engine> {
        self.engine.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Opens the first steps (after the run-start record) and publishes the state.
    pub fn start(&self) -> Result<(), String> {
        let mut engine = self.lock();
        engine.restore();
        engine.open_ready(&self.approvals.spent);
        engine.publish()
    }

    /// The run starts to end (its deadline, a signal from outside): every walk, hash, evidence
    /// run, verifier and approval wait in flight stops now, and what they froze is thawed, so
    /// that the sandbox can be killed. The servers themselves stop later ([`Serving::shutdown`]).
    pub fn stop_work(&self) {
        self.approvals.close();
    }

    /// The end of the run: an early ending, or the steps not passed (recorded as abandoned by
    /// the supervisor, whatever the agent said).
    pub fn finish(&self) -> Option<(Ending, Vec<String>)> {
        let mut engine = self.lock();
        let open: Vec<String> = engine
            .runbook
            .steps
            .iter()
            .zip(&engine.steps)
            .filter(|(_, s)| s.status != Status::Passed)
            .map(|(step, _)| step.id.to_string())
            .collect();
        let ending = match engine.ending.clone() {
            Some(ending) => ending,
            None if open.is_empty() => {
                engine.record_end("runbook-complete", json!({ "runbook": engine.runbook.id }));
                engine.completed = true;
                return None;
            }
            None => engine.approval_ending().unwrap_or(Ending::Abandoned {
                step: open[0].clone(),
                requested: None,
            }),
        };
        if let Ending::Abandoned { step, requested } = &ending {
            // The supervisor's own account, whatever the agent's SessionEnd said (that record
            // comes from inside and can be forged).
            let still_open: Vec<String> = engine
                .runbook
                .steps
                .iter()
                .zip(&engine.steps)
                .filter(|(_, s)| matches!(s.status, Status::Open | Status::Abandoned))
                .map(|(step, _)| step.id.to_string())
                .collect();
            let why = match (requested, engine.ending.is_some()) {
                (Some(reason), _) => format!("abandoned by request from inside: {reason}"),
                (None, true) => format!("step {step} failed with on_fail = \"abandon\""),
                (None, false) => "the agent exited with steps open".to_string(),
            };
            engine.record_end(
                "runbook-abandoned",
                json!({
                    "runbook": engine.runbook.id,
                    "why": why,
                    "requested": requested.is_some(),
                    "open": still_open,
                    "not_passed": open,
                }),
            );
        }
        engine.record_end(
            "runbook-ended",
            json!({
                "runbook": engine.runbook.id,
                "ending": match &ending {
                    Ending::Blocked { .. } => "evidence-failed",
                    Ending::Abandoned { .. } => "abandoned",
                    Ending::ApprovalMissing { .. } => "approval-missing",
                },
                "step": match &ending { Ending::Blocked { step } | Ending::Abandoned { step, .. } | Ending::ApprovalMissing { step, .. } => step },
                "missing": match &ending { Ending::ApprovalMissing { missing, .. } => Some(missing), _ => None },
                "not_passed": open,
            }),
        );
        Some((ending, open))
    }

    /// The run's sweep found tampering (`findings`, in words): a pass is final only with the
    /// run, so every step passed in this run is void, and the runbook's completion with it —
    /// on the record after the sweep's, in `state.json`, and for a continued run (which opens
    /// the void steps again, with the baselines of their opening). Steps passed in an earlier
    /// run this one continued keep their pass (that run's sweep had its say). Says the void
    /// steps, and whether the completion was void. `exit_code`: the run's, for the record.
    pub fn void(&self, findings: &[String], exit_code: i32) -> (Vec<String>, bool) {
        let mut engine = self.lock();
        let why = format!(
            "the run's sweep found tampering ({} finding{}; exit {exit_code}): a pass is final only with the run",
            findings.len(),
            if findings.len() == 1 { "" } else { "s" },
        );
        let named: Vec<&String> = findings.iter().take(FILES_RECORDED_MAX).collect();
        let mut void = Vec::new();
        for i in 0..engine.steps.len() {
            if !(engine.steps[i].passed_here && engine.steps[i].status == Status::Passed) {
                continue;
            }
            engine.steps[i].status = Status::Void;
            engine.steps[i].last_verdict = Some("void".into());
            let (id, attempt) = (
                engine.runbook.steps[i].id.to_string(),
                engine.steps[i].attempts,
            );
            engine.record_end(
                "runbook-step-void",
                json!({ "step": id, "attempt": attempt, "why": why, "findings": named }),
            );
            void.push(id);
        }
        let completion_void = engine.completed;
        if completion_void || !void.is_empty() {
            engine.record_end(
                "runbook-void",
                json!({
                    "runbook": engine.runbook.id,
                    "completion_void": completion_void,
                    "steps": void,
                    "why": why,
                }),
            );
            engine.completed = false;
            // The servers have stopped: only the state file is rewritten, for whoever reads
            // the run's directory afterwards.
            if let Ok(state) = serde_json::to_vec_pretty(&engine.state_json())
                && let Err(e) = write_atomic(&engine.dir, "state.json", &state)
            {
                crate::say!("stepproof-run: runbook: writing the void state: {e}");
            }
        }
        (void, completion_void)
    }
}

/// Reads one JSON line, bounded.
fn read_request(stream: &UnixStream) -> Result<Value, String> {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut line = String::new();
    BufReader::new(stream.take(crate::runbook::client::MAX_MESSAGE_BYTES))
        .read_line(&mut line)
        .map_err(|e| format!("reading the request: {e}"))?;
    serde_json::from_str(&line).map_err(|e| format!("the request is not JSON: {e}"))
}

fn reply(mut stream: &UnixStream, answer: &Answer) {
    let mut bytes = serde_json::to_vec(answer).unwrap_or_default();
    bytes.push(b'\n');
    let _ = stream.write_all(&bytes);
}

fn peer(stream: &UnixStream) -> Value {
    match nix::sys::socket::getsockopt(stream, nix::sys::socket::sockopt::PeerCredentials) {
        Ok(c) => json!({ "pid": c.pid(), "uid": c.uid() }),
        Err(_) => Value::Null,
    }
}

fn refused(why: &str) -> Answer {
    Answer {
        ok: false,
        message: why.to_string(),
        state: None,
    }
}

impl Engine {
    /// A continued run: the earlier run's passed steps, attempts and verdicts, and the
    /// baselines of its open steps (which open again), on the record before anything opens.
    fn restore(&mut self) {
        let Some(earlier) = self.continued.clone() else {
            return;
        };
        let ids: Vec<String> = self
            .runbook
            .steps
            .iter()
            .map(|s| s.id.to_string())
            .collect();
        for (state, rebuilt) in self.steps.iter_mut().zip(&earlier.steps) {
            state.attempts = rebuilt.attempts;
            state.last_verdict = rebuilt.last_verdict.clone();
            if rebuilt.passed {
                state.status = Status::Passed;
            } else if rebuilt.was_open {
                state.restored_baseline = rebuilt.baseline.clone();
            }
        }
        self.record(
            "runbook-continued",
            json!({
                "runbook": self.runbook.id,
                "hash": self.hash,
                "continues": earlier.run_id,
                "log": crate::audit::text::path(&earlier.log),
                "log_head": earlier.head,
                "log_records": earlier.records,
                "earlier_ended": if earlier.ended_cleanly { "run-end recorded" } else { "no run-end: killed or crashed" },
                "state": crate::supervisor::runbook::continuation::state_record(&earlier, &ids),
            }),
        );
    }

    /// The agent gives the runbook up: on the record, its open steps marked abandoned, the
    /// stop policy published (every later tool call is denied).
    fn abandon(&mut self, reason: Option<String>, who: Value) -> Answer {
        let reason = reason
            .map(|r| r.chars().take(1000).collect::<String>())
            .filter(|r| !r.trim().is_empty())
            .unwrap_or_else(|| "no reason given".to_string());
        if let Some(ending) = &self.ending {
            let why = format!(
                "the run has already stopped ({}); nothing to abandon",
                match ending {
                    Ending::Blocked { step } => format!("step {step}'s evidence did not hold"),
                    Ending::Abandoned { step, .. } => format!("abandoned at step {step}"),
                    Ending::ApprovalMissing { step, .. } =>
                        format!("step {step} waits for approval"),
                }
            );
            self.record_inside(
                "runbook-abandon-refused",
                json!({ "why": why, "reason": reason, "peer": who }),
            );
            return refused(&why);
        }
        let open = self.open_ids();
        let not_passed: Vec<String> = self
            .runbook
            .steps
            .iter()
            .zip(&self.steps)
            .filter(|(_, s)| s.status != Status::Passed)
            .map(|(step, _)| step.id.to_string())
            .collect();
        let Some(first) = not_passed.first().cloned() else {
            let why = "every step has passed: the runbook is complete".to_string();
            self.record_inside(
                "runbook-abandon-refused",
                json!({ "why": why, "reason": reason, "peer": who }),
            );
            return refused(&why);
        };
        self.record_inside(
            "runbook-abandon-requested",
            json!({ "reason": reason, "open": open, "peer": who }),
        );
        for state in &mut self.steps {
            if state.status == Status::Open {
                state.status = Status::Abandoned;
            }
        }
        self.ending = Some(Ending::Abandoned {
            step: open.first().cloned().unwrap_or(first),
            requested: Some(reason),
        });
        let published = self.publish();
        let mut message = format!(
            "runbook {} abandoned at your request; abandoned: {}. Every further tool call is denied; the run ends when the agent exits.",
            self.runbook.id,
            if open.is_empty() {
                "none open".to_string()
            } else {
                open.join(", ")
            }
        );
        if let Err(why) = published {
            message.push_str(&format!(" (publishing the state failed: {why})"));
        }
        Answer {
            ok: true,
            message,
            state: Some(self.state_json()),
        }
    }

    fn record(&self, kind: &str, body: Value) {
        if !self.closed {
            self.record_end(kind, body);
        }
    }

    /// A record of the runbook's end, written after the servers stopped.
    fn record_end(&self, kind: &str, body: Value) {
        if let Some(audit) = &self.audit {
            audit.record("supervisor", kind, &body);
        }
    }

    /// A record of what arrived from inside the sandbox: `source: "sandbox"`, like the hook's.
    fn record_inside(&self, kind: &str, mut body: Value) {
        body["reported_from"] = json!("inside");
        if let Some(audit) = &self.audit
            && !self.closed
        {
            // The agent decides how often it asks: charged to the run's budget.
            audit.record_caused("sandbox", kind, &body);
        }
    }

    fn open_ids(&self) -> Vec<String> {
        self.runbook
            .steps
            .iter()
            .zip(&self.steps)
            .filter(|(_, s)| s.status == Status::Open)
            .map(|(step, _)| step.id.to_string())
            .collect()
    }
}

/// A step's baseline as taken when it opens, or the budget it ran out of.
type Baseline = Result<BTreeMap<String, String>, Exceeded>;

/// What a step's opening takes: the `files_changed` baseline, the invariants (its protected
/// paths' entries) and the ignore rules both are judged with.
struct Opening {
    files: Baseline,
    invariants: Result<BTreeMap<String, Entry>, Exceeded>,
    ignore: Result<IgnoreRules, Exceeded>,
    /// The `files_exist` globs along which the rules could not all be read when the step
    /// opened, with why: an item over one fails naming that (its rules are not known), while
    /// the others are judged.
    rules_unread: Vec<(String, Exceeded)>,
    definitions: Vec<String>,
    recipes: Recipes,
    /// What taking it cost (ignore rules, baseline, invariants, definitions), in ms.
    took_ms: u64,
    /// The workspace kept for the verifiers' diffs (`Err`: why not).
    snapshot: Result<Arc<step_open::Snapshot>, String>,
}
