//! `stepproof runbook explain`: the runbook as the document a reviewer reads, and its hash.
//!
//! The hash is `sha256:` of the canonical JSON of the runbook: its fields in declaration order,
//! every default written out (`on_fail`, attempts, an evidence command's exit code, timeout and
//! network; `include_ignored` and `strict`, added later, are left out at their defaults so
//! that earlier hashes stay), durations in one spelling, `depends_on` sorted (a set). Key order, whitespace,
//! comments and quoting in the file change nothing; any change of meaning changes it.

use super::{
    CommandEvidence, DEFAULT_COMMAND_TIMEOUT_SECONDS, Duration, Evidence, ProtectedBy, Runbook,
    Step, StepRules,
};
use crate::profile::Profile;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

impl Runbook {
    /// The runbook with every default written out and `depends_on` sorted: what the hash
    /// covers.
    pub fn canonical(&self) -> Runbook {
        let mut canonical = self.clone();
        for step in &mut canonical.steps {
            step.depends_on.sort();
            step.on_fail = Some(step.on_fail());
            step.max_attempts = Some(step.attempts());
            for item in &mut step.evidence {
                if let Some(command) = &mut item.command {
                    command.exit_code = Some(command.exit_code.unwrap_or(0));
                    command.timeout = Some(command.timeout());
                    command.network = Some(command.network.unwrap_or(false));
                }
                // Added after runbooks were hashed: its default is left out rather than
                // written, so that their hashes stay.
                for change in [&mut item.files_changed, &mut item.files_unchanged]
                    .into_iter()
                    .flatten()
                {
                    if change.include_ignored == Some(false) {
                        change.include_ignored = None;
                    }
                }
                if let Some(exist) = &mut item.files_exist
                    && exist.include_ignored == Some(false)
                {
                    exist.include_ignored = None;
                }
            }
        }
        // Added later too: left out at its default.
        if canonical.strict == Some(false) {
            canonical.strict = None;
        }
        if let Some(verifiers) = &mut canonical.verifiers {
            verifiers.timeout = Some(verifiers.timeout());
            verifiers.max_tokens = Some(verifiers.max_tokens());
            // `masked` is the default; written or not, one hash.
            if verifiers.show == Some(crate::runbook::ShowWork::Masked) {
                verifiers.show = None;
            }
        }
        canonical
    }

    /// `sha256:` of the canonical form's JSON.
    pub fn hash(&self) -> String {
        let bytes = serde_json::to_vec(&self.canonical()).expect("a runbook always serializes");
        format!("sha256:{}", hex::encode(Sha256::digest(&bytes)))
    }
}

impl CommandEvidence {
    pub fn timeout(&self) -> Duration {
        self.timeout.unwrap_or(Duration {
            seconds: DEFAULT_COMMAND_TIMEOUT_SECONDS,
        })
    }
}

/// The machine-readable document: the canonical runbook, its hash, the steps' dependency
/// order and what it is checked against.
pub fn explain_json(runbook: &Runbook, order: &[usize], profile: &Profile) -> Value {
    let canonical = runbook.canonical();
    json!({
        "id": runbook.id,
        "hash": runbook.hash(),
        "profile": { "name": profile.name, "policy_hash": profile.policy_hash() },
        "order": order.iter().map(|&i| runbook.steps[i].id.as_str()).collect::<Vec<_>>(),
        "runbook": canonical,
    })
}

