//! What of a record the export ships: one table, keyed by (record kind, field), of the fields
//! declared safe to ship as values. Everything else is replaced by `"[redacted]"` (a string, a
//! number, a whole object alike), and a key that is not declared is not shipped at all — its
//! name could carry what its value would (a report from inside names its own keys) — so the
//! shipped record says only how many it withheld (`withheld_fields`). A field added to a record
//! later ships nothing until it is declared here.
//!
//! A path is the field's keys joined by `.`, with `[]` for the elements of a list and `*` for
//! one level of a map whose keys StepProof writes from a closed set (counts by record kind).
//! The kind `*` declares a field for every kind. Two classes:
//!
//! * [`Ship::Structure`] — kinds, ids, hashes, decisions, rule ids, tool names, counts,
//!   durations, hosts, ports, methods, statuses, exit codes: shipped in `commands` and
//!   `all-text`;
//! * [`Ship::Context`] — text StepProof writes from what the person at the keyboard or the
//!   profile chose (the profile's name, the workspace, the reason a rule gives, the kernel's
//!   features): shipped in `commands`, replaced in `all-text`;
//! * [`Ship::Withheld`] — what the agent shapes or may quote (commands, prompts, tool input,
//!   output and error text, file names and paths inside the run, URL paths, webhook URLs,
//!   free text from inside): its key ships, its whole value is replaced, in every mode but
//!   `none`.
//!
//! Every field a record writes has its line here, so a decision was made for each.
//! `redact = "none"` ships every record as written; `redact_keys` withholds more keys in every
//! mode. In debug builds, the suite's ledger (`STEPPROOF_FIELD_LEDGER`, set by `scripts/test`)
//! collects every (kind, field) a run writes that this table does not declare, so a field added
//! without a decision here fails the suite.

use crate::audit::export_config::Redaction;
use serde_json::{Map, Value};
use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

/// What replaces a value that is not shipped.
pub const REDACTED: &str = "[redacted]";

/// The key, at the top of a shipped record, that counts the keys not shipped.
pub const WITHHELD: &str = "withheld_fields";

/// How a declared field ships.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ship {
    /// In every mode but `none` (where everything ships).
    Structure,
    /// In `commands`; replaced in `all-text`.
    Context,
    /// Never (but in `none`): the key ships, its whole value (a list, a map) is replaced.
    Withheld,
}

use Ship::{Context as C, Structure as S, Withheld as W};

