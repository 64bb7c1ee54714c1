//! Writes to what StepProof holds read-only for the whole run: the paths the supervisor binds
//! read-only in place (the runbook file and the profile's files where the run could write them,
//! the persistence paths that exist, the config directory's shipped agents and commands), as it
//! lists them in its notices ([`READ_ONLY_NOTICE`]). The kernel refuses such a write whatever
//! the tool, but not in words the model can act on: Claude Code's Write, Edit and NotebookEdit
//! write a temporary file and rename it over the target, which on a bind-mounted file fails with
//! a raw `EBUSY: resource busy or locked, rename …`. The gate denies the write first, naming the
//! path and, in a run with a runbook, the runbook.

use super::{HookInput, MAX_NOTICES_READ, MAX_STATE_BYTES, RUNBOOK_DIR_NAME};
use crate::decision::{Decision, Verdict};
use crate::shell::Effect;
use serde_json::Value;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The supervisor's list of what it binds read-only in place, one absolute path a line, in the
/// notices directory beside the policy (`/run/stepproof/notices/read-only`).
pub const READ_ONLY_NOTICE: &str = "read-only";
/// The notices directory's name beside the policy.
const NOTICES_DIR_NAME: &str = "notices";
/// Rule id of the denial.
pub const RULE_HELD_READ_ONLY: &str = "held-read-only";

/// The denial of a write to a held path, or `None` when the call writes none (or the run lists
/// none). Only calls that write read the list: every other call costs nothing.
pub(super) fn held_read_only(
    control: &Path,
    input: &HookInput,
    effects: Option<&[Effect]>,
) -> Option<Verdict> {
    let targets = write_targets(input, effects);
    if targets.is_empty() {
        return None;
    }
    let held = read_list(&control.join(NOTICES_DIR_NAME).join(READ_ONLY_NOTICE))?;
    let cwd = input.cwd.as_deref().map(PathBuf::from);
    let home = std::env::var_os("HOME").map(PathBuf::from);
    for target in targets {
        let Some(path) = resolve(&target, cwd.as_deref(), home.as_deref()) else {
            continue;
        };
        // Through links too: the kernel refuses the file the link leads to.
        let real = std::fs::canonicalize(&path).ok();
        for candidate in [Some(&path), real.as_ref()].into_iter().flatten() {
            if let Some(held) = held.iter().find(|h| candidate.starts_with(h)) {
                return Some(Verdict {
                    decision: Decision::Deny,
                    rule_id: RULE_HELD_READ_ONLY.to_string(),
                    reason: reason(candidate, held, runbook_id(control).as_deref()),
                });
            }
        }
    }
    None
}

fn reason(path: &Path, held: &Path, runbook: Option<&str>) -> String {
    let what = if path == held {
        format!("{} is read-only", path.display())
    } else {
        format!(
            "{} is inside {}, which is read-only",
            path.display(),
            held.display()
        )
    };
    let runbook = match runbook {
        Some(id) => format!(
            " While runbook '{id}' runs, its file cannot change from inside: it is what the run is checked against."
        ),
        None => String::new(),
    };
    format!(
        "StepProof denied this write: {what} for the whole run (rule {RULE_HELD_READ_ONLY}). StepProof keeps it as it was at the start because the run depends on it: the runbook this run follows, the profile that confines it, a file the host runs later, or a file StepProof ships.{runbook} Any write to it fails. Do not work around it: if it must change, tell the user what to change, outside the run."
    )
}

/// The paths the call would write: a file tool's target, a shell command's visible writes.
fn write_targets(input: &HookInput, effects: Option<&[Effect]>) -> Vec<String> {
    let tool_input = input.tool_input.as_ref();
    let field = |key: &str| {
        tool_input
            .and_then(|i| i.get(key))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    match input.tool_name.as_deref() {
        Some("Write" | "Edit" | "MultiEdit") => field("file_path").into_iter().collect(),
        Some("NotebookEdit") => field("notebook_path")
            .or_else(|| field("file_path"))
            .into_iter()
            .collect(),
        Some("Bash") => effects
            .unwrap_or_default()
            .iter()
            .filter_map(|e| match e {
                Effect::Write(path) => Some(path.clone()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// An absolute, lexically normal path (`~/` is the home, a relative path the call's cwd).
fn resolve(target: &str, cwd: Option<&Path>, home: Option<&Path>) -> Option<PathBuf> {
    let joined = if let Some(rest) = target.strip_prefix("~/") {
        home?.join(rest)
    } else if target == "~" {
        home?.to_path_buf()
    } else if target.starts_with('/') {
        PathBuf::from(target)
    } else {
        cwd?.join(target)
    };
    crate::pattern::normalize(&joined).map(PathBuf::from)
}

/// The listed paths; `None` when there is no list (a run without the notice, another setup).
fn read_list(path: &Path) -> Option<Vec<PathBuf>> {
    let mut text = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(MAX_NOTICES_READ)
        .read_to_string(&mut text)
        .ok()?;
    Some(
        text.lines()
            .filter(|l| l.starts_with('/'))
            .map(PathBuf::from)
            .collect(),
    )
}

/// The running runbook's id, from its read-only `state.json`.
fn runbook_id(control: &Path) -> Option<String> {
    let state = control.join(RUNBOOK_DIR_NAME).join("state.json");
    let mut text = String::new();
    std::fs::File::open(state)
        .ok()?
        .take(MAX_STATE_BYTES)
        .read_to_string(&mut text)
        .ok()?;
    let state: Value = serde_json::from_str(&text).ok()?;
    state.get("runbook")?.as_str().map(str::to_string)
}
