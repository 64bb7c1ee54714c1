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
use crate::sandbox::plan::agent_layer::{
    AgentState, SEED_NEWEST, SEED_NEWEST_BYTES, SessionSeeding,
};
use crate::sys::beneath::{self, DIR_LISTING, FILE_READING, Stat};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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

/// What an entry is, in words (`fstatat`'s type).
fn what(st: &Stat) -> &'static str {
    match st.mode & libc::S_IFMT {
        libc::S_IFLNK => "a symbolic link",
        libc::S_IFIFO => "a FIFO",
        libc::S_IFSOCK => "a socket",
        libc::S_IFCHR => "a character device",
        libc::S_IFBLK => "a block device",
        libc::S_IFDIR => "a directory",
        _ => "not a regular file",
    }
}

/// A project key as Claude Code 2.1.328 makes one: the directory's path with every character
/// but ASCII letters and digits turned into `-` (a path longer than 200 characters: cut, then
/// `-` and a hash in base 36).
fn is_project_key(name: &OsStr) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 255
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'-')
}

impl Walk {
    /// Walks the kept names beneath `root` (a config directory, or a state's `files/`):
    /// nothing is followed, nothing opened; `owner`: the uid every kept file must have.
    pub fn of(root: BorrowedFd<'_>, owner: Option<u32>) -> Walk {
        Walk::kinds(root, owner, true)
    }

    /// [`Walk::of`]; without `sessions`, only the prompt history and auto-memory (the
    /// transcripts, todo lists and plans are not looked at: a single turn's seeding does not
    /// pay for every kept session).
    fn kinds(root: BorrowedFd<'_>, owner: Option<u32>, sessions: bool) -> Walk {
        let mut walk = Walk::default();
        walk.entry(
            root,
            OsStr::new(HISTORY),
            Path::new(HISTORY),
            Kind::History,
            owner,
        );
        let session_dirs: &[(&str, Kind)] = if sessions {
            &[("todos", Kind::Todo), ("plans", Kind::Plan)]
        } else {
            &[]
        };
        for &(dir, kind) in session_dirs {
            if let Some(fd) = walk.open_dir(root, Path::new(dir)) {
                for name in names(fd.as_fd()) {
                    let rel = Path::new(dir).join(&name);
                    walk.entry(fd.as_fd(), &name, &rel, kind, owner);
                }
            }
        }
        let Some(projects) = walk.open_dir(root, Path::new("projects")) else {
            return walk;
        };
        for key in names(projects.as_fd()) {
            let is_dir = beneath::stat_at(projects.as_fd(), &key).is_ok_and(|st| st.is_dir());
            if !is_project_key(&key) || !is_dir {
                continue;
            }
            let rel_key = Path::new("projects").join(&key);
            let Some(project) = walk.open_dir(projects.as_fd(), Path::new(&key)) else {
                continue;
            };
            for name in names(project.as_fd()) {
                let rel = rel_key.join(&name);
                if name == "memory" {
                    walk.memory(project.as_fd(), &name, &rel, owner, 0);
                } else if sessions && name.as_bytes().ends_with(b".jsonl") {
                    walk.entry(project.as_fd(), &name, &rel, Kind::Transcript, owner);
                }
            }
        }
        walk
    }

    /// A directory beneath `dir`, or None (absent: silently; anything else: dropped).
    fn open_dir(&mut self, dir: BorrowedFd<'_>, rel: &Path) -> Option<OwnedFd> {
        match beneath::stat_at(dir, rel.as_os_str()) {
            Ok(st) if st.is_dir() => {}
            Ok(st) => {
                self.drop(rel, what(&st).to_string());
                return None;
            }
            Err(_) => return None,
        }
        beneath::open_beneath(dir, rel, DIR_LISTING, 0)
            .inspect_err(|e| self.drop(rel, format!("not opened ({e})")))
            .ok()
    }

