//! The way back out through git: whatever a run plants to redirect git (a `commondir`, a gitfile
//! in place of `.git`, a repository made with `--separate-git-dir`, one nested deeper than the
//! launch's scan or behind more entries than it reads, worktree metadata), the host's next
//! `git status`, `add`, `commit` and `checkout` — in the workspace and in every nested
//! repository — runs nothing the run wrote. Judged from outside, after the run, by a payload
//! that writes a marker. And ordinary git work inside is neither hindered nor reported. Root and
//! the unprivileged test user.

mod support;

use std::fs;
use std::path::PathBuf;
use support::*;

const GIT: &str =
    "git -c user.name=t -c user.email=t@t -c protocol.file.allow=always -c safe.directory=*";

/// A real repository as the workspace (with one commit and a submodule `lib`) and a real
/// nested one `sub`, owned by the world's owner.
fn real_repositories(w: &World) {
    fs::remove_dir_all(w.workspace.join(".git")).unwrap();
    let libsrc = w.base.join("libsrc");
    let script = format!(
        "set -e; {GIT} init -q {lib}; {GIT} -C {lib} commit -q --allow-empty -m lib; \
         cd {ws}; {GIT} init -q; {GIT} add README .vscode; {GIT} commit -q -m init; \
         {GIT} submodule add -q {lib} lib; {GIT} commit -q -m 'add lib'; \
         mkdir sub; cd sub; {GIT} init -q; echo s > s; {GIT} add s; {GIT} commit -q -m sub",
        ws = w.workspace.display(),
        lib = libsrc.display()
    );
    let out = std::process::Command::new("/bin/sh")
        .args(["-c", &script])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    chown_tree(&w.workspace, w.owner);
}

both!(nothing_a_run_plants_runs_in_the_hosts_git, |w: &World| {
    real_repositories(w);
    let marker = w.base.join("PWNED");
    let _ = fs::remove_file(&marker);
    // A payload for every way git runs code: hooks and an fsmonitor.
    let payload = format!("#!/bin/sh\necho \"$0\" >> {}\n", marker.display());
    let plant = |dir: &str| {
        format!(
            "mkdir -p {dir}/hooks && for h in pre-commit post-commit post-checkout reference-transaction; do \
             printf '%s' '{payload}' > {dir}/hooks/$h; chmod +x {dir}/hooks/$h; done; \
             printf '[core]\\n\\tfsmonitor = \"echo fsmonitor >> {m}; false\"\\n' >> {dir}/config",
            m = marker.display()
        )
    };
    let script = format!(
        "{GIT} init -q --bare evil; {evil}; \
         {GIT} worktree add -q wt && printf '../../../evil\\n' > .git/worktrees/wt/commondir; \
         {GIT} config core.fsmonitor \"echo fsmonitor >> {m}; false\"; \
         {GIT} -C sub config alias.st '!echo alias >> {m}'; \
         {GIT} config remote.backup.url /elsewhere; \
         printf '../evil\\n' > .git/commondir; \
         mv .git .git-moved 2>/dev/null && printf 'gitdir: evil\\n' > .git; \
         rmdir sub/.git 2>/dev/null; mv sub/.git sub/.git-moved 2>/dev/null; \
         {GIT} init -q --separate-git-dir=\"$PWD/sepgit\" separated; {sep}; \
         mkdir -p a/b/c/d/e/f/g/deep && {GIT} -C a/b/c/d/e/f/g/deep init -q; {deep}; \
         mkdir many && (cd many && seq 1 20500 | xargs touch) && mkdir -p many/zz/late && \
         {GIT} -C many/zz/late init -q; {late}; \
         mkdir gitfile-only && printf 'gitdir: ../evil\\n' > gitfile-only/.git; \
         echo planted",
        evil = plant("evil"),
        sep = plant("sepgit"),
        deep = plant("a/b/c/d/e/f/g/deep/.git"),
        late = plant("many/zz/late/.git"),
        m = marker.display(),
    );
    let config_before = fs::read_to_string(w.workspace.join(".git/config")).unwrap();
    let out = w.sh(&script);
    let text = describe(&out);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("planted"),
        "{text}"
    );
    assert_eq!(
        out.status.code(),
        Some(123),
        "the run must say what it found: {text}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    for reported in [
        ".git/commondir",
        "separated/.git",
        "a/b/c/d/e/f/g/deep/.git/hooks",
        "many/zz/late/.git/hooks",
        ".git/worktrees/wt/commondir",
        "gitfile-only/.git",
        ".git/config",
        "sub/.git/config",
    ] {
        assert!(
            stderr.contains(&w.workspace.join(reported).display().to_string()),
            "{reported} not reported: {text}"
        );
    }
    // A config that gained keys that run code is back as it was at launch.
    assert_eq!(
        fs::read_to_string(w.workspace.join(".git/config")).unwrap(),
        config_before
    );
    // `.git` itself could not be moved or replaced, in the workspace or in `sub`.
    assert!(w.workspace.join(".git").is_dir() && !w.workspace.join(".git-moved").exists());
    assert!(w.workspace.join("sub/.git").is_dir() && !w.workspace.join("sub/.git-moved").exists());

    let dirs: Vec<PathBuf> = [
        "",
        "sub",
        "separated",
        "a/b/c/d/e/f/g/deep",
        "many/zz/late",
        "wt",
        "gitfile-only",
        "evil",
    ]
    .iter()
    .map(|d| w.workspace.join(d))
    .collect();
    let host = host_git(w, &dirs);
    assert!(
        !marker.exists(),
        "the host's git ran what the run planted: {}\n{}",
        fs::read_to_string(&marker).unwrap_or_default(),
        describe(&host)
    );
});

