//! One git directory judged at the end: its view's directories and files, its loose and packed
//! replace refs (the index is `judge_index`'s).

use super::super::Finding;
use super::read::{loose_replace, meaningful_lines, node_at, packed_replace_lines, read_bounded};
use super::write::{make_dir, rewrite, write_new};
use super::{
    At, Kind, NAMED_ENTRIES, Node, PACKED_REFS_READ_LIMIT, Rule, StatId, VIEW_DIRS, VIEW_FILES,
    VIEW_KEEP_LIMIT, named,
};
use crate::sys::beneath;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

impl At<'_, '_> {
    fn own(&self, per_worktree: bool) -> bool {
        self.kind == Kind::Repository || per_worktree
    }

    pub(super) fn abs(&self, name: &str) -> PathBuf {
        self.workspace.join(self.rel).join(name)
    }

    /// Moves `name` (the entry itself) to the quarantine for `finding`.
    pub(super) fn take(&mut self, name: &str, finding: &mut Finding) -> bool {
        self.quarantine
            .take_for(self.root, &self.rel.join(name), finding)
    }

    pub(super) fn judge(&mut self) {
        let recreated = self.judge_dirs();
        let sparse_unchanged = self.judge_files(&recreated);
        if self.kind == Kind::Repository {
            self.judge_loose_replace();
            self.judge_packed_refs();
            if self.gd_has("reftable") {
                self.judged.notes.push(format!(
                    "{} keeps its refs in a reftable: replace refs in it are not judged",
                    self.workspace.join(self.rel).display()
                ));
            }
        }
        self.judge_index(sparse_unchanged);
    }

    fn gd_has(&self, name: &str) -> bool {
        beneath::stat_at(self.gd, OsStr::new(name)).is_ok()
    }

