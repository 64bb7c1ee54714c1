//! `filesystem.workspace`: `strict` sees the workspace through an overlay whose upper layer is
//! a private tmpfs of the run — the command writes, builds and deletes as usual, and nothing of
//! it reaches the checkout or outlives the run; `read-only` refuses every write at the kernel.
//! As root (the lower layer idmapped) and as the test user.

#[path = "support/e2e.rs"]
mod e2e;
mod support;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use support::*;

fn strict() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("profiles/strict.toml")
}

/// Every entry below `dir` with what it holds (a link's target, a file's bytes), never
/// following a link.
fn tree(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(here) = stack.pop() {
        for entry in fs::read_dir(&here).unwrap().flatten() {
            let path = entry.path();
            let meta = fs::symlink_metadata(&path).unwrap();
            let what = if meta.file_type().is_symlink() {
                format!("link {}", fs::read_link(&path).unwrap().display())
            } else if meta.is_dir() {
                stack.push(path.clone());
                format!("dir {:o}", meta.permissions().mode())
            } else {
                format!(
                    "file {:o} {}",
                    meta.permissions().mode(),
                    String::from_utf8_lossy(&fs::read(&path).unwrap())
                )
            };
            out.insert(path.strip_prefix(dir).unwrap().to_path_buf(), what);
        }
    }
    out
}

/// Whether a file named `name` exists anywhere below `dir` (links not followed).
fn find_named(dir: &Path, name: &str) -> Option<PathBuf> {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(here) = stack.pop() {
        for entry in fs::read_dir(&here).into_iter().flatten().flatten() {
            let path = entry.path();
            if entry.file_name() == name {
                return Some(path);
            }
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(path);
            }
        }
    }
    None
}

fn status_file(w: &World) -> PathBuf {
    fs::set_permissions(&w.base, fs::Permissions::from_mode(0o777)).unwrap();
    w.base.join("status.json")
}

// Writes in the workspace succeed inside (change, create, delete, a build's output, a
// persistence name that did not exist), the checkout is the same after the run, the sweep
// finds nothing (exit 0, not 123), and nothing written is left on the host.
both!(
    strict_writes_succeed_inside_and_never_reach_the_checkout,
    |w: &World| {
        fs::write(w.workspace.join("src.txt"), "original\n").unwrap();
        fs::create_dir_all(w.workspace.join("docs")).unwrap();
        fs::write(w.workspace.join("docs/guide.md"), "guide\n").unwrap();
        chown_tree(&w.workspace, w.owner);
        let before = tree(&w.workspace);
        let status = status_file(w);
        let strict = strict();
        let script = "set -e; echo changed > src.txt; echo created > new.txt; \
                  rm -r docs; mkdir docs; echo replaced > docs/other.md; \
                  mkdir -p target/debug; head -c 1048576 /dev/zero > target/debug/overlay-marker-7f3a; \
                  echo 'export X=1' > .envrc; chmod 600 README; \
                  cat src.txt new.txt docs/other.md; test ! -e docs/guide.md && echo GUIDE-GONE; \
                  ls -A";
        let out = w
            .command(
                &[
                    "--profile",
                    strict.to_str().unwrap(),
                    "--status-file",
                    status.to_str().unwrap(),
                ],
                &["/bin/sh", "-c", script],
            )
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{}", describe(&out));
        for seen in [
            "changed",
            "created",
            "replaced",
            "GUIDE-GONE",
            ".envrc",
            "target",
        ] {
            assert!(stdout.contains(seen), "{seen}: {}", describe(&out));
        }
        assert_eq!(tree(&w.workspace), before, "the checkout changed");
        let json: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(&status).unwrap()).unwrap();
        assert_eq!(json["status"], "exited", "{json}");
        assert!(
            json["findings"].as_array().is_none_or(|f| f.is_empty()),
            "{json}"
        );
        // The upper layer was the run's tmpfs: nothing of it is anywhere under the test's tree
        // (home, state directory, run directory), and no mount of it is left on the host.
        assert_eq!(find_named(&w.base, "overlay-marker-7f3a"), None);
        let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap();
        assert!(
            !mounts.contains(w.workspace.to_str().unwrap()),
            "a mount of the workspace is left on the host:\n{mounts}"
        );
    }
);

