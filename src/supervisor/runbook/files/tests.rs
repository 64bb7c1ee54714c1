//! Tests of the workspace's files as evidence: globs, budgets and their named outcomes, the
//! hash cache, inventories and their changes, the ignore rules as the step opened.

use super::glob_walk::may_hold;
use super::hashing::faults_update_times;
use super::*;
use std::collections::BTreeMap;
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use std::os::unix::fs::symlink;

fn tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let w = dir.path();
    std::fs::create_dir_all(w.join("data/sub")).unwrap();
    std::fs::create_dir_all(w.join("src")).unwrap();
    std::fs::write(w.join("data/a.txt"), "a").unwrap();
    std::fs::write(w.join("data/sub/b.txt"), "b").unwrap();
    std::fs::write(w.join("src/lib.rs"), "x").unwrap();
    symlink("/etc/passwd", w.join("data/link")).unwrap();
    dir
}

fn glob(w: &Path, glob: &str, budget: &Budget) -> Result<BTreeMap<String, String>, Exceeded> {
    let stop = AtomicBool::new(false);
    let root = open_workspace(w).unwrap();
    Walk::new(budget, &stop, &RunSpend::default()).glob(root.as_fd(), glob, None)
}

/// A file hashed once in a run, unchanged since (same stat, ctime included), is not read
/// again by a later walk; any change (content at the same size with the mtime put back,
/// mode) moves the ctime and is read again; a file whose ctime is fresh is not kept.
#[test]
fn an_unchanged_file_is_hashed_once_a_run() {
    let dir = tempfile::tempdir().unwrap();
    let w = dir.path();
    std::fs::write(w.join("a.txt"), "a").unwrap();
    let root = open_workspace(w).unwrap();
    let keeps = faults_update_times(root.as_fd());
    let stop = AtomicBool::new(false);
    let spent = RunSpend::default();
    // Fresh: hashed, not kept (a change in the same clock tick would keep its ctime).
    let mut walk = Walk::new(&Budget::DEFAULT, &stop, &spent);
    let first = walk.glob(root.as_fd(), "*.txt", None).unwrap();
    assert_eq!(walk.bytes, 1);
    assert!(spent.hashes.is_empty());
    drop(walk);
    std::thread::sleep(HashCache::SETTLED + Duration::from_millis(200));
    let mut walk = Walk::new(&Budget::DEFAULT, &stop, &spent);
    assert_eq!(walk.glob(root.as_fd(), "*.txt", None).unwrap(), first);
    assert_eq!(walk.bytes, 1);
    drop(walk);
    if !keeps {
        // tmpfs and the like: a write through a mapping would not move the times.
        assert!(spent.hashes.is_empty());
        return;
    }
    assert_eq!(spent.hashes.len(), 1);
    // Another walk of the run (one sharing the hashes too): nothing read.
    let shared = RunSpend::sharing_hashes(&spent);
    for spent in [&spent, &shared] {
        let mut walk = Walk::new(&Budget::DEFAULT, &stop, spent);
        assert_eq!(walk.glob(root.as_fd(), "*.txt", None).unwrap(), first);
        assert_eq!(walk.bytes, 0, "read again");
    }
    // New content of the same size, the mtime put back: the ctime moved, read again.
    let mtime = std::fs::metadata(w.join("a.txt"))
        .unwrap()
        .modified()
        .unwrap();
    std::fs::write(w.join("a.txt"), "b").unwrap();
    std::fs::File::options()
        .write(true)
        .open(w.join("a.txt"))
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    let mut walk = Walk::new(&Budget::DEFAULT, &stop, &spent);
    let now = walk.glob(root.as_fd(), "*.txt", None).unwrap();
    assert_eq!(walk.bytes, 1);
    assert_eq!(now["a.txt"], hex::encode(Sha256::digest(b"b")));
    // Fresh again: not kept.
    assert_eq!(spent.hashes.len(), 1);
}

