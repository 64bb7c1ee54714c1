//! The run's cgroup: memory, process and CPU limits for everything the sandbox starts. It is
//! made below the supervisor's own cgroup in each hierarchy (never elsewhere, so an outer limit
//! on the supervisor still holds), planned as data first so that `explain` and `doctor` show
//! where each limit goes or why it cannot, and removed after the run (or by `remove_stale`).

use nix::errno::Errno;
use nix::sys::signal::kill;
use nix::unistd::{AccessFlags, Pid, access};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::fmt;
use std::fs::{self, DirBuilder, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

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

impl CgroupHost {
    /// Reads `<proc>/self/cgroup` and `<proc>/self/mountinfo` (proc = "/proc" in production).
    /// Never fails: what cannot be read is simply absent.
    pub fn discover(proc: &Path) -> CgroupHost {
        let read = |name: &str| {
            read_bounded(&proc.join("self").join(name), PROC_READ_LIMIT).unwrap_or_default()
        };
        CgroupHost::from_texts(&read("cgroup"), &read("mountinfo"), std::process::id())
    }

    /// For tests: the same from given file contents, with the mount points taken as is.
    pub fn from_texts(self_cgroup: &str, mountinfo: &str, own_pid: u32) -> CgroupHost {
        let mounts = parse_mountinfo(mountinfo);
        let mut v1 = BTreeMap::new();
        let mut v2 = None;
        for line in self_cgroup.lines() {
            let mut fields = line.splitn(3, ':');
            let (Some(id), Some(controllers), Some(path)) =
                (fields.next(), fields.next(), fields.next())
            else {
                continue;
            };
            if id == "0" && controllers.is_empty() {
                v2 = mounts
                    .iter()
                    .filter(|m| m.v2)
                    .find_map(|m| m.hierarchy_of(path))
                    .map(|h| without_supervisor_leaf(h, own_pid));
                continue;
            }
            for controller in controllers.split(',') {
                if controller != FREEZER
                    && !LimitKind::ALL.iter().any(|k| k.controller() == controller)
                {
                    continue;
                }
                let found = mounts
                    .iter()
                    .filter(|m| !m.v2 && m.controllers.contains(controller))
                    .find_map(|m| m.hierarchy_of(path));
                if let Some(h) = found {
                    v1.entry(controller.to_string()).or_insert(h);
                }
            }
        }
        CgroupHost { v1, v2, own_pid }
    }

    /// The name of a run's cgroup: `stepproof-<supervisor pid>-<nonce>`.
    pub fn run_name(&self, nonce: &str) -> String {
        format!("{NAME_PREFIX}{}-{nonce}", self.own_pid)
    }
}

/// After the supervisor moved itself into its v2 leaf (see [`Place::V2`]), a second discovery
/// would find the leaf as its own cgroup; the cgroup the runs go below is still its parent.
fn without_supervisor_leaf(mut h: Hierarchy, own_pid: u32) -> Hierarchy {
    let leaf = format!("{NAME_PREFIX}{own_pid}-{SUPERVISOR_NONCE}");
    if h.own_dir.file_name() == Some(leaf.as_ref())
        && let Some(parent) = h.own_dir.parent()
        && parent.starts_with(&h.mount)
    {
        h.own_dir = parent.to_path_buf();
    }
    h
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

impl CgroupMount {
    /// Where `own` (a path from /proc/self/cgroup) is on disk through this mount, if it is
    /// visible there at all. A path with `..` (a cgroup outside the namespace's root) is not:
    /// joining it would point somewhere else than the supervisor's own cgroup.
    fn hierarchy_of(&self, own: &str) -> Option<Hierarchy> {
        let own = Path::new(own);
        if !own.is_absolute() {
            return None;
        }
        let rel = own.strip_prefix(&self.root).ok()?;
        let mut own_dir = self.mount.clone();
        for c in rel.components() {
            match c {
                Component::Normal(part) => own_dir.push(part),
                _ => return None,
            }
        }
        Some(Hierarchy {
            mount: self.mount.clone(),
            own_dir,
        })
    }
}

fn parse_mountinfo(text: &str) -> Vec<CgroupMount> {
    let mut mounts = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // Six fixed fields, optional fields, "-", then fstype, source and super options.
        let Some(sep) = fields.iter().skip(6).position(|f| *f == "-").map(|p| p + 6) else {
            continue;
        };
        let (Some(fstype), Some(options)) = (fields.get(sep + 1), fields.get(sep + 3)) else {
            continue;
        };
        let v2 = match *fstype {
            "cgroup" => false,
            "cgroup2" => true,
            _ => continue,
        };
        mounts.push(CgroupMount {
            v2,
            root: unescape_mountinfo(fields[3]),
            mount: unescape_mountinfo(fields[4]),
            controllers: options.split(',').map(str::to_string).collect(),
        });
    }
    mounts
}

/// mountinfo writes space, tab, newline and backslash in paths as `\ooo`.
fn unescape_mountinfo(field: &str) -> PathBuf {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b)) && d[0] <= b'3');
        match (bytes[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    PathBuf::from(OsString::from_vec(out))
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

/// Creates the directories and writes the limits; on any error removes what it made. Entries
/// that are Unavailable are skipped (the caller decides whether that is acceptable).
pub fn create(plan: &CgroupPlan) -> Result<RunCgroup, CgroupError> {
    create_with(plan, &|_| Ok(()))
}

/// `populate` runs after each mkdir: on cgroupfs the kernel fills a new directory with its
/// interface files, and a test's fake tree has to stand in for that.
fn create_with(
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

/// One directory of the run and the limits written into it.
struct DirToMake {
    dir: PathBuf,
    version: Version,
    delegate_self: bool,
    limits: Vec<(LimitKind, u64)>,
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

fn make_dir(dir: &Path, populate: &dyn Fn(&Path) -> io::Result<()>) -> Result<(), CgroupError> {
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
mod tests {
    use super::*;
    use std::fs::File;
    use std::os::unix::fs::PermissionsExt;
    use std::process::Command;
    use tempfile::TempDir;

    const MIB: u64 = 1 << 20;

    fn put(path: &Path, content: &str) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, content).unwrap();
    }

    fn read(path: &Path) -> String {
        fs::read_to_string(path).unwrap()
    }

    /// Stands in for the kernel: a new cgroup directory comes with these (empty) files.
    fn kernel_files(files: &'static [&'static str]) -> impl Fn(&Path) -> io::Result<()> {
        move |dir: &Path| {
            for f in files {
                File::create(dir.join(f))?;
            }
            Ok(())
        }
    }

    const V1_FILES: &[&str] = &[
        "cgroup.procs",
        "memory.limit_in_bytes",
        "memory.memsw.limit_in_bytes",
        "memory.oom_control",
        "pids.max",
        "pids.events",
        "cpu.cfs_period_us",
        "cpu.cfs_quota_us",
        "cpu.stat",
    ];
    const V1_FILES_NO_SWAP: &[&str] = &[
        "cgroup.procs",
        "memory.limit_in_bytes",
        "memory.oom_control",
        "pids.max",
        "pids.events",
        "cpu.cfs_period_us",
        "cpu.cfs_quota_us",
        "cpu.stat",
    ];
    const V2_FILES: &[&str] = &[
        "cgroup.procs",
        "memory.max",
        "memory.swap.max",
        "memory.events",
        "pids.max",
        "pids.events",
        "cpu.max",
        "cpu.stat",
    ];

    /// Empties a fake cgroup directory the way the kernel's rmdir does on cgroupfs.
    fn clear(dir: &Path) {
        for e in fs::read_dir(dir).unwrap() {
            fs::remove_file(e.unwrap().path()).unwrap();
        }
    }

    fn limits() -> CgroupLimits {
        CgroupLimits {
            memory: Some(64 * MIB),
            pids: Some(64),
            cpu_percent: Some(200),
        }
    }

    const NAME: &str = "stepproof-4242-1a2b";

    /// Like this machine: v1 memory at /process_api/abc, pids and cpu at the root, cpu
    /// co-mounted with cpuacct, a v2 hierarchy at unified that has only hugetlb.
    fn v1_hybrid(t: &Path) -> CgroupHost {
        fs::create_dir_all(t.join("memory/process_api/abc")).unwrap();
        fs::create_dir_all(t.join("pids")).unwrap();
        fs::create_dir_all(t.join("cpu,cpuacct")).unwrap();
        put(&t.join("unified/cgroup.controllers"), "hugetlb\n");
        put(&t.join("unified/cgroup.subtree_control"), "");
        let t = t.display();
        let mountinfo = format!(
            "25 1 0:23 / /proc rw,nosuid - proc proc rw\n\
             31 23 0:28 / {t} rw,relatime - tmpfs tmpfs rw,mode=755\n\
             32 31 0:29 / {t}/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct\n\
             35 31 0:32 / {t}/memory rw,relatime - cgroup cgroup rw,memory\n\
             39 31 0:36 / {t}/pids rw,relatime - cgroup cgroup rw,pids\n\
             40 31 0:37 / {t}/systemd rw,relatime - cgroup cgroup rw,name=systemd\n\
             41 31 0:38 / {t}/unified rw,relatime - cgroup2 cgroup2 rw\n"
        );
        let self_cgroup = "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/abc\n\
                           2:cpu,cpuacct:/\n0::/\n";
        CgroupHost::from_texts(self_cgroup, &mountinfo, 4242)
    }

    /// A pure v2 host whose own cgroup is /user.slice/run.scope.
    fn v2_host(
        t: &Path,
        controllers: &str,
        subtree: &str,
        procs: &str,
        own_pid: u32,
    ) -> CgroupHost {
        let own = t.join("user.slice/run.scope");
        put(&own.join("cgroup.controllers"), controllers);
        put(&own.join("cgroup.subtree_control"), subtree);
        put(&own.join("cgroup.procs"), procs);
        let mountinfo = format!(
            "30 23 0:26 / {} rw,nosuid,nodev - cgroup2 cgroup2 rw,nsdelegate\n",
            t.display()
        );
        CgroupHost::from_texts("0::/user.slice/run.scope\n", &mountinfo, own_pid)
    }

    #[test]
    fn discovers_this_machines_layout() {
        let tmp = TempDir::new().unwrap();
        let t = tmp.path();
        let host = v1_hybrid(t);
        let h = |mount: &str, own: &str| Hierarchy {
            mount: t.join(mount),
            own_dir: t.join(own),
        };
        let expected = CgroupHost {
            v1: BTreeMap::from([
                ("cpu".to_string(), h("cpu,cpuacct", "cpu,cpuacct")),
                ("memory".to_string(), h("memory", "memory/process_api/abc")),
                ("pids".to_string(), h("pids", "pids")),
            ]),
            v2: Some(h("unified", "unified")),
            own_pid: 4242,
        };
        assert_eq!(host, expected);
    }

    #[test]
    fn discover_reads_the_proc_files() {
        let tmp = TempDir::new().unwrap();
        let mountinfo = format!(
            "35 31 0:32 / {}/memory rw - cgroup cgroup rw,memory\n",
            tmp.path().display()
        );
        put(&tmp.path().join("proc/self/cgroup"), "4:memory:/a\n");
        put(&tmp.path().join("proc/self/mountinfo"), &mountinfo);
        let host = CgroupHost::discover(&tmp.path().join("proc"));
        let expected = CgroupHost::from_texts("4:memory:/a\n", &mountinfo, std::process::id());
        assert_eq!(host, expected);
        assert_eq!(host.v1["memory"].own_dir, tmp.path().join("memory/a"));
        let nothing = CgroupHost::discover(&tmp.path().join("missing"));
        assert_eq!(
            nothing,
            CgroupHost {
                v1: BTreeMap::new(),
                v2: None,
                own_pid: std::process::id()
            }
        );
    }

    #[test]
    fn mount_roots_escapes_and_dotdot() {
        // A container that bind-mounts its own subtree: mountinfo's root is /docker/c1.
        let mountinfo = "35 31 0:32 /docker/c1 /sys/fs/cgroup/mem\\040ory rw - cgroup cgroup \
                         rw,memory\n\
                         39 31 0:36 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n\
                         41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n";
        let cgroup =
            "4:memory:/docker/c1/inner\n8:pids:/../outside\n0::/a/stepproof-7-supervisor\n";
        let host = CgroupHost::from_texts(cgroup, mountinfo, 7);
        assert_eq!(
            host.v1["memory"].own_dir,
            PathBuf::from("/sys/fs/cgroup/mem ory/inner")
        );
        // A path out of the namespace's root is not the own cgroup: absent, not joined.
        assert!(!host.v1.contains_key("pids"));
        // After moving into its v2 leaf, the supervisor still creates runs beside it.
        assert_eq!(
            host.v2.unwrap().own_dir,
            PathBuf::from("/sys/fs/cgroup/unified/a")
        );
        // A cgroup outside the mount's root is not visible through it.
        let host = CgroupHost::from_texts("4:memory:/elsewhere\n", mountinfo, 7);
        assert!(host.v1.is_empty());
    }

    #[test]
    fn plan_v1_hybrid_puts_each_limit_under_the_own_cgroup() {
        let tmp = TempDir::new().unwrap();
        let t = tmp.path();
        let host = v1_hybrid(t);
        assert_eq!(host.run_name("1a2b"), NAME);
        let plan = plan(&host, &limits(), NAME);
        let expected = CgroupPlan {
            limits: limits(),
            name: NAME.to_string(),
            entries: vec![
                PlannedLimit {
                    limit: LimitKind::Memory,
                    value: 64 * MIB,
                    place: Place::V1 {
                        dir: t.join("memory/process_api/abc").join(NAME),
                    },
                },
                PlannedLimit {
                    limit: LimitKind::Pids,
                    value: 64,
                    place: Place::V1 {
                        dir: t.join("pids").join(NAME),
                    },
                },
                PlannedLimit {
                    limit: LimitKind::Cpu,
                    value: 200,
                    place: Place::V1 {
                        dir: t.join("cpu,cpuacct").join(NAME),
                    },
                },
            ],
        };
        assert_eq!(plan, expected);
        assert!(plan.unavailable().is_empty());
    }

    #[test]
    fn plan_lists_only_the_limits_asked_for() {
        let tmp = TempDir::new().unwrap();
        let host = v1_hybrid(tmp.path());
        let only_pids = CgroupLimits {
            pids: Some(10),
            ..CgroupLimits::default()
        };
        let p = plan(&host, &only_pids, NAME);
        assert_eq!(p.entries.len(), 1);
        assert_eq!(p.entries[0].limit, LimitKind::Pids);
        assert!(
            plan(&host, &CgroupLimits::default(), NAME)
                .entries
                .is_empty()
        );
    }

    #[test]
    fn plan_refuses_bad_names_and_zero_limits() {
        let tmp = TempDir::new().unwrap();
        let host = v1_hybrid(tmp.path());
        for name in [
            "../escape",
            "stepproof-1-..",
            "stepproof-1-a/b",
            "other-1-a",
            "stepproof-x-a",
            "stepproof-1-",
            "stepproof-0-a",
            "stepproof-1-supervisor",
        ] {
            let p = plan(&host, &limits(), name);
            assert_eq!(p.unavailable().len(), 3, "{name}");
            assert!(p.unavailable()[0].1.contains("not valid"), "{name}");
        }
        let zero = CgroupLimits {
            memory: Some(0),
            ..CgroupLimits::default()
        };
        let p = plan(&host, &zero, NAME);
        assert_eq!(
            p.unavailable(),
            vec![(
                LimitKind::Memory,
                "a memory limit of 0 cannot be enforced: nothing could run under it"
            )]
        );
    }

    #[test]
    fn plan_missing_own_dir_is_unavailable() {
        // Also what an unwritable dir looks like to root: checked even when tests run as root.
        let tmp = TempDir::new().unwrap();
        let host = v1_hybrid(tmp.path());
        fs::remove_dir_all(tmp.path().join("pids")).unwrap();
        let p = plan(&host, &limits(), NAME);
        let reasons = p.unavailable();
        assert_eq!(reasons.len(), 1);
        assert_eq!(reasons[0].0, LimitKind::Pids);
        assert!(reasons[0].1.starts_with(&format!(
            "cannot create a cgroup in {} (the supervisor's own pids cgroup): ENOENT",
            tmp.path().join("pids").display()
        )));
    }

    #[test]
    fn plan_unwritable_own_dir_is_unavailable() {
        let tmp = TempDir::new().unwrap();
        let host = v1_hybrid(tmp.path());
        let own = tmp.path().join("memory/process_api/abc");
        fs::set_permissions(&own, fs::Permissions::from_mode(0o555)).unwrap();
        let p = plan(&host, &limits(), NAME);
        fs::set_permissions(&own, fs::Permissions::from_mode(0o755)).unwrap();
        if nix::unistd::geteuid().is_root() {
            crate::say!("skipped: root may write a 0555 directory, so access(W_OK) succeeds");
            return;
        }
        let reasons = p.unavailable();
        assert_eq!(reasons.len(), 1);
        assert_eq!(reasons[0].0, LimitKind::Memory);
        assert!(reasons[0].1.contains("EACCES"), "{}", reasons[0].1);
    }

    #[test]
    fn create_v1_writes_the_limits_with_memsw() {
        let tmp = TempDir::new().unwrap();
        let t = tmp.path();
        let p = plan(&v1_hybrid(t), &limits(), NAME);
        let run = create_with(&p, &kernel_files(V1_FILES)).unwrap();
        let mem = t.join("memory/process_api/abc").join(NAME);
        let pids = t.join("pids").join(NAME);
        let cpu = t.join("cpu,cpuacct").join(NAME);
        assert_eq!(run.dirs(), vec![mem.clone(), pids.clone(), cpu.clone()]);
        assert_eq!(read(&mem.join("memory.limit_in_bytes")), "67108864");
        assert_eq!(read(&mem.join("memory.memsw.limit_in_bytes")), "67108864");
        assert_eq!(read(&pids.join("pids.max")), "64");
        assert_eq!(read(&cpu.join("cpu.cfs_period_us")), "100000");
        assert_eq!(read(&cpu.join("cpu.cfs_quota_us")), "200000");
        // Each directory carries only its own controller's limit.
        assert_eq!(read(&pids.join("memory.limit_in_bytes")), "");
        assert_eq!(read(&mem.join("pids.max")), "");
        assert!(run.supervisor_leaf().is_none());
    }

    #[test]
    fn create_v1_skips_memsw_when_absent() {
        let tmp = TempDir::new().unwrap();
        let t = tmp.path();
        let p = plan(&v1_hybrid(t), &limits(), NAME);
        let _run = create_with(&p, &kernel_files(V1_FILES_NO_SWAP)).unwrap();
        let mem = t.join("memory/process_api/abc").join(NAME);
        assert_eq!(read(&mem.join("memory.limit_in_bytes")), "67108864");
        assert!(!mem.join("memory.memsw.limit_in_bytes").exists());
    }

    #[test]
    fn create_failure_removes_what_it_made() {
        let tmp = TempDir::new().unwrap();
        let t = tmp.path();
        let p = plan(&v1_hybrid(t), &limits(), NAME);
        // No interface files at all: the first write fails, naming the file.
        let err = create_with(&p, &|_| Ok(())).unwrap_err();
        let file = t
            .join("memory/process_api/abc")
            .join(NAME)
            .join("memory.limit_in_bytes");
        assert!(
            matches!(&err, CgroupError::Write { path, value, .. }
                if *path == file && value == "67108864"),
            "{err}"
        );
        assert!(err.to_string().contains(&file.display().to_string()));
        assert!(!t.join("memory/process_api/abc").join(NAME).exists());
        assert!(!t.join("pids").join(NAME).exists());
    }

    #[test]
    fn create_refuses_an_existing_dir_and_leaves_it() {
        let tmp = TempDir::new().unwrap();
        let t = tmp.path();
        let p = plan(&v1_hybrid(t), &limits(), NAME);
        let theirs = t.join("pids").join(NAME);
        put(&theirs.join("cgroup.procs"), "99\n");
        let err = create_with(&p, &kernel_files(V1_FILES)).unwrap_err();
        assert!(
            matches!(&err, CgroupError::AlreadyExists { path } if *path == theirs),
            "{err}"
        );
        assert_eq!(read(&theirs.join("cgroup.procs")), "99\n");
        // The memory cgroup made before it is gone again (its fake files stop the rmdir
        // here, which the kernel would not).
        let ours = t.join("memory/process_api/abc").join(NAME);
        assert!(!ours.exists() || ours.join("memory.limit_in_bytes").exists());
    }

    #[test]
    fn create_refuses_a_plan_pointing_elsewhere() {
        let tmp = TempDir::new().unwrap();
        let mut p = plan(&v1_hybrid(tmp.path()), &limits(), NAME);
        p.entries[1].place = Place::V1 {
            dir: tmp.path().join("pids/other"),
        };
        let err = create_with(&p, &kernel_files(V1_FILES)).unwrap_err();
        assert!(matches!(err, CgroupError::OutsideOwn { .. }), "{err}");
        assert!(
            !tmp.path()
                .join("memory/process_api/abc")
                .join(NAME)
                .exists()
        );
    }

    #[test]
    fn create_skips_unavailable_entries() {
        let tmp = TempDir::new().unwrap();
        let host = v1_hybrid(tmp.path());
        fs::remove_dir_all(tmp.path().join("pids")).unwrap();
        let p = plan(&host, &limits(), NAME);
        let run = create_with(&p, &kernel_files(V1_FILES)).unwrap();
        assert_eq!(run.dirs().len(), 2);
    }

    #[test]
    fn attach_writes_the_pid_into_each_dir() {
        let tmp = TempDir::new().unwrap();
        let p = plan(&v1_hybrid(tmp.path()), &limits(), NAME);
        let run = create_with(&p, &kernel_files(V1_FILES)).unwrap();
        run.attach(31337).unwrap();
        for dir in run.dirs() {
            assert_eq!(read(&dir.join("cgroup.procs")), "31337");
        }
    }

    #[test]
    fn events_v1_count_kills_refusals_and_throttling() {
        let tmp = TempDir::new().unwrap();
        let p = plan(&v1_hybrid(tmp.path()), &limits(), NAME);
        let run = create_with(&p, &kernel_files(V1_FILES)).unwrap();
        assert_eq!(run.events(), LimitEvents::default());
        let dirs = run.dirs();
        put(
            &dirs[0].join("memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
        );
        put(&dirs[0].join("memory.failcnt"), "1234\n");
        put(&dirs[1].join("pids.events"), "max 37\n");
        put(
            &dirs[2].join("cpu.stat"),
            "nr_periods 50\nnr_throttled 12\nthrottled_time 9000\n",
        );
        let events = run.events();
        assert_eq!(
            events,
            LimitEvents {
                oom_kills: 2,
                forks_refused: 37,
                cpu_throttled: 12
            }
        );
        // Missing files count nothing.
        fs::remove_file(dirs[1].join("pids.events")).unwrap();
        assert_eq!(run.events().forks_refused, 0);
    }

    #[test]
    fn events_v2_count_kills_refusals_and_throttling() {
        let tmp = TempDir::new().unwrap();
        let host = v2_host(
            tmp.path(),
            "cpu memory pids",
            "cpu memory pids",
            "1\n2\n",
            4242,
        );
        let run = create_with(&plan(&host, &limits(), NAME), &kernel_files(V2_FILES)).unwrap();
        let dir = &run.dirs()[0];
        put(
            &dir.join("memory.events"),
            "low 0\nhigh 0\nmax 40\noom 3\noom_kill 3\noom_group_kill 0\n",
        );
        put(&dir.join("pids.events"), "max 5\n");
        put(
            &dir.join("cpu.stat"),
            "usage_usec 100\nnr_periods 9\nnr_throttled 4\nthrottled_usec 7\n",
        );
        assert_eq!(
            run.events(),
            LimitEvents {
                oom_kills: 3,
                forks_refused: 5,
                cpu_throttled: 4
            }
        );
    }

    #[test]
    fn sentences_word_the_events() {
        let limits = CgroupLimits {
            memory: Some(8 << 30),
            pids: Some(4096),
            cpu_percent: Some(200),
        };
        let events = LimitEvents {
            oom_kills: 2,
            forks_refused: 37,
            cpu_throttled: 12,
        };
        assert_eq!(
            events.sentences(&limits),
            vec![
                "2 processes killed by the memory limit (8 GiB)",
                "37 forks refused by the process limit (4096 processes)",
                "CPU throttled 12 times by the CPU limit (200% CPU (2 CPUs))",
            ]
        );
        let once = LimitEvents {
            oom_kills: 1,
            forks_refused: 0,
            cpu_throttled: 1,
        };
        assert_eq!(
            once.sentences(&limits),
            vec![
                "1 process killed by the memory limit (8 GiB)",
                "CPU throttled 1 time by the CPU limit (200% CPU (2 CPUs))",
            ]
        );
        assert!(LimitEvents::default().sentences(&limits).is_empty());
    }

    #[test]
    fn describe_words_values() {
        assert_eq!(describe(LimitKind::Memory, 8 << 30), "8 GiB");
        assert_eq!(describe(LimitKind::Memory, 512 * MIB), "512 MiB");
        assert_eq!(describe(LimitKind::Memory, 1536 * MIB), "1536 MiB");
        assert_eq!(describe(LimitKind::Memory, 64 << 10), "64 KiB");
        assert_eq!(describe(LimitKind::Memory, 2 << 40), "2 TiB");
        assert_eq!(describe(LimitKind::Memory, 1000), "1000 bytes");
        assert_eq!(describe(LimitKind::Pids, 4096), "4096 processes");
        assert_eq!(describe(LimitKind::Pids, 1), "1 process");
        assert_eq!(describe(LimitKind::Cpu, 200), "200% CPU (2 CPUs)");
        assert_eq!(describe(LimitKind::Cpu, 100), "100% CPU (1 CPU)");
        assert_eq!(describe(LimitKind::Cpu, 150), "150% CPU (1.5 CPUs)");
        assert_eq!(describe(LimitKind::Cpu, 125), "125% CPU (1.25 CPUs)");
        assert_eq!(describe(LimitKind::Cpu, 50), "50% CPU (0.5 CPUs)");
        assert_eq!(LimitKind::Memory.to_string(), "memory");
        assert_eq!(LimitKind::Pids.to_string(), "pids");
        assert_eq!(LimitKind::Cpu.to_string(), "cpu");
    }

    #[test]
    fn remove_deletes_the_dirs() {
        let tmp = TempDir::new().unwrap();
        let p = plan(&v1_hybrid(tmp.path()), &limits(), NAME);
        let run = create_with(&p, &kernel_files(V1_FILES)).unwrap();
        let dirs = run.dirs();
        for d in &dirs {
            clear(d);
        }
        run.remove(Duration::from_millis(50)).unwrap();
        for d in &dirs {
            assert!(!d.exists(), "{}", d.display());
        }
    }

    #[test]
    fn remove_names_a_dir_it_cannot_remove() {
        let tmp = TempDir::new().unwrap();
        let p = plan(&v1_hybrid(tmp.path()), &limits(), NAME);
        let run = create_with(&p, &kernel_files(V1_FILES)).unwrap();
        let dirs = run.dirs();
        clear(&dirs[0]);
        clear(&dirs[2]);
        // The pids dir still holds (fake) files: ENOTEMPTY is no reason to wait.
        let started = Instant::now();
        let err = run.remove(Duration::from_secs(5)).unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(1));
        assert!(
            matches!(&err, CgroupError::Remove { path, .. } if *path == dirs[1]),
            "{err}"
        );
        assert!(!dirs[0].exists());
        assert!(!dirs[2].exists());
    }

    #[test]
    fn plan_v2_uses_enabled_controllers_directly() {
        let tmp = TempDir::new().unwrap();
        let own = tmp.path().join("user.slice/run.scope");
        let host = v2_host(
            tmp.path(),
            "cpuset cpu io memory pids",
            "cpu memory pids",
            "1\n2\n",
            4242,
        );
        let p = plan(&host, &limits(), NAME);
        let place = Place::V2 {
            dir: own.join(NAME),
            delegate_self: false,
        };
        let expected = CgroupPlan {
            limits: limits(),
            name: NAME.to_string(),
            entries: vec![
                PlannedLimit {
                    limit: LimitKind::Memory,
                    value: 64 * MIB,
                    place: place.clone(),
                },
                PlannedLimit {
                    limit: LimitKind::Pids,
                    value: 64,
                    place: place.clone(),
                },
                PlannedLimit {
                    limit: LimitKind::Cpu,
                    value: 200,
                    place,
                },
            ],
        };
        assert_eq!(p, expected);
        let run = create_with(&p, &kernel_files(V2_FILES)).unwrap();
        let dir = own.join(NAME);
        assert_eq!(run.dirs(), vec![dir.clone()]);
        assert_eq!(read(&dir.join("memory.max")), "67108864");
        assert_eq!(read(&dir.join("memory.swap.max")), "0");
        assert_eq!(read(&dir.join("pids.max")), "64");
        assert_eq!(read(&dir.join("cpu.max")), "200000 100000");
        // Nothing was enabled or moved.
        assert_eq!(read(&own.join("cgroup.subtree_control")), "cpu memory pids");
        assert!(run.supervisor_leaf().is_none());
    }

    #[test]
    fn create_v2_without_swap_file_leaves_swap_alone() {
        const NO_SWAP: &[&str] = &["cgroup.procs", "memory.max", "pids.max", "cpu.max"];
        let tmp = TempDir::new().unwrap();
        let host = v2_host(tmp.path(), "cpu memory pids", "cpu memory pids", "", 4242);
        let run = create_with(&plan(&host, &limits(), NAME), &kernel_files(NO_SWAP)).unwrap();
        let dir = &run.dirs()[0];
        assert_eq!(read(&dir.join("memory.max")), "67108864");
        assert!(!dir.join("memory.swap.max").exists());
    }

    #[test]
    fn plan_v2_delegates_self_when_alone_in_the_own_cgroup() {
        let tmp = TempDir::new().unwrap();
        let own = tmp.path().join("user.slice/run.scope");
        // create() moves the calling process: in production the supervisor, here the test.
        let me = std::process::id();
        let host = v2_host(tmp.path(), "cpu memory pids", "", &format!("{me}\n"), me);
        let name = host.run_name("c0ffee");
        let only = CgroupLimits {
            memory: Some(MIB),
            pids: Some(8),
            cpu_percent: None,
        };
        let p = plan(&host, &only, &name);
        let place = Place::V2 {
            dir: own.join(&name),
            delegate_self: true,
        };
        assert_eq!(
            p.entries,
            vec![
                PlannedLimit {
                    limit: LimitKind::Memory,
                    value: MIB,
                    place: place.clone(),
                },
                PlannedLimit {
                    limit: LimitKind::Pids,
                    value: 8,
                    place,
                },
            ]
        );
        let run = create_with(&p, &kernel_files(V2_FILES)).unwrap();
        let leaf = own.join(format!("stepproof-{me}-supervisor"));
        assert_eq!(run.supervisor_leaf(), Some(leaf.as_path()));
        assert_eq!(read(&leaf.join("cgroup.procs")), me.to_string());
        assert_eq!(read(&own.join("cgroup.subtree_control")), "+memory +pids");
        assert_eq!(read(&own.join(&name).join("pids.max")), "8");
        // remove leaves the leaf (the supervisor is in it) and takes the run's dir.
        clear(&own.join(&name));
        run.remove(Duration::from_millis(50)).unwrap();
        assert!(!own.join(&name).exists());
        assert!(leaf.is_dir());
        // Discovered again from inside the leaf, the own cgroup is still the scope.
        let again = CgroupHost::from_texts(
            &format!("0::/user.slice/run.scope/stepproof-{me}-supervisor\n"),
            &format!(
                "30 23 0:26 / {} rw - cgroup2 cgroup2 rw\n",
                tmp.path().display()
            ),
            me,
        );
        assert_eq!(again.v2.unwrap().own_dir, own);
    }

    #[test]
    fn plan_v2_other_processes_make_it_unavailable() {
        let tmp = TempDir::new().unwrap();
        let own = tmp.path().join("user.slice/run.scope");
        let host = v2_host(tmp.path(), "cpu memory pids", "pids", "4242\n999\n", 4242);
        let p = plan(&host, &limits(), NAME);
        let reason = format!(
            "the own cgroup {} holds other processes, so no controller can be enabled below it; \
             start stepproof-run in a delegated scope, e.g. `systemd-run --user --scope -p \
             Delegate=yes stepproof-run …`",
            own.display()
        );
        assert_eq!(
            p.unavailable(),
            vec![
                (LimitKind::Memory, reason.as_str()),
                (LimitKind::Cpu, reason.as_str())
            ]
        );
        // pids was already enabled below the own cgroup: it works without moving anything.
        assert_eq!(
            p.entries[1].place,
            Place::V2 {
                dir: own.join(NAME),
                delegate_self: false
            }
        );
    }

    #[test]
    fn plan_v2_controller_not_offered_is_unavailable() {
        let tmp = TempDir::new().unwrap();
        let own = tmp.path().join("user.slice/run.scope");
        let host = v2_host(tmp.path(), "memory pids", "memory pids", "", 4242);
        let p = plan(&host, &limits(), NAME);
        let reason = format!(
            "no cgroup hierarchy offers the cpu controller: it is not mounted as cgroup v1 and \
             not listed in {}",
            own.join("cgroup.controllers").display()
        );
        assert_eq!(p.unavailable(), vec![(LimitKind::Cpu, reason.as_str())]);
        // And on a host with no cgroups at all:
        let none = CgroupHost::from_texts("", "", 1);
        let p = plan(&none, &limits(), NAME);
        assert_eq!(p.unavailable().len(), 3);
        assert!(
            p.unavailable()[0]
                .1
                .ends_with("there is no cgroup v2 hierarchy")
        );
    }

    #[test]
    fn plan_v2_unwritable_own_dir_is_unavailable() {
        let tmp = TempDir::new().unwrap();
        let own = tmp.path().join("user.slice/run.scope");
        let host = v2_host(tmp.path(), "cpu memory pids", "cpu memory pids", "", 4242);
        fs::set_permissions(&own, fs::Permissions::from_mode(0o555)).unwrap();
        let p = plan(&host, &limits(), NAME);
        fs::set_permissions(&own, fs::Permissions::from_mode(0o755)).unwrap();
        if nix::unistd::geteuid().is_root() {
            crate::say!("skipped: root may write a 0555 directory, so access(W_OK) succeeds");
            return;
        }
        assert_eq!(p.unavailable().len(), 3);
        assert!(p.unavailable()[0].1.contains("EACCES"));
    }

    #[test]
    fn v1_controller_is_used_where_v2_does_not_list_it() {
        // A hybrid host whose v2 side offers pids: pids goes to v2, the rest to v1.
        let tmp = TempDir::new().unwrap();
        let t = tmp.path();
        fs::create_dir_all(t.join("memory")).unwrap();
        put(&t.join("unified/cgroup.controllers"), "pids\n");
        put(&t.join("unified/cgroup.subtree_control"), "pids\n");
        let mountinfo = format!(
            "35 31 0:32 / {t}/memory rw - cgroup cgroup rw,memory\n\
             41 31 0:38 / {t}/unified rw - cgroup2 cgroup2 rw\n",
            t = t.display()
        );
        let host = CgroupHost::from_texts("4:memory:/\n0::/\n", &mountinfo, 4242);
        let p = plan(&host, &limits(), NAME);
        assert_eq!(
            p.entries
                .iter()
                .map(|e| e.place.clone())
                .collect::<Vec<_>>(),
            vec![
                Place::V1 {
                    dir: t.join("memory").join(NAME)
                },
                Place::V2 {
                    dir: t.join("unified").join(NAME),
                    delegate_self: false
                },
                Place::Unavailable {
                    reason: format!(
                        "no cgroup hierarchy offers the cpu controller: it is not mounted as \
                         cgroup v1 and not listed in {}",
                        t.join("unified/cgroup.controllers").display()
                    )
                },
            ]
        );
    }

    #[test]
    fn remove_stale_takes_only_dead_empty_runs() {
        let tmp = TempDir::new().unwrap();
        let host = v1_hybrid(tmp.path());
        let own = tmp.path().join("memory/process_api/abc");
        // A pid that is certainly gone: a child spawned and reaped.
        let mut child = Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let me = std::process::id();

        let stale = own.join(format!("stepproof-{dead}-ab12"));
        fs::create_dir(&stale).unwrap();
        let stale_leaf = tmp.path().join(format!("pids/stepproof-{dead}-supervisor"));
        put(&stale_leaf.join("cgroup.procs"), "");
        fs::remove_file(stale_leaf.join("cgroup.procs")).unwrap();
        let live = own.join(format!("stepproof-{me}-cd34"));
        fs::create_dir(&live).unwrap();
        let busy = own.join(format!("stepproof-{dead}-ef56"));
        put(&busy.join("cgroup.procs"), "123\n");
        // Killed while frozen for an evidence command: thawed, kept until it is empty.
        let frozen = own.join(format!("stepproof-{dead}-f7e2"));
        put(&frozen.join("cgroup.procs"), "124\n");
        put(&frozen.join("freezer.state"), "FROZEN\n");
        let frozen_v2 = own.join(format!("stepproof-{dead}-f7e3"));
        put(&frozen_v2.join("cgroup.procs"), "125\n");
        put(&frozen_v2.join("cgroup.freeze"), "1\n");
        let unrelated = [
            own.join("stepproof-junk"),
            own.join(format!("stepproof-{dead}-")),
            own.join(format!("other-{dead}-ab")),
            own.join(format!("stepproof-+{dead}-ab")),
        ];
        for u in &unrelated {
            fs::create_dir(u).unwrap();
        }
        let target = tmp.path().join("target");
        fs::create_dir(&target).unwrap();
        let link = own.join(format!("stepproof-{dead}-1ink"));
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let file = own.join(format!("stepproof-{dead}-f11e"));
        put(&file, "");

        let mut removed = remove_stale(&host);
        removed.sort();
        let mut expected = vec![stale.clone(), stale_leaf.clone()];
        expected.sort();
        assert_eq!(removed, expected);
        assert!(!stale.exists() && !stale_leaf.exists());
        assert!(live.is_dir());
        assert!(busy.is_dir());
        assert_eq!(
            fs::read_to_string(frozen.join("freezer.state")).unwrap(),
            "THAWED"
        );
        assert_eq!(
            fs::read_to_string(frozen_v2.join("cgroup.freeze")).unwrap(),
            "0"
        );
        assert!(!busy.join("freezer.state").exists());
        for u in &unrelated {
            assert!(u.is_dir(), "{}", u.display());
        }
        assert!(
            fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert!(target.is_dir());
        assert!(file.is_file());
    }

    /// The real thing, on a host like this one (root, cgroup v1 memory).
    #[test]
    fn real_host_limits_a_child() {
        let skip = |reason: &str| {
            // CI runs as root on a host like this one: there a skip is a failure.
            let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false");
            assert!(!ci, "required in CI but unavailable: {reason}");
            crate::say!("skipped: {reason}");
        };
        if !nix::unistd::geteuid().is_root() {
            return skip("creating cgroups on this host needs root");
        }
        if !Path::new("/sys/fs/cgroup/memory").is_dir() {
            return skip("no cgroup v1 memory hierarchy at /sys/fs/cgroup/memory");
        }
        let host = CgroupHost::discover(Path::new("/proc"));
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let name = host.run_name(&format!("t{nanos:x}"));
        let limits = CgroupLimits {
            memory: Some(64 * MIB),
            pids: Some(64),
            cpu_percent: Some(50),
        };
        let p = plan(&host, &limits, &name);
        if !p.unavailable().is_empty() {
            return skip(&format!("this host cannot enforce {:?}", p.unavailable()));
        }
        let run = create(&p).unwrap();
        let dirs = run.dirs();
        let mut child = Command::new("sleep").arg("5").spawn().unwrap();
        let pid = child.id();
        let attached = run.attach(pid);
        let listed: Vec<(PathBuf, bool)> = dirs
            .iter()
            .map(|d| {
                let procs = read(&d.join("cgroup.procs"));
                (d.clone(), procs.lines().any(|l| l == pid.to_string()))
            })
            .collect();
        let _ = child.kill();
        let _ = child.wait();
        attached.unwrap();
        for (dir, found) in listed {
            assert!(found, "{pid} not in {}", dir.display());
        }
        for e in &p.entries {
            let (Place::V1 { dir } | Place::V2 { dir, .. }) = &e.place else {
                unreachable!()
            };
            let (file, want) = match e.limit {
                LimitKind::Memory if dir.join("memory.max").exists() => ("memory.max", "67108864"),
                LimitKind::Memory => ("memory.limit_in_bytes", "67108864"),
                LimitKind::Pids => ("pids.max", "64"),
                LimitKind::Cpu if dir.join("cpu.max").exists() => ("cpu.max", "50000 100000"),
                LimitKind::Cpu => ("cpu.cfs_quota_us", "50000"),
            };
            assert_eq!(read(&dir.join(file)).trim(), want, "{}", dir.display());
        }
        assert_eq!(run.events(), LimitEvents::default());
        run.remove(Duration::from_secs(2)).unwrap();
        for d in &dirs {
            assert!(!d.exists(), "{} still there", d.display());
        }
    }
}
