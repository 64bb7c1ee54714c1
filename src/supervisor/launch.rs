//! The supervisor's side of a run: it clones the sandbox init into new namespaces, maps its ids
//! from outside, relays the terminal, forwards signals and job control, and turns what the init
//! reports into StepProof's exit code. It never enters the sandbox.

use crate::audit::sink::AuditSink;
use crate::profile::NetworkMode;
use crate::sandbox::fdpass;
use crate::sandbox::init::{InitArgs, run_init};
use crate::sandbox::mounts::IdmappedTrees;
use crate::sandbox::namespaces::{self, USERNS_HINT};
use crate::sandbox::plan::{
    Access, IdentityMode, Isolation, MountOp, ROOT_MODE_OUTSIDE_ID, SandboxPlan,
};
use crate::sandbox::report::{AssuranceReport, CommandEnforcement};
use crate::sandbox::seccomp;
use crate::sandbox::sys::{self, MountFlags, ParentOnlyFds};
use crate::supervisor::outcome::{EXIT_TIMEOUT, InitEvent, Outcome};
use crate::supervisor::pty::{RawTerminal, TerminalRequest, copy_window_size, receive_terminal};
use crate::supervisor::{agent_config_dir, gateway, proxy};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{Signal, kill};
use nix::sys::signalfd::{SfdFlags, SigSet, SignalFd};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use std::ffi::{CString, OsString};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::OnceLock;

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("the command line contains a NUL byte")]
    NulInArgument,
    #[error("{step}: {source}{hint}")]
    Os {
        step: String,
        source: io::Error,
        hint: &'static str,
    },
    #[error(transparent)]
    Namespace(#[from] namespaces::NamespaceError),
    #[error("putting the sandbox in its cgroup: {0} (run `stepproof doctor`)")]
    Cgroup(#[from] crate::supervisor::cgroup::CgroupError),
}

fn os(step: impl Into<String>) -> impl FnOnce(io::Error) -> LaunchError {
    let step = step.into();
    move |source| LaunchError::Os {
        step,
        source,
        hint: "",
    }
}

fn nix_os(step: impl Into<String>) -> impl FnOnce(nix::Error) -> LaunchError {
    let f = os(step);
    move |e| f(e.into())
}

/// Signals the supervisor handles itself (through a signalfd) instead of dying of them.
fn handled_signals() -> SigSet {
    let mut set = SigSet::empty();
    for sig in [
        Signal::SIGCHLD,
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGQUIT,
        Signal::SIGUSR1,
        Signal::SIGUSR2,
        Signal::SIGWINCH,
        Signal::SIGTSTP,
        Signal::SIGTTIN,
        Signal::SIGTTOU,
        Signal::SIGCONT,
        Signal::SIGALRM,
    ] {
        set.add(sig);
    }
    set
}

/// The user namespace idmapped mounts borrow their mapping from (host root → the sandbox
/// user's host id). Creating one costs a clone and a wait, so a run makes it once and uses it
/// for the capability check and for every tree.
fn idmap_userns() -> Result<&'static OwnedFd, LaunchError> {
    static USERNS: OnceLock<Result<OwnedFd, String>> = OnceLock::new();
    USERNS
        .get_or_init(|| {
            namespaces::root_to_sandbox_userns(ROOT_MODE_OUTSIDE_ID).map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|message| LaunchError::Os {
            step: "creating the idmap user namespace".into(),
            source: io::Error::other(message.clone()),
            hint: USERNS_HINT,
        })
}

/// The namespace seed started early (see [`start_namespace_seed`]), waiting for the launch.
static EARLY_SEED: std::sync::Mutex<Option<(bool, sys::seed::NamespaceSeed)>> =
    std::sync::Mutex::new(None);

/// Starts the sandbox's user namespace and its network namespace first thing, before the
/// profile is read: the kernel builds them (the network namespace costs about half a
/// millisecond) on the other core while this process reads the profile and builds the plan. A
/// profile that shares the host's network gets a new seed without one at launch; a run that
/// ends before its launch stops the seed. A failure here is not reported: the launch tries
/// again and reports it then (or runs without namespaces where the profile allows that).
pub fn start_namespace_seed() {
    let new_net = true;
    if let Ok(seed) = sys::seed::NamespaceSeed::spawn(new_net)
        && let Ok(mut slot) = EARLY_SEED.lock()
    {
        *slot = Some((new_net, seed));
    }
}

/// The early seed if it fits, else a new one.
fn take_seed(new_net: bool) -> io::Result<sys::seed::NamespaceSeed> {
    let early = EARLY_SEED.lock().ok().and_then(|mut slot| slot.take());
    match early {
        Some((net, seed)) if net == new_net => Ok(seed),
        _ => sys::seed::NamespaceSeed::spawn(new_net),
    }
}

/// Reaps every child of this process that has already exited (the namespace seed and its
/// network maker, the idmap user namespace's holder, usually the sandbox init), without
/// waiting for any: called just before `stepproof-run` exits, so that they are not left as
/// zombies for a pid 1 that might not reap (as in some containers).
pub fn reap_finished_children() {
    while let Ok(status) = waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
        if status == WaitStatus::StillAlive {
            break;
        }
    }
}

