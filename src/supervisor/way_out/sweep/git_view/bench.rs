//! Timings of the git view's launch record and sweep on a large index (run by hand).

use super::super::Quarantine;
use super::*;
use std::io::Write;
use std::process::Command;
use std::time::Instant;

fn git(dir: &Path, args: &[&str], stdin: Option<&[u8]>) {
    let mut child = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    if let Some(bytes) = stdin {
        input.write_all(bytes).unwrap();
    }
    drop(input);
    assert!(child.wait().unwrap().success(), "git {args:?}");
}

fn ms(took: std::time::Duration) -> String {
    format!("{:.2} ms", took.as_secs_f64() * 1e3)
}

#[test]
#[ignore]
fn git_view_cost_on_50k_files() {
    let base =
        std::env::var_os("STEPPROOF_BENCH_DIR").map_or_else(std::env::temp_dir, PathBuf::from);
    let dir = tempfile::tempdir_in(base).unwrap();
    let ws = dir.path().join("ws");
    let mut names = Vec::new();
    for d in 0..500 {
        let sub = ws.join(format!("d{d:03}"));
        fs::create_dir_all(&sub).unwrap();
        for f in 0..100 {
            fs::write(sub.join(format!("file-{f:03}.txt")), format!("{d} {f}\n")).unwrap();
            names.push(format!("d{d:03}/file-{f:03}.txt\n"));
        }
    }
    git(&ws, &["init", "-q"], None);
    git(&ws, &["add", "."], None);
    git(&ws, &["commit", "-q", "-m", "all"], None);
    let root = beneath::open_root(&ws, DIR_LOOKUP).unwrap();
    let repos = [PathBuf::new()];
    for variant in ["plain", "all skip-worktree"] {
        if variant != "plain" {
            git(
                &ws,
                &["update-index", "--skip-worktree", "--stdin"],
                Some(names.concat().as_bytes()),
            );
        }
        let size = fs::metadata(ws.join(".git/index")).unwrap().len();
        let mut takes = Vec::new();
        let mut marker = 0;
        for _ in 0..7 {
            let started = Instant::now();
            let views = GitViews::take(root.as_fd(), &ws, &repos);
            takes.push(started.elapsed());
            marker = serde_json::to_vec(&views).unwrap().len();
        }
        takes.sort();
        let launched = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        let views = GitViews::take(root.as_fd(), &ws, &repos);
        let q = dir.path().join(format!("q-{}", variant.len()));
        let started = Instant::now();
        let judged = views.judge(
            root.as_fd(),
            &ws,
            &repos,
            launched,
            &HostConfig::default(),
            &mut Quarantine::new(&q),
        );
        let unchanged = started.elapsed();
        assert!(judged.findings.is_empty());
        let new = format!("new-{}.txt", variant.len());
        fs::write(ws.join(&new), "new\n").unwrap();
        git(&ws, &["add", &new], None);
        let started = Instant::now();
        let judged = views.judge(
            root.as_fd(),
            &ws,
            &repos,
            launched,
            &HostConfig::default(),
            &mut Quarantine::new(&q),
        );
        let changed = started.elapsed();
        assert!(judged.findings.is_empty(), "{:?}", judged.findings);
        // Every tracked file written during the run (a checkout that touched them all):
        // each entry's file is hashed.
        let started = Instant::now();
        let judged = views.judge(
            root.as_fd(),
            &ws,
            &repos,
            Duration::ZERO,
            &HostConfig::default(),
            &mut Quarantine::new(&q),
        );
        let all_written = started.elapsed();
        assert!(judged.findings.is_empty(), "{:?}", judged.findings);
        crate::out!(
            "{variant}: index {:.1} MiB; GitViews::take median {} (min {}, max {}); its part of the marker {} bytes; judged at the end: index unchanged {}, index rewritten by git {}, and every file written during the run {}",
            size as f64 / f64::from(1u32 << 20),
            ms(takes[3]),
            ms(takes[0]),
            ms(takes[6]),
            marker,
            ms(unchanged),
            ms(changed),
            ms(all_written)
        );
    }
}
