//! The assembler: the rule table as classic BPF. A hand-written prefix for the architecture
//! and x32, one seccompiler filter per action (the hot calls' rows first), chained into one
//! program when the parts allow it.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch, sock_filter,
};

use super::SeccompError;
use super::numbers::{
    Arch, SECCOMP_RET_ALLOW, SECCOMP_RET_KILL_PROCESS, X32_SYSCALL_BIT, is_known_syscall,
    syscall_number,
};
use super::rules::{Action, ArgCondition, Cmp, SyscallRule, Width, rule_table};

// Classic BPF opcodes (linux/filter.h) and where `struct seccomp_data` keeps the number and the
// architecture.
pub(super) const BPF_LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
pub(super) const BPF_JMP_JA: u16 = 0x05;
pub(super) const BPF_JMP_JEQ_K: u16 = 0x05 | 0x10;
pub(super) const BPF_JMP_JSET_K: u16 = 0x05 | 0x40;
pub(super) const BPF_RET_K: u16 = 0x06;
pub(super) const OFFSET_NR: u32 = 0;
pub(super) const OFFSET_ARCH: u32 = 4;

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

fn target(arch: Arch) -> TargetArch {
    match arch {
        Arch::X86_64 => TargetArch::x86_64,
        Arch::Aarch64 => TargetArch::aarch64,
    }
}

fn seccompiler_action(action: Action) -> SeccompAction {
    match action {
        Action::Errno(e) => SeccompAction::Errno(e as u32),
    }
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

/// Compiles the standard table for `arch` (the probes and the tests; a launch compiles the
/// table its plan names with [`compile_table`]).
pub fn compile_filters(arch: Arch) -> Result<Vec<BpfProgram>, SeccompError> {
    compile_table(&rule_table(), arch)
}

/// Compiles `table` for `arch`: the arch/x32 prefix, then one filter per action. Call it
/// before forking the sandbox child (it allocates); install the result with
/// [`apply_seccomp_on_current_thread`](super::apply_seccomp_on_current_thread).
pub fn compile_table(table: &[SyscallRule], arch: Arch) -> Result<Vec<BpfProgram>, SeccompError> {
    let (stack, disjoint) = compile_stack(table, arch)?;
    Ok(match disjoint.then(|| chain(&stack)).flatten() {
        Some(one) => vec![one],
        None => stack,
    })
}

/// Hot system calls with argument rows all the same: they leave the kernel's action cache, every
/// call runs the program. open and openat create files with a mode, and a setuid/setgid mode
/// must be refused (see `setuid_setgid_rows` in `rules`); the cost is measured with
/// scripts/bench-syscalls.sh. Nothing may be added here without such a reason. A seccompiler filter
/// tests system call numbers one after the other in ascending order, so openat (257 on x86_64)
/// would come after some thirty others; in a filter of their own, placed first, the chained
/// program reaches their rows in a handful of instructions and answers at once (see [`chain`]).
pub(super) const HOT_WITH_ARGUMENT_ROWS: &[&str] = &["openat", "open"];

/// Which filter of the stack a system call's rows go to: the hot ones first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Part {
    Hot,
    Rest,
}

/// The table as a stack of filters (the prefix, then one per action, the hot calls' rows in
/// filters of their own first), and whether every system call is under one filter only.
pub(super) fn compile_stack(
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
            seccompiler_action(action),
            target(arch),
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
pub(super) fn chain(parts: &[BpfProgram]) -> Option<BpfProgram> {
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

#[cfg(test)]
mod tests {
    use super::super::rules::HOT;
    use super::*;

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
    fn unknown_syscall_is_an_error() {
        let table = vec![SyscallRule {
            syscall: "no_such_call",
            conditions: Vec::new(),
            action: Action::Errno(libc::EPERM),
            reason: "test",
        }];
        assert!(matches!(
            compile_table(&table, Arch::X86_64),
            Err(SeccompError::UnknownSyscall { .. })
        ));
    }
}
