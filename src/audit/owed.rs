//! Work a run owes at its end, kept in its run directory so that it survives the supervisor.
//!
//! At launch, before the command starts, the supervisor takes an exclusive `flock` on
//! [`LOCK`] in its run directory, held for its whole life (the kernel lets go of it when the
//! supervisor and every process that inherited the descriptor — the sandbox's init, which dies
//! with it — are gone), and writes [`MARKER`]: the launch snapshot the sweep needs, the
//! workspace, where the run's audit log is, the run's id and pid. At a normal end the marker
//! is removed once the sweep and the `run-end` record are on disk. A marker whose lock nobody
//! holds is work owed by a run that died (SIGKILL, the OOM killer, a reboot):
//! `stepproof repair` or the next `stepproof-run` on that workspace finishes it
//! (`supervisor::way_out::recover`), and the run directory is never removed by the retention
//! rule while it owes work ([`crate::audit::runs::prune`]; [`crate::audit::runs::owed_runs`]
//! lists them).
//!
//! This module is what the rest of StepProof reads of it: the names, the marker's header (who,
//! where, which log), whether a run directory owes work, the atomic writes, and the path
//! encoding the marker uses (paths are bytes: a JSON string when they are UTF-8, `{"hex": "…"}`
//! otherwise, so that every path reads back exactly).

use serde::{Deserialize, Serialize};
use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The marker: the run owes the end of its run (the sweep and its end record) until it is gone.
pub const MARKER: &str = "owed.json";
/// Written once the sweep of an owed run is done (by the run itself or by a repair) and before
/// its record: a repair that finds it writes the record from it and never sweeps again.
pub const SWEPT: &str = "owed-swept.json";
/// Held (exclusive `flock`) by the run's supervisor for its whole life, and by a repair while
/// it finishes the run: a held lock means the run is not dead, or is being repaired.
pub const LOCK: &str = "supervisor.lock";
/// `format` of the marker.
pub const FORMAT: &str = "stepproof-owed";
/// `version` of the marker this build writes and reads.
pub const VERSION: u32 = 1;
/// The largest marker a run writes and a repair reads. A repository's config is recorded up to
/// 1 MiB, the persistence paths' entries as hashes; a launch whose snapshot does not fit is
/// refused (a run whose end could not be finished after a kill is not started).
pub const MAX_BYTES: u64 = 64 << 20;

/// What every reader needs of a marker (the snapshot after it is read only by the repair).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    pub format: String,
    pub version: u32,
    /// The run's id (its `run-start` record's `run_id`).
    pub run_id: String,
    /// The supervisor's pid, its start time (clock ticks after boot, `/proc/<pid>/stat` field
    /// 22) and the boot it ran in: together they name the process, whatever reused the pid.
    pub pid: u32,
    #[serde(default)]
    pub pid_start: Option<u64>,
    #[serde(default)]
    pub boot_id: Option<String>,
    pub started_at_ms: u64,
    #[serde(with = "bytes::path")]
    pub workspace: PathBuf,
    /// The run's audit log, when it has one that a repair can append to (a regular file).
    #[serde(with = "bytes::path_opt")]
    pub audit_log: Option<PathBuf>,
    /// The `seq` of the run's `run-start` record in that log: the `run-end-recovered` record
    /// names it, and the chain check closes that run with it.
    pub run_start_seq: Option<u64>,
}

/// The run directories under `~/.local/state/stepproof/runs`.
pub fn runs_dir(home: &Path) -> PathBuf {
    home.join(crate::audit::STATE_DIR).join("runs")
}

/// The caller's runs directory: `$HOME`'s, else the password database's home.
pub fn caller_runs_dir() -> PathBuf {
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            nix::unistd::User::from_uid(nix::unistd::getuid())
                .ok()
                .flatten()
                .map(|u| u.dir)
        })
        .unwrap_or_else(|| PathBuf::from("/"));
    runs_dir(&home)
}

/// Whether `run_dir` holds a marker (a regular file; a link there is not one).
pub fn has_marker(run_dir: &Path) -> bool {
    fs::symlink_metadata(run_dir.join(MARKER)).is_ok_and(|m| m.is_file())
}

/// Whether some process holds the run directory's lock (its supervisor, a process it started,
/// or a repair). Probed with a shared lock taken and dropped at once; a directory without the
/// lock file has no holder.
pub fn lock_held(run_dir: &Path) -> bool {
    let Ok(file) = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(run_dir.join(LOCK))
    else {
        return false;
    };
    writer_holds(&file)
}

/// The marker's bytes (at most [`MAX_BYTES`]), `None` when there is none. Never through a
/// link, never waiting on a FIFO.
pub fn read_marker(run_dir: &Path) -> Result<Option<Vec<u8>>, String> {
    let path = run_dir.join(MARKER);
    read_small(&path, MAX_BYTES).map_err(|e| format!("reading the marker {}: {e}", path.display()))
}

/// A regular file of at most `max` bytes, `None` when it does not exist.
pub fn read_small(path: &Path, max: u64) -> io::Result<Option<Vec<u8>>> {
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if !file.metadata()?.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    let mut bytes = Vec::new();
    file.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(io::Error::other(format!(
            "larger than {}",
            crate::regular_file::size_words(max)
        )));
    }
    Ok(Some(bytes))
}

