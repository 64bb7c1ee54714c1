//! The persistence sweep. A persistence path that does not exist at start cannot be mounted
//! read-only, so the supervisor records every one before the run (hashes, never following
//! symlinks) and compares after it: anything created or changed is moved to a quarantine
//! directory outside the workspace and reported, and the run says so in its exit code.

use crate::profile::Profile;
use crate::sandbox::plan::{SandboxPlan, protected_paths};
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// Exit code of a run whose sweep found tampering (whatever the command's own code was).
pub const EXIT_TAMPERING: i32 = 123;

/// What a path was: nothing, or every entry below it with its content hash (symlinks by
/// target, never followed).
type State = Option<BTreeMap<PathBuf, String>>;

#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    paths: BTreeMap<PathBuf, State>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub path: PathBuf,
    /// `created`, `changed` or `removed`.
    pub change: &'static str,
    /// Where it was moved (created and changed paths).
    pub quarantined_to: Option<PathBuf>,
    pub error: Option<String>,
}

const MAX_ENTRIES: usize = 10_000;

fn state_of(path: &Path) -> State {
    let meta = fs::symlink_metadata(path).ok()?;
    let mut entries = BTreeMap::new();
    collect(path, Path::new(""), &meta, &mut entries);
    Some(entries)
}

fn collect(path: &Path, rel: &Path, meta: &fs::Metadata, out: &mut BTreeMap<PathBuf, String>) {
    if out.len() >= MAX_ENTRIES {
        return;
    }
    let kind = meta.file_type();
    let digest = if kind.is_symlink() {
        format!(
            "link:{}",
            fs::read_link(path)
                .map(|t| t.display().to_string())
                .unwrap_or_default()
        )
    } else if kind.is_file() {
        match fs::read(path) {
            Ok(bytes) => format!("file:{}", hex::encode(Sha256::digest(&bytes))),
            Err(e) => format!("file-unreadable:{e}"),
        }
    } else if kind.is_dir() {
        "dir".to_string()
    } else {
        "special".to_string()
    };
    let mode = std::os::unix::fs::PermissionsExt::mode(&meta.permissions());
    out.insert(rel.to_path_buf(), format!("{digest}:{mode:o}"));
    if kind.is_dir()
        && let Ok(entries) = fs::read_dir(path)
    {
        for entry in entries.flatten() {
            if let Ok(meta) = fs::symlink_metadata(entry.path()) {
                collect(&entry.path(), &rel.join(entry.file_name()), &meta, out);
            }
        }
    }
}

impl Snapshot {
    /// Records the plan's persistence paths as they are now.
    pub fn take(plan: &SandboxPlan) -> Snapshot {
        Snapshot {
            paths: plan
                .protected_paths
                .iter()
                .map(|p| (p.clone(), state_of(p)))
                .collect(),
        }
    }

    /// Compares with now (the paths recorded, and those of repositories that appeared during
    /// the run), quarantining what was created or changed.
    pub fn sweep(&self, profile: &Profile, plan: &SandboxPlan, quarantine: &Path) -> Vec<Finding> {
        let mut notes = Vec::new();
        let mut now: Vec<PathBuf> =
            protected_paths(profile, &plan.workspace, &plan.home, &mut notes);
        now.extend(self.paths.keys().cloned());
        now.sort();
        now.dedup();
        // A path inside another one that changes is reported with its outermost changed parent.
        let mut findings: Vec<Finding> = Vec::new();
        for path in now {
            if findings.iter().any(|f| path.starts_with(&f.path)) {
                continue;
            }
            let before = self.paths.get(&path).cloned().unwrap_or(None);
            let after = state_of(&path);
            if before == after {
                continue;
            }
            let change = match (&before, &after) {
                (None, Some(_)) => "created",
                (Some(_), None) => "removed",
                _ => "changed",
            };
            let mut finding = Finding {
                path: path.clone(),
                change,
                quarantined_to: None,
                error: None,
            };
            if after.is_some() {
                let rel = path.strip_prefix(&plan.workspace).unwrap_or(&path);
                let target = quarantine.join(rel);
                match move_out(&path, &target) {
                    Ok(()) => finding.quarantined_to = Some(target),
                    Err(e) => {
                        finding.error = Some(format!(
                            "moving {} to {}: {e}",
                            path.display(),
                            target.display()
                        ))
                    }
                }
            }
            findings.push(finding);
        }
        findings
    }
}

