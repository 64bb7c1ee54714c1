//! Tests of the sandbox plan, compared as plain values.

use super::hidden::other_projects;
use super::*;
use std::fs;

pub(super) fn facts(home: &Path, ws: &Path, uid: u32) -> HostFacts {
    HostFacts {
        uid,
        gid: uid,
        groups: vec![uid, 27],
        home: home.to_path_buf(),
        workspace: ws.to_path_buf(),
        cwd: ws.to_path_buf(),
        env: vec![
            ("PATH".into(), "/usr/bin:/bin".into()),
            ("GITHUB_TOKEN".into(), "ghp_x".into()),
            ("LD_PRELOAD".into(), "/x.so".into()),
        ],
        idmapped_mounts: true,
        passwd: "root:x:0:0:root:/root:/bin/bash\n".into(),
        group: "root:x:0:\n".into(),
        run_dir: home.join(".local/state/stepproof/runs/test"),
        hook_binary: Some(PathBuf::from("/usr/bin/true")),
        claude_managed_dir: PathBuf::from("/nonexistent/claude-code"),
        runbook: None,
        selftest_probe: None,
        fresh: crate::sandbox::plan::run_kind::Fresh::default(),
        single_turn: false,
        shell_tool: true,
        session_seeding: agent_layer::SessionSeeding::Every,
    }
}

/// Claude Code's own Bash sandbox cannot start inside ours: its switch never reaches the
/// command, and the start record's notes say why.
#[test]
fn the_subprocess_scrub_switch_is_dropped_with_a_note() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().canonicalize().unwrap();
    let ws = home.join("src/proj");
    fs::create_dir_all(&ws).unwrap();
    let mut f = facts(&home, &ws, 1234);
    f.env
        .push(("CLAUDE_CODE_SUBPROCESS_ENV_SCRUB".into(), "1".into()));
    // Even listed by name.
    let file = dir.path().join("p.toml");
    fs::write(
        &file,
        "extends = \"default\"\n[process]\nenv = [\"CLAUDE_CODE_SUBPROCESS_ENV_SCRUB\"]\n",
    )
    .unwrap();
    let profile = Profile::load(Some(&file)).unwrap();
    let plan = build_plan(&profile, &f).unwrap();
    assert!(
        !plan
            .env
            .iter()
            .any(|(n, _)| n == "CLAUDE_CODE_SUBPROCESS_ENV_SCRUB"),
        "{:?}",
        plan.env
    );
    assert!(
        plan.notes
            .iter()
            .any(|n| n.starts_with("CLAUDE_CODE_SUBPROCESS_ENV_SCRUB was set: dropped")),
        "{:?}",
        plan.notes
    );
}

/// A link beside the workspace is no project (a mount onto it would land on its target,
/// which the launch then failed to reach); its target is hidden by its own rule.
#[test]
fn links_beside_the_workspace_are_not_projects() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().canonicalize().unwrap();
    let ws = home.join("src/proj/sub");
    fs::create_dir_all(&ws).unwrap();
    fs::create_dir_all(home.join("src/other")).unwrap();
    std::os::unix::fs::symlink(home.join("src/other"), home.join("src/proj/link")).unwrap();
    fs::create_dir_all(home.join("src/proj/sibling")).unwrap();
    let found = other_projects(&ws, &home, &mut Vec::new());
    assert!(found.contains(&home.join("src/proj/sibling")), "{found:?}");
    assert!(found.contains(&home.join("src/other")), "{found:?}");
    assert!(!found.contains(&home.join("src/proj/link")), "{found:?}");
}

