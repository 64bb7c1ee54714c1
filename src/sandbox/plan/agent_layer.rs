//! The agent inside (profiles with a hook): Claude Code's managed settings laid over `/etc`
//! read-only, so the hook is registered where the agent cannot remove it and applies to any
//! `claude` started inside; the hook binary, its compiled policy and the audit socket on a
//! read-only `/run/stepproof`; and the agent's own state in a fresh per-run config directory
//! that the supervisor seeds and reads back.

use crate::profile::Profile;
use crate::sandbox::plan::{Access, HostFacts, MountOp, PlanError};
use serde::Serialize;
use std::path::{Path, PathBuf};

pub const CONTROL_DIR: &str = "/run/stepproof";
pub const HOOK_BINARY: &str = "/run/stepproof/stepproof-hook";
pub const POLICY_FILE: &str = "/run/stepproof/policy";
pub const AUDIT_SOCKET: &str = "/run/stepproof/audit.sock";
/// StepProof's own `stepproof` (the host's, beside the hook binary), read-only in every agent
/// run: the runbook client in a run with a runbook, and `stepproof runbook check` for the
/// `runbook-author` agent in any run (see `runbook::chat::RUNBOOK_CHECK_COMMAND`).
pub const CLIENT_BINARY: &str = "/run/stepproof/stepproof";
/// The supervisor's notices to the hook (read-only inside): `refused-hosts`, one line per host
/// the proxy refused, `<unix ms>\t<host>\t<the profile key that would allow it>`.
pub const NOTICES_DIR: &str = "/run/stepproof/notices";
/// The notices directory in the run directory, on the host.
pub fn notices_dir(run_dir: &Path) -> PathBuf {
    run_dir.join("notices")
}
/// `CLAUDE_CONFIG_DIR` inside: the per-run config directory, writable.
pub const CONFIG_DIR: &str = "/run/claude-config";
/// Claude Code's managed-settings directory: inside, StepProof's alone (a read-only tmpfs).
pub const MANAGED_DIR: &str = "/etc/claude-code";
pub const MANAGED_FILE: &str = "managed-settings.json";
pub const DROP_IN_DIR: &str = "managed-settings.d";
/// Directories of the config directory whose scripts Claude Code's Bash tool sources before
/// every command: the shell snapshot (`snapshot-*.sh`: functions, aliases, options) and the
/// session environment scripts (`session-env/<session>/*-hook-N.sh`). A `git() { …; }` written
/// there would turn every later allowed `git status` into anything, unseen by the hook. The
/// supervisor makes them empty, and they are read-only inside: Claude Code then runs each
/// command in a login shell instead, whose startup files are the host's or read-only stand-ins
/// (see `LOGIN_FILES`).
pub const SOURCED_DIRS: &[&str] = &["shell-snapshots", "session-env"];
/// Claude Code's caches of the organisation's server-managed settings, of the consent to them and
/// of its policy limits, in the config directory: a copy written there would be taken by a
/// `claude` that cannot reach the server (a stale-cache fallback, or a 304 to its conditional
/// request). The supervisor makes them empty, and they are read-only inside; the organisation's
/// settings come in as a managed drop-in instead (`supervisor::net::server_settings`).
pub const READ_ONLY_CACHES: &[&str] = &[
    "remote-settings.json",
    "remote-settings-consent.json",
    "policy-limits.json",
];
/// The startup files a non-interactive login shell reads from the home (bash, sh, zsh), which
/// Claude Code's Bash tool runs when it has no snapshot: read-only stand-ins where the run's
/// home is its own and writable (`home = "allowlist"`).
pub const LOGIN_FILES: &[&str] = &[
    ".profile",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    ".zlogout",
];
/// What a login-file stand-in says to whoever reads it.
pub const LOGIN_FILE_STAND_IN: &str = "# StepProof: read-only inside the sandbox. Claude Code's Bash tool runs every command in a\n# login shell here, which would run this file first: what the agent wrote here would run unseen.\n";
/// What of the host's managed-settings directory is carried in: files up to this size, this
/// many of them, this deep.
const HOST_FILE_MAX_BYTES: u64 = 1 << 20;
const HOST_FILES_MAX: usize = 256;
const HOST_DEPTH_MAX: usize = 4;
/// Hooks must answer quickly; Claude Code's default is 600 s.
const HOOK_TIMEOUT_SECONDS: u32 = 5;

