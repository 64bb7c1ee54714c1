//! `stepproof audit verify` on an export read back: a file of OTLP/JSON lines, one
//! `ExportLogsServiceRequest` a line (what the OpenTelemetry Collector's `file` exporter
//! writes, and what the tests' receiver writes). Records of other services are skipped.
//!
//! Per run id: exact duplicates (same seq, same hash, same body) are dropped; two different
//! records at one seq are tampering; every unredacted body must hash to its
//! `stepproof.record.hash`; each record's `prev` must be the hash of the record before it; the
//! seqs must run without a gap from `stepproof.run.first_seq` to the run's `run-end` (the seal:
//! its hash is the head `stepproof-run` printed). A redacted body cannot be hashed: its place in
//! the chain is checked (its `prev`, and the next record's `prev` naming its hash), not its
//! content.

use crate::audit::chain::line_hash;
use crate::audit::export_otlp::{
    ATTR_FIRST_SEQ, ATTR_HASH, ATTR_PREV, ATTR_REDACTED, ATTR_RUN_ID, ATTR_SEQ,
};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::BufRead;

/// One record as received.
#[derive(Debug, Clone, PartialEq)]
struct Received {
    hash: String,
    prev: Option<String>,
    body: String,
    redacted: bool,
    first_seq: Option<u64>,
}

/// The verdict on one run of an export.
#[derive(Debug, Clone, Serialize)]
pub struct RunVerdict {
    pub run_id: String,
    /// `intact`, `incomplete` (records missing, or no `run-end` yet) or `broken`.
    pub status: &'static str,
    pub records: u64,
    pub duplicates_dropped: u64,
    pub redacted: u64,
    /// The hash of the run's `run-end` (its head), when it arrived.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub head: Option<String>,
    /// Seqs that did not arrive, as ranges `[first, last]`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<(u64, u64)>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
}

/// The verdict on an export.
#[derive(Debug, Clone, Serialize)]
pub struct ExportReport {
    pub runs: Vec<RunVerdict>,
    /// Log records without StepProof's attributes (other services' logs in the same file).
    pub other_records: u64,
    /// Lines that are not OTLP/JSON at all.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unreadable_lines: Vec<u64>,
}

impl ExportReport {
    pub fn broken(&self) -> bool {
        !self.unreadable_lines.is_empty() || self.runs.iter().any(|r| r.status == "broken")
    }

    pub fn incomplete(&self) -> bool {
        self.runs.iter().any(|r| r.status == "incomplete")
    }
}

/// Whether a first line looks like OTLP/JSON (an export) rather than an audit log.
pub fn is_export_line(line: &[u8]) -> bool {
    serde_json::from_slice::<Value>(line)
        .ok()
        .and_then(|v| v.get("resourceLogs").map(Value::is_array))
        .unwrap_or(false)
}

fn attr<'a>(attributes: &'a Value, key: &str) -> Option<&'a Value> {
    attributes
        .as_array()?
        .iter()
        .find(|a| a.get("key").and_then(Value::as_str) == Some(key))
        .and_then(|a| a.get("value"))
}