    /// A link where `info`, `refs` or `refs/replace` should be is moved (as a link), and the
    /// directory made again when there was one at launch. Returns the directories made again.
    fn judge_dirs(&mut self) -> Vec<&'static str> {
        let mut recreated = Vec::new();
        for &(name, per_worktree) in VIEW_DIRS {
            if !self.own(per_worktree) {
                continue;
            }
            let (now, _) = node_at(self.gd, name);
            let before = self
                .launch
                .and_then(|l| l.nodes.get(name))
                .cloned()
                .unwrap_or(Node::Absent);
            let Node::Link(target) = &now else {
                continue;
            };
            if now.same(&before) {
                continue;
            }
            let change = if name == "info" {
                "git-view"
            } else {
                "replace-ref"
            };
            let mut finding = Finding::new(self.abs(name), change);
            let mut detail = format!(
                "a link to {} where the host's git reads {name}: moved as a link, its target never touched",
                target.to_string_lossy()
            );
            if self.take(name, &mut finding)
                && let Node::Dir { mode, uid, gid } = before
            {
                match make_dir(self.gd, name, mode, uid, gid) {
                    Ok(()) => {
                        recreated.push(name);
                        detail.push_str("; the directory is made again as it was at launch");
                    }
                    Err(e) => {
                        finding.error = Some(format!(
                            "making the directory {} again: {e}",
                            self.abs(name).display()
                        ));
                    }
                }
            }
            finding.detail = Some(detail);
            self.judged.findings.push(finding);
        }
        recreated
    }

    /// The view files. Returns whether `info/sparse-checkout` is as it was at launch.
    fn judge_files(&mut self, recreated: &[&str]) -> bool {
        let mut sparse_unchanged = false;
        for &(name, rule, per_worktree, what) in VIEW_FILES {
            if !self.own(per_worktree) {
                continue;
            }
            let (now, content) = node_at(self.gd, name);
            let before = match self.launch {
                Some(l) => l.nodes.get(name).cloned().unwrap_or(Node::Absent),
                None => Node::Absent,
            };
            let kept = self.launch.and_then(|l| l.kept.get(name));
            // Its directory was a link, moved: the launch version goes back.
            let put_back_anyway = recreated.iter().any(|d| name.starts_with(&format!("{d}/")));
            if now.same(&before) {
                if name == "info/sparse-checkout" {
                    sparse_unchanged = matches!(now, Node::File { .. });
                }
                continue;
            }
            let inert = match (&now, self.launch) {
                // Gone: git shows more, which is the truth.
                (Node::Absent, _) => !put_back_anyway || kept.is_none(),
                (Node::File { .. }, None) => {
                    let bytes = content.as_ref().map_or(&[][..], |(b, _)| b.as_slice());
                    name == "shallow" || meaningful_lines(bytes).is_empty()
                }
                (Node::File { .. }, Some(_)) if rule == Rule::Lines => match (kept, &content) {
                    (Some(kept), Some((bytes, _))) => {
                        let old = meaningful_lines(kept.bytes.as_bytes());
                        meaningful_lines(bytes).is_subset(&old)
                    }
                    _ => false,
                },
                _ => false,
            };
            if inert {
                continue;
            }
            let mut finding = Finding::new(self.abs(name), "git-view");
            let mut detail = match (&now, &before) {
                (Node::Absent, _) => format!("{name} was gone with its directory"),
                (_, Node::Absent) => format!("{name} appeared during the run ({what})"),
                _ => format!("{name} changed during the run ({what})"),
            };
            let moved = matches!(now, Node::Absent) || self.take(name, &mut finding);
            if moved {
                match kept {
                    Some(kept) => {
                        match write_new(
                            self.gd,
                            named(name),
                            kept.bytes.as_bytes(),
                            kept.mode,
                            kept.uid,
                            kept.gid,
                        ) {
                            Ok(()) => {
                                self.judged.restored.push(self.abs(name));
                                detail.push_str(": the launch version is back in place");
                                if name == "info/sparse-checkout" {
                                    sparse_unchanged = true;
                                }
                            }
                            Err(e) => {
                                finding.error = Some(format!(
                                    "putting the launch version of {} back: {e}",
                                    self.abs(name).display()
                                ));
                            }
                        }
                    }
                    None if matches!(before, Node::Absent) => {
                        detail.push_str(": moved (there was none at launch)");
                    }
                    None if matches!(before, Node::File { .. }) => detail.push_str(&format!(
                        ": moved; the launch version ({}) was larger than the {} KiB a run keeps and is not put back",
                        describe(&before),
                        VIEW_KEEP_LIMIT >> 10
                    )),
                    None => detail.push_str(&format!(
                        ": moved; what was there at launch ({}) is not put back",
                        describe(&before)
                    )),
                }
            }
            finding.detail = Some(detail);
            self.judged.findings.push(finding);
        }
        sparse_unchanged
    }

    /// Loose replace refs that were not there at launch (by name and value, loose or packed)
    /// are moved; one that changed gets its launch value back.
    fn judge_loose_replace(&mut self) {
        let now = loose_replace(self.gd);
        let empty = BTreeMap::new();
        let launch_loose = self.launch.map_or(&empty, |l| &l.loose_replace);
        for (name, value) in now {
            let below = name.as_os_str().as_bytes();
            let packed_key = |oid: &str| {
                let mut line = oid.as_bytes().to_vec();
                line.extend_from_slice(b" refs/replace/");
                line.extend_from_slice(below);
                hex::encode(line)
            };
            let known = launch_loose.get(&name) == Some(&value)
                || self
                    .launch
                    .is_some_and(|l| l.packed_replace.contains(&packed_key(&value)));
            if known {
                continue;
            }
            let full = Path::new("refs/replace").join(&name);
            let mut finding =
                Finding::new(self.workspace.join(self.rel).join(&full), "replace-ref");
            finding.entries = vec![format!("refs/replace/{}", name.to_string_lossy())];
            let mut detail = format!(
                "a replace ref the run made: the host's git would show {value} in place of {}",
                name.to_string_lossy()
            );
            let moved = self
                .quarantine
                .take_for(self.root, &self.rel.join(&full), &mut finding);
            if moved
                && let Some(old) = launch_loose.get(&name)
                && old.len() >= 40
                && old.bytes().all(|b| b.is_ascii_hexdigit())
            {
                let owner = beneath::stat_at(self.gd, OsStr::new("refs")).ok();
                let (uid, gid) = owner.map_or((0, 0), |s| (s.uid, s.gid));
                let line = format!("{old}\n");
                match write_new(self.gd, &full, line.as_bytes(), 0o644, uid, gid) {
                    Ok(()) => {
                        self.judged
                            .restored
                            .push(self.workspace.join(self.rel).join(&full));
                        detail.push_str("; its launch value is back in place");
                    }
                    Err(e) => {
                        finding.error = Some(format!(
                            "putting the launch value of {} back: {e}",
                            finding.path.display()
                        ));
                    }
                }
            }
            finding.detail = Some(detail);
            self.judged.findings.push(finding);
        }
    }

    /// Lines of `packed-refs` that name a replace ref the launch did not have are taken out of
    /// it (a peeled line after one goes with it).
    fn judge_packed_refs(&mut self) {
        let name = "packed-refs";
        let launch_stat = self.launch.and_then(|l| l.packed);
        let (bytes, st) = match read_bounded(self.gd, name, PACKED_REFS_READ_LIMIT) {
            Ok(None) => return,
            Ok(Some((_, st))) if Some(StatId::of(&st)) == launch_stat => return,
            Ok(Some(found)) => found,
            Err((st, why)) => {
                if st.as_ref().map(StatId::of) == launch_stat && launch_stat.is_some() {
                    return;
                }
                let (Node::Link(target), _) = node_at(self.gd, name) else {
                    let mut finding = Finding::new(self.abs(name), "replace-ref");
                    finding.error = Some(format!(
                        "{} changed and could not be read ({why}): the replace refs in it were not judged",
                        self.abs(name).display()
                    ));
                    self.judged.findings.push(finding);
                    return;
                };
                let mut finding = Finding::new(self.abs(name), "replace-ref");
                finding.detail = Some(format!(
                    "a link to {} where the host's git reads packed-refs: moved as a link, its target never touched",
                    target.to_string_lossy()
                ));
                self.take(name, &mut finding);
                self.judged.findings.push(finding);
                return;
            }
        };
        let launch_keys = self.launch.map(|l| &l.packed_replace);
        let launch_loose = self.launch.map(|l| &l.loose_replace);
        let mut remove = BTreeSet::new();
        let mut refs = Vec::new();
        let lines: Vec<&[u8]> = bytes.split(|&b| b == b'\n').collect();
        for (i, below, oid, key) in packed_replace_lines(&bytes) {
            let below_path = PathBuf::from(OsStr::from_bytes(&below));
            let known = launch_keys.is_some_and(|k| k.contains(&key))
                || launch_loose.is_some_and(|l| l.get(&below_path) == Some(&oid));
            if known {
                continue;
            }
            if self.launch.is_some_and(|l| l.packed_unread.is_some()) {
                let mut finding = Finding::new(self.abs(name), "replace-ref");
                finding.error = Some(format!(
                    "{} could not be read at launch: whether its replace refs are the run's cannot be told",
                    self.abs(name).display()
                ));
                self.judged.findings.push(finding);
                return;
            }
            remove.insert(i);
            if lines.get(i + 1).is_some_and(|l| l.starts_with(b"^")) {
                remove.insert(i + 1);
            }
            refs.push(format!("refs/replace/{}", String::from_utf8_lossy(&below)));
        }
        if remove.is_empty() {
            return;
        }
        let mut kept_lines = Vec::with_capacity(bytes.len());
        let mut removed = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            let out = if remove.contains(&i) {
                &mut removed
            } else {
                &mut kept_lines
            };
            out.extend_from_slice(line);
            if i + 1 < lines.len() {
                out.push(b'\n');
            }
        }
        if !removed.ends_with(b"\n") {
            removed.push(b'\n');
        }
        let mut finding = Finding::new(self.abs(name), "replace-ref");
        finding.entries = refs.iter().take(NAMED_ENTRIES).cloned().collect();
        let count = refs.len();
        match self.quarantine.write_in(&self.rel.join(name), &removed) {
            Ok(to) => finding.quarantined_to = Some(to),
            Err(e) => {
                finding.error = Some(format!(
                    "keeping the lines taken out of {} in the quarantine: {e}",
                    self.abs(name).display()
                ));
                self.judged.findings.push(finding);
                return;
            }
        }
        match rewrite(self.gd, name, &kept_lines, &st) {
            Ok(()) => {
                finding.detail = Some(format!(
                    "{count} replace ref(s) the run added to packed-refs (the host's git would show other commits in their place): taken out of it; the lines are in the quarantine"
                ));
            }
            Err(e) => {
                finding.error = Some(format!(
                    "rewriting {} without the run's replace refs: {e}",
                    self.abs(name).display()
                ));
            }
        }
        self.judged.findings.push(finding);
    }
}

/// A node in words.
fn describe(node: &Node) -> String {
    match node {
        Node::Absent => "none".into(),
        Node::Dir { .. } => "a directory".into(),
        Node::File { digest } => format!("size:sha256 {digest}"),
        Node::Link(target) => format!("a link to {}", target.to_string_lossy()),
        Node::Other(what) => what.clone(),
    }
}
