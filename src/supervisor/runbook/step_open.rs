//! What a step changed, for its verifiers. When a step opens in a runbook that has model
//! verifiers, the supervisor keeps the workspace's text files as they are — what git would see:
//! the step's opening ignore rules apply, `.git` is never read — in a content-addressed store in
//! the run's directory, outside every sandbox (one copy of each content however many steps keep
//! it). At a verification the workspace as it is then (the agent's processes frozen) is compared
//! with the opening of the earliest step the verified one rests on, and the differences are
//! written as unified diffs, bounded; what is not kept (over [`FILE_KEPT_MAX`], not UTF-8 text,
//! past the store's [`STORE_MAX`]) is named with its digests, never shown. Every walk and read
//! is the run's bounded kind ([`Walk`]), with a spend of its own: keeping the verifier's view can
//! never use up what the proofs may spend. Running out is said in the view, never a partial
//! list taken as complete.

use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use sha2::{Digest, Sha256};

use crate::supervisor::runbook::files::{self, Budget, Exceeded, IgnoreRules, RunSpend, Walk};

/// A file larger than this is not kept (named as changed, with its digests).
pub const FILE_KEPT_MAX: u64 = 256 << 10;
/// What one run's store keeps at most, over every step.
pub const STORE_MAX: u64 = 64 << 20;
/// The diff shown to a verifier, at most; past it the files are named.
pub const DIFF_SHOWN_MAX: usize = 48 << 10;
/// One file's diff, at most.
pub const FILE_DIFF_MAX: usize = 12 << 10;
/// Files named as changed, at most, beyond the diffs shown.
const NAMED_MAX: usize = 200;

/// The run's store of kept contents (`step-open/` in the run's directory, 0700).
#[derive(Debug)]
pub struct Store {
    dir: PathBuf,
    kept_bytes: u64,
    /// Contents known not to be kept, and why (binary, too large): not read again.
    not_kept: BTreeMap<String, &'static str>,
    /// Contents in the store.
    kept: HashSet<String>,
    /// What the store's walks have spent in all (their own account, not the proofs').
    spent: RunSpend,
}

/// One step's opening: each file git would see, by its content's sha256, and whether the
/// content is in the store (`None`: why not).
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub step: String,
    pub files: BTreeMap<String, (String, Option<&'static str>)>,
    /// The ignore rules it was taken with (what the later walk uses too).
    pub rules: IgnoreRules,
}

impl Store {
    /// The store of the run whose walks spend `run`: its own account (keeping the verifiers'
    /// view never spends what a proof may), the run's hashes shared (a file the proofs' walks
    /// hashed is not read again to be named).
    pub fn new(run_dir: &Path, run: &RunSpend) -> Store {
        Store {
            dir: run_dir.join("step-open"),
            kept_bytes: 0,
            not_kept: BTreeMap::new(),
            kept: HashSet::new(),
            spent: RunSpend::sharing_hashes(run),
        }
    }

    fn object(&self, sha256: &str) -> PathBuf {
        self.dir.join(sha256)
    }

    /// Keeps the workspace's text files as they are, for `step`. `rules` are the step's
    /// opening rules, not yet frozen (the walk reads every `.gitignore` it enters).
    pub fn take(
        &mut self,
        workspace: &Path,
        budget: &Budget,
        stop: &AtomicBool,
        step: &str,
        rules: &mut IgnoreRules,
    ) -> Result<Snapshot, Exceeded> {
        let root = files::open_workspace(workspace).map_err(|e| Exceeded::Unreadable {
            path: workspace.display().to_string(),
            error: e.to_string(),
        })?;
        let root = root.as_fd();
        let spent = std::mem::take(&mut self.spent);
        let result = (|| {
            let mut walk = Walk::new(budget, stop, &spent);
            let found = walk.glob(root, "**", Some(&mut *rules))?;
            let mut out = BTreeMap::new();
            for (rel, sha256) in found {
                let why = self.keep(&mut walk, root, &rel, &sha256)?;
                out.insert(rel, (sha256, why));
            }
            Ok(out)
        })();
        self.spent = spent;
        let mut rules = rules.clone();
        rules.freeze();
        Ok(Snapshot {
            step: step.to_string(),
            files: result?,
            rules,
        })
    }

