//! Handing descriptors across the sandbox boundary over a unix socketpair (SCM_RIGHTS): the
//! terminal's master side and the proxy's listening socket are made inside and served outside.

use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg};
use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

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
    let mut byte = [0u8; 1];
    let mut iov = [IoSliceMut::new(&mut byte)];
    let mut space = nix::cmsg_space!([RawFd; 1]);
    let msg = recvmsg::<()>(
        channel.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )
    .map_err(io::Error::from)?;
    for cmsg in msg.cmsgs().map_err(io::Error::from)? {
        if let ControlMessageOwned::ScmRights(fds) = cmsg
            && let Some(fd) = fds.first()
        {
            return Ok(Some(crate::sandbox::sys::own_fd(*fd)));
        }
    }
    Ok(None)
}
