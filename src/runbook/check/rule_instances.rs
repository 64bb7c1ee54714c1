//! A step's rules one at a time ([`RuleRef`]), and the concrete instances of a pattern a rule
//! is judged by: its narrowest, and one with a word, letter or component in each wildcard.

use super::JUDGED_BY_INPUT;

use crate::runbook::StepRules;
use serde_json::{Value, json};
use stepproof_hook::Decision;
use stepproof_hook::config::{Access, HookConfig};

/// One rule of a step, whatever its kind.
pub(super) struct RuleRef<'a> {
    pub(super) kind: &'static str,
    /// Its position in its kind's list.
    pub(super) index: usize,
    pub(super) id: &'a str,
    /// Its pattern lists by key (`commands` and `env` for bash, `paths`, `domains`, …).
    pub(super) fields: Vec<(&'static str, Vec<&'a str>)>,
    pub(super) access: Option<Access>,
    pub(super) source: &'a StepRules,
}

impl RuleRef<'_> {
    /// This rule alone, as a profile's `[hook]` with the side's decision.
    pub(super) fn alone(&self, side: &str) -> HookConfig {
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

pub(super) fn rule_list(rules: &StepRules) -> Vec<RuleRef<'_>> {
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
pub(super) fn instances(
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
