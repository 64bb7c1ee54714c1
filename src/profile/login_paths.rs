//! `network.gateway.login_paths`: requests beyond the model API's own that the credential
//! gateway sends with the real model login (`"GET /api/oauth/usage"`, `"POST /v1/files"`). Each
//! entry is a method and a path pattern of plain segments, where `*` stands for exactly one
//! segment (`"GET /v1/files/*/content"`). The gateway's own table of Claude Code's paths, and
//! why only the model API's get the login, is `supervisor::net::model_paths`.
//!
//! Adding a path lends the agent the user's login for it: honoured only from a profile file
//! outside the workspace (see `sandbox::plan`), like the budgets and the gateway's upstream.

use serde::{Serialize, Serializer};
use std::fmt;

/// The methods an entry may name (upper-case, as HTTP spells them).
pub const METHODS: &[&str] = &["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"];

/// One entry: a method and a pattern (`/seg/*/seg`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LoginPath {
    pub method: String,
    pub pattern: String,
}

impl LoginPath {
    /// `"METHOD /path"`; the error says what is wrong with it.
    pub fn parse(text: &str) -> Result<LoginPath, String> {
        let (method, pattern) = text
            .trim()
            .split_once(' ')
            .ok_or("expected \"METHOD /path\", e.g. \"GET /api/oauth/usage\"")?;
        let pattern = pattern.trim();
        if !METHODS.contains(&method) {
            return Err(format!(
                "the method {method:?} is not one of {} (upper-case)",
                METHODS.join(", ")
            ));
        }
        if pattern.contains(['?', '#']) {
            return Err(
                "a path without a query: the query never changes which paths get the login".into(),
            );
        }
        let rest = pattern
            .strip_prefix('/')
            .ok_or("the path must start with `/`")?;
        for segment in rest.split('/') {
            if segment == "**" {
                return Err("`**` is not allowed: `*` stands for exactly one segment".into());
            }
            if segment != "*" && !is_plain_segment(segment) {
                return Err(format!(
                    "the segment {segment:?} is not plain: segments are non-empty, made of letters, digits and `-._~` (not `.` or `..`), or `*` for any one segment"
                ));
            }
        }
        Ok(LoginPath {
            method: method.to_owned(),
            pattern: pattern.to_owned(),
        })
    }

    /// Whether a request of `method` for `path` (plainly spelt, without its query) is this
    /// entry's.
    pub fn matches(&self, method: &str, path: &str) -> bool {
        self.method == method && pattern_matches(&self.pattern, path)
    }
}

impl fmt::Display for LoginPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.method, self.pattern)
    }
}

impl Serialize for LoginPath {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A segment of a plainly spelt path: non-empty, letters, digits and `-._~` only, and not `.`
/// or `..` (no percent-encoding, no `;` parameters, no backslash: nothing another parser could
/// read as a different path).
pub fn is_plain_segment(segment: &str) -> bool {
    !segment.is_empty()
        && segment != "."
        && segment != ".."
        && segment
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'))
}

/// Whether `path` (`/a/b/c`) fits `pattern`, segment by segment: `*` is any one segment, a last
/// `**` any number of further segments (none included); every other segment is compared
/// exactly (letter case included).
pub fn pattern_matches(pattern: &str, path: &str) -> bool {
    let (Some(pattern), Some(path)) = (pattern.strip_prefix('/'), path.strip_prefix('/')) else {
        return false;
    };
    let mut wanted = pattern.split('/');
    let mut got = path.split('/');
    loop {
        match (wanted.next(), got.next()) {
            (Some("**"), _) => return wanted.next().is_none(),
            (Some("*"), Some(_)) => {}
            (Some(w), Some(g)) if w == g => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_a_method_and_plain_segments() {
        let usage = LoginPath::parse("GET /api/oauth/usage").unwrap();
        assert_eq!(usage.to_string(), "GET /api/oauth/usage");
        assert!(usage.matches("GET", "/api/oauth/usage"));
        assert!(!usage.matches("POST", "/api/oauth/usage"));
        assert!(!usage.matches("GET", "/api/oauth/usage/x"));
        let content = LoginPath::parse("GET /v1/files/*/content").unwrap();
        assert!(content.matches("GET", "/v1/files/file_011/content"));
        assert!(!content.matches("GET", "/v1/files/content"));
        for bad in [
            "get /v1/files",
            "POST v1/files",
            "POST /v1//files",
            "POST /v1/files/",
            "POST /v1/files?x=1",
            "POST /v1/%2e%2e/files",
            "POST /v1/../api",
            "POST /v1/files;x",
            "POST /v1/**",
            "CONNECT /v1/files",
            "/v1/files",
        ] {
            assert!(LoginPath::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn patterns_match_segment_by_segment() {
        assert!(pattern_matches("/v1/models/*", "/v1/models/claude-x"));
        assert!(!pattern_matches("/v1/models/*", "/v1/models"));
        assert!(!pattern_matches("/v1/models/*", "/v1/models/a/b"));
        assert!(pattern_matches("/api/oauth/**", "/api/oauth"));
        assert!(pattern_matches("/api/oauth/**", "/api/oauth/a/b"));
        assert!(!pattern_matches("/api/oauth/**", "/api/oauthx"));
        assert!(!pattern_matches("/v1/messages", "/V1/messages"));
        assert!(!pattern_matches("/v1/messages", "v1/messages"));
    }
}
