//! What StepProof puts in the agent's chat: the slash commands `/runbook-status`,
//! `/step-complete`, `/step-evidence` and `/runbook-abandon` (each runs the `stepproof step …`
//! client, the one Bash call the hook allows whatever the open step says), and the agent
//! definition `runbook-author`. Their sources are `assets/claude/`; the supervisor writes them
//! into the run's config directory, whose `commands/` and `agents/` are read-only inside, and
//! never into the user's project.
//!
//! `runbook-author` is installed in every agent run (it helps write runbooks, open or not);
//! the commands only in a run with a runbook. A `verifier` definition is never among them: it
//! belongs to the verifier's own run.

/// The agent definitions, as `(path in the config directory, content)`.
pub const AGENTS: &[(&str, &str)] = &[(
    "agents/runbook-author.md",
    include_str!("../../assets/claude/agents/runbook-author.md"),
)];

/// The slash commands, as `(path in the config directory, content)`.
pub const COMMANDS: &[(&str, &str)] = &[
    (
        "commands/runbook-status.md",
        include_str!("../../assets/claude/commands/runbook-status.md"),
    ),
    (
        "commands/step-complete.md",
        include_str!("../../assets/claude/commands/step-complete.md"),
    ),
    (
        "commands/step-evidence.md",
        include_str!("../../assets/claude/commands/step-evidence.md"),
    ),
    (
        "commands/runbook-abandon.md",
        include_str!("../../assets/claude/commands/runbook-abandon.md"),
    ),
];

/// The config directory's subdirectories that hold them (read-only inside).
pub const DIRS: &[&str] = &["agents", "commands"];

/// The content of a shipped file by its path in the config directory.
pub fn content(path: &str) -> Option<&'static str> {
    AGENTS
        .iter()
        .chain(COMMANDS)
        .find(|(p, _)| *p == path)
        .map(|(_, c)| *c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_commands_run_only_the_client_and_no_verifier_is_shipped() {
        for (path, text) in COMMANDS {
            assert!(text.starts_with("---\ndescription: "), "{path}");
            assert!(text.contains("/run/stepproof/stepproof step "), "{path}");
            let sub = path.trim_start_matches("commands/").trim_end_matches(".md");
            assert!(!sub.is_empty());
        }
        for (path, _) in AGENTS.iter().chain(COMMANDS) {
            assert!(DIRS.iter().any(|d| path.starts_with(&format!("{d}/"))));
            assert!(!path.contains("verifier"), "{path}");
            assert!(content(path).is_some());
        }
        let author = content("agents/runbook-author.md").unwrap();
        assert!(author.starts_with("---\nname: runbook-author\n"));
        assert!(author.contains("stepproof runbook check"));
    }

    /// What the `runbook-author` definition teaches is what `check` accepts: its example
    /// passes `stepproof runbook check` against the built-in profile with no error, and it
    /// names every evidence kind a run can check and every rule kind. (This proves the
    /// instructions are right, not that a model follows them.)
    #[test]
    fn the_authors_example_passes_check_and_names_every_kind() {
        let author = content("agents/runbook-author.md").unwrap();
        let example = author
            .split("```toml\n")
            .nth(1)
            .and_then(|rest| rest.split("```").next())
            .expect("a TOML example");
        let profile = crate::profile::Profile::builtin_default().unwrap();
        let report = crate::runbook::check(example, &profile);
        assert_eq!(report.errors(), 0, "{:#?}", report.problems);
        let runbook = report.runbook.expect("parsed");
        assert_eq!(runbook.id.as_str(), "fix-bug");
        assert_eq!(runbook.steps.len(), 2);
        for kind in crate::runbook::EVIDENCE_KINDS {
            // Model verifiers are not run by this release (`stepproof-run` refuses them).
            if kind != "verifier" {
                assert!(author.contains(&format!("`{kind} = {{")), "{kind}");
            }
        }
        for kind in ["bash", "files", "web", "tools", "agents"] {
            assert!(author.contains(&format!("  - `{kind}`: ")), "{kind}");
        }
    }
}
