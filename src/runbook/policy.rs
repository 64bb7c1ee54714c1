//! A step's hook rules compiled into a policy the hook binary reads beside the profile's, so
//! that while the step is open a call needs both (README, "Runbooks": narrowing).
//!
//! The hook combines the two verdicts by the stricter decision; so the step's policy only has to
//! say what the step itself decides: its `deny` rules deny; in a kind where the step has `allow`
//! rules (bash commands, file reads, file writes, web, tools, agents) what they do not match is
//! denied (the policy's `default`); a kind with no allow rule gets a catch-all allow here, which
//! leaves it to the profile. Two consequences, stricter and never wider than the profile: while
//! a step with any allow rule is open, a shell write to a path computed at run time is denied,
//! and a command run from a workspace path (`./build.sh`) is denied (the profile's allow rules
//! never match those either).

use super::{Runbook, Step};
use stepproof_hook::Decision;
use stepproof_hook::config::{self as hook, Access, HookConfig};
use stepproof_hook::policy::{CompiledPolicy, Context, compile};

/// The file name of the `n`th open step's policy in the run's runbook directory
/// (`/run/stepproof/runbook/policy-N` inside); the hook reads them in order until one is
/// missing.
pub fn policy_file_name(n: usize) -> String {
    format!("policy-{n}")
}

/// How the hook names a step's policy to the model: "runbook ID, step STEP".
pub fn policy_name(runbook: &Runbook, step: &Step) -> String {
    format!("runbook {}, step {}", runbook.id, step.id)
}

