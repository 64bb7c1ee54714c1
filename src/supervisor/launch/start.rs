//! The supervisor's side of a run: it clones the sandbox init into new namespaces, maps its ids
//! from outside, relays the terminal, forwards signals and job control, and turns what the init
//! reports into StepProof's exit code. It never enters the sandbox.

use crate::audit::sink::AuditSink;
use crate::profile::NetworkMode;
use crate::sandbox::channels::{self, ChannelError, InitEnds, SupervisorEnds, Wanted};
use crate::sandbox::fdpass;
use crate::sandbox::init::{InitArgs, run_init};
use crate::sandbox::mounts::{IdmappedTrees, SupervisorPaths};
use crate::sandbox::namespaces::{self, USERNS_HINT};
use crate::sandbox::plan::{
    Access, IdentityMode, Isolation, MountOp, ROOT_MODE_OUTSIDE_ID, SandboxPlan,
};
use crate::sandbox::report::AssuranceReport;
use crate::sandbox::seccomp;
use crate::supervisor::agent::config_dir;
use crate::supervisor::launch::outcome::Outcome;
use crate::supervisor::launch::pty::{RawTerminal, receive_terminal};
use crate::supervisor::launch::relay::Relay;
use crate::supervisor::launch::services::{self, Services};
use crate::supervisor::net::{credentials, gateway, proxy};
use crate::sys::{self, MountFlags, ParentOnlyFds};
use nix::sys::signal::Signal;
use nix::sys::signalfd::{SfdFlags, SigSet, SignalFd};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use std::ffi::{CString, OsString};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::OnceLock;

