//! `stepproof state show|rm|list`: what StepProof keeps of Claude Code's sessions for a
//! workspace between runs (transcripts, prompt history, auto-memory, todos, plans; see
//! `supervisor::agent::session_state`), read and removed by the user. Auto-memory is shown in full: the
//! next run loads it into the model's context.

use crate::supervisor::agent::session_state::{self, Kind, Walk};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

#[derive(clap::Subcommand, Debug)]
pub enum StateCommand {
    /// What is kept for a workspace (the current directory unless --workspace): its sessions,
    /// prompt history, todos, plans, and its auto-memory in full; and any run of it whose
    /// supervisor died before its end (work owed: `stepproof repair`).
    Show {
        #[arg(long, value_name = "DIR")]
        workspace: Option<PathBuf>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Remove everything kept for a workspace (refused while a run in it is taking back).
    Rm {
        #[arg(long, value_name = "DIR")]
        workspace: Option<PathBuf>,
    },
    /// Every workspace with kept state: its path, size, and when a run last used it.
    List {
        /// Machine-readable output: an array of `{workspace, bytes, last_used}` (`last_used`:
        /// seconds since the epoch, or null).
        #[arg(long)]
        json: bool,
    },
}

/// The workspace as a run would name it (canonical); one that is gone is taken as written.
fn workspace_of(given: Option<&Path>) -> Result<PathBuf, String> {
    let path = match given {
        Some(p) => p.to_path_buf(),
        None => std::env::current_dir().map_err(|e| format!("the current directory: {e}"))?,
    };
    match path.canonicalize() {
        Ok(p) => Ok(p),
        Err(_) if path.is_absolute() => Ok(path),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

fn home() -> PathBuf {
    crate::cli::host::caller_home(nix::unistd::getuid().as_raw())
}

fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::History => "history",
        Kind::Transcript => "transcript",
        Kind::Memory => "memory",
        Kind::Todo => "todo",
        Kind::Plan => "plan",
    }
}

fn age(mtime: (i64, i64)) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let secs = (now - mtime.0).max(0);
    match secs {
        s if s < 120 => format!("{s} s ago"),
        s if s < 7_200 => format!("{} min ago", s / 60),
        s if s < 172_800 => format!("{} h ago", s / 3_600),
        s => format!("{} days ago", s / 86_400),
    }
}

/// Runs `stepproof state …`; the exit code.
pub fn run_command(command: StateCommand) -> i32 {
    match command {
        StateCommand::Show { workspace, json } => match workspace_of(workspace.as_deref()) {
            Ok(ws) => show(&home(), &ws, json),
            Err(e) => {
                crate::say!("stepproof state show: {e}");
                crate::exit::ExitCode::Refused.code()
            }
        },
        StateCommand::Rm { workspace } => match workspace_of(workspace.as_deref()) {
            Ok(ws) => rm(&home(), &ws),
            Err(e) => {
                crate::say!("stepproof state rm: {e}");
                crate::exit::ExitCode::Refused.code()
            }
        },
        StateCommand::List { json } => list(&home(), json),
    }
}

