//! Escape probes: each tries one forbidden thing and reports what the kernel answered. Run
//! inside the sandbox by `stepproof __probe NAME[:ARG]` (integration tests, `stepproof
//! selftest`), and on the host with and without a single layer by the control tests, which is
//! how a test proves which layer is the one acting.
//!
//! A probe runs in its own short-lived process: some leave traces in it (a new user namespace,
//! a changed personality is restored, fds and mounts are released).
//!
//! Also here: [`exec_under_layers`], the hidden entry point the benchmark and the selftest use
//! to run a command under Landlock + seccomp (+ limits) without namespaces.

use std::ffi::OsString;
use std::fs::OpenOptions;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::sandbox::landlock::{Assurance, FsAccess, LandlockPlan, LandlockRule, apply_landlock};
use crate::sandbox::rlimits::{Limits, apply_limits};
use crate::sandbox::seccomp::{
    Arch, NAMESPACE_FLAGS, TIOCLINUX, TIOCSTI, allow_all_filter, apply_seccomp_on_current_thread,
    compile_filters,
};
use crate::sys::probe as sys;

/// What a probe found. `escaped`: the kernel let the forbidden thing happen. `errno`: what it
/// answered otherwise. Neither (`escaped == false`, `errno == None`): the probe could not try
/// (a missing argument, no terminal); `detail` says why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeOutcome {
    pub name: String,
    pub escaped: bool,
    pub errno: Option<i32>,
    pub detail: String,
}

impl ProbeOutcome {
    /// Whether the probe reached the kernel (it either escaped or got an errno).
    pub fn attempted(&self) -> bool {
        self.escaped || self.errno.is_some()
    }
}

/// What a probe needs besides itself to mean something.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needs {
    /// Nothing: `NAME` alone.
    Nothing,
    /// `NAME:PID` of a sibling process to reach (ptrace, another's memory).
    Sibling,
    /// `NAME:1`: the sandbox's init (outside the command's Landlock domain).
    Init,
    /// A controlling terminal.
    Terminal,
    /// A peer to connect to (`NAME:ADDRESS`).
    Peer,
    /// `NAME:PATH`: a path to write or read.
    Path,
}

/// One escape probe: its name, what it needs, and what seccomp alone answers it with (`None`:
/// another layer stops it: a read-only mount, Landlock, the network namespace).
#[derive(Debug, Clone, Copy)]
pub struct Probe {
    pub name: &'static str,
    pub needs: Needs,
    pub seccomp_errno: Option<i32>,
}

const fn probe(name: &'static str, needs: Needs, seccomp_errno: Option<i32>) -> Probe {
    Probe {
        name,
        needs,
        seccomp_errno,
    }
}

const EPERM: Option<i32> = Some(libc::EPERM);
const ENOSYS: Option<i32> = Some(libc::ENOSYS);

