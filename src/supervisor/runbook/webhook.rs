//! Approvals by webhook: a runbook's approval step is also asked at an HTTPS endpoint the person
//! running StepProof names (`stepproof-run`'s environment or their own profile, never the
//! runbook and never a file inside the workspace). The supervisor never listens: it POSTs a
//! signed request (run, step, runbook and its hash, a fresh nonce, an expiry), then polls the
//! request's status URL until a signed answer for that nonce arrives or the deadline passes.
//! An answer that is not signed with the key, names another nonce, run or step, or comes after
//! the expiry is refused and recorded; only a valid answer reaches the step.
//!
//! Wire format (the README's "Approvals by webhook" says it for the receiver's authors):
//! `POST <url>` with the request as JSON and `X-StepProof-Signature: sha256=<hex>` (HMAC-SHA256
//! of the exact body with the key); `GET <url>/<nonce>` answers `202` (or `204`, `404`) while
//! nobody has answered, `200` with the answer as JSON and its own signature header once someone
//! has.

use crate::audit::sink::AuditSink;
use crate::http::client::{self, Request, Response};
use crate::http::url::Url;
use crate::profile::Profile;
use crate::profile::approvals::{WebhookOrigin, WebhookSetting};
use crate::profile::credentials::SourceSpec;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::{BTreeSet, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The header carrying a body's signature, both ways.
pub const SIGNATURE_HEADER: &str = "X-StepProof-Signature";
/// `type` of a request.
pub const REQUEST_TYPE: &str = "stepproof.approval.request";
/// `type` of an answer.
pub const ANSWER_TYPE: &str = "stepproof.approval.answer";
/// The shortest HMAC key taken (bytes of the key's text).
pub const KEY_MIN_BYTES: usize = 32;
/// How often the status URL is asked.
const POLL_INTERVAL: Duration = Duration::from_secs(1);
/// The longest one request may take (the whole exchange).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest answer read (head and body).
const RESPONSE_MAX_BYTES: usize = 256 * 1024;
/// An answer may say it was given this long before the request was issued (the receiver's clock
/// may be behind); earlier than that, it is stale.
const CLOCK_SKEW_SECONDS: u64 = 300;
/// Different errors and refusals recorded per wait (a receiver cannot fill the log).
const DISTINCT_RECORDS_MAX: usize = 32;
/// The longest `reason` and `approver` kept from an answer.
const TEXT_MAX_CHARS: usize = 1000;

/// The run's approval webhook: URL, key and trust, ready to ask.
pub struct Webhook {
    url: String,
    /// `url`, split.
    target: Url,
    key: ring::hmac::Key,
    tls: Arc<rustls::ClientConfig>,
    /// Where it came from, in words (the start record says it).
    pub origin: String,
    /// Where the key was read, without its value (`env:NAME`, `file:PATH`, `command:…`).
    pub key_source: String,
    /// What else the launch should say (a test CA trusted).
    pub notes: Vec<String>,
    /// Nonces of this run's requests (a replayed answer names one of them).
    issued: Mutex<Vec<Issued>>,
    /// Nonces whose request is over: answered, or past its deadline.
    used: Mutex<HashSet<String>>,
}

impl std::fmt::Debug for Webhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhook")
            .field("url", &self.url)
            .field("origin", &self.origin)
            .field("key_source", &self.key_source)
            .finish_non_exhaustive()
    }
}

/// One request as it was sent.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Issued {
    nonce: String,
    run: String,
    step: String,
    issued_at: u64,
    expires_at: u64,
}

impl Webhook {
    /// The URL requests are POSTed to (`/<nonce>` after it is the status URL).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// One exchange with the webhook's host (`path` on it), over within `timeout`; errors name
    /// the host.
    fn exchange(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        timeout: Duration,
    ) -> Result<Response, String> {
        let headers: Vec<(&str, &str)> = [("Accept", "application/json")]
            .into_iter()
            .chain(headers.iter().copied())
            .collect();
        client::request(&Request {
            method,
            tls: Some(self.tls.clone()),
            host: &self.target.host,
            port: self.target.port,
            path,
            headers: &headers,
            body,
            deadline: Instant::now() + timeout,
            max_response: RESPONSE_MAX_BYTES,
        })
        .map_err(|e| e.message)
    }
}

/// What the run's start record says about the webhook.
pub fn describe(webhook: &Webhook) -> Value {
    json!({
        "url": webhook.url,
        "from": webhook.origin,
        "key": webhook.key_source,
        "notes": webhook.notes,
    })
}

