//! The host's login as Claude Code keeps it: the store (`~/.claude/.credentials.json`) read and
//! written back, and whether the user refused an API key.

use super::{LoginError, STORE_MAX_BYTES};
use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::{fs, io};

/// Whether the user answered "no" to this key in Claude Code (its last 20 characters under
/// `customApiKeyResponses.rejected`).
pub(super) fn key_rejected(user_config: &Path, key: &str) -> bool {
    let tail: String = key
        .trim()
        .chars()
        .rev()
        .take(20)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    fs::read(user_config)
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| v["customApiKeyResponses"]["rejected"].as_array().cloned())
        .is_some_and(|list| list.iter().any(|v| v.as_str() == Some(tail.as_str())))
}

/// The store as JSON; `None` when there is none.
pub(super) fn read_store(path: &Path) -> Result<Option<serde_json::Value>, LoginError> {
    let fail = |why: String| LoginError::Store {
        path: path.to_path_buf(),
        why,
    };
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(fail(e.to_string())),
    };
    let meta = file.metadata().map_err(|e| fail(e.to_string()))?;
    if !meta.is_file() {
        return Err(fail("not a regular file".into()));
    }
    let mut bytes = Vec::new();
    file.take(STORE_MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| fail(e.to_string()))?;
    if bytes.len() as u64 > STORE_MAX_BYTES {
        return Err(fail(format!("larger than {STORE_MAX_BYTES} bytes")));
    }
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let value: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| fail(format!("not JSON ({e})")))?;
    if value.get("claudeAiOauth").is_none() {
        return Ok(None);
    }
    Ok(Some(value))
}

pub(super) struct OAuth {
    pub(super) access: String,
    pub(super) refresh: Option<String>,
    pub(super) expires_at: u64,
    pub(super) scopes: Vec<String>,
}

pub(super) fn oauth_of(store: &serde_json::Value, path: &Path) -> Result<OAuth, LoginError> {
    let login = &store["claudeAiOauth"];
    let access = login["accessToken"].as_str().unwrap_or_default().to_owned();
    if access.bytes().any(|b| !b.is_ascii_graphic()) {
        return Err(LoginError::Store {
            path: path.to_path_buf(),
            why: "claudeAiOauth.accessToken is not a token".into(),
        });
    }
    Ok(OAuth {
        access,
        refresh: login["refreshToken"].as_str().map(str::to_owned),
        expires_at: login["expiresAt"].as_u64().unwrap_or(0),
        scopes: login["scopes"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default(),
    })
}

/// Replaces the store atomically: a new file beside it (mode 0600, owned as the old one was —
/// invoked as root for a user, the user keeps their file) renamed over it.
pub(super) fn write_store(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let owner = fs::metadata(path)
        .or_else(|_| fs::metadata(dir))
        .map(|m| (m.uid(), m.gid()))?;
    let mut staged = tempfile::Builder::new()
        .prefix(".credentials.json.stepproof-")
        .permissions(fs::Permissions::from_mode(0o600))
        .tempfile_in(dir)?;
    staged.write_all(bytes)?;
    if nix::unistd::geteuid().is_root() {
        std::os::unix::fs::fchown(staged.as_file(), Some(owner.0), Some(owner.1))?;
    }
    staged.as_file().sync_all()?;
    staged.persist(path).map_err(|e| e.error)?;
    Ok(())
}