/// A step of the launch that failed: which, on what, and the error with its errno.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("the command line contains a NUL byte")]
    NulInArgument,
    #[error("{step}: {source}{hint}")]
    Os {
        step: &'static str,
        source: io::Error,
        hint: &'static str,
    },
    #[error("{step} {}: {source}{hint}", path.display())]
    OnPath {
        step: &'static str,
        path: std::path::PathBuf,
        source: io::Error,
        hint: &'static str,
    },
    #[error(
        "listening for the proxy on 127.0.0.1:{port}: {source} (another program uses that port: set network.proxy_port)"
    )]
    ProxyPort { port: u16, source: io::Error },
    #[error("setting up the credential gateway: {0}")]
    Gateway(String),
    #[error("setting up the service credentials: {0}")]
    Credentials(String),
    /// The agent's state or what the sandbox binds from the host (the error names the step
    /// and the path).
    #[error("preparing the agent's state and what the sandbox binds from the host: {0}")]
    AgentState(#[from] config_dir::AgentStateError),
    #[error(transparent)]
    Channel(#[from] ChannelError),
    /// The init's own failure, which a later step of the supervisor only met.
    #[error("building the sandbox: {0}")]
    Init(String),
    #[error(transparent)]
    Namespace(#[from] namespaces::NamespaceError),
    #[error("putting the sandbox in its cgroup: {0} (run `stepproof doctor`)")]
    Cgroup(#[from] crate::supervisor::launch::cgroup::CgroupError),
}

fn os(step: &'static str) -> impl FnOnce(io::Error) -> LaunchError {
    move |source| LaunchError::Os {
        step,
        source,
        hint: "",
    }
}

fn nix_os(step: &'static str) -> impl FnOnce(nix::Error) -> LaunchError {
    move |e| os(step)(e.into())
}

/// `e`, or the failure the init had already reported on `status` (its set-up broke, and the
/// supervisor's step met the channel it closed on its way out). When `e` is such a follow-on (a
/// broken pipe, a reset connection: the init's end is gone), the init's report may still be on
/// its way: it is waited for until the init's end of `status` closes too, at most a second.
/// Otherwise only what is there is read: a live init that reported nothing leaves `e` as the
/// cause.
fn first_cause(e: LaunchError, status: &OwnedFd) -> LaunchError {
    let follow_on = matches!(
        crate::sandbox::init::errno_of(&e),
        libc::EPIPE | libc::ECONNRESET
    );
    let deadline = std::time::Instant::now()
        + std::time::Duration::from_millis(if follow_on { 1000 } else { 0 });
    let mut pending = Vec::new();
    let mut buf = [0u8; 4096];
    let ready = |fd: &OwnedFd| {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let timeout =
            nix::poll::PollTimeout::try_from(left).unwrap_or(nix::poll::PollTimeout::ZERO);
        let mut fds = [nix::poll::PollFd::new(
            fd.as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        matches!(nix::poll::poll(&mut fds, timeout), Ok(n) if n > 0)
    };
    while ready(status) {
        match nix::unistd::read(status, &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => pending.extend_from_slice(&buf[..n]),
        }
    }
    for line in pending.split(|b| *b == b'\n') {
        match serde_json::from_slice::<crate::sandbox::events::InitEvent>(line) {
            Ok(crate::sandbox::events::InitEvent::SetupFailed { message }) => {
                return LaunchError::Init(message);
            }
            Ok(crate::sandbox::events::InitEvent::ExecFailed { step, message, .. }) => {
                return LaunchError::Init(format!("{step}: {message}"));
            }
            _ => {}
        }
    }
    e
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
            step: "creating the idmap user namespace",
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

/// Waits until every child of this process is gone and reaped (the sandbox init, whose own exit
/// is the namespaces' teardown; the namespace seed and its network maker; the idmap user
/// namespace's holders): called just before `stepproof-run` exits, so that nothing it started
/// outlives it, orphaned or a zombie for a pid 1 that might not reap (as in some containers).
/// Bounded: after `limit` it says what is left and returns.
pub fn reap_children(limit: std::time::Duration) {
    // A run that ended before its launch (a refusal, a bad profile) never took the early seed:
    // it is stopped here, or it would wait for a launch that does not come.
    if let Ok(mut slot) = EARLY_SEED.lock() {
        drop(slot.take());
    }
    let deadline = std::time::Instant::now() + limit;
    loop {
        match waitpid(
            Pid::from_raw(-1),
            Some(WaitPidFlag::WNOHANG | WaitPidFlag::__WALL),
        ) {
            Ok(WaitStatus::StillAlive) => {
                if std::time::Instant::now() >= deadline {
                    crate::say!(
                        "stepproof-run: a process this run started was still running after {} s; not waiting longer",
                        limit.as_secs()
                    );
                    return;
                }
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
            Ok(_) => {}
            Err(_) => return,
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
        let tree = sys::open_tree_clone(src).map_err(|source| LaunchError::OnPath {
            step: "open_tree",
            path: src.clone(),
            source,
            hint: "",
        })?;
        let flags = MountFlags {
            read_only: *access == Access::ReadOnly,
            nosuid: true,
            nodev: true,
        };
        sys::idmap_detached_tree(&tree, userns, flags).map_err(|source| LaunchError::OnPath {
            step: "idmapping",
            path: src.clone(),
            source,
            hint: " (this file system does not support idmapped mounts, which a root invocation needs to run the command as an unprivileged user: run stepproof-run as the user who owns the workspace, or keep the workspace on a file system that supports them — ext4, xfs, btrfs, tmpfs; `stepproof doctor` tells)",
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

/// The audit record of a refresh of the host's model login, or of a refusal to refresh it.
pub const LOGIN_REFRESH: &str = "login-refresh";

/// Every refresh of the host's model login, and every refusal to refresh it, becomes a
/// [`LOGIN_REFRESH`] record. One that sent the host's refresh token (a refresh, an attempt that
/// failed at the token endpoint) is written whatever the budget: each is a use of the user's
/// login, and the rule bounds how many there can be (`login::after_401`). The others — refusals,
/// a token taken from the store, a failure before anything was sent — spend nothing, and
/// refusals follow the agent's requests one for one: they are charged to the run's budget of
/// what the agent causes, so a flood of 401s is counted, not written (`inside-records-over-cap`).
pub fn record_login_refreshes(
    login: &crate::supervisor::net::login::ModelLogin,
    audit: &AuditSink,
) {
    let audit = audit.clone_handle();
    login.record_refreshes(move |record| {
        if record.refresh_token_sent {
            audit.record("supervisor", LOGIN_REFRESH, record);
        } else {
            audit.record_caused("supervisor", LOGIN_REFRESH, record);
        }
    });
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
            .map_err(|source| LaunchError::OnPath {
                step: "creating the per-run scratch directory",
                path: path.clone(),
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
    pub moved_during_run: Vec<crate::supervisor::way_out::sweep::Finding>,
    /// The loop of denials that ended a `--ci` run early, if one did.
    pub denial_loop: Option<crate::audit::denial_loops::LoopStop>,
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
    /// on, and the quarantine to move them to (see [`crate::supervisor::way_out::watch`]).
    pub watch: Option<(Vec<std::path::PathBuf>, std::path::PathBuf)>,
    /// The run's cgroup: the init is put in it before the command is started.
    pub cgroup: Option<&'a crate::supervisor::launch::cgroup::RunCgroup>,
    /// The gateway's upstream and the model login ([`prepare_gateway`]), for a plan with a
    /// gateway.
    pub gateway: Option<(
        gateway::Upstream,
        std::sync::Arc<crate::supervisor::net::login::ModelLogin>,
    )>,
    /// The runbook's run: its sockets are served while the sandbox runs.
    pub runbook: Option<&'a crate::supervisor::runbook::engine::RunbookRun>,
    /// A model verifier run: the `verifier` agent definition for its config directory.
    pub verifier_agent: Option<&'a str>,
    /// How the hook's receiver treats loops of denials (an agent's run with a hook).
    pub denial_loops: Option<crate::audit::denial_loops::LoopSettings>,
}

/// The gateway's upstream and the model login for a plan with a gateway (a credential the
/// profile names but the environment lacks, or an unreadable CA, is an error): before the
/// launch, which needs the login's placeholder, and before the plan is final (the organisation's
/// server-managed settings are fetched with the login).
pub fn prepare_gateway(
    plan: &SandboxPlan,
) -> Result<
    Option<(
        gateway::Upstream,
        std::sync::Arc<crate::supervisor::net::login::ModelLogin>,
    )>,
    String,
> {
    plan.gateway
        .as_ref()
        .map(|config| gateway::prepare(config, &plan.home, &plan.held_outside))
        .transpose()
        .map_err(|e| format!("setting up the credential gateway: {e}"))
}

pub fn run(
    plan: &SandboxPlan,
    command: &[OsString],
    audit: Option<&AuditSink>,
    options: &RunOptions<'_>,
) -> RunResult {
    match launch(Launch {
        plan,
        command,
        audit,
        options,
    }) {
        Ok(result) => result,
        Err(e) => RunResult {
            outcome: Outcome::failed(e.to_string()),
            report: None,
            hook_records: None,
            moved_during_run: Vec::new(),
            denial_loop: None,
        },
    }
}

/// The launch, in order: one call a step, each with why it comes there. Each step either
/// completes or stops the launch with what failed; the init's side of the same sequence is
/// `sandbox::init::run_init`.
fn launch(run: Launch<'_>) -> Result<RunResult, LaunchError> {
    // The model login first: the agent's state and the command's environment carry its
    // placeholder.
    let login = run.take_model_login()?;
    // What the init will execve, checked before anything is made for it.
    let exec = run.exec_strings(&login.placeholder)?;
    // What the sandbox takes from the host, made while no thread of this process is left over
    // (the init is cloned from its memory).
    let prepared = run.prepare_host_side(&login)?;
    // Without a network namespace the proxy listens on the host's loopback, bound before the
    // command exists; Landlock lets the command connect to that port only.
    let host_proxy_listener = run.bind_proxy_on_host()?;
    // Held from here, before the channels: a launch that fails later closes the init's lifeline
    // first (the sandbox ends), then the services stop.
    let mut services = Services::default();
    // The channels to the init; from here on the supervisor takes signals through a signalfd.
    let stdin = io::stdin();
    let channels = run.open_channels(login.gateway.is_some(), &stdin)?;
    // The init: cloned into the sandbox's namespaces from the seed, or forked without them.
    let mut init = run.start_init(exec, prepared.for_init, channels)?;
    // From here on a step that fails may only be meeting the init's own failure (a channel it
    // closed on its way out): what it reported first is the cause to name.
    let cause = |e: LaunchError| first_cause(e, &init.ours.status);
    // The hook's records (with the count of denials that loop), then the runbook's sockets and
    // the watcher: threads only from here on (nothing more is cloned from this process's memory).
    let (loops, mut loop_watch) = run
        .options
        .denial_loops
        .map(crate::audit::denial_loops::DenialLoops::new)
        .unzip();
    services.receiver = run
        .serve_hook_records(prepared.hook_listener, loops)
        .map_err(cause)?;
    services.runbook = run.options.runbook.map(|runbook| runbook.serve());
    let watcher = run.start_watcher();
    crate::supervisor::agent::housekeeping::start();
    tracing::debug!("sandbox cloned");
    // Into the run's cgroup before the command exists: everything of the run is born inside.
    run.join_cgroup(init.child).map_err(cause)?;
    // The seccomp filters, compiled here while the init builds the view on the other core.
    let seccomp_report = run.send_seccomp(init.ours.seccomp);
    // The network namespace, when the maker has it: without it the launch stops here.
    hand_over_network(init.ours.network_namespace.take(), init.seed).map_err(cause)?;
    // What the init sends back once the view is built: the proxy's socket, the gateway's, the
    // command's terminal.
    let proxy_channel = init.ours.proxy.take();
    services.proxy = run
        .serve_proxy(prepared.broker, proxy_channel, host_proxy_listener)
        .map_err(cause)?;
    let gateway_channel = init.ours.gateway.take();
    services.gateway = run
        .serve_gateway(gateway_channel, login.gateway)
        .map_err(cause)?;
    let terminal = take_terminal(init.ours.terminal.take(), &stdin).map_err(cause)?;
    // The relay, until the run is over.
    let relay = run
        .relay(
            init.child,
            init.signal_fd,
            (init.ours.status, init.ours.lifeline),
            terminal,
            watcher,
        )
        .ended_on_request(loop_watch.as_mut().and_then(|w| w.stop_request.take()));
    let (outcome, enforcement, moved_during_run) = relay.run();
    // Afterwards the services stop, their records written (see `Services::stop` for the
    // order), and what was enforced is reported. Nothing of the login comes back from inside:
    // the supervisor refreshed and wrote back the real one itself.
    let hook_records = services.stop();
    Ok(RunResult {
        outcome,
        report: Some(AssuranceReport::new(run.plan, seccomp_report, enforcement)),
        hook_records,
        moved_during_run,
        denial_loop: loop_watch.and_then(|w| w.stopped()),
    })
}

/// What every step of the launch reads: the plan, the command, the audit log, the options.
#[derive(Clone, Copy)]
struct Launch<'a> {
    plan: &'a SandboxPlan,
    command: &'a [OsString],
    audit: Option<&'a AuditSink>,
    options: &'a RunOptions<'a>,
}

/// The gateway's upstream and the model login it carries, and what the sandbox gets in the
/// login's place.
struct Login {
    gateway: Option<(
        gateway::Upstream,
        std::sync::Arc<crate::supervisor::net::login::ModelLogin>,
    )>,
    placeholder: crate::supervisor::net::login::Placeholder,
}

/// What the init will execve.
struct ExecStrings {
    argv: Vec<CString>,
    envp: Vec<CString>,
}

/// What the init takes across the clone besides the plan and the command.
struct ForInit {
    idmapped: IdmappedTrees,
    /// Descriptors of what the sandbox binds from the host.
    handed: SupervisorPaths,
    /// The run's trust files, which the init lays out inside.
    trust: Vec<(std::path::PathBuf, String)>,
}

/// What the host's side made before the clone.
struct Prepared {
    for_init: ForInit,
    /// The hook's socket, served once the init exists.
    hook_listener: Option<std::os::unix::net::UnixListener>,
    /// What the proxy adds at the boundary and what it blocks anywhere.
    broker: Option<std::sync::Arc<credentials::Broker>>,
}

/// Both ends of the channels to the init, and the signals the supervisor now takes itself.
struct Channels {
    ours: SupervisorEnds,
    theirs: InitEnds,
    signals: SigSet,
    signal_fd: SignalFd,
}

/// The init started: its pid, the supervisor's ends of its channels, the signalfd, and the
/// seed whose network maker still holds the network namespace.
struct Started {
    child: Pid,
    ours: SupervisorEnds,
    signal_fd: SignalFd,
    seed: Option<sys::seed::NamespaceSeed>,
}

/// The command's terminal (its master side) and the user's, in raw mode while the run is on.
struct CommandTerminal<'t> {
    master: Option<OwnedFd>,
    raw: Option<RawTerminal<'t>>,
}

impl<'a> Launch<'a> {
    /// The gateway's upstream and the model login (prepared before the launch, see
    /// [`prepare_gateway`]); the sandbox gets the login's placeholder.
    fn take_model_login(self) -> Result<Login, LaunchError> {
        let gateway = match (&self.plan.gateway, &self.options.gateway) {
            (Some(_), Some(prepared)) => Some(prepared.clone()),
            (Some(_), None) => {
                return Err(LaunchError::Gateway(
                    "the gateway's login was not prepared".into(),
                ));
            }
            (None, _) => None,
        };
        let placeholder = gateway
            .as_ref()
            .map(|(_, login)| login.placeholder().clone())
            .unwrap_or_default();
        if let Some((_, login)) = &gateway {
            if login.is_none() && crate::sandbox::plan::agent_layer::command_is_claude(self.command)
            {
                crate::say!("stepproof-run: {}", NOT_LOGGED_IN);
            }
            if let Some(audit) = self.audit {
                audit.record(
                    "supervisor",
                    "model-login",
                    &serde_json::json!({
                        "login": login.describe(),
                        "placeholder": placeholder.env.as_ref().map(|(n, _)| n.as_str()).or(placeholder.credentials.as_ref().map(|_| ".credentials.json")),
                    }),
                );
            }
        }
        Ok(Login {
            gateway,
            placeholder,
        })
    }

    /// The command line and the environment as the init will execve them: no NUL in an
    /// argument or a variable.
    fn exec_strings(
        self,
        placeholder: &crate::supervisor::net::login::Placeholder,
    ) -> Result<ExecStrings, LaunchError> {
        let argv = self
            .command
            .iter()
            .map(|a| CString::new(a.as_bytes()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| LaunchError::NulInArgument)?;
        let envp = self
            .plan
            .env
            .iter()
            .chain(placeholder.env.iter())
            .map(|(k, v)| CString::new(format!("{k}={v}")))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| LaunchError::NulInArgument)?;
        Ok(ExecStrings { argv, envp })
    }

    /// What only host root may make (idmapped trees), the agent's state (with the placeholder
    /// login) and the hook's socket, the service credentials, the repositories' git layers, and
    /// descriptors of what the sandbox binds from the host.
    fn prepare_host_side(self, login: &Login) -> Result<Prepared, LaunchError> {
        let (idmapped, hook_listener, mut credentials) =
            self.prepare_beside_credentials(&login.placeholder)?;
        // The trust files go to the init, which lays them out inside.
        let trust = credentials
            .as_mut()
            .map(|prepared| std::mem::take(&mut prepared.trust))
            .unwrap_or_default();
        if let (Some(prepared), Some(audit)) = (&credentials, self.audit) {
            record_service_credentials(self.plan, prepared, audit);
        }
        let broker = broker_with_model_placeholders(credentials, &login.placeholder);
        // The repositories' git layers, in the run directory, before they are handed over.
        crate::supervisor::way_out::sweep::prepare_layers(self.plan).map_err(|source| {
            LaunchError::Os {
                step: "making the run's git layers",
                source,
                hint: "",
            }
        })?;
        let handed = config_dir::open_handed_paths(self.plan)?;
        // No thread of the launch's preparation is left when the init is cloned.
        crate::supervisor::net::login::settle_client_configs();
        tracing::debug!("idmapped trees ready");
        Ok(Prepared {
            for_init: ForInit {
                idmapped,
                handed,
                trust,
            },
            hook_listener,
            broker,
        })
    }

    /// The idmapped trees and the agent's state on this thread while the service credentials
    /// are made on one of their own: each secret read outside, the run's CA made and its public
    /// half put in the trust files the init lays out inside (read-only hosts need the CA as
    /// well); a source that cannot be read stops the launch here. Both threads end before the
    /// init is cloned from this process's memory.
    #[allow(clippy::type_complexity)]
    fn prepare_beside_credentials(
        self,
        placeholder: &crate::supervisor::net::login::Placeholder,
    ) -> Result<
        (
            IdmappedTrees,
            Option<std::os::unix::net::UnixListener>,
            Option<credentials::Prepared>,
        ),
        LaunchError,
    > {
        let plan = self.plan;
        std::thread::scope(|scope| {
            let on_the_side = std::thread::Builder::new()
                .name("stepproof-creds".into())
                .spawn_scoped(scope, || credentials::prepare(plan))
                .ok();
            let ours = (|| -> Result<_, LaunchError> {
                let idmapped = prepare_idmapped_trees(plan)?;
                tracing::debug!("launch: idmapped trees made");
                let hook_listener = match &plan.agent {
                    Some(state) => {
                        let listener = config_dir::prepare(plan, state, placeholder)?;
                        tracing::debug!("launch: agent config dir");
                        if let Some(definition) = self.options.verifier_agent {
                            config_dir::install_verifier_agent(state, definition)?;
                        }
                        Some(listener)
                    }
                    None => None,
                };
                Ok((idmapped, hook_listener))
            })();
            let credentials = match on_the_side {
                Some(thread) => thread.join().unwrap_or_else(|_| {
                    Err("preparing the service credentials failed (its thread panicked)".into())
                }),
                None => credentials::prepare(plan),
            };
            tracing::debug!("launch: credentials prepared");
            let (idmapped, hook_listener) = ours?;
            Ok((
                idmapped,
                hook_listener,
                credentials.map_err(LaunchError::Credentials)?,
            ))
        })
    }

    /// Without a network namespace the proxy's port on the host's loopback.
    fn bind_proxy_on_host(self) -> Result<Option<std::net::TcpListener>, LaunchError> {
        let plan = self.plan;
        if plan.isolation == Isolation::Namespaces || plan.network != NetworkMode::Allowlist {
            return Ok(None);
        }
        std::net::TcpListener::bind(("127.0.0.1", plan.proxy_port))
            .map(Some)
            .map_err(|source| LaunchError::ProxyPort {
                port: plan.proxy_port,
                source,
            })
    }

    /// The channels to the init (the command's terminal is made inside, from the user's), and
    /// the signals: blocked, and taken through a signalfd from here on.
    fn open_channels(self, gateway: bool, stdin: &io::Stdin) -> Result<Channels, LaunchError> {
        let plan = self.plan;
        let namespaces = plan.isolation == Isolation::Namespaces;
        let stdout = io::stdout();
        let interactive = nix::unistd::isatty(stdin.as_fd()).unwrap_or(false)
            && nix::unistd::isatty(stdout.as_fd()).unwrap_or(false);
        let (ours, theirs) = channels::open(Wanted {
            user_terminal: interactive.then(|| stdin.as_fd()),
            proxy: namespaces && plan.network == NetworkMode::Allowlist,
            gateway,
            network_namespace: namespaces && plan.network != NetworkMode::Host,
        })?;
        let signals = handled_signals();
        signals.thread_block().map_err(nix_os("blocking signals"))?;
        let signal_fd =
            SignalFd::with_flags(&signals, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
                .map_err(nix_os("creating a signalfd"))?;
        tracing::debug!("launch: channels open");
        Ok(Channels {
            ours,
            theirs,
            signals,
            signal_fd,
        })
    }

    /// Clones the init into the sandbox's namespaces from the seed, or forks it without them.
    fn start_init(
        self,
        exec: ExecStrings,
        for_init: ForInit,
        channels: Channels,
    ) -> Result<Started, LaunchError> {
        let Channels {
            mut ours,
            theirs,
            signals,
            mut signal_fd,
        } = channels;
        let plan = self.plan;
        let init = move || -> i32 {
            let _ = signals.thread_set_mask();
            run_init(InitArgs {
                plan,
                argv: exec.argv,
                envp: exec.envp,
                channels: theirs,
                idmapped: for_init.idmapped,
                handed: for_init.handed,
                trust: for_init.trust,
                signals,
            })
        };
        let new_net = ours.network_namespace.is_some();
        // This side's descriptors, which the init closes in its copy of the table first thing.
        let mut parent_only = ParentOnlyFds::none();
        ours.close_in_child(&mut parent_only);
        parent_only.add(&mut signal_fd);
        let (child, seed) = if plan.isolation == Isolation::Namespaces {
            let (child, seed) = clone_from_seed(plan, new_net, parent_only, init)?;
            (child, Some(seed))
        } else {
            let child =
                sys::fork(parent_only, init).map_err(os("starting the sandbox init (fork)"))?;
            (child, None)
        };
        tracing::debug!("launch: init cloned");
        Ok(Started {
            child: Pid::from_raw(child),
            ours,
            signal_fd,
            seed,
        })
    }

    /// The hook's records, checked message by message against the hook binary's identity (an
    /// agent's run with an audit log).
    fn serve_hook_records(
        self,
        listener: Option<std::os::unix::net::UnixListener>,
        loops: Option<crate::audit::denial_loops::DenialLoops>,
    ) -> Result<Option<crate::audit::ReceiverHandle>, LaunchError> {
        let receiver = match (listener, self.audit, &self.plan.agent) {
            (Some(listener), Some(audit), Some(state)) => {
                let check = crate::audit::PeerCheck::for_executable(&state.hook_binary).map_err(
                    |source| LaunchError::OnPath {
                        step: "reading the hook binary",
                        path: state.hook_binary.clone(),
                        source,
                        hint: "",
                    },
                )?;
                Some(crate::audit::serve_hook_socket(
                    listener,
                    audit.clone_handle(),
                    check,
                    self.options.inside_max_bytes,
                    loops,
                ))
            }
            _ => None,
        };
        tracing::debug!("launch: hook receiver started");
        Ok(receiver)
    }

    /// The watcher of persistence names absent at launch. Not a thread: the relay looks for
    /// them every tick.
    fn start_watcher(self) -> Option<crate::supervisor::way_out::watch::Watcher> {
        self.options
            .watch
            .as_ref()
            .and_then(|(targets, quarantine)| {
                crate::supervisor::way_out::watch::Watcher::start(
                    &self.plan.workspace,
                    targets.clone(),
                    quarantine,
                )
            })
    }

    /// The init into the run's cgroup. The init reads the whole seccomp channel before it forks
    /// the command, so this comes first; without it the channel closes unwritten and the init
    /// refuses to start the command.
    fn join_cgroup(self, child: Pid) -> Result<(), LaunchError> {
        if let Some(cgroup) = self.options.cgroup {
            cgroup.attach(child.as_raw() as u32)?;
        }
        Ok(())
    }

    /// The seccomp filters to the init, which waits for them and refuses to start the command
    /// without them (a filter that does not compile closes the channel unwritten).
    fn send_seccomp(self, channel: OwnedFd) -> Option<seccomp::SeccompReport> {
        let arch = seccomp::Arch::native();
        let table = seccomp::rules_for(self.plan.seccomp);
        let report = match seccomp::compile_table(&table, arch) {
            Ok(filters) => {
                let _ = File::from(channel).write_all(&seccomp::encode_filters(&filters));
                Some(seccomp::report(&table, arch, &filters))
            }
            Err(e) => {
                tracing::error!("compiling the seccomp filter: {e}");
                drop(channel);
                None
            }
        };
        tracing::debug!("launch: seccomp sent");
        report
    }

    /// Serves the allow-list proxy on the socket the init opened inside, or else on the host's
    /// loopback. Its refusals also go to the hook's notices (an agent's run).
    fn serve_proxy(
        self,
        broker: Option<std::sync::Arc<credentials::Broker>>,
        channel: Option<OwnedFd>,
        on_host: Option<std::net::TcpListener>,
    ) -> Result<Option<services::WithDrain<proxy::ProxyHandle>>, LaunchError> {
        if channel.is_none() && on_host.is_none() {
            return Ok(None);
        }
        let notices = self.plan.agent.as_ref().map(|a| {
            crate::sandbox::plan::agent_layer::notices_dir(&a.run_dir).join("refused-hosts")
        });
        let allow = self.plan.allow.compiled().clone();
        let inside = match &channel {
            Some(channel) => fdpass::receive_fd(channel)
                .map_err(os("receiving the proxy's socket"))?
                .map(std::net::TcpListener::from),
            None => None,
        };
        drop(channel);
        Ok(inside
            .or(on_host)
            .map(|listener| services::start_proxy(listener, allow, broker, self.audit, notices)))
    }

    /// Serves the credential gateway on the socket the init made on the sandbox's /run.
    fn serve_gateway(
        self,
        channel: Option<OwnedFd>,
        login: Option<(
            gateway::Upstream,
            std::sync::Arc<crate::supervisor::net::login::ModelLogin>,
        )>,
    ) -> Result<Option<services::WithDrain<gateway::GatewayHandle>>, LaunchError> {
        let (Some(channel), Some((upstream, login))) = (channel, login) else {
            return Ok(None);
        };
        let Some(socket) =
            fdpass::receive_fd(&channel).map_err(os("receiving the gateway's socket"))?
        else {
            return Ok(None);
        };
        let plan = self.plan;
        let settings = plan
            .managed_ours
            .clone()
            .map(|ours| gateway::ServerSettingsMerge {
                ours,
                strict: plan.landlock.assurance == crate::sandbox::landlock::Assurance::Strict,
            });
        Ok(Some(services::start_gateway(
            std::os::unix::net::UnixListener::from(socket),
            upstream,
            login,
            settings,
            self.audit,
        )))
    }

    /// The relay for the init `child`. When the run starts to end early, the runbook's work in
    /// flight stops first.
    fn relay<'t>(
        self,
        child: Pid,
        signal_fd: SignalFd,
        (status, lifeline): (OwnedFd, OwnedFd),
        terminal: CommandTerminal<'t>,
        watcher: Option<crate::supervisor::way_out::watch::Watcher>,
    ) -> Relay<'t>
    where
        'a: 't,
    {
        let stop_runbook_work = self
            .options
            .runbook
            .map(|run| Box::new(move || run.stop_work()) as Box<dyn FnOnce() + 't>);
        Relay::new(
            child,
            signal_fd,
            File::from(status),
            terminal.master,
            terminal.raw,
            self.options.timeout,
            lifeline,
            watcher,
            stop_runbook_work,
        )
    }
}

/// The broker the proxy uses: the service credentials' (if any), with the model login's
/// placeholders, which only the gateway accepts: the proxy blocks them anywhere.
fn broker_with_model_placeholders(
    credentials: Option<credentials::Prepared>,
    placeholder: &crate::supervisor::net::login::Placeholder,
) -> Option<std::sync::Arc<credentials::Broker>> {
    let model_placeholders: Vec<(String, String)> = placeholder
        .values()
        .into_iter()
        .map(|value| ("model-login".to_string(), value))
        .collect();
    match credentials {
        Some(prepared) if model_placeholders.is_empty() => Some(prepared.broker),
        Some(prepared) => {
            let broker = std::sync::Arc::try_unwrap(prepared.broker)
                .expect("the broker is not shared before the proxy starts");
            Some(std::sync::Arc::new(credentials::Broker {
                elsewhere: model_placeholders,
                ..broker
            }))
        }
        None if model_placeholders.is_empty() => None,
        None => Some(std::sync::Arc::new(credentials::Broker {
            credentials: Vec::new(),
            authority: None,
            read_only: Vec::new(),
            elsewhere: model_placeholders,
        })),
    }
}

/// The `service-credentials` record: each rule (never a secret), the read-only hosts, the notes.
fn record_service_credentials(
    plan: &SandboxPlan,
    prepared: &credentials::Prepared,
    audit: &AuditSink,
) {
    let rules: Vec<serde_json::Value> = prepared
        .broker
        .credentials
        .iter()
        .map(|c| {
            serde_json::json!({
                "name": c.name,
                "host": format!("{}:{}", c.host, c.port),
                "paths": c.rule.paths,
                "methods": c.rule.methods,
                "source": c.rule.source_spec().describe(),
            })
        })
        .collect();
    audit.record(
        "supervisor",
        "service-credentials",
        &serde_json::json!({
            "rules": rules,
            "read_only": plan.read_only,
            "notes": prepared.notes,
        }),
    );
}

/// The seed holds the sandbox's user namespace (its network maker has been making the network
/// namespace since the start); the init is cloned into it with the other namespaces, after its
/// id maps are written, so it starts with its ids in place.
fn clone_from_seed<F: FnOnce() -> i32>(
    plan: &SandboxPlan,
    new_net: bool,
    parent_only: ParentOnlyFds<'_>,
    init: F,
) -> Result<(libc::pid_t, sys::seed::NamespaceSeed), LaunchError> {
    let mut seed = take_seed(new_net).map_err(|source| LaunchError::Os {
        step: "creating the sandbox's user namespace",
        source,
        hint: USERNS_HINT,
    })?;
    namespaces::write_id_maps(seed.pid(), &plan.identity)?;
    tracing::debug!("launch: id maps written");
    let flags = libc::CLONE_NEWNS
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWUTS
        | libc::CLONE_NEWCGROUP;
    let pid = seed
        .clone_init(flags, parent_only, init)
        .map_err(|source| LaunchError::Os {
            step: "creating the sandbox namespaces (clone)",
            source,
            hint: USERNS_HINT,
        })?;
    Ok((pid, seed))
}

/// The network namespace to the init, when the seed's maker has it. Without it the launch stops
/// here (the init, finding the channel closed, stops too): the command never gets the host's
/// network when the profile asked for its own.
fn hand_over_network(
    channel: Option<OwnedFd>,
    mut seed: Option<sys::seed::NamespaceSeed>,
) -> Result<(), LaunchError> {
    if let (Some(channel), Some(seed)) = (&channel, seed.as_mut()) {
        let netns = seed.take_network().map_err(|source| LaunchError::Os {
            step: "creating the sandbox's network namespace",
            source,
            hint: " (the kernel refused it: check `sysctl user.max_net_namespaces` and what the container allows; `stepproof doctor` tells)",
        })?;
        fdpass::send_fd(channel, &netns)
            .map_err(os("handing the network namespace to the init"))?;
    }
    drop(channel);
    drop(seed);
    tracing::debug!("launch: network namespace sent");
    Ok(())
}

/// The command's terminal from the init, and the user's put in raw mode for the relay.
fn take_terminal(
    channel: Option<OwnedFd>,
    stdin: &io::Stdin,
) -> Result<CommandTerminal<'_>, LaunchError> {
    let master = match &channel {
        Some(channel) => {
            receive_terminal(channel).map_err(os("receiving the command's terminal"))?
        }
        None => None,
    };
    drop(channel);
    let raw = match &master {
        Some(_) => Some(
            RawTerminal::enter(stdin.as_fd()).map_err(os("putting the terminal in raw mode"))?,
        ),
        None => None,
    };
    Ok(CommandTerminal { master, raw })
}

/// What to do without a model login, said before Claude Code says "Not logged in".
pub const NOT_LOGGED_IN: &str = "no model login found (no claude.ai login in ~/.claude/.credentials.json, no ANTHROPIC_API_KEY, no CLAUDE_CODE_OAUTH_TOKEN). Log in once, outside the sandbox, with `stepproof login` (it runs `claude /login` on this machine; the login stays in ~/.claude and StepProof adds it at the boundary), or set ANTHROPIC_API_KEY in your environment.";

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
