//! StepProof's own exit codes: one table, read by both binaries, the init and
//! `docs/exit-codes.md` (a test reads both). Any other code is the command's own.

/// StepProof's own exit codes: one table, `docs/exit-codes.md` (a test reads both). Any
/// other code is the command's own. A CI system tells "do not retry" (`Refused`: the profile, the
/// flags or the command ask for something StepProof will not do) from "infrastructure"
/// (`HostFailure`: this host lacks what the profile requires, or set-up failed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ExitCode {
    /// `--runbook`: the command ended while a step waited for a person's approval (not yet
    /// answered, denied, out of time, or impossible in `--ci` without `--approve`); a later run
    /// continues it.
    ApprovalMissing = 115,
    /// `--runbook`: the runbook was abandoned before its last step.
    RunbookAbandoned = 116,
    /// `--runbook`: a step's evidence did not hold and no attempt was left.
    EvidenceFailed = 117,
    /// A record of the run could not be written to the audit log: the start record (the
    /// command never ran), or a later one (the log ends at its last complete record; the status
    /// is `audit-incomplete` and keeps how the command ended).
    AuditIncomplete = 118,
    /// Reserved: the persistence sweep could not look at everything the run could write.
    SweepIncomplete = 119,
    /// Refused before anything ran: a bad profile or flag, or a command the profile forbids.
    /// Retrying the same invocation gives the same answer.
    Refused = 120,
    /// `--ci`: the hook kept denying calls under one rule in one session (twice the profile's
    /// `denial_loop_after`, after the denials had restated what is allowed): the run was ended
    /// rather than let it spend its budget on denied calls.
    DenialLoop = 121,
    /// `--fail-on-deny`: the command finished, but the hook denied at least one call.
    Denied = 122,
    /// The command finished, but the sweep found what the host would act on (quarantined).
    Tampering = 123,
    /// `--timeout` ended the sandbox.
    TimedOut = 124,
    /// This host could not give the protection the profile requires (a missing kernel feature,
    /// a failed set-up step, a `--ci` self-test that found the sandbox weaker): infrastructure.
    HostFailure = 125,
    /// The command was found but could not be executed.
    NotExecutable = 126,
    /// The command was not found.
    NotFound = 127,
}

impl ExitCode {
    /// Every code, in order.
    pub const ALL: [ExitCode; 13] = [
        ExitCode::ApprovalMissing,
        ExitCode::RunbookAbandoned,
        ExitCode::EvidenceFailed,
        ExitCode::AuditIncomplete,
        ExitCode::SweepIncomplete,
        ExitCode::Refused,
        ExitCode::DenialLoop,
        ExitCode::Denied,
        ExitCode::Tampering,
        ExitCode::TimedOut,
        ExitCode::HostFailure,
        ExitCode::NotExecutable,
        ExitCode::NotFound,
    ];

    pub const fn code(self) -> i32 {
        self as i32
    }

    /// Whether the same invocation may succeed on another host (or later).
    pub const fn may_succeed_elsewhere(self) -> bool {
        matches!(
            self,
            ExitCode::HostFailure | ExitCode::AuditIncomplete | ExitCode::SweepIncomplete
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exit-code table of `docs/exit-codes.md` is this enum: every reserved code is in
    /// both, with the same number, and nothing else in the 115–127 range is claimed by either.
    #[test]
    fn the_docs_table_is_the_enum() {
        let page = include_str!("../docs/exit-codes.md");
        let section = page
            .split("# Exit codes of `stepproof-run`")
            .nth(1)
            .expect("docs/exit-codes.md has the exit-code section");
        let table: Vec<i32> = section
            .lines()
            .skip_while(|l| !l.starts_with('|'))
            .take_while(|l| l.starts_with('|'))
            .filter_map(|l| l.split('|').nth(1)?.trim().parse().ok())
            .collect();
        let ours: Vec<i32> = ExitCode::ALL.iter().map(|c| c.code()).collect();
        assert_eq!(
            table, ours,
            "docs/exit-codes.md's table against ExitCode::ALL"
        );
        let mut sorted = ours.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted, ours, "ExitCode::ALL in order, each once");
    }

    /// The example Kubernetes Job's `podFailurePolicy` is this table: `FailJob` for every
    /// code that the same invocation would get again, `Count` (retried) for those another host
    /// may not, and `Ignore` for the ends a signal from outside gives (128 + SIGHUP, SIGTERM).
    #[test]
    fn the_kubernetes_example_fails_the_job_on_what_a_retry_cannot_fix() {
        let example = include_str!("../examples/kubernetes-job.yaml");
        let mut rules: Vec<(String, Vec<i32>)> = Vec::new();
        let mut action = String::new();
        for line in example.lines().map(str::trim) {
            if let Some(a) = line.strip_prefix("- action: ") {
                action = a.to_string();
            } else if let Some(list) = line.strip_prefix("values: [") {
                let codes = list
                    .trim_end_matches(']')
                    .split(',')
                    .map(|c| c.trim().parse().expect("an exit code"))
                    .collect();
                rules.push((action.clone(), codes));
            }
        }
        let codes_of = |wanted: &str| -> Vec<i32> {
            rules
                .iter()
                .filter(|(a, _)| a == wanted)
                .flat_map(|(_, c)| c.clone())
                .collect()
        };
        let fail: Vec<i32> = ExitCode::ALL
            .iter()
            .filter(|c| !c.may_succeed_elsewhere())
            .map(|c| c.code())
            .collect();
        let count: Vec<i32> = ExitCode::ALL
            .iter()
            .filter(|c| c.may_succeed_elsewhere())
            .map(|c| c.code())
            .collect();
        assert_eq!(codes_of("FailJob"), fail, "{rules:?}");
        assert_eq!(codes_of("Count"), count, "{rules:?}");
        assert_eq!(
            codes_of("Ignore"),
            [128 + libc::SIGHUP, 128 + libc::SIGTERM],
            "{rules:?}"
        );
    }

    #[test]
    fn refused_is_never_retried_and_host_failures_may_be() {
        assert!(!ExitCode::Refused.may_succeed_elsewhere());
        assert!(ExitCode::HostFailure.may_succeed_elsewhere());
    }
}
