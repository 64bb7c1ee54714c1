//! Tests of `stepproof runbook check`: problems placed at their line, dependency order, rules
//! that would widen the profile, evidence fields.

use super::rule_instances::instances;
use super::*;
use serde_json::json;
use stepproof_hook::config::Access;

fn problems(text: &str) -> Vec<String> {
    let profile = Profile::builtin_default().unwrap();
    check(text, &profile)
        .problems
        .iter()
        .map(|p| p.render("r.toml"))
        .collect()
}

const HEAD: &str = "id = \"rb\"\ntitle = \"T\"\nowner = \"o\"\n";

fn step(id: &str, extra: &str) -> String {
    format!(
        "[[steps]]\nid = \"{id}\"\ntitle = \"t\"\ninstructions = \"i\"\n{extra}[[steps.evidence]]\ncommand = {{ run = [\"true\"] }}\n"
    )
}

#[test]
fn a_strict_runbook_refuses_trust_where_another_warns() {
    let trusting = "[[steps]]\nid = \"a\"\ntitle = \"t\"\ninstructions = \"i\"\n[[steps.evidence]]\ncommand = { run = [\"cargo\", \"test\"], trust = [\"target/\"] }\n";
    let lax = problems(&format!("{HEAD}{trusting}"));
    assert_eq!(
        lax,
        vec![
            "r.toml:9:47: warning: step `a`: the proof of `cargo test` trusts \"target/\" as the agent left it (build state the agent can forge: compiled tests, fingerprints, installed packages); a pass says so"
        ]
    );
    let strict = problems(&format!("{HEAD}strict = true\n{trusting}"));
    assert_eq!(
        strict,
        vec![
            "r.toml:10:47: error: step `a`: the runbook is strict: the proof of `cargo test` may not trust \"target/\" as the agent left it (build state the agent can forge); drop `trust` (the evidence sandbox then rebuilds it) or `strict`"
        ]
    );
    // Without trust, a strict runbook is valid; `strict = false` is the default, and
    // neither changes the hash of a runbook that does not say it.
    let plain = format!("{HEAD}{}", step("a", ""));
    assert_eq!(
        problems(&format!("{HEAD}strict = true\n{}", step("a", ""))),
        Vec::<String>::new()
    );
    let profile = Profile::builtin_default().unwrap();
    let hash = |text: &str| check(text, &profile).runbook.unwrap().hash();
    assert_eq!(
        hash(&plain),
        hash(&format!("{HEAD}strict = false\n{}", step("a", "")))
    );
    assert_ne!(
        hash(&plain),
        hash(&format!("{HEAD}strict = true\n{}", step("a", "")))
    );
}

#[test]
fn a_good_runbook_has_no_problems() {
    let text = format!(
        "{HEAD}{}{}",
        step("a", ""),
        step("b", "depends_on = [\"a\"]\n")
    );
    assert_eq!(problems(&text), Vec::<String>::new());
    let report = check(&text, &Profile::builtin_default().unwrap());
    assert_eq!(report.order, vec![0, 1]);
}

#[test]
fn dependency_order_puts_a_step_after_what_it_needs() {
    let text = format!(
        "{HEAD}{}{}{}",
        step("c", "depends_on = [\"b\", \"a\"]\n"),
        step("b", "depends_on = [\"a\"]\n"),
        step("a", "")
    );
    let report = check(&text, &Profile::builtin_default().unwrap());
    assert_eq!(report.errors(), 0, "{:?}", report.problems);
    assert_eq!(report.order, vec![2, 1, 0]);
}