/// Gates block the tool call when the hook fails; observers never block and never loop.
///
/// SessionStart is not registered: Claude Code 2.1.328 makes
/// `$CLAUDE_CONFIG_DIR/session-env/<session>/` before it runs any SessionStart hook (for
/// `CLAUDE_ENV_FILE`), and that directory is read-only here ([`SOURCED_DIRS`]), so the hook
/// would never run and every session would start by showing "SessionStart:startup hook failed
/// … EROFS". The UserPromptSubmit observer carries what SessionStart would have said (the
/// session's first prompt, and the first after a compaction).
///
/// Claude Code waits for every hook it runs (one process per event), so an event that means
/// nothing without a runbook is registered only with one. None is `async`: Claude Code does not
/// wait for an async hook at its exit, and records were lost that way (the turn's end,
/// SessionEnd).
const EVENTS: &[(&str, bool, bool, When)] = &[
    // (event, takes a matcher, fails closed, when registered)
    ("PreToolUse", true, true, When::Always),
    ("ConfigChange", false, true, When::Always),
    // The supervisor's notices (a host the proxy refused, a read-only path) go into context.
    ("PostToolUse", true, false, When::Always),
    ("PostToolUseFailure", true, false, When::Always),
    // Each turn's record (and the asks it settles); with a runbook, its orientation. Where the
    // session runs is in the managed CLAUDE.md ([`managed_memory`]). The one turn of a
    // `claude -p PROMPT` run is its start record (see [`single_turn`]): without a runbook,
    // Claude Code's wait for this hook would be that run's whole hook cost, for a copy.
    ("UserPromptSubmit", false, false, When::NotSingleTurn),
    // The runbook's state for the summary (plain text).
    ("PreCompact", false, false, When::WithRunbook),
    // The end of a turn: asks still open were not approved. Without a runbook the next prompt
    // or the end of the run says so as well (the supervisor settles what is open then), and
    // Claude Code's wait for this hook (7–20 ms a turn) is not worth the earlier record.
    ("Stop", false, false, When::WithRunbook),
    // The supervisor records the run's end itself; a runbook's chain records the session's.
    ("SessionEnd", false, false, When::WithRunbook),
    // Recorded with `agent_id`/`agent_type` while a runbook runs.
    ("SubagentStart", false, false, When::WithRunbook),
    ("SubagentStop", false, false, When::WithRunbook),
];

/// When StepProof's hook is registered for an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum When {
    Always,
    /// While a runbook runs (`stepproof-run --runbook`).
    WithRunbook,
    /// Unless the run is a single turn ([`single_turn`]); always while a runbook runs.
    NotSingleTurn,
}

impl When {
    fn registered(self, runbook: bool, single_turn: bool) -> bool {
        match self {
            When::Always => true,
            When::WithRunbook => runbook,
            When::NotSingleTurn => runbook || !single_turn,
        }
    }
}

/// Whether `command` is Claude Code in print mode (`-p`, `--print`) taking one prompt (no
/// `--input-format`, whose `stream-json` reads prompt after prompt): one turn, which the run's
/// start record marks (its argv has the prompt; a UserPromptSubmit record holds no more than the
/// turn). A spelling not recognised here keeps the UserPromptSubmit observer.
pub fn single_turn(command: &[std::ffi::OsString]) -> bool {
    if !command_is_claude(command) {
        return false;
    }
    let Ok(claude) = after_env_prefix(command) else {
        return false;
    };
    let args = || claude.iter().skip(1).take_while(|a| *a != "--");
    let print = args().any(|a| a == "-p" || a == "--print");
    let input_format = args().any(|a| {
        a.to_str()
            .is_none_or(|a| a == "--input-format" || a.starts_with("--input-format="))
    });
    print && !input_format
}

/// Whether `command` leaves Claude Code its Bash tool: not when it is Claude Code given a
/// `--tools` list without `Bash` (a model verifier's `--tools Read,Grep,Glob`), or `Bash` itself
/// in `--disallowedTools`. Any other command (a shell may start `claude` any way) keeps it.
pub fn offers_bash(command: &[std::ffi::OsString]) -> bool {
    if !command_is_claude(command) {
        return true;
    }
    let Ok(claude) = after_env_prefix(command) else {
        return true;
    };
    let args: Vec<String> = claude
        .iter()
        .skip(1)
        .take_while(|a| *a != "--")
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    // `--tools A,B`, `--tools A B`, `--tools=A,B`: the names given to the option (a prompt
    // taken for names only adds names: the shell is then described, the safe side).
    let listed = |option: &str| -> Option<Vec<String>> {
        let prefix = format!("{option}=");
        let mut names: Option<Vec<String>> = None;
        for (i, arg) in args.iter().enumerate() {
            let values: Vec<&str> = if let Some(value) = arg.strip_prefix(&prefix) {
                vec![value]
            } else if arg == option {
                args[i + 1..]
                    .iter()
                    .take_while(|a| !a.starts_with('-'))
                    .map(String::as_str)
                    .collect()
            } else {
                continue;
            };
            names.get_or_insert_with(Vec::new).extend(
                values
                    .iter()
                    .flat_map(|v| v.split([',', ' ']))
                    .filter(|n| !n.is_empty())
                    .map(str::to_string),
            );
        }
        names
    };
    let allowed = match listed("--tools") {
        None => true,
        Some(names) => names.iter().any(|n| n == "Bash" || n == "default"),
    };
    let refused = listed("--disallowedTools")
        .into_iter()
        .chain(listed("--disallowed-tools"))
        .flatten()
        .any(|n| n == "Bash");
    allowed && !refused
}

/// Whether `command` is Claude Code going on from a kept session: `--continue`, `--resume`
/// (with or without an id), `--from-pr`, `--fork-session`, `--session-id`, their `=` forms, or
/// a cluster of short options holding `c` or `r` (`-pc`). Anything not UTF-8 counts as one.
pub fn resumes_a_session(command: &[std::ffi::OsString]) -> bool {
    const LONG: &[&str] = &[
        "--continue",
        "--resume",
        "--from-pr",
        "--fork-session",
        "--session-id",
    ];
    let Ok(claude) = after_env_prefix(command) else {
        return true;
    };
    claude.iter().skip(1).take_while(|a| *a != "--").any(|a| {
        let Some(a) = a.to_str() else {
            return true;
        };
        match a.strip_prefix("--") {
            Some(long) => LONG
                .iter()
                .any(|o| o[2..] == *long || long.starts_with(&format!("{}=", &o[2..]))),
            None => a.len() > 1 && a.starts_with('-') && a[1..].contains(['c', 'r']),
        }
    })
}

