//! `stepproof audit show`: the log as a readable timeline, one line per record with a summary
//! made for its kind, and the chain's verdict at the end. Everything printed from a record is
//! escaped: records reported from inside the sandbox must not drive the reader's terminal.

use crate::audit::chain::{self, ChainChecker, ChainReport, LogLine, Status, for_each_line};
use crate::audit::text::{printable, shell_word};
use serde::Serialize;
use serde_json::{Map, Value};
use std::fmt::Write as _;
use std::io::{self, BufRead};

/// Longest summary printed, in characters.
const SUMMARY_CHARS: usize = 240;

/// One line of the log, as shown.
#[derive(Debug, Clone, Serialize)]
pub struct Entry {
    /// 1-based line number in the file.
    pub line: u64,
    pub seq: Option<u64>,
    pub ts_ms: Option<u64>,
    /// `YYYY-MM-DDTHH:MM:SS.mmmZ`.
    pub time: Option<String>,
    pub source: String,
    pub kind: String,
    pub summary: String,
    /// The record as written (absent when the line is not a JSON object).
    pub record: Option<Value>,
}

/// The timeline and the chain's verdict.
#[derive(Debug, Clone, Serialize)]
pub struct Timeline {
    pub chain: ChainReport,
    pub records: Vec<Entry>,
}

/// Reads a whole log; lines that are not records are kept (as `kind: "?"`) so that a damaged
/// log still shows. Reading stops when the first line is not a record (the file is not a log)
/// and at a line longer than any record (what follows it is not worth reading through).
pub fn read_timeline<R: BufRead>(reader: R) -> io::Result<Timeline> {
    let mut records = Vec::new();
    let chain = stream_timeline(reader, |entry| records.push(entry))?;
    Ok(Timeline { chain, records })
}

/// [`read_timeline`] a record at a time: each entry goes to `on_entry` as it is read (memory
/// stays at one line), and the chain's verdict is returned at the end.
pub fn stream_timeline<R: BufRead>(
    reader: R,
    mut on_entry: impl FnMut(Entry),
) -> io::Result<ChainReport> {
    let mut checker = ChainChecker::default();
    let mut number = 0;
    for_each_line(reader, |line| {
        number += 1;
        let not_a_log = checker
            .push(line)
            .is_some_and(|b| b.line == 1 && b.not_a_record);
        match line {
            LogLine::Terminated(bytes) | LogLine::CutShort(bytes) => {
                on_entry(entry(number, bytes));
                !not_a_log
            }
            LogLine::TooLong => {
                on_entry(not_a_record_entry(
                    number,
                    format!(
                        "longer than {}; the rest of the file is not shown",
                        crate::regular_file::size_words(chain::MAX_RECORD_LINE as u64)
                    ),
                ));
                false
            }
        }
    })?;
    Ok(checker.finish(None))
}

fn not_a_record_entry(line: u64, what: String) -> Entry {
    Entry {
        line,
        seq: None,
        ts_ms: None,
        time: None,
        source: "?".into(),
        kind: "?".into(),
        summary: format!("not a record: {what}"),
        record: None,
    }
}

fn entry(line: u64, bytes: &[u8]) -> Entry {
    let Ok(Value::Object(record)) = serde_json::from_slice::<Value>(bytes) else {
        return not_a_record_entry(line, clip(&printable(&String::from_utf8_lossy(bytes))));
    };
    let text = |key: &str| record.get(key).and_then(Value::as_str).unwrap_or("?");
    let ts_ms = record.get("ts_ms").and_then(Value::as_u64);
    Entry {
        line,
        seq: record.get("seq").and_then(Value::as_u64),
        ts_ms,
        time: ts_ms.map(iso_time),
        source: printable(text("source")),
        kind: printable(text("kind")),
        summary: clip(&summarize(text("source"), text("kind"), &record)),
        record: Some(Value::Object(record)),
    }
}

