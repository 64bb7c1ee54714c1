//! The one place where StepProof talks to the kernel through raw, unsafe calls.
//!
//! Everything here is a thin, documented wrapper that returns `io::Result` and owns its file
//! descriptors at once; the rest of the crate is `#![deny(unsafe_code)]`.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

pub mod beneath;
pub mod kernel;
pub mod probe;
pub mod seed;

fn cstring(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

fn check(ret: libc::c_long) -> io::Result<libc::c_long> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// What `clone_with_namespaces` returned on each side.
pub enum CloneResult {
    Parent { child: libc::pid_t },
    Child,
}

/// `clone(2)` with fork semantics (the child runs on a copy of the caller's stack) and the
/// given namespace flags. The caller must be single-threaded: like `fork`, only the calling
/// thread exists in the child.
pub fn clone_with_namespaces(flags: libc::c_int) -> io::Result<CloneResult> {
    let flags = flags as libc::c_ulong | libc::SIGCHLD as libc::c_ulong;
    // SAFETY: raw clone with a NULL stack behaves like fork(2): the child continues on a
    // copy-on-write copy of this stack. No pointers are passed for tid/tls (the flags do not ask
    // for them). The caller guarantees the process is single-threaded at this point.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone,
            flags,
            std::ptr::null_mut::<libc::c_void>(),
            std::ptr::null_mut::<libc::c_int>(),
            std::ptr::null_mut::<libc::c_int>(),
            0 as libc::c_ulong,
        )
    };
    match check(ret)? {
        0 => Ok(CloneResult::Child),
        pid => Ok(CloneResult::Parent {
            child: pid as libc::pid_t,
        }),
    }
}

/// Plain `fork(2)`. Same single-thread rule as above.
pub fn fork() -> io::Result<CloneResult> {
    clone_with_namespaces(0)
}

/// Starts a child that shares this process's memory and runs `child` until it calls `execve`
/// or exits, while this thread waits (`CLONE_VM | CLONE_VFORK`, as `posix_spawn` does): no
/// page tables are copied and no copy-on-write faults follow, which a fork of the init would
/// cost on every launch. Returns the child's pid once it has exec'd or exited.
///
/// Contract for `child`, which runs on its own stack in this process's memory: it must not
/// drop or move out anything this process owns (capture references and plain numbers only);
/// allocating is fine (this thread is suspended meanwhile, so the allocator's state stays
/// consistent). It must end in `execve` or `_exit`; its return value becomes the exit code.
/// This process must be single-threaded.
pub fn spawn_sharing_memory<F: FnOnce() -> i32>(child: F) -> io::Result<libc::pid_t> {
    const STACK: usize = 1024 * 1024;
    extern "C" fn trampoline<F: FnOnce() -> i32>(arg: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `arg` is the `Option<F>` below, in the memory we share with the suspended
        // parent, alive until the parent resumes.
        let slot = unsafe { &mut *(arg as *mut Option<F>) };
        let code = slot.take().map_or(127, |f| f());
        // SAFETY: _exit runs no destructors and no atexit handlers (which would touch the
        // parent's state).
        unsafe { libc::_exit(code) }
    }
    let mut stack = vec![0u8; STACK].into_boxed_slice();
    // The stack grows down on every architecture we build for; align the top to 16 bytes.
    let top = (stack.as_mut_ptr() as usize + STACK) & !0xf;
    let mut slot = Some(child);
    // SAFETY: the child runs `trampoline` on `stack`, which outlives it (this thread is
    // suspended until the child has exec'd or exited, and only then is the stack freed); the
    // argument points to `slot`, alive for as long. The closure's contract is documented above.
    let pid = unsafe {
        libc::clone(
            trampoline::<F>,
            top as *mut libc::c_void,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (&mut slot as *mut Option<F>).cast(),
        )
    };
    drop(stack);
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(pid)
}

/// `pivot_root(2)`: libc has no wrapper.
pub fn pivot_root(new_root: &Path, put_old: &Path) -> io::Result<()> {
    let new_root = cstring(new_root)?;
    let put_old = cstring(put_old)?;
    // SAFETY: both arguments are valid NUL-terminated strings that outlive the call.
    let ret = unsafe { libc::syscall(libc::SYS_pivot_root, new_root.as_ptr(), put_old.as_ptr()) };
    check(ret).map(drop)
}

