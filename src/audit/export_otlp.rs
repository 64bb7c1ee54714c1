//! One audit record as an OpenTelemetry log record (the `opentelemetry-proto` types, encoded
//! with prost), and the redaction that decides what of it is shipped.
//!
//! The body is the exact line that was hashed, unless redaction replaced something in it: then
//! the body is the record with those values replaced by `"[redacted]"`, the attribute
//! `stepproof.record.redacted` names the level, and `stepproof.record.hash` is still the hash
//! of the original line, so the chain (each `prev`) still links the shipped records and the
//! local log can be checked against the export.

use crate::audit::chain::line_hash;
use crate::audit::export_config::Redaction;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use serde_json::{Map, Value};

/// What replaces a value that is not shipped.
pub const REDACTED: &str = "[redacted]";

/// The attributes every shipped record carries: with the run's id, `(run, seq, hash)` names a
/// record exactly, so a receiver drops duplicates and sees gaps.
pub const ATTR_RUN_ID: &str = "stepproof.run.id";
pub const ATTR_SEQ: &str = "stepproof.record.seq";
pub const ATTR_HASH: &str = "stepproof.record.hash";
pub const ATTR_PREV: &str = "stepproof.record.prev";
pub const ATTR_KIND: &str = "stepproof.record.kind";
pub const ATTR_SOURCE: &str = "stepproof.record.source";
pub const ATTR_REDACTED: &str = "stepproof.record.redacted";
/// The `seq` of the run's first record (its `run-start`): a receiver that lacks the start of
/// the run knows how much.
pub const ATTR_FIRST_SEQ: &str = "stepproof.run.first_seq";

/// Keys whose values are what the agent or the person typed or ran, in any record.
const COMMAND_KEYS: &[&str] = &[
    "argv",
    "args",
    "input",
    "tool_input",
    "tool_response",
    "command",
    "commands",
    "cmd",
    "prompt",
    "reason",
    "message",
    "output",
    "stdout",
    "stderr",
    "content",
    "new_string",
    "old_string",
    "query",
    "description",
    "text",
    "last_assistant_message",
    "inferred_from",
];

/// Keys `all-text` keeps: the record's structure, never free text.
const STRUCTURE_KEYS: &[&str] = &[
    "seq",
    "prev",
    "ts_ms",
    "source",
    "kind",
    "event",
    "decision",
    "rule_id",
    "tool",
    "status",
    "profile",
    "policy_hash",
    "stepproof_version",
    "run_id",
    "isolation",
    "network",
    "mode",
    "method",
    "host",
    "port",
    "allowed",
    "answer",
    "sha256",
    "hash",
    "login",
    "session_id",
    "tool_use_id",
    "agent_id",
    "agent_type",
    "change",
    "step",
    "id",
];

/// Shortest value whose appearance elsewhere in the record is redacted too (shorter ones, such
/// as `ls`, would redact half the record by accident).
const MIN_QUOTED: usize = 6;

/// The record as shipped: `None` when nothing had to be replaced (the body is the line itself).
pub fn redact(line: &[u8], level: Redaction, extra_keys: &[String]) -> Option<String> {
    if level == Redaction::None && extra_keys.is_empty() {
        return None;
    }
    let Ok(Value::Object(mut record)) = serde_json::from_slice::<Value>(line) else {
        // Not an object (cannot be, from our writer): nothing of it is shipped.
        return Some(format!("\"{REDACTED}\""));
    };
    let mut removed: Vec<String> = Vec::new();
    let mut changed = false;
    for (key, value) in record.iter_mut() {
        if crate::audit::chain::ENVELOPE_KEYS.contains(&key.as_str()) {
            continue;
        }
        changed |= redact_value(key, value, level, extra_keys, &mut removed);
    }
    // A redacted value quoted elsewhere (a decision's reason repeats its command).
    removed.retain(|s| s.len() >= MIN_QUOTED);
    if !removed.is_empty() {
        for (key, value) in record.iter_mut() {
            if !crate::audit::chain::ENVELOPE_KEYS.contains(&key.as_str()) {
                changed |= redact_quotes(value, &removed);
            }
        }
    }
    changed.then(|| Value::Object(record).to_string())
}

fn redact_value(
    key: &str,
    value: &mut Value,
    level: Redaction,
    extra: &[String],
    removed: &mut Vec<String>,
) -> bool {
    let listed =
        extra.iter().any(|k| k == key) || (level != Redaction::None && COMMAND_KEYS.contains(&key));
    if listed {
        if matches!(value, Value::Null) || *value == Value::String(REDACTED.into()) {
            return false;
        }
        collect_strings(value, removed);
        *value = Value::String(REDACTED.into());
        return true;
    }
    match value {
        Value::Object(map) => {
            let mut changed = false;
            for (k, v) in map.iter_mut() {
                changed |= redact_value(k, v, level, extra, removed);
            }
            changed
        }
        Value::Array(items) => {
            let mut changed = false;
            for v in items.iter_mut() {
                changed |= redact_value(key, v, level, extra, removed);
            }
            changed
        }
        Value::String(s) if level == Redaction::AllText && !STRUCTURE_KEYS.contains(&key) => {
            removed.push(std::mem::take(s));
            *value = Value::String(REDACTED.into());
            true
        }
        _ => false,
    }
}

