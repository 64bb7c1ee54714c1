//! The compiled policy's file format, and loading it for one call, cheaply.
//!
//! The hook runs before every tool call, so reading the policy must not cost in proportion to
//! its size. The supervisor writes the [`CompiledPolicy`] once per run in a binary format
//! ([`encode`]) whose sections carry their length and whose command names and rules sit
//! behind offset tables; the hook ([`parse`]) reads only what the call can reach: for a Bash
//! call the command patterns of the command names in it (the command is analysed first, and
//! each name is a binary search), the file rules only for tools that touch files, the web and
//! agent rules only for their tools, and the id and reason of only the rules those matchers
//! refer to. Everything else is stepped over without being read. The result is a
//! `CompiledPolicy` holding only those rules, renumbered (the matchers loaded refer to them by
//! their new index); the tests compare its verdicts with the fully loaded policy's.
//!
//! # Format (version [`FORMAT_VERSION`])
//!
//! Integers are `u32` little-endian, a string is its byte length then its UTF-8 bytes, a
//! decision one byte (0 allow, 1 ask, 2 deny).
//!
//! ```text
//! file     = "STEPPROOF-POLICY" format:u32 scalars commands globs env read write web tools agents rules
//! scalars  = profile workspace home default:u8 unknown:u8 unknown_tool:u8 summary count:u32 allowed*
//! section  = length:u32 body            (every part after the scalars; length of the body)
//! commands = count:u32 offset:u32* entry*    offsets from the body's start, entries sorted by name
//! entry    = name count:u32 (rule:u32 args)*
//! globs    = count:u32 (name rule:u32 args)*
//! env, read, write, web, tools, agents = count:u32 (rule:u32 glob)*
//! rules    = count:u32 offset:u32* (id reason decision:u8 marks:u8)*
//! marks    = bit 0: changes_nothing, bit 1: except_disposable (`config::BashRule`)
//! ```
//!
//! Nothing may follow the rules. A file that is cut short, has a section running past its end,
//! a string that is not UTF-8, an unknown decision or a matcher naming a rule that does not
//! exist is refused with the byte offset where reading stopped.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use thiserror::Error;

use crate::decision::Decision;
use crate::pattern::{CommandPattern, PathGlob, wildcard};
use crate::policy::{CompiledPolicy, FORMAT_VERSION, GlobCommand, NameGlob, RuleInfo};
use crate::shell::{self, Effect};

