//! StepProof.
#![deny(unsafe_code)]

pub mod probes;
pub mod sandbox;
