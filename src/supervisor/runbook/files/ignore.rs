//! The ignore rules a walk honours: the repository's (`.gitignore`s, `info/exclude`) as the
//! step opened, or a default set outside a repository; read within the walk's budgets.

use super::reading::{is_absence, unreadable, vanished_or_unreadable};
use super::{Exceeded, Walk};

use std::collections::BTreeMap;
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::sys::beneath::{self, DIR_LISTING, FILE_READING};

impl<'a> Walk<'a> {
    /// What `rules` ignore beneath `start` (a workspace-relative directory): the topmost
    /// ignored entries (an ignored directory is named, not entered), and whether each is a
    /// directory. Links are named when ignored, never followed. Strict, like
    /// [`Walk::inventory`]: what cannot be read ends the walk.
    pub fn ignored_under(
        &mut self,
        root: BorrowedFd<'_>,
        start: &str,
        rules: &IgnoreRules,
    ) -> Result<Vec<(String, bool)>, Exceeded> {
        let mut found = Vec::new();
        let mut stack: Vec<(PathBuf, usize)> = vec![(PathBuf::from(start), 0)];
        let mut first = true;
        while let Some((rel, depth)) = stack.pop() {
            self.check_time()?;
            let shown = rel.to_string_lossy().into_owned();
            let dir = match beneath::open_beneath(root, &rel, DIR_LISTING, 0) {
                Ok(dir) => dir,
                Err(e) if first && is_absence(&e) => return Ok(found),
                Err(e) => return Err(vanished_or_unreadable(&shown, &e)),
            };
            first = false;
            let left = self.budget.entries.saturating_sub(self.entries);
            let (entries, more) =
                beneath::list_dir_up_to(dir.as_fd(), usize::try_from(left).unwrap_or(usize::MAX))
                    .map_err(|e| unreadable(&shown, &e))?;
            self.entries += entries.len() as u64;
            if more {
                return Err(Exceeded::Entries {
                    limit: self.budget.entries,
                });
            }
            for (name, _) in entries {
                let child = rel.join(&name);
                let Some(text) = child.to_str() else {
                    return Err(Exceeded::Unreadable {
                        path: child.to_string_lossy().into_owned(),
                        error: "the name is not UTF-8".into(),
                    });
                };
                let stat = beneath::stat_at(dir.as_fd(), &name)
                    .map_err(|e| vanished_or_unreadable(text, &e))?;
                if rules.path_ignored(text, stat.is_dir()) {
                    found.push((text.to_string(), stat.is_dir()));
                } else if stat.is_dir() {
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
        Ok(found)
    }
}

/// The largest ignore file read (`.gitignore`, `.git/info/exclude`); a larger one ends the walk
/// ([`Exceeded::FileBytes`]): what it would ignore is unknown.
pub const IGNORE_FILE_MAX_BYTES: u64 = 1 << 20;

/// What counts as ignored outside a repository (no `.git` at the workspace's top): the build
/// output and caches of the common tool chains, in `.gitignore` syntax.
pub const DEFAULT_IGNORED: &[&str] = &[
    "__pycache__/",
    "*.py[cod]",
    ".pytest_cache/",
    ".mypy_cache/",
    ".ruff_cache/",
    ".tox/",
    ".venv/",
    "node_modules/",
    "target/",
    "*.o",
    ".gradle/",
    ".DS_Store",
];

/// The ignore rules of a step: the workspace's `.gitignore` files and `.git/info/exclude` as
/// they were when the step opened (git's precedence: a deeper `.gitignore` over a shallower
/// one, every `.gitignore` over `info/exclude`), or [`DEFAULT_IGNORED`] outside a repository.
/// Captured by the step's opening walks — each directory's `.gitignore` read (beneath, never
/// through a link, like git) when a walk first enters it — and then frozen: a `.gitignore` the
/// agent writes during the step changes nothing. `core.excludesFile` and
/// `$XDG_CONFIG_HOME/git/ignore` are not read: they are the host's per-person configuration
/// (and the sandbox's home is the agent's to write), so a verdict would depend on whose
/// machine it ran on. `.git` itself is always ignored, as git never reports it.
#[derive(Debug, Clone)]
pub struct IgnoreRules {
    repository: bool,
    /// Each directory's `.gitignore` (`""`: the workspace's own), as read.
    dirs: BTreeMap<String, ignore::gitignore::Gitignore>,
    /// The directories whose `.gitignore` was looked for.
    looked: std::collections::BTreeSet<String>,
    exclude: ignore::gitignore::Gitignore,
    /// Each rule file read, with the sha256 of what was read.
    sources: BTreeMap<String, String>,
    frozen: bool,
}

impl IgnoreRules {
    /// The rules at the workspace's top: whether it is a repository (`.git` there, looked at
    /// without following a link), its `.git/info/exclude` (when `.git` is a directory), or the
    /// default set.
    pub fn capture(walk: &mut Walk<'_>, root: BorrowedFd<'_>) -> Result<IgnoreRules, Exceeded> {
        let git = walk.lookup(root, ".git")?;
        let repository = git.is_some();
        let mut rules = IgnoreRules {
            repository,
            dirs: BTreeMap::new(),
            looked: Default::default(),
            exclude: ignore::gitignore::Gitignore::empty(),
            sources: BTreeMap::new(),
            frozen: false,
        };
        if !repository {
            rules.exclude = build(DEFAULT_IGNORED.iter().copied());
        } else if git.is_some_and(|s| s.is_dir())
            && let Some(text) = read_rules(walk, root, ".git/info/exclude")?
        {
            rules.exclude = build(text.lines());
            rules
                .sources
                .insert(".git/info/exclude".into(), sha256_text(&text));
        }
        Ok(rules)
    }

    /// No rules at all (where every file counts).
    pub fn none() -> IgnoreRules {
        IgnoreRules {
            repository: false,
            dirs: BTreeMap::new(),
            looked: Default::default(),
            exclude: ignore::gitignore::Gitignore::empty(),
            sources: BTreeMap::new(),
            frozen: true,
        }
    }

    /// No rule file is read from now on: the rules are as the step opened.
    pub fn freeze(&mut self) {
        self.frozen = true;
    }

    pub fn repository(&self) -> bool {
        self.repository
    }

    /// The rule files read, each with its sha256.
    pub fn sources(&self) -> &BTreeMap<String, String> {
        &self.sources
    }

    /// `sha256:` of the rules: the mode and every rule file's path and hash.
    pub fn digest(&self) -> String {
        let mut hasher = Sha256::new();
        hasher.update(if self.repository {
            "repository\n"
        } else {
            "default set\n"
        });
        for (path, hash) in &self.sources {
            hasher.update(format!("{hash}  {path}\n").as_bytes());
        }
        format!("sha256:{}", hex::encode(hasher.finalize()))
    }

    /// Reads `dir/.gitignore` (once; not once frozen) into the rules.
    pub(super) fn look_in(
        &mut self,
        walk: &mut Walk<'_>,
        root: BorrowedFd<'_>,
        dir: &str,
    ) -> Result<(), Exceeded> {
        if self.frozen || !self.looked.insert(dir.to_string()) {
            return Ok(());
        }
        let path = if dir.is_empty() {
            ".gitignore".to_string()
        } else {
            format!("{dir}/.gitignore")
        };
        if let Some(text) = read_rules(walk, root, &path)? {
            self.dirs.insert(dir.to_string(), build(text.lines()));
            self.sources.insert(path, sha256_text(&text));
        }
        Ok(())
    }

    /// Whether the rules ignore the entry `rel` itself (its directories above taken as not
    /// ignored: a walk never enters an ignored one). The deepest `.gitignore` that says
    /// something about it decides, then `info/exclude` (or the default set).
    pub fn ignored(&self, rel: &str, is_dir: bool) -> bool {
        let parts: Vec<&str> = rel.split('/').collect();
        if parts.last() == Some(&".git") {
            return true;
        }
        for depth in (0..parts.len()).rev() {
            if let Some(rules) = self.dirs.get(&parts[..depth].join("/")) {
                match rules.matched(parts[depth..].join("/"), is_dir) {
                    ignore::Match::Ignore(_) => return true,
                    ignore::Match::Whitelist(_) => return false,
                    ignore::Match::None => {}
                }
            }
        }
        self.exclude.matched(rel, is_dir).is_ignore()
    }

    /// Whether `rel` or a directory above it is ignored (git never looks inside an ignored
    /// directory, so nothing beneath one can be re-included).
    pub fn path_ignored(&self, rel: &str, is_dir: bool) -> bool {
        let parts: Vec<&str> = rel.split('/').filter(|p| !p.is_empty()).collect();
        (1..=parts.len()).any(|n| self.ignored(&parts[..n].join("/"), n < parts.len() || is_dir))
    }
}

/// A matcher of `.gitignore` lines, each taken as git takes it (a line that is not a valid
/// pattern is passed over, as git does). Root `.`: paths are given relative to the file's
/// directory.
fn build<'l>(lines: impl Iterator<Item = &'l str>) -> ignore::gitignore::Gitignore {
    let mut builder = ignore::gitignore::GitignoreBuilder::new(".");
    for line in lines {
        let _ = builder.add_line(None, line);
    }
    builder
        .build()
        .unwrap_or_else(|_| ignore::gitignore::Gitignore::empty())
}

fn sha256_text(text: &str) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(text.as_bytes())))
}

/// An ignore file's text: `None` when there is none (absent, a link — git does not follow
/// one either —, not a regular file). Read within the walk's byte budget, at most
/// [`IGNORE_FILE_MAX_BYTES`]; one that cannot be read ends the walk.
fn read_rules(
    walk: &mut Walk<'_>,
    root: BorrowedFd<'_>,
    rel: &str,
) -> Result<Option<String>, Exceeded> {
    walk.check_time()?;
    let fd = match beneath::open_beneath(root, Path::new(rel), FILE_READING, 0) {
        Ok(fd) => fd,
        Err(e) if is_absence(&e) => return Ok(None),
        Err(e) => return Err(unreadable(rel, &e)),
    };
    let stat = beneath::stat_fd(fd.as_fd()).map_err(|e| unreadable(rel, &e))?;
    if !stat.is_file() {
        return Ok(None);
    }
    walk.admit_whole(rel, &stat, IGNORE_FILE_MAX_BYTES)?;
    walk.bytes += stat.size;
    let mut bytes = Vec::new();
    std::fs::File::from(fd)
        .take(IGNORE_FILE_MAX_BYTES)
        .read_to_end(&mut bytes)
        .map_err(|e| unreadable(rel, &e))?;
    Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
}
