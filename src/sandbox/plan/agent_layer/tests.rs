//! Tests of the agent's layer: the managed settings, the hook and its policy as planned.

use super::*;

#[test]
fn a_session_going_on_is_recognised() {
    let argv = |words: &[&str]| -> Vec<std::ffi::OsString> {
        words.iter().map(std::ffi::OsString::from).collect()
    };
    for yes in [
        &["claude", "-p", "hi", "--continue"][..],
        &["claude", "-c", "-p", "hi"],
        &["claude", "-pc", "hi"],
        &["claude", "-p", "--resume", "abc", "hi"],
        &["claude", "-r", "abc", "-p", "hi"],
        &["claude", "--resume=abc", "-p", "hi"],
        &["claude", "-p", "--from-pr", "12"],
        &[
            "claude",
            "-p",
            "--session-id=1b4e28ba-2fa1-11d2-883f-0016d3cca427",
            "hi",
        ],
        &["claude", "-p", "--fork-session", "-c"],
        &["env", "A=1", "claude", "-p", "-c"],
    ] {
        assert!(resumes_a_session(&argv(yes)), "{yes:?}");
    }
    for no in [
        &["claude", "-p", "hi"][..],
        &["claude", "--print", "continue the work"],
        &["claude", "-p", "hi", "--", "--resume"],
        &["claude", "-p", "--model", "opus", "hi"],
    ] {
        assert!(!resumes_a_session(&argv(no)), "{no:?}");
    }
}

#[test]
fn the_sessions_seeded_follow_the_command() {
    let argv = |args: &[&str]| -> Vec<std::ffi::OsString> { args.iter().map(Into::into).collect() };
    let named = |names: &[&str]| SessionSeeding::Newest {
        named: names.iter().map(|n| n.to_string()).collect(),
    };
    let id = "1b4e28ba-2fa1-11d2-883f-0016d3cca427";
    for (command, seeding) in [
        (&["claude", "-p", "hi"][..], SessionSeeding::None),
        (&["claude"], named(&[])),
        (&["/usr/bin/claude", "--continue"], named(&[])),
        (&["claude", "--resume", id], named(&[id])),
        (&["claude", "-r", id, "-p", "go on"], named(&[id])),
        (&["claude", &format!("--resume={id}")], named(&[id])),
        (
            &["claude", &format!("--session-id={id}"), "-p", "say hi"],
            named(&[id]),
        ),
        (&["env", "A=1", "claude", "--resume", id], named(&[id])),
        // Words of a prompt that could be ids are looked for too (harmless), not after `--`.
        (&["claude", "fix it", "now"], named(&["now"])),
        (&["claude", "--", id], named(&[])),
        (&["claude", "--from-pr", "12"], SessionSeeding::Every),
        (&["claude", "-p", "--from-pr=12"], SessionSeeding::Every),
        (&["bash"], SessionSeeding::Every),
        (&["sh", "-c", "claude --resume x"], SessionSeeding::Every),
    ] {
        assert_eq!(session_seeding(&argv(command)), seeding, "{command:?}");
    }
    let not_utf8 = vec![
        std::ffi::OsString::from("claude"),
        std::os::unix::ffi::OsStringExt::from_vec(vec![0xff]),
    ];
    assert_eq!(session_seeding(&not_utf8), SessionSeeding::Every);
}

#[test]
fn a_single_turn_is_recognised() {
    let argv = |args: &[&str]| -> Vec<std::ffi::OsString> { args.iter().map(Into::into).collect() };
    for yes in [
        &["claude", "-p", "Say ok."][..],
        &[
            "/usr/local/bin/claude",
            "--print",
            "fix it",
            "--output-format",
            "json",
        ],
        &["env", "FOO=1", "claude", "-p", "x"],
        &["claude", "--model", "m", "-p", "x", "--", "--input-format"],
    ] {
        assert!(single_turn(&argv(yes)), "{yes:?}");
    }
    for no in [
        &["claude"][..],
        &["claude", "fix it"],
        &["claude", "-c"],
        &["claude", "-p", "--input-format", "stream-json"],
        &["claude", "-p", "--input-format=text", "x"],
        &["node", "claude", "-p", "x"],
        &["sh", "-c", "claude -p x"],
    ] {
        assert!(!single_turn(&argv(no)), "{no:?}");
    }
}

