//! An index judged at the end: new assume-valid and skip-worktree flags cleared, new caches
//! dropped, entries whose stat data hide a change smudged (the file hashed as a blob).

use super::super::{Finding, read_regular};
use super::index::{caches, parse_index, rewritten, shared_flagged};
use super::read::{hash_len, node_at, read_bounded};
use super::write::rewrite;
use super::{
    At, CONFIG_READ_LIMIT, Digests, HASH_BUDGET, IndexView, Kind, NAMED_ENTRIES, Node, StatId,
    is_absent, named, open_dir,
};
use crate::sandbox::plan::git_index::{self, ASSUME_VALID, INDEX_READ_LIMIT, SKIP_WORKTREE};
use crate::sys::beneath::{self, FILE_READING, Stat};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

impl At<'_, '_> {
    /// The index: see the module's documentation.
    pub(super) fn judge_index(&mut self, sparse_unchanged: bool) {
        let name = "index";
        let launch = self.launch.map(|l| &l.index);
        let launch_stat = match launch {
            Some(IndexView::Read { stat, .. }) => Some(*stat),
            Some(IndexView::Unread { stat, .. }) => *stat,
            _ => None,
        };
        let (bytes, st) = match read_bounded(self.gd, name, INDEX_READ_LIMIT) {
            Ok(None) => return,
            Ok(Some((_, st))) if Some(StatId::of(&st)) == launch_stat => return,
            Ok(Some(found)) => found,
            Err((st, why)) => {
                if launch_stat.is_some() && st.as_ref().map(StatId::of) == launch_stat {
                    return;
                }
                match node_at(self.gd, name).0 {
                    Node::Link(target) => {
                        let mut finding = Finding::new(self.abs(name), "index-flags");
                        finding.detail = Some(format!(
                            "a link to {} where the host's git reads the index: moved as a link, its target never touched (git shows every file as deleted and untracked until `git reset`)",
                            target.to_string_lossy()
                        ));
                        self.take(name, &mut finding);
                        self.judged.findings.push(finding);
                    }
                    Node::File { .. } => self.unjudged(&why, Vec::new()),
                    // Not a file: git refuses it, and says so.
                    _ => {}
                }
                return;
            }
        };
        let (found, hash_len) = match parse_index(&bytes, hash_len(self.root, self.rel, self.kind))
        {
            Ok(parsed) => parsed,
            Err(why) => {
                // What git refuses to read shows nothing: no lie, but said.
                self.judged.notes.push(format!(
                    "{}: not an index git reads ({why}): left as it is",
                    self.abs(name).display()
                ));
                return;
            }
        };
        let empty = Digests::default();
        let no_caches = BTreeMap::new();
        let (launch_av, launch_sw, launch_caches, launch_sparse) = match launch {
            Some(IndexView::Read {
                assume_valid,
                skip_worktree,
                caches,
                ..
            }) => (
                assume_valid,
                skip_worktree,
                caches,
                !skip_worktree.is_empty(),
            ),
            Some(IndexView::Unread { why, .. }) => {
                if !found.assume_valid.is_empty() || !found.skip_worktree.is_empty() {
                    let why = format!("it could not be read at launch ({why})");
                    let entries = found
                        .assume_valid
                        .iter()
                        .map(|(n, _)| format!("assume-valid {}", String::from_utf8_lossy(n)))
                        .chain(found.skip_worktree.iter().map(|(n, _, _)| {
                            format!("skip-worktree {}", String::from_utf8_lossy(n))
                        }))
                        .collect();
                    self.unjudged(&why, entries);
                }
                return;
            }
            _ => (&empty, &empty, &no_caches, false),
        };
        // A sparse checkout at launch, its patterns unchanged: git's own skip-worktree entries
        // are those whose files are not in the checkout.
        let repo = (self.kind == Kind::Repository && self.rel.ends_with(".git"))
            .then(|| self.rel.parent().unwrap_or(Path::new("")));
        let sparse = self.launch.is_some() && launch_sparse && sparse_unchanged && repo.is_some();
        let mut clear: Vec<(usize, u16)> = Vec::new();
        let mut entries = Vec::new();
        let mut refused = Vec::new();
        let shown = |n: &[u8]| {
            if n.is_empty() {
                "(an entry that replaces one of the shared index)".to_string()
            } else {
                String::from_utf8_lossy(n).into_owned()
            }
        };
        for (n, at) in &found.assume_valid {
            if n.is_empty() || !launch_av.contains(n) {
                clear.push((*at, ASSUME_VALID));
                entries.push(format!("assume-valid {}", shown(n)));
            }
        }
        for (n, at, dir) in &found.skip_worktree {
            if !n.is_empty() && launch_sw.contains(n) {
                continue;
            }
            if sparse
                && let Some(repo) = repo
                && !in_checkout(self.root, repo, n)
            {
                continue;
            }
            let entry = format!("skip-worktree {}", shown(n));
            if *dir {
                refused.push(entry);
            } else {
                clear.push((*at, SKIP_WORKTREE));
                entries.push(entry);
            }
        }
        let now_caches = caches(&bytes, &found.layout);
        let mut drop: Vec<[u8; 4]> = Vec::new();
        let mut new_caches = Vec::new();
        let mut changed_caches = Vec::new();
        for (sig, hash) in &now_caches {
            match launch_caches.get(sig) {
                Some(old) if old == hash => {}
                Some(_) => changed_caches.push(sig.clone()),
                None => new_caches.push(sig.clone()),
            }
            if launch_caches.get(sig) != Some(hash) {
                drop.push(sig.as_bytes().try_into().unwrap_or(*b"????"));
            }
        }
        if found.split() {
            // The shared index's flagged entries count too; an entry that replaces a shared
            // one has no name of its own here, and is new whatever it was.
            match shared_flagged(self.gd, &bytes, &found, hash_len) {
                Ok(Some(shared)) => {
                    for (n, _) in &shared.assume_valid {
                        if !launch_av.contains(n) {
                            refused.push(format!("assume-valid {}", String::from_utf8_lossy(n)));
                        }
                    }
                    for (n, _, _) in &shared.skip_worktree {
                        if !launch_sw.contains(n) {
                            refused.push(format!("skip-worktree {}", String::from_utf8_lossy(n)));
                        }
                    }
                }
                Ok(None) => {}
                Err(why) => {
                    self.unjudged(&format!("it is a split index and {why}"), Vec::new());
                    return;
                }
            }
            if !clear.is_empty() || !refused.is_empty() {
                entries.extend(refused);
                self.unjudged(
                    "it is a split index (`core.splitIndex`), which this sweep does not rewrite",
                    entries,
                );
                return;
            }
        }
        if !refused.is_empty() {
            entries.extend(refused);
            self.unjudged(
                "directory entries of a sparse index gained skip-worktree, which git needs them to keep",
                entries,
            );
            return;
        }
        let stale = match (self.launch, self.checkout) {
            (Some(_), Some(checkout)) => self.stale_entries(&bytes, hash_len, checkout),
            _ => Vec::new(),
        };
        if clear.is_empty() && drop.is_empty() && stale.is_empty() {
            return;
        }
        let smudge: Vec<usize> = stale.iter().map(|(at, _, _)| *at).collect();
        let new = rewritten(&bytes, &found.layout, &clear, &smudge, &drop, hash_len);
        // Flags are a finding; the caches alone are a note: git adds them in ordinary work
        // where the host's config asks (`core.untrackedCache`, `core.fsmonitor`), and dropped
        // they are written again, so dropping them hides nothing and costs nothing.
        let finding_due = !clear.is_empty();
        let mut caches: Vec<String> = new_caches.clone();
        caches.extend(changed_caches.iter().cloned());
        if !stale.is_empty() {
            let unchecked = stale.iter().filter(|(_, _, hashed)| !hashed).count();
            let names: Vec<String> = stale
                .iter()
                .take(10)
                .map(|(_, n, _)| String::from_utf8_lossy(n).into_owned())
                .collect();
            self.judged.notes.push(format!(
                "{}: {} entries ({}{}) vouched with their stat data for files the run wrote, but name other content than the files hold{}: their sizes are set to 0, as git does for a racily clean entry, so that the host's git reads the files (a filter such as Git LFS or an end-of-line conversion makes the same; a crafted index hides a change this way)",
                self.abs(name).display(),
                stale.len(),
                names.join(", "),
                if stale.len() > names.len() { ", …" } else { "" },
                if unchecked > 0 {
                    format!(" ({unchecked} not hashed: beyond the {} MiB the sweep hashes)", HASH_BUDGET >> 20)
                } else {
                    String::new()
                },
            ));
        }
        let mut finding = Finding::new(self.abs(name), "index-flags");
        if finding_due {
            match self.quarantine.write_in(&self.rel.join(name), &bytes) {
                Ok(to) => finding.quarantined_to = Some(to),
                Err(e) => {
                    finding.error = Some(format!(
                        "keeping {} in the quarantine before rewriting it: {e}; not rewritten",
                        self.abs(name).display()
                    ));
                    finding.entries = entries.into_iter().take(NAMED_ENTRIES).collect();
                    self.judged.findings.push(finding);
                    return;
                }
            }
        }
        let done = rewrite(self.gd, name, &new, &st);
        if !finding_due && caches.is_empty() {
            if let Err(e) = done {
                self.judged.notes.push(format!(
                    "{}: setting the sizes of those entries to 0: {e}",
                    self.abs(name).display()
                ));
            }
            return;
        }
        if !finding_due {
            self.judged.notes.push(match done {
                Ok(()) => format!(
                    "{}: its {} came or changed during the run (git writes them in ordinary work; a crafted one would hide changes): dropped, git writes them again",
                    self.abs(name).display(),
                    caches.join(" and ")
                ),
                Err(e) => format!(
                    "{}: dropping its {}: {e}",
                    self.abs(name).display(),
                    caches.join(" and ")
                ),
            });
            return;
        }
        let mut said = Vec::new();
        let av = clear.iter().filter(|(_, m)| *m == ASSUME_VALID).count();
        let sw = clear.len() - av;
        if av > 0 {
            said.push(format!("assume-valid cleared on {av} entries"));
        }
        if sw > 0 {
            said.push(format!("skip-worktree cleared on {sw} entries"));
        }
        if !new_caches.is_empty() {
            said.push(format!(
                "the {} extension(s) the run added dropped",
                new_caches.join(" and ")
            ));
        }
        if !changed_caches.is_empty() {
            said.push(format!(
                "the changed {} dropped",
                changed_caches.join(" and ")
            ));
        }
        let count = entries.len();
        finding.entries = entries.into_iter().take(NAMED_ENTRIES).collect();
        match done {
            Ok(()) => {
                finding.detail = Some(format!(
                    "index flags and caches the run set make the host's git trust files as unchanged without looking: {} ({count} entries); the index as it was is in the quarantine",
                    said.join(", ")
                ));
            }
            Err(e) => {
                finding.error = Some(format!(
                    "rewriting {} ({}): {e}",
                    self.abs(name).display(),
                    said.join(", ")
                ));
            }
        }
        self.judged.findings.push(finding);
    }

