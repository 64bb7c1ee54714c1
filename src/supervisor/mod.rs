//! The supervisor: everything that stays outside the sandbox and is never entered by it, in
//! five rooms, top first: `launch` (the process and its end), `runbook` (the engine) and
//! `agent` (the agent's state outside), then `net` (services at the network boundary) and
//! `way_out` (what crosses back). A room imports only the rooms below it (`tests/layers.rs`).

pub mod agent;
pub mod launch;
pub mod net;
pub mod runbook;
pub mod way_out;