/// A directory beside the workspace's ancestors that the profile names (read_only,
/// writable, home_allow) is the profile's, not another project: it stays visible.
#[test]
fn named_paths_are_never_other_projects() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().canonicalize().unwrap();
    let ws = home.join("src/proj");
    for d in [
        "src/proj",
        "src/other",
        "data/sets",
        "miniconda3/bin",
        "notes",
    ] {
        fs::create_dir_all(home.join(d)).unwrap();
    }
    let file = dir.path().join("p.toml");
    fs::write(
        &file,
        "extends = \"default\"\n[filesystem]\nread_only = [\"~/data/sets\"]\n",
    )
    .unwrap();
    let profile = Profile::load(Some(&file)).unwrap();
    let plan = build_plan(&profile, &facts(&home, &ws, 1234)).unwrap();
    let hidden = |p: &Path| {
        plan.mounts.iter().any(
            |m| matches!(m, MountOp::HideDir { dst, reason: HideReason::OtherProject } if dst == p),
        )
    };
    assert!(hidden(&home.join("src/other")));
    assert!(hidden(&home.join("notes")));
    assert!(
        !hidden(&home.join("data")),
        "a directory holding a named path"
    );

    // The ci profile's allow-listed home: its home_allow entries beside the workspace's
    // ancestors are shown, not hidden as projects.
    let ci = dir.path().join("ci.toml");
    fs::write(
        &ci,
        "extends = \"ci\"\n[filesystem]\nhome_allow = [\"~/miniconda3\"]\n",
    )
    .unwrap();
    let profile = Profile::load(Some(&ci)).unwrap();
    let plan = build_plan(&profile, &facts(&home, &ws, 1234)).unwrap();
    assert!(
        !plan.mounts.iter().any(|m| matches!(
            m,
            MountOp::HideDir { dst, .. } if dst == &home.join("miniconda3")
        )),
        "{:#?}",
        plan.mounts
    );
}

#[test]
fn view_of_a_workspace_under_home() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().canonicalize().unwrap();
    let ws = home.join("src/proj");
    fs::create_dir_all(ws.join(".git/hooks")).unwrap();
    fs::create_dir_all(ws.join("sub/.git/hooks")).unwrap();
    fs::create_dir_all(home.join("src/other")).unwrap();
    fs::create_dir_all(home.join("notes")).unwrap();
    fs::create_dir_all(home.join(".ssh")).unwrap();
    fs::write(home.join(".netrc"), "machine x").unwrap();
    fs::create_dir_all(home.join(".run")).unwrap();
    let _sock = std::os::unix::net::UnixListener::bind(home.join(".run/agent.sock")).unwrap();
    // Deeper than the scan goes: found through /proc/net/unix.
    fs::create_dir_all(home.join(".a/b/c/d")).unwrap();
    let _deep = std::os::unix::net::UnixListener::bind(home.join(".a/b/c/d/deep.sock")).unwrap();

    let profile = Profile::builtin_default().unwrap();
    let plan = build_plan(&profile, &facts(&home, &ws, 1234)).unwrap();

    let has = |op: &MountOp| plan.mounts.contains(op);
    assert!(has(&MountOp::Bind {
        src: home.clone(),
        dst: home.clone(),
        access: Access::ReadOnly
    }));
    assert!(has(&MountOp::Bind {
        src: ws.clone(),
        dst: ws.clone(),
        access: Access::ReadWrite
    }));
    assert!(has(&MountOp::HideDir {
        dst: home.join(".ssh"),
        reason: HideReason::Secret
    }));
    assert!(has(&MountOp::HideFile {
        dst: home.join(".netrc"),
        reason: HideReason::Secret
    }));
    assert!(has(&MountOp::HideDir {
        dst: home.join("src/other"),
        reason: HideReason::OtherProject
    }));
    assert!(has(&MountOp::HideDir {
        dst: home.join("notes"),
        reason: HideReason::OtherProject
    }));
    assert!(has(&MountOp::HideFile {
        dst: home.join(".run/agent.sock"),
        reason: HideReason::UnixSocket
    }));
    assert!(has(&MountOp::HideFile {
        dst: home.join(".a/b/c/d/deep.sock"),
        reason: HideReason::UnixSocket
    }));
    for path in [ws.join(".git/hooks"), ws.join("sub/.git/hooks")] {
        assert!(
            has(&MountOp::ReadOnlyInPlace { path: path.clone() }),
            "{path:?}"
        );
    }
    assert!(plan.protected_paths.contains(&ws.join(".vscode")));
    assert_eq!(plan.mounts.last(), Some(&MountOp::ReadOnlyRoot));
    // The home is bound before the workspace, which comes before what is hidden in it.
    let pos = |op: &MountOp| plan.mounts.iter().position(|m| m == op).unwrap();
    assert!(
        pos(&MountOp::Bind {
            src: home.clone(),
            dst: home.clone(),
            access: Access::ReadOnly
        }) < pos(&MountOp::Bind {
            src: ws.clone(),
            dst: ws.clone(),
            access: Access::ReadWrite
        })
    );
    assert_eq!(plan.identity.mode, IdentityMode::Caller);
    assert_eq!(plan.identity.kept_groups, vec![27]);
    assert!(
        plan.env
            .iter()
            .all(|(k, _)| k != "GITHUB_TOKEN" && !k.starts_with("LD_"))
    );
    assert!(plan.env_dropped.contains(&"GITHUB_TOKEN".to_string()));
}