    fn memory(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &OsStr,
        rel: &Path,
        owner: Option<u32>,
        depth: usize,
    ) {
        match beneath::stat_at(dir, name) {
            Ok(st) if st.is_dir() => {}
            Ok(_) => return self.entry(dir, name, rel, Kind::Memory, owner),
            Err(e) => return self.drop(rel, format!("not looked at ({e})")),
        }
        if depth >= MEMORY_DEPTH_MAX {
            return self.drop(rel, format!("deeper than {MEMORY_DEPTH_MAX} directories"));
        }
        let Some(fd) = self.open_dir(dir, Path::new(name)) else {
            return;
        };
        for child in names(fd.as_fd()) {
            self.memory(fd.as_fd(), &child, &rel.join(&child), owner, depth + 1);
        }
    }

    /// One file at a kept name: kept if it is a regular file with one link, owned by `owner`,
    /// under its kind's cap and the totals.
    fn entry(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &OsStr,
        rel: &Path,
        kind: Kind,
        owner: Option<u32>,
    ) {
        let st = match beneath::stat_at(dir, name) {
            Ok(st) => st,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return,
            Err(e) => return self.drop(rel, format!("not looked at ({e})")),
        };
        if let Err(why) = check(&st, kind, owner) {
            return self.drop(rel, why);
        }
        if self.found.len() >= MAX_FILES {
            return self.drop(rel, format!("more than {MAX_FILES} files"));
        }
        if self.total + st.size > MAX_TOTAL_BYTES {
            return self.drop(rel, format!("more than {MAX_TOTAL_BYTES} bytes in all"));
        }
        self.total += st.size;
        self.found.push(Found {
            rel: rel.to_path_buf(),
            kind,
            size: st.size,
            mtime: st.mtime,
        });
    }

    fn drop(&mut self, rel: &Path, why: String) {
        self.dropped.push(Dropped {
            path: crate::audit::text::path(rel).into_owned(),
            why,
        });
    }
}

/// The entries of a directory, sorted (an error lists nothing: the directory is then empty to
/// the walk).
fn names(dir: BorrowedFd<'_>) -> Vec<std::ffi::OsString> {
    let mut names: Vec<_> = beneath::list_dir(dir)
        .unwrap_or_default()
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    names.sort();
    names
}

/// Why a file at a kept name is not kept, if it is not.
fn check(st: &Stat, kind: Kind, owner: Option<u32>) -> Result<(), String> {
    if !st.is_file() {
        return Err(what(st).to_string());
    }
    if let Some(owner) = owner
        && st.uid != owner
    {
        return Err(format!(
            "owned by uid {}, not the sandbox user ({owner})",
            st.uid
        ));
    }
    if st.nlink != 1 {
        return Err(format!("{} hard links", st.nlink));
    }
    if st.size > kind.cap() {
        return Err(format!(
            "{} bytes, over the cap of {} for {}: dropped whole",
            st.size,
            kind.cap(),
            kind.word()
        ));
    }
    Ok(())
}

/// Opens a found file again beneath `root` (no link anywhere on the way, no blocking) and
/// checks it as the walk did.
fn open_checked(root: BorrowedFd<'_>, found: &Found, owner: Option<u32>) -> Result<File, String> {
    let fd = beneath::open_beneath(root, &found.rel, FILE_READING, 0)
        .map_err(|e| format!("not opened ({e})"))?;
    let st = beneath::stat_fd(fd.as_fd()).map_err(|e| format!("fstat: {e}"))?;
    check(&st, found.kind, owner)?;
    Ok(File::from(fd))
}

/// Reads a found file whole, at most its cap (one that grew past it is dropped).
fn read_checked(
    root: BorrowedFd<'_>,
    found: &Found,
    owner: Option<u32>,
) -> Result<Vec<u8>, String> {
    let file = open_checked(root, found, owner)?;
    let mut bytes = Vec::new();
    file.take(found.kind.cap() + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("reading: {e}"))?;
    if bytes.len() as u64 > found.kind.cap() {
        return Err(format!(
            "grew past the cap of {} while read",
            found.kind.cap()
        ));
    }
    Ok(bytes)
}

