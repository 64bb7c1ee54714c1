//! `stepproof-hook [--policy FILE] [--audit-socket PATH] [--event NAME]`: the hook Claude
//! Code runs. Reads one JSON object on stdin, answers per the contract (see
//! `stepproof_hook::contract`), sends audit records, exits. Fails closed on gates: a panic
//! becomes a deny with exit 2 (exit 0 for observer events).
//!
//! # Its own entry point
//! The hook starts before every tool call, and std's runtime start (`lang_start`) cost it
//! 0.03–0.06 ms a call (README, "Benchmarks"), as much as its policy work: glibc's
//! `pthread_getattr_np` reads `/proc/self/maps` to find the main thread's stack guard, and an
//! alternate signal stack and SIGSEGV/SIGBUS handlers are installed. So the binary is
//! `#![no_main]` and [`main`] is the C `main` glibc calls. What std's start and exit did, and
//! what happens instead (tests/contract.rs checks each that can be observed):
//!
//! 1. **Standard descriptors**: std reopened a closed fd 0, 1 or 2 on `/dev/null`, so that a
//!    file opened later (the policy, the audit socket) never becomes "stdout". Kept:
//!    [`reopen_closed_standard_fds`].
//! 2. **SIGPIPE** was set to "ignore". Left at its default here (the hook crate links no
//!    nix and holds no unsafe block that could change a disposition): the audit records are
//!    sent first, over a socket std writes with `MSG_NOSIGNAL` (a closed socket is `EPIPE`,
//!    never a signal); the answer is written last, and a stdout nobody reads any more ends the
//!    hook by SIGPIPE — its answer could reach no one, and a gate's death blocks the call
//!    (`"onFailure": "block"`), as an observer's is a non-blocking failure.
//! 3. **Stack overflow**: std found the main thread's guard and installed handlers that print
//!    "has overflowed its stack" and abort. Dropped: the kernel's stack guard gap still turns an
//!    overflow into SIGSEGV, a death by signal like the abort was (a gate entry has
//!    `"onFailure": "block"`, so the call is blocked). The hook's recursion is bounded anyway
//!    (nesting limits in `shell`, serde_json's depth limit).
//! 4. **Arguments**: std stored argc/argv. Unchanged: on glibc std takes them from an
//!    `.init_array` function glibc calls before `main`, so `std::env::args()` works.
//! 5. **The main thread's name** ("main", for panic messages). Dropped: the panic hook is
//!    silenced below and nothing else reads the name.
//! 6. **Panics** escaping `main` became exit 101. [`run`] runs under `catch_unwind` (release
//!    builds unwind) and a panic answers with the fail-closed deny, as before; a panic outside
//!    it cannot unwind out of an `extern "C"` function and aborts (a death by signal).
//! 7. **At exit** std flushed stdout's buffer. The answer is written and flushed explicitly
//!    before `main` returns; stderr is unbuffered. Returning from `main` calls libc's `exit`.
//! 8. **Only one thread exits**: std guarded against two threads calling `exit` at once; only
//!    the main thread does here (the audit helper thread never exits the process).
//! 9. **The exit code** comes from `Response::exit_code` exactly as `ExitCode::from` did.
#![no_main]
#![deny(unsafe_code)]

use std::ffi::{c_char, c_int};
use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, IntoRawFd};

use stepproof_hook::audit;
use stepproof_hook::contract::{self, Args, MAX_INPUT_BYTES, Response};
use stepproof_hook::decision::Verdict;

/// The process's entry point, called by glibc's `__libc_start_main` in place of std's
/// `lang_start` (see the module documentation for what that did and what replaces it).
// SAFETY: `no_mangle` exports this function as the C symbol `main`, which is sound because it
// is the only `main` in the binary (`#![no_main]`: rustc emits none of its own) and its
// signature is C's `int main(int, char **)`, the one `__libc_start_main` calls. It holds no
// unsafe block and does not read `argv` (std reads the arguments, see item 4 above).
#[allow(unsafe_code)]
#[unsafe(no_mangle)]
pub extern "C" fn main(_argc: c_int, _argv: *const *const c_char) -> c_int {
    reopen_closed_standard_fds();
    // Silence the default panic message: stderr is what the model reads, and the catch below
    // answers with a proper deny.
    std::panic::set_hook(Box::new(|_| {}));
    let response = std::panic::catch_unwind(run).unwrap_or_else(|_| contract::panic_response());
    // Nothing flushes at exit any more (std's runtime did): write and flush here.
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(response.stdout.as_bytes());
    let _ = stdout.flush();
    let _ = std::io::stderr()
        .lock()
        .write_all(response.stderr.as_bytes());
    c_int::from(u8::try_from(response.exit_code).unwrap_or(2))
}

/// Puts `/dev/null` on whichever of fds 0, 1 and 2 is closed, as std's start did: otherwise the
/// next file the hook opens (the policy, the audit socket) would take its number, and the
/// answer meant for stdout would be written into it.
fn reopen_closed_standard_fds() {
    /// Linux's `EBADF` (the same number on every architecture).
    const EBADF: i32 = 9;
    let (stdin, stdout, stderr) = (std::io::stdin(), std::io::stdout(), std::io::stderr());
    let fds: [BorrowedFd<'_>; 3] = [stdin.as_fd(), stdout.as_fd(), stderr.as_fd()];
    for fd in fds {
        // Duplicating (fcntl F_DUPFD_CLOEXEC) is the safe way to ask whether a number is open.
        match fd.try_clone_to_owned() {
            Err(e) if e.raw_os_error() == Some(EBADF) => {
                // The lowest free number is this one: the ones below it are open or were just
                // reopened.
                let reopened = OpenOptions::new().read(true).write(true).open("/dev/null");
                match reopened {
                    Ok(file) if file.as_raw_fd() == fd.as_raw_fd() => {
                        // Keep it open for the rest of the process.
                        let _ = file.into_raw_fd();
                    }
                    // Std aborted here too: no answer can be trusted to reach its reader.
                    _ => std::process::abort(),
                }
            }
            // Open (the duplicate closes at once), or some other error (out of descriptors):
            // the number is taken either way.
            _ => {}
        }
    }
}

fn run() -> Response {
    let args = match Args::parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(e) => {
            // A broken command line only comes from a broken install: block, say why.
            let verdict = Verdict::fail_closed(format!(
                "StepProof denied this call: {e} (rule fail-closed)."
            ));
            return contract::pre_tool_use_answer(&verdict);
        }
    };
    let mut input = Vec::new();
    let limit = u64::try_from(MAX_INPUT_BYTES + 1).unwrap_or(u64::MAX);
    if let Err(e) = std::io::stdin().lock().take(limit).read_to_end(&mut input) {
        let fake = serde_json::json!({ "unreadable": e.to_string() }).to_string();
        return contract::respond(&args, fake.as_bytes());
    }
    let response = contract::respond(&args, &input);
    let Some(socket) = &args.audit_socket else {
        return response;
    };
    // A lost record never changes the answer; the supervisor sees the gap. Its answer may only
    // add to a deny's reason (a loop of denials): without one the deny stands as it was.
    match audit::send(socket, &response.records, audit::SEND_TIMEOUT) {
        Ok(Some(answer)) => contract::with_supervisor_answer(response, &answer),
        _ => response,
    }
}
