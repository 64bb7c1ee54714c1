//! Freezing the sandbox's cgroup while evidence is taken, so the work holds still.

use std::path::PathBuf;
use std::time::Duration;
use std::time::Instant;

/// Freezes (or thaws) the run's cgroups — v2 `cgroup.freeze`, v1 `freezer.state` — and waits
/// (up to a second) until the kernel says they are; says whether every one was, and what.
pub(super) fn freeze(dirs: &[PathBuf], frozen: bool, no_freezer: Option<&str>) -> (bool, String) {
    let mut said = Vec::new();
    let mut all = true;
    let mut any = false;
    for dir in dirs {
        let (file, value, done): (PathBuf, &str, Box<dyn Fn() -> bool>) = if dir
            .join("cgroup.freeze")
            .exists()
        {
            let events = dir.join("cgroup.events");
            let want = if frozen { "frozen 1" } else { "frozen 0" };
            (
                dir.join("cgroup.freeze"),
                if frozen { "1" } else { "0" },
                Box::new(move || {
                    std::fs::read_to_string(&events).is_ok_and(|t| t.lines().any(|l| l == want))
                }),
            )
        } else if dir.join("freezer.state").exists() {
            let state = dir.join("freezer.state");
            let want = if frozen { "FROZEN" } else { "THAWED" };
            (
                state.clone(),
                want,
                Box::new(move || std::fs::read_to_string(&state).is_ok_and(|t| t.trim() == want)),
            )
        } else {
            continue;
        };
        any = true;
        if let Err(e) = std::fs::write(&file, value) {
            all = false;
            said.push(format!(
                "not frozen: writing {value} to {}: {e}",
                file.display()
            ));
            continue;
        }
        // The kernel freezes asynchronously (v1 says FREEZING meanwhile).
        let deadline = Instant::now() + Duration::from_secs(1);
        while !done() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        if done() {
            said.push(format!("{}: {}", file.display(), value));
        } else {
            all = false;
            said.push(format!(
                "{}: wrote {value}, but the kernel did not confirm it within a second",
                file.display()
            ));
        }
    }
    if !any {
        return (
            false,
            format!(
                "not frozen: the run has no cgroup with a freezer ({}); the evidence ran on the \
                 workspace as it was when the command started",
                no_freezer.unwrap_or("no cgroup v1 freezer or v2 directory")
            ),
        );
    }
    (all, said.join("; "))
}