both!(
    ordinary_git_work_is_neither_hindered_nor_reported,
    |w: &World| {
        real_repositories(w);
        let script = format!(
            "set -e; echo change >> README; {GIT} commit -q -am edit; {GIT} branch feature; \
         echo wip >> README; {GIT} stash -q; {GIT} stash pop -q; {GIT} commit -q -am wip; \
         {GIT} gc -q; {GIT} worktree add -q wt-ok; \
         {GIT} -C lib commit -q --allow-empty -m 'lib work'; {GIT} commit -q -am 'bump lib'; \
         {GIT} submodule update -q; \
         mkdir nested && {GIT} -C nested init -q && echo n > nested/n && {GIT} -C nested add n && \
         {GIT} -C nested commit -q -m n && {GIT} clone -q nested cloned; \
         {GIT} status --short >/dev/null; echo done"
        );
        let out = w.sh(&script);
        let text = describe(&out);
        assert_eq!(out.status.code(), Some(0), "{text}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("done"),
            "{text}"
        );
        let log = std::process::Command::new("git")
            .args(["-c", "safe.directory=*", "-C"])
            .arg(&w.workspace)
            .args(["log", "--oneline"])
            .output()
            .unwrap();
        let log = String::from_utf8_lossy(&log.stdout);
        assert!(log.contains("bump lib") && log.contains("wip"), "{log}");
        assert!(w.workspace.join("wt-ok/.git").is_file());
        assert!(w.workspace.join("lib/.git").is_file());
    }
);

