//! `stepproof audit verify|show`. Exit codes: 0 the chain is intact, 1 it is broken (or does
//! not end at `--head`), 2 usage or I/O error.

use crate::audit::chain::{self, ChainReport};
use crate::audit::show;
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

pub const EXIT_INTACT: i32 = 0;
pub const EXIT_BROKEN: i32 = 1;
pub const EXIT_ERROR: i32 = 2;

/// The `stepproof audit` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum AuditCommand {
    /// Check a run's audit log: every line a record, `seq` counting from 0, each `prev` the
    /// hash of the line before. Names the first broken line. Exit 0 intact, 1 broken, 2 error.
    ///
    /// Without --head, a log cut at a line boundary still looks intact: pass the head hash
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
    /// whether its chain is intact. Exit 0 intact, 1 broken, 2 error.
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

fn open(path: &Path) -> Result<BufReader<File>, i32> {
    File::open(path).map(BufReader::new).map_err(|e| {
        eprintln!("stepproof audit: opening {}: {e}", path.display());
        EXIT_ERROR
    })
}

fn verdict_code(report: &ChainReport) -> i32 {
    if report.intact {
        EXIT_INTACT
    } else {
        EXIT_BROKEN
    }
}

fn verify_file(path: &Path, head: Option<&str>, json: bool) -> i32 {
    let reader = match open(path) {
        Ok(r) => r,
        Err(code) => return code,
    };
    let report = match chain::verify(reader, head) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("stepproof audit: reading {}: {e}", path.display());
            return EXIT_ERROR;
        }
    };
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        );
    } else {
        match &report.broken {
            None => {
                let matched = if head.is_some() {
                    " (matches --head)"
                } else {
                    ""
                };
                println!(
                    "intact: {} records, head {}{matched}",
                    report.records, report.head
                );
                if head.is_none() {
                    eprintln!(
                        "note: a log cut at a line boundary also looks intact; pass --head \
                         with the hash the run printed to detect a truncated tail"
                    );
                }
            }
            Some(_) => print!("{}", show::chain_verdict(&report)),
        }
    }
    verdict_code(&report)
}

fn show_file(path: &Path, json: bool) -> i32 {
    let reader = match open(path) {
        Ok(r) => r,
        Err(code) => return code,
    };
    let timeline = match show::read_timeline(reader) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("stepproof audit: reading {}: {e}", path.display());
            return EXIT_ERROR;
        }
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