/// The webhook for this run, checked before anything starts (each refusal is the caller's to
/// fix: exit 120): a profile chain with a file inside the workspace may not name one, its key
/// file must be outside the workspace, the sandbox's allow-list must not reach its host (the
/// agent would talk to the approver's endpoint), and its URL must be https. With `ask` (a
/// runbook with an approval step) the key is read and the TLS configuration made; otherwise
/// `None` after the checks.
pub fn prepare(
    profile: &Profile,
    env: &[(String, String)],
    home: &Path,
    workspace: &Path,
    ask: bool,
) -> Result<Option<Webhook>, String> {
    if profile.approvals.is_some()
        && let Some(file) = profile.files.iter().find(|f| f.path.starts_with(workspace))
    {
        return Err(format!(
            "{} declares or pulls in [approvals] from inside the workspace: an approval webhook is honoured only from profiles outside it (a checkout must not say where a step's approval is asked, or with which key); move the profile out of the workspace, or set {} in your own environment",
            file.path.display(),
            crate::profile::approvals::WEBHOOK_VAR
        ));
    }
    let Some(setting) = crate::profile::approvals::setting(profile.approvals.as_ref(), env)? else {
        return Ok(None);
    };
    let url = Url::parse(&setting.url)?;
    if !url.tls {
        return Err(format!(
            "{}: an approval webhook must be https://",
            setting.url
        ));
    }
    if let SourceSpec::File(spec) = &setting.key {
        let path = spec.resolve(home, workspace);
        let real = path.canonicalize().unwrap_or_else(|_| path.clone());
        if real.starts_with(workspace) || path.starts_with(workspace) {
            return Err(format!(
                "the approval webhook's key file {} is inside the workspace, where the agent could read it: keep it outside",
                path.display()
            ));
        }
    }
    let mut notes = Vec::new();
    match profile.network.mode {
        crate::profile::NetworkMode::Allowlist => {
            let (host, port) =
                crate::profile::allow::host::parse_authority(&url.host_header(), Some(443))
                    .map_err(|e| format!("the approval webhook {}: {e}", setting.url))?;
            if let Some(entry) = profile.network.allow.compiled().match_host(&host, port) {
                return Err(format!(
                    "the approval webhook {} is reachable from inside the sandbox (network.allow has {entry:?}): the agent could talk to the approver's endpoint; serve it on a host the profile does not allow",
                    setting.url
                ));
            }
        }
        crate::profile::NetworkMode::Host => notes.push(format!(
            "WARNING: network mode \"host\": the agent can reach the approval webhook {} too (it cannot sign an answer: the key stays outside)",
            setting.url
        )),
        crate::profile::NetworkMode::None => {}
    }
    if !ask {
        return Ok(None);
    }
    let WebhookSetting {
        url: url_text,
        key,
        origin,
    } = setting;
    let secret = crate::supervisor::net::credentials::read_source(&key, home, workspace)
        .map_err(|e| format!("the approval webhook's key: {e}"))?;
    if secret.expose().len() < KEY_MIN_BYTES {
        return Err(format!(
            "the approval webhook's key ({}) is {} bytes: use at least {KEY_MIN_BYTES} (e.g. `openssl rand -hex 32`)",
            key.describe(),
            secret.expose().len()
        ));
    }
    let mut extra = Vec::new();
    let test_ca = crate::supervisor::net::credentials::TEST_ONWARD_CA_VAR;
    if let Some(path) = std::env::var_os(test_ca).filter(|p| !p.is_empty()) {
        notes.push(format!(
            "the approval webhook also trusts {} ({test_ca}, for tests only)",
            Path::new(&path).display()
        ));
        extra.push(path.into());
    }
    let tls = crate::supervisor::net::login::client_config(&extra)?;
    Ok(Some(Webhook {
        url: url_text.trim_end_matches('/').to_string(),
        target: url,
        key: ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.expose().as_bytes()),
        tls,
        origin: match origin {
            WebhookOrigin::Environment => {
                format!("environment ({})", crate::profile::approvals::WEBHOOK_VAR)
            }
            WebhookOrigin::Profile => format!(
                "profile {}",
                profile
                    .files
                    .first()
                    .map_or_else(|| profile.name.clone(), |f| f.path.display().to_string())
            ),
        },
        key_source: key.describe(),
        notes,
        issued: Mutex::new(Vec::new()),
        used: Mutex::new(HashSet::new()),
    }))
}

