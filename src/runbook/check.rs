//! `stepproof runbook check`: everything about a runbook that can be known before a run, each
//! problem placed at the line and column that causes it.
//!
//! Beyond the types (`parse`): ids present and unique, `depends_on` naming steps, no cycles,
//! every step proven by evidence of one kind per item with its fields, attempts that make
//! sense, and the step's hook rules: each compiles (the hook crate's own compiler), none can
//! never match, and none tries to widen the profile.
//!
//! A step's `allow` rule *widens* the profile when the profile denies what it names outright:
//! both its narrowest instance (each `*` argument word dropped, each `*` inside a word empty,
//! each `**` path component dropped, `*.` domains as the domain itself) and its instance with
//! one word, letter or component in each of those places are denied by the profile. Such a rule
//! can never let anything through, since while a step is open a call needs both the profile and
//! the step. When the profile asks about both instances instead, the rule stays `ask`: a
//! warning.

use super::{
    Evidence, Id, MAX_ATTEMPTS_LIMIT, OnFail, Runbook, Seg, Step, StepRules, VERIFIER_MODELS_MAX,
    Verifiers, line_column, locate, valid_model_name,
};
use crate::profile::Profile;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use stepproof_hook::Decision;
use stepproof_hook::config::{Access, HookConfig};
use stepproof_hook::policy::{CompiledPolicy, Context, compile};

/// How bad a problem is: errors fail `check` (exit 1), warnings and notes are shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Note,
    Warning,
    Error,
}

impl Severity {
    pub fn name(self) -> &'static str {
        match self {
            Severity::Note => "note",
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

/// One problem, at its line and column of the runbook file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Problem {
    pub severity: Severity,
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl Problem {
    /// `FILE:LINE:COLUMN: error: message`, as compilers say it.
    pub fn render(&self, origin: &str) -> String {
        format!(
            "{origin}:{}:{}: {}: {}",
            self.line,
            self.column,
            self.severity.name(),
            self.message
        )
    }
}

/// What `check` found: the runbook (when its types parsed), every problem in file order, and
/// the steps in dependency order (when there is no cycle).
#[derive(Debug, Clone)]
pub struct Report {
    pub runbook: Option<Runbook>,
    pub problems: Vec<Problem>,
    pub order: Vec<usize>,
}

impl Report {
    pub fn errors(&self) -> usize {
        self.problems
            .iter()
            .filter(|p| p.severity == Severity::Error)
            .count()
    }
}

/// The workspace and home the rules are compiled against: any absolute paths do (the checks
/// compare rules with rules), fixed ones keep `check`'s answer the same on every machine.
pub const CHECK_WORKSPACE: &str = "/workspace";
pub const CHECK_HOME: &str = "/home/agent";

/// Tools of Claude Code 2.1.328 (the names its requests offer, and older spellings the hook
/// still judges); a `tools` rule naming anything else exactly, and not an MCP tool, is likely a
/// typo.
const KNOWN_TOOLS: &[&str] = &[
    "Agent",
    "Bash",
    "BashOutput",
    "Edit",
    "EnterWorktree",
    "ExitPlanMode",
    "ExitWorktree",
    "Glob",
    "Grep",
    "KillBash",
    "KillShell",
    "LS",
    "ListAgents",
    "MultiEdit",
    "NotebookEdit",
    "NotebookRead",
    "Read",
    "ReportFindings",
    "ScheduleWakeup",
    "Skill",
    "SlashCommand",
    "Task",
    "TodoRead",
    "TodoWrite",
    "ToolSearch",
    "WebFetch",
    "WebSearch",
    "Workflow",
    "Write",
];

/// Tools the hook judges by their input (commands, paths, domains, agent types): a `tools`
/// rule's name check cannot tell what the profile does with them.
const JUDGED_BY_INPUT: &[&str] = &[
    "Bash",
    "Read",
    "Write",
    "Edit",
    "MultiEdit",
    "NotebookEdit",
    "NotebookRead",
    "LS",
    "Glob",
    "Grep",
    "WebFetch",
    "WebSearch",
    "Agent",
    "Task",
];

/// Checks a runbook's text against a profile.
pub fn check(text: &str, profile: &Profile) -> Report {
    // Every unknown key at once, then the rest beside them; any other error stops here.
    let (runbook, parsed) = super::parse_all(text);
    let Some(runbook) = runbook else {
        return Report {
            runbook: None,
            problems: parsed,
            order: Vec::new(),
        };
    };
    let mut checker = Checker {
        text,
        found: parsed,
        strict: runbook.strict(),
    };
    checker.runbook_fields(&runbook);
    checker.verifiers(&runbook);
    let ids = checker.step_ids(&runbook);
    checker.dependencies(&runbook, &ids);
    let order = checker.order(&runbook, &ids);
    let profile_policy = checker.profile_policy(&runbook, profile);
    for (index, step) in runbook.steps.iter().enumerate() {
        checker.step_fields(index, step);
        checker.evidence(index, step, runbook.verifiers.as_ref());
        checker.attempts(index, step);
        checker.rules(index, step, profile, profile_policy.as_ref());
    }
    let mut problems = checker.found;
    problems.sort_by_key(|p| (p.line, p.column));
    problems.dedup();
    Report {
        runbook: Some(runbook),
        problems,
        order,
    }
}

struct Checker<'a> {
    text: &'a str,
    found: Vec<Problem>,
    /// `strict = true`: what a proof would have to trust is an error, not a warning.
    strict: bool,
}

fn step_path(index: usize) -> Vec<Seg<'static>> {
    vec![Seg::Key("steps"), Seg::Index(index)]
}

