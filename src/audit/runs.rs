//! The run directories under the state dir, `~/.local/state/stepproof/runs/<seconds>-<pid>`:
//! each holds a run's audit log (unless `--audit-log` put it elsewhere), its agent's
//! configuration, and what the sweep quarantined. They are kept by a retention rule: after each
//! run, the newest [`DEFAULT_KEEP`] run directories stay (or as many as `--keep-runs` /
//! `STEPPROOF_KEEP_RUNS` say; `all` keeps every one) and older ones are removed.
//!
//! Never removed: the run's own directory, the directory of a run whose supervisor is still
//! alive (its pid exists, or its lock is held), a directory that still owes work (a marker,
//! [`crate::audit::owed`]: the end of a run whose supervisor died, which `stepproof repair` or
//! the next run on its workspace finishes), and anything whose name is not `<seconds>-<pid>` or
//! that is not a directory (a link is never followed).

use crate::audit::owed::{self, OwedRun};
use std::fs;
use std::path::{Path, PathBuf};

/// Run directories kept when nothing else is said.
pub const DEFAULT_KEEP: usize = 100;

/// How many run directories to keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// Every one: nothing is removed.
    All,
    /// The newest N (the current run counts as one).
    Newest(usize),
}

impl Default for Keep {
    fn default() -> Keep {
        Keep::Newest(DEFAULT_KEEP)
    }
}

impl std::str::FromStr for Keep {
    type Err = String;

    fn from_str(text: &str) -> Result<Keep, String> {
        if text == "all" {
            return Ok(Keep::All);
        }
        match text.parse::<usize>() {
            Ok(n) if n >= 1 => Ok(Keep::Newest(n)),
            _ => Err(format!(
                "`{text}`: expected a number of run directories (at least 1) or `all`"
            )),
        }
    }
}

/// `<seconds>-<pid>` → (seconds, pid).
fn parse_name(name: &str) -> Option<(u64, u32)> {
    let (secs, pid) = name.split_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(secs) || !digits(pid) {
        return None;
    }
    Some((secs.parse().ok()?, pid.parse().ok()?))
}

/// The run directories in `runs` (`<seconds>-<pid>`, directories, never a link), newest first.
pub fn run_dirs(runs: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(runs) else {
        return Vec::new();
    };
    let mut found: Vec<(u64, u32, PathBuf)> = entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name();
            let (secs, pid) = parse_name(name.to_str()?)?;
            entry
                .file_type()
                .ok()
                .filter(fs::FileType::is_dir)
                .map(|_| (secs, pid, entry.path()))
        })
        .collect();
    found.sort_unstable_by_key(|&(secs, pid, _)| std::cmp::Reverse((secs, pid)));
    found.into_iter().map(|(_, _, p)| p).collect()
}

/// Every run directory in `runs` that owes work: a marker, and a lock nobody holds.
pub fn owed_runs(runs: &Path) -> Vec<OwedRun> {
    run_dirs(runs)
        .into_iter()
        .filter(|dir| owed::has_marker(dir) && !owed::lock_held(dir))
        .filter_map(|dir| match owed::read_header(&dir) {
            // Finished meanwhile.
            Ok(None) => None,
            Ok(Some(h)) => Some(OwedRun {
                run_dir: dir,
                header: Ok(h),
            }),
            Err(why) => Some(OwedRun {
                run_dir: dir,
                header: Err(why),
            }),
        })
        .collect()
}