/// `sha256=<hex>`: HMAC-SHA256 of `body` with the key.
fn sign(key: &ring::hmac::Key, body: &[u8]) -> String {
    format!(
        "sha256={}",
        hex::encode(ring::hmac::sign(key, body).as_ref())
    )
}

/// Whether `header` is `sha256=<hex>` of `body` under the key (compared in constant time).
fn signature_holds(key: &ring::hmac::Key, body: &[u8], header: Option<&[u8]>) -> bool {
    let Some(header) = header else { return false };
    let Ok(header) = std::str::from_utf8(header) else {
        return false;
    };
    let Some(hex_text) = header.trim().strip_prefix("sha256=") else {
        return false;
    };
    let Ok(tag) = hex::decode(hex_text) else {
        return false;
    };
    ring::hmac::verify(key, body, &tag).is_ok()
}

/// What an approval step asks.
#[derive(Debug, Clone)]
pub struct Question {
    pub run: String,
    pub step: String,
    pub step_title: String,
    pub runbook: String,
    pub runbook_hash: String,
    pub approvers: String,
    pub deadline: Duration,
}

/// A valid answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub approved: bool,
    pub reason: Option<String>,
    /// Who answered, as the receiver says.
    pub approver: Option<String>,
    /// What the audit record says of it (channel, nonce, approver, times).
    pub detail: Value,
}

fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A fresh nonce: 32 random bytes, hex.
fn fresh_nonce() -> Result<String, String> {
    let mut bytes = [0u8; 32];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
        .map_err(|_| "the system's random source failed".to_string())?;
    Ok(hex::encode(bytes))
}

/// Asks the webhook on a thread of its own until a valid answer, `stop`, or the deadline.
/// `deliver` gets the valid answer (it says whether the answer counted: the first valid answer
/// of any channel wins); everything else — the request, refused answers, errors — is recorded
/// here.
pub fn ask(
    webhook: Arc<Webhook>,
    question: Question,
    audit: Option<AuditSink>,
    stop: Arc<AtomicBool>,
    deliver: impl Fn(Verdict) -> bool + Send + 'static,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let record = |kind: &str, body: Value| {
            if let Some(audit) = &audit {
                audit.record("supervisor", kind, &body);
            }
        };
        let mut asking = Asking::new(&webhook, &question, record);
        let Some(nonce) = asking.start() else { return };
        asking.poll(&stop, &deliver);
        webhook
            .used
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(nonce);
    })
}

/// One question's conversation with the webhook.
struct Asking<'a, R: Fn(&str, Value)> {
    webhook: &'a Webhook,
    question: &'a Question,
    record: R,
    issued: Option<Issued>,
    body: Vec<u8>,
    deadline: Instant,
    /// Errors and refused answers already recorded (a receiver that keeps giving the same one
    /// is recorded once, then counted).
    said: BTreeSet<String>,
    repeats: u64,
}

impl<'a, R: Fn(&str, Value)> Asking<'a, R> {
    fn new(webhook: &'a Webhook, question: &'a Question, record: R) -> Self {
        Asking {
            webhook,
            question,
            record,
            issued: None,
            body: Vec::new(),
            deadline: Instant::now() + question.deadline,
            said: BTreeSet::new(),
            repeats: 0,
        }
    }

    fn status_url(&self, nonce: &str) -> String {
        format!("{}/{nonce}", self.webhook.url)
    }

    /// The request, made and recorded; its nonce.
    fn start(&mut self) -> Option<String> {
        let nonce = match fresh_nonce() {
            Ok(nonce) => nonce,
            Err(why) => {
                (self.record)(
                    "runbook-approval-webhook-error",
                    json!({ "step": self.question.step, "error": why }),
                );
                return None;
            }
        };
        let issued_at = now_unix();
        let issued = Issued {
            nonce: nonce.clone(),
            run: self.question.run.clone(),
            step: self.question.step.clone(),
            issued_at,
            expires_at: issued_at + self.question.deadline.as_secs(),
        };
        let request = json!({
            "type": REQUEST_TYPE,
            "version": 1,
            "run": issued.run,
            "step": issued.step,
            "step_title": self.question.step_title,
            "runbook": self.question.runbook,
            "runbook_hash": self.question.runbook_hash,
            "approvers": self.question.approvers,
            "nonce": nonce,
            "issued_at": issued.issued_at,
            "expires_at": issued.expires_at,
            "status_url": self.status_url(&nonce),
        });
        self.body = serde_json::to_vec(&request).unwrap_or_default();
        (self.record)(
            "runbook-approval-webhook-request",
            json!({
                "step": issued.step,
                "url": self.webhook.url,
                "nonce": nonce,
                "issued_at": issued.issued_at,
                "expires_at": issued.expires_at,
                "request_sha256": hex::encode(Sha256::digest(&self.body)),
            }),
        );
        self.webhook
            .issued
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(issued.clone());
        self.issued = Some(issued);
        Some(nonce)
    }