const MOUNT_ATTR_RDONLY: u64 = 0x0000_0001;
const MOUNT_ATTR_NOSUID: u64 = 0x0000_0002;
const MOUNT_ATTR_NODEV: u64 = 0x0000_0004;
const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// Mount attributes to add to a mount (and, with `recursive`, to every mount below it).
#[derive(Debug, Clone, Copy, Default)]
pub struct MountFlags {
    pub read_only: bool,
    pub nosuid: bool,
    pub nodev: bool,
}

impl MountFlags {
    fn bits(self) -> u64 {
        let mut bits = 0;
        if self.read_only {
            bits |= MOUNT_ATTR_RDONLY;
        }
        if self.nosuid {
            bits |= MOUNT_ATTR_NOSUID;
        }
        if self.nodev {
            bits |= MOUNT_ATTR_NODEV;
        }
        bits
    }
}

fn mount_setattr_raw(
    dirfd: RawFd,
    path: &CString,
    at_flags: libc::c_uint,
    attr: &MountAttr,
) -> io::Result<()> {
    // SAFETY: `path` is NUL-terminated and `attr` points to a properly laid out `mount_attr`
    // whose size is passed alongside; both outlive the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            dirfd,
            path.as_ptr(),
            at_flags,
            attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    check(ret).map(drop)
}

/// `mount_setattr(2)` on a path: only adds restrictions, never clears the locked flags a
/// less privileged mount namespace inherited (the reason this is used instead of a remount).
pub fn mount_setattr(path: &Path, recursive: bool, flags: MountFlags) -> io::Result<()> {
    let path = cstring(path)?;
    let at = if recursive {
        libc::AT_RECURSIVE as libc::c_uint
    } else {
        0
    };
    let attr = MountAttr {
        attr_set: flags.bits(),
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    mount_setattr_raw(
        libc::AT_FDCWD,
        &path,
        at | libc::AT_SYMLINK_NOFOLLOW as libc::c_uint,
        &attr,
    )
}

/// A detached, recursive copy of the mount tree at `path` (`open_tree(OPEN_TREE_CLONE)`),
/// ready to be given an id mapping and moved elsewhere.
pub fn open_tree_clone(path: &Path) -> io::Result<OwnedFd> {
    let path = cstring(path)?;
    const OPEN_TREE_CLONE: libc::c_uint = 1;
    let flags =
        OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint | libc::AT_RECURSIVE as libc::c_uint;
    // SAFETY: `path` is NUL-terminated; the returned descriptor is owned at once below.
    let ret = unsafe { libc::syscall(libc::SYS_open_tree, libc::AT_FDCWD, path.as_ptr(), flags) };
    let fd = check(ret)? as RawFd;
    // SAFETY: the kernel just returned this descriptor to us and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Gives a detached mount tree the id mapping of the user namespace `userns` (plus `flags`).
pub fn idmap_detached_tree(tree: &OwnedFd, userns: &OwnedFd, flags: MountFlags) -> io::Result<()> {
    let empty = CString::default();
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_IDMAP | flags.bits(),
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns.as_raw_fd() as u64,
    };
    let at = (libc::AT_EMPTY_PATH | libc::AT_RECURSIVE) as libc::c_uint;
    mount_setattr_raw(tree.as_raw_fd(), &empty, at, &attr)
}

/// Attaches a detached mount tree at `target` (`move_mount(MOVE_MOUNT_F_EMPTY_PATH)`).
pub fn move_mount_to(tree: &OwnedFd, target: &Path) -> io::Result<()> {
    let target = cstring(target)?;
    let empty = CString::default();
    const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x0000_0004;
    // SAFETY: both strings are NUL-terminated and outlive the call; the descriptor is open.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_FDCWD,
            target.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    check(ret).map(drop)
}

/// Joins a fresh, anonymous session keyring so that no key of the caller's is reachable.
pub fn join_new_session_keyring() -> io::Result<()> {
    const KEYCTL_JOIN_SESSION_KEYRING: libc::c_long = 1;
    // SAFETY: a NULL name asks for a new anonymous keyring; no memory is handed over.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_keyctl,
            KEYCTL_JOIN_SESSION_KEYRING,
            std::ptr::null::<libc::c_char>(),
        )
    };
    check(ret).map(drop)
}

