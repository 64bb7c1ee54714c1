//! The supervisor: everything that stays outside the sandbox — the launch, the terminal relay,
//! signals and job control, the exit code.

pub mod pty;
pub mod spawn;
pub mod status;
