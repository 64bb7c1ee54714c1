//! The simulator (tests only): runs compiled programs on a system call the way the kernel's
//! classic BPF interpreter and its action cache do, so the tests can check every verdict of the
//! filter without installing it.

use seccompiler::{BpfProgram, sock_filter};

use super::assembler::{
    BPF_JMP_JA, BPF_JMP_JEQ_K, BPF_JMP_JSET_K, BPF_LD_W_ABS, BPF_RET_K, OFFSET_ARCH, OFFSET_NR,
};
use super::numbers::{Arch, SECCOMP_RET_ALLOW, SECCOMP_RET_KILL_PROCESS};

// The other instructions seccompiler emits (linux/filter.h), and the action part of a verdict
// (linux/seccomp.h).
const BPF_JMP_JGT_K: u16 = 0x05 | 0x20;
const BPF_JMP_JGE_K: u16 = 0x05 | 0x30;
const BPF_ALU_AND_K: u16 = 0x04 | 0x50;
const SECCOMP_RET_ACTION_FULL: u32 = 0xffff_0000;

/// The input of a seccomp program (`struct seccomp_data`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SeccompData {
    pub(super) nr: i32,
    pub(super) arch: u32,
    pub(super) args: [u64; 6],
}

impl SeccompData {
    pub(super) fn new(arch: Arch, nr: i64, args: &[u64]) -> Self {
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
/// instructions seccompiler and [`arch_prefix`](super::assembler::arch_prefix) emit. `None` on
/// anything else.
/// With `constant_only`, it mimics the kernel's action-cache check (`seccomp_is_const_allow`):
/// loading an argument makes the result unknown (`None`).
fn run_program(prog: &[sock_filter], data: &SeccompData, constant_only: bool) -> Option<u32> {
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
pub(super) fn simulate(filters: &[BpfProgram], data: &SeccompData) -> u32 {
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
pub(super) fn is_cached_allow(filters: &[BpfProgram], arch: Arch, nr: i64) -> bool {
    let data = SeccompData::new(arch, nr, &[]);
    filters
        .iter()
        .all(|f| run_program(f, &data, true) == Some(SECCOMP_RET_ALLOW))
}

mod tests {
    use super::super::assembler::{HOT_WITH_ARGUMENT_ROWS, chain, compile_filters, compile_stack};
    use super::super::numbers::{SECCOMP_RET_ERRNO, X32_SYSCALL_BIT, syscall_number};
    use super::super::rules::{Cmp, HOT, NAMESPACE_FLAGS, O_CREAT, TIOCLINUX, TIOCSTI, rule_table};
    use super::*;

    fn errno(e: i32) -> u32 {
        SECCOMP_RET_ERRNO | e as u32
    }

    fn verdict(arch: Arch, name: &str, args: &[u64]) -> u32 {
        let filters = compile_filters(arch).unwrap();
        let nr = syscall_number(name, arch).unwrap();
        simulate(&filters, &SeccompData::new(arch, nr, args))
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
}
