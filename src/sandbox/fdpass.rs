//! Handing descriptors across the sandbox boundary over a unix socketpair (SCM_RIGHTS): the
//! terminal's master side and the proxy's listening socket are made inside and served outside.

use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};
use std::io::{self, IoSlice};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

/// A socketpair for one descriptor: (the supervisor's end, the init's end).
pub fn channel() -> io::Result<(OwnedFd, OwnedFd)> {
    nix::sys::socket::socketpair(
        nix::sys::socket::AddressFamily::Unix,
        nix::sys::socket::SockType::SeqPacket,
        None,
        nix::sys::socket::SockFlag::SOCK_CLOEXEC,
    )
    .map_err(io::Error::from)
}

pub fn send_fd(channel: &OwnedFd, fd: &impl AsRawFd) -> io::Result<()> {
    let fds = [fd.as_raw_fd()];
    let cmsg = [ControlMessage::ScmRights(&fds)];
    let iov = [IoSlice::new(b"f")];
    sendmsg::<()>(channel.as_raw_fd(), &iov, &cmsg, MsgFlags::empty(), None)
        .map(drop)
        .map_err(io::Error::from)
}

/// The descriptor sent on `channel`, or `None` if the other side closed it first (it then
/// reports why over the status pipe).
pub fn receive_fd(channel: &OwnedFd) -> io::Result<Option<OwnedFd>> {
    crate::sys::receive_fd(channel.as_fd())
}
