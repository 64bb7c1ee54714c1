//! Compiling a `[hook]` section into the policy the hook binary loads, and judging tool calls
//! with it.
//!
//! Compilation resolves every symbolic path against the run's workspace and home, validates
//! ids, and indexes command patterns by command name, so that the hook's work per call is
//! reading the few parts of the policy file the call can reach (`load`) plus a few lookups. Evaluation combines every matching rule and
//! keeps the most restrictive decision (`Deny > Ask > Allow`); on a tie the first finding
//! stays, so a message names the first command that decided.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use thiserror::Error;

use crate::config::{Access, HookConfig};
use crate::decision::{Decision, Verdict};
use crate::pattern::{self, CommandPattern, PathGlob, normalize};
use crate::shell::{self, Effect, Invocation};

/// Rule id of the decision for calls no rule matches.
pub const RULE_DEFAULT: &str = "default";
/// Rule id of the decision for commands that cannot be known statically.
pub const RULE_UNKNOWN: &str = "unknown";
/// Rule id of the decision for tools the policy has never heard of.
pub const RULE_UNKNOWN_TOOL: &str = "unknown-tool";
pub use crate::decision::RULE_FAIL_CLOSED;
/// Rule id of a command line that runs nothing (only comments or assignments).
pub const RULE_NOTHING_RUNS: &str = "nothing-runs";

/// How many allowed commands messages list.
const ALLOWED_SHOWN: usize = 16;

/// Version of the compiled policy's file format (`load`); the hook refuses a policy of
/// another version. 1 was JSON.
pub const FORMAT_VERSION: u32 = 3;

/// Facts about the run that symbolic rules are resolved against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Context {
    /// The workspace, absolute: relative file rules are under it.
    pub workspace: PathBuf,
    /// The home directory, absolute: `~/` in file rules and `~` in commands.
    pub home: PathBuf,
    /// The profile's name, told to the model.
    pub profile_name: String,
}

/// Why a `[hook]` section does not compile. Each names the rule so a reviewer finds it.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum PolicyError {
    /// Two rules share an id, so messages and audit records would be ambiguous.
    #[error("rule id `{id}` is used twice: every rule needs its own id")]
    DuplicateId { id: String },
    /// A rule without an id or reason.
    #[error("a {kind} rule has an empty `{field}`: every rule needs an id and a reason")]
    MissingText {
        kind: &'static str,
        field: &'static str,
    },
    /// A rule that matches nothing.
    #[error("rule `{id}` matches nothing: give it at least one {what}")]
    EmptyRule { id: String, what: &'static str },
    /// A pattern that cannot be compiled.
    #[error("rule `{id}`: pattern `{pattern}` {why}")]
    BadPattern {
        id: String,
        pattern: String,
        why: &'static str,
    },
    /// `disable` names a rule that does not exist (a typo would silently keep it).
    #[error("`disable` names rule `{id}`, which no profile defines")]
    UnknownDisabled { id: String },
    /// The workspace or home is not an absolute path.
    #[error("the {what} `{path}` must be an absolute path")]
    RelativeContext { what: &'static str, path: String },
    /// `denial_loop_after` past its bound.
    #[error(
        "`denial_loop_after` is {value}: at most {max} (0 switches the restatement and the --ci stop off)"
    )]
    DenialLoopAfter { value: u32, max: u32 },
}

/// A rule's identity as the compiled policy keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "RuleRepr", into = "RuleRepr")]
pub struct RuleInfo {
    /// The rule id.
    pub id: String,
    /// The rule's reason.
    pub reason: String,
    /// What a match means.
    pub decision: Decision,
    /// `changes_nothing` (a bash rule; see `config::BashRule`).
    pub changes_nothing: bool,
    /// `except_disposable` (a bash rule; see `config::BashRule`).
    pub except_disposable: bool,
}

/// A rule in `stepproof policy`'s listing: `[id, reason, decision]`, with its marks as a fourth
/// element when it has any (`["inspect", "…", "allow", ["changes_nothing"]]`).
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum RuleRepr {
    Plain(String, String, Decision),
    Marked(String, String, Decision, Vec<String>),
}

const MARK_CHANGES_NOTHING: &str = "changes_nothing";
const MARK_EXCEPT_DISPOSABLE: &str = "except_disposable";

/// A name glob (environment variable, domain, tool, agent type) with its rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "(u32, String)", into = "(u32, String)")]
pub struct NameGlob {
    /// Index into `CompiledPolicy::rules`.
    pub rule: u32,
    /// The glob.
    pub glob: String,
}