/// What the step allows, in words (the hook quotes it in a denial).
pub fn allows_text(step: &Step) -> String {
    let mut parts = Vec::new();
    let a = &step.allow;
    let bash: Vec<String> = a
        .bash
        .iter()
        .flat_map(|r| r.commands.iter().map(|c| format!("`{c}`")))
        .collect();
    if !bash.is_empty() {
        parts.push(format!("bash {}", bash.join(", ")));
    }
    for access in [Access::Read, Access::Write] {
        let paths: Vec<String> = a
            .files
            .iter()
            .filter(|r| r.access == access)
            .flat_map(|r| r.paths.iter().map(|p| format!("`{p}`")))
            .collect();
        if !paths.is_empty() {
            let what = if access == Access::Read {
                "reading"
            } else {
                "writing"
            };
            parts.push(format!("{what} {}", paths.join(", ")));
        }
    }
    let names = |what: &str, list: Vec<&String>| {
        (!list.is_empty()).then(|| {
            format!(
                "{what} {}",
                list.iter()
                    .map(|n| format!("`{n}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
    };
    parts.extend(names(
        "web",
        a.web.iter().flat_map(|r| &r.domains).collect(),
    ));
    parts.extend(names(
        "tools",
        a.tools.iter().flat_map(|r| &r.names).collect(),
    ));
    parts.extend(names(
        "agents",
        a.agents.iter().flat_map(|r| &r.types).collect(),
    ));
    if parts.is_empty() {
        "what the profile allows (it names no allow rule)".into()
    } else {
        format!("only {}; other kinds as the profile says", parts.join("; "))
    }
}

/// The commands the step's `deny` bash rules name, in words: each pattern's command name and
/// the plain words after it up to the first wildcard or option (`git push *` → `git push`,
/// `/usr/bin/rm -rf *` → `rm`), deduplicated in rule order. The hook's UserPromptSubmit
/// reminder says so when a prompt contains one of them as whole words.
pub fn denied_words(step: &Step) -> Vec<String> {
    let plain = |w: &str| !w.is_empty() && !w.starts_with('-') && !w.contains(['*', '?', '[', ']']);
    let mut found: Vec<String> = Vec::new();
    for pattern in step.deny.bash.iter().flat_map(|r| &r.commands) {
        let mut words = pattern.split_whitespace();
        let Some(first) = words.next() else {
            continue;
        };
        let name = first.rsplit('/').next().unwrap_or(first);
        if !plain(name) {
            continue;
        }
        let mut phrase = vec![name];
        phrase.extend(words.take_while(|w| plain(w)));
        let phrase = phrase.join(" ");
        if !found.contains(&phrase) {
            found.push(phrase);
        }
    }
    found
}

/// The step's rules as a `[hook]` section with the catch-alls described above.
pub fn step_hook_config(step: &Step) -> HookConfig {
    let mut config = step.allow.to_hook(Decision::Allow);
    let deny = step.deny.to_hook(Decision::Deny);
    config.bash.extend(deny.bash);
    config.files.extend(deny.files);
    config.web.extend(deny.web);
    config.tools.extend(deny.tools);
    config.agents.extend(deny.agents);
    let a = &step.allow;
    let leave = |kind: &str| {
        (
            format!("runbook-leaves-{kind}"),
            format!("this step leaves {kind} to the profile"),
        )
    };
    if a.bash.is_empty() {
        let (id, reason) = leave("bash");
        config.bash.push(hook::BashRule {
            id,
            reason,
            decision: Decision::Allow,
            commands: vec!["?* *".into()],
            env: vec!["*".into()],
            changes_nothing: false,
            except_disposable: false,
        });
    }
    for access in [Access::Read, Access::Write] {
        if !a.files.iter().any(|r| r.access == access) {
            let (id, reason) = leave(if access == Access::Read {
                "reads"
            } else {
                "writes"
            });
            config.files.push(hook::FileRule {
                id,
                reason,
                decision: Decision::Allow,
                access,
                paths: vec!["/**".into()],
            });
        }
    }
    if a.web.is_empty() {
        let (id, reason) = leave("web");
        config.web.push(hook::WebRule {
            id,
            reason,
            decision: Decision::Allow,
            domains: vec!["*".into()],
        });
    }
    if a.tools.is_empty() {
        let (id, reason) = leave("tools");
        config.tools.push(hook::ToolRule {
            id,
            reason,
            decision: Decision::Allow,
            names: vec!["*".into()],
        });
    }
    if a.agents.is_empty() {
        let (id, reason) = leave("agents");
        config.agents.push(hook::AgentRule {
            id,
            reason,
            decision: Decision::Allow,
            types: vec!["*".into()],
        });
    }
    config.default = Some(Decision::Deny);
    config.unknown = Some(if a.bash.is_empty() {
        Decision::Allow
    } else {
        Decision::Deny
    });
    config.unknown_tool = Some(if a.tools.is_empty() {
        Decision::Allow
    } else {
        Decision::Deny
    });
    config.summary = Some(allows_text(step));
    config
}

/// The step's policy compiled for this run's workspace and home (as the sandbox sees them).
pub fn compile_step(
    runbook: &Runbook,
    step: &Step,
    home: &std::path::Path,
    workspace: &std::path::Path,
) -> Result<CompiledPolicy, String> {
    let context = Context {
        workspace: workspace.to_path_buf(),
        home: home.to_path_buf(),
        profile_name: policy_name(runbook, step),
    };
    compile(&step_hook_config(step), &context)
        .map_err(|e| format!("step {}: compiling its rules: {e}", step.id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use stepproof_hook::policy::CallContext;

    fn step(text: &str) -> (Runbook, Step) {
        let runbook: Runbook = toml::from_str(&format!(
            "id = \"r\"\ntitle = \"t\"\nowner = \"o\"\n[[steps]]\nid = \"s\"\ntitle = \"t\"\ninstructions = \"i\"\n{text}"
        ))
        .unwrap();
        let step = runbook.steps[0].clone();
        (runbook, step)
    }

    fn decide(text: &str, tool: &str, input: serde_json::Value) -> Decision {
        let (runbook, step) = step(text);
        let policy = compile_step(
            &runbook,
            &step,
            std::path::Path::new("/h"),
            std::path::Path::new("/w"),
        )
        .unwrap();
        policy.check(tool, &input, &CallContext::default()).decision
    }

    #[test]
    fn denied_words_are_the_plain_command_names_of_deny_rules() {
        let (_, s) = step(
            "[[steps.deny.bash]]\nid = \"d\"\nreason = \"r\"\ncommands = [\"git push *\", \"/usr/bin/rm -rf *\", \"git commit *\", \"c* *\"]\n",
        );
        assert_eq!(denied_words(&s), ["git push", "rm", "git commit"]);
        let (_, s) = step("");
        assert!(denied_words(&s).is_empty());
    }

    #[test]
    fn a_kind_with_allow_rules_is_narrowed_and_others_are_left_to_the_profile() {
        let text = "[[steps.allow.bash]]\nid = \"t\"\nreason = \"r\"\ncommands = [\"cargo test *\"]\n[[steps.deny.files]]\nid = \"d\"\nreason = \"r\"\naccess = \"write\"\npaths = [\"src/**\"]\n";
        let bash = |c: &str| decide(text, "Bash", json!({ "command": c }));
        assert_eq!(bash("cargo test --quiet"), Decision::Allow);
        assert_eq!(bash("cargo test"), Decision::Allow);
        assert_eq!(bash("rm -rf x"), Decision::Deny);
        assert_eq!(bash("$(echo rm) x"), Decision::Deny);
        let write = |p: &str| decide(text, "Write", json!({ "file_path": p, "content": "" }));
        assert_eq!(write("/w/src/lib.rs"), Decision::Deny);
        assert_eq!(write("/w/tests/a.rs"), Decision::Allow);
        assert_eq!(
            decide(text, "Read", json!({ "file_path": "/etc/passwd" })),
            Decision::Allow
        );
        assert_eq!(
            decide(text, "WebFetch", json!({ "url": "https://example.com/" })),
            Decision::Allow
        );
        assert_eq!(decide(text, "mcp__x__y", json!({})), Decision::Allow);
        // Without any bash allow rule, any command is left to the profile.
        assert_eq!(
            decide("", "Bash", json!({ "command": "FOO=1 make all && ls" })),
            Decision::Allow
        );
        assert_eq!(
            decide("", "Bash", json!({ "command": "$(x)" })),
            Decision::Allow
        );
    }
}
