//! A run of `stepproof-run` from the caller's side, after its arguments are parsed: the
//! profile, the facts of this host, the self-test in CI, the audit log, the plan and what it
//! refuses, the files the caller asked for, the run's cgroup, the start record, the launch
//! (`supervisor::launch::start`), the limits that acted, the sweep, the end record and the summaries —
//! in that order. The binary only parses its arguments and starts the namespace seed.

use crate::audit::sink::{AuditSink, AuditSinkError};
use crate::cli::{explain, host};
use crate::profile::Profile;
use crate::sandbox::plan::PlanError;
use crate::sandbox::report::AssuranceReport;
use crate::supervisor::launch::outcome::{Failure, Outcome};
use crate::supervisor::launch::start;
use crate::supervisor::way_out::output_files::{
    OutputFile, WriteMode, writable_root_of, writable_roots,
};
use crate::supervisor::way_out::recover::{self, Owed};
use crate::supervisor::way_out::sweep::{Snapshot, SweepScope};
use std::ffi::OsString;
use std::path::PathBuf;

pub mod args;
mod end;
mod outputs;
mod owed;
mod runbook;
mod started;
mod why;

use host::LoadedRunbook;
use outputs::*;
use owed::*;
use runbook::*;
use started::*;
use why::*;

/// What the caller asked for: `stepproof-run`'s arguments.
#[derive(Debug, Default)]
pub struct Request {
    /// Profile file (TOML); the built-in default when omitted.
    pub profile: Option<PathBuf>,
    /// The directory the command may write; the current directory when omitted.
    pub workspace: Option<PathBuf>,
    /// More output on stderr (-v: what is enforced, -vv: every step).
    pub verbose: u8,
    /// Write a JSON status (which side an exit code came from) to FILE.
    pub status_file: Option<PathBuf>,
    /// Write the assurance report (what was actually enforced) as JSON to FILE.
    pub report: Option<PathBuf>,
    /// The run's audit log (JSON Lines, written outside the sandbox); by default a new file under
    /// ~/.local/state/stepproof/runs/.
    pub audit_log: Option<PathBuf>,
    /// Unattended run: no terminal needed, the self-test runs first and the launch is refused
    /// if the sandbox is weaker than the profile requires; a job summary is written to
    /// $GITHUB_STEP_SUMMARY when set.
    pub ci: bool,
    /// End the whole sandbox after DURATION (90s, 30m, 1h30m): SIGTERM, then SIGKILL 5 s later.
    /// Exit 124.
    pub timeout: Option<std::time::Duration>,
    /// Run directories kept under ~/.local/state/stepproof/runs/ after this run (the newest;
    /// `all` keeps every one).
    pub keep_runs: crate::audit::runs::Keep,
    /// Write the markdown job summary to FILE.
    pub summary: Option<PathBuf>,
    /// Write the job summary as JSON to FILE.
    pub summary_json: Option<PathBuf>,
    /// Exit 122 when the command finished but the hook denied at least one call.
    pub fail_on_deny: bool,
    /// (Internal) Run the built-in escape probes inside this profile's sandbox instead of a
    /// command; `stepproof selftest` uses it.
    pub selftest: bool,
    /// The command and its arguments.
    pub command: Vec<OsString>,
    /// `--runbook FILE`: the steps the run follows (checked against the profile at launch).
    pub runbook: Option<PathBuf>,
    /// `--approve STEP`: approvals a CI job gives beforehand (recorded).
    pub approve: Vec<String>,
    /// `--runbook-fresh`: start the runbook afresh instead of continuing an earlier run of it
    /// in this workspace (recorded).
    pub runbook_fresh: bool,
    /// (Internal) `--verifier-agent FILE`: a model verifier run; FILE is the `verifier` agent
    /// definition installed in this run's own config directory.
    pub verifier_agent: Option<PathBuf>,
}

