//! Telling people an approval waits: when the supervisor asks a person, it can POST a summary to
//! an incoming-webhook URL (a chat channel's) named in `stepproof-run`'s own environment — the
//! `STEPPROOF_APPROVAL_` variables, which never enter a sandbox — https only, and refused when
//! the sandbox's allow-list reaches its host (the agent could post as StepProof). What it posts
//! is chosen by an allow-list: the run and step ids, the deadline, counts (evidence items held,
//! files changed, the verifier's verdict) and the commands to answer; the changed files' names
//! and the verifier's reasons only when the operator opts in (`…_INCLUDE=files,reasons`): they
//! are the agent's words and the repository's names, which leave the host. Four shapes: a
//! generic JSON object, and what Slack, Discord and Microsoft Teams (Workflows, an Adaptive Card)
//! incoming webhooks accept. Posted on a thread of its own: a failure is recorded
//! (`runbook-notification`) and said, never fatal, and never holds the completion.

use crate::audit::sink::AuditSink;
use crate::http::client::{self, Request};
use crate::http::url::Url;
use crate::profile::Profile;
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `stepproof-run`'s environment: the incoming-webhook URL (`https://…`).
pub const URL_VAR: &str = "STEPPROOF_APPROVAL_NOTIFY_URL";
/// `generic` (the default), `slack`, `discord` or `teams`.
pub const FORMAT_VAR: &str = "STEPPROOF_APPROVAL_NOTIFY_FORMAT";
/// Opt-ins beyond the allow-list, comma-separated: `files`, `reasons`.
pub const INCLUDE_VAR: &str = "STEPPROOF_APPROVAL_NOTIFY_INCLUDE";
/// The longest a post may take.
const POST_TIMEOUT: Duration = Duration::from_secs(10);
/// File names posted at most (opted in).
const FILES_POSTED_MAX: usize = 20;
/// A chat message's text at most (Discord's limit is 2000 characters).
const TEXT_MAX_CHARS: usize = 1800;

/// The shapes a post can take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Generic,
    Slack,
    Discord,
    Teams,
}

impl Format {
    fn parse(text: &str) -> Result<Format, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "" | "generic" => Ok(Format::Generic),
            "slack" => Ok(Format::Slack),
            "discord" => Ok(Format::Discord),
            "teams" => Ok(Format::Teams),
            other => Err(format!(
                "{FORMAT_VAR}={other:?}: use generic, slack, discord or teams"
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Format::Generic => "generic",
            Format::Slack => "slack",
            Format::Discord => "discord",
            Format::Teams => "teams",
        }
    }
}

/// The run's notification target, checked.
pub struct Notifier {
    target: Url,
    /// The request target: the URL's path and query (Teams' Workflows URLs carry a signature
    /// in the query).
    path: String,
    format: Format,
    files: bool,
    reasons: bool,
    tls: Arc<rustls::ClientConfig>,
    audit: Option<AuditSink>,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL is a credential for most chat webhooks: its host only.
        f.debug_struct("Notifier")
            .field("host", &self.target.host)
            .field("format", &self.format)
            .finish_non_exhaustive()
    }
}

/// The notifier named in `env` (the caller's environment), checked before anything runs: https,
/// out of the sandbox's reach. `None` when no URL is named. Errors are the caller's to fix (120).
pub fn prepare(profile: &Profile, env: &[(String, String)]) -> Result<Option<Notifier>, String> {
    let var = |name: &str| {
        env.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .filter(|v| !v.is_empty())
    };
    let Some(url_text) = var(URL_VAR) else {
        return Ok(None);
    };
    let (base, query) = match url_text.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url_text.as_str(), None),
    };
    let url = Url::parse(base).map_err(|e| format!("{URL_VAR}: {e}"))?;
    if !url.tls {
        return Err(format!(
            "{URL_VAR}: a notification webhook must be https:// (it names the run and the step)"
        ));
    }
    if let Some(query) = query
        && (query.contains('#') || query.bytes().any(|b| !b.is_ascii_graphic()))
    {
        return Err(format!(
            "{URL_VAR}: a fragment or unusual character in the query"
        ));
    }
    if profile.network.mode == crate::profile::NetworkMode::Allowlist {
        let (host, port) =
            crate::profile::allow::host::parse_authority(&url.host_header(), Some(443))
                .map_err(|e| format!("{URL_VAR}: {e}"))?;
        if let Some(entry) = profile.network.allow.compiled().match_host(&host, port) {
            return Err(format!(
                "{URL_VAR}: the notification webhook's host is reachable from inside the sandbox (network.allow has {entry:?}): the agent could post as StepProof; use a host the profile does not allow"
            ));
        }
    }
    let format = Format::parse(&var(FORMAT_VAR).unwrap_or_default())?;
    let mut files = false;
    let mut reasons = false;
    for word in var(INCLUDE_VAR)
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|w| !w.is_empty())
    {
        match word {
            "files" => files = true,
            "reasons" => reasons = true,
            other => {
                return Err(format!(
                    "{INCLUDE_VAR}: {other:?} is not an opt-in (files, reasons)"
                ));
            }
        }
    }
    let mut extra = Vec::new();
    let test_ca = crate::supervisor::net::credentials::TEST_ONWARD_CA_VAR;
    if let Some(path) = std::env::var_os(test_ca).filter(|p| !p.is_empty()) {
        extra.push(Path::new(&path).to_path_buf());
    }
    let tls = crate::supervisor::net::login::client_config(&extra)?;
    let path = match query {
        Some(q) => format!("{}?{q}", url.request_path()),
        None => url.request_path().to_string(),
    };
    Ok(Some(Notifier {
        target: url,
        path,
        format,
        files,
        reasons,
        tls,
        audit: None,
    }))
}

