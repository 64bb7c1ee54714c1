//! The `files_exist`/`files_changed`/`files_unchanged` items: walks of the workspace against
//! the step's baseline, and the evidence ledger's attributions beside them.

use super::{Approvals, Engine};
use crate::supervisor::runbook::files;
use crate::supervisor::runbook::files::Budget;
use crate::supervisor::runbook::files::Exceeded;
use crate::supervisor::runbook::files::IgnoreRules;
use crate::supervisor::runbook::files::Walk;
use crate::supervisor::runbook::files::glob_matches;
use serde_json::Value;
use serde_json::json;
use sha2::Digest;
use sha2::Sha256;
use std::collections::BTreeMap;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::AtomicBool;

/// Each baseline file a `files_changed` walk did not name, looked up beneath the workspace:
/// gone, or no longer a regular file, is a change; a regular file there after all means the
/// walk missed it, and there is no verdict.
pub(super) fn confirm_gone(
    engine: &Arc<Mutex<Engine>>,
    approvals: &Approvals,
    gone: &[String],
) -> Result<(), Exceeded> {
    if gone.is_empty() {
        return Ok(());
    }
    let (workspace, budget) = {
        let e = engine.lock().unwrap_or_else(|e| e.into_inner());
        (e.context.workspace.clone(), e.context.budget)
    };
    let root = files::open_workspace(&workspace).map_err(|e| Exceeded::Unreadable {
        path: workspace.display().to_string(),
        error: e.to_string(),
    })?;
    let mut walk = Walk::new(&budget, &approvals.closing, &approvals.spent);
    for path in gone {
        if walk
            .lookup(std::os::fd::AsFd::as_fd(&root), path)?
            .is_some_and(|stat| stat.is_file())
        {
            return Err(Exceeded::Unstable { path: path.clone() });
        }
    }
    Ok(())
}

/// Where the evidence ledger is read from: the run's own audit log, outside the engine's lock.
pub(super) struct Ledger {
    pub(super) audit_path: Option<PathBuf>,
    pub(super) inside_workspace: PathBuf,
}

impl Engine {
    pub(super) fn ledger(&self) -> Ledger {
        Ledger {
            audit_path: self.audit.as_ref().map(|a| a.path().to_path_buf()),
            inside_workspace: self.inside_workspace.clone(),
        }
    }
}

/// At most this many ledger entries are named per evidence item (the newest).
pub(super) const ATTRIBUTIONS_MAX: usize = 64;

/// The evidence ledger's entries for a files item: the hook's PostToolUse records (from
/// inside, `source: "sandbox"`) of writes made while `step` was open to a file the globs name,
/// read back from the run's own audit log. They only attribute: each says whether the file's
/// content now is what the supervisor hashed (`matches_supervisor_hash`); the verdict never
/// depends on them.
pub(super) fn attributions(
    e: &Ledger,
    step: &str,
    globs: &[String],
    current: &BTreeMap<String, String>,
) -> Vec<Value> {
    let Some(audit) = &e.audit_path else {
        return Vec::new();
    };
    let Ok(file) = std::fs::File::open(audit) else {
        return Vec::new();
    };
    let mut found = std::collections::VecDeque::new();
    for line in std::io::BufRead::lines(std::io::BufReader::new(file)).map_while(Result::ok) {
        // Cheap filter before parsing: only the hook's evidence records with a path.
        if !line.contains("\"evidence\"") || !line.contains("\"path\"") {
            continue;
        }
        let Ok(r) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if r["source"] != "sandbox" || r["kind"] != "evidence" {
            continue;
        }
        // The hook's own record, as it sent it.
        let r = &r["reported"];
        let in_step = r["open_steps"]
            .as_array()
            .is_some_and(|open| open.iter().any(|s| s == step));
        let Some(path) = r["path"].as_str() else {
            continue;
        };
        let Ok(relative) = Path::new(path).strip_prefix(&e.inside_workspace) else {
            continue;
        };
        let Some(relative) = relative.to_str() else {
            continue;
        };
        if !in_step || !globs.iter().any(|g| glob_matches(g, relative)) {
            continue;
        }
        let sha256 = r["sha256"].as_str();
        found.push_back(json!({
            "path": relative,
            "tool": r["tool"],
            "sha256": sha256,
            "step": step,
            "open_steps": r["open_steps"],
            "tool_use_id": r["tool_use_id"],
            "ts_ms": r["ts_ms"],
            "reported_from": "inside",
            "matches_supervisor_hash": sha256.is_some() && current.get(relative).map(String::as_str) == sha256,
        }));
        if found.len() > ATTRIBUTIONS_MAX {
            found.pop_front();
        }
    }
    found.into()
}

