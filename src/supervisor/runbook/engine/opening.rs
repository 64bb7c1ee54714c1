//! A step opening: its baselines and snapshot taken, the open records, and which steps a
//! step's work rests on.

use super::check_files::item_globs;
use super::invariants::{Recipes, definition_globs, definition_walk, invariant_globs};
use super::{BASELINE_RECORDED_MAX, Engine, Opening, Status};
use crate::runbook::Runbook;
use crate::runbook::Step;
use crate::supervisor::runbook::files;
use crate::supervisor::runbook::files::Budget;
use crate::supervisor::runbook::files::Exceeded;
use crate::supervisor::runbook::files::IgnoreRules;
use crate::supervisor::runbook::files::Walk;
use crate::supervisor::runbook::step_open;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

impl Engine {
    /// Opens every waiting step whose dependencies have all passed, taking their baselines
    /// here (under the caller's lock: only before the sandbox starts, when nothing else asks).
    pub(super) fn open_ready(&mut self, spent: &files::RunSpend) {
        let ready = self.ready();
        let baselines = take_baselines(
            &self.context.workspace,
            &self.context.budget,
            &self.runbook,
            &ready,
            (never(), &files::RunSpend::sharing_hashes(spent)),
            self.store.as_deref(),
        );
        self.open_with(baselines);
    }

    /// The waiting steps whose dependencies have all passed, and whether each has a baseline
    /// from an earlier run.
    pub(super) fn ready(&self) -> Vec<(usize, bool)> {
        if self.ending.is_some() {
            return Vec::new();
        }
        let passed: Vec<String> = self
            .runbook
            .steps
            .iter()
            .zip(&self.steps)
            .filter(|(_, s)| s.status == Status::Passed)
            .map(|(step, _)| step.id.to_string())
            .collect();
        (0..self.steps.len())
            .filter(|&i| {
                self.steps[i].status == Status::Waiting
                    && self.runbook.steps[i]
                        .depends_on
                        .iter()
                        .all(|d| passed.contains(d))
            })
            .map(|i| (i, self.steps[i].restored_baseline.is_some()))
            .collect()
    }

    /// Opens the steps [`Engine::ready`] named, with the baselines taken for them (a step with
    /// one from an earlier run keeps that); nothing opens once the run has an ending.
    pub(super) fn open_with(&mut self, baselines: Vec<(usize, Opening)>) {
        if self.ending.is_some() {
            return;
        }
        for (i, opening) in baselines {
            if self.steps[i].status != Status::Waiting {
                continue;
            }
            let restored = self.steps[i].restored_baseline.take();
            let baseline_restored = restored.is_some();
            let (baseline, exceeded) = match (restored, opening.files) {
                (Some(restored), _) => (restored, None),
                (None, Ok(taken)) => (taken, None),
                (None, Err(exceeded)) => (BTreeMap::new(), Some(exceeded)),
            };
            self.steps[i].status = Status::Open;
            self.steps[i].baseline = baseline;
            self.steps[i].baseline_exceeded = exceeded.clone();
            self.steps[i].invariants = opening.invariants;
            self.steps[i].ignore = opening.ignore;
            self.steps[i].rules_unread = opening.rules_unread;
            self.steps[i].definitions = opening.definitions;
            self.steps[i].recipes = opening.recipes;
            self.openings += 1;
            self.steps[i].opened_seq = self.openings;
            let kept = match &opening.snapshot {
                Ok(snapshot) => {
                    json!({ "files": snapshot.files.len(), "kept": snapshot.files.values().filter(|f| f.1.is_none()).count() })
                }
                Err(why) => json!({ "not_kept": why }),
            };
            self.steps[i].snapshot = opening.snapshot;
            let took_ms = opening.took_ms;
            let step = self.runbook.steps[i].clone();
            let invariants = &self.steps[i].invariants;
            let protected: Vec<String> =
                invariant_globs(&step).into_iter().map(|(g, _)| g).collect();
            let ignore = match &self.steps[i].ignore {
                Ok(rules) => json!({
                    "repository": rules.repository(),
                    "rules_sha256": rules.digest(),
                    "files": rules.sources().keys().collect::<Vec<_>>(),
                }),
                Err(e) => json!({ "not_taken": e.sentence() }),
            };
            self.record(
                "runbook-step-opened",
                json!({
                    "step": step.id,
                    "title": step.title,
                    "depends_on": step.depends_on,
                    "allows": crate::runbook::policy::allows_text(&step),
                    "baseline_files": self.steps[i].baseline.len(),
                    "baseline": (self.steps[i].baseline.len() <= BASELINE_RECORDED_MAX)
                        .then(|| &self.steps[i].baseline),
                    "baseline_from_earlier_run": baseline_restored,
                    "baseline_budget": exceeded.as_ref().map(Exceeded::budget),
                    "baseline_not_taken": exceeded.as_ref().map(Exceeded::sentence),
                    "invariants": protected,
                    "definitions_frozen": self.steps[i].definitions,
                    "definitions_unknown": self.steps[i].recipes.unknown,
                    "invariant_entries": invariants.as_ref().ok().map(BTreeMap::len),
                    "invariants_sha256": invariants.as_ref().ok().map(files::inventory_digest),
                    "invariants_budget": invariants.as_ref().err().map(Exceeded::budget),
                    "invariants_not_taken": invariants.as_ref().err().map(Exceeded::sentence),
                    "ignore": ignore,
                    "kept_for_verifiers": self.store.is_some().then_some(kept),
                    "opening_ms": took_ms,
                }),
            );
        }
    }

