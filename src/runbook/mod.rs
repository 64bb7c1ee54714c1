//! Runbooks: the TOML files that say what an agent should be doing now, step by step, and what
//! proves each step done. This module owns the file (its types, loading with file:line:column
//! errors, the JSON Schema), `check` (everything that can be known before a run) and `explain`
//! (the document a reviewer reads, with the runbook's hash). Running one is the supervisor's.

pub mod author;
pub mod chat;
pub mod check;
pub mod client;
pub mod command;
pub mod definitions;
pub mod explain;
pub mod policy;
pub mod schema;

pub use check::{Problem, Severity, check};
pub use command::{RunbookCommand, run_command};

use serde::{Deserialize, Deserializer, Serialize};
use std::path::{Path, PathBuf};
use stepproof_hook::config::Access;

/// The largest runbook file read: far more than any runbook needs, small enough that
/// `/dev/zero` or a huge file ends in an error.
pub const MAX_RUNBOOK_BYTES: u64 = 1 << 20;

/// Attempts at a step's evidence when `on_fail = "retry"` does not say how many.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;
/// The most attempts a step may ask for.
pub const MAX_ATTEMPTS_LIMIT: u32 = 100;
/// How long an evidence command may run when the step does not say.
pub const DEFAULT_COMMAND_TIMEOUT_SECONDS: u64 = 600;

/// A runbook file as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Runbook {
    /// Stable identifier (letters, digits, `-`, `_`, `.`), in the audit chain and the job
    /// summary.
    pub id: Id,
    /// One line on what the runbook is for.
    pub title: String,
    /// What a reviewer should know beyond the title.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// Who answers for the runbook (a team, a person).
    pub owner: String,
    /// The steps, in any order: `depends_on` orders them.
    pub steps: Vec<Step>,
    /// The models that judge `verifier` evidence, per tier, and their bounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verifiers: Option<Verifiers>,
    /// `strict = true`: a proof may rest on nothing the agent left as it left it — `check`
    /// refuses (errors) what it otherwise only warns of: build state an evidence command
    /// trusts by name (`trust`), and a command whose defining files are not all known before
    /// it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

impl Runbook {
    pub fn strict(&self) -> bool {
        self.strict.unwrap_or(false)
    }
}

/// How long a model verifier may take when `[verifiers]` does not say (the whole fallback
/// chain of one evidence item).
pub const DEFAULT_VERIFIER_TIMEOUT_SECONDS: u64 = 300;
/// The tokens a verification may use when `[verifiers]` does not say (input and output, over
/// every request of the chain).
pub const DEFAULT_VERIFIER_MAX_TOKENS: u64 = 200_000;
/// The most models a tier may name.
pub const VERIFIER_MODELS_MAX: usize = 8;

/// `[verifiers]`: the models per tier, tried in order (a model that cannot be reached falls to
/// the next; past the last, the verdict is `inconclusive`), and the bounds of a verification.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Verifiers {
    /// Tier 2 (fast): model names as Claude Code's `--model` takes them, first tried first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tier2: Vec<String>,
    /// Tier 3 (thorough), likewise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tier3: Vec<String>,
    /// How long one verification may take, the whole chain (unset: 5m); it also counts inside
    /// the run's own `--timeout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Duration>,
    /// The tokens one verification may use, input and output over every request of the chain
    /// (unset: 200000); past it the run is stopped and the verdict is `inconclusive`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// What a verifier is shown of the worker's text (the step's diff, the tails of the
    /// evidence commands' output): unset is [`ShowWork::Masked`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub show: Option<ShowWork>,
}

/// `[verifiers] show`: what of the worker's text goes into a verifier's prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ShowWork {
    /// The diff and the output tails, with every token not plainly a non-secret masked by
    /// its digest (the default).
    Masked,
    /// Neither: the names of the files changed and the outputs' digests only.
    Digests,
    /// The diff and the output tails as written.
    Clear,
}

impl ShowWork {
    pub fn name(self) -> &'static str {
        match self {
            ShowWork::Masked => "masked",
            ShowWork::Digests => "digests",
            ShowWork::Clear => "clear",
        }
    }
}

