//! The end of a git layer: what a run wrote in a repository's `.git` waited in the layer's
//! upper directory (in the run directory, outside the sandbox; see `MountOp::GitLayer`); here it
//! is judged and what is inert is carried into the host's `.git`. The host's tools never saw it
//! before: a supervisor killed at any instant leaves the layer, and the repair carries it then.
//!
//! Entry by entry of the upper directory (never following a link, from descriptors):
//! * a repository's `config` (its own, a submodule's `modules/…/config`) is carried only when
//!   what the run added is inert (the keys `git init`, `clone`, `remote add`, `branch` write);
//!   otherwise the host's stays as it was at launch, the run's goes to the quarantine, and that
//!   is a finding — the key never reached a file the host's git reads;
//! * a persistence name (`hooks`, `commondir`, `config.worktree`, in the repository and in its
//!   submodules' and worktrees' git directories) is carried only when it is new and what `git
//!   init` or `git worktree add` writes (sample hooks, `commondir` of `../..`); otherwise
//!   quarantined, a finding;
//! * a removal (an overlay whiteout) is carried as a removal, except of a `config` (the host's
//!   stays, a finding); a directory the run emptied and made again (opaque) replaces the host's;
//! * every other file (refs, logs, `HEAD`, `index`, `packed-refs`, `info/…`) is carried as it
//!   is, each written beside its name and renamed into place; the sweep that follows judges what
//!   the host's git will show (`git_view`) as for any run. A file the host's own git changed
//!   while the run was on (its ctime after the launch, its content not the run's) is the
//!   host's: it stays, and the run's version goes to the quarantine with a note — except the
//!   index, which a host `git status` rewrites all the time (the run's, with what it staged,
//!   is carried);
//! * links, FIFOs, sockets and devices are never carried: a link is quarantined (a finding).
//!
//! The work is the run's to size, so it is bounded: [`MAX_ENTRIES`] entries, [`MAX_DEPTH`]
//! levels, [`MAX_FILE`] bytes a file and [`MAX_BYTES`] in all. A file beyond its budget is not
//! carried but moved to the quarantine (a finding); beyond the others, what is left of the layer
//! is not carried and moves to the quarantine whole (a finding naming the budget). Only a
//! failure of the file system keeps the layer where it is, for `stepproof repair` (a finding
//! with an error; the host's `.git` is as it was, less what was carried).

use super::git_rules::{inert_config_change, inert_git_config, inert_git_path, stays_below};
use super::quarantine::{Quarantine, remove_tree_at};
use super::{Finding, LaunchFile};
use crate::audit::owed::bytes;
use crate::sys::beneath::{self, DIR_LISTING, DIR_LOOKUP, Stat};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

/// Entries of one layer looked at, at most.
const MAX_ENTRIES: u64 = 1_000_000;
/// Directory levels below the git directory.
const MAX_DEPTH: usize = 64;
/// The largest file carried: the largest index the sweep reads (git's other files are far
/// smaller; the object stores are written through, not carried).
const MAX_FILE: u64 = crate::sandbox::plan::git_index::INDEX_READ_LIMIT;
/// Bytes carried from one layer in all.
const MAX_BYTES: u64 = 1 << 30;
/// A repository's config is small; more than this is not read (and not carried).
const CONFIG_LIMIT: u64 = 1 << 20;

/// One layer, as the launch snapshot records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layer {
    /// The git directory, relative to the workspace.
    #[serde(with = "bytes::path")]
    pub git: PathBuf,
    /// The layer's directory (`upper/`, `work/`) in the run directory.
    #[serde(with = "bytes::path")]
    pub dir: PathBuf,
}

