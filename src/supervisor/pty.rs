//! The terminal relay: when stdin and stdout are terminals, the command gets a fresh
//! pseudo-terminal of its own, created inside the sandbox's own devpts (so `tty` and `ttyname`
//! work there) and handed to the supervisor, which relays it. The command can never push
//! keystrokes into the user's terminal, and the user's terminal is put in raw mode and restored
//! on every way out.

use crate::sandbox::sys;
use crate::supervisor::fdpass::{receive_fd, send_fd};
use nix::pty::{grantpt, posix_openpt, ptsname_r, unlockpt};
use nix::sys::termios::{self, SetArg, Termios};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, IntoRawFd, OwnedFd};
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
            size: sys::get_window_size(user_tty.as_raw_fd())?,
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
    sys::set_window_size(slave.as_raw_fd(), &request.size)?;
    sys::set_controlling_terminal(slave.as_raw_fd())?;
    // PtyMaster gives its descriptor up through into_raw_fd; nothing else owns it after that.
    let master = sys::own_fd(master.into_raw_fd());
    send_fd(&request.channel, &master)?;
    Ok(slave)
}

/// In the supervisor: the master side sent by the init, or `None` if the init closed the channel
/// first (it then reports why over the status pipe).
pub fn receive_terminal(channel: &OwnedFd) -> io::Result<Option<OwnedFd>> {
    receive_fd(channel)
}

/// Copies the user's window size onto the command's terminal; the kernel then sends SIGWINCH
/// to the command's foreground process group.
pub fn copy_window_size(user_tty: BorrowedFd<'_>, master: &OwnedFd) {
    if let Ok(size) = sys::get_window_size(user_tty.as_raw_fd()) {
        let _ = sys::set_window_size(master.as_raw_fd(), &size);
    }
}

/// Raw mode on the user's terminal for as long as it lives; the saved modes come back on drop
/// (normal exit, error, panic) and whenever the supervisor stops for job control.
pub struct RawTerminal<'a> {
    fd: BorrowedFd<'a>,
    saved: Termios,
    raw: bool,
}

impl<'a> RawTerminal<'a> {
    pub fn enter(fd: BorrowedFd<'a>) -> io::Result<RawTerminal<'a>> {
        let saved = termios::tcgetattr(fd).map_err(io::Error::from)?;
        let mut term = RawTerminal {
            fd,
            saved,
            raw: false,
        };
        term.make_raw()?;
        Ok(term)
    }

    pub fn make_raw(&mut self) -> io::Result<()> {
        let mut raw = self.saved.clone();
        termios::cfmakeraw(&mut raw);
        termios::tcsetattr(self.fd, SetArg::TCSADRAIN, &raw).map_err(io::Error::from)?;
        self.raw = true;
        Ok(())
    }

    pub fn restore(&mut self) {
        if self.raw {
            let _ = termios::tcsetattr(self.fd, SetArg::TCSADRAIN, &self.saved);
            self.raw = false;
        }
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Drop for RawTerminal<'_> {
    fn drop(&mut self) {
        self.restore();
    }
}