// Rules and matchers are JSON arrays (`[id, reason, decision]`, `[rule, glob]`) rather than
// objects in `stepproof policy`'s listing: compact, one line a rule. (The hook reads its own
// binary format, `load`.)
impl From<RuleRepr> for RuleInfo {
    fn from(repr: RuleRepr) -> Self {
        let (id, reason, decision, marks) = match repr {
            RuleRepr::Plain(id, reason, decision) => (id, reason, decision, Vec::new()),
            RuleRepr::Marked(id, reason, decision, marks) => (id, reason, decision, marks),
        };
        RuleInfo {
            id,
            reason,
            decision,
            changes_nothing: marks.iter().any(|m| m == MARK_CHANGES_NOTHING),
            except_disposable: marks.iter().any(|m| m == MARK_EXCEPT_DISPOSABLE),
        }
    }
}

impl From<RuleInfo> for RuleRepr {
    fn from(r: RuleInfo) -> Self {
        let marks: Vec<String> = [
            (r.changes_nothing, MARK_CHANGES_NOTHING),
            (r.except_disposable, MARK_EXCEPT_DISPOSABLE),
        ]
        .into_iter()
        .filter(|(set, _)| *set)
        .map(|(_, mark)| mark.to_string())
        .collect();
        if marks.is_empty() {
            RuleRepr::Plain(r.id, r.reason, r.decision)
        } else {
            RuleRepr::Marked(r.id, r.reason, r.decision, marks)
        }
    }
}

impl From<(u32, String)> for NameGlob {
    fn from((rule, glob): (u32, String)) -> Self {
        NameGlob { rule, glob }
    }
}

impl From<NameGlob> for (u32, String) {
    fn from(g: NameGlob) -> Self {
        (g.rule, g.glob)
    }
}

/// A command pattern whose command name itself is a glob (`python3*`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GlobCommand {
    /// The command name glob.
    pub name: String,
    /// The argument pattern.
    pub pattern: CommandPattern,
}

/// The policy as the hook loads it (`/run/stepproof/policy`, written by `load::encode`):
/// every path absolute, every pattern split, commands indexed by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompiledPolicy {
    /// `FORMAT_VERSION` of the compiler that wrote it.
    pub format: u32,
    /// The profile's name.
    pub profile: String,
    /// The workspace, absolute.
    pub workspace: String,
    /// The home directory, absolute.
    pub home: String,
    /// Decision for unmatched calls.
    pub default: Decision,
    /// Decision for statically unknowable commands.
    pub unknown: Decision,
    /// Decision for unheard-of tools.
    pub unknown_tool: Decision,
    /// What the profile is for.
    pub summary: String,
    /// Short list of allowed commands, quoted in deny messages ("Allowed here: …").
    pub allowed_commands: Vec<String>,
    /// Command patterns by exact command name.
    pub commands: BTreeMap<String, Vec<CommandPattern>>,
    /// Command patterns whose name is a glob.
    pub command_globs: Vec<GlobCommand>,
    /// Environment variable assignments.
    pub env: Vec<NameGlob>,
    /// Read access.
    pub read: Vec<PathGlob>,
    /// Write access.
    pub write: Vec<PathGlob>,
    /// Web domains.
    pub web: Vec<NameGlob>,
    /// Tool names.
    pub tools: Vec<NameGlob>,
    /// Agent types.
    pub agents: Vec<NameGlob>,
    /// Every rule, referenced by index from the matchers above. The hook's loader (`load`)
    /// reads the text of only the rules the call can reach.
    pub rules: Vec<RuleInfo>,
}

