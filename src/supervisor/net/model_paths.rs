//! Which requests the credential gateway sends with the real model login: the model API's, and
//! nothing else. The login (a claude.ai login's OAuth token, an API key) is also the key to the
//! account — its profile, its organisation, its API keys (`POST
//! /api/oauth/claude_cli/create_api_key` mints one), its files, its billing — and an endpoint
//! that echoes or mints a credential would hand the agent something worth more than the
//! placeholder. So the gateway adds the login only to the paths of [`PATHS`] classed
//! [`PathClass::Model`] (and to those a profile outside the workspace adds with
//! `network.gateway.login_paths`); every other request gets 403 and a record that says why.
//!
//! A path is classified as it is forwarded, and only when it is spelt plainly ([`plain_path`]):
//! segments of letters, digits and `-._~`, no empty, `.` or `..` segment, no percent-encoding,
//! no `;` parameters, no backslash. Anything else is refused rather than normalised, so that no
//! reading of the path upstream can differ from the one judged here. The query never changes
//! the class (`/v1/messages?beta=true` is `/v1/messages`). Letter case is compared exactly:
//! `/V1/messages` is not the model API's path, and is refused.
//!
//! The table was made from the paths Claude Code 2.1.328 names (the binary's string literals)
//! and what it was seen to request through the gateway: at an interactive start with a
//! claude.ai login, idle, and in a session, only `POST /v1/messages?beta=true`. Its account
//! endpoints (the profile, `/api/hello`) are addressed to `https://api.anthropic.com` itself
//! (its `BASE_API_URL`), not to its base URL, and were not called with the placeholder login.

use crate::profile::login_paths::{LoginPath, is_plain_segment, pattern_matches};
use std::fmt;

/// What a path is to the gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathClass {
    /// The model API: what a session needs to talk to the model. The login is added.
    Model,
    /// The account: profile, organisation, API keys, usage, billing, settings, consents. Refused.
    Account,
    /// Anything else (files and batches stored on the account, remote sessions, agents,
    /// telemetry, probes). Refused.
    Other,
}

impl fmt::Display for PathClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PathClass::Model => "model",
            PathClass::Account => "account",
            PathClass::Other => "other",
        })
    }
}

/// One row of the table: a method (`*`: any), a pattern (`*`: one segment, a last `**`: any
/// number of further segments), the class, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathRule {
    pub method: &'static str,
    pub pattern: &'static str,
    pub class: PathClass,
    pub why: &'static str,
}

const fn rule(
    method: &'static str,
    pattern: &'static str,
    class: PathClass,
    why: &'static str,
) -> PathRule {
    PathRule {
        method,
        pattern,
        class,
        why,
    }
}

use PathClass::{Account, Model, Other};

/// The paths Claude Code 2.1.328 names, classified; the first row that fits decides. A path
/// no row names is [`PathClass::Other`].
///
/// | method | path | class | why |
/// | --- | --- | --- | --- |
/// | POST | `/v1/messages` | model | a turn of the conversation (streaming, `?beta=true`) |
/// | POST | `/v1/messages/count_tokens` | model | the context's size in tokens |
/// | POST | `/v1/messages/cache_touch` | model | keeps this session's prompt cache warm |
/// | GET | `/v1/models`, `/v1/models/*` | model | the models the login may use |
/// | any | `/v1/messages/batches/**` | other | batch jobs kept on the account after the run |
/// | any | `/v1/files/**` | other | files kept on the account (read or written across runs) |
/// | any | `/api/oauth/**`, `/v1/oauth/**`, `/v1/token` | account | the login and the account: profile, usage, settings, API keys, organisations, billing, tokens |
/// | any | `/api/claude_code/**`, `/api/claude_code_*`, `/api/claude_cli_*` | account | Claude Code's account services (server-managed settings are answered by the supervisor itself) |
/// | any | `/api/organizations/**`, `/api/organization/**`, `/v1/organizations/**` | account | the organisation and the Admin API |
/// | any | `/v1/me`, `/v1/user_profiles/**`, `/v1/privacy-consents/**` | account | who the login is, its consents |
/// | any | everything else (`/v1/complete`, `/v1/skills`, `/v1/sessions`, `/v1/code`, `/v1/agents`, `/api/hello`, `/api/event_logging`, …) | other | not needed for the model in a session |
pub const PATHS: &[PathRule] = &[
    rule("POST", "/v1/messages", Model, "a turn of the conversation"),
    rule(
        "POST",
        "/v1/messages/count_tokens",
        Model,
        "the context's size in tokens",
    ),
    rule(
        "POST",
        "/v1/messages/cache_touch",
        Model,
        "keeps this session's prompt cache warm",
    ),
    rule("GET", "/v1/models", Model, "the models the login may use"),
    rule("GET", "/v1/models/*", Model, "one model's details"),
    rule(
        "*",
        "/v1/messages/batches/**",
        Other,
        "batch jobs are kept on the account after the run",
    ),
    rule(
        "*",
        "/v1/files/**",
        Other,
        "files are kept on the account, read and written across runs",
    ),
    rule("*", "/api/oauth/**", Account, "the login and the account"),
    rule("*", "/v1/oauth/**", Account, "the login's tokens"),
    rule("*", "/v1/token", Account, "the login's tokens"),
    rule(
        "*",
        "/api/claude_code/**",
        Account,
        "Claude Code's account services",
    ),
    rule(
        "*",
        "/api/claude_code_grove",
        Account,
        "Claude Code's account services",
    ),
    rule(
        "*",
        "/api/claude_code_shared_session_transcripts",
        Account,
        "Claude Code's account services",
    ),
    rule(
        "*",
        "/api/claude_cli_feedback",
        Account,
        "Claude Code's account services",
    ),
    rule("*", "/api/organizations/**", Account, "the organisation"),
    rule("*", "/api/organization/**", Account, "the organisation"),
    rule(
        "*",
        "/v1/organizations/**",
        Account,
        "the organisation (Admin API)",
    ),
    rule("*", "/v1/me", Account, "who the login is"),
    rule("*", "/v1/user_profiles/**", Account, "who the login is"),
    rule(
        "*",
        "/v1/privacy-consents/**",
        Account,
        "the account's consents",
    ),
];

