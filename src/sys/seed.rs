//! The namespace seed: a child that shares the supervisor's memory and descriptor table
//! (`CLONE_VM | CLONE_FILES`), born in a new user namespace first thing in `stepproof-run`.
//! It starts a second such child in that user namespace, the network maker, which creates the
//! sandbox's network namespace and brings up its loopback (the kernel's costliest namespace:
//! half a millisecond here, more while another network namespace is being torn down) and
//! leaves a descriptor of it in the shared table; so that work runs on the other core while the
//! supervisor reads the profile, builds the plan and the init builds the view, instead of on
//! the launch's critical path. The seed itself then makes the init's mount, PID, IPC, UTS and
//! cgroup namespaces (`unshare`), on that core too. When the plan is ready the seed clones the
//! sandbox init into them (with `CLONE_PARENT`, so the init is the supervisor's child, and any
//! namespace flag the early `unshare` could not honour), reports the pid and exits; the init
//! joins the network namespace once its view is built (the supervisor passes it the
//! descriptor).
//!
//! The seed and the network maker run only raw system calls on their own stacks: no
//! allocation, no locks, no destructors. The supervisor is blocked reading the seed's reply
//! while the seed clones the init, so the init starts from a quiescent copy of the supervisor's
//! memory, exactly as after a `fork` from the supervisor's own thread. They share the
//! supervisor's thread-local storage too, so a call of theirs that *fails* writes the
//! supervisor's `errno`; that can garble the error of a supervisor call failing at the same
//! instant, but every such failure of theirs stops the launch anyway (no network namespace, no
//! init), so no decision rests on it.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// Size of the seed's stack, which the init also runs on (in its own copy) for its whole life.
const STACK_SIZE: usize = 8 * 1024 * 1024;
/// The network maker's stack: raw calls only.
const NET_STACK_SIZE: usize = 64 * 1024;

/// Held for reading by a supervisor thread while it does work that takes locks of the process
/// (the allocator's, stdio's: the audit export's batches), and for writing by [`NamespaceSeed::
/// clone_init`] while the init's copy of this process's memory is taken: a lock another thread
/// held at that instant would stay held in the copy, and the init would wait on it forever.
/// A thread blocked on this lock holds none of those.
pub static QUIET: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// Reply tags, seed → supervisor.
const NET_READY: u8 = b'N';
const CLONED: u8 = b'P';

/// What the seed reads at its start (a copy is taken before anything else runs).
#[derive(Clone, Copy)]
struct SeedArgs {
    request: libc::c_int,
    reply: libc::c_int,
    /// Where the network maker reports (write end), and its stack's top (0: no network).
    net_reply: libc::c_int,
    net_stack_top: usize,
    /// The supervisor's ends of the pipes, and the maker's (closed in the init).
    theirs: [libc::c_int; 3],
    supervisor: libc::pid_t,
}

/// The code the cloned init runs, and its data, both in the supervisor's memory (which the init
/// receives a copy of).
#[repr(C)]
struct Job {
    call: unsafe fn(*mut libc::c_void) -> libc::c_int,
    data: *mut libc::c_void,
}

/// A running seed. Dropping it stops a seed that cloned no init.
pub struct NamespaceSeed {
    pid: libc::pid_t,
    new_net: bool,
    net_taken: bool,
    cloned: bool,
    /// Supervisor → seed (write end); the read end stays open in the shared table.
    request: OwnedFd,
    /// Seed → supervisor (read end).
    reply: OwnedFd,
    /// Network maker → supervisor (read end).
    net_reply: OwnedFd,
    /// The children's ends, shared through `CLONE_FILES`: open while they may use them (see
    /// `Drop`).
    seed_ends: Option<(OwnedFd, OwnedFd, OwnedFd)>,
    /// The children's arguments, read by each at its start: alive while they may run (see
    /// `Drop`).
    args: Option<Box<SeedArgs>>,
}

fn write_all_raw(fd: libc::c_int, bytes: &[u8]) -> bool {
    let mut done = 0;
    while done < bytes.len() {
        // SAFETY: writes from a live slice; no allocation.
        let n = unsafe { libc::write(fd, bytes[done..].as_ptr().cast(), bytes.len() - done) };
        if n < 0 && errno() == libc::EINTR {
            continue;
        }
        if n <= 0 {
            return false;
        }
        done += n as usize;
    }
    true
}

fn read_exact_raw(fd: libc::c_int, bytes: &mut [u8]) -> bool {
    let mut done = 0;
    while done < bytes.len() {
        // SAFETY: reads into a live, exclusively borrowed slice; no allocation.
        let n = unsafe { libc::read(fd, bytes[done..].as_mut_ptr().cast(), bytes.len() - done) };
        if n < 0 && errno() == libc::EINTR {
            continue;
        }
        if n <= 0 {
            return false;
        }
        done += n as usize;
    }
    true
}

