//! What must not move while a step is open: its protected paths and the definition files its
//! commands rest on, checked at completion against the opening.

use super::check_files::{FILES_RECORDED_MAX, exceeded_item};
use super::freeze::freeze;
use super::{Approvals, Engine};
use crate::runbook::Protected;
use crate::runbook::Step;
use crate::supervisor::runbook::files;
use crate::supervisor::runbook::files::Entry;
use crate::supervisor::runbook::files::Exceeded;
use crate::supervisor::runbook::files::IgnoreRules;
use crate::supervisor::runbook::files::Walk;
use crate::supervisor::runbook::files::glob_matches;
use serde_json::Value;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::Mutex;

/// The step's invariants at one completion, compared once for every item they decide.
pub(super) struct InvariantCheck {
    /// Each protected path that changed since the step opened, and how; or why there is no
    /// verdict.
    pub(super) changes: Result<BTreeMap<String, String>, Exceeded>,
    /// The ignore rules as the step opened (`None`: they could not be read).
    pub(super) rules: Option<IgnoreRules>,
    pub(super) protected: Vec<Protected>,
    /// Whether the agent's processes were frozen during the walk, and what was, in words.
    pub(super) frozen: (bool, String),
    pub(super) baseline_entries: Option<usize>,
    /// The definition globs of the step's evidence commands.
    pub(super) definitions: Vec<String>,
    /// What the makefiles' recipes run, as the step opened.
    pub(super) recipes: Recipes,
    /// What the walk found (the protected paths and the definition files as they are now).
    pub(super) now: BTreeMap<String, Entry>,
    /// Ignored entries under the protected paths (hidden from evidence commands), and
    /// whether each is a directory; `Err` when that walk did not finish.
    pub(super) ignored: Result<Vec<(String, bool)>, Exceeded>,
}

/// Walks the step's protected paths again, with the agent's processes frozen (one state of the
/// workspace), and compares them with what they were when the step opened.
pub(super) fn check_invariants(
    engine: &Arc<Mutex<Engine>>,
    approvals: &Approvals,
    index: usize,
    step: &Step,
    held: Option<&(bool, String)>,
) -> InvariantCheck {
    let (baseline, rules, context, definitions, recipes) = {
        let e = engine.lock().unwrap_or_else(|e| e.into_inner());
        (
            e.steps[index].invariants.clone(),
            e.steps[index].ignore.clone(),
            e.context.clone(),
            e.steps[index].definitions.clone(),
            e.steps[index].recipes.clone(),
        )
    };
    let baseline_entries = baseline.as_ref().ok().map(BTreeMap::len);
    let frozen = match held {
        Some(held) => held.clone(),
        None => freeze(&context.cgroup_dirs, true, context.no_freezer.as_deref()),
    };
    let mut now = BTreeMap::new();
    let mut ignored = Ok(Vec::new());
    let changes = (|| {
        let baseline = baseline?;
        let mut rules = rules.clone()?;
        let root = files::open_workspace(&context.workspace).map_err(|e| Exceeded::Unreadable {
            path: context.workspace.display().to_string(),
            error: e.to_string(),
        })?;
        let root = std::os::fd::AsFd::as_fd(&root);
        let mut walk = Walk::new(&context.budget, &approvals.closing, &approvals.spent);
        now = walk.inventory(root, &invariant_globs(step), Some(&mut rules))?;
        // What evidence commands must not see: ignored files under the protected paths.
        if step.evidence.iter().any(|e| e.command.is_some()) {
            let mut hidden = Vec::new();
            for start in protected_roots(step) {
                match walk.ignored_under(root, &start, &rules) {
                    Ok(found) => hidden.extend(found),
                    Err(e) => {
                        ignored = Err(e);
                        break;
                    }
                }
            }
            if ignored.is_ok() {
                ignored = Ok(hidden);
            }
        }
        walk.not_entering(crate::runbook::definitions::NOT_ENTERED);
        now.extend(walk.inventory(root, &definition_walk(&definitions), None)?);
        files::compare(&mut walk, root, &baseline, &now)
    })();
    if held.is_none() {
        freeze(&context.cgroup_dirs, false, None);
    }
    InvariantCheck {
        changes,
        rules: rules.ok(),
        protected: step.protected_paths(),
        frozen,
        baseline_entries,
        definitions,
        recipes,
        now,
        ignored,
    }
}

/// The directories (or files) a step's protected globs start at: each glob's literal prefix.
pub(super) fn protected_roots(step: &Step) -> Vec<String> {
    let mut roots: Vec<String> = Vec::new();
    for p in step.protected_paths() {
        let literal: Vec<&str> = p
            .glob
            .split('/')
            .filter(|c| !c.is_empty())
            .take_while(|c| !stepproof_hook::pattern::has_wildcard(c))
            .collect();
        let root = literal.join("/");
        if !roots.contains(&root) {
            roots.push(root);
        }
    }
    roots
}

