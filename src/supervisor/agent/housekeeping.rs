//! What a run tidies of StepProof's state when it ends: the run directories beyond the retention
//! rule ([`crate::audit::runs::prune`]), and session states and caches no run used for a long
//! time. Removing a run directory costs the disk a few milliseconds (a dozen unlinks, each a
//! journal transaction, some a discard), so the launch starts the work on a thread of its own
//! once the sandbox exists (threads only from then on: the init is cloned from this process's
//! memory) and the run waits for it only at its end. A run that ends before its launch does the
//! work then, on its own thread of control.
//!
//! One run per process: the job is this module's, arranged once the run's directory is known.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::thread::JoinHandle;

use crate::audit::runs::Keep;

enum Job {
    None,
    Arranged { own: PathBuf, keep: Keep },
    Running(JoinHandle<Vec<String>>),
}

static JOB: Mutex<Job> = Mutex::new(Job::None);

fn job() -> std::sync::MutexGuard<'static, Job> {
    JOB.lock().unwrap_or_else(|e| e.into_inner())
}

/// The tidying this run does beside `own`, its own run directory, when it ends.
pub fn arrange(own: &Path, keep: Keep) {
    *job() = Job::Arranged {
        own: own.to_path_buf(),
        keep,
    };
}

/// Starts the arranged tidying on its own thread (called once nothing more is cloned from this
/// process's memory). Where no thread can be made, [`finish`] does the work.
pub fn start() {
    let mut job = job();
    if let Job::Arranged { own, keep } = &*job {
        let (own, keep) = (own.clone(), *keep);
        if let Ok(handle) = std::thread::Builder::new()
            .name("stepproof-tidy".into())
            .spawn(move || tidy(&own, keep))
        {
            *job = Job::Running(handle);
        }
    }
}

/// The tidying, finished: waits for its thread, or does it now if it never started. Returns
/// what went wrong, one line each, for the caller to say (nothing is said from the thread: the
/// command may own the terminal then).
pub fn finish() -> Vec<String> {
    let taken = std::mem::replace(&mut *job(), Job::None);
    match taken {
        Job::None => Vec::new(),
        Job::Arranged { own, keep } => tidy(&own, keep),
        Job::Running(handle) => handle.join().unwrap_or_else(|_| {
            vec!["tidying the state directory failed (its thread panicked)".into()]
        }),
    }
}

fn tidy(own: &Path, keep: Keep) -> Vec<String> {
    let (removed, failed) = crate::audit::runs::prune(own, keep);
    tracing::debug!(removed = removed.len(), "older run directories removed");
    let said: Vec<String> = failed
        .into_iter()
        .map(|(path, e)| format!("removing the old run directory {}: {e}", path.display()))
        .collect();
    // Kept sessions of workspaces no run used for a long time go with the old runs, and in the
    // others the sessions that aged out: looked for at most once an hour (each look reads every
    // state's marker and lists its files), whichever run is first.
    let now = std::time::SystemTime::now();
    if keep != Keep::All
        && let Some(state) = own.parent().and_then(Path::parent)
        && due(&state.join(LAST_LOOKED), now)
    {
        let removed = crate::supervisor::agent::session_state::prune(&state.join("sessions"), now);
        tracing::debug!(removed = removed.len(), "unused session states removed");
        let removed = crate::supervisor::agent::session_state::prune_aged_sessions(
            &state.join("sessions"),
            now,
        );
        tracing::debug!(removed, "aged-out sessions removed");
        let removed = crate::supervisor::agent::caches::prune(&state.join("caches"), now);
        tracing::debug!(removed = removed.len(), "unused caches removed");
    }
    said
}

/// The marker whose mtime is the last look for unused session states and caches.
const LAST_LOOKED: &str = "unused-last-looked";
/// How often a run looks for them.
const LOOK_EVERY: std::time::Duration = std::time::Duration::from_secs(3600);

/// Whether the last look (`marker`'s mtime) is older than [`LOOK_EVERY`] (or in the future, or
/// unknown); when it is, the marker is set to now (made when missing; a link there is never
/// followed, and every run then looks). Two runs ending together may both look: harmless.
fn due(marker: &Path, now: std::time::SystemTime) -> bool {
    let recent = std::fs::symlink_metadata(marker)
        .ok()
        .filter(std::fs::Metadata::is_file)
        .and_then(|m| m.modified().ok())
        .and_then(|at| now.duration_since(at).ok())
        .is_some_and(|age| age < LOOK_EVERY);
    if recent {
        return false;
    }
    let _ = crate::supervisor::agent::session_state::touch_at(marker, now);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_work_is_done_once_whether_or_not_it_started() {
        let dir = tempfile::tempdir().unwrap();
        let runs = dir.path().join("runs");
        // Dead supervisors' directories (a pid above the kernel's pid_max), oldest first.
        let dead = 4_194_305u32;
        for secs in 1..=4u64 {
            std::fs::create_dir_all(runs.join(format!("{secs}-{dead}")).join("claude-config"))
                .unwrap();
        }
        let own = runs.join(format!("4-{dead}"));
        // Arranged and never started: finish does it here.
        arrange(&own, Keep::Newest(3));
        assert!(finish().is_empty());
        assert!(!runs.join(format!("1-{dead}")).exists());
        assert!(runs.join(format!("2-{dead}")).exists());
        // Started: finish waits for the thread.
        arrange(&own, Keep::Newest(1));
        start();
        assert!(finish().is_empty());
        let left: Vec<_> = std::fs::read_dir(&runs).unwrap().flatten().collect();
        assert_eq!(left.len(), 1, "{left:?}");
        assert!(own.exists());
        // Nothing arranged: nothing done.
        assert!(finish().is_empty());
    }

    #[test]
    fn unused_states_are_looked_for_at_most_once_an_hour() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join(LAST_LOOKED);
        let now = std::time::SystemTime::now();
        // No marker: due, and the marker is made.
        assert!(due(&marker, now));
        assert!(marker.is_file());
        // Just looked: not due, until an hour has passed.
        assert!(!due(&marker, now));
        assert!(due(
            &marker,
            now + LOOK_EVERY + std::time::Duration::from_secs(1)
        ));
        // A marker from the future (a clock set back) does not stop the looks.
        let file = std::fs::File::options().write(true).open(&marker).unwrap();
        file.set_modified(now + 10 * LOOK_EVERY).unwrap();
        assert!(due(&marker, now));
        // A link in its place is not followed.
        let target = dir.path().join("elsewhere");
        std::fs::remove_file(&marker).unwrap();
        std::os::unix::fs::symlink(&target, &marker).unwrap();
        assert!(due(&marker, now));
        assert!(due(&marker, now));
        assert!(!target.exists());
    }
}
