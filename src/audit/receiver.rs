//! The receiver for records the hook reports from inside the sandbox: a unix socket the
//! supervisor serves on one thread, one JSON object per line, every chunk of every line checked
//! against the sender's credentials (`SCM_CREDENTIALS`) before it counts.
//!
//! Why per message and not per connection: a process can connect as the hook and hand the
//! socket to a child that then execs something else, so whoever wrote *this* chunk is what
//! matters. The kernel never merges data from different writers into one `recvmsg` once
//! `SO_PASSCRED` is on, so each read has exactly one sender, whose pid (translated into the
//! supervisor's pid namespace) is checked by comparing `stat(/proc/<pid>/exe)` with the hook
//! binary's device and inode (the sandbox sees the same file through a read-only bind mount).
//!
//! The credentials are the kernel's: a sender may only claim another pid with `CAP_SYS_ADMIN`
//! over its pid namespace, which the sandbox does not have.
//!
//! What it cannot tell: the agent can run the hook binary itself, so an accepted record shows
//! what a hook process reported, not who asked (hence `source: "sandbox"`); and the check is
//! made when the chunk is read, so a sender that execs the hook between writing and our read
//! passes, and a hook that exits before its chunk is read is refused (its exe is gone; a
//! recycled pid could even name another process, which is why the hook must wait, below).
//!
//! Protocol for the hook: connect, write one or more lines (each a JSON object, at most
//! [`MAX_LINE`] bytes), shut down the write side and read until end of file before exiting. At
//! end of file the receiver answers `{"accepted":N,"malformed":M}\n` and closes; a refused peer
//! gets `{"refused":"…"}\n`. Waiting for that answer keeps the hook alive while its lines are
//! checked. When a deny among the lines is one of a loop of denials under one rule (counted by
//! [`DenialLoops`]), the answer adds `"denial_loop": {…}` (the last such deny's), which the hook
//! turns into a longer reason.

use crate::audit::denial_loops::DenialLoops;
use crate::audit::sink::AuditSink;
use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::socket::{
    ControlMessageOwned, MsgFlags, UnixCredentials, getsockopt, recvmsg, send, setsockopt, sockopt,
};
use serde::Serialize;
use serde_json::{Map, Value, json};
use std::io::{self, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The longest line accepted (without its newline).
pub const MAX_LINE: usize = 64 * 1024;
/// Connections served at once; more wait in the listen backlog.
const MAX_CONNECTIONS: usize = 256;
/// A connection that sends nothing for this long is closed.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Reads from one connection per round, so that one busy sender cannot starve the others.
const READS_PER_ROUND: usize = 64;
/// Reads from one connection at shutdown (the sandbox is gone; this only bounds the work).
const READS_AT_SHUTDOWN: usize = 4096;

/// The executable a sender must be running: the hook binary, by device and inode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerCheck {
    path: PathBuf,
    dev: u64,
    ino: u64,
}

/// Why a sender was refused, with what the supervisor saw of it.
#[derive(Debug, Clone, Serialize)]
struct Refusal {
    pid: i32,
    uid: u32,
    gid: u32,
    /// The sender's executable, when readable.
    exe: Option<String>,
    expected: String,
    reason: String,
    /// `connect` (checked at accept with `SO_PEERCRED`) or `message` (a chunk of data).
    stage: &'static str,
}

