//! The policy: which system calls the filter answers with an errno, under which argument
//! conditions, and why, as a table of plain data ([`rule_table`]) that `stepproof explain`
//! prints ([`describe`]) and the assembler compiles.

use serde::{Deserialize, Serialize};

use super::numbers::SECCOMP_RET_ERRNO;
/// The plan's name for a rule table.
pub use crate::sandbox::plan::SeccompRules;

/// What the filter answers when a rule matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Fail the call with this errno (EPERM, ENOSYS, …).
    Errno(i32),
}

impl Action {
    /// `SECCOMP_RET_*` value.
    pub fn ret(self) -> u32 {
        match self {
            Action::Errno(e) => SECCOMP_RET_ERRNO | (e as u32 & 0xffff),
        }
    }

    pub(super) fn label(self) -> String {
        match self {
            Action::Errno(e) => errno_name(e).to_string(),
        }
    }
}

/// Width of the compared argument. `Dword` compares the low 32 bits only, which is what the
/// kernel itself reads for `int`/`unsigned int` parameters (ioctl's `cmd`, socket's `domain`):
/// comparing 64 bits would let `0x1_0000_5412` slip past a TIOCSTI rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Width {
    Dword,
    Qword,
}

/// One comparison on a system call argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cmp {
    Eq(u64),
    Ne(u64),
    /// `arg & mask == value`
    MaskedEq {
        mask: u64,
        value: u64,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ArgCondition {
    /// Argument index, 0 to 5.
    pub arg: u8,
    pub width: Width,
    pub cmp: Cmp,
}

/// One row of the table: `action` when `syscall` is called and every condition holds (no
/// conditions: always). Several rows for one syscall match when any of them does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SyscallRule {
    pub syscall: &'static str,
    pub conditions: Vec<ArgCondition>,
    pub action: Action,
    pub reason: &'static str,
}

const EPERM: Action = Action::Errno(libc::EPERM);
const ENOSYS: Action = Action::Errno(libc::ENOSYS);

pub const TIOCSTI: u64 = 0x5412;
pub const TIOCLINUX: u64 = 0x541C;
pub const IPPROTO_MPTCP: u64 = 262;
const AF_UNIX: u64 = 1;
const AF_INET: u64 = 2;
const AF_INET6: u64 = 10;
const AF_NETLINK: u64 = 16;
const NETLINK_ROUTE: u64 = 0;
const SOCK_RAW: u64 = 3;
const SOCK_PACKET: u64 = 10;
/// `SOCK_TYPE_MASK`: the type without SOCK_NONBLOCK / SOCK_CLOEXEC.
const SOCK_TYPE_MASK: u64 = 0xf;
pub const S_ISUID: u64 = 0o4000;
pub const S_ISGID: u64 = 0o2000;
/// `O_CREAT` and `__O_TMPFILE` (O_TMPFILE without O_DIRECTORY): the open flags under which the
/// kernel reads the mode argument. The same values on x86_64 and aarch64.
pub const O_CREAT: u64 = 0o100;
pub const O_TMPFILE_BIT: u64 = 0o2000_0000;

/// Every namespace flag of clone/unshare: NEWTIME, NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER,
/// NEWPID, NEWNET.
pub const NAMESPACE_FLAGS: [(u64, &str); 8] = [
    (0x0000_0080, "CLONE_NEWTIME"),
    (0x0002_0000, "CLONE_NEWNS"),
    (0x0200_0000, "CLONE_NEWCGROUP"),
    (0x0400_0000, "CLONE_NEWUTS"),
    (0x0800_0000, "CLONE_NEWIPC"),
    (0x1000_0000, "CLONE_NEWUSER"),
    (0x2000_0000, "CLONE_NEWPID"),
    (0x4000_0000, "CLONE_NEWNET"),
];

fn always(syscall: &'static str, reason: &'static str) -> SyscallRule {
    SyscallRule {
        syscall,
        conditions: Vec::new(),
        action: EPERM,
        reason,
    }
}

