//! Compiling policies: the built-in sections, validation errors, merge and `disable`, and the
//! JSON the launcher mounts.
mod common;

use serde_json::json;
use stepproof_hook::config::HookConfig;
use stepproof_hook::policy::{CompiledPolicy, PolicyError, compile};
use stepproof_hook::{Decision, check_tool, render_check};

#[derive(serde::Deserialize)]
struct Fragment {
    hook: HookConfig,
}

fn parse(text: &str) -> HookConfig {
    toml::from_str::<Fragment>(text)
        .expect("fragment parses")
        .hook
}

#[test]
fn builtins_compile_and_survive_json() {
    for name in ["default", "ci", "strict"] {
        let policy = common::builtin(name);
        let text = serde_json::to_string(&policy).expect("serializes");
        let back: CompiledPolicy = serde_json::from_str(&text).expect("deserializes");
        assert_eq!(back, policy, "{name}");
        // Deterministic: the launcher hashes the config.
        let config = common::builtin_config(name);
        assert_eq!(
            serde_json::to_string(&config).ok(),
            serde_json::to_string(&config.clone()).ok()
        );
        let toml_again: HookConfig =
            toml::from_str(&toml::to_string(&config).expect("to toml")).expect("from toml");
        assert_eq!(toml_again, config, "{name} round-trips through TOML");
    }
}

#[test]
fn builtin_scalars_match_the_issue_table() {
    let d = common::builtin("default");
    let c = common::builtin("ci");
    let s = common::builtin("strict");
    assert_eq!(
        (d.default, d.unknown, d.unknown_tool),
        (Decision::Ask, Decision::Deny, Decision::Deny)
    );
    assert_eq!(
        (c.default, c.unknown, c.unknown_tool),
        (Decision::Deny, Decision::Deny, Decision::Deny)
    );
    assert_eq!(
        (s.default, s.unknown, s.unknown_tool),
        (Decision::Deny, Decision::Deny, Decision::Deny)
    );
    assert!(
        s.write.iter().all(|g| g.glob == "/dev/null"),
        "strict writes nothing"
    );
}

