//! Each step's evidence: one kind per item, with the fields that kind needs, and what a proof
//! would have to trust (an error under `strict`).

use super::{Checker, Severity, step_path};

use crate::runbook::{Evidence, Id, Seg, Step, Verifiers};

impl Checker<'_> {
    pub(super) fn evidence(&mut self, index: usize, step: &Step, verifiers: Option<&Verifiers>) {
        let id = &step.id;
        if step.evidence.is_empty() {
            self.error(
                &step_path(index),
                format!(
                    "step `{id}` has no evidence: every step is proven by something the agent cannot write (add `[[steps.evidence]]` with one of command, files_exist, files_changed, files_unchanged, approval, verifier)"
                ),
            );
            return;
        }
        for (at, item) in step.evidence.iter().enumerate() {
            let mut path = step_path(index);
            path.extend([Seg::Key("evidence"), Seg::Index(at)]);
            let kinds = item.kinds();
            match kinds.as_slice() {
                [] => self.error(
                    &path,
                    format!(
                        "step `{id}`: an evidence item names no kind: set one of command, files_exist, files_changed, files_unchanged, approval, verifier"
                    ),
                ),
                [_] => self.evidence_item(&path, id, step, item, verifiers),
                [a, b, ..] => {
                    path.push(Seg::Key(b));
                    self.error(
                        &path,
                        format!(
                            "step `{id}`: an evidence item sets both `{a}` and `{b}`: one kind per item (write two items)"
                        ),
                    );
                }
            }
        }
        // A change the step asks for where it protects the same paths can never be made.
        let protected = step.protected_paths();
        for (at, item) in step.evidence.iter().enumerate() {
            for (n, glob) in item
                .files_changed
                .iter()
                .flat_map(|f| f.paths.iter().enumerate())
            {
                let glob = glob.trim_start_matches("./");
                let Some(by) = protected.iter().find(|p| p.glob == glob) else {
                    continue;
                };
                let mut path = step_path(index);
                path.extend([
                    Seg::Key("evidence"),
                    Seg::Index(at),
                    Seg::Key("files_changed"),
                    Seg::Key("paths"),
                    Seg::Index(n),
                ]);
                let what = match &by.by {
                    crate::runbook::ProtectedBy::DenyRule(rule) => format!("deny rule `{rule}`"),
                    crate::runbook::ProtectedBy::Item(item) => {
                        format!("files_unchanged (item {item})")
                    }
                };
                self.error(
                    &path,
                    format!(
                        "step `{id}`: files_changed {glob:?} can never hold: the step protects the same paths ({what}), so nothing there may change"
                    ),
                );
            }
        }
        let only_verifiers = step.evidence.iter().all(|e| e.verifier.is_some());
        if only_verifiers {
            self.add(
                Severity::Warning,
                &step_path(index),
                format!(
                    "step `{id}` is proven by model verifiers only: a verifier reads what the worker wrote, and workspace text can try to talk it into a pass; add a command, files or approval evidence"
                ),
            );
        }
    }

    fn evidence_item(
        &mut self,
        path: &[Seg<'_>],
        id: &Id,
        step: &Step,
        item: &Evidence,
        verifiers: Option<&Verifiers>,
    ) {
        let at = |key: &'static str| {
            let mut p = path.to_vec();
            p.push(Seg::Key(key));
            p
        };
        if let Some(command) = &item.command
            && command
                .run
                .first()
                .is_none_or(|program| program.trim().is_empty())
        {
            let mut p = at("command");
            p.push(Seg::Key("run"));
            self.error(
                &p,
                format!("step `{id}`: the evidence command's `run` names no program"),
            );
        }
        if let Some(command) = &item.command {
            let strict = self.strict;
            let defs =
                crate::runbook::definitions::of_command(&command.run, std::path::Path::new("/"));
            for (n, trusted) in command.trust.iter().enumerate() {
                let mut p = at("command");
                p.push(Seg::Key("trust"));
                p.push(Seg::Index(n));
                let dir = trusted.trim_start_matches("./").trim_end_matches('/');
                if defs.build_state.iter().any(|b| b == dir) && strict {
                    self.error(
                        &p,
                        format!(
                            "step `{id}`: the runbook is strict: the proof of `{}` may not trust {trusted:?} as the agent left it (build state the agent can forge); drop `trust` (the evidence sandbox then rebuilds it) or `strict`",
                            crate::audit::text::command_line(&command.run)
                        ),
                    );
                } else if defs.build_state.iter().any(|b| b == dir) {
                    self.add(
                        Severity::Warning,
                        &p,
                        format!(
                            "step `{id}`: the proof of `{}` trusts {trusted:?} as the agent left it (build state the agent can forge: compiled tests, fingerprints, installed packages); a pass says so",
                            crate::audit::text::command_line(&command.run)
                        ),
                    );
                } else {
                    self.error(
                        &p,
                        format!(
                            "step `{id}`: trust {trusted:?} is no build state `{}` reuses (it knows: {})",
                            crate::audit::text::command_line(&command.run),
                            if defs.build_state.is_empty() {
                                "none".to_string()
                            } else {
                                defs.build_state.join(", ")
                            }
                        ),
                    );
                }
            }
            if !defs.unknown.is_empty() {
                let mut p = at("command");
                p.push(Seg::Key("run"));
                self.add(
                    if strict {
                        Severity::Error
                    } else {
                        Severity::Warning
                    },
                    &p,
                    format!(
                        "step `{id}`: {}what defines `{}` is not all known before it runs ({}): only what is known is frozen",
                        if strict { "the runbook is strict: " } else { "" },
                        crate::audit::text::command_line(&command.run),
                        defs.unknown.join("; ")
                    ),
                );
            }
        }
        for (key, paths) in [
            ("files_exist", item.files_exist.as_ref().map(|f| &f.paths)),
            (
                "files_changed",
                item.files_changed.as_ref().map(|f| &f.paths),
            ),
            (
                "files_unchanged",
                item.files_unchanged.as_ref().map(|f| &f.paths),
            ),
        ] {
            let Some(paths) = paths else { continue };
            let mut p = at(key);
            p.push(Seg::Key("paths"));
            if paths.is_empty() {
                self.error(&p, format!("step `{id}`: `{key}` names no path"));
            }
            for (n, glob) in paths.iter().enumerate() {
                let bad = glob.trim().is_empty()
                    || glob.starts_with('/')
                    || glob.starts_with('~')
                    || glob.split('/').any(|c| c == ".." || c == ".");
                if bad {
                    let mut q = p.clone();
                    q.push(Seg::Index(n));
                    self.error(
                        &q,
                        format!(
                            "step `{id}`: {key} path {glob:?} must be a glob relative to the workspace (no `/` or `~` at the start, no `.` or `..` components)"
                        ),
                    );
                }
            }
        }
        if let Some(approval) = &item.approval
            && approval.approvers.trim().is_empty()
        {
            let mut p = at("approval");
            p.push(Seg::Key("approvers"));
            self.error(
                &p,
                format!("step `{id}`: the approval's `approvers` is empty: say who is asked"),
            );
        }
        if let Some(verifier) = &item.verifier {
            let mut p = at("verifier");
            if !(2..=3).contains(&verifier.tier) {
                p.push(Seg::Key("tier"));
                self.error(
                    &p,
                    format!(
                        "step `{id}`: verifier tier {} does not exist: 2 (a fast model) or 3 (a thorough one)",
                        verifier.tier
                    ),
                );
            } else if step.acceptance.is_empty() {
                self.error(
                    &p,
                    format!(
                        "step `{id}`: a verifier judges the step's acceptance criteria, and it has none: add `acceptance`"
                    ),
                );
            } else if verifiers.is_none_or(|v| v.models(verifier.tier).is_empty()) {
                p.push(Seg::Key("tier"));
                self.error(
                    &p,
                    format!(
                        "step `{id}`: verifier tier {tier} names no model: add `[verifiers]` with `tier{tier} = [\"MODEL\", …]` (tried in order)",
                        tier = verifier.tier
                    ),
                );
            }
        }
    }
}
