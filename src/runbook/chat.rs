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

/// The agent definitions, by their path in the config directory; [`content`] renders them
/// (`runbook-author`'s format reference is generated from the runbook schema, see
/// [`super::author`]).
pub const AGENTS: &[&str] = &["agents/runbook-author.md"];

/// The program that checks a runbook inside a run: StepProof's own `stepproof`, bound
/// read-only beside the hook's policy in every agent run (`stepproof runbook check` where it
/// is installed on the PATH).
pub const RUNBOOK_CHECK_COMMAND: &str = "/run/stepproof/stepproof runbook check";

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
pub fn content(path: &str) -> Option<String> {
    if path == AGENTS[0] {
        return Some(super::author::definition(RUNBOOK_CHECK_COMMAND));
    }
    COMMANDS
        .iter()
        .find(|(p, _)| *p == path)
        .map(|(_, c)| c.to_string())
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
        for path in AGENTS.iter().chain(COMMANDS.iter().map(|(p, _)| p)) {
            assert!(DIRS.iter().any(|d| path.starts_with(&format!("{d}/"))));
            assert!(!path.contains("verifier"), "{path}");
            assert!(content(path).is_some());
        }
        let author = content("agents/runbook-author.md").unwrap();
        assert!(author.starts_with("---\nname: runbook-author\n"));
        assert!(author.contains("stepproof runbook check"));
    }
}