impl Verifiers {
    /// The models of a tier (2 or 3), in the order they are tried.
    pub fn models(&self, tier: u8) -> &[String] {
        match tier {
            2 => &self.tier2,
            3 => &self.tier3,
            _ => &[],
        }
    }

    pub fn timeout(&self) -> Duration {
        self.timeout.unwrap_or(Duration {
            seconds: DEFAULT_VERIFIER_TIMEOUT_SECONDS,
        })
    }

    pub fn max_tokens(&self) -> u64 {
        self.max_tokens.unwrap_or(DEFAULT_VERIFIER_MAX_TOKENS)
    }

    pub fn show(&self) -> ShowWork {
        self.show.unwrap_or(ShowWork::Masked)
    }
}

/// Whether a model name is one `--model` can take as a value: 1 to 128 of `A-Z a-z 0-9 - _ .
/// : / @ [ ]`, not starting with `-` (it must never read as an option).
pub fn valid_model_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && !name.starts_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.:/@[]".contains(c))
}

/// A step: what the agent is told, what it may use, and what proves it done.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// Stable identifier within the runbook (letters, digits, `-`, `_`, `.`).
    pub id: Id,
    /// One line, shown in status and summaries.
    pub title: String,
    /// What the agent is told when the step opens.
    pub instructions: String,
    /// The criteria the step's work must meet, in prose: shown to the agent and to model
    /// verifiers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub acceptance: Vec<String>,
    /// Steps that must be complete before this one opens; steps with none open at the start,
    /// independent steps may be open at once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<String>,
    /// Hook rules (the profile's `[hook]` rule language, without `decision`) that this step
    /// allows: where a step has allow rules of a kind, what they do not match in that kind is
    /// denied while the step is open. They never allow what the profile does not.
    #[serde(default, skip_serializing_if = "StepRules::is_empty")]
    pub allow: StepRules,
    /// Hook rules this step denies on top of the profile.
    #[serde(default, skip_serializing_if = "StepRules::is_empty")]
    pub deny: StepRules,
    /// What must hold before the step completes, every item of it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<Evidence>,
    /// What a failed completion leads to (unset: `retry`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_fail: Option<OnFail>,
    /// With `on_fail = "retry"`: how many completions may be tried (unset: 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
}

/// What happens when a step's evidence does not hold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnFail {
    /// The step stays open and may be completed again, up to `max_attempts` in all; after the
    /// last failed attempt the run stops as with `block`.
    #[default]
    Retry,
    /// The run stops (`stepproof-run` exits 117, "a step's evidence did not hold").
    Block,
    /// The run is recorded as abandoned (exit 116).
    Abandon,
}

impl OnFail {
    pub fn name(self) -> &'static str {
        match self {
            OnFail::Retry => "retry",
            OnFail::Block => "block",
            OnFail::Abandon => "abandon",
        }
    }
}

impl Step {
    pub fn on_fail(&self) -> OnFail {
        self.on_fail.unwrap_or_default()
    }

    /// How many completions may be tried: `max_attempts` (default 3) with `retry`, one
    /// otherwise.
    pub fn attempts(&self) -> u32 {
        match self.on_fail() {
            OnFail::Retry => self.max_attempts.unwrap_or(DEFAULT_MAX_ATTEMPTS),
            OnFail::Block | OnFail::Abandon => 1,
        }
    }
}

/// A step's hook rules of one side (`allow` or `deny`): the rule kinds of the profile's
/// `[hook]` section, each rule as there but without `decision` (the side decides it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepRules {
    /// Shell commands (the Bash tool, and every command inside it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bash: Vec<BashRule>,
    /// File paths (Read, Write, Edit, NotebookEdit, Glob, Grep, shell redirections).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<FileRule>,
    /// Web domains (WebFetch, WebSearch).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub web: Vec<WebRule>,
    /// Tool names (MCP tools `mcp__server__tool`, TodoWrite, …).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolRule>,
    /// Agent types the Agent tool may start.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agents: Vec<AgentRule>,
}

impl StepRules {
    pub fn is_empty(&self) -> bool {
        self.bash.is_empty()
            && self.files.is_empty()
            && self.web.is_empty()
            && self.tools.is_empty()
            && self.agents.is_empty()
    }

