//! The JSON Schema of a runbook file (for editors; TOML maps onto JSON one to one), written
//! out type by type beside the types in `runbook`. A test holds every object's properties to
//! the fields its type accepts, and the examples to the schema.

use super::{EVIDENCE_KINDS, ID_PATTERN, MAX_ATTEMPTS_LIMIT, VERIFIER_MODELS_MAX};
use serde_json::{Map, Value, json};

/// What a duration looks like (`Duration::parse`).
pub const DURATION_PATTERN: &str = "^[0-9]+[smhd]$";

/// What a verifier's model name looks like (`valid_model_name`, but for its length).
pub const MODEL_PATTERN: &str = "^[A-Za-z0-9_.:/@\\[\\]][A-Za-z0-9_.:/@\\[\\]-]{0,127}$";

/// The whole schema (JSON Schema 2020-12).
pub fn schema() -> Value {
    let mut root = object(
        "A StepProof runbook: steps an agent must prove, each narrowing the profile while open.",
        &[
            ("id", json!({ "$ref": "#/$defs/id" }), true),
            ("title", text("One line on what the runbook is for."), true),
            (
                "description",
                text("What a reviewer should know beyond the title."),
                false,
            ),
            (
                "owner",
                text("Who answers for the runbook (a team, a person)."),
                true,
            ),
            (
                "steps",
                json!({
                    "type": "array",
                    "description": "The steps, in any order: depends_on orders them.",
                    "minItems": 1,
                    "items": { "$ref": "#/$defs/step" }
                }),
                true,
            ),
            ("verifiers", json!({ "$ref": "#/$defs/verifiers" }), false),
            (
                "strict",
                json!({
                    "type": "boolean",
                    "description": "A proof rests on nothing the agent left as it left it: `check` refuses an evidence command's `trust` and a command whose defining files are not all known before it runs (default false: it warns).",
                    "default": false
                }),
                false,
            ),
        ],
    );
    root.insert(
        "$schema".into(),
        json!("https://json-schema.org/draft/2020-12/schema"),
    );
    root.insert("title".into(), json!("StepProof runbook"));
    root.insert("$defs".into(), Value::Object(defs()));
    Value::Object(root)
}

