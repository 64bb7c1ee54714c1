//! StepProof's hook: Claude Code's hook contract, the policy language and its evaluation.
//!
//! The launcher compiles a profile's `[hook]` section ([`config::HookConfig`]) with
//! [`policy::compile`] and mounts the [`policy::CompiledPolicy`] read-only, in the binary format
//! of [`load`]; the `stepproof-hook` binary loads what each call needs of it and answers through
//! [`contract`]. [`check_tool`] and [`render_check`] serve `stepproof check`.
#![forbid(unsafe_code)]

pub mod audit;
pub mod config;
pub mod contract;
pub mod decision;
pub mod disposable;
pub mod load;
pub mod pattern;
pub mod policy;
pub mod shell;

pub use contract::{HookInput, check_tool, evaluate};
pub use decision::{Decision, Verdict, render_check};

/// The built-in `default` profile as it ships (`profiles/default.toml`: one copy, read by
/// StepProof and by this crate's tests alike; `hooks/profiles` is a link to the top-level
/// `profiles/`, which `cargo package` follows, so the published crate carries the files); its
/// `[hook]` is a developer at the terminal.
pub const BUILTIN_DEFAULT: &str = include_str!("../profiles/default.toml");
/// The built-in `ci` profile (unattended runs), which extends `default`.
pub const BUILTIN_CI: &str = include_str!("../profiles/ci.toml");
/// The built-in `strict` profile (reviewing untrusted code), which extends `default`.
pub const BUILTIN_STRICT: &str = include_str!("../profiles/strict.toml");
