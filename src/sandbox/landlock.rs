//! Landlock: the filesystem (and, on hosts without a network namespace, TCP) rights of the
//! sandbox, mirroring the mount view as defence in depth, plus the ABI 6 scopes that confine
//! signals and abstract unix sockets to the sandbox's own Landlock domain.
//!
//! Plan as data, then a thin executor: [`build_ruleset`] turns a [`LandlockPlan`] and a kernel ABI
//! into a [`RulesetSpec`] (every handled right, every rule's exact rights, what was dropped and
//! why) without touching the kernel; [`apply_landlock`] enforces that spec with the landlock
//! crate's `HardRequirement` level, so what the report says is what the kernel enforces.

use std::io;
use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, NetPort, PathBeneath,
    PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope,
};
use serde::{Deserialize, Serialize};

use crate::sys::kernel::landlock_abi_version;

/// The profile's required level of Landlock enforcement.
pub use crate::profile::Assurance;
use crate::sandbox::plan::landlock::check_rule_path;
/// The plan's words for Landlock (rules, accesses, the whole plan), the rule path check, and
/// the entry-by-entry grants of the Landlock-only plan.
pub use crate::sandbox::plan::landlock::{
    DirEntryInfo, Expansion, FsAccess, LandlockError, LandlockPlan, LandlockRule, TcpPolicy,
    grant_except, list_dir,
};

/// The lowest ABI `assurance = "strict"` accepts: ABI 6 brings the signal and abstract unix
/// socket scopes, without which a sandboxed process can signal or connect to the supervisor.
pub const STRICT_MIN_ABI: i32 = 6;

/// What the kernel actually enforces after [`apply_landlock`]: the first record of the audit
/// log and the assurance report carry it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LandlockReport {
    /// The kernel's Landlock ABI (0: Landlock unavailable).
    pub abi: i32,
    /// Filesystem and network rights handled (denied unless a rule grants them).
    pub handled_rights: Vec<String>,
    /// Scopes enforced: `signal`, `abstract_unix_socket`.
    pub scopes: Vec<String>,
    /// Number of rules added to the ruleset (path and port rules).
    pub rules: usize,
    /// What a newer kernel would add, or what best-effort mode lost, and why.
    pub dropped: Vec<String>,
    /// Rules skipped because their path does not exist.
    pub skipped: Vec<String>,
    /// Whether the ruleset was enforced at all (false only in best-effort mode without Landlock).
    pub enforced: bool,
    pub assurance: Assurance,
}

/// One filesystem right with the name the report uses and the ABI that introduced it.
struct FsRight {
    right: AccessFs,
    name: &'static str,
    abi: i32,
    linux: &'static str,
}

const FS_RIGHTS: &[FsRight] = &[
    fs_right(AccessFs::Execute, "execute", 1, "5.13"),
    fs_right(AccessFs::WriteFile, "write_file", 1, "5.13"),
    fs_right(AccessFs::ReadFile, "read_file", 1, "5.13"),
    fs_right(AccessFs::ReadDir, "read_dir", 1, "5.13"),
    fs_right(AccessFs::RemoveDir, "remove_dir", 1, "5.13"),
    fs_right(AccessFs::RemoveFile, "remove_file", 1, "5.13"),
    fs_right(AccessFs::MakeChar, "make_char", 1, "5.13"),
    fs_right(AccessFs::MakeDir, "make_dir", 1, "5.13"),
    fs_right(AccessFs::MakeReg, "make_reg", 1, "5.13"),
    fs_right(AccessFs::MakeSock, "make_sock", 1, "5.13"),
    fs_right(AccessFs::MakeFifo, "make_fifo", 1, "5.13"),
    fs_right(AccessFs::MakeBlock, "make_block", 1, "5.13"),
    fs_right(AccessFs::MakeSym, "make_sym", 1, "5.13"),
    fs_right(AccessFs::Refer, "refer", 2, "5.19"),
    fs_right(AccessFs::Truncate, "truncate", 3, "6.2"),
    fs_right(AccessFs::IoctlDev, "ioctl_dev", 5, "6.10"),
    fs_right(AccessFs::ResolveUnix, "resolve_unix", 9, "7.1"),
];

