//! The `[hook]` section of a profile, as people write and review it.
//!
//! Rules are arrays of tables, one kind per array, each rule with an `id`, a `reason`, what it
//! matches and its `decision`. Rule order never matters: all matching rules are combined and
//! the most restrictive wins, so a profile reads as a set and `extends` is a plain append.
//!
//! ```toml
//! [hook]
//! default = "ask"            # a call no rule matches
//! unknown = "deny"           # a command that cannot be known statically or does not parse
//! unknown_tool = "deny"      # a tool this policy has never heard of
//!
//! [[hook.bash]]
//! id = "git-inspect"
//! reason = "reading the repository's history changes nothing"
//! decision = "allow"
//! commands = ["git status *", "git diff *", "git log *"]
//!
//! [[hook.files]]
//! id = "write-workspace"
//! reason = "the workspace is where the agent works"
//! decision = "allow"
//! access = "write"
//! paths = ["**"]             # relative = inside the workspace; "~/..." = home; "/..." = absolute
//! ```

use serde::{Deserialize, Serialize};

use crate::decision::Decision;

/// The `[hook]` section. Every field is optional so that a profile extending another one can
/// say only what it changes; `HookConfig::merge` combines the two.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookConfig {
    /// Decision for a call that no rule matches (unset: deny).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<Decision>,
    /// Decision for a shell command whose name is computed at run time (`$x`, `$(…)`), a
    /// script the hook cannot see (`sh x.sh`, `curl … | sh`) and a command that does not parse
    /// (unset: deny).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unknown: Option<Decision>,
    /// Decision for a tool the policy has never heard of and no `tools` rule names (unset: deny).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unknown_tool: Option<Decision>,
    /// One sentence on what the profile is for, shown to the model at session start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// Denials under one rule in one session after which a denial restates what the profile
    /// (or the open runbook step) allows and how to go on; under `--ci` twice as many end the
    /// run (exit 121). Unset: [`DEFAULT_DENIAL_LOOP_AFTER`]; 0 switches both off. Counted by
    /// the supervisor from the hook's records (see `stepproof::audit::denial_loops`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub denial_loop_after: Option<u32>,
    /// Ids of rules inherited through `extends` that this profile drops. Listed in the file so
    /// that a reviewer sees every loosening; an id that matches no rule is an error.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disable: Vec<String>,
    /// Rules over shell commands (the Bash tool, and every command inside it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bash: Vec<BashRule>,
    /// Rules over file paths (Read, Write, Edit, NotebookEdit, Glob, Grep, and shell
    /// redirections).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<FileRule>,
    /// Rules over web domains (WebFetch's URL host, WebSearch's domains).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub web: Vec<WebRule>,
    /// Rules over tool names (MCP tools `mcp__server__tool`, TodoWrite, …); they apply to
    /// every tool, so a `deny` here also blocks a tool with its own rule kind.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolRule>,
    /// Rules over the agent types the Agent (Task) tool may start.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agents: Vec<AgentRule>,
}

/// A rule over shell commands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BashRule {
    /// Stable identifier, quoted in the message to the model and in the audit log.
    pub id: String,
    /// Why the rule exists, in words the model can act on.
    pub reason: String,
    /// What a match means.
    pub decision: Decision,
    /// Argument patterns, e.g. `"git diff *"`. Words are separated by spaces; the first word is
    /// the command name (after `/usr/bin/rm`, `\rm`, `"rm"` become `rm`); a word that is just
    /// `*` stands for any number of arguments (also none); other words match one argument, `*`
    /// and `?` inside them being wildcards.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub commands: Vec<String>,
    /// Environment variable names (`*` wildcard) whose assignment the rule matches, as a
    /// prefix (`X=1 cmd`), through `env X=1 cmd` or with `export X=1`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// The rule vouches only for commands that change nothing: a command the shell analysis
    /// knows writes, removes or moves files, or changes the repository (`find -delete`,
    /// `find -fprint F`, `git branch -d`), is not matched by it, whatever its patterns say; the
    /// rules about writing judge it. For rules whose reason says "reading".
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub changes_nothing: bool,
    /// The rule does not match a command whose every written or removed path is disposable:
    /// under the sandbox's private `/tmp` (not the workspace), or inside build output the
    /// repository ignores (`dist`, `target`, `node_modules`, …; see `disposable`). For the
    /// question before removing a tree.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub except_disposable: bool,
}

/// Which kind of file access a file rule covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    /// Read, Glob, Grep and `< path`.
    Read,
    /// Write, Edit, NotebookEdit and `> path`, `>> path`.
    Write,
}

/// A rule over file paths.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileRule {
    /// Stable identifier.
    pub id: String,
    /// Why the rule exists.
    pub reason: String,
    /// What a match means.
    pub decision: Decision,
    /// The access the rule covers.
    pub access: Access,
    /// Path globs: `*` within one path component, `**` any number of components, `?` one
    /// character. `/…` is absolute, `~/…` is under the home directory, anything else is
    /// relative to the workspace. `dir/**` also matches `dir` itself. `@env-files` is every
    /// project `.env` file (`.env`, `.env.local`, …; not templates such as `.env.example`),
    /// wherever it is.
    pub paths: Vec<String>,
}