fn errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// The seed's whole life. Raw calls only (see the module comment).
extern "C" fn seed_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` points to the boxed `SeedArgs` the supervisor keeps alive while the seed
    // runs; it is copied out at once.
    let args = unsafe { *(arg as *const SeedArgs) };
    // SAFETY: the name is a NUL-terminated literal the kernel copies.
    unsafe { libc::prctl(libc::PR_SET_NAME, c"stepproof-seed".as_ptr(), 0, 0, 0) };
    // SAFETY: plain integer arguments.
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
    if unsafe { libc::getppid() } != args.supervisor {
        // SAFETY: _exit touches no shared state.
        unsafe { libc::_exit(0) };
    }
    // The init inherits this mask and sets its own first thing.
    // SAFETY: sigset_t is plain old data, for which all-zero is a valid value.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `all` is a sigset_t on this stack.
    unsafe { libc::sigfillset(&mut all) };
    // SAFETY: sigprocmask reads `all` and, the old set being NULL, writes nothing back.
    unsafe { libc::sigprocmask(libc::SIG_SETMASK, &all, std::ptr::null_mut()) };
    if args.net_stack_top != 0 {
        // SAFETY: `net_main` only makes raw system calls on its own stack (a mapping never
        // unmapped); its argument is the supervisor's boxed SeedArgs, which stays alive until
        // the supervisor has read the maker's report.
        let pid = unsafe {
            libc::clone(
                net_main,
                args.net_stack_top as *mut libc::c_void,
                libc::CLONE_VM | libc::CLONE_FILES | libc::CLONE_PARENT | libc::SIGCHLD,
                arg,
            )
        };
        if pid < 0 {
            report_network(args.net_reply, Err(errno()));
        }
    }
    // The init's other namespaces, made now while the supervisor reads the profile and builds
    // the plan: the mount table's copy and the IPC namespace's own mqueue mount are most of the
    // clone's cost otherwise. The init, this seed's next child, is born in them (the new PID
    // namespace's first process: its pid 1). Where the kernel refuses, the clone makes them.
    const EARLY: libc::c_int = libc::CLONE_NEWNS
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWUTS
        | libc::CLONE_NEWCGROUP;
    // SAFETY: unshare takes no pointers; this process shares no file system information
    // (created without CLONE_FS), as a new mount namespace requires.
    let made_early = if unsafe { libc::unshare(EARLY) } == 0 {
        EARLY
    } else {
        0
    };
    let mut request = [0u8; 16];
    if !read_exact_raw(args.request, &mut request) {
        // SAFETY: as above.
        unsafe { libc::_exit(0) };
    }
    let flags = u64::from_ne_bytes(request[..8].try_into().unwrap_or_default()) as libc::c_int;
    let job = u64::from_ne_bytes(request[8..].try_into().unwrap_or_default()) as usize;
    // Fork semantics: the child continues on a copy-on-write copy of this stack and of the whole
    // address space, taken while the supervisor is blocked reading our reply (so no lock in its
    // memory is held). The flags are checked there (namespaces and CLONE_PARENT only).
    let init = move || {
        // SAFETY: the name is a NUL-terminated literal the kernel copies.
        unsafe { libc::prctl(libc::PR_SET_NAME, c"stepproof-init".as_ptr(), 0, 0, 0) };
        for fd in [
            args.request,
            args.reply,
            args.net_reply,
            args.theirs[0],
            args.theirs[1],
            args.theirs[2],
        ] {
            // SAFETY: these are this process's copies of the seed's pipe ends. In this copy of
            // the memory their owner is the `NamespaceSeed` whose `clone_init` is running,
            // borrowed mutably there: the init's code cannot reach it, and this process exits
            // without returning to it.
            unsafe { libc::close(fd) };
        }
        // The init. `job` points into our copy of the supervisor's stack, to a `Job` the
        // supervisor built for exactly this call.
        // SAFETY: see `NamespaceSeed::clone_init`: the Job outlives the request in the
        // supervisor, and this process has its own copy of it.
        let job = unsafe { &*(job as *const Job) };
        // SAFETY: `job.call` is `call_once::<G>` for the `Option<G>` that `job.data` points to
        // (also in our copy), as `job_for` builds them.
        unsafe { (job.call)(job.data) }
    };
    let flags = flags & !made_early;
    let pid = match super::clone_with_namespaces(flags, super::ParentOnlyFds::none(), init) {
        Ok(child) => child,
        Err(e) => -e.raw_os_error().unwrap_or(libc::EIO),
    };
    let mut message = [CLONED, 0, 0, 0, 0];
    message[1..].copy_from_slice(&pid.to_ne_bytes());
    write_all_raw(args.reply, &message);
    // SAFETY: _exit touches no shared state.
    unsafe { libc::_exit(0) }
}

/// The network maker's message: the namespace's descriptor (in the shared table) or an errno.
fn report_network(fd: libc::c_int, made: Result<libc::c_int, i32>) {
    let (errno, netns) = match made {
        Ok(netns) => (0i32, netns),
        Err(errno) => (errno, -1),
    };
    let mut message = [NET_READY, 0, 0, 0, 0, 0, 0, 0, 0];
    message[1..5].copy_from_slice(&errno.to_ne_bytes());
    message[5..].copy_from_slice(&netns.to_ne_bytes());
    write_all_raw(fd, &message);
}

/// The network maker: a new network namespace with its loopback up, left open in the shared
/// descriptor table for the supervisor to pass to the init. Raw calls only.
extern "C" fn net_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` points to the supervisor's boxed SeedArgs, alive until our report is read.
    let (reply, supervisor) = unsafe {
        let args = &*(arg as *const SeedArgs);
        (args.net_reply, args.supervisor)
    };
    // SAFETY: the name is a NUL-terminated literal the kernel copies.
    unsafe { libc::prctl(libc::PR_SET_NAME, c"stepproof-net".as_ptr(), 0, 0, 0) };
    // SAFETY: plain integer arguments.
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
    if unsafe { libc::getppid() } != supervisor {
        // SAFETY: _exit touches no shared state.
        unsafe { libc::_exit(0) };
    }
    // SAFETY: unshare takes no pointers.
    let made = if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        Err(errno())
    } else {
        super::bring_loopback_up()
            .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))
            .and_then(|()| {
                // SAFETY: a NUL-terminated literal path; the descriptor goes to the supervisor.
                let fd = unsafe {
                    libc::open(
                        c"/proc/thread-self/ns/net".as_ptr(),
                        libc::O_RDONLY | libc::O_CLOEXEC,
                    )
                };
                if fd < 0 { Err(errno()) } else { Ok(fd) }
            })
    };
    report_network(reply, made);
    // SAFETY: _exit touches no shared state (and, the table being shared, closes nothing).
    unsafe { libc::_exit(0) }
}