#[test]
fn every_problem_is_reported_in_one_pass() {
    // Two unknown keys (one inline table's, one a step's, the second over two lines) and a
    // cycle: all three at once, each at its place; the line numbers are the file's.
    let text = format!(
        "{HEAD}colour = \"red\"\n{}{}",
        step("a", "depends_on = [\"b\"]\nextra = [\n  1,\n  2,\n]\n"),
        step("b", "depends_on = [\"a\"]\n")
    );
    let found = problems(&text);
    assert_eq!(found.len(), 3, "{found:#?}");
    assert!(
        found[0].starts_with("r.toml:4:1: error: unknown field `colour`"),
        "{found:#?}"
    );
    assert!(
        found[1].contains("error: dependency cycle: a → b → a"),
        "{found:#?}"
    );
    assert!(
        found[2].starts_with("r.toml:10:1: error: unknown field `extra`"),
        "{found:#?}"
    );
    // An unknown table with a header of its own: reported alone (its body cannot be told
    // apart from the table before it once the header is gone).
    let header = format!("{HEAD}{}[steps.mystery]\nx = 1\n", step("a", ""));
    let found = problems(&header);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].contains("unknown field `mystery`"), "{found:#?}");
    // A key of an inline table goes with its comma, first or last: nothing else is said.
    for evidence in [
        "command = { run = [\"true\"], bogus = 1 }",
        "command = { bogus = 1, run = [\"true\"] }",
    ] {
        let text = format!(
            "{HEAD}[[steps]]\nid = \"a\"\ntitle = \"t\"\ninstructions = \"i\"\n[[steps.evidence]]\n{evidence}\n[[steps]]\nid = \"a\"\ntitle = \"t\"\ninstructions = \"i\"\n[[steps.evidence]]\ncommand = {{ run = [\"true\"] }}\n"
        );
        let found = problems(&text);
        assert_eq!(found.len(), 2, "{found:#?}");
        assert!(found[0].contains("unknown field `bogus`"), "{found:#?}");
        assert!(found[1].contains("used twice"), "{found:#?}");
    }
    // A syntax error is alone, as ever.
    let broken = format!("{HEAD}colour = \n{}", step("a", "depends_on = [\"a\"]\n"));
    assert_eq!(problems(&broken).len(), 1);
}

#[test]
fn cycles_are_named_once_at_the_first_step_of_them() {
    let text = format!(
        "{HEAD}{}{}{}",
        step("a", "depends_on = [\"c\"]\n"),
        step("b", "depends_on = [\"a\"]\n"),
        step("c", "depends_on = [\"b\"]\n")
    );
    let found = problems(&text);
    assert_eq!(
        found,
        vec![
            "r.toml:8:15: error: dependency cycle: a → c → b → a (none of these steps could ever open)"
        ],
    );
    let selfish = format!("{HEAD}{}", step("a", "depends_on = [\"a\"]\n"));
    assert_eq!(
        problems(&selfish),
        vec!["r.toml:8:15: error: dependency cycle: a → a (none of these steps could ever open)"]
    );
}

#[test]
fn instances_of_patterns() {
    let calls = instances("bash", "commands", None, "git push *").unwrap();
    assert_eq!(calls[0].1["command"], "'git' 'push'");
    assert_eq!(calls[1].1["command"], "'git' 'push' x");
    let calls = instances("bash", "commands", None, "rm * /\\* *").unwrap();
    assert_eq!(calls[0].1["command"], "'rm' '/*'");
    let calls = instances("bash", "env", None, "GIT_*").unwrap();
    assert_eq!(calls[0].1["command"], "GIT_=x");
    assert_eq!(calls[1].1["command"], "GIT_X=x");
    let calls = instances("files", "paths", Some(Access::Write), "src/**/*.rs").unwrap();
    assert_eq!(
        calls[0],
        (
            "Write".into(),
            json!({"file_path": "src/.rs", "content": ""})
        )
    );
    assert_eq!(calls[1].1["file_path"], "src/x/x.rs");
    let calls = instances("files", "paths", Some(Access::Read), "/etc/**").unwrap();
    assert_eq!(calls[0].1["file_path"], "/etc");
    let calls = instances("web", "domains", None, "*.example.com").unwrap();
    assert_eq!(calls[0].1["url"], "https://example.com/");
    assert_eq!(calls[1].1["url"], "https://x.example.com/");
    assert!(instances("tools", "names", None, "Bash").is_none());
    assert_eq!(
        instances("tools", "names", None, "mcp__gh__*").unwrap()[1].0,
        "mcp__gh__x"
    );
}