/// Compiles a `[hook]` section for one run.
pub fn compile(config: &HookConfig, context: &Context) -> Result<CompiledPolicy, PolicyError> {
    if let Some(value) = config.denial_loop_after
        && value > crate::config::MAX_DENIAL_LOOP_AFTER
    {
        return Err(PolicyError::DenialLoopAfter {
            value,
            max: crate::config::MAX_DENIAL_LOOP_AFTER,
        });
    }
    let workspace = absolute_string(&context.workspace, "workspace")?;
    let home = absolute_string(&context.home, "home directory")?;
    let disabled: BTreeSet<&str> = config.disable.iter().map(String::as_str).collect();
    let mut compiler = Compiler {
        seen: BTreeSet::new(),
        disabled_found: BTreeSet::new(),
        disabled: &disabled,
        policy: CompiledPolicy {
            format: FORMAT_VERSION,
            profile: context.profile_name.clone(),
            workspace: workspace.clone(),
            home: home.clone(),
            default: config.default.unwrap_or(Decision::Deny),
            unknown: config.unknown.unwrap_or(Decision::Deny),
            unknown_tool: config.unknown_tool.unwrap_or(Decision::Deny),
            summary: config.summary.clone().unwrap_or_default(),
            allowed_commands: Vec::new(),
            rules: Vec::new(),
            commands: BTreeMap::new(),
            command_globs: Vec::new(),
            env: Vec::new(),
            read: Vec::new(),
            write: Vec::new(),
            web: Vec::new(),
            tools: Vec::new(),
            agents: Vec::new(),
        },
    };
    // Allowed command names per rule, interleaved below so that the short list in messages
    // shows every kind of work (inspection, git, build) rather than the first rule only.
    let mut allowed_by_rule: Vec<Vec<String>> = Vec::new();
    for rule in &config.bash {
        let Some(index) = compiler.rule("bash", &rule.id, &rule.reason, rule.decision)? else {
            continue;
        };
        if let Some(info) = compiler.policy.rules.last_mut() {
            info.changes_nothing = rule.changes_nothing;
            info.except_disposable = rule.except_disposable;
        }
        if rule.commands.is_empty() && rule.env.is_empty() {
            return Err(empty(&rule.id, "command pattern or env name"));
        }
        for command in &rule.commands {
            let words: Vec<&str> = command.split_whitespace().collect();
            let Some((name, args)) = words.split_first() else {
                return Err(bad(&rule.id, command, "is empty"));
            };
            let name = shell::basename(name);
            if name == "*" {
                return Err(bad(&rule.id, command, "must start with a command name"));
            }
            let compiled = CommandPattern::new(index, args);
            if pattern::has_wildcard(name) {
                compiler.policy.command_globs.push(GlobCommand {
                    name: name.to_string(),
                    pattern: compiled,
                });
            } else {
                compiler
                    .policy
                    .commands
                    .entry(name.to_string())
                    .or_default()
                    .push(compiled);
            }
            if rule.decision == Decision::Allow
                && !allowed_by_rule.iter().flatten().any(|n| n == name)
            {
                if allowed_by_rule.len() <= index as usize {
                    allowed_by_rule.resize(index as usize + 1, Vec::new());
                }
                allowed_by_rule[index as usize].push(name.to_string());
            }
        }
        for name in &rule.env {
            compiler.policy.env.push(NameGlob {
                rule: index,
                glob: name.clone(),
            });
        }
    }
    // Only the first few are ever shown (one more marks that there are others), and the
    // hook parses this list at every call.
    const ALLOWED_KEPT: usize = ALLOWED_SHOWN + 1;
    let longest = allowed_by_rule.iter().map(Vec::len).max().unwrap_or(0);
    for position in 0..longest {
        for names in &allowed_by_rule {
            if let Some(name) = names.get(position)
                && compiler.policy.allowed_commands.len() < ALLOWED_KEPT
            {
                compiler.policy.allowed_commands.push(name.clone());
            }
        }
    }
    for rule in &config.files {
        let Some(index) = compiler.rule("files", &rule.id, &rule.reason, rule.decision)? else {
            continue;
        };
        if rule.paths.is_empty() {
            return Err(empty(&rule.id, "path"));
        }
        for path in &rule.paths {
            let resolved = if path == pattern::ENV_FILES {
                path.clone()
            } else {
                resolve_glob(path, &workspace, &home)
                    .ok_or_else(|| bad(&rule.id, path, "may not contain `..` or `.` components"))?
            };
            let glob = PathGlob::new(index, &resolved);
            match rule.access {
                Access::Read => compiler.policy.read.push(glob),
                Access::Write => compiler.policy.write.push(glob),
            }
        }
    }
    for (kind, what, rules) in [
        (
            "web",
            "domain",
            &compiler_rules(&config.web, |r| (&r.id, &r.reason, r.decision, &r.domains)),
        ),
        (
            "tools",
            "tool name",
            &compiler_rules(&config.tools, |r| (&r.id, &r.reason, r.decision, &r.names)),
        ),
        (
            "agents",
            "agent type",
            &compiler_rules(&config.agents, |r| (&r.id, &r.reason, r.decision, &r.types)),
        ),
    ] {
        for (id, reason, decision, globs) in rules.iter() {
            let Some(index) = compiler.rule(kind, id, reason, *decision)? else {
                continue;
            };
            if globs.is_empty() {
                return Err(empty(id, what));
            }
            let target = match kind {
                "web" => &mut compiler.policy.web,
                "tools" => &mut compiler.policy.tools,
                _ => &mut compiler.policy.agents,
            };
            target.extend(globs.iter().map(|g| NameGlob {
                rule: index,
                glob: g.to_string(),
            }));
        }
    }
    if let Some(missing) = disabled
        .iter()
        .find(|id| !compiler.disabled_found.contains(**id))
    {
        return Err(PolicyError::UnknownDisabled {
            id: (*missing).to_string(),
        });
    }
    Ok(compiler.policy)
}

type RuleParts<'a> = (&'a String, &'a String, Decision, &'a Vec<String>);