/// Every escape probe: the one table the self-test, `stepproof __probe list` and the tests read.
pub const PROBES: &[Probe] = &[
    probe("ptrace", Needs::Sibling, EPERM),
    probe("process_vm_readv", Needs::Sibling, EPERM),
    probe("mount", Needs::Nothing, EPERM),
    probe("unshare_user", Needs::Nothing, EPERM),
    probe("clone_newuser", Needs::Nothing, EPERM),
    probe("clone3", Needs::Nothing, ENOSYS),
    probe("io_uring", Needs::Nothing, EPERM),
    probe("tiocsti", Needs::Terminal, EPERM),
    probe("tiocsti_high", Needs::Terminal, EPERM),
    probe("tioclinux", Needs::Terminal, EPERM),
    probe("bpf", Needs::Nothing, EPERM),
    probe("keyctl", Needs::Nothing, EPERM),
    probe("add_key", Needs::Nothing, EPERM),
    probe("userfaultfd", Needs::Nothing, EPERM),
    probe("perf_event_open", Needs::Nothing, EPERM),
    probe("name_to_handle_at", Needs::Nothing, EPERM),
    probe("open_by_handle_at", Needs::Nothing, EPERM),
    probe("mptcp", Needs::Nothing, EPERM),
    probe("vsock", Needs::Nothing, EPERM),
    probe("raw_socket", Needs::Nothing, EPERM),
    probe("packet_socket", Needs::Nothing, EPERM),
    probe("inet_sock_packet", Needs::Nothing, EPERM),
    probe("netlink_uevent", Needs::Nothing, EPERM),
    probe("personality", Needs::Nothing, EPERM),
    probe("setuid_chmod", Needs::Nothing, EPERM),
    probe("setuid_fchmod", Needs::Nothing, EPERM),
    probe("setuid_fchmodat", Needs::Nothing, EPERM),
    probe("setuid_fchmodat2", Needs::Nothing, EPERM),
    probe("setuid_open", Needs::Nothing, EPERM),
    probe("setuid_openat", Needs::Nothing, EPERM),
    probe("setuid_creat", Needs::Nothing, EPERM),
    probe("setuid_mknodat", Needs::Nothing, EPERM),
    probe("setuid_tmpfile", Needs::Nothing, EPERM),
    probe("setuid_openat2", Needs::Nothing, ENOSYS),
    probe("setgid_open", Needs::Nothing, EPERM),
    probe("proc_mem", Needs::Init, None),
    probe("kill", Needs::Init, None),
    probe("abstract_unix", Needs::Peer, None),
    probe("tcp_connect", Needs::Peer, None),
    probe("write", Needs::Path, None),
    probe("read", Needs::Path, None),
];

/// The escape probes' names, each run as `NAME` or `NAME:ARG` (see [`run_probe`]).
pub fn all_probes() -> impl Iterator<Item = &'static str> {
    PROBES.iter().map(|p| p.name)
}

/// The probes seccomp refuses by itself, with the errno it answers.
pub fn seccomp_refused() -> impl Iterator<Item = &'static Probe> {
    PROBES.iter().filter(|p| p.seccomp_errno.is_some())
}

/// Ordinary things the layers must leave working: `escaped == true` is the expected result.
pub fn control_probes() -> &'static [&'static str] {
    &[
        "netlink_route",
        "tcp_socket",
        "unix_socket",
        "personality_query",
        "fork",
        "tcgets",
        "setgid_dir",
    ]
}

fn errno_text(e: i32) -> String {
    io::Error::from_raw_os_error(e).to_string()
}

fn from_answer(name: &str, what: &str, ans: sys::Answer) -> ProbeOutcome {
    match ans {
        Ok(v) => ProbeOutcome {
            name: name.to_string(),
            escaped: true,
            errno: None,
            detail: format!("{what} = {v}"),
        },
        Err(e) => ProbeOutcome {
            name: name.to_string(),
            escaped: false,
            errno: Some(e),
            detail: format!("{what} failed: {}", errno_text(e)),
        },
    }
}

fn from_io(name: &str, what: &str, r: io::Result<String>) -> ProbeOutcome {
    match r {
        Ok(v) => ProbeOutcome {
            name: name.to_string(),
            escaped: true,
            errno: None,
            detail: format!("{what}: {v}"),
        },
        Err(e) => ProbeOutcome {
            name: name.to_string(),
            escaped: false,
            errno: e.raw_os_error(),
            detail: format!("{what} failed: {e}"),
        },
    }
}

fn not_attempted(name: &str, why: String) -> ProbeOutcome {
    ProbeOutcome {
        name: name.to_string(),
        escaped: false,
        errno: None,
        detail: format!("not attempted: {why}"),
    }
}

fn parent_pid() -> i32 {
    nix::unistd::getppid().as_raw()
}

fn pid_arg(arg: Option<&str>) -> Result<i32, String> {
    match arg {
        None => Ok(parent_pid()),
        Some(a) => a.parse().map_err(|_| format!("bad pid {a:?}")),
    }
}

