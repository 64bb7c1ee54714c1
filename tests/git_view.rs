//! What the host's git shows is what is there (issue 38): whatever a run leaves in a git
//! directory to make the host's own `git log`, `git diff` or `git status` show something other
//! than the commits and the files — a replace ref (loose or packed), a graft, a shallow file,
//! `info/attributes`, `info/exclude`, a sparse checkout, index entries flagged assume-unchanged
//! or skip-worktree, in the workspace's repository, a nested one or one made during the run —
//! is undone at the end: judged from outside, after the run, the host's git shows the real
//! commits, the real change, the modified and the new file, and the `sweep` record names each
//! finding. Ordinary work (a commit, a branch, `git add`, `git gc`, a sparse checkout and an
//! index flag the repository had at launch) is left as it is. And a run whose supervisor is
//! killed leaves the same lie to `stepproof repair`, which undoes it. Root and the unprivileged
//! test user.

mod support;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use support::*;

const GIT: &str = "git -c user.name=t -c user.email=t@t -c safe.directory=*";

/// The workspace as a real repository (commits `one` and `two`: `README`, `a`, `dir/c`) with a
/// nested one, `sub` (commits `s1` and `s2`), owned by the world's owner.
fn real_repositories(w: &World) {
    fs::remove_dir_all(w.workspace.join(".git")).unwrap();
    let script = format!(
        "set -e; cd {ws}; {GIT} init -q -b main; printf 'sub/\\ninnocent-link\\n' > .git/info/exclude; mkdir dir; echo a > a; echo c > dir/c; \
         {GIT} add README a dir .vscode; {GIT} commit -q -m one; echo a2 > a; {GIT} commit -q -am two; \
         mkdir sub; cd sub; {GIT} init -q -b main; echo s > s; {GIT} add s; {GIT} commit -q -m s1; \
         echo s2 > s; {GIT} commit -q -am s2",
        ws = w.workspace.display()
    );
    let out = Command::new("/bin/sh")
        .args(["-c", &script])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    chown_tree(&w.workspace, w.owner);
    // The index as its owner's git sees it (the stat data it holds are the owner's).
    for repo in ["", "sub"] {
        host_git(w, &w.workspace.join(repo), "update-index -q --refresh");
    }
}

