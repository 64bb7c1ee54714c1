//! The agent's state, on the supervisor's side: before the run, a fresh config directory seeded
//! with onboarding done, the workspace trusted (without trust no hook runs in interactive mode)
//! and the placeholder login (the real one stays with the supervisor, see
//! [`crate::supervisor::net::login`]), the hook's socket, and the descriptors of everything bound from
//! the host. Nothing in it comes back after the run.

use crate::sandbox::mounts::SupervisorPaths;
use crate::sandbox::plan::agent_layer::AgentState;
use crate::sandbox::plan::{MountOp, SandboxPlan};
use crate::supervisor::net::login::Placeholder;
use crate::sys::beneath;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::Path;

const CREDENTIALS: &str = ".credentials.json";

#[derive(Debug, thiserror::Error)]
#[error("{step} {path}: {source}")]
pub struct AgentStateError {
    pub step: &'static str,
    pub path: std::path::PathBuf,
    pub source: io::Error,
}

fn fail(step: &'static str, path: &Path) -> impl FnOnce(io::Error) -> AgentStateError {
    let path = path.to_path_buf();
    move |source| AgentStateError { step, path, source }
}

/// Keys of the user's `~/.claude.json` that carry the login (never settings or hooks).
const LOGIN_KEYS: &[&str] = &["oauthAccount", "userID"];

/// Creates the run directory, the seeded config directory and the hook socket. Returns the
/// socket's listener (served by the supervisor).
pub fn prepare(
    plan: &SandboxPlan,
    state: &AgentState,
    placeholder: &Placeholder,
) -> Result<UnixListener, AgentStateError> {
    let (uid, gid) = (plan.identity.outside_uid, plan.identity.outside_gid);
    for dir in [&state.run_dir, &state.config_dir] {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(fail("creating", dir))?;
    }
    // The agent's key, as Claude Code will see it (the placeholder, or one the profile passes
    // without the gateway): approved, so it never asks.
    let key = placeholder.api_key().map(str::to_owned).or_else(|| {
        plan.env
            .iter()
            .find(|(n, _)| n == "ANTHROPIC_API_KEY")
            .map(|(_, v)| v.clone())
    });
    let mut seed = serde_json::json!({
        "hasCompletedOnboarding": true,
        "bypassPermissionsModeAccepted": true,
        "projects": {
            state.workspace.display().to_string(): {
                "hasTrustDialogAccepted": true,
                "hasCompletedProjectOnboarding": true,
            }
        },
    });
    if let Some(key) = key {
        let tail: String = key
            .chars()
            .rev()
            .take(20)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        seed["customApiKeyResponses"] = serde_json::json!({ "approved": [tail], "rejected": [] });
    }
    if let Ok(text) = fs::read_to_string(state.home.join(".claude.json"))
        && let Ok(user) = serde_json::from_str::<serde_json::Value>(&text)
    {
        for key in LOGIN_KEYS {
            if let Some(value) = user.get(*key) {
                seed[*key] = value.clone();
            }
        }
    }
    let seed_path = state.config_dir.join(".claude.json");
    write_private(
        &seed_path,
        serde_json::to_string_pretty(&seed)
            .expect("JSON")
            .as_bytes(),
    )?;
    // A claude.ai login: its placeholder, never the user's tokens.
    if let Some(credentials) = &placeholder.credentials {
        write_private(
            &state.config_dir.join(CREDENTIALS),
            &serde_json::to_vec(credentials).expect("JSON values serialize"),
        )?;
    }
    // The workspace's kept sessions, history, memory, todos and plans (when the profile keeps
    // them): before the ownership below, which covers them.
    // The supervisor's notices to the hook: readable by the sandbox user, written only here.
    let notices = crate::sandbox::plan::agent_layer::notices_dir(&state.run_dir);
    fs::DirBuilder::new()
        .mode(0o755)
        .create(&notices)
        .map_err(fail("creating", &notices))?;
    fs::set_permissions(&notices, fs::Permissions::from_mode(0o755))
        .map_err(fail("chmod", &notices))?;
    // What the plan holds read-only in place, for the hook to deny writes to in words.
    let held = crate::supervisor::agent::held_read_only::notice_path(&notices);
    write_private(
        &held,
        super::held_read_only::listing(&plan.mounts).as_bytes(),
    )?;
    fs::set_permissions(&held, fs::Permissions::from_mode(0o644)).map_err(fail("chmod", &held))?;
    crate::supervisor::agent::session_state::seed(state);
    // Empty, and read-only inside (the plan binds them so): nothing in them runs before a
    // command.
    for dir in crate::sandbox::plan::agent_layer::SOURCED_DIRS {
        let path = state.config_dir.join(dir);
        fs::DirBuilder::new()
            .mode(0o755)
            .create(&path)
            .map_err(fail("creating", &path))?;
    }
    // StepProof's agents and slash commands (read-only inside, with their directories).
    for dir in crate::runbook::chat::DIRS {
        let path = state.config_dir.join(dir);
        fs::DirBuilder::new()
            .mode(0o755)
            .create(&path)
            .map_err(fail("creating", &path))?;
    }
    for name in &state.shipped {
        let path = state.config_dir.join(name);
        let content = crate::runbook::chat::content(name).ok_or_else(|| AgentStateError {
            step: "shipping",
            path: path.clone(),
            source: io::Error::other("not a file StepProof ships"),
        })?;
        write_private(&path, content.as_bytes())?;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644))
            .map_err(fail("chmod", &path))?;
    }
    // Empty, and read-only inside: no cached server settings or policy limits of the agent's.
    for name in crate::sandbox::plan::agent_layer::READ_ONLY_CACHES {
        write_private(&state.config_dir.join(name), b"")?;
    }
    chown_tree(&state.config_dir, uid, gid)?;

    let _ = fs::remove_file(&state.hook_socket);
    let listener = bind_unix_listener(&state.hook_socket)
        .map_err(fail("binding the hook socket", &state.hook_socket))?;
    fs::set_permissions(&state.hook_socket, fs::Permissions::from_mode(0o600))
        .map_err(fail("chmod", &state.hook_socket))?;
    std::os::unix::fs::lchown(&state.hook_socket, Some(uid), Some(gid))
        .map_err(fail("chown", &state.hook_socket))?;
    Ok(listener)
}

