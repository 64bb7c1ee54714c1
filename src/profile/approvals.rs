//! `[approvals]`: where a runbook's approval steps are also asked — a webhook the person running
//! StepProof names, never the runbook and never a file that may have come with a checkout. The
//! URL and the HMAC key come from `stepproof-run`'s own environment
//! ([`WEBHOOK_VAR`], [`KEY_VAR`] or [`KEY_FILE_VAR`]) or from the user's profile; the supervisor
//! refuses a profile chain with a file inside the workspace that names one.

use super::credentials::{SourceSpec, parse_source};
use serde::{Deserialize, Serialize};

/// `stepproof-run`'s environment: the webhook's URL (`https://…`).
pub const WEBHOOK_VAR: &str = "STEPPROOF_APPROVAL_WEBHOOK";
/// `stepproof-run`'s environment: the HMAC key itself.
pub const KEY_VAR: &str = "STEPPROOF_APPROVAL_HMAC_KEY";
/// `stepproof-run`'s environment: a file holding the HMAC key (outside the workspace).
pub const KEY_FILE_VAR: &str = "STEPPROOF_APPROVAL_HMAC_KEY_FILE";
/// Variables with this prefix never enter a sandbox, whatever a profile's `process.env` says.
pub const VARIABLE_PREFIX: &str = "STEPPROOF_APPROVAL_";

/// `[approvals]` as a profile file writes it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ApprovalsFile {
    pub webhook: Option<String>,
    pub hmac_key: Option<String>,
}

/// The profile's approval webhook, checked: an `https://` URL and where its key is read
/// (`env:NAME`, `file:PATH` outside the workspace, or `command:PROGRAM ARG…`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ApprovalWebhook {
    pub webhook: String,
    pub hmac_key: String,
}

impl ApprovalWebhook {
    pub fn key_source(&self) -> SourceSpec {
        parse_source(&self.hmac_key).expect("the key source is checked when the profile loads")
    }
}

/// Merges two layers: a child's `[approvals]` replaces its parent's whole (a URL must never be
/// paired with another file's key).
pub(super) fn merge(
    base: Option<ApprovalsFile>,
    child: Option<ApprovalsFile>,
) -> Option<ApprovalsFile> {
    child.or(base)
}

/// Checks the merged `[approvals]`; each problem starts with the setting's dotted name.
pub(super) fn resolve(file: Option<ApprovalsFile>) -> Result<Option<ApprovalWebhook>, String> {
    let Some(file) = file else { return Ok(None) };
    let (webhook, hmac_key) = match (file.webhook, file.hmac_key) {
        (None, None) => return Ok(None),
        (Some(_), None) => {
            return Err(
                "approvals.webhook: set approvals.hmac_key too (\"env:NAME\", \"file:~/…\" or \"command:…\"): every request and answer is signed with it".into(),
            );
        }
        (None, Some(_)) => {
            return Err("approvals.hmac_key: set approvals.webhook too (an https:// URL)".into());
        }
        (Some(w), Some(k)) => (w, k),
    };
    check_url(&webhook).map_err(|why| format!("approvals.webhook = {webhook:?}: {why}"))?;
    parse_source(&hmac_key).map_err(|why| format!("approvals.hmac_key: {why}"))?;
    Ok(Some(ApprovalWebhook { webhook, hmac_key }))
}

/// An approval webhook's URL: `https://host[:port][/path]`, nothing else. `http://` is refused:
/// the answer opens a step, and the request names the run.
pub fn check_url(url: &str) -> Result<(), String> {
    let lower = url.to_ascii_lowercase();
    if lower.starts_with("http://") {
        return Err(
            "http:// is refused: an approval webhook must be https:// (the answer opens a step; the server's certificate is verified)".into(),
        );
    }
    let Some(rest) = lower.strip_prefix("https://") else {
        return Err("not an https:// URL".into());
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.is_empty() {
        return Err("the URL names no host".into());
    }
    if authority.contains('@') {
        return Err("user information in the URL is refused (the key signs the requests)".into());
    }
    if rest.contains(['?', '#']) {
        return Err(
            "a query or fragment is refused: the status URL is the URL, `/`, the nonce".into(),
        );
    }
    if url.bytes().any(|b| !b.is_ascii_graphic()) {
        return Err("the URL holds spaces or control characters".into());
    }
    Ok(())
}

/// Where the run's webhook came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WebhookOrigin {
    /// `stepproof-run`'s environment.
    Environment,
    /// The profile (its files are in `Profile::files`).
    Profile,
}

/// The webhook a run uses, before its key is read: `stepproof-run`'s environment wins over the
/// profile; the environment must name both the URL and one key variable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookSetting {
    pub url: String,
    pub key: SourceSpec,
    pub origin: WebhookOrigin,
}