impl PeerCheck {
    /// Senders must run the file at `path` (symlinks followed: `/proc/self/exe` names the
    /// running binary).
    pub fn for_executable(path: &Path) -> io::Result<PeerCheck> {
        let meta = std::fs::metadata(path)?;
        Ok(PeerCheck {
            path: std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()),
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }

    /// The expected executable, as resolved when the check was made.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `Ok` when `pid` runs the expected executable right now.
    fn check(&self, pid: i32, uid: u32, gid: u32, stage: &'static str) -> Result<(), Refusal> {
        let refuse = |reason: String| Refusal {
            pid,
            uid,
            gid,
            exe: exe_of(pid),
            expected: self.path.to_string_lossy().into_owned(),
            reason,
            stage,
        };
        if pid <= 0 {
            return Err(refuse(
                "the sender's pid is not visible from the supervisor".to_string(),
            ));
        }
        match std::fs::metadata(format!("/proc/{pid}/exe")) {
            Ok(meta) if (meta.dev(), meta.ino()) == (self.dev, self.ino) => Ok(()),
            Ok(meta) => Err(refuse(format!(
                "the sender runs another executable (device {}, inode {}), not the hook",
                meta.dev(),
                meta.ino()
            ))),
            Err(e) => Err(refuse(format!(
                "the sender's executable cannot be checked ({e}): it exited before its data \
                 was read, or it is not visible"
            ))),
        }
    }
}

/// What the receiver saw, for the run-end record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ReceiverCounts {
    /// Connections accepted (refused ones included).
    pub connections: u64,
    /// Lines written to the log as `source: "sandbox"` records.
    pub accepted: u64,
    /// Connections closed because a sender (at connect, or of any chunk) was not the hook.
    pub refused_peers: u64,
    /// Lines that were not a JSON object, or longer than [`MAX_LINE`].
    pub malformed: u64,
    /// Connections that ended in the middle of a line (bytes after the last newline).
    pub incomplete: u64,
    /// Connections that ended without sending a byte.
    pub empty: u64,
    /// Well-formed lines not written because the run's records from inside had reached the
    /// cap (`audit.inside_max_mib`).
    pub over_cap: u64,
    /// Bytes of records from inside written to the log.
    pub accepted_bytes: u64,
}

/// The running receiver; [`ReceiverHandle::shutdown`] stops it.
pub struct ReceiverHandle {
    stop: Arc<AtomicBool>,
    /// Dropping it wakes the receiver's `poll`.
    wake: Option<UnixStream>,
    counts: Arc<Mutex<ReceiverCounts>>,
    thread: Option<JoinHandle<()>>,
}

impl ReceiverHandle {
    /// The counts so far.
    pub fn counts(&self) -> ReceiverCounts {
        *self
            .counts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Tells the receiver to stop, without waiting for it (it reads what is queued first).
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        drop(self.wake.take());
    }

    /// Stops accepting, reads what is already queued (connections in the backlog included),
    /// closes every connection and returns the final counts. Call it after the sandbox ended.
    pub fn shutdown(mut self) -> ReceiverCounts {
        self.stop();
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::warn!("the hook receiver panicked; its counts may be short");
        }
        self.counts()
    }
}

/// Serves `listener` on a new thread until [`ReceiverHandle::shutdown`]: records from senders
/// that pass `peer_check` are written to `sink` as `source: "sandbox"`; refused senders are
/// recorded as `kind: "refused-peer"` by the supervisor. Both are charged to the run's budget
/// of what the agent causes (`audit::caused`); when the sink has none yet, `inside_max_bytes`
/// sets one (bytes only). With `loops`, every deny is counted and a loop recorded and answered
/// (see [`crate::audit::denial_loops`]).
pub fn serve_hook_socket(
    listener: UnixListener,
    sink: AuditSink,
    peer_check: PeerCheck,
    inside_max_bytes: u64,
    loops: Option<DenialLoops>,
) -> ReceiverHandle {
    // Before anyone can connect through what this returns: a connection made while the listener
    // lacked SO_PASSCRED gets a socket without it, and what the peer wrote between the accept and
    // the socket's own setsockopt below would carry no credentials (pid 0: refused).
    if let Err(e) = setsockopt(&listener, sockopt::PassCred, &true) {
        tracing::warn!("hook receiver: SO_PASSCRED on the listener: {e}");
    }
    // A run sets its budget (bytes and rate) before any service starts; alone, the receiver
    // keeps to the bytes.
    sink.limit_caused(inside_max_bytes, u32::MAX);
    let stop = Arc::new(AtomicBool::new(false));
    let counts = Arc::new(Mutex::new(ReceiverCounts::default()));
    // Without the pair the receiver still stops, at its next poll timeout.
    let (wake, watch) = match UnixStream::pair() {
        Ok((a, b)) => (Some(a), Some(b)),
        Err(e) => {
            tracing::warn!("hook receiver: no wake-up pair ({e}); shutdown will be slower");
            (None, None)
        }
    };
    let mut receiver = Receiver {
        listener,
        sink,
        peer_check,
        stop: stop.clone(),
        watch,
        counts: counts.clone(),
        connections: Vec::new(),
        buf: vec![0; MAX_LINE + 1],
        over_cap: 0,
        asks: AskAnswers::default(),
        loops,
    };
    let thread = std::thread::Builder::new()
        .name("hook-receiver".into())
        .spawn(move || receiver.run());
    let thread = match thread {
        Ok(thread) => Some(thread),
        Err(e) => {
            tracing::warn!("hook receiver: cannot start its thread: {e}");
            None
        }
    };
    ReceiverHandle {
        stop,
        wake,
        counts,
        thread,
    }
}