/// The run, in order: what is known is read and refused early, what the launch needs is made,
/// the end is owed before the command starts, then the launch and the end — one line a step,
/// each saying why it comes there.
fn carry_out(
    args: &Request,
    outputs: &mut Outputs,
) -> Result<(Outcome, Option<AssuranceReport>), Failure> {
    // What the caller asked for and what this host is: a mistake is refused before anything is
    // made.
    let known = know(args)?;
    // A dead supervisor's end comes before anything here reads the workspace, so this run never
    // takes what the agent left as its launch state.
    finish_owed_runs(&known.facts.run_dir, &known.facts.workspace)?;
    let approval_webhook = approval_webhook(&known)?;
    // In CI the sandbox this profile describes must hold before the agent gets it.
    if args.ci {
        self_test_holds(args)?;
    }
    // The sandbox must neither read nor write its own record.
    audit_log_outside_the_run(&known)?;
    outputs.run_dir = Some(known.facts.run_dir.clone());
    // The retention rule beside this run's directory: started once the sandbox exists, waited
    // for when the run ends.
    crate::supervisor::agent::housekeeping::arrange(&known.facts.run_dir, args.keep_runs);
    tracing::debug!("facts gathered");
    // Before the plan, so that its directory exists and is hidden like the rest of StepProof's
    // state.
    let audit = open_records(&known)?;
    let planned = plan_the_view(&known, audit.as_ref())?;
    // Before anything runs: whatever the sandbox plants at these names later is not followed.
    open_outputs(args, outputs, &planned.plan)?;
    let mut made = make_state(&known, planned)?;
    say_what_is_weaker(&made.plan);
    // A limit the profile requires that this host cannot enforce stops here.
    let limits = prepare_limits(&known)?;
    // Its directory and sockets, its file protected like the profile's, the client inside.
    let runbook_run = runbook_run(
        &known,
        &made.plan,
        audit.as_ref(),
        &limits,
        &approval_webhook,
    )?;
    // No start record, no run: what would run could not be accounted for.
    let started = write_start(
        &known,
        &made.plan,
        audit.as_ref(),
        &limits,
        &approval_webhook,
    )?;
    if let Some(run) = &runbook_run {
        run.start()
            .map_err(|e| Failure::host(format!("the runbook's state: {e}")))?;
    }
    if args.verbose > 0 {
        crate::say_part!("{}", explain::explain_text(&known.profile, &made.plan));
    }
    check_mount_budget(&made.plan).map_err(Failure::refused)?;
    tracing::debug!("plan built");
    let verifier_agent = verifier_agent(args, &made.plan)?;
    // From here nothing returns early: a kill leaves the end to `stepproof repair` or the next
    // run.
    let owed = owe_the_end(&known, &made.plan, audit.as_ref(), &started)?;
    let result = launch(
        &known,
        &mut made,
        (audit.as_ref(), runbook_run.as_ref()),
        &limits,
        &owed,
        verifier_agent.as_deref(),
    );
    tracing::debug!("sandbox gone");
    let Made {
        plan,
        scratch,
        caches,
        command,
        ..
    } = made;
    end::end_of_run(
        end::Run {
            known: &known,
            plan: &plan,
            command: &command,
            audit: audit.as_ref(),
            runbook_run: runbook_run.as_ref(),
        },
        end::Held {
            limits,
            owed,
            exporter: started.exporter,
            scratch,
            caches,
        },
        result,
        outputs,
    )
}

/// A binary of StepProof's installed next to `stepproof-run` (`what` needs it).
fn beside_us(name: &str, what: &str) -> Result<std::path::PathBuf, Failure> {
    let exe = std::env::current_exe()
        .map_err(|e| Failure::host(format!("finding stepproof-run: {e}")))?;
    let path = exe.with_file_name(name);
    if !path.is_file() {
        return Err(Failure::host(format!(
            "{what} is not installed beside stepproof-run ({})",
            path.display()
        )));
    }
    Ok(path)
}

/// What is known before anything is made: the request read against the profile and the host.
struct Known<'a> {
    args: &'a Request,
    profile: Profile,
    runbook: Option<LoadedRunbook>,
    facts: crate::sandbox::plan::HostFacts,
}

