//! `stepproof runbook check|explain|schema`. Exit codes: 0 no error (warnings and notes may be
//! shown), 1 errors found (each as `FILE:LINE:COLUMN: error: …`), 2 the runbook or the profile
//! could not be read, or a usage error.

use super::check::{Report, check};
use super::explain::{explain_json, explain_text};
use crate::profile::Profile;
use std::path::{Path, PathBuf};

pub const EXIT_OK: i32 = 0;
pub const EXIT_PROBLEMS: i32 = 1;
pub const EXIT_UNREADABLE: i32 = 2;

/// The `stepproof runbook` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum RunbookCommand {
    /// Check a runbook against a profile: syntax, unknown and missing keys, step ids,
    /// dependencies (missing steps, cycles), evidence, attempts, and the steps' hook rules (each
    /// compiles, none can never match, none tries to widen the profile). Prints each problem as
    /// FILE:LINE:COLUMN. Exit 0 no error, 1 errors found, 2 unreadable runbook or profile.
    Check {
        file: PathBuf,
        /// The profile the runbook runs under: a built-in profile by name (`default`, `ci`,
        /// `strict`: `stepproof profile list`) or a profile file (TOML); the built-in default
        /// when omitted.
        #[arg(long, value_name = "NAME|FILE")]
        profile: Option<PathBuf>,
    },
    /// Print a runbook as the document a reviewer reads: its steps in dependency order, what
    /// each allows and denies on top of the profile, its evidence and what a failure leads to,
    /// and the runbook's hash. Exit codes as for `check` (a runbook with errors is not
    /// explained).
    Explain {
        file: PathBuf,
        /// A built-in profile by name (`default`, `ci`, `strict`: `stepproof profile list`) or a
        /// profile file (TOML); the built-in default when omitted.
        #[arg(long, value_name = "NAME|FILE")]
        profile: Option<PathBuf>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Print the JSON Schema of runbook files (for editors).
    Schema,
}

pub fn run_command(command: RunbookCommand) -> i32 {
    match command {
        RunbookCommand::Check { file, profile } => match load(&file, profile.as_deref()) {
            Ok((report, _)) => {
                let origin = file.display().to_string();
                print_problems(&report, &origin, false);
                let errors = report.errors();
                match &report.runbook {
                    Some(runbook) if errors == 0 => {
                        crate::out!(
                            "{origin}: runbook {} ({} step{}) is valid; hash {}",
                            runbook.id,
                            runbook.steps.len(),
                            if runbook.steps.len() == 1 { "" } else { "s" },
                            runbook.hash()
                        );
                        EXIT_OK
                    }
                    _ => {
                        crate::out!(
                            "{origin}: {errors} error{}",
                            if errors == 1 { "" } else { "s" }
                        );
                        EXIT_PROBLEMS
                    }
                }
            }
            Err(code) => code,
        },
        RunbookCommand::Explain {
            file,
            profile,
            json,
        } => {
            let (report, profile) = match load(&file, profile.as_deref()) {
                Ok(loaded) => loaded,
                Err(code) => return code,
            };
            let origin = file.display().to_string();
            let runbook = match &report.runbook {
                Some(runbook) if report.errors() == 0 => runbook,
                _ => {
                    print_problems(&report, &origin, true);
                    crate::say!(
                        "stepproof runbook explain: {origin} has errors (above); `stepproof runbook check` lists them"
                    );
                    return EXIT_PROBLEMS;
                }
            };
            if json {
                let mut value = explain_json(runbook, &report.order, &profile);
                value["problems"] = serde_json::to_value(&report.problems).unwrap_or_default();
                crate::out!(
                    "{}",
                    serde_json::to_string_pretty(&value).unwrap_or_default()
                );
            } else {
                crate::out_part!("{}", explain_text(runbook, &report.order, &profile));
                if !report.problems.is_empty() {
                    crate::out!("\nFrom `stepproof runbook check`:");
                    print_problems(&report, &origin, false);
                }
            }
            EXIT_OK
        }
        RunbookCommand::Schema => {
            crate::out!(
                "{}",
                serde_json::to_string_pretty(&super::schema::schema()).unwrap_or_default()
            );
            EXIT_OK
        }
    }
}

fn print_problems(report: &Report, origin: &str, to_stderr: bool) {
    for problem in &report.problems {
        let line = problem.render(origin);
        if to_stderr {
            crate::say!("{line}");
        } else {
            crate::out!("{line}");
        }
    }
}

/// The profile and the runbook, checked; `Err` is the exit code after saying why neither
/// could be read.
fn load(file: &Path, profile: Option<&Path>) -> Result<(Report, Profile), i32> {
    let profile = Profile::load(profile).map_err(|e| {
        crate::say!("stepproof runbook: {e}");
        EXIT_UNREADABLE
    })?;
    let text = super::read(file).map_err(|e| {
        crate::say!("stepproof runbook: {e}");
        EXIT_UNREADABLE
    })?;
    Ok((check(&text, &profile), profile))
}
