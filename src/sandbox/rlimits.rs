//! Resource limits of the sandboxed processes (profile section `[process.limits]`): no core
//! dumps, a bound on processes and open files, an optional bound on file size and CPU time.
//! Soft and hard limits are set to the same value, so nothing inside can raise them again.

use nix::sys::resource::{Resource, getrlimit, setrlimit};
use serde::{Deserialize, Serialize};

pub use crate::profile::limits::{
    ByteSize, CgroupRequest, CpuQuota, DEFAULT_FSIZE, DEFAULT_MEMORY, DEFAULT_PIDS, Limits,
    parse_cpu_percent, parse_size,
};

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