fn collect_strings(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => out.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|v| collect_strings(v, out)),
        Value::Object(map) => map.values().for_each(|v| collect_strings(v, out)),
        _ => {}
    }
}

fn redact_quotes(value: &mut Value, removed: &[String]) -> bool {
    match value {
        Value::String(s) if s != REDACTED && removed.iter().any(|r| s.contains(r.as_str())) => {
            *value = Value::String(REDACTED.into());
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

pub fn string_value(text: impl Into<String>) -> Option<AnyValue> {
    Some(AnyValue {
        value: Some(any_value::Value::StringValue(text.into())),
    })
}

pub fn kv(key: &str, value: Option<AnyValue>) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value,
        ..KeyValue::default()
    }
}

pub fn kv_str(key: &str, value: impl Into<String>) -> KeyValue {
    kv(key, string_value(value))
}

pub fn kv_int(key: &str, value: i64) -> KeyValue {
    kv(
        key,
        Some(AnyValue {
            value: Some(any_value::Value::IntValue(value)),
        }),
    )
}

/// What the shipper needs of the run to turn lines into log records.
#[derive(Debug, Clone)]
pub struct RunIdentity {
    pub run_id: String,
    pub first_seq: u64,
    pub redaction: Redaction,
    pub redact_keys: Vec<String>,
    /// The resource attributes, in order.
    pub resource: Vec<(String, String)>,
}

/// One line of the log (without its newline) as a log record; `None` when the line is not a
/// record (cannot be, from our writer).
pub fn log_record(line: &[u8], run: &RunIdentity, observed_ns: u64) -> Option<LogRecord> {
    let record: Map<String, Value> = serde_json::from_slice(line).ok()?;
    let seq = record.get("seq")?.as_u64()?;
    let text = |k: &str| record.get(k).and_then(Value::as_str).unwrap_or_default();
    let ts_ms = record.get("ts_ms").and_then(Value::as_u64).unwrap_or(0);
    let kind = text("kind");
    let denied = record
        .get("reported")
        .and_then(|r| r.get("decision"))
        .and_then(Value::as_str)
        == Some("deny");
    let redacted = redact(line, run.redaction, &run.redact_keys);
    let mut attributes = vec![
        kv_str(ATTR_RUN_ID, run.run_id.clone()),
        kv_int(ATTR_SEQ, seq as i64),
        kv_str(ATTR_HASH, line_hash(line)),
        kv_str(ATTR_PREV, text("prev")),
        kv_str(ATTR_SOURCE, text("source")),
        kv_str(ATTR_KIND, kind),
        kv_int(ATTR_FIRST_SEQ, run.first_seq as i64),
    ];
    if redacted.is_some() {
        attributes.push(kv_str(ATTR_REDACTED, run.redaction.name()));
    }
    let body = match redacted {
        Some(body) => body,
        None => String::from_utf8_lossy(line).into_owned(),
    };
    // INFO, or WARN for a denial.
    let (severity_number, severity_text) = if denied { (13, "WARN") } else { (9, "INFO") };
    Some(LogRecord {
        time_unix_nano: ts_ms.saturating_mul(1_000_000),
        observed_time_unix_nano: observed_ns,
        severity_number,
        severity_text: severity_text.to_string(),
        body: string_value(body),
        attributes,
        event_name: format!("stepproof.audit.{kind}"),
        ..LogRecord::default()
    })
}

/// One request holding `records`, under the run's resource.
pub fn request(run: &RunIdentity, records: Vec<LogRecord>) -> ExportLogsServiceRequest {
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(Resource {
                attributes: run
                    .resource
                    .iter()
                    .map(|(k, v)| kv_str(k, v.clone()))
                    .collect(),
                ..Resource::default()
            }),
            scope_logs: vec![ScopeLogs {
                scope: Some(InstrumentationScope {
                    name: "stepproof.audit".to_string(),
                    version: env!("CARGO_PKG_VERSION").to_string(),
                    ..InstrumentationScope::default()
                }),
                log_records: records,
                ..ScopeLogs::default()
            }],
            ..ResourceLogs::default()
        }],
    }
}

