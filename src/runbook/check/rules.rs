//! A step's hook rules against the profile: each compiles with the hook crate's own compiler,
//! none can never match, none tries to widen what the profile denies.

use super::rule_instances::{RuleRef, instances, rule_list};
use super::{CHECK_HOME, CHECK_WORKSPACE, Checker, KNOWN_TOOLS, Severity, step_path};

use crate::profile::Profile;
use crate::runbook::{Runbook, Seg, Step};
use serde_json::Value;
use std::collections::BTreeMap;
use stepproof_hook::Decision;
use stepproof_hook::config::HookConfig;
use stepproof_hook::policy::{CompiledPolicy, Context, compile};

impl Checker<'_> {
    /// The profile's compiled policy, or `None` (with an error when a step has rules the
    /// profile's hook would have to enforce).
    pub(super) fn profile_policy(
        &mut self,
        runbook: &Runbook,
        profile: &Profile,
    ) -> Option<CompiledPolicy> {
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

    pub(super) fn rules(
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