    /// The rules as the profile's `[hook]` rules with `decision`, in the hook crate's own types
    /// (what compiles them and judges calls with them).
    pub fn to_hook(
        &self,
        decision: stepproof_hook::Decision,
    ) -> stepproof_hook::config::HookConfig {
        use stepproof_hook::config as hook;
        hook::HookConfig {
            bash: self
                .bash
                .iter()
                .map(|r| hook::BashRule {
                    id: r.id.clone(),
                    reason: r.reason.clone(),
                    decision,
                    commands: r.commands.clone(),
                    env: r.env.clone(),
                    changes_nothing: false,
                    except_disposable: false,
                })
                .collect(),
            files: self
                .files
                .iter()
                .map(|r| hook::FileRule {
                    id: r.id.clone(),
                    reason: r.reason.clone(),
                    decision,
                    access: r.access,
                    paths: r.paths.clone(),
                })
                .collect(),
            web: self
                .web
                .iter()
                .map(|r| hook::WebRule {
                    id: r.id.clone(),
                    reason: r.reason.clone(),
                    decision,
                    domains: r.domains.clone(),
                })
                .collect(),
            tools: self
                .tools
                .iter()
                .map(|r| hook::ToolRule {
                    id: r.id.clone(),
                    reason: r.reason.clone(),
                    decision,
                    names: r.names.clone(),
                })
                .collect(),
            agents: self
                .agents
                .iter()
                .map(|r| hook::AgentRule {
                    id: r.id.clone(),
                    reason: r.reason.clone(),
                    decision,
                    types: r.types.clone(),
                })
                .collect(),
            ..hook::HookConfig::default()
        }
    }
}

// The rule shapes are the profile's (`stepproof_hook::config`), field for field, less
// `decision`; a test holds them together.

/// A rule over shell commands: `commands` patterns as in the profile (`"cargo test *"`), and
/// `env` names whose assignment the rule matches.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BashRule {
    pub id: String,
    pub reason: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub commands: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
}

/// A rule over file paths: globs as in the profile (relative = the workspace, `~/…`, `/…`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileRule {
    pub id: String,
    pub reason: String,
    pub access: Access,
    pub paths: Vec<String>,
}

/// A rule over web domains.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebRule {
    pub id: String,
    pub reason: String,
    pub domains: Vec<String>,
}

/// A rule over tool names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolRule {
    pub id: String,
    pub reason: String,
    pub names: Vec<String>,
}

/// A rule over agent types.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentRule {
    pub id: String,
    pub reason: String,
    pub types: Vec<String>,
}

/// One item of a step's evidence: exactly one of its kinds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Evidence {
    /// A command the supervisor runs in a fresh sandbox on the workspace as it is then (its
    /// writes thrown away); its exit code and output digest are recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<CommandEvidence>,
    /// Files that must exist at completion (globs; each must name at least one file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files_exist: Option<FilesEvidence>,
    /// Files that must have changed since the step opened (globs; at least one file each),
    /// judged from the supervisor's own hashes; files the repository ignores (as its ignore
    /// rules were when the step opened) do not count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files_changed: Option<ChangeEvidence>,
    /// Paths that must be as they were when the step opened (globs): content, mode, type, no
    /// entry added or removed, no link added or retargeted — whatever changed them. A step
    /// invariant, like the paths its `deny` file-write rules name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files_unchanged: Option<ChangeEvidence>,
    /// A person approves, out of band (`stepproof approve RUN STEP`), before the deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalEvidence>,
    /// A model verifier run that cannot write judges the acceptance criteria.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verifier: Option<VerifierEvidence>,
}

/// The evidence kinds, by their key.
pub const EVIDENCE_KINDS: [&str; 6] = [
    "command",
    "files_exist",
    "files_changed",
    "files_unchanged",
    "approval",
    "verifier",
];

impl Evidence {
    /// The kinds this item sets (exactly one in a valid runbook).
    pub fn kinds(&self) -> Vec<&'static str> {
        [
            self.command.is_some(),
            self.files_exist.is_some(),
            self.files_changed.is_some(),
            self.files_unchanged.is_some(),
            self.approval.is_some(),
            self.verifier.is_some(),
        ]
        .iter()
        .zip(EVIDENCE_KINDS)
        .filter_map(|(set, kind)| set.then_some(kind))
        .collect()
    }
}

