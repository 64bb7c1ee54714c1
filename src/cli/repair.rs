//! `stepproof repair [WORKSPACE] [--all]`: finishes the end of every run of a workspace (the
//! current directory by default), or of every workspace, whose supervisor died before it — the
//! sweep with the run's launch snapshot (quarantine, repository configs put back) and the
//! `run-end-recovered` record in the run's audit log (see `supervisor::way_out::recover`).
//! Exit 0 when nothing is owed any more, 1 when a run's end could not be finished (said, its
//! marker kept), 2 when the workspace cannot be resolved.

use crate::supervisor::way_out::recover::{self, Finished};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Exit codes of `stepproof repair`.
pub const EXIT_DONE: i32 = 0;
pub const EXIT_UNFINISHED: i32 = 1;
pub const EXIT_ERROR: i32 = 2;

/// How long a run whose supervisor is gone but whose lock is still held (another repair at
/// work) is waited for.
const WAIT: Duration = Duration::from_secs(30);

/// The workspace as a run names it (canonical).
fn workspace_of(given: Option<&Path>) -> Result<PathBuf, String> {
    let path = match given {
        Some(p) => p.to_path_buf(),
        None => std::env::current_dir().map_err(|e| format!("the current directory: {e}"))?,
    };
    path.canonicalize()
        .map_err(|e| format!("resolving the workspace {}: {e}", path.display()))
}

/// Runs `stepproof repair`; the exit code.
pub fn run(workspace: Option<&Path>, all: bool) -> i32 {
    let home = crate::cli::host::caller_home(nix::unistd::getuid().as_raw());
    let runs = crate::audit::owed::runs_dir(&home);
    let workspace = if all {
        None
    } else {
        match workspace_of(workspace) {
            Ok(ws) => Some(ws),
            Err(e) => {
                crate::say!("stepproof repair: {e}");
                return EXIT_ERROR;
            }
        }
    };
    let finished = recover::finish(&runs, workspace.as_deref(), recover::VIA_REPAIR, WAIT);
    let mut unfinished = 0usize;
    let mut done = 0usize;
    for f in &finished {
        match f {
            Finished::Done(repair) => {
                done += 1;
                for line in recover::describe(repair) {
                    crate::out!("{line}");
                }
            }
            Finished::Live(dir) => crate::out!(
                "run {} is still running (its supervisor holds its lock): nothing to repair",
                dir.display()
            ),
            Finished::Unfinished(u) => {
                unfinished += 1;
                crate::say!("stepproof repair: {u}");
            }
        }
    }
    let scope = match &workspace {
        Some(ws) => format!("in {}", ws.display()),
        None => format!("under {}", runs.display()),
    };
    if unfinished > 0 {
        crate::say!(
            "stepproof repair: {unfinished} run(s) {scope} still owe their end ({done} finished)"
        );
        EXIT_UNFINISHED
    } else {
        if done == 0 {
            crate::out!("nothing owed {scope}");
        }
        EXIT_DONE
    }
}
