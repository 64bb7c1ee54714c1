//! `stepproof approvals [DIR] [--json]`: every runbook approval waiting for a person — on this
//! host (the caller's runs; as root, every user's), or under DIR (a state directory, its `runs/`,
//! or one run's directory) — newest first, with what the step did: the brief the supervisor
//! wrote when it asked (`approvals/STEP.json` in the run's directory). A brief counts only while
//! its run is live (its approval socket answers): a crashed run's brief is stale, not pending.

use serde_json::Value;
use std::io::Read;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

/// A brief is at most this large (the supervisor bounds the diff and the tails well under it).
const BRIEF_READ_MAX: u64 = 1 << 20;
/// The briefs' directory in a run's directory (the supervisor's `BRIEFS_DIR`).
const BRIEFS_DIR: &str = "approvals";

/// What the command found: the pending briefs, newest first, and the stale ones skipped.
#[derive(Debug, Default)]
pub struct Found {
    pub pending: Vec<Value>,
    pub stale: usize,
    pub unreadable: Vec<String>,
}

/// The run directories to look in: under `dir` when given, else the caller's state directory
/// and, as root, every home's in the password database.
fn run_dirs(dir: Option<&Path>, home: &Path) -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = Vec::new();
    match dir {
        Some(dir) => roots.push(dir.to_path_buf()),
        None => {
            roots.push(home.join(crate::audit::STATE_DIR).join("runs"));
            if nix::unistd::geteuid().is_root() {
                for home in password_homes() {
                    let runs = home.join(crate::audit::STATE_DIR).join("runs");
                    if !roots.contains(&runs) {
                        roots.push(runs);
                    }
                }
            }
        }
    }
    let mut dirs = Vec::new();
    for root in roots {
        // A run's directory itself, a `runs/` directory, or a state directory above it.
        for candidate in [root.clone(), root.join("runs")] {
            if candidate.join(BRIEFS_DIR).is_dir() {
                dirs.push(candidate.clone());
            }
            if let Ok(entries) = std::fs::read_dir(&candidate) {
                for entry in entries.flatten() {
                    let path = entry.path();
                    if path.join(BRIEFS_DIR).is_dir() {
                        dirs.push(path);
                    }
                }
            }
        }
    }
    dirs.sort();
    dirs.dedup();
    dirs
}

/// Every home directory the password database names (root's look at every user's runs).
fn password_homes() -> Vec<PathBuf> {
    std::fs::read_to_string("/etc/passwd")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(':').nth(5))
        .filter(|h| h.starts_with('/') && *h != "/")
        .map(PathBuf::from)
        .collect()
}

/// Whether the run is live: its approval socket accepts a connection.
fn live(run_dir: &Path) -> bool {
    UnixStream::connect(run_dir.join(crate::runbook::client::APPROVAL_SOCKET)).is_ok()
}

/// The pending approvals under `dir` (or on this host), newest first.
pub fn find(dir: Option<&Path>, home: &Path) -> Found {
    let mut found = Found::default();
    for run_dir in run_dirs(dir, home) {
        let Ok(entries) = std::fs::read_dir(run_dir.join(BRIEFS_DIR)) else {
            continue;
        };
        let is_live = live(&run_dir);
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().and_then(|e| e.to_str()) != Some("json") {
                continue;
            }
            if !is_live {
                found.stale += 1;
                continue;
            }
            let mut bytes = Vec::new();
            let read = std::fs::File::open(&path)
                .and_then(|f| f.take(BRIEF_READ_MAX).read_to_end(&mut bytes));
            match read
                .map_err(|e| e.to_string())
                .and_then(|_| serde_json::from_slice::<Value>(&bytes).map_err(|e| e.to_string()))
            {
                Ok(brief) => found.pending.push(brief),
                Err(e) => found
                    .unreadable
                    .push(format!("reading {}: {e}", path.display())),
            }
        }
    }
    found
        .pending
        .sort_by_key(|b| std::cmp::Reverse(b["requested_at_ms"].as_u64().unwrap_or(0)));
    found
}

