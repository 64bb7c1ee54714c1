//! How a run ended, from the caller's point of view: the outcome and StepProof's exit codes.
//! (What the init reports along the way is `sandbox::events`.)

use serde::Serialize;

pub use crate::exit::ExitCode;

pub use crate::sandbox::events::InitEvent;

/// Why StepProof did not run the command: the exit code it ends with and the message.
#[derive(Debug)]
pub struct Failure {
    pub code: ExitCode,
    pub message: String,
}

impl Failure {
    /// The invocation asks for what StepProof will not do (120): do not retry.
    pub fn refused(message: impl Into<String>) -> Failure {
        Failure {
            code: ExitCode::Refused,
            message: message.into(),
        }
    }

    /// This host could not give what the profile requires (125).
    pub fn host(message: impl Into<String>) -> Failure {
        Failure {
            code: ExitCode::HostFailure,
            message: message.into(),
        }
    }
}

/// How the run ended, from the caller's point of view.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "kebab-case")]
pub enum Outcome {
    /// The command exited with this code.
    Exited {
        exit_code: i32,
        command_exit_code: i32,
    },
    /// The command was killed by a signal.
    Signaled { exit_code: i32, signal: i32 },
    /// The command was not found (127).
    NotFound { exit_code: i32, message: String },
    /// The command could not be executed (126).
    NotExecutable { exit_code: i32, message: String },
    /// StepProof itself failed (125): the command did not run, or the sandbox broke.
    StepproofError { exit_code: i32, message: String },
    /// StepProof refused the invocation before anything ran (120): the profile, a flag or the
    /// command asks for what StepProof will not do.
    Refused { exit_code: i32, message: String },
    /// `--timeout` ended the sandbox (124).
    TimedOut {
        exit_code: i32,
        command: Box<Outcome>,
    },
    /// A signal from outside ended the run (an orchestrator's SIGTERM, a hang-up): the command
    /// had the grace period, then the whole sandbox was killed. 128 + the signal (SIGTERM: 143),
    /// whatever the command's own status was.
    Terminated {
        exit_code: i32,
        signal: i32,
        signal_name: String,
        /// How the command itself ended; absent when the signal came before it was started.
        command: Option<Box<Outcome>>,
    },
    /// `--fail-on-deny`: the command finished, but the hook denied at least one call (122).
    Denied {
        exit_code: i32,
        command: Box<Outcome>,
        denials: usize,
    },
    /// A record of the run could not be written to the audit log (118): the log ends at its
    /// last complete record; how the run itself ended is kept.
    AuditIncomplete {
        exit_code: i32,
        command: Box<Outcome>,
        message: String,
    },
    /// The command finished, but the persistence sweep found created or changed persistence
    /// paths (moved to quarantine): 123, whatever the command's own code was.
    Tampering {
        exit_code: i32,
        /// How the command itself ended.
        command: Box<Outcome>,
        findings: Vec<crate::supervisor::way_out::sweep::Finding>,
    },
    /// A runbook step's evidence did not hold and its attempts ran out (`on_fail` retry or
    /// block): 117, whatever the command's own code was.
    EvidenceFailed {
        exit_code: i32,
        command: Box<Outcome>,
        step: String,
    },
    /// `--ci`: a loop of denials under one rule in one session ended the run (121, whatever
    /// the command's own code was; see `audit::denial_loops`).
    DenialLoop {
        exit_code: i32,
        command: Box<Outcome>,
        rule_id: String,
        denials: u32,
    },
    /// The runbook was abandoned before its last step (a step's `on_fail = "abandon"`, or the
    /// command ended with steps open): 116.
    Abandoned {
        exit_code: i32,
        command: Box<Outcome>,
        /// The steps not passed.
        open: Vec<String>,
    },
    /// The command ended while a step's only missing evidence was a person's approval (asked
    /// and not answered, denied, out of time, or impossible in `--ci`): 115. A later run
    /// continues it.
    ApprovalMissing {
        exit_code: i32,
        command: Box<Outcome>,
        step: String,
        /// `pending`, `denied`, `deadline` or `impossible`.
        missing: String,
    },
}

pub const EXIT_DENIED: i32 = ExitCode::Denied.code();
pub const EXIT_TIMEOUT: i32 = ExitCode::TimedOut.code();
pub const EXIT_STEPPROOF_FAILED: i32 = ExitCode::HostFailure.code();
pub const EXIT_REFUSED: i32 = ExitCode::Refused.code();
pub const EXIT_NOT_EXECUTABLE: i32 = ExitCode::NotExecutable.code();
pub const EXIT_NOT_FOUND: i32 = ExitCode::NotFound.code();

impl Outcome {
    pub fn exit_code(&self) -> i32 {
        match self {
            Outcome::Exited { exit_code, .. }
            | Outcome::Signaled { exit_code, .. }
            | Outcome::NotFound { exit_code, .. }
            | Outcome::NotExecutable { exit_code, .. }
            | Outcome::StepproofError { exit_code, .. }
            | Outcome::Refused { exit_code, .. }
            | Outcome::AuditIncomplete { exit_code, .. }
            | Outcome::Tampering { exit_code, .. }
            | Outcome::TimedOut { exit_code, .. }
            | Outcome::Terminated { exit_code, .. }
            | Outcome::Denied { exit_code, .. }
            | Outcome::EvidenceFailed { exit_code, .. }
            | Outcome::DenialLoop { exit_code, .. }
            | Outcome::Abandoned { exit_code, .. }
            | Outcome::ApprovalMissing { exit_code, .. } => *exit_code,
        }
    }

    /// StepProof refused the invocation (120).
    pub fn refused(message: impl Into<String>) -> Outcome {
        Outcome::Refused {
            exit_code: EXIT_REFUSED,
            message: message.into(),
        }
    }

    /// Nothing of the command ran, or the sandbox broke: 125, or 120 when the invocation itself
    /// was refused.
    pub fn from_failure(failure: Failure) -> Outcome {
        match failure.code {
            ExitCode::Refused => Outcome::refused(failure.message),
            _ => Outcome::StepproofError {
                exit_code: failure.code.code(),
                message: failure.message,
            },
        }
    }

    /// `signal` from outside ended the run; `command` is how the command itself ended.
    pub fn terminated(signal: i32, command: Option<Outcome>) -> Outcome {
        let signal_name = nix::sys::signal::Signal::try_from(signal)
            .map_or_else(|_| format!("signal {signal}"), |s| s.as_str().to_string());
        Outcome::Terminated {
            exit_code: 128 + signal,
            signal,
            signal_name,
            command: command.map(Box::new),
        }
    }

    pub fn failed(message: impl Into<String>) -> Outcome {
        Outcome::StepproofError {
            exit_code: EXIT_STEPPROOF_FAILED,
            message: message.into(),
        }
    }

    pub fn from_exec_failure(step: &str, errno: i32, message: &str) -> Outcome {
        let message = format!("{step}: {message}");
        if step == "execve" && errno == libc::ENOENT {
            Outcome::NotFound {
                exit_code: EXIT_NOT_FOUND,
                message,
            }
        } else if step == "execve" {
            Outcome::NotExecutable {
                exit_code: EXIT_NOT_EXECUTABLE,
                message,
            }
        } else {
            Outcome::failed(message)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_is_never_retried_and_host_failures_may_be() {
        assert_eq!(
            Outcome::from_failure(Failure::refused("x")).exit_code(),
            120
        );
        assert_eq!(Outcome::from_failure(Failure::host("x")).exit_code(), 125);
    }
}
