//! `stepproof doctor`: which kernel features this machine offers, and whether the default
//! profile can be enforced here.

use crate::sys::{self, ParentOnlyFds};
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::Pid;
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub feature: &'static str,
    pub available: bool,
    pub required_by_default: bool,
    pub detail: String,
}

/// Clones a child into `flags` namespaces; the child exits at once. Reports the errno on failure.
fn can_clone(flags: libc::c_int) -> Result<(), std::io::Error> {
    let child = sys::clone_with_namespaces(flags, ParentOnlyFds::none(), || 0)?;
    match waitpid(Pid::from_raw(child), None) {
        Ok(WaitStatus::Exited(_, 0)) => Ok(()),
        other => Err(std::io::Error::other(format!(
            "probe child ended with {other:?}"
        ))),
    }
}

/// Whether overlayfs lays a tmpfs upper layer over a directory inside a new user namespace, as
/// `workspace = "overlay"` (`strict`) does: a child maps itself to its own uid, mounts a tmpfs
/// in a private mount namespace, and writes and removes a file through the overlay (a copy-up
/// and a whiteout). Reports the errno of the step that failed.
fn overlay_in_user_namespace() -> Result<(), std::io::Error> {
    let (uid, gid) = (nix::unistd::getuid(), nix::unistd::getgid());
    let child = sys::clone_with_namespaces(
        libc::CLONE_NEWUSER | libc::CLONE_NEWNS,
        ParentOnlyFds::none(),
        move || match write_through_overlay(uid.as_raw(), gid.as_raw()) {
            Ok(()) => 0,
            Err(e) => e.raw_os_error().unwrap_or(libc::EIO).clamp(1, 255),
        },
    )?;
    match waitpid(Pid::from_raw(child), None) {
        Ok(WaitStatus::Exited(_, 0)) => Ok(()),
        Ok(WaitStatus::Exited(_, errno)) => Err(std::io::Error::from_raw_os_error(errno)),
        other => Err(std::io::Error::other(format!(
            "probe child ended with {other:?}"
        ))),
    }
}