    /// Keeps `rel`'s content when it is text within the bounds; `None` when it is kept.
    fn keep(
        &mut self,
        walk: &mut Walk<'_>,
        root: std::os::fd::BorrowedFd<'_>,
        rel: &str,
        sha256: &str,
    ) -> Result<Option<&'static str>, Exceeded> {
        if self.kept.contains(sha256) {
            return Ok(None);
        }
        if let Some(why) = self.not_kept.get(sha256) {
            return Ok(Some(why));
        }
        let why = match walk.read_named(root, rel, FILE_KEPT_MAX + 1)? {
            None => Some("gone before it was read"),
            Some(bytes) if bytes.len() as u64 > FILE_KEPT_MAX => Some("over 256 KiB"),
            Some(bytes) if hex::encode(Sha256::digest(&bytes)) != sha256 => {
                // Not remembered: the content that was hashed may come back.
                return Ok(Some("changed while it was read"));
            }
            Some(bytes) if !is_text(&bytes) => Some("not UTF-8 text"),
            Some(bytes) if self.kept_bytes + bytes.len() as u64 > STORE_MAX => {
                return Ok(Some("the store is full (64 MiB)"));
            }
            Some(bytes) => match self.write(sha256, &bytes) {
                Ok(()) => {
                    self.kept_bytes += bytes.len() as u64;
                    self.kept.insert(sha256.to_string());
                    None
                }
                Err(_) => return Ok(Some("the store could not be written")),
            },
        };
        if let Some(why) = why {
            self.not_kept.insert(sha256.to_string(), why);
        }
        Ok(why)
    }

    fn write(&self, sha256: &str, bytes: &[u8]) -> std::io::Result<()> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)?;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(self.object(sha256))?;
        file.write_all(bytes)
    }

    /// A kept content (read from the store, checked against its name).
    fn content(&self, sha256: &str) -> Option<String> {
        if !self.kept.contains(sha256) {
            return None;
        }
        let bytes = std::fs::read(self.object(sha256)).ok()?;
        (hex::encode(Sha256::digest(&bytes)) == sha256)
            .then(|| String::from_utf8(bytes).ok())
            .flatten()
    }

    /// What changed since `base` opened, as the verifier is shown it: unified diffs of text
    /// files within the bounds, then the files changed but not shown and why. Walks the
    /// workspace as it is now with the base's rules.
    pub fn diff(
        &mut self,
        workspace: &Path,
        budget: &Budget,
        stop: &AtomicBool,
        base: &Snapshot,
    ) -> Result<Diff, Exceeded> {
        let root = files::open_workspace(workspace).map_err(|e| Exceeded::Unreadable {
            path: workspace.display().to_string(),
            error: e.to_string(),
        })?;
        let root = root.as_fd();
        let spent = std::mem::take(&mut self.spent);
        let mut rules = base.rules.clone();
        let result = (|| {
            let mut walk = Walk::new(budget, stop, &spent);
            let now = walk.glob(root, "**", Some(&mut rules))?;
            let mut diff = Diff::default();
            let paths: std::collections::BTreeSet<&String> =
                base.files.keys().chain(now.keys()).collect();
            for rel in paths {
                let before = base.files.get(rel);
                let after = now.get(rel);
                if before.map(|b| &b.0) == after {
                    continue;
                }
                diff.changed += 1;
                let old = match before {
                    Some((sha, None)) => Some(self.content(sha).ok_or("not kept")),
                    Some((_, Some(why))) => Some(Err(*why)),
                    None => None,
                };
                let new = match after {
                    Some(sha) => Some(match walk.read_named(root, rel, FILE_KEPT_MAX + 1)? {
                        Some(bytes) if bytes.len() as u64 > FILE_KEPT_MAX => Err("over 256 KiB"),
                        Some(bytes) if !is_text(&bytes) => Err("not UTF-8 text"),
                        Some(bytes) if hex::encode(Sha256::digest(&bytes)) != *sha => {
                            Err("changed while it was read")
                        }
                        Some(bytes) => Ok(String::from_utf8(bytes).unwrap_or_default()),
                        None => Err("gone before it was read"),
                    }),
                    None => None,
                };
                diff.add(
                    rel,
                    before.map(|b| b.0.as_str()),
                    after.map(String::as_str),
                    old,
                    new,
                );
            }
            Ok(diff)
        })();
        self.spent = spent;
        result
    }
}

