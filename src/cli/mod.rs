//! The edge: what each command of `stepproof-run` and `stepproof` does, in order, from the
//! caller's side. May import every room below it; nothing imports it but the binaries.

pub mod approvals;
pub mod ci;
pub mod doctor;
pub mod explain;
pub mod host;
pub mod logging;
pub mod manual;
pub mod probes;
pub mod profiles;
pub mod recap;
pub mod repair;
pub mod run;
pub mod selftest;
pub mod state;
