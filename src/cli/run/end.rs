//! The end of a run, as one list, in the order set by trust: the way out first (the sweep,
//! the profile and runbook checks, the proposed patch), once nothing of the sandbox is left and
//! before anything the agent can make longer; then the runbook's outcome, what the limits did
//! (and the cgroup goes), the sessions taken back, the sweep's record and its verdict on the
//! run (a pass is final only with the run), the records over budget, the end record (after
//! which nothing is owed), the export, and the summaries.

use super::{Known, LoadedRunbook, Outputs, OwedEnd, discharge, finish_export, write_summaries};
use crate::audit::sink::AuditSink;
use crate::sandbox::plan::SandboxPlan;
use crate::sandbox::report::AssuranceReport;
use crate::supervisor::launch::cgroup::RunLimits;
use crate::supervisor::launch::outcome::{Failure, Outcome};
use crate::supervisor::launch::start;
use crate::supervisor::runbook::engine::RunbookRun;
use crate::supervisor::way_out::output_files::writable_roots;
use crate::supervisor::way_out::recover;
use crate::supervisor::way_out::sweep::Finding;
use crate::supervisor::way_out::sweep::{EXIT_TAMPERING, Sweep};
use std::ffi::OsString;
use std::path::PathBuf;

/// What the end reads of the run.
pub(super) struct Run<'r, 'a> {
    pub known: &'r Known<'a>,
    pub plan: &'r SandboxPlan,
    pub command: &'r [OsString],
    pub audit: Option<&'r AuditSink>,
    pub runbook_run: Option<&'r RunbookRun>,
}

/// What the end consumes: the cgroup, the work owed, the export, and the per-run state that
/// goes with the end (the scratch directory, the run's own caches).
pub(super) struct Held {
    pub limits: RunLimits,
    pub owed: OwedEnd,
    pub exporter: Option<crate::audit::export::Exporter>,
    pub scratch: Option<start::ScratchDir>,
    pub caches: Option<crate::supervisor::agent::caches::Caches>,
}

/// What the sweep left for the end: the sweep, every finding, and the proposed patch.
type WayOut = (Sweep, Vec<Finding>, Option<PathBuf>);

/// The end, in order (see the module's head).
pub(super) fn end_of_run(
    run: Run<'_, '_>,
    held: Held,
    mut result: start::RunResult,
    outputs: &mut Outputs,
) -> Result<(Outcome, Option<AssuranceReport>), Failure> {
    let Held {
        limits,
        mut owed,
        exporter,
        scratch,
        caches,
    } = held;
    let way_out = way_out(&run, &mut result, &owed, outputs);
    runbook_outcome(&run, &mut result.outcome);
    denial_loop_outcome(result.denial_loop.take(), &mut result.outcome);
    not_found_hint(&run, &mut result.outcome);
    what_the_limits_did(&run, limits, &result.outcome, outputs);
    take_back_sessions(&run, &result.outcome, outputs);
    if let Some(way_out) = way_out {
        record_the_sweep(&run, way_out, &mut result.outcome);
    }
    tracing::debug!("run ended");
    let over_budget = records_over_budget(&run, outputs);
    if let Some(audit) = run.audit {
        record_the_end(audit, &mut result, over_budget);
        // The end is on disk: nothing is owed any more. (A log that could not take a record
        // is said by the end record's step, 118: the run did its end, and a repair would only
        // claim it had not.)
        discharge(owed.marker.take());
        if let Some(exporter) = exporter {
            finish_export(exporter, outputs);
        }
        say_the_head(audit, &mut result.outcome, outputs);
        say_the_recap(&run, audit);
    }
    // Without a log, the sweep was the end.
    discharge(owed.marker.take());
    drop(scratch);
    drop(caches);
    summaries(&run, &mut result.outcome, outputs);
    Ok((result.outcome, result.report))
}

