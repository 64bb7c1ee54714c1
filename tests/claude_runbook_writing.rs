//! Writing runbooks with the real Claude Code (2.1.328) against the mock Messages API: under the
//! `ci` profile the model starts StepProof's `runbook-author` agent, which reads its generated
//! format reference, writes a runbook and checks it with the supervisor's `stepproof` (both
//! allowed by the profile), and the file passes `stepproof runbook check` outside. As root and as
//! the test user.

#[path = "support/e2e.rs"]
mod e2e;
mod support;

use e2e::*;
use serde_json::{Value, json};
use std::fs;
use support::*;

/// What the scripted author writes: a runbook with verifier evidence and its `[verifiers]`.
const AUTHORED: &str = r#"id = "lint"
title = "Keep the code formatted"
owner = "tests"

[verifiers]
tier2 = ["claude-haiku-4-5"]

[[steps]]
id = "format"
title = "Format the code"
instructions = "Run the formatter on src/ and fix what it reports."
acceptance = ["every file under src/ is formatted"]

[[steps.deny.files]]
id = "no-tests"
reason = "formatting does not touch the tests"
access = "write"
paths = ["tests/**"]

[[steps.evidence]]
command = { run = ["cargo", "fmt", "--check"], timeout = "5m" }

[[steps.evidence]]
files_unchanged = { paths = ["tests/**"] }

[[steps.evidence]]
verifier = { tier = 2 }
"#;

const CHECK: &str = "/run/stepproof/stepproof runbook check";

/// Every string of a request's body, joined: what the model read.
fn seen(request: &Value) -> String {
    fn walk(v: &Value, out: &mut String) {
        match v {
            Value::String(s) => {
                out.push_str(s);
                out.push('\n');
            }
            Value::Array(items) => items.iter().for_each(|i| walk(i, out)),
            Value::Object(map) => map.values().for_each(|i| walk(i, out)),
            _ => {}
        }
    }
    let mut out = String::new();
    walk(&request["body"], &mut out);
    out
}

// Under `ci` (the test profile extends it), the model starts `runbook-author` (allowed, rule
// runbook-author); the author — whose system prompt is the definition with the reference
// generated from the schema — writes runbooks/lint.toml from the description it was given and
// runs `stepproof runbook check` on it inside (allowed, rule runbook-check), which says it is
// valid; the same file passes `stepproof runbook check` outside, under the same profile.
both_claude!(
    the_runbook_author_writes_a_runbook_check_accepts,
    |w: &World| {
        fs::create_dir_all(w.workspace.join("runbooks")).unwrap();
        chown_tree(&w.workspace, w.owner);
        let file = w.workspace.join("runbooks/lint.toml");
        let mock = Mock::start(
            w,
            json!({
                "turns": [
                    tool("Agent", json!({
                        "description": "write a runbook",
                        "prompt": "AUTHOR-E2E: write runbooks/lint.toml: one step that formats the code, proven by cargo fmt --check and a tier 2 verifier, tests untouched",
                        "subagent_type": "runbook-author"
                    })),
                    text("main done")
                ],
                "threads": [{"marker": "AUTHOR-E2E", "turns": [
                    tool("Write", json!({"file_path": file, "content": AUTHORED})),
                    bash(&format!("{CHECK} runbooks/lint.toml")),
                    text("runbooks/lint.toml: valid")
                ]}]
            }),
        );
        let profile = profile(w, &mock, true, "");
        let run = run_claude(w, &profile, &[]);
        assert!(run.status.success(), "{}", run.describe());
        run.expect_decision(&call_id(None, 0), "allow", "runbook-author");
        run.expect_decision(&call_id(Some(0), 0), "allow", "write-workspace");
        run.expect_decision(&call_id(Some(0), 1), "allow", "runbook-check");
        // The author was told the format as the schema has it (what the old text got wrong).
        let author_request = mock
            .messages_requests()
            .into_iter()
            .find(|r| seen(r).contains("AUTHOR-E2E"))
            .unwrap_or_else(|| panic!("the author's conversation never reached the mock"));
        let system = author_request["body"]["system"].to_string();
        for needle in [
            "You write StepProof runbooks.",
            "* `description` (optional, a string)",
            "## `[verifiers]`",
            "## `verifier = { … }`",
            "files_unchanged",
            CHECK,
        ] {
            assert!(
                system.contains(needle),
                "{needle:?} is not in the author's system prompt:\n{system}"
            );
        }
        // The check inside ran and accepted it.
        let checked = mock.expect_result(&call_id(Some(0), 1));
        assert!(
            !checked.is_error
                && checked
                    .text
                    .contains("runbooks/lint.toml: runbook lint (1 step) is valid; hash "),
            "{checked:?}\n{}",
            run.describe()
        );
        assert_eq!(fs::read_to_string(&file).unwrap(), AUTHORED);
        // And outside, under the profile the run used.
        let outside = std::process::Command::new(STEPPROOF)
            .args(["runbook", "check", "--profile", &profile])
            .arg(&file)
            .output()
            .unwrap();
        assert!(outside.status.success(), "{}", describe(&outside));
        assert!(
            String::from_utf8_lossy(&outside.stdout).contains("is valid; hash "),
            "{}",
            describe(&outside)
        );
    }
);

const FOLLOWED: &str = r#"id = "followed"
title = "A runbook being followed"
owner = "tests"

[[steps]]
id = "notes"
title = "Write the notes"
instructions = "Write notes.md"
[[steps.evidence]]
files_exist = { paths = ["notes.md"] }
"#;

// Inside a run, the runbook being followed is read-only: Claude Code's Write, Edit and a shell
// append to it are denied by the hook (rule held-read-only) with a reason naming the file and
// the runbook — not the raw `EBUSY: resource busy or locked, rename …` the Write tool's rename
// over the bind-mounted file gave — and the file is unchanged.
both_claude!(
    writing_the_runbook_inside_is_denied_in_words,
    |w: &World| {
        let file = w.workspace.join("runbook.toml");
        fs::write(&file, FOLLOWED).unwrap();
        chown_tree(&w.workspace, w.owner);
        let mock = Mock::start(
            w,
            json!([
                tool(
                    "Write",
                    json!({"file_path": file, "content": "id = \"mine\"\n"})
                ),
                tool(
                    "Edit",
                    json!({"file_path": file, "old_string": "Write notes.md", "new_string": "Nothing to do"})
                ),
                bash("echo '# more' >> runbook.toml"),
                text("fin")
            ]),
        );
        let run = run_claude_as(
            w,
            &Launch {
                run_args: &["--runbook", "runbook.toml", "--runbook-fresh"],
                ..Launch::default()
            },
            &profile(w, &mock, true, ""),
            &[],
        );
        for turn in 0..3 {
            let id = call_id(None, turn);
            run.expect_decision(&id, "deny", "held-read-only");
            let result = mock.expect_result(&id);
            assert!(
                result.is_error
                    && result.text.contains(&format!(
                        "{} is read-only for the whole run",
                        file.display()
                    ))
                    && result
                        .text
                        .contains("While runbook 'followed' runs, its file cannot change")
                    && !result.text.contains("EBUSY"),
                "turn {turn}: {result:?}\n{}",
                run.describe()
            );
        }
        assert_eq!(fs::read_to_string(&file).unwrap(), FOLLOWED);
        // The run ended with its step open, as any such run does.
        assert_eq!(run.status.code(), Some(116), "{}", run.describe());
    }
);
