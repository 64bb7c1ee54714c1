//! The agent's state outside the sandbox: its config directory, the sessions kept per
//! workspace, build caches and the housekeeping of all three. May import `net` (the
//! placeholder login) and everything below the supervisor.

pub mod caches;
pub mod config_dir;
pub mod held_read_only;
pub mod housekeeping;
pub mod session_state;
