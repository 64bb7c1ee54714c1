//! Landlock as the plan says it: which rights a rule grants beneath a path, the whole plan for
//! one sandbox, and the check every rule passes (absolute, nothing of `/proc` or `/sys`
//! writable). Turning it into a ruleset and enforcing it is `sandbox::landlock`'s.

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::profile::Assurance;

/// How much of the filesystem a rule grants beneath its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FsAccess {
    /// Read files, list directories, execute: the read-only parts of the view.
    ReadExecute,
    /// Everything except creating device nodes and device ioctls: the workspace, the per-run
    /// temp dir, the agent's state dir.
    ReadWrite,
    /// Read, write and device ioctls, nothing created or removed: `/dev/null`, `/dev/tty`,
    /// `/dev/pts`, `/dev/ptmx`, … (terminals keep their ioctls, so `less` and `vim` work).
    Device,
    /// Only listing directories: for `/` of the rebuilt root, so that `ls /` works. It grants no
    /// file reads; everything listable beneath is in the view anyway, and the hidden stand-ins
    /// are mode 000.
    ListDirectories,
}

impl FsAccess {
    /// Whether this access lets a process change what is beneath the path.
    pub fn is_writable(self) -> bool {
        !matches!(self, FsAccess::ReadExecute | FsAccess::ListDirectories)
    }

    pub(crate) fn label(self) -> &'static str {
        match self {
            FsAccess::ReadExecute => "read-execute",
            FsAccess::ReadWrite => "read-write",
            FsAccess::Device => "device",
            FsAccess::ListDirectories => "list-dirs",
        }
    }
}

/// One `path_beneath` rule: `access` on `path` and everything beneath it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LandlockRule {
    pub path: PathBuf,
    pub access: FsAccess,
}

impl LandlockRule {
    /// A rule, checked: the path is absolute and nothing under `/proc` or `/sys` (nor an
    /// ancestor of them, such as `/`) is writable. [`apply_landlock`] checks again, after
    /// resolving symlinks.
    pub fn new(path: impl Into<PathBuf>, access: FsAccess) -> Result<Self, LandlockError> {
        let rule = LandlockRule {
            path: path.into(),
            access,
        };
        check_rule_path(&rule.path, &rule.path, access)?;
        Ok(rule)
    }
}

/// TCP port rules (Landlock ABI 4). They match ports, not addresses, so they are meant for hosts
/// without a network namespace: inside one they would only break the agent's own loopback
/// servers. When set, every bind and connect to a port not listed is denied.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TcpPolicy {
    /// Ports `bind(2)` may use (0 = let the kernel choose an ephemeral port).
    #[serde(default)]
    pub bind: Vec<u16>,
    /// Ports `connect(2)` may reach.
    #[serde(default)]
    pub connect: Vec<u16>,
}

/// Everything Landlock should enforce for one sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LandlockPlan {
    pub rules: Vec<LandlockRule>,
    /// Confine signals and abstract unix socket connections to the Landlock domain (ABI 6).
    pub scope_signals_and_abstract_unix: bool,
    /// TCP port rules, for degraded hosts without a network namespace.
    pub tcp: Option<TcpPolicy>,
    pub assurance: Assurance,
}

#[derive(Debug, thiserror::Error)]
pub enum LandlockError {
    #[error(
        "Landlock ABI {required} is required by assurance = \"strict\" but the kernel offers {found}; \
         Landlock ABI 6 needs Linux 6.12; run `stepproof doctor` (or set assurance = \"best-effort\")"
    )]
    AbiTooOld { found: i32, required: i32 },
    #[error("Landlock rule path {path:?} must be absolute")]
    RelativePath { path: PathBuf },
    #[error(
        "Landlock rule {access} on {path:?} (resolved: {resolved:?}) would make part of /proc or /sys \
         writable; only read-execute is allowed there"
    )]
    WritableKernelFs {
        path: PathBuf,
        resolved: PathBuf,
        access: &'static str,
    },
    #[error("querying the Landlock ABI: {source}")]
    QueryAbi { source: io::Error },
    #[error("inspecting Landlock rule path {path:?}: {source}")]
    InspectPath { path: PathBuf, source: io::Error },
    #[error("opening Landlock rule path {path:?}: {source}")]
    OpenPath {
        path: PathBuf,
        source: landlock::PathFdError,
    },
    #[error("Landlock {operation}: {source}")]
    Ruleset {
        operation: &'static str,
        source: landlock::RulesetError,
    },
    #[error("Landlock {operation} on {path:?}: {source}")]
    AddRule {
        operation: &'static str,
        path: PathBuf,
        source: landlock::RulesetError,
    },
    #[error("the Landlock ruleset was not fully enforced ({status}); run `stepproof doctor`")]
    NotEnforced { status: String },
}

fn is_under_kernel_fs(path: &Path) -> bool {
    path.starts_with("/proc") || path.starts_with("/sys")
}

fn is_ancestor_of_kernel_fs(path: &Path) -> bool {
    Path::new("/proc").starts_with(path) || Path::new("/sys").starts_with(path)
}

pub(crate) fn check_rule_path(
    path: &Path,
    resolved: &Path,
    access: FsAccess,
) -> Result<(), LandlockError> {
    if !path.is_absolute() {
        return Err(LandlockError::RelativePath {
            path: path.to_path_buf(),
        });
    }
    if access.is_writable() {
        // A grant on `/` covers `/proc` and `/sys` too (rules follow the path, across mounts).
        for p in [path, resolved] {
            if is_under_kernel_fs(p) || is_ancestor_of_kernel_fs(p) {
                return Err(LandlockError::WritableKernelFs {
                    path: path.to_path_buf(),
                    resolved: resolved.to_path_buf(),
                    access: access.label(),
                });
            }
        }
    }
    Ok(())
}
