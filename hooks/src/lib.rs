//! StepProof's hook: Claude Code's hook contract, the policy language and its evaluation.
#![forbid(unsafe_code)]

pub mod config;