/// The managed CLAUDE.md lists the shell commands allowed without asking only to a run that has
/// Claude Code's Bash tool: a `--tools` list without it (a verifier's), or Bash disallowed,
/// leaves the section out; anything else (another program, a shell) keeps it.
#[test]
fn the_shell_section_only_where_bash_is_offered() {
    let argv = |a: &[&str]| a.iter().map(std::ffi::OsString::from).collect::<Vec<_>>();
    for without in [
        &["claude", "-p", "--tools", "Read,Grep,Glob", "x"][..],
        &["claude", "-p", "--tools=Read,Grep", "x"],
        &[
            "claude", "-p", "--tools", "Read", "Grep", "--model", "m", "x",
        ],
        &["claude", "-p", "--tools", "", "x"],
        &[
            "env",
            "A=1",
            "claude",
            "--disallowedTools",
            "Bash,WebFetch",
            "-p",
            "x",
        ],
        &["claude", "--disallowed-tools", "Bash"],
    ] {
        assert!(!offers_bash(&argv(without)), "{without:?}");
    }
    for with in [
        &["claude"][..],
        &["claude", "-p", "x"],
        &["claude", "--tools", "Read,Bash"],
        &["claude", "--tools", "default"],
        &["claude", "--disallowedTools", "Bash(rm:*)"],
        &["sh", "-c", "claude --tools Read"],
        &["claude", "-p", "x", "--", "--tools", "Read"],
    ] {
        assert!(offers_bash(&argv(with)), "{with:?}");
    }
    let profile = crate::profile::Profile::builtin_default().unwrap();
    let policy = compiled_policy(&profile, Path::new("/home/u"), Path::new("/home/u/ws")).unwrap();
    for (shell, listed) in [(true, true), (false, false)] {
        let mut files = Vec::new();
        managed_memory(&mut files, &policy, shell);
        let memory = &files[0].1;
        assert!(memory.contains("Workspace: /home/u/ws."), "{memory}");
        assert_eq!(
            memory.contains("Shell commands allowed without asking"),
            listed,
            "{memory}"
        );
        assert_eq!(memory.contains("piping into sh"), listed, "{memory}");
    }
}

