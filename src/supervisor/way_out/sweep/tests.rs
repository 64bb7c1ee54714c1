//! Tests of the persistence sweep and the setuid check.

use super::git_rules::{inert_git_config, inert_gitmodules};
use super::*;
use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};

/// The walk's part of a plan's scope.
fn scope_of(plan: &SandboxPlan) -> SweepScope {
    SweepScope {
        workspace: plan.workspace.clone(),
        home: plan.home.clone(),
        repositories: plan.repositories.clone(),
        protected: Vec::new(),
        writable_roots: writable_roots(plan),
    }
}

#[test]
fn sweep_git_init_is_not_tampering_but_a_risky_config_is() {
    let inside = |v: &str| stays_below(Path::new(".git/modules/lib"), v);
    let inert = |text: &str| inert_git_config(text, &inside);
    assert!(inert(
        "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n"
    ));
    // What clone and submodule write.
    assert!(inert(
        "[core]\n\tbare = false\n\tworktree = ../../../lib\n[remote \"origin\"]\n\turl = /src/lib\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n[branch \"main\"]\n\tremote = origin\n\tmerge = refs/heads/main\n[submodule \"x\"]\n\turl = ../x\n\tactive = true\n"
    ));
    for risky in [
        "[core]\n\tfsmonitor = ./x\n",
        "[alias]\n\tst = !sh -c evil\n",
        "[includeIf \"gitdir:/\"]\n\tpath = /tmp/x\n",
        "[include]\n\tpath = x\n",
        "[remote \"origin\"]\n\tuploadpack = sh -c evil\n",
        "[submodule \"x\"]\n\tupdate = !sh -c evil\n",
        "[filter \"x\"]\n\tclean = evil\n",
        "[core] fsmonitor = ./x\n",
        "[core]\n\tworktree = /etc\n",
        "[core]\n\tworktree = ../../../../..\n",
        "[core]\n\tsshCommand = evil\n",
        "[credential]\n\thelper = !evil\n",
    ] {
        assert!(!inert(risky), "{risky}");
    }
    assert!(inert_gitmodules(
        "[submodule \"lib\"]\n\tpath = lib\n\turl = https://example.com/lib.git\n\tbranch = main\n"
    ));
    for risky in [
        "[submodule \"lib\"]\n\turl = ext::sh -c evil\n",
        "[submodule \"lib\"]\n\turl = --upload-pack=evil\n",
        "[submodule \"lib\"]\n\tupdate = !evil\n",
        "[core]\n\tfsmonitor = evil\n",
        "[submodule \"lib\"]\n\tpath\n",
    ] {
        assert!(!inert_gitmodules(risky), "{risky}");
    }
    assert!(stays_below(Path::new("a/.git"), "../.."));
    assert!(!stays_below(Path::new("a/.git"), "../../.."));
    assert!(!stays_below(Path::new(".git"), "/tmp"));
    let dir = tempfile::tempdir().unwrap();
    let hooks = dir.path().join(".git/hooks");
    fs::create_dir_all(&hooks).unwrap();
    fs::write(hooks.join("pre-commit.sample"), "#!/bin/sh").unwrap();
    let root = beneath::open_root(dir.path(), DIR_LOOKUP).unwrap();
    assert_eq!(
        state_of(root.as_fd(), Path::new(".git/hooks")),
        State::Absent
    );
    fs::write(hooks.join("pre-commit"), "#!/bin/sh").unwrap();
    assert!(matches!(
        state_of(root.as_fd(), Path::new(".git/hooks")),
        State::Entries(_)
    ));
}

/// A workspace `ws` and a home around it, and the plan for them.
pub(super) struct Fixture {
    dir: tempfile::TempDir,
    pub(super) ws: PathBuf,
    pub(super) profile: Profile,
}