/// What a verifier is shown of a step's work.
#[derive(Debug, Default, Clone)]
pub struct Diff {
    /// The unified diffs shown, in path order.
    pub text: String,
    /// Files changed, added or removed.
    pub changed: usize,
    /// Files changed whose diff is not shown, each with why (in words, with the digests).
    pub not_shown: Vec<String>,
}

type Side = Option<Result<String, &'static str>>;

impl Diff {
    fn add(&mut self, rel: &str, sha_a: Option<&str>, sha_b: Option<&str>, old: Side, new: Side) {
        let short = |s: Option<&str>| s.map(|s| format!("sha256:{}", &s[..12.min(s.len())]));
        let what = match (sha_a, sha_b) {
            (None, _) => "added",
            (_, None) => "removed",
            _ => "changed",
        };
        let texts = match (&old, &new) {
            (Some(Err(why)), _) | (_, Some(Err(why))) => Err(*why),
            (a, b) => Ok((
                a.as_ref().and_then(|a| a.as_ref().ok()).map(String::as_str),
                b.as_ref().and_then(|b| b.as_ref().ok()).map(String::as_str),
            )),
        };
        let name = |why: &str| {
            format!(
                "{rel}: {what}, not shown ({why}; {} → {})",
                short(sha_a).unwrap_or_else(|| "none".into()),
                short(sha_b).unwrap_or_else(|| "none".into())
            )
        };
        let (old, new) = match texts {
            Ok(pair) => pair,
            Err(why) => return self.name(name(why)),
        };
        let unified = similar::TextDiff::from_lines(old.unwrap_or(""), new.unwrap_or(""))
            .unified_diff()
            .context_radius(3)
            .header(
                &if old.is_some() {
                    format!("a/{rel}")
                } else {
                    "/dev/null".into()
                },
                &if new.is_some() {
                    format!("b/{rel}")
                } else {
                    "/dev/null".into()
                },
            )
            .to_string();
        if unified.len() > FILE_DIFF_MAX {
            return self.name(name(&format!("its diff is {} bytes", unified.len())));
        }
        if self.text.len() + unified.len() > DIFF_SHOWN_MAX {
            return self.name(name("the diff shown is full"));
        }
        self.text.push_str(&unified);
        if !unified.ends_with('\n') {
            self.text.push('\n');
        }
    }

    fn name(&mut self, line: String) {
        if self.not_shown.len() < NAMED_MAX {
            self.not_shown.push(line);
        } else if self.not_shown.len() == NAMED_MAX {
            self.not_shown.push("… (more not named)".into());
        }
    }
}

