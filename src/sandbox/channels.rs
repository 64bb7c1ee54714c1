//! The channels between the supervisor and the sandbox's init, made before the clone: one pair
//! each, the supervisor's end kept outside ([`SupervisorEnds`]), the init's end taken in
//! ([`InitEnds`]). Every one is close-on-exec: the command inherits none.

use crate::sandbox::fdpass;
use crate::sandbox::terminal::TerminalRequest;
use crate::sys::ParentOnlyFds;
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};

/// What a run needs channels for, beyond the three every run has.
pub struct Wanted<'a> {
    /// Interactive runs: the user's terminal, whose modes and size the command's terminal
    /// inside starts with.
    pub user_terminal: Option<BorrowedFd<'a>>,
    /// An allow-list network in the sandbox's own namespace: the proxy's socket comes out.
    pub proxy: bool,
    /// The credential gateway: its socket on the sandbox's /run comes out.
    pub gateway: bool,
    /// A network namespace of its own: it goes in once the seed's network maker has it.
    pub network_namespace: bool,
}

/// The ends that stay with the supervisor.
pub struct SupervisorEnds {
    /// The init's events arrive here.
    pub status: OwnedFd,
    /// Closing it makes the init end the sandbox (also without a pid namespace).
    pub lifeline: OwnedFd,
    /// The compiled seccomp filters go in here.
    pub seccomp: OwnedFd,
    /// The command's terminal (its master side) comes back here.
    pub terminal: Option<OwnedFd>,
    /// The proxy's listening socket, made inside the sandbox's network namespace, comes back.
    pub proxy: Option<OwnedFd>,
    /// The credential gateway's socket comes back.
    pub gateway: Option<OwnedFd>,
    /// The sandbox's network namespace goes in.
    pub network_namespace: Option<OwnedFd>,
}

/// The ends the init takes in (see `InitArgs`).
pub struct InitEnds {
    /// Where `InitEvent`s go.
    pub status: OwnedFd,
    /// Its other end stays with the supervisor: hang-up means the supervisor is gone.
    pub lifeline: OwnedFd,
    /// The compiled seccomp filters arrive here while the init builds the view.
    pub seccomp: OwnedFd,
    /// The terminal to create inside for the command, and where its master side goes.
    pub terminal: Option<TerminalRequest>,
    /// Where the proxy's listening socket goes.
    pub proxy: Option<OwnedFd>,
    /// Where the gateway's socket goes.
    pub gateway: Option<OwnedFd>,
    /// Where the network namespace arrives.
    pub network_namespace: Option<OwnedFd>,
}

/// A channel that could not be made.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {source}")]
pub struct ChannelError {
    pub what: &'static str,
    pub source: io::Error,
}

fn made(what: &'static str) -> impl FnOnce(io::Error) -> ChannelError {
    move |source| ChannelError { what, source }
}

/// Both ends of every channel the run needs.
pub fn open(wanted: Wanted<'_>) -> Result<(SupervisorEnds, InitEnds), ChannelError> {
    let pipe = |what| {
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(io::Error::from)
            .map_err(made(what))
    };
    let pair = |wanted: bool, what| -> Result<(Option<OwnedFd>, Option<OwnedFd>), ChannelError> {
        if !wanted {
            return Ok((None, None));
        }
        let (ours, theirs) = fdpass::channel().map_err(made(what))?;
        Ok((Some(ours), Some(theirs)))
    };
    let (status_read, status_write) = pipe("creating the status pipe")?;
    let (lifeline_read, lifeline_write) = pipe("creating the lifeline pipe")?;
    let (seccomp_read, seccomp_write) = pipe("creating the seccomp pipe")?;
    let (terminal_ours, terminal_theirs) = match wanted.user_terminal {
        Some(user_tty) => {
            let (ours, theirs) = nix::sys::socket::socketpair(
                nix::sys::socket::AddressFamily::Unix,
                nix::sys::socket::SockType::SeqPacket,
                None,
                nix::sys::socket::SockFlag::SOCK_CLOEXEC,
            )
            .map_err(io::Error::from)
            .map_err(made("creating the terminal channel"))?;
            let request = TerminalRequest::from_user_terminal(user_tty, theirs)
                .map_err(made("reading the terminal's modes and size"))?;
            (Some(ours), Some(request))
        }
        None => (None, None),
    };
    let (proxy_ours, proxy_theirs) = pair(wanted.proxy, "creating the proxy channel")?;
    let (gateway_ours, gateway_theirs) = pair(wanted.gateway, "creating the gateway channel")?;
    let (netns_ours, netns_theirs) =
        pair(wanted.network_namespace, "creating the network channel")?;
    Ok((
        SupervisorEnds {
            status: status_read,
            lifeline: lifeline_write,
            seccomp: seccomp_write,
            terminal: terminal_ours,
            proxy: proxy_ours,
            gateway: gateway_ours,
            network_namespace: netns_ours,
        },
        InitEnds {
            status: status_write,
            lifeline: lifeline_read,
            seccomp: seccomp_read,
            terminal: terminal_theirs,
            proxy: proxy_theirs,
            gateway: gateway_theirs,
            network_namespace: netns_theirs,
        },
    ))
}

impl SupervisorEnds {
    /// Every end, for the init to close in its copy of the descriptor table first thing. Each
    /// is borrowed mutably until the init is made, so the init's closure cannot hold one.
    pub fn close_in_child<'a>(&'a mut self, fds: &mut ParentOnlyFds<'a>) {
        fds.add(&mut self.status);
        fds.add(&mut self.lifeline);
        fds.add(&mut self.seccomp);
        for end in [
            &mut self.terminal,
            &mut self.proxy,
            &mut self.gateway,
            &mut self.network_namespace,
        ]
        .into_iter()
        .flatten()
        {
            fds.add(end);
        }
    }
}