/// The profile, the runbook checked against it, and the facts of this host; a home that is
/// not there is refused (checked before the self-test, whose own run would refuse it less
/// clearly).
fn know(args: &Request) -> Result<Known<'_>, Failure> {
    // A profile that does not load is the caller's to fix: refused.
    let profile =
        Profile::load(args.profile.as_deref()).map_err(|e| Failure::refused(e.to_string()))?;
    tracing::debug!("profile loaded");
    if profile.network.gateway.is_some() || profile.hook.is_some() {
        // The gateway's onward trust, parsed on the other core while the plan is made.
        let extra = crate::supervisor::net::gateway::caller_extra_roots();
        if !extra.is_empty() {
            crate::supervisor::net::login::prepare_client_config(extra);
        }
    }
    let runbook = args
        .runbook
        .as_deref()
        .map(|path| load_runbook(path, &profile))
        .transpose()?;
    let mut facts = host::gather_facts(
        args.workspace.as_deref(),
        profile.process.allow_root_fallback,
    )
    .map_err(|e| {
        // A workspace that does not exist or is not a directory: the flags' fault.
        if e.is_configuration() {
            Failure::refused(e.to_string())
        } else {
            Failure::host(e.to_string())
        }
    })?;
    facts.runbook = runbook
        .as_ref()
        .map(|loaded| {
            Ok(crate::sandbox::plan::run_kind::RunbookFacts {
                file: loaded.path.clone(),
                client: beside_us("stepproof", "--runbook: the `stepproof` client")?,
            })
        })
        .transpose()?;
    if args.selftest {
        facts.selftest_probe = Some(beside_us("stepproof", "the self-test's probe")?);
    }
    // Unattended runs, the self-test and model verifier runs start from nothing and keep
    // nothing (a verifier keeps the workspace's caches: it builds nothing of its own).
    facts.fresh = crate::sandbox::plan::run_kind::Fresh {
        sessions: args.ci || args.selftest || args.verifier_agent.is_some(),
        caches: args.ci || args.selftest,
    };
    facts.single_turn = crate::sandbox::plan::agent_layer::single_turn(&args.command);
    facts.shell_tool = crate::sandbox::plan::agent_layer::offers_bash(&args.command);
    facts.session_seeding = crate::sandbox::plan::agent_layer::session_seeding(&args.command);
    // The home is shown read-only and holds StepProof's run directories: one that is not
    // there is a mistake in the caller's environment, not something to create.
    if !facts.home.is_dir() {
        let what = if facts.home.exists() {
            "is not a directory"
        } else {
            "does not exist"
        };
        return Err(Failure::refused(format!(
            "the home {} {what} (from $HOME, or the password database when HOME is unset): \
             StepProof shows the home read-only inside and keeps its run directories under \
             ~/.local/state/stepproof; set HOME to an existing directory",
            facts.home.display()
        )));
    }
    Ok(Known {
        args,
        profile,
        runbook,
        facts,
    })
}

/// The self-test of this profile's sandbox: a probe that escapes refuses the run.
fn self_test_holds(args: &Request) -> Result<(), Failure> {
    let escaped = run_selftest(args).map_err(Failure::host)?;
    if !escaped.is_empty() {
        return Err(Failure::host(format!(
            "the self-test found the sandbox weaker than the profile requires ({}): refusing to start the command",
            escaped.join(", ")
        )));
    }
    Ok(())
}

/// The plan and what it names, made.
struct Planned {
    plan: crate::sandbox::plan::SandboxPlan,
    scratch: Option<start::ScratchDir>,
    gateway: Option<(
        crate::supervisor::net::gateway::Upstream,
        std::sync::Arc<crate::supervisor::net::login::ModelLogin>,
    )>,
}

/// The plan, its scratch directory, and the model login — found before the plan is final,
/// because the organisation's server-managed settings are fetched with it (when the command
/// is Claude Code and Claude Code on this host would fetch them) and carried in as a managed
/// drop-in; then what would switch the hook off is refused.
fn plan_the_view(known: &Known<'_>, audit: Option<&AuditSink>) -> Result<Planned, Failure> {
    let args = known.args;
    let mut plan = host::plan_for(&known.profile, &known.facts).map_err(plan_failure)?;
    // What the plan names, made now (and removed when this goes, whatever happens next).
    let scratch = start::ScratchDir::create(&plan).map_err(|e| Failure::host(e.to_string()))?;
    tracing::debug!("scratch made");
    let gateway = start::prepare_gateway(&plan).map_err(Failure::host)?;
    tracing::debug!("gateway prepared");
    // No login Claude Code could use: said now, in the one line that works, before Claude
    // Code's screen would cover it with a `/login` that cannot work inside.
    if let Some((_, login)) = &gateway
        && login.is_none()
        && plan.agent.is_some()
        && !args.selftest
        && args.verifier_agent.is_none()
        && crate::sandbox::plan::agent_layer::command_is_claude(&args.command)
        && crate::sandbox::plan::agent_layer::claude_needs_a_login(&args.command)
        && !crate::sandbox::plan::agent_layer::uses_a_cloud_provider(&known.facts.env)
    {
        return Err(Failure::refused(start::NOT_LOGGED_IN.to_string()));
    }
    if let (Some((_, login)), Some(audit)) = (&gateway, audit) {
        start::record_login_refreshes(login, audit);
    }
    if let Some((upstream, login)) = &gateway
        && plan.agent.is_some()
        && !args.selftest
        && crate::sandbox::plan::agent_layer::command_is_claude(&args.command)
        && let Some((url, fetched)) =
            crate::supervisor::net::server_settings::at_launch(&plan, &upstream.host, login)
    {
        plan.take_server_settings(&url, fetched);
    }

    if plan.agent.is_some() {
        hook_stays(known, &plan)?;
    }
    Ok(Planned {
        plan,
        scratch,
        gateway,
    })
}