/// What the gateway does with a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// A model API path of [`PATHS`]: forwarded with the login.
    Model(&'static PathRule),
    /// A path the profile adds (`network.gateway.login_paths`): forwarded with the login.
    Added(LoginPath),
    /// Refused: its class, and the row that named it (`None`: no row did).
    Refused(PathClass, Option<&'static PathRule>),
}

/// The class of `method` `path` (a plain path without its query, see [`plain_path`]), with the
/// paths a profile added.
pub fn classify(method: &str, path: &str, added: &[LoginPath]) -> Verdict {
    let row = PATHS
        .iter()
        .find(|r| (r.method == "*" || r.method == method) && pattern_matches(r.pattern, path));
    if let Some(row) = row
        && row.class == Model
    {
        return Verdict::Model(row);
    }
    if let Some(entry) = added.iter().find(|p| p.matches(method, path)) {
        return Verdict::Added(entry.clone());
    }
    Verdict::Refused(row.map_or(Other, |r| r.class), row)
}

/// The model API's rows, as `METHOD /path` (for `explain` and messages).
pub fn model_paths() -> Vec<String> {
    PATHS
        .iter()
        .filter(|r| r.class == Model)
        .map(|r| format!("{} {}", r.method, r.pattern))
        .collect()
}

/// A request target's path and query, if the path is spelt plainly: `/`, or segments each made
/// of letters, digits and `-._~` (none empty, `.` or `..`); the query (after the first `?`) of
/// visible ASCII; no fragment. The error says what is not plain.
pub fn plain_path(target: &str) -> Result<(&str, Option<&str>), String> {
    let (path, query) = match target.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (target, None),
    };
    if target.contains('#') {
        return Err("it has a fragment (`#`)".into());
    }
    if let Some(query) = query
        && !query.bytes().all(|b| b.is_ascii_graphic())
    {
        return Err("its query holds characters other than visible ASCII".into());
    }
    let Some(rest) = path.strip_prefix('/') else {
        return Err("it does not start with `/`".into());
    };
    if rest.is_empty() {
        return Ok((path, query));
    }
    for segment in rest.split('/') {
        if is_plain_segment(segment) {
            continue;
        }
        return Err(match segment {
            "" => "it has an empty segment (`//`, or a `/` at its end)".into(),
            "." | ".." => "it has a `.` or `..` segment".into(),
            s if s.contains('%') => "it is percent-encoded".into(),
            s if s.contains(';') => "it has a `;` parameter".into(),
            _ => "a segment holds characters other than letters, digits and `-._~`".into(),
        });
    }
    Ok((path, query))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(method: &str, target: &str) -> Result<PathClass, String> {
        let (path, _) = plain_path(target)?;
        Ok(match classify(method, path, &[]) {
            Verdict::Model(_) => Model,
            Verdict::Added(_) => unreachable!(),
            Verdict::Refused(class, _) => class,
        })
    }

    #[test]
    fn only_the_model_api_is_model() {
        for (method, target) in [
            ("POST", "/v1/messages?beta=true"),
            ("POST", "/v1/messages"),
            ("POST", "/v1/messages/count_tokens?beta=true"),
            ("POST", "/v1/messages/cache_touch"),
            ("GET", "/v1/models"),
            ("GET", "/v1/models?limit=1000"),
            ("GET", "/v1/models/claude-sonnet-4-5-20250929"),
        ] {
            assert_eq!(class(method, target), Ok(Model), "{method} {target}");
        }
        for (method, target, expected) in [
            ("POST", "/api/oauth/claude_cli/create_api_key", Account),
            ("GET", "/api/oauth/profile", Account),
            ("GET", "/api/oauth/usage", Account),
            ("GET", "/api/claude_code/settings", Account),
            ("GET", "/api/claude_code/policy_limits", Account),
            ("POST", "/api/claude_cli_feedback", Account),
            ("GET", "/v1/organizations/api_keys", Account),
            (
                "GET",
                "/api/organizations/x/claude_code/onboarding",
                Account,
            ),
            ("POST", "/v1/oauth/token", Account),
            ("GET", "/v1/me", Account),
            ("POST", "/v1/files", Other),
            ("GET", "/v1/files/file_1/content", Other),
            ("POST", "/v1/messages/batches", Other),
            ("GET", "/v1/messages/batches/b1/results", Other),
            ("POST", "/v1/complete", Other),
            ("HEAD", "/api/hello", Other),
            ("GET", "/", Other),
            // Another method on a model path is not the model API.
            ("GET", "/v1/messages", Other),
            ("DELETE", "/v1/models/x", Other),
            ("post", "/v1/messages", Other),
            // Letter case is compared exactly.
            ("POST", "/V1/messages", Other),
            ("POST", "/v1/Messages", Other),
            ("GET", "/API/OAUTH/profile", Other),
            // The query never changes the class.
            (
                "POST",
                "/api/oauth/claude_cli/create_api_key?x=/v1/messages",
                Account,
            ),
            ("GET", "/v1/models/a/b", Other),
        ] {
            assert_eq!(class(method, target), Ok(expected), "{method} {target}");
        }
    }

    #[test]
    fn spelling_tricks_are_refused_not_normalised() {
        for target in [
            "//v1/messages",
            "/v1//messages",
            "/v1/messages/",
            "/v1/messages/../../api/oauth/claude_cli/create_api_key",
            "/v1/messages/./count_tokens",
            "/v1/messages/%2e%2e/%2e%2e/api/oauth/profile",
            "/v1/%6dessages",
            "/v1/messages;x",
            "/v1/messages;/../api/oauth/profile",
            "/v1\\messages",
            "/v1/messages#x",
            "v1/messages",
            "",
            "*",
        ] {
            assert!(plain_path(target).is_err(), "{target:?}");
        }
        assert_eq!(
            plain_path("/v1/messages?beta=true"),
            Ok(("/v1/messages", Some("beta=true")))
        );
        assert_eq!(plain_path("/"), Ok(("/", None)));
    }

    #[test]
    fn added_paths_get_the_login_and_nothing_more() {
        let added = vec![
            LoginPath::parse("GET /api/oauth/usage").unwrap(),
            LoginPath::parse("POST /v1/files").unwrap(),
        ];
        assert!(matches!(
            classify("GET", "/api/oauth/usage", &added),
            Verdict::Added(p) if p.to_string() == "GET /api/oauth/usage"
        ));
        assert!(matches!(
            classify("POST", "/v1/files", &added),
            Verdict::Added(_)
        ));
        assert!(matches!(
            classify("POST", "/api/oauth/usage", &added),
            Verdict::Refused(Account, Some(_))
        ));
        assert!(matches!(
            classify("GET", "/v1/files/f/content", &added),
            Verdict::Refused(Other, Some(_))
        ));
        assert!(matches!(
            classify("POST", "/v1/messages", &added),
            Verdict::Model(_)
        ));
    }

    #[test]
    fn every_path_claude_code_names_has_a_class() {
        // A sample of 2.1.328's literals: the account's are account, none is model by accident.
        for path in [
            "/api/oauth/account/settings",
            "/api/oauth/organizations/o/plugins/list-plugins",
            "/api/claude_code/organizations/metrics_enabled",
            "/api/claude_code_grove",
            "/api/organization/claude_code_first_token_date",
            "/v1/organizations/workspaces/w/members/u",
        ] {
            assert_eq!(class("GET", path), Ok(Account), "{path}");
        }
        for path in [
            "/v1/skills",
            "/v1/sessions/s/events",
            "/v1/code/sessions",
            "/api/event_logging/v2/batch",
            "/v1/agents",
        ] {
            assert_eq!(class("POST", path), Ok(Other), "{path}");
        }
        assert_eq!(
            model_paths(),
            [
                "POST /v1/messages",
                "POST /v1/messages/count_tokens",
                "POST /v1/messages/cache_touch",
                "GET /v1/models",
                "GET /v1/models/*"
            ]
        );
    }
}