fn show(home: &Path, workspace: &Path, json: bool) -> i32 {
    let dir = session_state::sessions_dir(home, workspace);
    let files = dir.join("files");
    let walk =
        crate::sys::beneath::open_root(&files, crate::sys::beneath::DIR_LISTING).map(|root| {
            let walk = Walk::of(root.as_fd(), None);
            let memory: Vec<(String, String, String)> = walk
                .found
                .iter()
                .filter(|f| f.kind == Kind::Memory)
                .map(|f| {
                    let bytes = std::fs::read(files.join(&f.rel)).unwrap_or_default();
                    (
                        f.rel.display().to_string(),
                        {
                            use sha2::Digest;
                            hex::encode(sha2::Sha256::digest(&bytes))
                        },
                        String::from_utf8_lossy(&bytes).into_owned(),
                    )
                })
                .collect();
            (walk, memory)
        });
    let (walk, memory) = walk.unwrap_or_default();
    // Runs of this workspace whose supervisor died before their end.
    let owed: Vec<String> = crate::audit::runs::owed_runs(&crate::audit::owed::runs_dir(home))
        .iter()
        .filter(|o| o.of_workspace(workspace))
        .map(crate::audit::owed::OwedRun::describe)
        .collect();
    if json {
        let value = serde_json::json!({
            "workspace": crate::audit::text::path(workspace),
            "state": crate::audit::text::path(&dir),
            "kept": dir.is_dir(),
            "files": walk.found.iter().map(|f| serde_json::json!({
                "path": crate::audit::text::path(&f.rel),
                "kind": kind_name(f.kind),
                "bytes": f.size,
                "mtime": f.mtime.0,
            })).collect::<Vec<_>>(),
            "memory": memory.iter().map(|(path, sha256, text)| serde_json::json!({
                "path": path, "sha256": sha256, "text": text,
            })).collect::<Vec<_>>(),
            "work_owed": owed,
        });
        crate::out!(
            "{}",
            serde_json::to_string_pretty(&value).unwrap_or_default()
        );
        return 0;
    }
    crate::out!("workspace: {}", workspace.display());
    // The last run's line, as the run said it at its end.
    if let Some(recap) =
        crate::cli::recap::last_run_of(&crate::audit::owed::runs_dir(home), workspace)
            .and_then(|log| crate::cli::recap::Recap::of(&log))
    {
        crate::out!("last run:  {}", recap.line(true));
    }
    for what in &owed {
        crate::out!("WORK OWED: {what}");
    }
    if !dir.is_dir() {
        crate::out!("nothing kept ({} does not exist)", dir.display());
        return 0;
    }
    crate::out!("state:     {}", dir.display());
    for kind in [Kind::Transcript, Kind::History, Kind::Todo, Kind::Plan] {
        let of_kind: Vec<_> = walk.found.iter().filter(|f| f.kind == kind).collect();
        if of_kind.is_empty() {
            continue;
        }
        crate::out!("{} ({}):", kind_name(kind), of_kind.len());
        for f in of_kind {
            let resume = (kind == Kind::Transcript)
                .then(|| f.rel.file_stem().map(|s| s.to_string_lossy().into_owned()))
                .flatten()
                .map(|id| format!("  claude --resume {id}"))
                .unwrap_or_default();
            crate::out!(
                "  {}  {} bytes, {}{resume}",
                f.rel.display(),
                f.size,
                age(f.mtime)
            );
        }
    }
    if memory.is_empty() {
        crate::out!("memory: none");
    } else {
        crate::out!(
            "memory ({} files; the next run in this workspace loads it into the model's context):",
            memory.len()
        );
        for (path, sha256, text) in &memory {
            crate::out!("--- {path} (sha256 {sha256})");
            crate::out_part!("{text}");
            if !text.ends_with('\n') {
                crate::out!();
            }
        }
    }
    0
}

fn rm(home: &Path, workspace: &Path) -> i32 {
    let dir = session_state::sessions_dir(home, workspace);
    if !dir.is_dir() {
        crate::out!("nothing kept for {}", workspace.display());
        return 0;
    }
    // A run taking back holds the lock: removing under it would lose nothing it then writes.
    let lock = std::fs::File::open(dir.join("lock"));
    if let Ok(lock) = &lock
        && lock.try_lock().is_err()
    {
        crate::say!(
            "stepproof state rm: a run in {} is using its state now; try again when it ends",
            workspace.display()
        );
        return 1;
    }
    match std::fs::remove_dir_all(&dir) {
        Ok(()) => {
            crate::out!(
                "removed {} (kept for {})",
                dir.display(),
                workspace.display()
            );
            0
        }
        Err(e) => {
            crate::say!("stepproof state rm: removing {}: {e}", dir.display());
            crate::exit::ExitCode::HostFailure.code()
        }
    }
}

fn list(home: &Path, json: bool) -> i32 {
    let root = home.join(crate::audit::STATE_DIR).join("sessions");
    let mut rows = Vec::new();
    for entry in std::fs::read_dir(&root).into_iter().flatten().flatten() {
        let path = entry.path();
        let Ok(text) = std::fs::read_to_string(path.join("workspace")) else {
            continue;
        };
        let workspace = text.trim_end_matches('\n').to_string();
        let used = std::fs::metadata(path.join("last-used")).ok().map(|m| {
            use std::os::unix::fs::MetadataExt;
            (m.mtime(), m.mtime_nsec())
        });
        let size: u64 =
            crate::sys::beneath::open_root(&path.join("files"), crate::sys::beneath::DIR_LISTING)
                .map(|root| {
                    Walk::of(root.as_fd(), None)
                        .found
                        .iter()
                        .map(|f| f.size)
                        .sum()
                })
                .unwrap_or(0);
        rows.push((workspace, size, used));
    }
    rows.sort();
    if json {
        let value: Vec<serde_json::Value> = rows
            .iter()
            .map(|(workspace, size, used)| {
                serde_json::json!({
                    "workspace": workspace,
                    "bytes": size,
                    "last_used": used.map(|(secs, _)| secs),
                })
            })
            .collect();
        crate::out!(
            "{}",
            serde_json::to_string_pretty(&value).unwrap_or_default()
        );
        return 0;
    }
    if rows.is_empty() {
        crate::out!("no workspace has kept state");
    }
    for (workspace, size, used) in rows {
        crate::out!(
            "{workspace}  {size} bytes, last used {}",
            used.map(age).unwrap_or_else(|| "never".into())
        );
    }
    0
}