/// Makes the plan's git layers in the run directory before the launch: `upper/` (with the mode
/// of the `.git` it lies over: the overlay's root takes it) and `work/`, owned by the sandbox
/// user's host id (overlayfs writes them with the credentials of the init that mounts it).
pub fn prepare_layers(plan: &crate::sandbox::plan::SandboxPlan) -> io::Result<()> {
    let owner = (plan.identity.outside_uid, plan.identity.outside_gid);
    for op in &plan.mounts {
        let crate::sandbox::plan::MountOp::GitLayer { git, layer, .. } = op else {
            continue;
        };
        let mode = fs::symlink_metadata(git).map_or(0o755, |m| {
            std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o777
        });
        if let Some(parent) = layer.parent() {
            std::os::unix::fs::DirBuilderExt::mode(fs::DirBuilder::new().recursive(true), 0o700)
                .create(parent)?;
        }
        for (dir, mode) in [
            (layer.clone(), 0o700),
            (layer.join("upper"), mode),
            (layer.join("work"), 0o700),
        ] {
            fs::create_dir(&dir)
                .map_err(|e| io::Error::new(e.kind(), format!("making {}: {e}", dir.display())))?;
            if nix::unistd::geteuid().is_root() {
                std::os::unix::fs::chown(&dir, Some(owner.0), Some(owner.1))?;
            }
            fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(mode))?;
        }
    }
    Ok(())
}

/// What carrying the layers gave.
#[derive(Debug, Default)]
pub(super) struct Carried {
    pub findings: Vec<Finding>,
    pub notes: Vec<String>,
}

/// Carries every layer (see the module's documentation), then removes each one carried whole.
pub(super) fn carry_layers(
    root: BorrowedFd<'_>,
    workspace: &Path,
    layers: &[Layer],
    configs: &BTreeMap<PathBuf, LaunchFile>,
    protected: &[String],
    launched: std::time::Duration,
    quarantine: &mut Quarantine,
) -> Carried {
    let patterns = git_dir_patterns(protected);
    let mut out = Carried::default();
    for layer in layers {
        let upper = layer.dir.join("upper");
        let up = match beneath::open_root(&upper, DIR_LISTING) {
            Ok(fd) => fd,
            // Carried and removed before (a repair after an end that got this far).
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => {
                let mut finding = Finding::new(workspace.join(&layer.git), "unchecked");
                finding.error = Some(format!(
                    "opening the run's git layer {}: {e}; what the run wrote in this .git is not carried (the host's is as it was at launch)",
                    upper.display()
                ));
                out.findings.push(finding);
                continue;
            }
        };
        let real = match beneath::open_beneath(root, &layer.git, DIR_LOOKUP, 0) {
            Ok(fd) => fd,
            Err(e) => {
                let mut finding = Finding::new(workspace.join(&layer.git), "unchecked");
                finding.error = Some(format!(
                    "opening {}: {e}; the run's git layer {} is kept",
                    workspace.join(&layer.git).display(),
                    layer.dir.display()
                ));
                out.findings.push(finding);
                continue;
            }
        };
        let owner = beneath::stat_fd(real.as_fd()).map_or((0, 0), |st| (st.uid, st.gid));
        let mut carry = Carry {
            workspace,
            git: &layer.git,
            configs,
            patterns: &patterns,
            quarantine: &mut *quarantine,
            owner,
            launched,
            entries: 0,
            bytes: 0,
            kept: None,
            over: None,
            out: &mut out,
        };
        carry.directory(up, real, PathBuf::new(), 0);
        let over = carry.over.take();
        let kept = carry.kept.take();
        if kept.is_none()
            && let Some(why) = over
        {
            let mut finding = Finding::new(workspace.join(&layer.git), "unchecked");
            let rest = layer.git.with_extension("git-layer-rest");
            match quarantine.take_from_path(&layer.dir.join("upper"), &rest) {
                Ok(to) => {
                    finding.detail = Some(format!(
                        "{why}: the rest of what the run wrote in this .git is not carried; it is in the quarantine"
                    ));
                    finding.quarantined_to = Some(to);
                }
                Err(e) => {
                    finding.error = Some(format!(
                        "{why}: the rest of what the run wrote in this .git is not carried; moving it to the quarantine failed: {e}"
                    ));
                }
            }
            out.findings.push(finding);
        }
        match kept {
            Some(why) => {
                let mut finding = Finding::new(workspace.join(&layer.git), "unchecked");
                finding.error = Some(format!(
                    "{why}: the rest of what the run wrote in this .git is not carried and the layer {} is kept (the host's .git has what was carried before it)",
                    layer.dir.display()
                ));
                out.findings.push(finding);
            }
            None => {
                if let Err(e) = remove_layer(&layer.dir) {
                    out.notes.push(format!(
                        "{}: carried, but removing the layer failed: {e}",
                        layer.dir.display()
                    ));
                }
            }
        }
    }
    out
}