impl Checker<'_> {
    fn add(&mut self, severity: Severity, path: &[Seg<'_>], message: String) {
        let (line, column) = line_column(self.text, locate(self.text, path));
        self.found.push(Problem {
            severity,
            line,
            column,
            message,
        });
    }

    fn error(&mut self, path: &[Seg<'_>], message: String) {
        self.add(Severity::Error, path, message);
    }

    fn runbook_fields(&mut self, runbook: &Runbook) {
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
    fn verifiers(&mut self, runbook: &Runbook) {
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
    fn step_ids(&mut self, runbook: &Runbook) -> BTreeMap<String, usize> {
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

    fn dependencies(&mut self, runbook: &Runbook, ids: &BTreeMap<String, usize>) {
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
    fn order(&mut self, runbook: &Runbook, ids: &BTreeMap<String, usize>) -> Vec<usize> {
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

    fn step_fields(&mut self, index: usize, step: &Step) {
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

    fn evidence(&mut self, index: usize, step: &Step, verifiers: Option<&Verifiers>) {
        let id = &step.id;
        if step.evidence.is_empty() {
            self.error(
                &step_path(index),
                format!(
                    "step `{id}` has no evidence: every step is proven by something the agent cannot write (add `[[steps.evidence]]` with one of command, files_exist, files_changed, files_unchanged, approval, verifier)"
                ),
            );
            return;
        }
        for (at, item) in step.evidence.iter().enumerate() {
            let mut path = step_path(index);
            path.extend([Seg::Key("evidence"), Seg::Index(at)]);
            let kinds = item.kinds();
            match kinds.as_slice() {
                [] => self.error(
                    &path,
                    format!(
                        "step `{id}`: an evidence item names no kind: set one of command, files_exist, files_changed, files_unchanged, approval, verifier"
                    ),
                ),
                [_] => self.evidence_item(&path, id, step, item, verifiers),
                [a, b, ..] => {
                    path.push(Seg::Key(b));
                    self.error(
                        &path,
                        format!(
                            "step `{id}`: an evidence item sets both `{a}` and `{b}`: one kind per item (write two items)"
                        ),
                    );
                }
            }
        }
        // A change the step asks for where it protects the same paths can never be made.
        let protected = step.protected_paths();
        for (at, item) in step.evidence.iter().enumerate() {
            for (n, glob) in item
                .files_changed
                .iter()
                .flat_map(|f| f.paths.iter().enumerate())
            {
                let glob = glob.trim_start_matches("./");
                let Some(by) = protected.iter().find(|p| p.glob == glob) else {
                    continue;
                };
                let mut path = step_path(index);
                path.extend([
                    Seg::Key("evidence"),
                    Seg::Index(at),
                    Seg::Key("files_changed"),
                    Seg::Key("paths"),
                    Seg::Index(n),
                ]);
                let what = match &by.by {
                    super::ProtectedBy::DenyRule(rule) => format!("deny rule `{rule}`"),
                    super::ProtectedBy::Item(item) => format!("files_unchanged (item {item})"),
                };
                self.error(
                    &path,
                    format!(
                        "step `{id}`: files_changed {glob:?} can never hold: the step protects the same paths ({what}), so nothing there may change"
                    ),
                );
            }
        }
        let only_verifiers = step.evidence.iter().all(|e| e.verifier.is_some());
        if only_verifiers {
            self.add(
                Severity::Warning,
                &step_path(index),
                format!(
                    "step `{id}` is proven by model verifiers only: a verifier reads what the worker wrote, and workspace text can try to talk it into a pass; add a command, files or approval evidence"
                ),
            );
        }
    }

    fn evidence_item(
        &mut self,
        path: &[Seg<'_>],
        id: &Id,
        step: &Step,
        item: &Evidence,
        verifiers: Option<&Verifiers>,
    ) {
        let at = |key: &'static str| {
            let mut p = path.to_vec();
            p.push(Seg::Key(key));
            p
        };
        if let Some(command) = &item.command
            && command
                .run
                .first()
                .is_none_or(|program| program.trim().is_empty())
        {
            let mut p = at("command");
            p.push(Seg::Key("run"));
            self.error(
                &p,
                format!("step `{id}`: the evidence command's `run` names no program"),
            );
        }
        if let Some(command) = &item.command {
            let strict = self.strict;
            let defs =
                crate::runbook::definitions::of_command(&command.run, std::path::Path::new("/"));
            for (n, trusted) in command.trust.iter().enumerate() {
                let mut p = at("command");
                p.push(Seg::Key("trust"));
                p.push(Seg::Index(n));
                let dir = trusted.trim_start_matches("./").trim_end_matches('/');
                if defs.build_state.iter().any(|b| b == dir) && strict {
                    self.error(
                        &p,
                        format!(
                            "step `{id}`: the runbook is strict: the proof of `{}` may not trust {trusted:?} as the agent left it (build state the agent can forge); drop `trust` (the evidence sandbox then rebuilds it) or `strict`",
                            crate::audit::text::command_line(&command.run)
                        ),
                    );
                } else if defs.build_state.iter().any(|b| b == dir) {
                    self.add(
                        Severity::Warning,
                        &p,
                        format!(
                            "step `{id}`: the proof of `{}` trusts {trusted:?} as the agent left it (build state the agent can forge: compiled tests, fingerprints, installed packages); a pass says so",
                            crate::audit::text::command_line(&command.run)
                        ),
                    );
                } else {
                    self.error(
                        &p,
                        format!(
                            "step `{id}`: trust {trusted:?} is no build state `{}` reuses (it knows: {})",
                            crate::audit::text::command_line(&command.run),
                            if defs.build_state.is_empty() {
                                "none".to_string()
                            } else {
                                defs.build_state.join(", ")
                            }
                        ),
                    );
                }
            }
            if !defs.unknown.is_empty() {
                let mut p = at("command");
                p.push(Seg::Key("run"));
                self.add(
                    if strict {
                        Severity::Error
                    } else {
                        Severity::Warning
                    },
                    &p,
                    format!(
                        "step `{id}`: {}what defines `{}` is not all known before it runs ({}): only what is known is frozen",
                        if strict { "the runbook is strict: " } else { "" },
                        crate::audit::text::command_line(&command.run),
                        defs.unknown.join("; ")
                    ),
                );
            }
        }
        for (key, paths) in [
            ("files_exist", item.files_exist.as_ref().map(|f| &f.paths)),
            (
                "files_changed",
                item.files_changed.as_ref().map(|f| &f.paths),
            ),
            (
                "files_unchanged",
                item.files_unchanged.as_ref().map(|f| &f.paths),
            ),
        ] {
            let Some(paths) = paths else { continue };
            let mut p = at(key);
            p.push(Seg::Key("paths"));
            if paths.is_empty() {
                self.error(&p, format!("step `{id}`: `{key}` names no path"));
            }
            for (n, glob) in paths.iter().enumerate() {
                let bad = glob.trim().is_empty()
                    || glob.starts_with('/')
                    || glob.starts_with('~')
                    || glob.split('/').any(|c| c == ".." || c == ".");
                if bad {
                    let mut q = p.clone();
                    q.push(Seg::Index(n));
                    self.error(
                        &q,
                        format!(
                            "step `{id}`: {key} path {glob:?} must be a glob relative to the workspace (no `/` or `~` at the start, no `.` or `..` components)"
                        ),
                    );
                }
            }
        }
        if let Some(approval) = &item.approval
            && approval.approvers.trim().is_empty()
        {
            let mut p = at("approval");
            p.push(Seg::Key("approvers"));
            self.error(
                &p,
                format!("step `{id}`: the approval's `approvers` is empty: say who is asked"),
            );
        }
        if let Some(verifier) = &item.verifier {
            let mut p = at("verifier");
            if !(2..=3).contains(&verifier.tier) {
                p.push(Seg::Key("tier"));
                self.error(
                    &p,
                    format!(
                        "step `{id}`: verifier tier {} does not exist: 2 (a fast model) or 3 (a thorough one)",
                        verifier.tier
                    ),
                );
            } else if step.acceptance.is_empty() {
                self.error(
                    &p,
                    format!(
                        "step `{id}`: a verifier judges the step's acceptance criteria, and it has none: add `acceptance`"
                    ),
                );
            } else if verifiers.is_none_or(|v| v.models(verifier.tier).is_empty()) {
                p.push(Seg::Key("tier"));
                self.error(
                    &p,
                    format!(
                        "step `{id}`: verifier tier {tier} names no model: add `[verifiers]` with `tier{tier} = [\"MODEL\", …]` (tried in order)",
                        tier = verifier.tier
                    ),
                );
            }
        }
    }

    fn attempts(&mut self, index: usize, step: &Step) {
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

    /// The profile's compiled policy, or `None` (with an error when a step has rules the
    /// profile's hook would have to enforce).
    fn profile_policy(&mut self, runbook: &Runbook, profile: &Profile) -> Option<CompiledPolicy> {
        let Some(hook) = &profile.hook else {
            for (index, step) in runbook.steps.iter().enumerate() {
                for side in ["allow", "deny"] {
                    let rules = if side == "allow" {
                        &step.allow
                    } else {
                        &step.deny
                    };
                    if !rules.is_empty() {
                        let mut path = step_path(index);
                        path.push(Seg::Key(side));
                        self.error(
                            &path,
                            format!(
                                "step `{}` has {side} rules, but profile `{}` has no [hook] section to enforce them",
                                step.id, profile.name
                            ),
                        );
                    }
                }
            }
            return None;
        };
        let config = hook.with_protected(&profile.filesystem.protected);
        match compile(&config, &check_context(&profile.name)) {
            Ok(policy) => Some(policy),
            Err(e) => {
                self.error(
                    &[],
                    format!("profile `{}`: its hook does not compile: {e}", profile.name),
                );
                None
            }
        }
    }

    fn rules(
        &mut self,
        index: usize,
        step: &Step,
        profile: &Profile,
        profile_policy: Option<&CompiledPolicy>,
    ) {
        let mut ids: BTreeMap<&str, &'static str> = BTreeMap::new();
        let mut all_compile = true;
        for (side, rules) in [("allow", &step.allow), ("deny", &step.deny)] {
            for rule in rule_list(rules) {
                let mut path = step_path(index);
                path.extend([Seg::Key(side), Seg::Key(rule.kind), Seg::Index(rule.index)]);
                if let Some(other) = ids.insert(rule.id, side) {
                    let mut p = path.clone();
                    p.push(Seg::Key("id"));
                    self.error(
                        &p,
                        format!(
                            "step `{}`: rule id `{}` is used twice (also in its {other} rules): every rule needs its own id",
                            step.id, rule.id
                        ),
                    );
                }
                all_compile &= self.rule_compiles(step, side, &rule, &path, profile);
                if rule.kind == "tools" {
                    for (n, name) in rule.fields[0].1.iter().enumerate() {
                        let mut p = path.clone();
                        p.extend([Seg::Key("names"), Seg::Index(n)]);
                        self.tool_name(step, side, &rule, name, &p);
                    }
                }
            }
        }
        if !all_compile {
            return;
        }
        let deny_policy = compile(
            &HookConfig {
                default: Some(Decision::Allow),
                unknown: Some(Decision::Allow),
                unknown_tool: Some(Decision::Allow),
                ..step.deny.to_hook(Decision::Deny)
            }
            .with_protected(&profile.filesystem.protected),
            &check_context(&profile.name),
        );
        let Ok(deny_policy) = deny_policy else {
            return;
        };
        for rule in rule_list(&step.allow) {
            for (field, patterns) in &rule.fields {
                for (n, pattern) in patterns.iter().enumerate() {
                    let mut path = step_path(index);
                    path.extend([
                        Seg::Key("allow"),
                        Seg::Key(rule.kind),
                        Seg::Index(rule.index),
                        Seg::Key(field),
                        Seg::Index(n),
                    ]);
                    let Some(calls) = instances(rule.kind, field, rule.access, pattern) else {
                        continue;
                    };
                    let judged = Judged {
                        step,
                        rule: &rule,
                        pattern,
                        calls: &calls,
                    };
                    self.allow_pattern(&judged, &path, &deny_policy, profile, profile_policy);
                }
            }
        }
    }

    /// Compiles one rule alone with the hook crate's compiler (so that every bad rule is
    /// reported, not only the first); also refuses empty patterns, which it lets through.
    fn rule_compiles(
        &mut self,
        step: &Step,
        side: &str,
        rule: &RuleRef<'_>,
        path: &[Seg<'_>],
        profile: &Profile,
    ) -> bool {
        for (field, patterns) in &rule.fields {
            for (n, pattern) in patterns.iter().enumerate() {
                if pattern.trim().is_empty() {
                    let mut p = path.to_vec();
                    p.extend([Seg::Key(field), Seg::Index(n)]);
                    self.error(
                        &p,
                        format!(
                            "step `{}`: {side} rule `{}`: an entry of `{field}` is empty",
                            step.id, rule.id
                        ),
                    );
                    return false;
                }
            }
        }
        let config = rule
            .alone(side)
            .with_protected(&profile.filesystem.protected);
        match compile(&config, &check_context(&profile.name)) {
            Ok(_) => true,
            Err(e) => {
                let mut p = path.to_vec();
                if let stepproof_hook::policy::PolicyError::BadPattern { pattern, .. } = &e {
                    for (field, patterns) in &rule.fields {
                        if let Some(n) = patterns.iter().position(|x| x == pattern) {
                            p.extend([Seg::Key(field), Seg::Index(n)]);
                            break;
                        }
                    }
                }
                self.error(&p, format!("step `{}`: {side} rule: {e}", step.id));
                false
            }
        }
    }

    /// An allow pattern's calls judged by the step's own deny rules (all denied: it can never
    /// match) and by the profile (all denied: it tries to widen it; all asked: it stays ask).
    fn allow_pattern(
        &mut self,
        judged: &Judged<'_>,
        path: &[Seg<'_>],
        deny_policy: &CompiledPolicy,
        profile: &Profile,
        profile_policy: Option<&CompiledPolicy>,
    ) {
        let Judged {
            step,
            rule,
            pattern,
            calls,
        } = judged;
        let judge = |policy: &CompiledPolicy| -> Vec<stepproof_hook::Verdict> {
            calls
                .iter()
                .map(|(tool, input)| stepproof_hook::check_tool(policy, tool, input))
                .collect()
        };
        let own = judge(deny_policy);
        if own.iter().all(|v| v.decision == Decision::Deny) {
            self.error(
                path,
                format!(
                    "step `{}`: allow rule `{}`: `{pattern}` can never match: the step's own deny rule `{}` covers it",
                    step.id, rule.id, own[0].rule_id
                ),
            );
            return;
        }
        let Some(policy) = profile_policy else {
            return;
        };
        let verdicts = judge(policy);
        // The least restrictive instance says what the rule can still let through.
        let Some(loosest) = verdicts.iter().min_by_key(|v| v.decision) else {
            return;
        };
        let rule_text = profile_rule_text(policy, &loosest.rule_id);
        match loosest.decision {
            Decision::Deny => self.error(
                path,
                format!(
                    "step `{}`: allow rule `{}`: `{pattern}` tries to widen the profile: profile `{}` denies it ({rule_text}); a step only narrows the profile, so this rule can never let anything through",
                    step.id, rule.id, profile.name
                ),
            ),
            Decision::Ask => self.add(
                Severity::Warning,
                path,
                format!(
                    "step `{}`: allow rule `{}`: `{pattern}` stays \"ask\": profile `{}` asks about it ({rule_text}), and a step cannot lift that",
                    step.id, rule.id, profile.name
                ),
            ),
            Decision::Allow => {}
        }
    }

    /// A tool name no Claude Code tool has (exact names only; globs and MCP tools pass).
    fn tool_name(
        &mut self,
        step: &Step,
        side: &str,
        rule: &RuleRef<'_>,
        name: &str,
        path: &[Seg<'_>],
    ) {
        let glob = name.contains(['*', '?', '\\']);
        if glob || name.starts_with("mcp__") || KNOWN_TOOLS.contains(&name) {
            return;
        }
        self.add(
            Severity::Warning,
            path,
            format!(
                "step `{}`: {side} rule `{}`: no tool `{name}` in Claude Code 2.1.328 (its tools: {}; MCP tools are `mcp__SERVER__TOOL`)",
                step.id,
                rule.id,
                KNOWN_TOOLS.join(", ")
            ),
        );
    }
}

/// An allow pattern and the calls it names.
struct Judged<'a> {
    step: &'a Step,
    rule: &'a RuleRef<'a>,
    pattern: &'a str,
    calls: &'a [(String, Value)],
}

/// `rule \`id\`: reason` for a profile rule, or the fallback's words.
fn profile_rule_text(policy: &CompiledPolicy, rule_id: &str) -> String {
    match policy.rules.iter().find(|r| r.id == rule_id) {
        Some(rule) => format!("rule `{}`: {}", rule.id, rule.reason),
        None => match rule_id {
            "default" => "its default for calls no rule matches".into(),
            "unknown" => "its decision for commands it cannot know".into(),
            "unknown-tool" => "its decision for tools it has no rule for".into(),
            other => format!("rule `{other}`"),
        },
    }
}

pub(crate) fn check_context(profile_name: &str) -> Context {
    Context {
        workspace: CHECK_WORKSPACE.into(),
        home: CHECK_HOME.into(),
        profile_name: profile_name.to_string(),
    }
}

/// One rule of a step, whatever its kind.
struct RuleRef<'a> {
    kind: &'static str,
    /// Its position in its kind's list.
    index: usize,
    id: &'a str,
    /// Its pattern lists by key (`commands` and `env` for bash, `paths`, `domains`, …).
    fields: Vec<(&'static str, Vec<&'a str>)>,
    access: Option<Access>,
    source: &'a StepRules,
}

impl RuleRef<'_> {
    /// This rule alone, as a profile's `[hook]` with the side's decision.
    fn alone(&self, side: &str) -> HookConfig {
        let decision = if side == "allow" {
            Decision::Allow
        } else {
            Decision::Deny
        };
        let all = self.source.to_hook(decision);
        fn only<T>(list: Vec<T>, wanted: bool, index: usize) -> Vec<T> {
            list.into_iter()
                .enumerate()
                .filter(|(i, _)| wanted && *i == index)
                .map(|(_, r)| r)
                .collect()
        }
        HookConfig {
            bash: only(all.bash, self.kind == "bash", self.index),
            files: only(all.files, self.kind == "files", self.index),
            web: only(all.web, self.kind == "web", self.index),
            tools: only(all.tools, self.kind == "tools", self.index),
            agents: only(all.agents, self.kind == "agents", self.index),
            ..HookConfig::default()
        }
    }
}

fn rule_list(rules: &StepRules) -> Vec<RuleRef<'_>> {
    fn strs(v: &[String]) -> Vec<&str> {
        v.iter().map(String::as_str).collect()
    }
    fn rule<'a>(
        source: &'a StepRules,
        (kind, index, id): (&'static str, usize, &'a str),
        fields: Vec<(&'static str, Vec<&'a str>)>,
        access: Option<Access>,
    ) -> RuleRef<'a> {
        RuleRef {
            kind,
            index,
            id,
            fields,
            access,
            source,
        }
    }
    let mut out = Vec::new();
    for (i, r) in rules.bash.iter().enumerate() {
        let fields = vec![("commands", strs(&r.commands)), ("env", strs(&r.env))];
        out.push(rule(rules, ("bash", i, &r.id), fields, None));
    }
    for (i, r) in rules.files.iter().enumerate() {
        out.push(rule(
            rules,
            ("files", i, &r.id),
            vec![("paths", strs(&r.paths))],
            Some(r.access),
        ));
    }
    for (i, r) in rules.web.iter().enumerate() {
        out.push(rule(
            rules,
            ("web", i, &r.id),
            vec![("domains", strs(&r.domains))],
            None,
        ));
    }
    for (i, r) in rules.tools.iter().enumerate() {
        out.push(rule(
            rules,
            ("tools", i, &r.id),
            vec![("names", strs(&r.names))],
            None,
        ));
    }
    for (i, r) in rules.agents.iter().enumerate() {
        out.push(rule(
            rules,
            ("agents", i, &r.id),
            vec![("types", strs(&r.types))],
            None,
        ));
    }
    out
}

/// One word of a pattern made concrete: `\x` is `x`, `*` is `fill`, `?` is one letter.
fn concrete(word: &str, fill: &str) -> String {
    let mut out = String::new();
    let mut chars = word.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.extend(chars.next()),
            '*' => out.push_str(fill),
            '?' => out.push('x'),
            c => out.push(c),
        }
    }
    out
}

fn shell_quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', "'\\''"))
}

/// The calls a pattern names at its narrowest and with one more of each wildcard (see the
/// module's comment), as (tool, input); `None` when the pattern names no call this check can
/// make (a built-in tool's name: the profile judges its input, not its name).
fn instances(
    kind: &str,
    field: &str,
    access: Option<Access>,
    pattern: &str,
) -> Option<Vec<(String, Value)>> {
    let both = |make: &dyn Fn(bool) -> (String, Value)| Some(vec![make(false), make(true)]);
    let fill = |wide: bool| if wide { "x" } else { "" };
    match (kind, field) {
        // An assignment alone runs nothing: only the `env` rules judge it.
        ("bash", "env") => both(&|wide| {
            let name = concrete(pattern, if wide { "X" } else { "" });
            let name = if name.is_empty() { "X".into() } else { name };
            ("Bash".into(), json!({ "command": format!("{name}=x") }))
        }),
        ("bash", _) => both(&|wide| {
            let mut words = pattern.split_whitespace();
            let name = concrete(words.next().unwrap_or("x"), fill(wide));
            let mut line = vec![shell_quote(if name.is_empty() { "x" } else { &name })];
            for word in words {
                if word == "*" {
                    if wide {
                        line.push("x".into());
                    }
                } else {
                    line.push(shell_quote(&concrete(word, fill(wide))));
                }
            }
            ("Bash".into(), json!({ "command": line.join(" ") }))
        }),
        ("files", _) => both(&|wide| {
            let path = if pattern == stepproof_hook::pattern::ENV_FILES {
                ".env".to_string()
            } else {
                let parts: Vec<String> = pattern
                    .split('/')
                    .filter_map(|c| match c {
                        "**" if wide => Some("x".to_string()),
                        "**" => None,
                        c => Some(concrete(c, fill(wide))),
                    })
                    .collect();
                let joined = parts.join("/");
                if pattern.starts_with('/') && !joined.starts_with('/') {
                    format!("/{joined}")
                } else {
                    joined
                }
            };
            match access {
                Some(Access::Write) => {
                    ("Write".into(), json!({ "file_path": path, "content": "" }))
                }
                _ => ("Read".into(), json!({ "file_path": path })),
            }
        }),
        // Any domain: a WebSearch without a domain list is judged as `*`.
        ("web", _) if pattern == "*" => Some(vec![("WebSearch".into(), json!({ "query": "x" }))]),
        ("web", _) => both(&|wide| {
            let host = match pattern.strip_prefix("*.") {
                Some(rest) if wide => format!("x.{}", concrete(rest, "x")),
                Some(rest) => concrete(rest, ""),
                None => concrete(pattern, fill(wide)),
            };
            (
                "WebFetch".into(),
                json!({ "url": format!("https://{host}/") }),
            )
        }),
        ("tools", _) => {
            let names = [concrete(pattern, ""), concrete(pattern, "x")];
            if names
                .iter()
                .any(|n| n.is_empty() || JUDGED_BY_INPUT.contains(&n.as_str()))
            {
                return None;
            }
            Some(names.into_iter().map(|n| (n, json!({}))).collect())
        }
        ("agents", _) => both(&|wide| {
            let kind = concrete(pattern, fill(wide));
            (
                "Agent".into(),
                json!({ "subagent_type": kind, "prompt": "x" }),
            )
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(text: &str) -> Vec<String> {
        let profile = Profile::builtin_default().unwrap();
        check(text, &profile)
            .problems
            .iter()
            .map(|p| p.render("r.toml"))
            .collect()
    }

    const HEAD: &str = "id = \"rb\"\ntitle = \"T\"\nowner = \"o\"\n";

    fn step(id: &str, extra: &str) -> String {
        format!(
            "[[steps]]\nid = \"{id}\"\ntitle = \"t\"\ninstructions = \"i\"\n{extra}[[steps.evidence]]\ncommand = {{ run = [\"true\"] }}\n"
        )
    }

    #[test]
    fn a_strict_runbook_refuses_trust_where_another_warns() {
        let trusting = "[[steps]]\nid = \"a\"\ntitle = \"t\"\ninstructions = \"i\"\n[[steps.evidence]]\ncommand = { run = [\"cargo\", \"test\"], trust = [\"target/\"] }\n";
        let lax = problems(&format!("{HEAD}{trusting}"));
        assert_eq!(
            lax,
            vec![
                "r.toml:9:47: warning: step `a`: the proof of `cargo test` trusts \"target/\" as the agent left it (build state the agent can forge: compiled tests, fingerprints, installed packages); a pass says so"
            ]
        );
        let strict = problems(&format!("{HEAD}strict = true\n{trusting}"));
        assert_eq!(
            strict,
            vec![
                "r.toml:10:47: error: step `a`: the runbook is strict: the proof of `cargo test` may not trust \"target/\" as the agent left it (build state the agent can forge); drop `trust` (the evidence sandbox then rebuilds it) or `strict`"
            ]
        );
        // Without trust, a strict runbook is valid; `strict = false` is the default, and
        // neither changes the hash of a runbook that does not say it.
        let plain = format!("{HEAD}{}", step("a", ""));
        assert_eq!(
            problems(&format!("{HEAD}strict = true\n{}", step("a", ""))),
            Vec::<String>::new()
        );
        let profile = Profile::builtin_default().unwrap();
        let hash = |text: &str| check(text, &profile).runbook.unwrap().hash();
        assert_eq!(
            hash(&plain),
            hash(&format!("{HEAD}strict = false\n{}", step("a", "")))
        );
        assert_ne!(
            hash(&plain),
            hash(&format!("{HEAD}strict = true\n{}", step("a", "")))
        );
    }

    #[test]
    fn a_good_runbook_has_no_problems() {
        let text = format!(
            "{HEAD}{}{}",
            step("a", ""),
            step("b", "depends_on = [\"a\"]\n")
        );
        assert_eq!(problems(&text), Vec::<String>::new());
        let report = check(&text, &Profile::builtin_default().unwrap());
        assert_eq!(report.order, vec![0, 1]);
    }

    #[test]
    fn dependency_order_puts_a_step_after_what_it_needs() {
        let text = format!(
            "{HEAD}{}{}{}",
            step("c", "depends_on = [\"b\", \"a\"]\n"),
            step("b", "depends_on = [\"a\"]\n"),
            step("a", "")
        );
        let report = check(&text, &Profile::builtin_default().unwrap());
        assert_eq!(report.errors(), 0, "{:?}", report.problems);
        assert_eq!(report.order, vec![2, 1, 0]);
    }

    #[test]
    fn every_problem_is_reported_in_one_pass() {
        // Two unknown keys (one inline table's, one a step's, the second over two lines) and a
        // cycle: all three at once, each at its place; the line numbers are the file's.
        let text = format!(
            "{HEAD}colour = \"red\"\n{}{}",
            step("a", "depends_on = [\"b\"]\nextra = [\n  1,\n  2,\n]\n"),
            step("b", "depends_on = [\"a\"]\n")
        );
        let found = problems(&text);
        assert_eq!(found.len(), 3, "{found:#?}");
        assert!(
            found[0].starts_with("r.toml:4:1: error: unknown field `colour`"),
            "{found:#?}"
        );
        assert!(
            found[1].contains("error: dependency cycle: a → b → a"),
            "{found:#?}"
        );
        assert!(
            found[2].starts_with("r.toml:10:1: error: unknown field `extra`"),
            "{found:#?}"
        );
        // An unknown table with a header of its own: reported alone (its body cannot be told
        // apart from the table before it once the header is gone).
        let header = format!("{HEAD}{}[steps.mystery]\nx = 1\n", step("a", ""));
        let found = problems(&header);
        assert_eq!(found.len(), 1, "{found:#?}");
        assert!(found[0].contains("unknown field `mystery`"), "{found:#?}");
        // A key of an inline table goes with its comma, first or last: nothing else is said.
        for evidence in [
            "command = { run = [\"true\"], bogus = 1 }",
            "command = { bogus = 1, run = [\"true\"] }",
        ] {
            let text = format!(
                "{HEAD}[[steps]]\nid = \"a\"\ntitle = \"t\"\ninstructions = \"i\"\n[[steps.evidence]]\n{evidence}\n[[steps]]\nid = \"a\"\ntitle = \"t\"\ninstructions = \"i\"\n[[steps.evidence]]\ncommand = {{ run = [\"true\"] }}\n"
            );
            let found = problems(&text);
            assert_eq!(found.len(), 2, "{found:#?}");
            assert!(found[0].contains("unknown field `bogus`"), "{found:#?}");
            assert!(found[1].contains("used twice"), "{found:#?}");
        }
        // A syntax error is alone, as ever.
        let broken = format!("{HEAD}colour = \n{}", step("a", "depends_on = [\"a\"]\n"));
        assert_eq!(problems(&broken).len(), 1);
    }

    #[test]
    fn cycles_are_named_once_at_the_first_step_of_them() {
        let text = format!(
            "{HEAD}{}{}{}",
            step("a", "depends_on = [\"c\"]\n"),
            step("b", "depends_on = [\"a\"]\n"),
            step("c", "depends_on = [\"b\"]\n")
        );
        let found = problems(&text);
        assert_eq!(
            found,
            vec![
                "r.toml:8:15: error: dependency cycle: a → c → b → a (none of these steps could ever open)"
            ],
        );
        let selfish = format!("{HEAD}{}", step("a", "depends_on = [\"a\"]\n"));
        assert_eq!(
            problems(&selfish),
            vec![
                "r.toml:8:15: error: dependency cycle: a → a (none of these steps could ever open)"
            ]
        );
    }

    #[test]
    fn instances_of_patterns() {
        let calls = instances("bash", "commands", None, "git push *").unwrap();
        assert_eq!(calls[0].1["command"], "'git' 'push'");
        assert_eq!(calls[1].1["command"], "'git' 'push' x");
        let calls = instances("bash", "commands", None, "rm * /\\* *").unwrap();
        assert_eq!(calls[0].1["command"], "'rm' '/*'");
        let calls = instances("bash", "env", None, "GIT_*").unwrap();
        assert_eq!(calls[0].1["command"], "GIT_=x");
        assert_eq!(calls[1].1["command"], "GIT_X=x");
        let calls = instances("files", "paths", Some(Access::Write), "src/**/*.rs").unwrap();
        assert_eq!(
            calls[0],
            (
                "Write".into(),
                json!({"file_path": "src/.rs", "content": ""})
            )
        );
        assert_eq!(calls[1].1["file_path"], "src/x/x.rs");
        let calls = instances("files", "paths", Some(Access::Read), "/etc/**").unwrap();
        assert_eq!(calls[0].1["file_path"], "/etc");
        let calls = instances("web", "domains", None, "*.example.com").unwrap();
        assert_eq!(calls[0].1["url"], "https://example.com/");
        assert_eq!(calls[1].1["url"], "https://x.example.com/");
        assert!(instances("tools", "names", None, "Bash").is_none());
        assert_eq!(
            instances("tools", "names", None, "mcp__gh__*").unwrap()[1].0,
            "mcp__gh__x"
        );
    }

    fn profile(name: &str) -> Profile {
        let file =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("profiles/{name}.toml"));
        Profile::load(Some(&file)).unwrap()
    }

    fn found_with(text: &str, profile: &Profile) -> Vec<String> {
        check(text, profile)
            .problems
            .iter()
            .map(|p| p.render("r.toml"))
            .collect()
    }

    /// Every rule kind: what the profile denies outright is an error, what it asks about a
    /// warning, what it allows nothing; judged on the rule's instances, so a pattern that lets
    /// something through is never flagged for what it also names.
    #[test]
    fn allow_rules_never_widen_the_profile() {
        let rules = |kind: &str, body: &str| {
            format!(
                "{HEAD}{}[[steps.allow.{kind}]]\nid = \"r\"\nreason = \"r\"\n{body}\n",
                step("a", "")
            )
        };
        let default = Profile::builtin_default().unwrap();
        let strict = profile("strict");
        for (text, profile, expected) in [
            // Denied outright by a rule, by the default, for an unknown tool.
            (
                rules("bash", "commands = [\"dd *\"]"),
                &default,
                Some(
                    "error: step `a`: allow rule `r`: `dd *` tries to widen the profile: profile `default` denies it (rule `disk-system`",
                ),
            ),
            (
                rules("web", "domains = [\"docs.rs\"]"),
                &strict,
                Some(
                    "error: step `a`: allow rule `r`: `docs.rs` tries to widen the profile: profile `strict` denies it (its default for calls no rule matches)",
                ),
            ),
            (
                rules("tools", "names = [\"mcp__x__*\"]"),
                &strict,
                Some(
                    "error: step `a`: allow rule `r`: `mcp__x__*` tries to widen the profile: profile `strict` denies it (its decision for tools it has no rule for)",
                ),
            ),
            (rules("tools", "names = [\"TodoWrite\"]"), &strict, None),
            (
                rules("files", "access = \"read\"\npaths = [\"~/.ssh/**\"]"),
                &default,
                Some(
                    "`~/.ssh/**` tries to widen the profile: profile `default` denies it (rule `secret-files`",
                ),
            ),
            (
                rules("files", "access = \"read\"\npaths = [\"@env-files\"]"),
                &default,
                Some(
                    "`@env-files` tries to widen the profile: profile `default` denies it (rule `env-files`",
                ),
            ),
            (
                rules("bash", "env = [\"CLAUDE_CODE_SIMPLE\"]"),
                &default,
                Some(
                    "`CLAUDE_CODE_SIMPLE` tries to widen the profile: profile `default` denies it (rule `nested-agent`",
                ),
            ),
            // Asked: a warning.
            (
                rules("bash", "commands = [\"curl *\"]"),
                &default,
                Some(
                    "warning: step `a`: allow rule `r`: `curl *` stays \"ask\": profile `default` asks about it (rule `net-tools`",
                ),
            ),
            (rules("agents", "types = [\"Explore\"]"), &default, None),
            // Allowed, or allowed for some of what it names: nothing to say.
            (rules("bash", "commands = [\"git push *\"]"), &default, None),
            (
                rules("files", "access = \"write\"\npaths = [\"src/**\"]"),
                &default,
                None,
            ),
            (
                rules("web", "domains = [\"*.rust-lang.org\"]"),
                &default,
                None,
            ),
            (
                rules("files", "access = \"read\"\npaths = [\"src/**\"]"),
                &strict,
                None,
            ),
        ] {
            let found = found_with(&text, profile);
            match expected {
                Some(needle) => assert!(
                    found.iter().any(|f| f.contains(needle)),
                    "{needle}\n{found:#?}\n{text}"
                ),
                None => assert!(
                    found
                        .iter()
                        .all(|f| !f.contains("widen") && !f.contains("error")),
                    "{found:#?}\n{text}"
                ),
            }
        }
    }

    #[test]
    fn step_rules_need_a_profile_with_a_hook() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nohook.toml");
        std::fs::write(&path, "name = \"nohook\"\n").unwrap();
        let bare = Profile::load(Some(&path)).unwrap();
        assert!(bare.hook.is_none());
        let text = format!(
            "{HEAD}{}[[steps.deny.bash]]\nid = \"r\"\nreason = \"r\"\ncommands = [\"x *\"]\n",
            step("a", "")
        );
        assert_eq!(
            found_with(&text, &bare),
            vec![
                "r.toml:10:9: error: step `a` has deny rules, but profile `nohook` has no [hook] section to enforce them"
            ]
        );
        // Without rules, any profile will do.
        assert!(found_with(&format!("{HEAD}{}", step("a", "")), &bare).is_empty());
    }

    #[test]
    fn rule_ids_are_unique_within_a_step_and_every_bad_rule_is_reported() {
        let text = format!(
            "{HEAD}{}[[steps.allow.bash]]\nid = \"r\"\nreason = \"r\"\ncommands = [\"* x\"]\n[[steps.deny.files]]\nid = \"r\"\nreason = \"\"\naccess = \"read\"\npaths = [\"a\"]\n[[steps.deny.web]]\nid = \"w\"\nreason = \"r\"\ndomains = [\"\"]\n",
            step("a", "")
        );
        assert_eq!(
            found_with(&text, &Profile::builtin_default().unwrap()),
            vec![
                "r.toml:13:13: error: step `a`: allow rule: rule `r`: pattern `* x` must start with a command name",
                "r.toml:14:1: error: step `a`: deny rule: a files rule has an empty `reason`: every rule needs an id and a reason",
                "r.toml:15:1: error: step `a`: rule id `r` is used twice (also in its allow rules): every rule needs its own id",
                "r.toml:22:12: error: step `a`: deny rule `w`: an entry of `domains` is empty",
            ]
        );
    }

    #[test]
    fn evidence_fields_are_checked() {
        let evidence = |item: &str| {
            format!(
                "{HEAD}[[steps]]\nid = \"a\"\ntitle = \"t\"\ninstructions = \"i\"\nevidence = [{item}]\n"
            )
        };
        let default = Profile::builtin_default().unwrap();
        for (item, expected) in [
            (
                "{ command = { run = [] } }",
                "8:27: error: step `a`: the evidence command's `run` names no program",
            ),
            (
                "{ files_exist = { paths = [] } }",
                "8:31: error: step `a`: `files_exist` names no path",
            ),
            (
                "{ files_changed = { paths = [\"/etc/passwd\"] } }",
                "8:42: error: step `a`: files_changed path \"/etc/passwd\" must be a glob relative to the workspace",
            ),
            (
                "{ files_exist = { paths = [\"../x\"] } }",
                "8:40: error: step `a`: files_exist path \"../x\"",
            ),
            (
                "{ files_unchanged = { paths = [\"tests/**\", \"~/x\"] } }",
                "8:56: error: step `a`: files_unchanged path \"~/x\" must be a glob relative to the workspace",
            ),
            (
                "{ files_unchanged = { paths = [] } }",
                "8:35: error: step `a`: `files_unchanged` names no path",
            ),
            (
                "{ files_unchanged = { paths = [\"t\"], include_ignored = 1 } }",
                "8:68: error: invalid type: integer `1`, expected a boolean",
            ),
            (
                "{ files_changed = { paths = [\"t/**\"] } }, { files_unchanged = { paths = [\"t/**\"] } }",
                "8:42: error: step `a`: files_changed \"t/**\" can never hold: the step protects the same paths (files_unchanged (item 1))",
            ),
            (
                "{ approval = { approvers = \" \", deadline = \"1h\" } }",
                "8:28: error: step `a`: the approval's `approvers` is empty",
            ),
        ] {
            let found = found_with(&evidence(item), &default);
            assert!(
                found
                    .iter()
                    .any(|f| f.starts_with(&format!("r.toml:{expected}"))),
                "{expected}\n{found:#?}"
            );
        }
    }
}
