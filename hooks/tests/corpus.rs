//! Replays `corpus.toml`: every case asserts the decision and the rule id.
mod common;

use serde::Deserialize;
use serde_json::{Value, json};
use stepproof_hook::load::{self, Needs};
use stepproof_hook::policy::SANDBOX_TMPDIR;
use stepproof_hook::{Decision, check_tool};

#[derive(Deserialize)]
struct Corpus {
    group: Vec<Group>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Group {
    profile: String,
    decision: Decision,
    rule: String,
    #[serde(default)]
    bash: Vec<String>,
    #[serde(default)]
    tool: Option<String>,
    #[serde(default)]
    inputs: Vec<String>,
}

#[test]
fn corpus_cases_get_their_decision_and_rule() {
    let corpus: Corpus = toml::from_str(include_str!("corpus.toml")).expect("corpus parses");
    let mut failures = Vec::new();
    let mut count = 0;
    for group in &corpus.group {
        let policy = common::builtin(&group.profile);
        let mut cases: Vec<(String, Value)> = group
            .bash
            .iter()
            .map(|c| ("Bash".to_string(), json!({ "command": c })))
            .collect();
        if let Some(tool) = &group.tool {
            for input in &group.inputs {
                let value: Value = serde_json::from_str(input).expect("corpus input is JSON");
                cases.push((tool.clone(), value));
            }
        }
        let file = load::encode(&policy).expect("policy encodes");
        assert_eq!(
            load::parse(&file, &Needs::all()).expect("full load"),
            policy
        );
        for (tool, input) in cases {
            count += 1;
            let verdict = check_tool(&policy, &tool, &input);
            // The hook binary loads only what the call can reach: same verdict.
            let partial = load::parse(
                &file,
                // What `check_tool` assumes: the sandbox's TMPDIR.
                &Needs::for_call_with_tmpdir(&tool, &input, Some(SANDBOX_TMPDIR)),
            )
            .expect("partial load");
            let lazy = check_tool(&partial, &tool, &input);
            if lazy != verdict {
                failures.push(format!(
                    "[{}] {tool} {input}: partial load gives {lazy}, full load {verdict}",
                    group.profile
                ));
            }
            if verdict.decision != group.decision || verdict.rule_id != group.rule {
                failures.push(format!(
                    "[{}] {tool} {input}: expected {} ({}), got {} ({}): {}",
                    group.profile,
                    group.decision,
                    group.rule,
                    verdict.decision,
                    verdict.rule_id,
                    verdict.reason
                ));
            }
        }
    }
    assert!(
        count >= 300,
        "the corpus must hold at least 300 cases, has {count}"
    );
    assert!(
        failures.is_empty(),
        "{} of {count} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    println!("{count} corpus cases passed");
}
