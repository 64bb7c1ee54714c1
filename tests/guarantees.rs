//! No value silently removes a guarantee: flags that would take one away are refused before
//! anything runs (exit 125), with a message that names what they would remove.

mod support;

use std::fs;
use std::path::Path;
use support::*;

fn refused(w: &World, extra: &[&str], needle: &str) {
    let marker = w.base.join("ran");
    let _ = fs::remove_file(&marker);
    let out = w
        .command(
            extra,
            &["/bin/sh", "-c", &format!("touch {}", marker.display())],
        )
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(125),
        "{extra:?}: {}",
        describe(&out)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(needle),
        "{extra:?}: wanted {needle:?} in {stderr}"
    );
    assert!(!marker.exists(), "{extra:?}: the command ran");
}

// A workspace is one project directory: never `/`, a system directory the view shows from the
// host, a directory holding the home, or StepProof's own state.
both!(
    workspaces_that_would_remove_a_guarantee_are_refused,
    |w: &World| {
        let state = w.home.join(".local/state/stepproof");
        fs::create_dir_all(&state).unwrap();
        chown_tree(&w.home, w.owner);
        let base = w.base.to_str().unwrap().to_string();
        let state = state.to_str().unwrap().to_string();
        for (workspace, needle) in [
            ("/", "cannot be `/`"),
            ("/etc", "under /etc"),
            ("/usr", "under /usr"),
            ("/usr/share", "under /usr"),
            ("/bin", "read-only from the host"),
            ("/proc", "under /proc"),
            (base.as_str(), "contains the home"),
            (state.as_str(), "StepProof's own state"),
        ] {
            refused(w, &["--workspace", workspace], needle);
        }
        assert!(!Path::new("/etc/ran").exists());
        // The home itself is a workspace (its persistence paths are protected).
        let out = w
            .command(&["--workspace", w.home.to_str().unwrap()], &["/bin/true"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    }
);

// The audit log is resolved once, before the sandbox starts: not in the workspace however the
// path is spelled (a directory that does not exist yet, a link to the workspace), and never
// through a link at its own name.
both!(audit_log_bypasses_are_refused, |w: &World| {
    let outside = w.base.join("via");
    let _ = fs::remove_file(&outside);
    std::os::unix::fs::symlink(&w.workspace, &outside).unwrap();
    let through_link = outside.join("audit.jsonl");
    let victim = w.base.join("victim.log");
    fs::write(&victim, "precious\n").unwrap();
    chown_tree(&w.base.join("victim.log"), w.owner);
    let planted = w.base.join("planted.jsonl");
    let _ = fs::remove_file(&planted);
    std::os::unix::fs::symlink(&victim, &planted).unwrap();
    for (path, needle) in [
        (
            "not-yet/audit.jsonl",
            "where the sandbox could read and write it",
        ),
        (
            "./a/../b/audit.jsonl",
            "where the sandbox could read and write it",
        ),
        (
            through_link.to_str().unwrap(),
            "where the sandbox could read and write it",
        ),
    ] {
        refused(w, &["--audit-log", path], needle);
    }
    refused(w, &["--audit-log", planted.to_str().unwrap()], "audit log");
    assert_eq!(fs::read_to_string(&victim).unwrap(), "precious\n");
    assert!(!w.workspace.join("not-yet").exists());
});
