//! The launch's record of one git directory: its view's nodes, the view files kept to be put back,
//! its replace refs and its index's flags.

use super::index::{Flagged, caches, shared_flagged};
use super::read::{hash_len, loose_replace, node_at, packed_replace_lines, read_bounded};
use super::{
    Digests, GitDir, IndexView, Kept, Kind, MAX_FLAGGED, PACKED_REFS_READ_LIMIT, StatId, VIEW_DIRS,
    VIEW_FILES, VIEW_KEEP_LIMIT,
};
use crate::sandbox::plan::git_index::{self, ASSUME_VALID, INDEX_READ_LIMIT, SKIP_WORKTREE};
use crate::sys::beneath::Stat;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::os::fd::BorrowedFd;
use std::os::unix::ffi::OsStringExt;
use std::path::Path;

/// The launch's record of an index: its flagged entries as digests (computed as the entries are
/// read: a sparse checkout flags most of them), its caches as hashes.
fn launch_index(gd: BorrowedFd<'_>, bytes: &[u8], st: &Stat, hash_len: usize) -> IndexView {
    let stat = Some(StatId::of(st));
    let read = |len: usize| {
        let (mut av, mut sw, mut unnamed) = (Vec::new(), Vec::new(), false);
        let layout = git_index::for_each_entry(bytes, len, |e| {
            let skip = e
                .extended
                .is_some_and(|(_, bits)| bits & SKIP_WORKTREE != 0);
            let assume = e.flags & ASSUME_VALID != 0;
            if (skip || assume) && e.name.is_empty() {
                unnamed = true;
            }
            if assume {
                av.push(Digests::of(e.name));
            }
            if skip {
                sw.push(Digests::of(e.name));
            }
        })?;
        Ok::<_, String>((av, sw, unnamed, layout))
    };
    let other = if hash_len == 20 { 32 } else { 20 };
    let (mut av, mut sw, unnamed, layout, len) = match read(hash_len) {
        Ok((av, sw, unnamed, layout)) => (av, sw, unnamed, layout, hash_len),
        Err(first) => match read(other) {
            Ok((av, sw, unnamed, layout)) => (av, sw, unnamed, layout, other),
            Err(_) => return IndexView::Unread { stat, why: first },
        },
    };
    if av.len() + sw.len() > MAX_FLAGGED {
        return IndexView::Unread {
            stat,
            why: format!(
                "{} flagged entries, more than the {MAX_FLAGGED} a run records",
                av.len() + sw.len()
            ),
        };
    }
    let caches = caches(bytes, &layout);
    let found = Flagged {
        assume_valid: Vec::new(),
        skip_worktree: Vec::new(),
        layout,
    };
    match shared_flagged(gd, bytes, &found, len) {
        Ok(_) if unnamed => IndexView::Unread {
            stat,
            why: "a split index whose entries carry flags".into(),
        },
        Ok(shared) => {
            if let Some(shared) = shared {
                av.extend(shared.assume_valid.iter().map(|(n, _)| Digests::of(n)));
                sw.extend(shared.skip_worktree.iter().map(|(n, _, _)| Digests::of(n)));
            }
            IndexView::Read {
                stat: StatId::of(st),
                assume_valid: Digests::from_unsorted(av),
                skip_worktree: Digests::from_unsorted(sw),
                caches,
            }
        }
        Err(why) => IndexView::Unread { stat, why },
    }
}

/// One git directory at launch.
pub(super) fn launch_dir(
    root: BorrowedFd<'_>,
    gd: BorrowedFd<'_>,
    rel: &Path,
    kind: Kind,
) -> GitDir {
    let own = |per_worktree: bool| kind == Kind::Repository || per_worktree;
    let mut nodes = BTreeMap::new();
    let mut kept = BTreeMap::new();
    for &(name, per_worktree) in VIEW_DIRS {
        if own(per_worktree) {
            nodes.insert(name.to_string(), node_at(gd, name).0);
        }
    }
    for &(name, _, per_worktree, _) in VIEW_FILES {
        if !own(per_worktree) {
            continue;
        }
        let (node, content) = node_at(gd, name);
        if let Some((bytes, st)) = content
            && bytes.len() as u64 <= VIEW_KEEP_LIMIT
            && st.size <= VIEW_KEEP_LIMIT
        {
            kept.insert(
                name.to_string(),
                Kept {
                    bytes: OsString::from_vec(bytes),
                    mode: st.mode & 0o7777,
                    uid: st.uid,
                    gid: st.gid,
                },
            );
        }
        nodes.insert(name.to_string(), node);
    }
    let (loose, packed, packed_replace, packed_unread) = if kind == Kind::Repository {
        let (packed, lines, unread) = match read_bounded(gd, "packed-refs", PACKED_REFS_READ_LIMIT)
        {
            Ok(None) => (None, BTreeSet::new(), None),
            Ok(Some((bytes, st))) => (
                Some(StatId::of(&st)),
                packed_replace_lines(&bytes)
                    .into_iter()
                    .map(|(_, _, _, key)| key)
                    .collect(),
                None,
            ),
            Err((st, why)) => (st.as_ref().map(StatId::of), BTreeSet::new(), Some(why)),
        };
        (loose_replace(gd), packed, lines, unread)
    } else {
        (BTreeMap::new(), None, BTreeSet::new(), None)
    };
    let index = match read_bounded(gd, "index", INDEX_READ_LIMIT) {
        Ok(None) => IndexView::Absent,
        Ok(Some((bytes, st))) => launch_index(gd, &bytes, &st, hash_len(root, rel, kind)),
        Err((st, why)) => IndexView::Unread {
            stat: st.as_ref().map(StatId::of),
            why,
        },
    };
    GitDir {
        kind,
        nodes,
        kept,
        loose_replace: loose,
        packed,
        packed_replace,
        packed_unread,
        index,
    }
}