impl Fixture {
    pub(super) fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap().join("ws");
        fs::create_dir_all(ws.join(".git/hooks")).unwrap();
        Fixture {
            dir,
            ws,
            profile: Profile::builtin_default().unwrap(),
        }
    }

    pub(super) fn base(&self) -> PathBuf {
        self.dir.path().canonicalize().unwrap()
    }

    pub(super) fn plan(&self) -> SandboxPlan {
        let home = self.base();
        let facts = crate::sandbox::plan::HostFacts {
            uid: 1234,
            gid: 1234,
            groups: vec![],
            home: home.clone(),
            workspace: self.ws.clone(),
            cwd: self.ws.clone(),
            env: vec![],
            idmapped_mounts: false,
            passwd: String::new(),
            group: String::new(),
            run_dir: home.join("run"),
            hook_binary: Some(PathBuf::from("/usr/bin/true")),
            claude_managed_dir: PathBuf::from("/nonexistent/claude-code"),
            runbook: None,
            selftest_probe: None,
            fresh: crate::sandbox::plan::run_kind::Fresh::default(),
            single_turn: false,
            shell_tool: true,
            session_seeding: crate::sandbox::plan::agent_layer::SessionSeeding::Every,
        };
        let mut plan = crate::sandbox::plan::build_plan(&self.profile, &facts).unwrap();
        // These tests change the workspace from outside, as the run would: nothing is
        // read-only to them (what is, and host edits, are tested end to end).
        plan.mounts
            .retain(|m| !matches!(m, crate::sandbox::plan::MountOp::ReadOnlyInPlace { .. }));
        plan
    }

    pub(super) fn quarantine(&self) -> PathBuf {
        self.base().join("quarantine")
    }

    /// Snapshot, `during` (the run), sweep.
    pub(super) fn run(&self, during: impl FnOnce()) -> Vec<Finding> {
        let plan = self.plan();
        let snapshot = Snapshot::take(&plan);
        during();
        let plan = self.plan();
        snapshot
            .sweep(&self.profile, &plan, &self.quarantine())
            .findings
    }

    pub(super) fn changes(&self, findings: &[Finding]) -> Vec<(PathBuf, &'static str)> {
        findings
            .iter()
            .map(|f| {
                let path = f.path.strip_prefix(&self.ws).unwrap_or(&f.path);
                (path.to_path_buf(), f.change)
            })
            .collect()
    }
}

