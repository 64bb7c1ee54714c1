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

use super::{Runbook, Seg, line_column, locate};
use crate::profile::Profile;

mod evidence;
mod rule_instances;
mod rules;
mod structure;

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
}

#[cfg(test)]
mod tests;
