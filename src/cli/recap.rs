//! The last screen: one line at the end of a run — what the hook denied and asked, where the
//! record is (`stepproof audit show …`), and how to go on with the session Claude Code named
//! (`stepproof-run -- claude --resume <id>`, where Claude Code's own "Resume this session
//! with: claude --resume <id>" fails outside). `stepproof state show` prints the same for the
//! workspace's last run.
//!
//! Read from the run's own audit log, which the profile's audit budget bounds; at most its last
//! [`MAX_BYTES`] are read (several runs may append to one `--audit-log`; the last is at its
//! end), and a recap of a longer log says it counted only so far.

use crate::audit::chain::{LogLine, for_each_line};
use serde_json::Value;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The most of a log a recap reads.
pub const MAX_BYTES: u64 = 256 << 20;

/// What a run came to, as the person at the terminal wants it at the end.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Recap {
    pub log: PathBuf,
    pub denied: u64,
    pub asked: u64,
    /// The last session Claude Code reported (its `session_id`), to resume.
    pub session: Option<String>,
    /// The log was longer than [`MAX_BYTES`]: the counts are of its last part.
    pub partial: bool,
}

impl Recap {
    /// The recap of the last run in the log at `log` (from its last `run-start`).
    pub fn of(log: &Path) -> Option<Recap> {
        use std::io::Seek;
        let mut file = std::fs::File::open(log).ok()?;
        let size = file.metadata().map(|m| m.len()).unwrap_or(0);
        let mut recap = Recap {
            log: log.to_path_buf(),
            partial: size > MAX_BYTES,
            ..Recap::default()
        };
        // Several runs may append to one log: the last run is at its end, so a long log is read
        // from its last MAX_BYTES (the line cut there does not parse and is passed over).
        if recap.partial {
            file.seek(std::io::SeekFrom::Start(size - MAX_BYTES)).ok()?;
        }
        let reader = std::io::BufReader::new(file.take(MAX_BYTES));
        let _ = for_each_line(reader, |line| {
            let (LogLine::Terminated(bytes) | LogLine::CutShort(bytes)) = line else {
                return true;
            };
            if let Ok(record) = serde_json::from_slice::<Value>(bytes) {
                recap.add(&record);
            }
            true
        });
        Some(recap)
    }

    fn add(&mut self, record: &Value) {
        match (record["source"].as_str(), record["kind"].as_str()) {
            (Some("supervisor"), Some("run-start")) => {
                *self = Recap {
                    log: std::mem::take(&mut self.log),
                    partial: self.partial,
                    ..Recap::default()
                };
            }
            (Some("sandbox"), Some("decision")) => {
                match record["reported"]["decision"].as_str() {
                    Some("deny") => self.denied += 1,
                    Some("ask") => self.asked += 1,
                    _ => {}
                }
                self.session_of(record);
            }
            (Some("sandbox"), _) => self.session_of(record),
            _ => {}
        }
    }

    fn session_of(&mut self, record: &Value) {
        // An id as Claude Code makes them (a UUID); anything else is not offered to resume.
        if let Some(id) = record["reported"]["session_id"].as_str().filter(|id| {
            !id.is_empty()
                && id.len() <= 64
                && id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
        }) {
            self.session = Some(id.to_string());
        }
    }

    /// The one line: counts, the record, and (for Claude Code) how to go on.
    pub fn line(&self, claude: bool) -> String {
        let mut parts = vec![format!(
            "{} denied, {} asked{}",
            calls(self.denied),
            calls(self.asked),
            if self.partial {
                " (counted in the log's last 256 MiB)"
            } else {
                ""
            }
        )];
        parts.push(format!(
            "the record: stepproof audit show {}",
            crate::audit::text::shell_word(&crate::audit::text::one_line(&self.log))
        ));
        if claude && let Some(session) = &self.session {
            parts.push(format!(
                "to go on: stepproof-run -- claude --resume {session}"
            ));
        }
        parts.join(" · ")
    }
}

fn calls(n: u64) -> String {
    match n {
        1 => "1 call".into(),
        n => format!("{n} calls"),
    }
}

/// The most run directories looked through for a workspace's last run, newest first.
const MAX_RUNS_LOOKED_AT: usize = 200;

