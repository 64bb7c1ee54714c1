//! The run's cgroup made as planned: its directories made (and the supervisor moved to a leaf of
//! its own where v2 asks it), the limits written, the run attached, what the limits did read back,
//! and all of it removed at the end.

use super::NAME_PREFIX;
use super::SUPERVISOR_NONCE;
use super::read_bounded;
use super::write_file;
use super::{
    CFS_PERIOD_US, CgroupError, CgroupLimits, CgroupPlan, DirToMake, LimitEvents, LimitKind,
    MadeDir, Place, READ_LIMIT, RunCgroup, Version, check_run_name, describe, plural,
};
use nix::errno::Errno;
use std::fs::{self, DirBuilder};
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Creates the directories and writes the limits; on any error removes what it made. Entries
/// that are Unavailable are skipped (the caller decides whether that is acceptable).
pub fn create(plan: &CgroupPlan) -> Result<RunCgroup, CgroupError> {
    create_with(plan, &|_| Ok(()))
}

/// `populate` runs after each mkdir: on cgroupfs the kernel fills a new directory with its
/// interface files, and a test's fake tree has to stand in for that.
pub(super) fn create_with(
    plan: &CgroupPlan,
    populate: &dyn Fn(&Path) -> io::Result<()>,
) -> Result<RunCgroup, CgroupError> {
    check_run_name(&plan.name).map_err(|why| CgroupError::InvalidName {
        name: plan.name.clone(),
        why,
    })?;
    // Several controllers may share one v1 hierarchy (and so one directory), and all v2
    // limits share one: group the limits by directory, in plan order.
    let mut groups: Vec<DirToMake> = Vec::new();
    for e in &plan.entries {
        let (dir, version, delegate_self) = match &e.place {
            Place::V1 { dir } => (dir, Version::V1, false),
            Place::V2 { dir, delegate_self } => (dir, Version::V2, *delegate_self),
            Place::Unavailable { .. } => continue,
        };
        // The plan's fields are public: never make a directory other than `<own>/<name>`.
        if dir.file_name() != Some(plan.name.as_ref()) || dir.parent().is_none() {
            return Err(CgroupError::OutsideOwn { path: dir.clone() });
        }
        match groups.iter_mut().find(|g| g.dir == *dir) {
            Some(g) => {
                g.delegate_self |= delegate_self;
                g.limits.push((e.limit, e.value));
            }
            None => groups.push(DirToMake {
                dir: dir.clone(),
                version,
                delegate_self,
                limits: vec![(e.limit, e.value)],
            }),
        }
    }
    let mut run = RunCgroup {
        made: Vec::new(),
        supervisor_leaf: None,
    };
    match make_dirs(&mut run, &groups, populate) {
        Ok(()) => Ok(run),
        Err(e) => {
            // Nothing is in the directories yet, so they go at once.
            run.remove_once();
            Err(e)
        }
    }
}

/// Records each directory in `run` as soon as it exists, so that a failure later removes it.
fn make_dirs(
    run: &mut RunCgroup,
    groups: &[DirToMake],
    populate: &dyn Fn(&Path) -> io::Result<()>,
) -> Result<(), CgroupError> {
    for g in groups {
        let kinds: Vec<LimitKind> = g.limits.iter().map(|(k, _)| *k).collect();
        if g.delegate_self {
            let own = g.dir.parent().unwrap_or(&g.dir);
            run.supervisor_leaf = Some(delegate_to_own_leaf(own, &kinds, populate)?);
        }
        make_dir(&g.dir, populate)?;
        run.made.push(MadeDir {
            dir: g.dir.clone(),
            version: g.version,
            kinds,
        });
        for (kind, value) in &g.limits {
            write_limit(&g.dir, g.version, *kind, *value)?;
        }
    }
    Ok(())
}

pub(super) fn make_dir(
    dir: &Path,
    populate: &dyn Fn(&Path) -> io::Result<()>,
) -> Result<(), CgroupError> {
    match DirBuilder::new().mode(0o755).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            // Not ours to reuse or later remove: another run's, or a stale one.
            return Err(CgroupError::AlreadyExists {
                path: dir.to_path_buf(),
            });
        }
        Err(source) => {
            return Err(CgroupError::CreateDir {
                path: dir.to_path_buf(),
                source,
            });
        }
    }
    tracing::debug!(dir = %dir.display(), "cgroup created");
    populate(dir).map_err(|source| CgroupError::CreateDir {
        path: dir.to_path_buf(),
        source,
    })
}