/// What a run was seeded with: each file's size and mtime (the seeded copy's mtime is the
/// kept file's), and the prompt history's length and hash (to tell an append from a rewrite).
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct Manifest {
    files: BTreeMap<PathBuf, (u64, i64, i64)>,
    history: Option<(u64, String)>,
}

fn mtime_of(time: (i64, i64)) -> SystemTime {
    let (secs, nanos) = time;
    if secs >= 0 {
        UNIX_EPOCH + Duration::new(secs as u64, nanos.clamp(0, 999_999_999) as u32)
    } else {
        UNIX_EPOCH
    }
}

fn files_dir(state: &Path) -> PathBuf {
    state.join("files")
}

/// Opens (creating) the state's lock file and takes the lock.
fn lock(state: &Path, exclusive: bool) -> io::Result<File> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(state)?;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(state.join("lock"))?;
    if exclusive {
        file.lock()?;
    } else {
        file.lock_shared()?;
    }
    Ok(file)
}

/// Marks the state as used now (for [`prune`]) and says whose it is.
fn mark_used(state: &Path, workspace: &Path) {
    let _ = touch(&state.join("last-used"));
    let mut text = workspace.as_os_str().as_bytes().to_vec();
    text.push(b'\n');
    let _ = write_unless_same(&state.join("workspace"), &text);
}

/// Sets `path`'s mtime to now, creating it empty if it is missing (never following a link).
/// Not a rewrite: that would be a truncate each run.
pub(crate) fn touch(path: &Path) -> std::io::Result<()> {
    touch_at(path, SystemTime::now())
}

/// [`touch`] with the mtime given.
pub(crate) fn touch_at(path: &Path, at: SystemTime) -> std::io::Result<()> {
    fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?
        .set_modified(at)
}

/// Writes `bytes` to `path` unless it holds them already: a marker every run writes the same
/// way is read, not rewritten (on ext4 the truncate of a rewrite frees a block, a discard
/// where the disk is mounted so: the slowest write of a launch).
pub(crate) fn write_unless_same(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if fs::read(path).is_ok_and(|held| held == bytes) {
        return Ok(());
    }
    fs::write(path, bytes)
}

/// Before the run: the workspace's kept files copied into the fresh config directory (mtimes
/// kept: `--continue` takes the newest session), and what was seeded written beside it in the
/// run directory for [`take_back`]. What cannot be seeded is said and left out; the run goes on.
pub fn seed(state: &AgentState) {
    let Some(dir) = &state.sessions else {
        return;
    };
    let mut manifest = Manifest::default();
    let lock = match lock(dir, false) {
        Ok(lock) => lock,
        Err(e) => {
            crate::say!(
                "stepproof-run: sessions of this workspace not seeded: locking {}: {e}",
                dir.display()
            );
            return;
        }
    };
    mark_used(dir, &state.workspace);
    let kept = beneath::open_root(&files_dir(dir), DIR_LISTING);
    let targets = beneath::open_root(&state.config_dir, DIR_LISTING);
    if let (Ok(root), Ok(targets)) = (kept, &targets) {
        let sessions = state.seeding != SessionSeeding::None;
        let walk = Walk::kinds(root.as_fd(), None, sessions);
        let mut targets = Targets::new(targets.as_fd());
        for found in chosen(&walk.found, &state.seeding) {
            match seed_one(root.as_fd(), found, &mut targets) {
                Ok(history) => {
                    if let Some(history) = history {
                        manifest.history = Some(history);
                    }
                    manifest.files.insert(
                        found.rel.clone(),
                        (found.size, found.mtime.0, found.mtime.1),
                    );
                }
                Err(e) => crate::say!(
                    "stepproof-run: not seeded from {}: {}: {e}",
                    dir.display(),
                    found.rel.display()
                ),
            }
        }
    } else if let Err(e) = &targets {
        crate::say!(
            "stepproof-run: sessions of this workspace not seeded: opening {}: {e}",
            state.config_dir.display()
        );
    }
    drop(lock);
    let path = state.run_dir.join(MANIFEST);
    let bytes = serde_json::to_vec(&manifest).expect("JSON values serialize");
    if let Err(e) = write_new(&path, &bytes) {
        crate::say!("stepproof-run: writing {}: {e}", path.display());
    }
}

