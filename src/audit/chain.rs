//! The chain itself: how a record becomes a line, what a line's hash is, and the check that
//! walks a log line by line (the format is described in the module above).

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::fmt;
use std::io::{self, BufRead};

/// `prev` of the first record.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The envelope keys, in the order they are written; a body cannot override them.
pub const ENVELOPE_KEYS: [&str; 5] = ["seq", "prev", "ts_ms", "source", "kind"];

/// The longest line (without its `\n`) the writer puts in a log and a reader takes from one:
/// a record from inside is at most [`MAX_LINE`](crate::audit::receiver::MAX_LINE) (64 KiB)
/// before its envelope; the supervisor's largest (`run-start` with the command line, `sweep`
/// with its findings) are kilobytes in practice, but not bounded by anything else, so the
/// writer replaces a longer one with its size and hash ([`oversized_body`]). A reader holds
/// one line at a time, so verifying a log of any size needs no more memory than this.
pub const MAX_RECORD_LINE: usize = 16 << 20;

/// Lowercase hex SHA-256 of one line's bytes (without its trailing newline).
pub fn line_hash(line: &[u8]) -> String {
    hex::encode(Sha256::digest(line))
}

#[derive(Serialize)]
struct Envelope<'a> {
    seq: u64,
    prev: &'a str,
    ts_ms: u64,
    source: &'a str,
    kind: &'a str,
    #[serde(flatten)]
    body: &'a Map<String, Value>,
}

/// A record's body as an object: an object stays one (minus envelope keys, which are moved
/// under `body_<key>` so that nothing is lost and nothing overrides the envelope), `null`
/// becomes empty, anything else goes under `body`.
pub fn body_object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(mut map) => {
            for key in ENVELOPE_KEYS {
                if let Some(v) = map.remove(key) {
                    map.insert(format!("body_{key}"), v);
                }
            }
            map
        }
        Value::Null => Map::new(),
        other => Map::from_iter([("body".to_string(), other)]),
    }
}

/// What the writer records instead of a body whose line would be longer than
/// [`MAX_RECORD_LINE`]: the size and hash of the line that was not written.
pub fn oversized_body(line: &[u8]) -> Map<String, Value> {
    Map::from_iter([(
        "record_too_long".to_string(),
        serde_json::json!({
            "bytes": line.len(),
            "sha256": line_hash(line),
            "max_bytes": MAX_RECORD_LINE,
        }),
    )])
}

/// One record as the bytes of its line, without the trailing newline.
pub fn format_line(
    seq: u64,
    prev: &str,
    ts_ms: u64,
    source: &str,
    kind: &str,
    body: &Map<String, Value>,
) -> Vec<u8> {
    let envelope = Envelope {
        seq,
        prev,
        ts_ms,
        source,
        kind,
        body,
    };
    // A map with string keys and JSON values always serialises.
    serde_json::to_vec(&envelope).unwrap_or_default()
}

/// The first line where the chain breaks, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Broken {
    /// 1-based line number (0: the log is empty but should end at a head).
    pub line: u64,
    pub problem: String,
    /// The line is not a record StepProof writes at all (on line 1: the file is not a log).
    #[serde(skip)]
    pub not_a_record: bool,
}

/// The verdict on a log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    /// The chain holds and every run in it has its `run-end`.
    Intact,
    /// The chain holds, but a run has no `run-end`: it was killed or crashed, or the log was
    /// cut after it.
    Incomplete,
    /// As `Incomplete`, but only the last run lacks its end and a writer still holds the log.
    InProgress,
    /// The chain holds and every run has an end, but a run's end was written by a repair
    /// (`run-end-recovered`): its supervisor died before it, and what the run did between the
    /// supervisor's last record and its death is not in the log.
    Recovered,
    Broken,
}

/// The kind of the record a repair writes for a run whose supervisor died before its end
/// (`stepproof repair`, or the next `stepproof-run` on the workspace): from the supervisor,
/// naming the run by the `seq` of its `run-start` ([`RUN_START_SEQ`]).
pub const RUN_END_RECOVERED: &str = "run-end-recovered";
/// The field of a `run-end-recovered` record that names the run it ends.
pub const RUN_START_SEQ: &str = "run_start_seq";

