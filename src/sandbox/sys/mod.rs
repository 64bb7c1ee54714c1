//! The only place with raw `unsafe`: thin wrappers over system calls that no safe crate offers.

pub mod kernel;
pub mod probe;
