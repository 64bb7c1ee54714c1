//! Property tests, both ways: a denied command at any depth of any construct is denied by
//! its own rule (never `unknown`); the same construct around an allowed command stays allowed.
mod common;

use proptest::prelude::*;
use serde_json::json;
use stepproof_hook::{Decision, check_tool};

const DENIED: &[(&str, &str)] = &[
    ("sudo id", "privilege"),
    ("doas ls", "privilege"),
    ("claude -p hi", "nested-agent"),
    ("claude --bare", "nested-agent"),
    ("npx @anthropic-ai/claude-code -p x", "nested-agent"),
    ("git push --force origin main", "history-rewrite"),
    ("reboot", "disk-system"),
    ("dd if=/dev/zero of=disk.img", "disk-system"),
    ("rm -rf /", "destructive-rm"),
    ("/usr/bin/sudo ls", "privilege"),
    ("\\sudo id", "privilege"),
    ("s''udo id", "privilege"),
    ("git push -fu origin main", "history-rewrite"),
    ("git push origin --del main", "history-rewrite"),
    ("git push origin {main,+main}", "history-rewrite"),
    ("cat .env", "env-files"),
    ("grep KEY .env.local", "env-files"),
    ("rm -rf /usr/", "destructive-rm"),
    ("awk 'BEGIN { system(\"sudo id\") }'", "privilege"),
];

const ALLOWED: &[&str] = &[
    "ls -la",
    "git status",
    "cargo test --workspace",
    "echo hello",
    "grep -rn needle src",
    "/bin/ls src",
    "git commit -m 'a message'",
    "git rev-list --count HEAD",
    "awk '{print $1}' access.log",
    "cat .env.example",
];

/// Wrappers that take a simple command.
fn wrap_simple(kind: u8, inner: &str) -> String {
    match kind % 8 {
        0 => format!("env LANG=C {inner}"),
        1 => format!("timeout 30 {inner}"),
        2 => format!("nice -n 5 {inner}"),
        3 => format!("nohup {inner}"),
        4 => format!("time {inner}"),
        5 => format!("command {inner}"),
        6 => format!("env -i {inner}"),
        _ => format!("echo input | xargs {inner}"),
    }
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Constructs that take any command line; `depth` keeps here-document delimiters unique.
fn wrap_list(kind: u8, inner: &str, depth: usize) -> String {
    match kind % 20 {
        0 => format!("( {inner} )"),
        1 => format!("{{ {inner}; }}"),
        2 => format!("true && {inner}"),
        3 => format!("false || {inner}"),
        4 => format!("ls | {inner}"),
        5 => format!("{inner} | cat"),
        6 => format!("if true; then {inner}; fi"),
        7 => format!("if {inner}; then echo yes; else echo no; fi"),
        8 => format!("while false; do {inner}; done"),
        9 => format!("for i in a b; do {inner}; done"),
        // `(x)` and no `;;`: brush-parser 0.4 cannot parse `x)` inside `$(…)` nor `;;` inside
        // `<(…)`; both fail closed (unknown), see the corpus.
        10 => format!("case x in (x) {inner}; esac"),
        11 => format!("f{depth}() {{ {inner}; }}"),
        // Spaced: `$((…))` is arithmetic in bash, where `sudo id` is a syntax error and runs
        // nothing; `$( (…) )` is the substitution of a subshell.
        12 => format!("echo $( {inner} )"),
        13 => format!("echo \"$( {inner} )\""),
        14 => format!("cat <( {inner} )"),
        15 => format!("sh -c {}", quote(inner)),
        16 => format!("bash -c {}", quote(inner)),
        17 => format!("eval {}", quote(inner)),
        // Grouped so that text after it stays valid shell (a here-document ends its line).
        18 => format!("{{ sh <<'E{depth}'\n{inner}\nE{depth}\n}}"),
        _ => format!("echo start; {inner}; echo end"),
    }
}

fn build(base: &str, simple: &[u8], lists: &[u8]) -> String {
    let mut command = base.to_string();
    for kind in simple {
        command = wrap_simple(*kind, &command);
    }
    for (depth, kind) in lists.iter().enumerate() {
        command = wrap_list(*kind, &command, depth);
    }
    command
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn denied_command_stays_denied_at_any_depth(
        which in 0..DENIED.len(),
        simple in proptest::collection::vec(any::<u8>(), 0..3),
        lists in proptest::collection::vec(any::<u8>(), 0..5),
    ) {
        let (base, rule) = DENIED[which];
        let command = build(base, &simple, &lists);
        for profile in ["default", "ci"] {
            let verdict = check_tool(&common::builtin(profile), "Bash", &json!({ "command": command }));
            prop_assert_eq!(verdict.decision, Decision::Deny, "{} under {}: {}", command, profile, verdict.reason);
            prop_assert_eq!(&verdict.rule_id, rule, "{} under {}: {}", command, profile, verdict.reason);
        }
    }

    #[test]
    fn allowed_command_stays_allowed_in_the_same_constructs(
        which in 0..ALLOWED.len(),
        simple in proptest::collection::vec(any::<u8>(), 0..3),
        lists in proptest::collection::vec(any::<u8>(), 0..5),
    ) {
        let command = build(ALLOWED[which], &simple, &lists);
        for profile in ["default", "ci"] {
            let verdict = check_tool(&common::builtin(profile), "Bash", &json!({ "command": command }));
            prop_assert_eq!(verdict.decision, Decision::Allow, "{} under {}: {}", command, profile, verdict.reason);
        }
    }
}

/// Reference matcher: plain recursion over characters.
fn wildcard_reference(p: &[char], t: &[char]) -> bool {
    match p.split_first() {
        None => t.is_empty(),
        Some(('*', rest)) => (0..=t.len()).any(|i| wildcard_reference(rest, &t[i..])),
        Some(('?', rest)) => !t.is_empty() && wildcard_reference(rest, &t[1..]),
        Some((c, rest)) => t.first() == Some(c) && wildcard_reference(rest, &t[1..]),
    }
}

proptest! {
    #[test]
    fn wildcard_matches_the_reference(pattern in "[ab*?é]{0,8}", text in "[abé]{0,8}") {
        let p: Vec<char> = pattern.chars().collect();
        let t: Vec<char> = text.chars().collect();
        prop_assert_eq!(stepproof_hook::pattern::wildcard(&pattern, &text), wildcard_reference(&p, &t));
    }
}
