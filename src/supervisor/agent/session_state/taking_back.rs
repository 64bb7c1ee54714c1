//! After a run: what it changed among the kept names comes back into the state (the prompt
//! history appended, not replaced), and is said — the memory line, the drops, the audit record.

use super::state_dir::{files_dir, lock, mark_used, mtime_of};
use super::walk::read_checked;
use super::{Dropped, HISTORY, Kind, MANIFEST, Manifest, MemoryChange, TakenBack, Walk};

use crate::sandbox::plan::agent_layer::AgentState;
use crate::sys::beneath::{self, DIR_LISTING};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fs::{self};
use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// After the run: what the run changed among the kept names of its config directory comes
/// back into the workspace's state, under the state's exclusive lock. `owner`: the sandbox user
/// as the host sees it (`outside_uid`). None: the state is not kept, or the run was never
/// seeded (the launch stopped before).
pub fn take_back(state: &AgentState, owner: u32) -> Option<TakenBack> {
    let dir = state.sessions.as_ref()?;
    let manifest: Manifest = fs::read(state.run_dir.join(MANIFEST))
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())?;
    let mut out = TakenBack {
        state: dir.clone(),
        ..TakenBack::default()
    };
    let _lock = match lock(dir, true) {
        Ok(lock) => lock,
        Err(e) => {
            out.errors.push(format!("locking {}: {e}", dir.display()));
            return Some(out);
        }
    };
    mark_used(dir, &state.workspace);
    let root = match beneath::open_root(&state.config_dir, DIR_LISTING) {
        Ok(root) => root,
        Err(e) => {
            out.errors
                .push(format!("opening {}: {e}", state.config_dir.display()));
            return Some(out);
        }
    };
    let walk = Walk::of(root.as_fd(), Some(owner));
    out.dropped = walk.dropped;
    let files = files_dir(dir);
    let mut seen = std::collections::BTreeSet::new();
    // The run's files whose content the state now holds (as seeded, or taken back).
    let mut settled = Vec::new();
    for found in &walk.found {
        seen.insert(found.rel.clone());
        let seeded = manifest.files.get(&found.rel);
        if found.kind != Kind::History
            && seeded == Some(&(found.size, found.mtime.0, found.mtime.1))
        {
            settled.push(&found.rel);
            continue;
        }
        let bytes = match read_checked(root.as_fd(), found, Some(owner)) {
            Ok(bytes) => bytes,
            Err(why) => {
                out.dropped.push(Dropped {
                    path: crate::audit::text::path(&found.rel).into_owned(),
                    why,
                });
                continue;
            }
        };
        // The same bytes as kept (a file rewritten unchanged): nothing to say or write.
        if found.kind != Kind::History && same_content(&files.join(&found.rel), &bytes) {
            settled.push(&found.rel);
            continue;
        }
        let result = if found.kind == Kind::History {
            merge_history(&files.join(HISTORY), &bytes, manifest.history.as_ref())
        } else {
            write_kept(&files.join(&found.rel), &bytes, mtime_of(found.mtime)).map(|()| true)
        };
        if result.is_ok() {
            settled.push(&found.rel);
        }
        match result {
            Ok(false) => {}
            Ok(true) => {
                out.kept
                    .push(crate::audit::text::path(&found.rel).into_owned());
                if found.kind == Kind::Memory {
                    out.memory_changed.push(MemoryChange {
                        path: crate::audit::text::path(&found.rel).into_owned(),
                        sha256: Some(hex::encode(Sha256::digest(&bytes))),
                    });
                }
            }
            Err(e) => out.errors.push(e),
        }
    }
    // Removed inside (Claude Code's own clean-up of old sessions, a memory the agent deleted):
    // removed from the state too, unless another run changed it since this one was seeded. A
    // file dropped above keeps its earlier version.
    let dropped: std::collections::BTreeSet<&str> =
        out.dropped.iter().map(|d| d.path.as_str()).collect();
    let mut removed = Vec::new();
    for (rel, seeded) in &manifest.files {
        let shown = crate::audit::text::path(rel).into_owned();
        if seen.contains(rel) || dropped.contains(shown.as_str()) {
            continue;
        }
        let path = files.join(rel);
        let unchanged = fs::symlink_metadata(&path).is_ok_and(|m| {
            use std::os::unix::fs::MetadataExt;
            m.is_file() && (m.len(), m.mtime(), m.mtime_nsec()) == *seeded
        });
        if !unchanged {
            continue;
        }
        match fs::remove_file(&path) {
            Ok(()) => {
                if rel.starts_with("projects")
                    && rel
                        .components()
                        .nth(2)
                        .is_some_and(|c| c.as_os_str() == "memory")
                {
                    out.memory_changed.push(MemoryChange {
                        path: shown.clone(),
                        sha256: None,
                    });
                }
                removed.push(shown);
            }
            Err(e) => out.errors.push(format!("removing {}: {e}", path.display())),
        }
    }
    out.removed = removed;
    // The run's copies of what the state now holds go: a run directory does not keep a second
    // copy of every session it was given. What was dropped stays, as the run left it.
    remove_settled(root.as_fd(), &settled);
    Some(out)
}