/// The table: (kind, path, class). Sorted by kind; `*` applies to every kind. One line per
/// field, as a reviewer reads it.
#[rustfmt::skip]
pub const FIELDS: &[(&str, &str, Ship)] = &[
    // *
    ("*", "peer.gid", S),
    ("*", "peer.pid", S),
    ("*", "peer.uid", S),
    ("*", "reported_from", S),
    // ask-answer
    ("ask-answer", "answer", S),
    ("ask-answer", "ask_seq", S),
    ("ask-answer", "inferred_from", C),
    ("ask-answer", "tool_use_id", S),
    // decision
    ("decision", "reported.agent_id", S),
    ("decision", "reported.agent_type", S),
    ("decision", "reported.decision", S),
    ("decision", "reported.duration_ms", S),
    ("decision", "reported.event", S),
    ("decision", "reported.file_path", W),
    ("decision", "reported.from", S),
    ("decision", "reported.hook_pid", S),
    ("decision", "reported.input", W),
    ("decision", "reported.input_truncated", S),
    ("decision", "reported.kind", S),
    ("decision", "reported.profile", S),
    ("decision", "reported.reason", W),
    ("decision", "reported.rule_id", S),
    ("decision", "reported.session_id", S),
    ("decision", "reported.settings_source", S),
    ("decision", "reported.tool", S),
    ("decision", "reported.tool_use_id", S),
    ("decision", "reported.ts_ms", S),
    // evidence
    ("evidence", "reported.agent_id", S),
    ("evidence", "reported.agent_type", S),
    ("evidence", "reported.command", W),
    ("evidence", "reported.duration_ms", S),
    ("evidence", "reported.error", W),
    ("evidence", "reported.error_bytes", S),
    ("evidence", "reported.error_sha256", S),
    ("evidence", "reported.event", S),
    ("evidence", "reported.exit_status", S),
    ("evidence", "reported.from", S),
    ("evidence", "reported.hook_pid", S),
    ("evidence", "reported.interrupted", S),
    ("evidence", "reported.kind", S),
    ("evidence", "reported.open_steps[]", S),
    ("evidence", "reported.path", W),
    ("evidence", "reported.profile", S),
    ("evidence", "reported.session_id", S),
    ("evidence", "reported.sha256", S),
    ("evidence", "reported.stderr_sha256", S),
    ("evidence", "reported.stdout_sha256", S),
    ("evidence", "reported.tool", S),
    ("evidence", "reported.tool_use_id", S),
    ("evidence", "reported.ts_ms", S),
    // exfiltration-attempt
    ("exfiltration-attempt", "allowed", S),
    ("exfiltration-attempt", "bytes_down", S),
    ("exfiltration-attempt", "bytes_up", S),
    ("exfiltration-attempt", "credential", S),
    ("exfiltration-attempt", "credential_echo_unchecked", C),
    ("exfiltration-attempt", "credential_echoed", S),
    ("exfiltration-attempt", "duration_ms", S),
    ("exfiltration-attempt", "error", W),
    ("exfiltration-attempt", "host", S),
    ("exfiltration-attempt", "method", S),
    ("exfiltration-attempt", "path", W),
    ("exfiltration-attempt", "placeholder_blocked", S),
    ("exfiltration-attempt", "port", S),
    ("exfiltration-attempt", "query_sha256", S),
    ("exfiltration-attempt", "resolved", S),
    ("exfiltration-attempt", "rule", C),
    ("exfiltration-attempt", "status", S),
    // gateway
    ("gateway", "allowed", S),
    ("gateway", "bytes_down", S),
    ("gateway", "bytes_up", S),
    ("gateway", "credential", S),
    ("gateway", "credential_echo_unchecked", C),
    ("gateway", "credential_echoed", S),
    ("gateway", "duration_ms", S),
    ("gateway", "error", W),
    ("gateway", "host", S),
    ("gateway", "method", S),
    ("gateway", "path", W),
    ("gateway", "placeholder_blocked", S),
    ("gateway", "port", S),
    ("gateway", "query_sha256", S),
    ("gateway", "resolved", S),
    ("gateway", "rule", C),
    ("gateway", "status", S),
    // hook
    ("hook", "reported.event", S),
    ("hook", "reported.hook_pid", S),
    ("hook", "reported.kind", S),
    ("hook", "reported.session_id", S),
    ("hook", "reported.ts_ms", S),
    // inside-records-over-cap
    ("inside-records-over-cap", "burst", S),
    ("inside-records-over-cap", "cap_bytes", S),
    ("inside-records-over-cap", "not_written", S),
    ("inside-records-over-cap", "not_written_by_kind.*", S),
    ("inside-records-over-cap", "per_second", S),
    ("inside-records-over-cap", "written_bytes", S),
    // limits
    ("limits", "acted[]", C),
    // login-refresh
    ("login-refresh", "error", W),
    ("login-refresh", "failed_refreshes", S),
    ("login-refresh", "outcome", S),
    ("login-refresh", "refresh_token_sent", S),
    ("login-refresh", "refreshes", S),
    ("login-refresh", "refreshes_after_401", S),
    ("login-refresh", "refreshes_after_401_max", S),
    ("login-refresh", "refusals", S),
    ("login-refresh", "rule", C),
    ("login-refresh", "trigger", S),
    // model-login
    ("model-login", "login", C),
    ("model-login", "placeholder", S),
    // network
    ("network", "allowed", S),
    ("network", "bytes_down", S),
    ("network", "bytes_up", S),
    ("network", "credential", S),
    ("network", "credential_echo_unchecked", C),
    ("network", "credential_echoed", S),
    ("network", "duration_ms", S),
    ("network", "error", W),
    ("network", "host", S),
    ("network", "method", S),
    ("network", "path", W),
    ("network", "placeholder_blocked", S),
    ("network", "port", S),
    ("network", "query_sha256", S),
    ("network", "resolved", S),
    ("network", "rule", C),
    ("network", "status", S),
    // records-not-written
    ("records-not-written", "last_error", C),
    ("records-not-written", "not_written", S),
    // refused-peer
    ("refused-peer", "exe", W),
    ("refused-peer", "expected", C),
    ("refused-peer", "gid", S),
    ("refused-peer", "pid", S),
    ("refused-peer", "reason", C),
    ("refused-peer", "stage", S),
    ("refused-peer", "uid", S),
    // run-end
    ("run-end", "enforced.command.capabilities_empty", S),
    ("run-end", "enforced.command.landlock.abi", S),
    ("run-end", "enforced.command.landlock.assurance", S),
    ("run-end", "enforced.command.landlock.dropped[]", C),
    ("run-end", "enforced.command.landlock.enforced", S),
    ("run-end", "enforced.command.landlock.handled_rights[]", S),
    ("run-end", "enforced.command.landlock.rules", S),
    ("run-end", "enforced.command.landlock.scopes[]", S),
    ("run-end", "enforced.command.landlock.skipped[]", C),
    ("run-end", "enforced.command.limits[].name", S),
    ("run-end", "enforced.command.limits[].requested", S),
    ("run-end", "enforced.command.limits[].value", S),
    ("run-end", "enforced.command.no_new_privs", S),
    ("run-end", "enforced.dropped[]", C),
    ("run-end", "enforced.identity.inside_gid", S),
    ("run-end", "enforced.identity.inside_uid", S),
    ("run-end", "enforced.identity.kept_groups[]", S),
    ("run-end", "enforced.identity.mode", S),
    ("run-end", "enforced.identity.outside_gid", S),
    ("run-end", "enforced.identity.outside_uid", S),
    ("run-end", "enforced.isolation", S),
    ("run-end", "enforced.namespaces[]", S),
    ("run-end", "enforced.network", S),
    ("run-end", "enforced.notes", W),
    ("run-end", "enforced.policy_hash", S),
    ("run-end", "enforced.profile", S),
    ("run-end", "enforced.seccomp.architectures[]", S),
    ("run-end", "enforced.seccomp.filters", S),
    ("run-end", "enforced.seccomp.instructions", S),
    ("run-end", "enforced.seccomp.killed[]", C),
    ("run-end", "enforced.seccomp.rules", S),
    ("run-end", "enforced.seccomp.syscalls", S),
    ("run-end", "enforced.stepproof_version", S),
    ("run-end", "hook_receiver.accepted", S),
    ("run-end", "hook_receiver.accepted_bytes", S),
    ("run-end", "hook_receiver.connections", S),
    ("run-end", "hook_receiver.empty", S),
    ("run-end", "hook_receiver.incomplete", S),
    ("run-end", "hook_receiver.malformed", S),
    ("run-end", "hook_receiver.over_cap", S),
    ("run-end", "hook_receiver.refused_peers", S),
    ("run-end", "outcome.command.command.command_exit_code", S),
    ("run-end", "outcome.command.command.exit_code", S),
    ("run-end", "outcome.command.command.signal", S),
    ("run-end", "outcome.command.command.status", S),
    ("run-end", "outcome.command.command_exit_code", S),
    ("run-end", "outcome.command.exit_code", S),
    ("run-end", "outcome.command.open[]", S),
    ("run-end", "outcome.command.signal", S),
    ("run-end", "outcome.command.signal_name", S),
    ("run-end", "outcome.command.status", S),
    ("run-end", "outcome.command.step", S),
    ("run-end", "outcome.command_exit_code", S),
    ("run-end", "outcome.exit_code", S),
    ("run-end", "outcome.findings[].change", S),
    ("run-end", "outcome.findings[].detail", W),
    ("run-end", "outcome.findings[].entries", W),
    ("run-end", "outcome.findings[].error", W),
    ("run-end", "outcome.findings[].path", W),
    ("run-end", "outcome.findings[].quarantined_to", W),
    ("run-end", "outcome.message", C),
    ("run-end", "outcome.missing", S),
    ("run-end", "outcome.open[]", S),
    ("run-end", "outcome.signal", S),
    ("run-end", "outcome.signal_name", S),
    ("run-end", "outcome.status", S),
    ("run-end", "outcome.step", S),
    ("run-end", "records_over_budget.by_kind.*", S),
    ("run-end", "records_over_budget.not_written", S),
    // run-end-recovered
    ("run-end-recovered", "findings[].change", S),
    ("run-end-recovered", "findings[].detail", W),
    ("run-end-recovered", "findings[].entries", W),
    ("run-end-recovered", "findings[].error", W),
    ("run-end-recovered", "findings[].path", W),
    ("run-end-recovered", "findings[].quarantined_to", W),
    ("run-end-recovered", "host_edits", W),
    ("run-end-recovered", "notes", W),
    ("run-end-recovered", "pid", S),
    ("run-end-recovered", "proposed_changes", C),
    ("run-end-recovered", "record_too_long.bytes", S),
    ("run-end-recovered", "record_too_long.max_bytes", S),
    ("run-end-recovered", "record_too_long.sha256", S),
    ("run-end-recovered", "recovered_at_ms", S),
    ("run-end-recovered", "recovered_by", S),
    ("run-end-recovered", "restored", W),
    ("run-end-recovered", "run_id", S),
    ("run-end-recovered", "run_start_seq", S),
    ("run-end-recovered", "started_at_ms", S),
    ("run-end-recovered", "swept_at_ms", S),
    ("run-end-recovered", "swept_by", S),
    ("run-end-recovered", "via", S),
    ("run-end-recovered", "workspace", C),
    // run-start
    ("run-start", "argv", W),
    ("run-start", "isolation", S),
    ("run-start", "limit_lines[]", C),
    ("run-start", "limits[].limit", S),
    ("run-start", "limits[].place.unavailable.reason", C),
    ("run-start", "limits[].place.v1.dir", C),
    ("run-start", "limits[].value", S),
    ("run-start", "limits_dropped[]", C),
    ("run-start", "lost[]", C),
    ("run-start", "managed_settings_removed[]", C),
    ("run-start", "notes", W),
    ("run-start", "policy_hash", S),
    ("run-start", "profile", S),
    ("run-start", "run_id", S),
    ("run-start", "runbook.approval_webhook.from", C),
    ("run-start", "runbook.approval_webhook.key", C),
    ("run-start", "runbook.approval_webhook.notes", W),
    ("run-start", "runbook.approval_webhook.url", W),
    ("run-start", "runbook.fresh", S),
    ("run-start", "runbook.hash", S),
    ("run-start", "runbook.id", S),
    ("run-start", "runbook.path", C),
    ("run-start", "runbook.pre_approved[]", S),
    ("run-start", "runbook.steps", S),
    ("run-start", "stepproof_version", S),
    ("run-start", "user_namespaces", C),
    ("run-start", "workspace", C),
    // runbook-abandon-refused
    ("runbook-abandon-refused", "reason", W),
    ("runbook-abandon-refused", "why", C),
    // runbook-abandon-requested
    ("runbook-abandon-requested", "open[]", S),
    ("runbook-abandon-requested", "reason", W),
    // runbook-abandoned
    ("runbook-abandoned", "not_passed[]", S),
    ("runbook-abandoned", "open[]", S),
    ("runbook-abandoned", "requested", S),
    ("runbook-abandoned", "runbook", S),
    ("runbook-abandoned", "why", W),
    // runbook-approval
    ("runbook-approval", "answer_sha256", S),
    ("runbook-approval", "answered_at", S),
    ("runbook-approval", "approved", S),
    ("runbook-approval", "approver", C),
    ("runbook-approval", "counted", S),
    ("runbook-approval", "expires_at", S),
    ("runbook-approval", "from", S),
    ("runbook-approval", "nonce", S),
    ("runbook-approval", "reason", W),
    ("runbook-approval", "step", S),
    // runbook-approval-refused
    ("runbook-approval-refused", "answer_claimed.approver", C),
    ("runbook-approval-refused", "answer_claimed.decision", S),
    ("runbook-approval-refused", "answer_claimed.nonce", S),
    ("runbook-approval-refused", "answer_claimed.run", S),
    ("runbook-approval-refused", "answer_claimed.step", S),
    ("runbook-approval-refused", "answer_sha256", S),
    ("runbook-approval-refused", "from", S),
    ("runbook-approval-refused", "nonce", S),
    ("runbook-approval-refused", "step", S),
    ("runbook-approval-refused", "why", C),
    // runbook-approval-requested
    ("runbook-approval-requested", "approvers", C),
    ("runbook-approval-requested", "deadline", S),
    ("runbook-approval-requested", "step", S),
    // runbook-approval-webhook-repeats
    ("runbook-approval-webhook-repeats", "nonce", S),
    ("runbook-approval-webhook-repeats", "repeated", S),
    ("runbook-approval-webhook-repeats", "step", S),
    // runbook-approval-webhook-request
    ("runbook-approval-webhook-request", "expires_at", S),
    ("runbook-approval-webhook-request", "issued_at", S),
    ("runbook-approval-webhook-request", "nonce", S),
    ("runbook-approval-webhook-request", "request_sha256", S),
    ("runbook-approval-webhook-request", "step", S),
    ("runbook-approval-webhook-request", "url", W),
    // runbook-approval-webhook-sent
    ("runbook-approval-webhook-sent", "nonce", S),
    ("runbook-approval-webhook-sent", "status", S),
    ("runbook-approval-webhook-sent", "step", S),
    // runbook-complete
    ("runbook-complete", "runbook", S),
    // runbook-complete-refused
    ("runbook-complete-refused", "step", S),
    ("runbook-complete-refused", "why", C),
    // runbook-complete-requested
    ("runbook-complete-requested", "attempt", S),
    ("runbook-complete-requested", "max_attempts", S),
    ("runbook-complete-requested", "note", W),
    ("runbook-complete-requested", "step", S),
    // runbook-continued
    ("runbook-continued", "continues", S),
    ("runbook-continued", "earlier_ended", C),
    ("runbook-continued", "hash", S),
    ("runbook-continued", "log", C),
    ("runbook-continued", "log_head", S),
    ("runbook-continued", "log_records", S),
    ("runbook-continued", "runbook", S),
    ("runbook-continued", "state[].attempts", S),
    ("runbook-continued", "state[].baseline_kept", S),
    ("runbook-continued", "state[].last_verdict", S),
    ("runbook-continued", "state[].status", S),
    ("runbook-continued", "state[].step", S),
    // runbook-ended
    ("runbook-ended", "ending", S),
    ("runbook-ended", "missing", S),
    ("runbook-ended", "not_passed[]", S),
    ("runbook-ended", "runbook", S),
    ("runbook-ended", "step", S),
    // runbook-evidence
    ("runbook-evidence", "agent_frozen", C),
    ("runbook-evidence", "answer", S),
    ("runbook-evidence", "approver", C),
    ("runbook-evidence", "approvers", C),
    ("runbook-evidence", "attempt", S),
    ("runbook-evidence", "attributed_to[].matches_supervisor_hash", S),
    ("runbook-evidence", "attributed_to[].open_steps[]", S),
    ("runbook-evidence", "attributed_to[].path", W),
    ("runbook-evidence", "attributed_to[].reported_from", S),
    ("runbook-evidence", "attributed_to[].sha256", S),
    ("runbook-evidence", "attributed_to[].step", S),
    ("runbook-evidence", "attributed_to[].tool", S),
    ("runbook-evidence", "attributed_to[].tool_use_id", S),
    ("runbook-evidence", "attributed_to[].ts_ms", S),
    ("runbook-evidence", "audit_log", C),
    ("runbook-evidence", "baseline_entries", S),
    ("runbook-evidence", "body_kind", S),
    ("runbook-evidence", "budget", S),
    ("runbook-evidence", "by", S),
    ("runbook-evidence", "chain[].model", S),
    ("runbook-evidence", "chain[].outcome", S),
    ("runbook-evidence", "changed", W),
    ("runbook-evidence", "changed_count", S),
    ("runbook-evidence", "changed_as_work[]", W),
    ("runbook-evidence", "ci", S),
    ("runbook-evidence", "current_sha256", S),
    ("runbook-evidence", "deny_rules[]", S),
    ("runbook-evidence", "duration_ms", S),
    ("runbook-evidence", "error", W),
    ("runbook-evidence", "exceeded", W),
    ("runbook-evidence", "exit_code", S),
    ("runbook-evidence", "expected_exit_code", S),
    ("runbook-evidence", "found", W),
    ("runbook-evidence", "found_count", S),
    ("runbook-evidence", "found_sha256", S),
    ("runbook-evidence", "from", S),
    ("runbook-evidence", "frozen", S),
    ("runbook-evidence", "held", S),
    ("runbook-evidence", "ignore_rules_sha256", S),
    ("runbook-evidence", "include_ignored", S),
    ("runbook-evidence", "item", S),
    ("runbook-evidence", "missing", W),
    ("runbook-evidence", "model", S),
    ("runbook-evidence", "model_differs", S),
    ("runbook-evidence", "model_used", S),
    ("runbook-evidence", "models_tried[]", S),
    ("runbook-evidence", "network", S),
    ("runbook-evidence", "nonce", S),
    ("runbook-evidence", "output_bytes", S),
    ("runbook-evidence", "output_sha256", S),
    ("runbook-evidence", "paths[]", C),
    ("runbook-evidence", "pre_approved", S),
    ("runbook-evidence", "reasons", W),
    ("runbook-evidence", "run", W),
    ("runbook-evidence", "step", S),
    ("runbook-evidence", "tier", S),
    ("runbook-evidence", "tokens", S),
    ("runbook-evidence", "transcript_sha256", S),
    ("runbook-evidence", "unchanged[]", C),
    ("runbook-evidence", "verdict", S),
    ("runbook-evidence", "workspace", C),
    ("runbook-evidence", "read_only[]", W),
    ("runbook-evidence", "hidden_count", S),
    ("runbook-evidence", "build_state.discarded[]", C),
    ("runbook-evidence", "build_state.trusted[]", C),
    // runbook-evidence-named
    ("runbook-evidence-named", "budget", S),
    ("runbook-evidence-named", "files[].path", W),
    ("runbook-evidence-named", "files[].sha256", S),
    // runbook-notice
    ("runbook-notice", "notice", S),
    ("runbook-notice", "passed", S),
    // runbook-notification
    ("runbook-notification", "bytes", S),
    ("runbook-notification", "duration_ms", S),
    ("runbook-notification", "error", C),
    ("runbook-notification", "format", S),
    ("runbook-notification", "host", S),
    ("runbook-notification", "status", S),
    ("runbook-notification", "step", S),
    // runbook-request-refused
    ("runbook-request-refused", "message", W),
    ("runbook-request-refused", "why", W),
    // runbook-step-failed
    ("runbook-step-failed", "attempt", S),
    ("runbook-step-failed", "attempts_left", S),
    ("runbook-step-failed", "final", S),
    ("runbook-step-failed", "invariants_changed", W),
    ("runbook-step-failed", "on_fail", S),
    ("runbook-step-failed", "step", S),
    // runbook-step-interrupted
    ("runbook-step-interrupted", "attempt", S),
    ("runbook-step-interrupted", "step", S),
    ("runbook-step-interrupted", "why", C),
    // runbook-step-not-approved
    ("runbook-step-not-approved", "attempt", S),
    ("runbook-step-not-approved", "attempt_counted", S),
    ("runbook-step-not-approved", "attempts_left", S),
    ("runbook-step-not-approved", "missing", S),
    ("runbook-step-not-approved", "step", S),
    // runbook-step-opened
    ("runbook-step-opened", "allows", C),
    ("runbook-step-opened", "baseline", W),
    ("runbook-step-opened", "baseline_budget", S),
    ("runbook-step-opened", "baseline_files", S),
    ("runbook-step-opened", "baseline_from_earlier_run", S),
    ("runbook-step-opened", "baseline_not_taken", C),
    ("runbook-step-opened", "depends_on[]", S),
    ("runbook-step-opened", "ignore.files[]", W),
    ("runbook-step-opened", "ignore.not_taken", C),
    ("runbook-step-opened", "ignore.repository", S),
    ("runbook-step-opened", "ignore.rules_sha256", S),
    ("runbook-step-opened", "invariant_entries", S),
    ("runbook-step-opened", "invariants[]", C),
    ("runbook-step-opened", "definitions_frozen[]", W),
    ("runbook-step-opened", "definitions_unknown[]", W),
    ("runbook-step-opened", "invariants_budget", S),
    ("runbook-step-opened", "invariants_not_taken", C),
    ("runbook-step-opened", "invariants_sha256", S),
    ("runbook-step-opened", "kept_for_verifiers.files", S),
    ("runbook-step-opened", "kept_for_verifiers.kept", S),
    ("runbook-step-opened", "kept_for_verifiers.not_kept", W),
    ("runbook-step-opened", "opening_ms", S),
    ("runbook-step-opened", "step", S),
    ("runbook-step-opened", "title", C),
    // runbook-step-passed
    ("runbook-step-passed", "attempt", S),
    ("runbook-step-passed", "covered.build_state", C),
    ("runbook-step-passed", "covered.definitions_frozen[]", W),
    ("runbook-step-passed", "covered.definitions_unknown[]", W),
    ("runbook-step-passed", "covered.judged_by_verifier_only[]", C),
    ("runbook-step-passed", "covered.protected[]", C),
    ("runbook-step-passed", "covered.verifier_items", S),
    ("runbook-step-passed", "step", S),
    // runbook-step-void
    ("runbook-step-void", "attempt", S),
    ("runbook-step-void", "findings[]", W),
    ("runbook-step-void", "step", S),
    ("runbook-step-void", "via", S),
    ("runbook-step-void", "why", C),
    // runbook-verifier-attempt
    ("runbook-verifier-attempt", "attempt", S),
    ("runbook-verifier-attempt", "audit_log", C),
    ("runbook-verifier-attempt", "chain_position", S),
    ("runbook-verifier-attempt", "detail", W),
    ("runbook-verifier-attempt", "duration_ms", S),
    ("runbook-verifier-attempt", "exit_code", S),
    ("runbook-verifier-attempt", "model", S),
    ("runbook-verifier-attempt", "model_differs", S),
    ("runbook-verifier-attempt", "model_used", S),
    ("runbook-verifier-attempt", "outcome", S),
    ("runbook-verifier-attempt", "stderr_tail", W),
    ("runbook-verifier-attempt", "step", S),
    ("runbook-verifier-attempt", "tier", S),
    ("runbook-verifier-attempt", "tokens", S),
    ("runbook-verifier-attempt", "transcript", C),
    ("runbook-verifier-attempt", "transcript_bytes", S),
    ("runbook-verifier-attempt", "transcript_sha256", S),
    // runbook-verifier-started
    ("runbook-verifier-started", "attempt", S),
    ("runbook-verifier-started", "max_tokens", S),
    ("runbook-verifier-started", "models[]", S),
    ("runbook-verifier-started", "prompt_sha256", S),
    ("runbook-verifier-started", "shown.diff_base", S),
    ("runbook-verifier-started", "shown.diff_bytes", S),
    ("runbook-verifier-started", "shown.diff_not_taken", W),
    ("runbook-verifier-started", "shown.files_changed", S),
    ("runbook-verifier-started", "shown.files_not_shown", S),
    ("runbook-verifier-started", "shown.masked_tokens", S),
    ("runbook-verifier-started", "shown.output_tails", S),
    ("runbook-verifier-started", "shown.show", S),
    ("runbook-verifier-started", "step", S),
    ("runbook-verifier-started", "tier", S),
    ("runbook-verifier-started", "timeout", S),
    // runbook-void
    ("runbook-void", "completion_void", S),
    ("runbook-void", "runbook", S),
    ("runbook-void", "steps[]", S),
    ("runbook-void", "via", S),
    ("runbook-void", "why", C),
    // service-credentials
    ("service-credentials", "notes", W),
    ("service-credentials", "read_only[]", S),
    ("service-credentials", "rules[].host", S),
    ("service-credentials", "rules[].methods[]", S),
    ("service-credentials", "rules[].name", S),
    ("service-credentials", "rules[].paths[]", C),
    ("service-credentials", "rules[].source", C),
    // session-end
    ("session-end", "reported.agent_id", S),
    ("session-end", "reported.agent_type", S),
    ("session-end", "reported.ends_session", S),
    ("session-end", "reported.event", S),
    ("session-end", "reported.from", S),
    ("session-end", "reported.hook_pid", S),
    ("session-end", "reported.kind", S),
    ("session-end", "reported.profile", S),
    ("session-end", "reported.reason", S),
    ("session-end", "reported.session_id", S),
    ("session-end", "reported.tool_use_id", S),
    ("session-end", "reported.ts_ms", S),
    // sessions
    ("sessions", "dropped[].path", W),
    ("sessions", "dropped[].why", C),
    ("sessions", "errors", W),
    ("sessions", "kept", W),
    ("sessions", "memory_changed[].path", W),
    ("sessions", "memory_changed[].sha256", S),
    ("sessions", "removed", W),
    ("sessions", "state", C),
    // subagent
    ("subagent", "reported.agent_id", S),
    ("subagent", "reported.agent_type", S),
    ("subagent", "reported.event", S),
    ("subagent", "reported.from", S),
    ("subagent", "reported.hook_pid", S),
    ("subagent", "reported.kind", S),
    ("subagent", "reported.profile", S),
    ("subagent", "reported.session_id", S),
    ("subagent", "reported.tool_use_id", S),
    ("subagent", "reported.ts_ms", S),
    // sweep
    ("sweep", "findings[].change", S),
    ("sweep", "findings[].detail", W),
    ("sweep", "findings[].entries", W),
    ("sweep", "findings[].error", W),
    ("sweep", "findings[].path", W),
    ("sweep", "findings[].quarantined_to", W),
    ("sweep", "host_edits", W),
    ("sweep", "notes", W),
    ("sweep", "proposed_changes", C),
    ("sweep", "record_too_long.bytes", S),
    ("sweep", "record_too_long.max_bytes", S),
    ("sweep", "record_too_long.sha256", S),
    ("sweep", "restored", W),
    // torn-record-removed
    ("torn-record-removed", "torn_record.at_offset", S),
    ("torn-record-removed", "torn_record.bytes", S),
    ("torn-record-removed", "torn_record.sha256", S),
    // turn
    ("turn", "reported.agent_id", S),
    ("turn", "reported.agent_type", S),
    ("turn", "reported.event", S),
    ("turn", "reported.from", S),
    ("turn", "reported.hook_pid", S),
    ("turn", "reported.kind", S),
    ("turn", "reported.profile", S),
    ("turn", "reported.session_id", S),
    ("turn", "reported.tool_use_id", S),
    ("turn", "reported.ts_ms", S),
];

