//! Tests of the git view: what the host's git shows is what is there.

use super::super::tests::Fixture;
use super::super::{Snapshot, Sweep};
use super::index::checksum;
use super::*;
use crate::sandbox::plan::git_index;
use std::process::Command;

/// The installed git, with nothing of the host's configuration; its output.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(["-c", "protocol.file.allow=always"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("HOME", dir)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The workspace as a real repository (in `format`): `a`, `b`, `dir/c`, two commits.
fn repo(fx: &Fixture, extra_init: &[&str]) {
    fs::remove_dir_all(fx.ws.join(".git")).unwrap();
    let mut init = vec!["init", "-q", "-b", "main"];
    init.extend_from_slice(extra_init);
    git(&fx.ws, &init);
    fs::create_dir_all(fx.ws.join("dir")).unwrap();
    for f in ["a", "b", "dir/c"] {
        fs::write(fx.ws.join(f), format!("{f}\n")).unwrap();
    }
    git(&fx.ws, &["add", "."]);
    git(&fx.ws, &["commit", "-q", "-m", "one"]);
    fs::write(fx.ws.join("b"), "b two\n").unwrap();
    git(&fx.ws, &["commit", "-q", "-am", "two"]);
}

/// Snapshot, `during` (the run), sweep.
fn swept(fx: &Fixture, during: impl FnOnce()) -> Sweep {
    let snapshot = Snapshot::take(&fx.plan());
    during();
    snapshot.sweep(&fx.profile, &fx.plan(), &fx.quarantine())
}

fn changes(fx: &Fixture, sweep: &Sweep) -> Vec<(String, &'static str)> {
    let mut out: Vec<_> = fx
        .changes(&sweep.findings)
        .into_iter()
        .map(|(p, c)| (p.to_string_lossy().into_owned(), c))
        .collect();
    out.sort();
    out
}

fn log(fx: &Fixture) -> String {
    git(&fx.ws, &["log", "--format=%s"])
}

#[test]
fn replace_refs_the_run_made_are_taken_out_loose_or_packed() {
    let fx = Fixture::new();
    repo(&fx, &[]);
    let head = git(&fx.ws, &["rev-parse", "HEAD"]).trim().to_string();
    let sweep = swept(&fx, || {
        git(&fx.ws, &["replace", "HEAD", "HEAD~1"]);
        assert_eq!(log(&fx), "one\n", "the lie works");
    });
    assert_eq!(
        changes(&fx, &sweep),
        [(format!(".git/refs/replace/{head}"), "replace-ref")]
    );
    assert!(sweep.findings[0].error.is_none(), "{:?}", sweep.findings);
    assert!(sweep.findings[0].quarantined_to.as_ref().unwrap().is_file());
    assert_eq!(log(&fx), "two\none\n");

    // Packed, beside the branch: only its line goes.
    let sweep = swept(&fx, || {
        git(&fx.ws, &["replace", "HEAD", "HEAD~1"]);
        git(&fx.ws, &["pack-refs", "--all"]);
        assert!(!fx.ws.join(".git/refs/replace").join(&head).exists());
        assert_eq!(log(&fx), "one\n", "the lie works");
    });
    assert_eq!(
        changes(&fx, &sweep),
        [(".git/packed-refs".into(), "replace-ref")]
    );
    let f = &sweep.findings[0];
    assert!(f.error.is_none(), "{f:?}");
    assert_eq!(f.entries, [format!("refs/replace/{head}")]);
    let removed = fs::read_to_string(f.quarantined_to.as_ref().unwrap()).unwrap();
    assert!(
        removed.contains(&format!("refs/replace/{head}")),
        "{removed}"
    );
    assert_eq!(log(&fx), "two\none\n");
    let packed = fs::read_to_string(fx.ws.join(".git/packed-refs")).unwrap();
    assert!(packed.contains("refs/heads/main") && !packed.contains("refs/replace"));
    git(&fx.ws, &["fsck", "--no-progress"]);
}

