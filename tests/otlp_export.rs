//! The audit record shipped over OTLP/HTTP to a receiver on loopback that decodes with the
//! OpenTelemetry protobuf definitions (tests/support/otlp.rs): every record arrives with its
//! attributes and chain hashes; with the receiver down the run does not wait, the outbox keeps
//! everything and `stepproof audit ship` delivers it later; 16 runs into one receiver whose
//! answers get lost arrive complete once duplicates are dropped; a tampered export fails
//! `stepproof audit verify`; no OTEL variable reaches the sandbox.

mod support;

#[path = "support/otlp.rs"]
mod otlp;

use otlp::Receiver;
use serde_json::Value;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};
use support::{STEPPROOF, Who, World, describe};

/// A string the hook calls carry in their command: it is in the local log and must never be
/// in what is shipped (the default redaction, `commands`).
const MARKER: &str = "sekrit-9f2c41";

/// A shell script that asks the hook inside about `n` Bash calls (real decisions, sent over the
/// audit socket like Claude Code's), then counts the OTEL and header variables it can see.
fn hook_calls(n: usize) -> String {
    format!(
        r#"i=0
while [ $i -lt {n} ]; do
  printf '%s' '{{"session_id":"s","transcript_path":"/tmp/t","cwd":"'"$PWD"'","hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{{"command":"echo {MARKER} '$i'"}},"tool_use_id":"t'$i'"}}' | /run/stepproof/stepproof-hook --policy /run/stepproof/policy --audit-socket /run/stepproof/audit.sock --event PreToolUse >/dev/null || true
  i=$((i+1))
done
echo "otel-vars: $(env | grep -c -e '^OTEL_' -e '^MY_COLLECTOR_HEADERS=')"
"#
    )
}

/// A profile that would pass every OTEL variable and the header variable inside if anything
/// let it (the test that none arrives means something), with a long flush timeout.
fn profile(w: &World, flush_timeout: &str) -> PathBuf {
    let path = w.base.join(format!("export-{flush_timeout}.toml"));
    fs::write(
        &path,
        format!(
            r#"extends = "default"

[process]
env = ["OTEL_*", "OTEL_EXPORTER_OTLP_HEADERS", "MY_COLLECTOR_HEADERS"]

[audit.export]
headers_env = ["MY_COLLECTOR_HEADERS"]
flush_timeout = "{flush_timeout}"
"#
        ),
    )
    .unwrap();
    path
}

struct Run {
    out: Output,
    log: PathBuf,
    status: Value,
    took: Duration,
}

impl Run {
    fn lines(&self) -> Vec<String> {
        fs::read_to_string(&self.log)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    }

    fn head(&self) -> String {
        support::audit_head_named(&String::from_utf8_lossy(&self.out.stderr))
    }

    /// The run directory holding the outbox (from the status).
    fn outbox_dir(&self) -> PathBuf {
        PathBuf::from(
            self.status["export"]["outbox"]
                .as_str()
                .unwrap_or_else(|| panic!("no export in the status: {}", self.status)),
        )
    }
}

/// A directory outside the home for the run's files, owned by whoever runs.
fn out_dir(w: &World) -> PathBuf {
    let dir = w.base.join("out");
    if !dir.is_dir() {
        let _ = fs::create_dir(&dir);
        support::chown_tree(&dir, w.owner);
    }
    dir
}

/// One run of `n` hook calls with the export pointed at `endpoint`.
fn run(w: &World, name: &str, endpoint: Option<&str>, profile: &Path, n: usize) -> Run {
    run_in(w, name, endpoint, profile, n, None)
}