/// Kinds a report from inside may have that declare no field of their own (only the `*` ones).
const KINDS_WITHOUT_FIELDS: &[&str] = &["runbook-request-refused", "runbook-status-requested"];

/// The longest string a [`Ship::Structure`] field ships: ids, hashes, names are shorter.
const STRUCTURE_MAX: usize = 128;

/// What a [`Ship::Structure`] string must look like to ship: at most [`STRUCTURE_MAX`] bytes of
/// printable ASCII without spaces. A report from inside fills its fields with what the hook was
/// given (the agent can run the hook itself), so an id field could hold any text: text with
/// spaces, line breaks or beyond an id's length is replaced even there.
fn plain(text: &str) -> bool {
    text.len() <= STRUCTURE_MAX && text.bytes().all(|b| (0x21..=0x7e).contains(&b))
}

/// The envelope every record has (see [`crate::audit::chain::ENVELOPE_KEYS`]): always shipped,
/// except a kind the sandbox named that the table does not know.
const ENVELOPE: [&str; 5] = crate::audit::chain::ENVELOPE_KEYS;

struct Table {
    /// (kind, path) → class.
    fields: HashMap<(&'static str, &'static str), Ship>,
    /// (kind, path) of every object or list that holds a declared field.
    containers: HashSet<(&'static str, String)>,
    /// Kinds the table names (besides `*`).
    kinds: HashSet<&'static str>,
}

fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut fields = HashMap::new();
        let mut containers = HashSet::new();
        let mut kinds = HashSet::new();
        kinds.extend(KINDS_WITHOUT_FIELDS.iter().copied());
        for &(kind, path, ship) in FIELDS {
            fields.insert((kind, path), ship);
            if kind != "*" {
                kinds.insert(kind);
            }
            for (i, c) in path.char_indices() {
                if c == '.' || (c == '[' && path[i..].starts_with("[]")) {
                    containers.insert((kind, path[..i].to_string()));
                }
            }
        }
        Table {
            fields,
            containers,
            kinds,
        }
    })
}

