//! Where the audit export goes and what it ships: the profile's `[audit.export]` section and the
//! standard OpenTelemetry variables of `stepproof-run`'s own environment (never passed inside:
//! see `sandbox::plan::env`), resolved into one [`ExportConfig`] before the run starts.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

/// What the run waits at its end for the collector to take what is left, unless the profile
/// says otherwise.
pub const DEFAULT_FLUSH_TIMEOUT: Duration = Duration::from_secs(5);
/// One request's limit when `OTEL_EXPORTER_OTLP_TIMEOUT` says nothing (the specification's
/// default).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The OpenTelemetry variables: the exporter's are read outside and never passed inside (its
/// headers are the collector's credentials), and none of the family is (a command inside that
/// exported telemetry of its own would only meet the proxy).
pub const OTEL_VARIABLE_PREFIX: &str = "OTEL_";

/// `[audit.export]` as a profile writes it. No value in it is a secret: header values come from
/// the environment variables `headers_env` names.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportSettings {
    /// The collector's base URL, as `OTEL_EXPORTER_OTLP_ENDPOINT` (`/v1/logs` is appended);
    /// the environment's `OTEL_EXPORTER_OTLP_LOGS_ENDPOINT` / `OTEL_EXPORTER_OTLP_ENDPOINT` win.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Names of variables of `stepproof-run`'s environment that hold headers in the
    /// `OTEL_EXPORTER_OTLP_HEADERS` form (`key=value,key2=value2`); never passed inside.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers_env: Vec<String>,
    /// Refused with a message: header values do not belong in a reviewed file.
    #[serde(default, skip_serializing)]
    pub headers: Option<serde_json::Value>,
    /// How long the end of a run waits for the collector (`5s`, `500ms`, `1m`; `0s` waits not
    /// at all). What is left stays in the outbox for `stepproof audit ship`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flush_timeout: Option<String>,
    /// What is shipped of each record: `none`, `commands` (the default) or `all-text`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redact: Option<Redaction>,
    /// More keys whose values are never shipped, wherever they are in a record.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub redact_keys: Vec<String>,
}

/// How much of a record's text is shipped. The local log always keeps everything.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Redaction {
    /// Every record exactly as written (its body is the line that was hashed).
    None,
    /// What the agent or the person typed or ran (command lines, prompts, tool input, the
    /// reasons that quote them, output) is replaced by `"[redacted]"`; so is any other string
    /// of the record that contains such a value.
    #[default]
    Commands,
    /// Every string but the record's structure (kinds, events, decisions, rule ids, tools,
    /// hosts, hashes, statuses) is replaced.
    AllText,
}

impl Redaction {
    pub fn name(self) -> &'static str {
        match self {
            Redaction::None => "none",
            Redaction::Commands => "commands",
            Redaction::AllText => "all-text",
        }
    }

    pub fn parse(text: &str) -> Option<Redaction> {
        match text {
            "none" => Some(Redaction::None),
            "commands" => Some(Redaction::Commands),
            "all-text" => Some(Redaction::AllText),
            _ => None,
        }
    }
}

/// `5s`, `250ms`, `2m`, `1m30s`: a duration of at most an hour.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("{text:?}: expected a duration such as 5s, 500ms or 1m");
    let mut total = Duration::ZERO;
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || digits > 9 {
            return Err(bad());
        }
        let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let part = match &rest[..unit] {
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n * 60),
            _ => return Err(bad()),
        };
        rest = &rest[unit..];
        total += part;
    }
    if total > Duration::from_secs(3600) {
        return Err(format!("{text:?}: at most 1h"));
    }
    Ok(total)
}

impl ExportSettings {
    /// The checks a profile's loader makes (each message names the key).
    pub fn validate(&self) -> Result<(), String> {
        if self.headers.is_some() {
            return Err("audit.export.headers: header values (a collector's token) never go in a profile; name the variables of stepproof-run's environment that hold them: headers_env = [\"NAME\"]".to_string());
        }
        if let Some(endpoint) = &self.endpoint {
            Endpoint::parse(&base_to_logs(endpoint))
                .map_err(|e| format!("audit.export.endpoint = {endpoint:?}: {e}"))?;
        }
        if let Some(t) = &self.flush_timeout {
            parse_duration(t).map_err(|e| format!("audit.export.flush_timeout = {e}"))?;
        }
        for name in &self.headers_env {
            if name.is_empty() || name.contains('=') || name.contains('\0') {
                return Err(format!(
                    "audit.export.headers_env: {name:?} is not a variable name"
                ));
            }
        }
        Ok(())
    }
}

