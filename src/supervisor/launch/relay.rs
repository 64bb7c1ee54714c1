//! The supervisor's event loop for one run: it relays the terminal (keystrokes in, output out,
//! window size), forwards signals and job control, enforces `--timeout` and the end a signal
//! from outside asks for (SIGTERM, SIGHUP: the grace period, then the whole sandbox), reads the
//! init's events, lets the watcher look every tick, and ends with the run's outcome. It never
//! enters the sandbox.

use crate::sandbox::report::CommandEnforcement;
use crate::supervisor::launch::outcome::{EXIT_TIMEOUT, InitEvent, Outcome};
use crate::supervisor::launch::pty::{RawTerminal, copy_window_size};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{Signal, kill};
use nix::sys::signalfd::{SfdFlags, SigSet, SignalFd};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::OnceLock;

/// The signals that end a run from outside (and Ctrl-C without a terminal of the command's own).
fn ending_signals() -> SigSet {
    let mut set = SigSet::empty();
    for sig in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        set.add(sig);
    }
    set
}

/// Blocks SIGINT, SIGTERM and SIGHUP from the start of a run, before any thread exists (threads
/// inherit the mask; a process-directed signal goes to any thread that does not block it): one
/// that comes before the launch waits for it instead of killing the supervisor between the
/// run's start record and its end. Children started with `std::process::Command` get a clean
/// mask; the init resets it for the command.
pub fn hold_ending_signals() {
    let ignored = std::fs::read_to_string("/proc/self/status")
        .map(|status| ignored_signals(&status))
        .unwrap_or(0);
    let _ = IGNORED_AT_START.set(ignored);
    if let Err(e) = ending_signals().thread_block() {
        tracing::warn!("blocking SIGINT, SIGTERM and SIGHUP: {e}");
    }
}

/// The signals this process started with ignored (`SigIgn` of /proc/self/status, bit N-1 for
/// signal N), read before the first block: blocked signals are queued even when ignored.
static IGNORED_AT_START: OnceLock<u64> = OnceLock::new();

/// `SigIgn` of a /proc/PID/status text.
fn ignored_signals(status: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .unwrap_or(0)
}

/// Whether `signal` was ignored when this run started (`nohup` ignores SIGHUP, a shell's
/// background job SIGINT): it stays ignored — neither passed on nor ending the run — as it
/// would be without StepProof.
pub(crate) fn ignored_at_start(signal: Signal) -> bool {
    let bit = (signal as i32 - 1) as u32;
    IGNORED_AT_START
        .get()
        .is_some_and(|mask| bit < 64 && mask & (1 << bit) != 0)
}

/// A SIGINT, SIGTERM or SIGHUP that came before the launch (held by [`hold_ending_signals`]),
/// taken: the run ends there, the command is not started.
pub fn ending_signal_pending() -> Option<Signal> {
    let fd = SignalFd::with_flags(
        &ending_signals(),
        SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK,
    )
    .ok()?;
    let mut first = None;
    while let Ok(Some(info)) = fd.read_signal() {
        let signal = Signal::try_from(info.ssi_signo as i32)
            .ok()
            .filter(|s| !ignored_at_start(*s));
        // SIGTERM or SIGHUP names the end over an earlier SIGINT.
        if first.is_none() || first == Some(Signal::SIGINT) {
            first = signal.or(first);
        }
    }
    first
}