#[test]
fn replace_refs_of_the_launch_stay_even_once_packed() {
    let fx = Fixture::new();
    repo(&fx, &[]);
    git(&fx.ws, &["replace", "HEAD", "HEAD~1"]);
    let sweep = swept(&fx, || {
        git(&fx.ws, &["gc", "-q"]);
        git(&fx.ws, &["worktree", "add", "-q", "wt"]);
        fs::write(fx.ws.join("a"), "a two\n").unwrap();
        git(&fx.ws, &["commit", "-q", "-am", "three"]);
    });
    assert!(sweep.findings.is_empty(), "{:?}", sweep.findings);
    assert!(
        fs::read_to_string(fx.ws.join(".git/packed-refs"))
            .unwrap()
            .contains("refs/replace/")
    );
}

#[test]
fn grafts_and_shallow_that_hide_history_are_put_back() {
    let fx = Fixture::new();
    repo(&fx, &[]);
    let head = git(&fx.ws, &["rev-parse", "HEAD"]).trim().to_string();
    let one = git(&fx.ws, &["rev-parse", "HEAD~1"]).trim().to_string();
    // A shallow file at launch (naming the root, which hides nothing).
    fs::write(fx.ws.join(".git/shallow"), format!("{one}\n")).unwrap();
    let launch = fs::read(fx.ws.join(".git/shallow")).unwrap();
    let sweep = swept(&fx, || {
        fs::create_dir_all(fx.ws.join(".git/info")).unwrap();
        fs::write(fx.ws.join(".git/info/grafts"), format!("{head}\n")).unwrap();
        fs::write(fx.ws.join(".git/shallow"), format!("{one}\n{head}\n")).unwrap();
        assert_eq!(log(&fx), "two\n", "the lie works");
    });
    assert_eq!(
        changes(&fx, &sweep),
        [
            (".git/info/grafts".into(), "git-view"),
            (".git/shallow".into(), "git-view")
        ]
    );
    assert!(
        sweep.findings.iter().all(|f| f.error.is_none()),
        "{:?}",
        sweep.findings
    );
    assert!(!fx.ws.join(".git/info/grafts").exists());
    assert_eq!(fs::read(fx.ws.join(".git/shallow")).unwrap(), launch);
    assert_eq!(sweep.restored, [fx.ws.join(".git/shallow")]);
    assert_eq!(log(&fx), "two\none\n");
    // Lines taken out show more history: the truth, carried.
    let sweep = swept(&fx, || fs::remove_file(fx.ws.join(".git/shallow")).unwrap());
    assert!(sweep.findings.is_empty(), "{:?}", sweep.findings);
    assert!(!fx.ws.join(".git/shallow").exists());
}

#[test]
fn attributes_and_exclude_changes_are_put_back() {
    let fx = Fixture::new();
    repo(&fx, &[]);
    let exclude = fx.ws.join(".git/info/exclude");
    fs::write(&exclude, "# mine\n*.log\n").unwrap();
    let launch = fs::read(&exclude).unwrap();
    let sweep = swept(&fx, || {
        fs::write(&exclude, "# mine\n*.log\nsecret\n").unwrap();
        fs::write(fx.ws.join("secret"), "x").unwrap();
        fs::write(fx.ws.join(".git/info/attributes"), "* -diff\n").unwrap();
        fs::write(fx.ws.join("a"), "a changed\n").unwrap();
        let status = git(&fx.ws, &["status", "--porcelain"]);
        assert!(!status.contains("secret"), "the lie works: {status}");
        assert!(git(&fx.ws, &["diff"]).contains("Binary files"));
    });
    assert_eq!(
        changes(&fx, &sweep),
        [
            (".git/info/attributes".into(), "git-view"),
            (".git/info/exclude".into(), "git-view")
        ]
    );
    assert_eq!(fs::read(&exclude).unwrap(), launch);
    assert!(!fx.ws.join(".git/info/attributes").exists());
    assert!(git(&fx.ws, &["status", "--porcelain"]).contains("?? secret"));
    assert!(git(&fx.ws, &["diff"]).contains("+a changed"));
}