/// The hook is the profile's promise: a command line that would switch it off is refused,
/// and a host whose managed settings try to is refused in CI (and under `strict`) and named
/// always.
fn hook_stays(known: &Known<'_>, plan: &crate::sandbox::plan::SandboxPlan) -> Result<(), Failure> {
    if let Some(why) = crate::sandbox::plan::agent_layer::command_defeats_hook(&known.args.command)
    {
        return Err(Failure::refused(format!("refusing the command: {why}")));
    }
    if plan.managed_settings_removed.is_empty() {
        return Ok(());
    }
    let list = plan.managed_settings_removed.join("\n  ");
    if known.args.ci {
        // The host's set-up, not the invocation: another host may run it.
        return Err(Failure::host(format!(
            "the organisation's Claude Code managed settings (the host's files, or the server's) set keys that would switch StepProof's hook off or replace it; refusing to start in CI (remove them):\n  {list}"
        )));
    }
    if known.profile.assurance == crate::sandbox::landlock::Assurance::Strict {
        return Err(Failure::host(format!(
            "the organisation's Claude Code managed settings (the host's files, or the server's) set keys that would weaken StepProof (switch its hook off, replace the managed settings, or fetch a credential inside); refusing to start under assurance = \"strict\" (remove them, or use a profile with assurance = \"best-effort\", which drops them inside and runs):\n  {list}"
        )));
    }
    crate::say!(
        "stepproof-run: WARNING: the organisation's Claude Code managed settings set keys StepProof owns; they are removed inside, the hook stays, the rest of the organisation's settings apply:\n  {list}"
    );
    Ok(())
}

/// The plan, and the per-run state made for it.
struct Made {
    plan: crate::sandbox::plan::SandboxPlan,
    scratch: Option<start::ScratchDir>,
    caches: Option<crate::supervisor::agent::caches::Caches>,
    gateway: Option<(
        crate::supervisor::net::gateway::Upstream,
        std::sync::Arc<crate::supervisor::net::login::ModelLogin>,
    )>,
    /// What the init will run (the self-test's probe binary, or the caller's command).
    command: Vec<OsString>,
}

/// The build caches the plan binds are made (a run's own removed when this goes); the
/// command is the caller's, or the self-test's probes.
fn make_state(known: &Known<'_>, planned: Planned) -> Result<Made, Failure> {
    let args = known.args;
    let Planned {
        plan,
        scratch,
        gateway,
    } = planned;
    let caches = crate::supervisor::agent::caches::Caches::create(&plan)
        .map_err(|e| Failure::host(format!("stepproof-run: {e}")))?;
    tracing::debug!("caches made");
    let command: Vec<OsString> = if args.selftest {
        crate::cli::selftest::probe_command(&plan)
    } else {
        args.command.clone()
    };
    Ok(Made {
        plan,
        scratch,
        caches,
        gateway,
        command,
    })
}

/// What the plan warns of, and what a host without user namespaces loses.
fn say_what_is_weaker(plan: &crate::sandbox::plan::SandboxPlan) {
    for note in plan.notes.iter().filter(|n| n.starts_with("WARNING")) {
        crate::say!("stepproof-run: {note}");
    }
    if !plan.losses.is_empty() {
        crate::say!(
            "stepproof-run: WARNING: running with Landlock + seccomp only (no user namespaces here):"
        );
        for loss in &plan.losses {
            crate::say!("  lost: {loss}");
        }
    }
}

