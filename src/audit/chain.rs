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
mod tests;
