//! What leaves a run through the export, end to end: the real Claude Code under `stepproof-run`
//! against the mock Messages API, with the audit export pointed at a loopback receiver that
//! decodes with the OpenTelemetry protobuf definitions. Secrets are planted everywhere a run
//! carries text the agent shapes — a tool's input, a command's output and its error text, file
//! names, a URL's query, a request header, an environment value — and none of them is in any
//! byte the receiver got in the default redaction, while the local log keeps what it records.
//! As root and as the dedicated unprivileged user.

#[path = "support/e2e.rs"]
mod e2e;
#[path = "support/otlp.rs"]
mod otlp;
mod support;

use e2e::*;
use serde_json::json;
use std::fs;
use std::time::Duration;
use support::*;

both_claude!(
    secrets_the_agent_handles_never_reach_the_collector,
    |w: &World| {
        // Long enough that no hash or id in the export holds it by chance.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        let tag = format!("{:016x}", nanos ^ u64::from(w.owner.0));
        let secret = |what: &str| format!("SEKRIT{what}{tag}");
        // What the agent reads, runs and names.
        fs::write(
            w.workspace.join("config.ini"),
            format!("API_TOKEN={}\n", secret("ErrorText")),
        )
        .unwrap();
        fs::write(
            w.workspace.join("out.txt"),
            format!("{}\n", secret("Output")),
        )
        .unwrap();
        let receiver = otlp::Receiver::start();
        let mock = Mock::start(
            w,
            json!([
                bash(&format!("echo {} > /dev/null", secret("ToolInput"))),
                bash("cat out.txt"),
                bash("cat config.ini; exit 3"),
                tool(
                    "Write",
                    json!({ "file_path": w.workspace.join(format!("notes-{}.md", secret("FileName"))),
                            "content": secret("Content") })
                ),
                bash(&format!(
                    "mkdir -p .vscode && touch .vscode/{}.json",
                    secret("SweptName")
                )),
                bash("python3 fetch.py"),
                text("fin")
            ]),
        );
        fs::write(
            w.workspace.join("fetch.py"),
            format!(
                r#"import os, urllib.request
req = urllib.request.Request("http://127.0.0.2:{port}/v1/anything?token={query}",
                             headers={{"X-Api-Token": "{header}"}})
try:
    urllib.request.urlopen(req, timeout=10).read()
except Exception as e:
    print("fetch:", type(e).__name__)
print(os.environ.get("EXPORT_TEST_VALUE"))
"#,
                port = mock.port,
                query = secret("Query"),
                header = secret("Header"),
            ),
        )
        .unwrap();
        chown_tree(&w.workspace, w.owner);
        // The environment value goes into the profile's `set_env` table (the helper's last
        // line of [process]); the export ships on its own flush timeout.
        let profile_path = profile(w, &mock, true, "");
        let text = fs::read_to_string(&profile_path).unwrap().replace(
            "CLAUDE_CODE_MAX_RETRIES = \"1\" }",
            &format!(
                "CLAUDE_CODE_MAX_RETRIES = \"1\", EXPORT_TEST_VALUE = \"{}\" }}",
                secret("EnvValue")
            ),
        );
        assert!(text.contains("EXPORT_TEST_VALUE"), "{text}");
        fs::write(
            &profile_path,
            format!("{text}\n[audit.export]\nflush_timeout = \"30s\"\n"),
        )
        .unwrap();
        let endpoint = receiver.endpoint();
        let run = run_claude_as(
            w,
            &Launch {
                env: &[("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)],
                ..Launch::default()
            },
            &profile_path,
            &[],
        );
        assert!(run.status.success(), "{}", run.describe());
        // The controls: every call ran as scripted and the model saw the planted values.
        assert!(
            mock.expect_result(&call_id(None, 1))
                .text
                .contains(&secret("Output"))
        );
        let failed = mock.expect_result(&call_id(None, 2));
        assert!(
            failed.is_error && failed.text.contains(&secret("ErrorText")),
            "{failed:?}"
        );
        assert!(
            mock.expect_result(&call_id(None, 5))
                .text
                .contains(&secret("EnvValue"))
        );
        assert!(
            mock.requests().iter().any(|r| r["path"]
                .as_str()
                .is_some_and(|p| p.contains(&secret("Query")))),
            "the fetch did not reach the mock"
        );
        // The local log keeps what it records (the tool's input, the file's name, the swept
        // path), and the export has every record of it.
        let local = fs::read_to_string(&run.audit_path).unwrap();
        for what in ["ToolInput", "FileName", "SweptName"] {
            assert!(
                local.contains(&secret(what)),
                "{what} is not in the local log"
            );
        }
        let lines = local.lines().count();
        assert!(
            receiver.wait_for(Duration::from_secs(20), |got| got.len() >= lines),
            "the receiver got {} of {lines} records",
            receiver.records().len()
        );
        // Not one byte of any planted secret left through the export.
        let shipped = receiver.otlp_json();
        let bodies: String = receiver
            .records()
            .iter()
            .map(|r| format!("{}\n{:?}\n", r.body, r.attributes))
            .collect();
        for what in [
            "ToolInput",
            "Output",
            "ErrorText",
            "FileName",
            "Content",
            "SweptName",
            "Query",
            "Header",
            "EnvValue",
        ] {
            let s = secret(what);
            assert!(
                !shipped.contains(&s) && !bodies.contains(&s),
                "{what} was shipped to the collector"
            );
        }
        assert!(!shipped.contains(&tag), "a planted value was shipped");
        // What ships is the structure: the decisions with their rule ids, the network records
        // with their hosts.
        assert!(
            bodies.contains("\"rule_id\"") && bodies.contains("127.0.0.2"),
            "{bodies}"
        );
    }
);