fn defs() -> Map<String, Value> {
    let mut defs = Map::new();
    defs.insert(
        "id".into(),
        json!({
            "type": "string",
            "description": "1 to 64 letters, digits, `-`, `_` or `.`, starting with a letter or digit.",
            "pattern": ID_PATTERN
        }),
    );
    defs.insert(
        "duration".into(),
        json!({
            "type": "string",
            "description": "A whole number and a unit: `90s`, `10m`, `4h`, `2d`.",
            "pattern": DURATION_PATTERN
        }),
    );
    defs.insert("step".into(), Value::Object(step()));
    defs.insert(
        "rules".into(),
        Value::Object(object(
            "Hook rules in the profile's [hook] rule language, without `decision` (the side decides it).",
            &[
                ("bash", list_of("#/$defs/bash_rule"), false),
                ("files", list_of("#/$defs/file_rule"), false),
                ("web", list_of("#/$defs/web_rule"), false),
                ("tools", list_of("#/$defs/tool_rule"), false),
                ("agents", list_of("#/$defs/agent_rule"), false),
            ],
        )),
    );
    let rule = |what: &str, fields: &[(&str, Value, bool)]| {
        let mut all = vec![
            (
                "id",
                text("Stable identifier, quoted in messages and the audit log."),
                true,
            ),
            (
                "reason",
                text("Why the rule exists, in words the model can act on."),
                true,
            ),
        ];
        all.extend(fields.iter().cloned());
        Value::Object(object(what, &all))
    };
    defs.insert(
        "bash_rule".into(),
        rule(
            "A rule over shell commands.",
            &[
                (
                    "commands",
                    strings("Argument patterns, e.g. `cargo test *`."),
                    false,
                ),
                (
                    "env",
                    strings("Variable names (`*` wildcard) whose assignment the rule matches."),
                    false,
                ),
            ],
        ),
    );
    defs.insert(
        "file_rule".into(),
        rule(
            "A rule over file paths.",
            &[
                (
                    "access",
                    json!({ "enum": ["read", "write"], "description": "The access the rule covers." }),
                    true,
                ),
                ("paths", strings("Path globs: relative = the workspace, `~/…`, `/…`; `@env-files`."), true),
            ],
        ),
    );
    defs.insert(
        "web_rule".into(),
        rule(
            "A rule over web domains.",
            &[(
                "domains",
                strings("`example.com`, `*.example.com`, `*`."),
                true,
            )],
        ),
    );
    defs.insert(
        "tool_rule".into(),
        rule(
            "A rule over tool names.",
            &[(
                "names",
                strings("Tool name globs, e.g. `TodoWrite`, `mcp__github__get_*`."),
                true,
            )],
        ),
    );
    defs.insert(
        "agent_rule".into(),
        rule(
            "A rule over the agent types the Agent tool may start.",
            &[("types", strings("Agent type globs, e.g. `Explore`."), true)],
        ),
    );
    let mut evidence = object(
        "What must hold before the step completes: exactly one kind per item.",
        &[
            (
                "command",
                json!({ "$ref": "#/$defs/command_evidence" }),
                false,
            ),
            (
                "files_exist",
                json!({ "$ref": "#/$defs/files_evidence" }),
                false,
            ),
            (
                "files_changed",
                json!({ "$ref": "#/$defs/change_evidence", "description": "Files that must have changed since the step opened; ignored files do not count." }),
                false,
            ),
            (
                "files_unchanged",
                json!({ "$ref": "#/$defs/change_evidence", "description": "Paths that must be as they were when the step opened (content, mode, type, links, no entry added or removed): a step invariant." }),
                false,
            ),
            (
                "approval",
                json!({ "$ref": "#/$defs/approval_evidence" }),
                false,
            ),
            (
                "verifier",
                json!({ "$ref": "#/$defs/verifier_evidence" }),
                false,
            ),
        ],
    );
    debug_assert_eq!(EVIDENCE_KINDS.len(), 6);
    evidence.insert("minProperties".into(), json!(1));
    evidence.insert("maxProperties".into(), json!(1));
    defs.insert("evidence".into(), Value::Object(evidence));
    defs.insert(
        "command_evidence".into(),
        Value::Object(object(
            "A command the supervisor runs in a fresh sandbox on the workspace as it is then; its writes are thrown away.",
            &[
                (
                    "run",
                    json!({
                        "type": "array",
                        "description": "The program and its arguments (no shell).",
                        "minItems": 1,
                        "items": { "type": "string" }
                    }),
                    true,
                ),
                (
                    "exit_code",
                    json!({ "type": "integer", "description": "The exit code that counts as success (default 0)." }),
                    false,
                ),
                (
                    "timeout",
                    json!({ "$ref": "#/$defs/duration", "description": "How long it may run (default 10m)." }),
                    false,
                ),
                (
                    "network",
                    json!({ "type": "boolean", "description": "Whether it gets the profile's network (default false)." }),
                    false,
                ),
                (
                    "trust",
                    json!({ "type": "array", "items": { "type": "string" }, "description": "Build state in the workspace the proof trusts as the agent left it (\"target/\", \"node_modules/\"); unset, it is discarded in the evidence sandbox (rebuilt)." }),
                    false,
                ),
            ],
        )),
    );
    defs.insert(
        "files_evidence".into(),
        Value::Object(object(
            "Files, by globs relative to the workspace; each glob must name at least one file that the repository does not ignore (its ignore rules as they were when the step opened; outside a repository, a default set of build output and caches).",
            &[
                (
                    "paths",
                    json!({ "type": "array", "minItems": 1, "items": { "type": "string" } }),
                    true,
                ),
                (
                    "include_ignored",
                    json!({ "type": "boolean", "description": "Whether ignored files count too (default false)." }),
                    false,
                ),
            ],
        )),
    );
    defs.insert(
        "change_evidence".into(),
        Value::Object(object(
            "Changes as git would see them, by globs relative to the workspace: files the repository ignores (its ignore rules as they were when the step opened; outside a repository, a default set of build output and caches) do not count.",
            &[
                (
                    "paths",
                    json!({ "type": "array", "minItems": 1, "items": { "type": "string" } }),
                    true,
                ),
                (
                    "include_ignored",
                    json!({ "type": "boolean", "description": "Whether ignored files count too (default false)." }),
                    false,
                ),
            ],
        )),
    );
    defs.insert(
        "approval_evidence".into(),
        Value::Object(object(
            "A person approves out of band (`stepproof approve RUN STEP`); no answer by the deadline is a denial.",
            &[
                ("approvers", text("Who is asked, in words."), true),
                ("deadline", json!({ "$ref": "#/$defs/duration" }), true),
            ],
        )),
    );
    let models = |what: &str| {
        json!({
            "type": "array",
            "description": what,
            "maxItems": VERIFIER_MODELS_MAX,
            "uniqueItems": true,
            "items": { "type": "string", "pattern": MODEL_PATTERN }
        })
    };
    defs.insert(
        "verifiers".into(),
        Value::Object(object(
            "The models that judge `verifier` evidence, per tier, tried in order (one that cannot be reached falls to the next; past the last: inconclusive), and the bounds of one verification.",
            &[
                ("tier2", models("Tier 2 (fast): model names as Claude Code's --model takes them."), false),
                ("tier3", models("Tier 3 (thorough): model names as Claude Code's --model takes them."), false),
                (
                    "timeout",
                    json!({ "$ref": "#/$defs/duration", "description": "How long one verification may take, the whole chain (default 5m); inside the run's own --timeout." }),
                    false,
                ),
                (
                    "max_tokens",
                    json!({ "type": "integer", "minimum": 1, "description": "Tokens one verification may use, input and output over every request (default 200000); past it: inconclusive." }),
                    false,
                ),
                (
                    "show",
                    json!({ "enum": ["masked", "digests", "clear"], "description": "What a verifier is shown of the worker's text: the step's diff and the evidence commands' output tails with secret-shaped tokens masked (masked, the default), only file names and digests (digests), or as written (clear)." }),
                    false,
                ),
            ],
        )),
    );
    defs.insert(
        "verifier_evidence".into(),
        Value::Object(object(
            "A model verifier run that cannot write judges the acceptance criteria.",
            &[(
                "tier",
                json!({ "type": "integer", "minimum": 2, "maximum": 3, "description": "2: fast; 3: thorough." }),
                true,
            )],
        )),
    );
    defs
}

