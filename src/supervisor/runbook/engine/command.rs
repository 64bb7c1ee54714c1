//! The evidence commands: a nested run of each, the view it runs in (what trust and the build
//! state cover), and freezing the work while it runs.

use super::freeze::freeze;
use super::invariants::{InvariantCheck, protected_roots};
use super::{EvidenceContext, OUTPUT_READ_BYTES};
use crate::profile::budgets::EvidenceView;
use crate::runbook::Step;
use crate::supervisor::runbook::files::Entry;
use crate::supervisor::runbook::files::glob_matches;
use serde_json::Value;
use serde_json::json;
use std::io::Read;
use std::path::Path;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Duration;
use std::time::Instant;

pub(super) fn tail(bytes: &[u8], n: usize) -> &[u8] {
    &bytes[bytes.len().saturating_sub(n)..]
}

/// What an evidence command did.
pub(super) struct CommandRun {
    pub(super) exit_code: Option<i32>,
    pub(super) output: Vec<u8>,
    pub(super) duration: Duration,
    pub(super) error: Option<String>,
    /// Whether the agent's processes were frozen meanwhile, and what was, in words.
    pub(super) frozen: (bool, String),
    pub(super) audit_log: PathBuf,
}

/// Runs an evidence command with `stepproof-run` itself, in a fresh sandbox under the run's
/// profile with the workspace as an overlay whose upper layer is thrown away and (unless the
/// item says) no network, while the agent's processes are frozen (cgroup v2 freezer) when the
/// run has a cgroup.
pub(super) fn run_command_evidence(
    context: &EvidenceContext,
    step: &Step,
    command: &crate::runbook::CommandEvidence,
    (n, view): (u32, &EvidenceView),
    stop: &AtomicBool,
    held: Option<&(bool, String)>,
) -> CommandRun {
    let started = Instant::now();
    let audit_log = context
        .run_dir
        .join(format!("evidence-{}-{n}.jsonl", step.id));
    let profile_path = context.run_dir.join(format!("evidence-{n}.toml"));
    // The run's own status: the supervisor's relay reaps every child of this process (its
    // `waitpid(-1)`), so the exit code is read from the file, not from `wait`.
    let status_file = context.run_dir.join(format!("evidence-{n}.status.json"));
    let extends = toml::Value::String(context.profile.clone()).to_string();
    // Named as the run's own profile: nothing in the evidence's environment says what it is.
    let name = toml::Value::String(context.profile_name.clone()).to_string();
    let mut derived =
        format!("name = {name}\nextends = {extends}\n[filesystem]\nworkspace = \"overlay\"\n");
    if !command.network.unwrap_or(false) {
        derived.push_str("[network]\nmode = \"none\"\n");
    }
    #[derive(serde::Serialize)]
    struct Section<'a> {
        runbook: Runbook<'a>,
    }
    #[derive(serde::Serialize)]
    struct Runbook<'a> {
        evidence_view: &'a EvidenceView,
    }
    match toml::to_string(&Section {
        runbook: Runbook {
            evidence_view: view,
        },
    }) {
        Ok(text) => derived.push_str(&text),
        Err(e) => {
            return CommandRun {
                exit_code: None,
                output: Vec::new(),
                duration: started.elapsed(),
                error: Some(format!("writing the evidence view: {e}")),
                frozen: (false, String::new()),
                audit_log,
            };
        }
    }
    let fail = |error: String| CommandRun {
        exit_code: None,
        output: Vec::new(),
        duration: started.elapsed(),
        error: Some(error),
        frozen: (false, String::new()),
        audit_log: audit_log.clone(),
    };
    if let Err(e) = std::fs::write(&profile_path, derived) {
        return fail(format!("writing {}: {e}", profile_path.display()));
    }
    let frozen = match held {
        Some(held) => held.clone(),
        None => freeze(&context.cgroup_dirs, true, context.no_freezer.as_deref()),
    };
    let thaw = || {
        if held.is_none() {
            freeze(&context.cgroup_dirs, false, None);
        }
    };
    let timeout = command.timeout();
    let child = crate::supervisor::runbook::verifier::nested_run(
        &context.run_binary,
        &context.workspace,
        [&profile_path, &audit_log, &status_file],
        timeout.seconds,
    )
    .arg("--")
    .args(&command.run)
    .spawn();
    let result = match child {
        Err(e) => fail(format!("starting {}: {e}", context.run_binary.display())),
        Ok(mut child) => {
            // Both pipes are read on threads of their own, up to the cap and drained past it
            // (the evidence run is never stuck writing), while this thread watches the run and
            // the stop: when the run ends, the evidence run is ended too (SIGTERM, then
            // SIGKILL), and its sandbox with it.
            let reader = |pipe: Option<Box<dyn Read + Send>>| {
                let (tx, rx) = std::sync::mpsc::channel();
                std::thread::spawn(move || {
                    let mut bytes = Vec::new();
                    if let Some(mut pipe) = pipe {
                        let _ = (&mut pipe).take(OUTPUT_READ_BYTES).read_to_end(&mut bytes);
                        let _ = std::io::copy(&mut pipe, &mut std::io::sink());
                    }
                    let _ = tx.send(bytes);
                });
                rx
            };
            let out_rx = reader(
                child
                    .stdout
                    .take()
                    .map(|p| Box::new(p) as Box<dyn Read + Send>),
            );
            let err_rx = reader(
                child
                    .stderr
                    .take()
                    .map(|p| Box::new(p) as Box<dyn Read + Send>),
            );
            let pid = nix::unistd::Pid::from_raw(child.id() as i32);
            let mut interrupted = None;
            let status = loop {
                match child.try_wait() {
                    Ok(Some(status)) => break Ok(status),
                    Err(e) => break Err(e),
                    Ok(None) => {}
                }
                if stop.load(std::sync::atomic::Ordering::SeqCst) {
                    let since = *interrupted.get_or_insert_with(|| {
                        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
                        Instant::now()
                    });
                    if since.elapsed() > Duration::from_secs(1) {
                        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            };
            let collect = |rx: std::sync::mpsc::Receiver<Vec<u8>>| {
                rx.recv_timeout(Duration::from_secs(1)).unwrap_or_default()
            };
            let mut output = collect(out_rx);
            output.extend(collect(err_rx));
            if interrupted.is_some() {
                let _ = std::fs::remove_file(&status_file);
                thaw();
                let _ = std::fs::remove_file(&profile_path);
                return CommandRun {
                    frozen,
                    output,
                    ..fail("interrupted: the run ended while the evidence command ran".to_string())
                };
            }
            let from_file = std::fs::read(&status_file)
                .ok()
                .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
                .and_then(|v| v["exit_code"].as_i64())
                .and_then(|c| i32::try_from(c).ok());
            let _ = std::fs::remove_file(&status_file);
            let status = match (from_file, status) {
                (Some(code), _) => Ok(code),
                (None, Ok(status)) => Ok(status.code().unwrap_or_else(|| {
                    128 + std::os::unix::process::ExitStatusExt::signal(&status).unwrap_or(0)
                })),
                (None, Err(e)) => Err(e),
            };
            match status {
                Ok(code) => CommandRun {
                    exit_code: Some(code),
                    output,
                    duration: started.elapsed(),
                    error: None,
                    frozen: (false, String::new()),
                    audit_log: audit_log.clone(),
                },
                Err(e) => fail(format!("waiting for the evidence run: {e}")),
            }
        }
    };
    thaw();
    let _ = std::fs::remove_file(&profile_path);
    CommandRun { frozen, ..result }
}

/// How one evidence command's sandbox sees the workspace: the step's protected paths and the
/// files that define the command read-only (those that exist now), ignored files under the
/// protected paths hidden, and the build state the command would reuse discarded unless the
/// item trusts it by name.
pub(super) fn evidence_view(
    step: &Step,
    command: &crate::runbook::CommandEvidence,
    invariants: Option<&InvariantCheck>,
    workspace: &Path,
) -> EvidenceView {
    let mut view = EvidenceView::default();
    if let Some(check) = invariants {
        for root in protected_roots(step) {
            if !root.is_empty() && check.now.contains_key(&root) {
                view.read_only.push(root);
            }
        }
        for (path, entry) in &check.now {
            let definition = check.definitions.iter().any(|g| glob_matches(g, path));
            let under_root = view
                .read_only
                .iter()
                .any(|r| path.starts_with(&format!("{r}/")));
            if definition && !under_root && matches!(entry, Entry::File { .. } | Entry::Dir { .. })
            {
                view.read_only.push(path.clone());
            }
        }
        if let Ok(ignored) = &check.ignored {
            view.hidden = ignored.iter().map(|(p, _)| p.clone()).collect();
        }
    }
    let defs = crate::runbook::definitions::of_command(&command.run, workspace);
    let mut state = defs.build_state;
    // A command that runs make, a package script, a recipe or a task reuses what their
    // tools would.
    if (!defs.makefiles.is_empty() || !defs.scripts.is_empty())
        && let Some(check) = invariants
    {
        state.extend(
            check
                .recipes
                .build_state
                .iter()
                .filter(|dir| !state.contains(dir))
                .cloned()
                .collect::<Vec<_>>(),
        );
    }
    view.discarded = state
        .into_iter()
        .filter(|dir| !trusted(command, dir))
        .collect();
    view
}

/// Whether a command item trusts a build-state directory by name (`trust = ["target/"]`).
pub(super) fn trusted(command: &crate::runbook::CommandEvidence, dir: &str) -> bool {
    command
        .trust
        .iter()
        .any(|t| t.trim_start_matches("./").trim_end_matches('/') == dir)
}

/// What a command item's proof did with build state, in words: `discarded` or `trusted: …`.
pub(super) fn build_state_words(
    view: &EvidenceView,
    command: &crate::runbook::CommandEvidence,
) -> Value {
    json!({
        "discarded": view.discarded,
        "trusted": command.trust,
    })
}

/// What a passed step's proof covered and what it trusted: the paths it protects, the
/// definition files frozen, per command the build state discarded (rebuilt) or trusted by
/// name, and what only a model verifier judged (the step's acceptance criteria, named).
pub(super) fn covered(
    step: &Step,
    (definitions, unknown): (&[String], &[String]),
    gathered: &[Value],
) -> Value {
    let trusted: Vec<&String> = step
        .evidence
        .iter()
        .filter_map(|e| e.command.as_ref())
        .flat_map(|c| c.trust.iter())
        .collect();
    let mut discarded: Vec<&str> = Vec::new();
    for dir in gathered
        .iter()
        .filter(|r| r["kind"] == "command")
        .flat_map(|r| {
            r["build_state"]["discarded"]
                .as_array()
                .into_iter()
                .flatten()
        })
        .filter_map(Value::as_str)
    {
        if !discarded.contains(&dir) {
            discarded.push(dir);
        }
    }
    let commands = step.evidence.iter().filter(|e| e.command.is_some()).count();
    let build_state = if commands == 0 {
        Value::Null
    } else if !trusted.is_empty() {
        json!(format!(
            "trusted: {}",
            trusted
                .iter()
                .map(|t| t.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    } else if !discarded.is_empty() {
        json!(format!("discarded: {}", discarded.join(", ")))
    } else {
        json!("none reused")
    };
    let verifiers = gathered.iter().filter(|r| r["kind"] == "verifier").count();
    // A verifier judges the acceptance criteria; nothing else of the proof does.
    let judged_by_verifier_only: Vec<String> = if verifiers == 0 {
        Vec::new()
    } else if step.acceptance.is_empty() {
        vec!["the step's instructions (no acceptance criteria written)".into()]
    } else {
        step.acceptance
            .iter()
            .take(16)
            .map(|a| a.chars().take(200).collect())
            .collect()
    };
    json!({
        "definitions_frozen": definitions,
        "definitions_unknown": unknown,
        "build_state": build_state,
        "protected": step.protected_paths().into_iter().map(|p| p.glob).collect::<Vec<_>>(),
        "verifier_items": verifiers,
        "judged_by_verifier_only": judged_by_verifier_only,
    })
}