/// What of the walk's files a run is seeded with (see [`SessionSeeding`]): the prompt history
/// and auto-memory always; the newest transcripts and plans by mtime, within the count and
/// bytes of [`SEED_NEWEST`] and [`SEED_NEWEST_BYTES`] (each kind on its own), and those the
/// command names; the todo lists of the transcripts seeded (`<session>-agent-<agent>.json`,
/// `<session>.json`); or everything.
fn chosen<'f>(found: &'f [Found], seeding: &SessionSeeding) -> Vec<&'f Found> {
    let named = match seeding {
        SessionSeeding::Every => return found.iter().collect(),
        SessionSeeding::None => {
            return found
                .iter()
                .filter(|f| matches!(f.kind, Kind::History | Kind::Memory))
                .collect();
        }
        SessionSeeding::Newest { named } => named,
    };
    // The newest of a kind, within the count and the bytes.
    let newest = |kind: Kind| {
        let mut bytes = 0u64;
        newest_first(found, kind)
            .into_iter()
            .take(SEED_NEWEST)
            .take_while(|f| {
                bytes += f.size;
                bytes <= SEED_NEWEST_BYTES
            })
            .map(|f| &f.rel)
            .collect::<std::collections::BTreeSet<_>>()
    };
    let mut transcripts = newest(Kind::Transcript);
    transcripts.extend(
        found
            .iter()
            .filter(|f| {
                f.kind == Kind::Transcript
                    && f.session()
                        .is_some_and(|s| named.iter().any(|n| n.as_bytes() == s))
            })
            .map(|f| &f.rel),
    );
    let sessions: std::collections::BTreeSet<&[u8]> = found
        .iter()
        .filter(|f| transcripts.contains(&f.rel))
        .filter_map(Found::session)
        .collect();
    let plans = newest(Kind::Plan);
    found
        .iter()
        .filter(|f| match f.kind {
            Kind::History | Kind::Memory => true,
            Kind::Transcript => transcripts.contains(&f.rel),
            Kind::Plan => plans.contains(&f.rel),
            Kind::Todo => f.session().is_some_and(|s| sessions.contains(s)),
        })
        .collect()
}

/// The files of `kind`, newest first (by mtime, then by name).
fn newest_first(found: &[Found], kind: Kind) -> Vec<&Found> {
    let mut of_kind: Vec<&Found> = found.iter().filter(|f| f.kind == kind).collect();
    of_kind.sort_by(|a, b| b.mtime.cmp(&a.mtime).then_with(|| a.rel.cmp(&b.rel)));
    of_kind
}

