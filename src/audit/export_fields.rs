//! What of a record the export ships: one table, keyed by (record kind, field), of the fields
//! declared safe to ship as values. Everything else is replaced by `"[redacted]"` (a string, a
//! number, a whole object alike), and a key that is not declared is not shipped at all — its
//! name could carry what its value would (a report from inside names its own keys) — so the
//! shipped record says only how many it withheld (`withheld_fields`). A field added to a record
//! later ships nothing until it is declared here.
//!
//! A path is the field's keys joined by `.`, with `[]` for the elements of a list and `*` for
//! one level of a map whose keys StepProof writes from a closed set (counts by record kind).
//! The kind `*` declares a field for every kind. Two classes:
//!
//! * [`Ship::Structure`] — kinds, ids, hashes, decisions, rule ids, tool names, counts,
//!   durations, hosts, ports, methods, statuses, exit codes: shipped in `commands` and
//!   `all-text`;
//! * [`Ship::Context`] — text StepProof writes from what the person at the keyboard or the
//!   profile chose (the profile's name, the workspace, the reason a rule gives, the kernel's
//!   features): shipped in `commands`, replaced in `all-text`;
//! * [`Ship::Withheld`] — what the agent shapes or may quote (commands, prompts, tool input,
//!   output and error text, file names and paths inside the run, URL paths, webhook URLs,
//!   free text from inside): its key ships, its whole value is replaced, in every mode but
//!   `none`.
//!
//! Every field a record writes has its line in the table (`declared.rs`), so a decision was made
//! for each.
//! `redact = "none"` ships every record as written; `redact_keys` withholds more keys in every
//! mode. In debug builds, the suite's ledger (`STEPPROOF_FIELD_LEDGER`, set by `scripts/test`)
//! collects every (kind, field) a run writes that this table does not declare, so a field added
//! without a decision here fails the suite.

use crate::audit::export_config::Redaction;
use serde_json::{Map, Value};
use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

mod declared;

pub use declared::FIELDS;
use declared::KINDS_WITHOUT_FIELDS;

/// What replaces a value that is not shipped.
pub const REDACTED: &str = "[redacted]";

/// The key, at the top of a shipped record, that counts the keys not shipped.
pub const WITHHELD: &str = "withheld_fields";

/// How a declared field ships.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ship {
    /// In every mode but `none` (where everything ships).
    Structure,
    /// In `commands`; replaced in `all-text`.
    Context,
    /// Never (but in `none`): the key ships, its whole value (a list, a map) is replaced.
    Withheld,
}

/// The longest string a [`Ship::Structure`] field ships: ids, hashes, names are shorter.
const STRUCTURE_MAX: usize = 128;

/// What a [`Ship::Structure`] string must look like to ship: at most [`STRUCTURE_MAX`] bytes of
/// printable ASCII without spaces. A report from inside fills its fields with what the hook was
/// given (the agent can run the hook itself), so an id field could hold any text: text with
/// spaces, line breaks or beyond an id's length is replaced even there.
fn plain(text: &str) -> bool {
    text.len() <= STRUCTURE_MAX && text.bytes().all(|b| (0x21..=0x7e).contains(&b))
}

/// The envelope every record has (see [`crate::audit::chain::ENVELOPE_KEYS`]): always shipped,
/// except a kind the sandbox named that the table does not know.
const ENVELOPE: [&str; 5] = crate::audit::chain::ENVELOPE_KEYS;

struct Table {
    /// (kind, path) → class.
    fields: HashMap<(&'static str, &'static str), Ship>,
    /// (kind, path) of every object or list that holds a declared field.
    containers: HashSet<(&'static str, String)>,
    /// Kinds the table names (besides `*`).
    kinds: HashSet<&'static str>,
}

fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut fields = HashMap::new();
        let mut containers = HashSet::new();
        let mut kinds = HashSet::new();
        kinds.extend(KINDS_WITHOUT_FIELDS.iter().copied());
        for &(kind, path, ship) in FIELDS {
            fields.insert((kind, path), ship);
            if kind != "*" {
                kinds.insert(kind);
            }
            for (i, c) in path.char_indices() {
                if c == '.' || (c == '[' && path[i..].starts_with("[]")) {
                    containers.insert((kind, path[..i].to_string()));
                }
            }
        }
        Table {
            fields,
            containers,
            kinds,
        }
    })
}

impl Table {
    fn class(&self, kind: &str, path: &str) -> Option<Ship> {
        self.fields
            .get(&(kind, path))
            .or_else(|| self.fields.get(&("*", path)))
            .copied()
    }

    fn is_container(&self, kind: &str, path: &str) -> bool {
        self.containers
            .contains(&(kind_key(self, kind), path.to_string()))
            || self.containers.contains(&("*", path.to_string()))
    }

