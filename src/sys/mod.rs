//! The one place where StepProof talks to the kernel through raw, unsafe calls.
//!
//! Everything here is a thin, documented wrapper that returns `io::Result` and owns its file
//! descriptors at once; the rest of the crate is `#![deny(unsafe_code)]`. A safe function here
//! is sound whatever its arguments: what a caller could get wrong is carried by a type
//! (`BorrowedFd`, [`ParentOnlyFds`]) or checked (the clone flags).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
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

/// The flags a fork-like clone may carry: the namespaces, and `CLONE_PARENT` (the seed makes
/// the init a child of the supervisor, its own parent). Any other flag would share memory, the
/// descriptor table, the signal handlers or the thread group with the parent, or have the
/// kernel write through pointers that are not passed: the child, running on a copy of the
/// caller's stack, would then corrupt or close what the parent still uses.
const FORK_LIKE_FLAGS: libc::c_int = libc::CLONE_NEWNS
    | libc::CLONE_NEWCGROUP
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWTIME
    | libc::CLONE_PARENT;

/// `EINVAL` unless `flags` are namespace flags (and `CLONE_PARENT`) only. Allocates nothing: the
/// seed calls it.
fn check_fork_like(flags: libc::c_int) -> io::Result<()> {
    if flags & !FORK_LIKE_FLAGS == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(libc::EINVAL))
    }
}

/// Types whose value owns its descriptor: whoever holds the value exclusively holds the
/// descriptor exclusively (not so for `BorrowedFd`, a copy of which may live anywhere).
pub trait OwnsFd: AsFd + owns_fd::Sealed {}

mod owns_fd {
    pub trait Sealed {}
    impl Sealed for std::os::fd::OwnedFd {}
    impl Sealed for nix::sys::signalfd::SignalFd {}
}

impl OwnsFd for OwnedFd {}
impl OwnsFd for nix::sys::signalfd::SignalFd {}

/// The descriptors a parent keeps and a fork-like child must not hold (the parent's ends of its
/// pipes and channels), closed in the child's copy of the descriptor table before the child's
/// code runs. Each is borrowed mutably until the child is made, so that code cannot reach it (the
/// borrow checker refuses a closure that captures one), and the child never returns into the
/// frames that own them: it exits after its code.
#[derive(Default)]
pub struct ParentOnlyFds<'a> {
    fds: Vec<BorrowedFd<'a>>,
}

impl<'a> ParentOnlyFds<'a> {
    /// Nothing to close in the child.
    pub fn none() -> Self {
        Self::default()
    }

    /// Adds `owner`'s descriptor; `owner` stays borrowed mutably for as long as the list lives.
    pub fn add(&mut self, owner: &'a mut impl OwnsFd) {
        let owner: &'a _ = owner;
        self.fds.push(owner.as_fd());
    }

    /// In the child only (see the type): closes this process's copies.
    fn close_in_child(&self) {
        for fd in &self.fds {
            // SAFETY: this runs in a fork-like child, whose descriptor table is its own copy.
            // The owner of this number is the parent's object, borrowed mutably by this list
            // while the child is made: the child's code cannot reach it, and the child exits
            // without returning to the frames that would use or drop it.
            unsafe { libc::close(fd.as_raw_fd()) };
        }
    }
}

/// Runs `child` in a fork-like child and exits with its result, without returning to the
/// caller's frames (their objects are the parent's; dropping or using them here would act twice
/// on what they own). A panic aborts the child for the same reason.
fn run_child<F: FnOnce() -> i32>(child: F) -> ! {
    struct AbortOnUnwind;
    impl Drop for AbortOnUnwind {
        fn drop(&mut self) {
            std::process::abort();
        }
    }
    let guard = AbortOnUnwind;
    let code = child();
    std::mem::forget(guard);
    exit_now(code)
}

/// `clone(2)` with fork semantics (the child runs on a copy of the caller's memory, stack and
/// descriptor table) and namespace flags (plus `CLONE_PARENT`; anything else is `EINVAL`). The
/// child closes `parent_only`, runs `child` and exits with its result (a panic aborts it); the
/// parent gets the child's pid and drops its own copy of `child`.
///
/// Call it from a process with one thread: only the calling thread exists in the child, so a
/// lock another thread held (the allocator's, a `Mutex`) stays locked there and the child may
/// hang on it (a hang, not corruption: what such a lock guards is only reached through it).
pub fn clone_with_namespaces<F: FnOnce() -> i32>(
    flags: libc::c_int,
    parent_only: ParentOnlyFds<'_>,
    child: F,
) -> io::Result<libc::pid_t> {
    check_fork_like(flags)?;
    let flags = flags as libc::c_ulong | libc::SIGCHLD as libc::c_ulong;
    // SAFETY: raw clone with a NULL stack behaves like fork(2): the child continues on a
    // copy-on-write copy of this stack, and the flags (checked above) share nothing with the
    // parent. No pointers are passed for tid/tls (the flags do not ask for them). The child
    // never returns from this function (`run_child`).
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
        0 => run_child(|| {
            parent_only.close_in_child();
            child()
        }),
        pid => Ok(pid as libc::pid_t),
    }
}

