//! What the sandbox sees of the run: `state.json`, the per-step policies and the status text,
//! published atomically.

use super::{Ending, Engine, Status, io_err};
use serde_json::Value;
use serde_json::json;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

impl Engine {
    pub(super) fn state_json(&self) -> Value {
        json!({
            "runbook": self.runbook.id,
            "title": self.runbook.title,
            "hash": self.hash,
            "open": self.open_ids(),
            "ended": self.ending.as_ref().map(|e| match e {
                Ending::Blocked { step } => json!({ "ending": "evidence-failed", "step": step }),
                Ending::Abandoned { step, requested } => json!({ "ending": "abandoned", "step": step, "requested": requested }),
                Ending::ApprovalMissing { step, missing } => json!({ "ending": "approval-missing", "step": step, "missing": missing }),
            }),
            "steps": self.runbook.steps.iter().zip(&self.steps).map(|(step, s)| json!({
                "id": step.id,
                "title": step.title,
                "status": s.status,
                "attempts": s.attempts,
                "max_attempts": step.attempts(),
                "depends_on": step.depends_on,
                "instructions": step.instructions,
                "acceptance": step.acceptance,
                "allows": crate::runbook::policy::allows_text(step),
                "protects": step.protected_paths().into_iter().map(|p| p.glob).collect::<Vec<_>>(),
                "denied_words": crate::runbook::policy::denied_words(step),
                "last_verdict": s.last_verdict,
                "approval": s.approval_missing.as_ref().map(super::not_approved::Missing::word),
            })).collect::<Vec<_>>(),
        })
    }

    pub(super) fn status_text(&self) -> String {
        let mut out = format!("runbook {}: {}\n", self.runbook.id, self.runbook.title);
        for (step, s) in self.runbook.steps.iter().zip(&self.steps) {
            let status = match s.status {
                Status::Waiting => "waiting",
                Status::Open => "OPEN",
                Status::Passed => "passed",
                Status::Failed => "FAILED",
                Status::Abandoned => "ABANDONED",
                Status::Void => "VOID",
            };
            out.push_str(&format!(
                "  {:8} {} — {} (attempts {}/{})\n",
                status,
                step.id,
                step.title,
                s.attempts,
                step.attempts()
            ));
            if s.approval_missing == Some(super::not_approved::Missing::Pending) {
                out.push_str("           waiting for a person's approval: you will be told the answer on your next tool call or prompt\n");
            }
            if s.status == Status::Open {
                for line in step.instructions.trim().lines() {
                    out.push_str(&format!("           {line}\n"));
                }
                out.push_str(&format!(
                    "           allows: {}\n",
                    crate::runbook::policy::allows_text(step)
                ));
                let protected: Vec<String> = step
                    .protected_paths()
                    .into_iter()
                    .map(|p| format!("`{}`", p.glob))
                    .collect();
                if !protected.is_empty() {
                    out.push_str(&format!(
                        "           protects (must be as it was when the step opened, whatever would change it): {}\n",
                        protected.join(", ")
                    ));
                }
            }
        }
        out
    }

    /// Writes `state.json` and the open steps' policies, each atomically; then removes the
    /// policies of steps no longer open, the last first (the hook reads them in order until
    /// one is missing, so at no moment does it read fewer than it should).
    pub(super) fn publish(&mut self) -> Result<(), String> {
        if self.closed {
            return Ok(());
        }
        let state = serde_json::to_vec_pretty(&self.state_json()).map_err(|e| e.to_string())?;
        write_atomic(&self.dir, "state.json", &state)?;
        let mut policies = Vec::new();
        if let Some(ending) = &self.ending {
            // The run stops: a policy with no rule and a deny default, named for the step.
            let step = match ending {
                Ending::Blocked { step }
                | Ending::Abandoned { step, .. }
                | Ending::ApprovalMissing { step, .. } => step,
            };
            let config = stepproof_hook::config::HookConfig {
                default: Some(stepproof_hook::Decision::Deny),
                unknown: Some(stepproof_hook::Decision::Deny),
                unknown_tool: Some(stepproof_hook::Decision::Deny),
                summary: Some("nothing: the run has stopped".into()),
                ..Default::default()
            };
            let context = stepproof_hook::policy::Context {
                workspace: self.inside_workspace.clone(),
                home: self.inside_home.clone(),
                profile_name: format!(
                    "runbook {}, stopped: step {step}'s evidence did not hold",
                    self.runbook.id
                ),
            };
            policies.push(
                stepproof_hook::policy::compile(&config, &context).map_err(|e| e.to_string())?,
            );
        } else {
            for (step, s) in self.runbook.steps.iter().zip(&self.steps) {
                if s.status == Status::Open {
                    policies.push(crate::runbook::policy::compile_step(
                        &self.runbook,
                        step,
                        &self.inside_home,
                        &self.inside_workspace,
                    )?);
                }
            }
        }
        for (n, policy) in policies.iter().enumerate() {
            let bytes = stepproof_hook::load::encode(policy).map_err(|e| e.to_string())?;
            write_atomic(
                &self.dir,
                &crate::runbook::policy::policy_file_name(n),
                &bytes,
            )?;
        }
        for n in (policies.len()..self.policies_written.max(policies.len())).rev() {
            let path = self.dir.join(crate::runbook::policy::policy_file_name(n));
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(format!("removing {}: {e}", path.display())),
            }
        }
        self.policies_written = policies.len();
        Ok(())
    }
}

/// `dir/name` replaced atomically: written under a temporary name (0644), then renamed.
pub(super) fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), String> {
    let tmp = dir.join(format!(".{name}.tmp"));
    let path = dir.join(name);
    let _ = std::fs::remove_file(&tmp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)
        .map_err(io_err("writing", &tmp))?;
    file.write_all(bytes).map_err(io_err("writing", &tmp))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o644))
        .map_err(io_err("chmod", &tmp))?;
    std::fs::rename(&tmp, &path).map_err(io_err("renaming into place", &path))
}
