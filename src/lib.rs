//! StepProof: run an AI coding agent (or any command) inside a Linux sandbox built from user,
//! mount, pid, ipc, uts and network namespaces, Landlock and seccomp, with no capabilities and
//! `no_new_privs`.
//!
//! The profile (`profile`) becomes a plan of plain data (`sandbox::plan`) that `stepproof
//! explain` prints and the thin executors (`sandbox::mounts`, `sandbox::init`,
//! `supervisor::launch`) apply.
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

pub mod audit;
pub mod ci;
pub mod doctor;
pub mod exit;
pub mod explain;
pub mod host;
pub mod logging;
pub mod probes;
pub mod profile;
pub mod regular_file;
pub mod run;
pub mod runbook;
pub mod sandbox;
pub mod selftest;
pub mod state;
pub mod supervisor;