/// What [`verify`] found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChainReport {
    pub status: Status,
    /// The chain holds (whether or not every run has its end).
    pub intact: bool,
    /// Records before the first broken line (all of them when intact).
    pub records: u64,
    /// Hash of the last intact line (`GENESIS` when there is none).
    pub head: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected_head: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub broken: Option<Broken>,
    /// `run-start` records (from the supervisor) in the intact part.
    pub runs: u64,
    /// The line of each run's `run-start` whose run has no `run-end` before the next run's
    /// start or the end of the log.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub runs_without_end: Vec<u64>,
    /// The line of each run's `run-start` whose end is a `run-end-recovered` record: its
    /// supervisor died, and a repair finished its end.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub runs_recovered: Vec<u64>,
    /// The last of `runs_without_end` is the log's last run (a writer may still be at it).
    #[serde(skip)]
    last_run_open: bool,
}

impl ChainReport {
    /// A writer holds the log: a last run without its end is being written, not cut short.
    pub fn writer_is_live(&mut self) {
        if self.status == Status::Incomplete
            && self.last_run_open
            && self.runs_without_end.len() == 1
        {
            self.status = Status::InProgress;
        }
    }

    /// Why the log is not a StepProof audit log at all, when it is not: empty (and no head
    /// says records were expected), or its first line is not one of our records.
    pub fn not_a_log(&self) -> Option<String> {
        if self.records > 0 {
            return None;
        }
        match &self.broken {
            None => Some("empty: no records to verify".to_string()),
            Some(b) if b.line == 1 && b.not_a_record => Some(format!(
                "not a StepProof audit log: line 1 is {}",
                b.problem
            )),
            Some(_) => None,
        }
    }
}