const fn fs_right(right: AccessFs, name: &'static str, abi: i32, linux: &'static str) -> FsRight {
    FsRight {
        right,
        name,
        abi,
        linux,
    }
}

const TCP_ABI: i32 = 4;
const SCOPE_ABI: i32 = 6;

/// The rights `access` grants on a directory, given the rights the ruleset handles.
pub fn rights_for(access: FsAccess, handled: BitFlags<AccessFs>) -> BitFlags<AccessFs> {
    let rights = match access {
        FsAccess::ReadExecute => AccessFs::Execute | AccessFs::ReadFile | AccessFs::ReadDir,
        FsAccess::ListDirectories => BitFlags::from(AccessFs::ReadDir),
        // Device nodes are never needed in a workspace; device ioctls only matter on devices.
        FsAccess::ReadWrite => {
            handled & !(AccessFs::MakeChar | AccessFs::MakeBlock | AccessFs::IoctlDev)
        }
        FsAccess::Device => {
            AccessFs::ReadFile
                | AccessFs::WriteFile
                | AccessFs::ReadDir
                | AccessFs::Truncate
                | AccessFs::IoctlDev
        }
    };
    rights & handled
}

/// Every filesystem right a kernel with this ABI can handle.
pub fn handled_fs_rights(abi: i32) -> BitFlags<AccessFs> {
    FS_RIGHTS
        .iter()
        .filter(|r| r.abi <= abi)
        .fold(BitFlags::EMPTY, |acc, r| acc | r.right)
}

/// Names of rights, in the order of the table.
pub fn right_names(rights: BitFlags<AccessFs>) -> Vec<String> {
    FS_RIGHTS
        .iter()
        .filter(|r| rights.contains(r.right))
        .map(|r| r.name.to_string())
        .collect()
}

/// What the executor learns about a rule's path from the filesystem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathInfo {
    /// The path with symlinks resolved (what `open(O_PATH)` will reach).
    pub resolved: PathBuf,
    pub is_dir: bool,
}

/// One rule as the kernel will receive it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleSpec {
    pub path: PathBuf,
    pub rights: BitFlags<AccessFs>,
}

/// The ruleset for one kernel ABI, as plain data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RulesetSpec {
    pub abi: i32,
    pub fs: BitFlags<AccessFs>,
    pub net: BitFlags<AccessNet>,
    pub scopes: BitFlags<Scope>,
    pub rules: Vec<RuleSpec>,
    pub tcp_bind: Vec<u16>,
    pub tcp_connect: Vec<u16>,
    pub dropped: Vec<String>,
    pub skipped: Vec<String>,
}