fn any_str(value: Option<&Value>) -> Option<String> {
    value?
        .get("stringValue")
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// OTLP/JSON writes 64-bit integers as strings; a number is taken too.
fn any_int(value: Option<&Value>) -> Option<u64> {
    let v = value?.get("intValue")?;
    v.as_u64().or_else(|| v.as_str()?.parse().ok())
}

/// Reads the export and checks every run in it (in memory: one entry per record).
pub fn verify_export<R: BufRead>(reader: R) -> std::io::Result<ExportReport> {
    let mut runs: BTreeMap<String, (BTreeMap<u64, Received>, RunVerdict)> = BTreeMap::new();
    let mut other = 0;
    let mut unreadable = Vec::new();
    let mut number = 0u64;
    crate::audit::chain::for_each_line(reader, |line| {
        number += 1;
        let bytes = match line {
            crate::audit::chain::LogLine::Terminated(b)
            | crate::audit::chain::LogLine::CutShort(b) => b,
            crate::audit::chain::LogLine::TooLong => {
                unreadable.push(number);
                return true;
            }
        };
        if bytes.trim_ascii().is_empty() {
            return true;
        }
        let Ok(request) = serde_json::from_slice::<Value>(bytes) else {
            unreadable.push(number);
            return true;
        };
        let Some(resource_logs) = request.get("resourceLogs").and_then(Value::as_array) else {
            unreadable.push(number);
            return true;
        };
        for rl in resource_logs {
            let scopes = rl.get("scopeLogs").and_then(Value::as_array);
            for sl in scopes.into_iter().flatten() {
                let records = sl.get("logRecords").and_then(Value::as_array);
                for record in records.into_iter().flatten() {
                    let attributes = record.get("attributes").cloned().unwrap_or(Value::Null);
                    let run_id = any_str(attr(&attributes, ATTR_RUN_ID));
                    let seq = any_int(attr(&attributes, ATTR_SEQ));
                    let hash = any_str(attr(&attributes, ATTR_HASH));
                    let (Some(run_id), Some(seq), Some(hash)) = (run_id, seq, hash) else {
                        other += 1;
                        continue;
                    };
                    let body = any_str(record.get("body")).unwrap_or_default();
                    let received = Received {
                        hash,
                        prev: any_str(attr(&attributes, ATTR_PREV)),
                        body,
                        redacted: attr(&attributes, ATTR_REDACTED).is_some(),
                        first_seq: any_int(attr(&attributes, ATTR_FIRST_SEQ)),
                    };
                    let (records, verdict) = runs.entry(run_id.clone()).or_insert_with(|| {
                        (
                            BTreeMap::new(),
                            RunVerdict {
                                run_id,
                                status: "intact",
                                records: 0,
                                duplicates_dropped: 0,
                                redacted: 0,
                                head: None,
                                missing: Vec::new(),
                                problems: Vec::new(),
                            },
                        )
                    });
                    match records.get(&seq) {
                        Some(earlier) if *earlier == received => verdict.duplicates_dropped += 1,
                        Some(_) => verdict.problems.push(format!(
                            "seq {seq}: two different records arrived (line {number}): one was changed"
                        )),
                        None => {
                            records.insert(seq, received);
                        }
                    }
                }
            }
        }
        true
    })?;
    let runs = runs
        .into_values()
        .map(|(records, verdict)| check_run(records, verdict))
        .collect();
    Ok(ExportReport {
        runs,
        other_records: other,
        unreadable_lines: unreadable,
    })
}

fn check_run(records: BTreeMap<u64, Received>, mut verdict: RunVerdict) -> RunVerdict {
    verdict.records = records.len() as u64;
    let mut previous: Option<(u64, &Received)> = None;
    let first_seq = records.values().find_map(|r| r.first_seq);
    let mut ended = false;
    if let (Some(first), Some((&lowest, _))) = (first_seq, records.iter().next())
        && lowest > first
    {
        verdict.missing.push((first, lowest - 1));
    }
    for (&seq, record) in &records {
        if record.redacted {
            verdict.redacted += 1;
        }
        let body: Option<serde_json::Map<String, Value>> = serde_json::from_str(&record.body).ok();
        let Some(body) = body else {
            verdict
                .problems
                .push(format!("seq {seq}: the body is not a JSON record"));
            continue;
        };
        if body.get("seq").and_then(Value::as_u64) != Some(seq) {
            verdict
                .problems
                .push(format!("seq {seq}: the body's seq is not the record's"));
        }
        let prev = body.get("prev").and_then(Value::as_str);
        if record.prev.is_some() && prev != record.prev.as_deref() {
            verdict.problems.push(format!(
                "seq {seq}: the body's prev is not the record's stepproof.record.prev"
            ));
        }
        if !record.redacted && line_hash(record.body.as_bytes()) != record.hash {
            verdict.problems.push(format!(
                "seq {seq}: the body does not hash to its stepproof.record.hash: it was changed"
            ));
        }
        match previous {
            Some((p, before)) if p + 1 == seq && prev != Some(before.hash.as_str()) => {
                verdict.problems.push(format!(
                    "seq {seq}: its prev is not the hash of seq {p}: a record was changed or moved"
                ));
            }
            Some((p, _)) if p + 1 == seq => {}
            Some((p, _)) => verdict.missing.push((p + 1, seq - 1)),
            None => {}
        }
        let source = body.get("source").and_then(Value::as_str);
        let kind = body.get("kind").and_then(Value::as_str);
        ended = source == Some("supervisor") && kind == Some("run-end");
        if ended {
            verdict.head = Some(record.hash.clone());
        }
        if Some(seq) == first_seq && kind != Some("run-start") {
            verdict.problems.push(format!(
                "seq {seq}: the run's first record is not its run-start"
            ));
        }
        previous = Some((seq, record));
    }
    verdict.status = if !verdict.problems.is_empty() {
        "broken"
    } else if !verdict.missing.is_empty() || !ended {
        "incomplete"
    } else {
        "intact"
    };
    if !ended && verdict.problems.is_empty() {
        verdict.head = None;
    }
    verdict
}

/// The text `verify` prints for one run.
pub fn describe(run: &RunVerdict) -> String {
    let mut text = format!(
        "run {}: {}: {} records ({} duplicates dropped, {} redacted)",
        run.run_id, run.status, run.records, run.duplicates_dropped, run.redacted
    );
    if let Some(head) = &run.head {
        text.push_str(&format!(", head {head}"));
    }
    for (a, b) in &run.missing {
        if a == b {
            text.push_str(&format!("\n  missing: seq {a}"));
        } else {
            text.push_str(&format!("\n  missing: seq {a} to {b}"));
        }
    }
    if run.status == "incomplete" && run.head.is_none() {
        text.push_str("\n  no run-end: the run's end has not arrived (not shipped yet, or the run was killed)");
    }
    for p in &run.problems {
        text.push_str(&format!("\n  {p}"));
    }
    text
}
