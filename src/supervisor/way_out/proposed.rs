//! What the run wanted at a protected name, for the user to apply after review: the quarantined
//! content as one patch (`git apply` format) in the run's directory. Only regular text files are
//! offered (links, special files and binary content are listed as comments); where the
//! workspace has a file at the same path again (a repository config put back as it was at
//! launch), the patch replaces it, otherwise it adds the file.
//!
//! The quarantine is the supervisor's own directory, outside the sandbox's view: nothing inside
//! can change it while this reads it. Links in it (moved as links) are never followed.

use crate::supervisor::way_out::sweep::Finding;
use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// A file larger than this is listed, not shown.
const MAX_FILE_BYTES: u64 = 1 << 20;
/// At most this many files are offered.
const MAX_FILES: usize = 1000;

/// Writes `<run_dir>/proposed-changes.patch` for the findings that were quarantined; returns
/// its path, or `None` when there is nothing to offer.
pub fn write_patch(
    workspace: &Path,
    findings: &[Finding],
    run_dir: &Path,
) -> io::Result<Option<PathBuf>> {
    let mut patch = String::new();
    let mut files = 0usize;
    for finding in findings {
        let (Some(quarantined), Ok(rel)) = (
            &finding.quarantined_to,
            finding.path.strip_prefix(workspace),
        ) else {
            continue;
        };
        if !matches!(finding.change, "created" | "changed") {
            continue;
        }
        offer(workspace, rel, quarantined, &mut patch, &mut files);
    }
    if files == 0 {
        return Ok(None);
    }
    let header = format!(
        "# What the run wrote at protected names, moved to the quarantine by StepProof.\n\
         # Review it, then apply what you want with: git apply {}\n",
        run_dir.join("proposed-changes.patch").display()
    );
    let path = run_dir.join("proposed-changes.patch");
    let mut out = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o600)
        .open(&path)?;
    io::Write::write_all(&mut out, header.as_bytes())?;
    io::Write::write_all(&mut out, patch.as_bytes())?;
    Ok(Some(path))
}

/// Adds `quarantined` (a file, or a directory of them) as `rel` to `patch`.
fn offer(workspace: &Path, rel: &Path, quarantined: &Path, patch: &mut String, files: &mut usize) {
    let Ok(meta) = fs::symlink_metadata(quarantined) else {
        return;
    };
    if *files >= MAX_FILES {
        return;
    }
    if meta.is_dir() {
        let mut entries: Vec<_> = fs::read_dir(quarantined)
            .map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).collect())
            .unwrap_or_default();
        entries.sort();
        for name in entries {
            offer(
                workspace,
                &rel.join(&name),
                &quarantined.join(&name),
                patch,
                files,
            );
        }
        return;
    }
    if !meta.is_file() {
        patch.push_str(&format!(
            "# not offered: {} (not a regular file)\n",
            rel.display()
        ));
        return;
    }
    let Some(new) = read_text(quarantined) else {
        patch.push_str(&format!(
            "# not offered: {} (binary, unreadable or larger than {MAX_FILE_BYTES} bytes)\n",
            rel.display()
        ));
        return;
    };
    let old = read_text(&workspace.join(rel))
        .filter(|_| fs::symlink_metadata(workspace.join(rel)).is_ok_and(|m| m.is_file()));
    *files += 1;
    patch.push_str(&file_diff(rel, old.as_deref(), &new));
}

/// A regular file's text (never through a link), if it is UTF-8 and small enough.
fn read_text(path: &Path) -> Option<String> {
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.len() > MAX_FILE_BYTES {
        return None;
    }
    let mut text = String::new();
    file.take(MAX_FILE_BYTES).read_to_string(&mut text).ok()?;
    (!text.contains('\0')).then_some(text)
}

/// One file's diff in `git apply` format: `old` replaced whole by `new`, or `new` added.
fn file_diff(rel: &Path, old: Option<&str>, new: &str) -> String {
    let name = rel.display();
    let mut out = format!("diff --git a/{name} b/{name}\n");
    let (old_lines, old_range) = match old {
        Some(old) => {
            out.push_str(&format!("--- a/{name}\n"));
            let lines = hunk_lines(old, '-');
            let count = old.lines().count();
            (lines, format!("-1,{count}"))
        }
        None => {
            out.push_str("new file mode 100644\n--- /dev/null\n");
            (String::new(), "-0,0".to_string())
        }
    };
    out.push_str(&format!("+++ b/{name}\n"));
    let count = new.lines().count();
    let new_start = if count == 0 { 0 } else { 1 };
    out.push_str(&format!("@@ {old_range} +{new_start},{count} @@\n"));
    out.push_str(&old_lines);
    out.push_str(&hunk_lines(new, '+'));
    out
}

fn hunk_lines(text: &str, sign: char) -> String {
    let mut out = String::new();
    for line in text.lines() {
        out.push(sign);
        out.push_str(line);
        out.push('\n');
    }
    if !text.is_empty() && !text.ends_with('\n') {
        out.push_str("\\ No newline at end of file\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_patch_git_applies() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        let q = dir.path().join("q");
        fs::create_dir_all(ws.join(".git")).unwrap();
        fs::create_dir_all(q.join(".github/workflows")).unwrap();
        fs::write(q.join(".github/workflows/ci.yml"), "on: push\njobs: {}\n").unwrap();
        fs::write(ws.join(".git/config"), "[core]\n\tbare = false\n").unwrap();
        fs::write(q.join("config"), "[core]\n\tbare = false\n\tfsmonitor = x").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", q.join("link")).unwrap();
        let mut created = Finding::new(ws.join(".github/workflows"), "created");
        created.quarantined_to = Some(q.join(".github/workflows"));
        let mut changed = Finding::new(ws.join(".git/config"), "changed");
        changed.quarantined_to = Some(q.join("config"));
        let mut link = Finding::new(ws.join(".envrc"), "created");
        link.quarantined_to = Some(q.join("link"));
        let run = dir.path().join("run");
        fs::create_dir_all(&run).unwrap();
        let path = write_patch(&ws, &[created, changed, link], &run)
            .unwrap()
            .unwrap();
        let text = fs::read_to_string(&path).unwrap();
        assert!(
            text.contains("# not offered: .envrc (not a regular file)"),
            "{text}"
        );
        assert!(!text.contains("root:"), "a link was followed: {text}");
        // `git apply --check` accepts it in the workspace (as a repository).
        let ok = std::process::Command::new("git")
            .arg("-C")
            .arg(&ws)
            .args(["apply", "--check", "--unsafe-paths"])
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            ok.status.success(),
            "{text}\n{}",
            String::from_utf8_lossy(&ok.stderr)
        );
    }
}
