//! The terminal relay against a real pseudo-terminal: the test plays the user's terminal (and,
//! for Ctrl-Z, the user's shell), `stepproof-run` runs in a session of its own on it.

mod support;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::pty::openpty;
use nix::sys::signal::{Signal, kill};
use nix::sys::termios::{Termios, tcgetattr};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::time::{Duration, Instant};
use support::*;

struct Session {
    master: OwnedFd,
    slave: OwnedFd,
    pid: Pid,
    seen: String,
    before: Termios,
}

impl Session {
    fn start(w: &World, args: &[&str]) -> Session {
        let size = libc::winsize {
            ws_row: 24,
            ws_col: 80,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        let pty = openpty(Some(&size), None).unwrap();
        let before = tcgetattr(pty.slave.as_fd()).unwrap();
        let slave_fd = pty.slave.as_raw_fd();
        let mut cmd = w.command(&[], args);
        let stdio = || Stdio::from(pty.slave.try_clone().unwrap());
        cmd.stdin(stdio())
            .stdout(stdio())
            .stderr(stdio())
            .env("TERM", "xterm");
        // SAFETY: setsid and TIOCSCTTY between fork and exec, on a descriptor that exists.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setsid() < 0 || libc::ioctl(slave_fd, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        // The test waits for it itself (waitpid with WUNTRACED, which std's Child cannot do).
        #[allow(clippy::zombie_processes)]
        let child = cmd.spawn().unwrap();
        Session {
            master: pty.master,
            slave: pty.slave,
            pid: Pid::from_raw(child.id() as i32),
            seen: String::new(),
            before,
        }
    }

    fn send(&self, bytes: &[u8]) {
        nix::unistd::write(&self.master, bytes).unwrap();
    }

    /// Reads until `needle` has been seen (after what was consumed before) or panics.
    fn expect(&mut self, needle: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(pos) = self.seen.find(needle) {
                self.seen.drain(..pos + needle.len());
                return;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "never saw {needle:?}; terminal shows {:?}",
                self.seen
            );
            let mut fds = [PollFd::new(self.master.as_fd(), PollFlags::POLLIN)];
            let ready = poll(
                &mut fds,
                PollTimeout::try_from(left.as_millis().min(1000) as i32).unwrap(),
            );
            let mut buf = [0u8; 4096];
            if ready.unwrap_or(0) > 0
                && let Ok(n) = nix::unistd::read(self.master.as_fd(), &mut buf)
            {
                self.seen.push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        }
    }

    fn wait(&mut self) -> WaitStatus {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            // Keep draining output so the relay never blocks on a full terminal.
            let mut buf = [0u8; 4096];
            let mut fds = [PollFd::new(self.master.as_fd(), PollFlags::POLLIN)];
            if poll(&mut fds, PollTimeout::from(50u8)).unwrap_or(0) > 0
                && let Ok(n) = nix::unistd::read(self.master.as_fd(), &mut buf)
            {
                self.seen.push_str(&String::from_utf8_lossy(&buf[..n]));
            }
            match waitpid(
                self.pid,
                Some(WaitPidFlag::WNOHANG | WaitPidFlag::WUNTRACED),
            )
            .unwrap()
            {
                WaitStatus::StillAlive => {}
                other => return other,
            }
            assert!(
                Instant::now() < deadline,
                "stepproof-run did not finish; terminal shows {:?}",
                self.seen
            );
        }
    }

    #[track_caller]
    fn assert_terminal_restored(&self) {
        let now = tcgetattr(self.slave.as_fd()).unwrap();
        assert_eq!(
            now.local_flags, self.before.local_flags,
            "terminal local modes not restored"
        );
        assert_eq!(
            now.input_flags, self.before.input_flags,
            "terminal input modes not restored"
        );
        assert_eq!(
            now.output_flags, self.before.output_flags,
            "terminal output modes not restored"
        );
    }
}

both!(echoes_input_and_restores_the_terminal, |w: &World| {
    let mut s = Session::start(
        w,
        &[
            "/bin/sh",
            "-c",
            "read line; echo \"got:$line\"; tty >/dev/null && echo is-a-tty",
        ],
    );
    s.send(b"hello\r");
    s.expect("hello");
    s.expect("got:hello");
    s.expect("is-a-tty");
    assert_eq!(s.wait(), WaitStatus::Exited(s.pid, 0));
    s.assert_terminal_restored();
});

both!(follows_a_window_resize, |w: &World| {
    // os.write, not print: the handler may run while the first line is still being printed.
    let script = "import signal, os, sys\nsignal.signal(signal.SIGWINCH, lambda *a: os.write(1, f'size {os.get_terminal_size()}\\n'.encode()))\nos.write(1, f'start {os.get_terminal_size()}\\n'.encode())\nsys.stdin.readline()\n";
    let mut s = Session::start(w, &["/usr/bin/python3", "-c", script]);
    s.expect("columns=80, lines=24");
    let size = libc::winsize {
        ws_row: 40,
        ws_col: 132,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one winsize from a struct we own.
    assert!(unsafe { libc::ioctl(s.master.as_raw_fd(), libc::TIOCSWINSZ, &size) } == 0);
    s.expect("columns=132, lines=40");
    s.send(b"\r");
    assert_eq!(s.wait(), WaitStatus::Exited(s.pid, 0));
    s.assert_terminal_restored();
});

both!(ctrl_c_exits_130, |w: &World| {
    let mut s = Session::start(w, &["/bin/sh", "-c", "echo ready; exec sleep 100"]);
    s.expect("ready");
    std::thread::sleep(Duration::from_millis(100));
    s.send(b"\x03");
    assert_eq!(s.wait(), WaitStatus::Exited(s.pid, 130));
    s.assert_terminal_restored();
});

both!(ctrl_z_then_fg_resumes, |w: &World| {
    let script = "import sys\nprint('ready', flush=True)\nline = sys.stdin.readline()\nprint('after:' + line.strip(), flush=True)\n";
    let mut s = Session::start(w, &["/usr/bin/python3", "-c", script]);
    s.expect("ready");
    s.send(b"\x1a");
    // Like a shell, the test sees its job stop, with the terminal given back in cooked mode.
    match s.wait() {
        WaitStatus::Stopped(pid, _) if pid == s.pid => {}
        other => panic!(
            "expected stepproof-run to stop, got {other:?}; terminal {:?}",
            s.seen
        ),
    }
    s.assert_terminal_restored();
    // `fg`.
    kill(s.pid, Signal::SIGCONT).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    s.send(b"resumed\r");
    s.expect("after:resumed");
    assert_eq!(s.wait(), WaitStatus::Exited(s.pid, 0));
    s.assert_terminal_restored();
});