/// `prctl(PR_SET_PDEATHSIG, sig)`.
pub fn set_parent_death_signal(sig: libc::c_int) -> io::Result<()> {
    // SAFETY: plain integer arguments.
    let ret = unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, sig as libc::c_ulong, 0, 0, 0) };
    check(ret as libc::c_long).map(drop)
}

/// `prctl(PR_SET_DUMPABLE, 0)`: no ptrace, no /proc/<pid>/mem or environ for others.
pub fn set_not_dumpable() -> io::Result<()> {
    // SAFETY: plain integer arguments.
    let ret = unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0 as libc::c_ulong, 0, 0, 0) };
    check(ret as libc::c_long).map(drop)
}

/// `prctl(PR_SET_NO_NEW_PRIVS, 1)`.
pub fn set_no_new_privs() -> io::Result<()> {
    // SAFETY: plain integer arguments.
    let ret = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1 as libc::c_ulong, 0, 0, 0) };
    check(ret as libc::c_long).map(drop)
}

/// `setgroups(0, NULL)`: drops every supplementary group.
pub fn clear_supplementary_groups() -> io::Result<()> {
    // SAFETY: a zero-length list with a NULL pointer is the documented way to clear the groups.
    let ret = unsafe { libc::setgroups(0, std::ptr::null()) };
    check(ret as libc::c_long).map(drop)
}

/// `ioctl(fd, TIOCSCTTY, 0)`: makes the terminal on `fd` our controlling terminal.
pub fn set_controlling_terminal(fd: RawFd) -> io::Result<()> {
    // SAFETY: TIOCSCTTY takes an integer argument; the descriptor is a terminal we hold.
    let ret = unsafe { libc::ioctl(fd, libc::TIOCSCTTY, 0) };
    check(ret as libc::c_long).map(drop)
}

/// Reads a terminal's window size.
pub fn get_window_size(fd: RawFd) -> io::Result<libc::winsize> {
    let mut ws = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one `winsize` into the struct we own.
    let ret = unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) };
    check(ret as libc::c_long).map(|_| ws)
}

/// Sets a terminal's window size (the kernel then signals SIGWINCH to its foreground group).
pub fn set_window_size(fd: RawFd, ws: &libc::winsize) -> io::Result<()> {
    // SAFETY: TIOCSWINSZ reads one `winsize` from the struct we pass.
    let ret = unsafe { libc::ioctl(fd, libc::TIOCSWINSZ, ws as *const libc::winsize) };
    check(ret as libc::c_long).map(drop)
}

/// `execve(2)`. Returns only on failure.
pub fn execve(path: &CString, argv: &[CString], envp: &[CString]) -> io::Error {
    let mut argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argv_ptrs.push(std::ptr::null());
    let mut envp_ptrs: Vec<*const libc::c_char> = envp.iter().map(|e| e.as_ptr()).collect();
    envp_ptrs.push(std::ptr::null());
    // SAFETY: every pointer points into a CString that outlives the call, and both arrays are
    // NULL-terminated as execve requires.
    unsafe { libc::execve(path.as_ptr(), argv_ptrs.as_ptr(), envp_ptrs.as_ptr()) };
    io::Error::last_os_error()
}

/// Exits at once without running atexit handlers or destructors: the right way out of a forked
/// child whose copied state (buffers, locks) belongs to the parent.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit has no preconditions.
    unsafe { libc::_exit(code) }
}

/// `close_range(first, last)`: closes every descriptor in the inclusive range.
pub fn close_fd_range(first: u32, last: u32) -> io::Result<()> {
    if first > last {
        return Ok(());
    }
    // SAFETY: close_range takes plain integers; called in a freshly forked child before exec,
    // where closing descriptors we did not open is the point.
    let ret = unsafe { libc::syscall(libc::SYS_close_range, first, last, 0u32) };
    check(ret).map(drop)
}