/// The host's git in `dir`, as the world's owner (its stdout; it must succeed).
fn host_git(w: &World, dir: &Path, args: &str) -> String {
    let mut cmd = w.as_owner(Path::new("/bin/sh"));
    cmd.args(["-c", &format!("cd {} && {GIT} {args}", dir.display())])
        .env_clear()
        .env("HOME", &w.home)
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .envs(field_ledger());
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "git {args}: {}", describe(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The run's `sweep` record.
fn sweep_record(out: &Output) -> serde_json::Value {
    let log = audit_log_named(&String::from_utf8_lossy(&out.stderr));
    let records = records_in(&log);
    records
        .iter()
        .find(|r| r["kind"] == "sweep")
        .unwrap_or_else(|| panic!("no sweep record: {records:#?}"))
        .clone()
}

/// The findings of the run's `sweep` record, as (path relative to the workspace, change).
fn sweep_findings(w: &World, out: &Output) -> Vec<(String, String)> {
    findings_of(w, &sweep_record(out)["findings"])
}

fn findings_of(w: &World, findings: &serde_json::Value) -> Vec<(String, String)> {
    let ws = format!("{}/", w.workspace.display());
    let mut out: Vec<(String, String)> = findings
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let path = f["path"].as_str().unwrap();
            (
                path.strip_prefix(&ws).unwrap_or(path).to_string(),
                f["change"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    out.sort();
    out
}

/// One lie: what the run does (its script ends by printing `LIE` when the lie shows inside),
/// and what the host's git must show after it.
struct Lie {
    name: &'static str,
    script: String,
    /// (repository relative to the workspace, git arguments, what their output must contain).
    truth: Vec<(&'static str, &'static str, String)>,
    /// (path relative to the workspace, change) the sweep record names.
    findings: Vec<(String, &'static str)>,
    /// What its notes say instead, when the sweep cannot tell the lie from ordinary work.
    note: Option<&'static str>,
}

fn lies(w: &World) -> Vec<Lie> {
    let rev = |dir: &str, rev: &str| {
        host_git(w, &w.workspace.join(dir), &format!("rev-parse {rev}"))
            .trim()
            .to_string()
    };
    let head = rev("", "HEAD");
    let sub_head = rev("sub", "HEAD");
    let truth_log = ("", "log --format=%s", "two\none\n".to_string());
    vec![
        Lie {
            note: None,
            name: "a loose replace ref",
            script: format!(
                "{GIT} replace HEAD HEAD~1 && test \"$({GIT} log --format=%s)\" = one && echo LIE"
            ),
            truth: vec![truth_log.clone()],
            findings: vec![(format!(".git/refs/replace/{head}"), "replace-ref")],
        },
        Lie {
            note: None,
            name: "a packed replace ref",
            script: format!(
                "{GIT} replace HEAD HEAD~1 && {GIT} pack-refs --all && test ! -e .git/refs/replace/{head} && \
                 test \"$({GIT} log --format=%s)\" = one && echo LIE"
            ),
            truth: vec![
                truth_log.clone(),
                ("", "rev-parse main", format!("{head}\n")),
            ],
            findings: vec![(".git/packed-refs".into(), "replace-ref")],
        },
        Lie {
            note: None,
            name: "a replace ref in a nested repository",
            script: format!(
                "cd sub && {GIT} replace HEAD HEAD~1 && test \"$({GIT} log --format=%s)\" = s1 && echo LIE"
            ),
            truth: vec![("sub", "log --format=%s", "s2\ns1\n".into())],
            findings: vec![(format!("sub/.git/refs/replace/{sub_head}"), "replace-ref")],
        },
        Lie {
            note: None,
            name: "a graft",
            script: format!(
                "mkdir -p .git/info && echo {head} > .git/info/grafts && \
                 test \"$({GIT} log --format=%s)\" = two && echo LIE"
            ),
            truth: vec![truth_log.clone()],
            findings: vec![(".git/info/grafts".into(), "git-view")],
        },
        Lie {
            note: None,
            name: "a shallow file",
            script: format!(
                "echo {head} > .git/shallow && test \"$({GIT} log --format=%s)\" = two && echo LIE"
            ),
            truth: vec![truth_log.clone()],
            findings: vec![(".git/shallow".into(), "git-view")],
        },
        Lie {
            note: None,
            name: "attributes that make a change binary",
            script: format!(
                "mkdir -p .git/info && echo '* -diff' > .git/info/attributes && echo changed >> a && \
                 {GIT} diff | grep -q 'Binary files' && echo LIE"
            ),
            truth: vec![("", "diff", "+changed".into())],
            findings: vec![(".git/info/attributes".into(), "git-view")],
        },
        Lie {
            note: None,
            name: "an exclude that hides a new file",
            script: format!(
                "echo planted.txt >> .git/info/exclude && echo x > planted.txt && \
                 test -z \"$({GIT} status --porcelain)\" && echo LIE"
            ),
            truth: vec![("", "status --porcelain", "?? planted.txt".into())],
            findings: vec![(".git/info/exclude".into(), "git-view")],
        },
        Lie {
            note: None,
            name: "assume-unchanged on a changed file",
            script: format!(
                "echo changed >> a && {GIT} update-index --assume-unchanged a && \
                 test -z \"$({GIT} status --porcelain)\" && echo LIE"
            ),
            truth: vec![
                ("", "status --porcelain", " M a".into()),
                ("", "diff", "+changed".into()),
            ],
            findings: vec![(".git/index".into(), "index-flags")],
        },
        Lie {
            note: None,
            name: "skip-worktree on a changed file",
            script: format!(
                "echo changed >> dir/c && {GIT} update-index --skip-worktree dir/c && \
                 test -z \"$({GIT} status --porcelain)\" && echo LIE"
            ),
            truth: vec![("", "status --porcelain", " M dir/c".into())],
            findings: vec![(".git/index".into(), "index-flags")],
        },
        Lie {
            note: None,
            name: "a sparse checkout that hides a deletion",
            script: format!(
                "{GIT} update-index -q --refresh; {GIT} sparse-checkout set --no-cone /README /a && test ! -e dir/c && \
                 test -z \"$({GIT} status --porcelain)\" && echo LIE"
            ),
            // The file is not in the checkout: said as it is.
            truth: vec![("", "status --porcelain", " D dir/c".into())],
            // `core.sparseCheckout` goes to the config (put back) and its worktree part (moved
            // at once as a protected name); the patterns and the flags are this sweep's.
            findings: vec![
                (".git/config".into(), "changed"),
                (".git/config.worktree".into(), "created"),
                (".git/index".into(), "index-flags"),
                (".git/info/sparse-checkout".into(), "git-view"),
            ],
        },
        Lie {
            note: None,
            name: "a repository made during the run",
            script: format!(
                "mkdir late && cd late && {GIT} init -q && echo 1 > f && {GIT} add f && {GIT} commit -q -m l1 && \
                 echo 2 > f && {GIT} commit -q -am l2 && {GIT} replace HEAD HEAD~1 && \
                 echo '* -diff' > .git/info/attributes && \
                 test \"$({GIT} log --format=%s)\" = l1 && echo LIE"
            ),
            truth: vec![("late", "log --format=%s", "l2\nl1\n".into())],
            findings: vec![
                ("late/.git/info/attributes".into(), "git-view"),
                ("late/.git/refs/replace/*".into(), "replace-ref"),
            ],
        },
        Lie {
            note: Some("vouched with their stat data for files the run wrote"),
            name: "stat data that vouch for the old content",
            script: format!(
                "echo changed >> a && touch -d '-10 seconds' a && {GIT} add a && \
                 old=$({GIT} rev-parse HEAD:a) && new=$({GIT} rev-parse :a) && \
                 python3 -c 'import sys, hashlib\n\
old, new = bytes.fromhex(sys.argv[1]), bytes.fromhex(sys.argv[2])\n\
b = bytearray(open(\".git/index\", \"rb\").read())\n\
i = b.find(new)\n\
b[i:i + 20] = old\n\
b[-20:] = hashlib.sha1(bytes(b[:-20])).digest()\n\
open(\".git/index\", \"wb\").write(b)' \"$old\" \"$new\" && \
                 test -z \"$({GIT} status --porcelain)\" && echo LIE"
            ),
            truth: vec![
                ("", "status --porcelain", " M a".into()),
                ("", "diff", "+changed".into()),
            ],
            findings: vec![],
        },
    ]
}

both!(every_lie_to_the_hosts_git_is_undone, |w: &World| {
    real_repositories(w);
    let launch_exclude = fs::read(w.workspace.join(".git/info/exclude")).unwrap();
    for lie in lies(w) {
        let out = w.sh(&lie.script);
        let text = format!("{}: {}", lie.name, describe(&out));
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("LIE"),
            "the lie did not show inside: {text}"
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        if lie.findings.is_empty() {
            assert_eq!(out.status.code(), Some(0), "{text}");
        } else {
            assert_eq!(out.status.code(), Some(123), "{text}");
            assert!(stderr.contains("TAMPERING"), "{text}");
        }
        if let Some(note) = lie.note {
            let notes = sweep_record(&out)["notes"].to_string();
            assert!(notes.contains(note), "{}: {notes}", lie.name);
            assert!(stderr.contains(note), "{text}");
        }
        let found = sweep_findings(w, &out);
        let mut wanted: Vec<(String, String)> = lie
            .findings
            .iter()
            .map(|(p, c)| (p.clone(), c.to_string()))
            .collect();
        wanted.sort();
        assert_eq!(found.len(), wanted.len(), "{}: {found:?}", lie.name);
        for ((path, change), (want_path, want_change)) in found.iter().zip(&wanted) {
            let same_path = match want_path.strip_suffix('*') {
                Some(prefix) => path.starts_with(prefix),
                None => path == want_path,
            };
            assert!(
                same_path && change == want_change,
                "{}: {found:?} is not {wanted:?}",
                lie.name
            );
        }
        for (dir, args, shows) in &lie.truth {
            let said = host_git(w, &w.workspace.join(dir), args);
            assert!(
                said.contains(shows.as_str()),
                "{}: the host's `git {args}` in {dir:?} does not show {shows:?}:\n{said}\n{text}",
                lie.name
            );
        }
        // The lie is gone for good: the next run finds nothing of it.
        let clean = w.sh("true");
        assert_eq!(
            clean.status.code(),
            Some(0),
            "{}: {}",
            lie.name,
            describe(&clean)
        );
        // Back to the launch's checkout, for the next lie.
        host_git(w, &w.workspace, "reset -q --hard");
        host_git(w, &w.workspace, "clean -q -ffdx -e sub -e innocent-link");
        fs::write(w.workspace.join(".git/info/exclude"), &launch_exclude).unwrap();
        chown_tree(&w.workspace, w.owner);
    }
});

// Ordinary work keeps its view: a sparse checkout, an assume-unchanged flag and an exclude line
// the repository had at launch, and a commit, a branch, `git add`, `git gc`, `git status` and a
// linked worktree during the run — nothing is reported, nothing changed.
both!(ordinary_work_keeps_its_view, |w: &World| {
    real_repositories(w);
    let ws = &w.workspace;
    host_git(w, ws, "replace HEAD~1 HEAD");
    host_git(w, ws, "replace -d HEAD~1");
    fs::write(ws.join(".git/info/exclude"), "*.log\n").unwrap();
    host_git(w, ws, "sparse-checkout set --no-cone /README /a /.vscode/");
    host_git(w, ws, "update-index --assume-unchanged a");
    let sparse = fs::read(ws.join(".git/info/sparse-checkout")).unwrap();
    let out = w.sh(&format!(
        "set -e; echo more >> README; {GIT} add README; {GIT} commit -q -m three; {GIT} branch feature; \
         echo x > notes.log; {GIT} gc -q; {GIT} status --porcelain >/dev/null; \
         {GIT} -C sub worktree add -q ../sub-wt; echo done"
    ));
    let text = describe(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("done"),
        "{text}"
    );
    assert!(sweep_findings(w, &out).is_empty(), "{text}");
    assert_eq!(
        fs::read(ws.join(".git/info/sparse-checkout")).unwrap(),
        sparse
    );
    assert_eq!(
        fs::read_to_string(ws.join(".git/info/exclude")).unwrap(),
        "*.log\n"
    );
    let flags = host_git(w, ws, "ls-files -v");
    assert!(
        flags.contains("h a\n") && flags.contains("S dir/c\n"),
        "{flags}\n{text}\n{}",
        host_git(w, ws, "status --porcelain")
    );
    assert_eq!(
        host_git(w, ws, "log --format=%s"),
        "three\ntwo\none\n",
        "{text}"
    );
    assert!(host_git(w, ws, "branch").contains("feature"));
});

fn runs_dir(w: &World) -> PathBuf {
    w.home.join(".local/state/stepproof/runs")
}

/// `stepproof` as the world's owner (a copy the test user can execute).
fn stepproof(w: &World, args: &[&str]) -> Output {
    let program = match w.who {
        Who::Root => PathBuf::from(STEPPROOF),
        Who::User => run_binary_for_user().with_file_name("stepproof"),
    };
    let mut cmd = w.as_owner(&program);
    cmd.args(args);
    w.clean_env(&mut cmd);
    cmd.output().unwrap()
}

// A run whose supervisor is killed (SIGKILL) once the agent has left its lies — a replace
// ref, a graft, an exclude hiding a new file, an index flag hiding a change — owes its end;
// `stepproof repair` undoes them, and its `run-end-recovered` record names each.
both!(a_killed_run_leaves_its_lies_to_the_repair, |w: &World| {
    real_repositories(w);
    let head = host_git(w, &w.workspace, "rev-parse HEAD")
        .trim()
        .to_string();
    let script = format!(
        "{GIT} replace HEAD HEAD~1 && echo {head} > .git/info/grafts && \
         echo planted.txt >> .git/info/exclude && echo x > planted.txt && \
         echo changed >> dir/c && {GIT} update-index --skip-worktree dir/c && \
         touch lied && exec sleep 60"
    );
    let mut cmd = w.as_owner(Path::new("setsid"));
    cmd.arg(w.run_binary())
        .args(["--", "/bin/sh", "-c", &script]);
    w.clean_env(&mut cmd);
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !w.workspace.join("lied").exists() {
        assert!(Instant::now() < deadline, "the run never lied");
        std::thread::sleep(Duration::from_millis(10));
    }
    let sid = child.id() as i32;
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(sid),
        nix::sys::signal::Signal::SIGKILL,
    );
    child.wait().unwrap();
    // The sandbox's processes die with the supervisor; the lock goes with the last of them.
    let deadline = Instant::now() + Duration::from_secs(10);
    let owed = loop {
        let owed: Vec<PathBuf> = fs::read_dir(runs_dir(w))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|d| d.join("owed.json").is_file())
            .collect();
        assert_eq!(owed.len(), 1, "{owed:?}");
        let repair = stepproof(w, &["repair"]);
        let said = describe(&repair);
        if said.contains("still held") && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        }
        assert_eq!(repair.status.code(), Some(0), "{said}");
        assert!(said.contains("finished the end of run"), "{said}");
        break owed[0].clone();
    };
    // Judged from outside.
    let ws = &w.workspace;
    assert_eq!(host_git(w, ws, "log --format=%s"), "two\none\n");
    let status = host_git(w, ws, "status --porcelain");
    assert!(
        status.contains("?? planted.txt") && status.contains(" M dir/c"),
        "{status}"
    );
    let records = records_in(&owed.join("audit.jsonl"));
    let recovered = records
        .iter()
        .find(|r| r["kind"] == "run-end-recovered")
        .unwrap_or_else(|| panic!("{records:#?}"));
    let found = findings_of(w, &recovered["findings"]);
    assert_eq!(
        found,
        [
            (".git/index".to_string(), "index-flags".to_string()),
            (".git/info/exclude".into(), "git-view".into()),
            (".git/info/grafts".into(), "git-view".into()),
            (format!(".git/refs/replace/{head}"), "replace-ref".into()),
        ],
        "{recovered}"
    );
    assert!(
        recovered["restored"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p.as_str().unwrap().ends_with(".git/info/exclude")),
        "{recovered}"
    );
});

/// An index of `count` entries (`f0000000`, …), each flagged skip-worktree, version 3, with its
/// SHA-1 checksum: what `git update-index --skip-worktree` would leave for that many files,
/// written without making one of them.
fn flagged_index(count: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(count as usize * 80 + 32);
    out.extend_from_slice(b"DIRC");
    out.extend_from_slice(&3u32.to_be_bytes());
    out.extend_from_slice(&count.to_be_bytes());
    let blob = [0xe6u8; 20];
    for i in 0..count {
        let name = format!("f{i:07}");
        let start = out.len();
        out.extend_from_slice(&[0u8; 24]); // ctime, mtime, dev, ino
        out.extend_from_slice(&0o100644u32.to_be_bytes());
        out.extend_from_slice(&[0u8; 12]); // uid, gid, size
        out.extend_from_slice(&blob);
        out.extend_from_slice(&(0x4000u16 | name.len() as u16).to_be_bytes()); // extended
        out.extend_from_slice(&0x4000u16.to_be_bytes()); // skip-worktree
        out.extend_from_slice(name.as_bytes());
        let len = out.len() - start;
        out.resize(start + (len + 8) / 8 * 8, 0);
    }
    let digest = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, &out);
    out.extend_from_slice(digest.as_ref());
    out
}

// The cheapest huge inputs a run can leave where the end reads git's index: a sparse 4 GiB
// index (no block of it written) and an index of 1,000,001 flagged entries (76 MB, written in
// a moment). Neither decides what the end does: each gets its named outcome — the sparse one is
// never read nor carried from the run's git layer (a file larger than the largest index the
// sweep reads goes to the quarantine; the host's index stays as it was), the flagged one is
// carried and has every flag the run added cleared and 100 of them named — and the time each
// end took is
// printed (a measurement, not asserted: speed is judged in benchmarks; the release build ends
// the flagged one in under a second, the debug build the suite runs in about 15 s).
both!(huge_indexes_get_a_named_outcome, |w: &World| {
    real_repositories(w);
    let crafted = flagged_index(1_000_001);
    let launch_index = fs::read(w.workspace.join(".git/index")).unwrap();

    let started = Instant::now();
    let out = w.sh("truncate -s 4G .git/index && echo SPARSE");
    let took = started.elapsed();
    let text = describe(&out);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("SPARSE"),
        "{text}"
    );
    assert_eq!(out.status.code(), Some(123), "{text}");
    let finding = sweep_record(&out)["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| {
            f["path"]
                .as_str()
                .is_some_and(|p| p.ends_with(".git/index"))
        })
        .cloned()
        .unwrap_or_else(|| panic!("no finding for the index: {text}"));
    let said = finding.to_string();
    assert!(
        finding["change"] == "unchecked" && said.contains("beyond the 256 MiB a file"),
        "{said}"
    );
    let kept = PathBuf::from(
        finding["quarantined_to"]
            .as_str()
            .unwrap_or_else(|| panic!("{said}")),
    );
    assert_eq!(fs::metadata(&kept).unwrap().len(), 4 << 30);
    assert_eq!(
        fs::read(w.workspace.join(".git/index")).unwrap(),
        launch_index,
        "the host's index is as it was"
    );
    eprintln!("a sparse 4 GiB index: the run and its end took {took:?}");
    assert_eq!(w.sh("true").status.code(), Some(0));

    let started = Instant::now();
    fs::write(w.workspace.join("flagged-index"), &crafted).unwrap();
    chown_tree(&w.workspace, w.owner);
    let out = w.sh("mv flagged-index .git/index && echo FLAGGED");
    let took = started.elapsed();
    let text = describe(&out);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("FLAGGED"),
        "{text}"
    );
    assert_eq!(out.status.code(), Some(123), "{text}");
    let findings = sweep_record(&out)["findings"].to_string();
    assert!(
        findings.contains("index-flags") && findings.contains("f0000099"),
        "{findings}"
    );
    assert!(
        !findings.contains("f0000100\""),
        "at most 100 named: {findings}"
    );
    // Every flag the run added is cleared: the entries are git's to look at again.
    let after = fs::read(w.workspace.join(".git/index")).unwrap();
    assert_eq!(after.len(), crafted.len());
    let flagged = after
        .windows(10)
        .filter(|w| w[0..2] == [0x40, 0x08] && w[2..4] == [0x40, 0x00] && w[4] == b'f')
        .count();
    assert_eq!(flagged, 0, "skip-worktree flags left");
    eprintln!("1,000,001 flagged entries: the run and its end took {took:?}");
});
