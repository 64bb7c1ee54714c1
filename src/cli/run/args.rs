//! `stepproof-run`'s command line, as clap reads it: here rather than in the binary so that
//! `stepproof generate` can write its man page and shell completions from the same definition.

use super::Request;
use clap::Parser;
use std::ffi::OsString;
use std::path::PathBuf;

/// Run COMMAND inside a Linux sandbox: workspace writable, home read-only, secrets hidden,
/// no capabilities, its own pid/mount/user/ipc/uts/net namespaces.
///
/// Exit codes: the command's own; 120 refused (bad profile or flag, a forbidden command: do not
/// retry); 122 the hook denied a call (with --fail-on-deny); 123 the persistence sweep found
/// tampering; 124 --timeout; 125 this host cannot give the protection required (missing kernel
/// feature, set-up error, --ci self-test failed: infrastructure); 126 not executable; 127 not
/// found; 128+N killed by signal N, or a SIGTERM/SIGHUP from outside ended the run (143, 129: the
/// command gets 5 s, then the whole sandbox is killed and the audit log closed); 116 a runbook abandoned, 117 a runbook step whose evidence did
/// not hold (--runbook); 118-119 audit and sweep.
#[derive(Parser, Debug)]
#[command(
    name = "stepproof-run",
    version = crate::VERSION,
    after_help = "Examples:\n  stepproof-run -- claude                      # interactive, at the terminal\n  stepproof-run --profile profiles/ci.toml -- claude -p \"fix the tests\"\n  stepproof-run --workspace ~/src/app -- cargo test"
)]
pub struct Args {
    /// A built-in profile by name (`default`, `ci`, `strict`: `stepproof profile list`) or a
    /// profile file (TOML); the built-in default when omitted.
    #[arg(long, value_name = "NAME|FILE")]
    pub profile: Option<PathBuf>,
    /// The directory the command may write; the current directory when omitted.
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// More output on stderr (-v: what is enforced, -vv: every step).
    #[arg(short, long, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Write a JSON status (which side an exit code came from) to FILE.
    #[arg(long, value_name = "FILE")]
    pub status_file: Option<PathBuf>,
    /// Write the assurance report (what was actually enforced) as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// The run's audit log (JSON Lines, written outside the sandbox); by default a new file under
    /// ~/.local/state/stepproof/runs/.
    #[arg(long, value_name = "FILE")]
    pub audit_log: Option<PathBuf>,
    /// Unattended run: no terminal needed, the self-test runs first and the launch is refused
    /// if the sandbox is weaker than the profile requires; a job summary is written to
    /// $GITHUB_STEP_SUMMARY when set.
    #[arg(long)]
    pub ci: bool,
    /// End the whole sandbox after DURATION (90s, 30m, 1h30m): SIGTERM, then SIGKILL 5 s later.
    /// Exit 124.
    #[arg(long, value_name = "DURATION", value_parser = crate::cli::ci::parse_duration)]
    pub timeout: Option<std::time::Duration>,
    /// Keep the newest N run directories under ~/.local/state/stepproof/runs/ (each holds a
    /// run's audit log, its agent's configuration and its quarantine) and remove older ones
    /// when this run ends; `all` removes none. Default 100.
    #[arg(
        long,
        value_name = "N|all",
        env = "STEPPROOF_KEEP_RUNS",
        default_value = "100"
    )]
    pub keep_runs: crate::audit::runs::Keep,
    /// Write the markdown job summary to FILE.
    #[arg(long, value_name = "FILE")]
    pub summary: Option<PathBuf>,
    /// Write the job summary as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub summary_json: Option<PathBuf>,
    /// Exit 122 when the command finished but the hook denied at least one call.
    #[arg(long)]
    pub fail_on_deny: bool,
    /// Follow a runbook: the steps open one after another as the supervisor finds each one's
    /// evidence holds; the hook enforces the profile narrowed by the open steps. Exit 117 when
    /// a step's evidence did not hold and its attempts ran out, 116 when the run ended before
    /// the last step.
    #[arg(long, value_name = "FILE")]
    pub runbook: Option<PathBuf>,
    /// With --runbook: approve STEP's approval beforehand (a CI job; recorded). Repeatable.
    #[arg(long, value_name = "STEP")]
    pub approve: Vec<String>,
    /// With --runbook: start afresh, even where an earlier run of this runbook in this
    /// workspace ended with steps open (by default it is continued, its state rebuilt from its
    /// verified audit log; a broken log refuses to continue). Recorded.
    #[arg(long, requires = "runbook")]
    pub runbook_fresh: bool,
    /// (Internal) Run the built-in escape probes inside this profile's sandbox instead of a
    /// command; `stepproof selftest` uses it.
    #[arg(long, hide = true)]
    pub selftest: bool,
    /// (Internal) A runbook's model verifier run: FILE becomes the `verifier` agent definition
    /// in this run's own config directory (read-only), and nowhere else; the supervisor starts
    /// its verifier runs with it.
    #[arg(long, hide = true, value_name = "FILE")]
    pub verifier_agent: Option<PathBuf>,
    /// The command and its arguments.
    #[arg(
        required_unless_present = "selftest",
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    pub command: Vec<OsString>,
}

impl Args {
    /// What the caller asked for, as the run reads it.
    pub fn into_request(self) -> Request {
        Request {
            profile: self.profile,
            workspace: self.workspace,
            verbose: self.verbose,
            status_file: self.status_file,
            report: self.report,
            audit_log: self.audit_log,
            ci: self.ci,
            timeout: self.timeout,
            keep_runs: self.keep_runs,
            summary: self.summary,
            summary_json: self.summary_json,
            fail_on_deny: self.fail_on_deny,
            selftest: self.selftest,
            command: self.command,
            runbook: self.runbook,
            approve: self.approve,
            runbook_fresh: self.runbook_fresh,
            verifier_agent: self.verifier_agent,
        }
    }
}
