//! The run's cgroup: memory, process and CPU limits for everything the sandbox starts. It is
//! made below the supervisor's own cgroup in each hierarchy (never elsewhere, so an outer limit
//! on the supervisor still holds), planned as data first so that `explain` and `doctor` show
//! where each limit goes or why it cannot, and removed after the run (or by `remove_stale`).

use nix::errno::Errno;
use nix::unistd::{AccessFlags, access};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs::OpenOptions;
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

mod host;
mod made;
mod stale;
use made::{create, make_dir};
pub use stale::remove_stale;

/// The v1 controller that freezes a run's processes while a runbook's evidence command runs.
pub const FREEZER: &str = "freezer";
/// Every directory this module makes starts with it, so that a stale one can be recognised.
const NAME_PREFIX: &str = "stepproof-";
/// The nonce of the v2 leaf the supervisor moves itself into (see [`Place::V2`]).
const SUPERVISOR_NONCE: &str = "supervisor";
/// The CFS period; the quota is a share of it (100% = one CPU = the whole period).
const CFS_PERIOD_US: u64 = 100_000;
/// Interface files are small; a bound keeps a huge `cgroup.procs` from being read whole.
const READ_LIMIT: u64 = 64 * 1024;
/// mountinfo of a host with thousands of mounts is still far below this.
const PROC_READ_LIMIT: u64 = 8 << 20;

/// The limits a profile asks for (all optional; None = no limit of that kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct CgroupLimits {
    /// Bytes of memory (and swap) of the whole run.
    pub memory: Option<u64>,
    /// Processes and threads of the whole run.
    pub pids: Option<u64>,
    /// CPU time as a share of one CPU: 100 = one CPU, 200 = two.
    pub cpu_percent: Option<u32>,
}

/// One kind of limit, named after its controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LimitKind {
    Memory,
    Pids,
    Cpu,
}

impl LimitKind {
    /// In the order the plan lists them.
    pub const ALL: [LimitKind; 3] = [LimitKind::Memory, LimitKind::Pids, LimitKind::Cpu];

    /// The cgroup controller that enforces it (the same name in v1 and v2).
    pub fn controller(self) -> &'static str {
        match self {
            LimitKind::Memory => "memory",
            LimitKind::Pids => "pids",
            LimitKind::Cpu => "cpu",
        }
    }

    fn requested(self, limits: &CgroupLimits) -> Option<u64> {
        match self {
            LimitKind::Memory => limits.memory,
            LimitKind::Pids => limits.pids,
            LimitKind::Cpu => limits.cpu_percent.map(u64::from),
        }
    }
}

impl fmt::Display for LimitKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.controller())
    }
}

/// One mounted hierarchy as the supervisor sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Hierarchy {
    /// Where the hierarchy is mounted.
    pub mount: PathBuf,
    /// The supervisor's own cgroup in it, as a directory on disk: the run's cgroup goes below.
    pub own_dir: PathBuf,
}

/// What the host offers, discovered once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CgroupHost {
    /// cgroup v1: controller (`memory`, `pids`, `cpu`) → its hierarchy; only those mounted.
    pub v1: BTreeMap<String, Hierarchy>,
    /// The cgroup v2 hierarchy, when mounted and the supervisor's place in it is known.
    pub v2: Option<Hierarchy>,
    /// The supervisor's pid (names the run's cgroups; the only process allowed in a v2 own
    /// cgroup that is to be delegated).
    pub own_pid: u32,
}

/// A cgroup mount from mountinfo.
struct CgroupMount {
    v2: bool,
    /// The path within the hierarchy that is mounted (not `/` inside a cgroup namespace or a
    /// container that bind-mounts its own subtree).
    root: PathBuf,
    mount: PathBuf,
    /// The super options: for v1 they name the controllers.
    controllers: BTreeSet<String>,
}

