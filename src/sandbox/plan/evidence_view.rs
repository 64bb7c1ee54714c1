//! An evidence sandbox's view beyond the overlay every evidence run has (`[runbook.evidence_view]`,
//! written by the supervisor for one evidence command): what defines the command and what the
//! step protects are read-only, build state the proof does not trust is an empty tmpfs, ignored
//! files under protected paths are hidden, and the build caches are seen through a throw-away
//! layer with their configuration hidden (an agent's `runner = "/bin/true"` in
//! `$CARGO_HOME/config.toml` decides nothing here).

use crate::profile::budgets::EvidenceView;
use crate::sandbox::plan::caches::{CACHES_DIR, plan_caches};
use crate::sandbox::plan::{HideReason, MountOp, Scope};
use std::path::{Path, PathBuf};

/// Files in the caches a tool reads as configuration (or credentials): hidden in an evidence
/// sandbox, wherever they are under a cache's directory root.
pub const CACHE_CONFIG_FILES: &[&str] = &[
    "cargo/config",
    "cargo/config.toml",
    "cargo/credentials",
    "cargo/credentials.toml",
    "npm/.npmrc",
    "npm/npmrc",
    "npm/etc/npmrc",
    "pip/pip.conf",
    "uv/uv.toml",
    "go-mod/cache/download/sumdb",
];

/// The variables an evidence run sets on top of the run's environment: Python neither writes
/// bytecode nor reads a `__pycache__` of the workspace (its cache is a private directory).
pub fn evidence_env() -> [(&'static str, &'static str); 2] {
    [
        ("PYTHONDONTWRITEBYTECODE", "1"),
        (
            "PYTHONPYCACHEPREFIX",
            crate::runbook::definitions::PYCACHE_PREFIX,
        ),
    ]
}

/// `rel` beneath `workspace` when it exists with no link on its way (a link at the end is not
/// mounted over either: a mount follows it): whether it is a directory.
fn existing_beneath(workspace: &Path, rel: &str) -> Option<(PathBuf, bool)> {
    let mut path = workspace.to_path_buf();
    let mut meta = None;
    for part in rel.split('/') {
        path.push(part);
        let m = std::fs::symlink_metadata(&path).ok()?;
        if m.file_type().is_symlink() {
            return None;
        }
        meta = Some(m);
    }
    let meta = meta?;
    (meta.is_dir() || meta.is_file()).then(|| (path, meta.is_dir()))
}

/// The mounts of an evidence view, in order: caches behind a throw-away layer and their
/// configuration hidden; then read-only paths (recursive, so before what is laid below them),
/// discarded build state, and hidden files.
pub(crate) fn mounts(scope: &Scope<'_>, view: &EvidenceView) -> Vec<MountOp> {
    let mut out = Vec::new();
    let size = scope.profile.filesystem.tmp_size_mib;
    let caches = plan_caches(scope.profile, scope.facts).host;
    out.push(MountOp::ScratchOverlay {
        dst: CACHES_DIR.into(),
        size_mib: size,
    });
    for rel in CACHE_CONFIG_FILES {
        if let Some((_, is_dir)) = existing_beneath(&caches, rel) {
            let dst = Path::new(CACHES_DIR).join(rel);
            let reason = HideReason::EvidenceInput;
            out.push(if is_dir {
                MountOp::HideDir { dst, reason }
            } else {
                MountOp::HideFile { dst, reason }
            });
        }
    }
    let workspace = scope.workspace;
    for rel in &view.read_only {
        if let Some((path, _)) = existing_beneath(workspace, rel) {
            out.push(MountOp::ReadOnlyInPlace { path });
        }
    }
    for rel in &view.discarded {
        if let Some((dst, true)) = existing_beneath(workspace, rel) {
            out.push(MountOp::Tmpfs {
                dst,
                mode: 0o1777,
                size_mib: Some(size),
            });
        }
    }
    for rel in &view.hidden {
        if let Some((dst, is_dir)) = existing_beneath(workspace, rel) {
            let reason = HideReason::EvidenceInput;
            out.push(if is_dir {
                MountOp::HideDir { dst, reason }
            } else {
                MountOp::HideFile { dst, reason }
            });
        }
    }
    out
}
