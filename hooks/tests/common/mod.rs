//! Shared helpers: the built-in profiles compiled for a fixed workspace and home.
#![allow(dead_code)]

use std::path::PathBuf;

use serde::Deserialize;
use stepproof_hook::config::HookConfig;
use stepproof_hook::policy::{CompiledPolicy, Context, compile};

pub const WORKSPACE: &str = "/work/project";
pub const HOME: &str = "/home/dev";

#[derive(Deserialize)]
struct Fragment {
    hook: HookConfig,
}

pub fn builtin_config(name: &str) -> HookConfig {
    let text = match name {
        "default" => stepproof_hook::BUILTIN_DEFAULT,
        "ci" => stepproof_hook::BUILTIN_CI,
        "strict" => stepproof_hook::BUILTIN_STRICT,
        other => panic!("no built-in profile {other}"),
    };
    toml::from_str::<Fragment>(text)
        .unwrap_or_else(|e| panic!("builtin {name}: {e}"))
        .hook
}

pub fn context(name: &str) -> Context {
    Context {
        workspace: PathBuf::from(WORKSPACE),
        home: PathBuf::from(HOME),
        profile_name: name.to_string(),
    }
}

pub fn builtin(name: &str) -> CompiledPolicy {
    compile(&builtin_config(name), &context(name)).unwrap_or_else(|e| panic!("builtin {name}: {e}"))
}