/// The profile's persistence names inside a git directory (`.git/hooks` → `hooks`,
/// `.git/modules/*/hooks` → `hooks`: a submodule's git directory, at any depth, is judged like
/// the repository's own), each as its components.
fn git_dir_patterns(protected: &[String]) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = protected
        .iter()
        .filter_map(|p| p.strip_prefix(".git/"))
        .map(|p| strip_modules(&p.split('/').map(str::to_owned).collect::<Vec<_>>()))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The components of a path in a git directory without its leading `modules/<name>` pairs.
fn strip_modules<S: AsRef<str>>(parts: &[S]) -> Vec<String> {
    let mut at = 0;
    while parts.len() >= at + 2 && parts[at].as_ref() == "modules" {
        at += 2;
    }
    parts[at..].iter().map(|s| s.as_ref().to_owned()).collect()
}

/// Whether the path (in a git directory) is at or below one of the patterns (`*` matches any
/// one component).
fn is_protected(rel: &Path, patterns: &[Vec<String>]) -> bool {
    let parts: Vec<String> = rel
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect();
    let parts = strip_modules(&parts);
    patterns
        .iter()
        .any(|p| p.len() <= parts.len() && p.iter().zip(&parts).all(|(p, n)| p == "*" || p == n))
}

/// A repository's own config: `config` in a git directory (the repository's, or a submodule's
/// `modules/<name>/config`).
fn is_repo_config(rel: &Path) -> bool {
    let parts: Vec<&OsStr> = rel.components().map(|c| c.as_os_str()).collect();
    match parts.as_slice() {
        [only] => *only == "config",
        [.., modules, _, last] => *last == "config" && *modules == "modules",
        _ => false,
    }
}

struct Carry<'a> {
    workspace: &'a Path,
    git: &'a Path,
    configs: &'a BTreeMap<PathBuf, LaunchFile>,
    patterns: &'a [Vec<String>],
    quarantine: &'a mut Quarantine,
    owner: (u32, u32),
    launched: std::time::Duration,
    entries: u64,
    bytes: u64,
    /// Why the carry stopped before the end for a failure (the layer is then kept).
    kept: Option<String>,
    /// Which budget stopped it (the rest then goes to the quarantine).
    over: Option<String>,
    out: &'a mut Carried,
}

