//! The sandbox's pid 1 and the start of the command. The init builds the view, becomes the
//! sandbox user, starts the command, reaps orphans, forwards signals, reports to the
//! supervisor, and takes everything down with it when the supervisor goes away.

use crate::exit::ExitCode;
use crate::sandbox::caps;
use crate::sandbox::channels::InitEnds;
use crate::sandbox::events::InitEvent;
use crate::sandbox::mounts::{self, IdmappedTrees};
use crate::sandbox::plan::env::GATEWAY_SOCKET;
use crate::sandbox::plan::{IdentityMode, Isolation, SandboxPlan};
use crate::sandbox::report::CommandEnforcement;
use crate::sandbox::terminal::open_terminal_inside;
use crate::sandbox::{landlock, rlimits, seccomp};
use crate::sys;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{Signal, kill};
use nix::sys::signalfd::{SfdFlags, SigSet, SignalFd};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{Gid, Pid, Uid};
use std::ffi::CString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Everything the init needs, handed over across the clone.
pub struct InitArgs<'a> {
    pub plan: &'a SandboxPlan,
    pub argv: Vec<CString>,
    pub envp: Vec<CString>,
    /// The init's ends of the channels to the supervisor.
    pub channels: InitEnds,
    pub idmapped: IdmappedTrees,
    /// Descriptors of host paths the plan binds (`FromSupervisor`), in order.
    pub handed: crate::sandbox::mounts::SupervisorPaths,
    /// The run's trust files, for the plan's `TrustFiles` (names relative to it, contents).
    pub trust: Vec<(std::path::PathBuf, String)>,
    /// The signals the supervisor blocked; the init takes them through a signalfd.
    pub signals: SigSet,
}

