//! The sandbox: the plan as data and the code that applies it inside the new namespaces.

pub mod caps;
pub mod env;
pub mod init;
pub mod mounts;
pub mod namespaces;
pub mod plan;
pub mod sys;
