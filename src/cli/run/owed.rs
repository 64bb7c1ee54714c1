//! The end a run owes: written down before the launch so a supervisor that dies leaves its
//! end to `stepproof repair` or the next run, and the ends earlier runs here still owe, finished
//! before this one reads the workspace.

use super::*;

/// What the end needs and owes: the launch snapshot, the sweep's scope, and the marker.
pub(super) struct OwedEnd {
    pub(super) snapshot: Snapshot,
    pub(super) scope: SweepScope,
    pub(super) marker: Option<Owed>,
}

/// The launch snapshot, and what the end owes, in the run directory before the command starts:
/// if this process is killed from here on, `stepproof repair` or the next run on the workspace
/// finishes the end with this snapshot. The self-test's run has no sweep, and owes none.
pub(super) fn owe_the_end(
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

/// The run's end is done: its marker goes (the lock stays held until the process ends).
pub(super) fn discharge(owed: Option<Owed>) {
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
pub(super) fn finish_owed_runs(
    own: &std::path::Path,
    workspace: &std::path::Path,
) -> Result<(), Failure> {
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
