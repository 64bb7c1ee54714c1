//! What stands at a path beneath the workspace, looked at one component at a time and never through
//! a link: its kind, content hash and mode, everything below a directory, a regular file read
//! within a bound.

use super::git_rules::inert_git_path;
use super::{HASH_LIMIT, MAX_ENTRIES, State};
use crate::sys::beneath::{self, DIR_LISTING, DIR_LOOKUP, FILE_READING, Stat};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

fn errno_text(e: &io::Error) -> String {
    e.raw_os_error()
        .map(|n| format!("errno {n}"))
        .unwrap_or_else(|| e.to_string())
}

/// The state of `rel` beneath the workspace `root`, looked at one component at a time, never
/// through a link.
pub(super) fn state_of(root: BorrowedFd<'_>, rel: &Path) -> State {
    let components: Vec<&OsStr> = rel
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect();
    let Some((last, ancestors)) = components.split_last() else {
        return State::Unreadable("the workspace itself is not a persistence path".into());
    };
    let mut dir: Option<OwnedFd> = None;
    let mut walked = PathBuf::new();
    for (i, name) in components.iter().enumerate() {
        let at = dir.as_ref().map_or(root, AsFd::as_fd);
        walked.push(name);
        let st = match beneath::stat_at(at, name) {
            Ok(st) => st,
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => {
                return State::Absent;
            }
            Err(e) => return State::Unreadable(format!("{}: {e}", walked.display())),
        };
        if st.is_symlink() {
            let target = beneath::read_link_at(at, name).unwrap_or_default();
            return State::Link {
                link: walked,
                target,
            };
        }
        if i == ancestors.len() {
            if inert_git_path(at, rel, &st) {
                return State::Absent;
            }
            let mut entries = BTreeMap::new();
            collect(at, last, &st, Path::new(""), &mut entries);
            return State::Entries(entries);
        }
        if !st.is_dir() {
            return State::Absent;
        }
        match beneath::open_beneath(at, Path::new(name), DIR_LOOKUP, 0) {
            Ok(fd) => dir = Some(fd),
            Err(e) => {
                return State::Unreadable(format!(
                    "{}: {e} (mode {:o}, ctime {:?})",
                    walked.display(),
                    st.mode,
                    st.ctime
                ));
            }
        }
    }
    State::Absent
}

/// Records `name` in `dir` (and everything below it) as `rel` → kind, content hash and mode.
pub(super) fn collect(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    st: &Stat,
    rel: &Path,
    out: &mut BTreeMap<PathBuf, String>,
) {
    if out.len() >= MAX_ENTRIES {
        return;
    }
    let digest = if st.is_symlink() {
        let target = beneath::read_link_at(dir, name).unwrap_or_default();
        format!("link:{}", target.to_string_lossy())
    } else if st.is_file() {
        file_digest(dir, name, st)
    } else if st.is_dir() {
        "dir".to_string()
    } else {
        "special".to_string()
    };
    out.insert(rel.to_path_buf(), format!("{digest}:{:o}", st.mode));
    if !st.is_dir() {
        return;
    }
    let listing = beneath::open_beneath(dir, Path::new(name), DIR_LISTING, 0)
        .and_then(|fd| beneath::list_dir(fd.as_fd()).map(|entries| (fd, entries)));
    let (fd, mut entries) = match listing {
        Ok(listing) => listing,
        Err(e) => {
            out.insert(
                rel.to_path_buf(),
                format!(
                    "dir-unlistable:{}:{:o}:{:?}",
                    errno_text(&e),
                    st.mode,
                    st.ctime
                ),
            );
            return;
        }
    };
    entries.sort();
    for (entry, _) in entries {
        if let Ok(st) = beneath::stat_at(fd.as_fd(), &entry) {
            collect(fd.as_fd(), &entry, &st, &rel.join(&entry), out);
        }
    }
}

/// The size and the hash of the first `HASH_LIMIT` bytes (beyond that, the ctime too: the
/// sandbox cannot set it back).
fn file_digest(dir: BorrowedFd<'_>, name: &OsStr, st: &Stat) -> String {
    let fd = match beneath::open_beneath(dir, Path::new(name), FILE_READING, 0) {
        Ok(fd) => fd,
        Err(e) => {
            return format!(
                "file-unreadable:{}:{}:{:?}",
                errno_text(&e),
                st.size,
                st.ctime
            );
        }
    };
    match beneath::stat_fd(fd.as_fd()) {
        Ok(now) if now.is_file() => {}
        _ => return "special".into(),
    }
    let mut hasher = Sha256::new();
    let mut reader = fs::File::from(fd).take(HASH_LIMIT);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => hasher.update(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return format!("file-unreadable:{}:{}", errno_text(&e), st.size),
        }
    }
    let hash = hex::encode(hasher.finalize());
    if st.size > HASH_LIMIT {
        format!("file:{}:{:?}:{hash}", st.size, st.ctime)
    } else {
        format!("file:{}:{hash}", st.size)
    }
}

pub(super) fn since_epoch((secs, nanos): (i64, i64)) -> Option<Duration> {
    Some(Duration::new(
        u64::try_from(secs).ok()?,
        u32::try_from(nanos).ok()?,
    ))
}