    /// Entries of the index whose stat data match a file the run wrote (its ctime is after the
    /// launch: the host's git would trust the entry without reading the file) but whose object
    /// id is not the file's content: (where the entry's size is, its name, whether it was
    /// hashed — beyond the budget, such entries are taken unchecked).
    fn stale_entries(
        &mut self,
        index: &[u8],
        hash_len: usize,
        checkout: &Path,
    ) -> Vec<(usize, Vec<u8>, bool)> {
        let u32_at = |at: usize| {
            u32::from_be_bytes([index[at], index[at + 1], index[at + 2], index[at + 3]])
        };
        let mut stale = Vec::new();
        let mut dir: Option<(PathBuf, OwnedFd)> = None;
        let (root, launched) = (self.root, self.launched);
        // With the ctime trusted (git's default), an entry only vouches for a file the run
        // wrote when its own ctime is the file's: after the launch. The others are not looked
        // at (no system call for them).
        let every_entry = self.host_config.ctime_not_trusted || self.repo_names_ctime();
        let budget = &mut *self.hash_budget;
        let walked = git_index::for_each_entry(index, hash_len, |e| {
            let kind = e.mode & libc::S_IFMT;
            if e.name.is_empty() || (kind != libc::S_IFREG && kind != libc::S_IFLNK) {
                return;
            }
            let start = e.flags_at - 40 - hash_len;
            let ctime = (i64::from(u32_at(start)), i64::from(u32_at(start + 4)));
            if !every_entry
                && !super::super::after(ctime, launched.saturating_sub(Duration::from_secs(1)))
            {
                return;
            }
            let path = checkout.join(OsStr::from_bytes(e.name));
            let (Some(parent), Some(last)) = (path.parent(), path.file_name()) else {
                return;
            };
            if dir.as_ref().is_none_or(|(p, _)| p != parent) {
                let at = if parent.as_os_str().is_empty() {
                    named(".")
                } else {
                    parent
                };
                dir = open_dir(root, at).ok().map(|fd| (parent.to_path_buf(), fd));
            }
            let Some((_, fd)) = &dir else {
                return;
            };
            let Ok(st) = beneath::stat_at(fd.as_fd(), last) else {
                return;
            };
            let same_kind = if kind == libc::S_IFLNK {
                st.is_symlink()
            } else {
                st.is_file()
            };
            // What git compares first (the rest it compares only when asked to): the mtime's
            // seconds and the size, both as 32 bits.
            if !same_kind
                || !super::super::after(st.ctime, launched)
                || u32_at(start + 8) != st.mtime.0 as u32
                || u32_at(start + 36) != st.size as u32
            {
                return;
            }
            let oid = &index[start + 40..start + 40 + hash_len];
            if *budget < st.size {
                *budget = 0;
                stale.push((start + 36, e.name.to_vec(), false));
                return;
            }
            *budget -= st.size;
            match blob_id(fd.as_fd(), last, &st, hash_len) {
                Ok(id) if id == oid => {}
                Ok(_) => stale.push((start + 36, e.name.to_vec(), true)),
                // Unreadable: git cannot vouch for it either, and says so.
                Err(_) => {}
            }
        });
        if walked.is_err() {
            return Vec::new();
        }
        stale
    }