/// One line of a log as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLine<'a> {
    /// A line that ended in `\n` (not included).
    Terminated(&'a [u8]),
    /// The last bytes of the input, without a `\n`.
    CutShort(&'a [u8]),
    /// Longer than [`MAX_RECORD_LINE`]: not kept (and skipped up to its `\n` if reading goes
    /// on).
    TooLong,
}

/// Walks a log line by line; stops looking at the first broken line.
pub struct ChainChecker {
    records: u64,
    head: String,
    broken: Option<Broken>,
    runs: u64,
    /// The `run-start` line of the run that has not ended yet.
    open_run: Option<u64>,
    /// `run-start` lines of runs followed by another run's start before their end.
    unfinished: Vec<u64>,
    /// `run-start` lines of runs a `run-end-recovered` ended.
    recovered: Vec<u64>,
}

impl Default for ChainChecker {
    fn default() -> Self {
        ChainChecker {
            records: 0,
            head: GENESIS.to_string(),
            broken: None,
            runs: 0,
            open_run: None,
            unfinished: Vec::new(),
            recovered: Vec::new(),
        }
    }
}

/// A line that is not a record (as opposed to a record out of place).
fn not_a_record(problem: impl Into<String>) -> (String, bool) {
    (format!("not a record: {}", problem.into()), true)
}

impl ChainChecker {
    /// Feeds the next line. Returns the problem when this line is the first broken one.
    pub fn push(&mut self, line: LogLine<'_>) -> Option<&Broken> {
        if self.broken.is_some() {
            return None;
        }
        let number = self.records + 1;
        let checked = match line {
            LogLine::Terminated(bytes) => self.check(number, bytes).map(|e| (e, bytes)),
            LogLine::CutShort(bytes) => Err(cut_short(bytes)),
            LogLine::TooLong => Err(not_a_record(format!(
                "longer than {} (the longest line StepProof writes)",
                crate::regular_file::size_words(MAX_RECORD_LINE as u64)
            ))),
        };
        match checked {
            Ok((envelope, bytes)) => {
                self.records = number;
                self.head = line_hash(bytes);
                if envelope.source == "supervisor" {
                    match envelope.kind.as_str() {
                        "run-start" => {
                            self.runs += 1;
                            if let Some(open) = self.open_run.replace(number) {
                                self.unfinished.push(open);
                            }
                        }
                        "run-end" => self.open_run = None,
                        RUN_END_RECOVERED => {
                            // The run whose start it names, if that run has no end yet (a
                            // repair that ran twice, or after the run's own end, changes
                            // nothing).
                            if let Some(start) = envelope.recovers.map(|seq| seq + 1) {
                                if self.open_run == Some(start) {
                                    self.open_run = None;
                                    self.recovered.push(start);
                                } else if let Some(i) =
                                    self.unfinished.iter().position(|&l| l == start)
                                {
                                    self.unfinished.remove(i);
                                    self.recovered.push(start);
                                }
                            }
                        }
                        _ => {}
                    }
                }
                None
            }
            Err((problem, not_a_record)) => {
                self.broken = Some(Broken {
                    line: number,
                    problem,
                    not_a_record,
                });
                self.broken.as_ref()
            }
        }
    }

    fn check(&self, number: u64, line: &[u8]) -> Result<Checked, (String, bool)> {
        let fields = read_envelope(line)?;
        let expected_seq = number - 1;
        let Some(Field::Count(seq)) = fields.seq else {
            return Err(not_a_record("no numeric `seq`"));
        };
        let Some(Field::Text(prev)) = fields.prev else {
            return Err(not_a_record("no `prev` hash"));
        };
        let (Some(Field::Text(source)), Some(Field::Text(kind))) = (fields.source, fields.kind)
        else {
            return Err(not_a_record("no `source` or `kind`"));
        };
        if seq > expected_seq {
            return Err((
                format!(
                    "seq is {seq}, expected {expected_seq}: records are missing before this \
                     line (removed, or lines moved)"
                ),
                false,
            ));
        }
        if seq < expected_seq {
            return Err((
                format!(
                    "seq is {seq}, expected {expected_seq}: a line was inserted, repeated or \
                     moved here"
                ),
                false,
            ));
        }
        if prev != self.head {
            return Err((
                if number == 1 {
                    format!("`prev` is {prev}, not the genesis hash: the log does not start here")
                } else {
                    format!(
                        "`prev` does not match the hash of line {}: line {} was changed, or \
                         this line does not belong after it",
                        number - 1,
                        number - 1
                    )
                },
                false,
            ));
        }
        let recovers = match fields.run_start_seq {
            Some(Field::Count(seq)) if seq < expected_seq => Some(seq),
            _ => None,
        };
        Ok(Checked {
            source,
            kind,
            recovers,
        })
    }

    /// The verdict; with `expected_head`, an intact chain must also end at that hash.
    pub fn finish(self, expected_head: Option<&str>) -> ChainReport {
        let mut broken = self.broken;
        let expected_head = expected_head.map(|h| h.trim().to_ascii_lowercase());
        if broken.is_none()
            && let Some(expected) = &expected_head
            && *expected != self.head
        {
            let problem = if self.records == 0 {
                format!(
                    "the log is empty, not ending at the expected head {expected}: every record \
                     was removed, or the head is another log's"
                )
            } else {
                format!(
                    "the chain ends at {} after {} records, not at the expected head {expected}: \
                     records were removed from the end, the last line was changed, or records \
                     were added after the head was taken",
                    self.head, self.records
                )
            };
            broken = Some(Broken {
                line: self.records,
                problem,
                not_a_record: false,
            });
        }
        let mut runs_without_end = self.unfinished;
        runs_without_end.extend(self.open_run);
        let mut runs_recovered = self.recovered;
        runs_recovered.sort_unstable();
        let status = if broken.is_some() {
            Status::Broken
        } else if !runs_without_end.is_empty() {
            Status::Incomplete
        } else if !runs_recovered.is_empty() {
            Status::Recovered
        } else {
            Status::Intact
        };
        ChainReport {
            status,
            intact: broken.is_none(),
            records: self.records,
            head: self.head,
            expected_head,
            broken,
            runs: self.runs,
            runs_without_end,
            runs_recovered,
            last_run_open: self.open_run.is_some(),
        }
    }
}

/// The last line of the input has no `\n`: a record torn by an interrupted write (or a file cut
/// in the middle of one), unless it is not even the start of a JSON object.
fn cut_short(line: &[u8]) -> (String, bool) {
    let starts_an_object = line.trim_ascii_start().first() == Some(&b'{')
        && match serde_json::from_slice::<IgnoredAny>(line) {
            Ok(_) => true,
            Err(e) => e.is_eof(),
        };
    if !starts_an_object {
        return not_a_record("not JSON, and no newline at its end");
    }
    (
        "cut short: no newline at its end (an interrupted write, or the file was cut in the \
         middle of a record)"
            .to_string(),
        false,
    )
}

/// Whether `tail` (bytes after the last newline) is the beginning of the record the chain
/// expects next, as the writer lays it out: `{"seq":N,` with N = `next_seq` (or a shorter cut
/// of that), and JSON that only ends too early.
fn starts_record(tail: &[u8], next_seq: u64) -> bool {
    let expected = format!("{{\"seq\":{next_seq},");
    let expected = expected.as_bytes();
    let prefix_fits = if tail.len() <= expected.len() {
        expected.starts_with(tail)
    } else {
        tail.starts_with(expected)
    };
    prefix_fits && !cut_short(tail).1
}

/// What the check keeps of a record's envelope.
struct Checked {
    source: String,
    kind: String,
    /// `run_start_seq` of the body, when it is a number before this record.
    recovers: Option<u64>,
}

/// The envelope fields of one line, which must be a JSON object; the rest of the object is
/// checked as JSON but not kept.
#[derive(Deserialize)]
struct EnvelopeFields {
    seq: Option<Field>,
    prev: Option<Field>,
    source: Option<Field>,
    kind: Option<Field>,
    /// A `run-end-recovered` record's run (see [`RUN_START_SEQ`]).
    run_start_seq: Option<Field>,
}

fn read_envelope(line: &[u8]) -> Result<EnvelopeFields, (String, bool)> {
    // serde would take an array for a struct, field by field.
    if line.trim_ascii_start().first() != Some(&b'{') {
        return Err(match serde_json::from_slice::<IgnoredAny>(line) {
            Ok(_) => not_a_record("JSON, but not an object"),
            Err(e) => not_a_record(format!("not JSON ({e})")),
        });
    }
    serde_json::from_slice::<EnvelopeFields>(line).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => not_a_record(format!("{e}")),
        _ => not_a_record(format!("not JSON ({e})")),
    })
}