/// What a step's command evidence rests on beyond its argv: the makefiles' recipes, the
/// package scripts, justfile recipes and Taskfile tasks it runs.
#[derive(Debug, Clone, Default)]
pub(super) struct Recipes {
    /// Build state the recipes' tools would reuse (workspace-relative directories): discarded
    /// in the evidence sandbox of a command that runs make, unless trusted by name.
    pub(super) build_state: Vec<String>,
    /// What the makefiles and scripts run that could not be known when the step opened (a
    /// computed word, a template): what the proof rests on unfrozen, said in the records.
    pub(super) unknown: Vec<String>,
}

/// Unknown words kept per step, and the characters of each.
pub(super) const UNKNOWN_KEPT: usize = 32;

pub(super) const UNKNOWN_CHARS: usize = 200;

/// The definition globs of a step's command evidence: what each tool reads, and for the
/// makefiles and script files that exist now (read beneath the workspace, each whole and at
/// most 1 MiB — a larger one fails the step naming it, it is not cut —, up to
/// [`DEFINITION_READS`] reads, each file and entry once) what they run: a makefile's literal
/// includes and its recipes ([`crate::runbook::definitions::of_recipes`]), a package.json's
/// named scripts with their `pre`/`post` scripts, a justfile's recipes and imports, a
/// Taskfile's named tasks with their `deps` and includes
/// ([`crate::runbook::definitions::of_scripts`]). A recipe's or script's `python3 -m pytest`
/// makes `conftest.py` a definition, its `cargo test` makes `target/` build state, and a
/// `make -C web` or `npm run b` inside is read in turn.
pub(super) fn definition_globs(
    walk: &mut Walk<'_>,
    root: std::os::fd::BorrowedFd<'_>,
    step: &Step,
    workspace: &Path,
) -> Result<(Vec<String>, Recipes), Exceeded> {
    const DEFINITION_BYTES: u64 = 1 << 20;
    let commands: Vec<crate::runbook::definitions::Definitions> = step
        .evidence
        .iter()
        .filter_map(|e| e.command.as_ref())
        .map(|command| crate::runbook::definitions::of_command(&command.run, workspace))
        .collect();
    let followed = crate::runbook::definitions::follow(
        &commands,
        workspace,
        DEFINITION_READS,
        |file| walk.read_whole(root, file, DEFINITION_BYTES),
        |limit| Exceeded::Definitions { limit },
    )?;
    Ok((
        followed.files,
        Recipes {
            build_state: followed.build_state,
            unknown: followed
                .unknown
                .iter()
                .take(UNKNOWN_KEPT)
                .map(|u| u.chars().take(UNKNOWN_CHARS).collect())
                .collect(),
        },
    ))
}

/// Makefiles and script files (or a package.json's entries) one step's opening reads at most:
/// more is a budget reached, which fails the step, not a part left unread.
pub(super) const DEFINITION_READS: usize = 128;

/// Definition globs as a walk takes them: every file counts, ignored or not.
pub(super) fn definition_walk(globs: &[String]) -> Vec<(String, bool)> {
    globs.iter().map(|g| (g.clone(), false)).collect()
}

/// The globs that name a step's work: its `files_changed` paths and the workspace paths of its
/// `allow` file-write rules. A definition file one of them names
/// ([`crate::runbook::definitions::names_file`]) may change during the step.
pub(super) fn work_globs(step: &Step) -> Vec<String> {
    let mut globs: Vec<String> = step
        .evidence
        .iter()
        .filter_map(|e| e.files_changed.as_ref())
        .flat_map(|f| f.paths.iter().cloned())
        .collect();
    globs.extend(
        step.allow
            .files
            .iter()
            .filter(|r| r.access == stepproof_hook::config::Access::Write)
            .flat_map(|r| r.paths.iter())
            .map(|p| p.trim_start_matches("./").to_string()),
    );
    globs
}

