//! seccomp: the system calls no sandboxed process needs and that reach risky kernel interfaces,
//! denied with an errno (EPERM; ENOSYS for clone3 and openat2), setuid/setgid modes refused
//! (the first line against privilege left in a file), and every foreign architecture (and the
//! x32 ABI on x86_64) killed.
//!
//! The rule table is data ([`rule_table`]), unit-tested as data. [`compile_filters`] turns it
//! into a stack of classic BPF programs, because a seccompiler filter has one match action:
//!
//! 1. a hand-written prefix (6 instructions) that kills the process for a foreign architecture
//!    or an x32 system call number (bit 30 set, except -1) and allows everything else;
//! 2. one seccompiler filter per distinct errno in the table (EPERM, ENOSYS), allowing what
//!    it does not match; the rows of the hot calls with argument checks (open, openat) get an
//!    EPERM filter of their own, first.
//!
//! The kernel runs every filter and keeps the most severe answer (kill > errno > allow).
//! Allowed system calls are answered by the kernel's per-syscall action cache without running
//! any program, as long as no filter looks at their arguments for the native architecture:
//! ioctl, socket, socketpair, clone, personality and the mode-setting calls (chmod, fchmod*,
//! creat, mknod*, open, openat) have argument checks; read, write, stat, close, getppid, … never
//! (see the `hot_syscalls_are_constant_allow` test, which emulates the kernel's cache check).
//! openat is the one hot call that pays for a program run, the price of refusing setuid modes.

use std::collections::BTreeMap;

use seccompiler::{
    SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
    TargetArch, sock_filter,
};
use serde::{Deserialize, Serialize};

pub use seccompiler::BpfProgram;

/// An architecture the table supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    X86_64,
    Aarch64,
}

impl Arch {
    /// The architecture this binary runs on.
    pub fn native() -> Arch {
        #[cfg(target_arch = "aarch64")]
        {
            Arch::Aarch64
        }
        #[cfg(not(target_arch = "aarch64"))]
        {
            Arch::X86_64
        }
    }

    /// `AUDIT_ARCH_*`, what the kernel puts in `seccomp_data.arch`.
    pub fn audit_arch(self) -> u32 {
        match self {
            Arch::X86_64 => 62 | 0x8000_0000 | 0x4000_0000,
            Arch::Aarch64 => 183 | 0x8000_0000 | 0x4000_0000,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Aarch64 => "aarch64",
        }
    }

    fn target(self) -> TargetArch {
        match self {
            Arch::X86_64 => TargetArch::x86_64,
            Arch::Aarch64 => TargetArch::aarch64,
        }
    }
}

/// What the filter answers when a rule matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Fail the call with this errno (EPERM, ENOSYS, …).
    Errno(i32),
}

impl Action {
    fn seccompiler(self) -> SeccompAction {
        match self {
            Action::Errno(e) => SeccompAction::Errno(e as u32),
        }
    }

    /// `SECCOMP_RET_*` value.
    pub fn ret(self) -> u32 {
        match self {
            Action::Errno(e) => SECCOMP_RET_ERRNO | (e as u32 & 0xffff),
        }
    }

    fn label(self) -> String {
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

/// System call numbers the table and the tests use: (name, x86_64, aarch64).
const SYSCALL_NUMBERS: &[(&str, i64, Option<i64>)] = &[
    ("ptrace", 101, Some(117)),
    ("process_vm_readv", 310, Some(270)),
    ("process_vm_writev", 311, Some(271)),
    ("mount", 165, Some(40)),
    ("umount2", 166, Some(39)),
    ("fsopen", 430, Some(430)),
    ("fsconfig", 431, Some(431)),
    ("fsmount", 432, Some(432)),
    ("fspick", 433, Some(433)),
    ("move_mount", 429, Some(429)),
    ("open_tree", 428, Some(428)),
    ("open_tree_attr", 467, Some(467)),
    ("mount_setattr", 442, Some(442)),
    ("pivot_root", 155, Some(41)),
    ("chroot", 161, Some(51)),
    ("setns", 308, Some(268)),
    ("unshare", 272, Some(97)),
    ("clone", 56, Some(220)),
    ("clone3", 435, Some(435)),
    ("bpf", 321, Some(280)),
    ("perf_event_open", 298, Some(241)),
    ("keyctl", 250, Some(219)),
    ("add_key", 248, Some(217)),
    ("request_key", 249, Some(218)),
    ("userfaultfd", 323, Some(282)),
    ("io_uring_setup", 425, Some(425)),
    ("io_uring_enter", 426, Some(426)),
    ("io_uring_register", 427, Some(427)),
    ("kexec_load", 246, Some(104)),
    ("kexec_file_load", 320, Some(294)),
    ("init_module", 175, Some(105)),
    ("finit_module", 313, Some(273)),
    ("delete_module", 176, Some(106)),
    ("open_by_handle_at", 304, Some(265)),
    ("name_to_handle_at", 303, Some(264)),
    ("syslog", 103, Some(116)),
    ("acct", 163, Some(89)),
    ("swapon", 167, Some(224)),
    ("swapoff", 168, Some(225)),
    ("reboot", 169, Some(142)),
    ("iopl", 172, None),
    ("ioperm", 173, None),
    ("quotactl", 179, Some(60)),
    ("quotactl_fd", 443, Some(443)),
    ("personality", 135, Some(92)),
    ("ioctl", 16, Some(29)),
    ("socket", 41, Some(198)),
    ("socketpair", 53, Some(199)),
    ("chmod", 90, None),
    ("fchmod", 91, Some(52)),
    ("fchmodat", 268, Some(53)),
    ("fchmodat2", 452, Some(452)),
    ("creat", 85, None),
    ("mknod", 133, None),
    ("mknodat", 259, Some(33)),
    ("open", 2, None),
    ("openat", 257, Some(56)),
    ("openat2", 437, Some(437)),
    // Not in the table: hot or ordinary calls the tests check stay rule-free.
    ("read", 0, Some(63)),
    ("write", 1, Some(64)),
    ("close", 3, Some(57)),
    ("newfstatat", 262, Some(79)),
    ("fstat", 5, Some(80)),
    ("statx", 332, Some(291)),
    ("getppid", 110, Some(173)),
    ("getpid", 39, Some(172)),
    ("futex", 202, Some(98)),
    ("mmap", 9, Some(222)),
    ("munmap", 11, Some(215)),
    ("brk", 12, Some(214)),
    ("lseek", 8, Some(62)),
    ("execve", 59, Some(221)),
    ("exit_group", 231, Some(94)),
    ("rt_sigaction", 13, Some(134)),
    ("rt_sigprocmask", 14, Some(135)),
    ("getdents64", 217, Some(61)),
    ("fcntl", 72, Some(25)),
    ("wait4", 61, Some(260)),
    ("stat", 4, None),
    ("mkdirat", 258, Some(34)),
];

/// The number of `name` on `arch`; `None` when the call does not exist there (iopl on aarch64)
/// or the table does not know it.
pub fn syscall_number(name: &str, arch: Arch) -> Option<i64> {
    SYSCALL_NUMBERS
        .iter()
        .find(|(n, _, _)| *n == name)
        .and_then(|&(_, x86, arm)| match arch {
            Arch::X86_64 => Some(x86),
            Arch::Aarch64 => arm,
        })
}

/// Whether the table knows `name` at all (on some architecture).
fn is_known_syscall(name: &str) -> bool {
    SYSCALL_NUMBERS.iter().any(|(n, _, _)| *n == name)
}

#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    #[error("seccomp rule for unknown system call {syscall:?}")]
    UnknownSyscall { syscall: String },
    #[error("building the seccomp condition for {syscall} on {arch}: {source}")]
    Condition {
        syscall: String,
        arch: &'static str,
        source: seccompiler::BackendError,
    },
    #[error("compiling the seccomp filter for {action} on {arch}: {source}")]
    Compile {
        action: String,
        arch: &'static str,
        source: seccompiler::BackendError,
    },
    #[error("setting no_new_privs before seccomp: {source}")]
    NoNewPrivs { source: nix::Error },
    #[error(
        "installing seccomp filter {index} of {count}: {source}; the kernel needs \
         CONFIG_SECCOMP_FILTER, run `stepproof doctor`"
    )]
    Install {
        index: usize,
        count: usize,
        source: seccompiler::Error,
    },
}