/// The marker's header, `None` when there is no marker.
pub fn read_header(run_dir: &Path) -> Result<Option<Header>, String> {
    let Some(bytes) = read_marker(run_dir)? else {
        return Ok(None);
    };
    let header: Header = serde_json::from_slice(&bytes)
        .map_err(|e| format!("reading the marker {}: {e}", run_dir.join(MARKER).display()))?;
    if header.format != FORMAT {
        return Err(format!(
            "the marker {} is not a StepProof marker (format {:?})",
            run_dir.join(MARKER).display(),
            header.format
        ));
    }
    Ok(Some(header))
}

/// A run directory whose run owes work and whose lock nobody holds (its supervisor is gone).
#[derive(Debug, Clone)]
pub struct OwedRun {
    pub run_dir: PathBuf,
    /// The marker's header, or why it could not be read.
    pub header: Result<Header, String>,
}

impl OwedRun {
    /// One line for a person: which run, which workspace, what to run.
    pub fn describe(&self) -> String {
        let swept = fs::symlink_metadata(self.run_dir.join(SWEPT)).is_ok_and(|m| m.is_file());
        match &self.header {
            Ok(h) => format!(
                "run {} in {} (supervisor pid {}) ended without finishing its end ({}): run `stepproof repair {}`",
                self.run_dir.display(),
                h.workspace.display(),
                h.pid,
                if swept {
                    "it was swept; its end record is not written yet"
                } else {
                    "its sweep and its end record"
                },
                crate::audit::text::shell_word(&crate::audit::text::path(&h.workspace))
            ),
            Err(why) => format!(
                "run {} owes work, but its marker cannot be read ({why}): `stepproof repair --all` says more",
                self.run_dir.display()
            ),
        }
    }

    /// Whether it is a run of `workspace` (a marker that cannot be read is nobody's).
    pub fn of_workspace(&self, workspace: &Path) -> bool {
        self.header
            .as_ref()
            .is_ok_and(|h| h.workspace.as_path() == workspace)
    }

    /// Whether its run's audit log is `log` (compared as written and canonical).
    pub fn logs_to(&self, log: &Path) -> bool {
        let Ok(Some(own)) = self.header.as_ref().map(|h| h.audit_log.as_deref()) else {
            return false;
        };
        let canonical = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
        own == log || canonical(own) == canonical(log)
    }
}

/// The start time of process `pid` (clock ticks after boot, field 22 of `/proc/<pid>/stat`).
pub fn process_start(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // pid (comm) state ppid …: comm may hold spaces and parentheses.
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// This boot's id.
pub fn boot_id() -> Option<String> {
    fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_string())
}

/// Whether the header's supervisor is still running: same boot, and a process with its pid
/// that started when it did.
pub fn supervisor_alive(header: &Header) -> bool {
    let (Some(start), Some(boot)) = (header.pid_start, &header.boot_id) else {
        return Path::new(&format!("/proc/{}", header.pid)).exists();
    };
    boot_id().as_ref() == Some(boot) && process_start(header.pid) == Some(start)
}

/// Opens (creating it, mode 0600) `dir`'s lock file, never through a link.
pub fn open_lock(dir: &Path) -> Result<File, String> {
    let path = dir.join(LOCK);
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&path)
        .map_err(|e| format!("opening the lock {}: {e}", path.display()))
}

/// Writes `bytes` as `dir/name` so that a reader finds the old file or the whole new one, and
/// it is on disk when this returns: a temporary file beside it (mode 0600), `fsync`, `rename`,
/// `fsync` of the directory.
pub fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), String> {
    let path = dir.join(name);
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let fail = |what: &str, p: &Path, e: io::Error| format!("{what} {}: {e}", p.display());
    let _ = fs::remove_file(&tmp);
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)
        .map_err(|e| fail("creating", &tmp, e))?;
    let written = file
        .write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(|e| fail("writing", &tmp, e))
        .and_then(|()| fs::rename(&tmp, &path).map_err(|e| fail("renaming into place", &path, e)));
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    sync_dir(dir)
}

/// Removes `names` from `dir` (those that exist) and makes the removal durable.
pub fn remove_durably(dir: &Path, names: &[&str]) -> Result<(), String> {
    for name in names {
        let path = dir.join(name);
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("removing {}: {e}", path.display())),
        }
    }
    sync_dir(dir)
}

fn sync_dir(dir: &Path) -> Result<(), String> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| format!("syncing the directory {}: {e}", dir.display()))
}

/// Paths and names as their exact bytes in JSON: a string when they are UTF-8, `{"hex": "…"}`
/// otherwise (`#[serde(with = "…")]` helpers).
pub mod bytes {
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::collections::BTreeMap;
    use std::ffi::{OsStr, OsString};
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    use std::path::{Path, PathBuf};

