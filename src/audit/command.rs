//! `stepproof audit verify|show`. Exit codes: 0 the chain is intact and every run in it has its
//! `run-end`; 1 it is broken (or does not end at `--head`); 2 usage or I/O error, or the file is
//! not a log (empty, or its first line is not a record); 3 intact but incomplete (a run has no
//! `run-end`); 4 intact so far, and the last run is still being written.

use crate::audit::chain::{self, ChainReport, Status};
use crate::audit::show;
use std::fs::{File, TryLockError};
use std::io::BufReader;
use std::path::{Path, PathBuf};

pub const EXIT_INTACT: i32 = 0;
pub const EXIT_BROKEN: i32 = 1;
pub const EXIT_ERROR: i32 = 2;
pub const EXIT_INCOMPLETE: i32 = 3;
pub const EXIT_IN_PROGRESS: i32 = 4;

/// The `stepproof audit` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum AuditCommand {
    /// Check a run's audit log: every line a record, `seq` counting from 0, each `prev` the
    /// hash of the line before, every run ending in its `run-end`. Names the first broken line.
    /// Exit 0 intact, 1 broken, 2 error (also: empty, or not a log), 3 incomplete (a run has no
    /// run-end), 4 in progress (the last run is still being written).
    ///
    /// Without --head, a log cut between two runs still looks intact: pass the head hash
    /// `stepproof-run` printed at the end of the run to detect a truncated tail.
    Verify {
        file: PathBuf,
        /// The hash the chain must end at (printed at the end of the run).
        #[arg(long, value_name = "HASH", value_parser = parse_hash)]
        head: Option<String>,
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
    }
}

/// The log, which must be a regular file (a FIFO is refused, not waited on).
fn open(path: &Path) -> Result<File, i32> {
    crate::regular_file::open(path).map_err(|e| {
        eprintln!("stepproof audit: opening {}: {e}", path.display());
        EXIT_ERROR
    })
}

/// Whether another process holds the log's lock: the sink keeps an exclusive `flock` for as
/// long as it writes. The probe takes a shared lock and drops it at once; a writer starting in
/// that instant is refused as if another were writing (it says so), which is why this is only
/// asked when a run lacks its end.
fn writer_holds(file: &File) -> bool {
    match file.try_lock_shared() {
        Ok(()) => {
            let _ = file.unlock();
            false
        }
        Err(TryLockError::WouldBlock) => true,
        Err(TryLockError::Error(_)) => false,
    }
}

/// The report once the file is known to be a log: `Err` with the exit code otherwise (after
/// saying why).
fn checked(path: &Path, file: &File, mut report: ChainReport) -> Result<ChainReport, i32> {
    if let Some(why) = report.not_a_log() {
        eprintln!("stepproof audit: {}: {why}", path.display());
        return Err(EXIT_ERROR);
    }
    if report.status == Status::Incomplete && writer_holds(file) {
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
    }
}

fn verify_file(path: &Path, head: Option<&str>, json: bool) -> i32 {
    let file = match open(path) {
        Ok(f) => f,
        Err(code) => return code,
    };
    let report = match chain::verify(BufReader::new(&file), head) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("stepproof audit: reading {}: {e}", path.display());
            return EXIT_ERROR;
        }
    };
    let report = match checked(path, &file, report) {
        Ok(report) => report,
        Err(code) => return code,
    };
    if json {
        println!(
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
            println!("intact: {intact}");
            if head.is_none() {
                eprintln!(
                    "note: a log cut between two runs also looks intact; pass --head with the \
                     hash the run printed to detect a truncated tail"
                );
            }
        }
        Status::Incomplete => println!(
            "incomplete: the chain is intact ({intact}), but {}",
            show::runs_without_end(&report)
        ),
        Status::InProgress => println!(
            "in progress: the chain is intact so far ({intact}); {}",
            show::runs_without_end(&report)
        ),
        Status::Broken => print!("{}", show::chain_verdict(&report)),
    }
    verdict_code(&report)
}

fn show_file(path: &Path, json: bool) -> i32 {
    let file = match open(path) {
        Ok(f) => f,
        Err(code) => return code,
    };
    let mut timeline = match show::read_timeline(BufReader::new(&file)) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("stepproof audit: reading {}: {e}", path.display());
            return EXIT_ERROR;
        }
    };
    timeline.chain = match checked(path, &file, timeline.chain) {
        Ok(report) => report,
        Err(code) => return code,
    };
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&timeline).unwrap_or_default()
        );
    } else {
        print!("{}", show::render_text(&timeline));
    }
    verdict_code(&timeline.chain)
}