impl Notifier {
    /// The run's audit log, for the posts' records.
    pub fn with_audit(mut self, audit: Option<&AuditSink>) -> Notifier {
        self.audit = audit.map(AuditSink::clone_handle);
        self
    }

    /// What is posted for `brief`, in this notifier's shape (see [`payload`]).
    pub fn payload(&self, brief: &Value) -> Value {
        payload(self.format, (self.files, self.reasons), brief)
    }
}

impl Notifier {
    /// Posts `brief`'s summary on a thread of its own; the outcome is recorded and, on failure,
    /// said on the terminal.
    pub fn post(self: &Arc<Self>, brief: Value) {
        let me = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("stepproof-notify".into())
            .spawn(move || me.post_now(&brief));
        if let Err(e) = spawned {
            crate::say!("stepproof-run: runbook: notifying: starting a thread: {e}");
        }
    }

    fn post_now(&self, brief: &Value) {
        let body = serde_json::to_vec(&self.payload(brief)).unwrap_or_default();
        let started = Instant::now();
        let sent = client::request(&Request {
            method: "POST",
            tls: Some(self.tls.clone()),
            host: &self.target.host,
            port: self.target.port,
            path: &self.path,
            headers: &[("Content-Type", "application/json")],
            body: &body,
            deadline: Instant::now() + POST_TIMEOUT,
            max_response: 64 << 10,
        });
        let (status, error) = match &sent {
            Ok(r) if (200..300).contains(&r.status) => (Some(r.status), None),
            Ok(r) => (Some(r.status), Some(format!("answered HTTP {}", r.status))),
            Err(e) => (None, Some(e.message.clone())),
        };
        if let Some(why) = &error {
            crate::say!(
                "stepproof-run: runbook: notifying {} of step {}'s approval failed: {why} (the approval is asked regardless)",
                self.target.host,
                brief["step"].as_str().unwrap_or_default()
            );
        }
        if let Some(audit) = &self.audit {
            audit.record(
                "supervisor",
                "runbook-notification",
                &json!({
                    "step": brief["step"],
                    "host": self.target.host,
                    "format": self.format.name(),
                    "bytes": body.len(),
                    "status": status,
                    "error": error,
                    "duration_ms": started.elapsed().as_millis() as u64,
                }),
            );
        }
    }
}

/// What is posted for `brief` (the approver's brief; see `engine::brief`) in `format`: the
/// allow-list, and the opt-ins (`files`, `reasons`).
pub fn payload(format: Format, (files, reasons): (bool, bool), brief: &Value) -> Value {
    let evidence = brief["evidence"].as_array().cloned().unwrap_or_default();
    let held = evidence.iter().filter(|e| e["held"] == true).count();
    let verifier = brief["verifier"]
        .as_array()
        .and_then(|v| v.first())
        .map(|v| v["verdict"].clone())
        .unwrap_or(Value::Null);
    let mut generic = json!({
        "type": "stepproof.approval.pending",
        "version": 1,
        "run": brief["run"],
        "step": brief["step"],
        "attempt": brief["attempt"],
        "deadline": brief["deadline"],
        "deadline_at_ms": brief["deadline_at_ms"],
        "counts": {
            "evidence_items": evidence.len(),
            "evidence_held": held,
            "files_changed": brief["diff"]["files_changed"],
        },
        "verifier": verifier,
        "approve": brief["approve"],
        "deny": brief["deny"],
        "details": "stepproof approvals (on the host)",
    });
    if files {
        generic["files"] = json!(
            brief["changed_files"]
                .as_array()
                .map(|f| f.iter().take(FILES_POSTED_MAX).cloned().collect::<Vec<_>>())
                .unwrap_or_default()
        );
    }
    if reasons {
        generic["reasons"] = brief["verifier"]
            .as_array()
            .and_then(|v| v.first())
            .map(|v| v["reasons"].clone())
            .unwrap_or(json!([]));
    }
    if format == Format::Generic {
        return generic;
    }
    let text = chat_text(&generic);
    match format {
        Format::Slack => json!({ "text": text }),
        Format::Discord => json!({ "content": text, "allowed_mentions": { "parse": [] } }),
        _ => json!({
            "type": "message",
            "attachments": [{
                "contentType": "application/vnd.microsoft.card.adaptive",
                "content": {
                    "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
                    "type": "AdaptiveCard",
                    "version": "1.4",
                    "body": [{ "type": "TextBlock", "text": text, "wrap": true }],
                },
            }],
        }),
    }
}

