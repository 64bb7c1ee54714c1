//! The agent's state, on the supervisor's side: before the run, a fresh config directory seeded
//! from a supervisor-owned copy of the user's login (onboarding done, workspace trusted — without
//! trust no hook runs in interactive mode), the hook's socket, and the descriptors of everything
//! bound from the host; after the run, only a refreshed credentials file is carried back.

use crate::sandbox::mounts::SupervisorPaths;
use crate::sandbox::plan::agent_layer::AgentState;
use crate::sandbox::plan::{MountOp, SandboxPlan};
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
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
pub fn prepare(plan: &SandboxPlan, state: &AgentState) -> Result<UnixListener, AgentStateError> {
    let (uid, gid) = (plan.identity.outside_uid, plan.identity.outside_gid);
    for dir in [&state.run_dir, &state.config_dir] {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(fail("creating", dir))?;
    }
    // The agent's key, as Claude Code will see it: approved, so it never asks.
    let key = plan
        .env
        .iter()
        .find(|(n, _)| n == "ANTHROPIC_API_KEY")
        .map(|(_, v)| v.clone());
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
    let credentials = state.home.join(".claude").join(CREDENTIALS);
    if let Ok(bytes) = fs::read(&credentials) {
        write_private(&state.config_dir.join(CREDENTIALS), &bytes)?;
    }
    // The workspace's kept sessions, history, memory, todos and plans (when the profile keeps
    // them): before the ownership below, which covers them.
    crate::supervisor::session_state::seed(state);
    // Empty, and read-only inside (the plan binds them so): nothing in them runs before a
    // command.
    for dir in crate::sandbox::plan::agent_layer::SOURCED_DIRS {
        let path = state.config_dir.join(dir);
        fs::DirBuilder::new()
            .mode(0o755)
            .create(&path)
            .map_err(fail("creating", &path))?;
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

fn chown_tree(path: &Path, uid: u32, gid: u32) -> Result<(), AgentStateError> {
    std::os::unix::fs::lchown(path, Some(uid), Some(gid)).map_err(fail("chown", path))?;
    if path.is_dir() && !path.is_symlink() {
        for entry in fs::read_dir(path).map_err(fail("listing", path))?.flatten() {
            chown_tree(&entry.path(), uid, gid)?;
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
        if let MountOp::FromSupervisor { src, .. } = op {
            trees.push_back(
                crate::sandbox::sys::open_tree_clone(src)
                    .map_err(fail("cloning the mount of", src))?,
            );
        }
    }
    Ok(trees)
}

/// The most a credentials file may hold: Claude Code's is well under 1 KiB.
const CREDENTIALS_MAX_BYTES: u64 = 64 * 1024;

/// What became of the credentials file the agent left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CarryBack {
    /// A refreshed login went back to the user's `~/.claude/.credentials.json`.
    Refreshed(std::path::PathBuf),
    /// What the run left was not taken, and why.
    Refused(String),
}

impl CarryBack {
    pub fn note(&self) -> String {
        match self {
            CarryBack::Refreshed(path) => {
                format!("refreshed credentials carried back to {}", path.display())
            }
            CarryBack::Refused(why) => format!("credentials NOT carried back: {why}"),
        }
    }
}

/// After the run: a refreshed login goes back to the user's `~/.claude/.credentials.json`, and
/// nothing else the agent wrote (settings, CLAUDE.md, env, apiKeyHelper) reaches the next run.
/// The file is the sandbox's, so it is trusted for nothing: only a regular file with one link,
/// owned by the sandbox user (`owner`, as the host sees it), at most 64 KiB, opened without
/// following links or blocking, whose `claudeAiOauth` has the expected shape, and only when the
/// run was seeded with a login (a run never brings in a login of its own). Only that key is
/// replaced in the user's file, which is written atomically. `None`: nothing to do.
pub fn carry_back(state: &AgentState, owner: u32) -> Option<CarryBack> {
    let seeded = fs::read(state.home.join(".claude").join(CREDENTIALS))
        .ok()
        .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok());
    let fresh = match read_sandbox_credentials(&state.config_dir.join(CREDENTIALS), owner) {
        Ok(None) => return None,
        Ok(Some(bytes)) => bytes,
        Err(why) => return Some(CarryBack::Refused(why)),
    };
    let Some(seeded) = seeded.filter(|v| v.get("claudeAiOauth").is_some()) else {
        return Some(CarryBack::Refused(
            "the run was not seeded with a claude.ai login, so it cannot bring one back".into(),
        ));
    };
    let login = match serde_json::from_slice::<serde_json::Value>(&fresh)
        .map_err(|e| format!("not JSON ({e})"))
        .and_then(|v| oauth_login(&v))
    {
        Ok(login) => login,
        Err(why) => return Some(CarryBack::Refused(why)),
    };
    if seeded.get("claudeAiOauth") == Some(&login) {
        return None;
    }
    let mut merged = seeded;
    merged["claudeAiOauth"] = login;
    let target_dir = state.home.join(".claude");
    let target = target_dir.join(CREDENTIALS);
    let bytes = serde_json::to_vec(&merged).expect("JSON values serialize");
    match write_atomically(&target_dir, &target, &bytes) {
        Ok(()) => Some(CarryBack::Refreshed(target)),
        Err(e) => Some(CarryBack::Refused(format!(
            "writing {}: {e}",
            target.display()
        ))),
    }
}

/// The credentials file the run left, if it is one StepProof may read at all.
fn read_sandbox_credentials(path: &Path, owner: u32) -> Result<Option<Vec<u8>>, String> {
    use std::io::Read;
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(format!("{} is a symbolic link", path.display()));
        }
        Err(e) => return Err(format!("opening {}: {e}", path.display())),
    };
    let meta = file
        .metadata()
        .map_err(|e| format!("fstat {}: {e}", path.display()))?;
    use std::os::unix::fs::MetadataExt;
    if !meta.is_file() {
        return Err(format!("{} is not a regular file", path.display()));
    }
    if meta.nlink() != 1 {
        return Err(format!(
            "{} has {} hard links",
            path.display(),
            meta.nlink()
        ));
    }
    if meta.uid() != owner {
        return Err(format!(
            "{} is owned by uid {}, not the sandbox user ({owner})",
            path.display(),
            meta.uid()
        ));
    }
    if meta.len() > CREDENTIALS_MAX_BYTES {
        return Err(format!(
            "{} is {} bytes (at most {CREDENTIALS_MAX_BYTES})",
            path.display(),
            meta.len()
        ));
    }
    let mut bytes = Vec::new();
    file.take(CREDENTIALS_MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("reading {}: {e}", path.display()))?;
    if bytes.len() as u64 > CREDENTIALS_MAX_BYTES {
        return Err(format!("{} grew while read", path.display()));
    }
    Ok(Some(bytes))
}