/// A terminal fd: the given device, else stdin when it is a terminal, else `/dev/tty`.
fn terminal(arg: Option<&str>) -> Result<(std::fs::File, String), String> {
    use std::os::fd::AsFd;
    let path = match arg {
        Some(p) => p.to_string(),
        None if nix::unistd::isatty(io::stdin()).unwrap_or(false) => {
            let fd = io::stdin()
                .as_fd()
                .try_clone_to_owned()
                .map_err(|e| format!("dup stdin: {e}"))?;
            return Ok((std::fs::File::from(fd), "stdin".into()));
        }
        None => "/dev/tty".into(),
    };
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map(|f| (f, path.clone()))
        .map_err(|e| format!("no terminal ({path}: {e})"))
}

/// Runs one probe, `NAME` or `NAME:ARG`:
///
/// | name | tries | arg |
/// | --- | --- | --- |
/// | `ptrace` | `PTRACE_SEIZE` a process | pid (default: parent) |
/// | `process_vm_readv` | read 1 byte of a process's memory | pid (default: parent) |
/// | `mount` | mount a tmpfs (unmounted at once) | directory (default: a new temp dir) |
/// | `unshare_user` | `unshare(CLONE_NEWUSER)` | |
/// | `clone_newuser` | `clone(CLONE_NEWUSER)` | |
/// | `clone3` | `clone3(CLONE_NEWUSER)` (seccomp answers ENOSYS) | |
/// | `io_uring` | `io_uring_setup` | |
/// | `tiocsti`, `tiocsti_high`, `tioclinux` | push a newline into a terminal (high-bit cmd) | tty path (default: stdin if a tty, else /dev/tty) |
/// | `bpf` | create a BPF array map | |
/// | `keyctl` | read the session keyring id | |
/// | `add_key` | add a key to the process keyring | |
/// | `userfaultfd` | `userfaultfd()` | |
/// | `perf_event_open` | software CPU clock on itself | |
/// | `name_to_handle_at` | file handle of a path | path (default `/`) |
/// | `open_by_handle_at` | open `/` by handle | |
/// | `mptcp`, `vsock`, `raw_socket`, `packet_socket`, `inet_sock_packet`, `netlink_uevent` | create such a socket | |
/// | `personality` | set ADDR_NO_RANDOMIZE (restored) | |
/// | `setuid_chmod`, `setuid_fchmod`, `setuid_fchmodat`, `setuid_fchmodat2` | give a new file mode 04755 | directory (default: a new temp dir) |
/// | `setuid_open`, `setuid_openat`, `setuid_creat`, `setuid_mknodat`, `setuid_openat2` | create a file with mode 04755 (openat2: seccomp answers ENOSYS) | directory (default: a new temp dir) |
/// | `setuid_tmpfile` | `openat(O_TMPFILE)` with mode 04755 | directory (default: a new temp dir) |
/// | `setgid_open` | `openat(O_CREAT)` with mode 02755 | directory (default: a new temp dir) |
/// | `proc_mem` | open `/proc/PID/mem` for writing (writes 0 bytes) | pid (default: parent) |
/// | `kill` | `kill(pid, 0)` (Landlock signal scope) | pid (required) |
/// | `abstract_unix` | connect to abstract socket `@NAME` | name (required) |
/// | `tcp_connect` | connect to 127.0.0.1:PORT (Landlock TCP rules) | port (required) |
/// | `write`, `read` | create+write / read a file | path (required) |
///
/// The setuid/setgid probes escape only when the file really carries the bit afterwards (a
/// call that returns 0 without it proves nothing either way); their files are removed.
///
/// Controls (expected to work): `netlink_route`, `tcp_socket`, `unix_socket`,
/// `personality_query`, `fork`, `tcgets[:TTY]`, `setgid_dir[:DIR]` (mkdir, then chmod 02775:
/// shared group directories).
pub fn run_probe(spec: &str) -> ProbeOutcome {
    let (name, arg) = match spec.split_once(':') {
        Some((n, a)) => (n, Some(a)),
        None => (spec, None),
    };
    let n = spec;
    match name {
        "ptrace" => match pid_arg(arg) {
            Ok(pid) => from_answer(n, &format!("ptrace(PTRACE_SEIZE, {pid})"), {
                sys::ptrace_seize(pid)
            }),
            Err(e) => not_attempted(n, e),
        },
        "process_vm_readv" => match pid_arg(arg) {
            Ok(pid) => {
                let r = nix::sys::uio::process_vm_readv(
                    nix::unistd::Pid::from_raw(pid),
                    &mut [io::IoSliceMut::new(&mut [0u8; 1])],
                    &[nix::sys::uio::RemoteIoVec { base: 1, len: 1 }],
                );
                // Address 1 is never mapped: EFAULT means the call itself was allowed.
                match r {
                    Err(nix::errno::Errno::EFAULT) | Ok(_) => ProbeOutcome {
                        name: n.into(),
                        escaped: true,
                        errno: None,
                        detail: format!("process_vm_readv({pid}) reached the target's memory"),
                    },
                    Err(e) => from_answer(n, "process_vm_readv", Err(e as i32)),
                }
            }
            Err(e) => not_attempted(n, e),
        },
        "mount" => {
            let (dir, cleanup) = match arg {
                Some(d) => (PathBuf::from(d), false),
                None => match tempfile::Builder::new()
                    .prefix("stepproof-probe-mnt")
                    .tempdir()
                {
                    Ok(d) => (d.keep(), true),
                    Err(e) => return not_attempted(n, format!("temp dir: {e}")),
                },
            };
            let out = from_answer(
                n,
                &format!("mount tmpfs on {}", dir.display()),
                sys::mount_tmpfs(&dir.to_string_lossy()),
            );
            if cleanup {
                let _ = std::fs::remove_dir(&dir);
            }
            out
        }
        "unshare_user" => from_answer(
            n,
            "unshare(CLONE_NEWUSER)",
            sys::unshare(libc::CLONE_NEWUSER),
        ),
        "clone_newuser" => from_answer(
            n,
            "clone(CLONE_NEWUSER)",
            sys::clone_flags(NAMESPACE_FLAGS[5].0),
        ),
        "clone3" => from_answer(
            n,
            "clone3(CLONE_NEWUSER)",
            sys::clone3(NAMESPACE_FLAGS[5].0),
        ),
        "io_uring" => from_answer(n, "io_uring_setup(1)", sys::io_uring_setup()),
        "tiocsti" | "tiocsti_high" | "tioclinux" => match terminal(arg) {
            Ok((tty, which)) => {
                let cmd = match name {
                    "tiocsti" => TIOCSTI,
                    "tiocsti_high" => TIOCSTI | 0x1_0000_0000,
                    _ => TIOCLINUX,
                };
                from_answer(
                    n,
                    &format!("ioctl({which}, {cmd:#x})"),
                    sys::ioctl_push_char(tty.as_raw_fd(), cmd),
                )
            }
            Err(e) => not_attempted(n, e),
        },
        "tcgets" => match terminal(arg) {
            Ok((tty, which)) => from_answer(
                n,
                &format!("tcgetattr({which})"),
                nix::sys::termios::tcgetattr(&tty)
                    .map(|_| 0)
                    .map_err(|e| e as i32),
            ),
            Err(e) => not_attempted(n, e),
        },
        "bpf" => from_answer(n, "bpf(BPF_MAP_CREATE)", sys::bpf_map_create()),
        "keyctl" => from_answer(
            n,
            "keyctl(KEYCTL_GET_KEYRING_ID)",
            sys::keyctl_session_keyring(),
        ),
        "add_key" => from_answer(n, "add_key(user)", sys::add_key_process()),
        "userfaultfd" => from_answer(n, "userfaultfd()", sys::userfaultfd()),
        "perf_event_open" => from_answer(n, "perf_event_open(sw clock)", {
            sys::perf_event_open_self()
        }),
        "name_to_handle_at" => {
            let path = arg.unwrap_or("/");
            from_answer(
                n,
                &format!("name_to_handle_at({path})"),
                sys::name_to_handle(path).map(|_| 0),
            )
        }
        "open_by_handle_at" => {
            // A real handle when name_to_handle_at works (host control), else a made-up one:
            // the kernel still has to look at it, so the answer is not the filter's.
            let mut handle = sys::name_to_handle("/").unwrap_or_else(|_| {
                let mut h = vec![0u8; 16];
                h[0..4].copy_from_slice(&8u32.to_ne_bytes());
                h[4..8].copy_from_slice(&1i32.to_ne_bytes());
                h
            });
            from_answer(n, "open_by_handle_at(/)", sys::open_by_handle(&mut handle))
        }
        "mptcp" => from_answer(
            n,
            "socket(AF_INET, SOCK_STREAM, IPPROTO_MPTCP)",
            sys::socket(libc::AF_INET, libc::SOCK_STREAM, 262),
        ),
        "vsock" => from_answer(
            n,
            "socket(AF_VSOCK, SOCK_STREAM)",
            sys::socket(libc::AF_VSOCK, libc::SOCK_STREAM, 0),
        ),
        "raw_socket" => from_answer(
            n,
            "socket(AF_INET, SOCK_RAW|SOCK_CLOEXEC, IPPROTO_ICMP)",
            sys::socket(
                libc::AF_INET,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::IPPROTO_ICMP,
            ),
        ),
        "packet_socket" => from_answer(
            n,
            "socket(AF_PACKET, SOCK_RAW, ETH_P_ALL)",
            sys::socket(libc::AF_PACKET, libc::SOCK_RAW, 0x0300),
        ),
        "inet_sock_packet" => from_answer(
            n,
            "socket(AF_INET, SOCK_PACKET, ETH_P_ALL)",
            sys::socket(libc::AF_INET, 10 /* SOCK_PACKET */, 0x0300),
        ),
        "netlink_uevent" => from_answer(
            n,
            "socket(AF_NETLINK, SOCK_RAW, NETLINK_KOBJECT_UEVENT)",
            sys::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW,
                libc::NETLINK_KOBJECT_UEVENT,
            ),
        ),
        "netlink_route" => from_answer(
            n,
            "socket(AF_NETLINK, SOCK_RAW|SOCK_CLOEXEC, NETLINK_ROUTE)",
            sys::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_ROUTE,
            ),
        ),
        "tcp_socket" => from_answer(
            n,
            "socket(AF_INET6, SOCK_STREAM)",
            sys::socket(libc::AF_INET6, libc::SOCK_STREAM, 0),
        ),
        "unix_socket" => from_answer(
            n,
            "socket(AF_UNIX, SOCK_DGRAM)",
            sys::socket(libc::AF_UNIX, libc::SOCK_DGRAM, 0),
        ),
        "personality" => {
            let out = from_answer(
                n,
                "personality(ADDR_NO_RANDOMIZE)",
                sys::personality(0x0004_0000),
            );
            if let Ok(old) = sys::personality(0xffff_ffff)
                && old != 0
            {
                let _ = sys::personality(0);
            }
            out
        }
        "setuid_chmod" | "setuid_fchmod" | "setuid_fchmodat" | "setuid_fchmodat2"
        | "setuid_open" | "setuid_openat" | "setuid_creat" | "setuid_mknodat"
        | "setuid_tmpfile" | "setuid_openat2" | "setgid_open" | "setgid_dir" => {
            match Scratch::new(arg) {
                Ok(scratch) => setid_probe(n, name, &scratch),
                Err(e) => not_attempted(n, e),
            }
        }
        "personality_query" => {
            from_answer(n, "personality(0xffffffff)", sys::personality(0xffff_ffff))
        }
        "fork" => from_answer(n, "clone(SIGCHLD)", sys::clone_flags(0)),
        "proc_mem" => match pid_arg(arg) {
            Ok(pid) => {
                let path = format!("/proc/{pid}/mem");
                let r = OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .and_then(|mut f| {
                        f.write_all(&[])?;
                        Ok(format!("{path} opened for writing"))
                    });
                from_io(n, &format!("open({path}, O_WRONLY)"), r)
            }
            Err(e) => not_attempted(n, e),
        },
        "kill" => match arg.map(str::parse::<i32>) {
            Some(Ok(pid)) => from_answer(
                n,
                &format!("kill({pid}, 0)"),
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None)
                    .map(|_| 0)
                    .map_err(|e| e as i32),
            ),
            _ => not_attempted(n, "kill needs a pid: kill:PID".into()),
        },
        "abstract_unix" => match arg {
            Some(sock) => {
                let r = SocketAddr::from_abstract_name(sock.as_bytes())
                    .and_then(|addr| UnixStream::connect_addr(&addr))
                    .map(|_| format!("connected to @{sock}"));
                from_io(n, &format!("connect(@{sock})"), r)
            }
            None => not_attempted(n, "abstract_unix needs a name: abstract_unix:NAME".into()),
        },
        "tcp_connect" => match arg.map(str::parse::<u16>) {
            Some(Ok(port)) => {
                let r = std::net::TcpStream::connect(("127.0.0.1", port))
                    .map(|_| format!("connected to 127.0.0.1:{port}"));
                from_io(n, &format!("connect(127.0.0.1:{port})"), r)
            }
            _ => not_attempted(n, "tcp_connect needs a port: tcp_connect:PORT".into()),
        },
        "write" => match arg {
            Some(path) => {
                let r = OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .open(path)
                    .and_then(|mut f| f.write_all(b"stepproof probe\n"))
                    .map(|_| format!("wrote {path}"));
                from_io(n, &format!("write {path}"), r)
            }
            None => not_attempted(n, "write needs a path: write:PATH".into()),
        },
        "read" => match arg {
            Some(path) => {
                let r = std::fs::File::open(path).and_then(|mut f| {
                    let mut buf = [0u8; 64];
                    let got = f.read(&mut buf)?;
                    Ok(format!("read {got} bytes of {path}"))
                });
                from_io(n, &format!("read {path}"), r)
            }
            None => not_attempted(n, "read needs a path: read:PATH".into()),
        },
        _ => not_attempted(n, format!("unknown probe {name:?}")),
    }
}