impl Table {
    fn class(&self, kind: &str, path: &str) -> Option<Ship> {
        self.fields
            .get(&(kind, path))
            .or_else(|| self.fields.get(&("*", path)))
            .copied()
    }

    fn is_container(&self, kind: &str, path: &str) -> bool {
        self.containers
            .contains(&(kind_key(self, kind), path.to_string()))
            || self.containers.contains(&("*", path.to_string()))
    }

    /// The path a key of the object at `parent` takes: its own name, or `*` where the table
    /// declares a map there. `None`: not declared.
    fn key_path(&self, kind: &str, parent: &str, key: &str) -> Option<String> {
        let join = |k: &str| {
            if parent.is_empty() {
                k.to_string()
            } else {
                format!("{parent}.{k}")
            }
        };
        [join(key), join("*")]
            .into_iter()
            .find(|p| self.class(kind, p).is_some() || self.is_container(kind, p))
    }
}

/// The table's own spelling of `kind` (the map's keys are `'static`).
fn kind_key(table: &Table, kind: &str) -> &'static str {
    table.kinds.get(kind).copied().unwrap_or("*")
}

/// Whether the table names `kind` (a kind the sandbox gave that it does not is not shipped).
pub fn known_kind(kind: &str) -> bool {
    table().kinds.contains(kind)
}