#[test]
fn globs_name_regular_files_and_never_a_link() {
    let dir = tree();
    let found = glob(dir.path(), "data/**", &Budget::DEFAULT).unwrap();
    let names: Vec<&str> = found.keys().map(String::as_str).collect();
    assert_eq!(names, ["data/a.txt", "data/sub/b.txt"]);
    assert_eq!(
        found["data/a.txt"],
        hex::encode(Sha256::digest(b"a")),
        "the hash is the content's"
    );
    let found = glob(dir.path(), "*/lib.rs", &Budget::DEFAULT).unwrap();
    assert_eq!(found.keys().collect::<Vec<_>>(), ["src/lib.rs"]);
}

#[test]
fn globs_match_like_file_rules() {
    assert!(glob_matches("tests/**", "tests/a/b.rs"));
    assert!(glob_matches("src/*.rs", "src/lib.rs"));
    assert!(!glob_matches("src/*.rs", "src/a/lib.rs"));
    assert!(glob_matches("**/*.md", "a/b/c.md"));
    assert!(!glob_matches("tests/**", "src/x.rs"));
}

#[test]
fn a_directory_that_cannot_hold_a_match_is_not_entered() {
    assert!(may_hold(&["data", "**"], &["data", "x", "y"]));
    assert!(may_hold(&["src", "*.rs"], &["src"]));
    assert!(!may_hold(&["src", "*.rs"], &["src", "a"]));
    assert!(!may_hold(&["src", "*.rs"], &["data"]));
    assert!(may_hold(&["**", "*.md"], &["a", "b"]));
    // Too many entries elsewhere do not count against a walk that never goes there.
    let dir = tree();
    for n in 0..50 {
        std::fs::write(dir.path().join(format!("src/f{n}")), "").unwrap();
    }
    let small = Budget {
        entries: 10,
        ..Budget::DEFAULT
    };
    assert!(glob(dir.path(), "data/**", &small).is_ok());
    assert_eq!(
        glob(dir.path(), "src/*", &small),
        Err(Exceeded::Entries { limit: 10 })
    );
}

