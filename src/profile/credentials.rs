//! `[[network.credentials]]`: a service credential the supervisor's proxy adds at the boundary.
//! Each rule names the host, the path prefixes and methods it covers, where the secret comes from
//! (`env:`, `file:`, `command:`, all read outside the sandbox) and how it is sent (a header, or
//! basic auth for git). Inside, tools see a placeholder; the real value never enters the sandbox.

use super::PathSpec;
use super::allow::{Host, host::parse_authority};
use serde::{Deserialize, Serialize};

/// The port a credential rule's host has when it names none (HTTPS).
pub const DEFAULT_CREDENTIAL_PORT: u16 = 443;

/// One credential rule as a profile writes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CredentialRule {
    /// A short name for records and messages: lower-case letters, digits and `-`.
    pub name: String,
    /// `name` or `name:port` (443 unless named), or an IP literal; no wildcards. The proxy
    /// terminates TLS for this host (and only for hosts with a rule), and allows it.
    pub host: String,
    /// Path prefixes the credential is sent to (`/OWNER/REPO.git/`; `/` for the whole host).
    pub paths: Vec<String>,
    /// The methods it is sent with (`GET`, `POST`, …); every method when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub methods: Option<Vec<String>>,
    /// `env:NAME` (stepproof-run's environment), `file:PATH` (read outside the sandbox, and
    /// hidden inside), or `command:PROGRAM ARG…` (run outside at launch, words split at spaces,
    /// no shell; its standard output, trimmed, is the secret).
    pub source: String,
    /// Sent as this header (`Authorization`), formatted by `format`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
    /// The header's value, `{}` standing for the secret (`Bearer {}`); `{}` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    /// Sent as basic auth (`Authorization: Basic …`) with this user name and the secret as the
    /// password (git over HTTPS: `x-access-token` for GitHub).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic: Option<String>,
    /// A variable set inside to the placeholder (`GH_TOKEN`), for tools that want a token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placeholder_env: Option<String>,
    /// Git's credential helper answers for `https://host` with the basic user and the
    /// placeholder (needs `basic`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub git: bool,
    /// PEM roots to trust for this host instead of the public web roots (a corporate or test CA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathSpec>,
}

/// Where a secret comes from, as the profile says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceSpec {
    Env(String),
    File(PathSpec),
    /// Program and arguments, run without a shell.
    Command(Vec<String>),
}

impl SourceSpec {
    /// `env`, `file` or `command`: what `explain` and records say about a source.
    pub fn kind(&self) -> &'static str {
        match self {
            SourceSpec::Env(_) => "env",
            SourceSpec::File(_) => "file",
            SourceSpec::Command(_) => "command",
        }
    }

    /// The source without its value: the variable, the path, the program.
    pub fn describe(&self) -> String {
        match self {
            SourceSpec::Env(name) => format!("env:{name}"),
            SourceSpec::File(path) => format!("file:{path}"),
            SourceSpec::Command(argv) => format!("command:{}", argv.join(" ")),
        }
    }
}

/// How the secret is sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Injection {
    /// `name: format` with `{}` replaced by the secret.
    Header { name: String, format: String },
    /// `Authorization: Basic base64(user:secret)`.
    Basic { user: String },
}

impl Injection {
    /// The header it sets (lower-case), which the proxy removes from the client's request.
    pub fn header_name(&self) -> String {
        match self {
            Injection::Header { name, .. } => name.to_ascii_lowercase(),
            Injection::Basic { .. } => "authorization".into(),
        }
    }
}

impl CredentialRule {
    /// The rule's host and port (checked when the profile loads).
    pub fn host_port(&self) -> (Host, u16) {
        parse_authority(&self.host, Some(DEFAULT_CREDENTIAL_PORT))
            .expect("credential hosts are checked when the profile loads")
    }

    pub fn source_spec(&self) -> SourceSpec {
        parse_source(&self.source).expect("credential sources are checked when the profile loads")
    }

