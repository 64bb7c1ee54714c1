//! The run's start: the start record (no start record, no run) and the export that ships the
//! records, attached before it and finished after the end.

use super::*;

/// The start record's account: the run's id (on every record the export ships), the export,
/// and the record's sequence number.
pub(super) struct Started {
    pub(super) run_id: String,
    pub(super) exporter: Option<crate::audit::export::Exporter>,
    pub(super) seq: Option<u64>,
}

/// The export (attached before the start record) and the start record itself: the tier this
/// run gets and what it gives up, the limits, the runbook. A log that cannot take it stops the
/// run (118).
pub(super) fn write_start(
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
pub(super) fn start_record(
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

/// The audit export, when the profile or `stepproof-run`'s environment names a collector: the
/// outbox in the run's directory, attached to the sink before the start record, and its
/// shipper thread. A setting that cannot be right (a bad URL or header) refuses the run; an
/// outbox that cannot be made only warns (the local log is the record).
pub(super) fn start_export(
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
pub(super) fn finish_export(exporter: crate::audit::export::Exporter, outputs: &mut Outputs) {
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