/// The child's part of [`overlay_in_user_namespace`].
fn write_through_overlay(uid: u32, gid: u32) -> Result<(), std::io::Error> {
    use nix::mount::{MsFlags, mount};
    use std::fs;
    fs::write("/proc/self/setgroups", "deny")?;
    fs::write("/proc/self/uid_map", format!("0 {uid} 1"))?;
    fs::write("/proc/self/gid_map", format!("0 {gid} 1"))?;
    let none = None::<&str>;
    mount(none, "/", none, MsFlags::MS_REC | MsFlags::MS_PRIVATE, none)?;
    mount(
        Some("tmpfs"),
        "/tmp",
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("size=1m"),
    )?;
    for dir in ["lower", "upper", "work", "merged"] {
        fs::create_dir(std::path::Path::new("/tmp").join(dir))?;
    }
    fs::write("/tmp/lower/file", "lower")?;
    mount(
        Some("overlay"),
        "/tmp/merged",
        Some("overlay"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("lowerdir=/tmp/lower,upperdir=/tmp/upper,workdir=/tmp/work,userxattr"),
    )?;
    fs::write("/tmp/merged/file", "upper")?;
    fs::remove_file("/tmp/merged/file")?;
    Ok(())
}

fn read_sysctl(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// Whether this process can create a user namespace, and in words why not: the kernel's error
/// and the settings that decide it (a container's runtime or the host may refuse them). A run on
/// the Landlock + seccomp-only tier records this in its first record.
pub fn user_namespace_check() -> (bool, String) {
    let userns = can_clone(libc::CLONE_NEWUSER);
    let mut userns_detail = match &userns {
        Ok(()) => "a user namespace can be created".to_string(),
        Err(e) => format!("cannot create a user namespace: {e}"),
    };
    if userns.is_err() {
        if let Some(v) = read_sysctl("/proc/sys/user/max_user_namespaces") {
            userns_detail.push_str(&format!("; user.max_user_namespaces = {v}"));
        }
        if let Some(v) = read_sysctl("/proc/sys/kernel/unprivileged_userns_clone") {
            userns_detail.push_str(&format!("; kernel.unprivileged_userns_clone = {v}"));
        }
        if let Some(v) = read_sysctl("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") {
            userns_detail.push_str(&format!(
                "; kernel.apparmor_restrict_unprivileged_userns = {v} (Ubuntu 24.04+: set it to 0, or give stepproof-run an AppArmor profile with `userns`)"
            ));
        }
    }
    (userns.is_ok(), userns_detail)
}

pub fn run_checks() -> Vec<Check> {
    let mut checks = Vec::new();
    let (userns_ok, userns_detail) = user_namespace_check();
    checks.push(Check {
        feature: "user namespaces",
        available: userns_ok,
        required_by_default: true,
        detail: userns_detail,
    });
    let all = libc::CLONE_NEWUSER
        | libc::CLONE_NEWNS
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWUTS
        | libc::CLONE_NEWCGROUP;
    let full = can_clone(all);
    checks.push(Check {
        feature: "mount, pid, ipc, uts, cgroup namespaces",
        available: full.is_ok(),
        required_by_default: true,
        detail: match full {
            Ok(()) => "all can be created inside a new user namespace".into(),
            Err(e) => format!("cannot be created: {e}"),
        },
    });
    let net = can_clone(libc::CLONE_NEWUSER | libc::CLONE_NEWNET);
    checks.push(Check {
        feature: "network namespaces",
        available: net.is_ok(),
        required_by_default: true,
        detail: match net {
            Ok(()) => "a network namespace can be created".into(),
            Err(e) => format!("cannot be created: {e}"),
        },
    });
    let landlock = sys::kernel::landlock_abi_version().and_then(|abi| {
        if abi > 0 {
            Ok(abi)
        } else {
            Err(std::io::Error::from_raw_os_error(libc::EOPNOTSUPP))
        }
    });
    checks.push(Check {
        feature: "Landlock (ABI >= 6 for assurance = \"strict\")",
        available: landlock.as_ref().is_ok_and(|abi| *abi >= 6),
        required_by_default: true,
        detail: match landlock {
            Ok(abi) if abi >= 6 => format!("ABI {abi}: every filesystem right of it, signal and abstract-socket scopes"),
            Ok(abi) => format!(
                "ABI {abi} only: the scopes need ABI 6 (Linux 6.12); a profile with assurance = \"best-effort\" runs with what exists"
            ),
            Err(e) => format!("unavailable: {e} (needs Linux 5.13+ with `lsm=landlock,…` on the kernel command line)"),
        },
    });
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let (available, detail) = seccomp_in_words(&status);
    checks.push(Check {
        feature: "seccomp",
        available,
        required_by_default: true,
        detail,
    });
    let uid = nix::unistd::getuid().as_raw();
    let (idmap_ok, idmap_detail) = if uid == 0 {
        let dir = std::env::temp_dir();
        let ok = crate::supervisor::launch::start::idmapped_mounts_work(&dir);
        let cwd_ok = std::env::current_dir()
            .map(|d| crate::supervisor::launch::start::idmapped_mounts_work(&d))
            .unwrap_or(false);
        (
            ok && cwd_ok,
            format!(
                "{} (here: {}, {}: {}); needed because root runs the command as an unprivileged uid",
                if ok && cwd_ok { "work" } else { "do NOT work" },
                if cwd_ok { "yes" } else { "no" },
                dir.display(),
                if ok { "yes" } else { "no" }
            ),
        )
    } else {
        (true, "not needed: the command runs as your own uid".into())
    };
    // The run's cgroup, for the default limits (and a CPU quota, which profiles may add).
    let host =
        crate::supervisor::launch::cgroup::CgroupHost::discover(std::path::Path::new("/proc"));
    // Cgroups left by supervisors that were killed (a later run with limits removes them too).
    for stale in crate::supervisor::launch::cgroup::remove_stale(&host) {
        crate::say!("removed a stale cgroup: {}", stale.display());
    }
    let request = crate::sandbox::rlimits::Limits::default().cgroup(true);
    let limits = crate::supervisor::launch::cgroup::CgroupLimits {
        cpu_percent: Some(100),
        ..crate::supervisor::launch::cgroup::CgroupLimits::from(&request)
    };
    let plan = crate::supervisor::launch::cgroup::plan(&host, &limits, &host.run_name("doctor"));
    for entry in &plan.entries {
        use crate::supervisor::launch::cgroup::{LimitKind, Place, describe};
        let (available, place) = match &entry.place {
            Place::V1 { dir } => (true, format!("cgroup v1, below {}", parent(dir))),
            Place::V2 { dir, delegate_self } => (
                true,
                format!(
                    "cgroup v2, below {}{}",
                    parent(dir),
                    if *delegate_self {
                        " (StepProof moves itself into a leaf of its delegated cgroup)"
                    } else {
                        ""
                    }
                ),
            ),
            Place::Unavailable { reason } => (false, reason.clone()),
        };
        let value = match entry.limit {
            LimitKind::Cpu => "a CPU quota (process.limits.cpu_quota)".to_string(),
            kind => format!("the default {} (--ci runs)", describe(kind, entry.value)),
        };
        checks.push(Check {
            feature: match entry.limit {
                LimitKind::Memory => "cgroup memory limit",
                LimitKind::Pids => "cgroup process limit",
                LimitKind::Cpu => "cgroup CPU quota",
            },
            available,
            // Defaults are applied where the host can; a profile that names one requires it.
            required_by_default: false,
            detail: format!("{value}: {place}"),
        });
    }
    let overlay = overlay_in_user_namespace();
    let overlay_works = overlay.as_ref().map(drop).map_err(|e| e.to_string());
    checks.push(Check {
        feature: "workspace overlay (filesystem.workspace = \"overlay\", strict)",
        available: overlay.is_ok(),
        required_by_default: false,
        detail: match overlay {
            Ok(()) => "overlayfs with a tmpfs upper layer works in a user namespace".into(),
            Err(e) => format!(
                "overlayfs with a tmpfs upper layer does not work in a user namespace here ({e}); needs Linux 6.6 or later: a profile with workspace = \"overlay\" stops with exit 125, use \"read-only\""
            ),
        },
    });
    // Git layers: the current directory as the workspace would be, the state's run directories.
    let layers = std::env::current_dir()
        .map_err(|e| format!("the current directory: {e}"))
        .and_then(|cwd| {
            let home = crate::cli::host::caller_home(nix::unistd::getuid().as_raw());
            crate::sandbox::plan::namespaces::layer_file_systems(
                &cwd,
                &crate::audit::owed::runs_dir(&home),
            )
        })
        .and_then(|()| overlay_works.map_err(|e| format!("overlayfs in a user namespace: {e}")));
    checks.push(Check {
        feature: "git layers (a writable workspace's repositories seen through an overlay)",
        available: layers.is_ok(),
        required_by_default: false,
        detail: match layers {
            Ok(()) => "the workspace and the run directories are on file systems that hold git layers, and overlayfs works in a user namespace: the host's git never reads what a run writes in .git".into(),
            Err(why) => format!(
                "{why}: runs here write the repositories' .git in place (the host's git sees what a run writes there until its end, or until `stepproof repair` after a kill)"
            ),
        },
    });
    checks.push(Check {
        feature: "idmapped mounts",
        available: idmap_ok,
        required_by_default: uid == 0,
        detail: idmap_detail,
    });
    checks
}

fn parent(dir: &std::path::Path) -> String {
    dir.parent().unwrap_or(dir).display().to_string()
}

/// True when every feature the default profile needs is present.
pub fn default_profile_enforceable(checks: &[Check]) -> bool {
    checks.iter().all(|c| c.available || !c.required_by_default)
}

/// A run whose supervisor died before its end, as `doctor` lists it.
#[derive(Debug, Clone, Serialize)]
pub struct WorkOwed {
    pub run_dir: String,
    pub workspace: Option<String>,
    /// What happened and what to run.
    pub what: String,
}

/// The caller's runs that owe their end (see [`crate::audit::owed`]).
pub fn work_owed() -> Vec<WorkOwed> {
    let home = crate::cli::host::caller_home(nix::unistd::getuid().as_raw());
    crate::audit::runs::owed_runs(&crate::audit::owed::runs_dir(&home))
        .iter()
        .map(|o| WorkOwed {
            run_dir: crate::audit::text::path(&o.run_dir).into_owned(),
            workspace: o
                .header
                .as_ref()
                .ok()
                .map(|h| crate::audit::text::path(&h.workspace).into_owned()),
            what: o.describe(),
        })
        .collect()
}

/// What `/proc/self/status` says of seccomp, in words: whether StepProof can install its
/// filter here (the kernel has seccomp, and this process is not in strict mode).
fn seccomp_in_words(status: &str) -> (bool, String) {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().to_string())
    };
    match field("Seccomp:").as_deref() {
        None => (
            false,
            "the kernel was built without seccomp (CONFIG_SECCOMP): StepProof cannot filter system calls here".into(),
        ),
        Some("0") => (
            true,
            "the kernel filters system calls; this process runs unfiltered, so StepProof installs its own filter".into(),
        ),
        Some("2") => {
            let filters = field("Seccomp_filters:").unwrap_or_else(|| "some".into());
            (
                true,
                format!(
                    "the kernel filters system calls; this process already runs under {filters} filter(s) (a container's or a parent sandbox's): StepProof adds its own on top, and the strictest answer wins"
                ),
            )
        }
        Some("1") => (
            false,
            "this process runs in seccomp strict mode (only read, write, exit): nothing can be started here".into(),
        ),
        Some(other) => (
            false,
            format!("seccomp reports a mode this version does not know ({other})"),
        ),
    }
}

#[cfg(test)]
mod seccomp_words {
    use super::seccomp_in_words;

    #[test]
    fn each_mode_is_said_in_words() {
        assert!(
            seccomp_in_words("Name:\tx\nSeccomp:\t0\n")
                .1
                .contains("runs unfiltered")
        );
        let (ok, said) = seccomp_in_words("Seccomp:\t2\nSeccomp_filters:\t3\n");
        assert!(ok && said.contains("3 filter(s)"), "{said}");
        assert!(!seccomp_in_words("Seccomp:\t1\n").0);
        assert!(!seccomp_in_words("Name:\tx\n").0);
        for status in ["Seccomp:\t0\n", "Seccomp:\t2\n", "Seccomp:\t1\n", ""] {
            assert!(!seccomp_in_words(status).1.contains('\t'));
        }
    }
}
