//! A typical session — read, search, edit, build, test, commit — meets zero denials (and zero
//! questions) under the default and ci profiles.
mod common;

use serde_json::{Value, json};
use stepproof_hook::{Decision, check_tool};

fn typical_session() -> Vec<(&'static str, Value)> {
    let ws = common::WORKSPACE;
    vec![
        (
            "TodoWrite",
            json!({"todos": [{"content": "fix the bug", "status": "in_progress", "activeForm": "Fixing"}]}),
        ),
        (
            "Bash",
            json!({"command": "git status", "description": "Show working tree status"}),
        ),
        (
            "Bash",
            json!({"command": "ls -la", "description": "List files"}),
        ),
        ("Glob", json!({"pattern": "**/*.rs"})),
        (
            "Grep",
            json!({"pattern": "fn parse", "path": format!("{ws}/src"), "output_mode": "content", "-n": true}),
        ),
        ("Read", json!({"file_path": format!("{ws}/src/lib.rs")})),
        (
            "Read",
            json!({"file_path": format!("{ws}/Cargo.toml"), "offset": 1, "limit": 50}),
        ),
        (
            "Bash",
            json!({"command": "rg -n 'TODO|FIXME' src | head -20"}),
        ),
        (
            "Bash",
            json!({"command": "git log --oneline -10 && git diff --stat"}),
        ),
        (
            "Agent",
            json!({"subagent_type": "Explore", "description": "find callers", "prompt": "Find callers of parse"}),
        ),
        (
            "Edit",
            json!({"file_path": format!("{ws}/src/lib.rs"), "old_string": "a + b", "new_string": "a.saturating_add(b)", "replace_all": false}),
        ),
        (
            "Write",
            json!({"file_path": format!("{ws}/tests/regression.rs"), "content": "#[test]\nfn t() {}\n"}),
        ),
        (
            "Bash",
            json!({"command": "cargo build 2>&1 | tail -20", "timeout": 600000}),
        ),
        (
            "Bash",
            json!({"command": "cargo test --all-targets 2>&1 | tail -30"}),
        ),
        (
            "Bash",
            json!({"command": "cargo clippy --all-targets -- -D warnings && cargo fmt --check"}),
        ),
        (
            "Bash",
            json!({"command": "cd /work/project && cargo test -p core -- --nocapture"}),
        ),
        ("Bash", json!({"command": "npm test"})),
        ("Bash", json!({"command": "git diff"})),
        (
            "Bash",
            json!({"command": "git add src/lib.rs tests/regression.rs"}),
        ),
        (
            "Bash",
            json!({"command": "git commit -m \"$(cat <<'EOF'\nFix overflow in parse\n\nCo-Authored-By: Claude <noreply@anthropic.com>\nEOF\n)\""}),
        ),
        (
            "Bash",
            json!({"command": "git checkout -b fix/overflow && git push -u origin fix/overflow"}),
        ),
        (
            "Bash",
            json!({"command": "mkdir -p target/tmp && echo done > target/tmp/marker"}),
        ),
    ]
}

#[test]
fn typical_session_meets_no_denial() {
    for profile in ["default", "ci"] {
        let policy = common::builtin(profile);
        for (tool, input) in typical_session() {
            let verdict = check_tool(&policy, tool, &input);
            assert_eq!(
                verdict.decision,
                Decision::Allow,
                "{profile}: {tool} {input}: {}",
                verdict.reason
            );
        }
    }
}