#[test]
fn managed_settings_register_every_event_and_gates_fail_closed() {
    let mut extra = serde_json::Map::new();
    extra.insert(
        "permissions".into(),
        serde_json::json!({ "deny": ["Bash(rm -rf *)"] }),
    );
    extra.insert("hooks".into(), serde_json::json!({}));
    let settings = managed_settings(
        &extra,
        &pinned_env(&[("PATH".into(), "/usr/bin:/bin".into())]),
        false,
        false,
    );
    assert_eq!(settings["env"]["PATH"], "/usr/bin:/bin");
    assert_eq!(settings["env"]["BASH_ENV"], "");
    assert_eq!(settings["env"]["CLAUDE_ENV_FILE"], "");
    // StepProof's own empty pin is no problem; a script named there is.
    let mut named = settings.clone();
    named["env"]["CLAUDE_ENV_FILE"] = "/tmp/defs.sh".into();
    assert_eq!(
        managed_settings_problems(&named, false),
        ["sets env.CLAUDE_ENV_FILE, which StepProof owns"]
    );
    assert_eq!(settings["permissions"]["deny"][0], "Bash(rm -rf *)");
    assert_eq!(settings["allowManagedHooksOnly"], true);
    // A runbook's observers are registered only with a runbook; no hook is async.
    let with_runbook = managed_settings(&extra, &[], true, false);
    for (event, _, _, when) in EVENTS {
        assert!(
            with_runbook["hooks"][event][0]["hooks"][0].is_object(),
            "{event}"
        );
        let registered = settings["hooks"].get(event).is_some();
        assert_eq!(registered, when.registered(false, false), "{event}");
    }
    // `claude -p PROMPT`: its one turn is the start record; with a runbook the observer is
    // there for its orientation.
    let print_mode = managed_settings(&extra, &[], false, true);
    assert!(print_mode["hooks"].get("UserPromptSubmit").is_none());
    assert!(print_mode["hooks"]["PreToolUse"].is_array());
    assert!(managed_settings_problems(&print_mode, false).is_empty());
    let print_runbook = managed_settings(&extra, &[], true, true);
    assert!(print_runbook["hooks"]["UserPromptSubmit"].is_array());
    assert!(managed_settings_problems(&with_runbook, false).is_empty());
    let mut not_waited = settings.clone();
    not_waited["hooks"]["UserPromptSubmit"][0]["hooks"][0]["async"] = true.into();
    assert_eq!(
        managed_settings_problems(&not_waited, false),
        ["StepProof's hook is not registered for UserPromptSubmit"]
    );
    let mut foreign = with_runbook.clone();
    foreign["hooks"]["SessionEnd"][0]["hooks"][0]["command"] = "/bin/true".into();
    assert_eq!(
        managed_settings_problems(&foreign, false),
        ["StepProof's hook is not registered for SessionEnd"]
    );
    for (event, _, blocks, when) in EVENTS {
        if *when != When::Always {
            continue;
        }
        let entry = &settings["hooks"][event][0]["hooks"][0];
        assert_eq!(entry["command"], HOOK_BINARY, "{event}");
        assert!(entry["timeout"].as_u64().unwrap() <= 30, "{event}");
        assert_eq!(entry.get("onFailure").is_some(), *blocks, "{event}");
        let args: Vec<&str> = entry["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert!(
            args.contains(&AUDIT_SOCKET) && args.contains(&POLICY_FILE),
            "{event}"
        );
    }
    assert_eq!(settings["hooks"]["PreToolUse"][0]["matcher"], "*");
    assert!(managed_settings_problems(&settings, false).is_empty());
    let mut broken = settings.clone();
    broken["hooks"]["PreToolUse"][0]["hooks"][0]
        .as_object_mut()
        .unwrap()
        .remove("onFailure");
    broken["disableAllHooks"] = true.into();
    assert_eq!(
        managed_settings_problems(&broken, false),
        [
            "sets disableAllHooks, which StepProof owns",
            "StepProof's hook is not registered for PreToolUse"
        ]
    );
    assert_eq!(
        managed_settings_problems(&serde_json::json!({"model": "x"}), true),
        Vec::<String>::new()
    );
}

/// The exported bash functions a project's settings would bring, from the workspace down
/// to the current directory; what cannot be read as JSON names nothing.
#[test]
fn exported_functions_of_project_settings_are_found() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let sub = ws.join("crates/a");
    std::fs::create_dir_all(ws.join(".claude")).unwrap();
    std::fs::create_dir_all(sub.join(".claude")).unwrap();
    std::fs::create_dir_all(ws.join("crates/.claude")).unwrap();
    std::fs::write(
        ws.join(".claude/settings.json"),
        r#"{"env": {"BASH_FUNC_git%%": "() { id; }", "RUST_LOG": "debug"}}"#,
    )
    .unwrap();
    std::fs::write(
        sub.join(".claude/settings.local.json"),
        r#"{"env": {"bash_func_ls%%": "() { id; }"}}"#,
    )
    .unwrap();
    std::fs::write(ws.join("crates/.claude/settings.json"), "{ not json").unwrap();
    assert_eq!(
        project_bash_functions(ws, &sub),
        ["BASH_FUNC_git%%", "bash_func_ls%%"]
    );
    assert_eq!(project_bash_functions(ws, ws), ["BASH_FUNC_git%%"]);
    assert!(project_bash_functions(&ws.join("absent"), ws).is_empty());
    let settings = managed_settings(
        &serde_json::Map::new(),
        &[("BASH_FUNC_git%%".into(), String::new())],
        false,
        false,
    );
    assert_eq!(settings["env"]["BASH_FUNC_git%%"], "");
    assert!(managed_settings_problems(&settings, false).is_empty());
}

