//! The sandbox: the plan as data and the code that applies it inside the new namespaces —
//! mounts, identity, Landlock, seccomp, limits.

pub mod caps;
pub mod channels;
pub mod events;
pub mod fdpass;
pub mod init;
pub mod landlock;
pub mod mounts;
pub mod namespaces;
pub mod plan;
pub mod report;
pub mod rlimits;
pub mod seccomp;
pub mod terminal;