    /// The path a key of the object at `parent` takes: its own name, or `*` where the table
    /// declares a map there. `None`: not declared.
    fn key_path(&self, kind: &str, parent: &str, key: &str) -> Option<String> {
        let join = |k: &str| {
            if parent.is_empty() {
                k.to_string()
            } else {
                format!("{parent}.{k}")
            }
        };
        [join(key), join("*")]
            .into_iter()
            .find(|p| self.class(kind, p).is_some() || self.is_container(kind, p))
    }
}

/// The table's own spelling of `kind` (the map's keys are `'static`).
fn kind_key(table: &Table, kind: &str) -> &'static str {
    table.kinds.get(kind).copied().unwrap_or("*")
}

/// Whether the table names `kind` (a kind the sandbox gave that it does not is not shipped).
pub fn known_kind(kind: &str) -> bool {
    table().kinds.contains(kind)
}

/// The record as shipped in `level` with `extra` keys withheld: `None` when it ships as
/// written (every field declared for the level, none withheld).
pub fn shipped(line: &[u8], level: Redaction, extra: &[String]) -> Option<String> {
    if level == Redaction::None && extra.is_empty() {
        return None;
    }
    let Ok(Value::Object(mut record)) = serde_json::from_slice::<Value>(line) else {
        // Not an object (cannot be, from our writer): nothing of it is shipped.
        return Some(format!("\"{REDACTED}\""));
    };
    let table = table();
    let kind = record_kind(&record);
    let mut pass = Pass {
        table,
        kind: &kind,
        level,
        extra,
        removed: Vec::new(),
        withheld: 0,
        changed: false,
    };
    if level != Redaction::None && !known_kind(&kind) && source_is_sandbox(&record) {
        record.insert("kind".into(), Value::from(REDACTED));
        pass.changed = true;
    }
    let keys: Vec<String> = record.keys().cloned().collect();
    for key in keys {
        if ENVELOPE.contains(&key.as_str()) {
            continue;
        }
        pass.key(&mut record, "", &key);
    }
    // A withheld value quoted elsewhere (a decision's reason repeats its command).
    pass.removed.retain(|s| s.len() >= MIN_QUOTED);
    if !pass.removed.is_empty() {
        for (key, value) in record.iter_mut() {
            if !ENVELOPE.contains(&key.as_str()) {
                pass.changed |= redact_quotes(value, &pass.removed);
            }
        }
    }
    if pass.withheld > 0 {
        record.insert(WITHHELD.into(), Value::from(pass.withheld));
    }
    pass.changed.then(|| Value::Object(record).to_string())
}

/// Shortest withheld value whose appearance in a shipped string withholds that string too
/// (shorter ones, such as `ls`, would withhold half the record by accident).
const MIN_QUOTED: usize = 6;

fn record_kind(record: &Map<String, Value>) -> String {
    record
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn source_is_sandbox(record: &Map<String, Value>) -> bool {
    record.get("source").and_then(Value::as_str) == Some("sandbox")
}

struct Pass<'a> {
    table: &'a Table,
    kind: &'a str,
    level: Redaction,
    extra: &'a [String],
    removed: Vec<String>,
    withheld: u64,
    changed: bool,
}

impl Pass<'_> {
    /// The key `key` of `object` (at `parent`): kept, replaced or removed.
    fn key(&mut self, object: &mut Map<String, Value>, parent: &str, key: &str) {
        let listed = self.extra.iter().any(|k| k == key);
        let path = if listed || self.level == Redaction::None {
            None
        } else {
            self.table.key_path(self.kind, parent, key)
        };
        match path {
            _ if listed => {
                if let Some(value) = object.get_mut(key)
                    && !matches!(value, Value::Null)
                {
                    collect_strings(value, &mut self.removed);
                    *value = Value::from(REDACTED);
                    self.changed = true;
                }
            }
            None if self.level == Redaction::None => {
                if let Some(value) = object.get_mut(key) {
                    self.value_none(key, value);
                }
            }
            None => {
                if let Some(value) = object.remove(key) {
                    collect_strings(&value, &mut self.removed);
                }
                self.withheld += 1;
                self.changed = true;
            }
            Some(path) if self.table.class(self.kind, &path) == Some(Ship::Withheld) => {
                if let Some(value) = object.get_mut(key)
                    && !matches!(value, Value::Null)
                    && value.as_str() != Some(REDACTED)
                {
                    collect_strings(value, &mut self.removed);
                    *value = Value::from(REDACTED);
                    self.changed = true;
                }
            }
            Some(path) => {
                if let Some(value) = object.get_mut(key) {
                    self.value(&path, value);
                }
            }
        }
    }

    /// `none` with `redact_keys`: only the listed keys, at any depth.
    fn value_none(&mut self, _key: &str, value: &mut Value) {
        match value {
            Value::Object(map) => {
                let keys: Vec<String> = map.keys().cloned().collect();
                for k in keys {
                    self.key(map, "", &k);
                }
            }
            Value::Array(items) => {
                for item in items {
                    self.value_none("", item);
                }
            }
            _ => {}
        }
    }

    fn value(&mut self, path: &str, value: &mut Value) {
        match value {
            Value::Object(map) => {
                let keys: Vec<String> = map.keys().cloned().collect();
                for k in keys {
                    self.key(map, path, &k);
                }
            }
            Value::Array(items) => {
                let element = format!("{path}[]");
                for item in items {
                    self.value(&element, item);
                }
            }
            Value::Null => {}
            scalar => {
                let ships = match self.table.class(self.kind, path) {
                    Some(Ship::Structure) => match scalar {
                        Value::String(s) => plain(s),
                        _ => true,
                    },
                    Some(Ship::Context) => self.level == Redaction::Commands,
                    Some(Ship::Withheld) | None => false,
                };
                if !ships {
                    if let Value::String(s) = scalar {
                        self.removed.push(std::mem::take(s));
                    }
                    *scalar = Value::from(REDACTED);
                    self.changed = true;
                }
            }
        }
    }
}