/// Turns a plan into the exact ruleset for a kernel with Landlock ABI `abi`, without touching
/// the kernel. `lookup` reports what a path is (`None`: it does not exist; it is skipped and
/// noted).
pub fn build_ruleset(
    plan: &LandlockPlan,
    abi: i32,
    lookup: &dyn Fn(&Path) -> io::Result<Option<PathInfo>>,
) -> Result<RulesetSpec, LandlockError> {
    if plan.assurance == Assurance::Strict && abi < STRICT_MIN_ABI {
        return Err(LandlockError::AbiTooOld {
            found: abi,
            required: STRICT_MIN_ABI,
        });
    }
    let fs = handled_fs_rights(abi);
    let mut dropped = Vec::new();
    if abi <= 0 {
        dropped.push(
            "everything: Landlock is not available (needs Linux 5.13+ with `lsm=…,landlock`)"
                .to_string(),
        );
    }
    for r in FS_RIGHTS.iter().filter(|r| r.abi > abi && abi > 0) {
        dropped.push(format!(
            "filesystem right {}: needs Landlock ABI {} (Linux {}), kernel has ABI {abi}",
            r.name, r.abi, r.linux
        ));
    }
    let scopes = if plan.scope_signals_and_abstract_unix {
        if abi >= SCOPE_ABI {
            Scope::from_all(ABI::V6)
        } else {
            if abi > 0 {
                dropped.push(format!(
                    "scopes signal, abstract_unix_socket: need Landlock ABI {SCOPE_ABI} (Linux 6.12), \
                     kernel has ABI {abi}"
                ));
            }
            BitFlags::EMPTY
        }
    } else {
        BitFlags::EMPTY
    };
    let (net, tcp_bind, tcp_connect) = match &plan.tcp {
        Some(tcp) if abi >= TCP_ABI => (
            AccessNet::BindTcp | AccessNet::ConnectTcp,
            tcp.bind.clone(),
            tcp.connect.clone(),
        ),
        Some(_) => {
            if abi > 0 {
                dropped.push(format!(
                    "TCP port rules: need Landlock ABI {TCP_ABI} (Linux 6.7), kernel has ABI {abi}"
                ));
            }
            (BitFlags::EMPTY, Vec::new(), Vec::new())
        }
        None => (BitFlags::EMPTY, Vec::new(), Vec::new()),
    };

    let mut rules = Vec::new();
    let mut skipped = Vec::new();
    for rule in &plan.rules {
        check_rule_path(&rule.path, &rule.path, rule.access)?;
        let info = lookup(&rule.path).map_err(|source| LandlockError::InspectPath {
            path: rule.path.clone(),
            source,
        })?;
        let Some(info) = info else {
            skipped.push(format!(
                "{} ({}): does not exist",
                rule.path.display(),
                rule.access.label()
            ));
            continue;
        };
        check_rule_path(&rule.path, &info.resolved, rule.access)?;
        let mut rights = rights_for(rule.access, fs);
        if !info.is_dir {
            // The kernel refuses directory-only rights on a file.
            rights &= AccessFs::from_file(ABI::from(abi.max(1)));
        }
        if abi > 0 && !rights.is_empty() {
            rules.push(RuleSpec {
                path: rule.path.clone(),
                rights,
            });
        }
    }

    Ok(RulesetSpec {
        abi,
        fs: if abi > 0 { fs } else { BitFlags::EMPTY },
        net,
        scopes,
        rules,
        tcp_bind,
        tcp_connect,
        dropped,
        skipped,
    })
}