/// The collector's URL, split for the HTTP client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub tls: bool,
    /// Without brackets for an IPv6 literal.
    pub host: String,
    pub port: u16,
    /// The path and query, starting with `/`.
    pub path: String,
}

impl Endpoint {
    /// `http://host[:port]/path` or `https://…`; no user information (credentials go in
    /// headers from the environment).
    pub fn parse(url: &str) -> Result<Endpoint, String> {
        let (tls, rest) = if let Some(rest) = url.strip_prefix("https://") {
            (true, rest)
        } else if let Some(rest) = url.strip_prefix("http://") {
            (false, rest)
        } else {
            return Err("expected an http:// or https:// URL".to_string());
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if authority.contains('@') {
            return Err(
                "user information in the URL is refused: put credentials in headers from the environment"
                    .to_string(),
            );
        }
        if path.bytes().any(|b| b.is_ascii_control() || b == b' ') {
            return Err("the path has spaces or control characters".to_string());
        }
        let default_port = if tls { 443 } else { 80 };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (host, after) = v6
                .split_once(']')
                .ok_or_else(|| "an IPv6 address without its `]`".to_string())?;
            let port = match after.strip_prefix(':') {
                Some(p) => p.parse().map_err(|_| format!("bad port {p:?}"))?,
                None if after.is_empty() => default_port,
                None => return Err(format!("unexpected {after:?} after the address")),
            };
            (host.to_string(), port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (
                    h.to_string(),
                    p.parse().map_err(|_| format!("bad port {p:?}"))?,
                ),
                None => (authority.to_string(), default_port),
            }
        };
        if host.is_empty()
            || !host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':'))
        {
            return Err(format!("bad host {host:?}"));
        }
        Ok(Endpoint {
            tls,
            host,
            port,
            path: path.to_string(),
        })
    }

    /// The URL again (for messages and the outbox: it holds no credential).
    pub fn url(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        format!(
            "{}://{host}:{}{}",
            if self.tls { "https" } else { "http" },
            self.port,
            self.path
        )
    }
}

/// `OTEL_EXPORTER_OTLP_ENDPOINT`'s rule: the signal's path appended to the base.
pub fn base_to_logs(base: &str) -> String {
    format!("{}/v1/logs", base.trim_end_matches('/'))
}

/// Everything the exporter needs, resolved at launch (and again by `stepproof audit ship`).
#[derive(Clone)]
pub struct ExportConfig {
    pub endpoint: Endpoint,
    /// Header names and values: credentials, never written anywhere.
    pub headers: Vec<(String, String)>,
    pub request_timeout: Duration,
    pub flush_timeout: Duration,
    pub redaction: Redaction,
    pub redact_keys: Vec<String>,
    /// `OTEL_EXPORTER_OTLP_CERTIFICATE`: PEM roots to trust instead of the public web roots.
    pub certificate: Option<PathBuf>,
    /// `OTEL_RESOURCE_ATTRIBUTES` (and `OTEL_SERVICE_NAME`), added to the run's own.
    pub resource: Vec<(String, String)>,
    /// The profile's `headers_env` (names only), kept in the outbox for `audit ship`.
    pub headers_env: Vec<String>,
}

impl std::fmt::Debug for ExportConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Header values are credentials: only their names.
        f.debug_struct("ExportConfig")
            .field("endpoint", &self.endpoint.url())
            .field(
                "headers",
                &self.headers.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .field("request_timeout", &self.request_timeout)
            .field("flush_timeout", &self.flush_timeout)
            .field("redaction", &self.redaction)
            .finish()
    }
}

