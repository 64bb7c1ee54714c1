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
use crate::supervisor::way_out::sweep::{EXIT_TAMPERING, Snapshot, SweepScope};
use std::ffi::OsString;
use std::path::PathBuf;

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
        if args.ci
            && let Some(path) = std::env::var_os("GITHUB_STEP_SUMMARY")
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

/// Profile and facts, then the audit log (before the plan, so that its directory exists and is
/// hidden like the rest of StepProof's state), then the plan and the run.
fn carry_out(
    args: &Request,
    outputs: &mut Outputs,
) -> Result<(Outcome, Option<AssuranceReport>), Failure> {
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
    facts.session_seeding = crate::sandbox::plan::agent_layer::session_seeding(&args.command);
    // The home is shown read-only and holds StepProof's run directories: one that is not
    // there is a mistake in the caller's environment, not something to create (checked before
    // the self-test, whose own run would refuse it less clearly).
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
    // A run of this workspace whose supervisor died before its end owes that end (its sweep,
    // its end record): finished before anything here reads the workspace, so that this run never
    // takes what the agent left (a poisoned repository config) as its launch state.
    finish_owed_runs(&facts.run_dir, &facts.workspace)?;
    // The approval webhook: named only from outside the workspace, https, out of the agent's
    // reach; its key read now when the runbook has an approval step to ask it.
    let approval_webhook = crate::supervisor::runbook::webhook::prepare(
        &profile,
        &facts.env,
        &facts.home,
        &facts.workspace,
        runbook.as_ref().is_some_and(|r| {
            r.runbook
                .steps
                .iter()
                .any(|s| s.evidence.iter().any(|e| e.approval.is_some()))
        }),
    )
    .map_err(Failure::refused)?
    .map(std::sync::Arc::new);
    for note in approval_webhook.iter().flat_map(|w| &w.notes) {
        crate::say!("stepproof-run: {note}");
    }
    if args.ci {
        // The sandbox this profile describes must hold before the agent gets it.
        let escaped = run_selftest(args).map_err(Failure::host)?;
        if !escaped.is_empty() {
            return Err(Failure::host(format!(
                "the self-test found the sandbox weaker than the profile requires ({}): refusing to start the command",
                escaped.join(", ")
            )));
        }
    }
    if let Some(path) = &args.audit_log {
        // The sandbox must neither read nor write its own record: resolved once, here, with the
        // directories the run will be able to write (a directory that does not exist yet counts
        // by its name; a link inside them is not followed).
        let mut roots = vec![facts.workspace.clone()];
        roots.extend(profile.filesystem.writable.iter().filter_map(|spec| {
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
    }
    outputs.run_dir = Some(facts.run_dir.clone());
    // The retention rule beside this run's directory: started once the sandbox exists, waited
    // for when the run ends.
    crate::supervisor::agent::housekeeping::arrange(&facts.run_dir, args.keep_runs);
    tracing::debug!("facts gathered");
    let audit = open_audit_log(args, &facts.home).map_err(audit_failure)?;
    // What the agent causes to be recorded (hook reports, connections, model requests, runbook
    // requests) shares one budget, by bytes and by rate, in the log and the export alike.
    if let Some(audit) = &audit {
        audit.limit_caused(
            profile.audit.inside_max_mib << 20,
            profile.audit.inside_max_per_second(),
        );
    }
    tracing::debug!("audit log opened");
    let mut plan = host::plan_for(&profile, &facts).map_err(plan_failure)?;
    // What the plan names, made now (and removed when this goes, whatever happens next).
    let scratch = start::ScratchDir::create(&plan).map_err(|e| Failure::host(e.to_string()))?;
    tracing::debug!("scratch made");
    // The model login (the gateway's): found before the plan is final, because the
    // organisation's server-managed settings are fetched with it (when the command is Claude
    // Code and Claude Code on this host would fetch them) and carried in as a managed drop-in.
    let gateway = start::prepare_gateway(&plan).map_err(Failure::host)?;
    tracing::debug!("gateway prepared");
    if let (Some((_, login)), Some(audit)) = (&gateway, &audit) {
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
        // The hook is the profile's promise: a command line that would switch it off is
        // refused, and a host whose managed settings try to is refused in CI and named always.
        if let Some(why) = crate::sandbox::plan::agent_layer::command_defeats_hook(&args.command) {
            return Err(Failure::refused(format!("refusing the command: {why}")));
        }
        if !plan.managed_settings_removed.is_empty() {
            let list = plan.managed_settings_removed.join("\n  ");
            if args.ci {
                // The host's set-up, not the invocation: another host may run it.
                return Err(Failure::host(format!(
                    "the organisation's Claude Code managed settings (the host's files, or the server's) set keys that would switch StepProof's hook off or replace it; refusing to start in CI (remove them):\n  {list}"
                )));
            }
            if profile.assurance == crate::sandbox::landlock::Assurance::Strict {
                return Err(Failure::host(format!(
                    "the organisation's Claude Code managed settings (the host's files, or the server's) set keys that would weaken StepProof (switch its hook off, replace the managed settings, or fetch a credential inside); refusing to start under assurance = \"strict\" (remove them, or use a profile with assurance = \"best-effort\", which drops them inside and runs):\n  {list}"
                )));
            }
            crate::say!(
                "stepproof-run: WARNING: the organisation's Claude Code managed settings set keys StepProof owns; they are removed inside, the hook stays, the rest of the organisation's settings apply:\n  {list}"
            );
        }
    }
    // Before anything runs: whatever the sandbox plants at these names later is not followed.
    let run_dir = outputs.run_dir.clone();
    *outputs = Outputs::open(args, &writable_roots(&plan))
        .inspect_err(|_| outputs.opened = true)
        .map_err(Failure::refused)?;
    outputs.run_dir = run_dir;
    tracing::debug!("outputs opened");
    // Unattended runs, the self-test and model verifier runs start from nothing and keep
    // nothing.
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
    // The build caches the plan binds, made now (a run's own removed when this goes).
    let caches = crate::supervisor::agent::caches::Caches::create(&plan)
        .map_err(|e| Failure::host(format!("stepproof-run: {e}")))?;
    tracing::debug!("caches made");
    let command: Vec<OsString> = if args.selftest {
        crate::cli::selftest::install_probe_binary(&mut plan).map_err(Failure::host)?
    } else {
        args.command.clone()
    };
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
    // The run's cgroup: a limit the profile requires that this host cannot enforce stops here.
    let nonce = format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    );
    let limits = crate::supervisor::launch::cgroup::prepare(
        &profile.process.limits.cgroup(args.ci),
        profile.assurance == crate::sandbox::landlock::Assurance::Strict,
        std::path::Path::new("/proc"),
        &nonce,
        // A runbook run always gets a freezer where the host can give one: its evidence
        // commands run while the agent's processes are frozen.
        runbook.is_some(),
    )
    .map_err(Failure::host)?;
    for dropped in &limits.dropped {
        tracing::info!("{dropped}");
    }
    tracing::debug!("cgroup prepared");
    // The runbook's directory and sockets, its file protected like the profile's, the
    // client bound inside.
    let runbook_run = match &runbook {
        Some(loaded) => Some(prepare_runbook(
            args,
            loaded,
            &mut plan,
            &facts,
            audit.as_ref(),
            limits.cgroup.as_ref(),
            limits.no_freezer.clone(),
            approval_webhook.clone(),
            crate::supervisor::runbook::files::Budget::from_profile(&profile.runbook),
        )?),
        None => None,
    };
    // The run's id, in its start record and on every record the export ships.
    let run_id = crate::audit::export::new_run_id();
    let exporter = match &audit {
        // The self-test's own run is not a run of the caller's to ship.
        Some(audit) if !args.selftest => {
            start_export(&profile, &plan, runbook.as_ref(), &facts, audit, &run_id)?
        }
        _ => None,
    };
    let mut run_start_seq = None;
    if let Some(audit) = &audit {
        let argv: Vec<String> = args
            .command
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        run_start_seq = audit.record_at(
            "supervisor",
            "run-start",
            &serde_json::json!({
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
                "runbook": runbook.as_ref().map(|r| serde_json::json!({
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
            }),
        );
        // No start record, no run: what would run could not be accounted for.
        if let Some(why) = audit.failure() {
            return Err(Failure {
                code: crate::exit::ExitCode::AuditIncomplete,
                message: format!(
                    "the audit log {}: the start record could not be written ({why}); the command was not started",
                    audit.path().display()
                ),
            });
        }
    }
    tracing::debug!("start record written");
    if let Some(run) = &runbook_run {
        run.start()
            .map_err(|e| Failure::host(format!("the runbook's state: {e}")))?;
    }
    if args.verbose > 0 {
        crate::say_part!("{}", explain::explain_text(&profile, &plan));
    }
    check_mount_budget(&plan).map_err(Failure::refused)?;
    tracing::debug!("plan built");
    // A model verifier run: its agent definition, for its own config directory only.
    let verifier_agent = match &args.verifier_agent {
        None => None,
        Some(_) if plan.agent.is_none() => {
            return Err(Failure::refused(
                "--verifier-agent: the profile has no agent layer (no [hook]) to install it in",
            ));
        }
        Some(path) => Some(
            crate::regular_file::read_to_string(path, 64 << 10)
                .map_err(|e| Failure::host(format!("--verifier-agent {}: {e}", path.display())))?,
        ),
    };
    let snapshot = Snapshot::take(&plan);
    let scope = SweepScope::of(&profile, &plan);
    tracing::debug!("snapshot taken");
    // What the end owes, in the run directory before the command starts: if this process is
    // killed from here on, `stepproof repair` or the next run on the workspace finishes the end
    // with this snapshot. Nothing between here and the end returns early. The self-test's run
    // has no sweep, and owes none.
    let mut owed = if args.selftest {
        None
    } else {
        let owed = Owed::record(
            &facts.run_dir,
            &run_id,
            audit.as_ref().map(AuditSink::path),
            run_start_seq,
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
    let options = start::RunOptions {
        verifier_agent: verifier_agent.as_deref(),
        timeout: args.timeout,
        inside_max_bytes: profile.audit.inside_max_mib << 20,
        // Names that do not exist yet are watched while the run is on (moved at once).
        watch: (!args.selftest)
            .then(|| (snapshot.watch_targets(), facts.run_dir.join("quarantine"))),
        cgroup: limits.cgroup.as_ref(),
        gateway,
        runbook: runbook_run.as_ref(),
    };
    // A SIGINT, SIGTERM or SIGHUP before this point was held: the command is not started, and
    // the run ends here with its end record.
    let mut result = match crate::supervisor::launch::relay::ending_signal_pending() {
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
        None => start::run(&plan, &command, audit.as_ref(), &options),
    };
    tracing::debug!("sandbox gone");
    // The way out comes first, once nothing of the sandbox is left: the sweep (quarantine,
    // setuid strip, repository configs put back), the profile and runbook checks and the
    // proposed patch, before the runbook's end, the cgroup, the kept sessions and the
    // records. Nothing the agent can make longer stands before it.
    let moved_during_run = std::mem::take(&mut result.moved_during_run);
    let way_out = if !matches!(
        result.outcome,
        Outcome::StepproofError { .. } | Outcome::Refused { .. }
    ) && !args.selftest
    {
        tracing::debug!("sweep starts");
        let mut sweep = snapshot.sweep_in(&scope, &facts.run_dir.join("quarantine"));
        tracing::debug!("sweep done");
        let mut findings = moved_during_run;
        findings.extend(std::mem::take(&mut sweep.findings));
        for note in &sweep.notes {
            crate::say!("stepproof-run: sweep: {note}");
        }
        if !sweep.host_edits.is_empty() {
            crate::say!(
                "stepproof-run: kept changes made on the host during the run (read-only to the run): {}",
                sweep
                    .host_edits
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        findings.extend(
            crate::supervisor::way_out::profile_check::changed_profile_files(
                &profile,
                &writable_roots(&plan),
            ),
        );
        if let Some(loaded) = &runbook {
            findings.extend(
                crate::supervisor::way_out::profile_check::changed_runbook_file(
                    &loaded.source,
                    &writable_roots(&plan),
                ),
            );
        }
        // What the run wanted at protected names, as a patch the user may apply after review.
        tracing::debug!("profile files checked");
        let proposed = crate::supervisor::way_out::proposed::write_patch(
            &plan.workspace,
            &findings,
            &facts.run_dir,
        )
        .unwrap_or_else(|e| {
            crate::say!("stepproof-run: writing the proposed changes: {e}");
            None
        });
        if let Some(patch) = &proposed {
            outputs.status_extra.insert(
                "proposed_changes".into(),
                patch.display().to_string().into(),
            );
        }
        // A kill from here on leaves a repair only the record to write.
        if let Some(owed) = &owed {
            let mut swept = recover::Swept::of(
                "run",
                &findings,
                &sweep.host_edits,
                &sweep.restored,
                proposed.as_deref(),
            );
            swept.notes.clone_from(&sweep.notes);
            if let Err(e) = owed.swept(&swept) {
                crate::say!("stepproof-run: keeping what the sweep found beside the marker: {e}");
            }
        }
        tracing::debug!("sweep kept");
        Some((sweep, findings, proposed))
    } else {
        None
    };
    // The runbook's outcome: a step whose evidence did not hold (117), or a run that ended
    // before its last step (116), whatever the command's own code was.
    if let Some(run) = &runbook_run
        && matches!(
            result.outcome,
            Outcome::Exited { .. }
                | Outcome::Signaled { .. }
                | Outcome::TimedOut { .. }
                | Outcome::Terminated { .. }
        )
        && let Some((ending, open)) = run.finish()
    {
        let command = Box::new(result.outcome);
        result.outcome = match ending {
            crate::supervisor::runbook::engine::Ending::Blocked { step } => {
                crate::say!(
                    "stepproof-run: runbook: step {step}'s evidence did not hold and no attempt is left (exit {})",
                    crate::exit::ExitCode::EvidenceFailed.code()
                );
                Outcome::EvidenceFailed {
                    exit_code: crate::exit::ExitCode::EvidenceFailed.code(),
                    command,
                    step,
                }
            }
            crate::supervisor::runbook::engine::Ending::Abandoned { .. } => {
                crate::say!(
                    "stepproof-run: runbook abandoned before its last step; not passed: {} (exit {}; a later run of the same runbook and workspace continues it)",
                    open.join(", "),
                    crate::exit::ExitCode::RunbookAbandoned.code()
                );
                Outcome::Abandoned {
                    exit_code: crate::exit::ExitCode::RunbookAbandoned.code(),
                    command,
                    open,
                }
            }
        };
    }
    if let Outcome::NotFound { message, .. } = &mut result.outcome
        && let Some(hint) = command
            .first()
            .and_then(|c| outside_the_view(c, &facts.env, &plan))
    {
        message.push_str(&hint);
    }
    // What the limits did, in words, once nothing of the run is left; then the cgroup goes.
    let mut acted = Vec::new();
    if let Some(cgroup) = limits.cgroup {
        acted = cgroup.events().sentences(&limits.plan.limits);
        if let Err(e) = cgroup.remove(std::time::Duration::from_secs(5)) {
            crate::say!("stepproof-run: removing the run's cgroup: {e}");
        }
    }
    if let Some(sentence) = file_size_limit(&result.outcome, profile.process.limits.fsize_bytes()) {
        acted.push(sentence);
    }
    if !acted.is_empty() {
        for sentence in &acted {
            crate::say!("stepproof-run: limit: {sentence}");
        }
        outputs
            .status_extra
            .insert("limits".into(), serde_json::json!(acted));
        if let Some(audit) = &audit {
            audit.record(
                "supervisor",
                "limits",
                &serde_json::json!({ "acted": acted }),
            );
        }
    }
    // What the run changed of the workspace's sessions and memory is kept for the next one.
    if !matches!(
        result.outcome,
        Outcome::StepproofError { .. } | Outcome::Refused { .. }
    ) {
        let memory =
            crate::supervisor::agent::session_state::take_back_and_report(&plan, audit.as_ref());
        if memory > 0 {
            outputs
                .status_extra
                .insert("memory_changed".into(), memory.into());
        }
    }
    if let Some((sweep, findings, proposed)) = way_out {
        if let Some(audit) = &audit {
            let paths = |list: &[std::path::PathBuf]| {
                list.iter()
                    .map(|p| crate::audit::text::path(p).into_owned())
                    .collect::<Vec<_>>()
            };
            audit.record(
                "supervisor",
                "sweep",
                &serde_json::json!({
                    "findings": findings,
                    "host_edits": paths(&sweep.host_edits),
                    "restored": paths(&sweep.restored),
                    "notes": sweep.notes,
                    "proposed_changes": proposed.as_deref().map(crate::audit::text::path),
                }),
            );
        }
        if !findings.is_empty() {
            crate::say!(
                "stepproof-run: TAMPERING: the run left what the host would act on (persistence paths, links, setuid/setgid bits, its own profile, what the host's git shows):"
            );
            for f in &findings {
                let detail = f
                    .detail
                    .as_deref()
                    .map(|d| format!(" ({d})"))
                    .unwrap_or_default();
                match (&f.quarantined_to, &f.error) {
                    (Some(q), _) => crate::say!(
                        "  {} {}{detail} -> quarantined to {}",
                        f.change,
                        f.path.display(),
                        q.display()
                    ),
                    (None, Some(e)) => crate::say!(
                        "  {} {}{detail} (NOT quarantined: {e})",
                        f.change,
                        f.path.display()
                    ),
                    (None, None) => crate::say!("  {} {}{detail}", f.change, f.path.display()),
                }
            }
            if let Some(patch) = &proposed {
                crate::say!(
                    "stepproof-run: what the run wrote there, as a patch to review and apply if you want it: {}",
                    patch.display()
                );
            }
            // A pass is final only with the run: what this run's steps proved was proven in a
            // workspace the run then tampered with.
            if let Some(run) = &runbook_run {
                let found: Vec<String> = findings
                    .iter()
                    .map(|f| format!("{} {}", f.change, crate::audit::text::path(&f.path)))
                    .collect();
                let (void, completion_void) = run.void(&found, EXIT_TAMPERING);
                if completion_void || !void.is_empty() {
                    crate::say!(
                        "stepproof-run: runbook: VOID because of the tampering above: {}{} (a later run of the same runbook and workspace proves {} again)",
                        if completion_void {
                            "the runbook's completion, "
                        } else {
                            ""
                        },
                        if void.is_empty() {
                            "no step passed in this run".to_string()
                        } else {
                            format!("the passes of {}", void.join(", "))
                        },
                        if void.len() == 1 { "it" } else { "them" }
                    );
                }
            }
            result.outcome = Outcome::Tampering {
                exit_code: EXIT_TAMPERING,
                command: Box::new(result.outcome),
                findings,
            };
        }
    }
    tracing::debug!("run ended");
    // What the agent caused beyond the budget: the last summary record, and the run says so.
    let over_budget = audit
        .as_ref()
        .and_then(|a| a.finish_caused())
        .filter(|c| c.not_written > 0);
    if let Some(counts) = &over_budget {
        outputs.status_extra.insert(
            "inside_records_not_written".into(),
            counts.not_written.into(),
        );
        crate::say!(
            "stepproof-run: {} records the agent caused were NOT written to the audit log ({}): the run reached audit.inside_max_mib ({} MiB) or audit.inside_max_per_second ({})",
            counts.not_written,
            counts
                .by_kind
                .iter()
                .map(|(kind, n)| format!("{kind} {n}"))
                .collect::<Vec<_>>()
                .join(", "),
            profile.audit.inside_max_mib,
            profile.audit.inside_max_per_second()
        );
    }
    if let Some(audit) = &audit {
        audit.record(
            "supervisor",
            "run-end",
            &serde_json::json!({
                "outcome": result.outcome,
                "enforced": result.report,
                "hook_receiver": result.hook_records,
                "records_over_budget": over_budget.as_ref().map(|c| serde_json::json!({
                    "not_written": c.not_written,
                    "by_kind": c.by_kind,
                })),
            }),
        );
        audit.sync();
        // The end is on disk: nothing is owed any more. (A log that could not take a record
        // is said below, 118: the run did its end, and a repair would only claim it had not.)
        discharge(owed.take());
        if let Some(exporter) = exporter {
            finish_export(exporter, outputs);
        }
        match audit.failure() {
            // The head hash makes a truncated log detectable: `stepproof audit verify --head`.
            None => {
                crate::say!(
                    "stepproof-run: audit log {} head {}",
                    audit.path().display(),
                    audit.head_hash()
                );
                // For a caller that keeps the log (a CI job's artifact) and its head together.
                outputs.status_extra.insert(
                    "audit_log".into(),
                    audit.path().display().to_string().into(),
                );
                outputs
                    .status_extra
                    .insert("audit_head".into(), audit.head_hash().into());
            }
            Some(why) => {
                let last = audit
                    .head()
                    .map_or("no record".to_string(), |(seq, _)| format!("record {seq}"));
                crate::say!(
                    "stepproof-run: audit log {} INCOMPLETE: {why}; it ends at {last}, head {} (incomplete)",
                    audit.path().display(),
                    audit.head_hash()
                );
                outputs
                    .status_extra
                    .insert("audit_head".into(), audit.head_hash().into());
                result.outcome = Outcome::AuditIncomplete {
                    exit_code: crate::exit::ExitCode::AuditIncomplete.code(),
                    command: Box::new(result.outcome),
                    message: why,
                };
            }
        }
    }
    // Without a log, the sweep was the end.
    discharge(owed.take());
    drop(scratch);
    drop(caches);
    let wants_summary =
        args.ci || args.fail_on_deny || args.summary.is_some() || args.summary_json.is_some();
    if let Some(audit) = audit.as_ref().filter(|_| wants_summary) {
        let summary = crate::cli::ci::Summary::from_audit_log(audit.path(), &audit.head_hash());
        if args.fail_on_deny
            && !summary.denials.is_empty()
            && matches!(
                result.outcome,
                Outcome::Exited { .. } | Outcome::Signaled { .. }
            )
        {
            result.outcome = Outcome::Denied {
                exit_code: crate::supervisor::launch::outcome::EXIT_DENIED,
                denials: summary.denials.len(),
                command: Box::new(result.outcome),
            };
        }
        write_summaries(outputs, &summary, &result.outcome);
    }
    Ok((result.outcome, result.report))
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
