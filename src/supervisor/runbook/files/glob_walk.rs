//! Walking what a glob names: from its literal prefix, into only the directories that can hold
//! a match, past what the ignore rules ignore, each entry counted against the budget.

use super::ignore::IgnoreRules;
use super::reading::{is_absence, open_entry, unreadable, vanished_or_unreadable};
use super::{Exceeded, Found, Walk};

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};

use crate::sys::beneath::{self, DIR_LISTING, DIR_LOOKUP};

impl<'a> Walk<'a> {
    /// The regular files beneath `root` that `glob` names, with their sha256. Directories that
    /// cannot hold a match are not entered. With `rules`, what they ignore is neither entered
    /// nor named. A directory that cannot be read is passed over: this names what exists, and
    /// a file it misses can only make `files_exist` fail (a removal `files_changed` counts is
    /// confirmed by [`lookup`] first).
    pub fn glob(
        &mut self,
        root: BorrowedFd<'_>,
        glob: &str,
        rules: Option<&mut IgnoreRules>,
    ) -> Result<BTreeMap<String, String>, Exceeded> {
        let mut found = BTreeMap::new();
        self.visit(
            root,
            glob,
            rules,
            false,
            &mut |walk, dir, name, rel, stat| {
                if !stat.is_file() {
                    return Ok(());
                }
                let Ok(fd) = open_entry(dir, name) else {
                    return Ok(());
                };
                if let Some(hash) = walk.hash_open(fd, rel)? {
                    found.insert(rel.to_string(), hash);
                }
                Ok(())
            },
        )?;
        Ok(found)
    }

    /// The rule files a walk of `glob` would read, read into `rules` now (nothing hashed):
    /// what a `files_exist` item is judged by, taken when its step opens.
    pub fn read_rules_for(
        &mut self,
        root: BorrowedFd<'_>,
        glob: &str,
        rules: &mut IgnoreRules,
    ) -> Result<(), Exceeded> {
        self.visit(root, glob, Some(rules), false, &mut |_, _, _, _, _| Ok(()))
    }