/// v2 case "delegated scope": move the supervisor (the only process of its own cgroup) into a
/// leaf, so that the own cgroup is empty and may enable the controllers for its children.
fn delegate_to_own_leaf(
    own: &Path,
    kinds: &[LimitKind],
    populate: &dyn Fn(&Path) -> io::Result<()>,
) -> Result<PathBuf, CgroupError> {
    let pid = std::process::id();
    let leaf = own.join(format!("{NAME_PREFIX}{pid}-{SUPERVISOR_NONCE}"));
    match make_dir(&leaf, populate) {
        // Ours by name: an earlier run of this supervisor made it.
        Ok(()) | Err(CgroupError::AlreadyExists { .. }) => {}
        Err(e) => return Err(e),
    }
    let procs = leaf.join("cgroup.procs");
    write_file(&procs, &pid.to_string()).map_err(|source| CgroupError::Attach {
        pid,
        path: procs,
        source,
    })?;
    let enable: Vec<String> = kinds
        .iter()
        .map(|k| format!("+{}", k.controller()))
        .collect();
    let enable = enable.join(" ");
    let control = own.join("cgroup.subtree_control");
    if let Err(source) = write_file(&control, &enable) {
        // Back to where the supervisor was, so a failed attempt leaves nothing behind.
        let _ = write_file(&own.join("cgroup.procs"), &pid.to_string());
        let _ = fs::remove_dir(&leaf);
        return Err(CgroupError::Write {
            path: control,
            value: enable,
            source,
        });
    }
    tracing::debug!(leaf = %leaf.display(), controllers = %enable, "supervisor in its v2 leaf");
    Ok(leaf)
}

fn write_limit(
    dir: &Path,
    version: Version,
    kind: LimitKind,
    value: u64,
) -> Result<(), CgroupError> {
    let write = |file: &str, value: String| {
        let path = dir.join(file);
        write_file(&path, &value).map_err(|source| CgroupError::Write {
            path,
            value,
            source,
        })
    };
    let exists = |file: &str| fs::symlink_metadata(dir.join(file)).is_ok();
    match (version, kind) {
        (Version::V1, LimitKind::Memory) => {
            // memsw (memory + swap) must be ≥ limit_in_bytes: the plain limit goes first.
            write("memory.limit_in_bytes", value.to_string())?;
            // Without it, swap is outside the limit and a hog could push the host into swap.
            if exists("memory.memsw.limit_in_bytes") {
                write("memory.memsw.limit_in_bytes", value.to_string())?;
            }
        }
        (Version::V2, LimitKind::Memory) => {
            write("memory.max", value.to_string())?;
            // v2 counts swap separately: left at "max", swap would let a hog escape the
            // memory limit.
            if exists("memory.swap.max") {
                write("memory.swap.max", "0".to_string())?;
            }
        }
        (_, LimitKind::Pids) => write("pids.max", value.to_string())?,
        (Version::V1, LimitKind::Cpu) => {
            write("cpu.cfs_period_us", CFS_PERIOD_US.to_string())?;
            write("cpu.cfs_quota_us", cpu_quota_us(value).to_string())?;
        }
        (Version::V2, LimitKind::Cpu) => {
            write(
                "cpu.max",
                format!("{} {CFS_PERIOD_US}", cpu_quota_us(value)),
            )?;
        }
    }
    Ok(())
}

/// 100% = the whole period of one CPU.
fn cpu_quota_us(percent: u64) -> u64 {
    percent.saturating_mul(CFS_PERIOD_US / 100)
}

impl RunCgroup {
    /// Puts `pid` (and so everything it later forks) in every directory: write to cgroup.procs.
    pub fn attach(&self, pid: u32) -> Result<(), CgroupError> {
        for m in &self.made {
            let path = m.dir.join("cgroup.procs");
            write_file(&path, &pid.to_string()).map_err(|source| CgroupError::Attach {
                pid,
                path,
                source,
            })?;
        }
        Ok(())
    }