fn step() -> Map<String, Value> {
    object(
        "A step: what the agent is told, what it may use, and what proves it done.",
        &[
            ("id", json!({ "$ref": "#/$defs/id" }), true),
            (
                "title",
                text("One line, shown in status and summaries."),
                true,
            ),
            (
                "instructions",
                text("What the agent is told when the step opens."),
                true,
            ),
            (
                "acceptance",
                strings("Criteria in prose, shown to the agent and to model verifiers."),
                false,
            ),
            (
                "depends_on",
                strings("Ids of the steps that must be complete before this one opens."),
                false,
            ),
            (
                "allow",
                json!({ "$ref": "#/$defs/rules", "description": "Where the step has allow rules of a kind, what they do not match in that kind is denied; never more than the profile allows." }),
                false,
            ),
            (
                "deny",
                json!({ "$ref": "#/$defs/rules", "description": "Denied on top of the profile while the step is open." }),
                false,
            ),
            (
                "evidence",
                json!({ "type": "array", "minItems": 1, "items": { "$ref": "#/$defs/evidence" } }),
                true,
            ),
            (
                "on_fail",
                json!({ "enum": ["retry", "block", "abandon"], "description": "What a failed completion leads to (default retry)." }),
                false,
            ),
            (
                "max_attempts",
                json!({ "type": "integer", "minimum": 1, "maximum": MAX_ATTEMPTS_LIMIT, "description": "With on_fail = retry: completions tried in all (default 3)." }),
                false,
            ),
        ],
    )
}

fn object(description: &str, fields: &[(&str, Value, bool)]) -> Map<String, Value> {
    let mut properties = Map::new();
    let mut required = Vec::new();
    for (name, value, is_required) in fields {
        properties.insert(name.to_string(), value.clone());
        if *is_required {
            required.push(json!(name));
        }
    }
    let mut object = Map::new();
    object.insert("type".into(), json!("object"));
    object.insert("description".into(), json!(description));
    object.insert("additionalProperties".into(), json!(false));
    object.insert("required".into(), Value::Array(required));
    object.insert("properties".into(), Value::Object(properties));
    object
}

fn text(description: &str) -> Value {
    json!({ "type": "string", "description": description })
}

fn strings(description: &str) -> Value {
    json!({ "type": "array", "description": description, "items": { "type": "string" } })
}

fn list_of(reference: &str) -> Value {
    json!({ "type": "array", "items": { "$ref": reference } })
}

#[cfg(test)]
mod tests {
    use super::super::*;
    use super::*;

    /// The fields a type accepts, read from serde's own refusal of an unknown one.
    fn fields_of<T: serde::de::DeserializeOwned>() -> Vec<String> {
        let err = serde_json::from_value::<T>(json!({ "\u{1}probe": 0 }))
            .err()
            .expect("an unknown field is refused")
            .to_string();
        let expected = err
            .split("expected ")
            .nth(1)
            .unwrap_or_else(|| panic!("{err}"));
        let mut names: Vec<String> = expected
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect();
        names.sort();
        names
    }