fn when(syscall: &'static str, conditions: Vec<ArgCondition>, reason: &'static str) -> SyscallRule {
    SyscallRule {
        syscall,
        conditions,
        action: EPERM,
        reason,
    }
}

fn dword(arg: u8, cmp: Cmp) -> ArgCondition {
    ArgCondition {
        arg,
        width: Width::Dword,
        cmp,
    }
}

/// `(u32)arg & bits == bits`. mode_t and the open flags are 32-bit (the kernel even keeps only
/// the low 16 bits of a mode), so a value with high bits set is judged by its low word.
fn has_bits(arg: u8, bits: u64) -> ArgCondition {
    dword(
        arg,
        Cmp::MaskedEq {
            mask: bits,
            value: bits,
        },
    )
}

/// The rows that keep setuid and setgid bits from being made inside the sandbox: a file left
/// in the workspace with either bit runs with its owner's or group's rights once the run is
/// over, for any user of the host (the owner is root when the workspace is idmapped to root).
/// The mode is passed by value, so a path through `/proc/self/fd` or an `O_PATH` fd changes
/// nothing.
///
/// S_ISUID is refused everywhere. S_ISGID is refused only where a call creates a file (a new
/// file is never a directory: `mkdir` is not filtered and the kernel drops both bits there).
/// chmod and friends may set S_ISGID: seccomp cannot tell a directory from a file, and a setgid
/// directory is how shared group directories work (`mkdir -m 2775` is mkdir + fchmod in GNU
/// coreutils, `install -d -m 2775` too, git's core.sharedRepository chmods g+s). A setgid
/// *file* made that way is stripped and reported after the run.
fn setuid_setgid_rows() -> Vec<SyscallRule> {
    let mut t = Vec::new();
    // (syscall, index of the mode argument)
    for (syscall, mode) in [
        ("chmod", 1),
        ("fchmod", 1),
        ("fchmodat", 2),
        ("fchmodat2", 2),
    ] {
        t.push(when(
            syscall,
            vec![has_bits(mode, S_ISUID)],
            "setuid bit: the file would run as its owner on the host after the run (setgid \
             stays allowed: shared group directories need chmod g+s, a setgid file is \
             stripped after the run)",
        ));
    }
    for (syscall, mode) in [("creat", 1), ("mknod", 1), ("mknodat", 2)] {
        t.push(when(
            syscall,
            vec![has_bits(mode, S_ISUID)],
            "creates a setuid file: it would run as its owner on the host after the run",
        ));
        t.push(when(
            syscall,
            vec![has_bits(mode, S_ISGID)],
            "creates a setgid file (never a directory): it would run with its group on the \
             host after the run",
        ));
    }
    // (syscall, index of the flags argument); the mode follows the flags.
    for (syscall, flags) in [("open", 1), ("openat", 2)] {
        for (flag, bit, reason) in [
            (
                O_CREAT,
                S_ISUID,
                "O_CREAT with a setuid mode: the file would run as its owner on the host \
                 after the run",
            ),
            (
                O_CREAT,
                S_ISGID,
                "O_CREAT with a setgid mode (a new file, never a directory): it would run \
                 with its group on the host after the run",
            ),
            (
                O_TMPFILE_BIT,
                S_ISUID,
                "O_TMPFILE with a setuid mode: linkat would make it a setuid file",
            ),
            (
                O_TMPFILE_BIT,
                S_ISGID,
                "O_TMPFILE with a setgid mode: linkat would make it a setgid file",
            ),
        ] {
            t.push(when(
                syscall,
                vec![has_bits(flags, flag), has_bits(flags + 1, bit)],
                reason,
            ));
        }
    }
    t.push(SyscallRule {
        syscall: "openat2",
        conditions: Vec::new(),
        action: ENOSYS,
        reason: "the mode lives in a struct seccomp cannot read; the C library does not call \
                 openat2 and callers fall back to openat on ENOSYS",
    });
    t
}

/// The table a plan names (`SandboxPlan::seccomp`).
pub fn rules_for(rules: SeccompRules) -> Vec<SyscallRule> {
    match rules {
        SeccompRules::Standard => rule_table(),
    }
}