    /// What the limits did during the run (read after it). Missing files count 0.
    pub fn events(&self) -> LimitEvents {
        let mut events = LimitEvents::default();
        for m in &self.made {
            let counter = |file: &str, key: &str| counter_in(&m.dir.join(file), key);
            for kind in &m.kinds {
                match (m.version, kind) {
                    // memory.failcnt counts refused charges (reclaimed), not kills.
                    (Version::V1, LimitKind::Memory) => {
                        events.oom_kills += counter("memory.oom_control", "oom_kill");
                    }
                    (Version::V2, LimitKind::Memory) => {
                        events.oom_kills += counter("memory.events", "oom_kill");
                    }
                    (_, LimitKind::Pids) => events.forks_refused += counter("pids.events", "max"),
                    (_, LimitKind::Cpu) => {
                        events.cpu_throttled += counter("cpu.stat", "nr_throttled")
                    }
                }
            }
        }
        events
    }

    /// Removes the directories. rmdir fails with EBUSY while a process (even a zombie being
    /// reaped) is still in one: retries every 1 ms up to `wait` in all, then gives up naming
    /// the directory. The v2 supervisor leaf stays (the supervisor is in it).
    ///
    /// On a fake tree of regular files rmdir fails with ENOTEMPTY and this says so at once;
    /// the tests remove the fake interface files first, which the kernel does on cgroupfs.
    pub fn remove(mut self, wait: Duration) -> Result<(), CgroupError> {
        let made = std::mem::take(&mut self.made);
        let deadline = Instant::now() + wait;
        let mut first_error = None;
        for m in made.iter().rev() {
            if let Err(e) = remove_dir_waiting(&m.dir, deadline, wait) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// The run's directories (not the supervisor's v2 leaf).
    pub fn dirs(&self) -> Vec<PathBuf> {
        self.made.iter().map(|m| m.dir.clone()).collect()
    }

    /// The v2 leaf the supervisor moved itself into for this run, if it did.
    pub fn supervisor_leaf(&self) -> Option<&Path> {
        self.supervisor_leaf.as_deref()
    }

    fn remove_once(&mut self) {
        for m in std::mem::take(&mut self.made).iter().rev() {
            if let Err(e) = fs::remove_dir(&m.dir) {
                tracing::debug!(dir = %m.dir.display(), error = %e, "cgroup left behind");
            }
        }
    }
}

impl Drop for RunCgroup {
    fn drop(&mut self) {
        self.remove_once();
    }
}

fn remove_dir_waiting(dir: &Path, deadline: Instant, wait: Duration) -> Result<(), CgroupError> {
    loop {
        match fs::remove_dir(dir) {
            Ok(()) => {
                tracing::debug!(dir = %dir.display(), "cgroup removed");
                return Ok(());
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.raw_os_error() == Some(Errno::EBUSY as i32) => {
                if Instant::now() >= deadline {
                    return Err(CgroupError::Busy {
                        path: dir.to_path_buf(),
                        waited: wait,
                    });
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(source) => {
                return Err(CgroupError::Remove {
                    path: dir.to_path_buf(),
                    source,
                });
            }
        }
    }
}

/// `<key> <n>` in a flat-keyed interface file; 0 when the file or the key is missing.
fn counter_in(path: &Path, key: &str) -> u64 {
    let Ok(text) = read_bounded(path, READ_LIMIT) else {
        return 0;
    };
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .find(|(k, _)| *k == key)
        .and_then(|(_, n)| n.trim().parse().ok())
        .unwrap_or(0)
}

impl LimitEvents {
    /// Sentences for the status file, audit log and CI summary, only for non-zero counts.
    pub fn sentences(&self, limits: &CgroupLimits) -> Vec<String> {
        let of = |kind: LimitKind| {
            kind.requested(limits)
                .map(|v| format!(" ({})", describe(kind, v)))
                .unwrap_or_default()
        };
        let mut out = Vec::new();
        if self.oom_kills > 0 {
            out.push(format!(
                "{} killed by the memory limit{}",
                plural(self.oom_kills, "process", "processes"),
                of(LimitKind::Memory)
            ));
        }
        if self.forks_refused > 0 {
            out.push(format!(
                "{} refused by the process limit{}",
                plural(self.forks_refused, "fork", "forks"),
                of(LimitKind::Pids)
            ));
        }
        if self.cpu_throttled > 0 {
            out.push(format!(
                "CPU throttled {} by the CPU limit{}",
                plural(self.cpu_throttled, "time", "times"),
                of(LimitKind::Cpu)
            ));
        }
        out
    }
}