/// The way out, once nothing of the sandbox is left: the sweep (quarantine, setuid strip,
/// repository configs put back), the profile and runbook checks and the proposed patch — kept
/// beside the marker, so a kill from here on leaves a repair only the record to write. Nothing
/// the agent can make longer stands before it. None for a run that never started, or the
/// self-test's.
fn way_out(
    run: &Run<'_, '_>,
    result: &mut start::RunResult,
    owed: &OwedEnd,
    outputs: &mut Outputs,
) -> Option<WayOut> {
    let moved_during_run = std::mem::take(&mut result.moved_during_run);
    if matches!(
        result.outcome,
        Outcome::StepproofError { .. } | Outcome::Refused { .. }
    ) || run.known.args.selftest
    {
        return None;
    }
    let facts = &run.known.facts;
    tracing::debug!("sweep starts");
    let mut sweep = owed
        .snapshot
        .sweep_in(&owed.scope, &facts.run_dir.join("quarantine"));
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
    findings.extend(changed_policy_files(run));
    // What the run wanted at protected names, as a patch the user may apply after review.
    tracing::debug!("profile files checked");
    let proposed = crate::supervisor::way_out::proposed::write_patch(
        &run.plan.workspace,
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
    if let Some(marker) = &owed.marker {
        let mut swept = recover::Swept::of(
            "run",
            &findings,
            &sweep.host_edits,
            &sweep.restored,
            proposed.as_deref(),
        );
        swept.notes.clone_from(&sweep.notes);
        if let Err(e) = marker.swept(&swept) {
            crate::say!("stepproof-run: keeping what the sweep found beside the marker: {e}");
        }
    }
    tracing::debug!("sweep kept");
    Some((sweep, findings, proposed))
}

/// The profile's files and the runbook's, changed by the run where it could write them.
fn changed_policy_files(run: &Run<'_, '_>) -> Vec<Finding> {
    let roots = writable_roots(run.plan);
    let mut findings = crate::supervisor::way_out::profile_check::changed_profile_files(
        &run.known.profile,
        &roots,
    );
    if let Some(loaded) = &run.known.runbook {
        let LoadedRunbook { source, .. } = loaded;
        findings.extend(
            crate::supervisor::way_out::profile_check::changed_runbook_file(source, &roots),
        );
    }
    findings
}

/// The runbook's outcome: a step whose evidence did not hold (117), or a run that ended
/// before its last step (116), whatever the command's own code was.
fn runbook_outcome(run: &Run<'_, '_>, outcome: &mut Outcome) {
    let Some(runbook_run) = run.runbook_run else {
        return;
    };
    if !matches!(
        outcome,
        Outcome::Exited { .. }
            | Outcome::Signaled { .. }
            | Outcome::TimedOut { .. }
            | Outcome::Terminated { .. }
    ) {
        return;
    }
    let Some((ending, open)) = runbook_run.finish() else {
        return;
    };
    rewrap(outcome, |command| match ending {
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
        crate::supervisor::runbook::engine::Ending::ApprovalMissing { step, missing } => {
            crate::say!(
                "stepproof-run: runbook: step {step} waits for a person's approval ({missing}); the step stays open (exit {}; a later run of the same runbook and workspace continues it{})",
                crate::exit::ExitCode::ApprovalMissing.code(),
                if missing == "impossible" {
                    format!(", with `--approve {step}` in --ci")
                } else {
                    String::new()
                }
            );
            Outcome::ApprovalMissing {
                exit_code: crate::exit::ExitCode::ApprovalMissing.code(),
                command,
                step,
                missing,
            }
        }
    });
}

/// `--ci`: a loop of denials that ended the run early (121), unless the runbook's own outcome
/// already says more (a stopped runbook denies every call, and its 117 or 116 is the cause).
fn denial_loop_outcome(stop: Option<crate::audit::denial_loops::LoopStop>, outcome: &mut Outcome) {
    let Some(stop) = stop else {
        return;
    };
    if !matches!(outcome, Outcome::Exited { .. } | Outcome::Signaled { .. }) {
        return;
    }
    let code = crate::exit::ExitCode::DenialLoop.code();
    crate::say!(
        "stepproof-run: the hook denied {} calls under rule {} in one session, after restating what is allowed: the run was ended (--ci, exit {code}; the audit log's denial-loop records say which)",
        stop.denials,
        stop.rule_id
    );
    rewrap(outcome, |command| Outcome::DenialLoop {
        exit_code: code,
        command,
        rule_id: stop.rule_id,
        denials: stop.denials,
    });
}

/// A command the sandbox could not find, but the host has: where it is.
fn not_found_hint(run: &Run<'_, '_>, outcome: &mut Outcome) {
    if let Outcome::NotFound { message, .. } = outcome
        && let Some(hint) = run
            .command
            .first()
            .and_then(|c| super::outside_the_view(c, &run.known.facts.env, run.plan))
    {
        message.push_str(&hint);
    }
}

/// What the limits did, in words, once nothing of the run is left; then the cgroup goes.
fn what_the_limits_did(
    run: &Run<'_, '_>,
    limits: RunLimits,
    outcome: &Outcome,
    outputs: &mut Outputs,
) {
    let mut acted = Vec::new();
    if let Some(cgroup) = limits.cgroup {
        acted = cgroup.events().sentences(&limits.plan.limits);
        if let Err(e) = cgroup.remove(std::time::Duration::from_secs(5)) {
            crate::say!("stepproof-run: removing the run's cgroup: {e}");
        }
    }
    if let Some(sentence) =
        super::file_size_limit(outcome, run.known.profile.process.limits.fsize_bytes())
    {
        acted.push(sentence);
    }
    if acted.is_empty() {
        return;
    }
    for sentence in &acted {
        crate::say!("stepproof-run: limit: {sentence}");
    }
    outputs
        .status_extra
        .insert("limits".into(), serde_json::json!(acted));
    if let Some(audit) = run.audit {
        audit.record(
            "supervisor",
            "limits",
            &serde_json::json!({ "acted": acted }),
        );
    }
}

/// What the run changed of the workspace's sessions and memory is kept for the next one.
fn take_back_sessions(run: &Run<'_, '_>, outcome: &Outcome, outputs: &mut Outputs) {
    if matches!(
        outcome,
        Outcome::StepproofError { .. } | Outcome::Refused { .. }
    ) {
        return;
    }
    let memory = crate::supervisor::agent::session_state::take_back_and_report(run.plan, run.audit);
    if memory > 0 {
        outputs
            .status_extra
            .insert("memory_changed".into(), memory.into());
    }
}

/// The sweep's record; and what it found makes the run's outcome tampering (123), voiding
/// what the run's steps proved in a workspace the run then tampered with.
fn record_the_sweep(run: &Run<'_, '_>, (sweep, findings, proposed): WayOut, outcome: &mut Outcome) {
    if let Some(audit) = run.audit {
        let paths = |list: &[PathBuf]| {
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
    if findings.is_empty() {
        return;
    }
    say_findings(&findings, proposed.as_deref());
    // A pass is final only with the run.
    if let Some(runbook_run) = run.runbook_run {
        void_the_passes(runbook_run, &findings);
    }
    rewrap(outcome, |command| Outcome::Tampering {
        exit_code: EXIT_TAMPERING,
        command,
        findings,
    });
}

fn say_findings(findings: &[Finding], proposed: Option<&std::path::Path>) {
    crate::say!(
        "stepproof-run: TAMPERING: the run left what the host would act on (persistence paths, links, setuid/setgid bits, its own profile, what the host's git shows):"
    );
    for f in findings {
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
    if let Some(patch) = proposed {
        crate::say!(
            "stepproof-run: what the run wrote there, as a patch to review and apply if you want it: {}",
            patch.display()
        );
    }
}

fn void_the_passes(runbook_run: &RunbookRun, findings: &[Finding]) {
    let found: Vec<String> = findings
        .iter()
        .map(|f| format!("{} {}", f.change, crate::audit::text::path(&f.path)))
        .collect();
    let (void, completion_void) = runbook_run.void(&found, EXIT_TAMPERING);
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

/// What the agent caused beyond the budget: the last summary record, and the run says so.
fn records_over_budget(
    run: &Run<'_, '_>,
    outputs: &mut Outputs,
) -> Option<crate::audit::caused::CausedCounts> {
    let profile = &run.known.profile;
    let over_budget = run
        .audit
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
    over_budget
}

/// The end record, synced.
fn record_the_end(
    audit: &AuditSink,
    result: &mut start::RunResult,
    over_budget: Option<crate::audit::caused::CausedCounts>,
) {
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
}

/// The last screen's line: what was denied and asked, where the record is, how to go on (see
/// [`crate::cli::recap`]). Not for the self-test, whose record is its probes'.
fn say_the_recap(run: &Run<'_, '_>, audit: &AuditSink) {
    if run.known.args.selftest {
        return;
    }
    if let Some(recap) = crate::cli::recap::Recap::of(audit.path()) {
        let claude = crate::sandbox::plan::agent_layer::command_is_claude(run.command);
        crate::say!("stepproof-run: {}", recap.line(claude));
    }
}

/// The log's head (a truncated log is detectable with `stepproof audit verify --head`), or
/// that the log is incomplete (118).
fn say_the_head(audit: &AuditSink, outcome: &mut Outcome, outputs: &mut Outputs) {
    match audit.failure() {
        None => {
            crate::say!(
                "stepproof-run: audit log {} head {}",
                crate::audit::text::one_line(audit.path()),
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
            rewrap(outcome, |command| Outcome::AuditIncomplete {
                exit_code: crate::exit::ExitCode::AuditIncomplete.code(),
                command,
                message: why,
            });
        }
    }
}

/// The job summaries (and `--fail-on-deny`'s 122), from the log as written.
fn summaries(run: &Run<'_, '_>, outcome: &mut Outcome, outputs: &mut Outputs) {
    let args = run.known.args;
    let wants_summary =
        args.ci || args.fail_on_deny || args.summary.is_some() || args.summary_json.is_some();
    let Some(audit) = run.audit.filter(|_| wants_summary) else {
        return;
    };
    let summary = crate::cli::ci::Summary::from_audit_log(audit.path(), &audit.head_hash());
    if args.fail_on_deny
        && !summary.denials.is_empty()
        && matches!(outcome, Outcome::Exited { .. } | Outcome::Signaled { .. })
    {
        rewrap(outcome, |command| Outcome::Denied {
            exit_code: crate::supervisor::launch::outcome::EXIT_DENIED,
            denials: summary.denials.len(),
            command,
        });
    }
    write_summaries(outputs, &summary, outcome);
}

/// `outcome` becomes what `wrap` makes of it, the command's own outcome kept inside.
fn rewrap(outcome: &mut Outcome, wrap: impl FnOnce(Box<Outcome>) -> Outcome) {
    let command = Box::new(std::mem::replace(outcome, Outcome::failed(String::new())));
    *outcome = wrap(command);
}
