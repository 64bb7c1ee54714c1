//! The `runbook-author` agent's text: a hand-written preamble and way of working
//! (`assets/claude/agents/runbook-author.md`) around a format reference generated from the
//! runbook's JSON Schema ([`super::schema`]) and the reviewed example `fix-bug.toml`. The
//! reference is rendered from the schema so that it cannot drift from what `check` accepts:
//! every key, whether it is required, every evidence kind, `[verifiers]`.

use super::schema::schema;
use serde_json::{Map, Value};

/// The hand-written parts; [`FORMAT_MARKER`] is replaced by the generated reference and
/// [`CHECK_MARKER`] by the command that checks a runbook inside a run.
const ASSET: &str = include_str!("../../assets/claude/agents/runbook-author.md");
/// Where the generated reference goes in [`ASSET`].
const FORMAT_MARKER: &str = "<!-- stepproof:format -->";
/// Where the check command goes in [`ASSET`].
const CHECK_MARKER: &str = "{check}";
/// The example shown: the repository's reviewed one (its own tests check it).
const EXAMPLE: &str = include_str!("../../examples/runbooks/fix-bug.toml");

/// How each object of the schema is written in TOML, in the order the reference gives them.
/// An object of the schema missing here still appears (after these, under its schema name);
/// a test holds this list to the schema.
const SECTIONS: &[(&str, &str)] = &[
    ("", "The top level"),
    ("step", "A step: `[[steps]]`, one table per step"),
    (
        "rules",
        "A step's rules: `[[steps.allow.KIND]]` and `[[steps.deny.KIND]]`, one table per rule",
    ),
    (
        "bash_rule",
        "A `bash` rule (`[[steps.allow.bash]]`, `[[steps.deny.bash]]`)",
    ),
    (
        "file_rule",
        "A `files` rule (`[[steps.allow.files]]`, `[[steps.deny.files]]`)",
    ),
    (
        "web_rule",
        "A `web` rule (`[[steps.allow.web]]`, `[[steps.deny.web]]`)",
    ),
    (
        "tool_rule",
        "A `tools` rule (`[[steps.allow.tools]]`, `[[steps.deny.tools]]`)",
    ),
    (
        "agent_rule",
        "An `agents` rule (`[[steps.allow.agents]]`, `[[steps.deny.agents]]`)",
    ),
    (
        "evidence",
        "Evidence: `[[steps.evidence]]`, one table per item, each with exactly one kind written `KIND = { key = value, … }`",
    ),
    ("command_evidence", "`command = { … }`"),
    ("files_evidence", "`files_exist = { … }`"),
    (
        "change_evidence",
        "`files_changed = { … }` and `files_unchanged = { … }`",
    ),
    ("approval_evidence", "`approval = { … }`"),
    ("verifier_evidence", "`verifier = { … }`"),
    ("verifiers", "`[verifiers]` (once, at the top level)"),
    ("id", "An id"),
    ("duration", "A duration"),
];

/// The agent definition as installed: the asset with the reference and the check command in.
pub fn definition(check_command: &str) -> String {
    ASSET
        .replacen(FORMAT_MARKER, &format_reference(), 1)
        .replace(CHECK_MARKER, check_command)
}

/// The format reference: every object of the schema, every key of each, required or optional,
/// its type and what it means, then the example.
pub fn format_reference() -> String {
    let schema = schema();
    let defs = schema["$defs"].as_object().cloned().unwrap_or_default();
    let mut out = String::from(
        "# The format\n\n\
         Generated from the runbook schema (`stepproof runbook schema` prints it as JSON Schema): \
         every key a runbook may have is below, required ones first; any other key is an error. \
         A key marked optional may be left out.\n",
    );
    let mut shown = Vec::new();
    for (def, heading) in SECTIONS {
        let object = if def.is_empty() {
            &schema
        } else {
            match defs.get(*def) {
                Some(object) => object,
                None => continue,
            }
        };
        section(&mut out, heading, object);
        shown.push(*def);
    }
    for (def, object) in &defs {
        if !shown.contains(&def.as_str()) {
            section(&mut out, &format!("`{def}`"), object);
        }
    }
    out.push_str("\n# An example\n\n```toml\n");
    out.push_str(EXAMPLE.trim_end());
    out.push_str("\n```\n");
    out
}