#[test]
fn the_agents_managed_settings_do_not_depend_on_the_view_of_etc() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().canonicalize().unwrap();
    let ws = home.join("w");
    fs::create_dir_all(&ws).unwrap();
    let mut profile = Profile::builtin_default().unwrap();
    for keep_etc in [true, false] {
        if !keep_etc {
            profile
                .filesystem
                .system
                .retain(|s| s.resolve(&home, &ws) != Path::new("/etc"));
        }
        let plan = build_plan(&profile, &facts(&home, &ws, 1000)).unwrap();
        let generated: Vec<_> = plan
            .mounts
            .iter()
            .filter_map(|m| match m {
                MountOp::Generated { dst, files } => Some((dst, files)),
                _ => None,
            })
            .collect();
        assert_eq!(generated.len(), 1, "keep /etc: {keep_etc}");
        let (dst, files) = generated[0];
        assert_eq!(dst, Path::new("/etc/claude-code"));
        assert_eq!(files[0].0, Path::new("managed-settings.json"));
        let settings: serde_json::Value = serde_json::from_str(&files[0].1).unwrap();
        assert!(
            crate::sandbox::plan::agent_layer::managed_settings_problems(&settings, false)
                .is_empty()
        );
    }
}

/// What Claude Code's Bash tool sources before every command is not the agent's to write:
/// the snapshot and session-env directories of its config directory are read-only (bound
/// after it), and a private home has read-only stand-ins for the login shell's startup files
/// (with no snapshot, every command runs in a login shell). The host's home is read-only
/// anyway; without an agent there is nothing to stand in for.
#[test]
fn what_claude_code_sources_before_a_command_is_read_only() {
    use crate::sandbox::plan::agent_layer::{
        CONFIG_DIR, LOGIN_FILES, READ_ONLY_CACHES, SOURCED_DIRS,
    };
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().canonicalize().unwrap();
    let ws = home.join("w");
    fs::create_dir_all(&ws).unwrap();
    let ci = Profile::load(Some(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("profiles/ci.toml"),
    ))
    .unwrap();
    let position = |plan: &SandboxPlan, op: &MountOp| {
        plan.mounts
            .iter()
            .position(|m| m == op)
            .unwrap_or_else(|| panic!("no {op}"))
    };
    for uid in [1234, 0] {
        let plan = build_plan(&ci, &facts(&home, &ws, uid)).unwrap();
        let config = plan
            .mounts
            .iter()
            .position(|m| matches!(m, MountOp::FromSupervisor { dst, .. } if dst == Path::new(CONFIG_DIR)))
            .unwrap();
        // And the caches of server-managed settings and policy limits.
        for name in SOURCED_DIRS.iter().chain(READ_ONLY_CACHES) {
            let op = MountOp::ReadOnlyInPlace {
                path: Path::new(CONFIG_DIR).join(name),
            };
            assert!(position(&plan, &op) > config, "{name}");
        }
        let private = position(
            &plan,
            &MountOp::Tmpfs {
                dst: home.clone(),
                mode: 0o700,
                size_mib: Some(ci.filesystem.tmp_size_mib),
            },
        );
        for name in LOGIN_FILES {
            let at = plan
                .mounts
                .iter()
                .position(|m| matches!(m, MountOp::File { dst, .. } if *dst == home.join(name)))
                .unwrap_or_else(|| panic!("no stand-in for {name}"));
            assert!(at > private, "{name}");
        }
    }
    let login_stand_ins = |plan: &SandboxPlan| {
        plan.mounts
            .iter()
            .any(|m| matches!(m, MountOp::File { dst, .. } if dst.starts_with(&home)))
    };
    let default = Profile::builtin_default().unwrap();
    assert!(!login_stand_ins(
        &build_plan(&default, &facts(&home, &ws, 1234)).unwrap()
    ));
    let mut no_hook = ci.clone();
    no_hook.hook = None;
    let plan = build_plan(&no_hook, &facts(&home, &ws, 1234)).unwrap();
    assert!(!login_stand_ins(&plan));
    assert!(
        !plan.mounts.iter().any(
            |m| matches!(m, MountOp::ReadOnlyInPlace { path } if path.starts_with(CONFIG_DIR))
        )
    );
}

