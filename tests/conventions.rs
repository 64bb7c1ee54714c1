//! The conventions a tool is expected to keep, through the real binaries: built-in profiles
//! named wherever a profile is taken (and a file of the same name said to be ambiguous), a
//! profile that is not UTF-8 placed at its line, `--version` with the commit, `--json` where a
//! script reads the answer, `doctor` in words. As root and as the test user where a sandbox
//! runs.

mod support;

use std::fs;
use std::path::Path;
use std::process::{Command, Output};
use support::{STEPPROOF, Who, World, describe};

fn stepproof_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(STEPPROOF)
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run stepproof")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn built_in_profiles_are_named_wherever_a_profile_is_taken() {
    let dir = tempfile::tempdir().unwrap();
    let runbook = dir.path().join("rb.toml");
    fs::write(
        &runbook,
        "id = \"rb\"\ntitle = \"T\"\nowner = \"o\"\n[[steps]]\nid = \"a\"\ntitle = \"t\"\ninstructions = \"i\"\n[[steps.evidence]]\ncommand = { run = [\"true\"] }\n",
    )
    .unwrap();
    let rb = runbook.to_str().unwrap();
    for name in ["default", "ci", "strict"] {
        for args in [
            vec!["explain", "--profile", name],
            vec!["policy", "--profile", name],
            vec!["check", "--profile", name, "--bash", "ls"],
            vec!["runbook", "check", rb, "--profile", name],
        ] {
            let out = stepproof_in(dir.path(), &args);
            // `check` answers 0 allow, 1 ask, 2 deny; the rest 0.
            assert!(
                matches!(out.status.code(), Some(0..=2)) && !text(&out).contains("reading profile"),
                "{args:?}: {}",
                describe(&out)
            );
        }
        let explained = stepproof_in(dir.path(), &["explain", "--profile", name]);
        assert!(
            text(&explained).contains(&format!("profile: {name} (")),
            "{}",
            describe(&explained)
        );
    }
    // The list says what each is for and its hash, for people and scripts.
    let listed = stepproof_in(dir.path(), &["profile", "list", "--json"]);
    assert_eq!(listed.status.code(), Some(0), "{}", describe(&listed));
    let rows: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    let names: Vec<&str> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["default", "ci", "strict"]);
    for row in rows.as_array().unwrap() {
        assert!(row["policy_hash"].as_str().unwrap().starts_with("sha256:"));
        assert!(!row["description"].as_str().unwrap().is_empty());
    }
}

#[test]
fn a_name_that_is_also_a_file_here_is_ambiguous_and_an_unknown_name_lists_the_built_ins() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("ci"), "extends = \"default\"\n").unwrap();
    let out = stepproof_in(dir.path(), &["explain", "--profile", "ci"]);
    assert_eq!(out.status.code(), Some(120), "{}", describe(&out));
    assert!(
        text(&out).contains("both the built-in profile ci and the file ./ci here; write ./ci"),
        "{}",
        describe(&out)
    );
    // The file, spelled as a path, is the file.
    let out = stepproof_in(dir.path(), &["explain", "--profile", "./ci"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(
        text(&out).contains("profile: default (<built-in default> <- ./ci)"),
        "{}",
        describe(&out)
    );
    let out = stepproof_in(dir.path(), &["explain", "--profile", "cii"]);
    assert_eq!(out.status.code(), Some(120), "{}", describe(&out));
    assert!(
        text(&out).contains("no built-in profile has that name: default, ci, strict"),
        "{}",
        describe(&out)
    );
}

#[test]
fn a_profile_that_is_not_utf8_is_placed_at_its_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(
        dir.path().join("p.toml"),
        b"extends = \"default\"\n# caf\xe9\n".as_slice(),
    )
    .unwrap();
    let out = stepproof_in(dir.path(), &["explain", "--profile", "p.toml"]);
    assert_eq!(out.status.code(), Some(120), "{}", describe(&out));
    assert!(
        text(&out).contains("is not UTF-8 text (line 2, column 6"),
        "{}",
        describe(&out)
    );
}

both!(
    stepproof_run_takes_a_built_in_profile_by_name,
    |w: &World| {
        let out = w
            .command(&["--profile", "ci"], &["true"])
            .output()
            .expect("start stepproof-run");
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        let out = w
            .command(&["--profile", "strict", "-v"], &["true"])
            .output()
            .expect("start stepproof-run");
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("profile: strict ("),
            "{}",
            describe(&out)
        );
    }
);