const SETID_BITS: u32 = libc::S_ISUID | libc::S_ISGID;

/// Where a setuid/setgid probe makes its file: the given directory, or a new temp dir that is
/// removed with everything in it.
struct Scratch {
    dir: PathBuf,
    remove: bool,
}

impl Scratch {
    fn new(arg: Option<&str>) -> Result<Scratch, String> {
        match arg {
            Some(d) => Ok(Scratch {
                dir: PathBuf::from(d),
                remove: false,
            }),
            None => tempfile::Builder::new()
                .prefix("stepproof-probe-setid")
                .tempdir()
                .map(|d| Scratch {
                    dir: d.keep(),
                    remove: true,
                })
                .map_err(|e| format!("temp dir: {e}")),
        }
    }

    /// A name of its own in the directory (two probes may share a directory).
    fn path(&self, probe: &str) -> PathBuf {
        self.dir
            .join(format!("stepproof-{probe}-{}", std::process::id()))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if self.remove {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Tries one way of making a setuid (or setgid) file and removes what it made. Escaped: the
/// file has the bit afterwards, whatever the call answered.
fn setid_probe(n: &str, name: &str, scratch: &Scratch) -> ProbeOutcome {
    use std::os::unix::fs::MetadataExt;
    let path = scratch.path(name);
    let Ok(cpath) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else {
        return not_attempted(n, format!("a NUL in {}", path.display()));
    };
    let create = libc::O_CREAT | libc::O_WRONLY | libc::O_EXCL | libc::O_CLOEXEC;
    // An ordinary file for the calls that change the mode of an existing one.
    let existing = if name.contains("chmod") {
        match std::fs::File::create(&path) {
            Ok(f) => Some(f),
            Err(e) => return not_attempted(n, format!("creating {}: {e}", path.display())),
        }
    } else {
        None
    };
    fn fstat_mode(fd: impl std::os::fd::AsFd) -> Result<u32, i32> {
        nix::sys::stat::fstat(fd)
            .map(|st| st.st_mode)
            .map_err(|e| e as i32)
    }
    // (what was tried, its answer, the file's mode afterwards if one was read from an fd)
    let (what, answer, fd_mode): (String, sys::Answer, Option<Result<u32, i32>>) = match name {
        "setuid_chmod" => ("chmod(f, 04755)".into(), sys::chmod(&cpath, 0o4755), None),
        "setuid_fchmod" => (
            "fchmod(fd, 04755)".into(),
            sys::fchmod(existing.as_ref().map_or(-1, |f| f.as_raw_fd()), 0o4755),
            existing.as_ref().map(fstat_mode),
        ),
        "setuid_fchmodat" => (
            "fchmodat(AT_FDCWD, f, 04755)".into(),
            sys::fchmodat(&cpath, 0o4755),
            None,
        ),
        "setuid_fchmodat2" => (
            "fchmodat2(AT_FDCWD, f, 04755, AT_SYMLINK_NOFOLLOW)".into(),
            sys::fchmodat2(&cpath, 0o4755, libc::AT_SYMLINK_NOFOLLOW),
            None,
        ),
        "setuid_open" => (
            "open(f, O_CREAT|O_WRONLY|O_EXCL, 04755)".into(),
            sys::open(&cpath, create, 0o4755),
            None,
        ),
        "setuid_openat" | "setgid_open" => {
            let mode = if name == "setgid_open" {
                0o2755
            } else {
                0o4755
            };
            match sys::openat(&cpath, create, mode) {
                Ok(fd) => (
                    format!("openat(AT_FDCWD, f, O_CREAT|O_WRONLY|O_EXCL, 0{mode:o})"),
                    Ok(fd.as_raw_fd().into()),
                    Some(fstat_mode(&fd)),
                ),
                Err(e) => (
                    format!("openat(AT_FDCWD, f, O_CREAT|O_WRONLY|O_EXCL, 0{mode:o})"),
                    Err(e),
                    None,
                ),
            }
        }
        "setuid_creat" => ("creat(f, 04755)".into(), sys::creat(&cpath, 0o4755), None),
        "setuid_mknodat" => (
            "mknodat(AT_FDCWD, f, S_IFREG|04755)".into(),
            sys::mknodat(&cpath, libc::S_IFREG | 0o4755),
            None,
        ),
        "setuid_tmpfile" => {
            let what = format!("openat({}, O_TMPFILE|O_RDWR, 04755)", scratch.dir.display());
            let Ok(cdir) = std::ffi::CString::new(scratch.dir.as_os_str().as_encoded_bytes())
            else {
                return not_attempted(n, format!("a NUL in {}", scratch.dir.display()));
            };
            match sys::openat(
                &cdir,
                libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC,
                0o4755,
            ) {
                Ok(fd) => (what, Ok(fd.as_raw_fd().into()), Some(fstat_mode(&fd))),
                Err(e) => (what, Err(e), None),
            }
        }
        "setuid_openat2" => (
            "openat2(AT_FDCWD, f, {O_CREAT|O_WRONLY|O_EXCL, 04755})".into(),
            sys::openat2(&cpath, create as u64, 0o4755),
            None,
        ),
        "setgid_dir" => (
            "mkdir(d), chmod(d, 02775)".into(),
            std::fs::create_dir(&path)
                .map_err(|e| e.raw_os_error().unwrap_or(0))
                .and_then(|_| sys::chmod(&cpath, 0o2775)),
            None,
        ),
        _ => return not_attempted(n, format!("unknown probe {name:?}")),
    };
    let mode = fd_mode.unwrap_or_else(|| {
        std::fs::symlink_metadata(&path)
            .map(|m| m.mode())
            .map_err(|e| e.raw_os_error().unwrap_or(0))
    });
    if name == "setgid_dir" {
        let _ = std::fs::remove_dir(&path);
    } else {
        let _ = std::fs::remove_file(&path);
    }
    match (mode, answer) {
        (Ok(m), _) if m & SETID_BITS != 0 => ProbeOutcome {
            name: n.to_string(),
            escaped: true,
            errno: None,
            detail: format!("{what}: the result has mode 0{:o}", m & 0o7777),
        },
        (_, Err(e)) => ProbeOutcome {
            name: n.to_string(),
            escaped: false,
            errno: Some(e),
            detail: format!("{what} failed: {}", errno_text(e)),
        },
        (m, Ok(_)) => ProbeOutcome {
            name: n.to_string(),
            escaped: false,
            errno: None,
            detail: format!(
                "{what} returned success but the file has no setuid/setgid bit ({})",
                match m {
                    Ok(m) => format!("mode 0{:o}", m & 0o7777),
                    Err(e) => format!("stat: {}", errno_text(e)),
                }
            ),
        },
    }
}

/// The layers [`exec_under_layers`] installs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LayerSet {
    /// The benchmark's physical floor: an allow-all seccomp filter and the Landlock ruleset of
    /// [`floor_plan`] (read on `/`, everything on the workspace, `/dev/null`).
    Floor,
    /// The real thing minus namespaces: [`typical_plan`] + the full seccomp table + limits.
    Full,
}

/// A Landlock plan like the one the sandbox uses (a read-only system, a writable workspace and
/// /tmp, terminals and the usual devices), for the benchmark and the selftest.
pub fn typical_plan(workspace: &Path) -> LandlockPlan {
    let mut rules = Vec::new();
    for p in [
        "/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/etc", "/opt", "/proc",
    ] {
        rules.push(LandlockRule {
            path: p.into(),
            access: FsAccess::ReadExecute,
        });
    }
    if let Some(home) = std::env::var_os("HOME") {
        rules.push(LandlockRule {
            path: home.into(),
            access: FsAccess::ReadExecute,
        });
    }
    for p in [workspace, Path::new("/tmp"), Path::new("/dev/shm")] {
        rules.push(LandlockRule {
            path: p.to_path_buf(),
            access: FsAccess::ReadWrite,
        });
    }
    let devices = crate::sandbox::plan::DEVICE_NODES
        .iter()
        .map(|n| format!("/dev/{n}"))
        .chain(["/dev/ptmx".to_string(), "/dev/pts".to_string()]);
    for p in devices {
        rules.push(LandlockRule {
            path: p.into(),
            access: FsAccess::Device,
        });
    }
    LandlockPlan {
        rules,
        scope_signals_and_abstract_unix: true,
        tcp: None,
        assurance: Assurance::Strict,
    }
}

/// The Landlock plan of the physical floor: read on `/`, everything on the workspace (the
/// issue's two rules), plus `/dev/null` as a device, which git opens read-write at start (a rule
/// on a path of its own does not change the cost of opening anything else).
pub fn floor_plan(workspace: &Path) -> LandlockPlan {
    LandlockPlan {
        rules: vec![
            LandlockRule {
                path: "/dev/null".into(),
                access: FsAccess::Device,
            },
            LandlockRule {
                path: "/".into(),
                access: FsAccess::ReadExecute,
            },
            LandlockRule {
                path: workspace.to_path_buf(),
                access: FsAccess::ReadWrite,
            },
        ],
        scope_signals_and_abstract_unix: false,
        tcp: None,
        assurance: Assurance::BestEffort,
    }
}

/// Installs `layers` on the current process and `execve`s `argv` (searched in `PATH`). Returns
/// only on failure. Wire it as a hidden subcommand, e.g. `stepproof __layers floor|full
/// WORKSPACE -- CMD…`; `scripts/bench-syscalls.sh` uses it. The process must be single-threaded
/// (Landlock and seccomp restrict the calling thread only).
pub fn exec_under_layers(layers: LayerSet, workspace: &Path, argv: &[OsString]) -> io::Error {
    let Some((program, args)) = argv.split_first() else {
        return io::Error::new(io::ErrorKind::InvalidInput, "no command");
    };
    let result = (|| -> Result<(), Box<dyn std::error::Error>> {
        match layers {
            LayerSet::Floor => {
                apply_landlock(&floor_plan(workspace))?;
                apply_seccomp_on_current_thread(&[allow_all_filter()])?;
            }
            LayerSet::Full => {
                let filters = compile_filters(Arch::native())?;
                apply_limits(&Limits::default())?;
                apply_landlock(&typical_plan(workspace))?;
                apply_seccomp_on_current_thread(&filters)?;
            }
        }
        Ok(())
    })();
    if let Err(e) = result {
        return io::Error::other(e.to_string());
    }
    std::process::Command::new(program).args(args).exec()
}