/// The one-line summary for a record of this kind.
pub fn summarize(source: &str, kind: &str, record: &Map<String, Value>) -> String {
    let s = |map: &Map<String, Value>, key: &str| field(map, key);
    let summary = match (source, kind) {
        ("supervisor", "run-start") => {
            let argv = record
                .get("argv")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .map(|v| shell_word(v.as_str().unwrap_or("?")))
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .unwrap_or_default();
            let hash = s(record, "policy_hash");
            let (algorithm, digits) = hash.split_once(':').unwrap_or(("", &hash));
            let hash = format!(
                "{algorithm}{}{}",
                if algorithm.is_empty() { "" } else { ":" },
                prefix(digits, 12)
            );
            join(&[
                format!("argv: {argv}"),
                format!("profile {}", s(record, "profile")),
                format!("policy {hash}"),
                format!("stepproof {}", s(record, "stepproof_version")),
            ])
        }
        ("supervisor", "run-end") => {
            let outcome = record
                .get("outcome")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            let mut parts = vec![format!(
                "{} (exit {})",
                s(&outcome, "status"),
                s(&outcome, "exit_code")
            )];
            if let Some(signal) = outcome.get("signal") {
                parts.push(format!("signal {signal}"));
            }
            if outcome.contains_key("message") {
                parts.push(s(&outcome, "message"));
            }
            if record.contains_key("duration_ms") {
                parts.push(format!("{} ms", s(record, "duration_ms")));
            }
            if let Some(Value::Object(hook)) = record.get("hook_receiver") {
                parts.push(format!(
                    "hook records: {} accepted, {} refused peers, {} malformed, {} incomplete",
                    s(hook, "accepted"),
                    s(hook, "refused_peers"),
                    s(hook, "malformed"),
                    s(hook, "incomplete")
                ));
            }
            join(&parts)
        }
        ("supervisor", "network" | "gateway") => {
            let verdict = if record.get("allowed") == Some(&Value::Bool(true)) {
                "allowed"
            } else {
                "DENIED"
            };
            let mut parts = vec![format!(
                "{} {}:{} {verdict} ({})",
                s(record, "method"),
                s(record, "host"),
                s(record, "port"),
                s(record, "rule")
            )];
            if record.get("credential_echoed") == Some(&Value::Bool(true)) {
                parts.push(format!(
                    "the answer held credential {}",
                    s(record, "credential")
                ));
            }
            if let Some(why) = record.get("credential_echo_unchecked") {
                parts.push(format!(
                    "answer not searched for the credential: {}",
                    plain(why)
                ));
            }
            if let Some(e) = record.get("error").filter(|e| !e.is_null()) {
                parts.push(format!("error: {}", plain(e)));
            }
            join(&parts)
        }
        (_, kind) if kind.starts_with("runbook-") => runbook_summary(kind, record),
        ("supervisor", chain::RUN_END_RECOVERED) => {
            let count = |key: &str| {
                record
                    .get(key)
                    .and_then(Value::as_array)
                    .map_or(0, Vec::len)
            };
            format!(
                "ENDED BY RECOVERY: the supervisor (pid {}) died before the run's end; {} (pid {}) \
                 finished it: the sweep ({}) found {} ({} files put back as they were at \
                 launch: repository configs, what decides git's view)",
                s(record, "pid"),
                s(record, "via"),
                s(record, "recovered_by"),
                match s(record, "swept_by").as_str() {
                    "run" => "done by the run before it died",
                    _ => "done by the repair",
                },
                match count("findings") {
                    0 => "nothing".to_string(),
                    1 => "1 finding".to_string(),
                    n => format!("{n} findings"),
                },
                count("restored")
            )
        }
        ("supervisor", "torn-record-removed") => {
            let none = Map::new();
            let torn = record
                .get("torn_record")
                .and_then(Value::as_object)
                .unwrap_or(&none);
            format!(
                "a record cut short by the kill of its writer was removed: {} bytes at offset {}, \
                 sha256 {}",
                s(torn, "bytes"),
                s(torn, "at_offset"),
                prefix(&s(torn, "sha256"), 12)
            )
        }
        ("supervisor", "refused-peer") => format!(
            "REFUSED pid {} uid {} exe {} at {}: {}",
            s(record, "pid"),
            s(record, "uid"),
            s(record, "exe"),
            s(record, "stage"),
            s(record, "reason")
        ),
        ("supervisor", "denial-loop") => format!(
            "LOOP rule {} denied {} calls in session {} ({}{})",
            s(record, "rule_id"),
            s(record, "denials"),
            s(record, "session_id"),
            if record.get("stage").and_then(Value::as_str) == Some("stopped") {
                "the --ci run was ended"
            } else {
                "later denials restate what is allowed"
            },
            record
                .get("decision_seq")
                .and_then(Value::as_u64)
                .map(|seq| format!("; decision {seq}"))
                .unwrap_or_default()
        ),
        ("sandbox", kind) => {
            let reported = record
                .get("reported")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            let pid = record
                .get("peer")
                .and_then(|p| p.get("pid"))
                .map(plain)
                .unwrap_or_else(|| "?".into());
            let what = match kind {
                "decision" => {
                    let rule = if reported.contains_key("rule_id") {
                        s(&reported, "rule_id")
                    } else {
                        s(&reported, "rule")
                    };
                    join(&[
                        format!(
                            "{} {} → {}",
                            s(&reported, "event"),
                            s(&reported, "tool"),
                            s(&reported, "decision")
                        ),
                        format!("[{rule}] {}", s(&reported, "reason")),
                    ])
                }
                "evidence" => {
                    let mut parts = vec![s(&reported, "tool")];
                    for key in ["path", "sha256", "command", "exit_code", "exit_status"] {
                        if reported.contains_key(key) {
                            let value = s(&reported, key);
                            parts.push(if key == "sha256" {
                                format!("sha256 {}", prefix(&value, 12))
                            } else if key == "path" || key == "command" {
                                value
                            } else {
                                format!("exit {value}")
                            });
                        }
                    }
                    join(&parts)
                }
                _ => compact(&reported, &["kind"]),
            };
            format!("{what} (reported by pid {pid})")
        }
        _ => compact(record, &["seq", "prev", "ts_ms", "source", "kind"]),
    };
    printable(&summary)
}