/// Looks a path up on the real filesystem, following symlinks like `open(O_PATH)` does.
pub fn lookup_path(path: &Path) -> io::Result<Option<PathInfo>> {
    match std::fs::canonicalize(path) {
        Ok(resolved) => {
            let is_dir = std::fs::metadata(&resolved)?.is_dir();
            Ok(Some(PathInfo { resolved, is_dir }))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// The kernel's Landlock ABI (0 when unavailable).
pub fn kernel_abi() -> Result<i32, LandlockError> {
    landlock_abi_version().map_err(|source| LandlockError::QueryAbi { source })
}

fn scope_names(scopes: BitFlags<Scope>) -> Vec<String> {
    let mut names = Vec::new();
    if scopes.contains(Scope::Signal) {
        names.push("signal".to_string());
    }
    if scopes.contains(Scope::AbstractUnixSocket) {
        names.push("abstract_unix_socket".to_string());
    }
    names
}

fn report_for(spec: &RulesetSpec, assurance: Assurance, enforced: bool) -> LandlockReport {
    let mut handled_rights = right_names(spec.fs);
    if spec.net.contains(AccessNet::BindTcp) {
        handled_rights.push("bind_tcp".to_string());
    }
    if spec.net.contains(AccessNet::ConnectTcp) {
        handled_rights.push("connect_tcp".to_string());
    }
    LandlockReport {
        abi: spec.abi,
        handled_rights,
        scopes: scope_names(spec.scopes),
        rules: spec.rules.len() + spec.tcp_bind.len() + spec.tcp_connect.len(),
        dropped: spec.dropped.clone(),
        skipped: spec.skipped.clone(),
        enforced,
        assurance,
    }
}

/// Restricts the current thread (and what it later `execve`s) with the plan. Call it in the
/// sandbox child after the mount view is final and before capabilities are dropped and seccomp
/// is installed. Sets `no_new_privs` (Landlock requires it without `CAP_SYS_ADMIN`).
///
/// The ruleset handles every right of the kernel's ABI, demanded with `HardRequirement`: the
/// spec was computed for exactly this ABI, so a mismatch is an error, never a silent downgrade.
pub fn apply_landlock(plan: &LandlockPlan) -> Result<LandlockReport, LandlockError> {
    let abi = kernel_abi()?;
    let spec = build_ruleset(plan, abi, &lookup_path)?;
    if abi <= 0 {
        // Only reachable in best-effort mode: build_ruleset refuses strict plans.
        return Ok(report_for(&spec, plan.assurance, false));
    }
    let ruleset_err = |operation| move |source| LandlockError::Ruleset { operation, source };

    // ABI::from is the crate's test-only door to a runtime ABI; we use it knowingly: the spec is
    // built for this kernel and enforced in full, and the report states which ABI that was.
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(spec.fs)
        .map_err(ruleset_err("handle filesystem rights"))?;
    if !spec.net.is_empty() {
        ruleset = ruleset
            .handle_access(spec.net)
            .map_err(ruleset_err("handle TCP rights"))?;
    }
    if !spec.scopes.is_empty() {
        ruleset = ruleset
            .scope(spec.scopes)
            .map_err(ruleset_err("set scopes"))?;
    }
    let mut created = ruleset.create().map_err(ruleset_err("create ruleset"))?;
    for rule in &spec.rules {
        let fd = PathFd::new(&rule.path).map_err(|source| LandlockError::OpenPath {
            path: rule.path.clone(),
            source,
        })?;
        created = created
            .add_rule(PathBeneath::new(fd, rule.rights))
            .map_err(|source| LandlockError::AddRule {
                operation: "add path rule",
                path: rule.path.clone(),
                source,
            })?;
    }
    for (ports, right) in [
        (&spec.tcp_bind, AccessNet::BindTcp),
        (&spec.tcp_connect, AccessNet::ConnectTcp),
    ] {
        for &port in ports {
            created = created
                .add_rule(NetPort::new(port, right))
                .map_err(|source| LandlockError::AddRule {
                    operation: "add TCP port rule",
                    path: PathBuf::from(format!("tcp:{port}")),
                    source,
                })?;
        }
    }
    let status = created
        .restrict_self()
        .map_err(ruleset_err("restrict self"))?;
    if status.ruleset != RulesetStatus::FullyEnforced {
        return Err(LandlockError::NotEnforced {
            status: format!("{:?}", status.ruleset),
        });
    }
    tracing::debug!(abi, rules = spec.rules.len(), "landlock enforced");
    Ok(report_for(&spec, plan.assurance, true))
}

/// Lines for `stepproof explain`: each rule with the rights it grants (at the best ABI this build
/// knows), the scopes, the TCP rules and the assurance level. Independent of the running kernel,
/// so the explained policy hashes the same everywhere.
pub fn describe(plan: &LandlockPlan) -> Vec<String> {
    let best = handled_fs_rights(i32::MAX);
    let mut lines = vec![format!(
        "landlock: assurance {} (strict needs ABI {STRICT_MIN_ABI}), handles every filesystem right \
         of the kernel's ABI",
        match plan.assurance {
            Assurance::Strict => "strict",
            Assurance::BestEffort => "best-effort",
        }
    )];
    for rule in &plan.rules {
        lines.push(format!(
            "landlock: {:<12} {}  [{}]",
            rule.access.label(),
            rule.path.display(),
            right_names(rights_for(rule.access, best)).join(" ")
        ));
    }
    lines.push(format!(
        "landlock: scopes {}",
        if plan.scope_signals_and_abstract_unix {
            "signal abstract_unix_socket (confined to the sandbox's domain)"
        } else {
            "none"
        }
    ));
    match &plan.tcp {
        Some(tcp) => lines.push(format!(
            "landlock: tcp bind {:?} connect {:?} (every other port denied)",
            tcp.bind, tcp.connect
        )),
        None => lines.push("landlock: tcp not restricted by Landlock".to_string()),
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(p: &Path) -> io::Result<Option<PathInfo>> {
        if p.starts_with("/missing") {
            return Ok(None);
        }
        let resolved = if p == Path::new("/dev/fd") {
            PathBuf::from("/proc/self/fd")
        } else {
            p.to_path_buf()
        };
        Ok(Some(PathInfo {
            is_dir: !p.starts_with("/dev/null"),
            resolved,
        }))
    }

    fn plan(rules: Vec<LandlockRule>, assurance: Assurance) -> LandlockPlan {
        LandlockPlan {
            rules,
            scope_signals_and_abstract_unix: true,
            tcp: None,
            assurance,
        }
    }

    fn rule(p: &str, access: FsAccess) -> LandlockRule {
        LandlockRule {
            path: p.into(),
            access,
        }
    }

    #[test]
    fn strict_refuses_below_abi_6_with_hint() {
        let err = build_ruleset(&plan(vec![], Assurance::Strict), 5, &dir).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("Landlock ABI 6 needs Linux 6.12 or later"),
            "{msg}"
        );
        assert!(
            !msg.contains("best-effort"),
            "a weaker setting is not the fix: {msg}"
        );
        assert!(build_ruleset(&plan(vec![], Assurance::Strict), 6, &dir).is_ok());
    }

    #[test]
    fn every_right_of_the_abi_is_handled() {
        for abi in 1..=10 {
            let spec = build_ruleset(&plan(vec![], Assurance::BestEffort), abi, &dir).unwrap();
            assert_eq!(spec.fs, AccessFs::from_all(ABI::from(abi)), "abi {abi}");
        }
        let spec = build_ruleset(&plan(vec![], Assurance::Strict), 7, &dir).unwrap();
        for name in ["refer", "truncate", "ioctl_dev", "write_file", "make_block"] {
            assert!(right_names(spec.fs).contains(&name.to_string()), "{name}");
        }
        assert_eq!(spec.scopes, Scope::Signal | Scope::AbstractUnixSocket);
        assert!(spec.dropped.iter().any(|d| d.contains("resolve_unix")));
    }

    #[test]
    fn best_effort_records_what_was_dropped() {
        let mut p = plan(
            vec![rule("/", FsAccess::ReadExecute)],
            Assurance::BestEffort,
        );
        p.tcp = Some(TcpPolicy {
            bind: vec![],
            connect: vec![443],
        });
        let spec = build_ruleset(&p, 3, &dir).unwrap();
        assert!(spec.scopes.is_empty() && spec.net.is_empty());
        let dropped = spec.dropped.join("\n");
        for needle in [
            "ioctl_dev",
            "scopes signal",
            "TCP port rules",
            "ABI 4 (Linux 6.7)",
        ] {
            assert!(dropped.contains(needle), "{needle} missing from {dropped}");
        }
        let none = build_ruleset(&p, 0, &dir).unwrap();
        assert!(none.rules.is_empty() && none.fs.is_empty());
        assert!(none.dropped[0].contains("not available"));
    }

    #[test]
    fn rule_rights_per_access() {
        let p = plan(
            vec![
                rule("/usr", FsAccess::ReadExecute),
                rule("/ws", FsAccess::ReadWrite),
                rule("/dev/pts", FsAccess::Device),
                rule("/dev/null", FsAccess::Device),
                rule("/missing/x", FsAccess::ReadWrite),
            ],
            Assurance::Strict,
        );
        let spec = build_ruleset(&p, 7, &dir).unwrap();
        let names: Vec<Vec<String>> = spec.rules.iter().map(|r| right_names(r.rights)).collect();
        assert_eq!(names[0], ["execute", "read_file", "read_dir"]);
        assert!(names[1].contains(&"refer".to_string()) && names[1].contains(&"truncate".into()));
        assert!(!names[1].contains(&"make_char".to_string()));
        assert!(!names[1].contains(&"ioctl_dev".to_string()));
        assert_eq!(
            names[2],
            [
                "write_file",
                "read_file",
                "read_dir",
                "truncate",
                "ioctl_dev"
            ]
        );
        // A file gets no directory-only rights.
        assert_eq!(
            names[3],
            ["write_file", "read_file", "truncate", "ioctl_dev"]
        );
        assert_eq!(spec.rules.len(), 4);
        assert_eq!(spec.skipped.len(), 1);
        assert!(spec.skipped[0].contains("/missing/x"));
    }

    #[test]
    fn nothing_writable_under_proc_or_sys() {
        for (p, access) in [
            ("/proc", FsAccess::ReadWrite),
            ("/proc/self/mem", FsAccess::Device),
            ("/sys/kernel", FsAccess::ReadWrite),
            ("/", FsAccess::ReadWrite),
        ] {
            assert!(
                matches!(
                    LandlockRule::new(p, access),
                    Err(LandlockError::WritableKernelFs { .. })
                ),
                "{p}"
            );
            let err = build_ruleset(&plan(vec![rule(p, access)], Assurance::Strict), 7, &dir);
            assert!(matches!(err, Err(LandlockError::WritableKernelFs { .. })));
        }
        // A symlink into /proc is caught after resolution.
        let err = build_ruleset(
            &plan(vec![rule("/dev/fd", FsAccess::Device)], Assurance::Strict),
            7,
            &dir,
        );
        assert!(matches!(err, Err(LandlockError::WritableKernelFs { .. })));
        assert!(LandlockRule::new("/proc", FsAccess::ReadExecute).is_ok());
        assert!(LandlockRule::new("/", FsAccess::ReadExecute).is_ok());
        assert!(matches!(
            LandlockRule::new("rel", FsAccess::ReadExecute),
            Err(LandlockError::RelativePath { .. })
        ));
    }

    #[test]
    fn tcp_rules_and_serde() {
        let mut p = plan(vec![rule("/", FsAccess::ReadExecute)], Assurance::Strict);
        p.tcp = Some(TcpPolicy {
            bind: vec![0],
            connect: vec![443, 80],
        });
        let spec = build_ruleset(&p, 7, &dir).unwrap();
        assert_eq!(spec.net, AccessNet::BindTcp | AccessNet::ConnectTcp);
        assert_eq!(report_for(&spec, Assurance::Strict, true).rules, 4);
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(json["assurance"], "strict");
        assert_eq!(json["rules"][0]["access"], "read-execute");
        let back: LandlockPlan = serde_json::from_value(json).unwrap();
        assert_eq!(back, p);
        assert_eq!(
            serde_json::to_value(Assurance::BestEffort).unwrap(),
            "best-effort"
        );
    }

    #[test]
    fn describe_lists_rules_scopes_and_assurance() {
        let lines = describe(&plan(
            vec![rule("/ws", FsAccess::ReadWrite)],
            Assurance::BestEffort,
        ));
        assert!(lines[0].contains("best-effort"));
        assert!(lines[1].contains("/ws") && lines[1].contains("refer"));
        assert!(lines.iter().any(|l| l.contains("abstract_unix_socket")));
    }
}
