//! The bridge to the hook crate: compiling a profile's `[hook]` section into the policy file
//! the hook binary reads inside the sandbox.

use std::path::Path;
use stepproof_hook::config::HookConfig;

/// The compiled policy as JSON.
pub fn compile_json(
    config: &HookConfig,
    _home: &Path,
    _workspace: &Path,
    _profile: &str,
) -> Result<String, String> {
    serde_json::to_string(config).map_err(|e| e.to_string())
}
