//! The host's cgroups as found: `/proc/self/cgroup` and `mountinfo` read into the hierarchies the
//! supervisor sits in, with mount points unescaped.

use super::NAME_PREFIX;
use super::SUPERVISOR_NONCE;
use super::read_bounded;
use super::{CgroupHost, CgroupMount, FREEZER, Hierarchy, LimitKind, PROC_READ_LIMIT};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::{Component, Path, PathBuf};

impl CgroupHost {
    /// Reads `<proc>/self/cgroup` and `<proc>/self/mountinfo` (proc = "/proc" in production).
    /// Never fails: what cannot be read is simply absent.
    pub fn discover(proc: &Path) -> CgroupHost {
        let read = |name: &str| {
            read_bounded(&proc.join("self").join(name), PROC_READ_LIMIT).unwrap_or_default()
        };
        CgroupHost::from_texts(&read("cgroup"), &read("mountinfo"), std::process::id())
    }

    /// For tests: the same from given file contents, with the mount points taken as is.
    pub fn from_texts(self_cgroup: &str, mountinfo: &str, own_pid: u32) -> CgroupHost {
        let mounts = parse_mountinfo(mountinfo);
        let mut v1 = BTreeMap::new();
        let mut v2 = None;
        for line in self_cgroup.lines() {
            let mut fields = line.splitn(3, ':');
            let (Some(id), Some(controllers), Some(path)) =
                (fields.next(), fields.next(), fields.next())
            else {
                continue;
            };
            if id == "0" && controllers.is_empty() {
                v2 = mounts
                    .iter()
                    .filter(|m| m.v2)
                    .find_map(|m| m.hierarchy_of(path))
                    .map(|h| without_supervisor_leaf(h, own_pid));
                continue;
            }
            for controller in controllers.split(',') {
                if controller != FREEZER
                    && !LimitKind::ALL.iter().any(|k| k.controller() == controller)
                {
                    continue;
                }
                let found = mounts
                    .iter()
                    .filter(|m| !m.v2 && m.controllers.contains(controller))
                    .find_map(|m| m.hierarchy_of(path));
                if let Some(h) = found {
                    v1.entry(controller.to_string()).or_insert(h);
                }
            }
        }
        CgroupHost { v1, v2, own_pid }
    }

    /// The name of a run's cgroup: `stepproof-<supervisor pid>-<nonce>`.
    pub fn run_name(&self, nonce: &str) -> String {
        format!("{NAME_PREFIX}{}-{nonce}", self.own_pid)
    }
}

/// After the supervisor moved itself into its v2 leaf (see [`Place::V2`]), a second discovery
/// would find the leaf as its own cgroup; the cgroup the runs go below is still its parent.
fn without_supervisor_leaf(mut h: Hierarchy, own_pid: u32) -> Hierarchy {
    let leaf = format!("{NAME_PREFIX}{own_pid}-{SUPERVISOR_NONCE}");
    if h.own_dir.file_name() == Some(leaf.as_ref())
        && let Some(parent) = h.own_dir.parent()
        && parent.starts_with(&h.mount)
    {
        h.own_dir = parent.to_path_buf();
    }
    h
}

impl CgroupMount {
    /// Where `own` (a path from /proc/self/cgroup) is on disk through this mount, if it is
    /// visible there at all. A path with `..` (a cgroup outside the namespace's root) is not:
    /// joining it would point somewhere else than the supervisor's own cgroup.
    fn hierarchy_of(&self, own: &str) -> Option<Hierarchy> {
        let own = Path::new(own);
        if !own.is_absolute() {
            return None;
        }
        let rel = own.strip_prefix(&self.root).ok()?;
        let mut own_dir = self.mount.clone();
        for c in rel.components() {
            match c {
                Component::Normal(part) => own_dir.push(part),
                _ => return None,
            }
        }
        Some(Hierarchy {
            mount: self.mount.clone(),
            own_dir,
        })
    }
}

fn parse_mountinfo(text: &str) -> Vec<CgroupMount> {
    let mut mounts = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // Six fixed fields, optional fields, "-", then fstype, source and super options.
        let Some(sep) = fields.iter().skip(6).position(|f| *f == "-").map(|p| p + 6) else {
            continue;
        };
        let (Some(fstype), Some(options)) = (fields.get(sep + 1), fields.get(sep + 3)) else {
            continue;
        };
        let v2 = match *fstype {
            "cgroup" => false,
            "cgroup2" => true,
            _ => continue,
        };
        mounts.push(CgroupMount {
            v2,
            root: unescape_mountinfo(fields[3]),
            mount: unescape_mountinfo(fields[4]),
            controllers: options.split(',').map(str::to_string).collect(),
        });
    }
    mounts
}

/// mountinfo writes space, tab, newline and backslash in paths as `\ooo`.
fn unescape_mountinfo(field: &str) -> PathBuf {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b)) && d[0] <= b'3');
        match (bytes[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    PathBuf::from(OsString::from_vec(out))
}