/// A rule over web domains.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebRule {
    /// Stable identifier.
    pub id: String,
    /// Why the rule exists.
    pub reason: String,
    /// What a match means.
    pub decision: Decision,
    /// `example.com` (that host only), `*.example.com` (its subdomains and itself), `*` (any,
    /// including a WebSearch without a domain list).
    pub domains: Vec<String>,
}

/// A rule over tool names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolRule {
    /// Stable identifier.
    pub id: String,
    /// Why the rule exists.
    pub reason: String,
    /// What a match means.
    pub decision: Decision,
    /// Tool name globs, e.g. `"TodoWrite"`, `"mcp__github__get_*"`.
    pub names: Vec<String>,
}

/// A rule over the agent types the Agent tool may start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentRule {
    /// Stable identifier.
    pub id: String,
    /// Why the rule exists.
    pub reason: String,
    /// What a match means.
    pub decision: Decision,
    /// Agent type globs (`subagent_type`), e.g. `"Explore"`, `"general-purpose"`.
    pub types: Vec<String>,
}

/// `denial_loop_after` when a profile leaves it unset: the call, a retry, and a second retry
/// in another spelling is a loop, not bad luck.
pub const DEFAULT_DENIAL_LOOP_AFTER: u32 = 3;

/// The largest `denial_loop_after` a profile may set.
pub const MAX_DENIAL_LOOP_AFTER: u32 = 1000;

impl HookConfig {
    /// The effective `denial_loop_after` (0: off).
    pub fn denial_loop_after(&self) -> u32 {
        self.denial_loop_after.unwrap_or(DEFAULT_DENIAL_LOOP_AFTER)
    }

    /// Combines a profile with the one it extends: the child's rules come after the base's,
    /// the child's scalars replace the base's where the child sets them, `disable` lists add up.
    pub fn merge(base: HookConfig, child: HookConfig) -> HookConfig {
        fn append<T>(mut base: Vec<T>, child: Vec<T>) -> Vec<T> {
            base.extend(child);
            base
        }
        HookConfig {
            default: child.default.or(base.default),
            unknown: child.unknown.or(base.unknown),
            unknown_tool: child.unknown_tool.or(base.unknown_tool),
            summary: child.summary.or(base.summary),
            denial_loop_after: child.denial_loop_after.or(base.denial_loop_after),
            disable: append(base.disable, child.disable),
            bash: append(base.bash, child.bash),
            files: append(base.files, child.files),
            web: append(base.web, child.web),
            tools: append(base.tools, child.tools),
            agents: append(base.agents, child.agents),
        }
    }
}

/// In a `[[hook.files]]` rule's paths: the profile's persistence names
/// (`filesystem.protected`), each as `**/<name>/**`.
pub const PROTECTED_TOKEN: &str = "@protected";

/// The hook patterns `@protected` stands for (`dir/**` also matches `dir` itself).
pub fn protected_patterns(protected: &[String]) -> Vec<String> {
    protected
        .iter()
        .map(|name| format!("**/{}/**", name.trim_matches('/')))
        .collect()
}

impl HookConfig {
    /// This configuration with `@protected` replaced by the profile's persistence names.
    pub fn with_protected(&self, protected: &[String]) -> HookConfig {
        let mut config = self.clone();
        for rule in &mut config.files {
            if rule.paths.iter().any(|p| p == PROTECTED_TOKEN) {
                let mut paths = Vec::with_capacity(rule.paths.len() + protected.len());
                for path in std::mem::take(&mut rule.paths) {
                    if path == PROTECTED_TOKEN {
                        paths.extend(protected_patterns(protected));
                    } else {
                        paths.push(path);
                    }
                }
                rule.paths = paths;
            }
        }
        config
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool_rule(id: &str) -> ToolRule {
        ToolRule {
            id: id.into(),
            reason: "r".into(),
            decision: Decision::Allow,
            names: vec!["X".into()],
        }
    }

    #[test]
    fn merge_appends_rules_and_child_scalars_win() {
        let base = HookConfig {
            default: Some(Decision::Ask),
            unknown: Some(Decision::Deny),
            tools: vec![tool_rule("a")],
            ..HookConfig::default()
        };
        let child = HookConfig {
            default: Some(Decision::Deny),
            tools: vec![tool_rule("b")],
            disable: vec!["a".into()],
            ..HookConfig::default()
        };
        let merged = HookConfig::merge(base, child);
        assert_eq!(merged.default, Some(Decision::Deny));
        assert_eq!(merged.unknown, Some(Decision::Deny));
        assert_eq!(merged.tools, vec![tool_rule("a"), tool_rule("b")]);
        assert_eq!(merged.disable, vec!["a".to_string()]);
    }
}