struct Receiver {
    listener: UnixListener,
    sink: AuditSink,
    peer_check: PeerCheck,
    stop: Arc<AtomicBool>,
    watch: Option<UnixStream>,
    counts: Arc<Mutex<ReceiverCounts>>,
    connections: Vec<Connection>,
    buf: Vec<u8>,
    /// Records from inside are written up to this many bytes (the lines as received).
    /// Well-formed lines over the run's budget of what the agent causes (`audit::caused`).
    over_cap: u64,
    asks: AskAnswers,
    loops: Option<DenialLoops>,
}

/// What became of the calls the hook answered `ask`: the person's answer is not reported to any
/// hook, so it is read from what followed. The call's PostToolUse or PostToolUseFailure (same
/// `tool_use_id`) means it was approved; the next prompt or Stop, or the end of the run, without
/// either, means it was refused. The records it follows are the sandbox's own reports, so the
/// answer is worth what they are worth: the `ask-answer` record says what it was inferred from.
#[derive(Default)]
struct AskAnswers {
    /// `tool_use_id` → the `seq` of the ask's decision record.
    pending: std::collections::BTreeMap<String, u64>,
}

/// At most this many asks wait for their answer (the oldest is given up beyond).
const MAX_PENDING_ASKS: usize = 4096;

impl AskAnswers {
    /// A record from inside was written at `seq`: the answers it settles, as
    /// (`tool_use_id`, ask's seq, answer, what told).
    fn follow(
        &mut self,
        seq: u64,
        object: &Map<String, Value>,
    ) -> Vec<(String, u64, &'static str, String)> {
        let text = |key: &str| object.get(key).and_then(Value::as_str);
        let event = text("event").unwrap_or_default();
        let id = object.get("tool_use_id").and_then(Value::as_str);
        let mut settled = Vec::new();
        match (event, text("kind"), id) {
            ("PreToolUse", Some("decision"), Some(id)) if text("decision") == Some("ask") => {
                if self.pending.len() >= MAX_PENDING_ASKS
                    && let Some(oldest) = self.pending.keys().next().cloned()
                {
                    self.pending.remove(&oldest);
                }
                self.pending.insert(id.to_string(), seq);
            }
            ("PostToolUse" | "PostToolUseFailure", _, Some(id)) => {
                if let Some(asked) = self.pending.remove(id) {
                    settled.push((
                        id.to_string(),
                        asked,
                        "approved",
                        format!("{event} (seq {seq})"),
                    ));
                }
            }
            ("UserPromptSubmit" | "Stop", _, _) => {
                for (id, asked) in std::mem::take(&mut self.pending) {
                    settled.push((id, asked, "refused", format!("{event} (seq {seq})")));
                }
            }
            _ => {}
        }
        settled
    }