/// The run's cgroup. A runbook run always gets a freezer where the host can give one: its
/// evidence commands run while the agent's processes are frozen.
fn prepare_limits(
    known: &Known<'_>,
) -> Result<crate::supervisor::launch::cgroup::RunLimits, Failure> {
    let nonce = format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    );
    let profile = &known.profile;
    let limits = crate::supervisor::launch::cgroup::prepare(
        &profile.process.limits.cgroup(known.args.ci),
        profile.assurance == crate::sandbox::landlock::Assurance::Strict,
        std::path::Path::new("/proc"),
        &nonce,
        known.runbook.is_some(),
    )
    .map_err(Failure::host)?;
    for dropped in &limits.dropped {
        tracing::info!("{dropped}");
    }
    tracing::debug!("cgroup prepared");
    Ok(limits)
}

/// The launch, with what it serves and watches meanwhile.
fn launch(
    known: &Known<'_>,
    made: &mut Made,
    (audit, runbook_run): (
        Option<&AuditSink>,
        Option<&crate::supervisor::runbook::engine::RunbookRun>,
    ),
    limits: &crate::supervisor::launch::cgroup::RunLimits,
    owed: &OwedEnd,
    verifier_agent: Option<&str>,
) -> start::RunResult {
    let args = known.args;
    let options = start::RunOptions {
        verifier_agent,
        timeout: args.timeout,
        inside_max_bytes: known.profile.audit.inside_max_mib << 20,
        // Names that do not exist yet are watched while the run is on (moved at once).
        watch: (!args.selftest).then(|| {
            (
                owed.snapshot.watch_targets(),
                known.facts.run_dir.join("quarantine"),
            )
        }),
        cgroup: limits.cgroup.as_ref(),
        gateway: made.gateway.take(),
        runbook: runbook_run,
        // Loops of denials restate what is allowed; under --ci they end the run (121).
        denial_loops: known.profile.hook.as_ref().map(|hook| {
            crate::audit::denial_loops::LoopSettings {
                after: hook.denial_loop_after(),
                stop: args.ci,
            }
        }),
    };
    launch_unless_ended(made, audit, &options)
}

/// The launch — unless a SIGINT, SIGTERM or SIGHUP came before it (held until now): then the
/// command is not started, and the run ends here with its end record.
fn launch_unless_ended(
    made: &Made,
    audit: Option<&AuditSink>,
    options: &start::RunOptions<'_>,
) -> start::RunResult {
    match crate::supervisor::launch::relay::ending_signal_pending() {
        Some(signal) => {
            crate::say!(
                "stepproof-run: {} before the command started: not starting it",
                signal.as_str()
            );
            start::RunResult {
                outcome: Outcome::terminated(signal as i32, None),
                report: None,
                hook_records: None,
                moved_during_run: Vec::new(),
                denial_loop: None,
            }
        }
        None => start::run(&made.plan, &made.command, audit, options),
    }
}

/// A plan that cannot be built: refused when the profile or the flags ask for what cannot be
/// (the workspace, a conflict), a host failure when this host lacks something.
fn plan_failure(e: PlanError) -> Failure {
    if e.is_configuration() {
        Failure::refused(e.to_string())
    } else {
        Failure::host(e.to_string())
    }
}

