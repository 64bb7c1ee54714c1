//! Cgroups left by runs that died: found beside the supervisor's, thawed, and removed once no
//! process holds them.

use super::read_bounded;
use super::write_file;
use super::{CgroupHost, READ_LIMIT, parse_name};
use nix::errno::Errno;
use nix::sys::signal::kill;
use nix::unistd::Pid;
use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// After a kill -9 of an earlier supervisor: removes empty `stepproof-<pid>-*` directories
/// directly under the own cgroup in each hierarchy whose <pid> is not a live process and whose
/// cgroup.procs is empty. Never removes anything else, never follows links, never touches the
/// directories of live supervisors. Returns what it removed.
pub fn remove_stale(host: &CgroupHost) -> Vec<PathBuf> {
    let parents: BTreeSet<&Path> = host
        .v1
        .values()
        .chain(host.v2.iter())
        .map(|h| h.own_dir.as_path())
        .collect();
    let mut removed = Vec::new();
    for parent in parents {
        let Ok(entries) = fs::read_dir(parent) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some((pid, _)) = name.to_str().and_then(parse_name) else {
                continue;
            };
            if pid == host.own_pid || pid == std::process::id() || !pid_is_dead(pid) {
                continue;
            }
            let path = entry.path();
            // symlink_metadata: a link is never a directory here, whatever it points to.
            let is_dir = fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_dir());
            if !is_dir {
                continue;
            }
            if !holds_no_process(&path) {
                // A run whose supervisor was killed while a runbook's evidence command ran may
                // be left frozen, and a frozen task on cgroup v1 cannot even die: thaw it, so
                // the kill its processes were sent reaches them (the directory goes next time).
                thaw_stale(&path);
                continue;
            }
            // rmdir removes only an empty directory (on cgroupfs: one without processes or
            // child cgroups), and does not follow a link put there since the check.
            match fs::remove_dir(&path) {
                Ok(()) => {
                    tracing::info!(dir = %path.display(), "stale cgroup removed");
                    removed.push(path);
                }
                Err(e) => tracing::debug!(dir = %path.display(), error = %e, "stale cgroup kept"),
            }
        }
    }
    removed
}

/// kill(pid, 0): ESRCH is the only answer that proves the process is gone (EPERM means it
/// lives under another user).
fn pid_is_dead(pid: u32) -> bool {
    match i32::try_from(pid) {
        Ok(raw) if raw > 0 => kill(Pid::from_raw(raw), None) == Err(Errno::ESRCH),
        _ => false,
    }
}

/// On cgroupfs every cgroup has a `cgroup.procs`; a directory without one is not a cgroup and
/// holds no process (rmdir then removes it only when it is empty anyway).
/// Thaws a stale run's cgroup if it is frozen: `freezer.state` (v1) or `cgroup.freeze` (v2).
fn thaw_stale(dir: &Path) {
    let v1 = dir.join("freezer.state");
    if read_bounded(&v1, READ_LIMIT).is_ok_and(|state| state.trim() != "THAWED") {
        match write_file(&v1, "THAWED") {
            Ok(()) => tracing::info!(dir = %dir.display(), "stale frozen cgroup thawed"),
            Err(e) => tracing::warn!(dir = %dir.display(), error = %e, "thawing a stale cgroup"),
        }
    }
    let v2 = dir.join("cgroup.freeze");
    if read_bounded(&v2, READ_LIMIT).is_ok_and(|state| state.trim() == "1") {
        match write_file(&v2, "0") {
            Ok(()) => tracing::info!(dir = %dir.display(), "stale frozen cgroup thawed"),
            Err(e) => tracing::warn!(dir = %dir.display(), error = %e, "thawing a stale cgroup"),
        }
    }
}

fn holds_no_process(dir: &Path) -> bool {
    match read_bounded(&dir.join("cgroup.procs"), READ_LIMIT) {
        Ok(text) => text.trim().is_empty(),
        Err(e) => e.kind() == io::ErrorKind::NotFound,
    }
}
