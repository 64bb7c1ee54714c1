//! The `[hook]` section of a profile, as written by people.

use serde::{Deserialize, Serialize};

/// Placeholder until the hook issue lands: the section is accepted and kept verbatim.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookConfig {}

impl HookConfig {
    /// A child profile's section on top of its parent's.
    pub fn merge(_base: HookConfig, child: HookConfig) -> HookConfig {
        child
    }
}