/// `key=value,key2=value2`, values percent-decoded (the OpenTelemetry form of headers and
/// resource attributes). `what` names the variable in errors; a value is never quoted.
pub fn parse_pairs(what: &str, text: &str) -> Result<Vec<(String, String)>, String> {
    let mut pairs = Vec::new();
    for item in text.split(',') {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        let (key, value) = item
            .split_once('=')
            .ok_or_else(|| format!("{what}: an entry without `=` (expected key=value,…)"))?;
        let key = percent_decode(key.trim()).ok_or_else(|| format!("{what}: a bad %-escape"))?;
        let value =
            percent_decode(value.trim()).ok_or_else(|| format!("{what}: a bad %-escape"))?;
        if key.is_empty() {
            return Err(format!("{what}: an empty key"));
        }
        pairs.push((key, value));
    }
    Ok(pairs)
}

fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// A header that would break the request (a newline smuggling another header, a bad name) is
/// refused; the message names the header, never its value.
fn check_header(what: &str, name: &str, value: &str) -> Result<(), String> {
    let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if name.is_empty() || !name.bytes().all(token) {
        return Err(format!("{what}: header name {name:?} is not a valid name"));
    }
    if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
        return Err(format!(
            "{what}: the value of header {name} has a line break or NUL"
        ));
    }
    let lower = name.to_ascii_lowercase();
    if matches!(
        lower.as_str(),
        "host" | "content-length" | "content-type" | "transfer-encoding" | "connection"
    ) {
        return Err(format!("{what}: header {name} is set by StepProof itself"));
    }
    Ok(())
}

