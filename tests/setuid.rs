//! No setuid or setgid file leaves a run (issue 11, the seccomp first line): every way of
//! making one is tried inside `stepproof-run` — chmod, fchmod, open(O_CREAT), mknod, O_TMPFILE,
//! install, tar, cp --preserve — and judged from outside after the run, by the modes the host
//! sees. A setuid file left in the workspace runs as its owner for any user of the host (root,
//! when the workspace is idmapped to root).
//!
//! The split the filter makes: S_ISUID is refused on every call; S_ISGID only where a file is
//! created (chmod g+s stays allowed, for shared group directories; a setgid *file* made by
//! chmod is the post-run walk's to strip, not tested here). Controls: the ordinary modes and
//! `mkdir -m 2775` still work.

mod support;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use support::*;

const S_ISUID: u32 = 0o4000;
const S_ISGID: u32 = 0o2000;

/// Every entry under `dir` (symlinks not followed) with a setuid bit, or a setgid bit on
/// anything but a directory: (path, mode).
fn privileged_files(dir: &Path) -> Vec<(PathBuf, u32)> {
    let mut found = Vec::new();
    let Ok(entries) = fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue;
        };
        let mode = meta.mode();
        if mode & S_ISUID != 0 || (mode & S_ISGID != 0 && !meta.is_dir()) {
            found.push((path.clone(), mode));
        }
        if meta.is_dir() {
            found.extend(privileged_files(&path));
        }
    }
    found
}

fn mode_of(path: &Path) -> Option<u32> {
    fs::symlink_metadata(path).ok().map(|m| m.mode())
}

/// A tar archive made on the host with these (name, mode) regular members.
fn make_tar(archive: &Path, members: &[(&str, u32)]) {
    let list: Vec<String> = members
        .iter()
        .map(|(name, mode)| format!("({name:?}, {mode:#o})"))
        .collect();
    let code = format!(
        "import io, sys, tarfile\n\
         with tarfile.open(sys.argv[1], 'w') as t:\n\
         \x20   for name, mode in [{}]:\n\
         \x20       data = b'#!/bin/sh\\nexit 0\\n'\n\
         \x20       info = tarfile.TarInfo(name)\n\
         \x20       info.mode, info.size = mode, len(data)\n\
         \x20       t.addfile(info, io.BytesIO(data))\n",
        list.join(", ")
    );
    let out = Command::new("python3")
        .arg("-c")
        .arg(code)
        .arg(archive)
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "making {}: {}",
        archive.display(),
        describe(&out)
    );
}

/// (attack, shell command run in the workspace, the file it makes). Each one is a way the issue
/// found (or a variant); none may leave that file with a setuid or setgid bit.
const ATTACKS: &[(&str, &str, &str)] = &[
    (
        "cp + chmod 4755",
        "cp /bin/bash sh-copy && chmod 4755 sh-copy",
        "sh-copy",
    ),
    (
        "chmod u+s",
        "cp /bin/true true-us && chmod u+s true-us",
        "true-us",
    ),
    (
        "chmod 6755",
        "cp /bin/true true-6755 && chmod 6755 true-6755",
        "true-6755",
    ),
    (
        "install -m 4755",
        "install -m 4755 /bin/true installed",
        "installed",
    ),
    (
        "python os.open(O_CREAT, 0o4755)",
        "python3 -c 'import os; os.open(\"py-open\", os.O_CREAT | os.O_WRONLY, 0o4755)'",
        "py-open",
    ),
    (
        "python os.open(O_CREAT, 0o2755)",
        "python3 -c 'import os; os.open(\"py-open-g\", os.O_CREAT | os.O_WRONLY, 0o2755)'",
        "py-open-g",
    ),
    (
        "python os.chmod",
        "python3 -c 'import os; open(\"py-chmod\", \"w\").close(); os.chmod(\"py-chmod\", 0o4755)'",
        "py-chmod",
    ),
    (
        "python os.fchmod",
        "python3 -c 'import os; fd = os.open(\"py-fchmod\", os.O_CREAT | os.O_WRONLY, 0o644); os.fchmod(fd, 0o4755)'",
        "py-fchmod",
    ),
    (
        "python os.chmod through /proc/self/fd of an O_PATH fd",
        "python3 -c 'import os; open(\"py-opath\", \"w\").close(); fd = os.open(\"py-opath\", os.O_PATH); os.chmod(f\"/proc/self/fd/{fd}\", 0o4755)'",
        "py-opath",
    ),
    (
        "python os.mknod(S_IFREG | 0o4755)",
        "python3 -c 'import os, stat; os.mknod(\"py-mknod\", stat.S_IFREG | 0o4755)'",
        "py-mknod",
    ),
    (
        "python os.mknod(S_IFREG | 0o2755)",
        "python3 -c 'import os, stat; os.mknod(\"py-mknod-g\", stat.S_IFREG | 0o2755)'",
        "py-mknod-g",
    ),
    // The link may fail on its own in the sandbox; the setuid_tmpfile probe reads the mode from
    // the fd itself.
    (
        "python O_TMPFILE 0o4755 + linkat",
        "python3 -c 'import os; fd = os.open(\".\", os.O_TMPFILE | os.O_WRONLY, 0o4755); os.link(f\"/proc/self/fd/{fd}\", \"py-tmpfile\")'",
        "py-tmpfile",
    ),
    (
        "tar xpf of a setuid member",
        "tar xpf setuid.tar",
        "tar-suid",
    ),
    (
        "cp --preserve=mode of a setuid file",
        "cp --preserve=mode \"$SUID_SOURCE\" cp-preserved",
        "cp-preserved",
    ),
    (
        "cp -a of a setuid file",
        "cp -a \"$SUID_SOURCE\" cp-a",
        "cp-a",
    ),
];