    /// The run ended: what is still waiting was not approved.
    fn end(&mut self) -> Vec<(String, u64, &'static str, String)> {
        std::mem::take(&mut self.pending)
            .into_iter()
            .map(|(id, asked)| (id, asked, "refused", "the end of the run".to_string()))
            .collect()
    }
}

struct Connection {
    stream: UnixStream,
    /// The line being received (never longer than `MAX_LINE`).
    pending: Vec<u8>,
    /// Inside a line that grew past `MAX_LINE` (already counted): dropping until its newline.
    skipping: bool,
    received_any: bool,
    accepted: u64,
    malformed: u64,
    last_activity: Instant,
    /// A deny on this connection was one of a loop: what the answer says of it.
    denial_loop: Option<Value>,
}

/// What reading a connection came to.
enum ReadState {
    Open,
    Ended,
    Refused,
}

impl Receiver {
    fn count(&self, f: impl FnOnce(&mut ReceiverCounts)) {
        f(&mut self
            .counts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()));
    }

    fn run(&mut self) {
        if let Err(e) = self.listener.set_nonblocking(true) {
            tracing::warn!("hook receiver: listener stays blocking: {e}");
        }
        while !self.stop.load(Ordering::SeqCst) {
            let (wake_ready, listener_ready, ready) = match self.wait() {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!("hook receiver: poll: {e}");
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
            };
            if wake_ready {
                break;
            }
            if listener_ready {
                self.accept_pending();
            }
            for index in (0..self.connections.len()).rev() {
                if ready.get(index).copied().unwrap_or(false) {
                    self.serve(index, READS_PER_ROUND);
                }
            }
            self.close_idle();
        }
        self.drain();
    }

    /// Polls the wake-up socket, the listener (while there is room) and every connection.
    fn wait(&self) -> nix::Result<(bool, bool, Vec<bool>)> {
        let readable = PollFlags::POLLIN;
        let mut fds = Vec::with_capacity(self.connections.len() + 2);
        let watch_slot = self.watch.as_ref().map(|w| {
            fds.push(PollFd::new(w.as_fd(), readable));
            fds.len() - 1
        });
        let listener_slot = (self.connections.len() < MAX_CONNECTIONS).then(|| {
            fds.push(PollFd::new(self.listener.as_fd(), readable));
            fds.len() - 1
        });
        let first_connection = fds.len();
        for c in &self.connections {
            fds.push(PollFd::new(c.stream.as_fd(), readable));
        }
        match poll(&mut fds, PollTimeout::from(1000u16)) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => return Err(e),
        }
        let is_ready = |fd: &PollFd| fd.revents().is_some_and(|r| !r.is_empty());
        let slot_ready = |slot: Option<usize>| slot.is_some_and(|s| is_ready(&fds[s]));
        Ok((
            slot_ready(watch_slot),
            slot_ready(listener_slot),
            fds[first_connection..].iter().map(is_ready).collect(),
        ))
    }

    /// Accepts what is queued, checking each peer as it connected (`SO_PEERCRED`).
    fn accept_pending(&mut self) {
        while self.connections.len() < MAX_CONNECTIONS {
            let stream = match self.listener.accept() {
                Ok((stream, _)) => stream,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::warn!("hook receiver: accept: {e}");
                    return;
                }
            };
            self.count(|c| c.connections += 1);
            if let Err(e) = setsockopt(&stream, sockopt::PassCred, &true) {
                // Without credentials on each read every chunk is refused below.
                tracing::warn!("hook receiver: SO_PASSCRED: {e}");
            }
            let _ = stream.set_nonblocking(true);
            let verdict = match getsockopt(&stream, sockopt::PeerCredentials) {
                Ok(cred) => self
                    .peer_check
                    .check(cred.pid(), cred.uid(), cred.gid(), "connect"),
                Err(e) => Err(Refusal {
                    pid: 0,
                    uid: u32::MAX,
                    gid: u32::MAX,
                    exe: None,
                    expected: self.peer_check.path.to_string_lossy().into_owned(),
                    reason: format!("the peer's credentials cannot be read ({e})"),
                    stage: "connect",
                }),
            };
            match verdict {
                Ok(()) => self.connections.push(Connection {
                    stream,
                    pending: Vec::new(),
                    skipping: false,
                    received_any: false,
                    accepted: 0,
                    malformed: 0,
                    last_activity: Instant::now(),
                    denial_loop: None,
                }),
                Err(refusal) => self.refuse(&stream, refusal),
            }
        }
    }

    /// Records a refused sender and tells it; the caller drops the connection.
    fn refuse(&self, stream: &UnixStream, refusal: Refusal) {
        tracing::warn!(
            pid = refusal.pid,
            exe = refusal.exe.as_deref().unwrap_or("?"),
            "hook receiver: refused: {}",
            refusal.reason
        );
        self.sink
            .record_caused("supervisor", "refused-peer", &refusal);
        self.count(|c| c.refused_peers += 1);
        reply(stream, &json!({ "refused": refusal.reason }));
    }

    /// Reads connection `index` until it would block (or `budget` reads); removes it when it
    /// ended or was refused.
    fn serve(&mut self, index: usize, budget: usize) {
        let state = self.read_connection(index, budget);
        match state {
            ReadState::Open => {}
            ReadState::Ended => {
                let connection = self.connections.swap_remove(index);
                self.finish(connection);
            }
            ReadState::Refused => {
                self.connections.swap_remove(index);
            }
        }
    }

    fn read_connection(&mut self, index: usize, budget: usize) -> ReadState {
        for _ in 0..budget {
            let fd = self.connections[index].stream.as_raw_fd();
            let mut cmsg = nix::cmsg_space!(UnixCredentials);
            let mut iov = [IoSliceMut::new(&mut self.buf)];
            let received = recvmsg::<()>(
                fd,
                &mut iov,
                Some(&mut cmsg),
                MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_CMSG_CLOEXEC,
            );
            let (bytes, creds) = match received {
                Ok(msg) => {
                    let creds = match msg.cmsgs() {
                        Ok(mut cmsgs) => cmsgs
                            .find_map(|c| match c {
                                ControlMessageOwned::ScmCredentials(c) => Some(Ok(c)),
                                _ => None,
                            })
                            .unwrap_or(Err("it sent no credentials")),
                        // The buffer only has room for credentials: anything else (file
                        // descriptors) is cut off by the kernel, not installed here.
                        Err(_) => Err("it sent ancillary data other than credentials"),
                    };
                    (msg.bytes, creds)
                }
                Err(Errno::EAGAIN) => return ReadState::Open,
                Err(Errno::EINTR) => continue,
                Err(e) => {
                    tracing::debug!("hook receiver: recvmsg: {e}");
                    return ReadState::Ended;
                }
            };
            if bytes == 0 {
                return ReadState::Ended;
            }
            let checked = match creds {
                Ok(c) => self
                    .peer_check
                    .check(c.pid(), c.uid(), c.gid(), "message")
                    .map(|()| c),
                Err(reason) => Err(self.peer_refusal(index, reason)),
            };
            let creds = match checked {
                Ok(c) => c,
                Err(refusal) => {
                    self.refuse(&self.connections[index].stream, refusal);
                    return ReadState::Refused;
                }
            };
            let connection = &mut self.connections[index];
            connection.received_any = true;
            connection.last_activity = Instant::now();
            let lines = connection.take(&self.buf[..bytes]);
            for line in lines {
                self.handle_line(index, line, &creds);
            }
        }
        ReadState::Open
    }

    /// A chunk without usable credentials: refused, described by the connection's peer as it
    /// connected (`SO_PEERCRED`).
    fn peer_refusal(&self, index: usize, reason: &str) -> Refusal {
        let peer = getsockopt(&self.connections[index].stream, sockopt::PeerCredentials).ok();
        let pid = peer.map_or(0, |p| p.pid());
        Refusal {
            pid,
            uid: peer.map_or(u32::MAX, |p| p.uid()),
            gid: peer.map_or(u32::MAX, |p| p.gid()),
            exe: exe_of(pid),
            expected: self.peer_check.path.to_string_lossy().into_owned(),
            reason: reason.to_string(),
            stage: "message",
        }
    }

    fn handle_line(&mut self, index: usize, line: Line, creds: &UnixCredentials) {
        let length = match &line {
            Line::Complete(bytes) => bytes.len() as u64 + 1,
            Line::TooLong => 0,
        };
        let object = match line {
            Line::TooLong => None,
            Line::Complete(bytes) => match serde_json::from_slice::<Value>(&bytes) {
                Ok(Value::Object(object)) => Some(object),
                _ => None,
            },
        };
        let Some(object) = object else {
            self.connections[index].malformed += 1;
            self.count(|c| c.malformed += 1);
            return;
        };
        let kind = reported_kind(&object);
        // Counted whether or not the record fits the run's budget: the hook did deny.
        let looped = self.loops.as_mut().and_then(|loops| loops.seen(&object));
        let tool_use_id = object.get("tool_use_id").cloned();
        let body = Map::from_iter([
            (
                "peer".to_string(),
                json!({ "pid": creds.pid(), "uid": creds.uid(), "gid": creds.gid() }),
            ),
            ("reported".to_string(), Value::Object(object)),
        ]);
        let appended = self.sink.append_caused("sandbox", &kind, &body);
        if let Some(seen) = looped {
            let seq = appended.as_ref().ok().copied().flatten();
            self.record_loop(index, seen, seq, tool_use_id);
        }
        match appended {
            Ok(Some(seq)) => {
                if let Some(Value::Object(object)) = body.get("reported") {
                    let settled = self.asks.follow(seq, object);
                    self.record_answers(settled);
                }
                self.connections[index].accepted += 1;
                self.count(|c| {
                    c.accepted += 1;
                    c.accepted_bytes += length;
                });
            }
            // Over the run's budget: counted, not written (the sink says so in the log).
            Ok(None) => {
                self.over_cap += 1;
                self.count(|c| c.over_cap += 1);
            }
            Err(e) => tracing::warn!("hook receiver: writing the audit log: {e}"),
        }
    }

    /// A deny that is one of a loop: the answer to its connection says so, and its stage is
    /// recorded (the first restatement and the `--ci` stop; the denials between are only
    /// answered). The decision's own record is `decision_seq` (null when it was over budget).
    /// Not charged to the budget of what the agent causes, so that the stop is never lost: at
    /// most two records a (session, rule) pair, and the pairs counted are capped
    /// (`denial_loops::MAX_PAIRS`).
    fn record_loop(
        &mut self,
        index: usize,
        seen: crate::audit::denial_loops::LoopSeen,
        decision_seq: Option<u64>,
        tool_use_id: Option<Value>,
    ) {
        if seen.stage != "repeated" {
            self.sink.record(
                "supervisor",
                "denial-loop",
                &json!({
                    "session_id": seen.session_id,
                    "rule_id": seen.rule_id,
                    "tool": seen.tool,
                    "tool_use_id": tool_use_id,
                    "denials": seen.denials,
                    "after": seen.after,
                    "stop": seen.stop,
                    "stage": seen.stage,
                    "decision_seq": decision_seq,
                }),
            );
        }
        if seen.stage == "stopped" {
            tracing::warn!(
                rule = %seen.rule_id,
                denials = seen.denials,
                "denial loop: ending the --ci run"
            );
        }
        self.connections[index].denial_loop = Some(json!({
            "rule_id": seen.rule_id,
            "denials": seen.denials,
            "after": seen.after,
            "stop": seen.stop,
        }));
    }

    /// An `ask-answer` record for each ask settled.
    fn record_answers(&self, settled: Vec<(String, u64, &'static str, String)>) {
        for (id, asked, answer, by) in settled {
            self.sink.record(
                "supervisor",
                "ask-answer",
                &json!({
                    "tool_use_id": id,
                    "ask_seq": asked,
                    "answer": answer,
                    "inferred_from": by,
                }),
            );
        }
    }

    /// A trusted record of how many records from inside were not written, at most once a
    /// second (and a last one at shutdown, `finally`).
    /// A connection ended: counts an unfinished line or an empty connection, answers, closes.
    fn finish(&self, connection: Connection) {
        if !connection.pending.is_empty() && !connection.skipping {
            self.count(|c| c.incomplete += 1);
        }
        if !connection.received_any {
            self.count(|c| c.empty += 1);
        }
        let mut answer =
            json!({ "accepted": connection.accepted, "malformed": connection.malformed });
        if let Some(seen) = connection.denial_loop {
            answer["denial_loop"] = seen;
        }
        reply(&connection.stream, &answer);
    }

    fn close_idle(&mut self) {
        let now = Instant::now();
        for index in (0..self.connections.len()).rev() {
            if now.duration_since(self.connections[index].last_activity) > IDLE_TIMEOUT {
                let connection = self.connections.swap_remove(index);
                self.finish(connection);
            }
        }
    }

    /// At shutdown: everything already sent is read (queued connections included), then every
    /// connection is closed as ended.
    fn drain(&mut self) {
        loop {
            let before = self.connections.len();
            self.accept_pending();
            let mut progressed = self.connections.len() != before;
            for index in (0..self.connections.len()).rev() {
                let count = self.connections.len();
                self.serve(index, READS_AT_SHUTDOWN);
                progressed |= self.connections.len() != count;
            }
            // Room freed by ended connections lets more of the backlog in.
            if !progressed {
                break;
            }
        }
        for connection in std::mem::take(&mut self.connections) {
            self.finish(connection);
        }
        let settled = self.asks.end();
        self.record_answers(settled);
    }
}

