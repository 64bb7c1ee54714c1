//! The clients of a running runbook: `stepproof step status|complete|evidence` inside the
//! sandbox (over the run's step socket, bound only into that run), and `stepproof approve|deny
//! RUN STEP` at a host terminal (over the run's approval socket under the user's state
//! directory, which no sandbox can reach). One JSON request a connection, one JSON answer.

use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

/// The runbook directory inside the sandbox: `state.json`, the open steps' policies and the
/// step socket, read-only (a directory bind of a supervisor-owned host directory).
pub const RUNBOOK_DIR: &str = "/run/stepproof/runbook";

/// That directory on the host: the run directory's `runbook` (the engine makes it; the plan
/// binds it, and `stepproof explain --runbook` prints the mount).
pub fn state_dir(run_dir: &std::path::Path) -> std::path::PathBuf {
    run_dir.join("runbook")
}
/// The step socket's name in it.
pub const STEP_SOCKET: &str = "step.sock";
/// The approval socket's name in the run's directory on the host.
pub const APPROVAL_SOCKET: &str = "approve.sock";
/// The largest request or answer read.
pub const MAX_MESSAGE_BYTES: u64 = 1 << 20;

/// A request from inside. Unknown fields are refused: a message claiming a verdict, an
/// evidence result or an approval is not a request the supervisor takes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase", deny_unknown_fields)]
pub enum StepRequest {
    /// The run's state (a struct variant: extra fields are refused as with the others).
    Status {},
    /// Ask the supervisor to check an open step's evidence (the only open one when unnamed).
    Complete {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        step: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
        /// Hold the answer until the verdict, a person's approval included (a script's way;
        /// an agent is answered "waiting" at once and told the verdict later).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        wait: bool,
    },
    /// Point the supervisor at files as evidence (recorded; the supervisor hashes them itself).
    Evidence { files: Vec<String> },
    /// Give the runbook up: recorded, the open steps are marked abandoned and the run stops
    /// (every later tool call is denied; `stepproof-run` exits 116).
    Abandon {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
}

/// A request from a host terminal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase", deny_unknown_fields)]
pub enum ApprovalRequest {
    Approve {
        step: String,
        /// `SUDO_USER` of the approving terminal: who is behind a root peer (the supervisor
        /// takes it only from root, who could claim anything anyway).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sudo_user: Option<String>,
    },
    Deny {
        step: String,
        #[serde(default)]
        reason: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sudo_user: Option<String>,
    },
}

/// `SUDO_USER` of this process, when set (sent with an approval; see [`ApprovalRequest`]).
pub fn sudo_user() -> Option<String> {
    std::env::var("SUDO_USER")
        .ok()
        .filter(|u| !u.is_empty() && u.len() <= 64)
}

/// The supervisor's answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Answer {
    /// Whether the request was taken and (for `complete`) the step passed.
    pub ok: bool,
    /// What the supervisor decided, in words (the failing command's capped output included).
    pub message: String,
    /// The run's state after the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<serde_json::Value>,
}

/// Sends one request and reads the answer.
pub fn ask<T: Serialize>(socket: &Path, request: &T) -> Result<Answer, String> {
    let mut stream = UnixStream::connect(socket)
        .map_err(|e| format!("connecting to {}: {e}", socket.display()))?;
    let mut line = serde_json::to_vec(request).map_err(|e| e.to_string())?;
    line.push(b'\n');
    stream
        .write_all(&line)
        .map_err(|e| format!("writing to {}: {e}", socket.display()))?;
    let mut answer = String::new();
    BufReader::new(std::io::Read::take(&stream, MAX_MESSAGE_BYTES))
        .read_line(&mut answer)
        .map_err(|e| format!("reading from {}: {e}", socket.display()))?;
    serde_json::from_str(&answer)
        .map_err(|e| format!("the answer from {} is not one: {e}", socket.display()))
}