/// The audit log of the newest run of `workspace` among the run directories in `runs` (their
/// names are `<seconds>-<pid>`, so newest first by name; a log put elsewhere with
/// `--audit-log` is followed from the run directory's pointer): each log's first line, its
/// `run-start`, names the workspace. At most [`MAX_RUNS_LOOKED_AT`] directories are opened.
pub fn last_run_of(runs: &Path, workspace: &Path) -> Option<PathBuf> {
    let mut names: Vec<(u64, u64, PathBuf)> = std::fs::read_dir(runs)
        .ok()?
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let (secs, pid) = name.split_once('-')?;
            Some((secs.parse().ok()?, pid.parse().ok()?, entry.path()))
        })
        .collect();
    names.sort_unstable_by(|a, b| b.cmp(a));
    let wanted = crate::audit::text::path(workspace);
    names
        .into_iter()
        .take(MAX_RUNS_LOOKED_AT)
        .filter_map(|(_, _, dir)| crate::supervisor::runbook::continuation::run_log(&dir))
        .find(|log| {
            let Ok(file) = std::fs::File::open(log) else {
                return false;
            };
            let mut first = None;
            let _ = for_each_line(std::io::BufReader::new(file.take(1 << 20)), |line| {
                if let LogLine::Terminated(bytes) = line {
                    first = serde_json::from_slice::<Value>(bytes).ok();
                }
                false
            });
            first.is_some_and(|r| r["kind"] == "run-start" && r["workspace"] == *wanted)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recap_counts_the_last_runs_denials_and_asks_and_names_its_session() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("audit.jsonl");
        let lines = [
            r#"{"source":"supervisor","kind":"run-start","workspace":"/w"}"#,
            r#"{"source":"sandbox","kind":"decision","reported":{"decision":"deny","session_id":"old"}}"#,
            r#"{"source":"supervisor","kind":"run-start","workspace":"/w"}"#,
            r#"{"source":"sandbox","kind":"decision","reported":{"decision":"deny","session_id":"0b1c2d3e-aaaa-4bbb-8ccc-123456789abc"}}"#,
            r#"{"source":"sandbox","kind":"decision","reported":{"decision":"ask"}}"#,
            r#"{"source":"sandbox","kind":"decision","reported":{"decision":"deny","session_id":"$(rm -rf ~)"}}"#,
            r#"{"source":"sandbox","kind":"decision","reported":{"decision":"allow"}}"#,
        ];
        std::fs::write(&log, lines.join("\n") + "\n").unwrap();
        let recap = Recap::of(&log).unwrap();
        assert_eq!((recap.denied, recap.asked), (2, 1));
        assert_eq!(
            recap.session.as_deref(),
            Some("0b1c2d3e-aaaa-4bbb-8ccc-123456789abc")
        );
        let line = recap.line(true);
        assert!(
            line.starts_with("2 calls denied, 1 call asked · the record: stepproof audit show "),
            "{line}"
        );
        assert!(
            line.ends_with(
                " · to go on: stepproof-run -- claude --resume 0b1c2d3e-aaaa-4bbb-8ccc-123456789abc"
            ),
            "{line}"
        );
        assert!(!recap.line(false).contains("--resume"));
        // The workspace's last run, found by its start record.
        let runs = dir.path().join("runs");
        for (name, ws) in [("100-1", "/w"), ("200-1", "/other"), ("150-7", "/w")] {
            std::fs::create_dir_all(runs.join(name)).unwrap();
            std::fs::write(
                runs.join(name).join("audit.jsonl"),
                format!(
                    "{{\"source\":\"supervisor\",\"kind\":\"run-start\",\"workspace\":\"{ws}\"}}\n"
                ),
            )
            .unwrap();
        }
        assert_eq!(
            last_run_of(&runs, Path::new("/w")),
            Some(runs.join("150-7/audit.jsonl"))
        );
        assert_eq!(last_run_of(&runs, Path::new("/none")), None);
    }

    #[test]
    fn a_long_log_is_recapped_from_its_end() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("audit.jsonl");
        let mut file = std::fs::File::create(&log).unwrap();
        writeln!(file, r#"{{"source":"supervisor","kind":"run-start"}}"#).unwrap();
        writeln!(
            file,
            r#"{{"source":"sandbox","kind":"decision","reported":{{"decision":"deny"}}}}"#
        )
        .unwrap();
        // Sparse: an earlier run's bytes, more than a recap reads.
        file.set_len(MAX_BYTES + 4096).unwrap();
        let mut file = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        writeln!(file).unwrap();
        writeln!(file, r#"{{"source":"supervisor","kind":"run-start"}}"#).unwrap();
        writeln!(
            file,
            r#"{{"source":"sandbox","kind":"decision","reported":{{"decision":"ask"}}}}"#
        )
        .unwrap();
        let recap = Recap::of(&log).unwrap();
        assert!(recap.partial);
        assert_eq!((recap.denied, recap.asked), (0, 1));
        assert!(
            recap
                .line(false)
                .contains("(counted in the log's last 256 MiB)")
        );
    }
}