/// The chat message's text, from the generic payload (what it allows, in words).
fn chat_text(generic: &Value) -> String {
    let s = |v: &Value| match v {
        Value::String(s) => crate::audit::text::printable(s),
        Value::Null => "-".into(),
        other => other.to_string(),
    };
    let counts = &generic["counts"];
    let mut text = format!(
        "StepProof: step {} of run {} waits for approval (deadline {}). Evidence: {} of {} item(s) held; {} file(s) changed; verifier: {}.",
        s(&generic["step"]),
        s(&generic["run"]),
        s(&generic["deadline"]),
        s(&counts["evidence_held"]),
        s(&counts["evidence_items"]),
        s(&counts["files_changed"]),
        s(&generic["verifier"]),
    );
    if let Some(files) = generic["files"].as_array() {
        text.push_str(&format!(
            " Files: {}.",
            files.iter().map(s).collect::<Vec<_>>().join(", ")
        ));
    }
    if let Some(reasons) = generic["reasons"].as_array().filter(|r| !r.is_empty()) {
        text.push_str(&format!(
            " Verifier's reasons: {}.",
            reasons.iter().map(s).collect::<Vec<_>>().join("; ")
        ));
    }
    text.push_str(&format!(
        " On the host: `stepproof approvals` shows what the step did; `{}` or `{}`.",
        s(&generic["approve"]),
        s(&generic["deny"])
    ));
    text.chars().take(TEXT_MAX_CHARS).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn brief() -> Value {
        json!({
            "run": "1-2", "step": "ship", "attempt": 1, "deadline": "4h", "deadline_at_ms": 5,
            "evidence": [{"held": true}, {"held": true}],
            "verifier": [{"verdict": "pass", "reasons": ["the test covers the bug"]}],
            "diff": {"files_changed": 3, "text": "+secret-ish line"},
            "changed_files": ["src/a.rs", "src/b.rs"],
            "approve": "stepproof approve 1-2 ship", "deny": "stepproof deny 1-2 ship --reason …",
            "workspace": "/home/alice/private-project",
        })
    }

    // The allow-list: ids, counts, verdict word, commands; no diff, no workspace, no file name
    // or reason unless opted in.
    #[test]
    fn only_the_allow_list_leaves_unless_opted_in() {
        let plain = payload(Format::Generic, (false, false), &brief());
        assert_eq!(
            plain,
            json!({
                "type": "stepproof.approval.pending", "version": 1, "run": "1-2", "step": "ship",
                "attempt": 1, "deadline": "4h", "deadline_at_ms": 5,
                "counts": {"evidence_items": 2, "evidence_held": 2, "files_changed": 3},
                "verifier": "pass", "approve": "stepproof approve 1-2 ship",
                "deny": "stepproof deny 1-2 ship --reason …",
                "details": "stepproof approvals (on the host)",
            })
        );
        let opted = payload(Format::Generic, (true, true), &brief());
        assert_eq!(opted["files"], json!(["src/a.rs", "src/b.rs"]));
        assert_eq!(opted["reasons"], json!(["the test covers the bug"]));
        for format in [Format::Slack, Format::Discord, Format::Teams] {
            let text = payload(format, (false, false), &brief()).to_string();
            assert!(
                !text.contains("src/a.rs") && !text.contains("covers") && !text.contains("alice"),
                "{text}"
            );
        }
    }

    // The shapes Slack, Discord and Teams (Workflows) incoming webhooks take.
    #[test]
    fn each_chat_gets_its_own_shape() {
        let slack = payload(Format::Slack, (false, false), &brief());
        let text = slack["text"].as_str().unwrap();
        assert!(
            text.starts_with("StepProof: step ship of run 1-2 waits for approval (deadline 4h). Evidence: 2 of 2 item(s) held; 3 file(s) changed; verifier: pass.")
                && text.contains("`stepproof approve 1-2 ship`"),
            "{text}"
        );
        let discord = payload(Format::Discord, (false, false), &brief());
        assert_eq!(discord["content"], slack["text"]);
        assert_eq!(discord["allowed_mentions"]["parse"], json!([]));
        let teams = payload(Format::Teams, (false, false), &brief());
        assert_eq!(teams["type"], "message");
        let card = &teams["attachments"][0];
        assert_eq!(
            card["contentType"],
            "application/vnd.microsoft.card.adaptive"
        );
        assert_eq!(card["content"]["type"], "AdaptiveCard");
        assert_eq!(card["content"]["body"][0]["text"], slack["text"]);
        assert!(Format::parse("webex").is_err());
    }
}