fn s(v: &Value) -> String {
    match v {
        Value::String(s) => crate::audit::text::printable(s),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

fn when(ms: u64, now_ms: u64) -> String {
    let (day, time) = crate::audit::show::utc_parts(ms);
    let left = ms.saturating_sub(now_ms) / 1000;
    format!(
        "{day} {} UTC ({})",
        &time[..8],
        if ms <= now_ms {
            "past".to_string()
        } else if left >= 3600 {
            format!("in {}h{:02}m", left / 3600, left / 60 % 60)
        } else {
            format!("in {}m{:02}s", left / 60, left % 60)
        }
    )
}

/// One pending approval as a person reads it.
pub fn render(brief: &Value, now_ms: u64) -> String {
    let mut out = String::new();
    let line = |out: &mut String, text: String| {
        out.push_str(&text);
        out.push('\n');
    };
    line(
        &mut out,
        format!(
            "run {} · workspace {} · runbook {} ({})",
            s(&brief["run"]),
            s(&brief["workspace"]),
            s(&brief["runbook"]),
            s(&brief["runbook_title"])
        ),
    );
    line(
        &mut out,
        format!(
            "  step {} — {} (attempt {}) · asks {} · deadline {}, {}",
            s(&brief["step"]),
            s(&brief["step_title"]),
            s(&brief["attempt"]),
            s(&brief["approvers"]),
            s(&brief["deadline"]),
            when(brief["deadline_at_ms"].as_u64().unwrap_or(0), now_ms)
        ),
    );
    line(&mut out, "  evidence (this attempt):".into());
    for item in brief["evidence"].as_array().into_iter().flatten() {
        line(
            &mut out,
            format!("    [{}] {}", s(&item["item"]), s(&item["summary"])),
        );
        if let Some(tail) = item["output_tail"]
            .as_str()
            .filter(|t| !t.trim().is_empty())
        {
            for l in tail.trim_end().lines() {
                line(
                    &mut out,
                    format!("        | {}", crate::audit::text::printable(l)),
                );
            }
        }
    }
    for v in brief["verifier"].as_array().into_iter().flatten() {
        line(
            &mut out,
            format!(
                "  verifier tier {}: {} (model {})",
                s(&v["tier"]),
                s(&v["verdict"]),
                s(&v["model"])
            ),
        );
        for reason in v["reasons"].as_array().into_iter().flatten() {
            line(&mut out, format!("    - {}", s(reason)));
        }
    }
    let diff = &brief["diff"];
    match diff["error"].as_str() {
        Some(why) => line(&mut out, format!("  diff: not available: {why}")),
        None => {
            line(
                &mut out,
                format!(
                    "  diff since {} ({} file(s) changed{}):",
                    s(&diff["since"]),
                    s(&diff["files_changed"]),
                    if diff["truncated"] == true {
                        "; cut at 24 KiB"
                    } else {
                        ""
                    }
                ),
            );
            for l in diff["text"].as_str().unwrap_or_default().lines() {
                line(
                    &mut out,
                    format!("    {}", crate::audit::text::printable(l)),
                );
            }
            for why in diff["not_shown"].as_array().into_iter().flatten() {
                line(&mut out, format!("    (not shown: {})", s(why)));
            }
        }
    }
    line(&mut out, format!("  approve: {}", s(&brief["approve"])));
    line(&mut out, format!("  deny:    {}", s(&brief["deny"])));
    out
}

/// `stepproof approvals`: exit 0 (whether or not something waits), 2 when nothing could be
/// looked at.
pub fn run(dir: Option<&Path>, home: &Path, json: bool) -> i32 {
    if let Some(dir) = dir
        && !dir.is_dir()
    {
        crate::say!("stepproof approvals: {} is not a directory", dir.display());
        return 2;
    }
    let found = find(dir, home);
    for why in &found.unreadable {
        crate::say!("stepproof approvals: {why}");
    }
    if json {
        crate::out!(
            "{}",
            serde_json::json!({ "pending": found.pending, "stale": found.stale })
        );
        return 0;
    }
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    if found.pending.is_empty() {
        crate::out!("No approval is waiting.");
    }
    for (n, brief) in found.pending.iter().enumerate() {
        if n > 0 {
            crate::out!("");
        }
        crate::out!("{}", render(brief, now_ms).trim_end());
    }
    if found.stale > 0 {
        crate::say!(
            "stepproof approvals: {} request(s) of runs no longer live skipped (a later --runbook run asks again)",
            found.stale
        );
    }
    0
}