/// `rename`, or copy and delete across file systems; never follows symlinks.
fn move_out(from: &Path, to: &Path) -> std::io::Result<()> {
    if let Some(parent) = to.parent() {
        fs::create_dir_all(parent)?;
    }
    match fs::rename(from, to) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
            copy_tree(from, to)?;
            remove_tree(from)
        }
        Err(e) => Err(e),
    }
}

fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    let meta = fs::symlink_metadata(from)?;
    if meta.file_type().is_symlink() {
        std::os::unix::fs::symlink(fs::read_link(from)?, to)
    } else if meta.is_dir() {
        fs::create_dir_all(to)?;
        for entry in fs::read_dir(from)? {
            let entry = entry?;
            copy_tree(&entry.path(), &to.join(entry.file_name()))?;
        }
        Ok(())
    } else {
        fs::copy(from, to).map(drop)
    }
}

fn remove_tree(path: &Path) -> std::io::Result<()> {
    if fs::symlink_metadata(path)?.is_dir() {
        fs::remove_dir_all(path)
    } else {
        fs::remove_file(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_and_changed_paths_are_quarantined() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        fs::create_dir_all(ws.join(".git/hooks")).unwrap();
        fs::write(ws.join(".git/hooks/pre-commit"), "a").unwrap();
        let profile = Profile::builtin_default().unwrap();
        let mut plan_paths = Vec::new();
        let mut notes = Vec::new();
        plan_paths.extend(protected_paths(&profile, &ws, dir.path(), &mut notes));
        let snapshot = Snapshot {
            paths: plan_paths
                .iter()
                .map(|p| (p.clone(), state_of(p)))
                .collect(),
        };
        fs::write(ws.join(".git/hooks/pre-commit"), "b").unwrap();
        fs::create_dir_all(ws.join(".claude")).unwrap();
        fs::write(
            ws.join(".claude/settings.json"),
            "{\"disableAllHooks\":true}",
        )
        .unwrap();
        fs::create_dir_all(ws.join("nested/.git/hooks")).unwrap();
        fs::write(ws.join("nested/.git/hooks/post-checkout"), "evil").unwrap();
        let quarantine = dir.path().join("quarantine");
        let plan = fake_plan(&ws, dir.path(), plan_paths);
        let findings = snapshot.sweep(&profile, &plan, &quarantine);
        let paths: Vec<_> = findings
            .iter()
            .map(|f| (f.path.strip_prefix(&ws).unwrap().to_path_buf(), f.change))
            .collect();
        assert!(
            paths.contains(&(PathBuf::from(".git/hooks"), "changed")),
            "{paths:?}"
        );
        assert!(
            paths.contains(&(PathBuf::from(".claude"), "created")),
            "{paths:?}"
        );
        assert!(
            paths.contains(&(PathBuf::from("nested/.git/hooks"), "created")),
            "{paths:?}"
        );
        assert!(!ws.join(".claude").exists());
        assert_eq!(
            fs::read_to_string(quarantine.join(".claude/settings.json")).unwrap(),
            "{\"disableAllHooks\":true}"
        );
    }

    fn fake_plan(ws: &Path, home: &Path, protected: Vec<PathBuf>) -> SandboxPlan {
        let facts = crate::sandbox::plan::HostFacts {
            uid: 1234,
            gid: 1234,
            groups: vec![],
            home: home.to_path_buf(),
            workspace: ws.to_path_buf(),
            cwd: ws.to_path_buf(),
            env: vec![],
            idmapped_mounts: false,
            passwd: String::new(),
            group: String::new(),
            run_dir: home.join("run"),
            hook_binary: Some(PathBuf::from("/usr/bin/true")),
        };
        let mut plan =
            crate::sandbox::plan::build_plan(&Profile::builtin_default().unwrap(), &facts).unwrap();
        plan.protected_paths = protected;
        plan
    }
}
