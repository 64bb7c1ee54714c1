//! StepProof: run an AI coding agent (or any command) inside a Linux sandbox built from user,
//! mount, pid, ipc, uts and network namespaces, Landlock and seccomp, with no capabilities and
//! `no_new_privs`.
//!
//! The profile (`profile`) becomes a plan of plain data (`sandbox::plan`) that `stepproof
//! explain` prints and the thin executors (`sandbox::mounts`, `sandbox::init`,
//! `supervisor::launch`) apply.
#![deny(unsafe_code)]

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
pub mod sandbox;
pub mod selftest;
pub mod supervisor;