/// `command = { run = ["cargo", "test"] }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandEvidence {
    /// The program and its arguments (no shell: write `["sh", "-c", "…"]` for one).
    pub run: Vec<String>,
    /// The exit code that counts as success (unset: 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// How long it may run: `90s`, `10m`, `1h` (unset: 10m); it fails when it takes longer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Duration>,
    /// Whether it gets the profile's network (unset: no network at all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<bool>,
    /// Build state in the workspace the proof trusts as the agent left it (`["target/"]`,
    /// `["node_modules/"]`): seen by the command as it is. Unset, the build state the command
    /// would reuse is discarded in its sandbox (an empty directory: rebuilt).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trust: Vec<String>,
}

/// `files_exist = { paths = ["tests/regression_*.rs"] }`: files as git would see them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilesEvidence {
    /// Globs relative to the workspace (`*` within a component, `**` any number of them).
    pub paths: Vec<String>,
    /// Whether files the repository ignores count too (unset: they do not — a test's
    /// `__pycache__/x.pyc`, build output, is not the file a glob asks for).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_ignored: Option<bool>,
}

impl FilesEvidence {
    pub fn include_ignored(&self) -> bool {
        self.include_ignored.unwrap_or(false)
    }
}

/// `files_changed = { paths = ["src/**"] }`, `files_unchanged = { paths = ["tests/**"] }`:
/// changes, as git would see them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChangeEvidence {
    /// Globs relative to the workspace (`*` within a component, `**` any number of them).
    pub paths: Vec<String>,
    /// Whether files the repository ignores count too (unset: they do not — build output and
    /// caches, `__pycache__/`, are not a change).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_ignored: Option<bool>,
}

impl ChangeEvidence {
    pub fn include_ignored(&self) -> bool {
        self.include_ignored.unwrap_or(false)
    }
}

/// A path a step protects: a workspace glob that must be as it was when the step opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Protected {
    /// The glob, relative to the workspace.
    pub glob: String,
    /// Whether ignored files under it count (`files_unchanged` with `include_ignored`).
    pub include_ignored: bool,
    /// What protects it: a deny rule's id, or the evidence item's number.
    pub by: ProtectedBy,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProtectedBy {
    DenyRule(String),
    Item(usize),
}

impl Step {
    /// The step's invariants: every workspace path its `deny` file-write rules name, and every
    /// `files_unchanged` glob. A deny rule's path outside the workspace (`/…`, `~/…`) or
    /// named by `@env-files` is not among them ([`Step::unprotected_denials`]).
    pub fn protected_paths(&self) -> Vec<Protected> {
        let mut out = Vec::new();
        for rule in self.deny.files.iter().filter(|r| r.access == Access::Write) {
            for path in &rule.paths {
                if let Some(glob) = workspace_glob(path) {
                    out.push(Protected {
                        glob,
                        include_ignored: false,
                        by: ProtectedBy::DenyRule(rule.id.clone()),
                    });
                }
            }
        }
        for (n, item) in self.evidence.iter().enumerate() {
            for path in item.files_unchanged.iter().flat_map(|f| &f.paths) {
                out.push(Protected {
                    glob: path.trim_start_matches("./").to_string(),
                    include_ignored: item
                        .files_unchanged
                        .as_ref()
                        .is_some_and(|f| f.include_ignored()),
                    by: ProtectedBy::Item(n),
                });
            }
        }
        out
    }

    /// The paths of `deny` file-write rules that are not invariants: outside the workspace
    /// (the sandbox decides what is writable there) or `@env-files` (a name anywhere).
    pub fn unprotected_denials(&self) -> Vec<String> {
        self.deny
            .files
            .iter()
            .filter(|r| r.access == Access::Write)
            .flat_map(|r| &r.paths)
            .filter(|p| workspace_glob(p).is_none())
            .cloned()
            .collect()
    }
}

/// A file rule's path as a workspace glob, when it is one (relative, not `@env-files`, no `.`
/// or `..` component).
fn workspace_glob(path: &str) -> Option<String> {
    let glob = path.trim_start_matches("./");
    (!glob.is_empty()
        && !glob.starts_with('/')
        && !glob.starts_with('~')
        && !glob.starts_with('@')
        && !glob.split('/').any(|c| c == ".." || c == "."))
    .then(|| glob.to_string())
}

