//! Why a launch failed: the step, the path, the error with its errno; and which failure came
//! first when the init and the supervisor both report one.

use crate::sandbox::channels::ChannelError;
use crate::sandbox::namespaces::{self};
use crate::supervisor::agent::config_dir;
use std::io;
use std::os::fd::{AsFd, OwnedFd};

/// A step of the launch that failed: which, on what, and the error with its errno.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("the command line contains a NUL byte")]
    NulInArgument,
    #[error("{step}: {source}{hint}")]
    Os {
        step: &'static str,
        source: io::Error,
        hint: &'static str,
    },
    #[error("{step} {}: {source}{hint}", path.display())]
    OnPath {
        step: &'static str,
        path: std::path::PathBuf,
        source: io::Error,
        hint: &'static str,
    },
    #[error(
        "listening for the proxy on 127.0.0.1:{port}: {source} (another program uses that port: set network.proxy_port)"
    )]
    ProxyPort { port: u16, source: io::Error },
    #[error("setting up the credential gateway: {0}")]
    Gateway(String),
    #[error("setting up the service credentials: {0}")]
    Credentials(String),
    /// The agent's state or what the sandbox binds from the host (the error names the step
    /// and the path).
    #[error("preparing the agent's state and what the sandbox binds from the host: {0}")]
    AgentState(#[from] config_dir::AgentStateError),
    #[error(transparent)]
    Channel(#[from] ChannelError),
    /// The init's own failure, which a later step of the supervisor only met.
    #[error("building the sandbox: {0}")]
    Init(String),
    #[error(transparent)]
    Namespace(#[from] namespaces::NamespaceError),
    #[error("putting the sandbox in its cgroup: {0} (run `stepproof doctor`)")]
    Cgroup(#[from] crate::supervisor::launch::cgroup::CgroupError),
}

pub(super) fn os(step: &'static str) -> impl FnOnce(io::Error) -> LaunchError {
    move |source| LaunchError::Os {
        step,
        source,
        hint: "",
    }
}

pub(super) fn nix_os(step: &'static str) -> impl FnOnce(nix::Error) -> LaunchError {
    move |e| os(step)(e.into())
}

/// `e`, or the failure the init had already reported on `status` (its set-up broke, and the
/// supervisor's step met the channel it closed on its way out). When `e` is such a follow-on (a
/// broken pipe, a reset connection: the init's end is gone), the init's report may still be on
/// its way: it is waited for until the init's end of `status` closes too, at most a second.
/// Otherwise only what is there is read: a live init that reported nothing leaves `e` as the
/// cause.
pub(super) fn first_cause(e: LaunchError, status: &OwnedFd) -> LaunchError {
    let follow_on = matches!(
        crate::sandbox::init::errno_of(&e),
        libc::EPIPE | libc::ECONNRESET
    );
    let deadline = std::time::Instant::now()
        + std::time::Duration::from_millis(if follow_on { 1000 } else { 0 });
    let mut pending = Vec::new();
    let mut buf = [0u8; 4096];
    let ready = |fd: &OwnedFd| {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let timeout =
            nix::poll::PollTimeout::try_from(left).unwrap_or(nix::poll::PollTimeout::ZERO);
        let mut fds = [nix::poll::PollFd::new(
            fd.as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        matches!(nix::poll::poll(&mut fds, timeout), Ok(n) if n > 0)
    };
    while ready(status) {
        match nix::unistd::read(status, &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => pending.extend_from_slice(&buf[..n]),
        }
    }
    for line in pending.split(|b| *b == b'\n') {
        match serde_json::from_slice::<crate::sandbox::events::InitEvent>(line) {
            Ok(crate::sandbox::events::InitEvent::SetupFailed { message }) => {
                return LaunchError::Init(message);
            }
            Ok(crate::sandbox::events::InitEvent::ExecFailed { step, message, .. }) => {
                return LaunchError::Init(format!("{step}: {message}"));
            }
            _ => {}
        }
    }
    e
}