fn compiler_rules<'a, T>(
    rules: &'a [T],
    parts: impl Fn(&'a T) -> RuleParts<'a>,
) -> Vec<RuleParts<'a>> {
    rules.iter().map(parts).collect()
}

struct Compiler<'a> {
    seen: BTreeSet<String>,
    disabled: &'a BTreeSet<&'a str>,
    disabled_found: BTreeSet<String>,
    policy: CompiledPolicy,
}

impl Compiler<'_> {
    /// Registers a rule; `None` when `disable` drops it.
    fn rule(
        &mut self,
        kind: &'static str,
        id: &str,
        reason: &str,
        decision: Decision,
    ) -> Result<Option<u32>, PolicyError> {
        if id.trim().is_empty() {
            return Err(PolicyError::MissingText { kind, field: "id" });
        }
        if reason.trim().is_empty() {
            return Err(PolicyError::MissingText {
                kind,
                field: "reason",
            });
        }
        if !self.seen.insert(id.to_string()) {
            return Err(PolicyError::DuplicateId { id: id.to_string() });
        }
        if self.disabled.contains(id) {
            self.disabled_found.insert(id.to_string());
            return Ok(None);
        }
        let index = u32::try_from(self.policy.rules.len()).unwrap_or(u32::MAX);
        self.policy.rules.push(RuleInfo {
            id: id.to_string(),
            reason: reason.to_string(),
            decision,
            changes_nothing: false,
            except_disposable: false,
        });
        Ok(Some(index))
    }
}

fn empty(id: &str, what: &'static str) -> PolicyError {
    PolicyError::EmptyRule {
        id: id.to_string(),
        what,
    }
}

fn bad(id: &str, pattern: &str, why: &'static str) -> PolicyError {
    PolicyError::BadPattern {
        id: id.to_string(),
        pattern: pattern.to_string(),
        why,
    }
}

fn absolute_string(path: &Path, what: &'static str) -> Result<String, PolicyError> {
    let text = path.to_string_lossy().to_string();
    if !path.is_absolute() {
        return Err(PolicyError::RelativeContext { what, path: text });
    }
    Ok(normalize(Path::new(&text)).unwrap_or(text))
}

/// Resolves a rule's path glob: `/…` absolute, `~`/`~/…` under home, else under the workspace.
fn resolve_glob(glob: &str, workspace: &str, home: &str) -> Option<String> {
    let joined = if glob.starts_with('/') {
        glob.to_string()
    } else if glob == "~" {
        home.to_string()
    } else if let Some(rest) = glob.strip_prefix("~/") {
        format!("{home}/{rest}")
    } else {
        format!("{workspace}/{glob}")
    };
    if joined.split('/').any(|c| c == ".." || c == ".") {
        return None;
    }
    Some(joined)
}

/// A finding while judging a call: the decision and what made it.
#[derive(Debug, Clone)]
struct Finding {
    decision: Decision,
    rule: Source,
    /// What was judged, quoted in the message (`'git push --force'`, a path, a domain).
    subject: String,
    /// For unknown findings: why the hook could not tell.
    detail: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    Rule(u32),
    /// A rule marked `changes_nothing` (its reason says reading changes nothing).
    Reading(u32),
    Default,
    Unknown,
    UnknownTool,
    NothingRuns,
    FailClosed,
}

/// Keeps the most restrictive finding; on a tie, the one that says most about the line, then
/// the first.
#[derive(Default)]
struct Judgement {
    worst: Option<Finding>,
    /// The line writes or removes a file (a redirection, `rm`, `sed -i`, …): a reading rule's
    /// reason would not be true of it.
    line_changes: bool,
}

impl Judgement {
    fn add(&mut self, finding: Finding) {
        let keep = self.worst.as_ref().is_some_and(|w| {
            w.decision > finding.decision
                || (w.decision == finding.decision
                    && self.telling(w.rule) >= self.telling(finding.rule))
        });
        if !keep {
            self.worst = Some(finding);
        }
    }

    /// How much a finding says about the line, among findings of the same decision. A line
    /// that only assigns says least. A reading rule's reason ("reading … changes nothing") is
    /// true of its own command only: in `ls | tee out.txt` or `echo x > out.txt` the line
    /// writes, so the rule that allowed the writing names the call (issue 49).
    fn telling(&self, source: Source) -> u8 {
        match source {
            Source::NothingRuns => 0,
            Source::Reading(_) if self.line_changes => 1,
            _ => 2,
        }
    }
}

/// Whether an effect writes or removes a file (output to the terminal's streams or to
/// `/dev/null` is none).
fn changes_a_file(effect: &Effect) -> bool {
    match effect {
        Effect::Exec(inv) => inv.changes.is_some(),
        Effect::Write(path) => !matches!(
            path.as_str(),
            "/dev/null" | "/dev/stdout" | "/dev/stderr" | "/dev/tty"
        ),
        Effect::ComputedWrite(_) => true,
        Effect::Read(_) | Effect::Unknown(_) => false,
    }
}