fn collect_strings(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => out.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|v| collect_strings(v, out)),
        Value::Object(map) => {
            for (k, v) in map {
                out.push(k.clone());
                collect_strings(v, out);
            }
        }
        _ => {}
    }
}

fn redact_quotes(value: &mut Value, removed: &[String]) -> bool {
    match value {
        Value::String(s) if s != REDACTED && removed.iter().any(|r| s.contains(r.as_str())) => {
            *value = Value::from(REDACTED);
            true
        }
        Value::Array(items) => items
            .iter_mut()
            .fold(false, |c, v| redact_quotes(v, removed) | c),
        Value::Object(map) => map
            .values_mut()
            .fold(false, |c, v| redact_quotes(v, removed) | c),
        _ => false,
    }
}

/// Every (kind, path) of `line` the table does not declare, for the suite's ledger.
pub fn undeclared(line: &[u8]) -> Vec<(String, String)> {
    let Ok(Value::Object(record)) = serde_json::from_slice::<Value>(line) else {
        return vec![("?".into(), "(not an object)".into())];
    };
    let table = table();
    let kind = record_kind(&record);
    let mut out = Vec::new();
    if source_is_sandbox(&record) && !known_kind(&kind) {
        out.push((kind.clone(), "(kind)".into()));
    }
    fn walk(table: &Table, kind: &str, path: &str, value: &Value, out: &mut Vec<(String, String)>) {
        match value {
            Value::Object(map) => {
                for (k, v) in map {
                    match table.key_path(kind, path, k) {
                        Some(p) if table.class(kind, &p) == Some(Ship::Withheld) => {}
                        Some(p) => walk(table, kind, &p, v, out),
                        None => out.push((kind.into(), join(path, k))),
                    }
                }
            }
            Value::Array(items) => {
                for item in items {
                    walk(table, kind, &format!("{path}[]"), item, out);
                }
            }
            Value::Null => {}
            _ => {
                if table.class(kind, path).is_none() {
                    out.push((kind.into(), path.into()));
                }
            }
        }
    }
    for (k, v) in &record {
        if ENVELOPE.contains(&k.as_str()) {
            continue;
        }
        match table.key_path(&kind, "", k) {
            Some(p) if table.class(&kind, &p) == Some(Ship::Withheld) => {}
            Some(p) => walk(table, &kind, &p, v, &mut out),
            None => out.push((kind.clone(), k.clone())),
        }
    }
    out.sort();
    out.dedup();
    out
}

fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

/// The suite's ledger, when this process opened one.
#[cfg(debug_assertions)]
static LEDGER: OnceLock<Option<std::path::PathBuf>> = OnceLock::new();

/// Debug builds: StepProof's programs call this first; from then on every record they write is
/// checked against the table and what it does not declare is appended to the file
/// `STEPPROOF_FIELD_LEDGER` names (`scripts/test` sets it and fails on any line in it). Tests
/// that write made-up records through the library directly have no ledger. Release builds
/// have none.
pub fn open_ledger() {
    #[cfg(debug_assertions)]
    LEDGER.get_or_init(|| std::env::var_os("STEPPROOF_FIELD_LEDGER").map(Into::into));
}

/// Appends what [`undeclared`] finds in `line` to the ledger, when there is one.
pub fn note_undeclared(line: &[u8]) {
    #[cfg(debug_assertions)]
    {
        use std::io::Write as _;
        let Some(Some(path)) = LEDGER.get() else {
            return;
        };
        let found = undeclared(line);
        if found.is_empty() {
            return;
        }
        let text: String = found
            .iter()
            .map(|(kind, path)| format!("{kind}\t{path}\n"))
            .collect();
        if let Ok(mut file) = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)
        {
            let _ = file.write_all(text.as_bytes());
        }
    }
    #[cfg(not(debug_assertions))]
    let _ = line;
}

#[cfg(test)]
mod tests;