/// How many of the newest kept transcripts (by mtime) a Claude Code run is seeded with, and at
/// most how many bytes of them (the sessions it names are seeded whatever their age).
pub const SEED_NEWEST: usize = 50;
pub const SEED_NEWEST_BYTES: u64 = 256 << 20;

/// Which kept sessions (transcripts, with their todo lists) and plans a run is seeded with;
/// the prompt history and auto-memory always are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SessionSeeding {
    /// None: a single turn that goes on from no session reads none of them.
    None,
    /// The newest ([`SEED_NEWEST`], at most [`SEED_NEWEST_BYTES`]) and every one an argument
    /// of the command names (`--resume ID`, `--session-id ID`, …): Claude Code itself, whose
    /// `--continue` takes the newest and whose `/resume` lists the recent ones. Copying every
    /// kept transcript made each launch's cost and each run directory's size grow with every
    /// session the workspace ever had.
    Newest { named: Vec<String> },
    /// Every one: a command that is not Claude Code (a shell may start `claude --resume` with
    /// any id), `--from-pr` (Claude Code looks through every session for the pull request's),
    /// or a command not read as UTF-8.
    Every,
}

/// How `command` is seeded with kept sessions (see [`SessionSeeding`]).
pub fn session_seeding(command: &[std::ffi::OsString]) -> SessionSeeding {
    if single_turn(command) && !resumes_a_session(command) {
        return SessionSeeding::None;
    }
    if !command_is_claude(command) {
        return SessionSeeding::Every;
    }
    let Ok(claude) = after_env_prefix(command) else {
        return SessionSeeding::Every;
    };
    let mut named = Vec::new();
    for arg in claude.iter().skip(1).take_while(|a| *a != "--") {
        let Some(arg) = arg.to_str() else {
            return SessionSeeding::Every;
        };
        if arg == "--from-pr" || arg.starts_with("--from-pr=") {
            return SessionSeeding::Every;
        }
        // An id alone or after `=` (`--resume=ID`); anything else cannot name a transcript.
        let word = arg.rsplit_once('=').map_or(arg, |(_, value)| value);
        let id_like = !word.is_empty()
            && word.len() <= 200
            && !word.starts_with('-')
            && word
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if id_like && !named.iter().any(|n| n == word) {
            named.push(word.to_string());
        }
    }
    SessionSeeding::Newest { named }
}

/// What the supervisor prepares on the host for the agent, and reads back after the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AgentState {
    pub run_dir: PathBuf,
    /// Bound read-write at `CONFIG_DIR`; seeded before, credentials carried back after.
    pub config_dir: PathBuf,
    /// The socket the hook's records arrive on (bound read-only at `AUDIT_SOCKET`).
    pub hook_socket: PathBuf,
    pub hook_binary: PathBuf,
    pub workspace: PathBuf,
    pub home: PathBuf,
    /// Where the workspace's session data is kept between runs ([`sessions_dir`]), when the
    /// profile keeps it (`claude.keep_sessions`) and the run is not `--ci`.
    pub sessions: Option<PathBuf>,
    /// Which kept transcripts, todo lists and plans are seeded ([`SessionSeeding`]); the
    /// prompt history and auto-memory always are.
    pub seeding: SessionSeeding,
    /// What StepProof ships into the config directory (paths in it, see
    /// [`crate::runbook::chat`]): the `runbook-author` agent always, the slash commands in a run
    /// with a runbook. Read-only inside with the rest of `agents/` and `commands/`.
    pub shipped: Vec<String>,
}

/// Where StepProof keeps a workspace's Claude Code session data (transcripts, prompt history,
/// auto-memory, todos, plans) between runs: `~/.local/state/stepproof/sessions/<id>`, `<id>`
/// the first 32 hex digits of the SHA-256 of the workspace's canonical path. Hidden from every
/// sandbox with the rest of StepProof's state.
pub fn sessions_dir(home: &Path, workspace: &Path) -> PathBuf {
    use sha2::Digest;
    use std::os::unix::ffi::OsStrExt;
    let digest = sha2::Sha256::digest(workspace.as_os_str().as_bytes());
    home.join(crate::profile::STATE_DIR)
        .join("sessions")
        .join(&hex::encode(digest)[..32])
}

/// The parts of the plan the agent needs.
pub struct AgentPlan {
    pub mounts: Vec<MountOp>,
    /// What of the host's managed settings is left out, and why (keys StepProof owns in its
    /// managed file or a drop-in, files that could not be read as JSON): `--ci` and a strict
    /// profile refuse a host with owned keys, a best-effort one drops them.
    pub managed_removed: Vec<String>,
    /// The managed settings Claude Code will read inside, merged as it merges them
    /// (StepProof's file, then the host's documents without the keys StepProof owns).
    pub managed_merged: serde_json::Value,
    /// Exactly what StepProof writes to `/etc/claude-code/managed-settings.json` (hooks, pins,
    /// the profile's keys): what the gateway and the launch lay over server-managed settings.
    pub managed_ours: serde_json::Value,
    pub notes: Vec<String>,
    pub env: Vec<(String, String)>,
    pub state: AgentState,
}