// Classic BPF opcodes and seccomp return values (linux/filter.h, linux/seccomp.h).
const BPF_LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
const BPF_JMP_JA: u16 = 0x05;
const BPF_JMP_JEQ_K: u16 = 0x05 | 0x10;
const BPF_JMP_JGT_K: u16 = 0x05 | 0x20;
const BPF_JMP_JGE_K: u16 = 0x05 | 0x30;
const BPF_JMP_JSET_K: u16 = 0x05 | 0x40;
const BPF_ALU_AND_K: u16 = 0x04 | 0x50;
const BPF_RET_K: u16 = 0x06;
pub const SECCOMP_RET_KILL_PROCESS: u32 = 0x8000_0000;
pub const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
pub const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
const SECCOMP_RET_ACTION_FULL: u32 = 0xffff_0000;
const X32_SYSCALL_BIT: u32 = 0x4000_0000;
const OFFSET_NR: u32 = 0;
const OFFSET_ARCH: u32 = 4;

fn stmt(code: u16, k: u32) -> sock_filter {
    sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// The hand-written first filter: a foreign architecture or an x32 call (same AUDIT_ARCH as
/// x86_64, number with bit 30 set) kills the process; `nr == -1` (what a tracer uses to skip a
/// call) is let through as libseccomp does. Everything else: allow. seccompiler's own filters
/// also kill foreign architectures, but know nothing of x32.
pub fn arch_prefix(arch: Arch) -> BpfProgram {
    let kill = stmt(BPF_RET_K, SECCOMP_RET_KILL_PROCESS);
    let allow = stmt(BPF_RET_K, SECCOMP_RET_ALLOW);
    match arch {
        Arch::X86_64 => vec![
            stmt(BPF_LD_W_ABS, OFFSET_ARCH),
            jump(BPF_JMP_JEQ_K, arch.audit_arch(), 0, 3), // foreign arch -> kill
            stmt(BPF_LD_W_ABS, OFFSET_NR),
            jump(BPF_JMP_JSET_K, X32_SYSCALL_BIT, 0, 2), // native number -> allow
            jump(BPF_JMP_JEQ_K, u32::MAX, 1, 0),         // -1 -> allow, x32 -> kill
            kill,
            allow,
        ],
        Arch::Aarch64 => vec![
            stmt(BPF_LD_W_ABS, OFFSET_ARCH),
            jump(BPF_JMP_JEQ_K, arch.audit_arch(), 1, 0),
            kill,
            allow,
        ],
    }
}

/// A filter that allows everything: with it, every call takes the kernel's seccomp entry path
/// and nothing more. The benchmark's "physical floor".
pub fn allow_all_filter() -> BpfProgram {
    vec![stmt(BPF_RET_K, SECCOMP_RET_ALLOW)]
}

fn to_seccompiler_condition(
    c: &ArgCondition,
    syscall: &str,
    arch: Arch,
) -> Result<SeccompCondition, SeccompError> {
    let (op, value) = match c.cmp {
        Cmp::Eq(v) => (SeccompCmpOp::Eq, v),
        Cmp::Ne(v) => (SeccompCmpOp::Ne, v),
        Cmp::MaskedEq { mask, value } => (SeccompCmpOp::MaskedEq(mask), value),
    };
    let len = match c.width {
        Width::Dword => SeccompCmpArgLen::Dword,
        Width::Qword => SeccompCmpArgLen::Qword,
    };
    SeccompCondition::new(c.arg, len, op, value).map_err(|source| SeccompError::Condition {
        syscall: syscall.to_string(),
        arch: arch.name(),
        source,
    })
}

/// Compiles the table for `arch`: the arch/x32 prefix, then one filter per action. Call it
/// before forking the sandbox child (it allocates); install the result with
/// [`apply_seccomp_on_current_thread`].
pub fn compile_filters(arch: Arch) -> Result<Vec<BpfProgram>, SeccompError> {
    compile_table(&rule_table(), arch)
}

/// [`compile_filters`] for any table (tests use small ones).
pub fn compile_table(table: &[SyscallRule], arch: Arch) -> Result<Vec<BpfProgram>, SeccompError> {
    let (stack, disjoint) = compile_stack(table, arch)?;
    Ok(match disjoint.then(|| chain(&stack)).flatten() {
        Some(one) => vec![one],
        None => stack,
    })
}

/// Hot system calls with argument rows all the same: they leave the kernel's action cache, every
/// call runs the program. open and openat create files with a mode, and a setuid/setgid mode
/// must be refused (see [`setuid_setgid_rows`]); the cost is measured with
/// scripts/bench-syscalls.sh. Nothing may be added here without such a reason. A seccompiler filter
/// tests system call numbers one after the other in ascending order, so openat (257 on x86_64)
/// would come after some thirty others; in a filter of their own, placed first, the chained
/// program reaches their rows in a handful of instructions and answers at once (see [`chain`]).
const HOT_WITH_ARGUMENT_ROWS: &[&str] = &["openat", "open"];

/// Which filter of the stack a system call's rows go to: the hot ones first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Part {
    Hot,
    Rest,
}

