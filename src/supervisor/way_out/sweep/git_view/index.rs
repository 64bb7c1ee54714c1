//! An index's flagged entries, caches and trailing checksum: read at either object format, and
//! written back with flags cleared, sizes smudged and extensions dropped.

use super::read::read_bounded;
use crate::sandbox::plan::git_index::{
    self, ASSUME_VALID, INDEX_READ_LIMIT, Layout, SKIP_WORKTREE,
};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::os::fd::BorrowedFd;

/// The trailing checksum of an index git writes: SHA-1 or SHA-256 of everything before it.
pub(super) fn checksum(body: &[u8], hash_len: usize) -> Vec<u8> {
    if hash_len == 32 {
        Sha256::digest(body).to_vec()
    } else {
        ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, body)
            .as_ref()
            .to_vec()
    }
}

/// Whether git reads this index: its checksum holds, or is all zeros (`index.skipHash`).
fn checksum_holds(index: &[u8], hash_len: usize) -> bool {
    let Some(at) = index.len().checked_sub(hash_len) else {
        return false;
    };
    let (body, sum) = index.split_at(at);
    sum.iter().all(|&b| b == 0) || checksum(body, hash_len) == sum
}

/// An index's flagged entries and caches.
pub(super) struct Flagged {
    /// (name, where its flags are, whether it is a directory of a sparse index).
    pub(super) assume_valid: Vec<(Vec<u8>, usize)>,
    pub(super) skip_worktree: Vec<(Vec<u8>, usize, bool)>,
    pub(super) layout: Layout,
}

fn flagged(index: &[u8], hash_len: usize) -> Result<Flagged, String> {
    let mut assume_valid = Vec::new();
    let mut skip_worktree = Vec::new();
    let layout = git_index::for_each_entry(index, hash_len, |e| {
        if e.flags & ASSUME_VALID != 0 {
            assume_valid.push((e.name.to_vec(), e.flags_at));
        }
        if let Some((at, bits)) = e.extended
            && bits & SKIP_WORKTREE != 0
        {
            let dir = e.mode & libc::S_IFMT == libc::S_IFDIR;
            skip_worktree.push((e.name.to_vec(), at, dir));
        }
    })?;
    Ok(Flagged {
        assume_valid,
        skip_worktree,
        layout,
    })
}

impl Flagged {
    /// Whether it is a split index (`core.splitIndex`): its entries replace those of a shared
    /// index named by its `link` extension.
    pub(super) fn split(&self) -> bool {
        self.layout
            .extensions
            .iter()
            .any(|x| &x.signature == b"link")
    }
}

/// The flagged entries of the shared index a split index names (`sharedindex.<id>` beside
/// it), `None` for an index that is not split.
pub(super) fn shared_flagged(
    gd: BorrowedFd<'_>,
    index: &[u8],
    found: &Flagged,
    hash_len: usize,
) -> Result<Option<Flagged>, String> {
    let Some(link) = found
        .layout
        .extensions
        .iter()
        .find(|x| &x.signature == b"link")
    else {
        return Ok(None);
    };
    let id = index
        .get(link.start + 8..link.start + 8 + hash_len)
        .ok_or("its link extension is cut short")?;
    if id.iter().all(|&b| b == 0) {
        return Ok(None);
    }
    let name = format!("sharedindex.{}", hex::encode(id));
    match read_bounded(gd, &name, INDEX_READ_LIMIT) {
        Ok(Some((bytes, _))) => flagged(&bytes, hash_len)
            .map(Some)
            .map_err(|e| format!("its shared index {name}: {e}")),
        Ok(None) => Err(format!("its shared index {name} is missing")),
        Err((_, why)) => Err(format!("its shared index {name}: {why}")),
    }
}

/// `UNTR` and `FSMN` of an index, each with the SHA-256 of its bytes.
pub(super) fn caches(index: &[u8], layout: &Layout) -> BTreeMap<String, String> {
    layout
        .extensions
        .iter()
        .filter(|x| matches!(&x.signature, b"UNTR" | b"FSMN"))
        .map(|x| {
            (
                String::from_utf8_lossy(&x.signature).into_owned(),
                hex::encode(Sha256::digest(&index[x.start..x.end])),
            )
        })
        .collect()
}

/// An index as it is at the end: parsed with the object format of the repository's config, or
/// the other one when that does not read, and only with the one whose checksum holds.
pub(super) fn parse_index(bytes: &[u8], hash_len: usize) -> Result<(Flagged, usize), String> {
    let mut first_error = None;
    for len in [hash_len, if hash_len == 20 { 32 } else { 20 }] {
        match flagged(bytes, len) {
            Ok(f) if checksum_holds(bytes, len) => return Ok((f, len)),
            Ok(_) => {
                first_error.get_or_insert_with(|| "its checksum does not hold".to_string());
            }
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    Err(first_error.unwrap_or_default())
}

/// The index with `clear` (flag offsets and bits) cleared, the sizes at `smudge` set to 0, and
/// the extensions `drop` left out
/// (with the end-of-index-entries and index-entry-offset-table extensions, whose hash and
/// offsets would no longer hold: both are only a speed-up), and its checksum recomputed.
pub(super) fn rewritten(
    index: &[u8],
    layout: &Layout,
    clear: &[(usize, u16)],
    smudge: &[usize],
    drop: &[[u8; 4]],
    hash_len: usize,
) -> Vec<u8> {
    let mut out = index[..layout.entries_end].to_vec();
    for &(at, bits) in clear {
        let now = u16::from_be_bytes([out[at], out[at + 1]]) & !bits;
        out[at..at + 2].copy_from_slice(&now.to_be_bytes());
    }
    // A size of 0 is what git itself writes for a racily clean entry: it reads the file.
    for &at in smudge {
        out[at..at + 4].copy_from_slice(&[0; 4]);
    }
    let dropping = layout
        .extensions
        .iter()
        .any(|x| drop.contains(&x.signature));
    for x in &layout.extensions {
        let speed_up = matches!(&x.signature, b"EOIE" | b"IEOT");
        if drop.contains(&x.signature) || (dropping && speed_up) {
            continue;
        }
        out.extend_from_slice(&index[x.start..x.end]);
    }
    let sum = checksum(&out, hash_len);
    out.extend_from_slice(&sum);
    out
}
