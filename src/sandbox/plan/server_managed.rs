//! The organisation's server-managed settings in the plan. Claude Code takes one managed
//! source, first wins, and server-managed settings win over `/etc/claude-code`; the launch
//! fetches them outside with the real login (`supervisor::net::server_settings::at_launch`),
//! and the plan takes the answer here: the one part of the view whose contents only the launch
//! can know (like the run's trust files), carried in by the plan's own code. `stepproof
//! explain` says where it would come ([`SandboxPlan::server_settings_slot`]).

use crate::sandbox::plan::agent_layer::{DROP_IN_DIR, MANAGED_DIR, merge_managed};
use crate::sandbox::plan::{MountOp, SandboxPlan};
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

/// The drop-in the organisation's settings are written to.
pub const DROP_IN_NAME: &str = "000-server-managed-settings.json";

/// What the launch's own fetch found.
#[derive(Debug, Clone, PartialEq)]
pub enum Fetched {
    /// The organisation has none (204, 404, an empty object).
    NoneConfigured,
    /// Its settings without the keys StepProof owns, and those keys.
    Settings {
        settings: Map<String, Value>,
        removed: Vec<String>,
    },
    /// Not usable: the organisation's server settings do not apply in this run.
    Failed(String),
}

impl SandboxPlan {
    /// Where the organisation's settings would go: the drop-in in the agent's generated
    /// managed directory (none without an agent layer).
    pub fn server_settings_slot(&self) -> Option<PathBuf> {
        self.managed_ours.as_ref()?;
        self.mounts.iter().find_map(|op| match op {
            MountOp::Generated { dst, .. } if dst == Path::new(MANAGED_DIR) => {
                Some(dst.join(DROP_IN_DIR).join(DROP_IN_NAME))
            }
            _ => None,
        })
    }

    /// Takes what the launch fetched from `url`: settings become the drop-in [`DROP_IN_NAME`]
    /// over StepProof's managed file, in place of the host's managed documents (server-managed
    /// settings win over `/etc/claude-code` on the host too), with the merged view and the
    /// removed keys; none, or a failure, is a note.
    pub fn take_server_settings(&mut self, url: &str, fetched: Fetched) {
        match fetched {
            Fetched::NoneConfigured => self
                .notes
                .push("server-managed settings: none for this organisation".into()),
            Fetched::Settings { settings, removed } => self.carry_in(settings, removed),
            Fetched::Failed(why) => self.notes.push(format!(
                "WARNING: the organisation's server-managed settings could not be fetched from {url} ({why}): they do not apply in this run; StepProof's managed settings and the host's files do"
            )),
        }
    }

    fn carry_in(&mut self, settings: Map<String, Value>, removed: Vec<String>) {
        let drop_ins = Path::new(DROP_IN_DIR);
        let mut replaced = Vec::new();
        for op in &mut self.mounts {
            if let MountOp::Generated { dst, files } = op
                && dst == Path::new(MANAGED_DIR)
            {
                files.retain(|(rel, _)| {
                    let host_document = rel.parent() == Some(drop_ins);
                    if host_document {
                        replaced.push(rel.clone());
                    }
                    !host_document
                });
                files.push((
                    PathBuf::from(DROP_IN_DIR).join(DROP_IN_NAME),
                    serde_json::to_string_pretty(&Value::Object(settings.clone()))
                        .expect("JSON values serialize"),
                ));
            }
        }
        if let Some(ours) = &self.managed_ours {
            self.managed_settings = Some(merge_managed(ours, std::slice::from_ref(&settings)));
        }
        // The host's documents are not carried in now: what was removed from them is moot.
        self.managed_settings_removed.clear();
        self.managed_settings_removed.extend(
            removed
                .into_iter()
                .map(|key| format!("server-managed settings: {key}")),
        );
        let keys: Vec<&str> = settings.keys().map(String::as_str).collect();
        self.notes.push(format!(
            "the organisation's server-managed settings apply inside (keys: {}){}",
            keys.join(", "),
            if replaced.is_empty() {
                String::new()
            } else {
                format!(
                    "; they take the place of the host's managed files, as on the host ({} left out)",
                    replaced.len()
                )
            }
        ));
    }
}
