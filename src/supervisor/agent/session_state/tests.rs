//! Tests of the kept session data: seeding a run's config directory and taking its files back.

use super::taking_back::{newest_lines_within, remove_settled};
use super::*;
use crate::sandbox::plan::agent_layer::{AgentState, SEED_NEWEST, SessionSeeding};
use crate::sys::beneath::{self, DIR_LISTING};
use sha2::{Digest, Sha256};
use std::fs::{self, File};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

fn root(path: &Path) -> OwnedFd {
    beneath::open_root(path, DIR_LISTING).unwrap()
}

fn me() -> u32 {
    nix::unistd::geteuid().as_raw()
}

#[test]
fn only_kept_names_are_found_and_links_fifos_and_big_files_are_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let c = dir.path();
    let key = c.join("projects/-home-u-src-p");
    fs::create_dir_all(key.join("memory/topic")).unwrap();
    fs::create_dir_all(key.join("abc/subagents")).unwrap();
    fs::create_dir_all(c.join("todos")).unwrap();
    fs::create_dir_all(c.join("plans")).unwrap();
    fs::create_dir_all(c.join("shell-snapshots")).unwrap();
    fs::write(c.join("history.jsonl"), "{}\n").unwrap();
    fs::write(c.join("settings.json"), "{}").unwrap();
    fs::write(c.join("shell-snapshots/snapshot-bash.sh"), "x").unwrap();
    fs::write(c.join("todos/s-agent-s.json"), "[]").unwrap();
    fs::write(c.join("plans/p.md"), "# plan").unwrap();
    fs::write(key.join("s1.jsonl"), "{}\n").unwrap();
    fs::write(key.join("notes.txt"), "x").unwrap();
    fs::write(key.join("abc/subagents/agent-1.jsonl"), "{}\n").unwrap();
    fs::write(key.join("memory/MEMORY.md"), "- a\n").unwrap();
    fs::write(key.join("memory/topic/a.md"), "a\n").unwrap();
    fs::write(
        key.join("memory/big.md"),
        vec![b'x'; Kind::Memory.cap() as usize + 1],
    )
    .unwrap();
    std::os::unix::fs::symlink("/etc/passwd", key.join("s2.jsonl")).unwrap();
    std::os::unix::fs::symlink("/etc", key.join("memory/etc")).unwrap();
    nix::unistd::mkfifo(
        &key.join("s3.jsonl"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    fs::write(key.join("s4.jsonl"), "{}\n").unwrap();
    fs::hard_link(key.join("s4.jsonl"), c.join("todos/linked")).unwrap();
    // A key-shaped link to elsewhere is not walked.
    std::os::unix::fs::symlink("/etc", c.join("projects/-etc")).unwrap();
    let walk = Walk::of(root(c).as_fd(), Some(me()));
    let found: Vec<String> = walk
        .found
        .iter()
        .map(|f| f.rel.display().to_string())
        .collect();
    assert_eq!(
        found,
        [
            "history.jsonl",
            "todos/s-agent-s.json",
            "plans/p.md",
            "projects/-home-u-src-p/memory/MEMORY.md",
            "projects/-home-u-src-p/memory/topic/a.md",
            "projects/-home-u-src-p/s1.jsonl",
        ]
    );
    let dropped: Vec<(String, String)> = walk
        .dropped
        .iter()
        .map(|d| (d.path.clone(), d.why.clone()))
        .collect();
    let why = |p: &str| {
        dropped
            .iter()
            .find(|(path, _)| path == p)
            .map(|(_, w)| w.clone())
            .unwrap_or_else(|| panic!("{p} not dropped: {dropped:?}"))
    };
    assert_eq!(why("todos/linked"), "2 hard links");
    assert!(why("projects/-home-u-src-p/memory/big.md").contains("over the cap of 262144"));
    assert_eq!(why("projects/-home-u-src-p/memory/etc"), "a symbolic link");
    assert_eq!(why("projects/-home-u-src-p/s2.jsonl"), "a symbolic link");
    assert_eq!(why("projects/-home-u-src-p/s3.jsonl"), "a FIFO");
    assert_eq!(why("projects/-home-u-src-p/s4.jsonl"), "2 hard links");
    assert_eq!(dropped.len(), 6, "{dropped:?}");
    // Another owner: nothing is kept.
    let other = Walk::of(root(c).as_fd(), Some(me() + 1));
    assert!(other.found.is_empty());
    // A config directory whose `projects` is a link: nothing below it is looked at.
    let d2 = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(c.join("projects"), d2.path().join("projects")).unwrap();
    let walk = Walk::of(root(d2.path()).as_fd(), None);
    assert!(walk.found.is_empty());
    assert_eq!(walk.dropped[0].why, "a symbolic link");
}

fn agent_state(dir: &Path) -> AgentState {
    let run_dir = dir.join("run");
    fs::create_dir_all(run_dir.join("claude-config")).unwrap();
    AgentState {
        config_dir: run_dir.join("claude-config"),
        hook_socket: run_dir.join("hook.sock"),
        run_dir,
        hook_binary: PathBuf::from("/bin/true"),
        workspace: PathBuf::from("/w"),
        home: dir.to_path_buf(),
        sessions: Some(dir.join("state")),
        seeding: SessionSeeding::Every,
        shipped: Vec::new(),
    }
}

/// Writes each `(path, text)` below `dir`, with the directories on the way.
fn put(dir: &Path, files: &[(&str, &str)]) {
    for (rel, text) in files {
        let path = dir.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }
}

/// A single turn from no kept session is seeded with the prompt history and auto-memory
/// only; what it writes comes back beside the transcripts it was not given, which stay.
#[test]
fn a_fresh_single_turn_gets_no_transcripts_and_loses_none() {
    let dir = tempfile::tempdir().unwrap();
    let first = agent_state(dir.path());
    seed(&first);
    put(
        &first.config_dir,
        &[
            ("projects/-w/s1.jsonl", "one\n"),
            ("todos/s1.json", "[]"),
            ("plans/p.md", "plan"),
            ("history.jsonl", "p1\n"),
            ("projects/-w/memory/MEMORY.md", "- fact\n"),
        ],
    );
    take_back(&first, me()).unwrap();
    fs::remove_dir_all(dir.path().join("run")).unwrap();

    let fresh = AgentState {
        seeding: SessionSeeding::None,
        ..agent_state(dir.path())
    };
    seed(&fresh);
    let c = &fresh.config_dir;
    assert!(!c.join("projects/-w/s1.jsonl").exists());
    assert!(!c.join("todos/s1.json").exists());
    assert!(!c.join("plans/p.md").exists());
    assert_eq!(fs::read_to_string(c.join("history.jsonl")).unwrap(), "p1\n");
    assert_eq!(
        fs::read_to_string(c.join("projects/-w/memory/MEMORY.md")).unwrap(),
        "- fact\n"
    );
    // The turn writes its own transcript and a prompt; nothing kept is taken as removed.
    fs::write(c.join("projects/-w/s2.jsonl"), "two\n").unwrap();
    fs::write(c.join("history.jsonl"), "p1\np2\n").unwrap();
    let back = take_back(&fresh, me()).unwrap();
    assert!(back.removed.is_empty(), "{back:?}");
    let files = dir.path().join("state/files");
    for (kept, text) in [
        ("projects/-w/s1.jsonl", "one\n"),
        ("projects/-w/s2.jsonl", "two\n"),
        ("todos/s1.json", "[]"),
        ("plans/p.md", "plan"),
        ("history.jsonl", "p1\np2\n"),
    ] {
        assert_eq!(
            fs::read_to_string(files.join(kept)).unwrap(),
            text,
            "{kept}"
        );
    }
}

/// Claude Code is seeded with the newest transcripts (and their todo lists) and plans, and
/// with those it names whatever their age; the others stay kept, untouched by its run.
#[test]
fn claude_gets_the_newest_sessions_and_those_it_names() {
    let dir = tempfile::tempdir().unwrap();
    let files = dir.path().join("state/files");
    let count = SEED_NEWEST + 10;
    // Session i is i hours old; each has a todo list, every other one a plan.
    for i in 0..count {
        let transcript = files.join(format!("projects/-w/s{i}.jsonl"));
        let todo = files.join(format!("todos/s{i}-agent-s{i}.json"));
        let plan = files.join(format!("plans/p{i}.md"));
        for (path, text) in [(&transcript, "t\n"), (&todo, "[]"), (&plan, "plan")] {
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, text).unwrap();
            let at = SystemTime::now() - Duration::from_secs(3600 * i as u64);
            File::options()
                .write(true)
                .open(path)
                .unwrap()
                .set_modified(at)
                .unwrap();
        }
    }
    put(&files, &[("history.jsonl", "p\n")]);
    let oldest = format!("s{}", count - 1);
    let state = AgentState {
        seeding: SessionSeeding::Newest {
            named: vec![oldest.clone(), "no-such-session".into()],
        },
        ..agent_state(dir.path())
    };
    seed(&state);
    let c = &state.config_dir;
    let seeded = |rel: String| c.join(rel).exists();
    for i in 0..count {
        let wanted = i < SEED_NEWEST || format!("s{i}") == oldest;
        assert_eq!(seeded(format!("projects/-w/s{i}.jsonl")), wanted, "s{i}");
        assert_eq!(
            seeded(format!("todos/s{i}-agent-s{i}.json")),
            wanted,
            "todo s{i}"
        );
        assert_eq!(seeded(format!("plans/p{i}.md")), i < SEED_NEWEST, "p{i}");
    }
    assert!(c.join("history.jsonl").exists());
    // The seeded copies keep their times (`--continue` takes the newest).
    let mtime = |p: &Path| fs::metadata(p).unwrap().modified().unwrap();
    assert_eq!(
        mtime(&c.join("projects/-w/s0.jsonl")),
        mtime(&files.join("projects/-w/s0.jsonl"))
    );
    // Nothing it was not given is taken as removed; the run directory keeps no second copy
    // of what the state holds (a file the run added is taken back, then goes too).
    fs::write(c.join("projects/-w/new.jsonl"), "n\n").unwrap();
    let back = take_back(&state, me()).unwrap();
    assert!(back.removed.is_empty(), "{back:?}");
    assert_eq!(back.kept, ["projects/-w/new.jsonl"]);
    assert!(
        files
            .join(format!("projects/-w/s{}.jsonl", SEED_NEWEST))
            .exists()
    );
    assert!(files.join("projects/-w/new.jsonl").exists());
    for rel in [
        "projects/-w/s0.jsonl",
        "projects/-w/new.jsonl",
        "history.jsonl",
    ] {
        assert!(!c.join(rel).exists(), "{rel}");
    }
    assert!(c.join("projects/-w").is_dir());
    // Everything, for a command that is not Claude Code.
    fs::remove_dir_all(dir.path().join("run")).unwrap();
    let every = agent_state(dir.path());
    seed(&every);
    for i in 0..count {
        assert!(seeded(format!("projects/-w/s{i}.jsonl")), "s{i}");
    }
}