#[test]
fn index_flags_the_run_set_are_cleared_in_every_format() {
    for (version, init) in [
        ("2", &[][..]),
        ("3", &[][..]),
        ("4", &[][..]),
        ("4", &["--object-format=sha256"][..]),
    ] {
        let fx = Fixture::new();
        repo(&fx, init);
        git(&fx.ws, &["config", "index.version", version]);
        // The user's own flag, from before the launch: kept.
        git(&fx.ws, &["update-index", "--assume-unchanged", "b"]);
        let sweep = swept(&fx, || {
            fs::write(fx.ws.join("a"), "a changed\n").unwrap();
            fs::write(fx.ws.join("dir/c"), "c changed\n").unwrap();
            git(&fx.ws, &["update-index", "--assume-unchanged", "a"]);
            git(&fx.ws, &["update-index", "--skip-worktree", "dir/c"]);
            git(&fx.ws, &["update-index", "--untracked-cache"]);
            fs::write(fx.ws.join("new"), "x").unwrap();
            assert_eq!(
                git(&fx.ws, &["status", "--porcelain", "-uno"]),
                "",
                "the lie works"
            );
        });
        let what = format!("{version} {init:?}: {:?}", sweep.findings);
        assert_eq!(
            changes(&fx, &sweep),
            [(".git/index".into(), "index-flags")],
            "{what}"
        );
        let f = &sweep.findings[0];
        assert!(f.error.is_none(), "{what}");
        assert_eq!(
            f.entries,
            ["assume-valid a", "skip-worktree dir/c"],
            "{what}"
        );
        assert!(f.detail.as_ref().unwrap().contains("UNTR"), "{what}");
        assert!(f.quarantined_to.as_ref().unwrap().is_file(), "{what}");
        let status = git(&fx.ws, &["status", "--porcelain"]);
        assert!(
            status.contains(" M a") && status.contains(" M dir/c") && status.contains("?? new"),
            "{what}: {status}"
        );
        let flags = git(&fx.ws, &["ls-files", "-v"]);
        assert!(
            flags.contains("H a\n") && flags.contains("h b\n") && flags.contains("H dir/c\n"),
            "{what}: {flags}"
        );
        let index = fs::read(fx.ws.join(".git/index")).unwrap();
        let layout =
            git_index::for_each_entry(&index, if init.is_empty() { 20 } else { 32 }, |_| {})
                .unwrap();
        assert!(
            layout.extensions.iter().all(|x| &x.signature != b"UNTR"),
            "{what}"
        );
        // Nothing left to say.
        let again = swept(&fx, || {});
        assert!(again.findings.is_empty(), "{what}: {:?}", again.findings);
    }
}

/// An index whose entry keeps the stat data of the changed file but the object id of its
/// old content: no flag, and the host's git trusts it without reading the file.
#[test]
fn stat_data_that_vouch_for_other_content_are_smudged() {
    let fx = Fixture::new();
    repo(&fx, &[]);
    let old = git(&fx.ws, &["rev-parse", "HEAD:a"]).trim().to_string();
    let sweep = swept(&fx, || {
        fs::write(fx.ws.join("a"), "a changed\n").unwrap();
        fs::write(fx.ws.join("b"), "b changed\n").unwrap();
        // Older than the index: not racily clean, so git trusts the stat data.
        let past = std::time::SystemTime::now() - Duration::from_secs(10);
        for f in ["a", "b"] {
            let file = fs::File::options().write(true).open(fx.ws.join(f)).unwrap();
            file.set_modified(past).unwrap();
        }
        git(&fx.ws, &["add", "a", "b"]);
        let new = git(&fx.ws, &["rev-parse", ":a"]).trim().to_string();
        let path = fx.ws.join(".git/index");
        let mut index = fs::read(&path).unwrap();
        let (new, old) = (hex::decode(&new).unwrap(), hex::decode(&old).unwrap());
        let at = memchr::memmem::find(&index, &new).unwrap();
        index[at..at + 20].copy_from_slice(&old);
        let body = index.len() - 20;
        let sum = checksum(&index[..body], 20);
        index[body..].copy_from_slice(&sum);
        fs::write(&path, &index).unwrap();
        let status = git(&fx.ws, &["status", "--porcelain"]);
        assert_eq!(status, "M  b\n", "the lie works");
    });
    assert!(sweep.findings.is_empty(), "{:?}", sweep.findings);
    assert!(
        sweep.notes.len() == 1 && sweep.notes[0].contains("1 entries (a)"),
        "{:?}",
        sweep.notes
    );
    let status = git(&fx.ws, &["status", "--porcelain"]);
    assert_eq!(status, " M a\nM  b\n");
    assert!(git(&fx.ws, &["diff"]).contains("+a changed"));
}