/// The deny table, in the order `stepproof explain` shows it.
pub fn rule_table() -> Vec<SyscallRule> {
    let mut t = vec![
        always(
            "ptrace",
            "reads and writes other processes' memory and registers (no Yama here)",
        ),
        always(
            "process_vm_readv",
            "reads another process's memory without ptrace",
        ),
        always(
            "process_vm_writev",
            "writes another process's memory without ptrace",
        ),
    ];
    for name in [
        "mount",
        "umount2",
        "fsopen",
        "fsconfig",
        "fsmount",
        "fspick",
        "move_mount",
        "open_tree",
        "open_tree_attr",
        "mount_setattr",
    ] {
        t.push(always(
            name,
            "changes the mount view the sandbox is built on",
        ));
    }
    t.extend([
        always("pivot_root", "changes the root the sandbox is built on"),
        always(
            "chroot",
            "changes the root; classic escape with a leaked fd",
        ),
        always(
            "setns",
            "joins another namespace through an inherited or opened fd",
        ),
        always(
            "unshare",
            "new namespaces: a user namespace hands out capabilities inside it",
        ),
    ]);
    for (flag, _) in NAMESPACE_FLAGS {
        t.push(when(
            "clone",
            vec![dword(
                0,
                Cmp::MaskedEq {
                    mask: flag,
                    value: flag,
                },
            )],
            "clone with a namespace flag: a user namespace hands out capabilities inside it",
        ));
    }
    t.push(SyscallRule {
        syscall: "clone3",
        conditions: Vec::new(),
        action: ENOSYS,
        reason: "flags live in memory seccomp cannot read; ENOSYS makes libc fall back to clone",
    });
    t.extend([
        always(
            "bpf",
            "loads programs into the kernel; large attack surface",
        ),
        always(
            "perf_event_open",
            "kernel and cross-process profiling; large attack surface",
        ),
        always(
            "keyctl",
            "kernel keyrings are shared beyond the sandbox (user and session keys)",
        ),
        always("add_key", "kernel keyrings are shared beyond the sandbox"),
        always(
            "request_key",
            "kernel keyrings; can call out to a host helper",
        ),
        always(
            "userfaultfd",
            "stalls kernel memory accesses; a staple of kernel exploits",
        ),
        always(
            "io_uring_setup",
            "io_uring bypasses seccomp for the operations it runs; large attack surface",
        ),
        always("io_uring_enter", "io_uring: see io_uring_setup"),
        always("io_uring_register", "io_uring: see io_uring_setup"),
        always("kexec_load", "replaces the running kernel"),
        always("kexec_file_load", "replaces the running kernel"),
        always("init_module", "loads kernel code"),
        always("finit_module", "loads kernel code"),
        always("delete_module", "unloads kernel code"),
        always(
            "open_by_handle_at",
            "opens files by handle, around the mount view (shocker)",
        ),
        always(
            "name_to_handle_at",
            "makes the handles open_by_handle_at uses; leaks inode identities",
        ),
        always("syslog", "reads and clears the kernel log"),
        always("acct", "switches process accounting to a file"),
        always("swapon", "changes the host's swap"),
        always("swapoff", "changes the host's swap"),
        always("reboot", "reboots or halts (or kexecs) the machine"),
        always("iopl", "raw I/O port access (x86)"),
        always("ioperm", "raw I/O port access (x86)"),
        always("quotactl", "changes filesystem quotas"),
        always("quotactl_fd", "changes filesystem quotas"),
        when(
            "personality",
            vec![dword(0, Cmp::Ne(0)), dword(0, Cmp::Ne(0xffff_ffff))],
            "personality flags (READ_IMPLIES_EXEC, ADDR_NO_RANDOMIZE, …) weaken hardening; \
             only the default (0) and the query (0xffffffff) are allowed",
        ),
        when(
            "ioctl",
            vec![dword(1, Cmp::Eq(TIOCSTI))],
            "TIOCSTI pushes keystrokes into the terminal: typed commands run outside the sandbox \
             (low 32 bits compared, so the high-bit variant is caught)",
        ),
        when(
            "ioctl",
            vec![dword(1, Cmp::Eq(TIOCLINUX))],
            "TIOCLINUX pastes the console selection as input, like TIOCSTI",
        ),
    ]);
    for syscall in ["socket", "socketpair"] {
        t.push(when(
            syscall,
            vec![
                dword(0, Cmp::Ne(AF_UNIX)),
                dword(0, Cmp::Ne(AF_INET)),
                dword(0, Cmp::Ne(AF_INET6)),
                dword(0, Cmp::Ne(AF_NETLINK)),
            ],
            "socket families other than unix, inet, inet6, netlink (AF_PACKET, AF_VSOCK, \
             AF_BLUETOOTH, AF_ALG, …): host interfaces and a large attack surface",
        ));
    }
    t.push(when(
        "socket",
        vec![
            dword(0, Cmp::Eq(AF_NETLINK)),
            dword(2, Cmp::Ne(NETLINK_ROUTE)),
        ],
        "netlink other than NETLINK_ROUTE (getifaddrs needs route; audit, netfilter, uevent, … not)",
    ));
    for family in [AF_INET, AF_INET6] {
        for (ty, reason) in [
            (
                SOCK_RAW,
                "raw IP sockets forge packets (type compared without SOCK_NONBLOCK/SOCK_CLOEXEC)",
            ),
            (
                SOCK_PACKET,
                "SOCK_PACKET on inet is silently turned into AF_PACKET by the kernel",
            ),
        ] {
            t.push(when(
                "socket",
                vec![
                    dword(0, Cmp::Eq(family)),
                    dword(
                        1,
                        Cmp::MaskedEq {
                            mask: SOCK_TYPE_MASK,
                            value: ty,
                        },
                    ),
                ],
                reason,
            ));
        }
    }
    t.push(when(
        "socket",
        vec![dword(2, Cmp::Eq(IPPROTO_MPTCP))],
        "MPTCP: a large, young attack surface the agent does not need",
    ));
    t.extend(setuid_setgid_rows());
    t
}