/// The text a reviewer reads.
pub fn explain_text(runbook: &Runbook, order: &[usize], profile: &Profile) -> String {
    let mut out = String::new();
    let mut line = |text: String| {
        out.push_str(&text);
        out.push('\n');
    };
    line(format!("Runbook {}: {}", runbook.id, runbook.title));
    line(format!("  owner:   {}", runbook.owner));
    line(format!("  hash:    {}", runbook.hash()));
    line(format!(
        "  profile: {} ({}); each step narrows it, none widens it",
        profile.name,
        profile.policy_hash()
    ));
    if runbook.strict() {
        line(
            "  strict:  a proof rests on nothing the agent left as it left it (no `trust`; every command's defining files known)"
                .into(),
        );
    }
    if !runbook.description.trim().is_empty() {
        line(String::new());
        for text in runbook.description.trim().lines() {
            line(format!("  {text}"));
        }
    }
    if let Some(v) = &runbook.verifiers {
        line(String::new());
        line(
            "Model verifiers (a separate Claude Code run per verification: workspace read-only, no writing tool; a model that cannot be reached falls to the next, past the last: inconclusive):"
                .into(),
        );
        for tier in [2u8, 3] {
            let models = v.models(tier);
            line(format!(
                "  tier {tier} ({}): {}",
                if tier == 2 { "fast" } else { "thorough" },
                if models.is_empty() {
                    "no model".to_string()
                } else {
                    models.join(" → ")
                }
            ));
        }
        line(format!(
            "  each verification: at most {} and {} tokens, inside the run's own --timeout",
            v.timeout().render(),
            v.max_tokens()
        ));
        line(format!(
            "  a verifier is shown: {}",
            match v.show() {
                crate::runbook::ShowWork::Masked =>
                    "the step's diff and the evidence commands' output tails, secret-shaped tokens masked by their digests",
                crate::runbook::ShowWork::Digests =>
                    "the names of the files changed and the outputs' digests only",
                crate::runbook::ShowWork::Clear =>
                    "the step's diff and the evidence commands' output tails, as written (show = \"clear\")",
            }
        ));
    }
    line(String::new());
    line(format!(
        "{} step{}, in dependency order:",
        runbook.steps.len(),
        if runbook.steps.len() == 1 { "" } else { "s" }
    ));
    for (n, &index) in order.iter().enumerate() {
        let step = &runbook.steps[index];
        line(String::new());
        for text in step_text(n + 1, step) {
            line(text);
        }
    }
    out
}