/// Applies the retention rule to the directory holding `own` (the current run's directory):
/// returns the run directories removed, and those that could not be (with why).
pub fn prune(own: &Path, keep: Keep) -> (Vec<PathBuf>, Vec<(PathBuf, std::io::Error)>) {
    let (mut removed, mut failed) = (Vec::new(), Vec::new());
    let Keep::Newest(keep) = keep else {
        return (removed, failed);
    };
    let Some(runs) = own.parent() else {
        return (removed, failed);
    };
    let Ok(entries) = fs::read_dir(runs) else {
        return (removed, failed);
    };
    let mut found: Vec<(u64, u32, PathBuf)> = entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name();
            let (secs, pid) = parse_name(name.to_str()?)?;
            // file_type does not follow a link: a link is never a run directory here.
            entry
                .file_type()
                .ok()
                .filter(fs::FileType::is_dir)
                .map(|_| (secs, pid, entry.path()))
        })
        .collect();
    if found.len() <= keep {
        return (removed, failed);
    }
    // Newest first; the same second is ordered by pid, which is as good a guess as any.
    found.sort_unstable_by_key(|&(secs, pid, _)| std::cmp::Reverse((secs, pid)));
    for (_, pid, path) in found.into_iter().skip(keep) {
        let alive = Path::new("/proc").join(pid.to_string()).exists() || owed::lock_held(&path);
        if path == own || alive || owed::has_marker(&path) {
            continue;
        }
        match fs::remove_dir_all(&path) {
            Ok(()) => removed.push(path),
            Err(e) => failed.push((path, e)),
        }
    }
    (removed, failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(workspace: &Path) -> owed::Header {
        owed::Header {
            format: owed::FORMAT.into(),
            version: owed::VERSION,
            run_id: "r".into(),
            pid: 4_194_305,
            pid_start: Some(1),
            boot_id: owed::boot_id(),
            started_at_ms: 1,
            workspace: workspace.to_path_buf(),
            audit_log: None,
            run_start_seq: Some(0),
        }
    }

    #[test]
    fn a_marker_whose_lock_is_free_is_owed_and_a_held_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let runs = dir.path().join("runs");
        let run = runs.join("1-4194305");
        fs::create_dir_all(&run).unwrap();
        assert!(owed_runs(&runs).is_empty());
        let bytes = serde_json::to_vec(&header(Path::new("/w"))).unwrap();
        owed::write_atomic(&run, owed::MARKER, &bytes).unwrap();
        let owed = owed_runs(&runs);
        assert_eq!(owed.len(), 1);
        assert!(owed[0].of_workspace(Path::new("/w")));
        assert!(!owed[0].of_workspace(Path::new("/v")));
        assert!(owed[0].describe().contains("stepproof repair /w"));
        let lock = owed::open_lock(&run).unwrap();
        lock.lock().unwrap();
        assert!(owed::lock_held(&run));
        assert!(owed_runs(&runs).is_empty());
        drop(lock);
        assert!(!owed::lock_held(&run));
        owed::remove_durably(&run, &[owed::MARKER, owed::SWEPT]).unwrap();
        assert!(!owed::has_marker(&run) && owed_runs(&runs).is_empty());
    }

    #[test]
    fn keep_parses_numbers_and_all() {
        assert_eq!("all".parse::<Keep>(), Ok(Keep::All));
        assert_eq!("7".parse::<Keep>(), Ok(Keep::Newest(7)));
        for bad in ["0", "-1", "", "many", "1e3"] {
            assert!(bad.parse::<Keep>().is_err(), "{bad}");
        }
    }

    #[test]
    fn the_newest_are_kept_and_nothing_else_is_touched() {
        let dir = tempfile::tempdir().unwrap();
        let runs = dir.path().join("runs");
        fs::create_dir_all(&runs).unwrap();
        // A pid that is not alive: above the kernel's pid_max.
        let dead = 4_194_305u32;
        for secs in 1..=6u64 {
            let d = runs.join(format!("{secs}-{dead}"));
            fs::create_dir_all(d.join("claude-config")).unwrap();
            fs::write(d.join("audit.jsonl"), "x").unwrap();
        }
        // A live supervisor's (ours), old: kept.
        let live = runs.join(format!("0-{}", std::process::id()));
        fs::create_dir_all(&live).unwrap();
        // Not run directories: kept.
        fs::write(runs.join("7-1"), "a file").unwrap();
        fs::create_dir_all(runs.join("notes")).unwrap();
        let target = dir.path().join("elsewhere");
        fs::create_dir_all(&target).unwrap();
        std::os::unix::fs::symlink(&target, runs.join("0-4194306")).unwrap();
        let own = runs.join(format!("6-{dead}"));
        let (removed, failed) = prune(&own, Keep::Newest(3));
        assert!(failed.is_empty(), "{failed:?}");
        let mut removed: Vec<String> = removed
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        removed.sort();
        assert_eq!(
            removed,
            ["1-4194305", "2-4194305", "3-4194305"].map(|s| s.to_string())
        );
        for kept in [
            "4-4194305",
            "5-4194305",
            "6-4194305",
            "7-1",
            "notes",
            "0-4194306",
        ] {
            assert!(fs::symlink_metadata(runs.join(kept)).is_ok(), "{kept}");
        }
        assert!(live.is_dir() && target.is_dir());
        assert_eq!(prune(&own, Keep::All).0.len(), 0);
    }

    #[test]
    fn a_directory_that_owes_work_or_whose_lock_is_held_is_never_removed() {
        let dir = tempfile::tempdir().unwrap();
        let runs = dir.path().join("runs");
        let dead = 4_194_305u32;
        for secs in 1..=4u64 {
            fs::create_dir_all(runs.join(format!("{secs}-{dead}"))).unwrap();
        }
        // The oldest owes work (its marker); the next one's lock is held (a repair at work).
        crate::audit::owed::write_atomic(
            &runs.join(format!("1-{dead}")),
            crate::audit::owed::MARKER,
            b"{}",
        )
        .unwrap();
        let lock = crate::audit::owed::open_lock(&runs.join(format!("2-{dead}"))).unwrap();
        lock.lock().unwrap();
        let own = runs.join(format!("4-{dead}"));
        let (removed, failed) = prune(&own, Keep::Newest(1));
        assert!(failed.is_empty(), "{failed:?}");
        assert_eq!(removed, vec![runs.join(format!("3-{dead}"))]);
        assert!(runs.join(format!("1-{dead}")).is_dir());
        assert!(runs.join(format!("2-{dead}")).is_dir());
        drop(lock);
        let (removed, _) = prune(&own, Keep::Newest(1));
        assert_eq!(removed, vec![runs.join(format!("2-{dead}"))]);
        assert!(runs.join(format!("1-{dead}")).is_dir());
    }
}