#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("setting the hostname: {0}")]
    Hostname(nix::Error),
    #[error("creating the network namespace or bringing up its loopback: {0}")]
    Loopback(std::io::Error),
    #[error(transparent)]
    Mount(#[from] mounts::MountError),
    #[error(transparent)]
    Caps(#[from] caps::CapsError),
    #[error("becoming the sandbox user ({step}): {source}")]
    Identity {
        step: &'static str,
        source: std::io::Error,
    },
    #[error("{step}: {source}")]
    Process {
        step: &'static str,
        source: std::io::Error,
    },
}

fn report(status: &mut File, event: &InitEvent) {
    if let Ok(mut line) = serde_json::to_vec(event) {
        line.push(b'\n');
        let _ = status.write_all(&line);
    }
}

/// The init's whole life. Returns its exit code (the supervisor reads the real outcome from the
/// status pipe).
pub fn run_init(args: InitArgs<'_>) -> i32 {
    let InitArgs {
        plan,
        argv,
        envp,
        mut channels,
        idmapped,
        handed,
        trust,
        signals,
    } = args;
    let mut status = File::from(channels.status);
    // The set-up, in order, up to the command's start; its first failure is reported below, in
    // one place.
    let started = (|| -> Result<_, NotStarted> {
        enter_sandbox(
            plan,
            idmapped,
            handed,
            &trust,
            channels.network_namespace.take(),
            channels.proxy.take(),
        )
        .map_err(|e| setup_failed(e.to_string()))?;
        let signals =
            SignalFd::with_flags(&signals, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
                .map_err(|e| setup_failed(format!("creating the init's signalfd: {e}")))?;
        if let Some(channel) = &channels.gateway {
            listen_for_gateway(channel).map_err(|e| {
                setup_failed(format!(
                    "opening the credential gateway's socket {GATEWAY_SOCKET}: {e}"
                ))
            })?;
        }
        // A session of the sandbox's own: the command's process group lives in it, with the
        // init as its parent in another group, so the group is not orphaned and Ctrl-Z can
        // stop it.
        nix::unistd::setsid().map_err(|e| setup_failed(format!("setsid in the init: {e}")))?;
        let tty = channels
            .terminal
            .take()
            .map(open_terminal_inside)
            .transpose()
            .map_err(|e| setup_failed(format!("creating the command's terminal: {e}")))?;
        let filters = receive_seccomp(channels.seccomp).ok_or_else(|| {
            setup_failed(
                "no seccomp filter came from the supervisor: refusing to start the command without it".into(),
            )
        })?;
        let (command, enforcement) = start_command(plan, &argv, &envp, tty, &filters)?;
        Ok((command, enforcement, signals))
    })();
    let (command, enforcement, signals) = match started {
        Ok(started) => started,
        Err(failure) => {
            report(&mut status, &failure.into());
            return ExitCode::HostFailure.code();
        }
    };
    tracing::debug!("init: command started");
    report(
        &mut status,
        &InitEvent::Started {
            pid: command.as_raw(),
            enforcement,
        },
    );
    supervise(
        plan.isolation,
        command,
        &signals,
        &channels.lifeline,
        &mut status,
    );
    0
}

/// Why the command was not started: a step of the init's set-up, or of the command's own start
/// (reported as `SetupFailed` and `ExecFailed`).
enum NotStarted {
    Setup(String),
    Exec(ExecFailure),
}

fn setup_failed(message: String) -> NotStarted {
    NotStarted::Setup(message)
}

impl From<ExecFailure> for NotStarted {
    fn from(failure: ExecFailure) -> NotStarted {
        NotStarted::Exec(failure)
    }
}

impl From<NotStarted> for InitEvent {
    fn from(failure: NotStarted) -> InitEvent {
        match failure {
            NotStarted::Setup(message) => InitEvent::SetupFailed { message },
            NotStarted::Exec(ExecFailure {
                step,
                errno,
                message,
            }) => InitEvent::ExecFailed {
                step,
                errno,
                message,
            },
        }
    }
}

/// The seccomp filters the supervisor sends, read to the end of the channel (it closes its end
/// after writing them, or unwritten when it has none).
fn receive_seccomp(channel: OwnedFd) -> Option<Vec<seccompiler::BpfProgram>> {
    let mut encoded = Vec::new();
    File::from(channel)
        .read_to_end(&mut encoded)
        .ok()
        .and_then(|_| seccomp::decode_filters(&encoded))
}

/// The one ordered set-up list of the sandbox itself (the supervisor has already cloned us into
/// new user, mount, pid, ipc, uts (and net) namespaces and written our id maps).
fn enter_sandbox(
    plan: &SandboxPlan,
    idmapped: IdmappedTrees,
    handed: crate::sandbox::mounts::SupervisorPaths,
    trust: &[(std::path::PathBuf, String)],
    netns: Option<OwnedFd>,
    proxy_channel: Option<OwnedFd>,
) -> Result<(), SetupError> {
    if plan.isolation == Isolation::LandlockSeccompOnly {
        return enter_degraded_sandbox(plan);
    }
    // The host's name is nobody's business inside.
    nix::unistd::sethostname(&plan.hostname).map_err(SetupError::Hostname)?;
    // Become the sandbox user before building the view: files the set-up creates (mount points,
    // stand-ins) must belong to an id that exists in this namespace. Capabilities in the new
    // namespace survive the change (uid 0 is not mapped here, so no "root → non-root" clearing).
    become_sandbox_user(plan)?;
    // The file system view, ending with pivot_root and the old root detached.
    mounts::build_view(plan, idmapped, handed, trust)?;
    tracing::debug!("init: view built");
    // Join the network namespace the seed's maker made meanwhile (setns needs CAP_SYS_ADMIN,
    // which goes below), then open the proxy's port on its loopback.
    if let Some(channel) = netns {
        join_network(&channel)?;
    }
    tracing::debug!("init: network joined");
    if let Some(channel) = proxy_channel {
        listen_for_proxy(plan, &channel).map_err(|source| SetupError::Process {
            step: "opening the proxy's port inside the sandbox",
            source,
        })?;
    }
    // Emptying the bounding set needs CAP_SETPCAP, which the next step gives up.
    caps::drop_bounding_set()?;
    caps::clear_all_sets()?;
    protect_the_init()
}

/// No namespaces: nothing to build. The init becomes the subreaper of everything the command
/// starts (it is not pid 1 here) and, in the root fallback, gives up every capability.
fn enter_degraded_sandbox(plan: &SandboxPlan) -> Result<(), SetupError> {
    if plan.identity.mode == IdentityMode::RootFallback {
        caps::drop_bounding_set()?;
        caps::clear_all_sets()?;
    }
    nix::sys::prctl::set_child_subreaper(true).map_err(|e| SetupError::Process {
        step: "PR_SET_CHILD_SUBREAPER",
        source: e.into(),
    })?;
    protect_the_init()
}

fn protect_the_init() -> Result<(), SetupError> {
    // The uid change reset these two: no ptrace or /proc/1/mem of the init, and death with the
    // supervisor (the lifeline pipe covers the window before this call).
    sys::set_not_dumpable().map_err(|source| SetupError::Process {
        step: "PR_SET_DUMPABLE",
        source,
    })?;
    sys::set_parent_death_signal(libc::SIGKILL).map_err(|source| SetupError::Process {
        step: "PR_SET_PDEATHSIG",
        source,
    })?;
    Ok(())
}

/// Binds the gateway's socket on the sandbox's private /run (after the view is built) and hands
/// it to the supervisor.
fn listen_for_gateway(channel: &OwnedFd) -> std::io::Result<()> {
    let path = Path::new(GATEWAY_SOCKET);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let listener = std::os::unix::net::UnixListener::bind(path)?;
    crate::sandbox::fdpass::send_fd(channel, &listener)
}

/// Listens on the proxy port on the sandbox's loopback and hands the socket to the supervisor,
/// which serves it from the host's network namespace.
fn listen_for_proxy(plan: &SandboxPlan, channel: &OwnedFd) -> std::io::Result<()> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", plan.proxy_port))?;
    crate::sandbox::fdpass::send_fd(channel, &listener)
}

/// Receives the network namespace from the supervisor and enters it. No namespace (the maker
/// failed, the supervisor is gone) stops the set-up: the command never runs on the host's
/// network when the profile asked for its own.
fn join_network(channel: &OwnedFd) -> Result<(), SetupError> {
    let netns = crate::sandbox::fdpass::receive_fd(channel)
        .map_err(SetupError::Loopback)?
        .ok_or_else(|| {
            SetupError::Loopback(std::io::Error::other(
                "the supervisor sent no network namespace",
            ))
        })?;
    nix::sched::setns(netns, nix::sched::CloneFlags::CLONE_NEWNET)
        .map_err(|e| SetupError::Loopback(e.into()))
}

fn become_sandbox_user(plan: &SandboxPlan) -> Result<(), SetupError> {
    let identity = &plan.identity;
    let fail = |step| {
        move |e: nix::Error| SetupError::Identity {
            step,
            source: e.into(),
        }
    };
    if identity.mode != IdentityMode::Caller {
        // Invoked as root: root's supplementary groups (and with them, e.g., the docker group)
        // must not come along. An unprivileged caller cannot drop them (setgroups is denied).
        sys::clear_supplementary_groups().map_err(|source| SetupError::Identity {
            step: "setgroups",
            source,
        })?;
    }
    let gid = Gid::from_raw(identity.inside_gid);
    let uid = Uid::from_raw(identity.inside_uid);
    nix::unistd::setresgid(gid, gid, gid).map_err(fail("setresgid"))?;
    nix::unistd::setresuid(uid, uid, uid).map_err(fail("setresuid"))?;
    Ok(())
}

/// A step of the command's set-up that failed before (or at) `execve`: its name, the errno the
/// kernel gave (0 when the failure was not a system call's), and the error's own words.
#[derive(Debug)]
pub(crate) struct ExecFailure {
    pub step: String,
    pub errno: i32,
    pub message: String,
}

impl ExecFailure {
    fn new(step: &str, error: &(dyn std::error::Error + 'static)) -> ExecFailure {
        ExecFailure {
            step: step.to_string(),
            errno: errno_of(error),
            message: error.to_string(),
        }
    }
}

/// The errno somewhere in an error's chain of sources (an `io::Error` or a `nix::Error`), or 0.
pub(crate) fn errno_of(error: &(dyn std::error::Error + 'static)) -> i32 {
    let mut current = Some(error);
    while let Some(e) = current {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if let Some(errno) = io.raw_os_error() {
                return errno;
            }
            // A wrapped error is the io::Error's payload, not its `source()`.
            if let Some(inner) = io.get_ref() {
                current = Some(inner);
                continue;
            }
        }
        if let Some(errno) = e.downcast_ref::<nix::Error>() {
            return *errno as i32;
        }
        current = e.source();
    }
    0
}

/// Forks the command. The child runs `exec_command` and never returns. Over a close-on-exec
/// pipe it sends what it enforced (`R` + JSON line) and, on failure, the step and errno (`E`);
/// success is known exactly when the pipe closes without an `E` record.
fn start_command(
    plan: &SandboxPlan,
    argv: &[CString],
    envp: &[CString],
    tty: Option<OwnedFd>,
    seccomp: &[seccompiler::BpfProgram],
) -> Result<(Pid, Option<CommandEnforcement>), ExecFailure> {
    let io_fail = |step: &str, e: std::io::Error| ExecFailure::new(step, &e);
    let (err_read, err_write) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| io_fail("pipe2", e.into()))?;
    // The child shares the init's memory until it execs (see `spawn_sharing_memory`): it gets
    // references only.
    let tty_fd = tty.as_ref().map(|fd| fd.as_fd());
    let spawned = sys::spawn_sharing_memory(|| {
        let failure = exec_command(plan, argv, envp, tty_fd, seccomp, &err_write);
        let mut message = vec![b'E'];
        message.extend_from_slice(&failure.errno.to_ne_bytes());
        message.extend_from_slice(failure.step.as_bytes());
        message.push(0);
        message.extend_from_slice(failure.message.as_bytes());
        write_fully(&err_write, &message);
        ExitCode::NotFound.code()
    });
    match spawned.map_err(|e| io_fail("clone", e)) {
        Err(e) => Err(e),
        Ok(child) => {
            drop(err_write);
            // Also from this side, so neither order of the two processes leaves a window.
            let _ = nix::unistd::setpgid(Pid::from_raw(child), Pid::from_raw(child));
            drop(tty);
            let mut buf = Vec::new();
            let _ = File::from(err_read).read_to_end(&mut buf);
            let mut rest = buf.as_slice();
            let mut enforcement = None;
            if let Some(record) = rest.strip_prefix(b"R") {
                let end = record
                    .iter()
                    .position(|b| *b == b'\n')
                    .unwrap_or(record.len());
                enforcement = serde_json::from_slice(&record[..end]).ok();
                rest = record.get(end + 1..).unwrap_or_default();
            }
            let Some(failure) = rest.strip_prefix(b"E").filter(|f| f.len() >= 4) else {
                return Ok((Pid::from_raw(child), enforcement));
            };
            let _ = waitpid(Pid::from_raw(child), None);
            let errno = i32::from_ne_bytes([failure[0], failure[1], failure[2], failure[3]]);
            let text = String::from_utf8_lossy(&failure[4..]).into_owned();
            let (step, message) = text.split_once('\0').unwrap_or((&text, ""));
            Err(ExecFailure {
                step: step.to_string(),
                errno,
                message: message.to_string(),
            })
        }
    }
}

/// Writes all of `data` to a pipe (the command's child reports through it).
fn write_fully(fd: &OwnedFd, mut data: &[u8]) {
    while !data.is_empty() {
        match nix::unistd::write(fd, data) {
            Ok(0) => return,
            Ok(n) => data = &data[n..],
            Err(nix::Error::EINTR) => {}
            Err(_) => return,
        }
    }
}

/// In the command's child (sharing the init's memory until `execve`): its own set-up, in order,
/// then `execve`. Returns only on failure, with the step that failed and its errno.
fn exec_command(
    plan: &SandboxPlan,
    argv: &[CString],
    envp: &[CString],
    tty: Option<BorrowedFd<'_>>,
    seccomp: &[seccompiler::BpfProgram],
    err_pipe: &OwnedFd,
) -> ExecFailure {
    macro_rules! step {
        ($name:expr, $e:expr) => {
            match $e {
                Ok(value) => value,
                Err(e) => return ExecFailure::new($name, &e),
            }
        };
    }
    // The command leads a process group of its own in the init's session (which has no
    // terminal in common with the user's: no TIOCSTI into it). It takes the foreground of its
    // terminal while SIGTTOU is still blocked.
    step!(
        "setpgid",
        nix::unistd::setpgid(Pid::from_raw(0), Pid::from_raw(0))
    );
    if let Some(tty) = tty {
        step!("tcsetpgrp", sys::set_foreground_group(tty));
        step!("dup2", sys::dup_onto_stdio(tty));
    }
    // The supervisor's blocked signals and Rust's ignored SIGPIPE are not the command's.
    sys::reset_signals_for_exec();
    // Nothing inherited beyond stdio: not the supervisor's pipes, not the caller's descriptors.
    // Marked close-on-exec, not closed: the command's `execve` closes them, and nothing in this
    // child acts on a number closed under its owner before.
    let closed = sys::close_on_exec_except(3, err_pipe.as_fd());
    step!("close_range", closed);
    tracing::debug!("command: forked");
    step!("chdir", nix::unistd::chdir(&plan.cwd));
    // Limits before anything else runs under them.
    let limits = step!(
        "setting resource limits",
        rlimits::apply_limits(&plan.limits)
    );
    // No key of the caller's session keyring is reachable.
    step!(
        "joining a new session keyring",
        sys::join_new_session_keyring()
    );
    // Nothing the command executes can gain privileges (setuid bits, file capabilities).
    step!("PR_SET_NO_NEW_PRIVS", sys::set_no_new_privs());
    // Landlock mirrors the view (and scopes signals and abstract sockets to this domain). It is
    // applied here, in the command, so that the init stays outside the domain.
    let landlock = step!("Landlock", landlock::apply_landlock(&plan.landlock));
    // The init gave up its capabilities before forking; make sure none survived.
    let bounding_emptied =
        plan.isolation == Isolation::Namespaces || plan.identity.mode == IdentityMode::RootFallback;
    if !caps::holds_none(bounding_emptied) {
        step!(
            "checking capabilities",
            Err::<(), _>(std::io::Error::other("a capability survived the drop"))
        );
    }
    let enforcement = CommandEnforcement {
        landlock,
        limits,
        no_new_privs: true,
        capabilities_empty: true,
    };
    if let Ok(json) = serde_json::to_vec(&enforcement) {
        let mut record = vec![b'R'];
        record.extend_from_slice(&json);
        record.push(b'\n');
        step!(
            "reporting enforcement",
            nix::unistd::write(err_pipe, &record)
        );
    }
    // seccomp last: from here on the denied system calls are gone, execve stays allowed.
    step!("seccomp", seccomp::apply_seccomp_on_current_thread(seccomp));
    ExecFailure::new("execve", &exec_in_path(argv, envp))
}

/// `execvpe` with the sandbox's own PATH (glibc's would search the supervisor's).
fn exec_in_path(argv: &[CString], envp: &[CString]) -> std::io::Error {
    let name = argv[0].as_bytes();
    if name.contains(&b'/') {
        return sys::execve(&argv[0], argv, envp);
    }
    let path = envp
        .iter()
        .find_map(|e| e.as_bytes().strip_prefix(b"PATH="))
        .unwrap_or(b"/usr/bin:/bin");
    let mut denied = None;
    for dir in path.split(|b| *b == b':') {
        let dir = if dir.is_empty() { b".".as_slice() } else { dir };
        let candidate =
            Path::new(std::ffi::OsStr::from_bytes(dir)).join(std::ffi::OsStr::from_bytes(name));
        let Ok(candidate) = CString::new(candidate.as_os_str().as_bytes()) else {
            continue;
        };
        let error = sys::execve(&candidate, argv, envp);
        match error.raw_os_error() {
            Some(libc::EACCES) => denied = Some(error),
            Some(libc::ENOENT) | Some(libc::ENOTDIR) => {}
            _ => return error,
        }
    }
    denied.unwrap_or_else(|| std::io::Error::from_raw_os_error(libc::ENOENT))
}

/// The init's loop: reap, forward, report; end the sandbox when the command ends or the
/// supervisor goes away.
fn supervise(
    isolation: Isolation,
    command: Pid,
    signals: &SignalFd,
    lifeline: &OwnedFd,
    status: &mut File,
) {
    loop {
        let mut fds = [
            PollFd::new(signals.as_fd(), PollFlags::POLLIN),
            PollFd::new(lifeline.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {}
            Err(nix::Error::EINTR) => continue,
            Err(_) => break,
        }
        if fds[1].any().unwrap_or(true) {
            // The supervisor is gone, or ends the run: nothing inside may outlive it. How the
            // command ended (killed here, most likely) is reported for a supervisor still
            // reading.
            if let Some(last) = kill_everything(isolation, command) {
                report(status, &last);
            }
            report(status, &InitEvent::AllGone);
            return;
        }
        while let Ok(Some(info)) = signals.read_signal() {
            let sig = info.ssi_signo as i32;
            if sig == libc::SIGCHLD {
                if let Some(last) = reap(command, status) {
                    report(status, &last);
                    let _ = kill_everything(isolation, command);
                    // Nothing of the sandbox runs any more: the supervisor need not wait for
                    // this process's own exit (the namespaces' teardown happens in it).
                    report(status, &InitEvent::AllGone);
                    return;
                }
            } else if let Ok(signal) = Signal::try_from(sig) {
                // The command leads its own process group (setsid); reach all of it.
                let _ = kill(Pid::from_raw(-command.as_raw()), signal);
            }
        }
    }
    let _ = kill_everything(isolation, command);
}

/// Reaps every child that changed state; returns the command's final event once it ended.
fn reap(command: Pid, status: &mut File) -> Option<InitEvent> {
    let mut last = None;
    loop {
        match waitpid(None, Some(WaitPidFlag::WNOHANG | WaitPidFlag::WUNTRACED)) {
            Ok(WaitStatus::Exited(pid, code)) if pid == command => {
                last = Some(InitEvent::Exited { code });
            }
            Ok(WaitStatus::Signaled(pid, signal, _)) if pid == command => {
                last = Some(InitEvent::Signaled {
                    signal: signal as i32,
                });
            }
            Ok(WaitStatus::Stopped(pid, signal)) if pid == command => {
                report(
                    status,
                    &InitEvent::Stopped {
                        signal: signal as i32,
                    },
                );
            }
            Ok(WaitStatus::StillAlive) | Err(_) => return last,
            Ok(_) => {}
        }
    }
}

/// As pid 1, `kill(-1)` reaches every other process of the sandbox. Without a pid namespace
/// the init is a subreaper instead: it kills the command's group and then whatever children it
/// has (orphans come to it) until none is left. Returns how the command ended if it was still
/// there to be reaped.
fn kill_everything(isolation: Isolation, command: Pid) -> Option<InitEvent> {
    let mut last = None;
    let mut note = |status: WaitStatus| match status {
        WaitStatus::Exited(pid, code) if pid == command => {
            last = Some(InitEvent::Exited { code });
        }
        WaitStatus::Signaled(pid, signal, _) if pid == command => {
            last = Some(InitEvent::Signaled {
                signal: signal as i32,
            });
        }
        _ => {}
    };
    if isolation == Isolation::Namespaces {
        let _ = kill(Pid::from_raw(-1), Signal::SIGKILL);
        while let Ok(status) = waitpid(None, None) {
            note(status);
        }
        return last;
    }
    let _ = kill(Pid::from_raw(-command.as_raw()), Signal::SIGKILL);
    loop {
        for child in own_children() {
            let _ = kill(Pid::from_raw(-child), Signal::SIGKILL);
            let _ = kill(Pid::from_raw(child), Signal::SIGKILL);
        }
        match waitpid(None, None) {
            Ok(status) => note(status),
            Err(_) => break,
        }
    }
    last
}

/// The init's children, from /proc (the init is single-threaded, so its own task lists them all).
fn own_children() -> Vec<i32> {
    let me = std::process::id();
    std::fs::read_to_string(format!("/proc/{me}/task/{me}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

#[cfg(test)]
mod exec_failure_tests {
    use super::*;

    /// A failed set-up step reports the kernel's errno, wherever it sits in the error's chain
    /// (the step's own words kept); 0 only for failures that were no system call's.
    #[test]
    fn the_errno_survives_the_step() {
        let io = std::io::Error::from_raw_os_error(libc::EACCES);
        assert_eq!(ExecFailure::new("chdir", &io).errno, libc::EACCES);
        let limits = rlimits::LimitsError::Set {
            name: "RLIMIT_NOFILE",
            value: 1,
            source: nix::Error::EPERM,
        };
        let failure = ExecFailure::new("setting resource limits", &limits);
        assert_eq!(failure.errno, libc::EPERM);
        assert!(failure.message.contains("RLIMIT_NOFILE"), "{failure:?}");
        let nested = std::io::Error::other(std::io::Error::from_raw_os_error(libc::ENOENT));
        assert_eq!(ExecFailure::new("x", &nested).errno, libc::ENOENT);
        let plain = std::io::Error::other("a capability survived the drop");
        assert_eq!(ExecFailure::new("checking capabilities", &plain).errno, 0);
    }
}