/// `approval = { approvers = "the release manager", deadline = "4h" }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalEvidence {
    /// Who is asked, in words (shown with the request).
    pub approvers: String,
    /// How long the step waits; no answer by then is a denial.
    pub deadline: Duration,
}

/// `verifier = { tier = 2 }`: the supervisor starts a separate Claude Code run that cannot
/// write, with the models `[verifiers]` names for the tier, to judge the acceptance criteria.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifierEvidence {
    /// 2: a fast model; 3: a thorough one.
    pub tier: u8,
}

/// A duration as written (`90s`, `10m`, `4h`, `2d`), kept in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Duration {
    pub seconds: u64,
}

impl Duration {
    /// `90s`, `10m`, `4h`, `2d`: a positive whole number and one unit.
    pub fn parse(text: &str) -> Result<Duration, String> {
        let wrong = || {
            format!(
                "invalid duration {text:?}: write a whole number and a unit, e.g. \"90s\", \"10m\", \"4h\", \"2d\""
            )
        };
        let unit_at = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(wrong)?;
        let (number, unit) = text.split_at(unit_at);
        let number: u64 = number.parse().map_err(|_| wrong())?;
        let scale = match unit {
            "s" => 1,
            "m" => 60,
            "h" => 3600,
            "d" => 86400,
            _ => return Err(wrong()),
        };
        let seconds = number.checked_mul(scale).ok_or_else(wrong)?;
        if seconds == 0 {
            return Err(format!(
                "invalid duration {text:?}: it must be longer than 0"
            ));
        }
        Ok(Duration { seconds })
    }

    /// The largest unit that divides it: `600` seconds is `10m`.
    pub fn render(self) -> String {
        for (unit, scale) in [("d", 86400), ("h", 3600), ("m", 60)] {
            if self.seconds.is_multiple_of(scale) {
                return format!("{}{unit}", self.seconds / scale);
            }
        }
        format!("{}s", self.seconds)
    }
}

impl Serialize for Duration {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // The canonical spelling: `60m` and `1h` are one duration, with one hash.
        serializer.serialize_str(&self.render())
    }
}

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(deserializer)?;
        Duration::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// A runbook or step id: 1 to 64 of `A-Z a-z 0-9 - _ .`, starting with a letter or digit
/// (it is typed on command lines: `stepproof approve RUN STEP`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Id(pub String);

/// The pattern ids match, as the JSON Schema says it.
pub const ID_PATTERN: &str = "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$";