/// `strict`: the workspace is the lower layer of an overlay on a private tmpfs (as root,
/// through the idmapped bind), with the same Landlock right as a writable one; the policy
/// hash covers the setting, and a profile that leaves it out keeps its hash.
#[test]
fn strict_sees_the_workspace_through_a_scratch_overlay() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().canonicalize().unwrap();
    let ws = home.join("w");
    fs::create_dir_all(&ws).unwrap();
    let strict = Profile::load(Some(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("profiles/strict.toml"),
    ))
    .unwrap();
    assert_eq!(strict.filesystem.workspace, WorkspaceMode::Overlay);
    for (uid, lower) in [
        (
            1000,
            MountOp::Bind {
                src: ws.clone(),
                dst: ws.clone(),
                access: Access::ReadOnly,
            },
        ),
        (
            0,
            MountOp::IdmappedBind {
                src: ws.clone(),
                dst: ws.clone(),
                access: Access::ReadOnly,
            },
        ),
    ] {
        let plan = build_plan(&strict, &facts(&home, &ws, uid)).unwrap();
        assert_eq!(plan.workspace_mode, WorkspaceMode::Overlay);
        let at = plan
            .mounts
            .iter()
            .position(|m| *m == lower)
            .expect("the lower bind");
        assert_eq!(
            plan.mounts[at + 1],
            MountOp::ScratchOverlay {
                dst: ws.clone(),
                size_mib: strict.filesystem.tmp_size_mib
            }
        );
        assert!(!plan.mounts.iter().any(|m| matches!(m,
            MountOp::Bind { dst, access: Access::ReadWrite, .. }
            | MountOp::IdmappedBind { dst, access: Access::ReadWrite, .. } if *dst == ws)));
        assert!(
            plan.landlock
                .rules
                .iter()
                .any(|r| r.path == ws && r.access == FsAccess::ReadWrite)
        );
    }

    let mut read_only = strict.clone();
    read_only.filesystem.workspace = WorkspaceMode::ReadOnly;
    let plan = build_plan(&read_only, &facts(&home, &ws, 1000)).unwrap();
    assert!(
        !plan
            .mounts
            .iter()
            .any(|m| matches!(m, MountOp::ScratchOverlay { .. }))
    );
    assert!(
        !plan
            .landlock
            .rules
            .iter()
            .any(|r| r.path == ws && r.access == FsAccess::ReadWrite)
    );
    assert_ne!(read_only.policy_hash(), strict.policy_hash());

    let default = Profile::builtin_default().unwrap();
    let mut explicit = default.clone();
    explicit.filesystem.workspace = WorkspaceMode::Writable;
    assert_eq!(explicit.policy_hash(), default.policy_hash());
    assert!(
        !serde_json::to_string(&default)
            .unwrap()
            .contains("\"workspace\"")
    );
}

