//! `stepproof-run`: run a command inside the StepProof sandbox (its arguments:
//! `stepproof::cli::run::args`).

use clap::Parser;
use stepproof::cli::run::args::Args;
use stepproof::exit::ExitCode;
use stepproof::supervisor::launch::start;

fn main() {
    stepproof::audit::export_fields::open_ledger();
    // The kernel's part of the sandbox's namespaces starts first, on the other core, while the
    // arguments, the profile and the plan are read and built here.
    start::start_namespace_seed();
    let args = match Args::try_parse() {
        Ok(args) => args,
        Err(e) => {
            // A bad flag is the caller's to fix: refused, like a bad profile.
            let code = if e.use_stderr() {
                ExitCode::Refused.code()
            } else {
                0
            };
            let _ = e.print();
            std::process::exit(code);
        }
    };
    stepproof::cli::logging::init_logging(args.verbose);
    std::process::exit(stepproof::cli::run::run(&args.into_request()));
}
