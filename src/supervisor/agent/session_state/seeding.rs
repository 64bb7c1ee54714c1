//! Before a run: the kept files the command needs (the prompt history, auto-memory and the
//! sessions [`SessionSeeding`] chooses) copied into the run's fresh config directory, and what
//! it was seeded with written down for the taking back.

use super::state_dir::{files_dir, lock, mark_used, mtime_of};
use super::walk::open_checked;
use super::{Found, Kind, MANIFEST, Manifest, UNUSED_DAYS, Walk};

use crate::sandbox::plan::agent_layer::{
    AgentState, SEED_NEWEST, SEED_NEWEST_BYTES, SessionSeeding,
};
use crate::sys::beneath::{self, DIR_LISTING};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

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
pub(super) fn aged_out(found: &[Found], now: SystemTime) -> Vec<&PathBuf> {
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