/// Detached idmapped copies of the trees the plan binds through an id mapping (root
/// invocations), created here because only host root may create them.
pub fn prepare_idmapped_trees(plan: &SandboxPlan) -> Result<IdmappedTrees, LaunchError> {
    let mut trees = IdmappedTrees::new();
    for op in &plan.mounts {
        let MountOp::IdmappedBind { src, access, .. } = op else {
            continue;
        };
        let userns = idmap_userns()?;
        let tree = sys::open_tree_clone(src).map_err(os(format!("open_tree {}", src.display())))?;
        let flags = MountFlags {
            read_only: *access == Access::ReadOnly,
            nosuid: true,
            nodev: true,
        };
        sys::idmap_detached_tree(&tree, userns, flags).map_err(|source| LaunchError::Os {
            step: format!("idmapping {}", src.display()),
            source,
            hint: " (this file system does not support idmapped mounts, which a root invocation needs to run the command as an unprivileged user; set process.allow_root_fallback = true to run as uid 0 without capabilities instead, or run stepproof-run as a normal user)",
        })?;
        trees.push_back(tree);
    }
    Ok(trees)
}

/// Whether idmapped mounts work for `path` here (asked only when invoked as root).
pub fn idmapped_mounts_work(path: &std::path::Path) -> bool {
    let Ok(userns) = idmap_userns() else {
        return false;
    };
    let Ok(tree) = sys::open_tree_clone(path) else {
        return false;
    };
    sys::idmap_detached_tree(&tree, userns, MountFlags::default()).is_ok()
}

/// Serves the allow-list proxy on the socket the init opened inside; every connection attempt
/// goes to the audit log.
fn start_proxy(
    listener: std::net::TcpListener,
    allow: crate::profile::allow::CompiledAllowList,
    audit: Option<&AuditSink>,
) -> (proxy::ProxyHandle, std::thread::JoinHandle<()>) {
    let (tx, rx) = std::sync::mpsc::channel::<proxy::ConnectionRecord>();
    let handle = proxy::serve(
        listener,
        allow,
        std::sync::Arc::new(proxy::SystemResolver),
        tx,
    );
    let drain = drain_records("network", rx, audit);
    (handle, drain)
}

/// Writes every record of a proxy or gateway to the audit log, from a thread of its own.
fn drain_records(
    kind: &'static str,
    rx: std::sync::mpsc::Receiver<proxy::ConnectionRecord>,
    audit: Option<&AuditSink>,
) -> std::thread::JoinHandle<()> {
    let audit = audit.map(|a| a.clone_handle());
    std::thread::spawn(move || {
        for record in rx {
            tracing::info!(
                host = %record.host,
                port = record.port,
                allowed = record.allowed,
                rule = %record.rule,
                "{kind}"
            );
            if let Some(audit) = &audit {
                audit.record("supervisor", kind, &record);
            }
        }
    })
}