fn section(out: &mut String, heading: &str, object: &Value) {
    out.push_str(&format!("\n## {heading}\n\n"));
    if let Some(description) = object["description"].as_str() {
        out.push_str(description);
        out.push('\n');
    }
    if let Some(pattern) = object["pattern"].as_str() {
        out.push_str(&format!("A string matching `{pattern}`.\n"));
    }
    let Some(properties) = object["properties"].as_object() else {
        return;
    };
    if let (Some(1), Some(1)) = (
        object["minProperties"].as_u64(),
        object["maxProperties"].as_u64(),
    ) {
        out.push_str("Exactly one of these keys per table.\n");
    }
    out.push('\n');
    let required: Vec<&str> = object["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    // Required keys first, each group in the schema's (alphabetical) order.
    let (first, rest): (Vec<_>, Vec<_>) = properties
        .iter()
        .partition(|(name, _)| required.contains(&name.as_str()));
    for ((name, property), need) in first
        .into_iter()
        .map(|p| (p, "required"))
        .chain(rest.into_iter().map(|p| (p, "optional")))
    {
        out.push_str(&format!("* `{name}` ({need}, {})", kind(property)));
        if let Some(description) = described(property) {
            out.push_str(": ");
            out.push_str(&description);
        }
        out.push('\n');
    }
}

/// A property's description, its default appended when the description does not give it.
fn described(property: &Value) -> Option<String> {
    let description = property["description"].as_str().map(str::to_string);
    match (&property["default"], description) {
        (Value::Null, d) => d,
        (default, Some(d)) if d.contains("default") => {
            let _ = default;
            Some(d)
        }
        (default, Some(d)) => Some(format!("{d} (default {default})")),
        (default, None) => Some(format!("default {default}")),
    }
}

/// A property's type in words: `string`, `integer 1 to 100`, `list of strings`, `one of
/// "a", "b"`, a reference to another section.
fn kind(property: &Value) -> String {
    if let Some(reference) = property["$ref"].as_str() {
        return referenced(reference);
    }
    if let Some(values) = property["enum"].as_array() {
        let values: Vec<String> = values.iter().map(Value::to_string).collect();
        return format!("one of {}", values.join(", "));
    }
    match property["type"].as_str() {
        Some("array") => {
            let items = &property["items"];
            let what = match items["$ref"].as_str() {
                Some(reference) => format!("tables ({})", referenced(reference)),
                None => match items["type"].as_str() {
                    Some(t) => format!("{t}s"),
                    None => "values".into(),
                },
            };
            let mut words = format!("a list of {what}");
            if let Some(pattern) = items["pattern"].as_str() {
                words.push_str(&format!(" matching `{pattern}`"));
            }
            bounds(&mut words, property, "minItems", "maxItems", "items");
            if property["uniqueItems"] == Value::Bool(true) {
                words.push_str(", each once");
            }
            words
        }
        Some("integer") => {
            let mut words = String::from("an integer");
            match (property["minimum"].as_i64(), property["maximum"].as_i64()) {
                (Some(min), Some(max)) => words.push_str(&format!(" from {min} to {max}")),
                (Some(min), None) => words.push_str(&format!(" of at least {min}")),
                (None, Some(max)) => words.push_str(&format!(" of at most {max}")),
                (None, None) => {}
            }
            words
        }
        Some("boolean") => "true or false".into(),
        Some("string") => "a string".into(),
        Some(other) => other.into(),
        None => "a value".into(),
    }
}

fn bounds(words: &mut String, property: &Value, min: &str, max: &str, noun: &str) {
    match (property[min].as_u64(), property[max].as_u64()) {
        (Some(lo), Some(hi)) => words.push_str(&format!(", {lo} to {hi} {noun}")),
        (Some(lo), None) => words.push_str(&format!(", at least {lo}")),
        (None, Some(hi)) => words.push_str(&format!(", at most {hi} {noun}")),
        (None, None) => {}
    }
}

/// `#/$defs/NAME` in words: the section that describes it.
fn referenced(reference: &str) -> String {
    let name = reference.rsplit('/').next().unwrap_or(reference);
    let heading = SECTIONS
        .iter()
        .find(|(def, _)| *def == name)
        .map(|(_, heading)| *heading)
        .unwrap_or(name);
    match name {
        "id" => "an id, see “An id”".into(),
        "duration" => "a duration, see “A duration”".into(),
        _ => format!("see “{}”", short(heading)),
    }
}

/// A heading up to its first colon or parenthesis, for a cross-reference.
fn short(heading: &str) -> &str {
    let end = heading
        .find(": ")
        .into_iter()
        .chain(heading.find(" ("))
        .min()
        .unwrap_or(heading.len());
    heading[..end].trim_end()
}

/// Every key of every object in the schema, with the object's name (`""` for the top level).
pub fn schema_keys() -> Vec<(String, String)> {
    let schema = schema();
    let mut keys = Vec::new();
    let mut add = |def: &str, object: &Map<String, Value>| {
        if let Some(properties) = object.get("properties").and_then(Value::as_object) {
            for name in properties.keys() {
                keys.push((def.to_string(), name.clone()));
            }
        }
    };
    if let Some(root) = schema.as_object() {
        add("", root);
    }
    if let Some(defs) = schema["$defs"].as_object() {
        for (def, object) in defs {
            if let Some(object) = object.as_object() {
                add(def, object);
            }
        }
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHECK: &str = "/run/stepproof/stepproof runbook check";

    /// Every object of the schema has its place in the reference (none falls to the fallback).
    #[test]
    fn every_object_of_the_schema_has_a_section() {
        let schema = schema();
        for def in schema["$defs"].as_object().unwrap().keys() {
            assert!(
                SECTIONS.iter().any(|(d, _)| d == def),
                "$defs.{def} has no section in the runbook-author's reference"
            );
        }
        for (def, _) in SECTIONS {
            assert!(
                def.is_empty() || schema["$defs"].get(def).is_some(),
                "{def}"
            );
        }
    }

    /// The reference names every key of every object, each once a section, as required or
    /// optional as the schema says; every evidence kind; `[verifiers]`.
    #[test]
    fn the_text_names_every_key_as_the_schema_requires_it() {
        let text = definition(CHECK);
        let schema = schema();
        assert!(!text.contains(FORMAT_MARKER) && !text.contains(CHECK_MARKER));
        assert!(text.contains(&format!("`{CHECK} FILE`")), "{text}");
        let sections: Vec<&str> = text.split("\n## ").collect();
        for (def, heading) in SECTIONS {
            let object = if def.is_empty() {
                &schema
            } else {
                &schema["$defs"][def]
            };
            let body = sections
                .iter()
                .find(|s| s.starts_with(heading))
                .unwrap_or_else(|| panic!("no section {heading}"));
            let required: Vec<&str> = object["required"]
                .as_array()
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            for name in object["properties"]
                .as_object()
                .map(|p| p.keys().collect::<Vec<_>>())
                .unwrap_or_default()
            {
                let need = if required.contains(&name.as_str()) {
                    "required"
                } else {
                    "optional"
                };
                assert!(
                    body.contains(&format!("* `{name}` ({need}, ")),
                    "{heading}: `{name}` is not shown as {need}:\n{body}"
                );
            }
        }
        // The two the old text got wrong, and the kinds it left out.
        assert!(text.contains("* `description` (optional, "), "{text}");
        assert!(text.contains("* `verifiers` (optional, "), "{text}");
        assert!(text.contains("## `[verifiers]`"), "{text}");
        for kind in crate::runbook::EVIDENCE_KINDS {
            assert!(text.contains(&format!("* `{kind}` (optional, ")), "{kind}");
            assert!(text.contains(&format!("`{kind} = {{ … }}`")), "{kind}");
        }
        for (def, key) in schema_keys() {
            assert!(text.contains(&format!("`{key}`")), "{def}.{key}");
        }
    }

    /// The text's example is a runbook `check` accepts with no error, under the built-in
    /// profiles that build and test (under `strict`, which only inspects, its `cargo build`
    /// rule would widen the profile: `check` says so, as it should), and it shows verifier
    /// evidence with its `[verifiers]`.
    #[test]
    fn the_texts_example_passes_check() {
        let text = definition(CHECK);
        let example = text
            .split("```toml\n")
            .nth(1)
            .and_then(|rest| rest.split("```").next())
            .expect("a TOML example");
        for name in ["default", "ci"] {
            let path = format!("{}/profiles/{name}.toml", env!("CARGO_MANIFEST_DIR"));
            let profile = crate::profile::Profile::load(Some(std::path::Path::new(&path))).unwrap();
            let report = crate::runbook::check(example, &profile);
            assert_eq!(report.errors(), 0, "{name}: {:#?}", report.problems);
            assert!(report.runbook.is_some());
        }
        assert!(example.contains("[verifiers]") && example.contains("verifier = {"));
    }
}
