//! Landlock as the plan says it: which rights a rule grants beneath a path, the whole plan for
//! one sandbox, the check every rule passes (absolute, nothing of `/proc` or `/sys` writable),
//! and, for the Landlock-only plan, the grants entry by entry that keep hidden paths out.
//! Turning it into a ruleset and enforcing it is `sandbox::landlock`'s.

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
         Landlock ABI 6 needs Linux 6.12 or later: run the agent on a newer kernel; `stepproof doctor` shows what this one gives"
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

/// One directory entry, as [`grant_except`] needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntryInfo {
    pub path: PathBuf,
    /// Where a symlink leads (the path itself otherwise).
    pub resolved: PathBuf,
    pub is_dir: bool,
}

/// Rules that grant `access` on `root` except the `hidden` paths, with what that costs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Expansion {
    pub rules: Vec<LandlockRule>,
    /// What the expansion loses compared with a mount that hides the paths.
    pub losses: Vec<String>,
}

/// For hosts without a mount namespace: Landlock cannot carve an exception out of a granted
/// directory, so every directory on the way from `root` to a hidden path is granted entry by
/// entry (its siblings), never as a whole. A symlink among them gets no rule: Landlock does not
/// check following a link, only what it leads to, so the link gives what its target's own place
/// gives, as in a directory granted whole (a rule on it would grant its target, anywhere: a link
/// in the workspace to `~/.bashrc` would make that writable). `hidden` paths should be absolute
/// and resolved.
///
/// What is lost is recorded: a directory granted entry by entry cannot be listed, nothing can be
/// created, removed or renamed directly in it, and entries created in it later are not
/// reachable.
pub fn grant_except(
    root: &Path,
    access: FsAccess,
    hidden: &[PathBuf],
    list_dir: &dyn Fn(&Path) -> io::Result<Vec<DirEntryInfo>>,
) -> Result<Expansion, LandlockError> {
    let mut out = Expansion {
        rules: Vec::new(),
        losses: Vec::new(),
    };
    expand(root, access, hidden, list_dir, &mut out)?;
    Ok(out)
}

fn touches_hidden(p: &Path, hidden: &[PathBuf]) -> bool {
    hidden.iter().any(|h| h.starts_with(p) || p.starts_with(h))
}

fn expand(
    dir: &Path,
    access: FsAccess,
    hidden: &[PathBuf],
    list_dir: &dyn Fn(&Path) -> io::Result<Vec<DirEntryInfo>>,
    out: &mut Expansion,
) -> Result<(), LandlockError> {
    if !touches_hidden(dir, hidden) {
        out.rules.push(LandlockRule {
            path: dir.to_path_buf(),
            access,
        });
        return Ok(());
    }
    if hidden.iter().any(|h| dir.starts_with(h)) {
        return Ok(()); // the directory is itself hidden
    }
    let inside: Vec<String> = hidden
        .iter()
        .filter(|h| h.starts_with(dir))
        .map(|h| h.display().to_string())
        .collect();
    // Creating, removing and renaming are rights on the directory itself: gone with it.
    let unwritable = if access.is_writable() {
        ", nothing can be created, removed or renamed directly in it,"
    } else {
        ""
    };
    out.losses.push(format!(
        "{} ({}): granted entry by entry to keep {} out; the directory itself cannot be \
         listed{unwritable} and entries created in it later are not reachable",
        dir.display(),
        access.label(),
        inside.join(", ")
    ));
    let entries = list_dir(dir).map_err(|source| LandlockError::InspectPath {
        path: dir.to_path_buf(),
        source,
    })?;
    for entry in entries {
        if hidden.iter().any(|h| entry.path.starts_with(h)) {
            continue;
        }
        if entry.resolved != entry.path {
            continue; // a symlink: see above
        }
        if entry.is_dir {
            expand(&entry.path, access, hidden, list_dir, out)?;
        } else {
            out.rules.push(LandlockRule {
                path: entry.path,
                access,
            });
        }
    }
    Ok(())
}

/// Lists a directory on the real filesystem for [`grant_except`] (symlinks resolved; a dangling
/// one is left out).
pub fn list_dir(dir: &Path) -> io::Result<Vec<DirEntryInfo>> {
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let Ok(resolved) = std::fs::canonicalize(&path) else {
            continue;
        };
        let is_dir = std::fs::metadata(&resolved)
            .map(|m| m.is_dir())
            .unwrap_or(false);
        let own = std::fs::symlink_metadata(&path)?;
        let resolved = if own.file_type().is_symlink() {
            resolved
        } else {
            path.clone()
        };
        entries.push(DirEntryInfo {
            path,
            resolved,
            is_dir,
        });
    }
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grant_except_grants_siblings_one_by_one() {
        let tree = |d: &Path| -> io::Result<Vec<DirEntryInfo>> {
            let e = |p: &str, dir: bool| DirEntryInfo {
                path: PathBuf::from(p),
                resolved: PathBuf::from(p),
                is_dir: dir,
            };
            Ok(match d.to_str().unwrap() {
                "/home/u" => vec![
                    e("/home/u/.bashrc", false),
                    e("/home/u/.config", true),
                    e("/home/u/.ssh", true),
                    DirEntryInfo {
                        path: "/home/u/keys".into(),
                        resolved: "/home/u/.ssh".into(),
                        is_dir: true,
                    },
                    e("/home/u/src", true),
                ],
                "/home/u/.config" => vec![
                    e("/home/u/.config/gh", true),
                    e("/home/u/.config/git", true),
                ],
                _ => vec![],
            })
        };
        let hidden = vec![
            PathBuf::from("/home/u/.ssh"),
            PathBuf::from("/home/u/.config/gh"),
        ];
        let x = grant_except(Path::new("/home/u"), FsAccess::ReadExecute, &hidden, &tree).unwrap();
        let paths: Vec<&str> = x.rules.iter().map(|r| r.path.to_str().unwrap()).collect();
        // The link `keys` gets no rule: it reaches what its target's own place grants.
        assert_eq!(
            paths,
            ["/home/u/.bashrc", "/home/u/.config/git", "/home/u/src"]
        );
        assert_eq!(x.losses.len(), 2, "{:?}", x.losses);
        assert!(
            x.losses
                .iter()
                .all(|l| l.contains("granted entry by entry"))
        );
        // Nothing hidden beneath: one rule.
        let x = grant_except(Path::new("/opt"), FsAccess::ReadExecute, &hidden, &tree).unwrap();
        assert_eq!(x.rules.len(), 1);
        assert!(x.losses.is_empty());
    }

    #[test]
    fn grant_except_on_a_real_tree() {
        let d = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(d.path()).unwrap();
        std::fs::create_dir_all(root.join("a/secret")).unwrap();
        std::fs::write(root.join("a/ok"), "").unwrap();
        std::fs::write(root.join("b"), "").unwrap();
        std::os::unix::fs::symlink(root.join("a/secret"), root.join("link")).unwrap();
        // A link out of the tree: a rule on it would grant read-write where it leads.
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("a/out")).unwrap();
        let hidden = vec![root.join("a/secret")];
        let x = grant_except(&root, FsAccess::ReadWrite, &hidden, &list_dir).unwrap();
        let paths: Vec<PathBuf> = x.rules.iter().map(|r| r.path.clone()).collect();
        assert_eq!(paths, [root.join("a/ok"), root.join("b")]);
        assert!(
            x.losses
                .iter()
                .any(|l| l.contains("nothing can be created, removed or renamed")),
            "{:?}",
            x.losses
        );
    }
}