/// A runbook record in one line: the step, the attempt, and what it says.
fn runbook_summary(kind: &str, record: &Map<String, Value>) -> String {
    let s = |key: &str| field(record, key);
    let mut parts = Vec::new();
    if record.contains_key("step") {
        parts.push(format!("step {}", s("step")));
    }
    if record.contains_key("attempt") {
        parts.push(format!("attempt {}", s("attempt")));
    }
    match kind {
        "runbook-step-opened" => parts.push(s("title")),
        "runbook-evidence" => {
            let held = if record.get("held") == Some(&Value::Bool(true)) {
                "held"
            } else {
                "NOT held"
            };
            // The item's kind: the envelope's `kind` moved it to `body_kind`.
            let item = s("body_kind");
            if let Some(Value::Array(run)) = record.get("run") {
                parts.push(format!(
                    "command `{}` exit {} (wanted {}) in {} ms",
                    crate::audit::text::command_line(&run.iter().map(plain).collect::<Vec<_>>()),
                    s("exit_code"),
                    s("expected_exit_code"),
                    s("duration_ms")
                ));
            } else if item == "verifier" && record.get("not_run").is_some_and(Value::is_string) {
                parts.push(format!(
                    "verifier tier {}: not started ({})",
                    s("tier"),
                    s("not_run")
                ));
            } else if item == "verifier" {
                parts.push(format!(
                    "verifier tier {}: {} by model {}{} ({} tried, {} tokens, transcript {})",
                    s("tier"),
                    s("verdict"),
                    s("model"),
                    answered_as(record),
                    record
                        .get("models_tried")
                        .and_then(Value::as_array)
                        .map_or(0, Vec::len),
                    s("tokens"),
                    prefix(&s("transcript_sha256"), 19)
                ));
            } else {
                parts.push(item);
            }
            parts.push(held.to_string());
        }
        "runbook-verifier-started" => parts.push(format!(
            "verifier tier {} started (models {}){}",
            s("tier"),
            record
                .get("models")
                .and_then(Value::as_array)
                .map(|m| m.iter().map(plain).collect::<Vec<_>>().join(" → "))
                .unwrap_or_default(),
            record
                .get("shown")
                .filter(|shown| shown.is_object())
                .map(|shown| {
                    let n = |k: &str| shown.get(k).and_then(Value::as_u64).unwrap_or(0);
                    format!(
                        ", shown {} ({} file(s) changed since {}, {} output tail(s), {} token(s) masked)",
                        shown.get("show").map(plain).unwrap_or_default(),
                        n("files_changed"),
                        shown
                            .get("diff_base")
                            .map(|b| format!("step {} opened", plain(b)))
                            .unwrap_or_else(|| "- (no diff)".into()),
                        n("output_tails"),
                        n("masked_tokens")
                    )
                })
                .unwrap_or_default()
        )),
        "runbook-verifier-attempt" => parts.push(format!(
            "verifier model {}{}: {} ({}) in {} ms, {} tokens, transcript {}",
            s("model"),
            answered_as(record),
            s("outcome"),
            prefix(&s("detail"), 120),
            s("duration_ms"),
            s("tokens"),
            prefix(&s("transcript_sha256"), 19)
        )),
        "runbook-step-failed" => parts.push(format!(
            "FAILED, {} attempt(s) left{}",
            s("attempts_left"),
            if record.get("final") == Some(&Value::Bool(true)) {
                format!(", final (on_fail {})", s("on_fail"))
            } else {
                String::new()
            }
        )),
        "runbook-step-not-approved" => parts.push(format!(
            "NOT approved ({}): the attempt not counted, {} attempt(s) left",
            s("missing"),
            s("attempts_left")
        )),
        "runbook-step-passed" => parts.push(format!(
            "passed, {}",
            crate::audit::runbook_steps::covered_text(
                record.get("covered").unwrap_or(&Value::Null)
            )
        )),
        "runbook-step-void" => parts.push(format!("pass VOID: {}", s("why"))),
        "runbook-void" => parts.push(format!(
            "VOID{}: {}",
            if record.get("completion_void") == Some(&Value::Bool(true)) {
                ", the runbook's completion with it"
            } else {
                ""
            },
            s("why")
        )),
        "runbook-approval" => {
            parts.push(if record.get("approved") == Some(&Value::Bool(true)) {
                "approved".into()
            } else {
                format!("denied: {}", s("reason"))
            });
            if record.contains_key("from") {
                parts.push(format!("from {}", s("from")));
            }
            if record.get("approver").is_some_and(|a| !a.is_null()) {
                parts.push(format!("by {}", s("approver")));
            }
            if record.get("counted") == Some(&Value::Bool(false)) {
                parts.push("not counted (another answer came first, or the wait was over)".into());
            }
        }
        "runbook-approval-refused" => parts.push(format!("answer REFUSED: {}", s("why"))),
        "runbook-approval-requested" => parts.push(format!(
            "approvers {}, deadline {}",
            s("approvers"),
            s("deadline")
        )),
        "runbook-continued" => parts.push(format!(
            "continues run {} (log head {})",
            s("continues"),
            s("log_head")
        )),
        "runbook-ended" => parts.push(format!("ended: {}", s("ending"))),
        "runbook-complete" => parts.push("complete".into()),
        _ => parts.push(compact(
            record,
            &[
                "seq", "prev", "ts_ms", "source", "kind", "step", "attempt", "peer",
            ],
        )),
    }
    join(&parts)
}

