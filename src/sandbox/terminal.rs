//! The command's terminal, inside: what the supervisor asks for (the user's modes and size) and
//! the pseudo-terminal the init opens in the sandbox's own devpts, whose master side it hands
//! out. The relay itself is the supervisor's (`supervisor::launch::pty`).

use crate::sandbox::fdpass::send_fd;
use crate::sys;
use nix::pty::{grantpt, posix_openpt, ptsname_r, unlockpt};
use nix::sys::termios::{self, SetArg, Termios};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;

/// What the supervisor asks of the init for an interactive run: the user's terminal modes and
/// size for the new terminal, and where to send its master side.
pub struct TerminalRequest {
    pub modes: Termios,
    pub size: libc::winsize,
    pub channel: OwnedFd,
}

impl TerminalRequest {
    /// Reads the user's terminal; `channel` is the init's end of a socketpair.
    pub fn from_user_terminal(
        user_tty: BorrowedFd<'_>,
        channel: OwnedFd,
    ) -> io::Result<TerminalRequest> {
        Ok(TerminalRequest {
            modes: termios::tcgetattr(user_tty).map_err(io::Error::from)?,
            size: sys::get_window_size(user_tty)?,
            channel,
        })
    }
}

/// In the init, after the view is built: opens a terminal in the sandbox's devpts with the
/// user's modes and size, makes it the init's controlling terminal, sends the master side to
/// the supervisor and returns the slave side for the command.
pub fn open_terminal_inside(request: TerminalRequest) -> io::Result<OwnedFd> {
    let flags =
        nix::fcntl::OFlag::O_RDWR | nix::fcntl::OFlag::O_NOCTTY | nix::fcntl::OFlag::O_CLOEXEC;
    let master = posix_openpt(flags).map_err(io::Error::from)?;
    grantpt(&master).map_err(io::Error::from)?;
    unlockpt(&master).map_err(io::Error::from)?;
    let name = ptsname_r(&master).map_err(io::Error::from)?;
    let slave: OwnedFd = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(&name)?
        .into();
    termios::tcsetattr(&slave, SetArg::TCSANOW, &request.modes).map_err(io::Error::from)?;
    sys::set_window_size(slave.as_fd(), &request.size)?;
    sys::set_controlling_terminal(slave.as_fd())?;
    let master = OwnedFd::from(master);
    send_fd(&request.channel, &master)?;
    Ok(slave)
}