/// The supervisor's event loop for one run.
pub(crate) struct Relay<'t> {
    child: Pid,
    signal_fd: SignalFd,
    status: File,
    status_buf: Vec<u8>,
    master: Option<OwnedFd>,
    terminal: Option<RawTerminal<'t>>,
    final_event: Option<InitEvent>,
    init_exit: Option<WaitStatus>,
    /// Keystrokes not yet accepted by the command's terminal.
    pending_input: Vec<u8>,
    enforcement: Option<CommandEnforcement>,
    /// `--timeout`: when the whole sandbox must end.
    deadline: Option<std::time::Instant>,
    /// Set once the deadline passed or a signal from outside ended the run: SIGTERM went out,
    /// the whole sandbox is killed at this instant.
    kill_at: Option<std::time::Instant>,
    /// Set once the sandbox is being killed: the init had its chance to kill everything (it
    /// must, without a pid namespace) and gets SIGKILL itself at this instant if still there.
    init_kill_at: Option<std::time::Instant>,
    timed_out: bool,
    /// The signal from outside (SIGTERM, SIGHUP) that ended the run, the first one.
    ended_by: Option<Signal>,
    /// When the first SIGINT, SIGTERM or SIGHUP (or the timeout's SIGTERM) went to the command:
    /// the grace period counts from it.
    asked_to_stop_at: Option<std::time::Instant>,
    /// Closing it makes the init kill everything and exit (also without a pid namespace).
    lifeline: Option<OwnedFd>,
    /// The init reported that nothing else of the sandbox is left.
    all_gone: bool,
    /// Persistence names absent at launch, looked for every tick while the run is on.
    watcher: Option<crate::supervisor::way_out::watch::Watcher>,
    /// Called once when the run starts to end (the deadline, a signal from outside): the
    /// supervisor's own work in flight stops first, so that nothing it froze stands between
    /// the sandbox and its kill.
    on_ending: Option<Box<dyn FnOnce() + 't>>,
    /// Readable when the supervisor itself asks the run to end (a `--ci` loop of denials,
    /// `audit::denial_loops`): then it ends as at the deadline, SIGTERM and the grace.
    stop_request: Option<std::os::unix::net::UnixStream>,
    /// The run is ending because the supervisor asked.
    ended_on_request: bool,
}

/// How long a command has between SIGTERM and SIGKILL when `--timeout` or a signal from outside
/// ends it (inside `docker stop`'s 10 s and Kubernetes' 30 s; GitHub's runner sends SIGINT, then
/// SIGTERM 7.5 s later: the grace counts from the SIGINT, so the kill follows the SIGTERM at once).
pub(crate) const GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// How long the init has, once the grace is over, to kill everything and exit before it gets
/// SIGKILL itself (without a pid namespace, only the init can find the run's orphans).
const INIT_KILL_DELAY: std::time::Duration = std::time::Duration::from_secs(1);