// The upper layer is bounded (`tmp_size_mib`): a write past it fails inside with ENOSPC, as on a
// full /tmp, and never fills the host's disk.
both!(strict_overlay_is_bounded_by_tmp_size, |w: &World| {
    let profile = w.base.join("small.toml");
    fs::write(
        &profile,
        format!(
            "extends = {:?}\n[filesystem]\ntmp_size_mib = 4\n",
            strict().to_str().unwrap()
        ),
    )
    .unwrap();
    fs::set_permissions(&profile, fs::Permissions::from_mode(0o644)).unwrap();
    let out = w
        .command(
            &["--profile", profile.to_str().unwrap()],
            &[
                "/bin/sh",
                "-c",
                "head -c 8388608 /dev/zero > big 2>/tmp/err; cat /tmp/err; rm big; \
                 echo small > small && cat small",
            ],
        )
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        stdout.contains("No space left on device"),
        "{}",
        describe(&out)
    );
    assert!(stdout.contains("small"), "{}", describe(&out));
    assert!(!w.workspace.join("big").exists());
    assert!(!w.workspace.join("small").exists());
});

// `read-only`: every write in the workspace fails at the kernel; reads work.
both!(read_only_workspace_refuses_writes, |w: &World| {
    let profile = w.base.join("ro.toml");
    fs::write(
        &profile,
        "extends = \"default\"\n[filesystem]\nworkspace = \"read-only\"\n",
    )
    .unwrap();
    fs::set_permissions(&profile, fs::Permissions::from_mode(0o644)).unwrap();
    let out = w
        .command(
            &["--profile", profile.to_str().unwrap()],
            &[
                "/bin/sh",
                "-c",
                "cat README; echo x > new.txt 2>&1 || echo REFUSED-NEW; \
                 rm README 2>&1 || echo REFUSED-RM",
            ],
        )
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", describe(&out));
    for seen in [
        "project",
        "Read-only file system",
        "REFUSED-NEW",
        "REFUSED-RM",
    ] {
        assert!(stdout.contains(seen), "{seen}: {}", describe(&out));
    }
    assert!(w.workspace.join("README").exists());
    assert!(!w.workspace.join("new.txt").exists());
});

// `stepproof doctor` tries the overlay the way the launch lays it (a tmpfs upper layer in a
// user namespace): this kernel can.
both!(doctor_tries_the_workspace_overlay, |w: &World| {
    let mut doctor = w.as_owner(&w.run_binary().with_file_name("stepproof"));
    doctor.arg("doctor");
    w.clean_env(&mut doctor);
    let out = doctor.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.contains("workspace overlay"))
        .unwrap_or_else(|| panic!("no overlay line in doctor: {}", describe(&out)));
    assert!(
        line.starts_with("ok") && line.contains("works in a user namespace"),
        "{line}"
    );
});