/// The table as a stack of filters (the prefix, then one per action, the hot calls' rows in
/// filters of their own first), and whether every system call is under one filter only.
fn compile_stack(
    table: &[SyscallRule],
    arch: Arch,
) -> Result<(Vec<BpfProgram>, bool), SeccompError> {
    type Key = (Part, Action);
    let mut by_action: BTreeMap<Key, BTreeMap<i64, Vec<SeccompRule>>> = BTreeMap::new();
    // Syscalls denied whatever their arguments: an unconditional row wins over conditional ones.
    let mut unconditional: BTreeMap<Key, Vec<i64>> = BTreeMap::new();
    for rule in table {
        if !is_known_syscall(rule.syscall) {
            return Err(SeccompError::UnknownSyscall {
                syscall: rule.syscall.to_string(),
            });
        }
        let Some(nr) = syscall_number(rule.syscall, arch) else {
            continue; // does not exist on this architecture
        };
        let part = if HOT_WITH_ARGUMENT_ROWS.contains(&rule.syscall) {
            Part::Hot
        } else {
            Part::Rest
        };
        let chains = by_action.entry((part, rule.action)).or_default();
        let chain = chains.entry(nr).or_default();
        if rule.conditions.is_empty() {
            unconditional
                .entry((part, rule.action))
                .or_default()
                .push(nr);
        } else {
            let conditions = rule
                .conditions
                .iter()
                .map(|c| to_seccompiler_condition(c, rule.syscall, arch))
                .collect::<Result<Vec<_>, _>>()?;
            let rule = SeccompRule::new(conditions).map_err(|source| SeccompError::Condition {
                syscall: rule.syscall.to_string(),
                arch: arch.name(),
                source,
            })?;
            chain.push(rule);
        }
    }
    for (key, nrs) in &unconditional {
        if let Some(chains) = by_action.get_mut(key) {
            for nr in nrs {
                chains.insert(*nr, Vec::new()); // an empty chain matches unconditionally
            }
        }
    }
    // For `chain`: is every system call under one filter only?
    let mut seen = std::collections::BTreeSet::new();
    let disjoint = by_action
        .values()
        .flat_map(|chains| chains.keys())
        .all(|nr| seen.insert(*nr));
    let mut filters = vec![arch_prefix(arch)];
    for ((_, action), rules) in by_action {
        let compile_err = |source| SeccompError::Compile {
            action: action.label(),
            arch: arch.name(),
            source,
        };
        let filter = SeccompFilter::new(
            rules,
            SeccompAction::Allow,
            action.seccompiler(),
            arch.target(),
        )
        .map_err(compile_err)?;
        filters.push(BpfProgram::try_from(filter).map_err(compile_err)?);
    }
    Ok((filters, disjoint))
}

/// Joins stacked filters into one program with the same verdicts, so the kernel converts, JITs
/// and builds its action cache once per launch instead of once per filter, and a call the cache
/// does not answer runs one program instead of four. A stack takes the most restrictive verdict
/// of all its filters, a chain the first non-allow one; the two agree when no call gets a
/// non-allow verdict from two parts, which holds here: the prefix only kills foreign
/// architectures and x32 (the strongest verdict, first), and each later part has rows for a set
/// of system calls disjoint from the others' (the caller checks).
///
/// The prefix's "allow" returns become jumps to the start of the next part. A seccompiler part
/// answers "allow" in two ways: its last instruction, reached when the call is none of its
/// system calls, becomes a jump to the next part; any other "allow" is reached only for one of
/// its own system calls whose rows did not match, and no later part has rows for that call, so
/// it stays the final answer (openat's rows come first and need not walk every other part).
/// Jumps inside a part keep their offsets: the part's length is unchanged. `None` when a part
/// returns anything but a constant or does not end with "allow" (then the stack stays).
fn chain(parts: &[BpfProgram]) -> Option<BpfProgram> {
    let total: usize = parts.iter().map(Vec::len).sum();
    if total > 4096 {
        return None;
    }
    let mut out = Vec::with_capacity(total);
    for (index, part) in parts.iter().enumerate() {
        let last = index + 1 == parts.len();
        let next_part = out.len() + part.len();
        let ends_with_allow = part
            .last()
            .is_some_and(|i| i.code == BPF_RET_K && i.k == SECCOMP_RET_ALLOW);
        if !last && !ends_with_allow {
            return None;
        }
        for (i, insn) in part.iter().enumerate() {
            if insn.code & 0x07 == 0x06 && insn.code != BPF_RET_K {
                return None; // a return of the accumulator: not a constant verdict
            }
            let continues = index == 0 || i + 1 == part.len();
            if !last && continues && insn.code == BPF_RET_K && insn.k == SECCOMP_RET_ALLOW {
                let here = out.len();
                out.push(stmt(BPF_JMP_JA, (next_part - here - 1) as u32));
            } else {
                out.push(sock_filter {
                    code: insn.code,
                    jt: insn.jt,
                    jf: insn.jf,
                    k: insn.k,
                });
            }
        }
    }
    Some(out)
}