/// Runs `stepproof-run --selftest` with the same profile and workspace; returns the probes that
/// escaped (or an error if the self-test could not run).
fn run_selftest(args: &Request) -> Result<Vec<String>, String> {
    let exe = std::env::current_exe().map_err(|e| format!("finding stepproof-run: {e}"))?;
    let mut cmd = std::process::Command::new(exe);
    if let Some(p) = &args.profile {
        cmd.arg("--profile").arg(p);
    }
    if let Some(w) = &args.workspace {
        cmd.arg("--workspace").arg(w);
    }
    let out = cmd
        .arg("--selftest")
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("running the self-test: {e}"))?;
    let results = crate::cli::selftest::parse_results(&String::from_utf8_lossy(&out.stdout));
    if results.is_empty() {
        return Err(format!(
            "the self-test did not run: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(results
        .into_iter()
        .filter(|r| r.escaped)
        .map(|r| r.name)
        .collect())
}

/// The whole run from the caller's side, after the arguments: the exit code to end with.
pub fn run(args: &Request) -> i32 {
    // Before any thread: a signal from outside waits for the launch or the relay, which end the
    // run with its end record written.
    crate::supervisor::launch::relay::hold_ending_signals();
    let mut outputs = Outputs::default();
    let (outcome, report) = match carry_out(args, &mut outputs) {
        Ok(done) => done,
        Err(failure) => (Outcome::from_failure(failure), None),
    };
    if !outputs.opened {
        let run_dir = outputs.run_dir.take();
        outputs = Outputs::open_late(args);
        outputs.run_dir = run_dir;
    }
    if let Some(report) = &report {
        let json = serde_json::to_string_pretty(report).unwrap_or_default();
        if args.verbose > 0 {
            crate::say!("enforced: {json}");
        }
        write_output(&mut outputs.report, (json + "\n").as_bytes());
    }
    match &outcome {
        Outcome::StepproofError { message, .. } | Outcome::Refused { message, .. } => {
            crate::say!("stepproof-run: {message}")
        }
        Outcome::Terminated {
            signal_name,
            exit_code,
            ..
        } => crate::say!(
            "stepproof-run: {signal_name} from outside ended the run; nothing of its sandbox is left (exit {exit_code})"
        ),
        Outcome::NotFound { message, .. } | Outcome::NotExecutable { message, .. } => {
            crate::say!(
                "stepproof-run: {}: {message}",
                args.command
                    .first()
                    .map(|c| c.to_string_lossy())
                    .unwrap_or_default()
            )
        }
        _ => {}
    }
    let mut status = serde_json::to_value(&outcome).unwrap_or_default();
    if let Some(object) = status.as_object_mut() {
        object.extend(std::mem::take(&mut outputs.status_extra));
    }
    let json = serde_json::to_string_pretty(&status).unwrap_or_default();
    write_output(&mut outputs.status, (json + "\n").as_bytes());
    for said in crate::supervisor::agent::housekeeping::finish() {
        crate::say!("stepproof-run: {said}");
    }
    start::reap_children(std::time::Duration::from_secs(10));
    tracing::debug!("exiting");
    outcome.exit_code()
}

/// A plan that needs more mounts than the kernel allows in one mount namespace
/// (`fs.mount-max`) can never launch: refused before anything starts, with the count. The
/// sandbox's namespace starts as a copy of the host's, so the host's mounts count too (read only
/// when the plan's own come near the limit).
fn check_mount_budget(plan: &crate::sandbox::plan::SandboxPlan) -> Result<(), String> {
    let needed = plan
        .mounts
        .iter()
        .filter(|op| !matches!(op, crate::sandbox::plan::MountOp::Symlink { .. }))
        .count() as u64;
    let Some(max) = std::fs::read_to_string("/proc/sys/fs/mount-max")
        .ok()
        .and_then(|t| t.trim().parse::<u64>().ok())
    else {
        return Ok(());
    };
    if needed.saturating_mul(2) < max {
        return Ok(());
    }
    let host =
        std::fs::read_to_string("/proc/self/mountinfo").map_or(0, |t| t.lines().count() as u64);
    mount_budget(needed, host, max)
}

/// The decision of [`check_mount_budget`], given the counts.
fn mount_budget(needed: u64, host: u64, max: u64) -> Result<(), String> {
    if needed.saturating_add(host) <= max {
        return Ok(());
    }
    Err(format!(
        "this plan needs at least {needed} mounts (the profile's filesystem entries that exist here: hidden, read-only, writable, and the home's secrets), plus the {host} the sandbox's mount namespace starts with, but this host allows {max} in one namespace (sysctl fs.mount-max): it could never launch; hide a directory instead of the files in it, or raise fs.mount-max"
    ))
}

#[cfg(test)]
mod mount_budget_tests {
    use super::mount_budget;

    #[test]
    fn a_plan_over_fs_mount_max_is_refused_with_the_counts() {
        assert!(mount_budget(100, 40, 100_000).is_ok());
        assert!(mount_budget(99_960, 40, 100_000).is_ok());
        let refused = mount_budget(99_961, 40, 100_000).unwrap_err();
        assert!(
            refused.contains("at least 99961 mounts")
                && refused.contains("40 the sandbox")
                && refused.contains("allows 100000")
                && refused.contains("fs.mount-max"),
            "{refused}"
        );
        assert!(mount_budget(u64::MAX, u64::MAX, 1).is_err());
    }
}