    pub fn injection(&self) -> Injection {
        match (&self.header, &self.basic) {
            (Some(name), _) => Injection::Header {
                name: name.clone(),
                format: self.format.clone().unwrap_or_else(|| "{}".into()),
            },
            (None, Some(user)) => Injection::Basic { user: user.clone() },
            (None, None) => unreachable!("checked when the profile loads"),
        }
    }

    /// Whether a request with this method and origin-form target is in the rule's scope: the
    /// method is listed (or any is), and the path starts with a listed prefix and has nothing a
    /// server might read as another path (`.` or `..` segments, encoded `.`, `/` or `\`).
    pub fn covers(&self, method: &str, target: &str) -> bool {
        if let Some(methods) = &self.methods
            && !methods.iter().any(|m| m == method)
        {
            return false;
        }
        let path = target.split(['?', '#']).next().unwrap_or_default();
        if !path.starts_with('/') || !plain_path(path) {
            return false;
        }
        self.paths.iter().any(|prefix| path.starts_with(prefix))
    }
}

/// A path with no segment a server could resolve elsewhere: no `.` or `..` segment, no `\`, no
/// percent-encoded `.`, `/` or `\`, no control characters.
fn plain_path(path: &str) -> bool {
    let lower = path.to_ascii_lowercase();
    if lower.contains("%2e") || lower.contains("%2f") || lower.contains("%5c") {
        return false;
    }
    if path
        .bytes()
        .any(|b| b == b'\\' || b.is_ascii_control() || b == b' ')
    {
        return false;
    }
    !path
        .split('/')
        .any(|segment| segment == "." || segment == "..")
}

pub fn parse_source(text: &str) -> Result<SourceSpec, String> {
    if let Some(name) = text.strip_prefix("env:") {
        if !is_variable_name(name) {
            return Err(format!("`env:{name}`: not a variable name"));
        }
        return Ok(SourceSpec::Env(name.to_string()));
    }
    if let Some(path) = text.strip_prefix("file:") {
        let spec = PathSpec::parse(path).map_err(|e| e.to_string())?;
        if matches!(spec, PathSpec::Workspace(_)) {
            return Err(format!(
                "`file:{path}`: give an absolute path or one in the home (`~/…`), outside the workspace"
            ));
        }
        return Ok(SourceSpec::File(spec));
    }
    if let Some(command) = text.strip_prefix("command:") {
        let argv: Vec<String> = command.split_whitespace().map(str::to_string).collect();
        if argv.is_empty() {
            return Err("`command:` names no program".into());
        }
        return Ok(SourceSpec::Command(argv));
    }
    Err(format!(
        "`{text}`: expected \"env:NAME\", \"file:PATH\" or \"command:PROGRAM ARG…\""
    ))
}

fn is_variable_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

fn is_token(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Headers the proxy owns or frames the message with: a rule may not set them.
const RESERVED_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "proxy-connection",
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
    "expect",
    "proxy-authorization",
];

