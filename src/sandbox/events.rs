//! What the sandbox init tells the supervisor, one JSON line per event, over a pipe. The
//! supervisor trusts it only as far as the init is trusted: it runs our code, before the
//! command and outside its reach (other uid or not dumpable, pid 1).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub enum InitEvent {
    /// The command's `execve` succeeded, under what its process reported as enforced.
    Started {
        pid: i32,
        enforcement: Option<crate::sandbox::report::CommandEnforcement>,
    },
    /// The command stopped (Ctrl-Z or a stop signal).
    Stopped {
        signal: i32,
    },
    Exited {
        code: i32,
    },
    Signaled {
        signal: i32,
    },
    /// `execve` failed (or a step right before it): `errno` of that step.
    ExecFailed {
        step: String,
        errno: i32,
        message: String,
    },
    /// Building the sandbox failed: nothing of the command ran.
    SetupFailed {
        message: String,
    },
    /// After the final event: every other process of the sandbox has been killed and reaped.
    AllGone,
}