/// Plain `fork(2)`, as [`clone_with_namespaces`] without namespaces.
pub fn fork<F: FnOnce() -> i32>(
    parent_only: ParentOnlyFds<'_>,
    child: F,
) -> io::Result<libc::pid_t> {
    clone_with_namespaces(0, parent_only, child)
}

/// Size of the stack of a [`spawn_sharing_memory`] child.
const SHARED_CHILD_STACK: usize = 1024 * 1024;

/// Starts a child that shares this process's memory and runs `child` until it calls `execve`
/// or exits, while this thread waits (`CLONE_VM | CLONE_VFORK`, as `posix_spawn` does): no
/// page tables are copied and no copy-on-write faults follow, which a fork of the init would
/// cost on every launch. Returns the child's pid once it has exec'd or exited.
///
/// The child is this thread's continuation while the thread waits: the same memory (allocating
/// is fine, the allocator's state stays consistent), the same thread-local storage, its own
/// copy of the descriptor table. What `child` drops is dropped for this process too
/// (consistently: the closure is moved out of a slot this thread shares); what it still holds
/// when it execs is leaked here. It ends in `execve` or `_exit` with its return value; a panic
/// aborts it. Its stack is a mapping of its own with a guard below, so an overflow faults
/// instead of writing over the heap; it stays mapped (one per init: an `mprotect` where freeing
/// a heap stack cost a `munmap`).
pub fn spawn_sharing_memory<F: FnOnce() -> i32>(child: F) -> io::Result<libc::pid_t> {
    extern "C" fn trampoline<F: FnOnce() -> i32>(arg: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `arg` is the `Option<F>` below, in the memory we share with the suspended
        // parent, alive until the parent resumes.
        let slot = unsafe { &mut *(arg as *mut Option<F>) };
        let code = slot
            .take()
            .map_or(crate::exit::ExitCode::NotFound.code(), |f| f());
        // SAFETY: _exit runs no destructors and no atexit handlers (which would touch the
        // parent's state).
        unsafe { libc::_exit(code) }
    }
    let top = leaked_stack(SHARED_CHILD_STACK)?;
    let mut slot = Some(child);
    // SAFETY: the child runs `trampoline` on its own stack, a mapping never unmapped with a
    // guard below; the argument points to `slot`, alive until this thread resumes (it is
    // suspended until the child has exec'd or exited). A panic in `child` cannot unwind out of
    // the `extern "C"` trampoline: it aborts the child.
    let pid = unsafe {
        libc::clone(
            trampoline::<F>,
            top as *mut libc::c_void,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (&mut slot as *mut Option<F>).cast(),
        )
    };
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
pub fn set_controlling_terminal(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: TIOCSCTTY takes an integer argument; the descriptor is borrowed, so open.
    let ret = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCSCTTY, 0) };
    check(ret as libc::c_long).map(drop)
}

/// Reads a terminal's window size.
pub fn get_window_size(fd: BorrowedFd<'_>) -> io::Result<libc::winsize> {
    let mut ws = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one `winsize` into the struct we own.
    let ret = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCGWINSZ, &mut ws) };
    check(ret as libc::c_long).map(|_| ws)
}

/// Sets a terminal's window size (the kernel then signals SIGWINCH to its foreground group).
pub fn set_window_size(fd: BorrowedFd<'_>, ws: &libc::winsize) -> io::Result<()> {
    // SAFETY: TIOCSWINSZ reads one `winsize` from the struct we pass.
    let ret = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCSWINSZ, ws as *const libc::winsize) };
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

/// Marks every descriptor from `first` up except `keep` close-on-exec (`close_range(2)` with
/// `CLOSE_RANGE_CLOEXEC`, twice): the next `execve` closes them, nothing does before. Safe
/// whatever the caller holds: no descriptor is closed while this process image lives, so no
/// owner (`OwnedFd`, `File`) ever acts on a number closed under it. Needs Linux 5.11.
pub fn close_on_exec_except(first: u32, keep: BorrowedFd<'_>) -> io::Result<()> {
    let keep = keep.as_raw_fd() as u32;
    let flags = libc::CLOSE_RANGE_CLOEXEC;
    if keep > first {
        // SAFETY: plain integers; the flag only sets FD_CLOEXEC, it closes nothing.
        check(unsafe { libc::syscall(libc::SYS_close_range, first, keep - 1, flags) })?;
    }
    let from = first.max(keep.saturating_add(1));
    // SAFETY: as above.
    check(unsafe { libc::syscall(libc::SYS_close_range, from, u32::MAX, flags) }).map(drop)
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
    // SAFETY: sigset_t is plain old data, for which all-zero is a valid value.
    let mut empty: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `empty` is a sigset_t we own.
    unsafe { libc::sigemptyset(&mut empty) };
    // SAFETY: sigprocmask reads `empty` and, the old set being NULL, writes nothing back.
    unsafe { libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut()) };
}