/// The attacks whose file must exist after the run (the copy or creation itself is allowed,
/// only the bit is refused): without it the attack would not have reached the mode at all.
const MUST_EXIST: &[&str] = &[
    "sh-copy",
    "true-us",
    "true-6755",
    "py-chmod",
    "py-fchmod",
    "py-opath",
    "cp-preserved",
    "cp-a",
];

both!(no_setuid_or_setgid_file_leaves_the_run, |w: &World| {
    // Only a setuid member: tar gives a setgid member its mode with fchmod, which the filter
    // allows (shared group directories); the post-run walk strips such a file.
    make_tar(&w.workspace.join("setuid.tar"), &[("tar-suid", 0o4755)]);
    // A setuid file of the world's owner on the host, shown read-only inside by a profile.
    let tools = w.base.join("tools");
    fs::create_dir(&tools).unwrap();
    let suid_source = tools.join("suid-true");
    fs::copy("/bin/true", &suid_source).unwrap();
    chown_tree(&w.workspace, w.owner);
    chown_tree(&tools, w.owner);
    fs::set_permissions(&suid_source, fs::Permissions::from_mode(0o4755)).unwrap();
    let profile = w.base.join("tools.toml");
    fs::write(
        &profile,
        format!(
            "extends = \"default\"\n[filesystem]\nread_only = [{:?}]\n",
            tools.display().to_string()
        ),
    )
    .unwrap();
    let mut script = format!(
        "SUID_SOURCE={}\ntest -u \"$SUID_SOURCE\" && echo source-visible\n",
        suid_source.display()
    );
    for (name, command, _) in ATTACKS {
        script.push_str(&format!(
            "if ( {command} ) 2>/dev/null; then echo 'ran: {name}'; else echo 'refused: {name}'; fi\n"
        ));
    }
    let out = w
        .command(
            &["--profile", profile.to_str().unwrap()],
            &["/bin/sh", "-c", &script],
        )
        .output()
        .expect("start stepproof-run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("source-visible"),
        "{}",
        describe(&out)
    );
    let mut problems = Vec::new();
    for (name, _, file) in ATTACKS {
        if let Some(mode) = mode_of(&w.workspace.join(file))
            && mode & (S_ISUID | S_ISGID) != 0
        {
            problems.push(format!("{name}: {file} has mode {:o}", mode & 0o7777));
        }
    }
    for file in MUST_EXIST {
        if mode_of(&w.workspace.join(file)).is_none() {
            problems.push(format!(
                "{file} was not made: the attack never reached the mode"
            ));
        }
    }
    for (path, mode) in privileged_files(&w.workspace) {
        problems.push(format!(
            "{} has mode {:o} after the run",
            path.display(),
            mode & 0o7777
        ));
    }
    assert!(
        problems.is_empty(),
        "{}\n{}",
        problems.join("\n"),
        describe(&out)
    );
});