    /// Whether the repository's own config (or, for a linked worktree, its repository's) names
    /// `core.trustctime` or `core.checkStat` (or includes another file).
    fn repo_names_ctime(&self) -> bool {
        let common = match self.kind {
            Kind::Worktree => self.rel.parent().and_then(Path::parent).unwrap_or(self.rel),
            Kind::Repository => self.rel,
        };
        let worktree_config = self.rel.join("config.worktree");
        [common.join("config"), worktree_config]
            .iter()
            .any(|config| {
                let (Some(parent), Some(name)) = (config.parent(), config.file_name()) else {
                    return false;
                };
                open_dir(self.root, parent)
                    .and_then(|fd| read_regular(fd.as_fd(), name, CONFIG_READ_LIMIT))
                    .is_ok_and(|bytes| {
                        let text = String::from_utf8_lossy(&bytes).to_ascii_lowercase();
                        text.contains("trustctime")
                            || text.contains("checkstat")
                            || text.contains("include")
                    })
            })
    }

    /// An index this sweep does not judge or rewrite: left as it is, reported as not handled.
    fn unjudged(&mut self, why: &str, entries: Vec<String>) {
        let path = self.abs("index");
        let repo = self
            .rel
            .parent()
            .map(|p| self.workspace.join(p))
            .unwrap_or_else(|| self.workspace.to_path_buf());
        let mut finding = Finding::new(path.clone(), "index-flags");
        finding.detail = Some(format!(
            "the index changed during the run and {why}: its flags (assume-valid, skip-worktree) were not judged, and may hide changes from the host's `git status` and `git diff`"
        ));
        finding.error = Some(format!(
            "{} left as it is: look with `git ls-files -v` (lowercase and `S` are flagged), clear flags with `git update-index --no-assume-unchanged --no-skip-worktree PATH`, or rebuild it from HEAD with `rm {}; git -C {} reset`",
            path.display(),
            path.display(),
            repo.display()
        ));
        finding.entries = entries.into_iter().take(NAMED_ENTRIES).collect();
        self.judged.findings.push(finding);
    }
}