/// The webhook for a run from the caller's environment and the profile; `None` when neither
/// names one. Refused: a half-set environment, two key variables, an `http://` URL.
pub fn setting(
    profile: Option<&ApprovalWebhook>,
    env: &[(String, String)],
) -> Result<Option<WebhookSetting>, String> {
    let var = |name: &str| {
        env.iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .filter(|v| !v.is_empty())
    };
    let (url, key, key_file) = (var(WEBHOOK_VAR), var(KEY_VAR), var(KEY_FILE_VAR));
    if url.is_none() && key.is_none() && key_file.is_none() {
        return Ok(profile.map(|p| WebhookSetting {
            url: p.webhook.clone(),
            key: p.key_source(),
            origin: WebhookOrigin::Profile,
        }));
    }
    let Some(url) = url else {
        return Err(format!(
            "{} is set but {WEBHOOK_VAR} is not: set the webhook's https:// URL too",
            if key.is_some() { KEY_VAR } else { KEY_FILE_VAR }
        ));
    };
    check_url(&url).map_err(|why| format!("{WEBHOOK_VAR}={url:?}: {why}"))?;
    let key = match (key, key_file) {
        (Some(_), Some(_)) => {
            return Err(format!(
                "both {KEY_VAR} and {KEY_FILE_VAR} are set: set one"
            ));
        }
        (None, None) => {
            return Err(format!(
                "{WEBHOOK_VAR} is set but neither {KEY_VAR} nor {KEY_FILE_VAR} is: requests and answers are signed with that key"
            ));
        }
        (Some(_), None) => SourceSpec::Env(KEY_VAR.into()),
        (None, Some(path)) => {
            let spec = super::PathSpec::parse(&path).map_err(|e| format!("{KEY_FILE_VAR}: {e}"))?;
            if matches!(spec, super::PathSpec::Workspace(_)) {
                return Err(format!(
                    "{KEY_FILE_VAR}={path:?}: give an absolute path (or `~/…`) outside the workspace"
                ));
            }
            SourceSpec::File(spec)
        }
    };
    Ok(Some(WebhookSetting {
        url,
        key,
        origin: WebhookOrigin::Environment,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn urls_must_be_https() {
        assert!(check_url("https://approvals.example.com/stepproof").is_ok());
        assert!(check_url("HTTPS://a.example:8443").is_ok());
        let http = check_url("http://approvals.example.com").unwrap_err();
        assert!(http.contains("http:// is refused"), "{http}");
        for bad in [
            "ftp://x",
            "https://",
            "https://u:p@x.example/",
            "https://x.example/?a=1",
            "https://x.example/a b",
            "approvals.example.com",
        ] {
            assert!(check_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn profile_sections_are_complete_or_refused() {
        assert_eq!(resolve(None).unwrap(), None);
        assert!(
            resolve(Some(ApprovalsFile {
                webhook: Some("https://a.example".into()),
                hmac_key: None
            }))
            .unwrap_err()
            .contains("hmac_key")
        );
        assert!(
            resolve(Some(ApprovalsFile {
                webhook: Some("http://a.example".into()),
                hmac_key: Some("env:K".into())
            }))
            .unwrap_err()
            .starts_with("approvals.webhook")
        );
        assert!(
            resolve(Some(ApprovalsFile {
                webhook: Some("https://a.example".into()),
                hmac_key: Some("file:key".into())
            }))
            .unwrap_err()
            .contains("outside the workspace")
        );
        let ok = resolve(Some(ApprovalsFile {
            webhook: Some("https://a.example".into()),
            hmac_key: Some("file:~/.config/k".into()),
        }))
        .unwrap()
        .unwrap();
        assert_eq!(ok.key_source().kind(), "file");
    }

    #[test]
    fn the_environment_wins_and_must_be_whole() {
        let profile = ApprovalWebhook {
            webhook: "https://p.example".into(),
            hmac_key: "env:P".into(),
        };
        let from_profile = setting(Some(&profile), &env(&[])).unwrap().unwrap();
        assert_eq!(from_profile.origin, WebhookOrigin::Profile);
        assert_eq!(from_profile.url, "https://p.example");
        let from_env = setting(
            Some(&profile),
            &env(&[(WEBHOOK_VAR, "https://e.example/h"), (KEY_VAR, "k")]),
        )
        .unwrap()
        .unwrap();
        assert_eq!(from_env.origin, WebhookOrigin::Environment);
        assert_eq!(from_env.key, SourceSpec::Env(KEY_VAR.into()));
        for bad in [
            env(&[(KEY_VAR, "k")]),
            env(&[(WEBHOOK_VAR, "https://e.example")]),
            env(&[(WEBHOOK_VAR, "http://e.example"), (KEY_VAR, "k")]),
            env(&[
                (WEBHOOK_VAR, "https://e.example"),
                (KEY_VAR, "k"),
                (KEY_FILE_VAR, "/k"),
            ]),
            env(&[(WEBHOOK_VAR, "https://e.example"), (KEY_FILE_VAR, "k")]),
        ] {
            assert!(setting(None, &bad).is_err(), "{bad:?}");
        }
        assert_eq!(setting(None, &env(&[])).unwrap(), None);
    }
}
