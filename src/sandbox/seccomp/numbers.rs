//! The kernel's numbers the filter is written in: the architectures (`AUDIT_ARCH_*`), the system
//! call numbers of each, and the `SECCOMP_RET_*` answers. Facts of the kernel's ABI, no policy.

use serde::{Deserialize, Serialize};

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
}

// seccomp return values (linux/seccomp.h) and the x32 bit of a system call number (asm/unistd.h).
pub const SECCOMP_RET_KILL_PROCESS: u32 = 0x8000_0000;
pub const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
pub const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
pub(super) const X32_SYSCALL_BIT: u32 = 0x4000_0000;

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
pub(super) fn is_known_syscall(name: &str) -> bool {
    SYSCALL_NUMBERS.iter().any(|(n, _, _)| *n == name)
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

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
}