/// The record as shipped in `level` with `extra` keys withheld: `None` when it ships as
/// written (every field declared for the level, none withheld).
pub fn shipped(line: &[u8], level: Redaction, extra: &[String]) -> Option<String> {
    if level == Redaction::None && extra.is_empty() {
        return None;
    }
    let Ok(Value::Object(mut record)) = serde_json::from_slice::<Value>(line) else {
        // Not an object (cannot be, from our writer): nothing of it is shipped.
        return Some(format!("\"{REDACTED}\""));
    };
    let table = table();
    let kind = record_kind(&record);
    let mut pass = Pass {
        table,
        kind: &kind,
        level,
        extra,
        removed: Vec::new(),
        withheld: 0,
        changed: false,
    };
    if level != Redaction::None && !known_kind(&kind) && source_is_sandbox(&record) {
        record.insert("kind".into(), Value::from(REDACTED));
        pass.changed = true;
    }
    let keys: Vec<String> = record.keys().cloned().collect();
    for key in keys {
        if ENVELOPE.contains(&key.as_str()) {
            continue;
        }
        pass.key(&mut record, "", &key);
    }
    // A withheld value quoted elsewhere (a decision's reason repeats its command).
    pass.removed.retain(|s| s.len() >= MIN_QUOTED);
    if !pass.removed.is_empty() {
        for (key, value) in record.iter_mut() {
            if !ENVELOPE.contains(&key.as_str()) {
                pass.changed |= redact_quotes(value, &pass.removed);
            }
        }
    }
    if pass.withheld > 0 {
        record.insert(WITHHELD.into(), Value::from(pass.withheld));
    }
    pass.changed.then(|| Value::Object(record).to_string())
}