// Where the kernel cannot lay the overlay — here a workspace that is already two overlays deep,
// beyond overlayfs' stacking limit — the launch stops with 125 and says why; nothing of the
// command runs, and the workspace is never made writable instead. As the test user (a root
// invocation stops earlier: overlayfs takes no idmapped mount); the stack is built as root in a
// private mount namespace of the test's own.
#[test]
fn a_workspace_the_kernel_cannot_overlay_stops_the_launch() {
    if !is_root() {
        return skip_or_fail("stacking overlays for the test needs root");
    }
    let Some(w) = World::new(Who::User) else {
        return;
    };
    let layers = w.base.join("layers");
    for dir in ["l1", "u1", "w1", "m1", "u2", "w2"] {
        fs::create_dir_all(layers.join(dir)).unwrap();
    }
    fs::write(layers.join("l1/file"), "original\n").unwrap();
    chown_tree(&layers, w.owner);
    let l = |d: &str| layers.join(d).display().to_string();
    let script = format!(
        "set -e; mount -t overlay overlay -o lowerdir={},upperdir={},workdir={} {}; \
         mount -t overlay overlay -o lowerdir={},upperdir={},workdir={} \"$WS\"; \
         cd \"$WS\"; exec \"$@\"",
        l("l1"),
        l("u1"),
        l("w1"),
        l("m1"),
        l("m1"),
        l("u2"),
        l("w2"),
    );
    let inner = w.command(
        &["--profile", strict().to_str().unwrap()],
        &["/bin/sh", "-c", "echo ran > ran; echo changed > file"],
    );
    let mut cmd = std::process::Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "--", "/bin/sh", "-c"])
        .arg(&script)
        .arg("sh")
        .arg(inner.get_program())
        .args(inner.get_args());
    w.clean_env(&mut cmd).env("WS", &w.workspace);
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{}", describe(&out));
    assert!(
        stderr.contains("mounting the workspace's overlay") && stderr.contains("read-only"),
        "{}",
        describe(&out)
    );
    assert_eq!(
        fs::read_to_string(layers.join("l1/file")).unwrap(),
        "original\n"
    );
    for upper in ["u1", "u2"] {
        assert_eq!(
            fs::read_dir(layers.join(upper)).unwrap().count(),
            0,
            "{upper}"
        );
    }
}

// `stepproof explain` says how the workspace is seen, and the overlay is in the mount list.
#[test]
fn explain_shows_the_workspace_overlay() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_stepproof"))
        .args(["explain", "--profile", strict().to_str().unwrap()])
        .arg("--workspace")
        .arg(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        stdout.contains("(overlay: writable inside, every write thrown away after the run"),
        "{stdout}"
    );
    assert!(stdout.contains("rw   overlay   "), "{stdout}");
}

/// The hook's answer is not what keeps "no writes" on `strict`: with rules that let the hook
/// allow `sort -o` (the built-in strict judges it a write and denies it; its reading rules never
/// vouch for a line that writes), the write it makes
/// with the real Claude Code (2.1.328) succeeds inside, is read back by the next command, and
/// never reaches the checkout.
fn strict_hook_allowed_write_stays_in_the_overlay(w: &World) {
    use e2e::*;
    use serde_json::json;
    fs::write(w.workspace.join("names.txt"), "b\na\n").unwrap();
    chown_tree(&w.workspace, w.owner);
    let before = tree(&w.workspace);
    let mock = Mock::start(
        w,
        json!([
            bash("sort -o names.txt names.txt"),
            bash("cat names.txt"),
            text("fin")
        ]),
    );
    let allow_write = "[[hook.files]]\nid = \"test-workspace-write\"\nreason = \"the test lets one write through to reach the overlay\"\ndecision = \"allow\"\naccess = \"write\"\npaths = [\"names.txt\"]\n[[hook.bash]]\nid = \"test-sort\"\nreason = \"the test lets sort write through to reach the overlay\"\ndecision = \"allow\"\ncommands = [\"sort *\"]\n";
    let path = profile(w, &mock, true, allow_write);
    let text = fs::read_to_string(&path)
        .unwrap()
        .replace("extends = \"ci\"", "extends = \"strict\"");
    fs::write(&path, text).unwrap();
    let run = run_claude(w, &path, &[]);
    assert!(run.status.success(), "{}", run.describe());
    run.expect_decision(&call_id(None, 0), "allow", "test-sort");
    assert!(!mock.expect_result(&call_id(None, 0)).is_error);
    let read = mock.expect_result(&call_id(None, 1));
    assert!(read.text.contains("a\nb"), "{read:?}");
    assert_eq!(tree(&w.workspace), before, "the checkout changed");
    assert_eq!(run.status_file["status"], "exited", "{}", run.status_file);
}

mod strict_hook_allowed_write_stays_in_the_overlay {
    use super::*;
    #[test]
    fn as_root() {
        if e2e::claude_available()
            && let Some(w) = World::new(Who::Root)
        {
            strict_hook_allowed_write_stays_in_the_overlay(&w)
        }
    }
    #[test]
    fn as_user() {
        if e2e::claude_available()
            && let Some(w) = World::new(Who::User)
        {
            strict_hook_allowed_write_stays_in_the_overlay(&w)
        }
    }
}
