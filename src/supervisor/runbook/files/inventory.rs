//! Inventories: every entry a step's globs name (files with their hash, links as links), their
//! digest, and the changes between two of them.

use super::ignore::IgnoreRules;
use super::reading::{open_entry, vanished_or_unreadable};
use super::{Exceeded, Walk};

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::fd::BorrowedFd;
use std::os::unix::ffi::OsStringExt;

use sha2::{Digest, Sha256};

use crate::sys::beneath;

impl<'a> Walk<'a> {
    /// Every entry beneath `root` that one of `globs` names — regular files, directories,
    /// links (recorded as links, never followed), anything else — by `lstat`, regular files
    /// with their sha256: what a step's invariants are compared by. Strict: an entry or
    /// directory that cannot be read, or one that changes meanwhile, is the walk's end
    /// ([`Exceeded::Unreadable`], [`Exceeded::Unstable`]), never an entry left out. Each glob
    /// says whether `rules` apply to it (`true`: what they ignore is not walked).
    pub fn inventory(
        &mut self,
        root: BorrowedFd<'_>,
        globs: &[(String, bool)],
        mut rules: Option<&mut IgnoreRules>,
    ) -> Result<BTreeMap<String, Entry>, Exceeded> {
        let mut found = BTreeMap::new();
        for (glob, ignoring) in globs {
            let rules = if *ignoring {
                rules.as_deref_mut()
            } else {
                None
            };
            self.visit(
                root,
                glob,
                rules,
                true,
                &mut |walk, dir, name, rel, stat| {
                    let entry = walk.entry(dir, name, rel, stat)?;
                    found.insert(rel.to_string(), entry);
                    Ok(())
                },
            )?;
        }
        Ok(found)
    }

    /// What one entry is, for [`Walk::inventory`].
    fn entry(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &OsStr,
        rel: &str,
        stat: beneath::Stat,
    ) -> Result<Entry, Exceeded> {
        let unstable = || Exceeded::Unstable {
            path: rel.to_string(),
        };
        if stat.is_file() {
            let fd = open_entry(dir, name).map_err(|e| vanished_or_unreadable(rel, &e))?;
            let sha256 = self.hash_open(fd, rel)?.ok_or_else(unstable)?;
            Ok(Entry::File {
                mode: stat.mode & 0o7777,
                size: stat.size,
                sha256,
            })
        } else if stat.is_symlink() {
            let target =
                beneath::read_link_at(dir, name).map_err(|e| vanished_or_unreadable(rel, &e))?;
            Ok(Entry::Link {
                target: target.into_vec(),
            })
        } else if stat.is_dir() {
            Ok(Entry::Dir {
                mode: stat.mode & 0o7777,
            })
        } else {
            Ok(Entry::Special { mode: stat.mode })
        }
    }
}

/// What one path is, by `lstat`: a link is recorded as a link (its target as written, never
/// followed), a regular file by its content's sha256. Modes are the permission bits
/// (`0o7777`); a special file keeps its whole `st_mode`, so its type is in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    File {
        mode: u32,
        size: u64,
        sha256: String,
    },
    Link {
        target: Vec<u8>,
    },
    Dir {
        mode: u32,
    },
    Special {
        mode: u32,
    },
}

impl Entry {
    pub fn kind(&self) -> &'static str {
        match self {
            Entry::File { .. } => "file",
            Entry::Link { .. } => "link",
            Entry::Dir { .. } => "directory",
            Entry::Special { .. } => "special file",
        }
    }

    /// How `self` differs from `before`, in words (`None`: it does not).
    pub fn change_from(&self, before: &Entry) -> Option<String> {
        if self == before {
            return None;
        }
        Some(match (before, self) {
            (Entry::File { mode: a, .. }, Entry::File { mode: b, .. })
            | (Entry::Dir { mode: a }, Entry::Dir { mode: b })
                if a != b =>
            {
                let content = matches!((before, self), (Entry::File { sha256: x, .. }, Entry::File { sha256: y, .. }) if x != y);
                format!(
                    "mode {a:o} → {b:o}{}",
                    if content { ", and its content" } else { "" }
                )
            }
            (Entry::File { .. }, Entry::File { .. }) => "content".to_string(),
            (Entry::Link { target: a }, Entry::Link { target: b }) => format!(
                "link retargeted: {} → {}",
                String::from_utf8_lossy(a),
                String::from_utf8_lossy(b)
            ),
            (Entry::Link { target }, _) => format!(
                "was a link (to {}), now a {}",
                String::from_utf8_lossy(target),
                self.kind()
            ),
            (_, Entry::Link { target }) => format!(
                "was a {}, now a link (to {})",
                before.kind(),
                String::from_utf8_lossy(target)
            ),
            _ => format!("was a {}, now a {}", before.kind(), self.kind()),
        })
    }

    /// One line of the inventory's digest.
    fn digest_line(&self, path: &str) -> String {
        match self {
            Entry::File { mode, size, sha256 } => format!("file {mode:o} {size} {sha256} {path}"),
            Entry::Link { target } => format!("link {} {path}", hex::encode(target)),
            Entry::Dir { mode } => format!("dir {mode:o} {path}"),
            Entry::Special { mode } => format!("special {mode:o} {path}"),
        }
    }
}

/// `sha256:` of an inventory, one line an entry in path order: what a record binds when it
/// does not list the entries.
pub fn inventory_digest(entries: &BTreeMap<String, Entry>) -> String {
    let mut hasher = Sha256::new();
    for (path, entry) in entries {
        hasher.update(entry.digest_line(path).as_bytes());
        hasher.update(b"\n");
    }
    format!("sha256:{}", hex::encode(hasher.finalize()))
}

/// The changes from `before` to `now`, path by path, in words: new, removed, or how it
/// changed. An entry of `before` that `now` lacks counts as removed only when a lookup beneath
/// `root` confirms nothing is there ([`Walk::lookup`]); one that is there after all means the
/// walk missed it, and there is no verdict.
pub fn compare(
    walk: &mut Walk<'_>,
    root: BorrowedFd<'_>,
    before: &BTreeMap<String, Entry>,
    now: &BTreeMap<String, Entry>,
) -> Result<BTreeMap<String, String>, Exceeded> {
    let mut changes = BTreeMap::new();
    for (path, entry) in now {
        match before.get(path) {
            None => {
                changes.insert(path.clone(), format!("new {}", entry.kind()));
            }
            Some(old) => {
                if let Some(change) = entry.change_from(old) {
                    changes.insert(path.clone(), change);
                }
            }
        }
    }
    for (path, old) in before {
        if now.contains_key(path) {
            continue;
        }
        if walk.lookup(root, path)?.is_some() {
            return Err(Exceeded::Unstable { path: path.clone() });
        }
        changes.insert(path.clone(), format!("removed ({})", old.kind()));
    }
    Ok(changes)
}
