//! The supervisor: everything that stays outside the sandbox — the launch, the terminal relay,
//! signals and job control, the exit code, the network proxy, service credentials and the
//! credential gateway.

pub mod agent_config_dir;
pub mod approval_webhook;
pub mod caches;
pub mod cgroup;
pub mod credentials;
pub mod gateway;
pub mod housekeeping;
pub mod launch;
pub mod login;
pub mod outcome;
pub mod output_files;
pub mod profile_check;
pub mod proposed;
pub mod proxy;
pub mod pty;
pub mod relay;
pub mod runbook_continue;
pub mod runbook_run;
pub mod runbook_verifier;
pub mod server_settings;
pub mod session_state;
pub mod sweep;
pub mod watch;
