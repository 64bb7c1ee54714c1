//! Claude Code at home under StepProof, end to end with the real Claude Code (2.1.328) against
//! the mock Messages API, as root and as the unprivileged test user: a session started in one
//! run is resumed and continued in the next (the earlier messages reach the mock), auto-memory
//! crosses runs visibly, and what a run forges among the kept names of its config directory (a
//! link, a FIFO, a file over its cap) is dropped whole and said.

#[path = "support/e2e.rs"]
mod e2e;
mod support;

use e2e::*;
use serde_json::{Value, json};
use std::fs;
use support::*;

/// The e2e profiles extend `ci`, which keeps nothing: these keep the workspace's sessions.
const KEEP: &str = "[claude]\nkeep_sessions = true\n";

/// Claude Code's project key of a directory: every character but ASCII letters and digits
/// turned into `-`.
fn project_key(dir: &std::path::Path) -> String {
    dir.display()
        .to_string()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

fn result_of(run: &Run) -> Value {
    serde_json::from_str(run.stdout.trim()).unwrap_or_else(|e| {
        panic!("claude's JSON result ({e}): {}", run.describe());
    })
}

/// `stepproof state ARGS…` as the world's user, from the workspace.
fn state(w: &World, args: &[&str]) -> std::process::Output {
    let binary = w.run_binary().with_file_name("stepproof");
    let mut cmd = w.as_owner(&binary);
    cmd.arg("state").args(args);
    w.clean_env(&mut cmd).output().unwrap()
}

/// Whether some request to the Messages endpoint carries `needle` in its messages or system
/// prompt.
fn some_request_has(mock: &Mock, needle: &str) -> bool {
    mock.messages_requests().iter().any(|r| {
        r["body"]["messages"].to_string().contains(needle)
            || r["body"]["system"].to_string().contains(needle)
    })
}

both_claude!(
    a_session_is_resumed_and_continued_in_the_next_run,
    |w: &World| {
        let mock = Mock::start(
            w,
            json!([
                text("answer-one-7f3"),
                text("answer-two-7f3"),
                text("answer-three-7f3")
            ]),
        );
        let keep = profile(w, &mock, true, KEEP);
        let first = run_claude(w, &keep, &[]);
        assert!(first.status.success(), "{}", first.describe());
        let first = result_of(&first);
        assert_eq!(first["result"], "answer-one-7f3");
        let id = first["session_id"].as_str().unwrap().to_string();
        assert!(!some_request_has(&mock, "answer-one-7f3"));

        // The next run resumes it by id: the mock sees the first run's answer.
        let second = run_claude(w, &keep, &["--resume", &id]);
        assert!(second.status.success(), "{}", second.describe());
        assert_eq!(result_of(&second)["result"], "answer-two-7f3");
        assert!(
            some_request_has(&mock, "answer-one-7f3"),
            "the resumed session's messages did not reach the mock"
        );
        let kept = second.records("sessions");
        assert_eq!(kept.len(), 1, "{:#?}", second.audit);

        // And the one after continues the newest session: both earlier answers.
        let third = run_claude(w, &keep, &["--continue"]);
        assert!(third.status.success(), "{}", third.describe());
        assert_eq!(result_of(&third)["result"], "answer-three-7f3");
        assert!(mock.messages_requests().iter().any(|r| {
            let m = r["body"]["messages"].to_string();
            m.contains("answer-one-7f3") && m.contains("answer-two-7f3")
        }));

        // `stepproof state show` names the session and how to resume it.
        let shown = state(w, &["show"]);
        assert!(shown.status.success(), "{}", describe(&shown));
        let text = String::from_utf8_lossy(&shown.stdout);
        assert!(
            text.contains(&format!("claude --resume {id}"))
                && text.contains(&project_key(&w.workspace)),
            "{text}"
        );

        // `ci` keeps nothing and seeds nothing: the session is not found there.
        let ci = run_claude(w, &profile(w, &mock, true, ""), &["--resume", &id]);
        assert!(!ci.status.success(), "{}", ci.describe());
        assert!(
            ci.stdout.contains("No conversation found")
                || ci.stderr.contains("No conversation found"),
            "{}",
            ci.describe()
        );
        assert!(ci.records("sessions").is_empty());

        // Removed, the state is gone for the next run too.
        let removed = state(w, &["rm"]);
        assert!(removed.status.success(), "{}", describe(&removed));
        let after = run_claude(w, &keep, &["--resume", &id]);
        assert!(!after.status.success(), "{}", after.describe());
    }
);

// Many kept sessions: Claude Code is given the newest 50 (`--continue` takes the newest,
// `/resume` lists the recent ones) and any one it names by id, however old; not a copy of every
// session the workspace ever had, and its run directory keeps no second copy of them after.
both_claude!(an_old_session_is_resumed_among_many_newer, |w: &World| {
    let mock = Mock::start(w, json!([text("answer-old-5d1"), text("answer-again-5d1")]));
    let keep = profile(w, &mock, true, KEEP);
    let first = run_claude(w, &keep, &[]);
    assert!(first.status.success(), "{}", first.describe());
    let id = result_of(&first)["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    // Sixty newer sessions (never read: only their names and times matter).
    let workspace = fs::canonicalize(&w.workspace).unwrap();
    let state_id = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(
            workspace.as_os_str().as_encoded_bytes(),
        ))[..32]
            .to_string()
    };
    let kept = w
        .home
        .join(".local/state/stepproof/sessions")
        .join(state_id)
        .join("files/projects")
        .join(project_key(&workspace));
    assert!(
        kept.join(format!("{id}.jsonl")).is_file(),
        "{}",
        kept.display()
    );
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    fs::File::options()
        .write(true)
        .open(kept.join(format!("{id}.jsonl")))
        .unwrap()
        .set_modified(old)
        .unwrap();
    for i in 0..60 {
        let path = kept.join(format!("00000000-0000-4000-8000-{i:012}.jsonl"));
        fs::write(&path, "{}\n").unwrap();
        fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        std::os::unix::fs::chown(&path, Some(w.owner.0), Some(w.owner.1)).unwrap();
    }
    let second = run_claude(w, &keep, &["--resume", &id]);
    assert!(second.status.success(), "{}", second.describe());
    assert_eq!(result_of(&second)["result"], "answer-again-5d1");
    assert!(
        some_request_has(&mock, "answer-old-5d1"),
        "the old session's messages did not reach the mock"
    );
    // What the second run was seeded with: the newest 50 and the one it named.
    let runs = w.home.join(".local/state/stepproof/runs");
    let newest_run = fs::read_dir(&runs)
        .unwrap()
        .flatten()
        .filter(|e| e.path().join("sessions-seeded.json").is_file())
        .max_by_key(|e| e.metadata().unwrap().modified().unwrap())
        .unwrap()
        .path();
    let manifest: Value =
        serde_json::from_slice(&fs::read(newest_run.join("sessions-seeded.json")).unwrap())
            .unwrap();
    let transcripts: Vec<&String> = manifest["files"]
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| k.ends_with(".jsonl") && k.starts_with("projects/"))
        .collect();
    assert_eq!(transcripts.len(), 51, "{transcripts:?}");
    assert!(
        transcripts
            .iter()
            .any(|k| k.ends_with(&format!("{id}.jsonl")))
    );
    // Every kept session is still kept; the run's directory holds no copy of them.
    assert_eq!(
        fs::read_dir(&kept)
            .unwrap()
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "jsonl"))
            .count(),
        61
    );
    let copies = newest_run
        .join("claude-config/projects")
        .join(project_key(&workspace));
    let left: Vec<_> = fs::read_dir(&copies)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(
        left.iter()
            .all(|n| !n.to_string_lossy().ends_with(".jsonl")),
        "{left:?}"
    );
});