fn profile(name: &str) -> Profile {
    let file =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("profiles/{name}.toml"));
    Profile::load(Some(&file)).unwrap()
}

fn found_with(text: &str, profile: &Profile) -> Vec<String> {
    check(text, profile)
        .problems
        .iter()
        .map(|p| p.render("r.toml"))
        .collect()
}

/// Every rule kind: what the profile denies outright is an error, what it asks about a
/// warning, what it allows nothing; judged on the rule's instances, so a pattern that lets
/// something through is never flagged for what it also names.
#[test]
fn allow_rules_never_widen_the_profile() {
    let rules = |kind: &str, body: &str| {
        format!(
            "{HEAD}{}[[steps.allow.{kind}]]\nid = \"r\"\nreason = \"r\"\n{body}\n",
            step("a", "")
        )
    };
    let default = Profile::builtin_default().unwrap();
    let strict = profile("strict");
    for (text, profile, expected) in [
        // Denied outright by a rule, by the default, for an unknown tool.
        (
            rules("bash", "commands = [\"dd *\"]"),
            &default,
            Some(
                "error: step `a`: allow rule `r`: `dd *` tries to widen the profile: profile `default` denies it (rule `disk-system`",
            ),
        ),
        (
            rules("web", "domains = [\"docs.rs\"]"),
            &strict,
            Some(
                "error: step `a`: allow rule `r`: `docs.rs` tries to widen the profile: profile `strict` denies it (its default for calls no rule matches)",
            ),
        ),
        (
            rules("tools", "names = [\"mcp__x__*\"]"),
            &strict,
            Some(
                "error: step `a`: allow rule `r`: `mcp__x__*` tries to widen the profile: profile `strict` denies it (its decision for tools it has no rule for)",
            ),
        ),
        (rules("tools", "names = [\"TodoWrite\"]"), &strict, None),
        (
            rules("files", "access = \"read\"\npaths = [\"~/.ssh/**\"]"),
            &default,
            Some(
                "`~/.ssh/**` tries to widen the profile: profile `default` denies it (rule `secret-files`",
            ),
        ),
        (
            rules("files", "access = \"read\"\npaths = [\"@env-files\"]"),
            &default,
            Some(
                "`@env-files` tries to widen the profile: profile `default` denies it (rule `env-files`",
            ),
        ),
        (
            rules("bash", "env = [\"CLAUDE_CODE_SIMPLE\"]"),
            &default,
            Some(
                "`CLAUDE_CODE_SIMPLE` tries to widen the profile: profile `default` denies it (rule `nested-agent`",
            ),
        ),
        // Asked: a warning.
        (
            rules("bash", "commands = [\"curl *\"]"),
            &default,
            Some(
                "warning: step `a`: allow rule `r`: `curl *` stays \"ask\": profile `default` asks about it (rule `net-tools`",
            ),
        ),
        (rules("agents", "types = [\"Explore\"]"), &default, None),
        // Allowed, or allowed for some of what it names: nothing to say.
        (rules("bash", "commands = [\"git push *\"]"), &default, None),
        (
            rules("files", "access = \"write\"\npaths = [\"src/**\"]"),
            &default,
            None,
        ),
        (
            rules("web", "domains = [\"*.rust-lang.org\"]"),
            &default,
            None,
        ),
        (
            rules("files", "access = \"read\"\npaths = [\"src/**\"]"),
            &strict,
            None,
        ),
    ] {
        let found = found_with(&text, profile);
        match expected {
            Some(needle) => assert!(
                found.iter().any(|f| f.contains(needle)),
                "{needle}\n{found:#?}\n{text}"
            ),
            None => assert!(
                found
                    .iter()
                    .all(|f| !f.contains("widen") && !f.contains("error")),
                "{found:#?}\n{text}"
            ),
        }
    }
}