/// The export as the profile and the environment say it, or `None` when no endpoint is named
/// (or `OTEL_SDK_DISABLED=true` / `OTEL_LOGS_EXPORTER=none`). `env` reads stepproof-run's own
/// environment.
pub fn resolve(
    settings: Option<&ExportSettings>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<ExportConfig>, String> {
    let var = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    if var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
        || var("OTEL_LOGS_EXPORTER").is_some_and(|v| v.trim().eq_ignore_ascii_case("none"))
    {
        return Ok(None);
    }
    let defaults = ExportSettings::default();
    let settings = settings.unwrap_or(&defaults);
    let url = if let Some(url) = var("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT") {
        url.trim().to_string()
    } else if let Some(base) = var("OTEL_EXPORTER_OTLP_ENDPOINT") {
        base_to_logs(base.trim())
    } else if let Some(base) = &settings.endpoint {
        base_to_logs(base)
    } else {
        return Ok(None);
    };
    let endpoint =
        Endpoint::parse(&url).map_err(|e| format!("the OTLP logs endpoint {url:?}: {e}"))?;
    for name in [
        "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ] {
        if let Some(p) = var(name) {
            if p.trim() != "http/protobuf" {
                return Err(format!(
                    "{name}={}: StepProof exports OTLP over http/protobuf only",
                    p.trim()
                ));
            }
            break;
        }
    }
    let mut headers: Vec<(String, String)> = Vec::new();
    let mut add = |what: &str, text: &str| -> Result<(), String> {
        for (name, value) in parse_pairs(what, text)? {
            check_header(what, &name, &value)?;
            headers.retain(|(n, _)| !n.eq_ignore_ascii_case(&name));
            headers.push((name, value));
        }
        Ok(())
    };
    for name in &settings.headers_env {
        if let Some(text) = var(name) {
            add(name, &text)?;
        }
    }
    if let Some(text) = var("OTEL_EXPORTER_OTLP_HEADERS") {
        add("OTEL_EXPORTER_OTLP_HEADERS", &text)?;
    }
    if let Some(text) = var("OTEL_EXPORTER_OTLP_LOGS_HEADERS") {
        add("OTEL_EXPORTER_OTLP_LOGS_HEADERS", &text)?;
    }
    let request_timeout = match var("OTEL_EXPORTER_OTLP_LOGS_TIMEOUT")
        .map(|v| ("OTEL_EXPORTER_OTLP_LOGS_TIMEOUT", v))
        .or_else(|| var("OTEL_EXPORTER_OTLP_TIMEOUT").map(|v| ("OTEL_EXPORTER_OTLP_TIMEOUT", v)))
    {
        Some((name, v)) => match v.trim().parse::<u64>() {
            Ok(ms) if ms > 0 => Duration::from_millis(ms.min(600_000)),
            _ => {
                return Err(format!(
                    "{name}={}: expected milliseconds (a positive integer)",
                    v.trim()
                ));
            }
        },
        None => DEFAULT_REQUEST_TIMEOUT,
    };
    let flush_timeout = match &settings.flush_timeout {
        Some(t) => parse_duration(t).map_err(|e| format!("audit.export.flush_timeout = {e}"))?,
        None => DEFAULT_FLUSH_TIMEOUT,
    };
    let certificate = var("OTEL_EXPORTER_OTLP_LOGS_CERTIFICATE")
        .or_else(|| var("OTEL_EXPORTER_OTLP_CERTIFICATE"))
        .map(|p| PathBuf::from(p.trim()));
    let mut resource = match var("OTEL_RESOURCE_ATTRIBUTES") {
        Some(text) => parse_pairs("OTEL_RESOURCE_ATTRIBUTES", &text)?,
        None => Vec::new(),
    };
    if let Some(name) = var("OTEL_SERVICE_NAME") {
        resource.retain(|(k, _)| k != "service.name");
        resource.push(("service.name".to_string(), name.trim().to_string()));
    }
    Ok(Some(ExportConfig {
        endpoint,
        headers,
        request_timeout,
        flush_timeout,
        redaction: settings.redact.unwrap_or_default(),
        redact_keys: settings.redact_keys.clone(),
        certificate,
        resource,
        headers_env: settings.headers_env.clone(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn the_environment_names_the_endpoint_and_wins_over_the_profile() {
        let profile = ExportSettings {
            endpoint: Some("http://collector.example:4318/".into()),
            ..ExportSettings::default()
        };
        let c = resolve(Some(&profile), &env(&[])).unwrap().unwrap();
        assert_eq!(c.endpoint.url(), "http://collector.example:4318/v1/logs");
        let c = resolve(
            Some(&profile),
            &env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "https://otel.example")]),
        )
        .unwrap()
        .unwrap();
        assert_eq!(c.endpoint.url(), "https://otel.example:443/v1/logs");
        let c = resolve(
            None,
            &env(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://otel.example"),
                ("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", "http://[::1]:9/custom"),
            ]),
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            c.endpoint,
            Endpoint {
                tls: false,
                host: "::1".into(),
                port: 9,
                path: "/custom".into()
            }
        );
        assert!(resolve(None, &env(&[])).unwrap().is_none());
        assert!(
            resolve(Some(&profile), &env(&[("OTEL_SDK_DISABLED", "true")]))
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn headers_come_from_the_environment_and_are_checked() {
        let profile = ExportSettings {
            endpoint: Some("http://127.0.0.1:4318".into()),
            headers_env: vec!["MY_COLLECTOR".into()],
            ..ExportSettings::default()
        };
        let c = resolve(
            Some(&profile),
            &env(&[
                ("MY_COLLECTOR", "x-team=a%20b"),
                (
                    "OTEL_EXPORTER_OTLP_HEADERS",
                    "Authorization=Bearer%20t0k,x-team=c",
                ),
            ]),
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            c.headers,
            [
                ("Authorization".to_string(), "Bearer t0k".to_string()),
                ("x-team".to_string(), "c".to_string())
            ]
        );
        assert!(!format!("{c:?}").contains("t0k"));
        let err = resolve(
            Some(&profile),
            &env(&[("OTEL_EXPORTER_OTLP_HEADERS", "a=b%0d%0aHost: evil")]),
        )
        .err()
        .unwrap();
        assert!(err.contains("line break") && !err.contains("evil"), "{err}");
        let with_value = ExportSettings {
            headers: Some(serde_json::json!({ "Authorization": "secret" })),
            ..ExportSettings::default()
        };
        let err = with_value.validate().unwrap_err();
        assert!(
            err.contains("headers_env") && !err.contains("secret"),
            "{err}"
        );
    }

    #[test]
    fn bad_values_are_named() {
        for (url, needle) in [
            ("ftp://x", "http://"),
            ("http://user:pw@x/", "user information"),
            ("http://x:99999/", "bad port"),
            ("http:///v1/logs", "bad host"),
        ] {
            let err = Endpoint::parse(url).unwrap_err();
            assert!(err.contains(needle), "{url}: {err}");
        }
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("0s").unwrap(), Duration::ZERO);
        for bad in ["", "5", "5h", "s", "2h", "-1s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        let err = resolve(
            None,
            &env(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://x"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ]),
        )
        .err()
        .unwrap();
        assert!(err.contains("http/protobuf only"), "{err}");
    }
}