#[test]
fn a_repository_that_appeared_during_the_run_is_judged_by_content() {
    let fx = Fixture::new();
    repo(&fx, &[]);
    let new = fx.ws.join("new");
    let sweep = swept(&fx, || {
        fs::create_dir_all(&new).unwrap();
        git(&new, &["init", "-q"]);
        fs::write(new.join("f"), "f\n").unwrap();
        git(&new, &["add", "f"]);
        git(&new, &["commit", "-q", "-m", "first"]);
        fs::write(new.join("f"), "g\n").unwrap();
        git(&new, &["commit", "-q", "-am", "second"]);
        git(&new, &["replace", "HEAD", "HEAD~1"]);
        fs::write(new.join(".git/info/attributes"), "* -diff\n").unwrap();
        // A shallow clone of the workspace: ordinary.
        git(
            &fx.ws,
            &[
                "clone",
                "-q",
                "--depth",
                "1",
                &format!("file://{}", fx.ws.display()),
                "shallow-clone",
            ],
        );
    });
    let head = git(&new, &["rev-parse", "HEAD"]).trim().to_string();
    assert_eq!(
        changes(&fx, &sweep),
        [
            ("new/.git/info/attributes".into(), "git-view"),
            (format!("new/.git/refs/replace/{head}"), "replace-ref"),
        ]
    );
    // What `git init` wrote (its template `info/exclude`) stays.
    assert!(new.join(".git/info/exclude").is_file());
    assert!(fx.ws.join("shallow-clone/.git/shallow").is_file());
}

#[test]
fn a_submodule_and_a_linked_worktree_are_judged_in_their_own_git_directories() {
    let fx = Fixture::new();
    let lib = fx.base().join("libsrc");
    fs::create_dir_all(&lib).unwrap();
    git(&lib, &["init", "-q"]);
    fs::write(lib.join("l"), "l\n").unwrap();
    git(&lib, &["add", "l"]);
    git(&lib, &["commit", "-q", "-m", "l1"]);
    fs::write(lib.join("l"), "l2\n").unwrap();
    git(&lib, &["commit", "-q", "-am", "l2"]);
    repo(&fx, &[]);
    git(
        &fx.ws,
        &["submodule", "add", "-q", lib.to_str().unwrap(), "lib"],
    );
    git(&fx.ws, &["commit", "-q", "-m", "lib"]);
    git(&fx.ws, &["worktree", "add", "-q", "wt"]);
    let (sub, wt) = (fx.ws.join("lib"), fx.ws.join("wt"));
    let sweep = swept(&fx, || {
        git(&sub, &["replace", "HEAD", "HEAD~1"]);
        fs::write(sub.join("l"), "changed\n").unwrap();
        git(&sub, &["update-index", "--assume-unchanged", "l"]);
        fs::write(wt.join("a"), "changed\n").unwrap();
        git(&wt, &["update-index", "--skip-worktree", "a"]);
        assert_eq!(git(&sub, &["diff"]), "", "the lie works");
        assert_eq!(git(&wt, &["status", "--porcelain"]), "", "the lie works");
    });
    let head = git(&sub, &["rev-parse", "HEAD"]).trim().to_string();
    assert_eq!(
        changes(&fx, &sweep),
        [
            (".git/modules/lib/index".into(), "index-flags"),
            (
                format!(".git/modules/lib/refs/replace/{head}"),
                "replace-ref"
            ),
            (".git/worktrees/wt/index".into(), "index-flags"),
        ],
        "{:?}",
        sweep.findings
    );
    assert_eq!(git(&sub, &["log", "--format=%s"]), "l2\nl1\n");
    assert!(git(&sub, &["diff"]).contains("+changed"));
    assert_eq!(git(&wt, &["status", "--porcelain"]), " M a\n");
}