    /// One name, borrowed, as it serialises.
    pub struct Os<'a>(pub &'a OsStr);

    impl Serialize for Os<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            match self.0.to_str() {
                Some(text) => s.serialize_str(text),
                None => {
                    use serde::ser::SerializeMap;
                    let mut map = s.serialize_map(Some(1))?;
                    map.serialize_entry("hex", &hex::encode(self.0.as_bytes()))?;
                    map.end()
                }
            }
        }
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Repr {
        Text(String),
        Bytes { hex: String },
    }

    /// One name, read back.
    pub struct OsOwned(pub OsString);

    impl<'de> Deserialize<'de> for OsOwned {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<OsOwned, D::Error> {
            match Repr::deserialize(d)? {
                Repr::Text(text) => Ok(OsOwned(OsString::from(text))),
                Repr::Bytes { hex } => hex::decode(&hex)
                    .map(|b| OsOwned(OsString::from_vec(b)))
                    .map_err(D::Error::custom),
            }
        }
    }

    pub mod os {
        use super::*;
        pub fn serialize<S: Serializer>(v: &OsString, s: S) -> Result<S::Ok, S::Error> {
            Os(v).serialize(s)
        }
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<OsString, D::Error> {
            Ok(OsOwned::deserialize(d)?.0)
        }
    }

    pub mod path {
        use super::*;
        pub fn serialize<S: Serializer>(v: &Path, s: S) -> Result<S::Ok, S::Error> {
            Os(v.as_os_str()).serialize(s)
        }
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<PathBuf, D::Error> {
            Ok(PathBuf::from(OsOwned::deserialize(d)?.0))
        }
    }

    pub mod path_opt {
        use super::*;
        pub fn serialize<S: Serializer>(v: &Option<PathBuf>, s: S) -> Result<S::Ok, S::Error> {
            match v {
                Some(p) => s.serialize_some(&Os(p.as_os_str())),
                None => s.serialize_none(),
            }
        }
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<PathBuf>, D::Error> {
            Ok(Option::<OsOwned>::deserialize(d)?.map(|o| PathBuf::from(o.0)))
        }
    }

    pub mod paths {
        use super::*;
        pub fn serialize<S: Serializer>(v: &[PathBuf], s: S) -> Result<S::Ok, S::Error> {
            s.collect_seq(v.iter().map(|p| Os(p.as_os_str())))
        }
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<PathBuf>, D::Error> {
            Ok(Vec::<OsOwned>::deserialize(d)?
                .into_iter()
                .map(|o| PathBuf::from(o.0))
                .collect())
        }
    }

    /// A map keyed by paths, as a list of `[path, value]` pairs (JSON keys are strings).
    pub mod path_map {
        use super::*;
        pub fn serialize<S: Serializer, V: Serialize>(
            v: &BTreeMap<PathBuf, V>,
            s: S,
        ) -> Result<S::Ok, S::Error> {
            s.collect_seq(v.iter().map(|(k, v)| (Os(k.as_os_str()), v)))
        }
        pub fn deserialize<'de, D: Deserializer<'de>, V: Deserialize<'de>>(
            d: D,
        ) -> Result<BTreeMap<PathBuf, V>, D::Error> {
            Ok(Vec::<(OsOwned, V)>::deserialize(d)?
                .into_iter()
                .map(|(k, v)| (PathBuf::from(k.0), v))
                .collect())
        }
    }
}

/// Whether another process holds the log's lock: the sink keeps an exclusive `flock` for as
/// long as it writes. The probe takes a shared lock and drops it at once; a writer starting in
/// that instant is refused as if another were writing (it says so), which is why this is only
/// asked when a run lacks its end.
pub(crate) fn writer_holds(file: &File) -> bool {
    match file.try_lock_shared() {
        Ok(()) => {
            let _ = file.unlock();
            false
        }
        Err(TryLockError::WouldBlock) => true,
        Err(TryLockError::Error(_)) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;

    fn header(workspace: &Path) -> Header {
        Header {
            format: FORMAT.into(),
            version: VERSION,
            run_id: "r".into(),
            pid: 4_194_305,
            pid_start: Some(1),
            boot_id: boot_id(),
            started_at_ms: 1,
            workspace: workspace.to_path_buf(),
            audit_log: None,
            run_start_seq: Some(0),
        }
    }

    #[test]
    fn paths_read_back_byte_for_byte() {
        let odd = Path::new(OsStr::from_bytes(b"/w/ws\xff/x\\xff"));
        let text = serde_json::to_string(&header(odd)).unwrap();
        assert!(text.contains(r#""workspace":{"hex":"#), "{text}");
        let back: Header = serde_json::from_str(&text).unwrap();
        assert_eq!(back.workspace, odd);
        let plain = serde_json::to_string(&header(Path::new("/w/ü"))).unwrap();
        assert!(plain.contains(r#""workspace":"/w/ü""#), "{plain}");
    }

    #[test]
    fn our_own_process_is_alive_and_a_reused_pid_is_not() {
        let me = std::process::id();
        let mut h = header(Path::new("/w"));
        h.pid = me;
        h.pid_start = process_start(me);
        assert!(supervisor_alive(&h));
        h.pid_start = h.pid_start.map(|s| s + 1);
        assert!(!supervisor_alive(&h), "another process with the same pid");
    }
}
