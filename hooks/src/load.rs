//! Loading the compiled policy for one call, cheaply.
//!
//! The hook runs before every tool call and the policy is JSON, so the cost that grows with
//! the policy is parsing it. This loader parses only what the call can reach: for a Bash call
//! the command patterns of the command names in it (the command is analysed first), the file
//! rules only for tools that touch files, the web and agent rules only for their tools, and
//! the id and reason of only the rules those matchers refer to. Everything else is skipped
//! without allocating. The result is a `CompiledPolicy` whose unreached rules are blank
//! placeholders; evaluation never looks at them, and the tests compare its verdicts with the
//! fully loaded policy's.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use crate::decision::Decision;
use crate::pattern::{CommandPattern, wildcard};
use crate::policy::{CompiledPolicy, NameGlob, RuleInfo};
use crate::shell::{self, Effect};

/// Which parts of the policy a call needs.
#[derive(Debug, Clone, Default)]
pub struct Needs {
    /// Command names whose patterns are needed; `None` for all of them.
    pub commands: Option<BTreeSet<String>>,
    /// Read rules.
    pub read: bool,
    /// Write rules.
    pub write: bool,
    /// The tool whose name rules are needed; `None` for every tool rule.
    pub tool: Option<String>,
    /// Web rules.
    pub web: bool,
    /// Agent rules.
    pub agents: bool,
    /// The analysis of a Bash command, done to find its command names and reused to judge it.
    pub effects: Option<Vec<Effect>>,
}

impl Needs {
    /// Everything: what `stepproof policy` and the tests load.
    pub fn all() -> Needs {
        Needs {
            commands: None,
            read: true,
            write: true,
            tool: None,
            web: true,
            agents: true,
            effects: None,
        }
    }

    /// Only the scalars (profile, decisions, summary, allowed commands): what the observer
    /// and context events use.
    pub fn minimal() -> Needs {
        Needs {
            commands: Some(BTreeSet::new()),
            tool: Some(String::new()),
            ..Needs::default()
        }
    }

    /// What judging `tool` with `input` can reach.
    pub fn for_call(tool: &str, input: &Value) -> Needs {
        let mut needs = Needs {
            commands: Some(BTreeSet::new()),
            tool: Some(tool.to_string()),
            ..Needs::default()
        };
        match tool {
            "Bash" => {
                let command = input.get("command").and_then(Value::as_str).unwrap_or("");
                let mut names = BTreeSet::new();
                let effects = shell::analyze(command);
                for effect in &effects {
                    match effect {
                        Effect::Exec(inv) => {
                            names.insert(inv.name.clone());
                        }
                        Effect::Read(_) => needs.read = true,
                        Effect::Write(_) => needs.write = true,
                        Effect::Unknown(_) | Effect::ComputedWrite(_) => {}
                    }
                }
                needs.commands = Some(names);
                needs.effects = Some(effects);
            }
            "Read" | "NotebookRead" | "LS" | "Glob" | "Grep" => needs.read = true,
            "Write" | "Edit" | "MultiEdit" | "NotebookEdit" => needs.write = true,
            "WebFetch" | "WebSearch" => needs.web = true,
            "Agent" | "Task" => needs.agents = true,
            _ => {}
        }
        needs
    }
}

/// Parses a compiled policy, keeping only what `needs` asks for.
pub fn parse(bytes: &[u8], needs: &Needs) -> Result<CompiledPolicy, serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let policy = PolicySeed { needs }.deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(policy)
}

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum Field {
    Format,
    Profile,
    Workspace,
    Home,
    Default,
    Unknown,
    UnknownTool,
    Summary,
    AllowedCommands,
    Commands,
    CommandGlobs,
    Env,
    Read,
    Write,
    Web,
    Tools,
    Agents,
    Rules,
}

/// The sections holding matchers (commands, command globs, env, read, write, web, tools,
/// agents): all of them must precede `rules` for unreachable rules to be skipped.
const MATCHER_SECTIONS: usize = 8;

struct PolicySeed<'n> {
    needs: &'n Needs,
}

impl<'de> DeserializeSeed<'de> for PolicySeed<'_> {
    type Value = CompiledPolicy;

    fn deserialize<D: Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<CompiledPolicy, D::Error> {
        deserializer.deserialize_map(self)
    }
}

fn missing<E: serde::de::Error>(field: &'static str) -> E {
    E::missing_field(field)
}