/// The `claudeAiOauth` object with the shape Claude Code writes (tokens as strings, an expiry
/// in milliseconds, optional scopes and subscription type), and nothing else.
fn oauth_login(value: &serde_json::Value) -> Result<serde_json::Value, String> {
    let login = value
        .get("claudeAiOauth")
        .and_then(|v| v.as_object())
        .ok_or("no claudeAiOauth object")?;
    let mut out = serde_json::Map::new();
    for (key, field) in login {
        let fits = match key.as_str() {
            "accessToken" | "refreshToken" => field.as_str().is_some_and(|t| {
                !t.is_empty() && t.len() <= 4096 && t.bytes().all(|b| b.is_ascii_graphic())
            }),
            "expiresAt" => field.as_u64().is_some(),
            "scopes" => field.as_array().is_some_and(|a| {
                a.len() <= 64 && a.iter().all(|s| s.as_str().is_some_and(|s| s.len() <= 256))
            }),
            "subscriptionType" | "rateLimitTier" => {
                field.is_null() || field.as_str().is_some_and(|s| s.len() <= 256)
            }
            _ => return Err(format!("unexpected key claudeAiOauth.{key}")),
        };
        if !fits {
            return Err(format!(
                "claudeAiOauth.{key} does not have the expected shape"
            ));
        }
        out.insert(key.clone(), field.clone());
    }
    if !out.contains_key("accessToken") || !out.contains_key("expiresAt") {
        return Err("claudeAiOauth lacks accessToken or expiresAt".into());
    }
    Ok(serde_json::Value::Object(out))
}

/// Writes a new file beside `target` (mode 0600, never through an existing name) and renames it
/// over `target`.
fn write_atomically(dir: &Path, target: &Path, bytes: &[u8]) -> io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let mut staged = tempfile::Builder::new()
        .prefix(".credentials.json.stepproof-")
        .permissions(fs::Permissions::from_mode(0o600))
        .tempfile_in(dir)?;
    staged.write_all(bytes)?;
    staged.as_file().sync_all()?;
    staged.persist(target).map_err(|e| e.error)?;
    Ok(())
}
