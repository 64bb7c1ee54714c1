//! Services at the network boundary, outside the sandbox: the allow-list proxy (and its
//! TLS-terminating half), the model gateway (and the paths it sends the login to), the model login, service credentials and
//! server-managed settings. May import `http` and everything below the supervisor.

pub mod credentials;
pub mod gateway;
pub mod login;
pub mod model_paths;
pub mod proxy;
pub mod server_settings;