    /// Where the verifiers' diff of step `index` starts: the opening, in this run, of the
    /// earliest step it rests on (itself or a step it depends on), so a review step's verifier
    /// sees the work it reviews.
    pub(super) fn diff_base(&self, index: usize) -> Result<Arc<step_open::Snapshot>, String> {
        rests_on(&self.runbook, index)
            .into_iter()
            .filter_map(|i| {
                let state = &self.steps[i];
                state.snapshot.as_ref().ok().map(|s| (state.opened_seq, s))
            })
            .min_by_key(|(seq, _)| *seq)
            .map(|(_, s)| Arc::clone(s))
            .ok_or_else(|| {
                self.steps[index]
                    .snapshot
                    .as_ref()
                    .err()
                    .cloned()
                    .unwrap_or_else(|| "no opening was kept".into())
            })
    }
}

/// What the steps about to open take (see [`Opening`]); a step with a `files_changed`
/// baseline from an earlier run keeps that one (its walk still reads the ignore rules it
/// passes). Each within one walk's budget, outside the engine's lock.
pub(super) fn take_baselines(
    workspace: &Path,
    budget: &Budget,
    runbook: &Runbook,
    ready: &[(usize, bool)],
    (stop, spent): (&AtomicBool, &files::RunSpend),
    store: Option<&Mutex<step_open::Store>>,
) -> Vec<(usize, Opening)> {
    ready
        .iter()
        .map(|&(i, restored)| {
            let step = &runbook.steps[i];
            let started = Instant::now();
            let store = store.filter(|_| verifier_rests_on(runbook, i));
            let mut opening = take_opening(workspace, budget, step, restored, (stop, spent), store);
            opening.took_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
            (i, opening)
        })
        .collect()
}