both!(the_seccomp_probes_are_refused_inside, |w: &World| {
    let probe = w.workspace.join("stepproof");
    fs::copy(STEPPROOF, &probe).unwrap();
    fs::set_permissions(&probe, fs::Permissions::from_mode(0o755)).unwrap();
    chown_tree(&probe, w.owner);
    // (probe, errno): each form, once in /tmp and once in the workspace.
    let wanted: &[(&str, i64)] = &[
        ("setuid_chmod", libc::EPERM as i64),
        ("setuid_fchmod", libc::EPERM as i64),
        ("setuid_fchmodat", libc::EPERM as i64),
        ("setuid_fchmodat2", libc::EPERM as i64),
        ("setuid_open", libc::EPERM as i64),
        ("setuid_openat", libc::EPERM as i64),
        ("setuid_creat", libc::EPERM as i64),
        ("setuid_mknodat", libc::EPERM as i64),
        ("setuid_tmpfile", libc::EPERM as i64),
        ("setuid_openat2", libc::ENOSYS as i64),
        ("setgid_open", libc::EPERM as i64),
    ];
    let mut script = String::new();
    for (name, _) in wanted {
        script.push_str(&format!(
            "./stepproof __probe {name}\n./stepproof __probe {name}:.\n"
        ));
    }
    script.push_str("./stepproof __probe setgid_dir:.\n");
    let out = w.sh(&script);
    assert!(out.status.success(), "{}", describe(&out));
    let results: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad probe line {l:?}: {e}")))
        .collect();
    assert_eq!(results.len(), wanted.len() * 2 + 1, "{}", describe(&out));
    for r in &results {
        let name = r["name"].as_str().unwrap_or_default();
        let base = name.split(':').next().unwrap_or_default();
        if base == "setgid_dir" {
            // The control: a setgid directory is still made (mkdir, then chmod 02775).
            assert_eq!(r["escaped"], true, "setgid directory refused: {r}");
            continue;
        }
        let errno = wanted.iter().find(|(n, _)| *n == base).map(|(_, e)| *e);
        assert_eq!(r["escaped"], false, "{name} ESCAPED: {r}");
        assert_eq!(r["errno"].as_i64(), errno, "{name}: {r}");
    }
    // The probes clean up after themselves.
    let left: Vec<_> = fs::read_dir(&w.workspace)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("stepproof-"))
        .collect();
    assert!(left.is_empty(), "probe files left behind: {left:?}");
});

both!(ordinary_modes_still_work, |w: &World| {
    make_tar(
        &w.workspace.join("plain.tar"),
        &[("tar-plain", 0o644), ("tar-exec", 0o755)],
    );
    chown_tree(&w.workspace, w.owner);
    let script = r#"set -e
mkdir -m 2775 shared
install -d -m 2775 shared-install
mkdir shared-chmod && chmod g+s shared-chmod
touch plain && chmod 755 plain
install -m 755 /bin/true tool
tar xf plain.tar
python3 -c 'import os; os.close(os.open("py-plain", os.O_CREAT | os.O_WRONLY, 0o640))'
echo all-ok
"#;
    let out = w.sh(script);
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("all-ok"),
        "{}",
        describe(&out)
    );
    let mode = |p: &str| {
        mode_of(&w.workspace.join(p)).unwrap_or_else(|| panic!("{p} missing: {}", describe(&out)))
            & 0o7777
    };
    // Setgid directories: the kernel keeps the bit only for a group the caller is in, so these
    // also show that the run's group is the owner's.
    for dir in ["shared", "shared-install", "shared-chmod"] {
        assert!(
            mode(dir) & S_ISGID != 0,
            "{dir}: setgid directory lost its bit: {:o}\n{}",
            mode(dir),
            describe(&out)
        );
    }
    assert_eq!(mode("shared"), 0o2775);
    assert_eq!(mode("plain"), 0o755);
    assert_eq!(mode("tool"), 0o755);
    assert_eq!(mode("tar-exec") & 0o111, 0o111);
    assert_eq!(mode("tar-plain") & 0o111, 0);
    assert_eq!(mode("py-plain"), 0o640);
    assert!(privileged_files(&w.workspace).is_empty());
});