/// Removes each of `settled` (relative to the directory `root`) by descriptor, never through a
/// link on the way; one that cannot be removed stays. Returns how many went.
pub(super) fn remove_settled(root: BorrowedFd<'_>, settled: &[&PathBuf]) -> usize {
    let mut removed = 0;
    let mut dirs: BTreeMap<&Path, Option<OwnedFd>> = BTreeMap::new();
    for rel in settled {
        let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
            continue;
        };
        let dir = dirs.entry(parent).or_insert_with(|| {
            beneath::open_beneath(root, parent, beneath::DIR_LOOKUP, 0)
                .inspect_err(|e| tracing::debug!("opening {}: {e}", parent.display()))
                .ok()
        });
        if let Some(dir) = dir {
            match beneath::unlink_at(dir.as_fd(), name, false) {
                Ok(()) => removed += 1,
                Err(e) => tracing::debug!("removing {}: {e}", rel.display()),
            }
        }
    }
    removed
}

/// Whether the kept file at `path` (the state's own) holds exactly `bytes`.
fn same_content(path: &Path, bytes: &[u8]) -> bool {
    fs::symlink_metadata(path).is_ok_and(|m| m.is_file() && m.len() == bytes.len() as u64)
        && fs::read(path).is_ok_and(|kept| kept == bytes)
}

/// Writes a kept file into the state: a new file beside it, renamed over it (a reader of the
/// state sees the old or the new file, never half of one), with the run's mtime.
fn write_kept(target: &Path, bytes: &[u8], mtime: SystemTime) -> Result<(), String> {
    let parent = target.parent().unwrap_or(Path::new("."));
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(parent)
        .map_err(|e| format!("creating {}: {e}", parent.display()))?;
    let mut staged = tempfile::Builder::new()
        .prefix(".stepproof-")
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .tempfile_in(parent)
        .map_err(|e| format!("creating a file in {}: {e}", parent.display()))?;
    staged
        .write_all(bytes)
        .and_then(|()| {
            staged
                .as_file()
                .set_times(fs::FileTimes::new().set_modified(mtime))
        })
        .map_err(|e| format!("writing {}: {e}", target.display()))?;
    staged
        .persist(target)
        .map_err(|e| format!("writing {}: {}", target.display(), e.error))?;
    Ok(())
}

/// The prompt history after a run: what the run appended to the history it was seeded with is
/// appended to the kept one (which another run may have grown meanwhile); a history the run
/// rewrote replaces it (last writer wins). Beyond the cap the oldest whole lines go. Returns
/// whether the kept history changed.
fn merge_history(
    target: &Path,
    run: &[u8],
    seeded: Option<&(u64, String)>,
) -> Result<bool, String> {
    let appended = match seeded {
        None => Some(run),
        Some((len, sha)) => {
            let len = *len as usize;
            (run.len() >= len && hex::encode(Sha256::digest(&run[..len])) == *sha)
                .then(|| &run[len..])
        }
    };
    let merged = match appended {
        Some([]) => return Ok(false),
        Some(new) => {
            let mut kept = fs::read(target).unwrap_or_default();
            if !kept.is_empty() && !kept.ends_with(b"\n") {
                kept.push(b'\n');
            }
            kept.extend_from_slice(new);
            kept
        }
        None => run.to_vec(),
    };
    let merged = newest_lines_within(&merged, Kind::History.cap());
    write_kept(target, merged, SystemTime::now())?;
    Ok(true)
}

/// The longest tail of `text` that starts at a line and fits in `cap` bytes.
pub(super) fn newest_lines_within(text: &[u8], cap: u64) -> &[u8] {
    let cap = cap as usize;
    if text.len() <= cap {
        return text;
    }
    let from = text.len() - cap;
    // The first line that starts at or after `from`.
    match text[from - 1..].iter().position(|b| *b == b'\n') {
        Some(at) => &text[from + at..],
        None => &[],
    }
}

/// [`take_back`], said: the memory line at exit, what was dropped, and an audit record
/// (`sessions`) with the hashes of the memory files that changed. Returns how many memory files
/// changed.
pub fn take_back_and_report(
    plan: &crate::sandbox::plan::SandboxPlan,
    audit: Option<&crate::audit::sink::AuditSink>,
) -> usize {
    let Some(state) = &plan.agent else {
        return 0;
    };
    let Some(done) = take_back(state, plan.identity.outside_uid) else {
        return 0;
    };
    for dropped in &done.dropped {
        crate::say!(
            "stepproof-run: not kept from the run's Claude Code state: {} ({})",
            dropped.path,
            dropped.why
        );
    }
    for error in &done.errors {
        crate::say!("stepproof-run: keeping the run's sessions: {error}");
    }
    if !done.memory_changed.is_empty() {
        let n = done.memory_changed.len();
        crate::say!(
            "stepproof-run: memory changed: {n} file{} ({}); the next run in this workspace loads it into the model's context (`stepproof state show` reads it, `stepproof state rm` removes it)",
            if n == 1 { "" } else { "s" },
            done.memory_changed
                .iter()
                .map(|m| m.path.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if let Some(audit) = audit {
        audit.record("supervisor", "sessions", &done);
    }
    done.memory_changed.len()
}
