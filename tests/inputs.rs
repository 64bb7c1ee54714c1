//! Files named on the command line (a profile, an audit log) that are not what they should be:
//! a FIFO nobody writes to, a device that never ends, a file of many gigabytes. Each must end
//! promptly in a message naming the path, in bounded memory: the real binary runs under a
//! deadline and an address-space limit, so a regression fails here instead of hanging or
//! eating the machine.

mod support;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use support::{STEPPROOF, skip_or_fail};

/// More than enough for any of these commands, far less than reading the files whole.
const MEMORY_LIMIT: u64 = 512 << 20;
const DEADLINE: Duration = Duration::from_secs(60);

/// `stepproof ARGS…` under [`MEMORY_LIMIT`] (when `prlimit` is there) and [`DEADLINE`].
fn stepproof(args: &[&str]) -> Output {
    let prlimit = ["/usr/bin/prlimit", "/bin/prlimit"]
        .into_iter()
        .find(|p| Path::new(p).exists());
    let mut command = match prlimit {
        Some(prlimit) => {
            let mut c = Command::new(prlimit);
            c.arg(format!("--as={MEMORY_LIMIT}"))
                .arg("--")
                .arg(STEPPROOF);
            c
        }
        None => {
            skip_or_fail("prlimit is not installed: running without the memory limit");
            Command::new(STEPPROOF)
        }
    };
    let mut child = command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "`stepproof {}` did not return within {DEADLINE:?}",
                args.join(" ")
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// Fails with the evidence unless the command exited with `code` (any failure for `None`: the
/// profile commands do not agree on one yet) and said `message`.
fn refused(args: &[&str], code: Option<i32>, message: &str) {
    let out = stepproof(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let exited = out.status.code();
    assert!(
        exited.is_some_and(|c| c != 0) && code.is_none_or(|code| exited == Some(code)),
        "`stepproof {}`: {:?}\n{stderr}",
        args.join(" "),
        out.status
    );
    assert!(
        stderr.contains(message),
        "`stepproof {}`: {stderr}",
        args.join(" ")
    );
}

struct Files {
    _dir: tempfile::TempDir,
    fifo: PathBuf,
    /// 64 GiB of zeros that take no disk.
    huge: PathBuf,
    /// A profile whose `extends` names the FIFO.
    extends_fifo: PathBuf,
}

fn files() -> Files {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let huge = dir.path().join("huge");
    fs::File::create(&huge).unwrap().set_len(64 << 30).unwrap();
    let extends_fifo = dir.path().join("child.toml");
    fs::write(&extends_fifo, "name = \"child\"\nextends = \"fifo\"\n").unwrap();
    Files {
        _dir: dir,
        fifo,
        huge,
        extends_fifo,
    }
}

fn s(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[test]
fn a_fifo_as_profile_is_refused_not_waited_on() {
    let f = files();
    let message = format!(
        "reading profile {}: is not a regular file (a FIFO)",
        s(&f.fifo)
    );
    refused(&["explain", "--profile", s(&f.fifo)], None, &message);
    refused(
        &["check", "--profile", s(&f.fifo), "--bash", "ls"],
        None,
        &message,
    );
    refused(&["policy", "--profile", s(&f.fifo)], None, &message);
    // Through `extends`.
    refused(
        &["explain", "--profile", s(&f.extends_fifo)],
        None,
        &message,
    );
    refused(
        &["explain", "--profile", "/dev/zero"],
        None,
        "reading profile /dev/zero: is not a regular file (a character device)",
    );
}

#[test]
fn a_huge_profile_is_refused_in_bounded_memory() {
    let f = files();
    refused(
        &["explain", "--profile", s(&f.huge)],
        None,
        &format!(
            "reading profile {}: is larger than 4 MiB: not read",
            s(&f.huge)
        ),
    );
}

#[test]
fn a_fifo_or_a_device_as_audit_log_is_refused_not_waited_on() {
    let f = files();
    for command in ["verify", "show"] {
        refused(
            &["audit", command, s(&f.fifo)],
            Some(2),
            &format!("opening {}: is not a regular file (a FIFO)", s(&f.fifo)),
        );
        refused(
            &["audit", command, "/dev/zero"],
            Some(2),
            "opening /dev/zero: is not a regular file (a character device)",
        );
    }
}

#[test]
fn a_huge_file_as_audit_log_is_refused_in_bounded_memory() {
    let f = files();
    for command in ["verify", "show"] {
        refused(
            &["audit", command, s(&f.huge)],
            Some(2),
            &format!(
                "{}: not a StepProof audit log: line 1 is not a record: longer than 16 MiB",
                s(&f.huge)
            ),
        );
    }
}