/// An envelope field as the check needs it: a non-negative integer, a string, or anything else
/// (not kept, so a huge array in its place costs nothing).
enum Field {
    Count(u64),
    Text(String),
    Other,
}

impl<'de> Deserialize<'de> for Field {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Field, D::Error> {
        struct FieldVisitor;
        impl<'de> Visitor<'de> for FieldVisitor {
            type Value = Field;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Field, E> {
                Ok(Field::Other)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Field, E> {
                Ok(u64::try_from(v).map_or(Field::Other, Field::Count))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Field, E> {
                Ok(Field::Count(v))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Field, E> {
                Ok(Field::Other)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Field, E> {
                Ok(Field::Text(v.to_string()))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Field, E> {
                Ok(Field::Other)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Field, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Field::Other)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Field, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Field::Other)
            }
        }
        deserializer.deserialize_any(FieldVisitor)
    }
}

/// Checks a whole log: every line parses, `seq` counts from 0, every `prev` is the hash of the
/// line before, every run has its end; with `expected_head`, the last line hashes to it. Reads
/// one line at a time and stops at the first broken one.
pub fn verify<R: BufRead>(reader: R, expected_head: Option<&str>) -> io::Result<ChainReport> {
    let mut checker = ChainChecker::default();
    for_each_line(reader, |line| checker.push(line).is_none())?;
    Ok(checker.finish(expected_head))
}

/// Calls `f` with each line until `f` returns false or the input ends. A line longer than
/// [`MAX_RECORD_LINE`] is reported as [`LogLine::TooLong`] as soon as that is known, and the
/// rest of it is only read (and dropped) if `f` wants more: memory stays at one line.
pub fn for_each_line<R: BufRead>(
    mut reader: R,
    mut f: impl FnMut(LogLine<'_>) -> bool,
) -> io::Result<()> {
    let mut buf = Vec::new();
    // Inside a line already reported as too long: dropping bytes up to its `\n`.
    let mut skipping = false;
    loop {
        let available = match reader.fill_buf() {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            if !skipping && !buf.is_empty() {
                f(LogLine::CutShort(&buf));
            }
            return Ok(());
        }
        let newline = available.iter().position(|&b| b == b'\n');
        let used = newline.map_or(available.len(), |i| i + 1);
        if skipping {
            reader.consume(used);
            skipping = newline.is_none();
            continue;
        }
        let chunk = &available[..newline.unwrap_or(available.len())];
        if buf.len() + chunk.len() > MAX_RECORD_LINE {
            reader.consume(used);
            buf.clear();
            if !f(LogLine::TooLong) {
                return Ok(());
            }
            skipping = newline.is_none();
            continue;
        }
        buf.extend_from_slice(chunk);
        reader.consume(used);
        if newline.is_some() {
            let go_on = f(LogLine::Terminated(&buf));
            buf.clear();
            if !go_on {
                return Ok(());
            }
        }
    }
}

/// Where a reopened log goes on: the chain position after its last complete record, and the
/// record a killed writer left half written after it, if any.
#[derive(Debug, PartialEq, Eq)]
pub struct Resume {
    /// The `seq` of the next record.
    pub next_seq: u64,
    /// The hash of the last complete record (the genesis hash before the first).
    pub head: String,
    /// The bytes after the last `\n`, when they are the start of the next record: a write cut
    /// short (its writer killed by a signal between two pages of the copy, or the disk full).
    /// The writer never counted that record in its chain, so the log goes on from the record
    /// before it once these bytes are cut off and their length and hash recorded.
    pub torn: Option<Vec<u8>>,
}

/// The chain position after the last line of an existing log, so that a reopened log goes on
/// where it ended. The last line must be a complete record or the start of the next one (see
/// [`Resume::torn`]); anything else is refused: it is not a StepProof audit log.
pub fn resume_point<R: BufRead>(reader: R) -> io::Result<Resume> {
    enum Last {
        Nothing,
        Line,
        TooLong,
    }
    // The last complete line, and what follows it (a line too long, or a cut-short tail).
    let mut last = Last::Nothing;
    let mut bytes = Vec::new();
    let mut tail: Option<Vec<u8>> = None;
    let mut after_too_long = false;
    for_each_line(reader, |line| {
        match line {
            LogLine::Terminated(b) => {
                bytes.clear();
                bytes.extend_from_slice(b);
                last = Last::Line;
            }
            LogLine::CutShort(b) => {
                after_too_long = matches!(last, Last::TooLong);
                tail = Some(b.to_vec());
            }
            LogLine::TooLong => last = Last::TooLong,
        }
        true
    })?;
    let invalid = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
    let (next_seq, head) = match last {
        Last::Nothing => (0, GENESIS.to_string()),
        Last::TooLong => {
            return Err(invalid(
                "its last line is longer than any record; not a StepProof audit log",
            ));
        }
        Last::Line => {
            let seq = serde_json::from_slice::<Value>(&bytes)
                .ok()
                .and_then(|v| v.get("seq").and_then(Value::as_u64))
                .ok_or_else(|| {
                    invalid("its last line is not a chained record; not a StepProof audit log")
                })?;
            (seq + 1, line_hash(&bytes))
        }
    };
    if let Some(tail) = &tail
        && (after_too_long || !starts_record(tail, next_seq))
    {
        return Err(invalid(
            "its last line is cut short and is not the start of the next record; not a \
             StepProof audit log",
        ));
    }
    Ok(Resume {
        next_seq,
        head,
        torn: tail,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn chain(n: u64) -> Vec<Vec<u8>> {
        let mut prev = GENESIS.to_string();
        (0..n)
            .map(|seq| {
                let body = body_object(json!({ "n": seq }));
                let line = format_line(seq, &prev, 1000 + seq, "supervisor", "test", &body);
                prev = line_hash(&line);
                line
            })
            .collect()
    }

    fn file(lines: &[Vec<u8>]) -> Vec<u8> {
        lines
            .iter()
            .flat_map(|l| [l.as_slice(), b"\n"].concat())
            .collect()
    }

    fn check(bytes: &[u8], head: Option<&str>) -> ChainReport {
        verify(bytes, head).unwrap()
    }

    #[test]
    fn the_envelope_comes_first_and_cannot_be_overridden() {
        let body = body_object(json!({ "seq": 9, "kind": "x", "a": 1 }));
        let line = format_line(3, GENESIS, 5, "sandbox", "decision", &body);
        let text = String::from_utf8(line).unwrap();
        assert!(text.starts_with(&format!(
            r#"{{"seq":3,"prev":"{GENESIS}","ts_ms":5,"source":"sandbox","kind":"decision","#
        )));
        let value: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["seq"], 3);
        assert_eq!(value["body_seq"], 9);
        assert_eq!(value["body_kind"], "x");
        assert_eq!(
            body_object(json!("s")),
            Map::from_iter([("body".into(), json!("s"))])
        );
        assert!(body_object(Value::Null).is_empty());
    }

    #[test]
    fn an_intact_chain_verifies_and_ends_at_its_head() {
        let lines = chain(5);
        let head = line_hash(&lines[4]);
        let report = check(&file(&lines), Some(&head.to_uppercase()));
        assert!(report.intact, "{report:?}");
        assert_eq!((report.records, report.head), (5, head));
        let empty = check(b"", Some(GENESIS));
        assert!(empty.intact);
        assert_eq!(empty.records, 0);
    }

    #[test]
    fn each_kind_of_damage_names_the_first_broken_line() {
        let lines = chain(6);
        let broken = |lines: &[Vec<u8>]| check(&file(lines), None).broken.unwrap();

        let mut edited = lines.clone();
        edited[2] = String::from_utf8(edited[2].clone())
            .unwrap()
            .replace(r#""n":2"#, r#""n":7"#)
            .into_bytes();
        let b = broken(&edited);
        assert_eq!(b.line, 4);
        assert!(b.problem.contains("line 3 was changed"), "{b:?}");

        let mut deleted = lines.clone();
        deleted.remove(2);
        let b = broken(&deleted);
        assert_eq!(b.line, 3);
        assert!(b.problem.contains("seq is 3, expected 2"), "{b:?}");

        let mut swapped = lines.clone();
        swapped.swap(2, 3);
        assert_eq!(broken(&swapped).line, 3);

        let mut inserted = lines.clone();
        inserted.insert(4, lines[1].clone());
        let b = broken(&inserted);
        assert_eq!(b.line, 5);
        assert!(b.problem.contains("inserted"), "{b:?}");

        let mut forged = lines.clone();
        forged.insert(
            2,
            format_line(2, GENESIS, 0, "supervisor", "x", &Map::new()),
        );
        assert_eq!(broken(&forged).line, 3);

        let mut bytes = file(&lines);
        bytes.truncate(bytes.len() - 10);
        let b = check(&bytes, None).broken.unwrap();
        assert_eq!(b.line, 6);
        assert!(b.problem.contains("cut short"));

        let b = broken(&[lines[1].clone()]);
        assert_eq!(b.line, 1);
        assert!(b.problem.contains("seq is 1"), "{b:?}");

        let b = check(b"{\"seq\":0}\nnot json\n", None).broken.unwrap();
        assert_eq!(b.line, 1);
        assert!(b.problem.contains("prev"), "{b:?}");
    }

    #[test]
    fn a_cut_at_a_line_boundary_shows_only_against_the_head() {
        let lines = chain(6);
        let head = line_hash(&lines[5]);
        let cut = file(&lines[..4]);
        assert!(check(&cut, None).intact);
        let report = check(&cut, Some(&head));
        assert!(!report.intact);
        let b = report.broken.unwrap();
        assert_eq!(b.line, 4);
        assert!(b.problem.contains("not at the expected head"), "{b:?}");
    }

    /// A log of runs: each `Some(n)` a run of `n` records between its start and end, `None`
    /// a run cut after its start and one record.
    fn runs(runs: &[Option<u64>]) -> Vec<u8> {
        let mut lines: Vec<Vec<u8>> = Vec::new();
        let mut prev = GENESIS.to_string();
        let mut add = |source: &str, kind: &str| {
            let seq = lines.len() as u64;
            let line = format_line(seq, &prev, seq, source, kind, &Map::new());
            prev = line_hash(&line);
            lines.push(line);
        };
        for run in runs {
            add("supervisor", "run-start");
            for _ in 0..run.unwrap_or(1) {
                add("supervisor", "network");
            }
            // Records from inside cannot end a run.
            add("sandbox", "run-end");
            if run.is_some() {
                add("supervisor", "run-end");
            }
        }
        file(&lines)
    }

    #[test]
    fn every_run_needs_its_end() {
        let report = check(&runs(&[Some(2), Some(0)]), None);
        assert_eq!((report.status, report.runs), (Status::Intact, 2));
        assert!(report.runs_without_end.is_empty());

        // The last run cut short: incomplete, or in progress while a writer holds the log.
        let mut report = check(&runs(&[Some(2), None]), None);
        assert_eq!(report.status, Status::Incomplete);
        assert!(report.intact);
        assert_eq!(report.runs_without_end, vec![6]);
        report.writer_is_live();
        assert_eq!(report.status, Status::InProgress);

        // An earlier run without its end stays incomplete whatever the last one does.
        for last in [Some(1), None] {
            let mut report = check(&runs(&[None, last]), None);
            assert_eq!(report.status, Status::Incomplete);
            assert_eq!(report.runs_without_end[0], 1);
            report.writer_is_live();
            assert_eq!(report.status, Status::Incomplete);
        }

        // Broken wins.
        let mut bytes = runs(&[None]);
        bytes.truncate(bytes.len() - 3);
        assert_eq!(check(&bytes, None).status, Status::Broken);
    }

    /// Records `(source, kind, body)` chained from seq 0.
    fn log_of(records: &[(&str, &str, Value)]) -> Vec<u8> {
        let mut prev = GENESIS.to_string();
        let lines: Vec<Vec<u8>> = records
            .iter()
            .enumerate()
            .map(|(seq, (source, kind, body))| {
                let line = format_line(
                    seq as u64,
                    &prev,
                    1,
                    source,
                    kind,
                    &body_object(body.clone()),
                );
                prev = line_hash(&line);
                line
            })
            .collect();
        file(&lines)
    }

    #[test]
    fn a_run_ended_by_recovery_is_closed_and_said() {
        let start = ("supervisor", "run-start", json!({}));
        let end = ("supervisor", "run-end", json!({}));
        let recovered = |seq: u64| {
            (
                "supervisor",
                RUN_END_RECOVERED,
                json!({ RUN_START_SEQ: seq }),
            )
        };
        // Killed, then recovered at once (the next run on the same log recovers it first).
        let report = check(
            &log_of(&[start.clone(), recovered(0), start.clone(), end.clone()]),
            None,
        );
        assert_eq!(report.status, Status::Recovered, "{report:?}");
        assert_eq!(report.runs_recovered, vec![1]);
        assert!(report.runs_without_end.is_empty());
        // Recovered after another run started and ended in the same log.
        let report = check(
            &log_of(&[start.clone(), start.clone(), end.clone(), recovered(0)]),
            None,
        );
        assert_eq!(
            (report.status, report.runs_recovered.clone()),
            (Status::Recovered, vec![1])
        );
        // A run without any end still makes the log incomplete; the recovered one is still said.
        let report = check(&log_of(&[start.clone(), start.clone(), recovered(1)]), None);
        assert_eq!(report.status, Status::Incomplete);
        assert_eq!(
            (
                report.runs_without_end.clone(),
                report.runs_recovered.clone()
            ),
            (vec![1], vec![2])
        );
        // A repair after the run's own end (killed before its marker went), a second repair, one
        // naming no run start, one from inside, or a seq after itself: nothing changes.
        let report = check(
            &log_of(&[
                start.clone(),
                end.clone(),
                recovered(0),
                recovered(0),
                recovered(1),
                ("sandbox", RUN_END_RECOVERED, json!({ RUN_START_SEQ: 0 })),
                recovered(99),
            ]),
            None,
        );
        assert_eq!(report.status, Status::Intact, "{report:?}");
        assert!(report.runs_recovered.is_empty());
        let report = check(
            &log_of(&[
                start.clone(),
                ("sandbox", RUN_END_RECOVERED, json!({ RUN_START_SEQ: 0 })),
            ]),
            None,
        );
        assert_eq!(report.status, Status::Incomplete);
    }

    #[test]
    fn an_empty_file_or_one_that_is_not_a_log_is_named() {
        assert_eq!(
            check(b"", None).not_a_log().as_deref(),
            Some("empty: no records to verify")
        );
        // With a head, an empty log lost all its records.
        let report = check(b"", Some(&"ab".repeat(32)));
        assert_eq!(report.status, Status::Broken);
        assert!(report.not_a_log().is_none());

        for (text, problem) in [
            (&b"hello\n"[..], "not a record: not JSON"),
            (b"hello", "not a record: not JSON, and no newline"),
            (b"[1, 2]\n", "not a record: JSON, but not an object"),
            (b"{\"a\": 1}\n", "not a record: no numeric `seq`"),
            (
                b"{\"seq\": 0, \"prev\": []}\n",
                "not a record: no `prev` hash",
            ),
            (
                b"{\"seq\": 0, \"seq\": 0}\n",
                "not a record: duplicate field `seq`",
            ),
        ] {
            let why = check(text, None).not_a_log().unwrap();
            assert!(
                why.starts_with(&format!("not a StepProof audit log: line 1 is {problem}")),
                "{why}"
            );
        }
        // The start of a record torn by an interrupted write is a log, broken.
        let torn = &runs(&[Some(1)])[..30];
        let report = check(torn, None);
        assert!(report.not_a_log().is_none());
        assert!(report.broken.unwrap().problem.contains("cut short"));
        // A record out of place on line 1 is ours: the head of the log was cut off.
        let lines = chain(3);
        let report = check(&file(&lines[1..]), None);
        assert!(report.not_a_log().is_none());
        assert_eq!(report.status, Status::Broken);
    }

    #[test]
    fn a_line_longer_than_any_record_is_not_read_into_memory() {
        // Never ends: the check must stop at the cap, not read on.
        let endless = io::BufReader::new(io::repeat(b'{'));
        let report = verify(endless, None).unwrap();
        assert_eq!(report.status, Status::Broken);
        let why = report.not_a_log().unwrap();
        assert!(why.contains("longer than 16 MiB"), "{why}");

        // Other readers go on after it.
        let mut bytes = vec![b'x'; MAX_RECORD_LINE + 1];
        bytes.extend_from_slice(b"\nnext\nlast");
        let mut seen = Vec::new();
        for_each_line(bytes.as_slice(), |line| {
            seen.push(match line {
                LogLine::Terminated(b) => format!("line {}", String::from_utf8_lossy(b)),
                LogLine::CutShort(b) => format!("cut {}", String::from_utf8_lossy(b)),
                LogLine::TooLong => "too long".to_string(),
            });
            true
        })
        .unwrap();
        assert_eq!(seen, ["too long", "line next", "cut last"]);
        // Exactly at the cap is still a line.
        let mut bytes = vec![b'x'; MAX_RECORD_LINE];
        bytes.push(b'\n');
        let mut lengths = Vec::new();
        for_each_line(bytes.as_slice(), |line| {
            lengths.push(match line {
                LogLine::Terminated(b) => b.len(),
                _ => 0,
            });
            true
        })
        .unwrap();
        assert_eq!(lengths, [MAX_RECORD_LINE]);
    }

    #[test]
    fn a_log_resumes_after_its_last_record() {
        let lines = chain(3);
        let resume = resume_point(file(&lines).as_slice()).unwrap();
        let after_three = Resume {
            next_seq: 3,
            head: line_hash(&lines[2]),
            torn: None,
        };
        assert_eq!(resume, after_three);
        let empty = Resume {
            next_seq: 0,
            head: GENESIS.to_string(),
            torn: None,
        };
        assert_eq!(resume_point(&b""[..]).unwrap(), empty);
        assert!(resume_point(&b"hello\n"[..]).is_err());
    }

    #[test]
    fn a_record_cut_short_is_given_back_and_the_chain_goes_on_before_it() {
        let lines = chain(4);
        let whole = file(&lines);
        // Cut anywhere in the last record, even just before its newline.
        let start = whole.len() - lines[3].len() - 1;
        for end in [start + 1, start + 17, whole.len() - 1] {
            let resume = resume_point(&whole[..end]).unwrap();
            assert_eq!(
                (resume.next_seq, resume.head.as_str()),
                (3, line_hash(&lines[2]).as_str()),
                "cut at {end}"
            );
            assert_eq!(resume.torn.as_deref(), Some(&whole[start..end]));
        }
        // The first record cut short: the chain starts again at the genesis.
        let first = resume_point(&b"{\"seq\":0"[..]).unwrap();
        assert_eq!((first.next_seq, first.head.as_str()), (0, GENESIS));
        assert_eq!(first.torn.as_deref(), Some(&b"{\"seq\":0"[..]));
        assert!(resume_point(&b"{\"s"[..]).unwrap().torn.is_some());
        // Another file's half line, or a record that is not the next one: left alone.
        assert!(resume_point(&b"{\"foo\":"[..]).is_err());
        let mut not_next = whole.clone();
        not_next.extend_from_slice(b"{\"seq\":9,\"prev\":");
        assert!(resume_point(not_next.as_slice()).is_err());
        // A tail that is not the start of a record, or one after a line too long, is refused.
        let mut not_json = whole.clone();
        not_json.extend_from_slice(b"hello");
        assert!(resume_point(not_json.as_slice()).is_err());
        let mut json_not_object = whole.clone();
        json_not_object.extend_from_slice(b"[1,");
        assert!(resume_point(json_not_object.as_slice()).is_err());
        let mut after_long = vec![b'x'; MAX_RECORD_LINE + 1];
        after_long.extend_from_slice(b"\n{\"seq\":");
        assert!(resume_point(after_long.as_slice()).is_err());
    }
}
