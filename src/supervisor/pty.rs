//! The terminal relay: when stdin and stdout are terminals, the command gets a fresh
//! pseudo-terminal of its own (it can never push keystrokes into the user's terminal), and the
//! user's terminal is put in raw mode and restored on every way out.

use crate::sandbox::sys;
use nix::pty::{OpenptyResult, openpty};
use nix::sys::termios::{self, SetArg, Termios};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

/// Opens a pseudo-terminal with the window size and modes of the user's terminal.
pub fn open_pty_like(user_tty: BorrowedFd<'_>) -> io::Result<OpenptyResult> {
    let size = sys::get_window_size(user_tty.as_raw_fd()).ok();
    let modes = termios::tcgetattr(user_tty).ok();
    let pty = openpty(size.as_ref(), modes.as_ref()).map_err(io::Error::from)?;
    // The master stays with the supervisor only.
    nix::fcntl::fcntl(
        &pty.master,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
    )
    .map_err(io::Error::from)?;
    Ok(pty)
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
