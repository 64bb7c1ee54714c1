//! The sandbox: kernel layers beneath every process `stepproof-run` starts.

pub mod landlock;
pub mod rlimits;
pub mod seccomp;
#[allow(unsafe_code)]
pub mod sys;