#[test]
fn command_lines_that_switch_the_hook_off_are_named() {
    let argv =
        |words: &[&str]| -> Vec<std::ffi::OsString> { words.iter().map(Into::into).collect() };
    for words in [
        &["claude", "--bare", "-p", "x"][..],
        &["/usr/bin/claude", "-p", "x", "--bare"],
        &["env", "-i", "PATH=/bin", "CLAUDE_CODE_SIMPLE=1", "claude"],
        &[
            "/usr/bin/env",
            "CLAUDE_CODE_MANAGED_SETTINGS_PATH=/tmp/m.json",
            "bash",
        ],
        &["env", "-u", "HOME", "claude", "--bare"],
        &["env", "CLAUDE_ENV_FILE=/tmp/defs.sh", "claude"],
    ] {
        assert!(command_defeats_hook(&argv(words)).is_some(), "{words:?}");
    }
    for words in [
        &["claude", "-p", "--", "--bare"][..],
        &["claude", "--safe-mode"],
        &["bash", "-c", "claude --bare"],
        &["env", "FOO=1", "claude", "-p", "x"],
        &[],
    ] {
        assert!(command_defeats_hook(&argv(words)).is_none(), "{words:?}");
    }
}

#[test]
fn host_managed_settings_are_kept_in_order_without_owned_keys() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("managed-settings.d/sub")).unwrap();
    std::fs::write(
        d.join("managed-settings.json"),
        r#"{"disableAllHooks":true,"model":"org-model","permissions":{"deny":["Bash(git push:*)"]},"apiKeyHelper":"/bin/key"}"#,
    )
    .unwrap();
    std::fs::write(
        d.join("managed-settings.d/10-org.json"),
        r#"{"permissions":{"deny":["WebSearch"]},"disableAllHooks":true,"env":{"CLAUDE_CODE_SIMPLE":"1","PATH":"/evil","bash_func_git%%":"() { id; }","TEAM":"a"}}"#,
    )
    .unwrap();
    std::fs::write(
        d.join("managed-settings.d/20-model.json"),
        r#"{"model":"team-model","permissions":{"deny":["Bash(git push:*)"]}}"#,
    )
    .unwrap();
    std::fs::write(d.join("managed-settings.d/30-broken.json"), "{ not json").unwrap();
    std::fs::write(d.join("managed-settings.d/README"), "not read").unwrap();
    std::fs::write(d.join("managed-settings.d/.hidden.json"), "{}").unwrap();
    std::fs::write(d.join("CLAUDE.md"), "Be careful.\n").unwrap();
    std::fs::write(d.join("big"), vec![b'x'; HOST_FILE_MAX_BYTES as usize + 1]).unwrap();
    let pinned = vec!["PATH".to_string(), "HOME".to_string()];
    let host = read_host_managed(d, &pinned);
    let names: Vec<_> = host
        .files
        .iter()
        .map(|(p, _)| p.display().to_string())
        .collect();
    assert_eq!(
        names,
        [
            "CLAUDE.md",
            "managed-settings.d/000-managed-settings.json",
            "managed-settings.d/001-10-org.json",
            "managed-settings.d/002-20-model.json",
        ]
    );
    // The host's own memory file first, then StepProof's paragraph.
    let profile = crate::profile::Profile::builtin_default().unwrap();
    let policy = compiled_policy(&profile, Path::new("/home/u"), Path::new("/home/u/ws")).unwrap();
    let mut files = host.files.clone();
    managed_memory(&mut files, &policy, true);
    let memory = &files
        .iter()
        .find(|(p, _)| p == Path::new(MANAGED_MEMORY))
        .unwrap()
        .1;
    assert!(
        memory.starts_with(
            "Be careful.\n\n# StepProof\n\nThis session runs under StepProof, profile 'default'"
        ) && memory.contains("Workspace: /home/u/ws."),
        "{memory}"
    );
    let mut alone = Vec::new();
    managed_memory(&mut alone, &policy, true);
    assert!(alone[0].1.starts_with("# StepProof\n"), "{alone:?}");
    let org: serde_json::Value = serde_json::from_str(&host.files[2].1).unwrap();
    assert_eq!(
        org,
        serde_json::json!({"permissions":{"deny":["WebSearch"]},"env":{"TEAM":"a"}})
    );
    let removed = host.removed.clone();
    let file = |name: &str| d.join(name).display().to_string();
    assert_eq!(
        removed,
        [
            format!("{}: disableAllHooks", file("managed-settings.json")),
            format!("{}: apiKeyHelper", file("managed-settings.json")),
            format!(
                "{}: disableAllHooks",
                file("managed-settings.d/10-org.json")
            ),
            format!(
                "{}: env.CLAUDE_CODE_SIMPLE",
                file("managed-settings.d/10-org.json")
            ),
            format!(
                "{}: env.PATH (pinned by StepProof)",
                file("managed-settings.d/10-org.json")
            ),
            format!(
                "{}: env.bash_func_git%% (pinned by StepProof)",
                file("managed-settings.d/10-org.json")
            ),
            format!(
                "{}: the whole file (not valid JSON: key must be a string at line 1 column 3)",
                file("managed-settings.d/30-broken.json")
            ),
        ]
    );
    for note in [
        "big: left out (larger than",
        "README: left out (Claude Code reads only",
    ] {
        assert!(
            host.notes.iter().any(|n| n.contains(note)),
            "{note}: {:?}",
            host.notes
        );
    }
    // Merged as Claude Code merges: StepProof's keys stand, the organisation's rule and
    // model apply, arrays are joined without repeats, the later model wins.
    let ours = managed_settings(
        &serde_json::Map::new(),
        &[("PATH".into(), "/usr/bin:/bin".into())],
        false,
        false,
    );
    let merged = merge_managed(&ours, &host.documents);
    assert_eq!(merged["model"], "team-model");
    assert_eq!(
        merged["permissions"]["deny"],
        serde_json::json!(["Bash(git push:*)", "WebSearch"])
    );
    assert_eq!(merged["env"]["PATH"], "/usr/bin:/bin");
    assert_eq!(merged["env"]["TEAM"], "a");
    assert_eq!(merged["hooks"], ours["hooks"]);
    assert_eq!(merged["allowManagedHooksOnly"], true);
    assert!(merged.get("disableAllHooks").is_none() && merged.get("apiKeyHelper").is_none());
    assert!(managed_settings_problems(&merged, false).is_empty());
    assert!(
        read_host_managed(&d.join("absent"), &pinned)
            .files
            .is_empty()
    );
}

#[test]
fn merging_follows_claude_codes_rules() {
    let base = serde_json::json!({"a": {"x": 1, "l": [1, 2]}, "fallbackModel": ["m1"], "s": "one"});
    let docs = [
        serde_json::json!({"a": {"y": 2, "l": [2, 3]}, "fallbackModel": ["m2"], "s": "two"})
            .as_object()
            .cloned()
            .unwrap(),
    ];
    assert_eq!(
        merge_managed(&base, &docs),
        serde_json::json!({"a": {"x": 1, "y": 2, "l": [1, 2, 3]}, "fallbackModel": ["m2"], "s": "two"})
    );
}
