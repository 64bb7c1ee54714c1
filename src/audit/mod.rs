//! The run's audit log: a hash chain of JSON Lines written by the supervisor, the receiver for
//! the records the hook reports from inside the sandbox, `stepproof audit verify|show|ship`,
//! and the export of every record as an OpenTelemetry log record ([`export`]).
//!
//! # The chain
//!
//! One record per line, UTF-8 JSON, each line ending in `\n`. Every record is an object whose
//! first five keys are, in this order:
//!
//! * `seq`: 0 for the first line of the file, then +1 per line, without gaps;
//! * `prev`: lowercase hex SHA-256 of the exact bytes of the previous line, without its
//!   trailing `\n`; for `seq` 0 it is [`GENESIS`](chain::GENESIS) (64 zeros);
//! * `ts_ms`: milliseconds since the Unix epoch, taken by the supervisor when it wrote the line;
//! * `source`: `supervisor` (the supervisor's own observation, trusted) or `sandbox` (reported
//!   from inside: it shows what was decided, not who asked, because the agent can run the hook
//!   binary itself);
//! * `kind`: `run-start`, `network`, `run-end`, `refused-peer`, … or, for `sandbox` records, the
//!   kind the hook gave (`decision`, `evidence`, … ; `hook` when it gave none).
//!
//! The rest is the body. A `sandbox` record carries `peer` (the sender's pid, uid and gid as the
//! supervisor saw them through `SCM_CREDENTIALS`) and `reported` (the object the hook sent,
//! unchanged), so nothing reported from inside can pose as an envelope field.
//!
//! The *head* is the hash of the last line (or `GENESIS` for an empty log). Each line commits to
//! everything before it, so editing, removing, inserting or reordering lines breaks the chain
//! at the first line after the change. Removing lines from the *end* leaves a shorter chain that
//! is intact in itself: a run then lacks its `run-end` (the log is *incomplete*, as it is when a
//! run was killed), but a cut between two runs shows only against the head hash that
//! `stepproof-run` prints at the end of the run (and writes into the summary), with
//! `stepproof audit verify FILE --head HASH`. Likewise an edit of the last line shows only
//! against the head. The chain has no key: it shows tampering with a log whose head is known, it
//! does not stop someone from writing a whole new consistent log.
//!
//! Several runs may append to one log: each starts with a `run-start` and ends with a `run-end`
//! record, both from the supervisor. A run whose supervisor died before its end is ended by
//! `run-end-recovered`, written by the repair that finished its end (`stepproof repair`, or the
//! next run on its workspace; see [`owed`]), which names the run by the `seq` of its
//! `run-start` (`run_start_seq`); `verify` says such a log *ended by recovery*. A record left half written by a writer that was killed is
//! cut off by the next writer, which records its length and hash (`torn-record-removed`). No
//! line is longer than [`MAX_RECORD_LINE`](chain::MAX_RECORD_LINE), so a reader needs one line
//! of memory.

/// StepProof's own state under the home (run directories, audit logs, quarantine).
pub const STATE_DIR: &str = ".local/state/stepproof";

pub mod caused;
pub mod chain;
pub mod command;
pub mod denial_loops;
pub mod export;
pub mod export_config;
pub mod export_fields;
pub mod export_http;
pub mod export_otlp;
pub mod export_verify;
pub mod owed;
pub mod receiver;
pub mod runbook_steps;
pub mod runs;
pub mod show;
pub mod sink;
pub mod text;

pub use chain::{GENESIS, line_hash};
pub use command::{AuditCommand, run_command};
pub use receiver::{PeerCheck, ReceiverCounts, ReceiverHandle, serve_hook_socket};
