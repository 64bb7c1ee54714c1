//! The bridge to the hook crate: compiling a profile's `[hook]` section into the policy file
//! the hook binary reads inside the sandbox, and trying a call against it (`stepproof check`).

use crate::profile::Profile;
use std::path::Path;
use stepproof_hook::config::HookConfig;
use stepproof_hook::policy::{CompiledPolicy, Context, compile};

/// In a `[[hook.files]]` rule's `paths`: every name of `filesystem.protected`, in the workspace
/// and in any directory below it (nested repositories), and what is below it. One table of
/// persistence names serves the kernel (read-only binds, the sweep) and the hook.
pub const PROTECTED_TOKEN: &str = "@protected";

/// The hook patterns `@protected` stands for (`dir/**` also matches `dir` itself).
pub fn protected_patterns(protected: &[String]) -> Vec<String> {
    protected
        .iter()
        .map(|name| format!("**/{}/**", name.trim_matches('/')))
        .collect()
}

/// `config` with `@protected` replaced by the profile's persistence names.
fn expand_protected(config: &HookConfig, protected: &[String]) -> HookConfig {
    let mut config = config.clone();
    for rule in &mut config.files {
        if rule.paths.iter().any(|p| p == PROTECTED_TOKEN) {
            let mut paths = Vec::with_capacity(rule.paths.len() + 2 * protected.len());
            for path in std::mem::take(&mut rule.paths) {
                if path == PROTECTED_TOKEN {
                    paths.extend(protected_patterns(protected));
                } else {
                    paths.push(path);
                }
            }
            rule.paths = paths;
        }
    }
    config
}

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
    let config = expand_protected(config, &profile.filesystem.protected);
    compile(&config, &context).map_err(|e| e.to_string())
}

/// The compiled policy as JSON, as mounted at /run/stepproof/policy.json.
pub fn compile_json(
    profile: &Profile,
    config: &HookConfig,
    home: &Path,
    workspace: &Path,
) -> Result<String, String> {
    let policy = compile_policy(profile, config, home, workspace)?;
    serde_json::to_string(&policy).map_err(|e| e.to_string())
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

    #[test]
    fn the_hook_denies_writes_to_every_protected_name() {
        let profile = Profile::builtin_default().unwrap();
        let config = profile.hook.as_ref().unwrap();
        let expanded = expand_protected(config, &profile.filesystem.protected);
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