/// Calls the boxed-up closure in the cloned init.
///
/// # Safety
/// `data` must point to an `Option<F>` (in this process's memory).
unsafe fn call_once<F: FnOnce() -> i32>(data: *mut libc::c_void) -> libc::c_int {
    // SAFETY: the caller's contract.
    let slot = unsafe { &mut *(data as *mut Option<F>) };
    match slot.take() {
        Some(f) => f(),
        None => crate::exit::ExitCode::HostFailure.code(),
    }
}

/// The `Job` that runs the closure in `slot`: `call_once` for the closure's own type.
fn job_for<F: FnOnce() -> i32>(slot: &mut Option<F>) -> Job {
    Job {
        call: call_once::<F>,
        data: (slot as *mut Option<F>).cast(),
    }
}

impl NamespaceSeed {
    /// Starts a seed in a new user namespace, and (with `new_net`) its network maker. Its id
    /// maps are the supervisor's to write ([`NamespaceSeed::pid`]).
    pub fn spawn(new_net: bool) -> io::Result<NamespaceSeed> {
        let (request_read, request) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        let (reply, reply_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        let (net_reply, net_reply_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        let net_stack_top = if new_net {
            super::leaked_stack(NET_STACK_SIZE)?
        } else {
            0
        };
        let args = Box::new(SeedArgs {
            request: request_read.as_raw_fd(),
            reply: reply_write.as_raw_fd(),
            net_reply: net_reply_write.as_raw_fd(),
            net_stack_top,
            theirs: [
                request.as_raw_fd(),
                reply.as_raw_fd(),
                net_reply.as_raw_fd(),
            ],
            // SAFETY: getpid has no preconditions.
            supervisor: unsafe { libc::getpid() },
        });
        let top = super::leaked_stack(STACK_SIZE)?;
        let flags = libc::CLONE_VM | libc::CLONE_FILES | libc::CLONE_NEWUSER | libc::SIGCHLD;
        // SAFETY: `seed_main` only makes raw system calls on the stack above (see the module
        // comment); its argument is the boxed SeedArgs, which `NamespaceSeed` keeps alive, and
        // the descriptors it names stay open in the shared table while it may use them.
        let pid = unsafe {
            libc::clone(
                seed_main,
                top as *mut libc::c_void,
                flags,
                (&*args as *const SeedArgs).cast_mut().cast(),
            )
        };
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(NamespaceSeed {
            pid,
            new_net,
            net_taken: false,
            cloned: false,
            request,
            reply,
            net_reply,
            seed_ends: Some((request_read, reply_write, net_reply_write)),
            args: Some(args),
        })
    }

    /// The seed's pid: its `/proc/<pid>/uid_map` and `gid_map` are the sandbox's.
    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// Waits for the network maker: a descriptor of the new network namespace, its loopback up.
    /// Once only.
    pub fn take_network(&mut self) -> io::Result<OwnedFd> {
        if !self.new_net || self.net_taken {
            return Err(io::Error::other(
                "this seed has no network namespace to give",
            ));
        }
        self.net_taken = true;
        let mut message = [0u8; 9];
        if !read_exact_raw(self.net_reply.as_raw_fd(), &mut message) || message[0] != NET_READY {
            return Err(io::Error::other(
                "the network namespace maker exited unexpectedly",
            ));
        }
        let errno = i32::from_ne_bytes([message[1], message[2], message[3], message[4]]);
        let fd = i32::from_ne_bytes([message[5], message[6], message[7], message[8]]);
        if errno != 0 || fd < 0 {
            return Err(io::Error::from_raw_os_error(if errno != 0 {
                errno
            } else {
                libc::EIO
            }));
        }
        // SAFETY: the maker opened this descriptor in the table we share and reported it to us
        // alone; nothing else owns it.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    fn read_reply(&self, tag: u8) -> io::Result<i32> {
        let mut message = [0u8; 5];
        if !read_exact_raw(self.reply.as_raw_fd(), &mut message) || message[0] != tag {
            return Err(io::Error::other("the namespace seed exited unexpectedly"));
        }
        Ok(i32::from_ne_bytes([
            message[1], message[2], message[3], message[4],
        ]))
    }

    /// Has the seed clone a child with `flags` (namespace flags only, else `EINVAL`;
    /// `CLONE_PARENT` is added here, `SIGCHLD` by `clone_with_namespaces`) that closes
    /// `parent_only`, runs `init` and exits with its result (a panic aborts it); returns the
    /// child's pid.
    ///
    /// The child gets a copy of this process's memory taken while this thread is blocked here;
    /// call it from a process with one thread, as [`super::clone_with_namespaces`] says, or whose
    /// other threads are blocked, or hold [`QUIET`] while they take locks (it is taken for
    /// writing here).
    pub fn clone_init<F: FnOnce() -> i32>(
        &mut self,
        flags: libc::c_int,
        parent_only: super::ParentOnlyFds<'_>,
        init: F,
    ) -> io::Result<libc::pid_t> {
        if self.cloned {
            return Err(io::Error::other("the seed has cloned its init already"));
        }
        let flags = flags | libc::CLONE_PARENT;
        super::check_fork_like(flags)?;
        let mut slot = Some(move || {
            parent_only.close_in_child();
            init()
        });
        let job = job_for(&mut slot);
        // No other thread of ours is inside an allocator or stdio call while the copy is taken.
        let quiet = QUIET.write().unwrap_or_else(|e| e.into_inner());
        let flags = flags as u64;
        let mut request = [0u8; 16];
        request[..8].copy_from_slice(&flags.to_ne_bytes());
        request[8..].copy_from_slice(&(&job as *const Job as usize as u64).to_ne_bytes());
        if !write_all_raw(self.request.as_raw_fd(), &request) {
            return Err(io::Error::last_os_error());
        }
        let pid = self.read_reply(CLONED);
        drop(quiet);
        // The seed has exited or is about to, touching nothing more; `slot` still holds the
        // closure on this side, and dropping it closes this side's copies of what it captured.
        self.cloned = true;
        drop(slot);
        match pid? {
            pid if pid > 0 => Ok(pid),
            errno => Err(io::Error::from_raw_os_error(-errno)),
        }
    }
}

impl Drop for NamespaceSeed {
    fn drop(&mut self) {
        // A seed that cloned no init is stopped (closing a pipe end does not wake a reader
        // sharing our descriptor table); its namespaces go with it. It is reaped with us.
        if !self.cloned {
            // SAFETY: kill takes no pointers; the pid is our own unreaped child.
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
        }
        // The children write to their ends by number, in the table we share: closed while the
        // network maker may still report, the number could be reused for one of our files and
        // receive its message; and they read their arguments from our heap when they start
        // (even a seed just sent SIGKILL may still be running for a moment). So the ends and the
        // arguments are released only when both children are done, and otherwise left alone
        // (three descriptors and a few bytes, for the rest of this short-lived process).
        let done = self.cloned && (!self.new_net || self.net_taken);
        if !done {
            if let Some(ends) = self.seed_ends.take() {
                std::mem::forget(ends);
            }
            if let Some(args) = self.args.take() {
                Box::leak(args);
            }
        }
    }
}