impl Carry<'_> {
    fn shown(&self, rel: &Path) -> PathBuf {
        self.workspace.join(self.git).join(rel)
    }

    fn stop(&mut self, why: String) {
        if self.kept.is_none() {
            self.kept = Some(why);
        }
    }

    fn over_budget(&mut self, why: String) {
        if self.over.is_none() {
            self.over = Some(why);
        }
    }

    fn stopped(&self) -> bool {
        self.kept.is_some() || self.over.is_some()
    }

    /// Carries the directory `up` of the layer into `real` (both at `rel` in the git directory).
    fn directory(&mut self, up: OwnedFd, real: OwnedFd, rel: PathBuf, depth: usize) {
        if depth > MAX_DEPTH {
            return self.over_budget(format!(
                "{} is more than {MAX_DEPTH} levels deep",
                self.shown(&rel).display()
            ));
        }
        let left = usize::try_from(MAX_ENTRIES.saturating_sub(self.entries)).unwrap_or(0);
        let (names, more) = match beneath::list_dir_up_to(up.as_fd(), left) {
            Ok(listed) => listed,
            Err(e) => {
                return self.stop(format!("listing {}: {e}", self.shown(&rel).display()));
            }
        };
        let mut names: Vec<_> = names.into_iter().map(|(n, _)| n).collect();
        names.sort();
        for name in names {
            if self.stopped() {
                return;
            }
            self.entries += 1;
            self.entry(up.as_fd(), real.as_fd(), &rel, &name, depth);
        }
        if more {
            self.over_budget(format!(
                "more than {MAX_ENTRIES} entries written in {}",
                self.shown(Path::new("")).display()
            ));
        }
    }

    fn entry(
        &mut self,
        up: BorrowedFd<'_>,
        real: BorrowedFd<'_>,
        rel_dir: &Path,
        name: &OsStr,
        depth: usize,
    ) {
        let rel = rel_dir.join(name);
        let st = match beneath::stat_at(up, name) {
            Ok(st) => st,
            Err(e) => return self.stop(format!("reading {}: {e}", self.shown(&rel).display())),
        };
        if st.is_whiteout() {
            return self.removal(real, &rel, name);
        }
        let config = is_repo_config(&rel);
        if !config && is_protected(&rel, self.patterns) {
            return self.persistence(up, real, &rel, name, &st);
        }
        if st.is_dir() {
            let opaque = beneath::has_xattr_at(up, name, c"user.overlay.opaque").unwrap_or(false);
            let sub = self.make_dir(real, &rel, name, &st, opaque);
            let Some(real_sub) = sub else { return };
            match beneath::open_beneath(up, Path::new(name), DIR_LISTING, 0) {
                Ok(up_sub) => self.directory(up_sub, real_sub, rel, depth + 1),
                Err(e) => self.stop(format!("opening {}: {e}", self.shown(&rel).display())),
            }
        } else if st.is_file() && config {
            self.config(up, real, &rel, name, &st);
        } else if st.is_file() {
            self.file(up, real, &rel, name, &st);
        } else if st.is_symlink() {
            let mut finding = Finding::new(self.shown(&rel), "symlink");
            finding.detail = Some(
                "a link the run made in a git directory: not carried (git makes none there)".into(),
            );
            self.quarantine_from(up, name, &rel, &mut finding);
            self.out.findings.push(finding);
        } else {
            self.out.notes.push(format!(
                "{}: a FIFO, socket or device the run made in a git directory: not carried",
                self.shown(&rel).display()
            ));
        }
    }

    /// The run removed `rel`: so is the host's, but a repository's config stays.
    fn removal(&mut self, real: BorrowedFd<'_>, rel: &Path, name: &OsStr) {
        if is_repo_config(rel) || is_protected(rel, self.patterns) {
            let mut finding = Finding::new(self.shown(rel), "removed");
            finding.detail = Some(
                "the run removed it: not carried, the host's stays as it was at launch".into(),
            );
            self.out.findings.push(finding);
            return;
        }
        match remove_tree_at(real, name) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => self.stop(format!("removing {}: {e}", self.shown(rel).display())),
        }
    }

    /// A persistence name the run wrote: carried only when it is new and what git itself
    /// writes there.
    fn persistence(
        &mut self,
        up: BorrowedFd<'_>,
        real: BorrowedFd<'_>,
        rel: &Path,
        name: &OsStr,
        st: &Stat,
    ) {
        let existed = beneath::stat_at(real, name).is_ok();
        let ws_rel = self.git.join(rel);
        if !existed && inert_git_path(up, &ws_rel, st) {
            if let Err(e) = super::quarantine::copy_tree_at(up, name, real) {
                self.stop(format!("carrying {}: {e}", self.shown(rel).display()));
            }
            return;
        }
        let mut finding = if st.is_symlink() {
            let target = beneath::read_link_at(up, name).unwrap_or_default();
            let mut finding = Finding::new(self.shown(rel), "symlink");
            finding.detail = Some(format!(
                "a symlink to {} at the persistence path {}: not carried (the host never saw it), moved as a link, its target never touched",
                target.to_string_lossy(),
                ws_rel.display()
            ));
            finding
        } else {
            let mut finding =
                Finding::new(self.shown(rel), if existed { "changed" } else { "created" });
            finding.detail = Some(
                "a persistence path the run wrote in a git directory: not carried, the host never saw it"
                    .into(),
            );
            finding
        };
        self.quarantine_from(up, name, rel, &mut finding);
        self.out.findings.push(finding);
    }

    /// A repository's config: carried when what the run added is inert.
    fn config(
        &mut self,
        up: BorrowedFd<'_>,
        real: BorrowedFd<'_>,
        rel: &Path,
        name: &OsStr,
        st: &Stat,
    ) {
        let ws_rel = self.git.join(rel);
        let git_dir = ws_rel.parent().unwrap_or(Path::new("")).to_path_buf();
        let inside = |value: &str| !value.is_empty() && stays_below(&git_dir, value);
        let text = super::read_regular(up, name, CONFIG_LIMIT + 1)
            .ok()
            .filter(|b| b.len() as u64 <= CONFIG_LIMIT)
            .and_then(|b| String::from_utf8(b).ok());
        let inert = text
            .as_deref()
            .is_some_and(|text| match self.configs.get(&ws_rel) {
                Some(launch) => inert_config_change(&launch.text, text, &inside),
                None => inert_git_config(text, &inside),
            });
        if inert {
            return self.file(up, real, rel, name, st);
        }
        let mut finding = Finding::new(self.shown(rel), "changed");
        finding.detail = Some(
            "keys that can run code were added: not carried, the host's config stays as it was at launch (the host's git never read the run's)"
                .into(),
        );
        self.quarantine_from(up, name, rel, &mut finding);
        self.out.findings.push(finding);
    }

    /// A directory of the layer: made in the host's `.git` where missing; an opaque one (the
    /// run removed it and made it again) replaces the host's.
    fn make_dir(
        &mut self,
        real: BorrowedFd<'_>,
        rel: &Path,
        name: &OsStr,
        st: &Stat,
        opaque: bool,
    ) -> Option<OwnedFd> {
        let fail = |this: &mut Self, what: &str, e: io::Error| {
            this.stop(format!("{what} {}: {e}", this.shown(rel).display()));
            None
        };
        match beneath::stat_at(real, name) {
            Ok(now) if now.is_dir() && !opaque => {}
            Ok(_) => {
                if let Err(e) = remove_tree_at(real, name) {
                    return fail(self, "replacing", e);
                }
                if let Err(e) = self.new_dir(real, name, st) {
                    return fail(self, "making", e);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if let Err(e) = self.new_dir(real, name, st) {
                    return fail(self, "making", e);
                }
            }
            Err(e) => return fail(self, "reading", e),
        }
        match beneath::open_beneath(real, Path::new(name), DIR_LOOKUP, 0) {
            Ok(fd) => Some(fd),
            Err(e) => fail(self, "opening", e),
        }
    }

    fn new_dir(&self, real: BorrowedFd<'_>, name: &OsStr, st: &Stat) -> io::Result<()> {
        beneath::mkdir_at(real, name, st.mode & 0o777)?;
        if nix::unistd::geteuid().is_root() {
            beneath::chown_at(real, name, self.owner.0, self.owner.1)?;
        }
        beneath::chmod_at(real, name, st.mode & 0o777)
    }

    /// A file carried, or moved to the quarantine when it is beyond what a layer carries.
    fn file(
        &mut self,
        up: BorrowedFd<'_>,
        real: BorrowedFd<'_>,
        rel: &Path,
        name: &OsStr,
        st: &Stat,
    ) {
        if st.size > MAX_FILE || self.bytes + st.size > MAX_BYTES {
            let mut finding = Finding::new(self.shown(rel), "unchecked");
            finding.detail = Some(format!(
                "{} bytes, beyond the {} MiB a file or the {} MiB a layer carries: not carried",
                st.size,
                MAX_FILE >> 20,
                MAX_BYTES >> 20
            ));
            self.quarantine_from(up, name, rel, &mut finding);
            self.out.findings.push(finding);
            return;
        }
        self.bytes += st.size;
        if rel.file_name() != Some(OsStr::new("index")) && self.host_wrote(up, real, name, st) {
            let mut finding = Finding::new(self.shown(rel), "changed");
            self.quarantine_from(up, name, rel, &mut finding);
            self.out.notes.push(format!(
                "{}: the host changed it while the run was on, and the run wrote its own: the host's stays, the run's is in the quarantine{}",
                self.shown(rel).display(),
                finding
                    .quarantined_to
                    .map(|to| format!(" ({})", to.display()))
                    .unwrap_or_default()
            ));
            return;
        }
        if let Err(e) = self.copy_file(up, real, name, st) {
            self.stop(format!("carrying {}: {e}", self.shown(rel).display()));
        }
    }

    /// Whether the host's `name` changed after the launch to something other than the run's.
    fn host_wrote(
        &self,
        up: BorrowedFd<'_>,
        real: BorrowedFd<'_>,
        name: &OsStr,
        st: &Stat,
    ) -> bool {
        let Ok(now) = beneath::stat_at(real, name) else {
            return false;
        };
        if !now.is_file() || !super::after(now.ctime, self.launched) {
            return false;
        }
        if now.size != st.size {
            return true;
        }
        let read = |dir| super::read_regular(dir, name, MAX_FILE);
        !matches!((read(up), read(real)), (Ok(a), Ok(b)) if a == b)
    }

    /// Copies the file `name` of the layer over the host's through the sweep's one atomic write
    /// ([`super::git_view::write_whole`]: beside it, synced, renamed into place, the directory
    /// synced), so the host's git reads the old file or the new one, never a part. The file is
    /// read whole: [`MAX_FILE`] bounds it, as the sweep's read of an index is bounded.
    fn copy_file(
        &mut self,
        up: BorrowedFd<'_>,
        real: BorrowedFd<'_>,
        name: &OsStr,
        st: &Stat,
    ) -> io::Result<()> {
        let bytes = super::read_regular(up, name, st.size.min(MAX_FILE) + 1)?;
        if bytes.len() as u64 != st.size {
            return Err(io::Error::other("the file changed while it was carried"));
        }
        let (uid, gid) = self.owner;
        super::git_view::write_whole(real, name, &bytes, (st.mode & 0o777, uid, gid), true)
    }

    /// Moves `name` of the layer to the quarantine, at its place in the workspace.
    fn quarantine_from(
        &mut self,
        up: BorrowedFd<'_>,
        name: &OsStr,
        rel: &Path,
        finding: &mut Finding,
    ) {
        match self.quarantine.take_from(up, name, &self.git.join(rel)) {
            Ok(to) => finding.quarantined_to = Some(to),
            Err(e) => {
                finding.error = Some(format!(
                    "moving {} to the quarantine: {e}",
                    finding.path.display()
                ));
            }
        }
    }
}