/// Where each limit will be enforced, or why it cannot be: pure data, shown by `stepproof
/// explain` and `stepproof doctor`, unit-tested as values.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CgroupPlan {
    pub limits: CgroupLimits,
    pub name: String,
    /// One per limit set in `limits`, in the order memory, pids, cpu.
    pub entries: Vec<PlannedLimit>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlannedLimit {
    pub limit: LimitKind,
    /// Bytes, processes, or percent of one CPU.
    pub value: u64,
    pub place: Place,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Place {
    /// A cgroup v1 directory of the controller's hierarchy.
    V1 {
        dir: PathBuf,
    },
    /// The cgroup v2 directory. `delegate_self`: the controller is not enabled below the own
    /// cgroup yet, and the supervisor is its only process, so the supervisor first moves itself
    /// into a leaf `stepproof-<pid>-supervisor` beside the run's cgroup (v2 allows controllers
    /// to be enabled only in a cgroup without processes) and then enables them.
    V2 {
        dir: PathBuf,
        delegate_self: bool,
    },
    Unavailable {
        reason: String,
    },
}

impl CgroupPlan {
    /// The limits that cannot be enforced, with reasons.
    pub fn unavailable(&self) -> Vec<(LimitKind, &str)> {
        self.entries
            .iter()
            .filter_map(|e| match &e.place {
                Place::Unavailable { reason } => Some((e.limit, reason.as_str())),
                _ => None,
            })
            .collect()
    }
}

/// Decides, for each limit set in `limits`, where it goes. Checks writability of the parent
/// (the own cgroup dir) with access(2) W_OK semantics and the v2 rules; creates nothing.
pub fn plan(host: &CgroupHost, limits: &CgroupLimits, name: &str) -> CgroupPlan {
    let requested: Vec<(LimitKind, u64)> = LimitKind::ALL
        .iter()
        .filter_map(|k| k.requested(limits).map(|v| (*k, v)))
        .collect();
    let mut places: BTreeMap<LimitKind, Place> = BTreeMap::new();
    let v2 = host.v2.as_ref().map(V2Own::read);
    let mut for_v2 = Vec::new();
    for &(kind, value) in &requested {
        let place = if let Err(why) = check_run_name(name) {
            unavailable(format!("the cgroup name {name:?} is not valid: {why}"))
        } else if value == 0 {
            unavailable(format!(
                "a {kind} limit of 0 cannot be enforced: nothing could run under it"
            ))
        } else if v2
            .as_ref()
            .is_some_and(|v| v.controllers.contains(kind.controller()))
        {
            // Listed in cgroup.controllers is the kernel's word that v2 has it; on a hybrid
            // host a controller bound to a v1 hierarchy is never listed there.
            for_v2.push(kind);
            continue;
        } else if let Some(h) = host.v1.get(kind.controller()) {
            place_v1(h, kind, name)
        } else {
            unavailable(not_offered(kind, host))
        };
        places.insert(kind, place);
    }
    if let (Some(h), Some(v2)) = (&host.v2, &v2)
        && !for_v2.is_empty()
    {
        places.extend(place_v2(h, v2, &for_v2, name, host.own_pid));
    }
    let entries = requested
        .into_iter()
        .map(|(limit, value)| PlannedLimit {
            limit,
            value,
            place: places
                .remove(&limit)
                .unwrap_or_else(|| unavailable("not planned".to_string())),
        })
        .collect();
    CgroupPlan {
        limits: *limits,
        name: name.to_string(),
        entries,
    }
}

fn unavailable(reason: String) -> Place {
    Place::Unavailable { reason }
}

fn not_offered(kind: LimitKind, host: &CgroupHost) -> String {
    let c = kind.controller();
    match &host.v2 {
        Some(h) => format!(
            "no cgroup hierarchy offers the {c} controller: it is not mounted as cgroup v1 and \
             not listed in {}",
            h.own_dir.join("cgroup.controllers").display()
        ),
        None => format!(
            "no cgroup hierarchy offers the {c} controller: it is not mounted as cgroup v1 and \
             there is no cgroup v2 hierarchy"
        ),
    }
}

fn place_v1(h: &Hierarchy, kind: LimitKind, name: &str) -> Place {
    match can_create_in(&h.own_dir) {
        Ok(()) => Place::V1 {
            dir: h.own_dir.join(name),
        },
        Err(e) => unavailable(format!(
            "cannot create a cgroup in {} (the supervisor's own {} cgroup): {e}; run as root or \
             give the supervisor's user that cgroup",
            h.own_dir.display(),
            kind.controller()
        )),
    }
}

/// What the own v2 cgroup says about itself.
struct V2Own {
    controllers: BTreeSet<String>,
    subtree_control: BTreeSet<String>,
    /// `None` when unreadable (and then treated as holding others).
    procs: Option<Vec<String>>,
}

impl V2Own {
    fn read(h: &Hierarchy) -> V2Own {
        let words = |file: &str| -> BTreeSet<String> {
            read_bounded(&h.own_dir.join(file), READ_LIMIT)
                .map(|t| t.split_whitespace().map(str::to_string).collect())
                .unwrap_or_default()
        };
        V2Own {
            controllers: words("cgroup.controllers"),
            subtree_control: words("cgroup.subtree_control"),
            procs: read_bounded(&h.own_dir.join("cgroup.procs"), READ_LIMIT)
                .ok()
                .map(|t| t.split_whitespace().map(str::to_string).collect()),
        }
    }
}

fn place_v2(
    h: &Hierarchy,
    own: &V2Own,
    kinds: &[LimitKind],
    name: &str,
    own_pid: u32,
) -> Vec<(LimitKind, Place)> {
    let dir = h.own_dir.join(name);
    let all = |place: Place| kinds.iter().map(|k| (*k, place.clone())).collect();
    if let Err(e) = can_create_in(&h.own_dir) {
        return all(unavailable(format!(
            "cannot create a cgroup in {} (the supervisor's own cgroup v2): {e}; start \
             stepproof-run in a delegated scope, e.g. `systemd-run --user --scope -p \
             Delegate=yes stepproof-run …`",
            h.own_dir.display()
        )));
    }
    let enabled = |k: &LimitKind| own.subtree_control.contains(k.controller());
    if kinds.iter().all(enabled) {
        return all(Place::V2 {
            dir,
            delegate_self: false,
        });
    }
    let pid = own_pid.to_string();
    // Empty counts too: the supervisor already sits in its leaf from an earlier attempt.
    let only_self = own
        .procs
        .as_ref()
        .is_some_and(|p| p.iter().all(|p| *p == pid));
    let writable = |file: &str| access(&h.own_dir.join(file), AccessFlags::W_OK);
    let refusal = if !only_self {
        format!(
            "the own cgroup {} holds other processes, so no controller can be enabled below \
             it; start stepproof-run in a delegated scope, e.g. `systemd-run --user --scope -p \
             Delegate=yes stepproof-run …`",
            h.own_dir.display()
        )
    } else if let Err(e) = writable("cgroup.subtree_control").and(writable("cgroup.procs")) {
        format!(
            "cannot enable controllers below the own cgroup {}: {e}; start stepproof-run in a \
             delegated scope, e.g. `systemd-run --user --scope -p Delegate=yes stepproof-run …`",
            h.own_dir.display()
        )
    } else {
        return all(Place::V2 {
            dir,
            delegate_self: true,
        });
    };
    // What is already enabled still works without moving anything.
    kinds
        .iter()
        .map(|k| {
            let place = if enabled(k) {
                Place::V2 {
                    dir: dir.clone(),
                    delegate_self: false,
                }
            } else {
                unavailable(refusal.clone())
            };
            (*k, place)
        })
        .collect()
}

/// mkdir needs write and search permission on the parent.
fn can_create_in(dir: &Path) -> Result<(), Errno> {
    access(dir, AccessFlags::W_OK | AccessFlags::X_OK)
}

/// `stepproof-<pid>-<nonce>` → (pid, nonce); the nonce is letters and digits only, so the name
/// is one path component that cannot be `.` or `..`.
fn parse_name(name: &str) -> Option<(u32, &str)> {
    let (pid, nonce) = name.strip_prefix(NAME_PREFIX)?.split_once('-')?;
    if pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if nonce.is_empty() || !nonce.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return None;
    }
    let pid: u32 = pid.parse().ok()?;
    (pid > 0 && i32::try_from(pid).is_ok()).then_some((pid, nonce))
}

