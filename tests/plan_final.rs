//! The plan is final when built: the mounts a run makes are the ones `stepproof explain` prints
//! for the same kind of run — a runbook run, the self-test, a `--ci` run — because nothing
//! outside `plan/` edits a plan. The launch's list is the one `stepproof-run -v` prints just
//! before it starts the sandbox; inside the runbook run, every mount point explain names is a
//! mount point in `/proc/self/mountinfo`. As root and as the test user.

mod support;

use std::fs;
use std::process::Output;
use support::{STEPPROOF, Who, World, describe};

const RUNBOOK: &str = r#"
id = "plan-final"
title = "One step"
owner = "tests"

[[steps]]
id = "only"
title = "Do it"
instructions = "Make done.txt"
[[steps.evidence]]
files_exist = { paths = ["done.txt"] }
"#;

/// `stepproof` as this world runs it (a copy beside the test user's `stepproof-run`).
fn explain(w: &World, extra: &[&str]) -> Output {
    let program = match w.who {
        Who::Root => std::path::PathBuf::from(STEPPROOF),
        Who::User => w.run_binary().with_file_name("stepproof"),
    };
    let mut cmd = w.as_owner(&program);
    cmd.arg("explain").args(extra);
    w.clean_env(&mut cmd);
    cmd.output().expect("run stepproof explain")
}

/// The "mounts, in order:" section of an explanation, with the run's own directory (named for
/// the second and pid of the process that planned it) as `RUN`.
fn mounts(text: &str) -> Vec<String> {
    let mut lines = text
        .lines()
        .skip_while(|l| *l != "mounts, in order:")
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .map(|l| {
            let mut out = String::new();
            let mut rest = l;
            while let Some(at) = rest.find("/runs/") {
                out.push_str(&rest[..at + "/runs/".len()]);
                rest = &rest[at + "/runs/".len()..];
                let end = rest
                    .find(|c: char| !(c.is_ascii_digit() || c == '-'))
                    .unwrap_or(rest.len());
                out.push_str("RUN");
                rest = &rest[end..];
            }
            out.push_str(rest);
            out
        })
        .peekable();
    assert!(lines.peek().is_some(), "no mount list in:\n{text}");
    lines.collect()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Where `line` (a mount of the list) puts something inside, for the kinds that make a mount
/// point of their own.
fn mount_point(line: &str) -> Option<&str> {
    let mut words = line.split_whitespace();
    let _access = words.next()?;
    let kind = words.next()?;
    matches!(kind, "bind" | "tmpfs" | "generated").then(|| words.next())?
}

both!(a_runbook_runs_in_the_view_explain_prints, |w: &World| {
    fs::write(w.workspace.join("runbook.toml"), RUNBOOK).unwrap();
    support::chown_tree(&w.workspace, w.owner);
    let explained = explain(w, &["--runbook", "runbook.toml"]);
    assert_eq!(explained.status.code(), Some(0), "{}", describe(&explained));
    let planned = mounts(&stdout(&explained));
    for wanted in [
        "/run/stepproof/runbook <- ",
        "/run/stepproof/stepproof <- ",
        "runbook.toml",
    ] {
        assert!(
            planned.iter().any(|m| m.contains(wanted)),
            "explain --runbook does not name {wanted}:\n{}",
            planned.join("\n")
        );
    }
    let run = w
        .command(
            &["-v", "--runbook", "runbook.toml"],
            &["cat", "/proc/self/mountinfo"],
        )
        .output()
        .expect("start stepproof-run");
    let launched = mounts(&stderr(&run));
    assert_eq!(
        launched,
        planned,
        "the launch's mounts differ from explain's:\n{}",
        describe(&run)
    );
    // And they are there: every mount point the list names under the agent's layer.
    let inside = stdout(&run);
    let points: Vec<&str> = inside
        .lines()
        .filter_map(|l| l.split_whitespace().nth(4))
        .collect();
    for line in &planned {
        if let Some(point) = mount_point(line).filter(|p| p.starts_with("/run/stepproof")) {
            assert!(
                points.contains(&point),
                "{point} is planned but not mounted inside:\n{inside}"
            );
        }
    }
});

both!(
    the_self_test_runs_in_the_view_explain_prints,
    |w: &World| {
        let explained = explain(w, &["--selftest"]);
        assert_eq!(explained.status.code(), Some(0), "{}", describe(&explained));
        let planned = mounts(&stdout(&explained));
        assert!(
            planned
                .iter()
                .any(|m| m.contains("/run/stepproof-selftest/stepproof <- ")),
            "explain --selftest does not name the probe:\n{}",
            planned.join("\n")
        );
        let run = w
            .command(&["-v", "--selftest"], &[] as &[&str])
            .output()
            .expect("start stepproof-run");
        assert_eq!(run.status.code(), Some(0), "{}", describe(&run));
        assert_eq!(
            mounts(&stderr(&run)),
            planned,
            "the self-test's mounts differ from explain's:\n{}",
            describe(&run)
        );
    }
);

both!(a_ci_run_starts_from_nothing_as_explain_says, |w: &World| {
    let explained = explain(w, &["--ci"]);
    assert_eq!(explained.status.code(), Some(0), "{}", describe(&explained));
    let text = stdout(&explained);
    assert!(
        text.contains("(the run's own, removed when it ends)"),
        "explain --ci keeps caches:\n{text}"
    );
    let planned = mounts(&text);
    let run = w
        .command(&["-v", "--ci"], &["true"])
        .output()
        .expect("start stepproof-run");
    assert_eq!(run.status.code(), Some(0), "{}", describe(&run));
    assert_eq!(mounts(&stderr(&run)), planned, "{}", describe(&run));
});