// The snapshot and its scope, written to JSON and read back (as a repair after a kill reads
// them from the run directory's marker), sweep as the originals do: a config that gained a
// key that runs code is put back, a new hook quarantined, a name that is not UTF-8 judged
// by its bytes; and a config the run removed (or an end killed between moving it and putting
// the launch version back) is put back too.
#[test]
fn sweep_with_a_snapshot_read_back_from_json_is_the_same_sweep() {
    use std::os::unix::ffi::OsStrExt;
    let fx = Fixture::new();
    let config = "[core]\n\tbare = false\n";
    fs::write(fx.ws.join(".git/config"), config).unwrap();
    // A hook whose name is not UTF-8, there at launch and left alone.
    let odd = fx
        .ws
        .join(".git/hooks")
        .join(std::ffi::OsStr::from_bytes(b"pre\xff"));
    fs::write(&odd, "#!/bin/sh\n").unwrap();
    let sub = fx.ws.join("sub");
    fs::create_dir_all(sub.join(".git/hooks")).unwrap();
    fs::write(sub.join(".git/config"), config).unwrap();
    let plan = fx.plan();
    let snapshot = Snapshot::take(&plan);
    let scope = SweepScope::of(&fx.profile, &plan);
    let text = serde_json::to_string(&(&scope, &snapshot)).unwrap();
    assert!(
        text.contains(&format!(r#"{{"hex":"{}"}}"#, hex::encode(b"pre\xff"))),
        "{text}"
    );
    let (scope_back, snapshot_back): (SweepScope, Snapshot) = serde_json::from_str(&text).unwrap();
    assert_eq!(scope_back, scope);
    assert_eq!(snapshot_back.paths, snapshot.paths);
    assert_eq!(snapshot_back.git, snapshot.git);
    assert_eq!(snapshot_back.bound, snapshot.bound);
    assert_eq!(snapshot_back.launched, snapshot.launched);
    assert_eq!(snapshot_back.configs.len(), 2);
    let poisoned = "[core]\n\tbare = false\n\tfsmonitor = \"touch /tmp/pwned; false #\"\n";
    fs::write(fx.ws.join(".git/config"), poisoned).unwrap();
    fs::write(sub.join(".git/hooks/pre-commit"), "#!/bin/sh\n").unwrap();
    fs::remove_file(sub.join(".git/config")).unwrap();
    let sweep = snapshot_back.sweep_in(&scope_back, &fx.quarantine());
    let mut changes = fx.changes(&sweep.findings);
    changes.sort();
    assert_eq!(
        changes,
        vec![
            (PathBuf::from(".git/config"), "changed"),
            (PathBuf::from("sub/.git/config"), "removed"),
            (PathBuf::from("sub/.git/hooks"), "created"),
        ],
        "{:#?}",
        sweep.findings
    );
    assert!(
        sweep.findings.iter().all(|f| f.error.is_none()),
        "{:#?}",
        sweep.findings
    );
    assert_eq!(
        fs::read_to_string(fx.ws.join(".git/config")).unwrap(),
        config
    );
    assert_eq!(fs::read_to_string(sub.join(".git/config")).unwrap(), config);
    assert!(odd.is_file());
    let mut restored = sweep.restored.clone();
    restored.sort();
    assert_eq!(
        restored,
        vec![fx.ws.join(".git/config"), sub.join(".git/config")]
    );
    // Swept again (a repair after an end killed once it had swept): nothing left to do.
    let again = snapshot_back.sweep_in(&scope_back, &fx.base().join("q2"));
    assert!(again.findings.is_empty(), "{:#?}", again.findings);
}

/// Every file below `dir` with its content and mode (links by target), for "unchanged".
fn fingerprint(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).unwrap().flatten() {
            let meta = fs::symlink_metadata(entry.path()).unwrap();
            let value = if meta.is_dir() {
                stack.push(entry.path());
                "dir".to_string()
            } else if meta.file_type().is_symlink() {
                format!("{:?}", fs::read_link(entry.path()).unwrap())
            } else {
                format!("{:?}", fs::read(entry.path()).unwrap())
            };
            out.insert(
                entry.path(),
                format!("{value}:{:o}", meta.permissions().mode()),
            );
        }
    }
    out
}

fn victim(base: &Path) -> PathBuf {
    let victim = base.join("victim");
    fs::create_dir_all(victim.join("hooks")).unwrap();
    fs::create_dir_all(victim.join("workflows")).unwrap();
    fs::write(victim.join("config"), "[core]\n\tbare = false\n").unwrap();
    fs::write(victim.join("hooks/pre-commit"), "#!/bin/sh\n").unwrap();
    fs::write(victim.join("workflows/ci.yml"), "on: push\n").unwrap();
    fs::write(victim.join("ssh-config"), "Host *\n").unwrap();
    victim
}

#[test]
fn sweep_created_and_changed_paths_are_quarantined() {
    let fx = Fixture::new();
    let ws = fx.ws.clone();
    fs::write(ws.join(".git/hooks/pre-commit"), "a").unwrap();
    let findings = fx.run(|| {
        fs::write(ws.join(".git/hooks/pre-commit"), "b").unwrap();
        fs::create_dir_all(ws.join(".claude")).unwrap();
        fs::write(
            ws.join(".claude/settings.json"),
            "{\"disableAllHooks\":true}",
        )
        .unwrap();
        fs::create_dir_all(ws.join("a/b/c/d/e/f/g/nested/.git/hooks")).unwrap();
        fs::write(
            ws.join("a/b/c/d/e/f/g/nested/.git/hooks/post-checkout"),
            "evil",
        )
        .unwrap();
    });
    let changes = fx.changes(&findings);
    assert!(
        changes.contains(&(PathBuf::from(".git/hooks"), "changed")),
        "{changes:?}"
    );
    assert!(
        changes.contains(&(PathBuf::from(".claude/settings.json"), "created")),
        "{changes:?}"
    );
    // Deeper than the launch's bounded scan: the sweep's walk finds it.
    assert!(
        changes.contains(&(PathBuf::from("a/b/c/d/e/f/g/nested/.git/hooks"), "created")),
        "{changes:?}"
    );
    assert!(!ws.join(".claude/settings.json").exists());
    assert_eq!(
        fs::read_to_string(fx.quarantine().join(".claude/settings.json")).unwrap(),
        "{\"disableAllHooks\":true}"
    );
}