fn check_run_name(name: &str) -> Result<(), &'static str> {
    match parse_name(name) {
        None => Err("expected stepproof-<pid>-<nonce>, the nonce letters and digits"),
        Some((_, SUPERVISOR_NONCE)) => Err("that name is the supervisor's own v2 leaf"),
        Some(_) => Ok(()),
    }
}

/// Human wording of a limit value: memory as "8 GiB"/"512 MiB", pids as "4096 processes", cpu
/// as "200% CPU (2 CPUs)".
pub fn describe(kind: LimitKind, value: u64) -> String {
    match kind {
        LimitKind::Memory => describe_bytes(value),
        LimitKind::Pids => plural(value, "process", "processes"),
        LimitKind::Cpu => {
            let cpus = if value.is_multiple_of(100) {
                (value / 100).to_string()
            } else {
                let s = format!("{}.{:02}", value / 100, value % 100);
                s.trim_end_matches('0').to_string()
            };
            let unit = if value == 100 { "CPU" } else { "CPUs" };
            format!("{value}% CPU ({cpus} {unit})")
        }
    }
}

/// A size in the largest binary unit it is a whole number of: "8 GiB", "512 MiB", "3 bytes".
pub fn describe_bytes(value: u64) -> String {
    const UNITS: [(u32, &str); 4] = [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")];
    UNITS
        .iter()
        .find(|(shift, _)| value != 0 && value.is_multiple_of(1u64 << shift))
        .map(|(shift, unit)| format!("{} {unit}", value >> shift))
        .unwrap_or_else(|| plural(value, "byte", "bytes"))
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

impl CgroupPlan {
    /// One line a limit, in words: `memory 8 GiB: cgroup v1 /sys/fs/cgroup/memory/…`.
    pub fn lines(&self) -> Vec<String> {
        self.entries
            .iter()
            .map(|e| {
                format!(
                    "{} {}: {}",
                    e.limit,
                    describe(e.limit, e.value),
                    e.place.words()
                )
            })
            .collect()
    }
}

impl Place {
    /// Where, in words: `cgroup v1 /sys/fs/cgroup/…`, or `NOT enforceable here: why`.
    pub fn words(&self) -> String {
        match self {
            Place::V1 { dir } => format!("cgroup v1 {}", dir.display()),
            Place::V2 { dir, .. } => format!("cgroup v2 {}", dir.display()),
            Place::Unavailable { reason } => format!("NOT enforceable here: {reason}"),
        }
    }
}

impl From<&crate::sandbox::rlimits::CgroupRequest> for CgroupLimits {
    fn from(request: &crate::sandbox::rlimits::CgroupRequest) -> CgroupLimits {
        CgroupLimits {
            memory: request.memory,
            pids: request.pids,
            cpu_percent: request.cpu_percent,
        }
    }
}

/// Whether the profile named this limit (a named limit is required; a default one is not).
pub fn is_named(request: &crate::sandbox::rlimits::CgroupRequest, kind: LimitKind) -> bool {
    match kind {
        LimitKind::Memory => request.memory_named,
        LimitKind::Pids => request.pids_named,
        // There is no default CPU quota: one in the plan was named.
        LimitKind::Cpu => true,
    }
}

/// The run's limits as the profile asks, checked against what this host can do.
pub struct RunLimits {
    pub plan: CgroupPlan,
    /// Limits left to their defaults that this host cannot enforce, in words (recorded).
    pub dropped: Vec<String>,
    /// Stale cgroups of earlier runs removed on the way.
    pub removed_stale: Vec<PathBuf>,
    /// The created cgroup (none when nothing could be enforced and no freezer was asked for).
    pub cgroup: Option<RunCgroup>,
    /// A freezer was asked for (a runbook run) and the run has none: why.
    pub no_freezer: Option<String>,
}

/// Gives the run a cgroup its processes can be frozen in: its v2 directory when it has one
/// (`cgroup.freeze`), otherwise `<own freezer cgroup>/<name>` in the v1 freezer hierarchy
/// (`freezer.state`), made here without limits. Says why not when the host cannot.
pub fn add_freezer(
    host: &CgroupHost,
    name: &str,
    cgroup: &mut Option<RunCgroup>,
) -> Result<PathBuf, String> {
    if let Some(v2) = cgroup
        .as_ref()
        .and_then(|c| c.made.iter().find(|m| m.version == Version::V2))
    {
        return Ok(v2.dir.clone());
    }
    let Some(h) = host.v1.get(FREEZER) else {
        return Err(
            "this host mounts no cgroup v1 freezer hierarchy and the run has no cgroup v2 \
             directory (no limit asked for one)"
                .into(),
        );
    };
    check_run_name(name).map_err(|why| format!("creating a cgroup named {name:?}: {why}"))?;
    let dir = h.own_dir.join(name);
    if let Some(m) = cgroup
        .as_ref()
        .and_then(|c| c.made.iter().find(|m| m.dir == dir))
    {
        return Ok(m.dir.clone());
    }
    can_create_in(&h.own_dir).map_err(|e| {
        format!(
            "cannot create a cgroup in {} (the supervisor's own freezer cgroup): {e}",
            h.own_dir.display()
        )
    })?;
    make_dir(&dir, &|_| Ok(())).map_err(|e| e.to_string())?;
    let run = cgroup.get_or_insert_with(|| RunCgroup {
        made: Vec::new(),
        supervisor_leaf: None,
    });
    run.made.push(MadeDir {
        dir: dir.clone(),
        version: Version::V1,
        kinds: Vec::new(),
    });
    Ok(dir)
}

/// Plans and creates the run's cgroup. A limit the profile names is required: under
/// `assurance = "strict"` a host that cannot enforce it stops the launch (the error says why);
/// otherwise, and for limits left to their defaults, what cannot be enforced is recorded as
/// dropped and the run goes on.
pub fn prepare(
    request: &crate::sandbox::rlimits::CgroupRequest,
    strict: bool,
    proc: &Path,
    nonce: &str,
    freezer: bool,
) -> Result<RunLimits, String> {
    let limits = CgroupLimits::from(request);
    if limits == CgroupLimits::default() && !freezer {
        // Nothing asked (an interactive run on the defaults): no cgroup, nothing to look at.
        return Ok(RunLimits {
            plan: CgroupPlan {
                limits,
                name: String::new(),
                entries: Vec::new(),
            },
            dropped: Vec::new(),
            removed_stale: Vec::new(),
            cgroup: None,
            no_freezer: None,
        });
    }
    let host = CgroupHost::discover(proc);
    let removed_stale = remove_stale(&host);
    let plan = plan(&host, &limits, &host.run_name(nonce));
    let named = |kind: LimitKind| is_named(request, kind);
    let value_of = |kind: LimitKind| {
        plan.entries
            .iter()
            .find(|e| e.limit == kind)
            .map_or(0, |e| e.value)
    };
    let mut dropped = Vec::new();
    for (kind, reason) in plan.unavailable() {
        let what = format!(
            "the {kind} limit ({}) cannot be enforced here: {reason}",
            describe(kind, value_of(kind))
        );
        if named(kind) && strict {
            return Err(format!(
                "{what}; the profile requires it (process.limits.{}) and its assurance is \"strict\" (run `stepproof doctor`)",
                match kind {
                    LimitKind::Memory => "memory",
                    LimitKind::Pids => "pids",
                    LimitKind::Cpu => "cpu_quota",
                }
            ));
        }
        dropped.push(what);
    }
    let enforceable = plan
        .entries
        .iter()
        .any(|e| !matches!(e.place, Place::Unavailable { .. }));
    let cgroup = if enforceable {
        match create(&plan) {
            Ok(cgroup) => Some(cgroup),
            Err(e) => {
                let required = plan
                    .entries
                    .iter()
                    .any(|e| named(e.limit) && !matches!(e.place, Place::Unavailable { .. }));
                if required && strict {
                    return Err(format!("{e} (the profile requires its limits)"));
                }
                dropped.push(format!("no limit could be set up: {e}"));
                None
            }
        }
    } else {
        None
    };
    let mut cgroup = cgroup;
    let no_freezer = if freezer {
        add_freezer(&host, &plan.name, &mut cgroup).err()
    } else {
        None
    };
    Ok(RunLimits {
        plan,
        dropped,
        removed_stale,
        cgroup,
        no_freezer,
    })
}

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("creating a cgroup named {name:?}: {why}")]
    InvalidName { name: String, why: &'static str },
    #[error("creating the cgroup {path}: the plan puts it outside the own cgroup")]
    OutsideOwn { path: PathBuf },
    #[error(
        "creating the cgroup {path}: it already exists (a stale run's? `stepproof doctor` \
         removes stale ones)"
    )]
    AlreadyExists { path: PathBuf },
    #[error("creating the cgroup {path}: {source}")]
    CreateDir { path: PathBuf, source: io::Error },
    #[error("writing {value:?} to {path}: {source}")]
    Write {
        path: PathBuf,
        value: String,
        source: io::Error,
    },
    #[error("moving process {pid} into the cgroup (writing {path}): {source}")]
    Attach {
        pid: u32,
        path: PathBuf,
        source: io::Error,
    },
    #[error("removing the cgroup {path}: {source}")]
    Remove { path: PathBuf, source: io::Error },
    #[error("removing the cgroup {path}: a process was still in it after {waited:?}")]
    Busy { path: PathBuf, waited: Duration },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    V1,
    V2,
}