#[test]
fn ci_has_the_default_allow_list_and_never_asks() {
    let default = common::builtin_config("default");
    let ci = common::builtin_config("ci");
    let allows = |c: &HookConfig| {
        c.bash
            .iter()
            .filter(|r| r.decision == Decision::Allow)
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(allows(&default), allows(&ci));
    // What `ci` inherits and does not disable never asks (nobody is there to answer).
    let asking: Vec<&str> = ci
        .bash
        .iter()
        .filter(|r| !ci.disable.contains(&r.id) && r.decision == Decision::Ask)
        .map(|r| r.id.as_str())
        .collect();
    assert!(asking.is_empty(), "ci asks: {asking:?}");
    assert_eq!(default.files, ci.files);
}

#[test]
fn validation_errors_name_the_rule() {
    let ctx = common::context("t");
    let dup = parse(
        r#"[hook]
[[hook.bash]]
id = "a"
reason = "r"
decision = "allow"
commands = ["ls *"]
[[hook.tools]]
id = "a"
reason = "r"
decision = "allow"
names = ["X"]
"#,
    );
    assert_eq!(
        compile(&dup, &ctx),
        Err(PolicyError::DuplicateId { id: "a".into() })
    );
    let no_reason = parse(
        "[hook]\n[[hook.tools]]\nid = \"x\"\nreason = \"\"\ndecision = \"deny\"\nnames = [\"X\"]\n",
    );
    assert!(matches!(
        compile(&no_reason, &ctx),
        Err(PolicyError::MissingText {
            field: "reason",
            ..
        })
    ));
    let empty = parse("[hook]\n[[hook.bash]]\nid = \"x\"\nreason = \"r\"\ndecision = \"deny\"\n");
    assert!(matches!(
        compile(&empty, &ctx),
        Err(PolicyError::EmptyRule { .. })
    ));
    let dots = parse(
        "[hook]\n[[hook.files]]\nid = \"x\"\nreason = \"r\"\ndecision = \"allow\"\naccess = \"write\"\npaths = [\"../**\"]\n",
    );
    assert!(matches!(
        compile(&dots, &ctx),
        Err(PolicyError::BadPattern { .. })
    ));
    let star = parse(
        "[hook]\n[[hook.bash]]\nid = \"x\"\nreason = \"r\"\ndecision = \"allow\"\ncommands = [\"* x\"]\n",
    );
    assert!(matches!(
        compile(&star, &ctx),
        Err(PolicyError::BadPattern { .. })
    ));
    let typo = parse("[hook]\ndisable = [\"nope\"]\n");
    assert_eq!(
        compile(&typo, &ctx),
        Err(PolicyError::UnknownDisabled { id: "nope".into() })
    );
    let unknown_field = toml::from_str::<Fragment>("[hook]\ndefualt = \"allow\"\n");
    assert!(
        unknown_field.is_err(),
        "a misspelt key is an error, not ignored"
    );
    let mut relative = common::context("t");
    relative.workspace = "relative/dir".into();
    assert!(matches!(
        compile(&HookConfig::default(), &relative),
        Err(PolicyError::RelativeContext { .. })
    ));
}

#[test]
fn extends_merges_and_disable_drops_inherited_rules() {
    let base = common::builtin_config("default");
    let child = parse(
        r#"[hook]
default = "deny"
disable = ["privilege"]

[[hook.bash]]
id = "deploy"
reason = "this project deploys from the sandbox"
decision = "allow"
commands = ["sudo deploy *", "deploy *"]
"#,
    );
    let merged = HookConfig::merge(base, child);
    let policy = compile(&merged, &common::context("child")).expect("compiles");
    assert_eq!(policy.default, Decision::Deny);
    let ok = check_tool(&policy, "Bash", &json!({"command": "sudo deploy prod"}));
    assert_eq!(
        (ok.decision, ok.rule_id.as_str()),
        (Decision::Allow, "deploy")
    );
    let other = check_tool(&policy, "Bash", &json!({"command": "sudo id"}));
    assert_eq!(other.decision, Decision::Deny);
    assert_eq!(other.rule_id, "default");
}

#[test]
fn an_empty_section_denies_everything() {
    let policy = compile(&HookConfig::default(), &common::context("empty")).expect("compiles");
    for (tool, input) in [
        ("Bash", json!({"command": "ls"})),
        ("Read", json!({"file_path": "/work/project/a"})),
        ("Whatever", json!({})),
    ] {
        assert_eq!(
            check_tool(&policy, tool, &input).decision,
            Decision::Deny,
            "{tool}"
        );
    }
}

#[test]
fn check_output_is_one_line_with_decision_rule_and_reason() {
    let verdict = check_tool(
        &common::builtin("default"),
        "Bash",
        &json!({"command": "curl https://x"}),
    );
    let line = render_check(&verdict);
    assert!(!line.contains('\n'));
    assert!(
        line.starts_with("ask\tnet-tools\tStepProof asks about Bash"),
        "{line}"
    );
}

#[test]
fn deny_messages_say_what_is_allowed() {
    let verdict = check_tool(
        &common::builtin("ci"),
        "Bash",
        &json!({"command": "mysterytool --go"}),
    );
    assert_eq!(verdict.decision, Decision::Deny);
    assert!(
        verdict.reason.contains("'mysterytool --go'"),
        "{}",
        verdict.reason
    );
    assert!(verdict.reason.contains("(rule default)"));
    assert!(
        verdict.reason.contains("Allowed here: ls, git, cargo"),
        "{}",
        verdict.reason
    );
}

/// Every refusal the model can meet says what was refused, why, and what to do instead, in one
/// sentence: a rule's reason is "why; what instead" (the message adds the command or path and
/// the rule id), and the profile-wide decisions say what is allowed or how to write the
/// command so that it can be checked.
#[test]
fn every_refusal_says_why_and_what_to_do_instead() {
    for name in ["default", "ci", "strict"] {
        let policy = common::builtin(name);
        for rule in policy
            .rules
            .iter()
            .filter(|r| r.decision != Decision::Allow)
        {
            let (why, instead) = rule.reason.split_once("; ").unwrap_or_default();
            assert!(
                !why.trim().is_empty() && instead.trim().len() > 10,
                "[{name}] rule {} must read \"why; what to do instead\": {}",
                rule.id,
                rule.reason
            );
            assert!(
                !rule.reason.contains('\n') && !rule.reason.trim_end().ends_with('.'),
                "[{name}] rule {}: one sentence, the message adds the full stop",
                rule.id
            );
        }
    }
    // The message names what was refused, the reason and the rule.
    let default = common::builtin("default");
    for (tool, input, subject, rule) in [
        (
            "Bash",
            json!({"command": "git push -fu origin main"}),
            "'git push -f -u origin main'",
            "history-rewrite",
        ),
        (
            "Bash",
            json!({"command": "git reset --hard"}),
            "'git reset --hard'",
            "discard-changes",
        ),
        (
            "Bash",
            json!({"command": "cat .env"}),
            "'/work/project/.env'",
            "env-files",
        ),
        (
            "Read",
            json!({"file_path": "/work/project/.env"}),
            "'/work/project/.env'",
            "env-files",
        ),
        (
            "Bash",
            json!({"command": "rm -rf /"}),
            "'rm -r -f /'",
            "destructive-rm",
        ),
        (
            "Bash",
            json!({"command": "mysterytool --go"}),
            "'mysterytool --go'",
            "default",
        ),
        (
            "Bash",
            json!({"command": "$CMD x"}),
            "computed at run time",
            "unknown",
        ),
    ] {
        let verdict = check_tool(&default, tool, &input);
        assert_ne!(verdict.decision, Decision::Allow, "{input}");
        assert_eq!(verdict.rule_id, rule, "{input}");
        assert!(
            verdict.reason.contains(subject),
            "{input}: {}",
            verdict.reason
        );
        assert!(
            verdict.reason.contains("; ")
                || verdict.reason.contains("Allowed here:")
                || verdict.reason.contains("Write commands with literal names"),
            "{input}: no alternative in {}",
            verdict.reason
        );
    }
}

// `denial_loop_after`: unset is the default (3), a child's value wins over its base's, 0 is
// off, and past 1000 the section does not compile.
#[test]
fn denial_loop_after_is_merged_defaulted_and_bounded() {
    assert_eq!(parse("[hook]").denial_loop_after(), 3);
    let base = parse("[hook]\ndenial_loop_after = 5");
    assert_eq!(
        HookConfig::merge(base.clone(), parse("[hook]")).denial_loop_after(),
        5
    );
    let child = HookConfig::merge(base, parse("[hook]\ndenial_loop_after = 0"));
    assert_eq!(child.denial_loop_after(), 0);
    assert!(compile(&child, &common::context("t")).is_ok());
    assert!(
        compile(
            &parse("[hook]\ndenial_loop_after = 1000"),
            &common::context("t")
        )
        .is_ok()
    );
    assert_eq!(
        compile(
            &parse("[hook]\ndenial_loop_after = 1001"),
            &common::context("t")
        )
        .err(),
        Some(PolicyError::DenialLoopAfter {
            value: 1001,
            max: 1000
        })
    );
}

/// Issue 49's named cases, each with its decision, rule and the words its reason must (and must
/// not) hold, in checkouts as a developer has them: `ignoring` ignores the usual build output
/// (and `.env`, `/data`, which are ignored but not disposable), `plain` ignores nothing, `linked`
/// ignores `dist` but `dist` is a symlink to the sources.
#[test]
fn issue_49_cases_get_their_decision_and_a_true_reason() {
    use stepproof_hook::policy::{CallContext, Context};
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let base = scratch.path().canonicalize().expect("canonical scratch");
    let repository = |name: &str, ignore: &str| {
        let root = base.join(name);
        std::fs::create_dir_all(root.join(".git/info")).expect("create .git");
        std::fs::write(root.join(".gitignore"), ignore).expect("write .gitignore");
        for dir in ["src", "target/debug/incremental", "data"] {
            std::fs::create_dir_all(root.join(dir)).expect("create a directory");
        }
        root
    };
    let usual = "/target\ndist/\nbuild/\nnode_modules/\n.env\n/data\n";
    let ignoring = repository("ignoring", usual);
    std::fs::create_dir_all(ignoring.join("dist")).expect("create dist");
    let plain = repository("plain", "");
    std::fs::create_dir_all(plain.join("dist")).expect("create dist");
    let linked = repository("linked", "dist\n");
    std::os::unix::fs::symlink(linked.join("src"), linked.join("dist")).expect("link dist");
    let policy = |profile: &str, root: &std::path::Path| {
        compile(
            &common::builtin_config(profile),
            &Context {
                workspace: root.to_path_buf(),
                home: common::HOME.into(),
                profile_name: profile.into(),
            },
        )
        .expect("the profile compiles")
    };
    let policies = [
        ("default", "ignoring", policy("default", &ignoring)),
        ("ci", "ignoring", policy("ci", &ignoring)),
        ("default", "plain", policy("default", &plain)),
        ("default", "linked", policy("default", &linked)),
    ];
    // (profile, checkout, command, decision, rule, words the reason holds, words it must not)
    type Row<'a> = (
        &'a str,
        &'a str,
        &'a str,
        Decision,
        &'a str,
        &'a [&'a str],
        &'a [&'a str],
    );
    let reading = ["changes nothing"];
    #[rustfmt::skip]
    let rows: &[Row] = &[
        // Reasons that said "reading" of commands that remove or write.
        ("ci", "ignoring", "find . -delete", Decision::Allow, "workspace-files", &["removing files"], &reading),
        ("default", "ignoring", "git branch -d feature", Decision::Allow, "git-work", &["branching", "deletes only merged branches"], &reading),
        ("default", "ignoring", "find . -fprint /tmp/out", Decision::Allow, "workspace-files", &["allowed where the file rules allow writing"], &reading),
        // Dropping work asks, naming what would be lost.
        ("default", "ignoring", "git checkout -f main", Decision::Ask, "discard-changes", &["uncommitted changes", "cannot bring back"], &[]),
        ("default", "ignoring", "git checkout -tf main", Decision::Ask, "discard-changes", &["uncommitted changes", "cannot bring back"], &[]),
        ("default", "ignoring", "git checkout --force main", Decision::Ask, "discard-changes", &["uncommitted changes", "cannot bring back"], &[]),
        ("default", "ignoring", "git switch -f main", Decision::Ask, "discard-changes", &["uncommitted changes", "cannot bring back"], &[]),
        ("default", "ignoring", "git switch --discard-changes main", Decision::Ask, "discard-changes", &["uncommitted changes", "cannot bring back"], &[]),
        ("default", "ignoring", "git reset --merge", Decision::Ask, "discard-staged", &["staged changes", "cannot bring back"], &[]),
        // The ordinary commands: allowed in default.
        ("default", "ignoring", "rm -rf /tmp/build", Decision::Allow, "workspace-files", &["removing files"], &reading),
        ("default", "ignoring", "rm -rf \"$TMPDIR/x\"", Decision::Allow, "workspace-files", &["removing files"], &reading),
        ("default", "ignoring", "rm -rf dist", Decision::Allow, "workspace-files", &["removing files"], &reading),
        ("default", "ignoring", "rm -rf target/debug/incremental", Decision::Allow, "workspace-files", &["removing files"], &reading),
        ("default", "ignoring", "tar -tf a.tar", Decision::Allow, "inspect", &["listing files"], &[]),
        ("default", "ignoring", "tar -tzf dist.tar.gz", Decision::Allow, "inspect", &["listing files"], &[]),
        ("default", "ignoring", "git --help", Decision::Allow, "git-inspect", &["changes nothing"], &[]),
        ("default", "ignoring", "git help reset", Decision::Allow, "git-inspect", &["changes nothing"], &[]),
        ("default", "ignoring", "git submodule status", Decision::Allow, "git-inspect", &["changes nothing"], &[]),
        ("default", "ignoring", "npm list --depth=0", Decision::Allow, "package-inspect", &["listing packages"], &[]),
        // Removal that is not disposable is asked.
        ("default", "plain", "rm -rf dist", Decision::Ask, "remove-tree", &["directory tree", "uncommitted work"], &[]),
        ("default", "ignoring", "rm -rf dist/../src", Decision::Ask, "remove-tree", &["directory tree"], &[]),
        // A symlinked `dist`: `rm -rf dist` removes the link alone (checked with coreutils 9:
        // the sources stay), `rm -rf dist/` and `dist/*` empty the sources through it.
        ("default", "linked", "rm -rf dist", Decision::Allow, "workspace-files", &["removing files"], &reading),
        ("default", "linked", "rm -rf dist/", Decision::Ask, "remove-tree", &["directory tree"], &[]),
        ("default", "linked", "rm -rf dist/*", Decision::Ask, "remove-tree", &["directory tree"], &[]),
        ("default", "linked", "rm -rf dist/.", Decision::Ask, "remove-tree", &["directory tree"], &[]),
        ("default", "linked", "find -L dist -delete", Decision::Ask, "remove-tree", &["directory tree"], &[]),
        ("default", "linked", "find -H dist -delete", Decision::Ask, "remove-tree", &["directory tree"], &[]),
        ("default", "ignoring", "find -L dist -delete", Decision::Ask, "remove-tree", &["directory tree"], &[]),
        ("default", "ignoring", "find dist -follow -delete", Decision::Ask, "remove-tree", &["directory tree"], &[]),
        ("default", "ignoring", "rm -rf .env", Decision::Ask, "remove-tree", &["directory tree"], &[]),
        ("default", "ignoring", "rm -rf data", Decision::Ask, "remove-tree", &["directory tree"], &[]),
        ("default", "ignoring", "ln -s src dist2 && rm -rf dist", Decision::Ask, "remove-tree", &["directory tree"], &[]),
    ];
    let mut failures = Vec::new();
    for (profile, checkout, command, decision, rule, holds, lacks) in rows {
        let (_, _, policy) = policies
            .iter()
            .find(|(p, c, _)| p == profile && c == checkout)
            .expect("a policy for the row");
        let call = CallContext {
            cwd: Some(&policy.workspace),
            effects: None,
        };
        let verdict =
            policy.check_with_tmpdir("Bash", &json!({ "command": command }), &call, Some("/tmp"));
        let reason_ok = holds.iter().all(|w| verdict.reason.contains(w))
            && !lacks.iter().any(|w| verdict.reason.contains(w));
        if verdict.decision != *decision || verdict.rule_id != *rule || !reason_ok {
            failures.push(format!(
                "[{profile}, {checkout}] `{command}`: expected {decision} ({rule}) saying {holds:?} and not {lacks:?}, got {}",
                render_check(&verdict)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
