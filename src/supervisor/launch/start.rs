//! The supervisor's side of a run: it clones the sandbox init into new namespaces, maps its ids
//! from outside, relays the terminal, forwards signals and job control, and turns what the init
//! reports into StepProof's exit code. It never enters the sandbox.

use crate::audit::sink::AuditSink;
use crate::profile::NetworkMode;
use crate::sandbox::channels::{self, InitEnds, SupervisorEnds, Wanted};
use crate::sandbox::fdpass;
use crate::sandbox::init::{InitArgs, run_init};
use crate::sandbox::mounts::{IdmappedTrees, SupervisorPaths};
use crate::sandbox::namespaces::{self, USERNS_HINT};
use crate::sandbox::plan::{IdentityMode, Isolation, SandboxPlan};
use crate::sandbox::report::AssuranceReport;
use crate::sandbox::seccomp;
use crate::supervisor::agent::config_dir;
use crate::supervisor::launch::outcome::Outcome;
use crate::supervisor::launch::pty::{RawTerminal, receive_terminal};
use crate::supervisor::launch::relay::Relay;
use crate::supervisor::launch::services::{self, Services};
use crate::supervisor::net::{credentials, gateway, proxy};
use crate::sys::{self, ParentOnlyFds};
use nix::sys::signal::Signal;
use nix::sys::signalfd::{SfdFlags, SigSet, SignalFd};
use nix::unistd::Pid;
use std::ffi::{CString, OsString};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

pub use super::error::LaunchError;
use super::error::*;
use super::prepare::*;
pub use super::prepare::{
    ScratchDir, idmapped_mounts_work, prepare_gateway, prepare_idmapped_trees, reap_children,
    record_login_refreshes, start_namespace_seed,
};

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
        if let (Some((_, login)), Some(audit)) = (&gateway, self.audit) {
            audit.record(
                "supervisor",
                "model-login",
                &serde_json::json!({
                    "login": login.describe(),
                    "placeholder": placeholder.env.as_ref().map(|(n, _)| n.as_str()).or(placeholder.credentials.as_ref().map(|_| ".credentials.json")),
                }),
            );
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
pub const NOT_LOGGED_IN: &str = "no model login found (no claude.ai login in ~/.claude/.credentials.json, no ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN or CLAUDE_CODE_OAUTH_TOKEN, no cloud provider): Claude Code is not started, because its own /login cannot work inside. Log in once, outside the sandbox, with `stepproof login` (it runs `claude auth login` on this machine; the login stays in ~/.claude and StepProof adds it at the boundary), or set ANTHROPIC_API_KEY in your environment.";

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
