//! Raw system calls for the escape probes (`crate::cli::probes`). Each one tries a single forbidden
//! thing and returns what the kernel answered: `Ok(return value)` or `Err(errno)`. Anything the
//! call created (fds, mounts, children) is released before returning.

use std::ffi::{CStr, CString};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// What one raw call answered.
pub type Answer = Result<i64, i32>;

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// After a fork-like clone in a probe: the child (`ret == 0`) leaves at once, touching nothing
/// shared; the parent reaps a child it made and answers with the clone's result.
fn exit_child_or_reap(ret: libc::c_long) -> Answer {
    if ret == 0 {
        // SAFETY: _exit is async-signal-safe and runs no destructors or atexit handlers.
        unsafe { libc::_exit(0) };
    }
    if ret > 0 {
        let mut status = 0;
        // SAFETY: reaping the child we just created; `status` is a valid out pointer.
        unsafe { libc::waitpid(ret as i32, &mut status, 0) };
    }
    answer(ret)
}

fn answer(ret: libc::c_long) -> Answer {
    if ret < 0 { Err(errno()) } else { Ok(ret) }
}

fn close_fd(ret: Answer) -> Answer {
    if let Ok(fd) = ret {
        // SAFETY: `fd` was just returned by the kernel to this function and is owned by nobody.
        unsafe { libc::close(fd as RawFd) };
    }
    ret
}

/// `EINVAL` unless `flags` are namespace flags (and `CLONE_PARENT`): the probe's child runs on a
/// copy of this stack, which CLONE_VM (and the like) would share with the parent instead.
fn fork_like(flags: u64) -> Result<(), i32> {
    let allowed = u64::try_from(super::FORK_LIKE_FLAGS).unwrap_or(0);
    if flags & !allowed == 0 {
        Ok(())
    } else {
        Err(libc::EINVAL)
    }
}

/// `ptrace(PTRACE_SEIZE, pid)`: attaches without stopping the tracee; exiting detaches.
pub fn ptrace_seize(pid: i32) -> Answer {
    // SAFETY: PTRACE_SEIZE reads no memory from us (addr and data are 0).
    let ret = unsafe { libc::ptrace(libc::PTRACE_SEIZE, pid, 0usize, 0usize) };
    answer(ret)
}

/// `mount("stepproof-probe", target, "tmpfs")`; unmounted at once if it worked.
pub fn mount_tmpfs(target: &str) -> Answer {
    let (Ok(src), Ok(tgt), Ok(fstype)) = (
        CString::new("stepproof-probe"),
        CString::new(target),
        CString::new("tmpfs"),
    ) else {
        return Err(libc::EINVAL);
    };
    // SAFETY: all pointers are valid NUL-terminated strings living across the call; data is NULL.
    let ret = unsafe {
        libc::mount(
            src.as_ptr(),
            tgt.as_ptr(),
            fstype.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if ret == 0 {
        // SAFETY: `tgt` is a valid C string; MNT_DETACH undoes the probe's own mount.
        unsafe { libc::umount2(tgt.as_ptr(), libc::MNT_DETACH) };
    }
    answer(ret.into())
}

/// `unshare(flags)`.
pub fn unshare(flags: i32) -> Answer {
    // SAFETY: unshare takes no pointers.
    answer(unsafe { libc::unshare(flags) }.into())
}

/// `io_uring_setup(1, &params)`; the ring fd is closed.
pub fn io_uring_setup() -> Answer {
    let mut params = [0u8; 120]; // struct io_uring_params, zeroed
    // SAFETY: `params` is a writable buffer of the size of struct io_uring_params.
    let ret = unsafe { libc::syscall(libc::SYS_io_uring_setup, 1u32, params.as_mut_ptr()) };
    close_fd(answer(ret))
}

/// `ioctl(fd, cmd, &'\n')` with the full 64-bit `cmd` (so the high-bit variant reaches the
/// kernel as it is). `cmd` must be TIOCSTI or TIOCLINUX in its low 32 bits (what the kernel
/// reads), else `EINVAL`: another command could write more than the byte passed.
pub fn ioctl_push_char(fd: RawFd, cmd: u64) -> Answer {
    // TIOCSTI and TIOCLINUX, the same on x86_64 and aarch64.
    if ![0x5412, 0x541C].contains(&(cmd & 0xffff_ffff)) {
        return Err(libc::EINVAL);
    }
    let c: u8 = b'\n';
    // SAFETY: raw syscall so the upper 32 bits of `cmd` are passed; TIOCSTI reads one byte,
    // TIOCLINUX reads its subcode byte (10 here, which reads one more byte and writes nothing).
    let ret = unsafe { libc::syscall(libc::SYS_ioctl, fd, cmd, &c as *const u8) };
    answer(ret)
}

/// `bpf(BPF_MAP_CREATE, array map of one u32)`; the map fd is closed.
pub fn bpf_map_create() -> Answer {
    // union bpf_attr for BPF_MAP_CREATE: map_type, key_size, value_size, max_entries, …
    let mut attr = [0u32; 32];
    attr[0] = 2; // BPF_MAP_TYPE_ARRAY
    attr[1] = 4;
    attr[2] = 4;
    attr[3] = 1;
    // SAFETY: `attr` is a valid buffer of the size passed.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            0i32, // BPF_MAP_CREATE
            attr.as_mut_ptr(),
            std::mem::size_of_val(&attr) as u32,
        )
    };
    close_fd(answer(ret))
}