#[test]
fn sweep_judges_what_redirects_git() {
    let fx = Fixture::new();
    let ws = fx.ws.clone();
    let git = |dir: &Path, args: &[&str]| {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "-c",
                "protocol.file.allow=always",
            ])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    git(&ws, &["init", "-q"]);
    git(&ws, &["commit", "-q", "--allow-empty", "-m", "init"]);
    let lib = fx.base().join("lib");
    git(&fx.base(), &["init", "-q", lib.to_str().unwrap()]);
    git(&lib, &["commit", "-q", "--allow-empty", "-m", "lib"]);
    let findings = fx.run(|| {
        // Ordinary work: a linked worktree, a submodule, a clone, a nested `git init`.
        git(&ws, &["worktree", "add", "-q", "wt"]);
        git(
            &ws,
            &["submodule", "add", "-q", lib.to_str().unwrap(), "lib"],
        );
        git(&ws, &["clone", "-q", lib.to_str().unwrap(), "cloned"]);
        git(&ws, &["init", "-q", "fresh"]);
        // Redirects: a commondir in the main repository, gitfiles to elsewhere, a
        // worktree whose commondir points at a planted directory.
        fs::write(ws.join(".git/commondir"), "../evil\n").unwrap();
        fs::create_dir_all(ws.join("evil/hooks")).unwrap();
        fs::create_dir_all(ws.join("redirected")).unwrap();
        fs::write(ws.join("redirected/.git"), "gitdir: ../evil\n").unwrap();
        fs::create_dir_all(ws.join("sneaky")).unwrap();
        fs::write(
            ws.join("sneaky/.git"),
            format!("gitdir: {}\n", ws.join(".git/worktrees/bad").display()),
        )
        .unwrap();
        fs::create_dir_all(ws.join(".git/worktrees/bad")).unwrap();
        fs::write(ws.join(".git/worktrees/bad/commondir"), "../../../evil\n").unwrap();
    });
    let changes = fx.changes(&findings);
    for expected in [
        (".git/commondir", "created"),
        ("redirected/.git", "redirect"),
        ("sneaky/.git", "redirect"),
        (".git/worktrees/bad/commondir", "created"),
    ] {
        assert!(
            changes.contains(&(PathBuf::from(expected.0), expected.1)),
            "{expected:?} not in {changes:?}"
        );
    }
    assert_eq!(changes.len(), 4, "ordinary work was reported: {changes:?}");
    assert!(ws.join("wt/.git").is_file() && ws.join("lib/.git").is_file());
}

#[test]
fn sweep_moves_planted_links_never_their_targets() {
    let fx = Fixture::new();
    let ws = fx.ws.clone();
    let victim = victim(&fx.base());
    // A nested repository the launch records, and an old link that stays as it was.
    fs::create_dir_all(ws.join("sub/.git")).unwrap();
    fs::create_dir_all(ws.join(".devcontainer")).unwrap();
    symlink("/nonexistent", ws.join(".devcontainer/old-link")).unwrap();
    let before = fingerprint(&victim);
    let findings = fx.run(|| {
        fs::remove_dir_all(ws.join("sub/.git")).unwrap();
        symlink(&victim, ws.join("sub/.git")).unwrap();
        symlink(&victim, ws.join(".github")).unwrap();
        fs::remove_dir_all(ws.join(".git/hooks")).unwrap();
        symlink(victim.join("hooks"), ws.join(".git/hooks")).unwrap();
        // A repository the launch never saw, whose `.git` is a link.
        fs::create_dir_all(ws.join("late")).unwrap();
        symlink(&victim, ws.join("late/.git")).unwrap();
    });
    let changes = fx.changes(&findings);
    for link in ["sub/.git", ".github", ".git/hooks", "late/.git"] {
        assert!(
            changes.contains(&(PathBuf::from(link), "symlink")),
            "{link}: {changes:?}"
        );
        assert!(fs::symlink_metadata(ws.join(link)).is_err(), "{link} left");
        let moved = fs::symlink_metadata(fx.quarantine().join(link)).unwrap();
        assert!(moved.file_type().is_symlink(), "{link} not moved as a link");
    }
    assert_eq!(findings.len(), 4, "{changes:?}");
    assert!(findings.iter().all(|f| f.error.is_none()), "{findings:?}");
    assert_eq!(fingerprint(&victim), before, "the victim changed");
    assert!(ws.join(".devcontainer/old-link").is_symlink());
}