/// Text a verifier can be shown: UTF-8 without a NUL.
fn is_text(bytes: &[u8]) -> bool {
    !bytes.contains(&0) && std::str::from_utf8(bytes).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget() -> Budget {
        Budget::from_profile(&crate::profile::budgets::RunbookBudgets::default())
    }

    #[test]
    fn a_steps_work_is_shown_as_diffs_and_the_rest_is_named() {
        let ws = tempfile::tempdir().unwrap();
        let run = tempfile::tempdir().unwrap();
        let w = ws.path();
        std::fs::create_dir_all(w.join("src")).unwrap();
        std::fs::create_dir_all(w.join(".git")).unwrap();
        std::fs::write(w.join(".gitignore"), "build/\n").unwrap();
        std::fs::write(w.join("src/a.py"), "def a():\n    return 5\n").unwrap();
        std::fs::write(w.join("tests.py"), "assert a() == 4\n").unwrap();
        std::fs::write(w.join("blob.bin"), b"\0\x01\x02").unwrap();
        std::fs::write(w.join("gone.txt"), "bye\n").unwrap();
        let mut store = Store::new(run.path(), &RunSpend::default());
        let stop = AtomicBool::new(false);
        let b = budget();
        let rules = {
            let spent = RunSpend::default();
            let mut walk = Walk::new(&b, &stop, &spent);
            let root = files::open_workspace(w).unwrap();
            IgnoreRules::capture(&mut walk, root.as_fd()).unwrap()
        };
        let mut rules = rules;
        let snap = store.take(w, &b, &stop, "fix", &mut rules).unwrap();
        assert!(snap.files.contains_key("src/a.py"), "{:?}", snap.files);
        assert_eq!(snap.files["blob.bin"].1, Some("not UTF-8 text"));
        std::fs::write(w.join("src/a.py"), "def a():\n    return 4\n").unwrap();
        std::fs::write(w.join("tests.py"), "assert a() == a()\n").unwrap();
        std::fs::write(w.join("blob.bin"), b"\0\x09").unwrap();
        std::fs::remove_file(w.join("gone.txt")).unwrap();
        std::fs::write(w.join("new.txt"), "hello\n").unwrap();
        std::fs::create_dir_all(w.join("build")).unwrap();
        std::fs::write(w.join("build/out.txt"), "ignored\n").unwrap();
        let diff = store.diff(w, &b, &stop, &snap).unwrap();
        assert_eq!(diff.changed, 5, "{diff:?}");
        for needle in [
            "--- a/src/a.py",
            "-    return 5",
            "+    return 4",
            "-assert a() == 4",
            "+assert a() == a()",
            "--- a/gone.txt\n+++ /dev/null",
            "--- /dev/null\n+++ b/new.txt",
            "+hello",
        ] {
            assert!(diff.text.contains(needle), "{needle:?} in {}", diff.text);
        }
        assert!(!diff.text.contains("ignored"), "{}", diff.text);
        assert_eq!(diff.not_shown.len(), 1, "{:?}", diff.not_shown);
        assert!(diff.not_shown[0].starts_with("blob.bin: changed, not shown (not UTF-8 text"));
        // One copy of each content: the second opening reads nothing it already has.
        let objects = std::fs::read_dir(run.path().join("step-open"))
            .unwrap()
            .count();
        assert_eq!(objects, 4, "src/a.py, tests.py, gone.txt, .gitignore");
    }

    #[test]
    fn a_large_diff_is_cut_and_says_so() {
        let ws = tempfile::tempdir().unwrap();
        let run = tempfile::tempdir().unwrap();
        let w = ws.path();
        for n in 0..12 {
            std::fs::write(w.join(format!("f{n:02}.txt")), "x\n".repeat(1000)).unwrap();
        }
        let mut store = Store::new(run.path(), &RunSpend::default());
        let stop = AtomicBool::new(false);
        let b = budget();
        let snap = store
            .take(w, &b, &stop, "fix", &mut IgnoreRules::none())
            .unwrap();
        for n in 0..12 {
            std::fs::write(w.join(format!("f{n:02}.txt")), "y\n".repeat(1000)).unwrap();
        }
        let diff = store.diff(w, &b, &stop, &snap).unwrap();
        assert!(diff.text.len() <= DIFF_SHOWN_MAX);
        assert_eq!(diff.changed, 12);
        assert!(
            diff.not_shown
                .iter()
                .all(|l| l.contains("its diff is") || l.contains("the diff shown is full")),
            "{:?}",
            diff.not_shown
        );
        assert!(!diff.not_shown.is_empty());
    }
}
