//! StepProof.
