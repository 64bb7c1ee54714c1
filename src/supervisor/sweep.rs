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

/// Keys `git init` and ordinary work write to a repository's config; anything else (fsmonitor,
/// hooksPath, sshCommand, pagers, editors, `!` aliases, filters, credential helpers, includes, …)
/// can run code and makes a new config a finding.
const INERT_GIT_CONFIG_KEYS: &[&str] = &[
    "core.repositoryformatversion",
    "core.filemode",
    "core.bare",
    "core.logallrefupdates",
    "core.ignorecase",
    "core.precomposeunicode",
    "core.symlinks",
    "extensions.objectformat",
    "init.defaultbranch",
    "user.name",
    "user.email",
];

/// A repository's `config` with only inert keys (what `git init` writes).
fn inert_git_config(text: &str) -> bool {
    let mut section = String::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(header) = line.strip_prefix('[') {
            let header = header.trim_end_matches(']').trim();
            if header.contains(['"', ' ']) {
                return false; // subsections: remotes, branches, includeIf, filters, …
            }
            section = header.to_ascii_lowercase();
            continue;
        }
        let key = line
            .split('=')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase();
        if !INERT_GIT_CONFIG_KEYS.contains(&format!("{section}.{key}").as_str()) {
            return false;
        }
    }
    true
}

/// A fresh repository's `hooks` (only `*.sample` files, which git never runs) and inert
/// `config` are what `git init` makes: not persistence. They count as absent.
fn inert_git_path(path: &Path, meta: &fs::Metadata) -> bool {
    let in_git_dir = path.parent().and_then(Path::file_name).is_some_and(|n| {
        n == ".git"
            || path
                .parent()
                .and_then(Path::parent)
                .and_then(Path::file_name)
                .is_some_and(|m| m == "modules")
    });
    if !in_git_dir || meta.file_type().is_symlink() {
        return false;
    }
    match path.file_name().and_then(|n| n.to_str()) {
        Some("hooks") if meta.is_dir() => fs::read_dir(path).is_ok_and(|entries| {
            entries.flatten().all(|e| {
                e.file_name().to_string_lossy().ends_with(".sample")
                    && e.file_type().is_ok_and(|t| t.is_file())
            })
        }),
        Some("config") if meta.is_file() => {
            fs::read_to_string(path).is_ok_and(|t| inert_git_config(&t))
        }
        _ => false,
    }
}

fn state_of(path: &Path) -> State {
    let meta = fs::symlink_metadata(path).ok()?;
    if inert_git_path(path, &meta) {
        return None;
    }
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
    fn git_init_is_not_tampering_but_a_risky_config_is() {
        assert!(inert_git_config(
            "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n"
        ));
        assert!(!inert_git_config("[core]\n\tfsmonitor = ./x\n"));
        assert!(!inert_git_config("[alias]\n\tst = !sh -c evil\n"));
        assert!(!inert_git_config(
            "[includeIf \"gitdir:/\"]\n\tpath = /tmp/x\n"
        ));
        let dir = tempfile::tempdir().unwrap();
        let hooks = dir.path().join(".git/hooks");
        fs::create_dir_all(&hooks).unwrap();
        fs::write(hooks.join("pre-commit.sample"), "#!/bin/sh").unwrap();
        assert_eq!(state_of(&hooks), None);
        fs::write(hooks.join("pre-commit"), "#!/bin/sh").unwrap();
        assert!(state_of(&hooks).is_some());
    }

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