/// Installs the filters on the calling thread, in order. Sets `no_new_privs` first (a no-op
/// when Landlock already did). Call it last, right before `execve`, after Landlock and after
/// capabilities are dropped: from here on the thread cannot call the denied syscalls, and
/// execve itself stays allowed.
pub fn apply_seccomp_on_current_thread(filters: &[BpfProgram]) -> Result<(), SeccompError> {
    nix::sys::prctl::set_no_new_privs().map_err(|source| SeccompError::NoNewPrivs { source })?;
    for (index, filter) in filters.iter().enumerate() {
        seccompiler::apply_filter(filter).map_err(|source| SeccompError::Install {
            index,
            count: filters.len(),
            source,
        })?;
    }
    Ok(())
}

/// What the assurance report says about seccomp.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeccompReport {
    /// Rows of the table that apply on the architecture.
    pub rules: usize,
    /// Distinct system calls with a rule.
    pub syscalls: usize,
    /// The architecture filtered; every other one (and x32) is killed.
    pub architectures: Vec<String>,
    pub killed: Vec<String>,
    /// Programs stacked and their total instruction count.
    pub filters: usize,
    pub instructions: usize,
}

/// The report for the filters [`compile_filters`] made for `arch`.
pub fn report(arch: Arch, filters: &[BpfProgram]) -> SeccompReport {
    let table = rule_table();
    let applicable: Vec<&SyscallRule> = table
        .iter()
        .filter(|r| syscall_number(r.syscall, arch).is_some())
        .collect();
    let mut names: Vec<&str> = applicable.iter().map(|r| r.syscall).collect();
    names.sort_unstable();
    names.dedup();
    SeccompReport {
        rules: applicable.len(),
        syscalls: names.len(),
        architectures: vec![arch.name().to_string()],
        killed: match arch {
            Arch::X86_64 => vec!["foreign architectures".into(), "x32 ABI".into()],
            Arch::Aarch64 => vec!["foreign architectures".into()],
        },
        filters: filters.len(),
        instructions: filters.iter().map(Vec::len).sum(),
    }
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

/// Lines for `stepproof explain`: one per table row, `syscall [if …] -> ACTION  # reason`.
pub fn describe() -> Vec<String> {
    let mut lines = vec![
        "seccomp: foreign architectures and the x32 ABI -> KILL_PROCESS".to_string(),
        "seccomp: everything not listed -> ALLOW (no argument checks: answered by the kernel's \
         action cache)"
            .to_string(),
    ];
    for rule in rule_table() {
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

/// The input of a seccomp program (`struct seccomp_data`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeccompData {
    pub nr: i32,
    pub arch: u32,
    pub args: [u64; 6],
}

impl SeccompData {
    pub fn new(arch: Arch, nr: i64, args: &[u64]) -> Self {
        let mut a = [0u64; 6];
        a[..args.len()].copy_from_slice(args);
        SeccompData {
            nr: nr as i32,
            arch: arch.audit_arch(),
            args: a,
        }
    }

    fn word(&self, offset: u32) -> Option<u32> {
        match offset {
            0 => Some(self.nr as u32),
            4 => Some(self.arch),
            16..=63 if offset.is_multiple_of(4) => {
                let arg = self.args[((offset - 16) / 8) as usize];
                // Little endian: the low word comes first.
                Some(if (offset - 16).is_multiple_of(8) {
                    arg as u32
                } else {
                    (arg >> 32) as u32
                })
            }
            _ => None,
        }
    }
}

/// Runs one program on `data` the way the kernel's classic BPF interpreter does, for the
/// instructions seccompiler and [`arch_prefix`] emit. `None` on anything else.
/// With `constant_only`, it mimics the kernel's action-cache check (`seccomp_is_const_allow`):
/// loading an argument makes the result unknown (`None`).
pub fn run_program(prog: &[sock_filter], data: &SeccompData, constant_only: bool) -> Option<u32> {
    let mut acc: u32 = 0;
    let mut pc = 0usize;
    while pc < prog.len() {
        let insn = &prog[pc];
        match insn.code {
            BPF_LD_W_ABS => {
                if constant_only && insn.k != OFFSET_NR && insn.k != OFFSET_ARCH {
                    return None;
                }
                acc = data.word(insn.k)?;
            }
            BPF_ALU_AND_K => acc &= insn.k,
            BPF_JMP_JA => pc += insn.k as usize,
            BPF_JMP_JEQ_K | BPF_JMP_JGT_K | BPF_JMP_JGE_K | BPF_JMP_JSET_K => {
                let taken = match insn.code {
                    BPF_JMP_JEQ_K => acc == insn.k,
                    BPF_JMP_JGT_K => acc > insn.k,
                    BPF_JMP_JGE_K => acc >= insn.k,
                    _ => acc & insn.k != 0,
                };
                pc += usize::from(if taken { insn.jt } else { insn.jf });
            }
            BPF_RET_K => return Some(insn.k),
            _ => return None,
        }
        pc += 1;
    }
    None
}

/// What the stack of `filters` answers for `data`: like the kernel, every filter runs and the
/// most severe action wins (on a tie, the most recently installed filter's).
pub fn simulate(filters: &[BpfProgram], data: &SeccompData) -> u32 {
    let mut ret = SECCOMP_RET_ALLOW;
    for f in filters.iter().rev() {
        let cur = run_program(f, data, false).unwrap_or(SECCOMP_RET_KILL_PROCESS);
        if ((cur & SECCOMP_RET_ACTION_FULL) as i32) < ((ret & SECCOMP_RET_ACTION_FULL) as i32) {
            ret = cur;
        }
    }
    ret
}

/// Whether the kernel's action cache will answer `nr` on the native `arch` with ALLOW without
/// running any program: every filter must reach ALLOW looking only at `nr` and `arch`.
pub fn is_cached_allow(filters: &[BpfProgram], arch: Arch, nr: i64) -> bool {
    let data = SeccompData::new(arch, nr, &[]);
    filters
        .iter()
        .all(|f| run_program(f, &data, true) == Some(SECCOMP_RET_ALLOW))
}

#[cfg(test)]
mod tests {
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

    const HOT: &[&str] = &[
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

    fn errno(e: i32) -> u32 {
        SECCOMP_RET_ERRNO | e as u32
    }

    fn verdict(arch: Arch, name: &str, args: &[u64]) -> u32 {
        let filters = compile_filters(arch).unwrap();
        let nr = syscall_number(name, arch).unwrap();
        simulate(&filters, &SeccompData::new(arch, nr, args))
    }

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
    fn hot_syscalls_have_no_rule() {
        let table = rule_table();
        for name in HOT {
            assert!(
                table.iter().all(|r| r.syscall != *name),
                "{name} has a rule"
            );
        }
        // The exceptions are never denied whatever their arguments: only with a condition.
        for name in HOT_WITH_ARGUMENT_ROWS {
            let rows: Vec<_> = table.iter().filter(|r| r.syscall == *name).collect();
            assert!(!rows.is_empty(), "{name} is listed as carrying rules");
            assert!(rows.iter().all(|r| !r.conditions.is_empty()), "{name}");
        }
    }

    #[test]
    fn the_chained_program_gives_the_stack_s_verdicts() {
        let interesting_args: &[u64] = &[
            0,
            1,
            2,
            10,
            16,
            40,
            libc::CLONE_NEWUSER as u64,
            (libc::CLONE_NEWNET | libc::SIGCHLD) as u64,
            libc::SIGCHLD as u64,
            0x5412,
            0x1_0000_5412,
            0x541c,
            libc::SOCK_RAW as u64,
            262,
            0xffff_ffff,
            u64::MAX,
            0o755,
            0o4755,
            0o2755,
            0o6755,
            libc::S_IFREG as u64 | 0o4644,
            0x1_0000_0000 | 0o4755,
            O_CREAT | libc::O_WRONLY as u64,
            O_CREAT | 0o4755,
            libc::O_TMPFILE as u64 | libc::O_RDWR as u64,
        ];
        // Flags and mode side by side, as open (args 1, 2) and openat (args 2, 3) take them.
        let flags_and_modes: &[u64] = &[
            0,
            libc::O_RDONLY as u64,
            O_CREAT | libc::O_WRONLY as u64,
            O_CREAT | libc::O_EXCL as u64,
            libc::O_TMPFILE as u64 | libc::O_RDWR as u64,
            0x1_0000_0000 | O_CREAT,
            0o755,
            0o4755,
            0o2755,
            0x1_0000_0000 | 0o755,
            0x1_0000_0000 | 0o4755,
        ];
        let mode_calls = [
            "chmod",
            "fchmod",
            "fchmodat",
            "fchmodat2",
            "creat",
            "mknod",
            "mknodat",
            "open",
            "openat",
            "openat2",
        ];
        for arch in [Arch::X86_64, Arch::Aarch64] {
            let (stack, disjoint) = compile_stack(&rule_table(), arch).unwrap();
            assert!(disjoint);
            // The prefix, open/openat's EPERM rows, the other EPERM rows, ENOSYS.
            assert_eq!(stack.len(), 4);
            let chained = chain(&stack).unwrap();
            assert_eq!(chained.len(), stack.iter().map(Vec::len).sum::<usize>());
            for other_arch in [Arch::X86_64, Arch::Aarch64] {
                for nr in (0..512).chain([-1, 0x4000_0000 | 16, 0x4000_0000 | 101]) {
                    for &a in interesting_args {
                        for args in [[a, 0, 0, 0, 0, 0], [0, a, 0, 0, 0, 0], [a, a, a, 0, 0, 0]] {
                            let data = SeccompData::new(other_arch, nr, &args);
                            assert_eq!(
                                simulate(&stack, &data),
                                simulate(std::slice::from_ref(&chained), &data),
                                "{} filter, {} call {nr} {args:?}",
                                arch.name(),
                                other_arch.name()
                            );
                        }
                    }
                }
            }
            for name in mode_calls {
                let Some(nr) = syscall_number(name, arch) else {
                    continue;
                };
                for &f in flags_and_modes {
                    for &m in flags_and_modes {
                        for args in [[0, f, m, 0, 0, 0], [0, 0, f, m, 0, 0], [f, m, 0, 0, 0, 0]] {
                            let data = SeccompData::new(arch, nr, &args);
                            assert_eq!(
                                simulate(&stack, &data),
                                simulate(std::slice::from_ref(&chained), &data),
                                "{} {name} {args:?}",
                                arch.name()
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn both_architectures_build() {
        for arch in [Arch::X86_64, Arch::Aarch64] {
            let filters = compile_filters(arch).unwrap();
            assert_eq!(filters.len(), 1, "prefix, EPERM and ENOSYS parts chained");
            let r = report(arch, &filters);
            assert_eq!(r.architectures, [arch.name()]);
            assert!(r.instructions < 4096);
            let expected = rule_table()
                .iter()
                .filter(|t| syscall_number(t.syscall, arch).is_some())
                .count();
            assert_eq!(r.rules, expected);
        }
        // Not on aarch64: iopl, ioperm, chmod (1 row), creat, mknod (2 rows each), open (4).
        assert_eq!(
            report(Arch::X86_64, &[]).rules,
            report(Arch::Aarch64, &[]).rules + 11
        );
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn x86_64_numbers_match_libc() {
        let libc_numbers: &[(&str, i64)] = &[
            ("ptrace", libc::SYS_ptrace),
            ("mount", libc::SYS_mount),
            ("fsopen", libc::SYS_fsopen),
            ("mount_setattr", libc::SYS_mount_setattr),
            ("clone3", libc::SYS_clone3),
            ("bpf", libc::SYS_bpf),
            ("io_uring_setup", libc::SYS_io_uring_setup),
            ("open_by_handle_at", libc::SYS_open_by_handle_at),
            ("quotactl_fd", libc::SYS_quotactl_fd),
            ("personality", libc::SYS_personality),
            ("socket", libc::SYS_socket),
            ("getppid", libc::SYS_getppid),
            ("newfstatat", libc::SYS_newfstatat),
            ("iopl", libc::SYS_iopl),
            ("chmod", libc::SYS_chmod),
            ("fchmod", libc::SYS_fchmod),
            ("fchmodat", libc::SYS_fchmodat),
            ("fchmodat2", libc::SYS_fchmodat2),
            ("creat", libc::SYS_creat),
            ("mknod", libc::SYS_mknod),
            ("mknodat", libc::SYS_mknodat),
            ("open", libc::SYS_open),
            ("openat", libc::SYS_openat),
            ("openat2", libc::SYS_openat2),
        ];
        for (name, nr) in libc_numbers {
            assert_eq!(syscall_number(name, Arch::X86_64), Some(*nr), "{name}");
        }
    }

    #[test]
    fn hot_syscalls_are_constant_allow() {
        for arch in [Arch::X86_64, Arch::Aarch64] {
            let filters = compile_filters(arch).unwrap();
            for name in HOT {
                if let Some(nr) = syscall_number(name, arch) {
                    assert!(is_cached_allow(&filters, arch, nr), "{name} on {arch:?}");
                }
            }
            // Syscalls with argument checks are not cached (sanity check of the emulation).
            for name in ["ioctl"].iter().chain(HOT_WITH_ARGUMENT_ROWS) {
                if let Some(nr) = syscall_number(name, arch) {
                    assert!(!is_cached_allow(&filters, arch, nr), "{name} on {arch:?}");
                }
            }
        }
    }

    #[test]
    fn every_rule_answers_its_errno() {
        for arch in [Arch::X86_64, Arch::Aarch64] {
            let filters = compile_filters(arch).unwrap();
            for rule in rule_table() {
                let Some(nr) = syscall_number(rule.syscall, arch) else {
                    continue;
                };
                // Arguments that satisfy every condition of the row.
                let mut args = [0u64; 6];
                let mut fixed = [false; 6];
                for c in &rule.conditions {
                    let i = c.arg as usize;
                    match c.cmp {
                        Cmp::Eq(v) => {
                            args[i] = v;
                            fixed[i] = true;
                        }
                        Cmp::MaskedEq { value, .. } => args[i] |= value,
                        Cmp::Ne(_) => {}
                    }
                }
                for c in &rule.conditions {
                    if let Cmp::Ne(_) = c.cmp
                        && !fixed[c.arg as usize]
                    {
                        args[c.arg as usize] = 0x28; // AF_VSOCK / a personality flag
                    }
                }
                let got = simulate(&filters, &SeccompData::new(arch, nr, &args));
                assert_eq!(got, rule.action.ret(), "{rule:?} on {arch:?}");
            }
        }
    }

    #[test]
    fn argument_rules_catch_what_they_should_and_nothing_else() {
        let eperm = errno(libc::EPERM);
        for arch in [Arch::X86_64, Arch::Aarch64] {
            // TIOCSTI, with the high-bit variant; other ioctls pass.
            assert_eq!(verdict(arch, "ioctl", &[0, TIOCSTI]), eperm);
            assert_eq!(verdict(arch, "ioctl", &[0, 0x1_0000_0000 | TIOCSTI]), eperm);
            assert_eq!(verdict(arch, "ioctl", &[0, TIOCLINUX]), eperm);
            assert_eq!(verdict(arch, "ioctl", &[0, 0x5401]), SECCOMP_RET_ALLOW); // TCGETS
            assert_eq!(verdict(arch, "ioctl", &[0, 0x5414]), SECCOMP_RET_ALLOW); // TIOCSWINSZ
            // Sockets.
            let ok = SECCOMP_RET_ALLOW;
            assert_eq!(verdict(arch, "socket", &[1, 1, 0]), ok); // unix stream
            assert_eq!(verdict(arch, "socket", &[2, 0x80801, 0]), ok); // tcp, nonblock|cloexec
            assert_eq!(verdict(arch, "socket", &[10, 2, 17]), ok); // udp6
            assert_eq!(verdict(arch, "socket", &[2, 2, 1]), ok); // ping socket
            assert_eq!(verdict(arch, "socket", &[16, 0x80003, 0]), ok); // netlink route
            assert_eq!(verdict(arch, "socket", &[16, 3, 9]), eperm); // netlink audit
            assert_eq!(verdict(arch, "socket", &[16, 3, 15]), eperm); // uevent
            assert_eq!(verdict(arch, "socket", &[40, 1, 0]), eperm); // AF_VSOCK
            assert_eq!(verdict(arch, "socket", &[17, 3, 0x300]), eperm); // AF_PACKET
            assert_eq!(verdict(arch, "socket", &[38, 5, 0]), eperm); // AF_ALG
            assert_eq!(verdict(arch, "socket", &[0x1_0000_0002, 1, 0]), ok); // kernel reads int
            assert_eq!(verdict(arch, "socket", &[2, 3, 1]), eperm); // raw icmp
            assert_eq!(verdict(arch, "socket", &[10, 0x80803, 58]), eperm); // raw, flags
            assert_eq!(verdict(arch, "socket", &[2, 10, 0x300]), eperm); // SOCK_PACKET
            assert_eq!(verdict(arch, "socket", &[2, 1, 262]), eperm); // MPTCP
            assert_eq!(verdict(arch, "socket", &[10, 1, 262]), eperm);
            assert_eq!(verdict(arch, "socketpair", &[1, 1, 0]), ok);
            assert_eq!(verdict(arch, "socketpair", &[40, 1, 0]), eperm);
            // clone: fork and threads pass, any namespace flag does not.
            assert_eq!(verdict(arch, "clone", &[0x0120_0011]), ok); // fork()
            assert_eq!(verdict(arch, "clone", &[0x003d_0f00]), ok); // pthread_create
            for (flag, name) in NAMESPACE_FLAGS {
                assert_eq!(verdict(arch, "clone", &[flag | 0x11]), eperm, "{name}");
            }
            assert_eq!(verdict(arch, "clone3", &[]), errno(libc::ENOSYS));
            // personality: default and query only.
            assert_eq!(verdict(arch, "personality", &[0]), ok);
            assert_eq!(verdict(arch, "personality", &[0xffff_ffff]), ok);
            assert_eq!(verdict(arch, "personality", &[0x0040_0000]), eperm); // READ_IMPLIES_EXEC
            assert_eq!(verdict(arch, "personality", &[0x0004_0000]), eperm); // ADDR_NO_RANDOMIZE
        }
    }

    #[test]
    fn setuid_is_refused_everywhere_and_setgid_only_where_a_file_is_created() {
        let eperm = errno(libc::EPERM);
        let ok = SECCOMP_RET_ALLOW;
        let creat_wronly = O_CREAT | libc::O_WRONLY as u64;
        let tmpfile = libc::O_TMPFILE as u64 | libc::O_RDWR as u64;
        let reg = libc::S_IFREG as u64;
        let fifo = libc::S_IFIFO as u64;
        let at_fdcwd = libc::AT_FDCWD as u32 as u64;
        let nofollow = libc::AT_SYMLINK_NOFOLLOW as u64;
        for arch in [Arch::X86_64, Arch::Aarch64] {
            let v = |name, args: &[u64]| verdict(arch, name, args);
            // chmod and friends: S_ISUID never, S_ISGID yes (shared group directories).
            for (name, pre) in [
                ("fchmod", &[3][..]),
                ("fchmodat", &[at_fdcwd, 0x1000][..]),
                ("fchmodat2", &[at_fdcwd, 0x1000][..]),
            ] {
                let args = |mode: u64| [pre, &[mode]].concat();
                assert_eq!(v(name, &args(0o4755)), eperm, "{name} 04755");
                assert_eq!(v(name, &args(0o6775)), eperm, "{name} 06775");
                assert_eq!(v(name, &args(0o4000)), eperm, "{name} 04000");
                assert_eq!(v(name, &args(0o2775)), ok, "{name} 02775");
                assert_eq!(v(name, &args(0o755)), ok, "{name} 0755");
                assert_eq!(v(name, &args(0o1777)), ok, "{name} sticky");
                // The kernel reads a 32-bit (even 16-bit) mode: the high word changes nothing.
                assert_eq!(
                    v(name, &args(0x1_0000_0000 | 0o755)),
                    ok,
                    "{name} high 0755"
                );
                assert_eq!(
                    v(name, &args(0x1_0000_0000 | 0o4755)),
                    eperm,
                    "{name} high 04755"
                );
            }
            // fchmodat2 whatever the flags.
            assert_eq!(v("fchmodat2", &[at_fdcwd, 0x1000, 0o4755, nofollow]), eperm);
            assert_eq!(v("fchmodat2", &[at_fdcwd, 0x1000, 0o2755, nofollow]), ok);
            // mknodat: a new file, so both bits; the type bits do not matter.
            assert_eq!(v("mknodat", &[at_fdcwd, 0x1000, reg | 0o4755, 0]), eperm);
            assert_eq!(v("mknodat", &[at_fdcwd, 0x1000, reg | 0o2644, 0]), eperm);
            assert_eq!(v("mknodat", &[at_fdcwd, 0x1000, fifo | 0o4644, 0]), eperm);
            assert_eq!(v("mknodat", &[at_fdcwd, 0x1000, reg | 0o644, 0]), ok);
            assert_eq!(v("mknodat", &[at_fdcwd, 0x1000, fifo | 0o600, 0]), ok);
            // openat: the mode counts only with O_CREAT or O_TMPFILE (flags arg 2, mode arg 3).
            let openat = |flags: u64, mode: u64| v("openat", &[at_fdcwd, 0x1000, flags, mode]);
            assert_eq!(openat(creat_wronly, 0o4755), eperm);
            assert_eq!(openat(creat_wronly | libc::O_EXCL as u64, 0o2755), eperm);
            assert_eq!(openat(creat_wronly, 0o6755), eperm);
            assert_eq!(openat(creat_wronly, 0o755), ok);
            assert_eq!(openat(creat_wronly, 0o666), ok);
            assert_eq!(openat(creat_wronly, 0x1_0000_0000 | 0o644), ok);
            assert_eq!(openat(creat_wronly, 0x1_0000_0000 | 0o4644), eperm);
            assert_eq!(openat(0x1_0000_0000 | O_CREAT, 0o4755), eperm);
            assert_eq!(openat(0x1_0000_0000, 0o4755), ok);
            assert_eq!(openat(tmpfile, 0o2700), eperm);
            assert_eq!(openat(tmpfile, 0o4700), eperm);
            assert_eq!(openat(tmpfile, 0o600), ok);
            // Without O_CREAT the kernel ignores the mode: garbage there is harmless.
            assert_eq!(openat(libc::O_RDONLY as u64, 0o4755), ok);
            assert_eq!(
                openat(libc::O_RDWR as u64 | libc::O_CLOEXEC as u64, 0o6777),
                ok
            );
            assert_eq!(openat(libc::O_DIRECTORY as u64, 0o2755), ok);
            // The mode in the flags' place or the flags in the mode's place do not match.
            assert_eq!(v("openat", &[at_fdcwd, 0x1000, 0o4755, creat_wronly]), ok);
            assert_eq!(
                v("openat2", &[at_fdcwd, 0x1000, 0x2000, 24]),
                errno(libc::ENOSYS)
            );
            // Unrelated calls are untouched.
            assert_eq!(v("mkdirat", &[at_fdcwd, 0x1000, 0o2775]), ok);
        }
        // The calls aarch64 does not have: open (flags arg 1, mode arg 2), creat, mknod, chmod.
        let v = |name, args: &[u64]| verdict(Arch::X86_64, name, args);
        assert_eq!(v("open", &[0x1000, creat_wronly, 0o4755]), eperm);
        assert_eq!(v("open", &[0x1000, creat_wronly, 0o2755]), eperm);
        assert_eq!(v("open", &[0x1000, tmpfile, 0o2700]), eperm);
        assert_eq!(v("open", &[0x1000, creat_wronly, 0o755]), ok);
        assert_eq!(v("open", &[0x1000, libc::O_RDONLY as u64, 0o4755]), ok);
        assert_eq!(v("open", &[0x1000, 0o4755, creat_wronly]), ok);
        assert_eq!(v("creat", &[0x1000, 0o4755]), eperm);
        assert_eq!(v("creat", &[0x1000, 0o2755]), eperm);
        assert_eq!(v("creat", &[0x1000, 0o755]), ok);
        assert_eq!(v("mknod", &[0x1000, reg | 0o4755, 0]), eperm);
        assert_eq!(v("mknod", &[0x1000, reg | 0o2755, 0]), eperm);
        assert_eq!(v("mknod", &[0x1000, reg | 0o755, 0]), ok);
        assert_eq!(v("chmod", &[0x1000, 0o4755]), eperm);
        assert_eq!(v("chmod", &[0x1000, 0o2775]), ok);
        assert_eq!(v("chmod", &[0x1000, 0o755]), ok);
        assert_eq!(v("chmod", &[0x1000, 0x1_0000_0000 | 0o755]), ok);
        assert_eq!(v("chmod", &[0x1000, 0x1_0000_0000 | 0o4755]), eperm);
    }

    #[test]
    fn foreign_arch_and_x32_are_killed() {
        let filters = compile_filters(Arch::X86_64).unwrap();
        let getppid = 110;
        let mut data = SeccompData::new(Arch::X86_64, getppid, &[]);
        assert_eq!(simulate(&filters, &data), SECCOMP_RET_ALLOW);
        data.nr = (X32_SYSCALL_BIT as i32) | 101; // x32 ptrace
        assert_eq!(simulate(&filters, &data), SECCOMP_RET_KILL_PROCESS);
        data.nr = (X32_SYSCALL_BIT as i32) | 39; // x32 getpid: x32 is killed whole
        assert_eq!(simulate(&filters, &data), SECCOMP_RET_KILL_PROCESS);
        data.nr = -1;
        assert_eq!(simulate(&filters, &data), SECCOMP_RET_ALLOW);
        for foreign in [0x4000_0003u32 /* i386 */, Arch::Aarch64.audit_arch()] {
            let d = SeccompData {
                arch: foreign,
                ..SeccompData::new(Arch::X86_64, getppid, &[])
            };
            assert_eq!(simulate(&filters, &d), SECCOMP_RET_KILL_PROCESS);
        }
        let arm = compile_filters(Arch::Aarch64).unwrap();
        let d = SeccompData::new(Arch::X86_64, 173, &[]);
        assert_eq!(simulate(&arm, &d), SECCOMP_RET_KILL_PROCESS);
    }

    #[test]
    fn describe_has_one_line_per_rule() {
        let lines = describe();
        assert_eq!(lines.len(), rule_table().len() + 2);
        assert!(
            lines
                .iter()
                .any(|l| l.contains("ioctl if (u32)arg1 == 0x5412 -> EPERM"))
        );
        assert!(lines.iter().any(|l| l.contains("clone3 -> ENOSYS")));
    }

    #[test]
    fn unknown_syscall_is_an_error() {
        let table = vec![always("no_such_call", "test")];
        assert!(matches!(
            compile_table(&table, Arch::X86_64),
            Err(SeccompError::UnknownSyscall { .. })
        ));
    }
}

/// Serializes compiled filters for the trip to the sandbox init over a pipe (the supervisor
/// compiles them while the init builds the view, on the other core).
pub fn encode_filters(filters: &[BpfProgram]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(filters.len() as u32).to_le_bytes());
    for program in filters {
        out.extend_from_slice(&(program.len() as u32).to_le_bytes());
        for insn in program {
            out.extend_from_slice(&insn.code.to_le_bytes());
            out.push(insn.jt);
            out.push(insn.jf);
            out.extend_from_slice(&insn.k.to_le_bytes());
        }
    }
    out
}

/// The inverse of [`encode_filters`]; `None` for anything truncated or malformed.
pub fn decode_filters(mut bytes: &[u8]) -> Option<Vec<BpfProgram>> {
    fn take<const N: usize>(bytes: &mut &[u8]) -> Option<[u8; N]> {
        let (head, rest) = bytes.split_first_chunk::<N>()?;
        *bytes = rest;
        Some(*head)
    }
    let count = u32::from_le_bytes(take::<4>(&mut bytes)?) as usize;
    let mut filters = Vec::with_capacity(count.min(16));
    for _ in 0..count {
        let len = u32::from_le_bytes(take::<4>(&mut bytes)?) as usize;
        if len == 0 || len > 4096 {
            return None;
        }
        let mut program = Vec::with_capacity(len);
        for _ in 0..len {
            let code = u16::from_le_bytes(take::<2>(&mut bytes)?);
            let [jt, jf] = take::<2>(&mut bytes)?;
            let k = u32::from_le_bytes(take::<4>(&mut bytes)?);
            program.push(sock_filter { code, jt, jf, k });
        }
        filters.push(program);
    }
    (bytes.is_empty() && !filters.is_empty()).then_some(filters)
}

#[cfg(test)]
mod encoding_tests {
    use super::*;

    #[test]
    fn filters_survive_the_pipe() {
        let filters = compile_filters(Arch::native()).unwrap();
        let bytes = encode_filters(&filters);
        assert_eq!(decode_filters(&bytes), Some(filters));
        assert_eq!(decode_filters(&bytes[..bytes.len() - 1]), None);
        assert_eq!(decode_filters(&[]), None);
    }
}
