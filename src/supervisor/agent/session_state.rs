//! Claude Code's session data, kept per workspace outside the sandbox, so that `claude
//! --resume`, `--continue`, `/resume`, the prompt history and auto-memory work across runs:
//! before a run the workspace's kept files are copied into the run's fresh config directory
//! ([`seed`]: the prompt history and auto-memory, and the sessions the command needs, see
//! [`SessionSeeding`]); after it, only transcripts, the prompt history, auto-memory, todos and
//! plans come back ([`take_back`]) — regular files with one link, owned by the sandbox user,
//! opened beneath the config directory without following a single link or blocking on a FIFO,
//! each under a size cap (a file over it is dropped whole and said, never truncated). Settings,
//! `CLAUDE.md`, hooks, agents, commands, plugins, shell snapshots, session environments and
//! caches of remote settings never come back: they are not on the list.
//!
//! The state of a workspace ([`sessions_dir`]) holds `workspace` (its path, for `stepproof
//! state`), `lock` (`flock`: seeding shared, taking back exclusive), `last-used` (its mtime says
//! when a run last used the state; [`prune`] removes states unused for [`UNUSED_DAYS`] days) and
//! `files/`, the kept tree laid out as in Claude Code's config directory.
//!
//! Two runs in one workspace: each takes back only what it changed (size or mtime differ from
//! what it was seeded with); a file both changed is the last run's to end (last writer wins per
//! file), except `history.jsonl`, where what each run appended is appended to the kept file, so
//! the prompts of both stay. The run's copies of what the state then holds are removed from
//! its run directory.

pub use crate::sandbox::plan::agent_layer::sessions_dir;
use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

mod pruning;
mod seeding;
mod state_dir;
mod taking_back;
mod walk;

pub(crate) use pruning::prune_unused;
pub use pruning::{prune, prune_aged_sessions};
pub use seeding::seed;
pub(crate) use state_dir::{touch, touch_at, write_unless_same};
pub use taking_back::{take_back, take_back_and_report};

/// What kind of kept file a path is, by where it stands in the config directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// `history.jsonl`: the prompt history (the up arrow, Ctrl-R).
    History,
    /// `projects/<key>/<session>.jsonl`: a session's transcript.
    Transcript,
    /// `projects/<key>/memory/**`: auto-memory, loaded into the next session's context.
    Memory,
    /// `todos/*`.
    Todo,
    /// `plans/*`.
    Plan,
}

impl Kind {
    /// The most one file of this kind may hold; a larger one is dropped whole.
    pub fn cap(self) -> u64 {
        match self {
            Kind::History => 16 << 20,
            Kind::Transcript => 64 << 20,
            Kind::Memory => 256 << 10,
            Kind::Todo | Kind::Plan => 1 << 20,
        }
    }

    fn word(self) -> &'static str {
        match self {
            Kind::History => "the prompt history",
            Kind::Transcript => "a transcript",
            Kind::Memory => "a memory file",
            Kind::Todo => "a todo list",
            Kind::Plan => "a plan",
        }
    }
}

/// At most this many files are kept per workspace, and this many bytes in all.
pub const MAX_FILES: usize = 10_000;
pub const MAX_TOTAL_BYTES: u64 = 1 << 30;
/// How deep below `memory/` a file may be.
const MEMORY_DEPTH_MAX: usize = 8;
/// A workspace's state that no run used for this long is removed by [`prune`].
pub const UNUSED_DAYS: u64 = 90;
const HISTORY: &str = "history.jsonl";
const MANIFEST: &str = "sessions-seeded.json";

/// A file the walk found, checked by its `fstatat` (never opened yet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub rel: PathBuf,
    pub kind: Kind,
    pub size: u64,
    pub mtime: (i64, i64),
}

impl Found {
    /// The session a transcript or a todo list belongs to, by its name (`<session>.jsonl`;
    /// `<session>-agent-<agent>.json` or `<session>.json`).
    fn session(&self) -> Option<&[u8]> {
        let name = self.rel.file_name()?.as_bytes();
        match self.kind {
            Kind::Transcript => name.strip_suffix(b".jsonl"),
            Kind::Todo => Some(
                name.windows(7)
                    .position(|w| w == b"-agent-")
                    .map_or(name.strip_suffix(b".json").unwrap_or(name), |at| {
                        &name[..at]
                    }),
            ),
            _ => None,
        }
    }
}

/// A file at a kept name that is not kept, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Dropped {
    pub path: String,
    pub why: String,
}

#[derive(Debug, Default)]
pub struct Walk {
    pub found: Vec<Found>,
    pub dropped: Vec<Dropped>,
    total: u64,
}

/// What a run was seeded with: each file's size and mtime (the seeded copy's mtime is the
/// kept file's), and the prompt history's length and hash (to tell an append from a rewrite).
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct Manifest {
    files: BTreeMap<PathBuf, (u64, i64, i64)>,
    history: Option<(u64, String)>,
}

/// A memory file the run created, changed or removed; its SHA-256 (None: removed).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MemoryChange {
    pub path: String,
    pub sha256: Option<String>,
}

/// What came back from a run.
#[derive(Debug, Default, serde::Serialize)]
pub struct TakenBack {
    pub state: PathBuf,
    /// Files created or changed in the state (the prompt history counts once).
    pub kept: Vec<String>,
    /// Files the run removed, removed from the state too.
    pub removed: Vec<String>,
    pub memory_changed: Vec<MemoryChange>,
    pub dropped: Vec<Dropped>,
    /// What went wrong on StepProof's side (the state is then as it was for those files).
    pub errors: Vec<String>,
}

#[cfg(test)]
mod tests;