    fn properties(schema: &Value, def: Option<&str>) -> Vec<String> {
        let object = match def {
            Some(name) => &schema["$defs"][name],
            None => schema,
        };
        assert_eq!(object["additionalProperties"], false, "{def:?}");
        let mut names: Vec<String> = object["properties"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        names.sort();
        names
    }

    #[test]
    fn every_object_has_exactly_its_types_fields() {
        let s = schema();
        assert_eq!(properties(&s, None), fields_of::<Runbook>());
        assert_eq!(properties(&s, Some("step")), fields_of::<Step>());
        assert_eq!(properties(&s, Some("rules")), fields_of::<StepRules>());
        assert_eq!(properties(&s, Some("bash_rule")), fields_of::<BashRule>());
        assert_eq!(properties(&s, Some("file_rule")), fields_of::<FileRule>());
        assert_eq!(properties(&s, Some("web_rule")), fields_of::<WebRule>());
        assert_eq!(properties(&s, Some("tool_rule")), fields_of::<ToolRule>());
        assert_eq!(properties(&s, Some("agent_rule")), fields_of::<AgentRule>());
        assert_eq!(properties(&s, Some("evidence")), fields_of::<Evidence>());
        let mut kinds: Vec<String> = EVIDENCE_KINDS.iter().map(|k| k.to_string()).collect();
        kinds.sort();
        assert_eq!(properties(&s, Some("evidence")), kinds);
        assert_eq!(
            properties(&s, Some("command_evidence")),
            fields_of::<CommandEvidence>()
        );
        assert_eq!(
            properties(&s, Some("files_evidence")),
            fields_of::<FilesEvidence>()
        );
        assert_eq!(
            properties(&s, Some("change_evidence")),
            fields_of::<ChangeEvidence>()
        );
        assert_eq!(
            properties(&s, Some("approval_evidence")),
            fields_of::<ApprovalEvidence>()
        );
        assert_eq!(
            properties(&s, Some("verifier_evidence")),
            fields_of::<VerifierEvidence>()
        );
        assert_eq!(properties(&s, Some("verifiers")), fields_of::<Verifiers>());
    }

    /// What the schema calls required is what the types cannot do without: the object with
    /// only its required fields (of the right type) deserializes; without any one, it does not.
    #[test]
    fn required_fields_are_the_types_required_fields() {
        let s = schema();
        let sample = |def: &str| -> Value {
            match def {
                "id" => json!("x"),
                "duration" => json!("1m"),
                _ => unreachable!("{def}"),
            }
        };
        let minimal = |def: &str| -> Map<String, Value> {
            let object = &s["$defs"][def];
            let mut out = Map::new();
            for name in object["required"].as_array().unwrap() {
                let name = name.as_str().unwrap();
                let property = &object["properties"][name];
                let value = match (property["type"].as_str(), property["$ref"].as_str()) {
                    (Some("string"), _) => json!("x"),
                    (Some("integer"), _) => json!(2),
                    (Some("array"), _) => json!(["x"]),
                    (_, Some(r)) => sample(r.rsplit('/').next().unwrap()),
                    _ if property.get("enum").is_some() => property["enum"][0].clone(),
                    other => panic!("{def}.{name}: {other:?}"),
                };
                out.insert(name.into(), value);
            }
            out
        };
        fn holds<T: serde::de::DeserializeOwned>(
            def: &str,
            minimal: &dyn Fn(&str) -> Map<String, Value>,
        ) {
            let full = minimal(def);
            serde_json::from_value::<T>(Value::Object(full.clone()))
                .unwrap_or_else(|e| panic!("{def}: {e}"));
            for name in full.keys() {
                let mut less = full.clone();
                less.remove(name);
                assert!(
                    serde_json::from_value::<T>(Value::Object(less)).is_err(),
                    "{def}: {name} is required by the schema, not by the type"
                );
            }
        }
        holds::<BashRule>("bash_rule", &minimal);
        holds::<FileRule>("file_rule", &minimal);
        holds::<WebRule>("web_rule", &minimal);
        holds::<ToolRule>("tool_rule", &minimal);
        holds::<AgentRule>("agent_rule", &minimal);
        holds::<CommandEvidence>("command_evidence", &minimal);
        holds::<FilesEvidence>("files_evidence", &minimal);
        holds::<ChangeEvidence>("change_evidence", &minimal);
        holds::<ApprovalEvidence>("approval_evidence", &minimal);
        holds::<VerifierEvidence>("verifier_evidence", &minimal);
    }
}
