//! The profile loader against arbitrary input: whatever the file holds, loading it never panics,
//! and a file that is refused is refused with its name and a line (`file:line:column: what`).
//! The inputs are the built-in profiles' own text, mutated line by line (lines dropped, repeated,
//! swapped, values replaced by hostile ones, bytes inserted), and free-form text.

use proptest::prelude::*;
use std::path::Path;
use stepproof::profile::{Profile, ProfileError};

const SOURCES: &[&str] = &[
    include_str!("../profiles/default.toml"),
    include_str!("../profiles/strict.toml"),
    include_str!("../profiles/ci.toml"),
];

/// Values a careless or hostile profile might hold.
const VALUES: &[&str] = &[
    "0",
    "-1",
    "65536",
    "4294967295",
    "18446744073709551615",
    "99999999999999999999999",
    "1e999",
    "nan",
    "\"\"",
    "\"/\"",
    "\"~\"",
    "\"..\"",
    "\"../..\"",
    "\"*\"",
    "\"\\u0000\"",
    "\"https://example.com\"",
    "\"[::1]\"",
    "\"a:0\"",
    "[]",
    "[\"\"]",
    "[\"/\", \"~\"]",
    "{}",
    "{ a = 1 }",
    "true",
    "\"host\"",
    "\"none\"",
    "\"allowlist\"",
    "\"env:\"",
    "1979-05-27T07:32:00Z",
    "'''\nx'''",
];

#[derive(Debug, Clone)]
enum Mutation {
    Drop(usize),
    Repeat(usize),
    Swap(usize, usize),
    ReplaceValue(usize, usize),
    Insert(usize, String),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        any::<usize>().prop_map(Mutation::Drop),
        any::<usize>().prop_map(Mutation::Repeat),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::Swap(a, b)),
        (any::<usize>(), 0..VALUES.len()).prop_map(|(a, v)| Mutation::ReplaceValue(a, v)),
        (any::<usize>(), "[ -~\\n\\[\\]=\"'{},.#\\\\]{0,24}")
            .prop_map(|(a, text)| Mutation::Insert(a, text)),
    ]
}

fn apply(text: &str, mutations: &[Mutation]) -> String {
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    for m in mutations {
        if lines.is_empty() {
            lines.push(String::new());
        }
        let n = lines.len();
        match m {
            Mutation::Drop(i) => {
                lines.remove(i % n);
            }
            Mutation::Repeat(i) => {
                let line = lines[i % n].clone();
                lines.insert(i % n, line);
            }
            Mutation::Swap(a, b) => lines.swap(a % n, b % n),
            Mutation::ReplaceValue(i, v) => {
                let line = &mut lines[i % n];
                if let Some(eq) = line.find('=') {
                    line.truncate(eq + 1);
                    line.push(' ');
                    line.push_str(VALUES[*v]);
                }
            }
            Mutation::Insert(i, text) => lines.insert(i % n, text.clone()),
        }
    }
    lines.join("\n") + "\n"
}

/// Loads `text` from a file: never a panic; an error names the file and a line.
fn check(text: &str) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fuzzed.toml");
    std::fs::write(&path, text).unwrap();
    let loaded = std::panic::catch_unwind(|| Profile::load(Some(Path::new(&path))));
    let Ok(loaded) = loaded else {
        return Err(TestCaseError::fail(format!(
            "the loader panicked on:\n{text}"
        )));
    };
    match loaded {
        Ok(profile) => {
            // What loads also hashes and serializes (explain and the launch do both).
            prop_assert!(profile.policy_hash().starts_with("sha256:"));
        }
        Err(ProfileError::Syntax { origin, line, .. }) => {
            prop_assert!(line >= 1, "{text}");
            prop_assert!(
                origin.ends_with("fuzzed.toml") || origin.starts_with("<built-in"),
                "{origin}"
            );
        }
        Err(ProfileError::ExtendsLoop { .. }) => {}
        Err(other) => {
            return Err(TestCaseError::fail(format!(
                "refused without a line: {other}\n--- for:\n{text}"
            )));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn mutated_builtin_profiles(source in 0..SOURCES.len(), mutations in prop::collection::vec(mutation(), 1..6)) {
        check(&apply(SOURCES[source], &mutations))?;
    }

    #[test]
    fn free_form_text(text in "[ -~\\n\\[\\]=\"'{},.#]{0,200}") {
        check(&text)?;
    }
}