#[test]
fn a_link_at_info_is_moved_and_the_launch_files_put_back() {
    let fx = Fixture::new();
    repo(&fx, &[]);
    let exclude = fx.ws.join(".git/info/exclude");
    fs::write(&exclude, "*.log\n").unwrap();
    let elsewhere = fx.base().join("elsewhere");
    let sweep = swept(&fx, || {
        fs::create_dir_all(&elsewhere).unwrap();
        fs::write(elsewhere.join("exclude"), "*\n").unwrap();
        fs::remove_dir_all(fx.ws.join(".git/info")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, fx.ws.join(".git/info")).unwrap();
    });
    assert_eq!(
        changes(&fx, &sweep),
        [
            (".git/info".into(), "git-view"),
            (".git/info/exclude".into(), "git-view")
        ],
        "{:?}",
        sweep.findings
    );
    assert_eq!(sweep.restored, [fx.ws.join(".git/info/exclude")]);
    assert!(fx.ws.join(".git/info").is_dir() && !fx.ws.join(".git/info").is_symlink());
    assert_eq!(fs::read_to_string(&exclude).unwrap(), "*.log\n");
    assert_eq!(
        fs::read_to_string(elsewhere.join("exclude")).unwrap(),
        "*\n"
    );
}

#[test]
fn ordinary_work_and_what_the_launch_had_are_left() {
    let fx = Fixture::new();
    repo(&fx, &[]);
    // A sparse checkout, and a flag of the user's own, from before the launch.
    git(
        &fx.ws,
        &["sparse-checkout", "set", "--no-cone", "/*", "!/dir/"],
    );
    assert!(!fx.ws.join("dir/c").exists());
    git(&fx.ws, &["update-index", "--assume-unchanged", "a"]);
    let sweep = swept(&fx, || {
        git(&fx.ws, &["checkout", "-q", "-b", "feature"]);
        fs::write(fx.ws.join("b"), "b three\n").unwrap();
        git(&fx.ws, &["add", "b"]);
        git(&fx.ws, &["commit", "-q", "-m", "three"]);
        git(&fx.ws, &["branch", "other"]);
        git(&fx.ws, &["gc", "-q"]);
        git(&fx.ws, &["status", "--porcelain"]);
    });
    assert!(sweep.findings.is_empty(), "{:?}", sweep.findings);
    assert!(sweep.notes.is_empty(), "{:?}", sweep.notes);
    assert!(git(&fx.ws, &["ls-files", "-v"]).contains("h a\n"));
}

#[test]
fn a_split_index_is_reported_not_rewritten() {
    let fx = Fixture::new();
    repo(&fx, &[]);
    let sweep = swept(&fx, || {
        git(&fx.ws, &["update-index", "--split-index"]);
        git(&fx.ws, &["update-index", "--assume-unchanged", "a"]);
    });
    assert_eq!(changes(&fx, &sweep), [(".git/index".into(), "index-flags")]);
    let f = &sweep.findings[0];
    assert!(
        f.error
            .as_ref()
            .is_some_and(|e| e.contains("git ls-files -v")),
        "{f:?}"
    );
    assert_eq!(
        f.entries,
        ["assume-valid (an entry that replaces one of the shared index)"]
    );
}

#[test]
fn the_launch_record_reads_back_as_a_repair_reads_it() {
    let fx = Fixture::new();
    repo(&fx, &[]);
    git(&fx.ws, &["update-index", "--skip-worktree", "b"]);
    let snapshot = Snapshot::take(&fx.plan());
    let json = serde_json::to_vec(&snapshot).unwrap();
    let read: Snapshot = serde_json::from_slice(&json).unwrap();
    git(&fx.ws, &["update-index", "--assume-unchanged", "a"]);
    let sweep = read.sweep(&fx.profile, &fx.plan(), &fx.quarantine());
    assert_eq!(changes(&fx, &sweep), [(".git/index".into(), "index-flags")]);
    assert_eq!(sweep.findings[0].entries, ["assume-valid a"]);
    assert!(git(&fx.ws, &["ls-files", "-v"]).contains("S b\n"));
}