// A change the host makes during the run to a persistence path that was read-only to the run
// (the user's editor saving `.vscode/settings.json`) is the host's: kept, never quarantined.
// Moving the directory above such a path and planting a new one in its place is the run's.
both!(host_edits_during_the_run_are_kept, |w: &World| {
    real_repositories(w);
    fs::create_dir_all(w.workspace.join("sub/.vscode")).unwrap();
    fs::write(w.workspace.join("sub/.vscode/tasks.json"), "{}").unwrap();
    chown_tree(&w.workspace, w.owner);
    let child = w
        .command(&[], &["/bin/sh", "-c", "sleep 3"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1200));
    // An editor's save: a new file renamed into place, and an edit in place.
    let vscode = w.workspace.join(".vscode");
    fs::write(vscode.join(".settings.json.tmp"), "{\"editor\": \"host\"}").unwrap();
    fs::rename(
        vscode.join(".settings.json.tmp"),
        vscode.join("settings.json"),
    )
    .unwrap();
    fs::write(vscode.join("tasks.json"), "{\"host\": true}").unwrap();
    chown_tree(&vscode, w.owner);
    let out = child.wait_with_output().unwrap();
    let text = describe(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("kept changes made on the host"),
        "{text}"
    );
    assert_eq!(
        fs::read_to_string(vscode.join("settings.json")).unwrap(),
        "{\"editor\": \"host\"}"
    );
    assert_eq!(
        fs::read_to_string(vscode.join("tasks.json")).unwrap(),
        "{\"host\": true}"
    );

    // The run moves `sub` (its `.vscode` goes with it) and plants a new `sub/.vscode`.
    let out = w.sh(
        "mv sub sub-moved && mkdir -p sub/.vscode && echo '{\"evil\": 1}' > sub/.vscode/tasks.json && echo planted",
    );
    let text = describe(&out);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("planted"),
        "{text}"
    );
    assert_eq!(out.status.code(), Some(123), "{text}");
    assert!(!w.workspace.join("sub/.vscode").exists(), "{text}");
});

