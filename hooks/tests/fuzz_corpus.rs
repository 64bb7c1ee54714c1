//! Replays the fuzz target's seed corpus (`hooks/fuzz/corpus/parse_decide`) in the normal test
//! run: every input gives a verdict naming a rule, and nothing panics.
mod common;

use serde_json::json;
use stepproof_hook::{check_tool, shell};

#[test]
fn fuzz_corpus_gets_a_decision_without_panicking() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/parse_decide");
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .expect("the fuzz corpus exists")
        .map(|e| e.expect("entry").path())
        .collect();
    entries.sort();
    assert!(
        entries.len() >= 30,
        "the seed corpus is too small: {}",
        entries.len()
    );
    let policies = ["default", "ci", "strict"].map(common::builtin);
    for path in entries {
        let bytes = std::fs::read(&path).expect("read corpus file");
        let command = String::from_utf8_lossy(&bytes);
        let _ = shell::analyze(&command);
        for policy in &policies {
            let verdict = check_tool(policy, "Bash", &json!({ "command": command }));
            assert!(
                !verdict.rule_id.is_empty(),
                "{}: no rule id",
                path.display()
            );
            assert!(!verdict.reason.is_empty(), "{}: no reason", path.display());
        }
    }
}