/// Variables that decide what Claude Code's Bash tool runs before or instead of each command:
/// the shell (`SHELL`, `CLAUDE_CODE_SHELL`: any executable whose path says bash or zsh), a
/// program every command is handed to (`CLAUDE_CODE_SHELL_PREFIX`), scripts sourced first
/// (`BASH_ENV`, `ENV`, `CLAUDE_ENV_FILE`, and the login shell's startup files, found through
/// `HOME` and `ZDOTDIR`) and where `git` is found (`PATH`). A settings file's
/// `env` sets them for every later command — a project's `.claude/settings.json` from the
/// checkout at start (tested on 2.1.328: its `BASH_ENV` turned an allowed `git status` into its
/// own function), or one the agent writes. Managed settings' `env` stands above every other
/// source, so StepProof's pins them to what the command was started with (empty: unset).
pub const PINNED_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "ZDOTDIR",
    "SHELL",
    "CLAUDE_CODE_SHELL",
    "CLAUDE_CODE_SHELL_PREFIX",
    "BASH_ENV",
    "ENV",
    "CLAUDE_ENV_FILE",
];

/// [`PINNED_ENV`], and every variable the hook knows to make a tool run or load a program
/// (`GIT_PAGER`, `GIT_EXTERNAL_DIFF`, `LD_PRELOAD`, `NODE_OPTIONS`, `GIT_CONFIG_COUNT`, …: what
/// the hook judges a command by assumes none of them was set behind its back), with the values
/// of the command's environment (empty where it has none).
pub fn pinned_env(env: &[(String, String)]) -> Vec<(String, String)> {
    let mut names: Vec<&str> = PINNED_ENV.to_vec();
    for name in stepproof_hook::shell::program_variables() {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    // The entries `GIT_CONFIG_COUNT` counts (StepProof's own credential helper among them): a
    // settings file must not swap one for a program of its own.
    for (name, _) in env {
        if (name.starts_with("GIT_CONFIG_KEY_") || name.starts_with("GIT_CONFIG_VALUE_"))
            && !names.contains(&name.as_str())
        {
            names.push(name);
        }
    }
    names
        .into_iter()
        .map(|name| {
            let value = env
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
                .unwrap_or_default();
            (name.to_string(), value)
        })
        .collect()
}

/// The prefix of the variables bash imports as functions (`BASH_FUNC_git%%='() { …; }'`
/// defines `git` in every bash started with it).
const BASH_FUNCTION_PREFIX: &str = "BASH_FUNC_";
/// The project settings files Claude Code reads from a directory it starts in.
const PROJECT_SETTINGS: &[&str] = &[".claude/settings.json", ".claude/settings.local.json"];
const PROJECT_SETTINGS_MAX_BYTES: u64 = 1 << 20;

/// The exported bash functions (`BASH_FUNC_…` names) that the project settings Claude Code will
/// read at start set in their `env` — the workspace's and those of the directories from it down
/// to the current one: pinned to nothing in the managed settings, so no bash imports them (a
/// function's name cannot be listed ahead; tested on 2.1.328: `BASH_FUNC_git%%` in a project's
/// `env` redefined `git`). Settings written during the run are never reloaded (the ConfigChange
/// gate). A file that is not a regular one, too large or not JSON names nothing here.
pub fn project_bash_functions(workspace: &Path, cwd: &Path) -> Vec<String> {
    let mut dirs = vec![workspace.to_path_buf()];
    if let Ok(rel) = cwd.strip_prefix(workspace) {
        let mut dir = workspace.to_path_buf();
        for part in rel.components() {
            dir.push(part);
            dirs.push(dir.clone());
        }
    }
    let mut names = std::collections::BTreeSet::new();
    for dir in dirs {
        for rel in PROJECT_SETTINGS {
            let path = dir.join(rel);
            let readable = std::fs::metadata(&path)
                .is_ok_and(|m| m.is_file() && m.len() <= PROJECT_SETTINGS_MAX_BYTES);
            let Some(settings) = readable
                .then(|| std::fs::read(&path).ok())
                .flatten()
                .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
            else {
                continue;
            };
            if let Some(env) = settings.get("env").and_then(|e| e.as_object()) {
                names.extend(
                    env.keys()
                        .filter(|name| {
                            name.get(..BASH_FUNCTION_PREFIX.len())
                                .is_some_and(|head| head.eq_ignore_ascii_case(BASH_FUNCTION_PREFIX))
                        })
                        .cloned(),
                );
            }
        }
    }
    names.into_iter().collect()
}

/// Claude Code's managed settings: only managed hooks, every event StepProof handles, each in
/// exec form with an explicit timeout; the gates with `onFailure: block`; `pinned` in `env`
/// (see [`PINNED_ENV`]).
pub fn managed_settings(
    extra: &serde_json::Map<String, serde_json::Value>,
    pinned: &[(String, String)],
    runbook: bool,
    single_turn: bool,
) -> serde_json::Value {
    let mut hooks = serde_json::Map::new();
    for (event, matcher, blocks, when) in EVENTS {
        if !when.registered(runbook, single_turn) {
            continue;
        }
        let mut entry = serde_json::json!({
            "type": "command",
            "command": HOOK_BINARY,
            "args": ["--policy", POLICY_FILE, "--audit-socket", AUDIT_SOCKET, "--event", event],
            "timeout": HOOK_TIMEOUT_SECONDS,
        });
        if *blocks {
            entry["onFailure"] = "block".into();
        }
        let mut group = serde_json::json!({ "hooks": [entry] });
        if *matcher {
            group["matcher"] = "*".into();
        }
        hooks.insert(event.to_string(), serde_json::json!([group]));
    }
    // The profile's own keys first (none StepProof owns: the profile's load refuses them, and
    // they are removed here again); StepProof's are written last, so they always stand.
    let mut settings = extra.clone();
    crate::profile::claude_settings::remove_owned_keys(&mut settings);
    settings.insert("allowManagedHooksOnly".into(), true.into());
    settings.insert("hooks".into(), serde_json::Value::Object(hooks));
    if !pinned.is_empty() {
        let env = settings
            .entry("env")
            .or_insert_with(|| serde_json::Value::Object(serde_json::Map::new()));
        if !env.is_object() {
            *env = serde_json::Value::Object(serde_json::Map::new());
        }
        if let Some(env) = env.as_object_mut() {
            for (name, value) in pinned {
                env.insert(name.clone(), value.clone().into());
            }
        }
    }
    serde_json::Value::Object(settings)
}

/// What is wrong with managed settings as the agent would read them (empty: StepProof's hook is
/// registered for every event, managed hooks only, the gates fail closed, nothing switches it
/// off). The self-test runs this inside the sandbox on every file of [`MANAGED_DIR`].
pub fn managed_settings_problems(settings: &serde_json::Value, is_drop_in: bool) -> Vec<String> {
    let Some(object) = settings.as_object() else {
        return vec!["not a JSON object".into()];
    };
    let owned = crate::profile::claude_settings::owned_keys_in(object);
    if is_drop_in {
        return owned
            .into_iter()
            .map(|key| format!("sets {key}, which StepProof owns"))
            .collect();
    }
    let mut problems: Vec<String> = owned
        .into_iter()
        .filter(|key| !matches!(key.as_str(), "hooks" | "allowManagedHooksOnly"))
        // StepProof's own pin of a variable to nothing (see `PINNED_ENV`).
        .filter(|key| {
            !key.strip_prefix("env.")
                .is_some_and(|name| PINNED_ENV.contains(&name) && settings["env"][name] == "")
        })
        .map(|key| format!("sets {key}, which StepProof owns"))
        .collect();
    if settings["allowManagedHooksOnly"] != true {
        problems.push("allowManagedHooksOnly is not true".into());
    }
    for (event, _, blocks, when) in EVENTS {
        let entries = settings["hooks"][event]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let ours = entries.iter().any(|group| {
            group["hooks"].as_array().is_some_and(|hooks| {
                hooks.iter().any(|h| {
                    h["command"] == HOOK_BINARY
                        && h["args"].as_array().is_some_and(|args| {
                            args.iter().any(|a| a == POLICY_FILE)
                                && args.iter().any(|a| a == *event)
                        })
                        // A gate Claude Code did not wait for would not gate; nor is a
                        // record reliable that Claude Code may not wait for at its exit.
                        && h["async"] != true
                        && (!*blocks || h["onFailure"] == "block")
                })
            })
        });
        // A runbook's observers are there only in a runbook's run (and then as the others).
        if !ours && (*when == When::Always || !entries.is_empty()) {
            problems.push(format!("StepProof's hook is not registered for {event}"));
        }
    }
    problems
}

/// Why the command line would start Claude Code with its managed hooks switched off, if it
/// would: `claude --bare` (which sets `CLAUDE_CODE_SIMPLE`), or one of the variables of
/// [`HOOK_DEFEATING_ENV`](crate::profile::claude_settings::HOOK_DEFEATING_ENV) assigned
/// through `env`. Launches from inside are the hook's to judge (the policy denies nested agent
/// launches); this is the caller's own command line.
pub fn command_defeats_hook(argv: &[std::ffi::OsString]) -> Option<String> {
    let rest = match after_env_prefix(argv) {
        Ok(rest) => rest,
        Err(why) => return Some(why),
    };
    let program = rest.first().map(base_name).unwrap_or_default();
    if program == "claude" || program == "claude.exe" {
        let before_separator = rest[1..].iter().take_while(|a| *a != "--");
        if before_separator.into_iter().any(|a| a == "--bare") {
            return Some(
                "`claude --bare` switches off every hook, StepProof's managed one included; run it without --bare"
                    .into(),
            );
        }
    }
    None
}

/// Whether the command is Claude Code (`claude`, `claude.exe`, by any path, after an `env`
/// prefix).
pub fn command_is_claude(argv: &[std::ffi::OsString]) -> bool {
    after_env_prefix(argv)
        .ok()
        .and_then(|rest| rest.first().map(base_name))
        .is_some_and(|p| p == "claude" || p == "claude.exe")
}

/// Whether Claude Code, run as `argv`, needs a model login: not to print its version or help,
/// nor for the subcommands that manage its own set-up (`mcp`, `config`, `doctor`, `update`,
/// `install`, `plugin`).
pub fn claude_needs_a_login(argv: &[std::ffi::OsString]) -> bool {
    const WITHOUT_A_LOGIN: &[&str] = &["mcp", "config", "doctor", "update", "install", "plugin"];
    let Ok(rest) = after_env_prefix(argv) else {
        return false;
    };
    let args = rest.get(1..).unwrap_or_default();
    let asks_only = args
        .iter()
        .any(|a| matches!(a.to_str(), Some("--version" | "-v" | "--help" | "-h")));
    let subcommand = args
        .iter()
        .filter_map(|a| a.to_str())
        .find(|a| !a.starts_with('-'));
    !asks_only && !subcommand.is_some_and(|s| WITHOUT_A_LOGIN.contains(&s))
}

/// Whether the caller's environment sends Claude Code to a cloud provider's model service
/// (Bedrock, Vertex AI, Foundry), whose login is the provider's, not one StepProof reads.
pub fn uses_a_cloud_provider(env: &[(String, String)]) -> bool {
    env.iter().any(|(name, value)| {
        matches!(
            name.as_str(),
            "CLAUDE_CODE_USE_BEDROCK" | "CLAUDE_CODE_USE_VERTEX" | "CLAUDE_CODE_USE_FOUNDRY"
        ) && !matches!(value.trim(), "" | "0" | "false")
    })
}

fn base_name(arg: &std::ffi::OsString) -> String {
    Path::new(arg)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The command after an `env [-u NAME] [NAME=VALUE]…` prefix; `Err` when a variable set there
/// would switch the hook off.
fn after_env_prefix(argv: &[std::ffi::OsString]) -> Result<&[std::ffi::OsString], String> {
    use crate::profile::claude_settings::defeats_hook;
    let mut rest = argv;
    if rest.first().is_some_and(|a| base_name(a) == "env") {
        rest = &rest[1..];
        while let Some(arg) = rest.first() {
            let text = arg.to_string_lossy();
            if let Some((name, _)) = text.split_once('=').filter(|_| !text.starts_with('-')) {
                if defeats_hook(name) {
                    return Err(format!(
                        "`env {name}=…` would switch Claude Code's managed hooks off, point it at other managed settings, or give it a script to run before every command"
                    ));
                }
            } else if matches!(
                text.as_ref(),
                "-u" | "--unset" | "-C" | "--chdir" | "-S" | "--split-string"
            ) {
                rest = rest.get(1..).unwrap_or_default();
            } else if !text.starts_with('-') {
                break;
            }
            rest = rest.get(1..).unwrap_or_default();
        }
    }
    Ok(rest)
}

/// The compiled hook policy, as the hook binary reads it.
pub fn compiled_policy(
    profile: &Profile,
    home: &Path,
    workspace: &Path,
) -> Result<Vec<u8>, PlanError> {
    let Some(config) = &profile.hook else {
        return Err(PlanError::NoHookSection);
    };
    for (what, path) in [("workspace", workspace), ("home", home)] {
        if path.to_str().is_none() {
            return Err(PlanError::NotUtf8ForHook {
                what,
                path: path.to_path_buf(),
            });
        }
    }
    crate::sandbox::plan::hook_policy::compile_file(profile, config, home, workspace)
        .map_err(|reason| PlanError::HookPolicy { reason })
}

/// `env` is the command's environment as planned (before the agent's own variables).
pub fn plan_agent(
    profile: &Profile,
    facts: &HostFacts,
    home: &Path,
    workspace: &Path,
    env: &[(String, String)],
) -> Result<Option<AgentPlan>, PlanError> {
    if profile.hook.is_none() {
        return Ok(None);
    }
    let hook_binary = facts
        .hook_binary
        .clone()
        .ok_or(PlanError::HookBinaryMissing)?;
    let policy = compiled_policy(profile, home, workspace)?;
    tracing::debug!(bytes = policy.len(), "plan: hook policy compiled");
    // What runs around each command is the launch's: the fixed variables, and the exported
    // functions the project's own settings would bring.
    let mut pinned = pinned_env(env);
    pinned.extend(
        project_bash_functions(workspace, &facts.cwd)
            .into_iter()
            .map(|name| (name, String::new())),
    );
    let ours = managed_settings(
        &profile.claude.managed_settings,
        &pinned,
        facts.runbook.is_some(),
        facts.single_turn,
    );
    let settings = serde_json::to_string_pretty(&ours).expect("JSON values serialize");
    let pinned_names: Vec<String> = pinned.iter().map(|(name, _)| name.clone()).collect();
    let host = read_host_managed(&facts.claude_managed_dir, &pinned_names);
    let merged = merge_managed(&ours, &host.documents);
    let mut managed_files = vec![(PathBuf::from(MANAGED_FILE), settings)];
    managed_files.extend(host.files);
    managed_memory(&mut managed_files, &policy, facts.shell_tool);
    let state = AgentState {
        run_dir: facts.run_dir.clone(),
        config_dir: facts.run_dir.join("claude-config"),
        hook_socket: facts.run_dir.join("hook.sock"),
        hook_binary: hook_binary.clone(),
        workspace: workspace.to_path_buf(),
        home: home.to_path_buf(),
        sessions: (profile.claude.keep_sessions && !facts.fresh.sessions)
            .then(|| sessions_dir(home, workspace)),
        seeding: facts.session_seeding.clone(),
        shipped: crate::runbook::chat::AGENTS
            .iter()
            .map(|path| path.to_string())
            .collect(),
    };
    let client = Some(hook_binary.with_file_name("stepproof"))
        .filter(|client| client.is_file())
        .map(|src| MountOp::FromSupervisor {
            src,
            dst: CLIENT_BINARY.into(),
            access: Access::ReadOnly,
        });
    let mounts: Vec<MountOp> = [
        // The managed settings Claude Code reads are StepProof's and the host's sanitized
        // drop-ins, nothing else: nothing in a profile's view of /etc can change them.
        MountOp::Generated {
            dst: MANAGED_DIR.into(),
            files: managed_files,
        },
        MountOp::Tmpfs {
            dst: CONTROL_DIR.into(),
            mode: 0o755,
            size_mib: Some(1),
        },
        MountOp::File {
            dst: POLICY_FILE.into(),
            contents: policy,
        },
        MountOp::FromSupervisor {
            src: hook_binary.clone(),
            dst: HOOK_BINARY.into(),
            access: Access::ReadOnly,
        },
        MountOp::FromSupervisor {
            src: state.hook_socket.clone(),
            dst: AUDIT_SOCKET.into(),
            access: Access::ReadOnly,
        },
        MountOp::FromSupervisor {
            src: notices_dir(&facts.run_dir),
            dst: NOTICES_DIR.into(),
            access: Access::ReadOnly,
        },
    ]
    .into_iter()
    // The client beside the hook, when it is installed there (without it the hook still works,
    // and `runbook-author` says it cannot check).
    .chain(client)
    .chain([
        MountOp::SealReadOnly {
            dst: CONTROL_DIR.into(),
        },
        MountOp::FromSupervisor {
            src: state.config_dir.clone(),
            dst: CONFIG_DIR.into(),
            access: Access::ReadWrite,
        },
    ])
    // What Claude Code sources before every command, read-only (the supervisor made them),
    // and the agents and commands StepProof ships (nothing the agent writes there is read as
    // one of them: a worker cannot give itself a `verifier`).
    .chain(
        SOURCED_DIRS
            .iter()
            .chain(READ_ONLY_CACHES)
            .chain(crate::runbook::chat::DIRS)
            .map(|name| MountOp::ReadOnlyInPlace {
                path: Path::new(CONFIG_DIR).join(name),
            }),
    )
    .collect();
    let env = vec![
        ("CLAUDE_CONFIG_DIR".to_string(), CONFIG_DIR.to_string()),
        ("CLAUDE_CODE_TMPDIR".to_string(), "/tmp".to_string()),
    ];
    Ok(Some(AgentPlan {
        mounts,
        managed_removed: host.removed,
        managed_merged: merged,
        managed_ours: ours,
        notes: host.notes,
        env,
        state,
    }))
}

/// Claude Code's organisation-managed memory file in the managed directory: it puts the file in
/// the context of every session (and keeps it there through compaction, subagents included).
pub const MANAGED_MEMORY: &str = "CLAUDE.md";

/// Where the session runs and what it may do, told to the model once per session in the managed
/// `CLAUDE.md` (after the host's own, when the host has one), instead of with every prompt.
fn managed_memory(files: &mut Vec<(PathBuf, String)>, policy: &[u8], shell: bool) {
    let Ok(policy) = stepproof_hook::load::parse(policy, &stepproof_hook::load::Needs::minimal())
    else {
        return;
    };
    let ours = format!(
        "# StepProof\n\n{}\n",
        stepproof_hook::contract::context_text(&policy, shell)
    );
    match files
        .iter_mut()
        .find(|(rel, _)| rel == Path::new(MANAGED_MEMORY))
    {
        Some((_, host)) => {
            if !host.ends_with('\n') {
                host.push('\n');
            }
            host.push('\n');
            host.push_str(&ours);
        }
        None => files.push((PathBuf::from(MANAGED_MEMORY), ours)),
    }
}

/// The host's managed-settings directory as the agent gets it.
#[derive(Debug, Default)]
struct HostManaged {
    /// Relative to the directory: every file but the managed settings as it is; the host's
    /// managed-settings documents (its `managed-settings.json`, then its drop-ins) without the
    /// keys StepProof owns, as drop-ins `managed-settings.d/NNN-…` in the host's order.
    files: Vec<(PathBuf, String)>,
    /// The host's documents as they are carried in, in order (for the merged view).
    documents: Vec<serde_json::Map<String, serde_json::Value>>,
    /// `<path>: <key>` for every owned key removed from a host document.
    removed: Vec<String>,
    /// What was not carried in, and why.
    notes: Vec<String>,
}

/// Whether Claude Code 2.1.328 reads a drop-in of this name: `*.json`, not hidden.
fn is_drop_in_name(name: &std::ffi::OsStr) -> bool {
    let name = name.as_encoded_bytes();
    name.ends_with(b".json") && !name.starts_with(b".")
}

/// Reads the host's `/etc/claude-code` (an administrator's directory). Its managed settings —
/// `managed-settings.json` and the drop-ins of `managed-settings.d/` (`*.json`, in name
/// order), which Claude Code merges in that order — are kept, each without the keys StepProof
/// owns (`claude_settings::OWNED_KEYS`, and in `env` the variables StepProof pins, `pinned`),
/// and carried in as drop-ins over StepProof's own `managed-settings.json`, named so that they
/// keep their order: Claude Code merges them exactly as on the host, and nothing in them can
/// replace or switch off what StepProof's file sets. Every other file comes as it is. Bounded in
/// size, count and depth; what is left out is said.
fn read_host_managed(dir: &Path, pinned: &[String]) -> HostManaged {
    let mut host = HostManaged::default();
    if !dir.is_dir() {
        return host;
    }
    // The documents, in Claude Code's order: the file, then the drop-ins by name.
    let mut documents: Vec<(PathBuf, String)> = Vec::new();
    let mut stack = vec![(PathBuf::new(), 0usize)];
    let mut count = 0usize;
    while let Some((rel, depth)) = stack.pop() {
        let here = dir.join(&rel);
        let mut entries: Vec<_> = match std::fs::read_dir(&here) {
            Ok(entries) => entries
                .filter_map(Result::ok)
                .map(|e| e.file_name())
                .collect(),
            Err(e) => {
                host.notes
                    .push(format!("{}: not read ({e})", here.display()));
                continue;
            }
        };
        entries.sort();
        for name in entries {
            let rel = rel.join(&name);
            let path = dir.join(&rel);
            let in_drop_ins = rel.parent() == Some(Path::new(DROP_IN_DIR));
            // The administrator's links are followed (the directory is root's to write).
            let meta = match std::fs::metadata(&path) {
                Ok(meta) => meta,
                Err(e) => {
                    host.notes
                        .push(format!("{}: left out ({e})", path.display()));
                    continue;
                }
            };
            if meta.is_dir() {
                if in_drop_ins {
                    // Claude Code reads files there, not directories.
                } else if depth + 1 < HOST_DEPTH_MAX {
                    stack.push((rel, depth + 1));
                } else {
                    host.notes
                        .push(format!("{}: left out (too deep)", path.display()));
                }
                continue;
            }
            if in_drop_ins && !is_drop_in_name(&name) {
                host.notes.push(format!(
                    "{}: left out (Claude Code reads only *.json drop-ins)",
                    path.display()
                ));
                continue;
            }
            let text = if !meta.is_file() {
                Err("not a regular file".to_string())
            } else if meta.len() > HOST_FILE_MAX_BYTES {
                Err(format!("larger than {HOST_FILE_MAX_BYTES} bytes"))
            } else if count >= HOST_FILES_MAX {
                Err(format!("more than {HOST_FILES_MAX} files"))
            } else {
                std::fs::read_to_string(&path).map_err(|e| e.to_string())
            };
            let text = match text {
                Ok(text) => text,
                Err(why) => {
                    host.notes
                        .push(format!("{}: left out ({why})", path.display()));
                    continue;
                }
            };
            count += 1;
            if rel == Path::new(MANAGED_FILE) || in_drop_ins {
                documents.push((rel, text));
            } else {
                host.files.push((rel, text));
            }
        }
    }
    // `managed-settings.json` first, then the drop-ins by name (the walk met them in name
    // order, the file before the directory's contents only by chance).
    documents.sort_by_key(|(rel, _)| rel != Path::new(MANAGED_FILE));
    for (index, (rel, text)) in documents.into_iter().enumerate() {
        let path = dir.join(&rel);
        match sanitize_drop_in(&text, pinned) {
            Ok((clean, removed)) => {
                host.removed.extend(
                    removed
                        .into_iter()
                        .map(|key| format!("{}: {key}", path.display())),
                );
                let name = rel.file_name().unwrap_or_default().to_string_lossy();
                let carried = Path::new(DROP_IN_DIR).join(format!("{index:03}-{name}"));
                host.files.push((
                    carried,
                    serde_json::to_string_pretty(&serde_json::Value::Object(clean.clone()))
                        .expect("JSON values serialize"),
                ));
                host.documents.push(clean);
            }
            Err(why) => {
                // Claude Code's reading of a file we cannot parse is unknown: it stays out.
                host.removed
                    .push(format!("{}: the whole file ({why})", path.display()));
            }
        }
    }
    host
}

/// A host managed-settings document without the keys StepProof owns (and without the
/// variables StepProof pins in `env`); the keys removed.
fn sanitize_drop_in(
    text: &str,
    pinned: &[String],
) -> Result<(serde_json::Map<String, serde_json::Value>, Vec<String>), String> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
    let serde_json::Value::Object(mut settings) = value else {
        return Err("not a JSON object".into());
    };
    let removed = remove_owned_from_document(&mut settings, pinned);
    Ok((settings, removed))
}

/// Removes from an organisation's managed-settings document (a host file, a drop-in, the
/// server's settings) the keys StepProof owns, the variables StepProof pins in `env`
/// (`pinned`) and every exported bash function there; returns what was removed.
pub fn remove_owned_from_document(
    settings: &mut serde_json::Map<String, serde_json::Value>,
    pinned: &[String],
) -> Vec<String> {
    let mut removed = crate::profile::claude_settings::remove_owned_keys(settings);
    if let Some(serde_json::Value::Object(env)) = settings.get_mut("env") {
        let names: Vec<String> = env
            .keys()
            .filter(|name| {
                pinned.iter().any(|p| p.eq_ignore_ascii_case(name))
                    || name
                        .get(..BASH_FUNCTION_PREFIX.len())
                        .is_some_and(|head| head.eq_ignore_ascii_case(BASH_FUNCTION_PREFIX))
            })
            .cloned()
            .collect();
        for name in names {
            env.remove(&name);
            removed.push(format!("env.{name} (pinned by StepProof)"));
        }
    }
    removed
}

/// Managed settings as Claude Code 2.1.328 merges its documents (`managed-settings.json`, then
/// each drop-in): objects deep, arrays concatenated without repeats (`fallbackModel` and
/// `modelPicker` replaced), anything else replaced by the later document.
pub fn merge_managed(
    base: &serde_json::Value,
    documents: &[serde_json::Map<String, serde_json::Value>],
) -> serde_json::Value {
    fn merge(into: &mut serde_json::Value, from: &serde_json::Value, key: Option<&str>) {
        use serde_json::Value;
        let replaced = matches!(key, Some("fallbackModel" | "modelPicker"));
        match (into, from) {
            (Value::Object(a), Value::Object(b)) if !replaced => {
                for (k, v) in b {
                    match a.get_mut(k) {
                        Some(existing) => merge(existing, v, Some(k)),
                        None => {
                            a.insert(k.clone(), v.clone());
                        }
                    }
                }
            }
            (Value::Array(a), Value::Array(b)) if !replaced => {
                for v in b {
                    if !a.contains(v) {
                        a.push(v.clone());
                    }
                }
            }
            (into, from) => *into = from.clone(),
        }
    }
    let mut merged = base.clone();
    for document in documents {
        merge(
            &mut merged,
            &serde_json::Value::Object(document.clone()),
            None,
        );
    }
    merged
}

#[cfg(test)]
mod tests;
