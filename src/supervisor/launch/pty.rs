//! The terminal relay: when stdin and stdout are terminals, the command gets a fresh
//! pseudo-terminal of its own, created inside the sandbox's own devpts (so `tty` and `ttyname`
//! work there) and handed to the supervisor, which relays it. The command can never push
//! keystrokes into the user's terminal, and the user's terminal is put in raw mode and restored
//! on every way out.

use crate::sandbox::fdpass::receive_fd;
use crate::sys;
use nix::sys::termios::{self, SetArg, Termios};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

pub use crate::sandbox::terminal::{TerminalRequest, open_terminal_inside};

/// In the supervisor: the master side sent by the init, or `None` if the init closed the channel
/// first (it then reports why over the status pipe).
pub fn receive_terminal(channel: &OwnedFd) -> io::Result<Option<OwnedFd>> {
    receive_fd(channel)
}

/// Copies the user's window size onto the command's terminal; the kernel then sends SIGWINCH
/// to the command's foreground process group.
pub fn copy_window_size(user_tty: BorrowedFd<'_>, master: &OwnedFd) {
    if let Ok(size) = sys::get_window_size(user_tty) {
        let _ = sys::set_window_size(master.as_fd(), &size);
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
