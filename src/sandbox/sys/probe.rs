//! Raw system calls for the escape probes (`crate::probes`). Each one tries a single forbidden
//! thing and returns what the kernel answered: `Ok(return value)` or `Err(errno)`. Anything the
//! call created (fds, mounts, children) is released before returning.

use std::ffi::CString;
use std::os::fd::RawFd;

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
/// kernel as it is).
pub fn ioctl_push_char(fd: RawFd, cmd: u64) -> Answer {
    let c: u8 = b'\n';
    // SAFETY: raw syscall so the upper 32 bits of `cmd` are passed; TIOCSTI reads one byte.
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
/// reaped. Only call this from a single-threaded process (a probe process).
pub fn clone3(flags: u64) -> Answer {
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

/// `clone(flags | SIGCHLD)` like fork; the child exits at once and is reaped. Only call this
/// from a single-threaded process (a probe process).
pub fn clone_flags(flags: u64) -> Answer {
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