/// Serves the credential gateway on the socket the init made on the sandbox's /run.
fn start_gateway(
    listener: std::os::unix::net::UnixListener,
    upstream: gateway::Upstream,
    credential: gateway::Credential,
    audit: Option<&AuditSink>,
) -> (gateway::GatewayHandle, std::thread::JoinHandle<()>) {
    let (tx, rx) = std::sync::mpsc::channel::<proxy::ConnectionRecord>();
    let handle = gateway::serve_gateway(listener, upstream, credential, tx);
    (handle, drain_records("gateway", rx, audit))
}

/// The per-run scratch directory a plan names (hosts without a mount namespace, where /tmp is
/// the host's): the plan only describes it; the launch creates it, mode 0700 and never over a
/// name that exists already (one taken beforehand stops the launch), and it is removed with
/// everything in it when this is dropped, after the run or on the way out of a failed launch.
#[derive(Debug)]
pub struct ScratchDir(std::path::PathBuf);

impl ScratchDir {
    /// Creates the directory `plan.scratch_dir` names, if it names one.
    pub fn create(plan: &SandboxPlan) -> Result<Option<ScratchDir>, LaunchError> {
        use std::os::unix::fs::DirBuilderExt;
        let Some(path) = &plan.scratch_dir else {
            return Ok(None);
        };
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(path)
            .map_err(|source| LaunchError::Os {
                step: format!("creating the per-run scratch directory {}", path.display()),
                source,
                hint: "",
            })?;
        Ok(Some(ScratchDir(path.clone())))
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// How a run ended, and what was enforced while it ran.
pub struct RunResult {
    pub outcome: Outcome,
    pub report: Option<AssuranceReport>,
    /// What arrived on the hook's socket (profiles with a hook).
    pub hook_records: Option<crate::audit::ReceiverCounts>,
    /// What the watcher moved to the quarantine while the run was on.
    pub moved_during_run: Vec<crate::supervisor::sweep::Finding>,
}

/// Runs `command` in the sandbox the plan describes and reports how it ended. Never panics on
/// the way out without restoring the terminal.
/// How a run is to be carried out, beyond the plan.
#[derive(Debug, Clone, Default)]
pub struct RunOptions<'a> {
    /// End the whole sandbox after this long (exit 124).
    pub timeout: Option<std::time::Duration>,
    /// Records from inside are written up to this many bytes per run.
    pub inside_max_bytes: u64,
    /// Persistence paths absent at launch (relative to the workspace) to watch while the run is
    /// on, and the quarantine to move them to (see [`crate::supervisor::watch`]).
    pub watch: Option<(Vec<std::path::PathBuf>, std::path::PathBuf)>,
    /// The run's cgroup: the init is put in it before the command is started.
    pub cgroup: Option<&'a crate::supervisor::cgroup::RunCgroup>,
}

pub fn run(
    plan: &SandboxPlan,
    command: &[OsString],
    audit: Option<&AuditSink>,
    options: &RunOptions<'_>,
) -> RunResult {
    match launch(plan, command, audit, options) {
        Ok(result) => result,
        Err(e) => RunResult {
            outcome: Outcome::failed(e.to_string()),
            report: None,
            hook_records: None,
            moved_during_run: Vec::new(),
        },
    }
}

fn launch(
    plan: &SandboxPlan,
    command: &[OsString],
    audit: Option<&AuditSink>,
    options: &RunOptions<'_>,
) -> Result<RunResult, LaunchError> {
    let argv = command
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| LaunchError::NulInArgument)?;
    let envp = plan
        .env
        .iter()
        .map(|(k, v)| CString::new(format!("{k}={v}")))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| LaunchError::NulInArgument)?;
    let idmapped = prepare_idmapped_trees(plan)?;
    // The agent's state and the hook's socket exist before the descriptors are opened.
    let hook_listener = match &plan.agent {
        Some(state) => {
            Some(
                agent_config_dir::prepare(plan, state).map_err(|e| LaunchError::Os {
                    step: "preparing the agent's state".into(),
                    source: io::Error::other(e.to_string()),
                    hint: "",
                })?,
            )
        }
        None => None,
    };
    let handed = agent_config_dir::open_handed_paths(plan).map_err(|e| LaunchError::Os {
        step: "opening what the sandbox binds from the host".into(),
        source: io::Error::other(e.to_string()),
        hint: "",
    })?;
    tracing::debug!("idmapped trees ready");

    let stdin = io::stdin();
    let stdout = io::stdout();
    let interactive = nix::unistd::isatty(stdin.as_fd()).unwrap_or(false)
        && nix::unistd::isatty(stdout.as_fd()).unwrap_or(false);
    // The command's terminal is created inside the sandbox; its master side comes back here.
    let (terminal_request, mut terminal_channel) = if interactive {
        let (ours, theirs) = nix::sys::socket::socketpair(
            nix::sys::socket::AddressFamily::Unix,
            nix::sys::socket::SockType::SeqPacket,
            None,
            nix::sys::socket::SockFlag::SOCK_CLOEXEC,
        )
        .map_err(nix_os("creating the terminal channel"))?;
        let request = TerminalRequest::from_user_terminal(stdin.as_fd(), theirs)
            .map_err(os("reading the terminal's modes and size"))?;
        (Some(request), Some(ours))
    } else {
        (None, None)
    };

    let namespaces = plan.isolation == Isolation::Namespaces;
    let (mut proxy_channel_ours, proxy_channel_theirs) =
        if namespaces && plan.network == NetworkMode::Allowlist {
            let (ours, theirs) = fdpass::channel().map_err(os("creating the proxy channel"))?;
            (Some(ours), Some(theirs))
        } else {
            (None, None)
        };
    // The gateway's upstream and credential are resolved now: a missing key stops the launch.
    let gateway_config = match &plan.gateway {
        Some(config) => {
            Some(
                gateway::from_profile(config, &plan.home).map_err(|e| LaunchError::Os {
                    step: "setting up the credential gateway".into(),
                    source: io::Error::other(e),
                    hint: "",
                })?,
            )
        }
        None => None,
    };
    let (mut gateway_channel_ours, gateway_channel_theirs) = if gateway_config.is_some() {
        let (ours, theirs) = fdpass::channel().map_err(os("creating the gateway channel"))?;
        (Some(ours), Some(theirs))
    } else {
        (None, None)
    };
    let mut allow = Some(plan.allow.compiled().clone());
    // Without a network namespace the proxy listens on the host's loopback, bound before the
    // command exists; Landlock lets the command connect to that port only.
    let host_proxy_listener = if !namespaces && plan.network == NetworkMode::Allowlist {
        Some(
            std::net::TcpListener::bind(("127.0.0.1", plan.proxy_port)).map_err(|source| {
                LaunchError::Os {
                    step: format!("listening for the proxy on 127.0.0.1:{}", plan.proxy_port),
                    source,
                    hint: " (another program uses that port: set network.proxy_port)",
                }
            })?,
        )
    } else {
        None
    };

    let signals = handled_signals();
    signals.thread_block().map_err(nix_os("blocking signals"))?;
    let mut signal_fd =
        SignalFd::with_flags(&signals, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
            .map_err(nix_os("creating a signalfd"))?;
    let pipe =
        || nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(nix_os("creating a pipe"));
    let (mut status_read, status_write) = pipe()?;
    let (lifeline_read, mut lifeline_write) = pipe()?;
    let (seccomp_read, mut seccomp_write) = pipe()?;
    // The network namespace reaches the init through this channel once the seed's network
    // maker has made it (the init joins it after building the view).
    let (mut netns_ours, netns_theirs) = if namespaces && plan.network != NetworkMode::Host {
        let (ours, theirs) = fdpass::channel().map_err(os("creating the network channel"))?;
        (Some(ours), Some(theirs))
    } else {
        (None, None)
    };

    // The init's side of everything.
    let init_signals = signals;
    let init = move || -> i32 {
        let _ = init_signals.thread_set_mask();
        run_init(InitArgs {
            plan,
            argv,
            envp,
            status: status_write,
            lifeline: lifeline_read,
            terminal: terminal_request,
            proxy_channel: proxy_channel_theirs,
            gateway_channel: gateway_channel_theirs,
            netns: netns_theirs,
            idmapped,
            handed,
            seccomp: seccomp_read,
            signals: init_signals,
        })
    };
    // This side's descriptors, which the init closes in its copy of the table first thing. Each
    // is borrowed mutably (hence the `mut` bindings) until the init is made, so the closure above
    // cannot hold one.
    let new_net = netns_ours.is_some();
    let mut ours = ParentOnlyFds::none();
    ours.add(&mut status_read);
    ours.add(&mut lifeline_write);
    ours.add(&mut seccomp_write);
    for channel in [
        &mut terminal_channel,
        &mut proxy_channel_ours,
        &mut gateway_channel_ours,
        &mut netns_ours,
    ]
    .into_iter()
    .flatten()
    {
        ours.add(channel);
    }
    ours.add(&mut signal_fd);
    let mut seed = None;
    let child = if namespaces {
        // The seed holds the sandbox's user namespace (its network maker has been making the
        // network namespace since the start); the init is cloned into it with the other
        // namespaces, after its id maps are written, so it starts with its ids in place.
        let new_seed = take_seed(new_net).map_err(|source| LaunchError::Os {
            step: "creating the sandbox's user namespace".into(),
            source,
            hint: USERNS_HINT,
        })?;
        let seed = seed.insert(new_seed);
        namespaces::write_id_maps(seed.pid(), &plan.identity)?;
        let flags = libc::CLONE_NEWNS
            | libc::CLONE_NEWPID
            | libc::CLONE_NEWIPC
            | libc::CLONE_NEWUTS
            | libc::CLONE_NEWCGROUP;
        let pid = seed
            .clone_init(flags, ours, init)
            .map_err(|source| LaunchError::Os {
                step: "creating the sandbox namespaces (clone)".into(),
                source,
                hint: USERNS_HINT,
            })?;
        Pid::from_raw(pid)
    } else {
        let child = sys::fork(ours, init).map_err(os("starting the sandbox init (fork)"))?;
        Pid::from_raw(child)
    };
    // Records from the hook, checked message by message against the hook binary's identity.
    let receiver = match (hook_listener, audit, &plan.agent) {
        (Some(listener), Some(audit), Some(state)) => {
            let check =
                crate::audit::PeerCheck::for_executable(&state.hook_binary).map_err(|source| {
                    LaunchError::Os {
                        step: format!("reading the hook binary {}", state.hook_binary.display()),
                        source,
                        hint: "",
                    }
                })?;
            Some(crate::audit::serve_hook_socket(
                listener,
                audit.clone_handle(),
                check,
                options.inside_max_bytes,
            ))
        }
        _ => None,
    };
    // Threads only from here on: nothing more is cloned from this process's memory. (The
    // watcher is not one: the event loop below looks for it.)
    let watcher = options.watch.as_ref().and_then(|(targets, quarantine)| {
        crate::supervisor::watch::Watcher::start(&plan.workspace, targets.clone(), quarantine)
    });

    tracing::debug!("sandbox cloned");
    // Into the run's cgroup before the command exists: the init reads the whole seccomp
    // channel below before it forks the command, so everything of the run is born inside.
    // Without it the channel closes unwritten and the init refuses to start the command.
    if let Some(cgroup) = options.cgroup {
        cgroup.attach(child.as_raw() as u32)?;
    }
    // Compiled here, on this core, while the init builds the view on the other; the init waits
    // for it before starting the command, and refuses to start it without one.
    let arch = seccomp::Arch::native();
    let table = seccomp::rules_for(plan.seccomp);
    let seccomp_report = match seccomp::compile_table(&table, arch) {
        Ok(filters) => {
            let _ = File::from(seccomp_write).write_all(&seccomp::encode_filters(&filters));
            Some(seccomp::report(&table, arch, &filters))
        }
        Err(e) => {
            tracing::error!("compiling the seccomp filter: {e}");
            drop(seccomp_write);
            None
        }
    };
    // The network namespace, when the maker has it. Without it the launch stops here (the init,
    // finding the channel closed, stops too): the command never gets the host's network when
    // the profile asked for its own.
    if let (Some(channel), Some(seed)) = (&netns_ours, seed.as_mut()) {
        let netns = seed.take_network().map_err(|source| LaunchError::Os {
            step: "creating the sandbox's network namespace".into(),
            source,
            hint: " (the kernel refused it: check `sysctl user.max_net_namespaces` and what the container allows; `stepproof doctor` tells)",
        })?;
        fdpass::send_fd(channel, &netns)
            .map_err(os("handing the network namespace to the init"))?;
    }
    drop(netns_ours);
    drop(seed);
    let proxy = match &proxy_channel_ours {
        Some(channel) => fdpass::receive_fd(channel)
            .map_err(os("receiving the proxy's socket"))?
            .zip(allow.take())
            .map(|(fd, allow)| start_proxy(std::net::TcpListener::from(fd), allow, audit)),
        None => None,
    };
    drop(proxy_channel_ours);
    let proxy = match (proxy, host_proxy_listener) {
        (None, Some(listener)) => allow
            .take()
            .map(|allow| start_proxy(listener, allow, audit)),
        (proxy, _) => proxy,
    };
    let gateway = match (&gateway_channel_ours, gateway_config) {
        (Some(channel), Some((upstream, credential))) => fdpass::receive_fd(channel)
            .map_err(os("receiving the gateway's socket"))?
            .map(|fd| {
                start_gateway(
                    std::os::unix::net::UnixListener::from(fd),
                    upstream,
                    credential,
                    audit,
                )
            }),
        _ => None,
    };
    drop(gateway_channel_ours);
    let master = match &terminal_channel {
        Some(channel) => {
            receive_terminal(channel).map_err(os("receiving the command's terminal"))?
        }
        None => None,
    };
    drop(terminal_channel);

    let terminal = match &master {
        Some(_) => Some(
            RawTerminal::enter(stdin.as_fd()).map_err(os("putting the terminal in raw mode"))?,
        ),
        None => None,
    };
    let relay = Relay {
        child,
        signal_fd,
        status: File::from(status_read),
        status_buf: Vec::new(),
        master,
        terminal,
        final_event: None,
        init_exit: None,
        pending_input: Vec::new(),
        enforcement: None,
        deadline: options.timeout.map(|t| std::time::Instant::now() + t),
        kill_at: None,
        timed_out: false,
        lifeline: Some(lifeline_write),
        all_gone: false,
        watcher,
    };
    let (outcome, enforcement, moved_during_run) = relay.run();
    let outcome = (outcome, enforcement);
    if let Some((handle, drain)) = proxy {
        handle.shutdown();
        let _ = drain.join();
    }
    if let Some((handle, drain)) = gateway {
        handle.shutdown();
        let _ = drain.join();
    }
    let hook_records = receiver.map(|r| r.shutdown());
    if let Some(state) = &plan.agent
        && let Some(done) = agent_config_dir::carry_back(state, plan.identity.outside_uid)
    {
        let note = done.note();
        match done {
            agent_config_dir::CarryBack::Refreshed(_) => tracing::info!("{note}"),
            agent_config_dir::CarryBack::Refused(_) => eprintln!("stepproof-run: {note}"),
        }
        if let Some(audit) = audit {
            audit.record(
                "supervisor",
                "credentials",
                &serde_json::json!({ "note": note }),
            );
        }
    }
    let report = AssuranceReport::new(plan, seccomp_report, outcome.1);
    Ok(RunResult {
        outcome: outcome.0,
        report: Some(report),
        hook_records,
        moved_during_run,
    })
}