impl<'t> Relay<'t> {
    /// The loop for the init `child`: its events come on `status`, closing `lifeline` ends the
    /// sandbox, `master` is the command's terminal (with the user's in raw mode), `timeout`
    /// counts from now.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        child: Pid,
        signal_fd: SignalFd,
        status: File,
        master: Option<OwnedFd>,
        terminal: Option<RawTerminal<'t>>,
        timeout: Option<std::time::Duration>,
        lifeline: OwnedFd,
        watcher: Option<crate::supervisor::way_out::watch::Watcher>,
        on_ending: Option<Box<dyn FnOnce() + 't>>,
    ) -> Relay<'t> {
        Relay {
            child,
            signal_fd,
            status,
            status_buf: Vec::new(),
            master,
            terminal,
            final_event: None,
            init_exit: None,
            pending_input: Vec::new(),
            enforcement: None,
            deadline: timeout.map(|t| std::time::Instant::now() + t),
            kill_at: None,
            init_kill_at: None,
            timed_out: false,
            ended_by: None,
            asked_to_stop_at: None,
            lifeline: Some(lifeline),
            all_gone: false,
            watcher,
            on_ending,
            stop_request: None,
            ended_on_request: false,
        }
    }

    /// The run also ends when `request` becomes readable (see `stop_request`).
    pub(crate) fn ended_on_request(
        mut self,
        request: Option<std::os::unix::net::UnixStream>,
    ) -> Relay<'t> {
        self.stop_request = request;
        self
    }

    /// The supervisor asked the run to end: as at the deadline, SIGTERM to the command and the
    /// whole sandbox killed after the grace. The outcome stays the command's; who asked wraps it.
    fn end_on_request(&mut self) {
        // A byte is the request; end of file is only the asker gone (a run without a receiver
        // drops it at the launch), which asks nothing.
        let asked = self.stop_request.take().is_some_and(|mut request| {
            let mut byte = [0u8; 1];
            matches!(io::Read::read(&mut request, &mut byte), Ok(1))
        });
        if !asked || self.ending() {
            return;
        }
        tracing::debug!("the supervisor ends the run");
        let now = std::time::Instant::now();
        self.begin_end();
        self.ended_on_request = true;
        self.asked_to_stop_at.get_or_insert(now);
        self.kill_at = Some(now + GRACE);
        let _ = kill(self.child, Signal::SIGTERM);
    }

    /// The run starts to end: what was asked to happen then, once.
    fn begin_end(&mut self) {
        if let Some(stop) = self.on_ending.take() {
            stop();
        }
    }

    /// Relays until the run is over: its outcome, what the command ran under, and what the
    /// watcher moved to the quarantine.
    pub(crate) fn run(
        mut self,
    ) -> (
        Outcome,
        Option<CommandEnforcement>,
        Vec<crate::supervisor::way_out::sweep::Finding>,
    ) {
        // The launch's helpers have exited by now (a SIGCHLD from before the signal mask may be
        // lost): reaped at once, not at the end of the run.
        self.reap();
        let mut status_open = true;
        let mut stdin_open = self.terminal.is_some();
        if let Some(master) = &self.master {
            let _ = nix::fcntl::fcntl(
                master,
                nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
            );
        }
        loop {
            let master_open = self.master.is_some();
            if self.init_exit.is_some() && !status_open && !master_open {
                break;
            }
            // The command ended and the init has reaped everything else: the init's own exit
            // (the namespaces' teardown) need not be waited for.
            if self.all_gone && self.final_event.is_some() && !master_open {
                break;
            }
            let stdin = io::stdin();
            let mut fds = vec![PollFd::new(self.signal_fd.as_fd(), PollFlags::POLLIN)];
            let status_idx = status_open.then(|| {
                fds.push(PollFd::new(self.status.as_fd(), PollFlags::POLLIN));
                fds.len() - 1
            });
            let stdin_idx = (stdin_open && self.pending_input.is_empty()).then(|| {
                fds.push(PollFd::new(stdin.as_fd(), PollFlags::POLLIN));
                fds.len() - 1
            });
            let request_idx = self.stop_request.as_ref().map(|r| {
                fds.push(PollFd::new(r.as_fd(), PollFlags::POLLIN));
                fds.len() - 1
            });
            let master_idx = self.master.as_ref().map(|m| {
                let mut events = PollFlags::POLLIN;
                if !self.pending_input.is_empty() {
                    events |= PollFlags::POLLOUT;
                }
                fds.push(PollFd::new(m.as_fd(), events));
                fds.len() - 1
            });
            let next_look = self.watcher.as_ref().map(|w| w.next_look());
            let next = match (self.next_timer(), next_look) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let wait = next.map_or(PollTimeout::NONE, |left| {
                PollTimeout::try_from(left.as_millis().min(60_000) as i32 + 1)
                    .unwrap_or(PollTimeout::MAX)
            });
            match poll(&mut fds, wait) {
                Ok(_) => {}
                Err(nix::Error::EINTR) => continue,
                Err(_) => break,
            }
            let ready = |i: Option<usize>| i.is_some_and(|i| fds[i].any().unwrap_or(false));
            let (sig_ready, status_ready, stdin_ready, master_ready) = (
                fds[0].any().unwrap_or(false),
                ready(status_idx),
                ready(stdin_idx),
                ready(master_idx),
            );
            let stop_requested = ready(request_idx);
            drop(fds);
            if stop_requested {
                self.end_on_request();
            }
            self.check_timers();
            if let Some(watcher) = self.watcher.as_mut() {
                watcher.tick();
            }
            if sig_ready {
                self.handle_signals();
            }
            if status_ready && !self.read_status() {
                status_open = false;
            }
            if stdin_ready && !self.read_stdin() {
                stdin_open = false;
            }
            if master_ready && !self.pump_master() {
                self.master = None;
            }
        }
        if let Some(term) = self.terminal.as_mut() {
            term.restore();
        }
        let enforcement = self.enforcement.take();
        let moved = self.watcher.take().map(|w| w.finish()).unwrap_or_default();
        if let Some(signal) = self.ended_by {
            let after = self.outcome();
            return (
                Outcome::terminated(signal as i32, Some(after)),
                enforcement,
                moved,
            );
        }
        if self.timed_out {
            let after = self.outcome();
            return (
                Outcome::TimedOut {
                    exit_code: EXIT_TIMEOUT,
                    command: Box::new(after),
                },
                enforcement,
                moved,
            );
        }
        (self.outcome(), enforcement, moved)
    }

    /// Whether the run is already ending (timed out, ended from outside or on the supervisor's
    /// request).
    fn ending(&self) -> bool {
        self.timed_out || self.ended_by.is_some() || self.ended_on_request
    }

    /// Time left until the next timer (the deadline; the kill after the grace period; the
    /// init's SIGKILL after that).
    fn next_timer(&self) -> Option<std::time::Duration> {
        let deadline = self.deadline.filter(|_| !self.ending());
        let init_kill = self.init_kill_at.filter(|_| self.init_exit.is_none());
        let at = [self.kill_at, init_kill, deadline]
            .into_iter()
            .flatten()
            .min()?;
        Some(at.saturating_duration_since(std::time::Instant::now()))
    }

    /// `--timeout`: SIGTERM to the command's group when the deadline passes; after the grace
    /// period the whole sandbox is killed (also when a signal from outside ended the run).
    fn check_timers(&mut self) {
        let now = std::time::Instant::now();
        if !self.ending() && self.deadline.is_some_and(|d| now >= d) {
            self.begin_end();
            self.timed_out = true;
            self.asked_to_stop_at.get_or_insert(now);
            self.kill_at = Some(now + GRACE);
            let _ = kill(self.child, Signal::SIGTERM);
        } else if self.kill_at.is_some_and(|k| now >= k) {
            self.kill_sandbox();
        }
        if self.init_exit.is_none() && self.init_kill_at.is_some_and(|k| now >= k) {
            self.init_kill_at = None;
            let _ = kill(self.child, Signal::SIGKILL);
        }
    }

    /// The grace is over: the lifeline closes, and the init kills every process of the sandbox
    /// and exits (as pid 1 of the pid namespace its end is the end of all; without one it kills
    /// the command's group and every orphan it adopted). If it has not exited a second later,
    /// it gets SIGKILL.
    fn kill_sandbox(&mut self) {
        self.kill_at = None;
        if self.lifeline.take().is_some() {
            self.init_kill_at = Some(std::time::Instant::now() + INIT_KILL_DELAY);
        } else {
            let _ = kill(self.child, Signal::SIGKILL);
        }
    }

    /// SIGINT, SIGTERM or SIGHUP came to the supervisor. Each goes on to the command's group.
    /// SIGINT alone stays the command's to act on (Ctrl-C without a terminal of its own, as
    /// without StepProof). SIGTERM and SIGHUP come from outside — an orchestrator stopping the
    /// job, a terminal that went away — and end the run: whatever still runs when the grace
    /// period is up, counted from the first of the three signals, is killed. Another of them
    /// while the run is ending kills the sandbox at once.
    fn asked_to_stop(&mut self, signal: Signal) {
        let now = std::time::Instant::now();
        let _ = kill(self.child, signal);
        let first = *self.asked_to_stop_at.get_or_insert(now);
        if self.ending() {
            self.kill_sandbox();
            return;
        }
        if signal != Signal::SIGINT {
            tracing::debug!(signal = signal.as_str(), "the run is ended from outside");
            self.begin_end();
            self.ended_by = Some(signal);
            self.kill_at = Some((first + GRACE).max(now));
        }
    }

    fn handle_signals(&mut self) {
        while let Ok(Some(info)) = self.signal_fd.read_signal() {
            let Ok(signal) = Signal::try_from(info.ssi_signo as i32) else {
                continue;
            };
            match signal {
                Signal::SIGCHLD => self.reap(),
                Signal::SIGWINCH => {
                    if let (Some(term), Some(master)) = (&self.terminal, &self.master) {
                        copy_window_size(term.fd(), master);
                    }
                }
                Signal::SIGCONT => self.resume(),
                Signal::SIGINT | Signal::SIGTERM | Signal::SIGHUP if ignored_at_start(signal) => {}
                Signal::SIGINT | Signal::SIGTERM | Signal::SIGHUP => self.asked_to_stop(signal),
                // Keyboard job control reaches us only without a pty; hand it to the command.
                _ => {
                    let _ = kill(self.child, signal);
                }
            }
        }
    }

    /// Reaps every child that has exited: the init (its status is the run's), and the launch's
    /// helpers (the namespace seed, its network maker, the idmap holders), which would otherwise
    /// stay zombies for the whole run. Nothing else in this process starts children while the
    /// relay runs (the sweep's `git` comes after it): a child started then would be reaped here,
    /// and its own wait would fail.
    fn reap(&mut self) {
        loop {
            match waitpid(
                Pid::from_raw(-1),
                Some(WaitPidFlag::WNOHANG | WaitPidFlag::__WALL),
            ) {
                Ok(WaitStatus::StillAlive) | Err(_) => return,
                Ok(status) => {
                    if status.pid() == Some(self.child) {
                        self.init_exit = Some(status);
                    }
                }
            }
        }
    }

    /// Back from a stop (`fg`): terminal raw again, size refreshed, command continued.
    fn resume(&mut self) {
        if let Some(term) = self.terminal.as_mut() {
            let _ = term.make_raw();
            if let Some(master) = &self.master {
                copy_window_size(term.fd(), master);
            }
        }
        let _ = kill(self.child, Signal::SIGCONT);
    }

    /// The command stopped: give the user's shell its terminal back and stop as bare would.
    fn suspend(&mut self) {
        if let Some(term) = self.terminal.as_mut() {
            term.restore();
        }
        let _ = kill(Pid::this(), Signal::SIGSTOP);
    }

    /// Returns false at end of file.
    fn read_status(&mut self) -> bool {
        let mut buf = [0u8; 4096];
        let n = match self.status.read(&mut buf) {
            Ok(0) => return false,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return true,
            Err(_) => return false,
        };
        self.status_buf.extend_from_slice(&buf[..n]);
        while let Some(pos) = self.status_buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.status_buf.drain(..=pos).collect();
            let Ok(event) = serde_json::from_slice::<InitEvent>(&line) else {
                continue;
            };
            tracing::debug!(?event, "init");
            match event {
                InitEvent::Started { enforcement, .. } => self.enforcement = enforcement,
                InitEvent::Stopped { .. } => self.suspend(),
                InitEvent::AllGone => self.all_gone = true,
                other => self.final_event = Some(other),
            }
        }
        true
    }

    /// Returns false at end of file.
    fn read_stdin(&mut self) -> bool {
        let mut buf = [0u8; 4096];
        match nix::unistd::read(io::stdin().as_fd(), &mut buf) {
            Ok(0) => false,
            Ok(n) => {
                self.pending_input.extend_from_slice(&buf[..n]);
                true
            }
            Err(nix::Error::EINTR) | Err(nix::Error::EAGAIN) => true,
            Err(_) => false,
        }
    }

    /// Moves output to stdout and pending keystrokes to the command. Returns false once the
    /// command's side of the terminal is closed for good.
    fn pump_master(&mut self) -> bool {
        let Some(master) = &self.master else {
            return false;
        };
        if !self.pending_input.is_empty() {
            match nix::unistd::write(master, &self.pending_input) {
                Ok(n) => {
                    self.pending_input.drain(..n);
                }
                Err(nix::Error::EAGAIN) | Err(nix::Error::EINTR) => {}
                Err(_) => self.pending_input.clear(),
            }
        }
        let mut buf = [0u8; 16384];
        match nix::unistd::read(master.as_fd(), &mut buf) {
            Ok(0) => false,
            Ok(n) => {
                write_all_fd(io::stdout().as_fd(), &buf[..n]);
                true
            }
            Err(nix::Error::EAGAIN) | Err(nix::Error::EINTR) => true,
            // EIO: every holder of the command's terminal has closed it.
            Err(_) => false,
        }
    }

    fn outcome(self) -> Outcome {
        match self.final_event {
            Some(InitEvent::Exited { code }) => Outcome::Exited {
                exit_code: code,
                command_exit_code: code,
            },
            Some(InitEvent::Signaled { signal }) => Outcome::Signaled {
                exit_code: 128 + signal,
                signal,
            },
            Some(InitEvent::ExecFailed {
                step,
                errno,
                message,
            }) => Outcome::from_exec_failure(&step, errno, &message),
            Some(InitEvent::SetupFailed { message }) => {
                Outcome::failed(format!("building the sandbox: {message}"))
            }
            _ => Outcome::failed(format!(
                "the sandbox init ended without reporting the command's status ({})",
                describe_exit(self.init_exit)
            )),
        }
    }
}