/// The first `n` characters (records are untrusted: never cut inside a character).
/// ` (answered as M)` when a verifier's record says another model answered than was asked for.
fn answered_as(record: &serde_json::Map<String, Value>) -> String {
    match record.get("model_used") {
        Some(used) if record.get("model_differs") == Some(&Value::Bool(true)) => {
            format!(" (answered as {})", plain(used))
        }
        _ => String::new(),
    }
}

fn prefix(text: &str, n: usize) -> String {
    text.chars().take(n).collect()
}

fn join(parts: &[String]) -> String {
    parts.join(" · ")
}

/// A value as short text: strings bare, absent as `?`, anything else as JSON.
fn field(map: &Map<String, Value>, key: &str) -> String {
    map.get(key).map(plain).unwrap_or_else(|| "?".into())
}

fn plain(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `key=value` pairs of what is left once `skip` is removed.
fn compact(map: &Map<String, Value>, skip: &[&str]) -> String {
    map.iter()
        // A null says nothing a missing key would not.
        .filter(|(k, v)| !skip.contains(&k.as_str()) && !v.is_null())
        .map(|(k, v)| format!("{k}={}", plain(v)))
        .collect::<Vec<_>>()
        .join(" ")
}

fn clip(text: &str) -> String {
    match text.char_indices().nth(SUMMARY_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

/// `(YYYY-MM-DD, HH:MM:SS.mmm)` in UTC.
pub fn utc_parts(ts_ms: u64) -> (String, String) {
    let days = (ts_ms / 86_400_000) as i64;
    let ms_of_day = ts_ms % 86_400_000;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (
        format!("{year:04}-{month:02}-{day:02}"),
        format!(
            "{:02}:{:02}:{:02}.{:03}",
            ms_of_day / 3_600_000,
            ms_of_day / 60_000 % 60,
            ms_of_day / 1000 % 60,
            ms_of_day % 1000
        ),
    )
}

fn iso_time(ts_ms: u64) -> String {
    let (date, time) = utc_parts(ts_ms);
    format!("{date}T{time}Z")
}

/// The timeline as text: a date heading whenever the (UTC) day changes, one line per record,
/// then the chain's verdict.
pub fn render_text(timeline: &Timeline) -> String {
    let mut text = TextTimeline::default();
    let mut out = String::new();
    for e in &timeline.records {
        out.push_str(&text.entry(e));
    }
    out.push_str(&text.end(&timeline.chain));
    out
}

/// The text timeline an entry at a time: a date line when the day changes, one line per
/// record, and at the end the note on sandbox records and the chain's verdict.
#[derive(Default)]
pub struct TextTimeline {
    day: String,
    sandbox: bool,
    /// The runbook's steps, printed after the records.
    steps: crate::audit::runbook_steps::StepTable,
}

impl TextTimeline {
    pub fn entry(&mut self, e: &Entry) -> String {
        let mut out = String::new();
        let (date, time) = e
            .ts_ms
            .map(utc_parts)
            .unwrap_or_else(|| ("?".into(), "??:??:??.???".into()));
        if date != self.day {
            let _ = writeln!(out, "{date} (UTC)");
            self.day = date;
        }
        self.sandbox |= e.source == "sandbox";
        if let Some(record) = &e.record {
            self.steps.add(record);
        }
        let seq = e.seq.map_or("?".to_string(), |s| s.to_string());
        let _ = writeln!(
            out,
            "  {time}  #{seq:<5} {:<10} {:<14} {}",
            e.source, e.kind, e.summary
        );
        out
    }

    pub fn end(&self, chain: &ChainReport) -> String {
        let mut out = self.steps.text();
        if self.sandbox {
            out.push_str(
                "(sandbox: reported from inside the sandbox by the hook binary; it shows what \
                 was decided, not who asked)\n",
            );
        }
        out.push_str(&chain_verdict(chain));
        out
    }
}

/// `chain: intact, …` (and whether a run lacks its end) or `chain: BROKEN at line …`.
pub fn chain_verdict(report: &ChainReport) -> String {
    let intact = format!(
        "chain: intact, {} records, head {}\n",
        report.records, report.head
    );
    match (&report.broken, report.status) {
        (Some(b), _) if b.line == 0 => format!("chain: BROKEN: {}\n", printable(&b.problem)),
        (Some(b), _) => format!(
            "chain: BROKEN at line {}: {}\n       (the {} records before it are intact, head {})\n",
            b.line,
            printable(&b.problem),
            report.records,
            report.head
        ),
        (None, Status::Incomplete) if !report.runs_recovered.is_empty() => format!(
            "{intact}       INCOMPLETE: {}\n       ENDED BY RECOVERY: {}\n",
            runs_without_end(report),
            runs_recovered(report)
        ),
        (None, Status::Incomplete) => {
            format!("{intact}       INCOMPLETE: {}\n", runs_without_end(report))
        }
        (None, Status::InProgress) => {
            format!("{intact}       IN PROGRESS: {}\n", runs_without_end(report))
        }
        (None, Status::Recovered) => {
            format!(
                "{intact}       ENDED BY RECOVERY: {}\n",
                runs_recovered(report)
            )
        }
        (None, _) => intact,
    }
}

/// Which runs were ended by a repair (`run-end-recovered`), and what that means.
pub fn runs_recovered(report: &ChainReport) -> String {
    let which = match report.runs_recovered.as_slice() {
        [one] => format!("the run that starts at line {one} was"),
        more => format!(
            "the runs that start at lines {} were",
            more.iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    format!(
        "{which} ended by recovery (run-end-recovered): the supervisor died before the end, and \
         `stepproof repair` or the next run on the workspace swept what the run left and wrote \
         the end; what the run did after the supervisor's last record is not in the log"
    )
}

/// Which runs have no `run-end`, and what that means.
pub fn runs_without_end(report: &ChainReport) -> String {
    let lines = &report.runs_without_end;
    let which = match lines.as_slice() {
        [one] => format!("the run that starts at line {one} has"),
        more => format!(
            "the runs that start at lines {} have",
            more.iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    if report.status == Status::InProgress {
        format!(
            "{which} no run-end record yet, and another process holds the log's lock: it is \
             still being written"
        )
    } else {
        format!(
            "{which} no run-end record: killed or crashed before its end, or the log was cut \
             after it"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn summary(source: &str, kind: &str, v: Value) -> String {
        summarize(source, kind, v.as_object().unwrap())
    }

    #[test]
    fn each_kind_has_its_summary() {
        assert_eq!(
            summary(
                "supervisor",
                "run-start",
                json!({ "argv": ["claude", "-p", "fix it"], "profile": "default",
                        "policy_hash": "sha256:0123456789abcdef", "stepproof_version": "0.1.0" })
            ),
            "argv: claude -p 'fix it' · profile default · policy sha256:0123456789ab · stepproof 0.1.0"
        );
        assert_eq!(
            summary(
                "supervisor",
                "network",
                json!({ "method": "CONNECT", "host": "evil.example", "port": 443,
                        "allowed": false, "rule": "not in the allow-list", "error": null })
            ),
            "CONNECT evil.example:443 DENIED (not in the allow-list)"
        );
        assert_eq!(
            summary(
                "supervisor",
                "denial-loop",
                json!({ "rule_id": "net-tools", "denials": 3, "session_id": "s1",
                        "stage": "restated", "decision_seq": 12, "stop": false })
            ),
            "LOOP rule net-tools denied 3 calls in session s1 (later denials restate what is allowed; decision 12)"
        );
        assert_eq!(
            summary(
                "supervisor",
                "denial-loop",
                json!({ "rule_id": "r", "denials": 6, "session_id": "s1", "stage": "stopped",
                        "decision_seq": null })
            ),
            "LOOP rule r denied 6 calls in session s1 (the --ci run was ended)"
        );
        assert_eq!(
            summary(
                "supervisor",
                "network",
                json!({ "method": "GET", "host": "git.test", "port": 443, "allowed": true,
                        "rule": "credential gh", "credential": "gh", "credential_echoed": true })
            ),
            "GET git.test:443 allowed (credential gh) · the answer held credential gh"
        );
        assert_eq!(
            summary(
                "supervisor",
                "gateway",
                json!({ "method": "POST", "host": "api.test", "port": 443, "allowed": true,
                        "rule": "credential gateway", "credential": "model-login",
                        "credential_echo_unchecked": "content-encoding gzip" })
            ),
            "POST api.test:443 allowed (credential gateway) · answer not searched for the credential: content-encoding gzip"
        );
        assert_eq!(
            summary(
                "supervisor",
                "run-end",
                json!({ "outcome": { "status": "exited", "exit_code": 3, "command_exit_code": 3 },
                        "hook_receiver": { "accepted": 2, "refused_peers": 1, "malformed": 0,
                                           "incomplete": 0 } })
            ),
            "exited (exit 3) · hook records: 2 accepted, 1 refused peers, 0 malformed, 0 incomplete"
        );
        assert_eq!(
            summary(
                "sandbox",
                "decision",
                json!({ "peer": { "pid": 42 }, "reported": { "kind": "decision",
                        "event": "PreToolUse", "tool": "Bash", "decision": "deny",
                        "rule_id": "no-curl", "reason": "network tools\u{1b}[2J" } })
            ),
            "PreToolUse Bash → deny · [no-curl] network tools\\u{1b}[2J (reported by pid 42)"
        );
        assert_eq!(
            summary(
                "sandbox",
                "evidence",
                json!({ "peer": { "pid": 7 }, "reported": { "tool": "Write", "path": "src/a.rs",
                        "sha256": "ffeeddccbbaa99887766" } })
            ),
            "Write · src/a.rs · sha256 ffeeddccbbaa (reported by pid 7)"
        );
        assert_eq!(
            summary(
                "sandbox",
                "evidence",
                json!({ "reported": { "tool": "Write", "sha256": "ééééééééééééé" } })
            ),
            "Write · sha256 éééééééééééé (reported by pid ?)"
        );
        assert_eq!(
            summary(
                "supervisor",
                "torn-record-removed",
                json!({ "torn_record": { "bytes": 20, "at_offset": 812,
                        "sha256": "0123456789abcdef0123" } })
            ),
            "a record cut short by the kill of its writer was removed: 20 bytes at offset 812, \
             sha256 0123456789ab"
        );
        assert_eq!(
            summary("supervisor", "sweep", json!({ "seq": 1, "files": 3 })),
            "files=3"
        );
    }

    #[test]
    fn times_are_utc() {
        assert_eq!(
            utc_parts(0),
            ("1970-01-01".to_string(), "00:00:00.000".to_string())
        );
        assert_eq!(
            utc_parts(1_709_251_199_999),
            ("2024-02-29".to_string(), "23:59:59.999".to_string())
        );
        assert_eq!(iso_time(951_782_400_001), "2000-02-29T00:00:00.001Z");
    }

    #[test]
    fn terminal_controls_are_escaped() {
        assert_eq!(
            printable("a\u{1b}]0;x\u{7}b\u{202e}c\n"),
            "a\\u{1b}]0;x\\u{7}b\\u{202e}c\\u{a}"
        );
    }
}
