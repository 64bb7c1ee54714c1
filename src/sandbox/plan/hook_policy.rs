//! The bridge to the hook crate: compiling a profile's `[hook]` section into the policy file
//! the hook binary reads inside the sandbox, and trying a call against it (`stepproof check`).

use crate::profile::Profile;
use std::path::Path;
use stepproof_hook::config::HookConfig;
use stepproof_hook::policy::{CompiledPolicy, Context, compile};

pub use stepproof_hook::config::{PROTECTED_TOKEN, protected_patterns};

/// The profile's `[hook]` section compiled for this workspace and home.
pub fn compile_policy(
    profile: &Profile,
    config: &HookConfig,
    home: &Path,
    workspace: &Path,
) -> Result<CompiledPolicy, String> {
    let context = Context {
        workspace: workspace.to_path_buf(),
        home: home.to_path_buf(),
        profile_name: profile.name.clone(),
    };
    let config = config.with_protected(&profile.filesystem.protected);
    compile(&config, &context).map_err(|e| e.to_string())
}

/// The compiled policy in the hook's file format (`stepproof_hook::load`), as mounted at
/// /run/stepproof/policy.
pub fn compile_file(
    profile: &Profile,
    config: &HookConfig,
    home: &Path,
    workspace: &Path,
) -> Result<Vec<u8>, String> {
    let policy = compile_policy(profile, config, home, workspace)?;
    stepproof_hook::load::encode(&policy).map_err(|e| e.to_string())
}

/// The profile's compiled policy for this workspace and home, or why there is none.
pub fn profile_policy(
    profile: &Profile,
    home: &Path,
    workspace: &Path,
) -> Result<CompiledPolicy, String> {
    let config = profile
        .hook
        .as_ref()
        .ok_or_else(|| format!("profile {} has no [hook] section", profile.name))?;
    compile_policy(profile, config, home, workspace)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One copy of each built-in policy: what the hook crate's tests read (the profile files
    /// through `stepproof_hook::BUILTIN_*`, merged over what they extend, `@protected`
    /// expanded) compiles to exactly what StepProof installs for the same profile.
    #[test]
    fn what_ships_is_what_the_hook_crate_tests() {
        fn layer(text: &str) -> (stepproof_hook::config::HookConfig, Vec<String>) {
            let value: toml::Value = toml::from_str(text).unwrap();
            let hook = value
                .get("hook")
                .map(|h| h.clone().try_into().unwrap())
                .unwrap_or_default();
            let protected: Vec<String> = value
                .get("filesystem")
                .and_then(|f| f.get("protected"))
                .map(|p| p.clone().try_into().unwrap())
                .unwrap_or_default();
            match value.get("extends").and_then(|e| e.as_str()) {
                None => (hook, protected),
                Some("default") => {
                    let (base, mut names) = layer(stepproof_hook::BUILTIN_DEFAULT);
                    for name in protected {
                        if !names.contains(&name) {
                            names.push(name);
                        }
                    }
                    (stepproof_hook::config::HookConfig::merge(base, hook), names)
                }
                Some(other) => panic!("extends {other}"),
            }
        }
        let (home, ws) = (Path::new("/home/dev"), Path::new("/work/project"));
        for (name, text) in [
            ("default", stepproof_hook::BUILTIN_DEFAULT),
            ("ci", stepproof_hook::BUILTIN_CI),
            ("strict", stepproof_hook::BUILTIN_STRICT),
        ] {
            let file = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("profiles/{name}.toml"));
            assert_eq!(std::fs::read_to_string(&file).unwrap(), text, "{name}");
            let profile = Profile::load(Some(&file)).unwrap();
            let installed = profile_policy(&profile, home, ws).unwrap();
            let (hook, protected) = layer(text);
            let context = Context {
                workspace: ws.to_path_buf(),
                home: home.to_path_buf(),
                profile_name: profile.name.clone(),
            };
            let tested = compile(&hook.with_protected(&protected), &context).unwrap();
            assert_eq!(
                serde_json::to_value(&installed).unwrap(),
                serde_json::to_value(&tested).unwrap(),
                "{name}"
            );
        }
    }

    #[test]
    fn the_hook_denies_writes_to_every_protected_name() {
        let profile = Profile::builtin_default().unwrap();
        let config = profile.hook.as_ref().unwrap();
        let expanded = config.with_protected(&profile.filesystem.protected);
        let rule = expanded
            .files
            .iter()
            .find(|r| r.id == "protected-paths")
            .unwrap();
        assert!(!rule.paths.iter().any(|p| p == PROTECTED_TOKEN));
        for name in &profile.filesystem.protected {
            assert!(rule.paths.contains(&format!("**/{name}/**")), "{name}");
        }
        // And the compiled policy acts on them, in the workspace and in nested repositories.
        let ws = Path::new("/w");
        let policy = profile_policy(&profile, Path::new("/h"), ws).unwrap();
        let call = stepproof_hook::policy::CallContext {
            cwd: Some("/w"),
            effects: None,
        };
        let write = |path: &str| {
            let input = serde_json::json!({ "file_path": path, "content": "x" });
            policy.check("Write", &input, &call)
        };
        for path in [
            "/w/.envrc",
            "/w/.claude/settings.json",
            "/w/.claude/hooks/pre.sh",
            "/w/sub/.github/workflows/ci.yml",
            "/w/rust-toolchain.toml",
            "/w/.git/config",
        ] {
            let verdict = write(path);
            assert_eq!(verdict.rule_id, "protected-paths", "{path}: {verdict:?}");
        }
        for path in ["/w/src/main.rs", "/w/.claude/worktrees/x/src/lib.rs"] {
            assert_ne!(write(path).rule_id, "protected-paths", "{path}");
        }
    }
}