/// `keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0)`.
pub fn keyctl_session_keyring() -> Answer {
    // SAFETY: this keyctl operation takes no pointers.
    let ret = unsafe { libc::syscall(libc::SYS_keyctl, 0i32, -3i32, 0i32) };
    answer(ret)
}

/// `add_key("user", "stepproof-probe", "x", 1, KEY_SPEC_PROCESS_KEYRING)`: a key in the
/// probe's own process keyring, gone when it exits.
pub fn add_key_process() -> Answer {
    let ty = c"user";
    let desc = c"stepproof-probe";
    let payload = b"x";
    // SAFETY: valid C strings and a 1-byte payload buffer, all live across the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_add_key,
            ty.as_ptr(),
            desc.as_ptr(),
            payload.as_ptr(),
            1usize,
            -2i32, // KEY_SPEC_PROCESS_KEYRING
        )
    };
    answer(ret)
}

/// `userfaultfd(O_CLOEXEC | UFFD_USER_MODE_ONLY)`; the fd is closed.
pub fn userfaultfd() -> Answer {
    // SAFETY: takes only flags.
    let ret = unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC | 1) };
    close_fd(answer(ret))
}

/// `perf_event_open` of a software CPU clock on the calling thread; the fd is closed.
pub fn perf_event_open_self() -> Answer {
    // struct perf_event_attr (PERF_ATTR_SIZE_VER0 = 64 bytes is enough): type, size, config.
    let mut attr = [0u8; 128];
    attr[0..4].copy_from_slice(&1u32.to_ne_bytes()); // PERF_TYPE_SOFTWARE
    attr[4..8].copy_from_slice(&128u32.to_ne_bytes()); // size
    attr[8..16].copy_from_slice(&0u64.to_ne_bytes()); // PERF_COUNT_SW_CPU_CLOCK
    // exclude_kernel | exclude_hv: bits 5 and 6 of the flags word at offset 40.
    attr[40..48].copy_from_slice(&((1u64 << 5) | (1u64 << 6)).to_ne_bytes());
    // SAFETY: `attr` is a valid, large enough perf_event_attr buffer.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr.as_ptr(),
            0i32,  // this thread
            -1i32, // any cpu
            -1i32, // no group
            8u64,  // PERF_FLAG_FD_CLOEXEC
        )
    };
    close_fd(answer(ret))
}

/// `name_to_handle_at(AT_FDCWD, path)`: `Ok(handle bytes)` or the errno.
pub fn name_to_handle(path: &str) -> Result<Vec<u8>, i32> {
    let Ok(cpath) = CString::new(path) else {
        return Err(libc::EINVAL);
    };
    // struct file_handle { u32 handle_bytes; i32 handle_type; u8 f_handle[]; }
    let mut buf = vec![0u8; 8 + 128];
    buf[0..4].copy_from_slice(&128u32.to_ne_bytes());
    let mut mount_id: i32 = 0;
    // SAFETY: `buf` holds a file_handle header with room for 128 handle bytes; `mount_id` is a
    // valid out pointer.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_name_to_handle_at,
            libc::AT_FDCWD,
            cpath.as_ptr(),
            buf.as_mut_ptr(),
            &mut mount_id as *mut i32,
            0i32,
        )
    };
    if ret < 0 { Err(errno()) } else { Ok(buf) }
}