/// The first bytes of a compiled policy file.
pub const MAGIC: &[u8; 16] = b"STEPPROOF-POLICY";

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

    /// What judging `tool` with `input` can reach, `$TMPDIR` being this process's.
    pub fn for_call(tool: &str, input: &Value) -> Needs {
        let tmpdir = crate::policy::environment_tmpdir();
        Needs::for_call_with_tmpdir(tool, input, tmpdir.as_deref())
    }

    /// `for_call` with `$TMPDIR` standing for `tmpdir` (see `shell::analyze_with_tmpdir`).
    pub fn for_call_with_tmpdir(tool: &str, input: &Value, tmpdir: Option<&str>) -> Needs {
        let mut needs = Needs {
            commands: Some(BTreeSet::new()),
            tool: Some(tool.to_string()),
            ..Needs::default()
        };
        match tool {
            "Bash" => {
                let command = input.get("command").and_then(Value::as_str).unwrap_or("");
                let mut names = BTreeSet::new();
                let effects = shell::analyze_with_tmpdir(command, tmpdir);
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

/// Why a policy file could not be read as a compiled policy.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum DecodeError {
    /// Not a compiled StepProof policy at all.
    #[error("it does not start with {magic:?}{hint}", magic = String::from_utf8_lossy(MAGIC))]
    NotAPolicy { hint: &'static str },
    /// Written by a StepProof that used another version of the format.
    #[error("it has format {found}, this hook reads format {FORMAT_VERSION}")]
    Version { found: u32 },
    /// Damaged: what was expected where reading stopped.
    #[error("{what} at byte {offset}")]
    Damaged { what: &'static str, offset: usize },
}

/// Why a policy could not be written.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("the compiled policy is too large for its file format (a part is over 4 GiB)")]
pub struct TooLarge;

/// The compiled policy as the hook binary reads it (see the format above).
pub fn encode(policy: &CompiledPolicy) -> Result<Vec<u8>, TooLarge> {
    let mut out = Writer(Vec::with_capacity(4096));
    out.0.extend_from_slice(MAGIC);
    out.u32(FORMAT_VERSION);
    out.str(&policy.profile)?;
    out.str(&policy.workspace)?;
    out.str(&policy.home)?;
    out.decision(policy.default);
    out.decision(policy.unknown);
    out.decision(policy.unknown_tool);
    out.str(&policy.summary)?;
    out.len(policy.allowed_commands.len())?;
    for name in &policy.allowed_commands {
        out.str(name)?;
    }
    out.section(|body| {
        // BTreeMap order is byte order: what the hook's binary search expects.
        let entries = policy
            .commands
            .iter()
            .map(|(name, patterns)| {
                let mut entry = Writer(Vec::new());
                entry.str(name)?;
                entry.len(patterns.len())?;
                for pattern in patterns {
                    entry.u32(pattern.rule);
                    entry.str(&pattern.args)?;
                }
                Ok(entry.0)
            })
            .collect::<Result<Vec<_>, TooLarge>>()?;
        body.table(&entries)
    })?;
    out.section(|body| {
        body.len(policy.command_globs.len())?;
        for glob in &policy.command_globs {
            body.str(&glob.name)?;
            body.u32(glob.pattern.rule);
            body.str(&glob.pattern.args)?;
        }
        Ok(())
    })?;
    fn pairs(globs: &[NameGlob]) -> Vec<(u32, &str)> {
        globs.iter().map(|g| (g.rule, g.glob.as_str())).collect()
    }
    fn paths(globs: &[PathGlob]) -> Vec<(u32, &str)> {
        globs.iter().map(|g| (g.rule, g.glob.as_str())).collect()
    }
    let lists = [
        pairs(&policy.env),
        paths(&policy.read),
        paths(&policy.write),
        pairs(&policy.web),
        pairs(&policy.tools),
        pairs(&policy.agents),
    ];
    for list in &lists {
        out.section(|body| {
            body.len(list.len())?;
            for (rule, glob) in list {
                body.u32(*rule);
                body.str(glob)?;
            }
            Ok(())
        })?;
    }
    out.section(|body| {
        let entries = policy
            .rules
            .iter()
            .map(|rule| {
                let mut entry = Writer(Vec::new());
                entry.str(&rule.id)?;
                entry.str(&rule.reason)?;
                entry.decision(rule.decision);
                entry
                    .0
                    .push(u8::from(rule.changes_nothing) | (u8::from(rule.except_disposable) << 1));
                Ok(entry.0)
            })
            .collect::<Result<Vec<_>, TooLarge>>()?;
        body.table(&entries)
    })?;
    Ok(out.0)
}

struct Writer(Vec<u8>);

impl Writer {
    fn u32(&mut self, value: u32) {
        self.0.extend_from_slice(&value.to_le_bytes());
    }

    fn len(&mut self, len: usize) -> Result<(), TooLarge> {
        self.u32(u32::try_from(len).map_err(|_| TooLarge)?);
        Ok(())
    }

    fn str(&mut self, text: &str) -> Result<(), TooLarge> {
        self.len(text.len())?;
        self.0.extend_from_slice(text.as_bytes());
        Ok(())
    }

    fn decision(&mut self, decision: Decision) {
        self.0.push(match decision {
            Decision::Allow => 0,
            Decision::Ask => 1,
            Decision::Deny => 2,
        });
    }

    /// A section: its body's length, then the body `fill` writes.
    fn section(
        &mut self,
        fill: impl FnOnce(&mut Writer) -> Result<(), TooLarge>,
    ) -> Result<(), TooLarge> {
        let mut body = Writer(Vec::new());
        fill(&mut body)?;
        self.len(body.0.len())?;
        self.0.extend_from_slice(&body.0);
        Ok(())
    }

    /// A count, an offset table and the entries it points at (offsets from the count).
    fn table(&mut self, entries: &[Vec<u8>]) -> Result<(), TooLarge> {
        let start = self.0.len();
        self.len(entries.len())?;
        let mut offset = 4 + 4 * entries.len();
        for entry in entries {
            self.len(offset)?;
            offset += entry.len();
        }
        for entry in entries {
            self.0.extend_from_slice(entry);
        }
        debug_assert_eq!(self.0.len() - start, offset);
        Ok(())
    }
}

/// Reads a compiled policy, keeping only what `needs` asks for.
pub fn parse(bytes: &[u8], needs: &Needs) -> Result<CompiledPolicy, DecodeError> {
    let Some(rest) = bytes.strip_prefix(MAGIC.as_slice()) else {
        let hint = if bytes.first() == Some(&b'{') {
            " (it looks like JSON: a policy written by an older StepProof)"
        } else {
            ""
        };
        return Err(DecodeError::NotAPolicy { hint });
    };
    let mut file = Reader {
        bytes: rest,
        at: 0,
        base: MAGIC.len(),
    };
    let format = file.u32("the format version")?;
    if format != FORMAT_VERSION {
        return Err(DecodeError::Version { found: format });
    }
    let profile = file.str("the profile name")?.to_string();
    let workspace = file.str("the workspace")?.to_string();
    let home = file.str("the home directory")?.to_string();
    let default = file.decision()?;
    let unknown = file.decision()?;
    let unknown_tool = file.decision()?;
    let summary = file.str("the summary")?.to_string();
    let count = file.count("the allowed commands", 4)?;
    let mut allowed_commands = Vec::with_capacity(count);
    for _ in 0..count {
        allowed_commands.push(file.str("an allowed command")?.to_string());
    }
    let commands = file.section("the command patterns")?;
    let globs = file.section("the command globs")?;
    let env = file.section("the env rules")?;
    let read = file.section("the read rules")?;
    let write = file.section("the write rules")?;
    let web = file.section("the web rules")?;
    let tools = file.section("the tool rules")?;
    let agents = file.section("the agent rules")?;
    let rules = Table::new(file.section("the rules")?, "the rules")?;
    if file.at != file.bytes.len() {
        return Err(file.damaged("the end of the file"));
    }
    let rule_count = u32::try_from(rules.count).unwrap_or(u32::MAX);
    let rule = |reader: &mut Reader<'_>| {
        let index = reader.u32("a rule index")?;
        if index < rule_count {
            Ok(index)
        } else {
            Err(reader.damaged("a rule index below the number of rules"))
        }
    };
    let mut policy = CompiledPolicy {
        format,
        profile,
        workspace,
        home,
        default,
        unknown,
        unknown_tool,
        summary,
        allowed_commands,
        commands: BTreeMap::new(),
        command_globs: Vec::new(),
        env: Vec::new(),
        read: Vec::new(),
        write: Vec::new(),
        web: Vec::new(),
        tools: Vec::new(),
        agents: Vec::new(),
        rules: Vec::new(),
    };
    let commands = Table::new(commands, "the command patterns")?;
    let patterns_of = |entry: &mut Reader<'_>| {
        let count = entry.count("the patterns of a command", 8)?;
        let mut patterns = Vec::with_capacity(count);
        for _ in 0..count {
            let rule = rule(entry)?;
            let args = entry.str("a command pattern")?.to_string();
            patterns.push(CommandPattern { rule, args });
        }
        Ok::<_, DecodeError>(patterns)
    };
    match &needs.commands {
        None => {
            for index in 0..commands.count {
                let mut entry = commands.entry(index)?;
                let name = entry.str("a command name")?.to_string();
                let patterns = patterns_of(&mut entry)?;
                policy.commands.insert(name, patterns);
            }
        }
        Some(names) => {
            for name in names {
                if let Some(mut entry) = commands.find(name)? {
                    let patterns = patterns_of(&mut entry)?;
                    policy.commands.insert(name.clone(), patterns);
                }
            }
        }
    }
    // The command globs can match any command name, and are few.
    let mut globs = globs;
    for _ in 0..globs.count("the command globs", 12)? {
        let name = globs.str("a command glob")?.to_string();
        let rule = rule(&mut globs)?;
        let args = globs.str("a command pattern")?.to_string();
        policy.command_globs.push(GlobCommand {
            name,
            pattern: CommandPattern { rule, args },
        });
    }
    let names = |mut list: Reader<'_>, keep: &dyn Fn(&str) -> bool| {
        let mut out = Vec::new();
        for _ in 0..list.count("a rule list", 8)? {
            let rule = rule(&mut list)?;
            let glob = list.str("a glob")?;
            if keep(glob) {
                out.push(NameGlob {
                    rule,
                    glob: glob.to_string(),
                });
            }
        }
        Ok::<_, DecodeError>(out)
    };
    let all = |_: &str| true;
    // Assignments can prefix any command.
    policy.env = names(env, &all)?;
    let paths = |list: Reader<'_>| {
        Ok::<_, DecodeError>(
            names(list, &all)?
                .into_iter()
                .map(|g| PathGlob {
                    rule: g.rule,
                    glob: g.glob,
                })
                .collect(),
        )
    };
    if needs.read {
        policy.read = paths(read)?;
    }
    if needs.write {
        policy.write = paths(write)?;
    }
    if needs.web {
        policy.web = names(web, &all)?;
    }
    if needs.agents {
        policy.agents = names(agents, &all)?;
    }
    let tool = needs.tool.as_deref();
    policy.tools = names(tools, &|glob| tool.is_none_or(|tool| wildcard(glob, tool)))?;
    let rule_info = |index: u32| {
        let mut entry = rules.entry(index as usize)?;
        let id = entry.str("a rule id")?.to_string();
        let reason = entry.str("a rule reason")?.to_string();
        let decision = entry.decision()?;
        let marks = entry.marks()?;
        Ok::<_, DecodeError>(RuleInfo {
            id,
            reason,
            decision,
            changes_nothing: marks & 1 != 0,
            except_disposable: marks & 2 != 0,
        })
    };
    if needs.commands.is_none() {
        // A full load: every rule, at its own index.
        policy.rules.reserve_exact(rules.count);
        for index in 0..rule_count {
            policy.rules.push(rule_info(index)?);
        }
        return Ok(policy);
    }
    // Only the rules the loaded matchers refer to, renumbered in their order (a large policy
    // would otherwise cost a blank entry per rule the call cannot reach).
    let mut reachable = BTreeSet::new();
    reachable.extend(policy.commands.values().flatten().map(|p| p.rule));
    reachable.extend(policy.command_globs.iter().map(|g| g.pattern.rule));
    for globs in [&policy.env, &policy.web, &policy.tools, &policy.agents] {
        reachable.extend(globs.iter().map(|g| g.rule));
    }
    for globs in [&policy.read, &policy.write] {
        reachable.extend(globs.iter().map(|g| g.rule));
    }
    let kept: Vec<u32> = reachable.into_iter().collect();
    policy.rules.reserve_exact(kept.len());
    for &index in &kept {
        policy.rules.push(rule_info(index)?);
    }
    // Every matcher's rule is in `kept`, so the search finds it.
    let renumber = |rule: &mut u32| {
        *rule = u32::try_from(kept.binary_search(rule).unwrap_or(usize::MAX)).unwrap_or(u32::MAX);
    };
    for pattern in policy.commands.values_mut().flatten() {
        renumber(&mut pattern.rule);
    }
    for glob in &mut policy.command_globs {
        renumber(&mut glob.pattern.rule);
    }
    for globs in [
        &mut policy.env,
        &mut policy.web,
        &mut policy.tools,
        &mut policy.agents,
    ] {
        globs.iter_mut().for_each(|g| renumber(&mut g.rule));
    }
    for globs in [&mut policy.read, &mut policy.write] {
        globs.iter_mut().for_each(|g| renumber(&mut g.rule));
    }
    Ok(policy)
}