impl Id {
    pub fn parse(text: &str) -> Result<Id, String> {
        let ok = (1..=64).contains(&text.len())
            && text.starts_with(|c: char| c.is_ascii_alphanumeric())
            && text
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        if ok {
            Ok(Id(text.to_string()))
        } else {
            Err(format!(
                "invalid id {text:?}: use 1 to 64 letters, digits, `-`, `_` or `.`, starting with a letter or digit"
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Id {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Id, D::Error> {
        let text = String::deserialize(deserializer)?;
        Id::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// Why a runbook could not be read at all (problems in what was read are `check::Problem`s).
#[derive(Debug, thiserror::Error)]
#[error("reading runbook {}: {source}", path.display())]
pub struct ReadError {
    pub path: PathBuf,
    pub source: std::io::Error,
}

/// A runbook file's text: a regular file (a FIFO is refused, not waited on) of at most
/// [`MAX_RUNBOOK_BYTES`], UTF-8.
pub fn read(path: &Path) -> Result<String, ReadError> {
    crate::regular_file::read_to_string(path, MAX_RUNBOOK_BYTES).map_err(|source| ReadError {
        path: path.to_path_buf(),
        source,
    })
}

/// Parses a runbook's text: the types only (syntax, unknown keys, missing keys, types, ids,
/// durations). `check` does the rest. The error is placed at its line and column.
pub fn parse(text: &str) -> Result<Runbook, Problem> {
    parse_spanned(text).map_err(|(problem, _)| problem)
}

/// [`parse`], with the error's span when it is an unknown key's.
fn parse_spanned(text: &str) -> Result<Runbook, (Problem, Option<std::ops::Range<usize>>)> {
    if let Some(problem) = approval_channel_named(text) {
        return Err((problem, None));
    }
    toml::from_str::<Runbook>(text).map_err(|e| {
        let (line, column) = e
            .span()
            .map(|span| line_column(text, span.start))
            .unwrap_or((1, 1));
        let unknown = e
            .message()
            .starts_with("unknown field")
            .then(|| e.span())
            .flatten();
        (
            Problem {
                severity: Severity::Error,
                line,
                column,
                message: e.message().trim().to_string(),
            },
            unknown,
        )
    })
}

/// Unknown keys reported in one pass, at most.
const UNKNOWN_KEYS_MAX: usize = 64;

/// Parses a runbook's text, reporting every unknown key at once: each one found is blanked out
/// (its key and value replaced by spaces, line ends kept, so every other offset stays where it
/// was) and the text parsed again; the runbook then goes on to `check`'s other problems with
/// those errors beside them. Any other error (syntax, a missing key, a type), or an unknown
/// key that cannot be blanked alone (a table with a header of its own), ends the parse with it.
pub fn parse_all(text: &str) -> (Option<Runbook>, Vec<Problem>) {
    let mut problems = Vec::new();
    let mut current = text.to_string();
    for _ in 0..UNKNOWN_KEYS_MAX {
        match parse_spanned(&current) {
            Ok(runbook) => return (Some(runbook), problems),
            Err((problem, unknown)) => {
                problems.push(problem);
                match unknown.and_then(|span| blank_key(&current, span)) {
                    Some(next) => current = next,
                    None => return (None, problems),
                }
            }
        }
    }
    (None, problems)
}

/// `text` with the key written at `span` and its value replaced by spaces (line ends kept);
/// `None` when the key is not found as `key = value` (a table's header).
fn blank_key(text: &str, span: std::ops::Range<usize>) -> Option<String> {
    use toml::de::{DeTable, DeValue};
    fn find(table: &DeTable<'_>, at: usize) -> Option<std::ops::Range<usize>> {
        for (key, value) in table.iter() {
            if key.span().start <= at && at < key.span().end.max(key.span().start + 1) {
                return Some(key.span().start..value.span().end);
            }
            let inner = match value.get_ref() {
                DeValue::Table(t) => find(t, at),
                DeValue::Array(items) => items.iter().find_map(|item| match item.get_ref() {
                    DeValue::Table(t) => find(t, at),
                    _ => None,
                }),
                _ => None,
            };
            if inner.is_some() {
                return inner;
            }
        }
        None
    }
    let document = DeTable::parse(text).ok()?;
    let range = find(document.get_ref(), span.start)?;
    // A key in a header (`[steps.extra]`): its table's body would fall to the table before.
    let line_start = text[..range.start].rfind('\n').map_or(0, |n| n + 1);
    if text[line_start..range.start].trim_start().starts_with('[') || range.end <= range.start {
        return None;
    }
    // In an inline table the key's comma goes with it (the one after it, else the one before):
    // `{ a = 1, bogus = 2 }` must not become `{ a = 1,           }`.
    let mut range = range;
    let after = text[range.end..].trim_start_matches([' ', '\t']);
    let before = text[..range.start].trim_end_matches([' ', '\t']);
    if after.starts_with(',') {
        range.end = text.len() - after.len() + 1;
    } else if before.ends_with(',') {
        range.start = before.len() - 1;
    }
    let blanked: String = text[range.clone()]
        .chars()
        .map(|c| if c == '\n' { '\n' } else { ' ' })
        .collect();
    Some(format!(
        "{}{blanked}{}",
        &text[..range.start],
        &text[range.end..]
    ))
}

/// Words of a key that would say where approvals are asked or with which key: the person
/// running StepProof says that (their environment or profile), never the runbook, which may
/// come with a checkout.
const APPROVAL_CHANNEL_WORDS: &[&str] = &["webhook", "hmac", "callback"];
/// Keys that do the same inside an `approval` table.
const APPROVAL_CHANNEL_KEYS: &[&str] = &["url", "key", "secret", "endpoint", "token"];

/// A key anywhere in the runbook that names an approval channel, refused with the reason
/// (before `deny_unknown_fields` would call it merely unknown).
fn approval_channel_named(text: &str) -> Option<Problem> {
    use toml::de::{DeTable, DeValue};
    fn walk(table: &DeTable<'_>, in_approval: bool) -> Option<(usize, String)> {
        for (key, value) in table.iter() {
            let name = key.get_ref().as_ref();
            let lower = name.to_ascii_lowercase();
            if APPROVAL_CHANNEL_WORDS.iter().any(|w| lower.contains(w))
                || (in_approval && APPROVAL_CHANNEL_KEYS.contains(&lower.as_str()))
            {
                return Some((key.span().start, name.to_string()));
            }
            let found = match value.get_ref() {
                DeValue::Table(t) => walk(t, lower == "approval"),
                DeValue::Array(items) => items.iter().find_map(|item| match item.get_ref() {
                    DeValue::Table(t) => walk(t, false),
                    _ => None,
                }),
                _ => None,
            };
            if found.is_some() {
                return found;
            }
        }
        None
    }
    let document = DeTable::parse(text).ok()?;
    let (at, key) = walk(document.get_ref(), false)?;
    let (line, column) = line_column(text, at);
    Some(Problem {
        severity: Severity::Error,
        line,
        column,
        message: format!(
            "`{key}`: a runbook never names where approvals are asked or with which key (it may come with a checkout); the person running it sets the webhook outside the workspace: STEPPROOF_APPROVAL_WEBHOOK and STEPPROOF_APPROVAL_HMAC_KEY (or _FILE) in stepproof-run's environment, or [approvals] in their own profile"
        ),
    })
}

/// 1-based line and column (in characters) of a byte offset.
pub(crate) fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// One step of a path into the TOML document: a key or an array index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seg<'a> {
    Key(&'a str),
    Index(usize),
}

/// Where `path` is written in `text` (a byte offset: the key for a key, the item for an array
/// item); the deepest part of the path that is written when not all of it is (a default).
pub(crate) fn locate(text: &str, path: &[Seg<'_>]) -> usize {
    use toml::de::{DeTable, DeValue};
    let Ok(document) = DeTable::parse(text) else {
        return 0;
    };
    let mut at = 0;
    let mut table = Some(document.get_ref());
    let mut array = None;
    for seg in path {
        let found = match seg {
            Seg::Key(name) => table.and_then(|t: &DeTable<'_>| {
                t.iter()
                    .find(|(k, _)| k.get_ref().as_ref() == *name)
                    .map(|(k, v)| (k.span().start, v))
            }),
            Seg::Index(i) => array
                .and_then(|a: &toml::de::DeArray<'_>| a.get(*i))
                .map(|v| (v.span().start, v)),
        };
        let Some((offset, value)) = found else { break };
        at = offset;
        (table, array) = match value.get_ref() {
            DeValue::Table(t) => (Some(t), None),
            DeValue::Array(a) => (None, Some(a)),
            _ => (None, None),
        };
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runbook_naming_an_approval_channel_is_refused() {
        let base = "id = \"r\"\ntitle = \"t\"\nowner = \"o\"\n[[steps]]\nid = \"s\"\ntitle = \"t\"\ninstructions = \"i\"\n";
        for (extra, line) in [
            (
                "[[steps.evidence]]\napproval = { approvers = \"a\", deadline = \"1h\", webhook = \"https://x\" }\n",
                9,
            ),
            (
                "[[steps.evidence]]\n[steps.evidence.approval]\napprovers = \"a\"\ndeadline = \"1h\"\nurl = \"https://x\"\n",
                12,
            ),
            (
                "[[steps.evidence]]\napproval = { approvers = \"a\", deadline = \"1h\", key = \"k\" }\n",
                9,
            ),
            (
                "[[steps.evidence]]\napproval = { approvers = \"a\", deadline = \"1h\", hmac_key = \"k\" }\n",
                9,
            ),
        ] {
            let text = format!("approval_webhook = \"https://x\"\n{base}{extra}");
            let p = parse(&text).unwrap_err();
            assert_eq!(p.line, 1, "{p:?}");
            assert!(
                p.message.contains("never names where approvals are asked"),
                "{p:?}"
            );
            let text = format!("{base}{extra}");
            let p = parse(&text).unwrap_err();
            assert_eq!(p.line, line, "{text}\n{p:?}");
            assert!(p.message.contains("STEPPROOF_APPROVAL_WEBHOOK"), "{p:?}");
        }
        assert!(
            parse(&format!(
                "{base}[[steps.evidence]]\napproval = {{ approvers = \"a\", deadline = \"1h\" }}\n"
            ))
            .is_ok()
        );
    }

    #[test]
    fn durations() {
        assert_eq!(Duration::parse("90s").unwrap().seconds, 90);
        assert_eq!(Duration::parse("10m").unwrap().render(), "10m");
        assert_eq!(Duration::parse("60m").unwrap().render(), "1h");
        assert_eq!(Duration::parse("2d").unwrap().seconds, 172_800);
        for bad in [
            "",
            "10",
            "m",
            "1.5h",
            "-1m",
            "0s",
            "10 m",
            "10M",
            "99999999999999999999d",
        ] {
            assert!(Duration::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn ids() {
        for good in ["fix-bug", "a", "v1.2_x", &"x".repeat(64)] {
            assert!(Id::parse(good).is_ok(), "{good}");
        }
        for bad in ["", "-a", ".a", "a b", "a/b", "é", &"x".repeat(65)] {
            assert!(Id::parse(bad).is_err(), "{bad}");
        }
    }

    /// The step rule shapes are the profile's, field for field, less `decision`: every rule of
    /// the built-in profiles, its decision taken out, reads as a step rule and converts back to
    /// itself.
    #[test]
    fn step_rules_are_the_profiles_rule_shapes() {
        let mut seen = 0;
        for (name, _) in crate::profile::BUILTIN {
            let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join(format!("profiles/{name}.toml"));
            let hook = crate::profile::Profile::load(Some(&file))
                .unwrap()
                .hook
                .unwrap();
            let table = serde_json::to_value(&hook).unwrap();
            for kind in ["bash", "files", "web", "tools", "agents"] {
                for rule in table
                    .get(kind)
                    .and_then(|r| r.as_array())
                    .into_iter()
                    .flatten()
                {
                    let decision: stepproof_hook::Decision =
                        serde_json::from_value(rule["decision"].clone()).unwrap();
                    // The marks a built-in rule carries for the hook (`changes_nothing`,
                    // `except_disposable`) are the profile's, not a step's.
                    let mut rule = rule.clone();
                    for mark in ["changes_nothing", "except_disposable"] {
                        rule.as_object_mut().unwrap().remove(mark);
                    }
                    let rule = &rule;
                    let mut bare = rule.clone();
                    bare.as_object_mut().unwrap().remove("decision");
                    let rules: StepRules =
                        serde_json::from_value(serde_json::json!({ kind: [bare] })).unwrap();
                    let back = serde_json::to_value(rules.to_hook(decision)).unwrap();
                    assert_eq!(back[kind][0], *rule, "{name}: {kind}");
                    seen += 1;
                }
            }
        }
        assert!(seen > 20, "{seen}");
        // `decision` is the side's, never the rule's.
        let with_decision =
            serde_json::json!({"id": "x", "reason": "r", "decision": "allow", "commands": ["a"]});
        assert!(serde_json::from_value::<BashRule>(with_decision).is_err());
    }

    #[test]
    fn locate_finds_keys_and_array_items() {
        let text = "id = \"a\"\n[[steps]]\nid = \"s\"\ndepends_on = [\"x\", \"y\"]\n[[steps]]\nid = \"t\"\n";
        let at = |path: &[Seg]| line_column(text, locate(text, path));
        assert_eq!(at(&[Seg::Key("id")]), (1, 1));
        assert_eq!(
            at(&[
                Seg::Key("steps"),
                Seg::Index(0),
                Seg::Key("depends_on"),
                Seg::Index(1)
            ]),
            (4, 20)
        );
        assert_eq!(
            at(&[Seg::Key("steps"), Seg::Index(1), Seg::Key("id")]),
            (6, 1)
        );
        // A default: the deepest part that is written.
        assert_eq!(
            at(&[Seg::Key("steps"), Seg::Index(1), Seg::Key("on_fail")]).0,
            5
        );
    }
}
