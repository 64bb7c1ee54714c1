//! The ordinary-day corpus (`ordinary-commands.toml`, issue 49): every command goes through the
//! hook's decision under `default`, in a scratch repository whose `.gitignore` lists the usual
//! build output; none labelled `drops-work` may be allowed, and how many of each class were
//! asked or denied is printed (`cargo test --test ordinary -- --nocapture`).
mod common;

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use serde_json::json;
use stepproof_hook::policy::{CallContext, Context, compile};
use stepproof_hook::{Decision, Verdict};

#[derive(Deserialize)]
struct Corpus {
    group: Vec<Group>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Group {
    source: String,
    class: String,
    commands: Vec<String>,
}

const CLASSES: &[&str] = &[
    "read",
    "writes",
    "scratch",
    "builds",
    "git-work",
    "drops-work",
    "network",
    "system",
];

/// A checkout as a developer has one: a `.git` directory and a `.gitignore` naming build output,
/// caches and the local `.env` (which is ignored but not disposable).
pub fn scratch_repository(root: &Path) {
    std::fs::create_dir_all(root.join(".git/info")).expect("create .git");
    std::fs::write(
        root.join(".gitignore"),
        "/target\ndist/\nbuild/\nnode_modules/\n__pycache__/\n.pytest_cache/\n.mypy_cache/\n\
         .next/\ncoverage/\n.cache/\n.env\n/data\n",
    )
    .expect("write .gitignore");
    for dir in [
        "src",
        "dist",
        "target/debug/incremental",
        "node_modules",
        "docs",
        "data",
    ] {
        std::fs::create_dir_all(root.join(dir)).expect("create a directory");
    }
}

fn verdict(policy: &stepproof_hook::policy::CompiledPolicy, command: &str) -> Verdict {
    let input = json!({ "command": command });
    let call = CallContext {
        cwd: Some(&policy.workspace),
        effects: None,
    };
    policy.check_with_tmpdir("Bash", &input, &call, Some("/tmp"))
}

#[test]
fn no_ordinary_command_that_drops_work_is_allowed_and_the_friction_is_counted() {
    let corpus: Corpus =
        toml::from_str(include_str!("ordinary-commands.toml")).expect("the corpus parses");
    let workspace = tempfile::tempdir().expect("a scratch workspace");
    let root = workspace
        .path()
        .canonicalize()
        .expect("canonical workspace");
    scratch_repository(&root);
    let policy = compile(
        &common::builtin_config("default"),
        &Context {
            workspace: root.clone(),
            home: common::HOME.into(),
            profile_name: "default".into(),
        },
    )
    .expect("default compiles");
    let mut counts: BTreeMap<&str, [usize; 3]> = BTreeMap::new();
    let mut dropped = Vec::new();
    let mut not_allowed = Vec::new();
    let mut total = 0;
    for group in &corpus.group {
        assert!(
            CLASSES.contains(&group.class.as_str()),
            "unknown class `{}` ({})",
            group.class,
            group.source
        );
        assert!(!group.source.trim().is_empty(), "a group without a source");
        for command in &group.commands {
            total += 1;
            let verdict = verdict(&policy, command);
            let slot = match verdict.decision {
                Decision::Allow => 0,
                Decision::Ask => 1,
                Decision::Deny => 2,
            };
            counts.entry(group.class.as_str()).or_default()[slot] += 1;
            if verdict.decision == Decision::Allow && group.class == "drops-work" {
                dropped.push(format!("{command}\n    {}", verdict.reason));
            }
            if verdict.decision != Decision::Allow {
                not_allowed.push(format!(
                    "[{}] {command}\n    {}",
                    group.class, verdict.reason
                ));
            }
        }
    }
    assert!(
        total >= 300,
        "the corpus must hold at least 300 commands, has {total}"
    );
    let (mut asked, mut denied) = (0, 0);
    println!("class         allowed  asked  denied");
    for class in CLASSES {
        let [a, q, d] = counts.get(class).copied().unwrap_or_default();
        asked += q;
        denied += d;
        println!("{class:<12} {a:>8} {q:>6} {d:>7}");
    }
    println!("{total} ordinary commands: {asked} asked, {denied} denied");
    for line in &not_allowed {
        println!("{line}");
    }
    assert!(
        dropped.is_empty(),
        "commands that can drop work were allowed:\n{}",
        dropped.join("\n")
    );
}
