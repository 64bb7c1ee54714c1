//! How a run ended, from the caller's point of view: the outcome and StepProof's exit codes.
//! (What the init reports along the way is `sandbox::events`.)

use serde::Serialize;

pub use crate::sandbox::events::InitEvent;

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
    /// `--timeout` ended the sandbox (124).
    TimedOut {
        exit_code: i32,
        command: Box<Outcome>,
    },
    /// `--fail-on-deny`: the command finished, but the hook denied at least one call (122).
    Denied {
        exit_code: i32,
        command: Box<Outcome>,
        denials: usize,
    },
    /// The command finished, but the persistence sweep found created or changed persistence
    /// paths (moved to quarantine): 123, whatever the command's own code was.
    Tampering {
        exit_code: i32,
        /// How the command itself ended.
        command: Box<Outcome>,
        findings: Vec<crate::supervisor::sweep::Finding>,
    },
}

pub const EXIT_DENIED: i32 = 122;
pub const EXIT_TIMEOUT: i32 = 124;
pub const EXIT_STEPPROOF_FAILED: i32 = 125;
pub const EXIT_NOT_EXECUTABLE: i32 = 126;
pub const EXIT_NOT_FOUND: i32 = 127;

impl Outcome {
    pub fn exit_code(&self) -> i32 {
        match self {
            Outcome::Exited { exit_code, .. }
            | Outcome::Signaled { exit_code, .. }
            | Outcome::NotFound { exit_code, .. }
            | Outcome::NotExecutable { exit_code, .. }
            | Outcome::StepproofError { exit_code, .. }
            | Outcome::Tampering { exit_code, .. }
            | Outcome::TimedOut { exit_code, .. }
            | Outcome::Denied { exit_code, .. } => *exit_code,
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
