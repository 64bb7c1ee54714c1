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

/// The audit log: a failure to open the one asked for with `--audit-log` stops the run; the
/// default one only warns (the run is not less protected without it).
fn open_audit_log(
    args: &Request,
    home: &std::path::Path,
) -> Result<Option<AuditSink>, AuditSinkError> {
    let explicit = args.audit_log.is_some();
    let path = args
        .audit_log
        .clone()
        .unwrap_or_else(|| AuditSink::default_path(home));
    match AuditSink::open(&path) {
        Ok(sink) => {
            if args.verbose > 0 {
                crate::say!("audit log: {}", sink.path().display());
            }
            Ok(Some(sink))
        }
        Err(e) if explicit => Err(e),
        Err(e) => {
            tracing::warn!("{e}; running without an audit log");
            Ok(None)
        }
    }
}

/// The files the caller asked for, opened before the sandbox starts (see
/// [`crate::supervisor::way_out::output_files`]).
#[derive(Default)]
struct Outputs {
    opened: bool,
    /// Added to the status file's object (what the outcome alone does not say).
    status_extra: serde_json::Map<String, serde_json::Value>,
    status: Option<OutputFile>,
    report: Option<OutputFile>,
    summaries: Vec<OutputFile>,
    summary_json: Option<OutputFile>,
    /// The run's directory under the state dir, once the host's facts are known: the retention
    /// rule is applied beside it when the run ends.
    run_dir: Option<PathBuf>,
}

impl Outputs {
    fn open(args: &Request, roots: &[PathBuf]) -> Result<Outputs, String> {
        let open = |what, path: &Option<PathBuf>, mode| {
            path.as_deref()
                .map(|p| OutputFile::open(what, p, roots, mode))
                .transpose()
                .map_err(|e| e.to_string())
        };
        let mut summaries: Vec<OutputFile> =
            open("the summary", &args.summary, WriteMode::Replace)?
                .into_iter()
                .collect();
        // An empty value names no file (GitHub sets it to one; a job that clears it wants none).
        if args.ci
            && let Some(path) = std::env::var_os("GITHUB_STEP_SUMMARY").filter(|p| !p.is_empty())
        {
            summaries.push(
                OutputFile::open(
                    "$GITHUB_STEP_SUMMARY",
                    std::path::Path::new(&path),
                    roots,
                    WriteMode::Append,
                )
                .map_err(|e| e.to_string())?,
            );
        }
        Ok(Outputs {
            opened: true,
            status_extra: serde_json::Map::new(),
            status: open("the status file", &args.status_file, WriteMode::Replace)?,
            report: open("the report", &args.report, WriteMode::Replace)?,
            summaries,
            summary_json: open("the JSON summary", &args.summary_json, WriteMode::Replace)?,
            run_dir: None,
        })
    }

    /// A launch that failed before the plan: nothing ran, so the workspace is the only
    /// directory a run could have written (an earlier one).
    fn open_late(args: &Request) -> Outputs {
        let workspace = args
            .workspace
            .clone()
            .or_else(|| std::env::current_dir().ok())
            .and_then(|w| w.canonicalize().ok());
        Outputs::open(args, &workspace.into_iter().collect::<Vec<_>>()).unwrap_or_else(|e| {
            crate::say!("stepproof-run: {e}");
            Outputs {
                opened: true,
                ..Outputs::default()
            }
        })
    }
}