#[test]
fn root_invocation_is_remapped_and_gets_an_account() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().canonicalize().unwrap();
    let ws = home.join("w");
    fs::create_dir_all(&ws).unwrap();
    let profile = Profile::builtin_default().unwrap();
    let plan = build_plan(&profile, &facts(&home, &ws, 0)).unwrap();
    assert_eq!(plan.identity.mode, IdentityMode::RootRemapped);
    assert_ne!(plan.identity.inside_uid, 0);
    assert!(plan.mounts.iter().any(
        |m| matches!(m, MountOp::IdmappedBind { dst, access: Access::ReadWrite, .. } if *dst == ws)
    ));
    assert!(plan.mounts.iter().any(|m| matches!(m, MountOp::Overlay { dst, files, .. } if dst == Path::new("/etc") && files.iter().any(|(p, c)| p == Path::new("passwd") && c.contains("stepproof:x:1000:1000")))));

    let mut no_idmap = facts(&home, &ws, 0);
    no_idmap.idmapped_mounts = false;
    assert!(matches!(
        build_plan(&profile, &no_idmap),
        Err(PlanError::RootWithoutIdmappedMounts)
    ));
}

#[test]
fn workspace_equal_to_home_protects_shell_rc_files() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().canonicalize().unwrap();
    fs::write(home.join(".bashrc"), "# rc").unwrap();
    let profile = Profile::builtin_default().unwrap();
    let plan = build_plan(&profile, &facts(&home, &home, 1234)).unwrap();
    let path = home.join(".bashrc");
    assert!(plan.mounts.contains(&MountOp::ReadOnlyInPlace { path }));
}

pub(super) fn degraded_profile() -> Profile {
    let mut profile = Profile::builtin_default().unwrap();
    profile.degraded.allow = true;
    profile.hook = None;
    profile
}

#[test]
fn the_degraded_plan_describes_its_scratch_directory_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().canonicalize().unwrap();
    let ws = home.join("w");
    fs::create_dir_all(&ws).unwrap();
    let mut host = facts(&home, &ws, 1234);
    host.env.push(("TMPDIR".into(), "/somewhere".into()));
    let plan = build_degraded_plan(&degraded_profile(), &host).unwrap();
    let scratch = plan.scratch_dir.clone().unwrap();
    assert!(!scratch.exists(), "planning created {}", scratch.display());
    assert!(
        scratch
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("stepproof-scratch-test-")
    );
    assert_eq!(
        plan.landlock.rules.last(),
        Some(&LandlockRule {
            path: scratch.clone(),
            access: FsAccess::ReadWrite
        })
    );
    let tmpdir = plan.env.iter().find(|(k, _)| k == "TMPDIR").unwrap();
    assert_eq!(Path::new(&tmpdir.1), scratch);
    assert_eq!(plan.isolation, Isolation::LandlockSeccompOnly);
    assert!(plan.mounts.is_empty() && plan.hostname.is_empty());
    assert_eq!(plan.seccomp, SeccompRules::Standard);
    // Two plans, two names: the launch refuses one that exists.
    let again = build_degraded_plan(&degraded_profile(), &host).unwrap();
    assert_ne!(again.scratch_dir, plan.scratch_dir);
}

#[test]
fn both_isolations_plan_the_same_sandbox() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().canonicalize().unwrap();
    let ws = home.join("src/proj");
    fs::create_dir_all(ws.join(".git/hooks")).unwrap();
    fs::create_dir_all(home.join("src/other")).unwrap();
    fs::create_dir_all(home.join(".ssh")).unwrap();
    fs::write(home.join(".netrc"), "machine x").unwrap();
    let host = facts(&home, &ws, 1234);
    let profile = degraded_profile();
    let full = build_plan(&profile, &host).unwrap();
    let degraded = build_degraded_plan(&profile, &host).unwrap();
    assert_eq!(full.identity, degraded.identity);
    assert_eq!(full.protected_paths, degraded.protected_paths);
    // The sweep judges the same repositories' `.git` after either.
    assert_eq!(full.repositories, vec![ws.clone()]);
    assert_eq!(full.repositories, degraded.repositories);
    assert_eq!(full.cwd, degraded.cwd);
    assert_eq!(full.env_dropped, degraded.env_dropped);
    assert_eq!(full.seccomp, degraded.seccomp);
    // What the mounts hide, no Landlock rule of the degraded plan reaches.
    let hidden: Vec<&PathBuf> = full
        .mounts
        .iter()
        .filter_map(|m| match m {
            MountOp::HideDir { dst, .. } | MountOp::HideFile { dst, .. } => Some(dst),
            _ => None,
        })
        .collect();
    for path in [
        home.join(".ssh"),
        home.join(".netrc"),
        home.join("src/other"),
    ] {
        assert!(hidden.contains(&&path), "{path:?}");
    }
    for path in hidden {
        let reached: Vec<_> = degraded
            .landlock
            .rules
            .iter()
            .filter(|r| path.starts_with(&r.path))
            .collect();
        assert!(reached.is_empty(), "{path:?} reached by {reached:?}");
    }
    assert!(degraded.landlock.rules.iter().any(|r| r.path == ws));
}