#[test]
fn step_rules_need_a_profile_with_a_hook() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nohook.toml");
    std::fs::write(&path, "name = \"nohook\"\n").unwrap();
    let bare = Profile::load(Some(&path)).unwrap();
    assert!(bare.hook.is_none());
    let text = format!(
        "{HEAD}{}[[steps.deny.bash]]\nid = \"r\"\nreason = \"r\"\ncommands = [\"x *\"]\n",
        step("a", "")
    );
    assert_eq!(
        found_with(&text, &bare),
        vec![
            "r.toml:10:9: error: step `a` has deny rules, but profile `nohook` has no [hook] section to enforce them"
        ]
    );
    // Without rules, any profile will do.
    assert!(found_with(&format!("{HEAD}{}", step("a", "")), &bare).is_empty());
}

#[test]
fn rule_ids_are_unique_within_a_step_and_every_bad_rule_is_reported() {
    let text = format!(
        "{HEAD}{}[[steps.allow.bash]]\nid = \"r\"\nreason = \"r\"\ncommands = [\"* x\"]\n[[steps.deny.files]]\nid = \"r\"\nreason = \"\"\naccess = \"read\"\npaths = [\"a\"]\n[[steps.deny.web]]\nid = \"w\"\nreason = \"r\"\ndomains = [\"\"]\n",
        step("a", "")
    );
    assert_eq!(
        found_with(&text, &Profile::builtin_default().unwrap()),
        vec![
            "r.toml:13:13: error: step `a`: allow rule: rule `r`: pattern `* x` must start with a command name",
            "r.toml:14:1: error: step `a`: deny rule: a files rule has an empty `reason`: every rule needs an id and a reason",
            "r.toml:15:1: error: step `a`: rule id `r` is used twice (also in its allow rules): every rule needs its own id",
            "r.toml:22:12: error: step `a`: deny rule `w`: an entry of `domains` is empty",
        ]
    );
}

#[test]
fn evidence_fields_are_checked() {
    let evidence = |item: &str| {
        format!(
            "{HEAD}[[steps]]\nid = \"a\"\ntitle = \"t\"\ninstructions = \"i\"\nevidence = [{item}]\n"
        )
    };
    let default = Profile::builtin_default().unwrap();
    for (item, expected) in [
        (
            "{ command = { run = [] } }",
            "8:27: error: step `a`: the evidence command's `run` names no program",
        ),
        (
            "{ files_exist = { paths = [] } }",
            "8:31: error: step `a`: `files_exist` names no path",
        ),
        (
            "{ files_changed = { paths = [\"/etc/passwd\"] } }",
            "8:42: error: step `a`: files_changed path \"/etc/passwd\" must be a glob relative to the workspace",
        ),
        (
            "{ files_exist = { paths = [\"../x\"] } }",
            "8:40: error: step `a`: files_exist path \"../x\"",
        ),
        (
            "{ files_unchanged = { paths = [\"tests/**\", \"~/x\"] } }",
            "8:56: error: step `a`: files_unchanged path \"~/x\" must be a glob relative to the workspace",
        ),
        (
            "{ files_unchanged = { paths = [] } }",
            "8:35: error: step `a`: `files_unchanged` names no path",
        ),
        (
            "{ files_unchanged = { paths = [\"t\"], include_ignored = 1 } }",
            "8:68: error: invalid type: integer `1`, expected a boolean",
        ),
        (
            "{ files_changed = { paths = [\"t/**\"] } }, { files_unchanged = { paths = [\"t/**\"] } }",
            "8:42: error: step `a`: files_changed \"t/**\" can never hold: the step protects the same paths (files_unchanged (item 1))",
        ),
        (
            "{ approval = { approvers = \" \", deadline = \"1h\" } }",
            "8:28: error: step `a`: the approval's `approvers` is empty",
        ),
    ] {
        let found = found_with(&evidence(item), &default);
        assert!(
            found
                .iter()
                .any(|f| f.starts_with(&format!("r.toml:{expected}"))),
            "{expected}\n{found:#?}"
        );
    }
}