/// `open_by_handle_at(mount fd of "/", handle, O_RDONLY)`; the fd is closed. When "/" cannot
/// be opened (Landlock), the mount fd is `AT_FDCWD`, so the answer is `open_by_handle_at`'s own.
pub fn open_by_handle(handle: &mut [u8]) -> Answer {
    // SAFETY: opening "/" read-only with a static C string.
    let root_fd = unsafe { libc::open(c"/".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    let mount_fd = if root_fd < 0 { libc::AT_FDCWD } else { root_fd };
    // SAFETY: `handle` is a file_handle header followed by its handle bytes.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_open_by_handle_at,
            mount_fd,
            handle.as_mut_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    let ret = close_fd(answer(ret));
    if root_fd >= 0 {
        // SAFETY: `root_fd` was opened above and is closed once.
        unsafe { libc::close(root_fd) };
    }
    ret
}

/// `socket(domain, ty, protocol)`; the fd is closed.
pub fn socket(domain: i32, ty: i32, protocol: i32) -> Answer {
    // SAFETY: socket takes no pointers.
    close_fd(answer(unsafe { libc::socket(domain, ty, protocol) }.into()))
}

/// `personality(persona)` through the raw syscall (the full 64-bit value reaches the kernel).
pub fn personality(persona: u64) -> Answer {
    // SAFETY: personality takes no pointers.
    answer(unsafe { libc::syscall(libc::SYS_personality, persona) })
}

/// `clone3({flags, exit_signal = SIGCHLD})`. A child, if one is made, exits at once and is
/// reaped. Namespace flags only (see `fork_like`), else `EINVAL`.
pub fn clone3(flags: u64) -> Answer {
    fork_like(flags)?;
    // struct clone_args (CLONE_ARGS_SIZE_VER0 = 64 bytes): flags, pidfd, child_tid,
    // parent_tid, exit_signal, stack, stack_size, tls.
    let mut args = [0u64; 8];
    args[0] = flags;
    args[4] = libc::SIGCHLD as u64;
    // SAFETY: `args` is a valid clone_args of the size passed. In the child (return 0) we call
    // only `_exit`, which is async-signal-safe and touches no state shared with the parent.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            args.as_mut_ptr(),
            std::mem::size_of_val(&args),
        )
    };
    exit_child_or_reap(ret)
}

/// `clone(flags | SIGCHLD)` like fork; the child exits at once and is reaped. Namespace flags
/// only (see `fork_like`), else `EINVAL`.
pub fn clone_flags(flags: u64) -> Answer {
    fork_like(flags)?;
    // SAFETY: with a NULL stack, clone behaves like fork (the child runs on a copy of our stack);
    // the child only calls `_exit`. No other pointer arguments are passed.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone,
            flags | libc::SIGCHLD as u64,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    };
    exit_child_or_reap(ret)
}

/// `fchmodat2`: 452 on every architecture (the libc crate has no constant for aarch64).
const SYS_FCHMODAT2: libc::c_long = 452;

/// `chmod(path, mode)`: the raw call on x86_64; aarch64 has none and its C library calls
/// `fchmodat(AT_FDCWD, …)`, so the probe does too.
pub fn chmod(path: &CStr, mode: u32) -> Answer {
    // SAFETY: `path` is a valid NUL-terminated string living across the call.
    #[cfg(target_arch = "x86_64")]
    let ret = unsafe { libc::syscall(libc::SYS_chmod, path.as_ptr(), mode) };
    // SAFETY: as above; AT_FDCWD takes no fd.
    #[cfg(not(target_arch = "x86_64"))]
    let ret = unsafe { libc::syscall(libc::SYS_fchmodat, libc::AT_FDCWD, path.as_ptr(), mode) };
    answer(ret)
}

