//! `stepproof audit verify|show`. Exit codes: 0 the chain is intact and every run in it has its
//! `run-end`; 1 it is broken (or does not end at `--head`); 2 usage or I/O error, or the file is
//! not a log (empty, or its first line is not a record); 3 intact but incomplete (a run has no
//! `run-end`); 4 intact so far, and the last run is still being written; 5 intact and every run
//! has an end, but a run's end was written by a repair (`run-end-recovered`: its supervisor
//! died, `stepproof repair` or the next run finished it).
//!
//! Both also say when a run of the log still owes work (its supervisor died and nothing has
//! finished its end yet; see [`crate::audit::owed`]), and name `stepproof repair`.

use crate::audit::chain::{self, ChainReport, Status};
use crate::audit::{export, export_verify, owed, show};
use serde_json::Value;
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

pub const EXIT_INTACT: i32 = 0;
pub const EXIT_BROKEN: i32 = 1;
pub const EXIT_ERROR: i32 = 2;
pub const EXIT_INCOMPLETE: i32 = 3;
pub const EXIT_IN_PROGRESS: i32 = 4;
pub const EXIT_RECOVERED: i32 = 5;

/// The `stepproof audit` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum AuditCommand {
    /// Check a run's audit log: every line a record, `seq` counting from 0, each `prev` the
    /// hash of the line before, every run ending in its `run-end`. Names the first broken line.
    /// Exit 0 intact, 1 broken, 2 error (also: empty, or not a log), 3 incomplete (a run has no
    /// run-end), 4 in progress (the last run is still being written), 5 ended by recovery (every
    /// run has an end, but a run's supervisor died and `stepproof repair` or the next run wrote
    /// its end, run-end-recovered).
    ///
    /// Without --head, a log cut between two runs still looks intact: pass the head hash
    /// `stepproof-run` printed at the end of the run to detect a truncated tail.
    ///
    /// FILE may also be an export read back: OTLP/JSON lines (one ExportLogsServiceRequest a
    /// line, as a collector's file exporter writes them). Each run in it is checked: exact
    /// duplicates dropped, every body against its hash, every prev against the record before,
    /// missing records named; exit 3 when records are missing or the run-end has not arrived.
    Verify {
        file: PathBuf,
        /// The hash the chain must end at (printed at the end of the run).
        #[arg(long, value_name = "HASH", value_parser = parse_hash)]
        head: Option<String>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Send what is left in the export outboxes under DIR (a run directory, or a directory of
    /// them such as ~/.local/state/stepproof/runs) to the OTLP collector: the one this
    /// environment's OTEL_EXPORTER_OTLP_* variables name, else the one the run used; headers
    /// from this environment. Exit 0 when nothing is left, 1 when records are left (the
    /// collector is unreachable or refused them), 2 on an error.
    Ship {
        dir: PathBuf,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Print a run's audit log as a timeline (time, source, kind, a summary per record) and
    /// whether its chain is intact. Exit codes as for `verify`.
    Show {
        file: PathBuf,
        /// Machine-readable output: the chain verdict and every record with its summary.
        #[arg(long)]
        json: bool,
    },
}

fn parse_hash(text: &str) -> Result<String, String> {
    let hash = text.trim().to_ascii_lowercase();
    if hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(hash)
    } else {
        Err("a head hash is 64 hexadecimal digits".to_string())
    }
}

/// Runs one `stepproof audit` subcommand; returns the exit code.
pub fn run_command(command: AuditCommand) -> i32 {
    match command {
        AuditCommand::Verify { file, head, json } => verify_file(&file, head.as_deref(), json),
        AuditCommand::Show { file, json } => show_file(&file, json),
        AuditCommand::Ship { dir, json } => ship(&dir, json),
    }
}

fn ship(dir: &Path, json: bool) -> i32 {
    if !dir.is_dir() {
        crate::say!("stepproof audit ship: {}: not a directory", dir.display());
        return EXIT_ERROR;
    }
    let outboxes = export::outboxes_under(dir);
    if outboxes.is_empty() {
        crate::say!(
            "stepproof audit ship: no export outbox in {} or the run directories in it",
            dir.display()
        );
        return EXIT_ERROR;
    }
    let env = |name: &str| std::env::var(name).ok();
    let results: Vec<export::Shipped> = outboxes
        .iter()
        .map(|o| export::ship_outbox(o, &env))
        .collect();
    if json {
        crate::out!(
            "{}",
            serde_json::to_string_pretty(&results).unwrap_or_default()
        );
    } else {
        for r in &results {
            let error = r
                .error
                .as_deref()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default();
            crate::out!(
                "{}: run {}: sent {}, left {}{error}",
                r.outbox,
                r.run_id.as_deref().unwrap_or("?"),
                r.sent,
                r.left
            );
        }
    }
    if results
        .iter()
        .any(|r| r.run_id.is_none() || (r.error.is_some() && r.left == 0 && !r.busy))
    {
        EXIT_ERROR
    } else if results.iter().any(|r| r.left > 0 || r.busy) {
        EXIT_BROKEN
    } else {
        EXIT_INTACT
    }
}

/// `verify` on an export read back (OTLP/JSON lines): per run, duplicates dropped, gaps and
/// changes named.
fn verify_export_file(path: &Path, file: &File, head: Option<&str>, json: bool) -> i32 {
    let report = match export_verify::verify_export(BufReader::new(file)) {
        Ok(r) => r,
        Err(e) => {
            crate::say!("stepproof audit: reading {}: {e}", path.display());
            return EXIT_ERROR;
        }
    };
    if report.runs.is_empty() {
        crate::say!(
            "stepproof audit: {}: no StepProof records in this export",
            path.display()
        );
        return EXIT_ERROR;
    }
    let mut head_problem = None;
    if let Some(head) = head {
        if report.runs.len() != 1 {
            crate::say!(
                "stepproof audit: {}: --head needs an export of one run ({} here)",
                path.display(),
                report.runs.len()
            );
            return EXIT_ERROR;
        }
        if report.runs[0].head.as_deref() != Some(head) {
            head_problem = Some(format!(
                "the run does not end at the expected head {head} (its run-end is missing or another)"
            ));
        }
    }
    if json {
        let mut value = serde_json::to_value(&report).unwrap_or_default();
        if let Some(p) = &head_problem {
            value["head_problem"] = p.clone().into();
        }
        crate::out!(
            "{}",
            serde_json::to_string_pretty(&value).unwrap_or_default()
        );
    } else {
        for run in &report.runs {
            crate::out!("{}", export_verify::describe(run));
        }
        if report.other_records > 0 {
            crate::out!("{} records of other services skipped", report.other_records);
        }
        if !report.unreadable_lines.is_empty() {
            crate::out!(
                "broken: lines that are not OTLP/JSON: {:?}",
                report.unreadable_lines
            );
        }
        if let Some(p) = &head_problem {
            crate::out!("broken: {p}");
        }
    }
    if report.broken() || head_problem.is_some() {
        EXIT_BROKEN
    } else if report.incomplete() {
        EXIT_INCOMPLETE
    } else {
        EXIT_INTACT
    }
}

/// Whether the file's first line is an OTLP/JSON request (an export read back), not a log.
fn is_export(file: &File) -> bool {
    use std::io::{Seek, SeekFrom};
    let mut first = None;
    let _ = chain::for_each_line(BufReader::new(file), |line| {
        if let chain::LogLine::Terminated(b) | chain::LogLine::CutShort(b) = line {
            first = Some(export_verify::is_export_line(b));
        }
        false
    });
    let _ = (&mut &*file).seek(SeekFrom::Start(0));
    first.unwrap_or(false)
}

/// The log, which must be a regular file (a FIFO is refused, not waited on).
fn open(path: &Path) -> Result<File, i32> {
    crate::regular_file::open(path).map_err(|e| {
        crate::say!("stepproof audit: opening {}: {e}", path.display());
        EXIT_ERROR
    })
}

/// The report once the file is known to be a log: `Err` with the exit code otherwise (after
/// saying why).
fn checked(path: &Path, file: &File, mut report: ChainReport) -> Result<ChainReport, i32> {
    if let Some(why) = report.not_a_log() {
        crate::say!("stepproof audit: {}: {why}", path.display());
        return Err(EXIT_ERROR);
    }
    if report.status == Status::Incomplete && crate::audit::owed::writer_holds(file) {
        report.writer_is_live();
    }
    Ok(report)
}

fn verdict_code(report: &ChainReport) -> i32 {
    match report.status {
        Status::Intact => EXIT_INTACT,
        Status::Broken => EXIT_BROKEN,
        Status::Incomplete => EXIT_INCOMPLETE,
        Status::InProgress => EXIT_IN_PROGRESS,
        Status::Recovered => EXIT_RECOVERED,
    }
}

fn verify_file(path: &Path, head: Option<&str>, json: bool) -> i32 {
    let file = match open(path) {
        Ok(f) => f,
        Err(code) => return code,
    };
    if is_export(&file) {
        return verify_export_file(path, &file, head, json);
    }
    let report = match chain::verify(BufReader::new(&file), head) {
        Ok(report) => report,
        Err(e) => {
            crate::say!("stepproof audit: reading {}: {e}", path.display());
            return EXIT_ERROR;
        }
    };
    let report = match checked(path, &file, report) {
        Ok(report) => report,
        Err(code) => return code,
    };
    if json {
        crate::out!(
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        );
        return verdict_code(&report);
    }
    let matched = if head.is_some() {
        " (matches --head)"
    } else {
        ""
    };
    let intact = format!("{} records, head {}{matched}", report.records, report.head);
    match report.status {
        Status::Intact => {
            crate::out!("intact: {intact}");
            if head.is_none() {
                crate::say!(
                    "note: a log cut between two runs also looks intact; pass --head with the \
                     hash the run printed to detect a truncated tail"
                );
            }
        }
        Status::Incomplete if !report.runs_recovered.is_empty() => crate::out!(
            "incomplete: the chain is intact ({intact}), but {}; and {}",
            show::runs_without_end(&report),
            show::runs_recovered(&report)
        ),
        Status::Incomplete => crate::out!(
            "incomplete: the chain is intact ({intact}), but {}",
            show::runs_without_end(&report)
        ),
        Status::Recovered => crate::out!(
            "ended by recovery: the chain is intact ({intact}), but {}",
            show::runs_recovered(&report)
        ),
        Status::InProgress => crate::out!(
            "in progress: the chain is intact so far ({intact}); {}",
            show::runs_without_end(&report)
        ),
        Status::Broken => crate::out_part!("{}", show::chain_verdict(&report)),
    }
    say_work_owed(path);
    verdict_code(&report)
}

/// The runs of the log at `path` that still owe work (a marker in their run directory, no
/// supervisor holding its lock): the run directory beside the log, and the caller's run
/// directories whose marker names this log.
pub fn work_owed(path: &Path) -> Vec<owed::OwedRun> {
    let mut found: Vec<owed::OwedRun> = crate::audit::runs::owed_runs(&owed::caller_runs_dir())
        .into_iter()
        .filter(|o| o.logs_to(path) || path.parent() == Some(o.run_dir.as_path()))
        .collect();
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
        && owed::has_marker(dir)
        && !owed::lock_held(dir)
        && !found.iter().any(|o| o.run_dir == dir)
        && let Ok(Some(header)) = owed::read_header(dir)
    {
        found.push(owed::OwedRun {
            run_dir: dir.to_path_buf(),
            header: Ok(header),
        });
    }
    found
}

/// Says on stderr which runs of the log at `path` still owe work.
fn say_work_owed(path: &Path) {
    for run in work_owed(path) {
        crate::say!("WORK OWED: {}", run.describe());
    }
}

fn show_file(path: &Path, json: bool) -> i32 {
    let file = match open(path) {
        Ok(f) => f,
        Err(code) => return code,
    };
    // Each record is written as it is read: a log of any size shows in the memory of a line.
    // The first is held until the second arrives (or the end): a file whose first line is not
    // a record is not a log, and shows nothing.
    let mut out = Shown {
        json,
        text: show::TextTimeline::default(),
        written: 0,
    };
    let mut held: Option<show::Entry> = None;
    let read = show::stream_timeline(BufReader::new(&file), |entry| {
        if let Some(first) = held.take() {
            out.emit(&first);
        }
        if out.written == 0 {
            held = Some(entry);
        } else {
            out.emit(&entry);
        }
    });
    let chain = read
        .map_err(|e| {
            crate::say!("stepproof audit: reading {}: {e}", path.display());
            EXIT_ERROR
        })
        .and_then(|chain| checked(path, &file, chain));
    if let (Ok(_), Some(first)) = (&chain, held.take()) {
        out.emit(&first);
    }
    let written = out.written;
    if json && written > 0 {
        crate::out_part!("\n  ]");
    }
    let chain = match chain {
        Ok(chain) => chain,
        Err(code) => {
            if json && written > 0 {
                crate::out!("\n}}");
            }
            return code;
        }
    };
    let owed = work_owed(path);
    if json {
        let open = if written == 0 {
            "{\n  \"records\": [],\n"
        } else {
            ",\n"
        };
        let owed: Vec<Value> = owed
            .iter()
            .map(|o| {
                serde_json::json!({
                    "run_dir": crate::audit::text::path(&o.run_dir),
                    "workspace": o.header.as_ref().ok().map(|h| crate::audit::text::path(&h.workspace)),
                    "what": o.describe(),
                })
            })
            .collect();
        crate::out!(
            "{open}  \"chain\": {},\n  \"work_owed\": {}\n}}",
            serde_json::to_string(&chain).unwrap_or_default(),
            serde_json::to_string(&owed).unwrap_or_default()
        );
    } else {
        crate::out_part!("{}", out.text.end(&chain));
        for run in &owed {
            crate::out!("WORK OWED: {}", run.describe());
        }
    }
    verdict_code(&chain)
}

/// `audit show`'s output so far.
struct Shown {
    json: bool,
    text: show::TextTimeline,
    written: u64,
}

impl Shown {
    fn emit(&mut self, entry: &show::Entry) {
        if self.json {
            let separator = if self.written == 0 {
                "{\n  \"records\": [\n    "
            } else {
                ",\n    "
            };
            crate::out_part!(
                "{separator}{}",
                serde_json::to_string(entry).unwrap_or_default()
            );
        } else {
            crate::out_part!("{}", self.text.entry(entry));
        }
        self.written += 1;
    }
}