/// Seeded, changed, taken back; an unchanged file is not rewritten, a removed one goes,
/// history appends merge, a memory change is named with its hash.
#[test]
fn a_run_is_seeded_and_its_changes_come_back() {
    let dir = tempfile::tempdir().unwrap();
    let first = agent_state(dir.path());
    // Run 1: nothing seeded; it writes a transcript, history, memory.
    seed(&first);
    put(
        &first.config_dir,
        &[
            ("projects/-w/s1.jsonl", "one\n"),
            ("projects/-w/old.jsonl", "old\n"),
            ("history.jsonl", "p1\n"),
            ("projects/-w/memory/MEMORY.md", "- fact\n"),
            ("settings.json", r#"{"hooks":{}}"#),
        ],
    );
    let back = take_back(&first, me()).unwrap();
    assert_eq!(back.kept.len(), 4, "{back:?}");
    assert_eq!(back.memory_changed.len(), 1);
    assert_eq!(
        back.memory_changed[0].sha256.as_deref(),
        Some(hex::encode(Sha256::digest(b"- fact\n")).as_str())
    );
    let files = dir.path().join("state/files");
    assert!(!files.join("settings.json").exists());
    assert_eq!(
        fs::read_to_string(files.join("projects/-w/s1.jsonl")).unwrap(),
        "one\n"
    );

    // Runs 2 and 3 are seeded from it, at the same time.
    fs::remove_dir_all(dir.path().join("run")).unwrap();
    let second = agent_state(dir.path());
    seed(&second);
    let two = dir.path().join("two");
    fs::rename(dir.path().join("run"), &two).unwrap();
    let third = agent_state(dir.path());
    seed(&third);
    let second = AgentState {
        run_dir: two.clone(),
        config_dir: two.join("claude-config"),
        ..second
    };
    let c2 = &second.config_dir;
    assert_eq!(
        fs::read_to_string(c2.join("projects/-w/s1.jsonl")).unwrap(),
        "one\n"
    );
    let seeded = fs::metadata(c2.join("projects/-w/s1.jsonl")).unwrap();
    let kept = fs::metadata(files.join("projects/-w/s1.jsonl")).unwrap();
    assert_eq!(
        (seeded.mtime(), seeded.mtime_nsec()),
        (kept.mtime(), kept.mtime_nsec())
    );
    // Run 2 continues s1, appends a prompt, removes old.jsonl.
    fs::write(c2.join("projects/-w/s1.jsonl"), "one\ntwo\n").unwrap();
    fs::write(c2.join("history.jsonl"), "p1\np2\n").unwrap();
    fs::remove_file(c2.join("projects/-w/old.jsonl")).unwrap();
    // Run 3 appends a prompt, starts s3, leaves s1 alone.
    let c3 = &third.config_dir;
    fs::write(c3.join("history.jsonl"), "p1\np3\n").unwrap();
    fs::write(c3.join("projects/-w/s3.jsonl"), "three\n").unwrap();
    let back2 = take_back(&second, me()).unwrap();
    assert_eq!(back2.removed, ["projects/-w/old.jsonl"]);
    assert!(back2.memory_changed.is_empty(), "{back2:?}");
    let back3 = take_back(&third, me()).unwrap();
    assert_eq!(
        back3.kept,
        ["history.jsonl", "projects/-w/s3.jsonl"],
        "{back3:?}"
    );
    // Run 3 did not undo run 2's work.
    assert_eq!(
        fs::read_to_string(files.join("projects/-w/s1.jsonl")).unwrap(),
        "one\ntwo\n"
    );
    assert_eq!(
        fs::read_to_string(files.join("history.jsonl")).unwrap(),
        "p1\np2\np3\n"
    );
    assert!(!files.join("projects/-w/old.jsonl").exists());
}

#[test]
fn history_keeps_its_newest_whole_lines() {
    assert_eq!(newest_lines_within(b"a\nbb\ncc\n", 100), b"a\nbb\ncc\n");
    assert_eq!(newest_lines_within(b"a\nbb\ncc\n", 6), b"bb\ncc\n");
    assert_eq!(newest_lines_within(b"a\nbb\ncc\n", 5), b"cc\n");
    assert_eq!(newest_lines_within(b"a\nbbbbbbb\n", 3), b"");
}

/// The removal of settled copies never goes through a link: a directory on the way that is
/// a link (to files outside) leaves its target's files alone.
#[test]
fn settled_copies_are_removed_beneath_only() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config");
    let outside = dir.path().join("outside");
    put(&outside, &[("s1.jsonl", "keep me")]);
    put(
        &config,
        &[("projects/-w/s2.jsonl", "copy"), ("history.jsonl", "h")],
    );
    std::os::unix::fs::symlink(&outside, config.join("projects/-x")).unwrap();
    let root = root(&config);
    let settled = [
        PathBuf::from("projects/-x/s1.jsonl"),
        PathBuf::from("projects/-w/s2.jsonl"),
        PathBuf::from("history.jsonl"),
    ];
    let refs: Vec<&PathBuf> = settled.iter().collect();
    assert_eq!(remove_settled(root.as_fd(), &refs), 2);
    assert_eq!(
        fs::read_to_string(outside.join("s1.jsonl")).unwrap(),
        "keep me"
    );
    assert!(!config.join("projects/-w/s2.jsonl").exists());
    assert!(!config.join("history.jsonl").exists());
}

