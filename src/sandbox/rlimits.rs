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
/// * `fsize`, `cpu`: unset (inherited) unless the profile asks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Largest core file in bytes (RLIMIT_CORE).
    pub core: u64,
    /// Processes (threads) of the user (RLIMIT_NPROC).
    pub nproc: u64,
    /// Open file descriptors per process (RLIMIT_NOFILE).
    pub nofile: u64,
    /// Largest file a process may write, in bytes (RLIMIT_FSIZE); beyond it: SIGXFSZ/EFBIG.
    pub fsize: Option<u64>,
    /// CPU seconds per process (RLIMIT_CPU); beyond it: SIGXCPU, then SIGKILL.
    pub cpu: Option<u64>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            core: 0,
            nproc: 4096,
            nofile: 8192,
            fsize: None,
            cpu: None,
        }
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
    if let Some(v) = limits.fsize {
        out.push(LimitSpec {
            name: "fsize".into(),
            value: v,
        });
    }
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
        assert_eq!(names, ["core", "nproc", "nofile"]);
        let l = Limits {
            fsize: Some(1 << 30),
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
        assert_eq!(l.fsize, Some(1_048_576));
        assert_eq!(l.nproc, 4096);
        assert!(toml::from_str::<Limits>("nfile = 3\n").is_err());
        let empty: Limits = toml::from_str("").unwrap();
        assert_eq!(empty, Limits::default());
    }
}