/// The object id git gives `name`'s content as a blob (a link's: its target), with no filter or
/// conversion: SHA-1, or SHA-256 for ids of 32 bytes.
fn blob_id(dir: BorrowedFd<'_>, name: &OsStr, st: &Stat, hash_len: usize) -> io::Result<Vec<u8>> {
    enum Hasher {
        Sha1(ring::digest::Context),
        Sha256(Sha256),
    }
    let mut hasher = if hash_len == 32 {
        Hasher::Sha256(Sha256::new())
    } else {
        Hasher::Sha1(ring::digest::Context::new(
            &ring::digest::SHA1_FOR_LEGACY_USE_ONLY,
        ))
    };
    let mut update = |bytes: &[u8]| match &mut hasher {
        Hasher::Sha1(c) => c.update(bytes),
        Hasher::Sha256(c) => c.update(bytes),
    };
    if st.is_symlink() {
        let target = beneath::read_link_at(dir, name)?;
        update(format!("blob {}\0", target.len()).as_bytes());
        update(target.as_bytes());
    } else {
        let fd = beneath::open_beneath(dir, Path::new(name), FILE_READING, 0)?;
        let now = beneath::stat_fd(fd.as_fd())?;
        if !now.is_file() {
            return Err(io::Error::other("not a regular file"));
        }
        update(format!("blob {}\0", now.size).as_bytes());
        let mut file = fs::File::from(fd).take(now.size);
        let mut buf = vec![0u8; 64 << 10];
        let mut read = 0u64;
        loop {
            let n = file.read(&mut buf)?;
            if n == 0 {
                break;
            }
            read += n as u64;
            update(&buf[..n]);
        }
        if read != now.size {
            return Err(io::Error::other("the file changed while it was read"));
        }
    }
    Ok(match hasher {
        Hasher::Sha1(c) => c.finish().as_ref().to_vec(),
        Hasher::Sha256(c) => c.finalize().to_vec(),
    })
}

/// Whether the checkout of `repo` (relative to the workspace) has an entry at `name`, never
/// through a link (a link on the way counts as there).
fn in_checkout(root: BorrowedFd<'_>, repo: &Path, name: &[u8]) -> bool {
    let path = repo.join(OsStr::from_bytes(name));
    let (Some(parent), Some(last)) = (path.parent(), path.file_name()) else {
        return true;
    };
    if path
        .components()
        .any(|c| !matches!(c, Component::Normal(_)))
    {
        return true;
    }
    let dir = if parent.as_os_str().is_empty() {
        open_dir(root, named("."))
    } else {
        open_dir(root, parent)
    };
    match dir {
        Ok(dir) => !matches!(beneath::stat_at(dir.as_fd(), last), Err(e) if is_absent(&e)),
        Err(e) => !is_absent(&e),
    }
}
