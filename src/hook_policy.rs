//! The bridge to the hook crate: compiling a profile's `[hook]` section into the policy file
//! the hook binary reads inside the sandbox, and trying a call against it (`stepproof check`).

use crate::profile::Profile;
use std::path::Path;
use stepproof_hook::config::HookConfig;
use stepproof_hook::policy::{CompiledPolicy, Context, compile};

pub fn compile_policy(
    config: &HookConfig,
    home: &Path,
    workspace: &Path,
    profile: &str,
) -> Result<CompiledPolicy, String> {
    let context = Context {
        workspace: workspace.to_path_buf(),
        home: home.to_path_buf(),
        profile_name: profile.to_string(),
    };
    compile(config, &context).map_err(|e| e.to_string())
}

/// The compiled policy as JSON, as mounted at /run/stepproof/policy.json.
pub fn compile_json(
    config: &HookConfig,
    home: &Path,
    workspace: &Path,
    profile: &str,
) -> Result<String, String> {
    let policy = compile_policy(config, home, workspace, profile)?;
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
    compile_policy(config, home, workspace, &profile.name)
}
