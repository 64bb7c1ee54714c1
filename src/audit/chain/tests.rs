//! Tests of the chain: lines, hashes and the check that walks a log.

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
