//! `stepproof-hook [--policy FILE] [--audit-socket PATH] [--event NAME]`: the hook Claude
//! Code runs. Reads one JSON object on stdin, answers per the contract (see
//! `stepproof_hook::contract`), sends audit records, exits. Fails closed on gates: a panic
//! becomes a deny with exit 2 (exit 0 for observer events).
#![forbid(unsafe_code)]

use std::io::{Read, Write};
use std::process::ExitCode;

use stepproof_hook::audit;
use stepproof_hook::contract::{self, Args, MAX_INPUT_BYTES, Response};
use stepproof_hook::decision::Verdict;

fn main() -> ExitCode {
    // Silence the default panic message: stderr is what the model reads, and the catch below
    // answers with a proper deny.
    std::panic::set_hook(Box::new(|_| {}));
    let response = std::panic::catch_unwind(run).unwrap_or_else(|_| contract::panic_response());
    let mut stdout = std::io::stdout().lock();
    let mut stderr = std::io::stderr().lock();
    let _ = stdout.write_all(response.stdout.as_bytes());
    let _ = stdout.flush();
    let _ = stderr.write_all(response.stderr.as_bytes());
    ExitCode::from(u8::try_from(response.exit_code).unwrap_or(2))
}

fn run() -> Response {
    let args = match Args::parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(e) => {
            // A broken command line only comes from a broken install: block, say why.
            let verdict = Verdict::fail_closed(format!(
                "StepProof denied this call: {e} (rule fail-closed)."
            ));
            return contract::pre_tool_use_answer(&verdict);
        }
    };
    let mut input = Vec::new();
    let limit = u64::try_from(MAX_INPUT_BYTES + 1).unwrap_or(u64::MAX);
    if let Err(e) = std::io::stdin().lock().take(limit).read_to_end(&mut input) {
        let fake = serde_json::json!({ "unreadable": e.to_string() }).to_string();
        return contract::respond(&args, fake.as_bytes());
    }
    let response = contract::respond(&args, &input);
    if let Some(socket) = &args.audit_socket {
        // A lost record never changes the answer; the supervisor sees the gap.
        let _ = audit::send(socket, &response.records, audit::SEND_TIMEOUT);
    }
    response
}