/// A model verifier run's own `agents/verifier.md` (the definition the supervisor wrote): the
/// directory and the file the supervisor's, read-only to the run's user. Only verifier runs get
/// it; a worker's config directory never holds it.
pub fn install_verifier_agent(state: &AgentState, definition: &str) -> Result<(), AgentStateError> {
    let dir = state.config_dir.join("agents");
    let _ = fs::remove_dir_all(&dir);
    fs::DirBuilder::new()
        .mode(0o755)
        .create(&dir)
        .map_err(fail("creating", &dir))?;
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).map_err(fail("chmod", &dir))?;
    let path = dir.join("verifier.md");
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o444)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .map_err(fail("writing", &path))?;
    file.write_all(definition.as_bytes())
        .map_err(fail("writing", &path))?;
    fs::set_permissions(&path, fs::Permissions::from_mode(0o444)).map_err(fail("chmod", &path))
}

/// Binds a listening socket at `path`, however long: a path beyond the 107 bytes of
/// `sun_path` (a long HOME puts the run directory there) is reached through a descriptor of its
/// directory, `/proc/self/fd/N/NAME`.
fn bind_unix_listener(path: &Path) -> io::Result<UnixListener> {
    const SUN_PATH_MAX: usize = 107;
    if path.as_os_str().len() <= SUN_PATH_MAX {
        return UnixListener::bind(path);
    }
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return UnixListener::bind(path);
    };
    let dir = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(dir)?;
    let short = Path::new("/proc/self/fd")
        .join(std::os::fd::AsRawFd::as_raw_fd(&dir).to_string())
        .join(name);
    UnixListener::bind(short)
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<(), AgentStateError> {
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(fail("writing", path))?;
    file.write_all(bytes).map_err(fail("writing", path))
}

/// `path` (a directory StepProof made, never a link) and everything below it owned by `uid`:
/// walked by descriptor, one `fchownat` per entry (a link's own owner, never its target's),
/// a directory told by its `d_type` (a file system without one: by `fstatat`).
fn chown_tree(path: &Path, uid: u32, gid: u32) -> Result<(), AgentStateError> {
    let root = beneath::open_root(path, beneath::DIR_LISTING).map_err(fail("opening", path))?;
    std::os::unix::fs::fchown(&root, Some(uid), Some(gid)).map_err(fail("chown", path))?;
    chown_below(root.as_fd(), path, uid, gid)
}

fn chown_below(
    dir: BorrowedFd<'_>,
    path: &Path,
    uid: u32,
    gid: u32,
) -> Result<(), AgentStateError> {
    for (name, d_type) in beneath::list_dir(dir).map_err(fail("listing", path))? {
        let entry = path.join(&name);
        beneath::chown_at(dir, &name, uid, gid).map_err(fail("chown", &entry))?;
        let is_dir = match d_type {
            libc::DT_DIR => true,
            libc::DT_UNKNOWN => beneath::stat_at(dir, &name).is_ok_and(|st| st.is_dir()),
            _ => false,
        };
        if is_dir {
            let sub = beneath::open_beneath(dir, Path::new(&name), beneath::DIR_LISTING, 0)
                .map_err(fail("opening", &entry))?;
            chown_below(sub.as_fd(), &entry, uid, gid)?;
        }
    }
    Ok(())
}

/// For a root invocation, detached copies (`open_tree(OPEN_TREE_CLONE)`) of what the plan's
/// `FromSupervisor` ops bind, in order: only host root can reach and clone them. A normal
/// caller's init binds its own paths itself, so nothing is handed over then.
pub fn open_handed_paths(plan: &SandboxPlan) -> Result<SupervisorPaths, AgentStateError> {
    let mut trees = SupervisorPaths::new();
    if plan.identity.mode == crate::sandbox::plan::IdentityMode::Caller {
        return Ok(trees);
    }
    for op in &plan.mounts {
        // In the order the init takes them: a path bound from the supervisor's side, and a git
        // layer's directory in the run directory.
        let src = match op {
            MountOp::FromSupervisor { src, .. } => src,
            MountOp::GitLayer { layer, .. } => layer,
            _ => continue,
        };
        trees.push_back(
            crate::sys::open_tree_clone(src).map_err(fail("cloning the mount of", src))?,
        );
    }
    Ok(trees)
}