/// Of a state's files, the sessions that have aged out: transcripts and plans not changed for
/// [`UNUSED_DAYS`] days that are not among the newest [`SEED_NEWEST`] of their kind, and the todo
/// lists of those transcripts. (Claude Code removes its own after 30 days by default, but only
/// among what a run was given: the rest of a state would otherwise be kept for ever.)
fn aged_out(found: &[Found], now: SystemTime) -> Vec<&PathBuf> {
    let Some(cutoff) = now.checked_sub(Duration::from_secs(UNUSED_DAYS * 86_400)) else {
        return Vec::new();
    };
    let aged = |kind: Kind| {
        newest_first(found, kind)
            .into_iter()
            .skip(SEED_NEWEST)
            .filter(|f| mtime_of(f.mtime) < cutoff)
    };
    let transcripts: Vec<&Found> = aged(Kind::Transcript).collect();
    let sessions: std::collections::BTreeSet<&[u8]> =
        transcripts.iter().filter_map(|f| f.session()).collect();
    let todos = found
        .iter()
        .filter(|f| f.kind == Kind::Todo && f.session().is_some_and(|s| sessions.contains(s)));
    transcripts
        .into_iter()
        .chain(aged(Kind::Plan))
        .chain(todos)
        .map(|f| &f.rel)
        .collect()
}

/// The seeding's directories in the config directory, each made and opened once (by
/// descriptor, beneath the config directory, never through a link).
struct Targets<'a> {
    root: BorrowedFd<'a>,
    dirs: BTreeMap<PathBuf, OwnedFd>,
}

impl<'a> Targets<'a> {
    fn new(root: BorrowedFd<'a>) -> Targets<'a> {
        Targets {
            root,
            dirs: BTreeMap::new(),
        }
    }

    /// The directory `rel` (relative to the config directory), made (0700) where missing.
    fn dir(&mut self, rel: &Path) -> Result<BorrowedFd<'_>, String> {
        let mut at = PathBuf::new();
        for part in rel.components() {
            let parent = at.clone();
            at.push(part);
            if self.dirs.contains_key(&at) {
                continue;
            }
            let parent = match self.dirs.get(&parent) {
                Some(fd) => fd.as_fd(),
                None => self.root,
            };
            let name = part.as_os_str();
            match beneath::mkdir_at(parent, name, 0o700) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(format!("creating {}: {e}", at.display())),
            }
            let fd = beneath::open_beneath(parent, Path::new(name), DIR_LISTING, 0)
                .map_err(|e| format!("opening {}: {e}", at.display()))?;
            self.dirs.insert(at.clone(), fd);
        }
        Ok(self.dirs.get(rel).map_or(self.root, |fd| fd.as_fd()))
    }
}

/// One kept file into the config directory; for the history, its length and hash.
fn seed_one(
    root: BorrowedFd<'_>,
    found: &Found,
    targets: &mut Targets<'_>,
) -> Result<Option<(u64, String)>, String> {
    let mut src = open_checked(root, found, None)?;
    let (Some(parent), Some(name)) = (found.rel.parent(), found.rel.file_name()) else {
        return Err("not a file name".to_string());
    };
    let dir = targets.dir(parent)?;
    let creating = |e: io::Error| format!("creating {}: {e}", found.rel.display());
    let mut dst = File::from(
        beneath::open_beneath(
            dir,
            Path::new(name),
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
            0o600,
        )
        .map_err(creating)?,
    );
    let history = if found.kind == Kind::History {
        let mut bytes = Vec::new();
        (&mut src)
            .take(found.kind.cap())
            .read_to_end(&mut bytes)
            .map_err(|e| format!("reading: {e}"))?;
        dst.write_all(&bytes)
            .map_err(|e| format!("writing {}: {e}", found.rel.display()))?;
        Some((bytes.len() as u64, hex::encode(Sha256::digest(&bytes))))
    } else {
        copy_up_to(&src, &dst, found.size.min(found.kind.cap()))
            .map_err(|e| format!("copying to {}: {e}", found.rel.display()))?;
        None
    };
    dst.set_times(fs::FileTimes::new().set_modified(mtime_of(found.mtime)))
        .map_err(|e| format!("setting the mtime of {}: {e}", found.rel.display()))?;
    Ok(history)
}

