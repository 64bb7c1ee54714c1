//! The two sockets: `step.sock` for the agent's requests and `approve.sock` for a person's,
//! each served on threads of their own, and how the servers stop.

use super::approval::serve_approval;
use super::waiting::complete_or_wait;
use super::{
    Approvals, Engine, RunbookRun, SHUTDOWN_WAIT, STEP_CLIENTS_MAX, Serving, peer, read_request,
    refused, reply,
};
use crate::runbook::client::APPROVAL_SOCKET;
use crate::runbook::client::Answer;
use crate::runbook::client::STEP_SOCKET;
use crate::runbook::client::StepRequest;
use crate::supervisor::runbook::files;
use crate::supervisor::runbook::files::Exceeded;
use crate::supervisor::runbook::files::Walk;
use serde_json::Value;
use serde_json::json;
use std::os::unix::net::UnixListener;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use std::time::Instant;

impl RunbookRun {
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
        let busy = || {
            self.in_flight.load(std::sync::atomic::Ordering::SeqCst)
                + self
                    .approvals
                    .checking
                    .load(std::sync::atomic::Ordering::SeqCst)
        };
        while busy() > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let left = busy();
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

pub(super) fn serve_step(
    engine: &Arc<Mutex<Engine>>,
    approvals: &Arc<Approvals>,
    completing: &Arc<Mutex<()>>,
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
        // On a thread of its own: answered at once when it waits for a person.
        StepRequest::Complete { step, note, wait } => complete_or_wait(
            engine,
            approvals,
            completing,
            run_id,
            (step, note, wait),
            who,
        ),
        StepRequest::Abandon { reason } => lock().abandon(reason, who),
    };
    reply(&stream, &answer);
}