impl<'de> Visitor<'de> for PolicySeed<'_> {
    type Value = CompiledPolicy;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a compiled StepProof policy")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<CompiledPolicy, A::Error> {
        let needs = self.needs;
        let mut format = None;
        let mut profile = None;
        let mut workspace = None;
        let mut home = None;
        let (mut default, mut unknown, mut unknown_tool) = (None, None, None);
        let mut summary = String::new();
        let mut allowed_commands = Vec::new();
        let mut commands = BTreeMap::new();
        let (mut command_globs, mut env, mut read, mut write) = (vec![], vec![], vec![], vec![]);
        let (mut web, mut tools, mut agents) = (vec![], vec![], vec![]);
        let mut rules = None;
        // Which sections came before `rules`: only when all matchers are known can the text
        // of unreachable rules be skipped.
        let mut matchers_seen = 0;
        while let Some(field) = map.next_key::<Field>()? {
            match field {
                Field::Format => format = Some(map.next_value::<u32>()?),
                Field::Profile => profile = Some(map.next_value::<String>()?),
                Field::Workspace => workspace = Some(map.next_value::<String>()?),
                Field::Home => home = Some(map.next_value::<String>()?),
                Field::Default => default = Some(map.next_value::<Decision>()?),
                Field::Unknown => unknown = Some(map.next_value::<Decision>()?),
                Field::UnknownTool => unknown_tool = Some(map.next_value::<Decision>()?),
                Field::Summary => summary = map.next_value()?,
                Field::AllowedCommands => allowed_commands = map.next_value()?,
                Field::Commands => {
                    matchers_seen += 1;
                    commands = map.next_value_seed(CommandsSeed {
                        names: needs.commands.as_ref(),
                    })?;
                }
                Field::CommandGlobs => {
                    matchers_seen += 1;
                    command_globs = map.next_value()?;
                }
                Field::Env => {
                    matchers_seen += 1;
                    env = map.next_value()?;
                }
                Field::Read if !needs.read => {
                    matchers_seen += 1;
                    map.next_value::<IgnoredAny>()?;
                }
                Field::Write if !needs.write => {
                    matchers_seen += 1;
                    map.next_value::<IgnoredAny>()?;
                }
                Field::Read => {
                    matchers_seen += 1;
                    read = map.next_value()?;
                }
                Field::Write => {
                    matchers_seen += 1;
                    write = map.next_value()?;
                }
                Field::Web if !needs.web => {
                    matchers_seen += 1;
                    map.next_value::<IgnoredAny>()?;
                }
                Field::Web => {
                    matchers_seen += 1;
                    web = map.next_value()?;
                }
                Field::Tools => {
                    matchers_seen += 1;
                    tools = map.next_value_seed(ToolsSeed {
                        tool: needs.tool.as_deref(),
                    })?;
                }
                Field::Agents if !needs.agents => {
                    matchers_seen += 1;
                    map.next_value::<IgnoredAny>()?;
                }
                Field::Agents => {
                    matchers_seen += 1;
                    agents = map.next_value()?;
                }
                Field::Rules => {
                    let reachable = (matchers_seen == MATCHER_SECTIONS).then(|| {
                        let mut set = BTreeSet::new();
                        set.extend(commands.values().flatten().map(|p: &CommandPattern| p.rule));
                        set.extend(
                            command_globs
                                .iter()
                                .map(|g: &crate::policy::GlobCommand| g.pattern.rule),
                        );
                        for globs in [&env, &web, &tools, &agents] {
                            set.extend(globs.iter().map(|g: &NameGlob| g.rule));
                        }
                        for globs in [&read, &write] {
                            set.extend(globs.iter().map(|g: &crate::pattern::PathGlob| g.rule));
                        }
                        set
                    });
                    rules = Some(map.next_value_seed(RulesSeed {
                        reachable: reachable.as_ref(),
                    })?);
                }
            }
        }
        Ok(CompiledPolicy {
            format: format.ok_or_else(|| missing("format"))?,
            profile: profile.ok_or_else(|| missing("profile"))?,
            workspace: workspace.ok_or_else(|| missing("workspace"))?,
            home: home.ok_or_else(|| missing("home"))?,
            default: default.ok_or_else(|| missing("default"))?,
            unknown: unknown.ok_or_else(|| missing("unknown"))?,
            unknown_tool: unknown_tool.ok_or_else(|| missing("unknown_tool"))?,
            summary,
            allowed_commands,
            commands,
            command_globs,
            env,
            read,
            write,
            web,
            tools,
            agents,
            rules: rules.ok_or_else(|| missing("rules"))?,
        })
    }
}