/// A bounds-checked cursor over part of the file; `base` is where that part starts in the
/// file, for error messages.
#[derive(Clone, Copy)]
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    base: usize,
}

impl<'a> Reader<'a> {
    fn damaged(&self, what: &'static str) -> DecodeError {
        DecodeError::Damaged {
            what,
            offset: self.base + self.at,
        }
    }

    fn take(&mut self, len: usize, what: &'static str) -> Result<&'a [u8], DecodeError> {
        let end = self
            .at
            .checked_add(len)
            .filter(|&end| end <= self.bytes.len());
        let Some(end) = end else {
            return Err(self.damaged(what));
        };
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, DecodeError> {
        let bytes = self.take(4, what)?;
        let mut word = [0; 4];
        word.copy_from_slice(bytes);
        Ok(u32::from_le_bytes(word))
    }

    fn usize(&mut self, what: &'static str) -> Result<usize, DecodeError> {
        let value = self.u32(what)?;
        usize::try_from(value).map_err(|_| self.damaged(what))
    }

    /// A count of items at least `min_size` bytes each: one the rest cannot hold is damage
    /// (and never sizes an allocation).
    fn count(&mut self, what: &'static str, min_size: usize) -> Result<usize, DecodeError> {
        let count = self.usize(what)?;
        if count.saturating_mul(min_size) > self.bytes.len() - self.at {
            return Err(self.damaged(what));
        }
        Ok(count)
    }

    fn str(&mut self, what: &'static str) -> Result<&'a str, DecodeError> {
        let len = self.usize(what)?;
        let start = self.at;
        let bytes = self.take(len, what)?;
        std::str::from_utf8(bytes).map_err(|_| DecodeError::Damaged {
            what: "UTF-8 text",
            offset: self.base + start,
        })
    }

    fn marks(&mut self) -> Result<u8, DecodeError> {
        match self.take(1, "a rule's marks")? {
            [marks] if *marks < 4 => Ok(*marks),
            _ => Err(DecodeError::Damaged {
                what: "a rule's marks (0 to 3)",
                offset: self.base + self.at - 1,
            }),
        }
    }

    fn decision(&mut self) -> Result<Decision, DecodeError> {
        match self.take(1, "a decision")? {
            [0] => Ok(Decision::Allow),
            [1] => Ok(Decision::Ask),
            [2] => Ok(Decision::Deny),
            _ => Err(DecodeError::Damaged {
                what: "a decision (0, 1 or 2)",
                offset: self.base + self.at - 1,
            }),
        }
    }

    /// The body of the next section, as its own reader.
    fn section(&mut self, what: &'static str) -> Result<Reader<'a>, DecodeError> {
        let len = self.usize(what)?;
        let base = self.base + self.at;
        let bytes = self.take(len, what)?;
        Ok(Reader { bytes, at: 0, base })
    }
}

/// A section made of a count, an offset table and entries.
struct Table<'a> {
    body: Reader<'a>,
    count: usize,
    what: &'static str,
}

impl<'a> Table<'a> {
    fn new(mut body: Reader<'a>, what: &'static str) -> Result<Table<'a>, DecodeError> {
        let count = body.count(what, 4)?;
        Ok(Table { body, count, what })
    }

    /// The reader at entry `index`.
    fn entry(&self, index: usize) -> Result<Reader<'a>, DecodeError> {
        let mut slot = self.body;
        slot.at = 4 + 4 * index;
        let offset = slot.usize(self.what)?;
        if offset > self.body.bytes.len() {
            return Err(slot.damaged(self.what));
        }
        let mut entry = self.body;
        entry.at = offset;
        Ok(entry)
    }

    /// The entry whose leading name is `name` (entries sorted by name), positioned after it.
    fn find(&self, name: &str) -> Result<Option<Reader<'a>>, DecodeError> {
        let (mut low, mut high) = (0, self.count);
        while low < high {
            let middle = low + (high - low) / 2;
            let mut entry = self.entry(middle)?;
            let found = entry.str("a command name")?;
            match found.as_bytes().cmp(name.as_bytes()) {
                std::cmp::Ordering::Less => low = middle + 1,
                std::cmp::Ordering::Greater => high = middle,
                std::cmp::Ordering::Equal => return Ok(Some(entry)),
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{HookConfig, ToolRule};
    use crate::policy::{Context, compile};

    #[test]
    fn unreachable_rules_are_left_out_and_reachable_ones_renumbered() {
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
        let policy = compile(&config, &context()).expect("compiles");
        let file = encode(&policy).expect("encodes");
        let partial = parse(&file, &Needs::for_call("ToolB", &Value::Null)).expect("loads");
        assert_eq!(
            partial.rules,
            vec![RuleInfo {
                id: "b".into(),
                reason: "reason of b".into(),
                decision: Decision::Allow,
                changes_nothing: false,
                except_disposable: false,
            }],
            "rule a cannot be reached by a ToolB call"
        );
        assert_eq!(
            partial.tools,
            vec![NameGlob {
                rule: 0,
                glob: "ToolB".into()
            }]
        );
        assert_eq!(parse(&file, &Needs::all()).expect("loads"), policy);
    }

    fn context() -> Context {
        Context {
            workspace: "/w".into(),
            home: "/h".into(),
            profile_name: "t".into(),
        }
    }

    /// The built-in default profile's policy: every section has entries.
    fn default_policy_file() -> Vec<u8> {
        #[derive(serde::Deserialize)]
        struct Fragment {
            hook: HookConfig,
            filesystem: Filesystem,
        }
        #[derive(serde::Deserialize)]
        struct Filesystem {
            protected: Vec<String>,
        }
        let fragment: Fragment = toml::from_str(crate::BUILTIN_DEFAULT).expect("parses");
        let config = fragment.hook.with_protected(&fragment.filesystem.protected);
        let policy = compile(&config, &context()).expect("compiles");
        encode(&policy).expect("encodes")
    }

    #[test]
    fn every_truncation_is_refused() {
        let file = default_policy_file();
        for len in 0..file.len() {
            for needs in [Needs::all(), Needs::minimal()] {
                assert!(parse(&file[..len], &needs).is_err(), "cut at {len}");
            }
        }
    }

    #[test]
    fn damage_is_refused_or_read_without_panicking() {
        let file = default_policy_file();
        let call = serde_json::json!({ "command": "git status && cargo test > out.txt" });
        for at in (0..file.len()).step_by(file.len() / 2000 + 1) {
            for byte in [0x00, 0x7f, 0xff] {
                let mut damaged = file.clone();
                damaged[at] = byte;
                for needs in [Needs::all(), Needs::for_call("Bash", &call)] {
                    // Either a policy whose every matcher names one of its rules, or an error.
                    if let Ok(policy) = parse(&damaged, &needs) {
                        let count = policy.rules.len() as u32;
                        assert!(policy.commands.values().flatten().all(|p| p.rule < count));
                        assert!(policy.read.iter().all(|g| g.rule < count), "at {at}");
                    }
                }
            }
        }
    }

    #[test]
    fn the_version_is_checked_before_anything_else() {
        let mut file = default_policy_file();
        file[16..20].copy_from_slice(&1u32.to_le_bytes());
        file.truncate(24);
        assert_eq!(
            parse(&file, &Needs::all()),
            Err(DecodeError::Version { found: 1 })
        );
    }
}