/// The regular files under `workspace` each glob names (links are not followed), with their
/// sha256, within one walk's budget shared by the globs; with `rules`, what they ignore is not
/// named (for a glob whose `bool` is true). The rules are frozen: nothing is read into them.
pub(super) fn walk_globs(
    workspace: &Path,
    globs: &[(String, bool)],
    rules: Option<&IgnoreRules>,
    budget: &Budget,
    stop: &AtomicBool,
    spent: &files::RunSpend,
) -> Result<Vec<BTreeMap<String, String>>, Exceeded> {
    let Ok(root) = files::open_workspace(workspace) else {
        return Ok(globs.iter().map(|_| BTreeMap::new()).collect());
    };
    let mut rules = rules.cloned();
    let mut walk = Walk::new(budget, stop, spent);
    globs
        .iter()
        .map(|(glob, ignoring)| {
            let rules = if *ignoring { rules.as_mut() } else { None };
            walk.glob(std::os::fd::AsFd::as_fd(&root), glob, rules)
        })
        .collect()
}

/// Each glob of a files item, and whether ignored files are left out of it.
pub(super) fn item_globs(paths: &[String], include_ignored: bool) -> Vec<(String, bool)> {
    paths
        .iter()
        .map(|p| (p.clone(), !include_ignored))
        .collect()
}

/// A files item's walk at completion, outside the engine's lock: each glob's files, and where
/// the evidence ledger is read.
pub(super) fn walk_item(
    engine: &Arc<Mutex<Engine>>,
    approvals: &Approvals,
    globs: &[(String, bool)],
    rules: Option<&IgnoreRules>,
) -> Result<(Vec<BTreeMap<String, String>>, Ledger), Exceeded> {
    let (workspace, budget, ledger) = {
        let e = engine.lock().unwrap_or_else(|e| e.into_inner());
        (e.context.workspace.clone(), e.context.budget, e.ledger())
    };
    let walked = walk_globs(
        &workspace,
        globs,
        rules,
        &budget,
        &approvals.closing,
        &approvals.spent,
    )?;
    Ok((walked, ledger))
}

/// Files named in one evidence record at most: the agent decides how many there are, and a
/// record's size is not its to choose. The count and a digest of the whole list go beside.
pub(super) const FILES_RECORDED_MAX: usize = 1024;

/// The first [`FILES_RECORDED_MAX`] of `files` (path and sha256), for a record.
pub(super) fn recorded_files(files: &BTreeMap<String, String>) -> BTreeMap<&String, &String> {
    files.iter().take(FILES_RECORDED_MAX).collect()
}

/// The sha256 of the whole list, one `sha256  path` line each in path order (`sha256sum`'s
/// format): what a record that names only the first files still binds.
pub(super) fn files_digest(files: &BTreeMap<String, String>) -> String {
    let mut hasher = Sha256::new();
    for (path, hash) in files {
        hasher.update(format!("{hash}  {path}\n").as_bytes());
    }
    format!("sha256:{}", hex::encode(hasher.finalize()))
}

/// A files item that ran out of its budget: it fails, naming the budget.
pub(super) fn exceeded_item(
    kind: &str,
    paths: &[String],
    exceeded: &Exceeded,
) -> (bool, Value, String) {
    (
        false,
        json!({ "kind": kind, "paths": paths, "budget": exceeded.budget(), "exceeded": exceeded.sentence() }),
        format!("{kind}: {}", exceeded.sentence()),
    )
}