fn errno_name(e: i32) -> &'static str {
    match e {
        libc::EPERM => "EPERM",
        libc::ENOSYS => "ENOSYS",
        libc::EACCES => "EACCES",
        _ => "errno",
    }
}

fn describe_condition(c: &ArgCondition) -> String {
    let arg = match c.width {
        Width::Dword => format!("(u32)arg{}", c.arg),
        Width::Qword => format!("arg{}", c.arg),
    };
    match c.cmp {
        Cmp::Eq(v) => format!("{arg} == {v:#x}"),
        Cmp::Ne(v) => format!("{arg} != {v:#x}"),
        Cmp::MaskedEq { mask, value } => format!("{arg} & {mask:#x} == {value:#x}"),
    }
}

/// Lines for `stepproof explain`: the rule set the plan names, then one per table row,
/// `syscall [if …] -> ACTION  # reason`.
pub fn describe(rules: SeccompRules) -> Vec<String> {
    let table = rules_for(rules);
    let mut lines = vec![
        format!(
            "seccomp: rule set {} ({} rows; the same for both isolations)",
            rules.name(),
            table.len()
        ),
        "seccomp: foreign architectures and the x32 ABI -> KILL_PROCESS".to_string(),
        "seccomp: everything not listed -> ALLOW (no argument checks: answered by the kernel's \
         action cache)"
            .to_string(),
    ];
    for rule in table {
        let cond = if rule.conditions.is_empty() {
            String::new()
        } else {
            let parts: Vec<String> = rule.conditions.iter().map(describe_condition).collect();
            format!(" if {}", parts.join(" && "))
        };
        lines.push(format!(
            "seccomp: {}{} -> {}  # {}",
            rule.syscall,
            cond,
            rule.action.label(),
            rule.reason
        ));
    }
    lines
}

