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
use crate::profile::budgets::EvidenceView;
use crate::runbook::client::{APPROVAL_SOCKET, Answer, ApprovalRequest, STEP_SOCKET, StepRequest};
use crate::runbook::{Evidence, OnFail, Protected, ProtectedBy, Runbook, Step};
use crate::supervisor::runbook::files::{
    self, Budget, Entry, Exceeded, IgnoreRules, Walk, glob_matches,
};
use crate::supervisor::runbook::step_open;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

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
        let dir = run_dir.join("runbook");
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
                definitions: Vec::new(),
                recipes: Recipes::default(),
                passed_here: false,
                snapshot: Err("the step has not opened in this run".into()),
                opened_seq: 0,
            })
            .collect();
        let store = runbook
            .steps
            .iter()
            .flat_map(|s| &s.evidence)
            .any(|e| e.verifier.is_some())
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

    /// Serves both sockets, each on a thread of its own (after the sandbox's clone).
    pub fn serve(&self) -> Serving {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut threads = Vec::new();
        let take = |slot: &Mutex<Option<UnixListener>>| {
            slot.lock().unwrap_or_else(|e| e.into_inner()).take()
        };
        let in_flight = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        if let Some(listener) = take(&self.step_listener) {
            let path = self.dir().join(STEP_SOCKET);
            let engine = Arc::clone(&self.engine);
            let approvals = Arc::clone(&self.approvals);
            let stop = Arc::clone(&stop);
            let run_id = self.run_id.clone();
            let in_flight = Arc::clone(&in_flight);
            // One completion at a time; a status or an abandon is answered meanwhile.
            let completing = Arc::new(Mutex::new(()));
            threads.push((
                path,
                std::thread::spawn(move || {
                    for stream in listener.incoming() {
                        if stop.load(std::sync::atomic::Ordering::SeqCst) {
                            break;
                        }
                        let Ok(stream) = stream else { continue };
                        let _ = stream.set_write_timeout(Some(Duration::from_secs(10)));
                        if in_flight.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
                            >= STEP_CLIENTS_MAX
                        {
                            in_flight.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                            reply(
                                &stream,
                                &refused(&format!(
                                    "the supervisor is answering {STEP_CLIENTS_MAX} step requests already; ask again when one has ended"
                                )),
                            );
                            continue;
                        }
                        let (engine, approvals, run_id, done, completing) = (
                            Arc::clone(&engine),
                            Arc::clone(&approvals),
                            run_id.clone(),
                            Arc::clone(&in_flight),
                            Arc::clone(&completing),
                        );
                        let spawned = std::thread::Builder::new()
                            .name("stepproof-step".into())
                            .spawn(move || {
                                serve_step(&engine, &approvals, &completing, &run_id, stream);
                                done.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                            });
                        if spawned.is_err() {
                            in_flight.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                        }
                    }
                }),
            ));
        }
        if let Some(listener) = take(&self.approval_listener) {
            let path = self.lock().context.run_dir.join(APPROVAL_SOCKET);
            let engine = Arc::clone(&self.engine);
            let approvals = Arc::clone(&self.approvals);
            let stop = Arc::clone(&stop);
            threads.push((
                path,
                std::thread::spawn(move || {
                    for stream in listener.incoming() {
                        if stop.load(std::sync::atomic::Ordering::SeqCst) {
                            break;
                        }
                        if let Ok(stream) = stream {
                            serve_approval(&engine, &approvals, stream);
                        }
                    }
                }),
            ));
        }
        Serving {
            threads,
            stop,
            approvals: Arc::clone(&self.approvals),
            engine: Arc::clone(&self.engine),
            in_flight,
        }
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
            None => Ending::Abandoned {
                step: open[0].clone(),
                requested: None,
            },
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
                },
                "step": match &ending { Ending::Blocked { step } | Ending::Abandoned { step, .. } => step },
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