/// Every rule checked, each problem starting with the setting's dotted name (so the loader can
/// place it at its line). `allow` gets `host:port` of each rule: a rule allows its host.
pub fn check(rules: &[CredentialRule], allow: &mut Vec<String>) -> Result<(), String> {
    let mut names: Vec<&str> = Vec::new();
    for rule in rules {
        let at = |key: &str| format!("network.credentials.{key}");
        if rule.name.is_empty()
            || rule.name.len() > 40
            || !rule
                .name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            return Err(format!(
                "{} = \"{}\": use 1 to 40 lower-case letters, digits and `-`",
                at("name"),
                rule.name
            ));
        }
        if names.contains(&rule.name.as_str()) {
            return Err(format!(
                "{} = \"{}\": two credential rules have this name",
                at("name"),
                rule.name
            ));
        }
        names.push(&rule.name);
        if rule.host.contains('*') {
            return Err(format!(
                "{} = \"{}\": a credential goes to one host, never a pattern",
                at("host"),
                rule.host
            ));
        }
        let (host, port) = parse_authority(&rule.host, Some(DEFAULT_CREDENTIAL_PORT))
            .map_err(|e| format!("{} = \"{}\": {e}", at("host"), rule.host))?;
        if rule.paths.is_empty() {
            return Err(format!(
                "{} is empty in rule \"{}\": name the path prefixes the credential is for (`/` for the whole host)",
                at("paths"),
                rule.name
            ));
        }
        for path in &rule.paths {
            if !path.starts_with('/') || path.contains(['?', '#', '%']) || !plain_path(path) {
                return Err(format!(
                    "{} = \"{path}\": a path prefix starts with `/` and has no `?`, `#`, `%`, `.` or `..` segments",
                    at("paths")
                ));
            }
        }
        if let Some(methods) = &rule.methods {
            if methods.is_empty() {
                return Err(format!(
                    "{} is empty in rule \"{}\": leave it out for every method",
                    at("methods"),
                    rule.name
                ));
            }
            for method in methods {
                if !is_token(method) || method.bytes().any(|b| b.is_ascii_lowercase()) {
                    return Err(format!(
                        "{} = \"{method}\": an upper-case HTTP method (GET, POST, …)",
                        at("methods")
                    ));
                }
            }
        }
        parse_source(&rule.source).map_err(|e| format!("{}: {e}", at("source")))?;
        match (&rule.header, &rule.basic) {
            (Some(_), Some(_)) | (None, None) => {
                return Err(format!(
                    "{} in rule \"{}\": set either `header` (with `format`) or `basic`",
                    at("header"),
                    rule.name
                ));
            }
            (Some(header), None) => {
                if !is_token(header)
                    || RESERVED_HEADERS.contains(&header.to_ascii_lowercase().as_str())
                {
                    return Err(format!(
                        "{} = \"{header}\": not a header a credential can be sent in",
                        at("header")
                    ));
                }
                let format = rule.format.as_deref().unwrap_or("{}");
                if format.matches("{}").count() != 1 || format.bytes().any(|b| b.is_ascii_control())
                {
                    return Err(format!(
                        "{} = \"{format}\": holds `{{}}` (the secret) exactly once and no control characters",
                        at("format")
                    ));
                }
            }
            (None, Some(user)) => {
                if rule.format.is_some() {
                    return Err(format!(
                        "{} in rule \"{}\": goes with `header`, not `basic`",
                        at("format"),
                        rule.name
                    ));
                }
                if user.is_empty()
                    || user.contains(':')
                    || user.bytes().any(|b| b.is_ascii_control())
                {
                    return Err(format!(
                        "{} = \"{user}\": a user name without `:` or control characters",
                        at("basic")
                    ));
                }
            }
        }
        if rule.git && rule.basic.is_none() {
            return Err(format!(
                "{} in rule \"{}\": git's credential helper answers with a user and a password: set `basic`",
                at("git"),
                rule.name
            ));
        }
        if let Some(name) = &rule.placeholder_env
            && (!is_variable_name(name) || name.starts_with("LD_"))
        {
            return Err(format!(
                "{} = \"{name}\": not a variable name the sandbox can be given",
                at("placeholder_env")
            ));
        }
        let entry = format!("{host}:{port}");
        if !allow.contains(&entry) {
            allow.push(entry);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(paths: &[&str], methods: Option<&[&str]>) -> CredentialRule {
        CredentialRule {
            name: "gh".into(),
            host: "github.com".into(),
            paths: paths.iter().map(|p| p.to_string()).collect(),
            methods: methods.map(|m| m.iter().map(|s| s.to_string()).collect()),
            source: "env:GITHUB_TOKEN".into(),
            header: None,
            format: None,
            basic: Some("x-access-token".into()),
            placeholder_env: None,
            git: true,
            ca_file: None,
        }
    }

    #[test]
    fn scope_is_a_plain_path_prefix_and_a_method() {
        let r = rule(&["/o/r.git/"], Some(&["GET", "POST"]));
        assert!(r.covers("GET", "/o/r.git/info/refs?service=git-receive-pack"));
        assert!(r.covers("POST", "/o/r.git/git-receive-pack"));
        assert!(!r.covers("DELETE", "/o/r.git/x"));
        assert!(!r.covers("GET", "/o/r.gitx/info/refs"));
        assert!(!r.covers("GET", "/o/other.git/info/refs"));
        // Paths a server could resolve to another repository are never in scope.
        for sneaky in [
            "/o/r.git/../other.git/info/refs",
            "/o/r.git/./../x",
            "/o/r.git/%2e%2e/other.git/",
            "/o/r.git/..%2Fother.git/",
            "/o/r.git/..%5cother.git/",
            "/o/r.git/..\\other.git/",
            "http://github.com/o/r.git/",
            "*",
        ] {
            assert!(!r.covers("GET", sneaky), "{sneaky}");
        }
        assert!(rule(&["/"], None).covers("PATCH", "/anything"));
    }

    #[test]
    fn rules_are_checked_and_allow_their_host() {
        let mut allow = vec!["api.anthropic.com".to_string()];
        check(&[rule(&["/o/r.git/"], None)], &mut allow).unwrap();
        assert_eq!(allow, ["api.anthropic.com", "github.com:443"]);
        let bad = |edit: &dyn Fn(&mut CredentialRule), needle: &str| {
            let mut r = rule(&["/"], None);
            edit(&mut r);
            let e = check(&[r], &mut Vec::new()).unwrap_err();
            assert!(e.contains(needle), "{e}");
        };
        bad(&|r| r.name = "Bad Name".into(), "network.credentials.name");
        bad(
            &|r| r.host = "*.github.com".into(),
            "network.credentials.host",
        );
        bad(
            &|r| r.host = "github.com:0".into(),
            "network.credentials.host",
        );
        bad(&|r| r.paths = vec![], "network.credentials.paths");
        bad(
            &|r| r.paths = vec!["o/r".into()],
            "network.credentials.paths",
        );
        bad(
            &|r| r.paths = vec!["/o/../r".into()],
            "network.credentials.paths",
        );
        bad(
            &|r| r.methods = Some(vec!["get".into()]),
            "network.credentials.methods",
        );
        bad(
            &|r| r.source = "vault:x".into(),
            "network.credentials.source",
        );
        bad(
            &|r| r.source = "file:token".into(),
            "network.credentials.source",
        );
        bad(
            &|r| r.source = "command:".into(),
            "network.credentials.source",
        );
        bad(
            &|r| r.header = Some("Authorization".into()),
            "either `header`",
        );
        bad(
            &|r| {
                r.basic = None;
                r.git = false;
                r.header = Some("Host".into());
            },
            "network.credentials.header",
        );
        bad(
            &|r| {
                r.basic = None;
                r.git = false;
                r.header = Some("Authorization".into());
                r.format = Some("Bearer {} {}".into());
            },
            "network.credentials.format",
        );
        bad(
            &|r| r.basic = Some("a:b".into()),
            "network.credentials.basic",
        );
        bad(
            &|r| r.placeholder_env = Some("LD_PRELOAD".into()),
            "placeholder_env",
        );
        let twice = [rule(&["/"], None), rule(&["/"], None)];
        assert!(
            check(&twice, &mut Vec::new())
                .unwrap_err()
                .contains("two credential rules")
        );
    }

    #[test]
    fn sources_say_their_kind_and_name_only() {
        assert_eq!(parse_source("env:GH").unwrap().describe(), "env:GH");
        assert_eq!(
            parse_source("command:gh auth  token").unwrap(),
            SourceSpec::Command(vec!["gh".into(), "auth".into(), "token".into()])
        );
        assert_eq!(parse_source("file:~/.config/t").unwrap().kind(), "file");
    }
}