    /// Calls `found` for every entry `glob` names beneath `root`. The walk starts at the glob's
    /// literal prefix (`tests/unit` of `tests/unit/**/*.py`): what is beside it costs nothing;
    /// a glob without a wildcard is one lookup. `strict`: an entry or directory that cannot be
    /// looked at ends the walk (see [`Walk::inventory`]); otherwise it is passed over.
    pub(super) fn visit(
        &mut self,
        root: BorrowedFd<'_>,
        glob: &str,
        mut rules: Option<&mut IgnoreRules>,
        strict: bool,
        found: &mut Found<'_, 'a>,
    ) -> Result<(), Exceeded> {
        // Split as the hook's `PathGlob` splits it (which [`glob_matches`] judges files by).
        let pattern: Vec<&str> = glob
            .trim_start_matches("./")
            .split('/')
            .filter(|c| !c.is_empty())
            .collect();
        if pattern.is_empty() {
            return Ok(());
        }
        let literal = pattern
            .iter()
            .take_while(|c| !stepproof_hook::pattern::has_wildcard(c))
            .count();
        // The walk's start: the literal prefix (all but the last component of a glob with no
        // wildcard, which is looked up), and the rules of every directory above it.
        let start_len = literal.min(pattern.len() - 1);
        if start_len > self.budget.depth {
            return Err(Exceeded::Depth {
                limit: self.budget.depth,
                at: pattern[..start_len].join("/"),
            });
        }
        if let Some(rules) = rules.as_deref_mut() {
            for n in 0..=start_len {
                if n > 0 && rules.path_ignored(&pattern[..n].join("/"), true) {
                    return Ok(());
                }
                rules.look_in(self, root, &pattern[..n].join("/"))?;
            }
        }
        let start = pattern[..start_len].join("/");
        // The last component of a literal glob, or the start itself (`dir/**` names `dir`).
        let single = if literal == pattern.len() {
            Some(pattern.join("/"))
        } else {
            (!start.is_empty() && glob_matches(glob, &start)).then(|| start.clone())
        };
        if let Some(rel) = single {
            let (parent, name) = rel.rsplit_once('/').unwrap_or(("", &rel));
            self.check_time()?;
            match beneath::open_beneath(root, Path::new(parent), DIR_LOOKUP, 0) {
                Ok(dir) => match beneath::stat_at(dir.as_fd(), OsStr::new(name)) {
                    Ok(stat) => {
                        self.entries += 1;
                        let ignored = rules
                            .as_deref()
                            .is_some_and(|r| r.path_ignored(&rel, stat.is_dir()));
                        if !ignored {
                            found(self, dir.as_fd(), OsStr::new(name), &rel, stat)?;
                        }
                    }
                    Err(e) if strict && !is_absence(&e) => {
                        return Err(unreadable(&rel, &e));
                    }
                    Err(_) => {}
                },
                Err(e) if strict && !is_absence(&e) => return Err(unreadable(parent, &e)),
                Err(_) => {}
            }
            if literal == pattern.len() {
                return Ok(());
            }
        }
        let mut stack: Vec<(PathBuf, usize)> = vec![(PathBuf::from(&start), start_len)];
        let mut first = true;
        while let Some((rel, depth)) = stack.pop() {
            self.check_time()?;
            let shown = rel.to_string_lossy().into_owned();
            let dir = match beneath::open_beneath(root, &rel, DIR_LISTING, 0) {
                Ok(dir) => dir,
                // The start need not exist (or be a directory: a link is not entered).
                Err(e) if first && is_absence(&e) => return Ok(()),
                Err(e) if strict => return Err(vanished_or_unreadable(&shown, &e)),
                Err(_) => continue,
            };
            first = false;
            if let Some(rules) = rules.as_deref_mut() {
                rules.look_in(self, root, &shown)?;
            }
            let left = self.budget.entries.saturating_sub(self.entries);
            let listed =
                beneath::list_dir_up_to(dir.as_fd(), usize::try_from(left).unwrap_or(usize::MAX));
            let (entries, more) = match listed {
                Ok(listed) => listed,
                Err(e) if strict => return Err(unreadable(&shown, &e)),
                Err(_) => continue,
            };
            self.entries += entries.len() as u64;
            if more {
                return Err(Exceeded::Entries {
                    limit: self.budget.entries,
                });
            }
            for (name, _) in entries {
                let child = rel.join(&name);
                let Some(text) = child.to_str() else {
                    if strict {
                        return Err(Exceeded::Unreadable {
                            path: child.to_string_lossy().into_owned(),
                            error: "the name is not UTF-8".into(),
                        });
                    }
                    continue;
                };
                let stat = match beneath::stat_at(dir.as_fd(), &name) {
                    Ok(stat) => stat,
                    Err(e) if strict => return Err(vanished_or_unreadable(text, &e)),
                    Err(_) => continue,
                };
                if rules
                    .as_deref()
                    .is_some_and(|r| r.ignored(text, stat.is_dir()))
                {
                    continue;
                }
                if stat.is_dir() && self.not_entered.iter().any(|n| name == OsStr::new(n)) {
                    continue;
                }
                if glob_matches(glob, text) {
                    found(self, dir.as_fd(), &name, text, stat)?;
                }
                if stat.is_dir() {
                    let parts: Vec<&str> = text.split('/').collect();
                    if !may_hold(&pattern, &parts) {
                        continue;
                    }
                    if depth + 1 > self.budget.depth {
                        return Err(Exceeded::Depth {
                            limit: self.budget.depth,
                            at: text.to_string(),
                        });
                    }
                    stack.push((child, depth + 1));
                }
            }
        }
        Ok(())
    }
}

/// Whether a workspace-relative path matches a glob (`*` within a component, `**` any number
/// of components), as file rules match.
pub fn glob_matches(glob: &str, relative: &str) -> bool {
    stepproof_hook::pattern::PathGlob::new(0, &format!("/{}", glob.trim_start_matches("./")))
        .matches(&format!("/{relative}"))
}

/// Whether a directory with these components can hold a file the glob matches.
pub(super) fn may_hold(pattern: &[&str], dir: &[&str]) -> bool {
    for (i, component) in dir.iter().enumerate() {
        match pattern.get(i) {
            Some(&"**") => return true,
            Some(part) if stepproof_hook::pattern::wildcard(part, component) => {}
            _ => return false,
        }
    }
    pattern.len() > dir.len()
}
