//! The run's records and output files: the audit log (opened before the plan, refused inside
//! what the run can write), the status, report and summary files (opened before anything runs,
//! so nothing the sandbox plants at their names is followed), and what an audit log that cannot
//! be opened means.

use super::*;

/// The audit log: a failure to open the one asked for with `--audit-log` stops the run; the
/// default one only warns (the run is not less protected without it).
pub(super) fn open_audit_log(
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
pub(super) struct Outputs {
    pub(super) opened: bool,
    /// Added to the status file's object (what the outcome alone does not say).
    pub(super) status_extra: serde_json::Map<String, serde_json::Value>,
    pub(super) status: Option<OutputFile>,
    pub(super) report: Option<OutputFile>,
    pub(super) summaries: Vec<OutputFile>,
    pub(super) summary_json: Option<OutputFile>,
    /// The run's directory under the state dir, once the host's facts are known: the retention
    /// rule is applied beside it when the run ends.
    pub(super) run_dir: Option<PathBuf>,
}

impl Outputs {
    pub(super) fn open(args: &Request, roots: &[PathBuf]) -> Result<Outputs, String> {
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
    pub(super) fn open_late(args: &Request) -> Outputs {
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

pub(super) fn write_output(file: &mut Option<OutputFile>, bytes: &[u8]) {
    if let Some(file) = file
        && let Err(e) = file.write(bytes)
    {
        crate::say!("stepproof-run: writing {}: {e}", file.path().display());
    }
}

/// `--audit-log` resolved once, here, against the directories the run will be able to write
/// (a directory that does not exist yet counts by its name; a link inside them is not
/// followed): inside one, it is refused.
pub(super) fn audit_log_outside_the_run(known: &Known<'_>) -> Result<(), Failure> {
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
pub(super) fn open_records(known: &Known<'_>) -> Result<Option<AuditSink>, Failure> {
    // The run's directory, before the plan (StepProof's state is a directory the plan hides).
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&known.facts.run_dir)
        .map_err(|e| {
            Failure::host(format!(
                "creating the run's directory {}: {e}",
                known.facts.run_dir.display()
            ))
        })?;
    let audit = open_audit_log(known.args, &known.facts.home).map_err(audit_failure)?;
    // A log put elsewhere is named in the run's directory: a later run of a runbook continues
    // from it, and `stepproof state show` finds the workspace's last run through it.
    if known.args.audit_log.is_some()
        && let Some(audit) = &audit
        && let Err(e) = crate::supervisor::runbook::continuation::record_log_elsewhere(
            &known.facts.run_dir,
            audit.path(),
        )
    {
        crate::say!(
            "stepproof-run: WARNING: naming the audit log {} in the run's directory: {e}; a later run of a runbook cannot continue this one",
            crate::audit::text::one_line(audit.path())
        );
    }
    if let Some(audit) = &audit {
        audit.limit_caused(
            known.profile.audit.inside_max_mib << 20,
            known.profile.audit.inside_max_per_second(),
        );
    }
    tracing::debug!("audit log opened");
    Ok(audit)
}

/// The files the caller asked for (status, report, summaries), opened before anything runs.
pub(super) fn open_outputs(
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

/// The audit log asked for cannot be opened: refused when the path is the caller's to fix (a
/// link, a directory, no such directory, no permission), a host failure when the disk or the
/// system is (full, read-only, out of descriptors, another run holding the log's lock).
pub(super) fn audit_failure(e: AuditSinkError) -> Failure {
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

pub(super) fn write_summaries(
    outputs: &mut Outputs,
    summary: &crate::cli::ci::Summary,
    outcome: &Outcome,
) {
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
