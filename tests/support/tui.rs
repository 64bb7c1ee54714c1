//! Claude Code's interactive TUI under `stepproof-run` on a pseudo-terminal the test plays.
#![allow(dead_code)]

use crate::support::World;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::time::{Duration, Instant};

pub struct Tui {
    pub master: OwnedFd,
    pub slave: OwnedFd,
    pub child: std::process::Child,
    pub before: nix::sys::termios::Termios,
    /// Everything the terminal showed so far.
    pub screen: String,
}

impl Tui {
    /// `stepproof-run RUN_ARGS… -- claude --dangerously-skip-permissions PROMPT` on a new
    /// terminal (its controlling terminal, in a session of its own).
    pub fn start(w: &World, run_args: &[&str], prompt: &str) -> Tui {
        Tui::start_env(w, run_args, &[], prompt)
    }

    /// [`Tui::start`] with variables set in `stepproof-run`'s own environment (the caller's).
    pub fn start_env(w: &World, run_args: &[&str], env: &[(&str, &str)], prompt: &str) -> Tui {
        let size = libc::winsize {
            ws_row: 40,
            ws_col: 120,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        let pty = nix::pty::openpty(Some(&size), None).unwrap();
        let before = nix::sys::termios::tcgetattr(pty.slave.as_fd()).unwrap();
        let slave_fd = pty.slave.as_raw_fd();
        let mut cmd = w.command(
            run_args,
            &["claude", "--dangerously-skip-permissions", prompt],
        );
        let stdio = || std::process::Stdio::from(pty.slave.try_clone().unwrap());
        cmd.stdin(stdio())
            .stdout(stdio())
            .stderr(stdio())
            .env("TERM", "xterm-256color")
            .envs(env.iter().copied());
        // SAFETY: setsid and TIOCSCTTY between fork and exec, on a descriptor that exists.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setsid() < 0 || libc::ioctl(slave_fd, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().unwrap();
        Tui {
            master: pty.master,
            slave: pty.slave,
            child,
            before,
            screen: String::new(),
        }
    }

    /// Reads the terminal for up to `t` (keeps the relay from blocking on a full terminal).
    pub fn pump(&mut self, t: Duration) {
        use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
        let end = Instant::now() + t;
        while Instant::now() < end {
            let mut fds = [PollFd::new(self.master.as_fd(), PollFlags::POLLIN)];
            let mut buf = [0u8; 65536];
            if poll(&mut fds, PollTimeout::from(50u8)).unwrap_or(0) > 0 {
                match nix::unistd::read(self.master.as_fd(), &mut buf) {
                    Ok(n) if n > 0 => self.screen.push_str(&String::from_utf8_lossy(&buf[..n])),
                    _ => std::thread::sleep(Duration::from_millis(50)),
                }
            }
        }
    }

    /// Pumps until `done` or panics after `secs`.
    pub fn until(&mut self, secs: u64, what: &str, mut done: impl FnMut(&Tui) -> bool) {
        let start = Instant::now();
        while !done(self) {
            assert!(
                start.elapsed().as_secs() < secs,
                "waited for {what}; the terminal shows {:?}",
                self.screen
            );
            self.pump(Duration::from_millis(200));
        }
    }

    pub fn send(&self, bytes: &[u8]) {
        nix::unistd::write(&self.master, bytes).unwrap();
    }

    /// Types a line as a person would (the text, a pause, then Enter).
    pub fn type_line(&mut self, text: &str) {
        self.send(text.as_bytes());
        self.pump(Duration::from_millis(700));
        self.send(b"\r");
    }

    /// `/exit`, then waits (up to 30 s) for the run to end.
    pub fn exit(&mut self) -> std::process::ExitStatus {
        self.type_line("/exit");
        let start = Instant::now();
        loop {
            self.pump(Duration::from_millis(100));
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                start.elapsed().as_secs() < 30,
                "/exit did not end the session; the terminal shows {:?}",
                self.screen
            );
        }
    }
}

impl Drop for Tui {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
