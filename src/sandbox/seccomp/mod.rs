//! seccomp: the system calls no sandboxed process needs and that reach risky kernel interfaces,
//! denied with an errno (EPERM; ENOSYS for clone3 and openat2), setuid/setgid modes refused
//! (the first line against privilege left in a file), and every foreign architecture (and the
//! x32 ABI on x86_64) killed.
//!
//! The rule table is data ([`rule_table`], in `rules`), unit-tested as data; the plan names the
//! table to use (`SandboxPlan::seccomp`, [`rules_for`]). [`compile_table`]
//! (the `assembler`) turns it into a stack of classic BPF programs, because a seccompiler filter
//! has one match action:
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
//! (see the `hot_syscalls_are_constant_allow` test, which emulates the kernel's cache check with
//! the tests' `simulator`). The system call numbers and the kernel's constants are in `numbers`.
//! openat is the one hot call that pays for a program run, the price of refusing setuid modes.

mod assembler;
mod numbers;
mod rules;
#[cfg(test)]
mod simulator;

use serde::{Deserialize, Serialize};

pub use assembler::{allow_all_filter, arch_prefix, compile_filters, compile_table};
pub use numbers::{
    Arch, SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO, SECCOMP_RET_KILL_PROCESS, syscall_number,
};
pub use rules::{
    Action, ArgCondition, Cmp, IPPROTO_MPTCP, NAMESPACE_FLAGS, O_CREAT, O_TMPFILE_BIT, S_ISGID,
    S_ISUID, SeccompRules, SyscallRule, TIOCLINUX, TIOCSTI, Width, describe, rule_table, rules_for,
};
pub use seccompiler::BpfProgram;
use seccompiler::sock_filter;

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

/// The report for the filters [`compile_table`] made of `table` for `arch`.
pub fn report(table: &[SyscallRule], arch: Arch, filters: &[BpfProgram]) -> SeccompReport {
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
mod tests {
    use super::*;

    #[test]
    fn both_architectures_build() {
        for arch in [Arch::X86_64, Arch::Aarch64] {
            let filters = compile_filters(arch).unwrap();
            assert_eq!(filters.len(), 1, "prefix, EPERM and ENOSYS parts chained");
            let r = report(&rule_table(), arch, &filters);
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
            report(&rule_table(), Arch::X86_64, &[]).rules,
            report(&rule_table(), Arch::Aarch64, &[]).rules + 11
        );
    }

    #[test]
    fn filters_survive_the_pipe() {
        let filters = compile_filters(Arch::native()).unwrap();
        let bytes = encode_filters(&filters);
        assert_eq!(decode_filters(&bytes), Some(filters));
        assert_eq!(decode_filters(&bytes[..bytes.len() - 1]), None);
        assert_eq!(decode_filters(&[]), None);
    }
}
