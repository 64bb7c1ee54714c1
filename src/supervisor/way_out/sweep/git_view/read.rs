//! Reading what git reads in a git directory, never through a link: what stands at a name, the
//! replace refs (loose and packed), the object format, a file read within a bound.

use super::super::read_regular;
use super::{
    CONFIG_READ_LIMIT, Kind, MAX_REPLACE_REFS, Node, REPLACE_DEPTH, VIEW_READ_LIMIT, is_absent,
    named, open_dir,
};
use crate::sys::beneath::{self, DIR_LISTING, FILE_READING, Stat};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::fs;
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};

/// What stands at `name` (one or more components) in the git directory `gd`, and its bytes
/// when it is a regular file (up to [`VIEW_READ_LIMIT`]). A link on the way is what stands there
/// (`Other`, naming it): the entry moved is then the link itself.
pub(super) fn node_at(gd: BorrowedFd<'_>, name: &str) -> (Node, Option<(Vec<u8>, Stat)>) {
    let path = named(name);
    let (parent, last) = match (path.parent(), path.file_name()) {
        (Some(p), Some(l)) => (p, l),
        _ => return (Node::Other("not a name".into()), None),
    };
    let dir = match open_dir(gd, parent) {
        Ok(dir) => dir,
        Err(e) if is_absent(&e) => return (Node::Absent, None),
        Err(e) => return (Node::Other(format!("{}: {e}", parent.display())), None),
    };
    let st = match beneath::stat_at(dir.as_fd(), last) {
        Ok(st) => st,
        Err(e) if is_absent(&e) => return (Node::Absent, None),
        Err(e) => return (Node::Other(e.to_string()), None),
    };
    if st.is_symlink() {
        return (
            Node::Link(beneath::read_link_at(dir.as_fd(), last).unwrap_or_default()),
            None,
        );
    }
    if st.is_dir() {
        return (
            Node::Dir {
                mode: st.mode & 0o7777,
                uid: st.uid,
                gid: st.gid,
            },
            None,
        );
    }
    if !st.is_file() {
        return (Node::Other(format!("an entry of mode {:o}", st.mode)), None);
    }
    match read_regular(dir.as_fd(), last, VIEW_READ_LIMIT) {
        Ok(bytes) => {
            let hash = hex::encode(Sha256::digest(&bytes));
            let digest = if st.size > VIEW_READ_LIMIT {
                format!("{}:{:?}:{hash}", st.size, st.ctime)
            } else {
                format!("{}:{hash}", bytes.len())
            };
            (Node::File { digest }, Some((bytes, st)))
        }
        Err(e) => (
            Node::Other(format!(
                "unreadable ({e}), size {}, ctime {:?}",
                st.size, st.ctime
            )),
            None,
        ),
    }
}

/// The lines of a view file that say something (not empty, not a comment).
pub(super) fn meaningful_lines(bytes: &[u8]) -> BTreeSet<&[u8]> {
    bytes
        .split(|&b| b == b'\n')
        .map(<[u8]>::trim_ascii)
        .filter(|l| !l.is_empty() && !l.starts_with(b"#"))
        .collect()
}

/// The loose refs below `refs/replace` of `gd` (names below it) and what each holds: a file's
/// content, a link's target (git reads a link there as a ref), or what else it is.
pub(super) fn loose_replace(gd: BorrowedFd<'_>) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    if let Ok(dir) = beneath::open_beneath(gd, named("refs/replace"), DIR_LISTING, 0) {
        walk_refs(dir.as_fd(), Path::new(""), REPLACE_DEPTH, &mut out);
    }
    out
}