/// Removes a carried layer (`upper/`, and `work/` whose inner directory overlayfs leaves with
/// mode 000).
fn remove_layer(dir: &Path) -> io::Result<()> {
    let Some((parent, name)) = dir.parent().zip(dir.file_name()) else {
        return Ok(());
    };
    let parent = beneath::open_root(parent, DIR_LOOKUP)?;
    if let Ok(work) =
        beneath::open_beneath(parent.as_fd(), &Path::new(name).join("work"), DIR_LOOKUP, 0)
    {
        let _ = beneath::chmod_at(work.as_fd(), OsStr::new("work"), 0o700);
    }
    match remove_tree_at(parent.as_fd(), name) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn persistence_names_are_found_in_every_git_directory() {
        let patterns = git_dir_patterns(&[
            ".git/hooks".into(),
            ".git/config.worktree".into(),
            ".git/modules/*/hooks".into(),
            ".git/worktrees/*/commondir".into(),
            ".husky".into(),
        ]);
        for yes in [
            "hooks",
            "hooks/pre-commit",
            "config.worktree",
            "modules/a/hooks/post-checkout",
            "modules/a/modules/b/hooks",
            "worktrees/w/commondir",
        ] {
            assert!(is_protected(Path::new(yes), &patterns), "{yes}");
        }
        for no in [
            "config",
            "refs/heads/hooks",
            "info/exclude",
            "HEAD",
            "modules/a/config",
        ] {
            assert!(!is_protected(Path::new(no), &patterns), "{no}");
        }
        assert!(is_repo_config(Path::new("config")));
        assert!(is_repo_config(Path::new("modules/a/config")));
        assert!(is_repo_config(Path::new("modules/a/modules/b/config")));
        assert!(!is_repo_config(Path::new("refs/heads/config")));
        assert!(!is_repo_config(Path::new("config.worktree")));
    }
}