#[test]
fn a_sparse_giant_is_refused_before_a_byte_is_read() {
    let dir = tree();
    let big = dir.path().join("data/big");
    let file = std::fs::File::create(&big).unwrap();
    file.set_len(1 << 40).unwrap();
    std::fs::hard_link(&big, dir.path().join("data/big2")).unwrap();
    let started = Instant::now();
    let got = glob(dir.path(), "data/**", &Budget::DEFAULT);
    assert!(started.elapsed() < Duration::from_secs(5));
    match got {
        Err(Exceeded::FileBytes {
            size, allocated, ..
        }) => {
            assert_eq!(size, 1 << 40);
            assert!(allocated < 1 << 20, "{allocated}");
            assert!(got.unwrap_err().sentence().contains("sparse"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn hard_links_are_hashed_once_and_the_walk_is_counted_in_bytes() {
    let dir = tree();
    std::fs::write(dir.path().join("data/one"), vec![7u8; 4096]).unwrap();
    for n in 0..20 {
        std::fs::hard_link(
            dir.path().join("data/one"),
            dir.path().join(format!("data/l{n}")),
        )
        .unwrap();
    }
    let budget = Budget {
        walk_bytes: 8192,
        ..Budget::DEFAULT
    };
    let found = glob(dir.path(), "data/**", &budget).unwrap();
    assert_eq!(found.len(), 23);
    std::fs::write(dir.path().join("data/two"), vec![8u8; 8192]).unwrap();
    assert_eq!(
        glob(dir.path(), "data/**", &budget),
        Err(Exceeded::WalkBytes { limit: 8192 })
    );
}

#[test]
fn depth_time_and_the_stop_are_named_outcomes() {
    let dir = tree();
    let mut deep = dir.path().join("data");
    for _ in 0..10 {
        deep = deep.join("d");
    }
    std::fs::create_dir_all(&deep).unwrap();
    let shallow = Budget {
        depth: 5,
        ..Budget::DEFAULT
    };
    assert!(matches!(
        glob(dir.path(), "data/**", &shallow),
        Err(Exceeded::Depth { limit: 5, .. })
    ));
    let no_time = Budget {
        time: Duration::ZERO,
        ..Budget::DEFAULT
    };
    std::thread::sleep(Duration::from_millis(2));
    assert!(matches!(
        glob(dir.path(), "data/**", &no_time),
        Err(Exceeded::Time { .. })
    ));
    let stop = AtomicBool::new(true);
    let root = open_workspace(dir.path()).unwrap();
    assert_eq!(
        Walk::new(&Budget::DEFAULT, &stop, &RunSpend::default()).glob(
            root.as_fd(),
            "data/**",
            None
        ),
        Err(Exceeded::Stopped)
    );
}

#[test]
fn a_file_that_grows_while_it_is_hashed_is_unstable() {
    let dir = tree();
    let path = dir.path().join("data/log");
    std::fs::write(&path, vec![1u8; 16 << 20]).unwrap();
    let done = std::sync::Arc::new(AtomicBool::new(false));
    let writer = {
        let (path, done) = (path.clone(), std::sync::Arc::clone(&done));
        std::thread::spawn(move || {
            use std::io::Write;
            let mut file = std::fs::OpenOptions::new().append(true).open(path).unwrap();
            while !done.load(Ordering::SeqCst) {
                file.write_all(b"x").unwrap();
                std::thread::sleep(Duration::from_micros(200));
            }
        })
    };
    let got = glob(dir.path(), "data/log", &Budget::DEFAULT);
    done.store(true, Ordering::SeqCst);
    writer.join().unwrap();
    assert_eq!(
        got,
        Err(Exceeded::Unstable {
            path: "data/log".into()
        })
    );
}

#[test]
fn the_runs_walks_share_one_budget() {
    let dir = tree();
    std::fs::write(dir.path().join("data/k"), vec![1u8; 1024]).unwrap();
    let budget = Budget {
        walk_bytes: 1024,
        ..Budget::DEFAULT
    };
    let stop = AtomicBool::new(false);
    let spent = RunSpend::default();
    let root = open_workspace(dir.path()).unwrap();
    // One walk may hash 1024 bytes, the run RUN_WALKS times that: data/k (1024 bytes) is
    // named by RUN_WALKS walks, each within its own budget, then by one walk more.
    for _ in 0..RUN_WALKS {
        let mut walk = Walk::new(&budget, &stop, &spent);
        assert!(
            walk.hash_named(root.as_fd(), Path::new("data/k"))
                .unwrap()
                .is_some()
        );
    }
    let mut walk = Walk::new(&budget, &stop, &spent);
    assert_eq!(
        walk.hash_named(root.as_fd(), Path::new("data/k")),
        Err(Exceeded::Run { what: "bytes" })
    );
}

#[test]
fn a_named_file_is_resolved_beneath_without_links() {
    let dir = tree();
    let stop = AtomicBool::new(false);
    let root = open_workspace(dir.path()).unwrap();
    let spent = RunSpend::default();
    let mut walk = Walk::new(&Budget::DEFAULT, &stop, &spent);
    assert!(
        walk.hash_named(root.as_fd(), Path::new("data/a.txt"))
            .unwrap()
            .is_some()
    );
    assert_eq!(
        walk.hash_named(root.as_fd(), Path::new("data/link")),
        Ok(None)
    );
    assert_eq!(
        walk.hash_named(root.as_fd(), Path::new("../etc/passwd")),
        Ok(None)
    );
    assert_eq!(walk.hash_named(root.as_fd(), Path::new("data")), Ok(None));
}

/// The step's rules and its inventory of `globs`, taken as a step opens them.
fn open_step(
    w: &Path,
    globs: &[&str],
    budget: &Budget,
) -> (IgnoreRules, Result<BTreeMap<String, Entry>, Exceeded>) {
    let stop = AtomicBool::new(false);
    let spent = RunSpend::default();
    let root = open_workspace(w).unwrap();
    let mut walk = Walk::new(budget, &stop, &spent);
    let mut rules = IgnoreRules::capture(&mut walk, root.as_fd()).unwrap();
    let globs: Vec<(String, bool)> = globs.iter().map(|g| (g.to_string(), true)).collect();
    let taken = walk.inventory(root.as_fd(), &globs, Some(&mut rules));
    rules.freeze();
    (rules, taken)
}

/// The inventory of `globs` now, under rules taken earlier, compared with `before`.
fn changes_since(
    w: &Path,
    globs: &[&str],
    rules: &IgnoreRules,
    before: &BTreeMap<String, Entry>,
) -> Result<BTreeMap<String, String>, Exceeded> {
    let stop = AtomicBool::new(false);
    let spent = RunSpend::default();
    let root = open_workspace(w).unwrap();
    let mut walk = Walk::new(&Budget::DEFAULT, &stop, &spent);
    let mut rules = rules.clone();
    let globs: Vec<(String, bool)> = globs.iter().map(|g| (g.to_string(), true)).collect();
    let now = walk.inventory(root.as_fd(), &globs, Some(&mut rules))?;
    compare(&mut walk, root.as_fd(), before, &now)
}

#[test]
fn an_inventory_records_links_as_links_and_every_kind_of_entry() {
    let dir = tree();
    let (_, taken) = open_step(dir.path(), &["data/**"], &Budget::DEFAULT);
    let taken = taken.unwrap();
    let names: Vec<&str> = taken.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "data",
            "data/a.txt",
            "data/link",
            "data/sub",
            "data/sub/b.txt"
        ]
    );
    assert_eq!(
        taken["data/link"],
        Entry::Link {
            target: b"/etc/passwd".to_vec()
        }
    );
    assert!(matches!(taken["data"], Entry::Dir { .. }));
    match &taken["data/a.txt"] {
        Entry::File { size, sha256, .. } => {
            assert_eq!(*size, 1);
            assert_eq!(*sha256, hex::encode(Sha256::digest(b"a")));
        }
        other => panic!("{other:?}"),
    }
    // A literal glob is one lookup; a link named by it is a link, not its target.
    let (_, taken) = open_step(dir.path(), &["data/link", "src/lib.rs"], &Budget::DEFAULT);
    let taken = taken.unwrap();
    assert_eq!(taken.len(), 2);
    assert!(matches!(taken["data/link"], Entry::Link { .. }));
}

#[test]
fn every_change_under_a_protected_path_is_named() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tree();
    let w = dir.path();
    std::fs::write(w.join("data/mode"), "m").unwrap();
    std::fs::write(w.join("data/gone"), "g").unwrap();
    std::fs::write(w.join("data/becomes-link"), "l").unwrap();
    let globs = ["data/**"];
    let (rules, before) = open_step(w, &globs, &Budget::DEFAULT);
    let before = before.unwrap();
    assert_eq!(
        changes_since(w, &globs, &rules, &before).unwrap(),
        BTreeMap::new(),
        "nothing changed"
    );
    std::fs::write(w.join("data/a.txt"), "A").unwrap();
    std::fs::set_permissions(w.join("data/mode"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(w.join("data/sub/new"), "").unwrap();
    std::fs::remove_file(w.join("data/gone")).unwrap();
    std::fs::remove_file(w.join("data/becomes-link")).unwrap();
    symlink("a.txt", w.join("data/becomes-link")).unwrap();
    std::fs::remove_file(w.join("data/link")).unwrap();
    symlink("/etc/hostname", w.join("data/link")).unwrap();
    let changes = changes_since(w, &globs, &rules, &before).unwrap();
    let expected: BTreeMap<String, String> = [
        ("data/a.txt", "content"),
        ("data/becomes-link", "was a file, now a link (to a.txt)"),
        ("data/gone", "removed (file)"),
        ("data/link", "link retargeted: /etc/passwd → /etc/hostname"),
        ("data/mode", "mode 644 → 755"),
        ("data/sub/new", "new file"),
    ]
    .into_iter()
    .map(|(p, c)| (p.to_string(), c.to_string()))
    .collect();
    // The umask may give files another mode than 644: compare that one by its shape.
    let mut changes = changes;
    let mode = changes.remove("data/mode").unwrap();
    assert!(
        mode.starts_with("mode ") && mode.ends_with(" → 755"),
        "{mode}"
    );
    let mut expected = expected;
    expected.remove("data/mode");
    assert_eq!(changes, expected);
    // A directory replaced by a link: the directory's type changed, and what was beneath
    // it is confirmed gone (a link on the way is not followed).
    std::fs::rename(w.join("data/sub"), w.join("moved")).unwrap();
    symlink("../moved", w.join("data/sub")).unwrap();
    let changes = changes_since(w, &globs, &rules, &before).unwrap();
    assert_eq!(
        changes["data/sub"],
        "was a directory, now a link (to ../moved)"
    );
    assert_eq!(changes["data/sub/b.txt"], "removed (file)");
}

#[test]
fn a_removal_counts_only_when_a_lookup_confirms_it() {
    let dir = tree();
    let w = dir.path();
    let stop = AtomicBool::new(false);
    let spent = RunSpend::default();
    let root = open_workspace(w).unwrap();
    let mut walk = Walk::new(&Budget::DEFAULT, &stop, &spent);
    let before: BTreeMap<String, Entry> = [
        ("data/a.txt", Entry::Dir { mode: 0o755 }),
        ("data/never", Entry::Dir { mode: 0o755 }),
    ]
    .into_iter()
    .map(|(p, e)| (p.to_string(), e))
    .collect();
    // A walk that did not name data/a.txt (it is there): no verdict, never "removed".
    assert_eq!(
        compare(&mut walk, root.as_fd(), &before, &BTreeMap::new()),
        Err(Exceeded::Unstable {
            path: "data/a.txt".into()
        })
    );
    let before: BTreeMap<String, Entry> = before.into_iter().skip(1).collect();
    assert_eq!(
        compare(&mut walk, root.as_fd(), &before, &BTreeMap::new()).unwrap()["data/never"],
        "removed (directory)"
    );
    // Beneath a link, nothing is: `data/link/x` is absent, as git would see it.
    assert_eq!(walk.lookup(root.as_fd(), "data/link/passwd"), Ok(None));
    assert!(
        walk.lookup(root.as_fd(), "data/link")
            .unwrap()
            .unwrap()
            .is_symlink()
    );
}

#[test]
fn an_inventory_that_does_not_finish_gives_no_verdict() {
    let dir = tree();
    let w = dir.path();
    for n in 0..30 {
        std::fs::write(w.join(format!("data/f{n}")), "").unwrap();
    }
    let small = Budget {
        entries: 10,
        ..Budget::DEFAULT
    };
    let (_, taken) = open_step(w, &["data/**"], &small);
    assert_eq!(taken, Err(Exceeded::Entries { limit: 10 }));
    // Entries beside the literal prefix cost nothing.
    for n in 0..30 {
        std::fs::write(w.join(format!("top{n}")), "").unwrap();
    }
    let (_, taken) = open_step(w, &["data/sub/**"], &small);
    assert_eq!(taken.unwrap().len(), 2);
    let shallow = Budget {
        depth: 1,
        ..Budget::DEFAULT
    };
    let (_, taken) = open_step(w, &["data/**"], &shallow);
    assert!(
        matches!(taken, Err(Exceeded::Depth { limit: 1, .. })),
        "{taken:?}"
    );
    let stop = AtomicBool::new(true);
    let root = open_workspace(w).unwrap();
    assert_eq!(
        Walk::new(&Budget::DEFAULT, &stop, &RunSpend::default()).inventory(
            root.as_fd(),
            &[("data/**".into(), false)],
            None
        ),
        Err(Exceeded::Stopped)
    );
    // A directory the supervisor cannot read (it only can't when it is not root).
    if !nix::unistd::getuid().is_root() {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(w.join("data/sub"), std::fs::Permissions::from_mode(0o000))
            .unwrap();
        let (_, taken) = open_step(w, &["data/**"], &Budget::DEFAULT);
        std::fs::set_permissions(w.join("data/sub"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        assert!(
            matches!(&taken, Err(Exceeded::Unreadable { path, .. }) if path == "data/sub"),
            "{taken:?}"
        );
    }
}

#[test]
fn ignore_rules_are_the_repositorys_as_the_step_opened() {
    let dir = tree();
    let w = dir.path();
    std::fs::create_dir_all(w.join(".git/info")).unwrap();
    std::fs::write(w.join(".git/info/exclude"), "*.tmp\n").unwrap();
    std::fs::write(w.join(".gitignore"), "__pycache__/\n*.log\n!keep.log\n").unwrap();
    std::fs::create_dir_all(w.join("src/gen")).unwrap();
    std::fs::write(w.join("src/.gitignore"), "gen/\n!x.tmp\n").unwrap();
    std::fs::create_dir_all(w.join("tests/__pycache__")).unwrap();
    std::fs::write(w.join("tests/__pycache__/t.pyc"), "c").unwrap();
    std::fs::write(w.join("tests/t.py"), "t").unwrap();
    let (rules, taken) = open_step(w, &["tests/**", "src/**"], &Budget::DEFAULT);
    let taken = taken.unwrap();
    assert!(rules.repository());
    assert!(taken.contains_key("tests/t.py"));
    assert!(
        !taken
            .keys()
            .any(|p| p.contains("__pycache__") || p.contains("gen")),
        "{taken:?}"
    );
    // The agent rewrites the rules during the step: nothing changes what counts.
    std::fs::write(w.join(".gitignore"), "src/*.rs\n*.py\n").unwrap();
    std::fs::write(w.join("src/.gitignore"), "*\n").unwrap();
    assert!(!rules.path_ignored("src/lib.rs", false));
    assert!(!rules.path_ignored("tests/t.py", false));
    assert!(rules.path_ignored("tests/__pycache__/t.pyc", false));
    assert!(rules.path_ignored("a/b.log", false));
    assert!(!rules.path_ignored("a/keep.log", false));
    assert!(rules.path_ignored("a.tmp", false), "info/exclude");
    assert!(
        !rules.path_ignored("src/x.tmp", false),
        "a deeper .gitignore decides"
    );
    assert!(
        rules.path_ignored("src/gen/x.rs", false),
        "beneath an ignored directory"
    );
    assert!(rules.path_ignored(".git/index", false));
    // A .gitignore written during the step in a directory new since it opened: not read.
    std::fs::create_dir_all(w.join("tests/new")).unwrap();
    std::fs::write(w.join("tests/new/.gitignore"), "*\n").unwrap();
    std::fs::write(w.join("tests/new/x.py"), "x").unwrap();
    let changes = changes_since(w, &["tests/**", "src/**"], &rules, &taken).unwrap();
    assert!(changes.contains_key("tests/new/x.py"), "{changes:?}");
    assert!(changes.contains_key("tests/new/.gitignore"), "{changes:?}");
    assert!(changes.contains_key("src/.gitignore"), "{changes:?}");
    // Written under the ignored __pycache__: no change.
    std::fs::write(w.join("tests/__pycache__/t.pyc"), "forged").unwrap();
    let changes = changes_since(w, &["tests/**", "src/**"], &rules, &taken).unwrap();
    assert!(
        !changes.keys().any(|p| p.contains("__pycache__")),
        "{changes:?}"
    );
}

#[test]
fn outside_a_repository_the_default_set_is_ignored() {
    let dir = tree();
    let w = dir.path();
    std::fs::write(w.join(".gitignore"), "*.bak\n").unwrap();
    let (rules, _) = open_step(w, &["src/**"], &Budget::DEFAULT);
    assert!(!rules.repository());
    for ignored in [
        "src/__pycache__/x.pyc",
        "x.pyc",
        "node_modules/a/b.js",
        "target/debug/app",
        ".venv/bin/python",
        ".pytest_cache/v",
        "src/a.o",
        "src/a.bak",
    ] {
        assert!(rules.path_ignored(ignored, false), "{ignored}");
    }
    for counted in ["src/lib.rs", "src/target.rs", "tests/test_a.py"] {
        assert!(!rules.path_ignored(counted, false), "{counted}");
    }
    // A link named .gitignore is not read (git does not follow one either).
    std::fs::remove_file(w.join(".gitignore")).unwrap();
    std::fs::write(w.join("elsewhere"), "*.rs\n").unwrap();
    symlink("elsewhere", w.join(".gitignore")).unwrap();
    let (rules, _) = open_step(w, &["src/**"], &Budget::DEFAULT);
    assert!(!rules.path_ignored("src/lib.rs", false));
}
