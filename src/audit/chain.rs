//! The chain itself: how a record becomes a line, what a line's hash is, and the check that
//! walks a log line by line (the format is described in the module above).

use serde::Serialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::io::{self, BufRead};

/// `prev` of the first record.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The envelope keys, in the order they are written; a body cannot override them.
pub const ENVELOPE_KEYS: [&str; 5] = ["seq", "prev", "ts_ms", "source", "kind"];

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
    /// 1-based line number.
    pub line: u64,
    pub problem: String,
}

/// What [`verify`] found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChainReport {
    pub intact: bool,
    /// Records before the first broken line (all of them when intact).
    pub records: u64,
    /// Hash of the last intact line (`GENESIS` when there is none).
    pub head: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected_head: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub broken: Option<Broken>,
}

/// Walks a log line by line; stops looking at the first broken line.
pub struct ChainChecker {
    records: u64,
    head: String,
    broken: Option<Broken>,
}

impl Default for ChainChecker {
    fn default() -> Self {
        ChainChecker {
            records: 0,
            head: GENESIS.to_string(),
            broken: None,
        }
    }
}

impl ChainChecker {
    /// Feeds the next line (without its `\n`; `terminated` says whether it had one). Returns
    /// the problem when this line is the first broken one.
    pub fn push(&mut self, line: &[u8], terminated: bool) -> Option<&Broken> {
        if self.broken.is_some() {
            return None;
        }
        let number = self.records + 1;
        match self.check(number, line, terminated) {
            Ok(()) => {
                self.records = number;
                self.head = line_hash(line);
                None
            }
            Err(problem) => {
                self.broken = Some(Broken {
                    line: number,
                    problem,
                });
                self.broken.as_ref()
            }
        }
    }

    fn check(&self, number: u64, line: &[u8], terminated: bool) -> Result<(), String> {
        if !terminated {
            return Err(
                "cut short: no newline at its end (an interrupted write, or the file was cut \
                 in the middle of a record)"
                    .to_string(),
            );
        }
        let record: Map<String, Value> = match serde_json::from_slice::<Value>(line) {
            Ok(Value::Object(map)) => map,
            Ok(_) => return Err("not a record: JSON, but not an object".to_string()),
            Err(e) => return Err(format!("not a record: not JSON ({e})")),
        };
        let expected_seq = number - 1;
        let Some(seq) = record.get("seq").and_then(Value::as_u64) else {
            return Err("not a record: no numeric `seq`".to_string());
        };
        if seq > expected_seq {
            return Err(format!(
                "seq is {seq}, expected {expected_seq}: records are missing before this line \
                 (removed, or lines moved)"
            ));
        }
        if seq < expected_seq {
            return Err(format!(
                "seq is {seq}, expected {expected_seq}: a line was inserted, repeated or moved \
                 here"
            ));
        }
        let Some(prev) = record.get("prev").and_then(Value::as_str) else {
            return Err("not a record: no `prev` hash".to_string());
        };
        if prev != self.head {
            return Err(if number == 1 {
                format!("`prev` is {prev}, not the genesis hash: the log does not start here")
            } else {
                format!(
                    "`prev` does not match the hash of line {}: line {} was changed, or this \
                     line does not belong after it",
                    number - 1,
                    number - 1
                )
            });
        }
        for key in ["source", "kind"] {
            if !record.get(key).is_some_and(Value::is_string) {
                return Err(format!("not a record: no `{key}`"));
            }
        }
        Ok(())
    }

    /// The verdict; with `expected_head`, an intact chain must also end at that hash.
    pub fn finish(self, expected_head: Option<&str>) -> ChainReport {
        let mut broken = self.broken;
        let expected_head = expected_head.map(|h| h.trim().to_ascii_lowercase());
        if broken.is_none()
            && let Some(expected) = &expected_head
            && *expected != self.head
        {
            broken = Some(Broken {
                line: self.records,
                problem: format!(
                    "the chain ends at {} after {} records, not at the expected head {expected}: \
                     records were removed from the end, the last line was changed, or records \
                     were added after the head was taken",
                    self.head, self.records
                ),
            });
        }
        ChainReport {
            intact: broken.is_none(),
            records: self.records,
            head: self.head,
            expected_head,
            broken,
        }
    }
}

/// Checks a whole log: every line parses, `seq` counts from 0, every `prev` is the hash of the
/// line before; with `expected_head`, the last line hashes to it.
pub fn verify<R: BufRead>(reader: R, expected_head: Option<&str>) -> io::Result<ChainReport> {
    let mut checker = ChainChecker::default();
    for_each_line(reader, |line, terminated| {
        checker.push(line, terminated).is_none()
    })?;
    Ok(checker.finish(expected_head))
}

/// Calls `f` with each line (without `\n`) and whether it was terminated, until `f` returns
/// false or the input ends.
pub fn for_each_line<R: BufRead>(
    mut reader: R,
    mut f: impl FnMut(&[u8], bool) -> bool,
) -> io::Result<()> {
    let mut buf = Vec::new();
    loop {
        buf.clear();
        if reader.read_until(b'\n', &mut buf)? == 0 {
            return Ok(());
        }
        let terminated = buf.last() == Some(&b'\n');
        if terminated {
            buf.pop();
        }
        if !f(&buf, terminated) {
            return Ok(());
        }
    }
}

/// The chain position after the last line of an existing log, so that a reopened log goes on
/// where it ended: `(next seq, head hash)`. The last line must be a complete record.
pub fn resume_point<R: BufRead>(reader: R) -> io::Result<(u64, String)> {
    let mut last: Option<(Vec<u8>, bool)> = None;
    for_each_line(reader, |line, terminated| {
        last = Some((line.to_vec(), terminated));
        true
    })?;
    let Some((line, terminated)) = last else {
        return Ok((0, GENESIS.to_string()));
    };
    let invalid = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
    if !terminated {
        return Err(invalid(
            "its last line is cut short; not appending to a torn log",
        ));
    }
    let seq = serde_json::from_slice::<Value>(&line)
        .ok()
        .and_then(|v| v.get("seq").and_then(Value::as_u64))
        .ok_or_else(|| {
            invalid("its last line is not a chained record; not a StepProof audit log")
        })?;
    Ok((seq + 1, line_hash(&line)))
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

    #[test]
    fn a_log_resumes_after_its_last_record() {
        let lines = chain(3);
        let (seq, head) = resume_point(file(&lines).as_slice()).unwrap();
        assert_eq!((seq, head), (3, line_hash(&lines[2])));
        assert_eq!(resume_point(&b""[..]).unwrap(), (0, GENESIS.to_string()));
        assert!(resume_point(&b"{\"seq\":0"[..]).is_err());
        assert!(resume_point(&b"hello\n"[..]).is_err());
    }
}