/// Lets the test's Bash calls forge entries in the run's config directory.
fn forging_rules() -> String {
    format!(
        "{KEEP}[[hook.bash]]\nid = \"test-forge\"\nreason = \"the test forges entries in the config directory\"\n\
         decision = \"allow\"\ncommands = [\"mkdir *\", \"ln *\", \"mkfifo *\", \"head *\", \"printf *\"]\n\
         [[hook.files]]\nid = \"test-config-writes\"\nreason = \"the test writes the config directory\"\n\
         decision = \"allow\"\naccess = \"write\"\npaths = [\"/run/claude-config/**\"]\n"
    )
}

both_claude!(
    forged_entries_and_oversized_files_are_dropped_and_memory_is_said,
    |w: &World| {
        let key = format!("/run/claude-config/projects/{}", project_key(&w.workspace));
        let forge = [
            format!("mkdir -p {key}/memory"),
            format!("ln -s /etc/passwd {key}/forged-link.jsonl"),
            format!("ln -s /etc {key}/memory/etc-link"),
            format!("mkfifo {key}/forged-fifo.jsonl"),
            format!("head -c 67108865 /dev/zero > {key}/huge.jsonl"),
            format!("head -c 262145 /dev/zero > {key}/memory/huge.md"),
            format!(
                "printf '%s\\n' '- MEMORY-MARK-42 the build needs make' > {key}/memory/MEMORY.md"
            ),
        ]
        .join(" && ");
        let mock = Mock::start(w, json!([bash(&forge), text("forged")]));
        let keep = profile(w, &mock, true, &forging_rules());
        let first = run_claude(w, &keep, &[]);
        assert!(first.status.success(), "{}", first.describe());
        let id = call_id(None, 0);
        run_ok(&first, &mock, &id);
        for (name, why) in [
            ("forged-link.jsonl", "(a symbolic link)"),
            ("forged-fifo.jsonl", "(a FIFO)"),
            ("memory/etc-link", "(a symbolic link)"),
            ("huge.jsonl", "(67108865 bytes, over the cap of 67108864"),
            ("memory/huge.md", "(262145 bytes, over the cap of 262144"),
        ] {
            assert!(
                first.stderr.contains(&format!("{name} {why}")),
                "{name} not reported as dropped: {}",
                first.describe()
            );
        }
        assert!(
            first.stderr.contains("memory changed: 1 file"),
            "{}",
            first.describe()
        );
        let record = first.records("sessions");
        assert_eq!(record.len(), 1, "{:#?}", first.audit);
        let changed = record[0]["memory_changed"].as_array().unwrap();
        assert_eq!(changed.len(), 1, "{:#?}", record[0]);
        assert!(
            changed[0]["path"]
                .as_str()
                .unwrap()
                .ends_with("memory/MEMORY.md")
        );
        // sha256("- MEMORY-MARK-42 the build needs make\n")
        let expected = {
            use sha2::Digest;
            hex::encode(sha2::Sha256::digest(
                b"- MEMORY-MARK-42 the build needs make\n",
            ))
        };
        assert_eq!(changed[0]["sha256"], expected.as_str());
        assert_eq!(record[0]["dropped"].as_array().unwrap().len(), 5);

        // The state holds the memory and the transcript, nothing forged, nothing of /etc.
        let shown = state(w, &["show", "--json"]);
        assert!(shown.status.success(), "{}", describe(&shown));
        let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
        let paths: Vec<&str> = shown["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["path"].as_str().unwrap())
            .collect();
        assert!(
            paths
                .iter()
                .all(|p| !p.contains("forged") && !p.contains("huge") && !p.contains("etc-link")),
            "{paths:?}"
        );
        assert_eq!(shown["memory"][0]["sha256"], expected.as_str());
        let dir = std::path::PathBuf::from(shown["state"].as_str().unwrap());
        let passwd = fs::read_to_string("/etc/passwd").unwrap();
        for entry in walk(&dir) {
            if let Ok(text) = fs::read_to_string(&entry) {
                assert!(
                    text.is_empty() || !passwd.contains(&text),
                    "{}",
                    entry.display()
                );
            }
        }

        // The next run (another mock: the marker was in the first one's tool call) loads the
        // memory into the model's context.
        let mock = Mock::start(w, json!([text("second-run")]));
        let second = run_claude(w, &profile(w, &mock, true, KEEP), &[]);
        assert!(second.status.success(), "{}", second.describe());
        assert!(
            some_request_has(&mock, "MEMORY-MARK-42"),
            "the kept memory did not reach the model"
        );
        assert!(
            !second.stderr.contains("memory changed"),
            "{}",
            second.describe()
        );
    }
);

/// The Bash call ran (allowed, no error).
#[track_caller]
fn run_ok(run: &Run, mock: &Mock, id: &str) {
    assert_eq!(
        run.decision(id)["decision"],
        "allow",
        "{:#}",
        run.decision(id)
    );
    let result = mock.expect_result(id);
    assert!(!result.is_error, "{result:?}");
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// The workspace as a real repository with one commit (owned by the world's user).
fn git_repository(w: &World) {
    fs::remove_dir_all(w.workspace.join(".git")).unwrap();
    let git = "git -c user.name=t -c user.email=t@t -c safe.directory=*";
    let setup = format!(
        "set -e; cd {ws}; {git} init -q; {git} add README; {git} commit -q -m one",
        ws = w.workspace.display()
    );
    let out = std::process::Command::new("/bin/sh")
        .args(["-c", &setup])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    chown_tree(&w.workspace, w.owner);
}

// `claude --worktree NAME` and the EnterWorktree tool work under StepProof: the worktrees
// appear under `.claude/worktrees/`, and nothing is tampering. In the next run their gitfiles
// and the common directory's links back are read-only, and a forged gitfile is quarantined.
both_claude!(
    worktrees_work_and_their_git_links_are_protected,
    |w: &World| {
        git_repository(w);
        let mock = Mock::start(w, json!([text("fin")]));
        let run = run_claude(
            w,
            &profile(w, &mock, true, KEEP),
            &["--worktree", "wt-flag"],
        );
        assert!(run.status.success(), "{}", run.describe());
        assert_eq!(run.status_file["status"], "exited", "{}", run.describe());
        let mock = Mock::start(
            w,
            json!([
                tool("EnterWorktree", json!({"name": "wt-tool"})),
                text("fin")
            ]),
        );
        let run = run_claude(w, &profile(w, &mock, true, KEEP), &[]);
        assert!(run.status.success(), "{}", run.describe());
        assert_eq!(run.status_file["status"], "exited", "{}", run.describe());
        run.expect_decision(&call_id(None, 0), "allow", "worktrees");
        let result = mock.expect_result(&call_id(None, 0));
        assert!(!result.is_error, "EnterWorktree failed: {result:?}");
        for name in ["wt-flag", "wt-tool"] {
            let gitfile = w
                .workspace
                .join(".claude/worktrees")
                .join(name)
                .join(".git");
            let text = fs::read_to_string(&gitfile)
                .unwrap_or_else(|e| panic!("{}: {e}\n{}", gitfile.display(), run.describe()));
            assert!(
                text.trim_end().ends_with(&format!(".git/worktrees/{name}"))
                    && text.contains(&w.workspace.display().to_string()),
                "{text}"
            );
        }
        // The sessions of the worktrees are kept too (their own project keys).
        let shown = state(w, &["show", "--json"]);
        let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
        assert!(
            shown["files"].as_array().unwrap().iter().any(|f| f["path"]
                .as_str()
                .unwrap()
                .contains("-claude-worktrees-wt-flag")),
            "{shown:#}"
        );

        let wt = ".claude/worktrees/wt-flag";
        let out = w.sh(&format!(
        "echo 'gitdir: /tmp/elsewhere' > {wt}/.git; echo ../../../elsewhere > .git/worktrees/wt-flag/commondir; \
         mkdir -p .claude/worktrees/forged && echo 'gitdir: /tmp/elsewhere' > .claude/worktrees/forged/.git; \
         echo work > {wt}/notes.txt"
    ));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(123), "{}", describe(&out));
        assert_eq!(
            stderr.matches("Read-only file system").count(),
            2,
            "{}",
            describe(&out)
        );
        assert!(
            stderr.contains("redirect") && stderr.contains(".claude/worktrees/forged/.git"),
            "{}",
            describe(&out)
        );
        assert!(
            fs::read_to_string(w.workspace.join(wt).join(".git"))
                .unwrap()
                .contains(".git/worktrees/wt-flag")
        );
        assert_eq!(
            fs::read_to_string(w.workspace.join(".git/worktrees/wt-flag/commondir")).unwrap(),
            "../..\n"
        );
        assert!(!w.workspace.join(".claude/worktrees/forged/.git").exists());
        assert_eq!(
            fs::read_to_string(w.workspace.join(wt).join("notes.txt")).unwrap(),
            "work\n"
        );
    }
);
