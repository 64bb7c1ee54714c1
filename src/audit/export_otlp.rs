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

pub use crate::audit::export_fields::REDACTED;

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

/// The record as shipped: `None` when it ships as written (the body is the line itself). What
/// ships is decided by [`export_fields`](crate::audit::export_fields)' table.
pub fn redact(line: &[u8], level: Redaction, extra_keys: &[String]) -> Option<String> {
    crate::audit::export_fields::shipped(line, level, extra_keys)
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
    // A kind the sandbox named that the table does not know is not shipped either.
    let kind = match text("kind") {
        k if text("source") == "sandbox"
            && run.redaction != Redaction::None
            && !crate::audit::export_fields::known_kind(k) =>
        {
            REDACTED
        }
        k => k,
    };
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
    fn a_kind_the_sandbox_named_that_the_table_does_not_know_is_not_shipped() {
        let run = RunIdentity {
            run_id: "r1".into(),
            first_seq: 0,
            redaction: Redaction::Commands,
            redact_keys: vec![],
            resource: vec![],
        };
        let made_up = String::from_utf8(line(json!({})))
            .unwrap()
            .replace("\"decision\"", "\"ghp_tokenvalue\"");
        let record = log_record(made_up.as_bytes(), &run, 7).unwrap();
        let shipped = format!("{:?}", record);
        assert!(!shipped.contains("ghp_tokenvalue"), "{shipped}");
        assert_eq!(record.event_name, format!("stepproof.audit.{REDACTED}"));
        // A kind the table knows is shipped as it is.
        let record = log_record(&line(json!({})), &run, 7).unwrap();
        assert_eq!(record.event_name, "stepproof.audit.decision");
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