/// `fchmod(fd, mode)`.
pub fn fchmod(fd: RawFd, mode: u32) -> Answer {
    // SAFETY: fchmod takes no pointers; a bad fd is answered with EBADF.
    answer(unsafe { libc::syscall(libc::SYS_fchmod, fd, mode) })
}

/// `fchmodat(AT_FDCWD, path, mode)` through the raw call (glibc's wrapper takes a flags
/// argument the system call does not have).
pub fn fchmodat(path: &CStr, mode: u32) -> Answer {
    // SAFETY: `path` is a valid NUL-terminated string living across the call.
    let ret = unsafe { libc::syscall(libc::SYS_fchmodat, libc::AT_FDCWD, path.as_ptr(), mode) };
    answer(ret)
}

/// `fchmodat2(AT_FDCWD, path, mode, flags)` (Linux 6.6).
pub fn fchmodat2(path: &CStr, mode: u32, flags: i32) -> Answer {
    // SAFETY: `path` is a valid NUL-terminated string living across the call.
    let ret = unsafe { libc::syscall(SYS_FCHMODAT2, libc::AT_FDCWD, path.as_ptr(), mode, flags) };
    answer(ret)
}

/// `open(path, flags, mode)`: the raw call on x86_64, `openat(AT_FDCWD, …)` on aarch64 (which
/// has no open, and whose C library does exactly that). The fd is closed.
pub fn open(path: &CStr, flags: i32, mode: u32) -> Answer {
    // SAFETY: `path` is a valid NUL-terminated string living across the call.
    #[cfg(target_arch = "x86_64")]
    let ret = unsafe { libc::syscall(libc::SYS_open, path.as_ptr(), flags, mode) };
    // SAFETY: as above; AT_FDCWD takes no fd.
    #[cfg(not(target_arch = "x86_64"))]
    let ret =
        unsafe { libc::syscall(libc::SYS_openat, libc::AT_FDCWD, path.as_ptr(), flags, mode) };
    close_fd(answer(ret))
}

/// `openat(AT_FDCWD, path, flags, mode)`, returning the fd (`O_TMPFILE` has no name to stat).
pub fn openat(path: &CStr, flags: i32, mode: u32) -> Result<OwnedFd, i32> {
    // SAFETY: `path` is a valid NUL-terminated string living across the call.
    let ret =
        unsafe { libc::syscall(libc::SYS_openat, libc::AT_FDCWD, path.as_ptr(), flags, mode) };
    let fd = answer(ret)?;
    // SAFETY: the kernel just returned this fd to us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// `creat(path, mode)`: the raw call on x86_64, `openat(O_CREAT|O_WRONLY|O_TRUNC)` on aarch64
/// (which has no creat). The fd is closed.
pub fn creat(path: &CStr, mode: u32) -> Answer {
    // SAFETY: `path` is a valid NUL-terminated string living across the call.
    #[cfg(target_arch = "x86_64")]
    let ret = unsafe { libc::syscall(libc::SYS_creat, path.as_ptr(), mode) };
    // SAFETY: as above; AT_FDCWD takes no fd.
    #[cfg(not(target_arch = "x86_64"))]
    let ret = unsafe {
        libc::syscall(
            libc::SYS_openat,
            libc::AT_FDCWD,
            path.as_ptr(),
            libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC,
            mode,
        )
    };
    close_fd(answer(ret))
}

/// `mknodat(AT_FDCWD, path, mode, 0)`.
pub fn mknodat(path: &CStr, mode: u32) -> Answer {
    // SAFETY: `path` is a valid NUL-terminated string living across the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mknodat,
            libc::AT_FDCWD,
            path.as_ptr(),
            mode,
            0 as libc::dev_t,
        )
    };
    answer(ret)
}

/// `openat2(AT_FDCWD, path, {flags, mode, resolve: 0})`; the fd is closed.
pub fn openat2(path: &CStr, flags: u64, mode: u64) -> Answer {
    // struct open_how { u64 flags; u64 mode; u64 resolve; }
    let how = [flags, mode, 0u64];
    // SAFETY: `path` is a valid C string and `how` an open_how of the size passed, both live
    // across the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            path.as_ptr(),
            how.as_ptr(),
            std::mem::size_of_val(&how),
        )
    };
    close_fd(answer(ret))
}