// A persistence path that did not exist at launch is moved away as soon as the run creates it,
// not only after the run: the host's tools on the same checkout never see it meanwhile.
both!(
    names_created_during_the_run_are_gone_at_once,
    |w: &World| {
        let child = w
            .command(
                &[],
                &[
                    "/bin/sh",
                    "-c",
                    "mkdir -p .claude .github/workflows; echo '{}' > .claude/settings.json; \
                 echo '{}' > .mcp.json; echo 'on: push' > .github/workflows/x.yml; \
                 echo 'eval evil' > .envrc; touch ready; sleep 3",
                ],
            )
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let ready = w.workspace.join("ready");
        let started = std::time::Instant::now();
        while !ready.exists() && started.elapsed() < std::time::Duration::from_secs(20) {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        if !ready.exists() {
            let out = child.wait_with_output().unwrap();
            panic!("the run did not start: {}", describe(&out));
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
        let during: Vec<&str> = [
            ".claude/settings.json",
            ".mcp.json",
            ".github/workflows/x.yml",
            ".envrc",
        ]
        .into_iter()
        .filter(|p| fs::symlink_metadata(w.workspace.join(p)).is_ok())
        .collect();
        let out = child.wait_with_output().unwrap();
        let text = describe(&out);
        assert!(
            during.is_empty(),
            "still there during the run: {during:?}\n{text}"
        );
        assert_eq!(out.status.code(), Some(123), "{text}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("moved to the quarantine as soon as it appeared"),
            "{text}"
        );
        // What the run wrote there is offered back as a patch.
        let patch = stderr
            .lines()
            .find_map(|l| l.split("apply if you want it: ").nth(1))
            .unwrap_or_else(|| panic!("no patch named: {text}"));
        let patch = fs::read_to_string(patch.trim()).unwrap();
        assert!(
            patch.contains("+++ b/.envrc") && patch.contains("+eval evil"),
            "{patch}"
        );
    }
);

// A workspace that is a linked worktree: its git directory is outside the view, and the launch
// says so (git inside cannot work; nothing is silently half-working).
both!(a_linked_worktree_workspace_is_named, |w: &World| {
    real_repositories(w);
    let linked = w.home.join("src/linked");
    let out = std::process::Command::new("/bin/sh")
        .args([
            "-c",
            &format!(
                "{GIT} -C {ws} worktree add -q {linked}",
                ws = w.workspace.display(),
                linked = linked.display()
            ),
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    chown_tree(&w.home.join("src"), w.owner);
    let out = w
        .command(
            &["--workspace", linked.to_str().unwrap()],
            &["/bin/sh", "-c", "git status"],
        )
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("WARNING: the workspace's .git names")
            && stderr.contains("run from the main checkout"),
        "{}",
        describe(&out)
    );
});

// The launch's scan for nested repositories is bounded (it is on the launch path); where it
// stopped is in the start record, and the sweep after the run is not bounded: a repository
// beyond the scan that gains a hook during the run is still found.
both!(the_start_record_says_where_the_scan_stopped, |w: &World| {
    let many = w.workspace.join("many");
    fs::create_dir_all(&many).unwrap();
    for i in 0..20_500 {
        fs::write(many.join(format!("f{i}")), "").unwrap();
    }
    let repo = many.join("zz/repo");
    fs::create_dir_all(repo.join(".git/hooks")).unwrap();
    fs::write(repo.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
    chown_tree(&w.workspace, w.owner);
    let audit_dir = w.base.join("scan-audit");
    fs::create_dir_all(&audit_dir).unwrap();
    chown_tree(&audit_dir, w.owner);
    let audit = audit_dir.join("audit.jsonl");
    let out = w
        .command(
            &["--audit-log", audit.to_str().unwrap()],
            &[
                "/bin/sh",
                "-c",
                "printf '#!/bin/sh\\necho pwned\\n' > many/zz/repo/.git/hooks/post-checkout",
            ],
        )
        .output()
        .unwrap();
    let text = describe(&out);
    assert_eq!(out.status.code(), Some(123), "{text}");
    assert!(!repo.join(".git/hooks/post-checkout").exists(), "{text}");
    let log = fs::read_to_string(&audit).unwrap();
    let start: serde_json::Value = serde_json::from_str(log.lines().next().unwrap()).unwrap();
    assert!(
        start["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str().unwrap().contains("stopped after 20000 entries")),
        "{start}"
    );
});

// The repositories' `.git` are the run's git layers (issue 38): while the run is on, the host's
// git in the workspace and in the nested repository sees each repository as it was at launch —
// its config without the key the run added, its log without the run's commit — and running it
// runs nothing of the run's; the host's own commit meanwhile is kept. At the end, what is inert
// is carried (the run's commit and branch, a removed file), a config with a key that runs code
// is not (a finding, the run's config in the quarantine). Root and the test user.
both!(
    the_hosts_git_sees_the_launch_while_the_run_is_on,
    |w: &World| {
        real_repositories(w);
        let marker = w.base.join("PWNED");
        let _ = fs::remove_file(&marker);
        let ws = w.workspace.clone();
        let host = |dir: &PathBuf, args: &str| -> String {
            let mut cmd = w.as_owner(std::path::Path::new("/bin/sh"));
            cmd.args(["-c", &format!("cd {} && {GIT} {args}", dir.display())])
                .env_clear()
                .env("HOME", &w.home)
                .env("PATH", "/usr/local/bin:/usr/bin:/bin")
                .envs(field_ledger());
            let out = cmd.output().unwrap();
            assert!(out.status.success(), "git {args}: {}", describe(&out));
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let launch_config = fs::read_to_string(ws.join(".git/config")).unwrap();
        let launch_head = host(&ws, "rev-parse HEAD");
        let script = format!(
            "{GIT} config core.fsmonitor 'echo fsmonitor >> {m}; false' && \
         {GIT} -C sub config core.fsmonitor 'echo fsmonitor >> {m}; false' && \
         {GIT} -C sub config user.name inside && \
         {GIT} checkout -q -b feature && echo run > run.txt && {GIT} add run.txt && \
         {GIT} -c core.fsmonitor=false commit -q -m run && rm -f .git/description && \
         echo ready > ready && while [ ! -e go ]; do sleep 0.02; done; echo done",
            m = marker.display()
        );
        let child = w
            .command(&[], &["/bin/sh", "-c", &script])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !ws.join("ready").exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "the run never got ready"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        // While the run is on: the launch's repository, and no payload from the host's git.
        assert_eq!(
            fs::read_to_string(ws.join(".git/config")).unwrap(),
            launch_config
        );
        assert!(
            !fs::read_to_string(ws.join("sub/.git/config"))
                .unwrap()
                .contains("fsmonitor")
        );
        assert_eq!(host(&ws, "rev-parse HEAD"), launch_head);
        assert!(!host(&ws, "branch --list").contains("feature"));
        host(&ws, "status --porcelain");
        host(&ws.join("sub"), "status --porcelain");
        host(&ws, "commit -q --allow-empty -m host-during-run");
        assert!(
            !marker.exists(),
            "the host's git ran the run's payload during the run"
        );
        let host_head = host(&ws, "rev-parse HEAD");
        fs::write(ws.join("go"), "").unwrap();
        chown_tree(&ws.join("go"), w.owner);
        let out = child.wait_with_output().unwrap();
        let text = describe(&out);
        assert_eq!(out.status.code(), Some(123), "{text}");
        // After: the inert part carried, the key that runs code not.
        assert_eq!(
            fs::read_to_string(ws.join(".git/config")).unwrap(),
            launch_config
        );
        let sub_config = fs::read_to_string(ws.join("sub/.git/config")).unwrap();
        assert!(!sub_config.contains("fsmonitor"), "{sub_config}");
        assert!(
            host(&ws, "log --format=%s feature").starts_with("run\n"),
            "{text}"
        );
        assert!(
            !ws.join(".git/description").exists(),
            "the removal was carried"
        );
        // The branch both moved (the run's checkout moved HEAD, the host committed on the launch's
        // branch): the host's commit stays where the host put it.
        let branch = launch_head.trim();
        assert!(
            host(&ws, "log --format=%H --all").contains(host_head.trim()),
            "{text}"
        );
        let _ = branch;
        host(&ws, "status --porcelain");
        host(&ws.join("sub"), "status --porcelain");
        assert!(
            !marker.exists(),
            "the host's git ran the run's payload after the run"
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("changed")
                && stderr.contains(".git/config")
                && stderr.contains("not carried"),
            "{text}"
        );
    }
);

// The controls of the git layers: ordinary configuration work inside — `git config user.name`,
// `git remote add`, `git branch --set-upstream-to`, a commit — works, the run ends clean (exit 0,
// nothing reported), and what it configured reaches the host's config at the end (inert keys
// are carried). Root and the test user.
both!(
    ordinary_configuration_reaches_the_hosts_config,
    |w: &World| {
        real_repositories(w);
        let ws = w.workspace.clone();
        let branch = {
            let out = std::process::Command::new("git")
                .args([
                    "-C",
                    ws.to_str().unwrap(),
                    "-c",
                    "safe.directory=*",
                    "branch",
                    "--show-current",
                ])
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        };
        let out = w.sh(&format!(
            "{GIT} config user.name inside && {GIT} remote add origin /elsewhere/origin.git && \
         {GIT} update-ref refs/remotes/origin/{branch} HEAD && \
         {GIT} branch -q --set-upstream-to=origin/{branch} && \
         echo x > x && {GIT} add x && {GIT} commit -q -m inside && echo configured"
        ));
        let text = describe(&out);
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("configured"),
            "{text}"
        );
        assert_eq!(out.status.code(), Some(0), "{text}");
        let config = fs::read_to_string(ws.join(".git/config")).unwrap();
        for needle in [
            "name = inside",
            "[remote \"origin\"]",
            "url = /elsewhere/origin.git",
            &format!("[branch \"{branch}\"]"),
            "remote = origin",
            &format!("merge = refs/heads/{branch}"),
        ] {
            assert!(
                config.contains(needle),
                "{needle:?} not carried:\n{config}\n{text}"
            );
        }
    }
);