/// What the hook knows about the call besides the tool input.
#[derive(Debug, Clone, Default)]
pub struct CallContext<'a> {
    /// The agent's working directory (relative paths are resolved against it).
    pub cwd: Option<&'a str>,
    /// `shell::analyze` of the Bash command when already done (the hook does it before
    /// loading the policy); `None` analyses it here.
    pub effects: Option<&'a [Effect]>,
}

/// The sandbox's `$TMPDIR` as `stepproof-run` sets it (src/sandbox/plan/env.rs; a run without a
/// private /tmp names another directory): what `stepproof check` assumes.
pub const SANDBOX_TMPDIR: &str = "/tmp";

/// This process's `$TMPDIR`: the hook runs in the sandbox's environment, as the Bash tool does.
pub fn environment_tmpdir() -> Option<String> {
    std::env::var("TMPDIR").ok()
}

/// What judging a tree removal needs to know besides the invocation.
struct Surroundings<'a> {
    cwd: &'a str,
    tmpdir: Option<&'a str>,
    /// The line also runs a command that can make links or replace directories (`ln`, `mv`,
    /// `tar`, …): a path checked now may lead elsewhere when the removal runs.
    links: bool,
}

/// Commands that can make a symlink or put another directory in a path's place; in the same
/// line as a tree removal, they keep it from being called disposable. A program that makes
/// links itself (a script) is not seen: the question guards against mistakes, the kernel's
/// read-only mounts against the rest.
const LINK_MAKERS: &[&str] = &[
    "ln", "cp", "mv", "tar", "unzip", "rsync", "cpio", "install", "git", "bsdtar", "7z", "link",
];

impl CompiledPolicy {
    /// Judges one tool call, with `$TMPDIR` in a command taken as computed.
    pub fn check(&self, tool: &str, input: &Value, call: &CallContext<'_>) -> Verdict {
        self.check_with_tmpdir(tool, input, call, None)
    }