pub(super) fn take_opening(
    workspace: &Path,
    budget: &Budget,
    step: &Step,
    restored: bool,
    (stop, spent): (&AtomicBool, &files::RunSpend),
    store: Option<&Mutex<step_open::Store>>,
) -> Opening {
    let failed = |e: Exceeded| Opening {
        snapshot: Err(format!(
            "the step's opening walk did not finish ({})",
            e.sentence()
        )),
        files: Err(e.clone()),
        invariants: Err(e.clone()),
        ignore: Err(e),
        rules_unread: Vec::new(),
        definitions: Vec::new(),
        recipes: Recipes::default(),
        took_ms: 0,
    };
    let root = match files::open_workspace(workspace) {
        Ok(root) => root,
        Err(e) => {
            return failed(Exceeded::Unreadable {
                path: workspace.display().to_string(),
                error: e.to_string(),
            });
        }
    };
    let root = std::os::fd::AsFd::as_fd(&root);
    let mut walk = Walk::new(budget, stop, spent);
    let mut rules = match IgnoreRules::capture(&mut walk, root) {
        Ok(rules) => rules,
        Err(e) => return failed(e),
    };
    let changed: Vec<(String, bool)> = step
        .evidence
        .iter()
        .filter_map(|e| e.files_changed.as_ref())
        .flat_map(|f| item_globs(&f.paths, f.include_ignored()))
        .collect();
    let mut files = Ok(BTreeMap::new());
    for (glob, ignoring) in &changed {
        let taken = walk.glob(root, glob, ignoring.then_some(&mut rules));
        match (taken, &mut files) {
            (Ok(found), Ok(all)) => all.extend(found),
            (Err(e), _) => {
                files = Err(e);
                break;
            }
            _ => {}
        }
    }
    // `files_exist` is judged by the rules as the step opened too: those its walks would read.
    let exist = step
        .evidence
        .iter()
        .filter_map(|e| e.files_exist.as_ref())
        .filter(|f| !f.include_ignored())
        .flat_map(|f| f.paths.iter());
    // Each glob's rules on a walk of its own: one glob's tree past a budget leaves the others
    // judged, and that glob's item fails naming it.
    let mut rules_unread = Vec::new();
    for glob in exist {
        let mut own = Walk::new(budget, stop, spent);
        if let Err(e) = own.read_rules_for(root, glob, &mut rules) {
            rules_unread.push((glob.clone(), e));
        }
    }
    if restored && files.is_ok() {
        files = Ok(BTreeMap::new());
    }
    // The invariants get a walk of their own (their own budget).
    drop(walk);
    let mut walk = Walk::new(budget, stop, spent);
    let mut invariants = walk.inventory(root, &invariant_globs(step), Some(&mut rules));
    // What defines the evidence commands: whatever the ignore rules say (a GNUmakefile hidden
    // in .git/info/exclude is still read by make), outside `.git` and build state.
    let (definitions, recipes) = match definition_globs(&mut walk, root, step, workspace) {
        Ok(found) => found,
        Err(e) => {
            invariants = Err(e);
            (Vec::new(), Recipes::default())
        }
    };
    if let Ok(found) = &mut invariants {
        walk.not_entering(crate::runbook::definitions::NOT_ENTERED);
        match walk.inventory(root, &definition_walk(&definitions), None) {
            Ok(more) => found.extend(more),
            Err(e) => invariants = Err(e),
        }
    }
    // Last, so the steps' own walks are not slowed by it; it reads every `.gitignore` of
    // what git would see, which the rules then keep.
    let snapshot = match store {
        None => Err("no verifier or approval rests on this step".to_string()),
        Some(store) => store
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take(workspace, budget, stop, step.id.as_str(), &mut rules)
            .map(Arc::new)
            .map_err(|e| {
                format!(
                    "the walk of the workspace did not finish ({})",
                    e.sentence()
                )
            }),
    };
    rules.freeze();
    Opening {
        files,
        invariants,
        ignore: Ok(rules),
        rules_unread,
        definitions,
        recipes,
        took_ms: 0,
        snapshot,
    }
}

/// The steps `index` rests on: itself and every step it depends on, directly or not.
pub(super) fn rests_on(runbook: &Runbook, index: usize) -> Vec<usize> {
    let mut found = vec![index];
    let mut next = 0;
    while next < found.len() {
        let step = &runbook.steps[found[next]];
        for dep in &step.depends_on {
            if let Some(i) = runbook
                .steps
                .iter()
                .position(|s| s.id.as_str() == dep.as_str())
                && !found.contains(&i)
            {
                found.push(i);
            }
        }
        next += 1;
    }
    found
}

/// Whether a verifier's diff, or the diff a person asked to approve is shown, may start at step
/// `index`'s opening (a step with a verifier or an approval rests on it).
pub(super) fn verifier_rests_on(runbook: &Runbook, index: usize) -> bool {
    (0..runbook.steps.len()).any(|j| {
        runbook.steps[j]
            .evidence
            .iter()
            .any(|e| e.verifier.is_some() || e.approval.is_some())
            && rests_on(runbook, j).contains(&index)
    })
}

/// A stop flag that is never raised (before the sandbox starts, nothing can end the run).
pub(super) fn never() -> &'static AtomicBool {
    static NEVER: AtomicBool = AtomicBool::new(false);
    &NEVER
}

/// The workspace's diff since `base` in the run's content store: the one walk a verifier's
/// prompt and a person's brief both take, outside the engine's lock, within the run's budget
/// and stopped when the run closes.
pub(super) fn diff_since(
    store: &std::sync::Mutex<crate::supervisor::runbook::step_open::Store>,
    context: &super::EvidenceContext,
    closing: &std::sync::atomic::AtomicBool,
    base: &crate::supervisor::runbook::step_open::Snapshot,
) -> Result<crate::supervisor::runbook::step_open::Diff, Exceeded> {
    store.lock().unwrap_or_else(|e| e.into_inner()).diff(
        &context.workspace,
        &context.budget,
        closing,
        base,
    )
}