/// `stepproof step …` (inside a run with a runbook).
#[derive(clap::Subcommand, Debug)]
pub enum StepCommand {
    /// The runbook, the open steps, attempts and verdicts.
    Status,
    /// Ask the supervisor to check a step's evidence; it answers with the verdict and, on
    /// failure, why. Exit 0 passed, 1 not passed.
    Complete {
        /// The step (the only open one when omitted).
        #[arg(long)]
        step: Option<String>,
        /// A note for the record.
        #[arg(long)]
        note: Option<String>,
        /// When the step needs a person's approval, wait for the answer (by default the
        /// supervisor answers "waiting for approval" at once and tells the verdict on the next
        /// tool call or prompt).
        #[arg(long)]
        wait: bool,
    },
    /// Name files as evidence (recorded; the supervisor judges them by its own hashes).
    Evidence {
        #[arg(required = true)]
        files: Vec<String>,
    },
    /// Abandon the runbook (recorded): the open steps are marked abandoned, every later tool
    /// call is denied and the run ends with exit 116. Exit 0 abandoned, 1 refused.
    Abandon {
        /// Why, for the record.
        #[arg(long)]
        reason: Option<String>,
    },
}

/// Exit codes of the clients: 0 done/passed, 1 refused/not passed, 2 no runbook reachable.
pub fn run_step_command(command: StepCommand) -> i32 {
    let request = match command {
        StepCommand::Status => StepRequest::Status {},
        StepCommand::Complete { step, note, wait } => StepRequest::Complete { step, note, wait },
        StepCommand::Evidence { files } => StepRequest::Evidence { files },
        StepCommand::Abandon { reason } => StepRequest::Abandon { reason },
    };
    let socket = Path::new(RUNBOOK_DIR).join(STEP_SOCKET);
    answer_to_exit(
        "stepproof step",
        ask(&socket, &request).map_err(|e| {
            format!("{e} (`stepproof step` works inside a `stepproof-run --runbook` run)")
        }),
    )
}

fn answer_to_exit(who: &str, answer: Result<Answer, String>) -> i32 {
    match answer {
        Ok(answer) => {
            crate::out!("{}", answer.message.trim_end());
            if let Some(state) = &answer.state
                && std::env::var_os("STEPPROOF_STEP_JSON").is_some()
            {
                crate::out!("{state}");
            }
            if answer.ok { 0 } else { 1 }
        }
        Err(e) => {
            crate::say!("{who}: {e}");
            2
        }
    }
}

/// The run directory of `run` (a run id: the directory name under the state directory's
/// `runs/`).
pub fn run_dir(home: &Path, run: &str) -> Result<PathBuf, String> {
    if run.is_empty() || run.contains('/') || run.starts_with('.') {
        return Err(format!(
            "{run:?} is not a run id (a directory name under runs/)"
        ));
    }
    Ok(home.join(crate::audit::STATE_DIR).join("runs").join(run))
}

/// `stepproof approve RUN STEP` / `stepproof deny RUN STEP --reason …`.
pub fn run_approval(home: &Path, run: &str, request: &ApprovalRequest) -> i32 {
    let socket = match run_dir(home, run) {
        Ok(dir) => dir.join(APPROVAL_SOCKET),
        Err(e) => {
            crate::say!("stepproof: {e}");
            return 2;
        }
    };
    answer_to_exit(
        "stepproof",
        ask(&socket, request).map_err(|e| format!("{e} (is run {run} waiting for approval?)")),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_are_not_requests() {
        for forged in [
            r#"{"op":"complete","verdict":"passed"}"#,
            r#"{"op":"complete","step":"a","evidence":{"exit_code":0}}"#,
            r#"{"op":"approve","step":"a"}"#,
            r#"{"op":"status","approved":true}"#,
            r#"{"op":"abandon","verdict":"passed"}"#,
        ] {
            assert!(
                serde_json::from_str::<StepRequest>(forged).is_err(),
                "{forged}"
            );
        }
        assert_eq!(
            serde_json::from_str::<StepRequest>(r#"{"op":"complete","note":"x"}"#).unwrap(),
            StepRequest::Complete {
                step: None,
                note: Some("x".into()),
                wait: false,
            }
        );
    }
}