    /// Judges one tool call; `tmpdir` is the sandbox's `$TMPDIR`, which `"$TMPDIR/x"` in a
    /// command stands for (the Bash tool and the hook share the sandbox's environment), and
    /// which is scratch the run can lose. `call.effects`, when given, must come from
    /// `shell::analyze_with_tmpdir` with the same `tmpdir`.
    pub fn check_with_tmpdir(
        &self,
        tool: &str,
        input: &Value,
        call: &CallContext<'_>,
        tmpdir: Option<&str>,
    ) -> Verdict {
        let cwd = call
            .cwd
            .filter(|c| c.starts_with('/'))
            .unwrap_or(&self.workspace)
            .to_string();
        let mut judgement = Judgement::default();
        let known = match tool {
            "Bash" => {
                match input.get("command").and_then(Value::as_str) {
                    Some(command) => {
                        self.judge_bash(command, call.effects, &cwd, tmpdir, &mut judgement)
                    }
                    None => judgement.add(fail("Bash call without a `command`")),
                }
                true
            }
            "Read" | "NotebookRead" | "LS" => {
                let key = if tool == "NotebookRead" {
                    "notebook_path"
                } else if tool == "LS" {
                    "path"
                } else {
                    "file_path"
                };
                match input.get(key).and_then(Value::as_str) {
                    Some(path) => self.judge_path(path, &cwd, Access::Read, &mut judgement),
                    None => judgement.add(fail(&format!("{tool} call without `{key}`"))),
                }
                true
            }
            "Write" | "Edit" | "MultiEdit" | "NotebookEdit" => {
                let path = input
                    .get("file_path")
                    .or_else(|| input.get("notebook_path"))
                    .and_then(Value::as_str);
                match path {
                    Some(path) => self.judge_path(path, &cwd, Access::Write, &mut judgement),
                    None => judgement.add(fail(&format!("{tool} call without a file path"))),
                }
                true
            }
            "Glob" | "Grep" => {
                let base = input.get("path").and_then(Value::as_str).unwrap_or(&cwd);
                let base = self.absolute(base, &cwd);
                let target = match (tool, input.get("pattern").and_then(Value::as_str)) {
                    // A Glob pattern can leave the search path: `../../etc/*`, `/etc/**`.
                    ("Glob", Some(p)) => glob_static_prefix(p, &base),
                    _ => base,
                };
                self.judge_path(&target, &cwd, Access::Read, &mut judgement);
                true
            }
            "WebFetch" => {
                match input.get("url").and_then(Value::as_str).map(url_host) {
                    Some(Some(host)) => self.judge_domain(&host, &mut judgement),
                    _ => judgement.add(fail("WebFetch call without an http(s) `url`")),
                }
                true
            }
            "WebSearch" => {
                let domains: Vec<String> = input
                    .get("allowed_domains")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|d| d.as_str().map(str::to_string))
                            .collect()
                    })
                    .filter(|d: &Vec<String>| !d.is_empty())
                    .unwrap_or_else(|| vec!["*".to_string()]);
                for d in domains {
                    self.judge_domain(&d, &mut judgement);
                }
                true
            }
            "Agent" | "Task" => {
                let kind = input
                    .get("subagent_type")
                    .and_then(Value::as_str)
                    .unwrap_or("general-purpose");
                self.judge_names(&self.agents, kind, &mut judgement, true);
                true
            }
            _ => false,
        };
        // Tool rules apply to every tool; an unmatched unknown tool gets `unknown_tool` below,
        // an unmatched known one was judged by its own kind above.
        let named = self.judge_names(&self.tools, tool, &mut judgement, false);
        if !known && !named {
            judgement.add(Finding {
                decision: self.unknown_tool,
                rule: Source::UnknownTool,
                subject: tool.to_string(),
                detail: None,
            });
        }
        self.verdict(tool, judgement)
    }

    fn absolute(&self, path: &str, cwd: &str) -> String {
        let joined = if path.starts_with('/') {
            PathBuf::from(path)
        } else if path == "~" {
            PathBuf::from(&self.home)
        } else if let Some(rest) = path.strip_prefix("~/") {
            Path::new(&self.home).join(rest)
        } else {
            Path::new(cwd).join(path)
        };
        normalize(&joined).unwrap_or_else(|| "/".to_string())
    }

    fn judge_path(&self, path: &str, cwd: &str, access: Access, judgement: &mut Judgement) {
        let path = self.absolute(path, cwd);
        let globs = match access {
            Access::Read => &self.read,
            Access::Write => &self.write,
        };
        let mut matched = false;
        for g in globs.iter().filter(|g| g.matches(&path)) {
            matched = true;
            judgement.add(self.rule_finding(g.rule, &path));
        }
        if !matched {
            judgement.add(Finding {
                decision: self.default,
                rule: Source::Default,
                subject: path,
                detail: Some(match access {
                    Access::Read => "reading".into(),
                    Access::Write => "writing".into(),
                }),
            });
        }
    }

    fn judge_domain(&self, host: &str, judgement: &mut Judgement) {
        let mut matched = false;
        for g in self
            .web
            .iter()
            .filter(|g| pattern::domain_matches(&g.glob, host))
        {
            matched = true;
            judgement.add(self.rule_finding(g.rule, host));
        }
        if !matched {
            judgement.add(self.default_finding(host));
        }
    }

    /// Name rules (tools, agents); returns whether one matched. `fallback` adds the default
    /// finding when none did.
    fn judge_names(
        &self,
        globs: &[NameGlob],
        name: &str,
        judgement: &mut Judgement,
        fallback: bool,
    ) -> bool {
        let mut matched = false;
        for g in globs.iter().filter(|g| pattern::wildcard(&g.glob, name)) {
            matched = true;
            judgement.add(self.rule_finding(g.rule, name));
        }
        if !matched && fallback {
            judgement.add(self.default_finding(name));
        }
        matched
    }

    fn judge_bash(
        &self,
        command: &str,
        analysed: Option<&[Effect]>,
        cwd: &str,
        tmpdir: Option<&str>,
        judgement: &mut Judgement,
    ) {
        let owned;
        let effects = match analysed {
            Some(effects) => effects,
            None => {
                owned = shell::analyze_with_tmpdir(command, tmpdir);
                &owned
            }
        };
        judgement.line_changes = effects.iter().any(changes_a_file);
        let surroundings = Surroundings {
            cwd,
            tmpdir,
            links: effects.iter().any(|e| match e {
                Effect::Exec(inv) => LINK_MAKERS.contains(&inv.name.as_str()),
                _ => false,
            }),
        };
        if effects.is_empty() {
            judgement.add(Finding {
                decision: Decision::Allow,
                rule: Source::NothingRuns,
                subject: command.trim().to_string(),
                detail: None,
            });
        }
        for effect in effects {
            match effect {
                Effect::Exec(inv) => self.judge_invocation(inv, &surroundings, judgement),
                Effect::Read(p) => self.judge_path(p, cwd, Access::Read, judgement),
                Effect::Write(p) => self.judge_path(p, cwd, Access::Write, judgement),
                Effect::ComputedWrite(what) => judgement.add(Finding {
                    decision: self.default,
                    rule: Source::Default,
                    subject: what.clone(),
                    detail: Some("writing to a path computed at run time in".into()),
                }),
                Effect::Unknown(why) => judgement.add(Finding {
                    decision: self.unknown,
                    rule: Source::Unknown,
                    subject: String::new(),
                    detail: Some(why.clone()),
                }),
            }
        }
    }

    fn judge_invocation(
        &self,
        inv: &Invocation,
        surroundings: &Surroundings<'_>,
        judgement: &mut Judgement,
    ) {
        let subject = render_invocation(inv);
        let mut matched = false;
        for assigned in &inv.assigns {
            for g in self
                .env
                .iter()
                .filter(|g| pattern::wildcard(&g.glob, assigned))
            {
                matched = true;
                judgement.add(self.rule_finding(g.rule, &format!("{assigned}=…")));
            }
        }
        if inv.name.is_empty() {
            if !matched {
                judgement.add(Finding {
                    decision: Decision::Allow,
                    rule: Source::NothingRuns,
                    subject,
                    detail: None,
                });
            }
            return;
        }
        let exact = self.commands.get(&inv.name).into_iter().flatten();
        let globbed = self
            .command_globs
            .iter()
            .filter(|g| pattern::wildcard(&g.name, &inv.name))
            .map(|g| &g.pattern);
        let mut disposable = None;
        for p in exact.chain(globbed) {
            let decision = self.rule_decision(p.rule);
            if decision == Decision::Allow && inv.untrusted_path {
                continue;
            }
            let Some(rule) = self.rules.get(p.rule as usize) else {
                judgement.add(fail("the policy refers to a rule it does not define"));
                continue;
            };
            // A rule for reading never vouches for a command known to change something.
            if rule.changes_nothing && inv.changes.is_some() {
                continue;
            }
            if rule.except_disposable
                && *disposable.get_or_insert_with(|| self.all_disposable(inv, surroundings))
            {
                continue;
            }
            if p.matches(&inv.args, decision != Decision::Allow) {
                matched = true;
                judgement.add(self.rule_finding(p.rule, &subject));
            }
        }
        if !matched {
            judgement.add(self.default_finding(&subject));
        }
    }

    /// Whether everything `inv` writes or removes is disposable (see `disposable`): known, and
    /// no command in the line can turn a path into a link first.
    fn all_disposable(&self, inv: &Invocation, surroundings: &Surroundings<'_>) -> bool {
        // `find -L`/`-H` follows links inside the tree it deletes from.
        let follows = inv.name == "find"
            && inv
                .args
                .iter()
                .any(|a| matches!(a.as_static(), Some("-L" | "-H" | "-follow")));
        if surroundings.links || follows || inv.writes.is_empty() {
            return false;
        }
        inv.writes.iter().all(|path| match path {
            Some(path) => {
                let absolute = if path.starts_with('/') {
                    path.clone()
                } else if path == "~" || path.starts_with("~/") {
                    return false;
                } else {
                    format!("{}/{path}", surroundings.cwd.trim_end_matches('/'))
                };
                crate::disposable::is_disposable(&absolute, &self.workspace, surroundings.tmpdir)
            }
            None => false,
        })
    }

    fn rule_decision(&self, rule: u32) -> Decision {
        self.rules
            .get(rule as usize)
            .map_or(Decision::Deny, |r| r.decision)
    }

    fn rule_finding(&self, rule: u32, subject: &str) -> Finding {
        match self.rules.get(rule as usize) {
            Some(r) => Finding {
                decision: r.decision,
                rule: if r.changes_nothing {
                    Source::Reading(rule)
                } else {
                    Source::Rule(rule)
                },
                subject: subject.to_string(),
                detail: None,
            },
            None => fail("the policy refers to a rule it does not define"),
        }
    }

    fn default_finding(&self, subject: &str) -> Finding {
        Finding {
            decision: self.default,
            rule: Source::Default,
            subject: subject.to_string(),
            detail: None,
        }
    }

    fn verdict(&self, tool: &str, judgement: Judgement) -> Verdict {
        let Some(finding) = judgement.worst else {
            return Verdict::fail_closed(format!(
                "StepProof denied {tool}: nothing decided this call (rule {RULE_FAIL_CLOSED})"
            ));
        };
        let verb = match finding.decision {
            Decision::Allow => "allowed",
            Decision::Ask => "asks about",
            Decision::Deny => "denied",
        };
        let subject = if finding.subject.is_empty() {
            String::new()
        } else {
            format!(" '{}'", finding.subject)
        };
        let (rule_id, reason) = match finding.rule {
            Source::Rule(index) | Source::Reading(index) => {
                let rule = &self.rules[index as usize];
                (
                    rule.id.clone(),
                    format!(
                        "StepProof {verb} {tool}:{subject}: {} (rule {}).",
                        rule.reason, rule.id
                    ),
                )
            }
            Source::Default => {
                let what = finding.detail.map(|d| format!(" {d}")).unwrap_or_default();
                let mut reason = format!(
                    "StepProof {verb} {tool}:{what}{subject} is not covered by profile '{}' (rule {RULE_DEFAULT}).",
                    self.profile
                );
                if tool == "Bash"
                    && finding.decision != Decision::Allow
                    && !self.allowed_commands.is_empty()
                {
                    reason.push_str(&format!(" Allowed here: {}.", self.allowed_summary()));
                }
                (RULE_DEFAULT.to_string(), reason)
            }
            Source::Unknown => (
                RULE_UNKNOWN.to_string(),
                format!(
                    "StepProof {verb} {tool}: {} (rule {RULE_UNKNOWN}). Write commands with literal names and scripts inline so they can be checked.",
                    finding.detail.unwrap_or_default()
                ),
            ),
            Source::UnknownTool => (
                RULE_UNKNOWN_TOOL.to_string(),
                format!(
                    "StepProof {verb} {tool}: profile '{}' has no rule for this tool (rule {RULE_UNKNOWN_TOOL}).",
                    self.profile
                ),
            ),
            Source::NothingRuns => (
                RULE_NOTHING_RUNS.to_string(),
                format!("StepProof {verb} {tool}: nothing runs (rule {RULE_NOTHING_RUNS})."),
            ),
            Source::FailClosed => (
                RULE_FAIL_CLOSED.to_string(),
                format!(
                    "StepProof {verb} {tool}: {} (rule {RULE_FAIL_CLOSED}).",
                    finding.detail.unwrap_or_default()
                ),
            ),
        };
        Verdict {
            decision: finding.decision,
            rule_id,
            reason,
        }
    }

    /// "git, cargo, npm run …": the first allowed commands, for messages and context.
    pub fn allowed_summary(&self) -> String {
        const SHOWN: usize = ALLOWED_SHOWN;
        let mut text = self
            .allowed_commands
            .iter()
            .take(SHOWN)
            .cloned()
            .collect::<Vec<_>>()
            .join(", ");
        if self.allowed_commands.len() > SHOWN {
            text.push_str(" …");
        }
        text
    }
}