#[test]
fn both_binaries_say_their_version_with_the_commit() {
    for program in [STEPPROOF, support::RUN] {
        let out = Command::new(program).arg("--version").output().unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        let name = Path::new(program).file_name().unwrap().to_string_lossy();
        let rest = said
            .strip_prefix(&format!("{name} {} (commit ", env!("CARGO_PKG_VERSION")))
            .and_then(|r| r.strip_suffix(")\n"))
            .unwrap_or_else(|| panic!("{said}"));
        // A checkout names its commit; a build from a tarball says so.
        assert!(
            rest == "unknown" || rest.len() == 12 && rest.bytes().all(|b| b.is_ascii_hexdigit()),
            "{said}"
        );
    }
}

#[test]
fn doctor_says_seccomp_in_words() {
    let out = Command::new(STEPPROOF).arg("doctor").output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    let line = said
        .lines()
        .find(|l| l.contains("seccomp"))
        .unwrap_or_else(|| panic!("{said}"));
    assert!(!line.contains("Seccomp:") && !line.contains('\t'), "{line}");
    assert!(line.contains("filter"), "{line}");
}

// What the caller chose is refused with 120 and a sentence saying what to choose instead; 125
// stays for what the host lacks.
both!(the_callers_mistakes_are_refused_with_120, |w: &World| {
    // A workspace inside a hidden path: the command could not even enter it.
    let hidden = w.home.join(".ssh/proj");
    fs::create_dir_all(&hidden).unwrap();
    support::chown_tree(&w.home.join(".ssh"), w.owner);
    let out = w
        .command(&["--workspace", hidden.to_str().unwrap()], &["true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(120), "{}", describe(&out));
    assert!(
        text(&out).contains("which the profile hides from the sandbox (secret)")
            && text(&out).contains("choose a project directory"),
        "{}",
        describe(&out)
    );
    // A missing runbook.
    let out = w
        .command(&["--runbook", "no-such-runbook.toml"], &["true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(120), "{}", describe(&out));
    // A read_only entry that does not exist, placed at its line and column.
    let profile = w.base.join("missing-path.toml");
    fs::write(
        &profile,
        "extends = \"default\"\n[filesystem]\nread_only = [\n  \"~/no-such-tool\",\n]\n",
    )
    .unwrap();
    let out = w
        .command(&["--profile", profile.to_str().unwrap()], &["true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(120), "{}", describe(&out));
    assert!(
        text(&out).contains(&format!(
            "{}:4:3: filesystem.read_only \"~/no-such-tool\": ",
            profile.display()
        )) && text(&out).contains("does not exist here"),
        "{}",
        describe(&out)
    );
    // A path with a newline stays on one line.
    let out = w
        .command(&["--workspace", "/etc/two\nlines"], &["true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(120), "{}", describe(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.lines().any(|l| l.contains("/etc/two\\nlines")),
        "{}",
        describe(&out)
    );
});

both!(state_list_answers_scripts_in_json, |w: &World| {
    // A run of the default profile keeps the workspace's state.
    let out = w.command(&[], &["true"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let program = match w.who {
        Who::Root => std::path::PathBuf::from(STEPPROOF),
        Who::User => w.run_binary().with_file_name("stepproof"),
    };
    let mut cmd = w.as_owner(&program);
    cmd.args(["state", "list", "--json"]);
    w.clean_env(&mut cmd);
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["workspace"] == w.workspace.to_str().unwrap())
        .unwrap_or_else(|| panic!("{}", describe(&out)));
    assert!(row["bytes"].is_u64() && row["last_used"].is_i64(), "{row}");
});

// No silent refusals: what Claude Code reaches for in the background even with
// CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC (its updater, the official plugin marketplace) is
// switched off by its own variable, so nothing is refused that nobody asked for.
both!(
    claude_codes_background_hosts_are_switched_off_by_name,
    |w: &World| {
        for profile in ["default", "ci", "strict"] {
            let out = w
                .command(&["--profile", profile], &["env"])
                .output()
                .unwrap();
            assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
            let env = String::from_utf8_lossy(&out.stdout);
            for set in [
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
                "DISABLE_AUTOUPDATER=1",
                "CLAUDE_CODE_DISABLE_OFFICIAL_MARKETPLACE_AUTOINSTALL=1",
            ] {
                assert!(env.lines().any(|l| l == set), "{profile}: {set}\n{env}");
            }
        }
    }
);
