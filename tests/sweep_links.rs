//! What a run leaves behind, judged from outside after it: links planted where persistence
//! paths (or their parents) belong are moved as links and their targets never touched, a FIFO
//! at a protected name does not hang the end of the run, and a setgid bit set during the run
//! does not survive it (the second line behind seccomp). Root and the unprivileged test user.

mod support;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use support::*;

/// Every entry below `dir` with its content (links by target) and mode.
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

/// A directory outside the workspace, owned by the world's owner, shaped like what the sweep
/// looks for (git config and hooks, CI workflows).
fn plant_victim(w: &World) -> PathBuf {
    let victim = w.base.join("victim");
    for (path, contents) in [
        ("config", "[core]\n\tbare = false\n"),
        ("hooks/pre-commit", "#!/bin/sh\nexit 0\n"),
        ("workflows/ci.yml", "on: push\n"),
        ("settings.json", "{}"),
    ] {
        let p = victim.join(path);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, contents).unwrap();
    }
    chown_tree(&victim, w.owner);
    victim
}

fn mode(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
}

both!(
    links_at_persistence_paths_are_moved_never_followed,
    |w: &World| {
        let victim = plant_victim(w);
        let ssh = w.home.join(".ssh");
        fs::write(ssh.join("config"), "Host *\n  User me\n").unwrap();
        // A nested repository the launch records, and a repository without a hooks directory
        // (an existing one is read-only inside).
        fs::create_dir_all(w.workspace.join("sub/.git")).unwrap();
        fs::write(w.workspace.join("sub/.git/HEAD"), "ref: refs/heads/main\n").unwrap();
        fs::remove_dir_all(w.workspace.join(".git/hooks")).unwrap();
        chown_tree(&w.workspace, w.owner);
        let victim_before = fingerprint(&victim);
        let ssh_before = fingerprint(&ssh);

        let out = w.sh(&format!(
            "! mv sub/.git sub/.git-moved && mkdir sub2 && ln -s {ssh} sub2/.git && \
             ln -s {victim} .github && \
             ln -s {victim}/hooks .git/hooks && \
             mkdir -p late && ln -s {victim} late/.git && \
             ln -s {ssh} .claude && echo planted",
            ssh = ssh.display(),
            victim = victim.display()
        ));
        let text = describe(&out);
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("planted"),
            "{text}"
        );
        assert_eq!(out.status.code(), Some(123), "{text}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        // The launch's repository keeps its `.git` (pinned: it cannot be moved or replaced).
        assert!(w.workspace.join("sub/.git/HEAD").is_file(), "{text}");
        for link in ["sub2/.git", ".github", ".git/hooks", "late/.git", ".claude"] {
            assert!(
                stderr.contains(&format!("symlink {}", w.workspace.join(link).display())),
                "{link} not reported: {text}"
            );
            assert!(
                fs::symlink_metadata(w.workspace.join(link)).is_err(),
                "{link} left in the workspace: {text}"
            );
        }
        assert_eq!(fingerprint(&victim), victim_before, "the victim changed");
        assert_eq!(fingerprint(&ssh), ssh_before, "~/.ssh changed");
    }
);

both!(
    a_fifo_at_a_protected_name_does_not_hang_the_end,
    |w: &World| {
        let mut child = w
            .command(&[], &["/bin/sh", "-c", "mkfifo .envrc && mkfifo .mcp.json"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start stepproof-run");
        let started = Instant::now();
        while child.try_wait().unwrap().is_none() {
            if started.elapsed() > Duration::from_secs(60) {
                let _ = child.kill();
                let _ = child.wait();
                panic!("stepproof-run hung on a FIFO at a protected name");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(123), "{}", describe(&out));
        assert!(!w.workspace.join(".envrc").exists());
    }
);

both!(a_setgid_bit_set_during_the_run_is_stripped, |w: &World| {
    // Seccomp lets S_ISGID through chmod (`mkdir -m 2775` needs it): the sweep is the line here.
    let out = w.sh("touch f && chmod g+s f && stat -c %a f");
    let text = describe(&out);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "2644",
        "{text}"
    );
    assert_eq!(out.status.code(), Some(123), "{text}");
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains(&format!("setgid {}", w.workspace.join("f").display())),
        "{text}"
    );
    assert_eq!(mode(&w.workspace.join("f")), 0o644, "{text}");
    // No file anywhere in the workspace keeps a setuid or setgid bit.
    let mut stack = vec![w.workspace.clone()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).unwrap().flatten() {
            let meta = fs::symlink_metadata(entry.path()).unwrap();
            if meta.is_dir() {
                stack.push(entry.path());
            } else if !meta.file_type().is_symlink() {
                assert_eq!(
                    meta.permissions().mode() & 0o6000,
                    0,
                    "{}",
                    entry.path().display()
                );
            }
        }
    }
});

both!(a_setgid_directory_is_ordinary_work, |w: &World| {
    let out = w.sh("mkdir -m 2775 d && stat -c %a d");
    let text = describe(&out);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "2775",
        "{text}"
    );
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert_eq!(mode(&w.workspace.join("d")), 0o2775, "{text}");
});
