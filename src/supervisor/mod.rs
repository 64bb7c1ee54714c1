//! The supervisor: everything that stays outside the sandbox — the launch, the terminal relay,
//! signals and job control, the exit code, the network proxy and the credential gateway.

pub mod agent_state;
pub mod cgroup;
pub mod gateway;
pub mod output_files;
pub mod profile_check;
pub mod proposed;
pub mod proxy;
pub mod pty;
pub mod spawn;
pub mod status;
pub mod sweep;
pub mod watch;
