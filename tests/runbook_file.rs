//! Runbook files through the real `stepproof runbook check|explain|schema`: every class of broken
//! file gives its exact error at its file:line:column, the shipped examples pass, `explain`'s
//! hash is the content's, the generated schema accepts the examples, and an unreadable runbook
//! is a clear error (as root and as the test user, who differ in what they may read).

mod support;

use serde_json::Value;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use support::{STEPPROOF, describe, ensure_test_user, is_root, run_binary_for_user, skip_or_fail};

const EXAMPLES: [&str; 3] = ["fix-bug", "dependency-upgrade", "release"];

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("examples/runbooks/{name}.toml"))
}

fn stepproof(args: &[&str]) -> Output {
    Command::new(STEPPROOF)
        .args(args)
        .output()
        .expect("run stepproof")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A runbook's text in a file of its own; the directory lives as long as the value.
struct File {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

fn write(text: &str) -> File {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rb.toml");
    fs::write(&path, text).unwrap();
    File { _dir: dir, path }
}

const HEAD: &str = "id = \"rb\"\ntitle = \"T\"\nowner = \"o\"\n";

/// A step (lines 4 to 9 when first after `HEAD`, `extra` at line 8) with one command evidence.
fn step(id: &str, extra: &str) -> String {
    format!(
        "[[steps]]\nid = \"{id}\"\ntitle = \"t\"\ninstructions = \"i\"\n{extra}[[steps.evidence]]\ncommand = {{ run = [\"true\"] }}\n"
    )
}

#[test]
fn each_broken_file_class_gives_its_exact_error() {
    let good = format!("{HEAD}{}", step("a", ""));
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "syntax",
            format!("{HEAD}[[steps]\n"),
            "4:9: error: unclosed array table, expected `]`",
        ),
        (
            "unknown top-level key",
            format!("{HEAD}ownr = \"x\"\n{}", step("a", "")),
            "4:1: error: unknown field `ownr`, expected one of `id`, `title`, `description`, `owner`, `steps`",
        ),
        (
            "unknown step key",
            format!("{HEAD}{}", step("a", "instruction = \"x\"\n")),
            "8:1: error: unknown field `instruction`",
        ),
        (
            "unknown key in a rule",
            format!(
                "{HEAD}{}[[steps.deny.bash]]\nid = \"r\"\nreason = \"r\"\ndecision = \"deny\"\ncommands = [\"x *\"]\n",
                step("a", "")
            ),
            "13:1: error: unknown field `decision`, expected one of `id`, `reason`, `commands`, `env`",
        ),
        (
            "missing runbook id",
            format!("title = \"T\"\nowner = \"o\"\n{}", step("a", "")),
            "1:1: error: missing field `id`",
        ),
        (
            "missing step id",
            format!(
                "{HEAD}[[steps]]\ntitle = \"t\"\ninstructions = \"i\"\nevidence = [{{ files_exist = {{ paths = [\"x\"] }} }}]\n"
            ),
            "4:1: error: missing field `id`",
        ),
        (
            "invalid id",
            format!("{HEAD}{}", step("a b", "")),
            "5:6: error: invalid id \"a b\"",
        ),
        (
            "duplicate step ids",
            format!("{HEAD}{}{}", step("a", ""), step("a", "")),
            "11:1: error: step id `a` is used twice (first on line 5): every step needs its own id",
        ),
        (
            "depends_on a missing step",
            format!("{HEAD}{}", step("a", "depends_on = [\"nope\"]\n")),
            "8:15: error: step `a` depends on `nope`, which is not a step of this runbook (its steps: a)",
        ),
        (
            "cycle",
            format!(
                "{HEAD}{}{}",
                step("a", "depends_on = [\"b\"]\n"),
                step("b", "depends_on = [\"a\"]\n")
            ),
            "8:15: error: dependency cycle: a → b → a (none of these steps could ever open)",
        ),
        (
            "allow rule the profile denies outright",
            format!(
                "{HEAD}{}[[steps.allow.bash]]\nid = \"r\"\nreason = \"r\"\ncommands = [\"cargo test *\", \"sudo *\"]\n",
                step("a", "")
            ),
            "13:29: error: step `a`: allow rule `r`: `sudo *` tries to widen the profile: profile `default` denies it (rule `privilege`:",
        ),
        (
            "allow rule for a tool the profile denies outright",
            format!(
                "{HEAD}{}[[steps.allow.tools]]\nid = \"r\"\nreason = \"r\"\nnames = [\"mcp__github__*\"]\n",
                step("a", "")
            ),
            "13:10: error: step `a`: allow rule `r`: `mcp__github__*` tries to widen the profile: profile `default` denies it (its decision for tools it has no rule for)",
        ),
        (
            "malformed pattern",
            format!(
                "{HEAD}{}[[steps.deny.files]]\nid = \"r\"\nreason = \"r\"\naccess = \"write\"\npaths = [\"src/**\", \"../x\"]\n",
                step("a", "")
            ),
            "14:20: error: step `a`: deny rule: rule `r`: pattern `../x` may not contain `..` or `.` components",
        ),
        (
            "allow rule the step's own deny covers",
            format!(
                "{HEAD}{}[[steps.allow.bash]]\nid = \"t\"\nreason = \"r\"\ncommands = [\"cargo test *\"]\n[[steps.deny.bash]]\nid = \"c\"\nreason = \"r\"\ncommands = [\"cargo *\"]\n",
                step("a", "")
            ),
            "13:13: error: step `a`: allow rule `t`: `cargo test *` can never match: the step's own deny rule `c` covers it",
        ),
        (
            "max_attempts 0",
            format!("{HEAD}{}", step("a", "max_attempts = 0\n")),
            "8:1: error: step `a`: max_attempts = 0 would fail the step before its first attempt",
        ),
        (
            "evidence command without run",
            format!(
                "{HEAD}[[steps]]\nid = \"a\"\ntitle = \"t\"\ninstructions = \"i\"\n[[steps.evidence]]\ncommand = {{ timeout = \"1m\" }}\n"
            ),
            "9:11: error: missing field `run`",
        ),
        (
            "approval without deadline",
            format!(
                "{HEAD}[[steps]]\nid = \"a\"\ntitle = \"t\"\ninstructions = \"i\"\n[[steps.evidence]]\napproval = {{ approvers = \"x\" }}\n"
            ),
            "9:12: error: missing field `deadline`",
        ),
        (
            "bad duration",
            format!(
                "{HEAD}[[steps]]\nid = \"a\"\ntitle = \"t\"\ninstructions = \"i\"\n[[steps.evidence]]\napproval = {{ approvers = \"x\", deadline = \"soon\" }}\n"
            ),
            "9:42: error: invalid duration \"soon\"",
        ),
        (
            "two evidence kinds in one item",
            format!(
                "{HEAD}{}",
                step("a", "evidence = [{ files_exist = { paths = [\"x\"] }, files_changed = { paths = [\"y\"] } }]\n")
                    .replace("[[steps.evidence]]\ncommand = { run = [\"true\"] }\n", "")
            ),
            "8:48: error: step `a`: an evidence item sets both `files_exist` and `files_changed`: one kind per item (write two items)",
        ),
        (
            "a step without evidence",
            format!("{HEAD}[[steps]]\nid = \"a\"\ntitle = \"t\"\ninstructions = \"i\"\n"),
            "4:1: error: step `a` has no evidence",
        ),
        (
            "verifier tier",
            format!(
                "{HEAD}{}",
                step("a", "acceptance = [\"x\"]\n[[steps.evidence]]\nverifier = { tier = 1 }\n")
            ),
            "10:14: error: step `a`: verifier tier 1 does not exist",
        ),
        (
            "a verifier tier without models",
            format!(
                "{HEAD}{}",
                step("a", "acceptance = [\"x\"]\n[[steps.evidence]]\nverifier = { tier = 2 }\n")
            ),
            "10:14: error: step `a`: verifier tier 2 names no model: add `[verifiers]`",
        ),
        (
            "a model name that could read as an option",
            format!("{HEAD}[verifiers]\ntier2 = [\"a\", \"-x\"]\n{VERIFIED_STEP}"),
            "5:15: error: verifiers.tier2: \"-x\" is not a model name",
        ),
        (
            "a model twice in a chain",
            format!("{HEAD}[verifiers]\ntier2 = [\"a\", \"a\"]\n{VERIFIED_STEP}"),
            "5:15: error: verifiers.tier2 names \"a\" twice",
        ),
        (
            "an unknown key in [verifiers]",
            format!("{HEAD}[verifiers]\nmodels = [\"a\"]\n{VERIFIED_STEP}"),
            "5:1: error: unknown field `models`, expected one of `tier2`, `tier3`, `timeout`, `max_tokens`",
        ),
        (
            "a verifier token budget of nothing",
            format!("{HEAD}[verifiers]\ntier2 = [\"a\"]\nmax_tokens = 0\n{VERIFIED_STEP}"),
            "6:1: error: verifiers.max_tokens = 0",
        ),
    ];
    let good_file = write(&good);
    let out = stepproof(&["runbook", "check", good_file.path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    for (class, text, expected) in cases {
        let file = write(&text);
        let name = file.path.display().to_string();
        let out = stepproof(&["runbook", "check", &name]);
        let shown = stdout(&out);
        assert_eq!(out.status.code(), Some(1), "{class}: {}", describe(&out));
        let wanted = format!("{name}:{expected}");
        assert!(
            shown.lines().any(|l| l.starts_with(&wanted)),
            "{class}: wanted a line starting with\n  {wanted}\ngot:\n{shown}\nfile:\n{text}"
        );
        // `explain` refuses it the same way.
        let out = stepproof(&["runbook", "explain", &name]);
        assert_eq!(out.status.code(), Some(1), "{class}: {}", describe(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(&wanted),
            "{class}: {}",
            describe(&out)
        );
    }
}

/// A step with a command and a tier 2 verifier (after a `[verifiers]` table).
const VERIFIED_STEP: &str = "[[steps]]\nid = \"a\"\ntitle = \"t\"\ninstructions = \"i\"\nacceptance = [\"x\"]\n[[steps.evidence]]\nverifier = { tier = 2 }\n[[steps.evidence]]\ncommand = { run = [\"true\"] }\n";

#[test]
fn a_step_proven_by_a_verifier_alone_is_warned_about() {
    let text = format!(
        "{HEAD}[[steps]]\nid = \"a\"\ntitle = \"t\"\ninstructions = \"i\"\nacceptance = [\"x\"]\nevidence = [{{ verifier = {{ tier = 3 }} }}]\n[verifiers]\ntier3 = [\"model-a\", \"model-b\"]\ntimeout = \"2m\"\n"
    );
    let file = write(&text);
    let name = file.path.display().to_string();
    let out = stepproof(&["runbook", "check", &name]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let shown = stdout(&out);
    assert!(
        shown.contains(&format!(
            "{name}:4:1: warning: step `a` is proven by model verifiers only: a verifier reads what the worker wrote"
        )),
        "{shown}"
    );
    assert!(!shown.contains("refuses to run it"), "{shown}");
    // The reviewer's document names the chain and the bounds.
    let out = stepproof(&["runbook", "explain", &name]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let shown = stdout(&out);
    for line in [
        "  tier 3 (thorough): model-a → model-b",
        "  tier 2 (fast): no model",
        "  each verification: at most 2m and 200000 tokens, inside the run's own --timeout",
        "     - model verifier, tier 3 (a separate read-only Claude Code run",
    ] {
        assert!(shown.contains(line), "{line:?} not in:\n{shown}");
    }
}

#[test]
fn the_examples_pass_with_the_default_profile() {
    for name in EXAMPLES {
        let path = example(name);
        let out = stepproof(&["runbook", "check", path.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(0), "{name}: {}", describe(&out));
        assert!(
            stdout(&out).contains(&format!("runbook {name} (")),
            "{}",
            describe(&out)
        );
        // Clean: no warning either.
        assert_eq!(stdout(&out).lines().count(), 1, "{}", describe(&out));
    }
}

/// The examples narrow `ci` too; under `strict` (review only: no build, no writes) their
/// build and write steps try to widen it, and `check` says where.
#[test]
fn the_examples_against_other_profiles() {
    let profile = |name: &str| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(format!("profiles/{name}.toml"))
            .display()
            .to_string()
    };
    for name in EXAMPLES {
        let path = example(name);
        let out = stepproof(&[
            "runbook",
            "check",
            path.to_str().unwrap(),
            "--profile",
            &profile("ci"),
        ]);
        assert_eq!(out.status.code(), Some(0), "{name}: {}", describe(&out));
    }
    let path = example("fix-bug");
    let out = stepproof(&[
        "runbook",
        "check",
        path.to_str().unwrap(),
        "--profile",
        &profile("strict"),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let wanted = format!(
        "{}:63:20: error: step `fix`: allow rule `build-and-test`: `cargo test *` tries to widen the profile: profile `strict` denies it (its default for calls no rule matches); a step only narrows the profile, so this rule can never let anything through",
        path.display()
    );
    assert!(
        stdout(&out).lines().any(|l| l == wanted),
        "{}",
        describe(&out)
    );
}

/// The hash in `check`, `explain` and `explain --json` is one, and it is the content's: the
/// same runbook rewritten by another TOML writer (other layout, no comments, inline tables
/// expanded) has it; a change of one value does not.
#[test]
fn explain_hash_is_stable_and_the_contents() {
    for name in EXAMPLES {
        let path = example(name);
        let path = path.to_str().unwrap();
        let json_out = stepproof(&["runbook", "explain", path, "--json"]);
        assert_eq!(json_out.status.code(), Some(0), "{}", describe(&json_out));
        let doc: Value = serde_json::from_slice(&json_out.stdout).unwrap();
        let hash = doc["hash"].as_str().unwrap().to_string();
        assert!(hash.starts_with("sha256:") && hash.len() == 71, "{hash}");
        assert_eq!(doc["profile"]["name"], "default");
        let again: Value =
            serde_json::from_slice(&stepproof(&["runbook", "explain", path, "--json"]).stdout)
                .unwrap();
        assert_eq!(again["hash"], doc["hash"]);
        let text = stepproof(&["runbook", "explain", path]);
        assert_eq!(text.status.code(), Some(0), "{}", describe(&text));
        assert!(
            stdout(&text).contains(&format!("hash:    {hash}")),
            "{}",
            describe(&text)
        );
        assert!(stdout(&stepproof(&["runbook", "check", path])).contains(&hash));

        let original = fs::read_to_string(path).unwrap();
        let table: toml::Table = toml::from_str(&original).unwrap();
        let rewritten = write(&toml::to_string(&table).unwrap());
        assert_ne!(fs::read_to_string(&rewritten.path).unwrap(), original);
        let out = stepproof(&[
            "runbook",
            "explain",
            rewritten.path.to_str().unwrap(),
            "--json",
        ]);
        let other: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(other["hash"], doc["hash"], "{name}: rewritten");

        let changed = write(&original.replacen("title = \"", "title = \"X", 1));
        let out = stepproof(&[
            "runbook",
            "explain",
            changed.path.to_str().unwrap(),
            "--json",
        ]);
        let other: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_ne!(other["hash"], doc["hash"], "{name}: changed");
    }
}

#[test]
fn explain_lists_steps_in_dependency_order() {
    let path = example("release");
    let out = stepproof(&["runbook", "explain", path.to_str().unwrap(), "--json"]);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        doc["order"],
        serde_json::json!(["changelog", "version", "checks", "approve", "tag"])
    );
    let text = stdout(&stepproof(&["runbook", "explain", path.to_str().unwrap()]));
    for expected in [
        "1. changelog — Write the changelog entry",
        "3. checks — Everything passes",
        "   opens: when changelog, version complete",
        "     files write `CHANGELOG.md` (rule changelog-only: this step writes the changelog, nothing else)",
        "     - approval by a release manager, out of band, within 1d (no answer: denied)",
        "   on fail: the run is abandoned",
        "   on fail: retry, 3 attempts in all, then the run stops",
    ] {
        assert!(text.contains(expected), "{expected}\n{text}");
    }
}

/// A validator for the part of JSON Schema the generated schema uses (`type`, `properties`,
/// `required`, `additionalProperties: false`, `items`, `enum`, `minItems`, `minimum`,
/// `maximum`, `minProperties`, `maxProperties`, `$ref` into `$defs`); `pattern` is left to the
/// loader. Any other keyword fails the test, so the validator cannot silently pass what it
/// does not understand.
fn validate(root: &Value, schema: &Value, value: &Value, at: &str, errors: &mut Vec<String>) {
    let object = schema.as_object().expect("a schema is an object");
    if let Some(reference) = object.get("$ref").and_then(Value::as_str) {
        let name = reference.strip_prefix("#/$defs/").expect("a local $ref");
        validate(root, &root["$defs"][name], value, at, errors);
    }
    for (keyword, rule) in object {
        let fail = |errors: &mut Vec<String>, why: String| errors.push(format!("{at}: {why}"));
        match keyword.as_str() {
            "$ref" | "$schema" | "$defs" | "title" | "description" | "pattern" => {}
            "type" => {
                let ok = match rule.as_str().unwrap() {
                    "object" => value.is_object(),
                    "array" => value.is_array(),
                    "string" => value.is_string(),
                    "integer" => value.is_i64() || value.is_u64(),
                    "boolean" => value.is_boolean(),
                    other => panic!("type {other}"),
                };
                if !ok {
                    fail(errors, format!("not of type {rule}"));
                }
            }
            "enum" => {
                if !rule.as_array().unwrap().contains(value) {
                    fail(errors, format!("{value} is not one of {rule}"));
                }
            }
            "required" => {
                for name in rule.as_array().unwrap() {
                    if value.get(name.as_str().unwrap()).is_none() {
                        fail(errors, format!("missing {name}"));
                    }
                }
            }
            "additionalProperties" => {
                assert_eq!(rule, &Value::Bool(false));
                for key in value.as_object().into_iter().flat_map(|o| o.keys()) {
                    if object["properties"].get(key).is_none() {
                        fail(errors, format!("unknown key {key}"));
                    }
                }
            }
            "properties" => {
                for (key, sub) in rule.as_object().unwrap() {
                    if let Some(v) = value.get(key) {
                        validate(root, sub, v, &format!("{at}.{key}"), errors);
                    }
                }
            }
            "items" => {
                for (i, item) in value.as_array().into_iter().flatten().enumerate() {
                    validate(root, rule, item, &format!("{at}[{i}]"), errors);
                }
            }
            "minItems" => {
                if value
                    .as_array()
                    .is_some_and(|a| (a.len() as u64) < rule.as_u64().unwrap())
                {
                    fail(errors, format!("fewer than {rule} items"));
                }
            }
            "maxItems" => {
                if value
                    .as_array()
                    .is_some_and(|a| (a.len() as u64) > rule.as_u64().unwrap())
                {
                    fail(errors, format!("more than {rule} items"));
                }
            }
            "uniqueItems" => {
                assert_eq!(rule, &Value::Bool(true));
                if let Some(a) = value.as_array()
                    && a.iter().enumerate().any(|(i, x)| a[..i].contains(x))
                {
                    fail(errors, "an item twice".to_string());
                }
            }
            "minimum" | "maximum" => {
                if let Some(n) = value.as_i64() {
                    let bound = rule.as_i64().unwrap();
                    if (keyword == "minimum" && n < bound) || (keyword == "maximum" && n > bound) {
                        fail(errors, format!("{n} is outside {keyword} {bound}"));
                    }
                }
            }
            "minProperties" | "maxProperties" => {
                if let Some(o) = value.as_object() {
                    let bound = rule.as_u64().unwrap() as usize;
                    if (keyword == "minProperties" && o.len() < bound)
                        || (keyword == "maxProperties" && o.len() > bound)
                    {
                        fail(errors, format!("{} keys, {keyword} {bound}", o.len()));
                    }
                }
            }
            other => panic!("the schema uses `{other}`, which this validator does not know"),
        }
    }
}

#[test]
fn the_schema_accepts_the_examples_and_refuses_what_check_refuses() {
    let out = stepproof(&["runbook", "schema"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let schema: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        schema["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    let as_json = |text: &str| -> Value { toml::from_str(text).unwrap() };
    for name in EXAMPLES {
        let value = as_json(&fs::read_to_string(example(name)).unwrap());
        let mut errors = Vec::new();
        validate(&schema, &schema, &value, "$", &mut errors);
        assert!(errors.is_empty(), "{name}: {errors:#?}");
    }
    // What the loader refuses for its shape, the schema refuses too.
    let base = fs::read_to_string(example("fix-bug")).unwrap();
    for (broken, wanted) in [
        (base.replace("owner = ", "ownr = "), "unknown key ownr"),
        (base.replace("max_attempts = 5", "max_attempts = 0"), "outside minimum 1"),
        (base.replace("on_fail = \"block\"", "on_fail = \"later\""), "is not one of"),
        (
            base.replacen(
                "files_changed = { paths = [\"tests/**\"] }",
                "files_changed = { paths = [\"tests/**\"] }\nfiles_exist = { paths = [\"x\"] }",
                1,
            ),
            "maxProperties 1",
        ),
        (
            base.replacen("command = { run = [\"cargo\", \"test\", \"--quiet\"], exit_code = 101, timeout = \"15m\" }", "command = { exit_code = 101 }", 1),
            "missing \"run\"",
        ),
        (base.replace("tier2 = [", "tier4 = ["), "unknown key tier4"),
        (
            base.replace(
                "tier2 = [\"claude-haiku-4-5\", \"claude-sonnet-4-5\"]",
                "tier2 = [\"claude-haiku-4-5\", \"claude-haiku-4-5\"]",
            ),
            "an item twice",
        ),
        (
            base.replace("max_tokens = 200000", "max_tokens = 0"),
            "outside minimum 1",
        ),
    ] {
        let mut errors = Vec::new();
        validate(&schema, &schema, &as_json(&broken), "$", &mut errors);
        assert!(
            errors.iter().any(|e| e.contains(wanted)),
            "{wanted}: {errors:#?}"
        );
        let file = write(&broken);
        let out = stepproof(&["runbook", "check", file.path.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(1), "{wanted}: {}", describe(&out));
    }
}

#[test]
fn usage_and_profile_errors_exit_2() {
    let out = stepproof(&["runbook", "check"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let path = example("fix-bug");
    let out = stepproof(&[
        "runbook",
        "check",
        path.to_str().unwrap(),
        "--profile",
        "/nonexistent/profile.toml",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("reading profile /nonexistent/profile.toml: No such file or directory"),
        "{}",
        describe(&out)
    );
}

/// What cannot be read is a clear error naming the path (exit 2), for anyone: missing, a
/// directory, a FIFO (refused, not waited on), not UTF-8.
#[test]
fn an_unreadable_runbook_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo.toml");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    let binary = dir.path().join("bin.toml");
    fs::write(&binary, [0xff, 0xfe, 0x00]).unwrap();
    for (path, why) in [
        (
            dir.path().join("missing.toml"),
            "No such file or directory (os error 2)",
        ),
        (
            dir.path().to_path_buf(),
            "is not a regular file (a directory)",
        ),
        (fifo, "is not a regular file (a FIFO)"),
        (
            binary,
            "is not UTF-8 text (line 1, column 1: the first byte that is not)",
        ),
    ] {
        let started = std::time::Instant::now();
        let out = stepproof(&["runbook", "check", path.to_str().unwrap()]);
        assert!(
            started.elapsed().as_secs() < 10,
            "waited on {}",
            path.display()
        );
        assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
        assert_eq!(
            String::from_utf8_lossy(&out.stderr).trim(),
            format!(
                "stepproof runbook: reading runbook {}: {why}",
                path.display()
            )
        );
    }
}

/// A runbook only root may read: the test user gets a clear "Permission denied" (exit 2); root,
/// who reads any file, checks it. The same file, readable, passes for the test user.
#[test]
fn file_permissions_as_root_and_as_the_test_user() {
    if !is_root() {
        skip_or_fail("comparing root with the test user needs the tests to run as root");
        return;
    }
    let Some((uid, gid)) = ensure_test_user() else {
        return;
    };
    let binary = run_binary_for_user().with_file_name("stepproof");
    let dir = tempfile::Builder::new()
        .prefix("stepproof-runbook-")
        .tempdir()
        .unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let path = dir.path().join("fix-bug.toml");
    fs::copy(example("fix-bug"), &path).unwrap();
    let as_user = |path: &Path| {
        Command::new("setpriv")
            .arg(format!("--reuid={uid}"))
            .arg(format!("--regid={gid}"))
            .arg("--clear-groups")
            .arg("--")
            .arg(&binary)
            .args(["runbook", "check"])
            .arg(path)
            .env("HOME", dir.path())
            .output()
            .expect("run stepproof as the test user")
    };
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    let out = as_user(&path);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));

    fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
    let out = as_user(&path);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        format!(
            "stepproof runbook: reading runbook {}: Permission denied (os error 13)",
            path.display()
        )
    );
    let out = Command::new(&binary)
        .args(["runbook", "check"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "root: {}", describe(&out));
}