#[test]
fn plan_errors_keep_their_messages_and_say_what_kind_they_are() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().canonicalize().unwrap();
    let profile = Profile::builtin_default().unwrap();

    let err = build_plan(&profile, &facts(&home, Path::new("/"), 1234)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "--workspace /: the workspace cannot be `/`; choose a project directory"
    );
    assert!(err.is_configuration());

    let ws = home.join("w");
    fs::create_dir_all(&ws).unwrap();
    let mut writable_proc = profile.clone();
    writable_proc.filesystem.writable = vec![crate::profile::PathSpec::parse("/proc/sys").unwrap()];
    let err = build_plan(&writable_proc, &facts(&home, &ws, 1234)).unwrap_err();
    assert!(
        matches!(&err, PlanError::LandlockRule { path, .. } if path == Path::new("/proc/sys")),
        "{err}"
    );
    assert!(err.to_string().starts_with("Landlock rule for /proc/sys: "));
    assert!(err.is_configuration());

    let mut missing = profile.clone();
    missing.filesystem.read_only = vec![crate::profile::PathSpec::parse("~/absent").unwrap()];
    let err = build_plan(&missing, &facts(&home, &ws, 1234)).unwrap_err();
    // A path the profile names that is not there is the profile's to fix.
    assert!(
        matches!(&err, PlanError::NoSuchPath { path, spelled, .. }
            if *path == home.join("absent") && spelled == "~/absent"),
        "{err}"
    );
    assert!(err.is_configuration());

    let mut no_idmap = facts(&home, &ws, 0);
    no_idmap.idmapped_mounts = false;
    let err = build_plan(&profile, &no_idmap).unwrap_err();
    assert!(!err.is_configuration());

    let err = build_degraded_plan(&profile, &facts(&home, &ws, 1234)).unwrap_err();
    assert!(matches!(err, PlanError::NoUserNamespaces));
    assert!(!err.is_configuration());
}

/// StepProof's state is hidden whole, whether or not it exists yet and whatever the profile
/// lists inside it (one stand-in; nothing mounted into it).
#[test]
fn stepproof_state_is_hidden_whole() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().canonicalize().unwrap();
    let ws = home.join("src/proj");
    fs::create_dir_all(&ws).unwrap();
    let state = home.join(".local/state/stepproof");
    fs::create_dir_all(state.join("runs")).unwrap();
    let file = dir.path().join("p.toml");
    fs::write(
        &file,
        "extends = \"default\"\n[filesystem]\nhidden = [\"~/.local/state/stepproof/runs\"]\n",
    )
    .unwrap();
    let profile = Profile::load(Some(&file)).unwrap();
    let plan = build_plan(&profile, &facts(&home, &ws, 1234)).unwrap();
    let hidden: Vec<&PathBuf> = plan
        .mounts
        .iter()
        .filter_map(|m| match m {
            MountOp::HideDir { dst, .. } | MountOp::HideFile { dst, .. }
                if dst.starts_with(&state) =>
            {
                Some(dst)
            }
            _ => None,
        })
        .collect();
    assert_eq!(hidden, [&state]);
    // Not there yet: hidden all the same, as a directory (the run makes it before it plans).
    fs::remove_dir_all(&state).unwrap();
    let plan = build_plan(&profile, &facts(&home, &ws, 1234)).unwrap();
    assert!(plan.mounts.iter().any(|m| matches!(m,
        MountOp::HideDir { dst, reason: HideReason::StepProofState } if *dst == state)));
}
