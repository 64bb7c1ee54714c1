//! The runbook's shape: its own fields and verifiers, step ids present and unique,
//! `depends_on` naming steps, an order without cycles, each step's fields and attempts.

use super::{Checker, Severity, step_path};

use crate::runbook::{
    MAX_ATTEMPTS_LIMIT, OnFail, Runbook, Seg, Step, VERIFIER_MODELS_MAX, line_column, locate,
    valid_model_name,
};
use std::collections::{BTreeMap, BTreeSet};

impl Checker<'_> {
    pub(super) fn runbook_fields(&mut self, runbook: &Runbook) {
        for (key, value) in [("title", &runbook.title), ("owner", &runbook.owner)] {
            if value.trim().is_empty() {
                self.error(
                    &[Seg::Key(key)],
                    format!("`{key}` is empty: a reviewer needs to know it"),
                );
            }
        }
        if runbook.steps.is_empty() {
            self.error(
                &[Seg::Key("steps")],
                "the runbook has no steps: add at least one `[[steps]]`".into(),
            );
        }
    }

    /// `[verifiers]`: model names `--model` can take, each once a tier, a few per tier; a
    /// budget above nothing; tiers no step uses are said.
    pub(super) fn verifiers(&mut self, runbook: &Runbook) {
        let Some(verifiers) = &runbook.verifiers else {
            return;
        };
        for (key, tier) in [("tier2", 2u8), ("tier3", 3)] {
            let models = verifiers.models(tier);
            if models.len() > VERIFIER_MODELS_MAX {
                self.error(
                    &[Seg::Key("verifiers"), Seg::Key(key)],
                    format!(
                        "verifiers.{key} names {} models: at most {VERIFIER_MODELS_MAX} (each one that cannot be reached costs a start)",
                        models.len()
                    ),
                );
            }
            for (n, model) in models.iter().enumerate() {
                let path = [Seg::Key("verifiers"), Seg::Key(key), Seg::Index(n)];
                if !valid_model_name(model) {
                    self.error(
                        &path,
                        format!(
                            "verifiers.{key}: {model:?} is not a model name: 1 to 128 letters, digits, `-`, `_`, `.`, `:`, `/`, `@`, `[` or `]`, not starting with `-`"
                        ),
                    );
                } else if models[..n].contains(model) {
                    self.error(
                        &path,
                        format!("verifiers.{key} names {model:?} twice: each model is tried once"),
                    );
                }
            }
            let used = runbook
                .steps
                .iter()
                .flat_map(|s| &s.evidence)
                .any(|e| e.verifier.as_ref().is_some_and(|v| v.tier == tier));
            if !models.is_empty() && !used {
                self.add(
                    Severity::Note,
                    &[Seg::Key("verifiers"), Seg::Key(key)],
                    format!("verifiers.{key}: no step has a tier {tier} verifier"),
                );
            }
        }
        if verifiers.max_tokens == Some(0) {
            self.error(
                &[Seg::Key("verifiers"), Seg::Key("max_tokens")],
                "verifiers.max_tokens = 0 would stop every verification before its first request: at least 1".into(),
            );
        }
        if verifiers.show == Some(crate::runbook::ShowWork::Clear) {
            self.add(
                Severity::Warning,
                &[Seg::Key("verifiers"), Seg::Key("show")],
                "verifiers.show = \"clear\": the step's diff and the evidence commands' output go to the verifier's model as written — a secret the worker put in a file or printed reaches it (the default, \"masked\", masks secret-shaped tokens)".into(),
            );
        }
    }

    /// Step ids, each once; a second use is an error at its line.
    pub(super) fn step_ids(&mut self, runbook: &Runbook) -> BTreeMap<String, usize> {
        let mut ids = BTreeMap::new();
        for (index, step) in runbook.steps.iter().enumerate() {
            if let Some(first) = ids.get(step.id.as_str()) {
                let (line, _) = line_column(
                    self.text,
                    locate(
                        self.text,
                        &[Seg::Key("steps"), Seg::Index(*first), Seg::Key("id")],
                    ),
                );
                let mut path = step_path(index);
                path.push(Seg::Key("id"));
                self.error(
                    &path,
                    format!(
                        "step id `{}` is used twice (first on line {line}): every step needs its own id",
                        step.id
                    ),
                );
            } else {
                ids.insert(step.id.to_string(), index);
            }
        }
        ids
    }

    pub(super) fn dependencies(&mut self, runbook: &Runbook, ids: &BTreeMap<String, usize>) {
        for (index, step) in runbook.steps.iter().enumerate() {
            let mut seen = BTreeSet::new();
            for (at, name) in step.depends_on.iter().enumerate() {
                let path = [
                    Seg::Key("steps"),
                    Seg::Index(index),
                    Seg::Key("depends_on"),
                    Seg::Index(at),
                ];
                if !seen.insert(name.as_str()) {
                    self.error(
                        &path,
                        format!("step `{}` names `{name}` twice in depends_on", step.id),
                    );
                } else if !ids.contains_key(name) {
                    let known: Vec<&str> = ids.keys().map(String::as_str).collect();
                    self.error(
                        &path,
                        format!(
                            "step `{}` depends on `{name}`, which is not a step of this runbook (its steps: {})",
                            step.id,
                            known.join(", ")
                        ),
                    );
                }
            }
        }
    }

    /// The steps in dependency order (a step after all it depends on; among steps that could
    /// come next, the one written first); every cycle is an error naming it.
    pub(super) fn order(&mut self, runbook: &Runbook, ids: &BTreeMap<String, usize>) -> Vec<usize> {
        let edges: Vec<Vec<usize>> = runbook
            .steps
            .iter()
            .map(|s| {
                s.depends_on
                    .iter()
                    .filter_map(|d| ids.get(d).copied())
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .collect()
            })
            .collect();
        let mut order = Vec::new();
        let mut done = vec![false; edges.len()];
        while let Some(next) =
            (0..edges.len()).find(|&i| !done[i] && edges[i].iter().all(|&d| done[d]))
        {
            done[next] = true;
            order.push(next);
        }
        if order.len() == edges.len() {
            return order;
        }
        // What is left holds at least one cycle: follow the first unmet dependency from the
        // first step left until a step repeats.
        let mut reported: BTreeSet<Vec<usize>> = BTreeSet::new();
        for start in (0..edges.len()).filter(|&i| !done[i]) {
            let mut walk = vec![start];
            let mut at = start;
            while let Some(&next) = edges[at].iter().find(|&&d| !done[d]) {
                if let Some(pos) = walk.iter().position(|&s| s == next) {
                    let cycle: Vec<usize> = walk[pos..].to_vec();
                    // The same cycle reached from another step is reported once, at the
                    // step of it written first.
                    let mut key = cycle.clone();
                    key.sort_unstable();
                    if reported.insert(key) {
                        let first = *cycle.iter().min().unwrap_or(&start);
                        let rotate = cycle.iter().position(|&s| s == first).unwrap_or(0);
                        let mut names: Vec<&str> = cycle[rotate..]
                            .iter()
                            .chain(&cycle[..rotate])
                            .map(|&s| runbook.steps[s].id.as_str())
                            .collect();
                        let successor = names.get(1).copied().unwrap_or(names[0]);
                        names.push(names[0]);
                        let dep_at = runbook.steps[first]
                            .depends_on
                            .iter()
                            .position(|d| d == successor)
                            .unwrap_or(0);
                        self.error(
                            &[
                                Seg::Key("steps"),
                                Seg::Index(first),
                                Seg::Key("depends_on"),
                                Seg::Index(dep_at),
                            ],
                            format!(
                                "dependency cycle: {} (none of these steps could ever open)",
                                names.join(" → ")
                            ),
                        );
                    }
                    break;
                }
                walk.push(next);
                at = next;
            }
        }
        Vec::new()
    }

    pub(super) fn step_fields(&mut self, index: usize, step: &Step) {
        for (key, value) in [("title", &step.title), ("instructions", &step.instructions)] {
            if value.trim().is_empty() {
                let mut path = step_path(index);
                path.push(Seg::Key(key));
                self.error(&path, format!("step `{}`: `{key}` is empty", step.id));
            }
        }
        for (at, criterion) in step.acceptance.iter().enumerate() {
            if criterion.trim().is_empty() {
                let mut path = step_path(index);
                path.extend([Seg::Key("acceptance"), Seg::Index(at)]);
                self.error(
                    &path,
                    format!("step `{}`: an acceptance criterion is empty", step.id),
                );
            }
        }
    }

    pub(super) fn attempts(&mut self, index: usize, step: &Step) {
        let Some(max) = step.max_attempts else {
            return;
        };
        let mut path = step_path(index);
        path.push(Seg::Key("max_attempts"));
        let id = &step.id;
        if max == 0 {
            self.error(
                &path,
                format!("step `{id}`: max_attempts = 0 would fail the step before its first attempt: at least 1"),
            );
        } else if max > MAX_ATTEMPTS_LIMIT {
            self.error(
                &path,
                format!("step `{id}`: max_attempts = {max} is more than {MAX_ATTEMPTS_LIMIT}"),
            );
        } else if step.on_fail() != OnFail::Retry {
            self.error(
                &path,
                format!(
                    "step `{id}`: max_attempts = {max} has no effect with on_fail = \"{}\" (the first failure decides); use on_fail = \"retry\" or drop max_attempts",
                    step.on_fail().name()
                ),
            );
        }
    }
}
