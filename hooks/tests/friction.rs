//! The friction corpus (`friction.txt`): ordinary commands from the tools' own documentation
//! meet no deny and no question under the default profile. Entries the policy still refuses are
//! listed in `NOT_YET`; that list may only shrink (an entry that now passes fails the test, so
//! that it is taken off).
mod common;

use serde_json::json;
use stepproof_hook::{Decision, check_tool};

/// Corpus entries the default profile does not allow yet. Only ever shorter.
const NOT_YET: &[&str] = &[
    "git rev-list HEAD",
    "git rev-list @{upstream}..HEAD",
    "git rev-list --format=medium HEAD",
    "git rev-list HEAD -- Documentation/",
    "git rev-list --author=you@example.com --since=1.year.ago --all",
    "git rev-list --objects HEAD",
    "git rev-list --count HEAD",
    "git rev-list --disk-usage --objects --all",
    "git count-objects -v",
    "git cat-file -t HEAD",
    "git cat-file -p HEAD",
    "git cat-file -p HEAD:README.md",
    "git cat-file -s HEAD",
    "git ls-tree HEAD",
    "git ls-tree -r --name-only HEAD",
    "git merge-base main feature",
    "git merge-base --is-ancestor HEAD~3 HEAD",
    "git for-each-ref --format='%(refname:short)' refs/heads/",
    "git for-each-ref --sort=-committerdate refs/heads/",
    "git show-ref --tags",
    "git name-rev HEAD",
    "node -e 'console.log(process.versions.node)'",
    "python3 -c 'import sys; print(sys.version)'",
    "sed -n '1,80p' src/main.rs",
    "sed -n '$p' file.txt",
    "sed -n '45,50p' file.txt",
    "sed -n '/start/,/end/p' notes.txt",
    "sed -n 1~2p file.txt",
    "sed '10q' file.txt",
    "sed 's/hello/world/' input.txt",
    "sed -E 's/(foo)+/bar/g' input.txt",
    "sed '/^$/d' input.txt",
    "sed = input.txt",
    "sed 'y/abc/xyz/' input.txt",
    "sed -n '/^fn /=' src/lib.rs",
    "sed -e 's/a/b/' -e 's/c/d/' input.txt",
    "sed --debug -n 1p input.txt",
    "awk '{print $1}' access.log",
    "awk '/li/ { print $0 }' mail-list",
    "awk 'length($0) > 80' data",
    "awk '{ if (length($0) > max) max = length($0) } END { print max }' data",
    "awk 'NF > 0' data",
    "awk 'BEGIN { for (i = 1; i <= 7; i++) print int(101 * rand()) }'",
    "awk '{ nlines++ } END { print nlines }' data",
    "awk 'END { print NR }' data",
    "awk '{ print NR, $0 }' data",
    "awk -F: '{ print $1 }' /etc/passwd",
    "awk '$3 > 5' data",
    "awk '{ sum += $3 } END { print sum }' inventory-shipped",
    "awk -v n=3 'NR <= n' data",
    "awk 'BEGIN { FS = \",\" } { print $2 }' data.csv",
    "awk '{ $3 = \"\"; print }' data",
    "awk 'length > 72' data",
    "awk '/foo/ { n++ } END { printf \"%d\\n\", n }' data",
];

fn corpus() -> Vec<&'static str> {
    include_str!("friction.txt")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

#[test]
fn ordinary_commands_meet_no_deny_and_no_question() {
    let policy = common::builtin("default");
    let commands = corpus();
    assert!(
        commands.len() >= 300,
        "the friction corpus must hold at least 300 commands, has {}",
        commands.len()
    );
    let mut refused = Vec::new();
    let mut fixed = Vec::new();
    for command in &commands {
        let verdict = check_tool(&policy, "Bash", &json!({ "command": command }));
        let allowed = verdict.decision == Decision::Allow;
        match (allowed, NOT_YET.contains(command)) {
            (false, false) => refused.push(format!("{command}\n    {verdict}")),
            (true, true) => fixed.push(*command),
            _ => {}
        }
    }
    assert!(
        fixed.is_empty(),
        "now allowed, take them off NOT_YET: {fixed:#?}"
    );
    assert!(
        refused.is_empty(),
        "{} of {} ordinary commands are refused or asked:\n{}",
        refused.len(),
        commands.len(),
        refused.join("\n")
    );
    for listed in NOT_YET {
        assert!(
            commands.contains(listed),
            "NOT_YET lists `{listed}`, which is not in the corpus"
        );
    }
}