/// One directory made for the run and the limits it carries.
#[derive(Debug)]
struct MadeDir {
    dir: PathBuf,
    version: Version,
    kinds: Vec<LimitKind>,
}

/// The created cgroups of one run. Dropped without [`RunCgroup::remove`], it still tries once
/// to remove its directories (which fails harmlessly while a process is in one).
#[derive(Debug)]
pub struct RunCgroup {
    /// In the order made; removed in reverse.
    made: Vec<MadeDir>,
    /// The v2 leaf the supervisor moved itself into, if it did. Never removed here: the
    /// supervisor stays in it until it exits; `remove_stale` takes it afterwards.
    supervisor_leaf: Option<PathBuf>,
}

/// One directory of the run and the limits written into it.
struct DirToMake {
    dir: PathBuf,
    version: Version,
    delegate_self: bool,
    limits: Vec<(LimitKind, u64)>,
}

/// What the limits did during a run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LimitEvents {
    /// Processes the OOM killer took because of the memory limit.
    pub oom_kills: u64,
    /// fork/clone calls refused by the process limit.
    pub forks_refused: u64,
    /// CFS periods in which the run was throttled by the CPU limit.
    pub cpu_throttled: u64,
}

/// cgroupfs has no links; one in a path here was put there, and is not followed.
const OPEN_FLAGS: i32 = nix::libc::O_NOFOLLOW;

/// One write(2) with the whole value: cgroupfs parses each write on its own.
fn write_file(path: &Path, value: &str) -> io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .truncate(true)
        .custom_flags(OPEN_FLAGS)
        .open(path)?;
    file.write_all(value.as_bytes())
}

fn read_bounded(path: &Path, limit: u64) -> io::Result<String> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(OPEN_FLAGS)
        .open(path)?;
    let mut text = String::new();
    Read::take(file, limit).read_to_string(&mut text)?;
    Ok(text)
}

#[cfg(test)]
mod tests;