fn walk_refs(dir: BorrowedFd<'_>, rel: &Path, depth: usize, out: &mut BTreeMap<PathBuf, String>) {
    let Ok((entries, _)) = beneath::list_dir_up_to(dir, MAX_REPLACE_REFS) else {
        return;
    };
    for (name, _) in entries {
        if out.len() >= MAX_REPLACE_REFS {
            return;
        }
        let Ok(st) = beneath::stat_at(dir, &name) else {
            continue;
        };
        let path = rel.join(&name);
        let value = if st.is_symlink() {
            format!(
                "link:{}",
                beneath::read_link_at(dir, &name)
                    .unwrap_or_default()
                    .to_string_lossy()
            )
        } else if st.is_dir() {
            if depth > 0
                && let Ok(sub) = beneath::open_beneath(dir, Path::new(&name), DIR_LISTING, 0)
            {
                walk_refs(sub.as_fd(), &path, depth - 1, out);
            }
            continue;
        } else if st.is_file() {
            match read_regular(dir, &name, 4096) {
                Ok(bytes) => String::from_utf8_lossy(bytes.trim_ascii()).into_owned(),
                Err(e) => format!("unreadable:{e}"),
            }
        } else {
            format!("mode:{:o}", st.mode)
        };
        out.insert(path, value);
    }
}

/// The lines of `packed-refs` that name a replace ref, as (index of the line, the ref's name
/// below `refs/replace/`, its object id, the key it is recorded by).
pub(super) fn packed_replace_lines(bytes: &[u8]) -> Vec<(usize, Vec<u8>, String, String)> {
    // Most have none: one search over the file says so.
    if memchr::memmem::find(bytes, b" refs/replace/").is_none() {
        return Vec::new();
    }
    bytes
        .split(|&b| b == b'\n')
        .enumerate()
        .filter_map(|(i, line)| {
            if line.starts_with(b"#") || line.starts_with(b"^") {
                return None;
            }
            let space = memchr::memchr(b' ', line)?;
            let (oid, name) = (&line[..space], &line[space + 1..]);
            let below = name.strip_prefix(b"refs/replace/")?;
            let oid = String::from_utf8_lossy(oid).into_owned();
            Some((i, below.to_vec(), oid, hex::encode(line)))
        })
        .collect()
}

/// The repository's object format, from the config of `git_dir` (or, for a linked worktree,
/// of the repository's own git directory): the length of its object ids.
pub(super) fn hash_len(root: BorrowedFd<'_>, git_dir: &Path, kind: Kind) -> usize {
    let common = match kind {
        Kind::Worktree => git_dir.parent().and_then(Path::parent).unwrap_or(git_dir),
        Kind::Repository => git_dir,
    };
    let sha256 = open_dir(root, common)
        .and_then(|fd| read_regular(fd.as_fd(), OsStr::new("config"), CONFIG_READ_LIMIT))
        .is_ok_and(|bytes| {
            String::from_utf8_lossy(&bytes).lines().any(|l| {
                let l = l.trim().to_ascii_lowercase();
                l.starts_with("objectformat") && l.ends_with("sha256")
            })
        });
    if sha256 { 32 } else { 20 }
}

/// A file's bytes and stat, or why it was not read (with its stat when there was one).
type Bounded = Result<Option<(Vec<u8>, Stat)>, (Option<Stat>, String)>;

/// Reads `name` in `gd` when it is a regular file of at most `limit` bytes: its bytes and stat;
/// otherwise what it is instead (`Err`: absent is `Ok(None)`).
pub(super) fn read_bounded(gd: BorrowedFd<'_>, name: &str, limit: u64) -> Bounded {
    let name = OsStr::new(name);
    let st = match beneath::stat_at(gd, name) {
        Ok(st) => st,
        Err(e) if is_absent(&e) => return Ok(None),
        Err(e) => return Err((None, e.to_string())),
    };
    if st.is_symlink() {
        return Err((Some(st), "a link".into()));
    }
    if !st.is_file() {
        return Err((Some(st), format!("an entry of mode {:o}", st.mode)));
    }
    if st.size > limit {
        return Err((
            Some(st),
            format!("{} bytes, more than the {} read", st.size, limit),
        ));
    }
    let fd = beneath::open_beneath(gd, Path::new(name), FILE_READING, 0)
        .map_err(|e| (Some(st), e.to_string()))?;
    let mut bytes = Vec::with_capacity(st.size as usize);
    fs::File::from(fd)
        .take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| (Some(st), e.to_string()))?;
    if bytes.len() as u64 > limit {
        return Err((Some(st), format!("more than the {limit} bytes read")));
    }
    Ok(Some((bytes, st)))
}