    /// Records an error or a refused answer once (at most [`DISTINCT_RECORDS_MAX`] different
    /// ones a wait); later repeats are counted.
    fn say_once(&mut self, kind: &str, why: &str, body: Value) {
        if self.said.len() < DISTINCT_RECORDS_MAX && self.said.insert(format!("{kind}\n{why}")) {
            (self.record)(kind, body);
        } else {
            self.repeats += 1;
        }
    }

    /// A failed exchange with the webhook, recorded once per distinct reason.
    fn say_error(&mut self, issued: &Issued, why: &str) {
        self.say_once(
            "runbook-approval-webhook-error",
            why,
            json!({ "step": issued.step, "nonce": issued.nonce, "error": why }),
        );
    }

    /// POSTs (until it is taken) and polls until an answer counts, `stop`, or the deadline.
    fn poll(&mut self, stop: &AtomicBool, deliver: &dyn Fn(Verdict) -> bool) {
        let Some(issued) = self.issued.clone() else {
            return;
        };
        let signature = sign(&self.webhook.key, &self.body);
        let status_path = format!("{}/{}", self.webhook.target.path, issued.nonce);
        let mut posted = false;
        loop {
            if stop.load(Ordering::SeqCst) {
                break;
            }
            let left = self.deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let timeout = left.min(REQUEST_TIMEOUT);
            if !posted {
                match self.webhook.exchange(
                    "POST",
                    self.webhook.target.request_path(),
                    &[
                        ("Content-Type", "application/json"),
                        (SIGNATURE_HEADER, &signature),
                    ],
                    &self.body,
                    timeout,
                ) {
                    Ok(r) if (200..300).contains(&r.status) => {
                        posted = true;
                        (self.record)(
                            "runbook-approval-webhook-sent",
                            json!({ "step": issued.step, "nonce": issued.nonce, "status": r.status }),
                        );
                        continue;
                    }
                    Ok(r) => self.say_error(
                        &issued,
                        &format!("the webhook answered the request with {}", r.status),
                    ),
                    Err(why) => self.say_error(&issued, &why),
                }
            } else {
                match self
                    .webhook
                    .exchange("GET", &status_path, &[], b"", timeout)
                {
                    Ok(r) if r.status == 200 => match self.judge(&issued, &r) {
                        Ok(verdict) => {
                            self.webhook
                                .used
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .insert(issued.nonce.clone());
                            if !deliver(verdict) {
                                (self.record)(
                                    "runbook-approval-webhook-late",
                                    json!({ "step": issued.step, "nonce": issued.nonce, "why": "another answer came first" }),
                                );
                            }
                            break;
                        }
                        Err((why, claimed)) => {
                            let body_sha256 = hex::encode(Sha256::digest(&r.body));
                            self.say_once(
                                "runbook-approval-refused",
                                &why,
                                json!({
                                    "step": issued.step,
                                    "from": "webhook",
                                    "nonce": issued.nonce,
                                    "why": why,
                                    "answer_sha256": body_sha256,
                                    "answer_claimed": claimed,
                                }),
                            );
                        }
                    },
                    Ok(r) if matches!(r.status, 202 | 204 | 404) => {}
                    Ok(r) => {
                        self.say_error(&issued, &format!("the status URL answered {}", r.status))
                    }
                    Err(why) => self.say_error(&issued, &why),
                }
            }
            // The next poll, unless told to stop or out of time.
            let until = (Instant::now() + POLL_INTERVAL).min(self.deadline);
            while Instant::now() < until && !stop.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        if self.repeats > 0 {
            (self.record)(
                "runbook-approval-webhook-repeats",
                json!({ "step": issued.step, "nonce": issued.nonce, "repeated": self.repeats }),
            );
        }
    }

    /// A 200 from the status URL: the verdict, or why it is refused (with what it claimed, for
    /// the record).
    fn judge(&self, issued: &Issued, r: &Response) -> Result<Verdict, (String, Value)> {
        let used = self
            .webhook
            .used
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let issued_all = self
            .webhook
            .issued
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        judge_answer(
            &self.webhook.key,
            issued,
            &r.body,
            r.header(&SIGNATURE_HEADER.to_ascii_lowercase()),
            &used,
            &issued_all,
            now_unix(),
        )
    }
}

/// An answer's body and signature against the request it should answer: signed with the key,
/// naming this request's nonce (a nonce already used or another request's is a replay), run
/// and step, given before the expiry and not before the request. Refusals say why, with what
/// the answer claimed.
fn judge_answer(
    key: &ring::hmac::Key,
    issued: &Issued,
    body: &[u8],
    signature: Option<&[u8]>,
    used: &HashSet<String>,
    issued_all: &[Issued],
    now: u64,
) -> Result<Verdict, (String, Value)> {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let claimed = parsed
        .as_ref()
        .map(|v| {
            json!({
                "nonce": v["nonce"], "run": v["run"], "step": v["step"],
                "decision": v["decision"], "approver": v["approver"],
            })
        })
        .unwrap_or(Value::Null);
    let refuse = |why: String| Err((why, claimed.clone()));
    if !signature_holds(key, body, signature) {
        return refuse(match signature {
            None => format!("the answer has no {SIGNATURE_HEADER} header"),
            Some(_) => "the answer's signature does not hold (not signed with this run's key, or changed on the way)".into(),
        });
    }
    let Some(answer) = parsed else {
        return refuse("the signed answer is not JSON".into());
    };
    let text = |name: &str| answer[name].as_str().map(str::to_string);
    if answer["type"] != ANSWER_TYPE {
        return refuse(format!("the answer's type is not {ANSWER_TYPE:?}"));
    }
    let Some(nonce) = text("nonce") else {
        return refuse("the answer names no nonce".into());
    };
    if nonce != issued.nonce {
        let earlier = issued_all.iter().find(|i| i.nonce == nonce);
        return refuse(match earlier {
            Some(e) if used.contains(&nonce) => format!(
                "a replayed answer: nonce {nonce} was already used (the request for step {} of run {})",
                e.step, e.run
            ),
            Some(e) => format!(
                "an answer for another request (nonce {nonce}, step {} of run {})",
                e.step, e.run
            ),
            None if used.contains(&nonce) => {
                format!("a replayed answer: nonce {nonce} was already used")
            }
            None => format!("an answer for a nonce this run never sent ({nonce})"),
        });
    }
    if used.contains(&nonce) {
        return refuse(format!("a replayed answer: nonce {nonce} was already used"));
    }
    if text("run").as_deref() != Some(issued.run.as_str())
        || text("step").as_deref() != Some(issued.step.as_str())
    {
        return refuse(format!(
            "the answer names run {:?} step {:?}, not run {} step {}",
            answer["run"], answer["step"], issued.run, issued.step
        ));
    }
    let Some(answered_at) = answer["answered_at"].as_u64() else {
        return refuse("the answer has no answered_at (unix seconds)".into());
    };
    if answered_at > issued.expires_at || now > issued.expires_at {
        return refuse(format!(
            "a stale answer: given at {answered_at}, received at {now}, after the request's expiry {}",
            issued.expires_at
        ));
    }
    if answered_at + CLOCK_SKEW_SECONDS < issued.issued_at {
        return refuse(format!(
            "a stale answer: given at {answered_at}, before the request was issued ({})",
            issued.issued_at
        ));
    }
    let approved = match answer["decision"].as_str() {
        Some("approve") => true,
        Some("deny") => false,
        _ => return refuse("the answer's decision is not \"approve\" or \"deny\"".into()),
    };
    let short = |v: Option<String>| {
        v.map(|s| {
            s.chars()
                .filter(|c| !c.is_control())
                .take(TEXT_MAX_CHARS)
                .collect::<String>()
        })
        .filter(|s| !s.trim().is_empty())
    };
    let reason = short(text("reason"));
    let approver = short(text("approver"));
    Ok(Verdict {
        approved,
        reason: reason.clone(),
        approver: approver.clone(),
        detail: json!({
            "from": "webhook",
            "nonce": nonce,
            "approver": approver,
            "answered_at": answered_at,
            "expires_at": issued.expires_at,
            "answer_sha256": hex::encode(Sha256::digest(body)),
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(text: &str) -> ring::hmac::Key {
        ring::hmac::Key::new(ring::hmac::HMAC_SHA256, text.as_bytes())
    }

    fn issued(nonce: &str, step: &str) -> Issued {
        Issued {
            nonce: nonce.into(),
            run: "run-1".into(),
            step: step.into(),
            issued_at: 1000,
            expires_at: 2000,
        }
    }

    fn answer(nonce: &str, step: &str, decision: &str, at: u64) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "type": ANSWER_TYPE, "version": 1, "nonce": nonce, "run": "run-1", "step": step,
            "decision": decision, "reason": "looks fine", "approver": "alice@example.com",
            "answered_at": at,
        }))
        .unwrap()
    }

    #[test]
    fn signatures_are_hmac_sha256_of_the_exact_body() {
        let k = key("k");
        // The well-known example value (Wikipedia's HMAC page).
        assert_eq!(
            sign(&key("key"), b"The quick brown fox jumps over the lazy dog"),
            "sha256=f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8"
        );
        let good = sign(&k, b"body");
        assert!(signature_holds(&k, b"body", Some(good.as_bytes())));
        assert!(!signature_holds(&k, b"body ", Some(good.as_bytes())));
        assert!(!signature_holds(
            &key("other"),
            b"body",
            Some(good.as_bytes())
        ));
        assert!(!signature_holds(
            &k,
            b"body",
            Some(good.trim_start_matches("sha256=").as_bytes())
        ));
        assert!(!signature_holds(&k, b"body", Some(b"sha256=zz")));
        assert!(!signature_holds(&k, b"body", None));
    }

    #[test]
    fn an_answer_must_be_signed_fresh_and_for_this_request() {
        let k = key("k");
        let mine = issued("n2", "gate");
        let all = vec![issued("n1", "first"), mine.clone()];
        let used: HashSet<String> = ["n1".to_string()].into();
        let judge = |body: &[u8], sig: Option<&str>, now: u64| {
            judge_answer(&k, &mine, body, sig.map(str::as_bytes), &used, &all, now)
        };
        // Why an answer signed with the right key is refused.
        let refused =
            |body: &[u8], now: u64| judge(body, Some(&sign(&k, body)), now).unwrap_err().0;
        let good = answer("n2", "gate", "approve", 1500);
        let verdict = judge(&good, Some(&sign(&k, &good)), 1500).unwrap();
        assert!(verdict.approved);
        assert_eq!(verdict.approver.as_deref(), Some("alice@example.com"));
        let deny = answer("n2", "gate", "deny", 1500);
        assert!(!judge(&deny, Some(&sign(&k, &deny)), 1500).unwrap().approved);
        // Unsigned, signed with another key, changed after signing.
        assert!(
            judge(&good, None, 1500)
                .unwrap_err()
                .0
                .contains("no X-StepProof")
        );
        assert!(
            judge(&good, Some(&sign(&key("x"), &good)), 1500)
                .unwrap_err()
                .0
                .contains("signature does not hold")
        );
        let mut changed = good.clone();
        changed.push(b' ');
        assert!(judge(&changed, Some(&sign(&k, &good)), 1500).is_err());
        // A valid answer to an earlier request, replayed.
        let replay = answer("n1", "first", "approve", 1100);
        let why = refused(&replay, 1500);
        assert!(
            why.contains("replayed") && why.contains("step first"),
            "{why}"
        );
        let unknown = answer("n9", "gate", "approve", 1500);
        assert!(refused(&unknown, 1500).contains("never sent"));
        // Right nonce, wrong step.
        let other = answer("n2", "first", "approve", 1500);
        assert!(refused(&other, 1500).contains("names run"));
        // Stale both ways, and received after the expiry.
        let late = answer("n2", "gate", "approve", 2001);
        assert!(refused(&late, 1500).contains("stale"));
        assert!(refused(&good, 2001).contains("stale"));
        let early = answer("n2", "gate", "approve", 600);
        assert!(refused(&early, 1500).contains("before the request"));
        let odd = answer("n2", "gate", "maybe", 1500);
        assert!(refused(&odd, 1500).contains("decision"));
        // This request's own nonce, once used, is a replay too.
        let used_mine: HashSet<String> = ["n2".to_string()].into();
        assert!(
            judge_answer(
                &k,
                &mine,
                &good,
                Some(sign(&k, &good).as_bytes()),
                &used_mine,
                &all,
                1500
            )
            .unwrap_err()
            .0
            .contains("replayed")
        );
    }
}
