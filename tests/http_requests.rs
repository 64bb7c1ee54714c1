//! The forwarder's reading of a client's byte stream (`stepproof::http::forward::read_requests`:
//! the head, the framing, the body with the one chunked coding, the head it sends on), in the
//! normal suite: the fuzz
//! target's seed corpus (`tests/fuzz/corpus/request_stream`, the smuggling probes) read as the
//! proxy and the gateway read them, then a few hundred thousand deterministic mutations of it —
//! nothing panics, nothing hangs, every refusal is where the framing is ambiguous. The fuzz
//! target itself (`tests/fuzz`, cargo-fuzz on nightly) runs the same function.

use std::path::Path;
use stepproof::http::forward::{HOP_BY_HOP, ReadRequest, read_head, read_requests};
use stepproof::http::io::Framing;

/// The head the forwarder would send on is one request head, read back the same: the same
/// method and target, the upstream's `Host` once, none of the headers it removes (nor one the
/// request's `Connection` names), every other header as it came.
fn onward_holds(read: &ReadRequest) {
    let (sent, rest) = read_head(&read.onward)
        .unwrap_or_else(|e| panic!("{read:?}: its onward head does not read back: {e}"));
    assert_eq!(rest, 0, "{read:?}: one head, nothing after it");
    assert_eq!(sent.method, read.head.method);
    assert_eq!(sent.target, read.head.target);
    let named: Vec<String> = read
        .head
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("connection"))
        .flat_map(|(_, v)| {
            v.split(|b| *b == b',')
                .map(|t| String::from_utf8_lossy(t).trim().to_ascii_lowercase())
                .collect::<Vec<_>>()
        })
        .collect();
    let kept: Vec<_> = read
        .head
        .headers
        .iter()
        .filter(|(n, _)| {
            let n = n.to_ascii_lowercase();
            !HOP_BY_HOP.contains(&n.as_str()) && n != "authorization" && !named.contains(&n)
        })
        .collect();
    assert_eq!(sent.headers[0].0, "Host");
    assert_eq!(sent.headers[0].1, b"upstream.test");
    let rest: Vec<_> = sent.headers[1..].iter().collect();
    assert_eq!(rest, kept, "{read:?}");
}

fn corpus() -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz/corpus/request_stream");
    let mut seeds: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    seeds.sort();
    assert!(seeds.len() >= 10, "the seed corpus is missing");
    seeds
}

#[test]
fn the_smuggling_probes_are_read_one_way_or_refused() {
    for (name, data) in corpus() {
        let read = read_requests(&data, 64);
        let ok: Vec<_> = read.iter().filter_map(|r| r.as_ref().ok()).collect();
        ok.iter().for_each(|r| onward_holds(r));
        let refused = read.iter().find_map(|r| r.as_ref().err());
        match name.as_str() {
            "plain-get" | "absolute-form" => assert!(ok.len() == 1 && refused.is_none()),
            "pipelined" => {
                assert_eq!(ok.len(), 2, "{read:?}");
                assert_eq!(ok[0].framing, Framing::Length(5));
                assert_eq!(ok[1].head.target, "/");
            }
            "chunked" => {
                assert_eq!(ok[0].framing, Framing::Chunked);
                assert_eq!(ok[0].body_bytes, 13, "the framing as relayed");
            }
            // Ambiguous framing: the connection ends at the first refusal, so nothing after
            // the smuggled boundary is ever read as a request.
            "te-and-cl" | "two-lengths" | "te-gzip-chunked" | "plus-length" => {
                assert!(ok.is_empty(), "{name}: {read:?}");
                assert!(refused.is_some(), "{name}");
            }
            "bare-lf-chunks" | "ext-control" => {
                assert!(ok.is_empty(), "{name}: {read:?}");
                assert!(
                    refused.is_some_and(|e| e.contains("chunked body")),
                    "{name}: {read:?}"
                );
            }
            "obs-fold" => assert!(refused.is_some(), "{name}: {read:?}"),
            _ => {}
        }
    }
}

#[test]
fn mutated_streams_never_panic() {
    // xorshift64*: the same mutations every run.
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_F491_4F6C_DD1D)
    };
    let interesting = b"\r\n \t:;,0159afAF-+\x00\x7f\x80\xff";
    let seeds = corpus();
    let mut runs = 0u64;
    for _ in 0..300_000 {
        let (_, seed) = &seeds[(next() % seeds.len() as u64) as usize];
        let mut data = seed.clone();
        for _ in 0..1 + next() % 4 {
            let at = (next() % (data.len() as u64 + 1)) as usize;
            let byte = interesting[(next() % interesting.len() as u64) as usize];
            match next() % 3 {
                0 if at < data.len() => data[at] = byte,
                1 if at < data.len() => {
                    data.remove(at);
                }
                _ => data.insert(at, byte),
            }
        }
        let read = read_requests(&data, 64);
        assert!(read.len() <= 64);
        read.iter().flatten().for_each(onward_holds);
        // A refusal is always the last thing read: nothing after it is taken as a request.
        if let Some(i) = read.iter().position(Result::is_err) {
            assert_eq!(i, read.len() - 1);
        }
        runs += 1;
    }
    assert_eq!(runs, 300_000);
}