fn write_output(file: &mut Option<OutputFile>, bytes: &[u8]) {
    if let Some(file) = file
        && let Err(e) = file.write(bytes)
    {
        crate::say!("stepproof-run: writing {}: {e}", file.path().display());
    }
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
    let mut made = make_state(&known, planned, outputs)?;
    say_what_is_weaker(&made.plan);
    // A limit the profile requires that this host cannot enforce stops here.
    let limits = prepare_limits(&known)?;
    // Its directory and sockets, its file protected like the profile's, the client inside.
    let runbook_run = runbook_run(
        &known,
        &mut made.plan,
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
    facts.runbook = runbook.is_some();
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

type Webhook = Option<std::sync::Arc<crate::supervisor::runbook::webhook::Webhook>>;

/// The approval webhook: named only from outside the workspace, https, out of the agent's
/// reach; its key read now when the runbook has an approval step to ask it.
fn approval_webhook(known: &Known<'_>) -> Result<Webhook, Failure> {
    let webhook = crate::supervisor::runbook::webhook::prepare(
        &known.profile,
        &known.facts.env,
        &known.facts.home,
        &known.facts.workspace,
        known.runbook.as_ref().is_some_and(|r| {
            r.runbook
                .steps
                .iter()
                .any(|s| s.evidence.iter().any(|e| e.approval.is_some()))
        }),
    )
    .map_err(Failure::refused)?
    .map(std::sync::Arc::new);
    for note in webhook.iter().flat_map(|w| &w.notes) {
        crate::say!("stepproof-run: {note}");
    }
    Ok(webhook)
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

/// `--audit-log` resolved once, here, against the directories the run will be able to write
/// (a directory that does not exist yet counts by its name; a link inside them is not
/// followed): inside one, it is refused.
fn audit_log_outside_the_run(known: &Known<'_>) -> Result<(), Failure> {
    let Some(path) = &known.args.audit_log else {
        return Ok(());
    };
    let facts = &known.facts;
    let mut roots = vec![facts.workspace.clone()];
    roots.extend(known.profile.filesystem.writable.iter().filter_map(|spec| {
        spec.resolve(&facts.home, &facts.workspace)
            .canonicalize()
            .ok()
    }));
    let inside = writable_root_of(path, &roots)
        .map_err(|e| Failure::refused(format!("--audit-log {}: {e}", path.display())))?;
    if let Some(root) = inside {
        return Err(Failure::refused(format!(
            "--audit-log {}: inside {}, where the sandbox could read and write it; put it outside",
            path.display(),
            root.display()
        )));
    }
    Ok(())
}

/// The audit log, with one budget (bytes and rate) for what the agent causes to be recorded
/// (hook reports, connections, model requests, runbook requests), in the log and the export
/// alike.
fn open_records(known: &Known<'_>) -> Result<Option<AuditSink>, Failure> {
    let audit = open_audit_log(known.args, &known.facts.home).map_err(audit_failure)?;
    if let Some(audit) = &audit {
        audit.limit_caused(
            known.profile.audit.inside_max_mib << 20,
            known.profile.audit.inside_max_per_second(),
        );
    }
    tracing::debug!("audit log opened");
    Ok(audit)
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
    if let (Some((_, login)), Some(audit)) = (&gateway, audit) {
        start::record_login_refreshes(login, audit);
    }
    if let Some((upstream, login)) = &gateway
        && plan.agent.is_some()
        && !args.selftest
        && crate::sandbox::plan::agent_layer::command_is_claude(&args.command)
    {
        crate::supervisor::net::server_settings::at_launch(&mut plan, &upstream.host, login);
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

/// The files the caller asked for (status, report, summaries), opened before anything runs.
fn open_outputs(
    args: &Request,
    outputs: &mut Outputs,
    plan: &crate::sandbox::plan::SandboxPlan,
) -> Result<(), Failure> {
    let run_dir = outputs.run_dir.clone();
    *outputs = Outputs::open(args, &writable_roots(plan))
        .inspect_err(|_| outputs.opened = true)
        .map_err(Failure::refused)?;
    outputs.run_dir = run_dir;
    tracing::debug!("outputs opened");
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

/// Unattended runs, the self-test and model verifier runs start from nothing and keep
/// nothing; the build caches the plan binds are made (a run's own removed when this goes); the
/// self-test's probe is installed.
fn make_state(known: &Known<'_>, planned: Planned, outputs: &Outputs) -> Result<Made, Failure> {
    let args = known.args;
    let Planned {
        mut plan,
        scratch,
        gateway,
    } = planned;
    if (args.ci || args.selftest || args.verifier_agent.is_some())
        && let Some(agent) = &mut plan.agent
    {
        agent.sessions = None;
    }
    if (args.ci || args.selftest)
        && let Some(run_dir) = &outputs.run_dir
    {
        plan.use_per_run_caches(run_dir);
    }
    let caches = crate::supervisor::agent::caches::Caches::create(&plan)
        .map_err(|e| Failure::host(format!("stepproof-run: {e}")))?;
    tracing::debug!("caches made");
    let command: Vec<OsString> = if args.selftest {
        crate::cli::selftest::install_probe_binary(&mut plan).map_err(Failure::host)?
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

/// The start record's account: the run's id (on every record the export ships), the export,
/// and the record's sequence number.
struct Started {
    run_id: String,
    exporter: Option<crate::audit::export::Exporter>,
    seq: Option<u64>,
}

/// The export (attached before the start record) and the start record itself: the tier this
/// run gets and what it gives up, the limits, the runbook. A log that cannot take it stops the
/// run (118).
fn write_start(
    known: &Known<'_>,
    plan: &crate::sandbox::plan::SandboxPlan,
    audit: Option<&AuditSink>,
    limits: &crate::supervisor::launch::cgroup::RunLimits,
    approval_webhook: &Webhook,
) -> Result<Started, Failure> {
    let args = known.args;
    let run_id = crate::audit::export::new_run_id();
    let Some(audit) = audit else {
        tracing::debug!("start record written");
        return Ok(Started {
            run_id,
            exporter: None,
            seq: None,
        });
    };
    // The self-test's own run is not a run of the caller's to ship.
    let exporter = if args.selftest {
        None
    } else {
        start_export(
            &known.profile,
            plan,
            known.runbook.as_ref(),
            &known.facts,
            audit,
            &run_id,
        )?
    };
    let seq = audit.record_at(
        "supervisor",
        "run-start",
        &start_record(known, plan, limits, approval_webhook, &run_id),
    );
    if let Some(why) = audit.failure() {
        return Err(Failure {
            code: crate::exit::ExitCode::AuditIncomplete,
            message: format!(
                "the audit log {}: the start record could not be written ({why}); the command was not started",
                audit.path().display()
            ),
        });
    }
    tracing::debug!("start record written");
    Ok(Started {
        run_id,
        exporter,
        seq,
    })
}

/// The start record: the tier this run gets and what it gives up, the limits, the runbook.
fn start_record(
    known: &Known<'_>,
    plan: &crate::sandbox::plan::SandboxPlan,
    limits: &crate::supervisor::launch::cgroup::RunLimits,
    approval_webhook: &Webhook,
    run_id: &str,
) -> serde_json::Value {
    let args = known.args;
    let argv: Vec<String> = args
        .command
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    serde_json::json!({
        "run_id": run_id,
        "argv": argv,
        "profile": plan.profile,
        "policy_hash": plan.policy_hash,
        "stepproof_version": env!("CARGO_PKG_VERSION"),
        "workspace": crate::audit::text::path(&plan.workspace),
        // The tier this run gets and what it gives up, in the first record: where the
        // host or a container's runtime refuses user namespaces, Landlock and seccomp
        // alone (the profile allowed it), with every loss and the reason.
        "isolation": plan.isolation,
        "lost": plan.losses,
        "user_namespaces": (plan.isolation
            == crate::sandbox::plan::Isolation::LandlockSeccompOnly)
            .then(|| crate::cli::doctor::user_namespace_check().1),
        "managed_settings_removed": plan.managed_settings_removed,
        // Where the launch's bounded scans stopped, and what else the plan noted.
        "notes": plan.notes,
        // Where each limit of the run's cgroup is enforced, or why it is not.
        "limits": limits.plan.entries,
        "limit_lines": limits.plan.lines(),
        "limits_dropped": limits.dropped,
        "runbook": known.runbook.as_ref().map(|r| serde_json::json!({
            "id": r.runbook.id,
            "hash": r.runbook.hash(),
            "path": crate::audit::text::path(&r.path),
            "steps": r.runbook.steps.len(),
            "pre_approved": args.approve,
            "fresh": args.runbook_fresh,
            "approval_webhook": approval_webhook
                .as_deref()
                .map(crate::supervisor::runbook::webhook::describe),
        })),
    })
}

/// A model verifier run: its agent definition, for its own config directory only.
fn verifier_agent(
    args: &Request,
    plan: &crate::sandbox::plan::SandboxPlan,
) -> Result<Option<String>, Failure> {
    match &args.verifier_agent {
        None => Ok(None),
        Some(_) if plan.agent.is_none() => Err(Failure::refused(
            "--verifier-agent: the profile has no agent layer (no [hook]) to install it in",
        )),
        Some(path) => crate::regular_file::read_to_string(path, 64 << 10)
            .map(Some)
            .map_err(|e| Failure::host(format!("--verifier-agent {}: {e}", path.display()))),
    }
}

/// What the end needs and owes: the launch snapshot, the sweep's scope, and the marker.
struct OwedEnd {
    snapshot: Snapshot,
    scope: SweepScope,
    marker: Option<Owed>,
}

/// The launch snapshot, and what the end owes, in the run directory before the command starts:
/// if this process is killed from here on, `stepproof repair` or the next run on the workspace
/// finishes the end with this snapshot. The self-test's run has no sweep, and owes none.
fn owe_the_end(
    known: &Known<'_>,
    plan: &crate::sandbox::plan::SandboxPlan,
    audit: Option<&AuditSink>,
    started: &Started,
) -> Result<OwedEnd, Failure> {
    let snapshot = Snapshot::take(plan);
    let scope = SweepScope::of(&known.profile, plan);
    tracing::debug!("snapshot taken");
    let marker = if known.args.selftest {
        None
    } else {
        let owed = Owed::record(
            &known.facts.run_dir,
            &started.run_id,
            audit.map(AuditSink::path),
            started.seq,
            &scope,
            &snapshot,
        )
        .map_err(|e| {
            Failure::host(format!(
                "recording what the run's end owes (so that it survives a kill): {e}; the command was not started"
            ))
        })?;
        tracing::debug!("work owed recorded");
        Some(owed)
    };
    Ok(OwedEnd {
        snapshot,
        scope,
        marker,
    })
}

/// The runbook's run, when there is one (see [`prepare_runbook`]).
fn runbook_run(
    known: &Known<'_>,
    plan: &mut crate::sandbox::plan::SandboxPlan,
    audit: Option<&AuditSink>,
    limits: &crate::supervisor::launch::cgroup::RunLimits,
    approval_webhook: &Webhook,
) -> Result<Option<crate::supervisor::runbook::engine::RunbookRun>, Failure> {
    let Some(loaded) = &known.runbook else {
        return Ok(None);
    };
    prepare_runbook(
        known.args,
        loaded,
        plan,
        &known.facts,
        audit,
        limits.cgroup.as_ref(),
        limits.no_freezer.clone(),
        approval_webhook.clone(),
        crate::supervisor::runbook::files::Budget::from_profile(&known.profile.runbook),
    )
    .map(Some)
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
            }
        }
        None => start::run(&made.plan, &made.command, audit, options),
    }
}

/// The run's end is done: its marker goes (the lock stays held until the process ends).
fn discharge(owed: Option<Owed>) {
    if let Some(owed) = owed
        && let Err(e) = owed.discharge()
    {
        crate::say!("stepproof-run: removing the marker of work owed: {e}");
    }
}

/// Finishes the owed runs of `workspace` (runs whose supervisor died before their end), from
/// the run directories beside `own`, and says so. A run whose sweep could not be done refuses
/// this launch: the workspace may hold what the agent left, and this run would take it as its
/// launch state. One swept but not recorded (its log is busy or full) only warns.
fn finish_owed_runs(own: &std::path::Path, workspace: &std::path::Path) -> Result<(), Failure> {
    let Some(runs) = own.parent() else {
        return Ok(());
    };
    let finished = recover::finish(
        runs,
        Some(workspace),
        recover::VIA_RUN,
        std::time::Duration::from_secs(10),
    );
    let mut refused = Vec::new();
    for done in finished {
        match done {
            recover::Finished::Done(repair) => {
                for line in recover::describe(&repair) {
                    crate::say!("stepproof-run: {line}");
                }
            }
            recover::Finished::Live(_) => {}
            recover::Finished::Unfinished(u) if u.swept => {
                crate::say!("stepproof-run: WARNING: {u}");
            }
            recover::Finished::Unfinished(u) => refused.push(u.to_string()),
        }
    }
    tracing::debug!("owed runs finished");
    if refused.is_empty() {
        Ok(())
    } else {
        Err(Failure::host(format!(
            "an earlier run in {} died before its end, and that end could not be finished: {}; not starting the command (this run would take what that run left as its launch state). See `stepproof repair {}`",
            workspace.display(),
            refused.join("; "),
            crate::audit::text::shell_word(&crate::audit::text::path(workspace))
        )))
    }
}

/// The audit export, when the profile or `stepproof-run`'s environment names a collector: the
/// outbox in the run's directory, attached to the sink before the start record, and its
/// shipper thread. A setting that cannot be right (a bad URL or header) refuses the run; an
/// outbox that cannot be made only warns (the local log is the record).
fn start_export(
    profile: &Profile,
    plan: &crate::sandbox::plan::SandboxPlan,
    runbook: Option<&LoadedRunbook>,
    facts: &crate::sandbox::plan::HostFacts,
    audit: &AuditSink,
    run_id: &str,
) -> Result<Option<crate::audit::export::Exporter>, Failure> {
    let env = |name: &str| std::env::var(name).ok();
    let config = crate::audit::export_config::resolve(profile.audit.export.as_ref(), &env)
        .map_err(|e| Failure::refused(format!("the audit export: {e}")))?;
    let Some(config) = config else {
        return Ok(None);
    };
    let mut resource: Vec<(String, String)> = vec![
        ("service.name".into(), "stepproof".into()),
        ("service.version".into(), env!("CARGO_PKG_VERSION").into()),
        ("stepproof.run.id".into(), run_id.into()),
        ("stepproof.profile.name".into(), plan.profile.clone()),
        ("stepproof.profile.hash".into(), plan.policy_hash.clone()),
    ];
    if let Ok(host) = nix::unistd::gethostname() {
        resource.push(("host.name".into(), host.to_string_lossy().into_owned()));
    }
    if let Some(r) = runbook {
        resource.push(("stepproof.runbook.id".into(), r.runbook.id.to_string()));
        resource.push(("stepproof.runbook.hash".into(), r.runbook.hash()));
    }
    resource.extend(crate::audit::export_otlp::ci_attributes(&env));
    // The caller's attributes add to these (and may rename the service), never change the
    // run's identity.
    for (key, value) in config.resource.clone() {
        if key.starts_with("stepproof.") {
            continue;
        }
        resource.retain(|(k, _)| *k != key);
        resource.push((key, value));
    }
    let first_seq = audit.next_seq();
    // The shipper's batches never overlap the init's clone from a copy of this process: a lock
    // it held then would stay held in the init (see `sys::seed::QUIET`).
    match crate::audit::export::Exporter::start(
        &facts.run_dir,
        config,
        run_id,
        first_seq,
        resource,
        &crate::sys::seed::QUIET,
    ) {
        Ok(exporter) => {
            audit.attach_outbox(exporter.outbox());
            Ok(Some(exporter))
        }
        Err(e) => {
            crate::say!("stepproof-run: WARNING: the audit export is off for this run: {e}");
            Ok(None)
        }
    }
}

/// The end of the export: what is left is sent for at most `flush_timeout`; the status says
/// how many records were not (they wait in the outbox for `stepproof audit ship`).
fn finish_export(exporter: crate::audit::export::Exporter, outputs: &mut Outputs) {
    let summary = exporter.finish();
    if summary.unsent > 0 {
        crate::say!(
            "stepproof-run: audit export: {} of {} records NOT yet sent to {} ({}); they wait in {} — `stepproof audit ship {}` sends them",
            summary.unsent,
            summary.records,
            summary.endpoint,
            summary.last_error.as_deref().unwrap_or("flush timeout"),
            summary.outbox,
            summary.outbox
        );
    } else {
        tracing::info!(records = summary.sent, "audit export: every record sent");
    }
    if let Ok(value) = serde_json::to_value(&summary) {
        outputs.status_extra.insert("export".into(), value);
    }
}

/// A runbook as `--runbook` named it, checked against the run's profile.
struct LoadedRunbook {
    runbook: crate::runbook::Runbook,
    path: PathBuf,
    /// The file as read: what the run must not be able to change.
    source: crate::profile::ProfileSource,
}

/// Reads and checks the runbook against the profile: errors (each at its file:line:column)
/// stop the launch with 125.
fn load_runbook(path: &std::path::Path, profile: &Profile) -> Result<LoadedRunbook, Failure> {
    let text = crate::runbook::read(path).map_err(|e| Failure::host(format!("--runbook: {e}")))?;
    let report = crate::runbook::check(&text, profile);
    let origin = path.display().to_string();
    let errors: Vec<String> = report
        .problems
        .iter()
        .filter(|p| p.severity == crate::runbook::Severity::Error)
        .map(|p| p.render(&origin))
        .collect();
    let runbook = match report.runbook {
        Some(runbook) if errors.is_empty() => runbook,
        _ => {
            return Err(Failure::host(format!(
                "--runbook {origin} has errors against profile {}:\n{}",
                profile.name,
                errors.join("\n")
            )));
        }
    };
    if profile.hook.is_none() {
        return Err(Failure::host(format!(
            "--runbook {origin}: profile {} has no [hook]: nothing would enforce the steps",
            profile.name
        )));
    }
    Ok(LoadedRunbook {
        source: crate::profile::ProfileSource::of(path, &text),
        path: path.canonicalize().unwrap_or_else(|_| path.to_path_buf()),
        runbook,
    })
}

/// The runbook's run: its directory and sockets (bound inside with the `stepproof` client),
/// and its file read-only inside where the run could write it.
#[allow(clippy::too_many_arguments)]
fn prepare_runbook(
    args: &Request,
    loaded: &LoadedRunbook,
    plan: &mut crate::sandbox::plan::SandboxPlan,
    facts: &crate::sandbox::plan::HostFacts,
    audit: Option<&AuditSink>,
    cgroup: Option<&crate::supervisor::launch::cgroup::RunCgroup>,
    no_freezer: Option<String>,
    approval_webhook: Option<std::sync::Arc<crate::supervisor::runbook::webhook::Webhook>>,
    budget: crate::supervisor::runbook::files::Budget,
) -> Result<crate::supervisor::runbook::engine::RunbookRun, Failure> {
    use crate::sandbox::plan::agent_layer::CONTROL_DIR;
    use crate::sandbox::plan::{Access, MountOp};
    let exe = std::env::current_exe()
        .map_err(|e| Failure::host(format!("finding stepproof-run: {e}")))?;
    let client = exe.with_file_name("stepproof");
    if !client.is_file() {
        return Err(Failure::host(format!(
            "--runbook: the `stepproof` client is not installed beside stepproof-run ({})",
            client.display()
        )));
    }
    let Some(seal) = plan.mounts.iter().position(
        |op| matches!(op, MountOp::SealReadOnly { dst } if dst.as_path() == std::path::Path::new(CONTROL_DIR)),
    ) else {
        return Err(Failure::host(
            "--runbook: this plan has no agent layer (/run/stepproof) to carry the runbook's state",
        ));
    };
    let profile = match &args.profile {
        Some(p) => p
            .canonicalize()
            .unwrap_or_else(|_| p.clone())
            .display()
            .to_string(),
        None => "default".to_string(),
    };
    // An earlier run of this runbook here that ended with steps open is continued, its state
    // rebuilt from its verified audit chain.
    let continued = if args.runbook_fresh {
        None
    } else {
        use crate::supervisor::runbook::continuation::{Found, find};
        match find(
            &facts.run_dir,
            &loaded.runbook,
            &loaded.runbook.hash(),
            &crate::audit::text::path(&plan.workspace),
        )
        .map_err(|e| Failure::refused(format!("--runbook: {e}")))?
        {
            Found::Nothing => None,
            Found::NotContinued(why) => {
                crate::say!("stepproof-run: runbook {}: {why}", loaded.runbook.id);
                None
            }
            Found::Continue(earlier) => {
                let passed: Vec<&str> = loaded
                    .runbook
                    .steps
                    .iter()
                    .zip(&earlier.steps)
                    .filter(|(_, s)| s.passed)
                    .map(|(step, _)| step.id.as_str())
                    .collect();
                crate::say!(
                    "stepproof-run: runbook {}: continuing run {} (its audit log verified, head {}); passed already: {}",
                    loaded.runbook.id,
                    earlier.run_id,
                    earlier.head,
                    if passed.is_empty() {
                        "none".to_string()
                    } else {
                        passed.join(", ")
                    }
                );
                Some(earlier)
            }
        }
    };
    let run = crate::supervisor::runbook::engine::RunbookRun::prepare(
        loaded.runbook.clone(),
        audit,
        &facts.run_dir,
        (plan.identity.outside_uid, plan.identity.outside_gid),
        &plan.home,
        &plan.workspace,
        crate::supervisor::runbook::engine::EvidenceContext {
            run_binary: exe,
            profile,
            profile_name: plan.profile.clone(),
            workspace: plan.workspace.clone(),
            run_dir: facts.run_dir.clone(),
            ci: args.ci,
            pre_approved: args.approve.clone(),
            cgroup_dirs: cgroup.map(|c| c.dirs()).unwrap_or_default(),
            no_freezer,
            // The run's own --timeout, from about now: model verifiers count inside it.
            deadline: args.timeout.map(|t| std::time::Instant::now() + t),
            approval_webhook,
            budget,
        },
        continued,
    )
    .map_err(|e| Failure::host(format!("--runbook: {e}")))?;
    // A log put elsewhere is named in the run's directory, so a later run continues from it.
    if args.audit_log.is_some()
        && let Some(audit) = audit
        && let Err(e) = crate::supervisor::runbook::continuation::record_log_elsewhere(
            &facts.run_dir,
            audit.path(),
        )
    {
        crate::say!(
            "stepproof-run: WARNING: naming the audit log {} in the run's directory: {e}; a later run of this runbook cannot continue this one",
            audit.path().display()
        );
    }
    plan.mounts.splice(
        seal..seal,
        [
            MountOp::FromSupervisor {
                src: run.dir(),
                dst: crate::runbook::client::RUNBOOK_DIR.into(),
                access: Access::ReadOnly,
            },
            MountOp::FromSupervisor {
                src: client,
                dst: std::path::Path::new(CONTROL_DIR).join("stepproof"),
                access: Access::ReadOnly,
            },
        ],
    );
    // The slash commands that act on the run, beside the agents in the config directory.
    if let Some(agent) = plan.agent.as_mut() {
        agent.shipped.extend(
            crate::runbook::chat::COMMANDS
                .iter()
                .map(|(path, _)| path.to_string()),
        );
    }
    // The runbook file, where the run could write it: read-only, its directories pinned (as
    // the profile's files are); its hash is compared after the run.
    if plan.isolation == crate::sandbox::plan::Isolation::Namespaces {
        let roots = writable_roots(plan);
        if let Some(root) = roots.iter().filter(|r| loaded.path.starts_with(r)).max() {
            let rel = loaded.path.strip_prefix(root).unwrap_or(&loaded.path);
            let parts: Vec<_> = rel.components().collect();
            let mut dir = root.clone();
            for part in &parts[..parts.len().saturating_sub(1)] {
                dir.push(part);
                plan.mounts.push(MountOp::PinInPlace { path: dir.clone() });
            }
            plan.mounts.push(MountOp::ReadOnlyInPlace {
                path: loaded.path.clone(),
            });
        }
    }
    Ok(run)
}

/// A command that exists on the host but was not found inside: where it is, and that the
/// sandbox does not show it (the view has the system directories, the workspace, the home
/// read-only and what the profile adds, minus what it hides).
fn outside_the_view(
    command: &OsString,
    env: &[(String, String)],
    plan: &crate::sandbox::plan::SandboxPlan,
) -> Option<String> {
    use crate::sandbox::plan::MountOp;
    let name = std::path::Path::new(command);
    let on_host = if name.components().count() > 1 {
        let name = plan.cwd.join(name.strip_prefix("./").unwrap_or(name));
        name.is_file().then_some(name)
    } else {
        let path = env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.as_str())?;
        std::env::split_paths(path)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    }?;
    let shown = plan.mounts.iter().any(|m| match m {
        MountOp::Bind { dst, .. } | MountOp::IdmappedBind { dst, .. } => on_host.starts_with(dst),
        _ => false,
    });
    let path = crate::audit::text::path(&on_host);
    Some(if shown {
        // In the view: what is missing is what it needs (its `#!` interpreter, a library).
        format!(
            " ({path} is in the sandbox's view; what it needs to start — the interpreter of its `#!` line, a shared library — may not be: `stepproof explain` lists the view)"
        )
    } else {
        format!(
            " ({path} exists on the host but not in the sandbox's view: add its directory to filesystem.read_only in the profile, unless the profile hides it on purpose; `stepproof explain` lists the view)"
        )
    })
}

/// The command died of SIGXFSZ: it wrote past `process.limits.fsize`. (A writer that ignores
/// the signal gets EFBIG instead and says so itself.)
fn file_size_limit(outcome: &Outcome, fsize: u64) -> Option<String> {
    let signal = match outcome {
        Outcome::Signaled { signal, .. } => *signal,
        Outcome::TimedOut { command, .. } => match **command {
            Outcome::Signaled { signal, .. } => signal,
            _ => return None,
        },
        _ => return None,
    };
    (signal == libc::SIGXFSZ).then(|| {
        format!(
            "the command was killed by the file size limit ({}): it wrote a file larger than process.limits.fsize",
            crate::supervisor::launch::cgroup::describe_bytes(fsize)
        )
    })
}

/// The audit log asked for cannot be opened: refused when the path is the caller's to fix (a
/// link, a directory, no such directory, no permission), a host failure when the disk or the
/// system is (full, read-only, out of descriptors, another run holding the log's lock).
fn audit_failure(e: AuditSinkError) -> Failure {
    let transient = matches!(
        e.source.raw_os_error(),
        Some(
            libc::ENOSPC
                | libc::EDQUOT
                | libc::EIO
                | libc::EROFS
                | libc::EAGAIN
                | libc::EMFILE
                | libc::ENFILE
                | libc::ENOMEM
        )
    );
    if transient {
        Failure::host(e.to_string())
    } else {
        Failure::refused(e.to_string())
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

fn write_summaries(outputs: &mut Outputs, summary: &crate::cli::ci::Summary, outcome: &Outcome) {
    // The header says how the run ended for the caller (122 after --fail-on-deny, 118 for an
    // incomplete log), not only what the end record said.
    let mut summary = summary.clone();
    if let Some(status) = serde_json::to_value(outcome)
        .ok()
        .and_then(|v| v["status"].as_str().map(str::to_owned))
    {
        summary.status = status;
    }
    summary.exit_code = i64::from(outcome.exit_code());
    let summary = &summary;
    let mut markdown = summary.markdown();
    markdown.push_str(&format!(
        "\nStatus: `{}`\n",
        serde_json::to_string(outcome).unwrap_or_default()
    ));
    for file in &mut outputs.summaries {
        if let Err(e) = file.write(markdown.as_bytes()) {
            crate::say!(
                "stepproof-run: writing the summary {}: {e}",
                file.path().display()
            );
        }
    }
    let json = serde_json::json!({ "summary": summary, "status": outcome });
    write_output(
        &mut outputs.summary_json,
        (serde_json::to_string_pretty(&json).unwrap_or_default() + "\n").as_bytes(),
    );
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