impl Serving {
    /// Stops the servers (a connection to each wakes its accept) and waits at most
    /// [`SHUTDOWN_WAIT`] for the step requests in flight: every walk, hash, evidence run,
    /// verifier and approval wait sees the stop and ends (a step being checked is recorded as
    /// interrupted). Whatever is still running then is left behind, and the engine is closed:
    /// it records and publishes nothing more. Says how many requests were left behind.
    pub fn shutdown(self) -> usize {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        self.approvals.close();
        for (path, thread) in self.threads {
            let _ = UnixStream::connect(&path);
            let _ = thread.join();
        }
        let deadline = Instant::now() + SHUTDOWN_WAIT;
        while self.in_flight.load(std::sync::atomic::Ordering::SeqCst) > 0
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        let left = self.in_flight.load(std::sync::atomic::Ordering::SeqCst);
        let mut engine = self.engine.lock().unwrap_or_else(|e| e.into_inner());
        if left > 0 {
            engine.record(
                "runbook-requests-left",
                json!({
                    "requests": left,
                    "why": format!("still running {} s after the run's end asked them to stop; left behind", SHUTDOWN_WAIT.as_secs()),
                }),
            );
        }
        engine.closed = true;
        left
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

fn serve_step(
    engine: &Arc<Mutex<Engine>>,
    approvals: &Arc<Approvals>,
    completing: &Mutex<()>,
    run_id: &str,
    stream: UnixStream,
) {
    let lock = || engine.lock().unwrap_or_else(|e| e.into_inner());
    let who = peer(&stream);
    let raw = match read_request(&stream) {
        Ok(raw) => raw,
        Err(why) => {
            lock().record_inside(
                "runbook-request-refused",
                json!({ "why": why, "peer": who }),
            );
            reply(&stream, &refused(&why));
            return;
        }
    };
    let request: StepRequest = match serde_json::from_value(raw.clone()) {
        Ok(request) => request,
        Err(e) => {
            // A hand-made message claiming evidence, a verdict or an approval: not a request
            // the supervisor takes, and on the record.
            let why = format!(
                "refused: not a request the supervisor takes ({e}); evidence, verdicts and approvals are the supervisor's and a person's, never a message's"
            );
            let mut shown = raw.to_string();
            shown.truncate(4096);
            lock().record_inside(
                "runbook-request-refused",
                json!({ "why": why, "message": shown, "peer": who }),
            );
            reply(&stream, &refused(&why));
            return;
        }
    };
    let answer = match request {
        StepRequest::Status {} => {
            let engine = lock();
            engine.record_inside("runbook-status-requested", json!({ "peer": who }));
            Answer {
                ok: true,
                message: engine.status_text(),
                state: Some(engine.state_json()),
            }
        }
        StepRequest::Evidence { files } => {
            // Hashed outside the engine's lock, within one walk's budget for the request.
            let (workspace, budget) = {
                let e = lock();
                (e.context.workspace.clone(), e.context.budget)
            };
            let mut walk = Walk::new(&budget, &approvals.closing, &approvals.spent);
            let root = files::open_workspace(&workspace);
            let mut exceeded = None;
            let hashed: Vec<Value> = files
                .iter()
                .take(256)
                .map(|f| {
                    let rel = Path::new(f.trim_start_matches('/'));
                    let hash = match (&root, &exceeded) {
                        (Ok(root), None) => {
                            match walk.hash_named(std::os::fd::AsFd::as_fd(root), rel) {
                                Ok(hash) => hash,
                                Err(e) => {
                                    exceeded = Some(e);
                                    None
                                }
                            }
                        }
                        _ => None,
                    };
                    json!({ "path": f, "sha256": hash })
                })
                .collect();
            lock().record_inside(
                "runbook-evidence-named",
                json!({
                    "files": hashed,
                    "peer": who,
                    "budget": exceeded.as_ref().map(Exceeded::budget),
                }),
            );
            let listed: Vec<String> = hashed
                .iter()
                .map(|f| {
                    let path = f["path"].as_str().unwrap_or_default();
                    if f["sha256"].is_null() {
                        format!("{path} (not a regular file in the workspace)")
                    } else {
                        path.to_string()
                    }
                })
                .collect();
            Answer {
                ok: true,
                message: format!(
                    "noted for the record: {}. Naming a file completes nothing: when the step is completed the supervisor judges its evidence by its own hashes.{}",
                    if listed.is_empty() {
                        "no file".to_string()
                    } else {
                        listed.join(", ")
                    },
                    exceeded
                        .as_ref()
                        .map(|e| format!(" The rest was not hashed: {}", e.sentence()))
                        .unwrap_or_default()
                ),
                state: None,
            }
        }
        StepRequest::Complete { step, note } => match completing.try_lock() {
            Ok(_one) => complete(engine, approvals, run_id, step.as_deref(), note, who),
            Err(_) => {
                let why = "a completion is being checked already: wait for its answer (`step status` answers meanwhile), then ask again if it did not pass";
                lock().record_inside(
                    "runbook-complete-refused",
                    json!({ "step": step, "why": why, "peer": who }),
                );
                refused(why)
            }
        },
        StepRequest::Abandon { reason } => lock().abandon(reason, who),
    };
    reply(&stream, &answer);
}

fn refused(why: &str) -> Answer {
    Answer {
        ok: false,
        message: why.to_string(),
        state: None,
    }
}

/// A completion request: attempt counted, every evidence item checked by the supervisor, the
/// verdict recorded and published. The engine is unlocked while a command runs or an approval
/// is awaited (the status stays answerable).
fn complete(
    engine: &Arc<Mutex<Engine>>,
    approvals: &Arc<Approvals>,
    run_id: &str,
    step: Option<&str>,
    note: Option<String>,
    who: Value,
) -> Answer {
    let lock = || engine.lock().unwrap_or_else(|e| e.into_inner());
    let (index, step, attempt) = {
        let mut e = lock();
        let open: Vec<usize> = (0..e.steps.len())
            .filter(|&i| e.steps[i].status == Status::Open)
            .collect();
        let index = match step {
            Some(id) => e.runbook.steps.iter().position(|s| s.id.as_str() == id),
            None if open.len() == 1 => Some(open[0]),
            None => None,
        };
        let Some(index) = index.filter(|i| open.contains(i)) else {
            let why = match step {
                Some(id) => format!(
                    "step {id:?} is not open (open: {})",
                    e.open_ids().join(", ")
                ),
                None if open.is_empty() => "no step is open".to_string(),
                None => format!(
                    "several steps are open ({}): name one with --step",
                    e.open_ids().join(", ")
                ),
            };
            e.record_inside(
                "runbook-complete-refused",
                json!({ "step": step, "why": why, "peer": who }),
            );
            return refused(&why);
        };
        e.steps[index].attempts += 1;
        let attempt = e.steps[index].attempts;
        let step = e.runbook.steps[index].clone();
        e.record_inside(
            "runbook-complete-requested",
            json!({ "step": step.id, "attempt": attempt, "max_attempts": step.attempts(), "note": note, "peer": who }),
        );
        (index, step, attempt)
    };
    let mut failures = Vec::new();
    // The supervisor's own evidence first; model verifiers last, each given what was gathered
    // (and not started when that already failed: nothing a model says could pass the step).
    let mut gathered = Vec::new();
    let mut outputs = Vec::new();
    let mut verdicts = Vec::new();
    let (verifier_items, other_items): (Vec<_>, Vec<_>) = step
        .evidence
        .iter()
        .enumerate()
        .partition(|(_, item)| item.verifier.is_some());
    // Approvals after the supervisor's own evidence: a person is asked with the agent thawed.
    let (approval_items, other_items): (Vec<_>, Vec<_>) = other_items
        .into_iter()
        .partition(|(_, item)| item.approval.is_some());
    // With evidence commands, the agent stays frozen from the invariants' walk to the last
    // command's end: the commands run on the state the invariants were judged on.
    let (cgroup_dirs, no_freezer, has_definitions) = {
        let e = lock();
        (
            e.context.cgroup_dirs.clone(),
            e.context.no_freezer.clone(),
            !e.steps[index].definitions.is_empty(),
        )
    };
    let held = step
        .evidence
        .iter()
        .any(|e| e.command.is_some())
        .then(|| freeze(&cgroup_dirs, true, no_freezer.as_deref()));
    // The step's invariants first: whatever changed its protected paths or what defines its
    // evidence commands (a tool the step allows, a build script, a recipe the agent rewrote),
    // the hook did not have to see it.
    let protected = step.protected_paths();
    let invariants = (!protected.is_empty() || has_definitions)
        .then(|| check_invariants(engine, approvals, index, &step, held.as_ref()));
    let mut deny_rules: Vec<String> = Vec::new();
    let mut deny_globs: Vec<String> = Vec::new();
    for p in &protected {
        if let ProtectedBy::DenyRule(rule) = &p.by {
            if !deny_rules.contains(rule) {
                deny_rules.push(rule.clone());
            }
            if !deny_globs.contains(&p.glob) {
                deny_globs.push(p.glob.clone());
            }
        }
    }
    if !deny_rules.is_empty() {
        let (held, mut record, why) =
            invariant_item(invariants.as_ref(), &deny_globs, Some(&deny_rules), |p| {
                matches!(p.by, ProtectedBy::DenyRule(_))
            });
        record["step"] = json!(step.id);
        record["attempt"] = json!(attempt);
        record["item"] = json!("deny-rules");
        record["held"] = json!(held);
        gathered.push(record.clone());
        lock().record("runbook-evidence", record);
        if !held {
            failures.push(why);
        }
    }
    if let Some(check) = invariants.as_ref().filter(|c| !c.definitions.is_empty()) {
        let (held, mut record, why) = definitions_item(check, &step);
        record["step"] = json!(step.id);
        record["attempt"] = json!(attempt);
        record["item"] = json!("definitions");
        record["held"] = json!(held);
        gathered.push(record.clone());
        lock().record("runbook-evidence", record);
        if !held {
            failures.push(why);
        }
    }
    let mut thaw = held.is_some();
    for (n, item) in other_items
        .into_iter()
        .chain(approval_items)
        .chain(verifier_items)
    {
        if thaw
            && item.command.is_none()
            && item.files_exist.is_none()
            && item.files_changed.is_none()
            && item.files_unchanged.is_none()
        {
            freeze(&cgroup_dirs, false, None);
            thaw = false;
        }
        let (held, record, why) = match &item.verifier {
            Some(verifier) if failures.is_empty() => {
                let (held, record, why, said) = check_verifier(
                    engine,
                    approvals,
                    (index, &step, attempt),
                    verifier.tier,
                    (&gathered, &outputs),
                );
                verdicts.push(said);
                (held, record, why)
            }
            Some(verifier) => (
                false,
                json!({ "kind": "verifier", "tier": verifier.tier, "verdict": null, "not_run": "other evidence of this attempt did not hold" }),
                format!(
                    "verifier (tier {}): not started, the other evidence did not hold",
                    verifier.tier
                ),
            ),
            None => {
                let checked = check_item(
                    engine,
                    approvals,
                    run_id,
                    (index, &step, n),
                    item,
                    invariants.as_ref(),
                    held.as_ref(),
                );
                if checked.0 && checked.1["kind"] == "approval" {
                    // Who said yes, in the agent's answer (a denial says why among the failures).
                    let from = checked.1["from"].as_str().unwrap_or("a person");
                    verdicts.push(match checked.1["approver"].as_str() {
                        Some(who) => format!("approval: approved by {who} (from {from})"),
                        None => format!("approval: approved (from {from})"),
                    });
                }
                checked
            }
        };
        let e = lock();
        let mut record = record;
        // A command's output tail is for the verifiers, never for the chain.
        if let Some(output) = record
            .as_object_mut()
            .and_then(|r| r.remove(OUTPUT_TAIL_KEY))
        {
            outputs.push((
                crate::audit::text::command_line(
                    &serde_json::from_value::<Vec<String>>(record["run"].clone())
                        .unwrap_or_default(),
                ),
                output.as_str().unwrap_or_default().to_string(),
            ));
        }
        record["step"] = json!(step.id);
        record["attempt"] = json!(attempt);
        record["item"] = json!(n);
        record["held"] = json!(held);
        gathered.push(record.clone());
        e.record("runbook-evidence", record);
        drop(e);
        if !held {
            failures.push(why);
        }
    }
    if thaw {
        freeze(&cgroup_dirs, false, None);
    }
    let mut e = lock();
    if failures.is_empty() {
        e.steps[index].status = Status::Passed;
        e.steps[index].passed_here = true;
        e.steps[index].last_verdict = Some("passed".into());
        let covered = covered(
            &step,
            (&e.steps[index].definitions, &e.steps[index].recipes.unknown),
            &gathered,
        );
        e.record(
            "runbook-step-passed",
            json!({ "step": step.id, "attempt": attempt, "covered": covered }),
        );
        // The next steps' baselines are walked outside the lock (a status is answered
        // meanwhile), within their budget, and stop when the run ends.
        let ready = e.ready();
        let (workspace, budget, runbook, store) = (
            e.context.workspace.clone(),
            e.context.budget,
            e.runbook.clone(),
            e.store.clone(),
        );
        drop(e);
        let baselines = take_baselines(
            &workspace,
            &budget,
            &runbook,
            &ready,
            (&approvals.closing, &approvals.spent),
            store.as_deref(),
        );
        let mut e = lock();
        e.open_with(baselines);
        let published = e.publish();
        let mut message = format!("step {} passed (attempt {attempt}).", step.id);
        for said in &verdicts {
            message.push_str(&format!("\n{said}"));
        }
        if let Err(why) = published {
            message.push_str(&format!(" (publishing the state failed: {why})"));
        }
        let opened = e.open_ids();
        if opened.is_empty() {
            message.push_str("\nNo step is open: the runbook is complete.");
        } else {
            message.push_str(&format!("\nOpen now: {}.", opened.join(", ")));
            // What the agent needs next, without waiting for the next prompt's orientation.
            for (next, s) in e.runbook.steps.iter().zip(&e.steps) {
                if s.status == Status::Open && next.id != step.id {
                    message.push_str(&format!(
                        "\nStep {} ({}): {}\nIt allows {}.",
                        next.id,
                        next.title,
                        next.instructions.trim(),
                        crate::runbook::policy::allows_text(next)
                    ));
                }
            }
        }
        return Answer {
            ok: true,
            message,
            state: Some(e.state_json()),
        };
    }
    if approvals.closing.load(std::sync::atomic::Ordering::SeqCst) {
        // The run ended during the wait: not a verdict. The step stays open (the run is
        // abandoned, and a later run continues it).
        e.record(
            "runbook-step-interrupted",
            json!({ "step": step.id, "attempt": attempt, "why": "the run ended while the step's evidence was being checked" }),
        );
        return Answer {
            ok: false,
            message: format!(
                "step {} not completed: the run ended while its evidence was being checked",
                step.id
            ),
            state: Some(e.state_json()),
        };
    }
    let left = step.attempts().saturating_sub(attempt);
    let why = failures.join("\n");
    e.steps[index].last_verdict = Some("failed".into());
    let final_failure = left == 0;
    if final_failure {
        e.steps[index].status = Status::Failed;
        e.ending = Some(match step.on_fail() {
            OnFail::Abandon => Ending::Abandoned {
                step: step.id.to_string(),
                requested: None,
            },
            OnFail::Retry | OnFail::Block => Ending::Blocked {
                step: step.id.to_string(),
            },
        });
    }
    // What of the step's protected paths changed, named in the verdict's own record.
    let mut invariants_changed: Vec<&Value> = Vec::new();
    for change in gathered
        .iter()
        .filter(|r| r["kind"] == "files_unchanged" && r["held"] == false)
        .flat_map(|r| r["changed"].as_array().into_iter().flatten())
    {
        if invariants_changed.len() < FILES_RECORDED_MAX && !invariants_changed.contains(&change) {
            invariants_changed.push(change);
        }
    }
    e.record(
        "runbook-step-failed",
        json!({
            "step": step.id,
            "attempt": attempt,
            "attempts_left": left,
            "final": final_failure,
            "on_fail": step.on_fail().name(),
            "invariants_changed": invariants_changed,
        }),
    );
    let _ = e.publish();
    let tail = if final_failure {
        format!(
            "No attempt is left (on_fail = {}): the run stops; every further tool call is denied.",
            step.on_fail().name()
        )
    } else {
        format!(
            "{left} attempt(s) left; fix it and ask again (`/run/stepproof/stepproof step complete`, in the chat /step-complete)."
        )
    };
    Answer {
        ok: false,
        message: format!(
            "step {} NOT passed (attempt {attempt} of {}):\n{why}\n{tail}",
            step.id,
            step.attempts()
        ),
        state: Some(e.state_json()),
    }
}

/// A model verifier item: a separate read-only Claude Code run judges the acceptance
/// criteria with the evidence gathered in this attempt, while the agent's processes are frozen
/// (one state of the workspace). Whether it held (`pass` only), its record (verdict, reasons,
/// model, each attempt of the chain, transcript digest), why not, and the verdict in words for
/// the worker's answer.
fn check_verifier(
    engine: &Arc<Mutex<Engine>>,
    approvals: &Arc<Approvals>,
    (index, step, attempt): (usize, &Step, u32),
    tier: u8,
    (gathered, outputs): (&[Value], &[(String, String)]),
) -> (bool, Value, String, String) {
    use crate::supervisor::runbook::verifier::{self, Verdict};
    let lock = || engine.lock().unwrap_or_else(|e| e.into_inner());
    let (context, n, runbook, base, store) = {
        let mut e = lock();
        e.evidence_runs += 1;
        (
            e.context.clone(),
            e.evidence_runs,
            e.runbook.clone(),
            e.diff_base(index),
            e.store.clone(),
        )
    };
    let verifiers = runbook.verifiers.clone().unwrap_or_default();
    // The agent's processes are frozen from the diff's walk to the verdict: one state of the
    // workspace.
    let frozen = freeze(&context.cgroup_dirs, true, context.no_freezer.as_deref());
    let diff = match (base, store) {
        (Ok(base), Some(store)) => store
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .diff(
                &context.workspace,
                &context.budget,
                &approvals.closing,
                &base,
            )
            .map(|diff| (base.step.clone(), diff))
            .map_err(|e| {
                format!(
                    "the walk of the workspace did not finish ({})",
                    e.sentence()
                )
            }),
        (Err(why), _) => Err(why),
        (_, None) => Err("the runbook's openings were not kept".into()),
    };
    let work = verifier::Work {
        show: verifiers.show(),
        diff,
        outputs: outputs.to_vec(),
    };
    let request = verifier::Request {
        runbook: &runbook,
        step,
        tier,
        attempt,
        evidence: gathered,
        work: &work,
    };
    let (prompt, shown) = verifier::shown(&request);
    {
        let e = lock();
        e.record(
            "runbook-verifier-started",
            json!({
                "step": step.id,
                "attempt": attempt,
                "tier": tier,
                "models": verifiers.models(tier),
                "timeout": verifiers.timeout().render(),
                "max_tokens": verifiers.max_tokens(),
                "prompt_sha256": format!("sha256:{}", hex::encode(Sha256::digest(prompt.as_bytes()))),
                "shown": shown,
            }),
        );
    }
    let launcher = verifier::Launcher {
        run_binary: context.run_binary.clone(),
        profile: context.profile.clone(),
        workspace: context.workspace.clone(),
        run_dir: context.run_dir.clone(),
        deadline: context.deadline,
        stop: Arc::clone(&approvals.closing),
    };
    let verification = verifier::verify(&launcher, &verifiers, &request, n, &mut |r| {
        lock().record("runbook-verifier-attempt", r.clone());
    });
    freeze(&context.cgroup_dirs, false, None);
    let held = verification.verdict == Verdict::Pass;
    let model = match (&verification.model, &verification.model_used) {
        (Some(asked), Some(used)) if verification.model_differs => {
            format!("{used}, asked for {asked}")
        }
        (Some(asked), _) => asked.clone(),
        (None, _) => "none".into(),
    };
    let said = format!(
        "verifier (tier {tier}, model {model}): {}\n{}",
        verification.verdict.name(),
        verification
            .reasons
            .iter()
            .map(|r| format!("  - {r}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let record = json!({
        "kind": "verifier",
        "tier": tier,
        "verdict": verification.verdict.name(),
        "reasons": verification.reasons,
        "model": verification.model,
        "model_used": verification.model_used,
        "model_differs": verification.model_differs,
        "models_tried": verification.attempts.iter().map(|a| a["model"].clone()).collect::<Vec<_>>(),
        "chain": verification.attempts.iter().map(|a| json!({ "model": a["model"], "outcome": a["outcome"] })).collect::<Vec<_>>(),
        "tokens": verification.tokens,
        "duration_ms": verification.duration.as_millis() as u64,
        "transcript_sha256": verification.transcript_sha256,
        "frozen": frozen.0,
        "agent_frozen": frozen.1,
        "workspace": "read-only",
    });
    (held, record, said.clone(), said)
}

/// The step's invariants at one completion, compared once for every item they decide.
struct InvariantCheck {
    /// Each protected path that changed since the step opened, and how; or why there is no
    /// verdict.
    changes: Result<BTreeMap<String, String>, Exceeded>,
    /// The ignore rules as the step opened (`None`: they could not be read).
    rules: Option<IgnoreRules>,
    protected: Vec<Protected>,
    /// Whether the agent's processes were frozen during the walk, and what was, in words.
    frozen: (bool, String),
    baseline_entries: Option<usize>,
    /// The definition globs of the step's evidence commands.
    definitions: Vec<String>,
    /// What the makefiles' recipes run, as the step opened.
    recipes: Recipes,
    /// What the walk found (the protected paths and the definition files as they are now).
    now: BTreeMap<String, Entry>,
    /// Ignored entries under the protected paths (hidden from evidence commands), and
    /// whether each is a directory; `Err` when that walk did not finish.
    ignored: Result<Vec<(String, bool)>, Exceeded>,
}

/// Walks the step's protected paths again, with the agent's processes frozen (one state of the
/// workspace), and compares them with what they were when the step opened.
fn check_invariants(
    engine: &Arc<Mutex<Engine>>,
    approvals: &Approvals,
    index: usize,
    step: &Step,
    held: Option<&(bool, String)>,
) -> InvariantCheck {
    let (baseline, rules, context, definitions, recipes) = {
        let e = engine.lock().unwrap_or_else(|e| e.into_inner());
        (
            e.steps[index].invariants.clone(),
            e.steps[index].ignore.clone(),
            e.context.clone(),
            e.steps[index].definitions.clone(),
            e.steps[index].recipes.clone(),
        )
    };
    let baseline_entries = baseline.as_ref().ok().map(BTreeMap::len);
    let frozen = match held {
        Some(held) => held.clone(),
        None => freeze(&context.cgroup_dirs, true, context.no_freezer.as_deref()),
    };
    let mut now = BTreeMap::new();
    let mut ignored = Ok(Vec::new());
    let changes = (|| {
        let baseline = baseline?;
        let mut rules = rules.clone()?;
        let root = files::open_workspace(&context.workspace).map_err(|e| Exceeded::Unreadable {
            path: context.workspace.display().to_string(),
            error: e.to_string(),
        })?;
        let root = std::os::fd::AsFd::as_fd(&root);
        let mut walk = Walk::new(&context.budget, &approvals.closing, &approvals.spent);
        now = walk.inventory(root, &invariant_globs(step), Some(&mut rules))?;
        // What evidence commands must not see: ignored files under the protected paths.
        if step.evidence.iter().any(|e| e.command.is_some()) {
            let mut hidden = Vec::new();
            for start in protected_roots(step) {
                match walk.ignored_under(root, &start, &rules) {
                    Ok(found) => hidden.extend(found),
                    Err(e) => {
                        ignored = Err(e);
                        break;
                    }
                }
            }
            if ignored.is_ok() {
                ignored = Ok(hidden);
            }
        }
        walk.not_entering(crate::runbook::definitions::NOT_ENTERED);
        now.extend(walk.inventory(root, &definition_walk(&definitions), None)?);
        files::compare(&mut walk, root, &baseline, &now)
    })();
    if held.is_none() {
        freeze(&context.cgroup_dirs, false, None);
    }
    InvariantCheck {
        changes,
        rules: rules.ok(),
        protected: step.protected_paths(),
        frozen,
        baseline_entries,
        definitions,
        recipes,
        now,
        ignored,
    }
}

/// The directories (or files) a step's protected globs start at: each glob's literal prefix.
fn protected_roots(step: &Step) -> Vec<String> {
    let mut roots: Vec<String> = Vec::new();
    for p in step.protected_paths() {
        let literal: Vec<&str> = p
            .glob
            .split('/')
            .filter(|c| !c.is_empty())
            .take_while(|c| !stepproof_hook::pattern::has_wildcard(c))
            .collect();
        let root = literal.join("/");
        if !roots.contains(&root) {
            roots.push(root);
        }
    }
    roots
}

/// What a step's command evidence rests on beyond its argv: the makefiles' recipes, the
/// package scripts, justfile recipes and Taskfile tasks it runs.
#[derive(Debug, Clone, Default)]
struct Recipes {
    /// Build state the recipes' tools would reuse (workspace-relative directories): discarded
    /// in the evidence sandbox of a command that runs make, unless trusted by name.
    build_state: Vec<String>,
    /// What the makefiles and scripts run that could not be known when the step opened (a
    /// computed word, a template): what the proof rests on unfrozen, said in the records.
    unknown: Vec<String>,
}

/// Unknown words kept per step, and the characters of each.
const UNKNOWN_KEPT: usize = 32;
const UNKNOWN_CHARS: usize = 200;

/// The definition globs of a step's command evidence: what each tool reads, and for the
/// makefiles and script files that exist now (read beneath the workspace, each whole and at
/// most 1 MiB — a larger one fails the step naming it, it is not cut —, up to
/// [`DEFINITION_READS`] reads, each file and entry once) what they run: a makefile's literal
/// includes and its recipes ([`crate::runbook::definitions::of_recipes`]), a package.json's
/// named scripts with their `pre`/`post` scripts, a justfile's recipes and imports, a
/// Taskfile's named tasks with their `deps` and includes
/// ([`crate::runbook::definitions::of_scripts`]). A recipe's or script's `python3 -m pytest`
/// makes `conftest.py` a definition, its `cargo test` makes `target/` build state, and a
/// `make -C web` or `npm run b` inside is read in turn.
fn definition_globs(
    walk: &mut Walk<'_>,
    root: std::os::fd::BorrowedFd<'_>,
    step: &Step,
    workspace: &Path,
) -> Result<(Vec<String>, Recipes), Exceeded> {
    const DEFINITION_BYTES: u64 = 1 << 20;
    let commands: Vec<crate::runbook::definitions::Definitions> = step
        .evidence
        .iter()
        .filter_map(|e| e.command.as_ref())
        .map(|command| crate::runbook::definitions::of_command(&command.run, workspace))
        .collect();
    let followed = crate::runbook::definitions::follow(
        &commands,
        workspace,
        DEFINITION_READS,
        |file| walk.read_whole(root, file, DEFINITION_BYTES),
        |limit| Exceeded::Definitions { limit },
    )?;
    Ok((
        followed.files,
        Recipes {
            build_state: followed.build_state,
            unknown: followed
                .unknown
                .iter()
                .take(UNKNOWN_KEPT)
                .map(|u| u.chars().take(UNKNOWN_CHARS).collect())
                .collect(),
        },
    ))
}

/// Makefiles and script files (or a package.json's entries) one step's opening reads at most:
/// more is a budget reached, which fails the step, not a part left unread.
const DEFINITION_READS: usize = 128;

/// Definition globs as a walk takes them: every file counts, ignored or not.
fn definition_walk(globs: &[String]) -> Vec<(String, bool)> {
    globs.iter().map(|g| (g.clone(), false)).collect()
}

/// The globs that name a step's work: its `files_changed` paths and the workspace paths of its
/// `allow` file-write rules. A definition file one of them names
/// ([`crate::runbook::definitions::names_file`]) may change during the step.
fn work_globs(step: &Step) -> Vec<String> {
    let mut globs: Vec<String> = step
        .evidence
        .iter()
        .filter_map(|e| e.files_changed.as_ref())
        .flat_map(|f| f.paths.iter().cloned())
        .collect();
    globs.extend(
        step.allow
            .files
            .iter()
            .filter(|r| r.access == stepproof_hook::config::Access::Write)
            .flat_map(|r| r.paths.iter())
            .map(|p| p.trim_start_matches("./").to_string()),
    );
    globs
}

/// The definitions item: the files that define the step's evidence commands, as they were
/// when the step opened, unless the step names them as its work.
fn definitions_item(check: &InvariantCheck, step: &Step) -> (bool, Value, String) {
    let kind = "files_unchanged";
    let changes = match (&check.changes, &check.rules) {
        (Ok(changes), Some(_)) => changes,
        (Err(exceeded), _) => {
            let mut failed = exceeded_item(kind, &check.definitions, exceeded);
            failed.2 = format!(
                "files_unchanged (what defines the evidence commands): not compared, so no verdict: {}",
                exceeded.sentence()
            );
            return failed;
        }
        (Ok(_), None) => return exceeded_item(kind, &check.definitions, &Exceeded::Stopped),
    };
    let work = work_globs(step);
    let named_as_work = |path: &str| {
        work.iter()
            .any(|g| crate::runbook::definitions::names_file(g, path))
    };
    let mut exempt = Vec::new();
    let hits: Vec<(&String, &String)> = changes
        .iter()
        .filter(|(path, _)| check.definitions.iter().any(|g| glob_matches(g, path)))
        .filter(|(path, _)| {
            let work = named_as_work(path);
            if work {
                exempt.push((*path).clone());
            }
            !work
        })
        .collect();
    let held = hits.is_empty();
    let shown: Vec<String> = hits
        .iter()
        .take(INVARIANTS_SHOWN)
        .map(|(path, change)| format!("{path} ({change})"))
        .collect();
    let record = json!({
        "kind": kind,
        "paths": check.definitions,
        "changed": hits.iter().take(FILES_RECORDED_MAX).map(|(path, change)| json!({ "path": path, "change": change })).collect::<Vec<_>>(),
        "changed_count": hits.len(),
        "changed_as_work": exempt,
        "baseline_entries": check.baseline_entries,
        "frozen": check.frozen.0,
        "agent_frozen": check.frozen.1,
    });
    (
        held,
        record,
        format!(
            "files_unchanged (what defines the evidence commands): {} file{} changed since the step opened, whatever changed {}: {}{}; they must be as they were when the step opened (a step that changes one names it in `files_changed` or a write `allow` rule)",
            hits.len(),
            if hits.len() == 1 { "" } else { "s" },
            if hits.len() == 1 { "it" } else { "them" },
            shown.join(", "),
            match hits.len().saturating_sub(INVARIANTS_SHOWN) {
                0 => String::new(),
                more => format!(" and {more} more"),
            }
        ),
    )
}

/// Changed protected paths named in the agent's answer, per item (its record names up to
/// [`FILES_RECORDED_MAX`], and counts them all).
const INVARIANTS_SHOWN: usize = 20;

/// An invariant item's verdict: the deny rules' protected paths (`deny_rules`) or a
/// `files_unchanged` item's, as `select` picks them of the step's.
fn invariant_item(
    check: Option<&InvariantCheck>,
    paths: &[String],
    deny_rules: Option<&[String]>,
    select: impl Fn(&Protected) -> bool,
) -> (bool, Value, String) {
    let kind = "files_unchanged";
    let Some(check) = check else {
        let missing = Exceeded::Stopped;
        return exceeded_item(kind, paths, &missing);
    };
    let by = match deny_rules {
        Some(rules) => format!(
            "protected by deny rule{} {}",
            if rules.len() == 1 { "" } else { "s" },
            rules
                .iter()
                .map(|r| format!("`{r}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        None => "files_unchanged".to_string(),
    };
    let changes = match (&check.changes, &check.rules) {
        (Ok(changes), Some(rules)) => (changes, rules),
        (Err(exceeded), _) => {
            let mut failed = exceeded_item(kind, paths, exceeded);
            if let Some(rules) = deny_rules {
                failed.1["deny_rules"] = json!(rules);
            }
            failed.2 = format!(
                "files_unchanged ({by}: {}): not compared, so no verdict: {}",
                paths.join(", "),
                exceeded.sentence()
            );
            return failed;
        }
        (Ok(_), None) => return exceeded_item(kind, paths, &Exceeded::Stopped),
    };
    let (changes, rules) = changes;
    let selected: Vec<&Protected> = check.protected.iter().filter(|p| select(p)).collect();
    let hits: Vec<(&String, &String)> = changes
        .iter()
        .filter(|(path, _)| {
            selected.iter().any(|p| {
                glob_matches(&p.glob, path)
                    && (p.include_ignored || !rules.path_ignored(path, false))
            })
        })
        .collect();
    let held = hits.is_empty();
    let shown: Vec<String> = hits
        .iter()
        .take(INVARIANTS_SHOWN)
        .map(|(path, change)| format!("{path} ({change})"))
        .collect();
    let more = hits.len().saturating_sub(INVARIANTS_SHOWN);
    let mut record = json!({
            "kind": kind,
            "paths": paths,
            "changed": hits.iter().take(FILES_RECORDED_MAX).map(|(path, change)| json!({ "path": path, "change": change })).collect::<Vec<_>>(),
            "changed_count": hits.len(),
            "baseline_entries": check.baseline_entries,
            "ignore_rules_sha256": rules.digest(),
            "frozen": check.frozen.0,
            "agent_frozen": check.frozen.1,
    });
    if let Some(rules) = deny_rules {
        record["deny_rules"] = json!(rules);
    }
    (
        held,
        record,
        format!(
            "files_unchanged ({by}: {}): {} path{} the step protects changed since it opened, whatever changed {}: {}{}; they must be as they were when the step opened",
            paths.join(", "),
            hits.len(),
            if hits.len() == 1 { "" } else { "s" },
            if hits.len() == 1 { "it" } else { "them" },
            shown.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        ),
    )
}

/// Each baseline file a `files_changed` walk did not name, looked up beneath the workspace:
/// gone, or no longer a regular file, is a change; a regular file there after all means the
/// walk missed it, and there is no verdict.
fn confirm_gone(
    engine: &Arc<Mutex<Engine>>,
    approvals: &Approvals,
    gone: &[String],
) -> Result<(), Exceeded> {
    if gone.is_empty() {
        return Ok(());
    }
    let (workspace, budget) = {
        let e = engine.lock().unwrap_or_else(|e| e.into_inner());
        (e.context.workspace.clone(), e.context.budget)
    };
    let root = files::open_workspace(&workspace).map_err(|e| Exceeded::Unreadable {
        path: workspace.display().to_string(),
        error: e.to_string(),
    })?;
    let mut walk = Walk::new(&budget, &approvals.closing, &approvals.spent);
    for path in gone {
        if walk
            .lookup(std::os::fd::AsFd::as_fd(&root), path)?
            .is_some_and(|stat| stat.is_file())
        {
            return Err(Exceeded::Unstable { path: path.clone() });
        }
    }
    Ok(())
}

/// One evidence item (the `n`th of its step at `index`): whether it held, its record, and why
/// not. `held`: the agent is frozen already (commands run without thawing it).
fn check_item(
    engine: &Arc<Mutex<Engine>>,
    approvals: &Arc<Approvals>,
    run_id: &str,
    (index, step, n): (usize, &Step, usize),
    item: &Evidence,
    invariants: Option<&InvariantCheck>,
    held: Option<&(bool, String)>,
) -> (bool, Value, String) {
    let lock = || engine.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(files) = &item.files_exist {
        let include_ignored = files.include_ignored();
        // The ignore rules as the step opened: a file the agent made ignored since, or an
        // ignored build artefact the glob happens to name, does not satisfy it.
        let rules = match lock().steps[index].ignore.clone() {
            Ok(rules) => rules,
            Err(exceeded) if !include_ignored => {
                let mut failed = exceeded_item("files_exist", &files.paths, &exceeded);
                failed.2 = format!(
                    "files_exist: the workspace's ignore rules could not be read when the step opened: {}",
                    exceeded.sentence()
                );
                return failed;
            }
            Err(_) => IgnoreRules::none(),
        };
        let globs = item_globs(&files.paths, include_ignored);
        let (walked, ledger) = match walk_item(engine, approvals, &globs, Some(&rules)) {
            Ok(walked) => walked,
            Err(exceeded) => return exceeded_item("files_exist", &files.paths, &exceeded),
        };
        let mut missing = Vec::new();
        let mut found = BTreeMap::new();
        for (glob, hits) in files.paths.iter().zip(walked) {
            if hits.is_empty() {
                missing.push(glob.clone());
            }
            found.extend(hits);
        }
        let held = missing.is_empty();
        let attributed_to = attributions(&ledger, step.id.as_str(), &files.paths, &found);
        return (
            held,
            json!({
                "kind": "files_exist",
                "paths": files.paths,
                "include_ignored": include_ignored,
                "ignore_rules_sha256": (!include_ignored).then(|| rules.digest()),
                "found": recorded_files(&found),
                "found_count": found.len(),
                "found_sha256": files_digest(&found),
                "missing": missing,
                "attributed_to": attributed_to,
            }),
            format!(
                "files_exist: nothing matches {}{}",
                missing.join(", "),
                if include_ignored {
                    ""
                } else {
                    " (files the repository ignores, as its rules were when the step opened, do not count)"
                }
            ),
        );
    }
    if let Some(files) = &item.files_changed {
        let (baseline, baseline_exceeded, rules) = {
            let e = lock();
            (
                e.steps[index].baseline.clone(),
                e.steps[index].baseline_exceeded.clone(),
                e.steps[index].ignore.clone(),
            )
        };
        let include_ignored = files.include_ignored();
        let rules = match rules {
            Ok(rules) => rules,
            Err(exceeded) if !include_ignored => {
                let mut failed = exceeded_item("files_changed", &files.paths, &exceeded);
                failed.2 = format!(
                    "files_changed: the workspace's ignore rules could not be read when the step opened: {}",
                    exceeded.sentence()
                );
                return failed;
            }
            // Not needed: every file counts.
            Err(_) => IgnoreRules::none(),
        };
        if let Some(exceeded) = baseline_exceeded {
            let mut failed = exceeded_item("files_changed", &files.paths, &exceeded);
            failed.2 = format!(
                "files_changed: the step's baseline could not be taken when it opened: {}",
                exceeded.sentence()
            );
            return failed;
        }
        let globs = item_globs(&files.paths, include_ignored);
        let (walked, ledger) = match walk_item(engine, approvals, &globs, Some(&rules)) {
            Ok(walked) => walked,
            Err(exceeded) => return exceeded_item("files_changed", &files.paths, &exceeded),
        };
        // What counts, on both sides: what the glob names and (unless the item says) the rules
        // as they were when the step opened do not ignore.
        let counts = |glob: &str, path: &str| {
            glob_matches(glob, path) && (include_ignored || !rules.path_ignored(path, false))
        };
        let mut unchanged = Vec::new();
        let mut changed = Vec::new();
        let mut gone = Vec::new();
        let mut current = BTreeMap::new();
        for (glob, now) in files.paths.iter().zip(walked) {
            current.extend(now.clone());
            let mut glob_changed: Vec<String> = now
                .iter()
                .filter(|(p, h)| baseline.get(*p) != Some(*h))
                .map(|(p, _)| p.clone())
                .collect();
            let missing: Vec<String> = baseline
                .keys()
                .filter(|p| counts(glob, p) && !now.contains_key(*p))
                .cloned()
                .collect();
            glob_changed.extend(missing.iter().cloned());
            gone.extend(missing);
            if glob_changed.is_empty() {
                unchanged.push(glob.clone());
            }
            changed.extend(glob_changed);
        }
        // A baseline file the walk did not name counts only when a lookup confirms it is no
        // longer a regular file there: a walk that missed it never forges a change.
        if let Err(exceeded) = confirm_gone(engine, approvals, &gone) {
            return exceeded_item("files_changed", &files.paths, &exceeded);
        }
        changed.sort();
        changed.dedup();
        let held = unchanged.is_empty();
        let attributed_to = attributions(&ledger, step.id.as_str(), &files.paths, &current);
        return (
            held,
            json!({
                "kind": "files_changed",
                "paths": files.paths,
                "include_ignored": include_ignored,
                "ignore_rules_sha256": (!include_ignored).then(|| rules.digest()),
                "changed": changed.iter().take(FILES_RECORDED_MAX).collect::<Vec<_>>(),
                "changed_count": changed.len(),
                "current_sha256": files_digest(&current),
                "unchanged": unchanged,
                "attributed_to": attributed_to,
            }),
            format!(
                "files_changed: nothing under {} changed since the step opened (by the supervisor's hashes{})",
                unchanged.join(", "),
                if include_ignored {
                    ""
                } else {
                    "; files the repository ignores, as its rules were when the step opened, do not count"
                }
            ),
        );
    }
    if let Some(files) = &item.files_unchanged {
        return invariant_item(invariants, &files.paths, None, |p| {
            p.by == ProtectedBy::Item(n)
        });
    }
    if let Some(command) = &item.command {
        let (context, n) = {
            let mut e = lock();
            e.evidence_runs += 1;
            (e.context.clone(), e.evidence_runs)
        };
        let view = evidence_view(step, command, invariants, &context.workspace);
        let ran = run_command_evidence(
            &context,
            step,
            command,
            (n, &view),
            &approvals.closing,
            held,
        );
        let held = ran.exit_code == Some(command.exit_code.unwrap_or(0));
        // The evidence sandbox's own closing line (its log is in the chain record) is not the
        // command's output.
        let shown: String = String::from_utf8_lossy(tail(&ran.output, OUTPUT_SHOWN_BYTES))
            .lines()
            .filter(|l| !l.starts_with("stepproof-run: audit log "))
            .map(|l| format!("{l}\n"))
            .collect();
        let shown = if shown.trim().is_empty() {
            "(none)\n".to_string()
        } else {
            shown
        };
        let why = format!(
            "command `{}` {} (wanted exit {}); its output (last {} bytes):\n{}",
            crate::audit::text::command_line(&command.run),
            match ran.exit_code {
                Some(code) => format!("exited {code}"),
                None => format!("did not finish: {}", ran.error.clone().unwrap_or_default()),
            },
            command.exit_code.unwrap_or(0),
            OUTPUT_SHOWN_BYTES,
            shown
        );
        return (
            held,
            json!({
                OUTPUT_TAIL_KEY: String::from_utf8_lossy(tail(&ran.output, crate::supervisor::runbook::verifier::OUTPUT_TAIL_SHOWN * 2)),
                "kind": "command",
                "run": command.run,
                "exit_code": ran.exit_code,
                "expected_exit_code": command.exit_code.unwrap_or(0),
                "duration_ms": ran.duration.as_millis() as u64,
                "output_sha256": format!("sha256:{}", hex::encode(Sha256::digest(&ran.output))),
                "output_bytes": ran.output.len(),
                "network": command.network.unwrap_or(false),
                "workspace": "overlay, upper layer thrown away",
                "read_only": view.read_only,
                "hidden_count": view.hidden.len(),
                "build_state": build_state_words(&view, command),
                "frozen": ran.frozen.0,
                "agent_frozen": ran.frozen.1,
                "audit_log": crate::audit::text::path(&ran.audit_log),
                "error": ran.error,
            }),
            why,
        );
    }
    if let Some(approval) = &item.approval {
        let (ci, pre, webhook) = {
            let e = lock();
            (
                e.context.ci,
                e.context.pre_approved.iter().any(|s| s == step.id.as_str()),
                e.context.approval_webhook.clone(),
            )
        };
        // `--ci` asks nobody but a webhook; a pre-approval needs no asking.
        if pre || (ci && webhook.is_none()) {
            let held = pre;
            return (
                held,
                json!({ "kind": "approval", "approvers": approval.approvers, "ci": ci, "pre_approved": pre, "by": if pre { "--approve" } else { "nobody" } }),
                "approval: denied in --ci without pre-approval (`stepproof-run --ci --approve STEP`)"
                    .to_string(),
            );
        }
        let deadline = Instant::now() + Duration::from_secs(approval.deadline.seconds);
        {
            let e = lock();
            e.record(
                "runbook-approval-requested",
                json!({ "step": step.id, "approvers": approval.approvers, "deadline": approval.deadline.render() }),
            );
        }
        crate::say!(
            "stepproof-run: step {} waits for approval by {} (deadline {}): `stepproof approve {run_id} {}` or `stepproof deny {run_id} {} --reason …`{}",
            step.id,
            approval.approvers,
            approval.deadline.render(),
            step.id,
            step.id,
            webhook
                .as_ref()
                .map(|w| format!("; the webhook {} is asked too", w.url()))
                .unwrap_or_default()
        );
        *approvals.waiting.lock().unwrap_or_else(|e| e.into_inner()) = Some(step.id.to_string());
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut asking = None;
        if let Some(webhook) = webhook {
            let (question, audit) = {
                let e = lock();
                (
                    crate::supervisor::runbook::webhook::Question {
                        run: run_id.to_string(),
                        step: step.id.to_string(),
                        step_title: step.title.clone(),
                        runbook: e.runbook.id.to_string(),
                        runbook_hash: e.hash.clone(),
                        approvers: approval.approvers.clone(),
                        deadline: Duration::from_secs(approval.deadline.seconds),
                    },
                    e.audit.as_ref().map(AuditSink::clone_handle),
                )
            };
            let (engine, approvals, stop_seen, id) = (
                Arc::clone(engine),
                Arc::clone(approvals),
                Arc::clone(&stop),
                step.id.to_string(),
            );
            asking = Some(crate::supervisor::runbook::webhook::ask(
                webhook,
                question,
                audit,
                Arc::clone(&stop),
                move |verdict| {
                    let answer = if verdict.approved {
                        Ok(())
                    } else {
                        Err(verdict
                            .reason
                            .clone()
                            .unwrap_or_else(|| "denied at the webhook".into()))
                    };
                    give_answer(
                        &engine,
                        &approvals,
                        &id,
                        answer,
                        verdict.detail,
                        Some(&stop_seen),
                    )
                },
            ));
        }
        let mut answers = approvals.answers.lock().unwrap_or_else(|e| e.into_inner());
        let answer = loop {
            if let Some(answer) = answers.remove(step.id.as_str()) {
                break Some(answer);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || approvals.closing.load(std::sync::atomic::Ordering::SeqCst) {
                break None;
            }
            answers = approvals
                .arrived
                .wait_timeout(answers, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        };
        // Under the answers' lock: no answer can arrive for this wait once it is over.
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        *approvals.waiting.lock().unwrap_or_else(|e| e.into_inner()) = None;
        drop(answers);
        // The webhook's last records (a poll in flight ends within its timeout) come before the
        // step's evidence record.
        if let Some(asking) = asking {
            let _ = asking.join();
        }
        let detail = answer
            .as_ref()
            .map(|(_, d)| d.clone())
            .unwrap_or(Value::Null);
        let (held, by, why) = match answer.map(|(a, _)| a) {
            Some(Ok(())) => (true, "approved", String::new()),
            Some(Err(reason)) => (false, "denied", format!("approval: denied: {reason}")),
            None if approvals.closing.load(std::sync::atomic::Ordering::SeqCst) => (
                false,
                "run-ended",
                "approval: the run ended before an answer: denied".to_string(),
            ),
            None => (
                false,
                "deadline",
                format!(
                    "approval: no answer before the deadline ({}): denied",
                    approval.deadline.render()
                ),
            ),
        };
        return (
            held,
            json!({ "kind": "approval", "approvers": approval.approvers, "answer": by, "from": detail["from"], "approver": detail["approver"], "nonce": detail["nonce"] }),
            why,
        );
    }
    (
        false,
        json!({ "kind": "unsupported", "kinds": item.kinds() }),
        format!(
            "evidence of kind {} is not supported by this release",
            item.kinds().join(", ")
        ),
    )
}

/// An answer from a channel: counted when the step still waits and no answer came first (and,
/// for the webhook, its wait is not over); recorded either way, under the answers' lock so that
/// the record comes before the step's evidence record.
fn give_answer(
    engine: &Arc<Mutex<Engine>>,
    approvals: &Arc<Approvals>,
    step: &str,
    answer: Result<(), String>,
    detail: Value,
    over: Option<&std::sync::atomic::AtomicBool>,
) -> bool {
    let mut answers = approvals.answers.lock().unwrap_or_else(|e| e.into_inner());
    let waiting = approvals
        .waiting
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let counted = waiting.as_deref() == Some(step)
        && !answers.contains_key(step)
        && !over.is_some_and(|o| o.load(std::sync::atomic::Ordering::SeqCst));
    let mut record = json!({ "step": step, "approved": answer.is_ok(), "reason": answer.clone().err(), "counted": counted });
    if let (Some(record), Value::Object(detail)) = (record.as_object_mut(), &detail) {
        for (k, v) in detail {
            record.insert(k.clone(), v.clone());
        }
    }
    engine
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .record("runbook-approval", record);
    if counted {
        answers.insert(step.to_string(), (answer, detail));
        approvals.arrived.notify_all();
    }
    counted
}

fn serve_approval(engine: &Arc<Mutex<Engine>>, approvals: &Arc<Approvals>, stream: UnixStream) {
    let who = peer(&stream);
    let request = read_request(&stream).and_then(|raw| {
        serde_json::from_value::<ApprovalRequest>(raw).map_err(|e| format!("not a request: {e}"))
    });
    let request = match request {
        Ok(request) => request,
        Err(why) => {
            reply(&stream, &refused(&why));
            return;
        }
    };
    let (step, answer) = match &request {
        ApprovalRequest::Approve { step } => (step.clone(), Ok(())),
        ApprovalRequest::Deny { step, reason } => (step.clone(), Err(reason.clone())),
    };
    let waiting = approvals
        .waiting
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    if waiting.as_deref() != Some(step.as_str()) {
        let why = format!(
            "step {step:?} is not waiting for approval{}",
            waiting
                .map(|w| format!(" (step {w} is)"))
                .unwrap_or_default()
        );
        reply(&stream, &refused(&why));
        return;
    }
    let approved = answer.is_ok();
    let counted = give_answer(
        engine,
        approvals,
        &step,
        answer,
        json!({ "from": "host terminal", "peer": who }),
        None,
    );
    if !counted {
        reply(
            &stream,
            &refused(&format!(
                "step {step:?}: another answer came first (or the wait is over)"
            )),
        );
        return;
    }
    reply(
        &stream,
        &Answer {
            ok: true,
            message: format!(
                "step {step}: {}",
                if approved { "approved" } else { "denied" }
            ),
            state: None,
        },
    );
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

    /// Opens every waiting step whose dependencies have all passed, taking their baselines
    /// here (under the caller's lock: only before the sandbox starts, when nothing else asks).
    fn open_ready(&mut self, spent: &files::RunSpend) {
        let ready = self.ready();
        let baselines = take_baselines(
            &self.context.workspace,
            &self.context.budget,
            &self.runbook,
            &ready,
            (never(), &files::RunSpend::sharing_hashes(spent)),
            self.store.as_deref(),
        );
        self.open_with(baselines);
    }

    /// The waiting steps whose dependencies have all passed, and whether each has a baseline
    /// from an earlier run.
    fn ready(&self) -> Vec<(usize, bool)> {
        if self.ending.is_some() {
            return Vec::new();
        }
        let passed: Vec<String> = self
            .runbook
            .steps
            .iter()
            .zip(&self.steps)
            .filter(|(_, s)| s.status == Status::Passed)
            .map(|(step, _)| step.id.to_string())
            .collect();
        (0..self.steps.len())
            .filter(|&i| {
                self.steps[i].status == Status::Waiting
                    && self.runbook.steps[i]
                        .depends_on
                        .iter()
                        .all(|d| passed.contains(d))
            })
            .map(|i| (i, self.steps[i].restored_baseline.is_some()))
            .collect()
    }

    /// Opens the steps [`Engine::ready`] named, with the baselines taken for them (a step with
    /// one from an earlier run keeps that); nothing opens once the run has an ending.
    fn open_with(&mut self, baselines: Vec<(usize, Opening)>) {
        if self.ending.is_some() {
            return;
        }
        for (i, opening) in baselines {
            if self.steps[i].status != Status::Waiting {
                continue;
            }
            let restored = self.steps[i].restored_baseline.take();
            let baseline_restored = restored.is_some();
            let (baseline, exceeded) = match (restored, opening.files) {
                (Some(restored), _) => (restored, None),
                (None, Ok(taken)) => (taken, None),
                (None, Err(exceeded)) => (BTreeMap::new(), Some(exceeded)),
            };
            self.steps[i].status = Status::Open;
            self.steps[i].baseline = baseline;
            self.steps[i].baseline_exceeded = exceeded.clone();
            self.steps[i].invariants = opening.invariants;
            self.steps[i].ignore = opening.ignore;
            self.steps[i].definitions = opening.definitions;
            self.steps[i].recipes = opening.recipes;
            self.openings += 1;
            self.steps[i].opened_seq = self.openings;
            let kept = match &opening.snapshot {
                Ok(snapshot) => {
                    json!({ "files": snapshot.files.len(), "kept": snapshot.files.values().filter(|f| f.1.is_none()).count() })
                }
                Err(why) => json!({ "not_kept": why }),
            };
            self.steps[i].snapshot = opening.snapshot;
            let took_ms = opening.took_ms;
            let step = self.runbook.steps[i].clone();
            let invariants = &self.steps[i].invariants;
            let protected: Vec<String> =
                invariant_globs(&step).into_iter().map(|(g, _)| g).collect();
            let ignore = match &self.steps[i].ignore {
                Ok(rules) => json!({
                    "repository": rules.repository(),
                    "rules_sha256": rules.digest(),
                    "files": rules.sources().keys().collect::<Vec<_>>(),
                }),
                Err(e) => json!({ "not_taken": e.sentence() }),
            };
            self.record(
                "runbook-step-opened",
                json!({
                    "step": step.id,
                    "title": step.title,
                    "depends_on": step.depends_on,
                    "allows": crate::runbook::policy::allows_text(&step),
                    "baseline_files": self.steps[i].baseline.len(),
                    "baseline": (self.steps[i].baseline.len() <= BASELINE_RECORDED_MAX)
                        .then(|| &self.steps[i].baseline),
                    "baseline_from_earlier_run": baseline_restored,
                    "baseline_budget": exceeded.as_ref().map(Exceeded::budget),
                    "baseline_not_taken": exceeded.as_ref().map(Exceeded::sentence),
                    "invariants": protected,
                    "definitions_frozen": self.steps[i].definitions,
                    "definitions_unknown": self.steps[i].recipes.unknown,
                    "invariant_entries": invariants.as_ref().ok().map(BTreeMap::len),
                    "invariants_sha256": invariants.as_ref().ok().map(files::inventory_digest),
                    "invariants_budget": invariants.as_ref().err().map(Exceeded::budget),
                    "invariants_not_taken": invariants.as_ref().err().map(Exceeded::sentence),
                    "ignore": ignore,
                    "kept_for_verifiers": self.store.is_some().then_some(kept),
                    "opening_ms": took_ms,
                }),
            );
        }
    }

    /// Where the verifiers' diff of step `index` starts: the opening, in this run, of the
    /// earliest step it rests on (itself or a step it depends on), so a review step's verifier
    /// sees the work it reviews.
    fn diff_base(&self, index: usize) -> Result<Arc<step_open::Snapshot>, String> {
        rests_on(&self.runbook, index)
            .into_iter()
            .filter_map(|i| {
                let state = &self.steps[i];
                state.snapshot.as_ref().ok().map(|s| (state.opened_seq, s))
            })
            .min_by_key(|(seq, _)| *seq)
            .map(|(_, s)| Arc::clone(s))
            .ok_or_else(|| {
                self.steps[index]
                    .snapshot
                    .as_ref()
                    .err()
                    .cloned()
                    .unwrap_or_else(|| "no opening was kept".into())
            })
    }

    fn state_json(&self) -> Value {
        json!({
            "runbook": self.runbook.id,
            "title": self.runbook.title,
            "hash": self.hash,
            "open": self.open_ids(),
            "ended": self.ending.as_ref().map(|e| match e {
                Ending::Blocked { step } => json!({ "ending": "evidence-failed", "step": step }),
                Ending::Abandoned { step, requested } => json!({ "ending": "abandoned", "step": step, "requested": requested }),
            }),
            "steps": self.runbook.steps.iter().zip(&self.steps).map(|(step, s)| json!({
                "id": step.id,
                "title": step.title,
                "status": s.status,
                "attempts": s.attempts,
                "max_attempts": step.attempts(),
                "depends_on": step.depends_on,
                "instructions": step.instructions,
                "acceptance": step.acceptance,
                "allows": crate::runbook::policy::allows_text(step),
                "protects": step.protected_paths().into_iter().map(|p| p.glob).collect::<Vec<_>>(),
                "denied_words": crate::runbook::policy::denied_words(step),
                "last_verdict": s.last_verdict,
            })).collect::<Vec<_>>(),
        })
    }

    fn status_text(&self) -> String {
        let mut out = format!("runbook {}: {}\n", self.runbook.id, self.runbook.title);
        for (step, s) in self.runbook.steps.iter().zip(&self.steps) {
            let status = match s.status {
                Status::Waiting => "waiting",
                Status::Open => "OPEN",
                Status::Passed => "passed",
                Status::Failed => "FAILED",
                Status::Abandoned => "ABANDONED",
                Status::Void => "VOID",
            };
            out.push_str(&format!(
                "  {:8} {} — {} (attempts {}/{})\n",
                status,
                step.id,
                step.title,
                s.attempts,
                step.attempts()
            ));
            if s.status == Status::Open {
                for line in step.instructions.trim().lines() {
                    out.push_str(&format!("           {line}\n"));
                }
                out.push_str(&format!(
                    "           allows: {}\n",
                    crate::runbook::policy::allows_text(step)
                ));
                let protected: Vec<String> = step
                    .protected_paths()
                    .into_iter()
                    .map(|p| format!("`{}`", p.glob))
                    .collect();
                if !protected.is_empty() {
                    out.push_str(&format!(
                        "           protects (must be as it was when the step opened, whatever would change it): {}\n",
                        protected.join(", ")
                    ));
                }
            }
        }
        out
    }

    /// Writes `state.json` and the open steps' policies, each atomically; then removes the
    /// policies of steps no longer open, the last first (the hook reads them in order until
    /// one is missing, so at no moment does it read fewer than it should).
    fn publish(&mut self) -> Result<(), String> {
        if self.closed {
            return Ok(());
        }
        let state = serde_json::to_vec_pretty(&self.state_json()).map_err(|e| e.to_string())?;
        write_atomic(&self.dir, "state.json", &state)?;
        let mut policies = Vec::new();
        if let Some(ending) = &self.ending {
            // The run stops: a policy with no rule and a deny default, named for the step.
            let step = match ending {
                Ending::Blocked { step } | Ending::Abandoned { step, .. } => step,
            };
            let config = stepproof_hook::config::HookConfig {
                default: Some(stepproof_hook::Decision::Deny),
                unknown: Some(stepproof_hook::Decision::Deny),
                unknown_tool: Some(stepproof_hook::Decision::Deny),
                summary: Some("nothing: the run has stopped".into()),
                ..Default::default()
            };
            let context = stepproof_hook::policy::Context {
                workspace: self.inside_workspace.clone(),
                home: self.inside_home.clone(),
                profile_name: format!(
                    "runbook {}, stopped: step {step}'s evidence did not hold",
                    self.runbook.id
                ),
            };
            policies.push(
                stepproof_hook::policy::compile(&config, &context).map_err(|e| e.to_string())?,
            );
        } else {
            for (step, s) in self.runbook.steps.iter().zip(&self.steps) {
                if s.status == Status::Open {
                    policies.push(crate::runbook::policy::compile_step(
                        &self.runbook,
                        step,
                        &self.inside_home,
                        &self.inside_workspace,
                    )?);
                }
            }
        }
        for (n, policy) in policies.iter().enumerate() {
            let bytes = stepproof_hook::load::encode(policy).map_err(|e| e.to_string())?;
            write_atomic(
                &self.dir,
                &crate::runbook::policy::policy_file_name(n),
                &bytes,
            )?;
        }
        for n in (policies.len()..self.policies_written.max(policies.len())).rev() {
            let path = self.dir.join(crate::runbook::policy::policy_file_name(n));
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(format!("removing {}: {e}", path.display())),
            }
        }
        self.policies_written = policies.len();
        Ok(())
    }
}

/// `dir/name` replaced atomically: written under a temporary name (0644), then renamed.
fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), String> {
    let tmp = dir.join(format!(".{name}.tmp"));
    let path = dir.join(name);
    let _ = std::fs::remove_file(&tmp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)
        .map_err(io_err("writing", &tmp))?;
    file.write_all(bytes).map_err(io_err("writing", &tmp))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o644))
        .map_err(io_err("chmod", &tmp))?;
    std::fs::rename(&tmp, &path).map_err(io_err("renaming into place", &path))
}

/// Where the evidence ledger is read from: the run's own audit log, outside the engine's lock.
struct Ledger {
    audit_path: Option<PathBuf>,
    inside_workspace: PathBuf,
}

impl Engine {
    fn ledger(&self) -> Ledger {
        Ledger {
            audit_path: self.audit.as_ref().map(|a| a.path().to_path_buf()),
            inside_workspace: self.inside_workspace.clone(),
        }
    }
}

/// At most this many ledger entries are named per evidence item (the newest).
const ATTRIBUTIONS_MAX: usize = 64;

/// The evidence ledger's entries for a files item: the hook's PostToolUse records (from
/// inside, `source: "sandbox"`) of writes made while `step` was open to a file the globs name,
/// read back from the run's own audit log. They only attribute: each says whether the file's
/// content now is what the supervisor hashed (`matches_supervisor_hash`); the verdict never
/// depends on them.
fn attributions(
    e: &Ledger,
    step: &str,
    globs: &[String],
    current: &BTreeMap<String, String>,
) -> Vec<Value> {
    let Some(audit) = &e.audit_path else {
        return Vec::new();
    };
    let Ok(file) = std::fs::File::open(audit) else {
        return Vec::new();
    };
    let mut found = std::collections::VecDeque::new();
    for line in std::io::BufRead::lines(std::io::BufReader::new(file)).map_while(Result::ok) {
        // Cheap filter before parsing: only the hook's evidence records with a path.
        if !line.contains("\"evidence\"") || !line.contains("\"path\"") {
            continue;
        }
        let Ok(r) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if r["source"] != "sandbox" || r["kind"] != "evidence" {
            continue;
        }
        // The hook's own record, as it sent it.
        let r = &r["reported"];
        let in_step = r["open_steps"]
            .as_array()
            .is_some_and(|open| open.iter().any(|s| s == step));
        let Some(path) = r["path"].as_str() else {
            continue;
        };
        let Ok(relative) = Path::new(path).strip_prefix(&e.inside_workspace) else {
            continue;
        };
        let Some(relative) = relative.to_str() else {
            continue;
        };
        if !in_step || !globs.iter().any(|g| glob_matches(g, relative)) {
            continue;
        }
        let sha256 = r["sha256"].as_str();
        found.push_back(json!({
            "path": relative,
            "tool": r["tool"],
            "sha256": sha256,
            "step": step,
            "open_steps": r["open_steps"],
            "tool_use_id": r["tool_use_id"],
            "ts_ms": r["ts_ms"],
            "reported_from": "inside",
            "matches_supervisor_hash": sha256.is_some() && current.get(relative).map(String::as_str) == sha256,
        }));
        if found.len() > ATTRIBUTIONS_MAX {
            found.pop_front();
        }
    }
    found.into()
}

/// The regular files under `workspace` each glob names (links are not followed), with their
/// sha256, within one walk's budget shared by the globs; with `rules`, what they ignore is not
/// named (for a glob whose `bool` is true). The rules are frozen: nothing is read into them.
fn walk_globs(
    workspace: &Path,
    globs: &[(String, bool)],
    rules: Option<&IgnoreRules>,
    budget: &Budget,
    stop: &AtomicBool,
    spent: &files::RunSpend,
) -> Result<Vec<BTreeMap<String, String>>, Exceeded> {
    let Ok(root) = files::open_workspace(workspace) else {
        return Ok(globs.iter().map(|_| BTreeMap::new()).collect());
    };
    let mut rules = rules.cloned();
    let mut walk = Walk::new(budget, stop, spent);
    globs
        .iter()
        .map(|(glob, ignoring)| {
            let rules = if *ignoring { rules.as_mut() } else { None };
            walk.glob(std::os::fd::AsFd::as_fd(&root), glob, rules)
        })
        .collect()
}

/// Each glob of a files item, and whether ignored files are left out of it.
fn item_globs(paths: &[String], include_ignored: bool) -> Vec<(String, bool)> {
    paths
        .iter()
        .map(|p| (p.clone(), !include_ignored))
        .collect()
}

/// A step's baseline as taken when it opens, or the budget it ran out of.
type Baseline = Result<BTreeMap<String, String>, Exceeded>;

/// What a step's opening takes: the `files_changed` baseline, the invariants (its protected
/// paths' entries) and the ignore rules both are judged with.
struct Opening {
    files: Baseline,
    invariants: Result<BTreeMap<String, Entry>, Exceeded>,
    ignore: Result<IgnoreRules, Exceeded>,
    definitions: Vec<String>,
    recipes: Recipes,
    /// What taking it cost (ignore rules, baseline, invariants, definitions), in ms.
    took_ms: u64,
    /// The workspace kept for the verifiers' diffs (`Err`: why not).
    snapshot: Result<Arc<step_open::Snapshot>, String>,
}

/// A files item's walk at completion, outside the engine's lock: each glob's files, and where
/// the evidence ledger is read.
fn walk_item(
    engine: &Arc<Mutex<Engine>>,
    approvals: &Approvals,
    globs: &[(String, bool)],
    rules: Option<&IgnoreRules>,
) -> Result<(Vec<BTreeMap<String, String>>, Ledger), Exceeded> {
    let (workspace, budget, ledger) = {
        let e = engine.lock().unwrap_or_else(|e| e.into_inner());
        (e.context.workspace.clone(), e.context.budget, e.ledger())
    };
    let walked = walk_globs(
        &workspace,
        globs,
        rules,
        &budget,
        &approvals.closing,
        &approvals.spent,
    )?;
    Ok((walked, ledger))
}

/// The globs a step's invariants are walked by, each once, with whether ignored files are
/// left out.
fn invariant_globs(step: &Step) -> Vec<(String, bool)> {
    let mut globs: Vec<(String, bool)> = Vec::new();
    for p in step.protected_paths() {
        let glob = (p.glob, !p.include_ignored);
        if !globs.contains(&glob) {
            globs.push(glob);
        }
    }
    globs
}

/// What the steps about to open take (see [`Opening`]); a step with a `files_changed`
/// baseline from an earlier run keeps that one (its walk still reads the ignore rules it
/// passes). Each within one walk's budget, outside the engine's lock.
fn take_baselines(
    workspace: &Path,
    budget: &Budget,
    runbook: &Runbook,
    ready: &[(usize, bool)],
    (stop, spent): (&AtomicBool, &files::RunSpend),
    store: Option<&Mutex<step_open::Store>>,
) -> Vec<(usize, Opening)> {
    ready
        .iter()
        .map(|&(i, restored)| {
            let step = &runbook.steps[i];
            let started = Instant::now();
            let store = store.filter(|_| verifier_rests_on(runbook, i));
            let mut opening = take_opening(workspace, budget, step, restored, (stop, spent), store);
            opening.took_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
            (i, opening)
        })
        .collect()
}

fn take_opening(
    workspace: &Path,
    budget: &Budget,
    step: &Step,
    restored: bool,
    (stop, spent): (&AtomicBool, &files::RunSpend),
    store: Option<&Mutex<step_open::Store>>,
) -> Opening {
    let failed = |e: Exceeded| Opening {
        snapshot: Err(format!(
            "the step's opening walk did not finish ({})",
            e.sentence()
        )),
        files: Err(e.clone()),
        invariants: Err(e.clone()),
        ignore: Err(e),
        definitions: Vec::new(),
        recipes: Recipes::default(),
        took_ms: 0,
    };
    let root = match files::open_workspace(workspace) {
        Ok(root) => root,
        Err(e) => {
            return failed(Exceeded::Unreadable {
                path: workspace.display().to_string(),
                error: e.to_string(),
            });
        }
    };
    let root = std::os::fd::AsFd::as_fd(&root);
    let mut walk = Walk::new(budget, stop, spent);
    let mut rules = match IgnoreRules::capture(&mut walk, root) {
        Ok(rules) => rules,
        Err(e) => return failed(e),
    };
    let changed: Vec<(String, bool)> = step
        .evidence
        .iter()
        .filter_map(|e| e.files_changed.as_ref())
        .flat_map(|f| item_globs(&f.paths, f.include_ignored()))
        .collect();
    let mut files = Ok(BTreeMap::new());
    for (glob, ignoring) in &changed {
        let taken = walk.glob(root, glob, ignoring.then_some(&mut rules));
        match (taken, &mut files) {
            (Ok(found), Ok(all)) => all.extend(found),
            (Err(e), _) => {
                files = Err(e);
                break;
            }
            _ => {}
        }
    }
    // `files_exist` is judged by the rules as the step opened too: those its walks would read.
    let exist = step
        .evidence
        .iter()
        .filter_map(|e| e.files_exist.as_ref())
        .filter(|f| !f.include_ignored())
        .flat_map(|f| f.paths.iter());
    for glob in exist {
        if let Err(e) = walk.read_rules_for(root, glob, &mut rules) {
            return failed(e);
        }
    }
    if restored && files.is_ok() {
        files = Ok(BTreeMap::new());
    }
    // The invariants get a walk of their own (their own budget).
    drop(walk);
    let mut walk = Walk::new(budget, stop, spent);
    let mut invariants = walk.inventory(root, &invariant_globs(step), Some(&mut rules));
    // What defines the evidence commands: whatever the ignore rules say (a GNUmakefile hidden
    // in .git/info/exclude is still read by make), outside `.git` and build state.
    let (definitions, recipes) = match definition_globs(&mut walk, root, step, workspace) {
        Ok(found) => found,
        Err(e) => {
            invariants = Err(e);
            (Vec::new(), Recipes::default())
        }
    };
    if let Ok(found) = &mut invariants {
        walk.not_entering(crate::runbook::definitions::NOT_ENTERED);
        match walk.inventory(root, &definition_walk(&definitions), None) {
            Ok(more) => found.extend(more),
            Err(e) => invariants = Err(e),
        }
    }
    // Last, so the steps' own walks are not slowed by it; it reads every `.gitignore` of
    // what git would see, which the rules then keep.
    let snapshot = match store {
        None => Err("no verifier rests on this step".to_string()),
        Some(store) => store
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take(workspace, budget, stop, step.id.as_str(), &mut rules)
            .map(Arc::new)
            .map_err(|e| {
                format!(
                    "the walk of the workspace did not finish ({})",
                    e.sentence()
                )
            }),
    };
    rules.freeze();
    Opening {
        files,
        invariants,
        ignore: Ok(rules),
        definitions,
        recipes,
        took_ms: 0,
        snapshot,
    }
}

/// The steps `index` rests on: itself and every step it depends on, directly or not.
fn rests_on(runbook: &Runbook, index: usize) -> Vec<usize> {
    let mut found = vec![index];
    let mut next = 0;
    while next < found.len() {
        let step = &runbook.steps[found[next]];
        for dep in &step.depends_on {
            if let Some(i) = runbook
                .steps
                .iter()
                .position(|s| s.id.as_str() == dep.as_str())
                && !found.contains(&i)
            {
                found.push(i);
            }
        }
        next += 1;
    }
    found
}

/// Whether a verifier's diff may start at step `index`'s opening (a step with a verifier
/// rests on it).
fn verifier_rests_on(runbook: &Runbook, index: usize) -> bool {
    (0..runbook.steps.len()).any(|j| {
        runbook.steps[j]
            .evidence
            .iter()
            .any(|e| e.verifier.is_some())
            && rests_on(runbook, j).contains(&index)
    })
}

/// A stop flag that is never raised (before the sandbox starts, nothing can end the run).
fn never() -> &'static AtomicBool {
    static NEVER: AtomicBool = AtomicBool::new(false);
    &NEVER
}

/// Files named in one evidence record at most: the agent decides how many there are, and a
/// record's size is not its to choose. The count and a digest of the whole list go beside.
const FILES_RECORDED_MAX: usize = 1024;

/// The first [`FILES_RECORDED_MAX`] of `files` (path and sha256), for a record.
fn recorded_files(files: &BTreeMap<String, String>) -> BTreeMap<&String, &String> {
    files.iter().take(FILES_RECORDED_MAX).collect()
}

/// The sha256 of the whole list, one `sha256  path` line each in path order (`sha256sum`'s
/// format): what a record that names only the first files still binds.
fn files_digest(files: &BTreeMap<String, String>) -> String {
    let mut hasher = Sha256::new();
    for (path, hash) in files {
        hasher.update(format!("{hash}  {path}\n").as_bytes());
    }
    format!("sha256:{}", hex::encode(hasher.finalize()))
}

/// A files item that ran out of its budget: it fails, naming the budget.
fn exceeded_item(kind: &str, paths: &[String], exceeded: &Exceeded) -> (bool, Value, String) {
    (
        false,
        json!({ "kind": kind, "paths": paths, "budget": exceeded.budget(), "exceeded": exceeded.sentence() }),
        format!("{kind}: {}", exceeded.sentence()),
    )
}

fn tail(bytes: &[u8], n: usize) -> &[u8] {
    &bytes[bytes.len().saturating_sub(n)..]
}

/// What an evidence command did.
struct CommandRun {
    exit_code: Option<i32>,
    output: Vec<u8>,
    duration: Duration,
    error: Option<String>,
    /// Whether the agent's processes were frozen meanwhile, and what was, in words.
    frozen: (bool, String),
    audit_log: PathBuf,
}

/// Runs an evidence command with `stepproof-run` itself, in a fresh sandbox under the run's
/// profile with the workspace as an overlay whose upper layer is thrown away and (unless the
/// item says) no network, while the agent's processes are frozen (cgroup v2 freezer) when the
/// run has a cgroup.
fn run_command_evidence(
    context: &EvidenceContext,
    step: &Step,
    command: &crate::runbook::CommandEvidence,
    (n, view): (u32, &EvidenceView),
    stop: &AtomicBool,
    held: Option<&(bool, String)>,
) -> CommandRun {
    let started = Instant::now();
    let audit_log = context
        .run_dir
        .join(format!("evidence-{}-{n}.jsonl", step.id));
    let profile_path = context.run_dir.join(format!("evidence-{n}.toml"));
    // The run's own status: the supervisor's relay reaps every child of this process (its
    // `waitpid(-1)`), so the exit code is read from the file, not from `wait`.
    let status_file = context.run_dir.join(format!("evidence-{n}.status.json"));
    let extends = toml::Value::String(context.profile.clone()).to_string();
    // Named as the run's own profile: nothing in the evidence's environment says what it is.
    let name = toml::Value::String(context.profile_name.clone()).to_string();
    let mut derived =
        format!("name = {name}\nextends = {extends}\n[filesystem]\nworkspace = \"overlay\"\n");
    if !command.network.unwrap_or(false) {
        derived.push_str("[network]\nmode = \"none\"\n");
    }
    #[derive(serde::Serialize)]
    struct Section<'a> {
        runbook: Runbook<'a>,
    }
    #[derive(serde::Serialize)]
    struct Runbook<'a> {
        evidence_view: &'a EvidenceView,
    }
    match toml::to_string(&Section {
        runbook: Runbook {
            evidence_view: view,
        },
    }) {
        Ok(text) => derived.push_str(&text),
        Err(e) => {
            return CommandRun {
                exit_code: None,
                output: Vec::new(),
                duration: started.elapsed(),
                error: Some(format!("writing the evidence view: {e}")),
                frozen: (false, String::new()),
                audit_log,
            };
        }
    }
    let fail = |error: String| CommandRun {
        exit_code: None,
        output: Vec::new(),
        duration: started.elapsed(),
        error: Some(error),
        frozen: (false, String::new()),
        audit_log: audit_log.clone(),
    };
    if let Err(e) = std::fs::write(&profile_path, derived) {
        return fail(format!("writing {}: {e}", profile_path.display()));
    }
    let frozen = match held {
        Some(held) => held.clone(),
        None => freeze(&context.cgroup_dirs, true, context.no_freezer.as_deref()),
    };
    let thaw = || {
        if held.is_none() {
            freeze(&context.cgroup_dirs, false, None);
        }
    };
    let timeout = command.timeout();
    let child = crate::supervisor::runbook::verifier::nested_run(
        &context.run_binary,
        &context.workspace,
        [&profile_path, &audit_log, &status_file],
        timeout.seconds,
    )
    .arg("--")
    .args(&command.run)
    .spawn();
    let result = match child {
        Err(e) => fail(format!("starting {}: {e}", context.run_binary.display())),
        Ok(mut child) => {
            // Both pipes are read on threads of their own, up to the cap and drained past it
            // (the evidence run is never stuck writing), while this thread watches the run and
            // the stop: when the run ends, the evidence run is ended too (SIGTERM, then
            // SIGKILL), and its sandbox with it.
            let reader = |pipe: Option<Box<dyn Read + Send>>| {
                let (tx, rx) = std::sync::mpsc::channel();
                std::thread::spawn(move || {
                    let mut bytes = Vec::new();
                    if let Some(mut pipe) = pipe {
                        let _ = (&mut pipe).take(OUTPUT_READ_BYTES).read_to_end(&mut bytes);
                        let _ = std::io::copy(&mut pipe, &mut std::io::sink());
                    }
                    let _ = tx.send(bytes);
                });
                rx
            };
            let out_rx = reader(
                child
                    .stdout
                    .take()
                    .map(|p| Box::new(p) as Box<dyn Read + Send>),
            );
            let err_rx = reader(
                child
                    .stderr
                    .take()
                    .map(|p| Box::new(p) as Box<dyn Read + Send>),
            );
            let pid = nix::unistd::Pid::from_raw(child.id() as i32);
            let mut interrupted = None;
            let status = loop {
                match child.try_wait() {
                    Ok(Some(status)) => break Ok(status),
                    Err(e) => break Err(e),
                    Ok(None) => {}
                }
                if stop.load(std::sync::atomic::Ordering::SeqCst) {
                    let since = *interrupted.get_or_insert_with(|| {
                        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
                        Instant::now()
                    });
                    if since.elapsed() > Duration::from_secs(1) {
                        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            };
            let collect = |rx: std::sync::mpsc::Receiver<Vec<u8>>| {
                rx.recv_timeout(Duration::from_secs(1)).unwrap_or_default()
            };
            let mut output = collect(out_rx);
            output.extend(collect(err_rx));
            if interrupted.is_some() {
                let _ = std::fs::remove_file(&status_file);
                thaw();
                let _ = std::fs::remove_file(&profile_path);
                return CommandRun {
                    frozen,
                    output,
                    ..fail("interrupted: the run ended while the evidence command ran".to_string())
                };
            }
            let from_file = std::fs::read(&status_file)
                .ok()
                .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
                .and_then(|v| v["exit_code"].as_i64())
                .and_then(|c| i32::try_from(c).ok());
            let _ = std::fs::remove_file(&status_file);
            let status = match (from_file, status) {
                (Some(code), _) => Ok(code),
                (None, Ok(status)) => Ok(status.code().unwrap_or_else(|| {
                    128 + std::os::unix::process::ExitStatusExt::signal(&status).unwrap_or(0)
                })),
                (None, Err(e)) => Err(e),
            };
            match status {
                Ok(code) => CommandRun {
                    exit_code: Some(code),
                    output,
                    duration: started.elapsed(),
                    error: None,
                    frozen: (false, String::new()),
                    audit_log: audit_log.clone(),
                },
                Err(e) => fail(format!("waiting for the evidence run: {e}")),
            }
        }
    };
    thaw();
    let _ = std::fs::remove_file(&profile_path);
    CommandRun { frozen, ..result }
}

/// How one evidence command's sandbox sees the workspace: the step's protected paths and the
/// files that define the command read-only (those that exist now), ignored files under the
/// protected paths hidden, and the build state the command would reuse discarded unless the
/// item trusts it by name.
fn evidence_view(
    step: &Step,
    command: &crate::runbook::CommandEvidence,
    invariants: Option<&InvariantCheck>,
    workspace: &Path,
) -> EvidenceView {
    let mut view = EvidenceView::default();
    if let Some(check) = invariants {
        for root in protected_roots(step) {
            if !root.is_empty() && check.now.contains_key(&root) {
                view.read_only.push(root);
            }
        }
        for (path, entry) in &check.now {
            let definition = check.definitions.iter().any(|g| glob_matches(g, path));
            let under_root = view
                .read_only
                .iter()
                .any(|r| path.starts_with(&format!("{r}/")));
            if definition && !under_root && matches!(entry, Entry::File { .. } | Entry::Dir { .. })
            {
                view.read_only.push(path.clone());
            }
        }
        if let Ok(ignored) = &check.ignored {
            view.hidden = ignored.iter().map(|(p, _)| p.clone()).collect();
        }
    }
    let defs = crate::runbook::definitions::of_command(&command.run, workspace);
    let mut state = defs.build_state;
    // A command that runs make, a package script, a recipe or a task reuses what their
    // tools would.
    if (!defs.makefiles.is_empty() || !defs.scripts.is_empty())
        && let Some(check) = invariants
    {
        state.extend(
            check
                .recipes
                .build_state
                .iter()
                .filter(|dir| !state.contains(dir))
                .cloned()
                .collect::<Vec<_>>(),
        );
    }
    view.discarded = state
        .into_iter()
        .filter(|dir| !trusted(command, dir))
        .collect();
    view
}

/// Whether a command item trusts a build-state directory by name (`trust = ["target/"]`).
fn trusted(command: &crate::runbook::CommandEvidence, dir: &str) -> bool {
    command
        .trust
        .iter()
        .any(|t| t.trim_start_matches("./").trim_end_matches('/') == dir)
}

/// What a command item's proof did with build state, in words: `discarded` or `trusted: …`.
fn build_state_words(view: &EvidenceView, command: &crate::runbook::CommandEvidence) -> Value {
    json!({
        "discarded": view.discarded,
        "trusted": command.trust,
    })
}

/// What a passed step's proof covered and what it trusted: the paths it protects, the
/// definition files frozen, per command the build state discarded (rebuilt) or trusted by
/// name, and what only a model verifier judged (the step's acceptance criteria, named).
fn covered(
    step: &Step,
    (definitions, unknown): (&[String], &[String]),
    gathered: &[Value],
) -> Value {
    let trusted: Vec<&String> = step
        .evidence
        .iter()
        .filter_map(|e| e.command.as_ref())
        .flat_map(|c| c.trust.iter())
        .collect();
    let mut discarded: Vec<&str> = Vec::new();
    for dir in gathered
        .iter()
        .filter(|r| r["kind"] == "command")
        .flat_map(|r| {
            r["build_state"]["discarded"]
                .as_array()
                .into_iter()
                .flatten()
        })
        .filter_map(Value::as_str)
    {
        if !discarded.contains(&dir) {
            discarded.push(dir);
        }
    }
    let commands = step.evidence.iter().filter(|e| e.command.is_some()).count();
    let build_state = if commands == 0 {
        Value::Null
    } else if !trusted.is_empty() {
        json!(format!(
            "trusted: {}",
            trusted
                .iter()
                .map(|t| t.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    } else if !discarded.is_empty() {
        json!(format!("discarded: {}", discarded.join(", ")))
    } else {
        json!("none reused")
    };
    let verifiers = gathered.iter().filter(|r| r["kind"] == "verifier").count();
    // A verifier judges the acceptance criteria; nothing else of the proof does.
    let judged_by_verifier_only: Vec<String> = if verifiers == 0 {
        Vec::new()
    } else if step.acceptance.is_empty() {
        vec!["the step's instructions (no acceptance criteria written)".into()]
    } else {
        step.acceptance
            .iter()
            .take(16)
            .map(|a| a.chars().take(200).collect())
            .collect()
    };
    json!({
        "definitions_frozen": definitions,
        "definitions_unknown": unknown,
        "build_state": build_state,
        "protected": step.protected_paths().into_iter().map(|p| p.glob).collect::<Vec<_>>(),
        "verifier_items": verifiers,
        "judged_by_verifier_only": judged_by_verifier_only,
    })
}

/// Freezes (or thaws) the run's cgroups — v2 `cgroup.freeze`, v1 `freezer.state` — and waits
/// (up to a second) until the kernel says they are; says whether every one was, and what.
fn freeze(dirs: &[PathBuf], frozen: bool, no_freezer: Option<&str>) -> (bool, String) {
    let mut said = Vec::new();
    let mut all = true;
    let mut any = false;
    for dir in dirs {
        let (file, value, done): (PathBuf, &str, Box<dyn Fn() -> bool>) = if dir
            .join("cgroup.freeze")
            .exists()
        {
            let events = dir.join("cgroup.events");
            let want = if frozen { "frozen 1" } else { "frozen 0" };
            (
                dir.join("cgroup.freeze"),
                if frozen { "1" } else { "0" },
                Box::new(move || {
                    std::fs::read_to_string(&events).is_ok_and(|t| t.lines().any(|l| l == want))
                }),
            )
        } else if dir.join("freezer.state").exists() {
            let state = dir.join("freezer.state");
            let want = if frozen { "FROZEN" } else { "THAWED" };
            (
                state.clone(),
                want,
                Box::new(move || std::fs::read_to_string(&state).is_ok_and(|t| t.trim() == want)),
            )
        } else {
            continue;
        };
        any = true;
        if let Err(e) = std::fs::write(&file, value) {
            all = false;
            said.push(format!(
                "not frozen: writing {value} to {}: {e}",
                file.display()
            ));
            continue;
        }
        // The kernel freezes asynchronously (v1 says FREEZING meanwhile).
        let deadline = Instant::now() + Duration::from_secs(1);
        while !done() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        if done() {
            said.push(format!("{}: {}", file.display(), value));
        } else {
            all = false;
            said.push(format!(
                "{}: wrote {value}, but the kernel did not confirm it within a second",
                file.display()
            ));
        }
    }
    if !any {
        return (
            false,
            format!(
                "not frozen: the run has no cgroup with a freezer ({}); the evidence ran on the \
                 workspace as it was when the command started",
                no_freezer.unwrap_or("no cgroup v1 freezer or v2 directory")
            ),
        );
    }
    (all, said.join("; "))
}
