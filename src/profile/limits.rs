//! `[process.limits]` as a profile says it: per-process rlimits and the run's cgroup limits,
//! their defaults and how sizes and CPU shares are written. Applying them is the sandbox's
//! (`sandbox::rlimits`) and the supervisor's (`supervisor::launch::cgroup`) business.

use serde::{Deserialize, Serialize};

/// `[process.limits]`. Every field has a default; unknown fields are an error.
///
/// Defaults, and why:
/// * `core = 0`: a core dump writes the agent's memory (API keys, tokens) into the workspace.
/// * `nproc = 4096`: stops a fork bomb well before the host suffers, and is far above what a
///   parallel build needs. The kernel counts it per user (per user namespace level), and does
///   not enforce it for the host's real root (uid 0 outside any user namespace mapping).
/// * `nofile = 8192`: 8× the usual soft limit of 1024 that tools already live with (cargo,
///   node, git), yet bounded; never raised above the limit the supervisor itself has.
/// * `fsize = 32 GiB`: above the largest file a build links (a debug build of a browser is a
///   few GiB), below what fills a disk in one write loop.
/// * `cpu`: unset (inherited) unless the profile asks.
/// * `memory = 8 GiB`, `pids = 4096`, `cpu_quota` unset: the run's cgroup. Named in a profile,
///   a cgroup limit is required (a host that cannot enforce it stops a `strict` launch); left
///   to its default, it is applied to `--ci` runs where the host can, and recorded as dropped
///   elsewhere (see [`Limits::cgroup`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Largest core file in bytes (RLIMIT_CORE).
    pub core: u64,
    /// Processes (threads) of the user (RLIMIT_NPROC).
    pub nproc: u64,
    /// Open file descriptors per process (RLIMIT_NOFILE).
    pub nofile: u64,
    /// Largest file a process may write (RLIMIT_FSIZE); beyond it: SIGXFSZ/EFBIG. Bytes, or a
    /// size such as "32G".
    pub fsize: Option<ByteSize>,
    /// CPU seconds per process (RLIMIT_CPU); beyond it: SIGXCPU, then SIGKILL.
    pub cpu: Option<u64>,
    /// Memory of the whole run (cgroup), e.g. "8G"; `None`: the default, best-effort.
    pub memory: Option<ByteSize>,
    /// Processes and threads of the whole run (cgroup `pids.max`); `None`: the default.
    pub pids: Option<u64>,
    /// CPU time of the whole run as a share of one CPU (cgroup), e.g. "200%"; `None`: none.
    pub cpu_quota: Option<CpuQuota>,
}

/// The run's default memory limit (best-effort unless a profile names one).
pub const DEFAULT_MEMORY: u64 = 8 << 30;
/// The run's default process limit (best-effort unless a profile names one).
pub const DEFAULT_PIDS: u64 = 4096;
/// The default RLIMIT_FSIZE.
pub const DEFAULT_FSIZE: u64 = 32 << 30;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            core: 0,
            nproc: 4096,
            nofile: 8192,
            fsize: None,
            cpu: None,
            memory: None,
            pids: None,
            cpu_quota: None,
        }
    }
}

impl Limits {
    /// The file size limit in effect: the profile's or the default.
    pub fn fsize_bytes(&self) -> u64 {
        self.fsize.map_or(DEFAULT_FSIZE, |s| s.0)
    }

    /// The cgroup limits in effect and whether the profile named each (named = required). A
    /// limit the profile leaves to its default applies to unattended runs (`--ci`) only: putting
    /// the sandbox in a cgroup costs the launch a kernel RCU grace period on cgroup v1 (4 to 20 ms
    /// measured here), which an interactive run need not pay to get a memory bound it is watched
    /// for anyway; a profile that names a limit gets it on every run.
    pub fn cgroup(&self, unattended: bool) -> CgroupRequest {
        let default = |named: Option<u64>, value: u64| named.or(unattended.then_some(value));
        CgroupRequest {
            memory: default(self.memory.map(|s| s.0), DEFAULT_MEMORY),
            memory_named: self.memory.is_some(),
            pids: default(self.pids, DEFAULT_PIDS),
            pids_named: self.pids.is_some(),
            cpu_percent: self.cpu_quota.map(|q| q.0),
        }
    }
}

/// What the run's cgroup should limit: the profile's words, before the host is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CgroupRequest {
    pub memory: Option<u64>,
    pub memory_named: bool,
    pub pids: Option<u64>,
    pub pids_named: bool,
    /// Only ever named (there is no default CPU quota).
    pub cpu_percent: Option<u32>,
}

/// A size in bytes, written as a number or as a string with a binary unit ("8G", "512MiB").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct ByteSize(pub u64);

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            // 0 is refused with its range where the profile is checked.
            Raw::Number(n) => Ok(ByteSize(n)),
            Raw::Text(t) => parse_size(&t)
                .map(ByteSize)
                .map_err(serde::de::Error::custom),
        }
    }
}

/// "8G", "8GiB", "512M", "64k", "1073741824": binary units (K, M, G, T = 1024-based).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, unit) = t.split_at(digits);
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kib" | "kb" => 10,
        "m" | "mib" | "mb" => 20,
        "g" | "gib" | "gb" => 30,
        "t" | "tib" | "tb" => 40,
        _ => {
            return Err(format!(
                "{text:?} is not a size: a number of bytes, or a number with K, M, G or T (1024-based), e.g. \"8G\""
            ));
        }
    };
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a size: it starts with no number, e.g. \"8G\""))?;
    if n == 0 {
        return Err(format!("{text:?}: a size must be more than 0"));
    }
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("{text:?} is larger than this machine can count"))
}

/// A CPU quota as a share of one CPU: "200%" is two CPUs' worth of time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct CpuQuota(pub u32);

impl<'de> Deserialize<'de> for CpuQuota {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        parse_cpu_percent(&text)
            .map(CpuQuota)
            .map_err(serde::de::Error::custom)
    }
}

/// "200%" → 200; 1% to 100000%.
pub fn parse_cpu_percent(text: &str) -> Result<u32, String> {
    let bad = || {
        format!(
            "{text:?} is not a CPU quota: a percentage of one CPU from 1% to 100000%, e.g. \"200%\" for two CPUs"
        )
    };
    let n: u32 = text
        .trim()
        .strip_suffix('%')
        .ok_or_else(bad)?
        .trim()
        .parse()
        .map_err(|_| bad())?;
    if (1..=100_000).contains(&n) {
        Ok(n)
    } else {
        Err(bad())
    }
}
