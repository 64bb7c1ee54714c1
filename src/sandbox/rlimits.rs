//! Resource limits of the sandboxed processes (profile section `[process.limits]`): no core
//! dumps, a bound on processes and open files, an optional bound on file size and CPU time.
//! Soft and hard limits are set to the same value, so nothing inside can raise them again.

use nix::sys::resource::{Resource, getrlimit, setrlimit};
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

/// One limit to set, as data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitSpec {
    /// `core`, `nproc`, `nofile`, `fsize`, `cpu`.
    pub name: String,
    pub value: u64,
}

/// One limit as applied (soft = hard = `value`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppliedLimit {
    pub name: String,
    pub value: u64,
    /// The profile asked for more than the supervisor's own hard limit: lowered to it.
    pub requested: Option<u64>,
}

#[derive(Debug, thiserror::Error)]
pub enum LimitsError {
    #[error("reading rlimit {name}: {source}")]
    Get {
        name: &'static str,
        source: nix::Error,
    },
    #[error("setting rlimit {name} to {value}: {source}")]
    Set {
        name: &'static str,
        value: u64,
        source: nix::Error,
    },
}

fn resource_of(name: &str) -> Option<(Resource, &'static str)> {
    Some(match name {
        "core" => (Resource::RLIMIT_CORE, "core"),
        "nproc" => (Resource::RLIMIT_NPROC, "nproc"),
        "nofile" => (Resource::RLIMIT_NOFILE, "nofile"),
        "fsize" => (Resource::RLIMIT_FSIZE, "fsize"),
        "cpu" => (Resource::RLIMIT_CPU, "cpu"),
        _ => return None,
    })
}

/// The limits to set, in order.
pub fn plan_limits(limits: &Limits) -> Vec<LimitSpec> {
    let mut out = vec![
        LimitSpec {
            name: "core".into(),
            value: limits.core,
        },
        LimitSpec {
            name: "nproc".into(),
            value: limits.nproc,
        },
        LimitSpec {
            name: "nofile".into(),
            value: limits.nofile,
        },
    ];
    out.push(LimitSpec {
        name: "fsize".into(),
        value: limits.fsize_bytes(),
    });
    if let Some(v) = limits.cpu {
        out.push(LimitSpec {
            name: "cpu".into(),
            value: v,
        });
    }
    out
}

/// Sets soft = hard = the planned value for each limit on the calling process (inherited by
/// what it executes). A value above the current hard limit is lowered to it and reported:
/// the sandbox never gets more than the supervisor had. Call it in the sandbox child before
/// capabilities are dropped (order relative to Landlock does not matter).
pub fn apply_limits(limits: &Limits) -> Result<Vec<AppliedLimit>, LimitsError> {
    let mut applied = Vec::new();
    for spec in plan_limits(limits) {
        let (resource, name) = resource_of(&spec.name).expect("plan_limits names are known");
        let (_, hard) = getrlimit(resource).map_err(|source| LimitsError::Get { name, source })?;
        let value = spec.value.min(hard);
        setrlimit(resource, value, value).map_err(|source| LimitsError::Set {
            name,
            value,
            source,
        })?;
        applied.push(AppliedLimit {
            name: spec.name,
            value,
            requested: (value != spec.value).then_some(spec.value),
        });
    }
    Ok(applied)
}

/// Reads the current (soft, hard) limit by name, for reports and tests.
pub fn read_limit(name: &str) -> Option<(u64, u64)> {
    let (resource, _) = resource_of(name)?;
    getrlimit(resource).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_plan() {
        let l = Limits::default();
        assert_eq!(l.core, 0);
        let plan = plan_limits(&l);
        let names: Vec<&str> = plan.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["core", "nproc", "nofile", "fsize"]);
        assert_eq!(plan[3].value, DEFAULT_FSIZE);
        let l = Limits {
            fsize: Some(ByteSize(1 << 30)),
            cpu: Some(3600),
            ..Limits::default()
        };
        assert_eq!(plan_limits(&l).len(), 5);
        assert!(
            plan_limits(&l)
                .iter()
                .all(|s| resource_of(&s.name).is_some())
        );
    }

    #[test]
    fn profile_section_parses_strictly() {
        let l: Limits = toml::from_str("nofile = 1024\nfsize = 1048576\n").unwrap();
        assert_eq!(l.nofile, 1024);
        assert_eq!(l.fsize, Some(ByteSize(1_048_576)));
        assert_eq!(l.nproc, 4096);
        assert!(toml::from_str::<Limits>("nfile = 3\n").is_err());
        let empty: Limits = toml::from_str("").unwrap();
        assert_eq!(empty, Limits::default());
        let l: Limits =
            toml::from_str("memory = \"512M\"\npids = 64\ncpu_quota = \"150%\"\nfsize = \"2G\"\n")
                .unwrap();
        assert_eq!(l.memory, Some(ByteSize(512 << 20)));
        assert_eq!(l.fsize_bytes(), 2 << 30);
        let request = l.cgroup(false);
        assert_eq!(
            (
                request.memory,
                request.memory_named,
                request.pids,
                request.cpu_percent
            ),
            (Some(512 << 20), true, Some(64), Some(150))
        );
        let d = Limits::default().cgroup(true);
        assert_eq!(
            (
                d.memory,
                d.memory_named,
                d.pids,
                d.pids_named,
                d.cpu_percent
            ),
            (Some(DEFAULT_MEMORY), false, Some(DEFAULT_PIDS), false, None)
        );
        for bad in [
            "memory = \"8X\"",
            "memory = \"0G\"",
            "cpu_quota = \"0%\"",
            "cpu_quota = \"2\"",
            "memory = \"99999999999T\"",
        ] {
            assert!(toml::from_str::<Limits>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sizes_and_quotas() {
        assert_eq!(parse_size("8G"), Ok(8 << 30));
        assert_eq!(parse_size("8GiB"), Ok(8 << 30));
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("64k"), Ok(64 << 10));
        assert_eq!(parse_size("1073741824"), Ok(1 << 30));
        assert!(parse_size("G").is_err());
        assert!(parse_size("-1G").is_err());
        assert!(parse_size("8 apples").is_err());
        assert_eq!(parse_cpu_percent("200%"), Ok(200));
        assert!(parse_cpu_percent("0%").is_err());
        assert!(parse_cpu_percent("abc").is_err());
        assert!(parse_cpu_percent("200").is_err());
    }
}
