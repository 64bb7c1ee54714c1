//! StepProof: run an AI coding agent (or any command) inside a Linux sandbox built from user,
//! mount, pid, ipc, uts and network namespaces, Landlock and seccomp, with no capabilities and
//! `no_new_privs`.
//!
//! The profile (`profile`) becomes a plan of plain data (`sandbox::plan`) that `stepproof
//! explain` prints and the thin executors (`sandbox::mounts`, `sandbox::init`,
//! `supervisor::launch::start`) apply.
#![deny(unsafe_code)]

/// `eprintln!` that never panics: a closed or broken stderr loses the line, not the run (its
/// status file, sweep and end record).
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// `eprint!` that never panics.
#[macro_export]
macro_rules! say_part {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stderr(), $($arg)*);
    }};
}

/// `println!` that never panics: `stepproof explain | head -1` ends the reader, not us.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

/// `print!` that never panics.
#[macro_export]
macro_rules! out_part {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout(), $($arg)*);
    }};
}

/// `--version`: the package version and the commit it was built from (`build.rs`).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("STEPPROOF_COMMIT"),
    ")"
);

pub mod audit;
pub mod cli;
pub mod exit;
pub mod http;
pub mod profile;
pub mod regular_file;
pub mod runbook;
pub mod sandbox;
pub mod supervisor;
// Raw system calls: the crate's one room allowed `unsafe`, each block with its SAFETY note.
#[allow(unsafe_code)]
pub mod sys;