/// The hourly look removes, in a state no run holds, the transcripts (with their todo
/// lists) and plans older than the retention beyond the newest of their kind; memory, the
/// history and every newer file stay, and a state a run holds is not touched.
#[test]
fn aged_out_sessions_go_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let sessions = dir.path().join("sessions");
    let state = sessions.join("0123456789abcdef0123456789abcdef");
    let files = state.join("files");
    fs::create_dir_all(&files).unwrap();
    fs::write(state.join("lock"), "").unwrap();
    let now = SystemTime::now();
    let aged = now - Duration::from_secs((UNUSED_DAYS + 1) * 86_400);
    let set_mtime = |path: &Path, at: SystemTime| {
        File::options()
            .write(true)
            .open(path)
            .unwrap()
            .set_modified(at)
            .unwrap();
    };
    // Three recent sessions and SEED_NEWEST + 2 aged ones (session a{i} i seconds older).
    let mut names = Vec::new();
    for i in 0..3 {
        names.push((format!("r{i}"), now));
    }
    for i in 0..SEED_NEWEST + 2 {
        names.push((format!("a{i}"), aged - Duration::from_secs(i as u64)));
    }
    for (name, at) in &names {
        for rel in [
            format!("projects/-w/{name}.jsonl"),
            format!("todos/{name}-agent-{name}.json"),
            format!("plans/{name}.md"),
        ] {
            put(&files, &[(rel.as_str(), "x")]);
            set_mtime(&files.join(rel), *at);
        }
    }
    put(
        &files,
        &[
            ("history.jsonl", "p\n"),
            ("projects/-w/memory/MEMORY.md", "- fact\n"),
        ],
    );
    set_mtime(&files.join("history.jsonl"), aged);
    set_mtime(&files.join("projects/-w/memory/MEMORY.md"), aged);
    // Held by a run: nothing goes.
    let held = File::open(state.join("lock")).unwrap();
    held.lock_shared().unwrap();
    assert_eq!(prune_aged_sessions(&sessions, now), 0);
    drop(held);
    // Free: the newest 50 stay (the 3 recent, a0..a46), a47..a51 go with their todo lists.
    assert_eq!(prune_aged_sessions(&sessions, now), 5 * 3);
    for (name, _) in &names {
        let gone = name
            .strip_prefix('a')
            .is_some_and(|i| i.parse::<usize>().unwrap() >= SEED_NEWEST - 3);
        for rel in [
            format!("projects/-w/{name}.jsonl"),
            format!("todos/{name}-agent-{name}.json"),
            format!("plans/{name}.md"),
        ] {
            assert_eq!(files.join(&rel).exists(), !gone, "{rel}");
        }
    }
    assert!(files.join("history.jsonl").exists());
    assert!(files.join("projects/-w/memory/MEMORY.md").exists());
    assert_eq!(prune_aged_sessions(&sessions, now), 0);
}

#[test]
fn unused_states_are_pruned_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let sessions = dir.path().join(crate::audit::STATE_DIR).join("sessions");
    let old = sessions.join("0123456789abcdef0123456789abcdef");
    let fresh = sessions.join("fedcba9876543210fedcba9876543210");
    for d in [&old, &fresh] {
        fs::create_dir_all(d.join("files")).unwrap();
        fs::write(d.join("lock"), "").unwrap();
        fs::write(d.join("last-used"), "").unwrap();
    }
    fs::create_dir_all(sessions.join("notes")).unwrap();
    let now = SystemTime::now() + Duration::from_secs(UNUSED_DAYS * 86_400 / 2);
    File::options()
        .write(true)
        .open(old.join("last-used"))
        .unwrap()
        .set_modified(now - Duration::from_secs((UNUSED_DAYS + 1) * 86_400))
        .unwrap();
    assert_eq!(prune(&sessions, now), std::slice::from_ref(&old));
    assert!(fresh.is_dir() && sessions.join("notes").is_dir() && !old.exists());
}