/// The executable `pid` runs, when it can be read.
fn exe_of(pid: i32) -> Option<String> {
    (pid > 0)
        .then(|| std::fs::read_link(format!("/proc/{pid}/exe")).ok())
        .flatten()
        .map(|p| p.to_string_lossy().into_owned())
}

/// A line taken from a connection.
enum Line {
    Complete(Vec<u8>),
    /// Longer than `MAX_LINE`; its bytes were dropped.
    TooLong,
}

impl Connection {
    /// Adds a chunk; returns the lines it completed.
    fn take(&mut self, mut data: &[u8]) -> Vec<Line> {
        let mut lines = Vec::new();
        while let Some(newline) = data.iter().position(|&b| b == b'\n') {
            let (head, rest) = (&data[..newline], &data[newline + 1..]);
            data = rest;
            if self.skipping {
                self.skipping = false;
            } else if self.pending.len() + head.len() > MAX_LINE {
                self.pending.clear();
                lines.push(Line::TooLong);
            } else {
                self.pending.extend_from_slice(head);
                lines.push(Line::Complete(std::mem::take(&mut self.pending)));
            }
        }
        if self.skipping {
            return lines;
        }
        if self.pending.len() + data.len() > MAX_LINE {
            // Counted now, once; the rest of it is dropped as it comes.
            self.pending.clear();
            self.skipping = true;
            lines.push(Line::TooLong);
        } else {
            self.pending.extend_from_slice(data);
        }
        lines
    }
}

/// The record's kind as the hook named it, when it is a plain short name; `hook` otherwise.
fn reported_kind(object: &Map<String, Value>) -> String {
    object
        .get("kind")
        .and_then(Value::as_str)
        .filter(|k| {
            (1..=64).contains(&k.len())
                && k.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        })
        .unwrap_or("hook")
        .to_string()
}

/// Best effort: never blocks, never raises SIGPIPE.
fn reply(stream: &UnixStream, value: &Value) {
    let mut line = value.to_string().into_bytes();
    line.push(b'\n');
    let _ = send(
        stream.as_raw_fd(),
        &line,
        MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL,
    );
}
