//! The runbook engine, held by the supervisor: the steps' state machine and its servers,
//! evidence, model verifiers, continuation of an interrupted run, approvals by webhook and their notifications. May
//! import `net`, `way_out` and everything below the supervisor.

pub mod continuation;
pub mod engine;
pub mod files;
pub mod masking;
pub mod notify;
pub mod step_open;
pub mod verifier;
pub mod webhook;