/// Sets IFF_UP on the loopback interface of the current network namespace (a new network
/// namespace starts with `lo` down).
pub fn bring_loopback_up() -> io::Result<()> {
    // SAFETY: a plain socket call; the descriptor is owned at once.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor to us and nothing else owns it.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS reads the name from and writes the flags into the ifreq we own.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: after SIOCGIFFLAGS the flags member of the union is the one the kernel filled.
    unsafe { req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short };
    // SAFETY: SIOCSIFFLAGS reads the ifreq we own.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Resets every signal to its default action and unblocks all of them: the supervisor's mask and
/// Rust's ignored SIGPIPE are not the command's.
pub fn reset_signals_for_exec() {
    for sig in 1..libc::SIGRTMAX() {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        // SAFETY: installing SIG_DFL has no memory-safety preconditions; invalid numbers fail
        // harmlessly with EINVAL.
        unsafe { libc::signal(sig, libc::SIG_DFL) };
    }
    // SAFETY: an all-empty sigset is valid; sigprocmask reads it and writes nothing back.
    unsafe {
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
    }
}

/// `dup2(2)` on raw descriptor numbers (used right before exec, where ownership no longer
/// matters).
pub fn dup2(old: RawFd, new: RawFd) -> io::Result<()> {
    // SAFETY: dup2 takes plain integers; replacing `new` is the intent.
    let ret = unsafe { libc::dup2(old, new) };
    check(ret as libc::c_long).map(drop)
}

/// Takes ownership of a descriptor number that the caller has just received from the kernel
/// (an SCM_RIGHTS message, `into_raw_fd`) and that nothing else owns.
pub fn own_fd(fd: RawFd) -> OwnedFd {
    // SAFETY: by this function's contract the descriptor is open and has no other owner.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// Makes the caller's process group the foreground group of the terminal on `fd`.
pub fn set_foreground_group(fd: RawFd) -> io::Result<()> {
    // SAFETY: plain integer arguments; the descriptor is a terminal the caller holds.
    let ret = unsafe { libc::tcsetpgrp(fd, libc::getpgrp()) };
    check(ret as libc::c_long).map(drop)
}

/// Guard below the stacks of `CLONE_VM` children: an overflow faults instead of writing below.
const GUARD_SIZE: usize = 64 * 1024;

/// A never-unmapped stack with a guard page below it; returns its 16-byte aligned top. The
/// children that run on it may outlive any owner here, so it is never freed (a few per run).
pub(crate) fn leaked_stack(size: usize) -> io::Result<usize> {
    // SAFETY: a fresh anonymous private mapping; the result is checked.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size + GUARD_SIZE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the lowest GUARD_SIZE bytes of the mapping just made: an overflow of the stack
    // faults instead of writing below it.
    if unsafe { libc::mprotect(base, GUARD_SIZE, libc::PROT_NONE) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // The stack grows down on every architecture we build for.
    Ok((base as usize + size + GUARD_SIZE) & !0xf)
}

extern "C" fn hold_until_released(arg: *mut libc::c_void) -> libc::c_int {
    let fd = arg as usize as libc::c_int;
    let mut byte = 0u8;
    // SAFETY: read into a byte on this thread's own stack; then _exit, which touches no shared
    // state (no destructors, no atexit handlers, no allocator).
    unsafe {
        libc::read(fd, (&mut byte as *mut u8).cast(), 1);
        libc::_exit(0)
    }
}

/// Starts a child that exists only to hold a new user namespace open while its creator writes
/// the maps and opens `/proc/<pid>/ns/user`; returns its pid. It shares our memory (`CLONE_VM`:
/// no page tables copied, which made a plain fork the slowest step of a root launch) and runs
/// only async-signal-safe code on a stack of its own: it blocks reading `release` (a byte
/// written to the pipe lets it exit) and exits.
pub fn spawn_user_namespace_holder(release: &OwnedFd) -> io::Result<libc::pid_t> {
    let top = leaked_stack(64 * 1024)?;
    let flags = libc::CLONE_VM | libc::CLONE_NEWUSER | libc::SIGCHLD;
    // SAFETY: `hold_until_released` only reads from the pipe and calls _exit; its stack is a
    // mapping never unmapped; the argument is a plain descriptor number smuggled through the
    // pointer.
    let pid = unsafe {
        libc::clone(
            hold_until_released,
            top as *mut libc::c_void,
            flags,
            release.as_raw_fd() as usize as *mut libc::c_void,
        )
    };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(pid)
}
