//! Shared helpers: the built-in profiles compiled for a fixed workspace and home.
#![allow(dead_code)]

use std::path::PathBuf;

use serde::Deserialize;
use stepproof_hook::config::HookConfig;
use stepproof_hook::policy::{CompiledPolicy, Context, compile};

pub const WORKSPACE: &str = "/work/project";
pub const HOME: &str = "/home/dev";

/// What of a profile file the hook needs: its `[hook]`, the persistence names `@protected`
/// stands for, and the profile it extends (the rest is StepProof's).
#[derive(Deserialize)]
struct Fragment {
    extends: Option<String>,
    hook: Option<HookConfig>,
    filesystem: Option<Filesystem>,
}

#[derive(Deserialize)]
struct Filesystem {
    #[serde(default)]
    protected: Vec<String>,
}

/// A built-in profile's `[hook]` as StepProof compiles it: merged over the profile it extends
/// (as `Profile::load` does) and with `@protected` expanded.
pub fn builtin_config(name: &str) -> HookConfig {
    let (hook, protected) = layer(name);
    hook.with_protected(&protected)
}

fn layer(name: &str) -> (HookConfig, Vec<String>) {
    let text = match name {
        "default" => stepproof_hook::BUILTIN_DEFAULT,
        "ci" => stepproof_hook::BUILTIN_CI,
        "strict" => stepproof_hook::BUILTIN_STRICT,
        other => panic!("no built-in profile {other}"),
    };
    let fragment =
        toml::from_str::<Fragment>(text).unwrap_or_else(|e| panic!("builtin {name}: {e}"));
    let hook = fragment.hook.unwrap_or_default();
    let protected = fragment.filesystem.map(|f| f.protected).unwrap_or_default();
    match fragment.extends.as_deref() {
        None => (hook, protected),
        Some(base) => {
            let (base_hook, mut base_protected) = layer(base);
            for name in protected {
                if !base_protected.contains(&name) {
                    base_protected.push(name);
                }
            }
            (HookConfig::merge(base_hook, hook), base_protected)
        }
    }
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