#[test]
fn sweep_an_unchanged_old_link_is_no_finding_and_never_followed() {
    let fx = Fixture::new();
    let ws = fx.ws.clone();
    let victim = victim(&fx.base());
    symlink(&victim, ws.join(".vscode")).unwrap();
    fs::create_dir_all(ws.join("sub")).unwrap();
    symlink(&victim, ws.join("sub/.git")).unwrap();
    let before = fingerprint(&victim);
    let findings = fx.run(|| {
        // A change behind the link is not the workspace's.
        fs::write(victim.join("hooks/post-checkout"), "x").unwrap();
    });
    assert!(findings.is_empty(), "{findings:?}");
    fs::remove_file(victim.join("hooks/post-checkout")).unwrap();
    assert_eq!(fingerprint(&victim), before);
}

#[test]
fn sweep_hooks_path_outside_the_workspace_is_never_moved() {
    let fx = Fixture::new();
    let ws = fx.ws.clone();
    let victim = victim(&fx.base());
    fs::write(
        ws.join(".git/config"),
        format!("[core]\n\thooksPath = {}\n", victim.join("hooks").display()),
    )
    .unwrap();
    let before = fingerprint(&victim);
    let findings = fx.run(|| {});
    assert!(findings.is_empty(), "{findings:?}");
    assert_eq!(fingerprint(&victim), before);
    assert!(
        fx.plan()
            .notes
            .iter()
            .any(|n| n.contains("outside the workspace"))
    );
}

#[test]
fn the_walk_shared_between_threads_sees_every_entry_once() {
    // Wide enough that helpers join the walk (41 directories wait after the first
    // listing): 40 directories of 6 levels, a setuid file at the bottom of each, a nested
    // repository in every fifth. Every one is found, in the order of the paths.
    let fx = Fixture::new();
    let ws = fx.ws.clone();
    let mut setuid = Vec::new();
    let mut repos = Vec::new();
    for top in 0..40 {
        let deep = ws.join(format!("d{top}/a/b/c/d/e"));
        fs::create_dir_all(&deep).unwrap();
        let file = deep.join("tool");
        fs::write(&file, "x").unwrap();
        fs::set_permissions(&file, fs::Permissions::from_mode(0o4755)).unwrap();
        setuid.push(file);
        if top % 5 == 0 {
            let repo = ws.join(format!("d{top}/a"));
            fs::create_dir(repo.join(".git")).unwrap();
            repos.push(repo);
        }
    }
    repos.sort();
    setuid.sort();
    let walk = walk_writable(&scope_of(&fx.plan()), Duration::ZERO);
    let found: Vec<_> = walk
        .findings
        .iter()
        .filter(|f| f.change == "setuid")
        .map(|f| f.path.clone())
        .collect();
    assert_eq!(found, setuid, "{:?}", walk.findings);
    assert!(
        walk.findings.iter().all(|f| f.change == "setuid"),
        "{:?}",
        walk.findings
    );
    assert_eq!(walk.repos, repos);
    for file in &setuid {
        let mode = fs::metadata(file).unwrap().permissions().mode();
        assert_eq!(mode & 0o7777, 0o755, "{}", file.display());
    }
    // Every entry once: per top directory itself, a, b, c, d, e and tool (and .git in
    // every fifth), the fixture's .git/hooks, and the plan's other writable roots.
    let expected = 40 * 7 + 8 + 2;
    let again = walk_writable(&scope_of(&fx.plan()), Duration::ZERO);
    assert!(again.findings.is_empty(), "{:?}", again.findings);
    assert!(walk.entries >= expected, "{} < {expected}", walk.entries);
    assert_eq!(walk.entries, again.entries);
}