/// The supervisor's event loop for one run.
struct Relay<'t> {
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
    /// Set once the deadline passed: SIGTERM went out, SIGKILL follows at this instant.
    kill_at: Option<std::time::Instant>,
    timed_out: bool,
    /// Closing it makes the init kill everything and exit (also without a pid namespace).
    lifeline: Option<OwnedFd>,
    /// The init reported that nothing else of the sandbox is left.
    all_gone: bool,
    /// Persistence names absent at launch, looked for every tick while the run is on.
    watcher: Option<crate::supervisor::watch::Watcher>,
}

/// How long a command has between SIGTERM and SIGKILL when `--timeout` ends it.
const TIMEOUT_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

impl Relay<'_> {
    /// Relays until the run is over: its outcome, what the command ran under, and what the
    /// watcher moved to the quarantine.
    fn run(
        mut self,
    ) -> (
        Outcome,
        Option<CommandEnforcement>,
        Vec<crate::supervisor::sweep::Finding>,
    ) {
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
            drop(fds);
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

    /// Time left until the next timer (deadline, then the SIGKILL after the grace period).
    fn next_timer(&self) -> Option<std::time::Duration> {
        let at = self
            .kill_at
            .or(if self.timed_out { None } else { self.deadline })?;
        Some(at.saturating_duration_since(std::time::Instant::now()))
    }

    /// `--timeout`: SIGTERM to the command's group when the deadline passes, then after the
    /// grace period the lifeline closes (the init kills everything) and the init gets SIGKILL.
    fn check_timers(&mut self) {
        let now = std::time::Instant::now();
        if !self.timed_out && self.deadline.is_some_and(|d| now >= d) {
            self.timed_out = true;
            self.kill_at = Some(now + TIMEOUT_GRACE);
            let _ = kill(self.child, Signal::SIGTERM);
        } else if self.kill_at.is_some_and(|k| now >= k) {
            self.kill_at = None;
            drop(self.lifeline.take());
            let _ = kill(self.child, Signal::SIGKILL);
        }
    }

    fn handle_signals(&mut self) {
        while let Ok(Some(info)) = self.signal_fd.read_signal() {
            let Ok(signal) = Signal::try_from(info.ssi_signo as i32) else {
                continue;
            };
            match signal {
                Signal::SIGCHLD => {
                    if let Ok(status) = waitpid(self.child, Some(WaitPidFlag::WNOHANG))
                        && status != WaitStatus::StillAlive
                    {
                        self.init_exit = Some(status);
                    }
                }
                Signal::SIGWINCH => {
                    if let (Some(term), Some(master)) = (&self.terminal, &self.master) {
                        copy_window_size(term.fd(), master);
                    }
                }
                Signal::SIGCONT => self.resume(),
                // Keyboard job control reaches us only without a pty; hand it to the command.
                _ => {
                    let _ = kill(self.child, signal);
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
                "the sandbox init ended without reporting the command's status ({:?})",
                self.init_exit
            )),
        }
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

/// Identity modes in words, for reports.
pub fn describe_identity(plan: &SandboxPlan) -> String {
    let id = &plan.identity;
    match id.mode {
        IdentityMode::Caller => format!("uid {} gid {} (the caller)", id.inside_uid, id.inside_gid),
        IdentityMode::RootRemapped => format!(
            "uid {} inside, host uid {} (invoked as root; workspace and home idmapped)",
            id.inside_uid, id.outside_uid
        ),
        IdentityMode::RootFallback => "uid 0 WITHOUT capabilities (root fallback)".into(),
    }
}