struct CommandsSeed<'n> {
    names: Option<&'n BTreeSet<String>>,
}

impl<'de> DeserializeSeed<'de> for CommandsSeed<'_> {
    type Value = BTreeMap<String, Vec<CommandPattern>>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for CommandsSeed<'_> {
    type Value = BTreeMap<String, Vec<CommandPattern>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("command patterns by name")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = BTreeMap::new();
        while let Some(key) = map.next_key_seed(WantedKey { names: self.names })? {
            match key {
                Some(name) => {
                    out.insert(name, map.next_value()?);
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(out)
    }
}

/// A command name key, allocated only when the call needs it.
struct WantedKey<'n> {
    names: Option<&'n BTreeSet<String>>,
}

impl<'de> DeserializeSeed<'de> for WantedKey<'_> {
    type Value = Option<String>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for WantedKey<'_> {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a command name")
    }

    fn visit_str<E: serde::de::Error>(self, name: &str) -> Result<Self::Value, E> {
        Ok(self
            .names
            .is_none_or(|names| names.contains(name))
            .then(|| name.to_string()))
    }
}

/// A name rule as it sits in the file, borrowed to be checked before anything is allocated.
#[derive(Deserialize)]
struct NameGlobRef<'a>(u32, #[serde(borrow)] Cow<'a, str>);

/// The tool name rules that match the call's tool (all of them when no tool is given).
struct ToolsSeed<'t> {
    tool: Option<&'t str>,
}

impl<'de> DeserializeSeed<'de> for ToolsSeed<'_> {
    type Value = Vec<NameGlob>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for ToolsSeed<'_> {
    type Value = Vec<NameGlob>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("tool name rules")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::new();
        while let Some(NameGlobRef(rule, glob)) = seq.next_element::<NameGlobRef<'de>>()? {
            if self.tool.is_none_or(|tool| wildcard(&glob, tool)) {
                out.push(NameGlob {
                    rule,
                    glob: glob.into_owned(),
                });
            }
        }
        Ok(out)
    }
}

struct RulesSeed<'r> {
    reachable: Option<&'r BTreeSet<u32>>,
}

impl<'de> DeserializeSeed<'de> for RulesSeed<'_> {
    type Value = Vec<RuleInfo>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for RulesSeed<'_> {
    type Value = Vec<RuleInfo>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the policy's rules")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::new();
        loop {
            let index = u32::try_from(out.len()).unwrap_or(u32::MAX);
            if self.reachable.is_none_or(|r| r.contains(&index)) {
                match seq.next_element::<RuleInfo>()? {
                    Some(rule) => out.push(rule),
                    None => break,
                }
            } else {
                match seq.next_element::<IgnoredAny>()? {
                    // Unreachable for this call: a placeholder keeps the indexes right.
                    Some(_) => out.push(RuleInfo {
                        id: String::new(),
                        reason: String::new(),
                        decision: Decision::Deny,
                    }),
                    None => break,
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{HookConfig, ToolRule};
    use crate::policy::{Context, compile};

    #[test]
    fn unreachable_rules_are_placeholders_and_reachable_ones_are_kept() {
        let rule = |id: &str, name: &str| ToolRule {
            id: id.into(),
            reason: format!("reason of {id}"),
            decision: Decision::Allow,
            names: vec![name.into()],
        };
        let config = HookConfig {
            tools: vec![rule("a", "ToolA"), rule("b", "ToolB")],
            ..HookConfig::default()
        };
        let context = Context {
            workspace: "/w".into(),
            home: "/h".into(),
            profile_name: "t".into(),
        };
        let policy = compile(&config, &context).expect("compiles");
        let json = serde_json::to_vec(&policy).expect("serializes");
        let partial = parse(&json, &Needs::for_call("ToolB", &Value::Null)).expect("loads");
        assert_eq!(
            partial.rules[0].id, "",
            "rule a cannot be reached by a ToolB call"
        );
        assert_eq!(partial.rules[1].id, "b");
        assert_eq!(parse(&json, &Needs::all()).expect("loads"), policy);
    }
}