/// The CI job this run belongs to, from the variables each CI system sets: OpenTelemetry's
/// `cicd.*` names where they fit.
pub fn ci_attributes(env: &dyn Fn(&str) -> Option<String>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut put = |key: &str, var: &str| {
        if let Some(v) = env(var).filter(|v| !v.is_empty()) {
            out.push((key.to_string(), v));
        }
    };
    if env("GITHUB_ACTIONS").is_some() {
        put("cicd.provider.name", "GITHUB_ACTIONS");
        put("cicd.pipeline.run.id", "GITHUB_RUN_ID");
        put("cicd.pipeline.run.attempt", "GITHUB_RUN_ATTEMPT");
        put("cicd.pipeline.name", "GITHUB_WORKFLOW");
        put("cicd.pipeline.task.name", "GITHUB_JOB");
        put("vcs.repository.name", "GITHUB_REPOSITORY");
        put("vcs.ref.head.revision", "GITHUB_SHA");
    } else if env("GITLAB_CI").is_some() {
        put("cicd.provider.name", "GITLAB_CI");
        put("cicd.pipeline.run.id", "CI_PIPELINE_ID");
        put("cicd.pipeline.task.run.id", "CI_JOB_ID");
        put("cicd.pipeline.task.name", "CI_JOB_NAME");
        put("vcs.repository.name", "CI_PROJECT_PATH");
        put("vcs.ref.head.revision", "CI_COMMIT_SHA");
    } else if env("BUILDKITE").is_some() {
        put("cicd.pipeline.run.id", "BUILDKITE_BUILD_ID");
        put("cicd.pipeline.task.run.id", "BUILDKITE_JOB_ID");
        put("cicd.pipeline.name", "BUILDKITE_PIPELINE_SLUG");
    } else if env("CIRCLECI").is_some() {
        put("cicd.pipeline.run.id", "CIRCLE_WORKFLOW_ID");
        put("cicd.pipeline.task.run.id", "CIRCLE_BUILD_NUM");
        put("cicd.pipeline.task.name", "CIRCLE_JOB");
    } else if env("JENKINS_URL").is_some() {
        put("cicd.pipeline.run.id", "BUILD_TAG");
        put("cicd.pipeline.name", "JOB_NAME");
    } else if env("TF_BUILD").is_some() {
        put("cicd.pipeline.run.id", "BUILD_BUILDID");
        put("cicd.pipeline.name", "BUILD_DEFINITIONNAME");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn line(body: Value) -> Vec<u8> {
        let mut record =
            json!({ "seq": 4, "prev": "ab", "ts_ms": 1, "source": "sandbox", "kind": "decision" });
        record
            .as_object_mut()
            .unwrap()
            .extend(body.as_object().unwrap().clone());
        record.to_string().into_bytes()
    }

    #[test]
    fn commands_and_what_quotes_them_are_not_shipped() {
        let decision = line(json!({ "reported": {
            "decision": "deny", "tool": "Bash", "rule_id": "net",
            "input": "curl https://x.example/?token=hunter22",
            "reason": "StepProof denied Bash: 'curl https://x.example/?token=hunter22': raw network tools",
            "session_id": "s1" } }));
        let shipped = redact(&decision, Redaction::Commands, &[]).unwrap();
        assert!(!shipped.contains("hunter22"), "{shipped}");
        let v: Value = serde_json::from_str(&shipped).unwrap();
        assert_eq!(v["reported"]["rule_id"], "net");
        assert_eq!(v["reported"]["input"], REDACTED);
        assert_eq!(v["reported"]["reason"], REDACTED);
        assert_eq!(
            (v["seq"].clone(), v["prev"].clone()),
            (json!(4), json!("ab"))
        );
        // Nothing to replace: the line itself is the body.
        let network = line(json!({ "host": "api.anthropic.com", "allowed": true }));
        assert_eq!(redact(&network, Redaction::Commands, &[]), None);
        assert_eq!(redact(&decision, Redaction::None, &[]), None);
        // More keys, any level.
        let shipped = redact(&network, Redaction::None, &["host".into()]).unwrap();
        assert!(!shipped.contains("anthropic"), "{shipped}");
    }

    #[test]
    fn all_text_keeps_only_the_structure() {
        let start = line(
            json!({ "argv": ["claude", "-p", "fix it"], "workspace": "/home/me/secret-project",
                                 "profile": "default", "notes": ["a note about /home/me"] }),
        );
        let shipped = redact(&start, Redaction::AllText, &[]).unwrap();
        let v: Value = serde_json::from_str(&shipped).unwrap();
        assert_eq!(v["argv"], REDACTED);
        assert_eq!(v["workspace"], REDACTED);
        assert_eq!(v["notes"][0], REDACTED);
        assert_eq!(v["profile"], "default");
        assert_eq!(v["kind"], "decision");
    }

    #[test]
    fn a_record_carries_its_chain_position() {
        let run = RunIdentity {
            run_id: "r1".into(),
            first_seq: 2,
            redaction: Redaction::Commands,
            redact_keys: vec![],
            resource: vec![("service.name".into(), "stepproof".into())],
        };
        let l = line(json!({ "reported": { "decision": "deny", "input": "rm -rf /tmp/x" } }));
        let record = log_record(&l, &run, 7).unwrap();
        let attr = |k: &str| {
            record
                .attributes
                .iter()
                .find(|a| a.key == k)
                .and_then(|a| a.value.clone())
                .and_then(|v| v.value)
        };
        assert_eq!(attr(ATTR_SEQ), Some(any_value::Value::IntValue(4)));
        assert_eq!(
            attr(ATTR_HASH),
            Some(any_value::Value::StringValue(line_hash(&l)))
        );
        assert_eq!(
            attr(ATTR_REDACTED),
            Some(any_value::Value::StringValue("commands".into()))
        );
        assert_eq!(record.severity_number, 13);
        assert_eq!(record.time_unix_nano, 1_000_000);
    }
}