/// Shortest withheld value whose appearance in a shipped string withholds that string too
/// (shorter ones, such as `ls`, would withhold half the record by accident).
const MIN_QUOTED: usize = 6;

fn record_kind(record: &Map<String, Value>) -> String {
    record
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn source_is_sandbox(record: &Map<String, Value>) -> bool {
    record.get("source").and_then(Value::as_str) == Some("sandbox")
}

struct Pass<'a> {
    table: &'a Table,
    kind: &'a str,
    level: Redaction,
    extra: &'a [String],
    removed: Vec<String>,
    withheld: u64,
    changed: bool,
}

impl Pass<'_> {
    /// The key `key` of `object` (at `parent`): kept, replaced or removed.
    fn key(&mut self, object: &mut Map<String, Value>, parent: &str, key: &str) {
        let listed = self.extra.iter().any(|k| k == key);
        let path = if listed || self.level == Redaction::None {
            None
        } else {
            self.table.key_path(self.kind, parent, key)
        };
        match path {
            _ if listed => {
                if let Some(value) = object.get_mut(key)
                    && !matches!(value, Value::Null)
                {
                    collect_strings(value, &mut self.removed);
                    *value = Value::from(REDACTED);
                    self.changed = true;
                }
            }
            None if self.level == Redaction::None => {
                if let Some(value) = object.get_mut(key) {
                    self.value_none(key, value);
                }
            }
            None => {
                if let Some(value) = object.remove(key) {
                    collect_strings(&value, &mut self.removed);
                }
                self.withheld += 1;
                self.changed = true;
            }
            Some(path) if self.table.class(self.kind, &path) == Some(Ship::Withheld) => {
                if let Some(value) = object.get_mut(key)
                    && !matches!(value, Value::Null)
                    && value.as_str() != Some(REDACTED)
                {
                    collect_strings(value, &mut self.removed);
                    *value = Value::from(REDACTED);
                    self.changed = true;
                }
            }
            Some(path) => {
                if let Some(value) = object.get_mut(key) {
                    self.value(&path, value);
                }
            }
        }
    }

    /// `none` with `redact_keys`: only the listed keys, at any depth.
    fn value_none(&mut self, _key: &str, value: &mut Value) {
        match value {
            Value::Object(map) => {
                let keys: Vec<String> = map.keys().cloned().collect();
                for k in keys {
                    self.key(map, "", &k);
                }
            }
            Value::Array(items) => {
                for item in items {
                    self.value_none("", item);
                }
            }
            _ => {}
        }
    }

    fn value(&mut self, path: &str, value: &mut Value) {
        match value {
            Value::Object(map) => {
                let keys: Vec<String> = map.keys().cloned().collect();
                for k in keys {
                    self.key(map, path, &k);
                }
            }
            Value::Array(items) => {
                let element = format!("{path}[]");
                for item in items {
                    self.value(&element, item);
                }
            }
            Value::Null => {}
            scalar => {
                let ships = match self.table.class(self.kind, path) {
                    Some(Ship::Structure) => match scalar {
                        Value::String(s) => plain(s),
                        _ => true,
                    },
                    Some(Ship::Context) => self.level == Redaction::Commands,
                    Some(Ship::Withheld) | None => false,
                };
                if !ships {
                    if let Value::String(s) = scalar {
                        self.removed.push(std::mem::take(s));
                    }
                    *scalar = Value::from(REDACTED);
                    self.changed = true;
                }
            }
        }
    }
}