fn fail(why: &str) -> Finding {
    Finding {
        decision: Decision::Deny,
        rule: Source::FailClosed,
        subject: String::new(),
        detail: Some(why.to_string()),
    }
}

/// `git push --force`, shortened; run-time arguments shown as `…`.
fn render_invocation(inv: &Invocation) -> String {
    crate::shell::render_words(&inv.name, &inv.args)
}

/// The directory a Glob pattern starts in: its components before the first wildcard.
fn glob_static_prefix(pattern: &str, base: &str) -> String {
    let joined = if pattern.starts_with('/') {
        pattern.to_string()
    } else {
        format!("{base}/{pattern}")
    };
    let mut prefix = Vec::new();
    for component in joined.split('/') {
        if component.contains(['*', '?', '[', '{']) {
            break;
        }
        prefix.push(component);
    }
    let text = prefix.join("/");
    normalize(Path::new(if text.is_empty() { "/" } else { &text })).unwrap_or_else(|| "/".into())
}

/// The host of an http(s) URL, without user info and port.
fn url_host(url: &str) -> Option<String> {
    let lower = url.trim();
    let rest = lower
        .strip_prefix("https://")
        .or_else(|| lower.strip_prefix("http://"))
        .or_else(|| lower.strip_prefix("HTTPS://"))
        .or_else(|| lower.strip_prefix("HTTP://"))?;
    let authority = rest.split(['/', '?', '#']).next()?;
    let host_port = authority.rsplit('@').next()?;
    let host = if let Some(v6) = host_port.strip_prefix('[') {
        v6.split(']').next()?.to_string()
    } else {
        host_port.split(':').next()?.to_string()
    };
    (!host.is_empty()).then(|| host.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_lexically() {
        assert_eq!(
            normalize(Path::new("/a/b/../c/./d")).as_deref(),
            Some("/a/c/d")
        );
        assert_eq!(normalize(Path::new("/../..")).as_deref(), Some("/"));
        assert_eq!(normalize(Path::new("a/b")), None);
    }

    #[test]
    fn url_hosts() {
        assert_eq!(
            url_host("https://user@Docs.rs:443/x?y").as_deref(),
            Some("docs.rs")
        );
        assert_eq!(url_host("http://[::1]:80/").as_deref(), Some("::1"));
        assert_eq!(url_host("file:///etc/passwd"), None);
    }

    #[test]
    fn glob_prefix() {
        assert_eq!(glob_static_prefix("../../etc/**", "/ws/a/b"), "/ws/etc");
        assert_eq!(glob_static_prefix("/etc/*.conf", "/ws"), "/etc");
        assert_eq!(glob_static_prefix("src/**/*.rs", "/ws"), "/ws/src");
    }
}