/// The definitions item: the files that define the step's evidence commands, as they were
/// when the step opened, unless the step names them as its work.
pub(super) fn definitions_item(check: &InvariantCheck, step: &Step) -> (bool, Value, String) {
    let kind = "files_unchanged";
    let changes = match (&check.changes, &check.rules) {
        (Ok(changes), Some(_)) => changes,
        (Err(exceeded), _) => {
            let mut failed = exceeded_item(kind, &check.definitions, exceeded);
            failed.2 = format!(
                "files_unchanged (what defines the evidence commands): not compared, so no verdict: {}",
                exceeded.sentence()
            );
            return failed;
        }
        (Ok(_), None) => return exceeded_item(kind, &check.definitions, &Exceeded::Stopped),
    };
    let work = work_globs(step);
    let named_as_work = |path: &str| {
        work.iter()
            .any(|g| crate::runbook::definitions::names_file(g, path))
    };
    let mut exempt = Vec::new();
    let hits: Vec<(&String, &String)> = changes
        .iter()
        .filter(|(path, _)| check.definitions.iter().any(|g| glob_matches(g, path)))
        .filter(|(path, _)| {
            let work = named_as_work(path);
            if work {
                exempt.push((*path).clone());
            }
            !work
        })
        .collect();
    let held = hits.is_empty();
    let shown: Vec<String> = hits
        .iter()
        .take(INVARIANTS_SHOWN)
        .map(|(path, change)| format!("{path} ({change})"))
        .collect();
    let record = json!({
        "kind": kind,
        "paths": check.definitions,
        "changed": hits.iter().take(FILES_RECORDED_MAX).map(|(path, change)| json!({ "path": path, "change": change })).collect::<Vec<_>>(),
        "changed_count": hits.len(),
        "changed_as_work": exempt,
        "baseline_entries": check.baseline_entries,
        "frozen": check.frozen.0,
        "agent_frozen": check.frozen.1,
    });
    (
        held,
        record,
        format!(
            "files_unchanged (what defines the evidence commands): {} file{} changed since the step opened, whatever changed {}: {}{}; they must be as they were when the step opened (a step that changes one names it in `files_changed` or a write `allow` rule)",
            hits.len(),
            if hits.len() == 1 { "" } else { "s" },
            if hits.len() == 1 { "it" } else { "them" },
            shown.join(", "),
            match hits.len().saturating_sub(INVARIANTS_SHOWN) {
                0 => String::new(),
                more => format!(" and {more} more"),
            }
        ),
    )
}

/// Changed protected paths named in the agent's answer, per item (its record names up to
/// [`FILES_RECORDED_MAX`], and counts them all).
pub(super) const INVARIANTS_SHOWN: usize = 20;

/// An invariant item's verdict: the deny rules' protected paths (`deny_rules`) or a
/// `files_unchanged` item's, as `select` picks them of the step's.
pub(super) fn invariant_item(
    check: Option<&InvariantCheck>,
    paths: &[String],
    deny_rules: Option<&[String]>,
    select: impl Fn(&Protected) -> bool,
) -> (bool, Value, String) {
    let kind = "files_unchanged";
    let Some(check) = check else {
        let missing = Exceeded::Stopped;
        return exceeded_item(kind, paths, &missing);
    };
    let by = match deny_rules {
        Some(rules) => format!(
            "protected by deny rule{} {}",
            if rules.len() == 1 { "" } else { "s" },
            rules
                .iter()
                .map(|r| format!("`{r}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        None => "files_unchanged".to_string(),
    };
    let changes = match (&check.changes, &check.rules) {
        (Ok(changes), Some(rules)) => (changes, rules),
        (Err(exceeded), _) => {
            let mut failed = exceeded_item(kind, paths, exceeded);
            if let Some(rules) = deny_rules {
                failed.1["deny_rules"] = json!(rules);
            }
            failed.2 = format!(
                "files_unchanged ({by}: {}): not compared, so no verdict: {}",
                paths.join(", "),
                exceeded.sentence()
            );
            return failed;
        }
        (Ok(_), None) => return exceeded_item(kind, paths, &Exceeded::Stopped),
    };
    let (changes, rules) = changes;
    let selected: Vec<&Protected> = check.protected.iter().filter(|p| select(p)).collect();
    let hits: Vec<(&String, &String)> = changes
        .iter()
        .filter(|(path, _)| {
            selected.iter().any(|p| {
                glob_matches(&p.glob, path)
                    && (p.include_ignored || !rules.path_ignored(path, false))
            })
        })
        .collect();
    let held = hits.is_empty();
    let shown: Vec<String> = hits
        .iter()
        .take(INVARIANTS_SHOWN)
        .map(|(path, change)| format!("{path} ({change})"))
        .collect();
    let more = hits.len().saturating_sub(INVARIANTS_SHOWN);
    let mut record = json!({
            "kind": kind,
            "paths": paths,
            "changed": hits.iter().take(FILES_RECORDED_MAX).map(|(path, change)| json!({ "path": path, "change": change })).collect::<Vec<_>>(),
            "changed_count": hits.len(),
            "baseline_entries": check.baseline_entries,
            "ignore_rules_sha256": rules.digest(),
            "frozen": check.frozen.0,
            "agent_frozen": check.frozen.1,
    });
    if let Some(rules) = deny_rules {
        record["deny_rules"] = json!(rules);
    }
    (
        held,
        record,
        format!(
            "files_unchanged ({by}: {}): {} path{} the step protects changed since it opened, whatever changed {}: {}{}; they must be as they were when the step opened",
            paths.join(", "),
            hits.len(),
            if hits.len() == 1 { "" } else { "s" },
            if hits.len() == 1 { "it" } else { "them" },
            shown.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        ),
    )
}

/// The globs a step's invariants are walked by, each once, with whether ignored files are
/// left out.
pub(super) fn invariant_globs(step: &Step) -> Vec<(String, bool)> {
    let mut globs: Vec<(String, bool)> = Vec::new();
    for p in step.protected_paths() {
        let glob = (p.glob, !p.include_ignored);
        if !globs.contains(&glob) {
            globs.push(glob);
        }
    }
    globs
}