/// Copies `len` bytes (what the walk saw; the state is locked, so nothing changes it meanwhile)
/// from the start of `src` to `dst` in the kernel (`copy_file_range`), reading and writing where
/// the file systems cannot; stops early at the end of `src`.
fn copy_up_to(src: &File, dst: &File, len: u64) -> io::Result<()> {
    use nix::errno::Errno;
    let mut copied = 0u64;
    while copied < len {
        let chunk = (len - copied).min(1 << 30) as usize;
        match nix::fcntl::copy_file_range(src, None, dst, None, chunk) {
            Ok(0) => return Ok(()),
            Ok(n) => copied += n as u64,
            Err(Errno::EINTR) => {}
            Err(Errno::EXDEV | Errno::EINVAL | Errno::ENOSYS | Errno::EOPNOTSUPP)
                if copied == 0 =>
            {
                io::copy(&mut src.take(len), &mut &*dst)?;
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

fn write_new(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    file.write_all(bytes)
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
fn remove_settled(root: BorrowedFd<'_>, settled: &[&PathBuf]) -> usize {
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
fn newest_lines_within(text: &[u8], cap: u64) -> &[u8] {
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

/// Removes the states of workspaces no run used for [`UNUSED_DAYS`] days (by the mtime of
/// their `last-used`) from `root` (`~/.local/state/stepproof/sessions`), skipping one a run
/// holds; returns what was removed. Nothing else there is touched, and a link is never
/// followed.
pub fn prune(root: &Path, now: SystemTime) -> Vec<PathBuf> {
    prune_unused(root, now, |path| fs::remove_dir_all(path))
}

/// In each workspace's state no run holds at the moment, the sessions that have aged out
/// ([`aged_out`]) are removed (by descriptor, beneath the state's `files/`); returns how many
/// files went. Run with the hourly look for unused states.
pub fn prune_aged_sessions(root: &Path, now: SystemTime) -> usize {
    let mut removed = 0;
    each_free_state(
        root,
        |_| true,
        |state| {
            let Ok(files) = beneath::open_root(&files_dir(state), DIR_LISTING) else {
                return;
            };
            let walk = Walk::of(files.as_fd(), None);
            let aged = aged_out(&walk.found, now);
            removed += remove_settled(files.as_fd(), &aged);
        },
    );
    removed
}

/// What [`prune`] and the build caches' prune share: each `<32 hex digits>` directory of
/// `root` whose `last-used` (or, without one, the directory itself) is older than
/// [`UNUSED_DAYS`] days and whose `lock` no run holds is removed with `remove`; returns what
/// was removed.
pub(crate) fn prune_unused(
    root: &Path,
    now: SystemTime,
    remove: impl Fn(&Path) -> std::io::Result<()>,
) -> Vec<PathBuf> {
    let unused = |path: &Path| {
        let used = fs::symlink_metadata(path.join("last-used"))
            .or_else(|_| fs::symlink_metadata(path))
            .and_then(|m| m.modified());
        used.ok()
            .and_then(|t| now.duration_since(t).ok())
            .is_some_and(|age| age > Duration::from_secs(UNUSED_DAYS * 86_400))
    };
    let mut removed = Vec::new();
    each_free_state(root, unused, |path| {
        if remove(path).is_ok() {
            removed.push(path.to_path_buf());
        }
    });
    removed
}

/// Calls `f` with each `<32 hex digits>` directory of `root` that `wanted` accepts and whose
/// `lock` no run holds: opened without following a link or waiting on a FIFO, and held
/// (exclusive) while `f` runs.
fn each_free_state(root: &Path, wanted: impl Fn(&Path) -> bool, mut f: impl FnMut(&Path)) {
    let Ok(entries) = fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let shaped = name.len() == 32 && name.as_bytes().iter().all(u8::is_ascii_hexdigit);
        if !shaped || !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let path = entry.path();
        if !wanted(&path) {
            continue;
        }
        let Ok(lock) = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path.join("lock"))
        else {
            continue;
        };
        if lock.try_lock().is_err() {
            continue;
        }
        f(&path);
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

#[cfg(test)]
mod tests;