fn step_text(number: usize, step: &Step) -> Vec<String> {
    let mut lines = vec![format!("{number}. {} — {}", step.id, step.title)];
    let mut depends = step.depends_on.clone();
    depends.sort();
    lines.push(if depends.is_empty() {
        "   opens: at the start".into()
    } else {
        format!("   opens: when {} complete", depends.join(", "))
    });
    lines.push("   instructions:".into());
    lines.extend(
        step.instructions
            .trim()
            .lines()
            .map(|l| format!("     {l}")),
    );
    if !step.acceptance.is_empty() {
        lines.push("   acceptance:".into());
        lines.extend(step.acceptance.iter().map(|a| format!("     - {a}")));
    }
    if step.allow.is_empty() {
        lines.push("   allows: what the profile allows".into());
    } else {
        lines.push(
            "   allows, of what the profile allows, only (per kind named; other kinds as the profile says):"
                .into(),
        );
        lines.extend(rules_text(&step.allow));
    }
    if !step.deny.is_empty() {
        lines.push("   denies, on top of the profile:".into());
        lines.extend(rules_text(&step.deny));
    }
    lines.push(invariants_text(step));
    let unprotected = step.unprotected_denials();
    if !unprotected.is_empty() {
        lines.push(format!(
            "     (not checked at completion, outside the workspace or a name anywhere: {})",
            unprotected
                .iter()
                .map(|p| format!("`{p}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    lines.push("   evidence (every item must hold):".into());
    lines.extend(
        step.evidence
            .iter()
            .map(|e| format!("     - {}", evidence_text(e))),
    );
    lines.push(match step.on_fail() {
        super::OnFail::Retry => format!(
            "   on fail: retry, {} attempt{} in all, then the run stops",
            step.attempts(),
            if step.attempts() == 1 { "" } else { "s" }
        ),
        super::OnFail::Block => "   on fail: the run stops (block)".into(),
        super::OnFail::Abandon => "   on fail: the run is abandoned".into(),
    });
    lines
}

/// The step's invariants in one line: what must be as it was when the step opened, whatever
/// changed it, and where each comes from.
fn invariants_text(step: &Step) -> String {
    let protected = step.protected_paths();
    if protected.is_empty() {
        return "   invariants: none (no deny file-write rule in the workspace, no files_unchanged)"
            .into();
    }
    let shown: Vec<String> = protected
        .iter()
        .map(|p| {
            let by = match &p.by {
                ProtectedBy::DenyRule(rule) => format!("deny rule {rule}"),
                ProtectedBy::Item(_) => "files_unchanged".to_string(),
            };
            format!("`{}` ({by})", p.glob)
        })
        .collect();
    format!(
        "   invariants (checked at completion, whatever changed them — content, mode, type, links, entries added or removed; ignored files excepted): {}",
        shown.join(", ")
    )
}

fn rules_text(rules: &StepRules) -> Vec<String> {
    let quoted = |list: &[String]| {
        list.iter()
            .map(|p| format!("`{p}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut lines = Vec::new();
    for r in &rules.bash {
        let mut what = quoted(&r.commands);
        if !r.env.is_empty() {
            if !what.is_empty() {
                what.push_str("; ");
            }
            what.push_str(&format!("assigning {}", quoted(&r.env)));
        }
        lines.push(format!("     bash {what} (rule {}: {})", r.id, r.reason));
    }
    for r in &rules.files {
        let access = match r.access {
            stepproof_hook::config::Access::Read => "read",
            stepproof_hook::config::Access::Write => "write",
        };
        lines.push(format!(
            "     files {access} {} (rule {}: {})",
            quoted(&r.paths),
            r.id,
            r.reason
        ));
    }
    for r in &rules.web {
        lines.push(format!(
            "     web {} (rule {}: {})",
            quoted(&r.domains),
            r.id,
            r.reason
        ));
    }
    for r in &rules.tools {
        lines.push(format!(
            "     tools {} (rule {}: {})",
            quoted(&r.names),
            r.id,
            r.reason
        ));
    }
    for r in &rules.agents {
        lines.push(format!(
            "     agents {} (rule {}: {})",
            quoted(&r.types),
            r.id,
            r.reason
        ));
    }
    lines
}

fn evidence_text(item: &Evidence) -> String {
    if let Some(c) = &item.command {
        let exit = c.exit_code.unwrap_or(0);
        let defs = crate::runbook::definitions::of_command(&c.run, std::path::Path::new("/"));
        let mut text = format!(
            "command `{}` exits {exit} within {} ({}), run by the supervisor in a fresh sandbox; its writes are thrown away",
            crate::audit::text::command_line(&c.run),
            c.timeout().render(),
            if c.network.unwrap_or(false) {
                "with the profile's network"
            } else {
                "no network"
            }
        );
        if !defs.files.is_empty() {
            text.push_str(&format!(
                "; frozen for the step (what defines it, read-only in its sandbox): {}{}",
                defs.files.join(", "),
                if defs.makefiles.is_empty() && defs.scripts.is_empty() {
                    ""
                } else {
                    " and what the makefiles' recipes, package scripts, justfile recipes or Taskfile tasks it runs run (their tools' files, read when the step opens; their build state discarded)"
                }
            ));
        }
        let discarded: Vec<&String> = defs
            .build_state
            .iter()
            .filter(|d| {
                !c.trust
                    .iter()
                    .any(|t| t.trim_start_matches("./").trim_end_matches('/') == d.as_str())
            })
            .collect();
        if !discarded.is_empty() {
            text.push_str(&format!(
                "; build state discarded (rebuilt): {}",
                discarded
                    .iter()
                    .map(|d| d.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        if !c.trust.is_empty() {
            text.push_str(&format!(
                "; TRUSTED as the agent left it: {}",
                c.trust.join(", ")
            ));
        }
        return text;
    }
    if let Some(f) = &item.files_exist {
        return format!(
            "files exist: {}{}",
            f.paths.join(", "),
            if f.include_ignored() {
                " (ignored files count too)"
            } else {
                " (as git would see them: ignored files do not count)"
            }
        );
    }
    if let Some(f) = &item.files_changed {
        return format!(
            "files changed since the step opened: {}{}",
            f.paths.join(", "),
            if f.include_ignored() {
                " (ignored files count too)"
            } else {
                " (as git would see it: ignored files do not count)"
            }
        );
    }
    if let Some(f) = &item.files_unchanged {
        return format!(
            "files unchanged since the step opened: {}{}",
            f.paths.join(", "),
            if f.include_ignored() {
                " (ignored files count too)"
            } else {
                ""
            }
        );
    }
    if let Some(a) = &item.approval {
        return format!(
            "approval by {}, out of band, within {} (no answer: denied)",
            a.approvers,
            a.deadline.render()
        );
    }
    if let Some(v) = &item.verifier {
        return format!(
            "model verifier, tier {} (a separate read-only Claude Code run judges the acceptance criteria with the supervisor's evidence; pass, fail or inconclusive)",
            v.tier
        );
    }
    "nothing".into()
}

#[cfg(test)]
mod tests {
    use super::super::parse;

    const ONE: &str = r#"
# a comment
id = "rb"
title = "T"
owner = "o"

[[steps]]
id = "b"
title = "t"
instructions = "i"
depends_on = ["a", "c"]
[[steps.evidence]]
command = { run = ["cargo", "test"], timeout = "60m" }

[[steps]]
id = "a"
title = "t"
instructions = "i"
evidence = [{ files_exist = { paths = ["x"] } }]

[[steps]]
id = "c"
title = "t"
instructions = "i"
on_fail = "retry"
max_attempts = 3
evidence = [{ files_exist = { paths = ["y"] } }]
"#;

    /// The same content in another key order, spelling, quoting and layout, with the defaults
    /// written out: the same hash. A change of meaning: another hash.
    #[test]
    fn hash_is_of_the_content() {
        let same = r#"owner = 'o'
title = "T"
id = "rb"
[[steps]]
title = "t"
id = "b"
instructions = """i"""
depends_on = ["c", "a"]
on_fail = "retry"
max_attempts = 3
evidence = [{ command = { timeout = "1h", run = ["cargo", "test"], exit_code = 0, network = false } }]
[[steps]]
instructions = "i"
id = "a"
title = "t"
[[steps.evidence]]
files_exist.paths = ["x"]
[[steps]]
id = "c"
title = "t"
instructions = "i"
evidence = [{ files_exist = { paths = ["y"] } }]
"#;
        let a = parse(ONE).unwrap().hash();
        assert_eq!(a, parse(same).unwrap().hash());
        assert!(a.starts_with("sha256:") && a.len() == 71);
        for change in [
            ONE.replace("\"60m\"", "\"61m\""),
            ONE.replace("owner = \"o\"", "owner = \"p\""),
            ONE.replace("paths = [\"y\"]", "paths = [\"y\", \"z\"]"),
            ONE.replace("max_attempts = 3", "max_attempts = 4"),
            ONE.replace("[\"cargo\", \"test\"]", "[\"test\", \"cargo\"]"),
        ] {
            assert_ne!(parse(&change).unwrap().hash(), a, "{change}");
        }
    }

    /// `[verifiers]` is in the hash: its defaults written out, its chains in their order.
    #[test]
    fn verifiers_are_in_the_hash() {
        let with = |table: &str| parse(&format!("{ONE}[verifiers]\n{table}")).unwrap().hash();
        let a = with("tier2 = [\"m1\", \"m2\"]\n");
        assert_ne!(a, parse(ONE).unwrap().hash());
        assert_eq!(
            a,
            with("tier2 = [\"m1\", \"m2\"]\ntimeout = \"300s\"\nmax_tokens = 200000\n")
        );
        for change in [
            "tier2 = [\"m2\", \"m1\"]\n",
            "tier2 = [\"m1\"]\n",
            "tier3 = [\"m1\", \"m2\"]\n",
            "tier2 = [\"m1\", \"m2\"]\ntimeout = \"4m\"\n",
            "tier2 = [\"m1\", \"m2\"]\nmax_tokens = 1000\n",
        ] {
            assert_ne!(with(change), a, "{change}");
        }
    }

    /// Each step's invariants in one line: the deny file-write rules' workspace paths and the
    /// files_unchanged globs; a read rule is none, and what is not walked is said.
    #[test]
    fn explain_shows_each_steps_invariants() {
        let text = r#"id = "rb"
title = "T"
owner = "o"
[[steps]]
id = "fix"
title = "t"
instructions = "i"
[[steps.deny.files]]
id = "keep-tests"
reason = "r"
access = "write"
paths = ["tests/**", "~/notes/**"]
[[steps.deny.files]]
id = "no-peeking"
reason = "r"
access = "read"
paths = ["secret/**"]
[[steps.evidence]]
files_unchanged = { paths = ["Makefile"] }
[[steps]]
id = "free"
title = "t"
instructions = "i"
evidence = [{ files_changed = { paths = ["src/**"], include_ignored = true } }]
"#;
        let runbook = parse(text).unwrap();
        let profile = crate::profile::Profile::builtin_default().unwrap();
        let shown = super::explain_text(&runbook, &[0, 1], &profile);
        assert!(
            shown.contains("   invariants (checked at completion, whatever changed them — content, mode, type, links, entries added or removed; ignored files excepted): `tests/**` (deny rule keep-tests), `Makefile` (files_unchanged)\n"),
            "{shown}"
        );
        assert!(
            shown.contains("(not checked at completion, outside the workspace or a name anywhere: `~/notes/**`)"),
            "{shown}"
        );
        assert!(
            shown.contains(
                "   invariants: none (no deny file-write rule in the workspace, no files_unchanged)"
            ),
            "{shown}"
        );
        assert!(
            shown.contains("files changed since the step opened: src/** (ignored files count too)"),
            "{shown}"
        );
        // `include_ignored = false` is the default: the same hash as leaving it out.
        let without = text.replace(", include_ignored = true", "");
        assert_eq!(
            parse(&without).unwrap().hash(),
            parse(&text.replace("include_ignored = true", "include_ignored = false"))
                .unwrap()
                .hash()
        );
        assert_ne!(parse(&without).unwrap().hash(), runbook.hash());
    }
}