/// Hot or ordinary calls that must stay rule-free, so that the kernel's action cache answers them
/// (the assembler's and the simulator's tests check both).
#[cfg(test)]
pub(super) const HOT: &[&str] = &[
    "read",
    "write",
    "close",
    "newfstatat",
    "fstat",
    "statx",
    "getppid",
    "getpid",
    "futex",
    "mmap",
    "munmap",
    "brk",
    "lseek",
    "execve",
    "exit_group",
    "rt_sigaction",
    "rt_sigprocmask",
    "getdents64",
    "fcntl",
    "wait4",
    "stat",
];

#[cfg(test)]
mod tests {
    use super::super::numbers::is_known_syscall;
    use super::*;
    use std::collections::HashSet;

    const ISSUE_LIST: &[&str] = &[
        "ptrace",
        "process_vm_readv",
        "process_vm_writev",
        "mount",
        "umount2",
        "fsopen",
        "fsconfig",
        "fsmount",
        "fspick",
        "move_mount",
        "open_tree",
        "mount_setattr",
        "pivot_root",
        "chroot",
        "setns",
        "unshare",
        "clone",
        "clone3",
        "bpf",
        "perf_event_open",
        "keyctl",
        "add_key",
        "request_key",
        "userfaultfd",
        "io_uring_setup",
        "io_uring_enter",
        "io_uring_register",
        "kexec_load",
        "kexec_file_load",
        "init_module",
        "finit_module",
        "delete_module",
        "open_by_handle_at",
        "name_to_handle_at",
        "syslog",
        "acct",
        "swapon",
        "swapoff",
        "reboot",
        "iopl",
        "ioperm",
        "quotactl",
        "quotactl_fd",
        "personality",
        "ioctl",
        "socket",
    ];

    #[test]
    fn every_issue_syscall_has_a_rule_with_a_reason() {
        let table = rule_table();
        for name in ISSUE_LIST {
            let rows: Vec<_> = table.iter().filter(|r| r.syscall == *name).collect();
            assert!(!rows.is_empty(), "{name} missing");
            for r in rows {
                assert!(r.reason.len() > 10, "{name} lacks a reason");
                assert!(!r.reason.contains('\n'), "{name}: one-line reason");
            }
        }
        let enosys = ["clone3", "openat2"];
        for name in enosys {
            let rows: Vec<_> = table.iter().filter(|r| r.syscall == name).collect();
            assert_eq!(rows.len(), 1, "{name}");
            assert_eq!(rows[0].action, Action::Errno(libc::ENOSYS), "{name}");
        }
        assert!(
            table
                .iter()
                .filter(|r| !enosys.contains(&r.syscall))
                .all(|r| r.action == Action::Errno(libc::EPERM))
        );
    }

    #[test]
    fn no_duplicate_rows_and_no_mixed_conditional_rows() {
        let table = rule_table();
        let mut seen = HashSet::new();
        for r in &table {
            assert!(
                seen.insert((r.syscall, r.conditions.clone())),
                "duplicate {r:?}"
            );
            assert!(is_known_syscall(r.syscall), "{}", r.syscall);
            assert!(r.conditions.len() <= 4 && r.conditions.iter().all(|c| c.arg < 6));
        }
        for r in table.iter().filter(|r| r.conditions.is_empty()) {
            assert_eq!(
                table.iter().filter(|o| o.syscall == r.syscall).count(),
                1,
                "{} is both unconditional and conditional",
                r.syscall
            );
        }
    }

    #[test]
    fn describe_has_one_line_per_rule() {
        let lines = describe(SeccompRules::Standard);
        assert_eq!(lines.len(), rule_table().len() + 3);
        assert_eq!(
            lines[0],
            format!(
                "seccomp: rule set standard ({} rows; the same for both isolations)",
                rule_table().len()
            )
        );
        assert!(
            lines
                .iter()
                .any(|l| l.contains("ioctl if (u32)arg1 == 0x5412 -> EPERM"))
        );
        assert!(lines.iter().any(|l| l.contains("clone3 -> ENOSYS")));
    }
}