fn collect_strings(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => out.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|v| collect_strings(v, out)),
        Value::Object(map) => {
            for (k, v) in map {
                out.push(k.clone());
                collect_strings(v, out);
            }
        }
        _ => {}
    }
}

fn redact_quotes(value: &mut Value, removed: &[String]) -> bool {
    match value {
        Value::String(s) if s != REDACTED && removed.iter().any(|r| s.contains(r.as_str())) => {
            *value = Value::from(REDACTED);
            true
        }
        Value::Array(items) => items
            .iter_mut()
            .fold(false, |c, v| redact_quotes(v, removed) | c),
        Value::Object(map) => map
            .values_mut()
            .fold(false, |c, v| redact_quotes(v, removed) | c),
        _ => false,
    }
}

/// Every (kind, path) of `line` the table does not declare, for the suite's ledger.
pub fn undeclared(line: &[u8]) -> Vec<(String, String)> {
    let Ok(Value::Object(record)) = serde_json::from_slice::<Value>(line) else {
        return vec![("?".into(), "(not an object)".into())];
    };
    let table = table();
    let kind = record_kind(&record);
    let mut out = Vec::new();
    if source_is_sandbox(&record) && !known_kind(&kind) {
        out.push((kind.clone(), "(kind)".into()));
    }
    fn walk(table: &Table, kind: &str, path: &str, value: &Value, out: &mut Vec<(String, String)>) {
        match value {
            Value::Object(map) => {
                for (k, v) in map {
                    match table.key_path(kind, path, k) {
                        Some(p) if table.class(kind, &p) == Some(Ship::Withheld) => {}
                        Some(p) => walk(table, kind, &p, v, out),
                        None => out.push((kind.into(), join(path, k))),
                    }
                }
            }
            Value::Array(items) => {
                for item in items {
                    walk(table, kind, &format!("{path}[]"), item, out);
                }
            }
            Value::Null => {}
            _ => {
                if table.class(kind, path).is_none() {
                    out.push((kind.into(), path.into()));
                }
            }
        }
    }
    for (k, v) in &record {
        if ENVELOPE.contains(&k.as_str()) {
            continue;
        }
        match table.key_path(&kind, "", k) {
            Some(p) if table.class(&kind, &p) == Some(Ship::Withheld) => {}
            Some(p) => walk(table, &kind, &p, v, &mut out),
            None => out.push((kind.clone(), k.clone())),
        }
    }
    out.sort();
    out.dedup();
    out
}

fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

/// The suite's ledger, when this process opened one.
#[cfg(debug_assertions)]
static LEDGER: OnceLock<Option<std::path::PathBuf>> = OnceLock::new();

/// Debug builds: StepProof's programs call this first; from then on every record they write is
/// checked against the table and what it does not declare is appended to the file
/// `STEPPROOF_FIELD_LEDGER` names (`scripts/test` sets it and fails on any line in it). Tests
/// that write made-up records through the library directly have no ledger. Release builds
/// have none.
pub fn open_ledger() {
    #[cfg(debug_assertions)]
    LEDGER.get_or_init(|| std::env::var_os("STEPPROOF_FIELD_LEDGER").map(Into::into));
}

/// Appends what [`undeclared`] finds in `line` to the ledger, when there is one.
pub fn note_undeclared(line: &[u8]) {
    #[cfg(debug_assertions)]
    {
        use std::io::Write as _;
        let Some(Some(path)) = LEDGER.get() else {
            return;
        };
        let found = undeclared(line);
        if found.is_empty() {
            return;
        }
        let text: String = found
            .iter()
            .map(|(kind, path)| format!("{kind}\t{path}\n"))
            .collect();
        if let Ok(mut file) = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)
        {
            let _ = file.write_all(text.as_bytes());
        }
    }
    #[cfg(not(debug_assertions))]
    let _ = line;
}

#[cfg(test)]
mod tests;