/// The same in a workspace of its own (concurrent runs: each its own project, as on a fleet).
fn run_in(
    w: &World,
    name: &str,
    endpoint: Option<&str>,
    profile: &Path,
    n: usize,
    workspace: Option<&Path>,
) -> Run {
    let log = out_dir(w).join(format!("{name}.jsonl"));
    let status = out_dir(w).join(format!("{name}-status.json"));
    // The overhead figures are taken with release binaries (`BENCH_BIN_DIR=target/release`).
    let mut cmd = match std::env::var_os("BENCH_BIN_DIR") {
        Some(dir) if w.who == Who::Root => {
            let mut cmd = std::process::Command::new(Path::new(&dir).join("stepproof-run"));
            w.clean_env(&mut cmd);
            cmd
        }
        _ => {
            let mut cmd = w.as_owner(w.run_binary());
            w.clean_env(&mut cmd);
            cmd
        }
    };
    cmd.args([
        "--profile",
        profile.to_str().unwrap(),
        "--audit-log",
        log.to_str().unwrap(),
        "--status-file",
        status.to_str().unwrap(),
        "--",
        "/bin/sh",
        "-c",
        &hook_calls(n),
    ]);
    if let Some(workspace) = workspace {
        cmd.current_dir(workspace);
    }
    if let Some(endpoint) = endpoint {
        cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
            .env("OTEL_EXPORTER_OTLP_HEADERS", "x-otlp-token=tok%20123")
            .env("MY_COLLECTOR_HEADERS", "x-team=audit")
            .env(
                "OTEL_RESOURCE_ATTRIBUTES",
                "deployment.environment=test,stepproof.run.id=forged",
            )
            .env("GITHUB_ACTIONS", "true")
            .env("GITHUB_RUN_ID", "4242");
    }
    let started = Instant::now();
    let out = cmd.output().unwrap();
    let took = started.elapsed();
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("otel-vars: 0"),
        "an OTEL or header variable reached the sandbox: {}",
        describe(&out)
    );
    let status: Value = serde_json::from_str(&fs::read_to_string(&status).unwrap()).unwrap();
    Run {
        out,
        log,
        status,
        took,
    }
}