#[test]
fn sweep_checks_a_writable_root_that_is_a_file() {
    // Without namespaces Landlock grants a directory entry by entry around a hidden path,
    // so a writable root can be a file: it is checked from its parent, not reported as a
    // directory that could not be walked.
    use crate::sandbox::plan::landlock::{FsAccess, LandlockRule};
    let fx = Fixture::new();
    let extra = fx.base().join("extra");
    fs::create_dir_all(extra.join("sub")).unwrap();
    fs::write(extra.join("file"), "x").unwrap();
    fs::set_permissions(extra.join("file"), fs::Permissions::from_mode(0o4755)).unwrap();
    let mut plan = fx.plan();
    plan.isolation = crate::sandbox::plan::Isolation::LandlockSeccompOnly;
    for path in [extra.join("file"), extra.join("sub")] {
        plan.landlock.rules.push(LandlockRule {
            path,
            access: FsAccess::ReadWrite,
        });
    }
    let walk = walk_writable(&scope_of(&plan), Duration::ZERO);
    let changes: Vec<_> = walk
        .findings
        .iter()
        .map(|f| (f.path.clone(), f.change))
        .collect();
    assert_eq!(
        changes,
        [(extra.join("file"), "setuid")],
        "{:?}",
        walk.findings
    );
    let mode = fs::metadata(extra.join("file"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o755);
}

#[test]
fn sweep_a_fifo_or_a_huge_file_at_a_protected_name_does_not_stall() {
    let fx = Fixture::new();
    let ws = fx.ws.clone();
    let plan = fx.plan();
    let snapshot = Snapshot::take(&plan);
    nix::unistd::mkfifo(
        &ws.join(".envrc"),
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    fs::create_dir_all(ws.join(".vscode")).unwrap();
    nix::unistd::mkfifo(
        &ws.join(".vscode/settings.json"),
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    let huge = fs::File::create(ws.join(".vscode/huge")).unwrap();
    huge.set_len(10 << 30).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let (profile, quarantine) = (fx.profile.clone(), fx.quarantine());
    std::thread::spawn(move || tx.send(snapshot.sweep(&profile, &plan, &quarantine).findings));
    let findings = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the sweep blocked");
    let changes = fx.changes(&findings);
    assert!(
        changes.contains(&(PathBuf::from(".envrc"), "created")),
        "{changes:?}"
    );
    assert!(
        changes.contains(&(PathBuf::from(".vscode"), "created")),
        "{changes:?}"
    );
    assert!(!ws.join(".envrc").exists() && !ws.join(".vscode").exists());
}

fn mode(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
}

fn chmod(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn sweep_strips_setuid_and_setgid_the_run_set() {
    let fx = Fixture::new();
    let ws = fx.ws.clone();
    // The user's own, from before the launch (older than the margin): left alone.
    fs::write(ws.join("old-suid"), "#!/bin/sh\n").unwrap();
    chmod(&ws.join("old-suid"), 0o4755);
    fs::create_dir_all(ws.join("shared/inherited")).unwrap();
    chmod(&ws.join("shared"), 0o2775);
    std::thread::sleep(LAUNCH_MARGIN * 2);
    let findings = fx.run(|| {
        fs::write(ws.join("suid"), "#!/bin/sh\n").unwrap();
        chmod(&ws.join("suid"), 0o4755);
        fs::write(ws.join("sgid"), "x").unwrap();
        chmod(&ws.join("sgid"), 0o2644);
        fs::create_dir_all(ws.join("deep/er")).unwrap();
        fs::write(ws.join("deep/er/both"), "x").unwrap();
        chmod(&ws.join("deep/er/both"), 0o6755);
        // Setgid directories made during the run (`mkdir -m 2775`, or inherited): fine.
        fs::create_dir(ws.join("group-dir")).unwrap();
        chmod(&ws.join("group-dir"), 0o2775);
        fs::create_dir(ws.join("shared/new")).unwrap();
        chmod(&ws.join("shared/new"), 0o2775);
        chmod(&ws.join("shared/inherited"), 0o2755);
        // Setuid on a directory means nothing, but it is the run's: stripped.
        fs::create_dir(ws.join("suid-dir")).unwrap();
        chmod(&ws.join("suid-dir"), 0o4755);
        // A link's mode is not a mode.
        symlink(ws.join("suid"), ws.join("link")).unwrap();
    });
    let mut changes = fx.changes(&findings);
    changes.sort();
    assert_eq!(
        changes,
        vec![
            (PathBuf::from("deep/er/both"), "setuid"),
            (PathBuf::from("sgid"), "setgid"),
            (PathBuf::from("suid"), "setuid"),
            (PathBuf::from("suid-dir"), "setuid"),
        ]
    );
    assert!(findings.iter().all(|f| f.error.is_none()), "{findings:?}");
    assert_eq!(mode(&ws.join("suid")), 0o755);
    assert_eq!(mode(&ws.join("sgid")), 0o644);
    assert_eq!(mode(&ws.join("deep/er/both")), 0o755);
    assert_eq!(mode(&ws.join("suid-dir")), 0o755);
    assert_eq!(mode(&ws.join("old-suid")), 0o4755);
    assert_eq!(mode(&ws.join("group-dir")), 0o2775);
    assert_eq!(mode(&ws.join("shared/new")), 0o2775);
    assert_eq!(mode(&ws.join("shared/inherited")), 0o2755);
}

/// The cost of the walk on 200k entries (2000 directories of 100 files):
/// `cargo test -p stepproof --lib sweep_cost -- --ignored --nocapture`
/// (`STEPPROOF_BENCH_DIR` chooses the file system; /tmp by default).
#[test]
#[ignore]
fn sweep_cost_on_200k_entries() {
    let base =
        std::env::var_os("STEPPROOF_BENCH_DIR").map_or_else(std::env::temp_dir, PathBuf::from);
    let dir = tempfile::tempdir_in(base).unwrap();
    let ws = dir.path().canonicalize().unwrap().join("ws");
    fs::create_dir_all(ws.join(".git/hooks")).unwrap();
    for d in 0..2000 {
        let sub = ws.join(format!("d{:02}/e{d:04}", d % 50));
        fs::create_dir_all(&sub).unwrap();
        for f in 0..100 {
            fs::write(sub.join(format!("f{f:03}")), "x").unwrap();
        }
    }
    let profile = Profile::builtin_default().unwrap();
    let facts = crate::sandbox::plan::HostFacts {
        uid: 1234,
        gid: 1234,
        groups: vec![],
        home: ws.parent().unwrap().to_path_buf(),
        workspace: ws.clone(),
        cwd: ws.clone(),
        env: vec![],
        idmapped_mounts: false,
        passwd: String::new(),
        group: String::new(),
        run_dir: ws.parent().unwrap().join("run"),
        hook_binary: Some(PathBuf::from("/usr/bin/true")),
        claude_managed_dir: PathBuf::from("/nonexistent/claude-code"),
        runbook: None,
        selftest_probe: None,
        fresh: crate::sandbox::plan::run_kind::Fresh::default(),
        single_turn: false,
        shell_tool: true,
        session_seeding: crate::sandbox::plan::agent_layer::SessionSeeding::Every,
    };
    let plan = crate::sandbox::plan::build_plan(&profile, &facts).unwrap();
    for round in 0..3 {
        let started = std::time::Instant::now();
        let snapshot = Snapshot::take(&plan);
        let took = started.elapsed();
        let findings = snapshot
            .sweep(&profile, &plan, &ws.parent().unwrap().join("q"))
            .findings;
        let swept = started.elapsed() - took;
        let walk = walk_writable(&scope_of(&plan), Duration::ZERO);
        crate::out!(
            "round {round}: {} entries walked; Snapshot::take {:.1} ms, sweep {:.1} ms, {} findings",
            walk.entries,
            took.as_secs_f64() * 1e3,
            swept.as_secs_f64() * 1e3,
            findings.len()
        );
    }
}