/// How the init ended, in words.
fn describe_exit(status: Option<WaitStatus>) -> String {
    match status {
        Some(WaitStatus::Exited(_, code)) => format!("it exited with {code}"),
        Some(WaitStatus::Signaled(_, signal, core)) => format!(
            "it was killed by {}{}",
            signal.as_str(),
            if core { ", core dumped" } else { "" }
        ),
        Some(_) => "it stopped in an unexpected state".into(),
        None => "its exit was not seen".into(),
    }
}

fn write_all_fd(fd: BorrowedFd<'_>, mut data: &[u8]) {
    while !data.is_empty() {
        match nix::unistd::write(fd, data) {
            Ok(n) => data = &data[n..],
            Err(nix::Error::EINTR) => {}
            Err(nix::Error::EAGAIN) => {
                let mut fds = [PollFd::new(fd, PollFlags::POLLOUT)];
                let _ = poll(&mut fds, PollTimeout::NONE);
            }
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn how_the_init_ended_is_said_in_words() {
        let pid = Pid::from_raw(1);
        assert_eq!(
            describe_exit(Some(WaitStatus::Signaled(pid, Signal::SIGKILL, false))),
            "it was killed by SIGKILL"
        );
        assert_eq!(
            describe_exit(Some(WaitStatus::Exited(pid, 3))),
            "it exited with 3"
        );
        assert_eq!(describe_exit(None), "its exit was not seen");
    }
}

#[cfg(test)]
mod ignored_signal_tests {
    use super::*;

    #[test]
    fn sigign_is_read_bit_by_signal() {
        // nohup: SIGHUP (1) ignored; and SIGPIPE (13), as Rust's runtime sets it.
        let status = "Name:\tstepproof-run\nSigBlk:\t0000000000000000\nSigIgn:\t0000000000001001\nSigCgt:\t0\n";
        let mask = ignored_signals(status);
        assert_eq!(mask, 0x1001);
        assert!(mask & (1 << (libc::SIGHUP - 1)) != 0);
        assert!(mask & (1 << (libc::SIGTERM - 1)) == 0);
        assert_eq!(ignored_signals("Name:\tx\n"), 0);
    }
}