/// `stepproof audit ARGS…` as whoever the world runs as.
fn stepproof(w: &World, args: &[&str], env: &[(&str, &str)]) -> Output {
    let bin = match w.who {
        Who::Root => Path::new(STEPPROOF),
        Who::User => support::run_binary_for_user()
            .with_file_name("stepproof")
            .leak(),
    };
    let mut cmd = w.as_owner(bin);
    w.clean_env(&mut cmd);
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn verify_export(w: &World, text: &str, name: &str, head: Option<&str>) -> (i32, String) {
    let path = w.base.join(format!("{name}.otlp.jsonl"));
    fs::write(&path, text).unwrap();
    let mut args = vec!["audit", "verify", path.to_str().unwrap()];
    if let Some(head) = head {
        args.extend(["--head", head]);
    }
    let out = stepproof(w, &args, &[]);
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// Every record of the run as the receiver got it, keyed by seq (duplicates must agree).
fn by_seq(records: &[otlp::Got], run_id: &str) -> std::collections::BTreeMap<u64, otlp::Got> {
    let mut map = std::collections::BTreeMap::new();
    for r in records
        .iter()
        .filter(|r| r.attr_str("stepproof.run.id") == run_id)
    {
        let seq = r.attr_int("stepproof.record.seq").unwrap() as u64;
        if let Some(earlier) = map.insert(seq, r.clone()) {
            assert_eq!(earlier.body, r.body, "two different records at seq {seq}");
        }
    }
    map
}

/// The export with one unredacted body changed (a key added to the record).
fn change_first_plain_body(export: &str) -> String {
    let mut done = false;
    export
        .lines()
        .map(|line| {
            let mut request: Value = serde_json::from_str(line).unwrap();
            for rl in request["resourceLogs"].as_array_mut().unwrap() {
                for sl in rl["scopeLogs"].as_array_mut().unwrap() {
                    for r in sl["logRecords"].as_array_mut().unwrap() {
                        let redacted = r["attributes"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .any(|a| a["key"] == "stepproof.record.redacted");
                        if !done && !redacted {
                            let body = r["body"]["stringValue"].as_str().unwrap();
                            let mut record: Value = serde_json::from_str(body).unwrap();
                            record["extra"] = "added".into();
                            r["body"]["stringValue"] = record.to_string().into();
                            done = true;
                        }
                    }
                }
            }
            format!("{request}\n")
        })
        .collect()
}

/// The export without the record at `seq` (every copy of it).
fn drop_record(export: &str, seq: i64) -> String {
    export
        .lines()
        .map(|line| {
            let mut request: Value = serde_json::from_str(line).unwrap();
            for rl in request["resourceLogs"].as_array_mut().unwrap() {
                for sl in rl["scopeLogs"].as_array_mut().unwrap() {
                    sl["logRecords"].as_array_mut().unwrap().retain(|r| {
                        !r["attributes"].as_array().unwrap().iter().any(|a| {
                            a["key"] == "stepproof.record.seq"
                                && a["value"]["intValue"] == seq.to_string().as_str()
                        })
                    });
                }
            }
            format!("{request}\n")
        })
        .collect()
}

fn run_id_of(lines: &[String]) -> String {
    let start: Value = serde_json::from_str(&lines[0]).unwrap();
    assert_eq!(start["kind"], "run-start");
    start["run_id"].as_str().unwrap().to_string()
}

both!(
    every_record_arrives_with_its_attributes_and_hashes,
    |w: &World| {
        let receiver = Receiver::start();
        let profile = profile(w, "30s");
        let r = run(w, "up", Some(&receiver.endpoint()), &profile, 5);
        assert_eq!(r.status["export"]["unsent"], 0, "{}", r.status);
        let lines = r.lines();
        let run_id = run_id_of(&lines);
        let got = by_seq(&receiver.records(), &run_id);
        assert_eq!(got.len(), lines.len(), "records: {:?}", got.keys());
        assert!(
            lines.iter().any(|l| l.contains(MARKER)),
            "the local log keeps everything"
        );
        let mut prev = "0".repeat(64);
        let mut redacted = 0;
        for (i, line) in lines.iter().enumerate() {
            let r = &got[&(i as u64)];
            let hash = stepproof::audit::line_hash(line.as_bytes());
            assert_eq!(r.attr_str("stepproof.record.hash"), hash);
            assert_eq!(r.attr_str("stepproof.record.prev"), prev);
            assert_eq!(r.attr_int("stepproof.run.first_seq"), Some(0));
            let record: Value = serde_json::from_str(line).unwrap();
            assert_eq!(r.attr_str("stepproof.record.kind"), record["kind"]);
            assert_eq!(r.attr_str("stepproof.record.source"), record["source"]);
            assert_eq!(
                r.time_unix_nano,
                record["ts_ms"].as_u64().unwrap() * 1_000_000
            );
            // The body is the exact line, or its redaction (never the command).
            assert!(!r.body.contains(MARKER), "shipped: {}", r.body);
            if r.attr("stepproof.record.redacted").is_some() {
                redacted += 1;
                let body: Value = serde_json::from_str(&r.body).unwrap();
                assert_eq!(
                    (body["seq"].clone(), body["prev"].clone()),
                    (record["seq"].clone(), record["prev"].clone())
                );
            } else {
                assert_eq!(&r.body, line);
            }
            prev = hash;
        }
        assert!(
            redacted >= 5,
            "the five decisions quote their command: {redacted} redacted"
        );
        // The seal: the last record is the run-end, and its hash is the head the run printed.
        let last = got.values().last().unwrap();
        assert_eq!(last.attr_str("stepproof.record.kind"), "run-end");
        assert_eq!(last.attr_str("stepproof.record.hash"), r.head());
        // The resource names the run; the caller's attributes add to it, never replace its id.
        let start: Value = serde_json::from_str(&lines[0]).unwrap();
        for g in got.values() {
            assert_eq!(g.resource_attr("service.name"), Some("stepproof"));
            assert_eq!(g.resource_attr("stepproof.run.id"), Some(run_id.as_str()));
            assert_eq!(
                g.resource_attr("stepproof.profile.hash"),
                start["policy_hash"].as_str()
            );
            assert_eq!(g.resource_attr("cicd.pipeline.run.id"), Some("4242"));
            assert_eq!(g.resource_attr("deployment.environment"), Some("test"));
            assert!(g.resource_attr("host.name").is_some_and(|h| !h.is_empty()));
        }
        for headers in receiver.headers() {
            let h = |k: &str| {
                headers
                    .iter()
                    .find(|(n, _)| n == k)
                    .map(|(_, v)| v.as_str())
            };
            assert_eq!(h("x-otlp-token"), Some("tok 123"));
            assert_eq!(h("x-team"), Some("audit"));
            assert_eq!(h("content-type"), Some("application/x-protobuf"));
        }
        assert!(receiver.paths().iter().all(|p| p == "/v1/logs"));

        // The export read back verifies, against the head too; each kind of tampering fails.
        let export = receiver.otlp_json();
        let head = r.head();
        let (code, out) = verify_export(w, &export, "intact", Some(&head));
        assert_eq!(code, 0, "{out}");
        assert!(out.contains("intact"), "{out}");
        // A body changed: the first record shipped unredacted gets one more key.
        let changed = change_first_plain_body(&export);
        let (code, out) = verify_export(w, &changed, "changed", None);
        assert_eq!(code, 1, "{out}");
        assert!(out.contains("does not hash"), "{out}");
        // A record lost on the way (the run-start): missing, so incomplete.
        let (code, out) = verify_export(w, &drop_record(&export, 0), "fewer", None);
        assert_eq!(code, 3, "{out}");
        assert!(out.contains("missing: seq 0"), "{out}");
        // One in the middle.
        let (code, out) = verify_export(w, &drop_record(&export, 3), "gap", None);
        assert_eq!(code, 3, "{out}");
        assert!(out.contains("missing: seq 3"), "{out}");
        // A record's hash attribute replaced, as if another record stood there.
        let other_hash = stepproof::audit::line_hash(b"another");
        let forged = export.replacen(&head, &other_hash, 1);
        let (code, out) = verify_export(w, &forged, "forged", Some(&head));
        assert_eq!(code, 1, "{out}");
        // Duplicates are dropped.
        let twice = format!("{export}{export}");
        let (code, out) = verify_export(w, &twice, "twice", Some(&head));
        assert_eq!(code, 0, "{out}");
        assert!(
            out.contains(&format!("({} duplicates dropped", lines.len())),
            "{out}"
        );
    }
);

both!(
    receiver_down_the_run_does_not_wait_and_ship_delivers_later,
    |w: &World| {
        // A port with nothing listening.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let endpoint = format!("http://{port}");
        let profile = profile(w, "30s");
        let baseline = run(w, "baseline", None, &profile, 20);
        let r = run(w, "down", Some(&endpoint), &profile, 20);
        eprintln!(
            "20 hook calls: no export {:?}, receiver down {:?}",
            baseline.took, r.took
        );
        // The end of the run does not wait for a collector it cannot reach: far below the 30 s
        // flush timeout (the bound), whatever the machine's load.
        assert!(
            r.took < baseline.took + Duration::from_secs(15),
            "the run waited: {:?} against {:?} without export",
            r.took,
            baseline.took
        );
        let lines = r.lines();
        assert_eq!(r.status["export"]["records"], lines.len(), "{}", r.status);
        assert_eq!(r.status["export"]["unsent"], lines.len(), "{}", r.status);
        assert!(
            String::from_utf8_lossy(&r.out.stderr).contains("stepproof audit ship"),
            "{}",
            describe(&r.out)
        );
        let dir = r.outbox_dir();
        let outbox = fs::read_to_string(dir.join("export-outbox.jsonl")).unwrap();
        assert_eq!(
            outbox.lines().count(),
            lines.len() + 1,
            "header + every record"
        );

        // Still down: ship says so and keeps everything.
        let out = stepproof(w, &["audit", "ship", dir.to_str().unwrap()], &[]);
        assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
        // The collector is back (at the address the run used: no variable needed).
        let receiver = Receiver::bind(port);
        let out = stepproof(
            w,
            &["audit", "ship", dir.parent().unwrap().to_str().unwrap()],
            &[("OTEL_EXPORTER_OTLP_HEADERS", "x-otlp-token=later")],
        );
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        let run_id = run_id_of(&lines);
        let got = by_seq(&receiver.records(), &run_id);
        assert_eq!(got.len(), lines.len());
        for (i, line) in lines.iter().enumerate() {
            assert_eq!(
                got[&(i as u64)].attr_str("stepproof.record.hash"),
                stepproof::audit::line_hash(line.as_bytes())
            );
        }
        assert!(
            receiver
                .headers()
                .iter()
                .all(|h| h.contains(&("x-otlp-token".into(), "later".into())))
        );
        let (code, out) = verify_export(w, &receiver.otlp_json(), "shipped", Some(&r.head()));
        assert_eq!(code, 0, "{out}");
        // Shipped already: nothing more goes.
        let before = receiver.requests();
        let out = stepproof(w, &["audit", "ship", dir.to_str().unwrap()], &[]);
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        assert_eq!(receiver.requests(), before);
    }
);

both!(sixteen_runs_into_one_receiver_lose_nothing, |w: &World| {
    let receiver = Receiver::start();
    // Answers lost on the way: the runs send those batches again (at least once).
    receiver.withhold_answers(6);
    let profile = profile(w, "20s");
    let endpoint = receiver.endpoint();
    let runs: Vec<Run> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..16)
            .map(|i| {
                let (profile, endpoint) = (&profile, &endpoint);
                let workspace = w.home.join(format!("src/project-{i}"));
                fs::create_dir_all(&workspace).unwrap();
                support::chown_tree(&workspace, w.owner);
                s.spawn(move || {
                    run_in(
                        w,
                        &format!("many-{i}"),
                        Some(endpoint),
                        profile,
                        3,
                        Some(&workspace),
                    )
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let records = receiver.records();
    let mut dropped_somewhere = false;
    let export = receiver.otlp_json();
    let (code, out) = verify_export(w, &export, "sixteen", None);
    for r in &runs {
        let lines = r.lines();
        let run_id = run_id_of(&lines);
        let got = by_seq(&records, &run_id);
        let unsent = r.status["export"]["unsent"].as_u64().unwrap();
        assert_eq!(unsent, 0, "{}", r.status);
        assert_eq!(got.len(), lines.len(), "run {run_id}: {:?}", got.keys());
        let copies = records
            .iter()
            .filter(|g| g.attr_str("stepproof.run.id") == run_id)
            .count();
        dropped_somewhere |= copies > lines.len();
        assert!(out.contains(&format!("run {run_id}: intact")), "{out}");
    }
    assert_eq!(code, 0, "{out}");
    assert!(
        dropped_somewhere,
        "no batch was sent twice: the duplicates were not exercised"
    );
});

// The collector over https, trusted through OTEL_EXPORTER_OTLP_CERTIFICATE (a CA of its own):
// the same records arrive, and verify.
both!(an_https_collector_with_its_own_ca, |w: &World| {
    let receiver = Receiver::start_tls();
    let ca = w.base.join("otlp-ca.pem");
    fs::write(&ca, receiver.ca_pem.as_deref().unwrap()).unwrap();
    let profile = profile(w, "30s");
    let log = out_dir(w).join("tls.jsonl");
    let status = out_dir(w).join("tls-status.json");
    let out = w
        .command(
            &[
                "--profile",
                profile.to_str().unwrap(),
                "--audit-log",
                log.to_str().unwrap(),
                "--status-file",
                status.to_str().unwrap(),
            ],
            &["/bin/sh", "-c", &hook_calls(2)],
        )
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint())
        .env("OTEL_EXPORTER_OTLP_CERTIFICATE", &ca)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let status: Value = serde_json::from_str(&fs::read_to_string(&status).unwrap()).unwrap();
    let lines = fs::read_to_string(&log).unwrap();
    assert_eq!(status["export"]["unsent"], 0, "{status}");
    assert_eq!(status["export"]["sent"], lines.lines().count(), "{status}");
    let head = lines
        .lines()
        .last()
        .map(|l| stepproof::audit::line_hash(l.as_bytes()))
        .unwrap();
    let (code, out) = verify_export(w, &receiver.otlp_json(), "tls", Some(&head));
    assert_eq!(code, 0, "{out}");
    // Without the CA the collector is not trusted: nothing is sent, all waits in the outbox,
    // and the end of the run does not wait out the 30 s flush timeout for it.
    let started = Instant::now();
    let out = w
        .command(&["--profile", profile.to_str().unwrap()], &["/bin/true"])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("NOT yet sent"), "{stderr}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
});

// The shipper thread never takes a signal meant for the supervisor: SIGTERM from outside still
// ends the run the supervisor's way (its end record written, and shipped).
both!(
    sigterm_is_still_the_supervisors_with_export_on,
    |w: &World| {
        let receiver = Receiver::start();
        let profile = profile(w, "30s");
        let log = out_dir(w).join("term.jsonl");
        let child = w
            .command(
                &[
                    "--profile",
                    profile.to_str().unwrap(),
                    "--audit-log",
                    log.to_str().unwrap(),
                ],
                &["/bin/sleep", "30"],
            )
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // The run has started (its start record was shipped): the signalfd is in place.
        assert!(receiver.wait_for(Duration::from_secs(20), |got| !got.is_empty()));
        std::thread::sleep(Duration::from_millis(300));
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        let out = child.wait_with_output().unwrap();
        assert_ne!(
            out.status.code(),
            None,
            "stepproof-run itself died of the signal: {}",
            describe(&out)
        );
        let text = fs::read_to_string(&log).unwrap();
        let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
        assert_eq!(last["kind"], "run-end", "{text}");
        let run_id = run_id_of(&text.lines().map(str::to_string).collect::<Vec<_>>());
        assert_eq!(
            by_seq(&receiver.records(), &run_id).len(),
            text.lines().count()
        );
    }
);

/// The overhead of export on a run with 1,000 hook decisions: no export, receiver up,
/// receiver down (run by hand: `cargo test --release --test otlp_export -- --ignored
/// --nocapture overhead`).
#[test]
#[ignore]
fn overhead_of_export_on_1000_hook_decisions() {
    let Some(w) = World::new(Who::Root) else {
        return;
    };
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let receiver = Receiver::start();
    let down = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let down = format!("http://{down}");
    let profile = profile(&w, "5s");
    let mut times: [Vec<f64>; 3] = Default::default();
    for round in 0..rounds {
        for (i, endpoint) in [None, Some(receiver.endpoint()), Some(down.clone())]
            .iter()
            .enumerate()
        {
            let r = run(
                &w,
                &format!("bench-{round}-{i}"),
                endpoint.as_deref(),
                &profile,
                1000,
            );
            if i == 1 {
                assert_eq!(r.status["export"]["unsent"], 0, "{}", r.status);
            }
            let decisions = r
                .lines()
                .iter()
                .filter(|l| l.contains(r#""kind":"decision""#))
                .count();
            assert_eq!(decisions, 1000, "every call decided and recorded");
            times[i].push(r.took.as_secs_f64());
        }
    }
    println!(
        "every run (s): no export {:?}, up {:?}, down {:?}",
        times[0], times[1], times[2]
    );
    let median = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[v.len() / 2]
    };
    let [mut none, mut up, mut down_t] = times;
    let (none, up, down_t) = (median(&mut none), median(&mut up), median(&mut down_t));
    println!(
        "1000 hook decisions, median of {rounds}: no export {none:.3} s, receiver up {up:.3} s ({:.3}x), receiver down {down_t:.3} s ({:.3}x)",
        up / none,
        down_t / none
    );
}