/// `dup2(fd, 0)`, `dup2(fd, 1)`, `dup2(fd, 2)`: `fd` becomes the standard input, output and
/// error. Those three numbers belong to the process's standard streams, which Rust's runtime
/// keeps open from the start (no `OwnedFd` can be given them without `unsafe`), and `dup2`
/// replaces each at once: they never stop being open.
pub fn dup_onto_stdio(fd: BorrowedFd<'_>) -> io::Result<()> {
    for target in 0..=2 {
        // SAFETY: plain integers; `fd` is borrowed, so open, and the target is a standard
        // stream (see above).
        let ret = unsafe { libc::dup2(fd.as_raw_fd(), target) };
        check(ret as libc::c_long)?;
    }
    Ok(())
}

/// The one descriptor sent on `channel` (`SCM_RIGHTS`, received close-on-exec), owned at once;
/// `None` if the other side closed the channel first. Any further descriptor in the message is
/// closed.
pub fn receive_fd(channel: BorrowedFd<'_>) -> io::Result<Option<OwnedFd>> {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
    let mut byte = [0u8; 1];
    let mut iov = [io::IoSliceMut::new(&mut byte)];
    let mut space = nix::cmsg_space!([RawFd; 1]);
    let msg = recvmsg::<()>(
        channel.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )
    .map_err(io::Error::from)?;
    let mut first = None;
    for cmsg in msg.cmsgs().map_err(io::Error::from)? {
        if let ControlMessageOwned::ScmRights(fds) = cmsg {
            for fd in fds {
                // SAFETY: the kernel has just installed this descriptor in our table for this
                // message; nothing else knows its number.
                let owned = unsafe { OwnedFd::from_raw_fd(fd) };
                // The first is the answer; any other is dropped (closed) here.
                if first.is_none() {
                    first = Some(owned);
                }
            }
        }
    }
    Ok(first)
}

/// Makes the caller's process group the foreground group of the terminal on `fd`.
pub fn set_foreground_group(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: getpgrp has no preconditions.
    let group = unsafe { libc::getpgrp() };
    // SAFETY: plain integer arguments; the descriptor is borrowed, so open.
    let ret = unsafe { libc::tcsetpgrp(fd.as_raw_fd(), group) };
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
    let packed = arg as usize as u64;
    let fd = (packed & 0xffff_ffff) as libc::c_int;
    let parent = (packed >> 32) as libc::pid_t;
    // It dies with its creator (a supervisor killed in its first milliseconds must not leave
    // it behind), and keeps none of the creator's descriptors: not the audit log's (whose lock
    // a rerun needs), not its own copy of the release pipe's write end (so the creator's death
    // is end-of-file here).
    // SAFETY: prctl with integer arguments.
    unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    // SAFETY: getppid has no preconditions.
    if parent != 0 && unsafe { libc::getppid() } != parent {
        // SAFETY: as below.
        unsafe { libc::_exit(0) }
    }
    if fd > 0 {
        // SAFETY: close_range on this process's own descriptor table (CLONE_VM shares memory,
        // not descriptors); nothing here uses the descriptors it closes.
        unsafe { libc::syscall(libc::SYS_close_range, 0u32, (fd - 1) as u32, 0u32) };
    }
    // SAFETY: as above.
    unsafe { libc::syscall(libc::SYS_close_range, (fd + 1) as u32, u32::MAX, 0u32) };
    let mut byte = 0u8;
    // SAFETY: reads one byte into a byte on this thread's own stack.
    unsafe { libc::read(fd, (&mut byte as *mut u8).cast(), 1) };
    // SAFETY: _exit touches no shared state (no destructors, no atexit handlers, no allocator).
    unsafe { libc::_exit(0) }
}

/// The holder's argument: the release descriptor, and on 64-bit targets this process's pid (the
/// holder exits at once if its parent is already another).
fn release_argument(fd: libc::c_int) -> *mut libc::c_void {
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() } as u64;
    let packed = if usize::BITS >= 64 {
        (me << 32) | fd as u32 as u64
    } else {
        fd as u32 as u64
    };
    packed as usize as *mut libc::c_void
}

/// Starts a child that exists only to hold a new user namespace open while its creator writes
/// the maps and opens `/proc/<pid>/ns/user`; returns its pid. It shares our memory (`CLONE_VM`:
/// no page tables copied, which made a plain fork the slowest step of a root launch) and runs
/// only async-signal-safe code on a stack of its own: it blocks reading `release` (a byte
/// written to the pipe lets it exit) and exits.
pub fn spawn_user_namespace_holder(release: &OwnedFd) -> io::Result<libc::pid_t> {
    let top = leaked_stack(64 * 1024)?;
    let flags = libc::CLONE_VM | libc::CLONE_NEWUSER | libc::SIGCHLD;
    // SAFETY: `hold_until_released` only calls prctl, getppid, close_range, read and _exit;
    // its stack is a mapping never unmapped; the argument is plain integers smuggled through
    // the pointer.
    let pid = unsafe {
        libc::clone(
            hold_until_released,
            top as *mut libc::c_void,
            flags,
            release_argument(release.as_raw_fd()),
        )
    };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(pid)
}
