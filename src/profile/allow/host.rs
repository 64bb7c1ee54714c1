//! Host names as the proxy sees them: parsing `host:port` authorities, normalising names to
//! lower-case ASCII (IDNA), refusing malformed ones, and matching them against the allow-list.

use super::address::{self, Cidr, SpecialRange};
use idna::uts46::{AsciiDenyList, DnsLength, Hyphens, Uts46};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The longest host name DNS can carry (without the root dot), and the longest label.
const MAX_NAME: usize = 253;
const MAX_LABEL: usize = 63;

/// A normalised host: a lower-case ASCII name, or an IP literal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    Name(String),
    Ip(IpAddr),
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(name) => f.write_str(name),
            Host::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
            Host::Ip(IpAddr::V4(ip)) => write!(f, "{ip}"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    #[error("empty host")]
    Empty,
    #[error("host contains a NUL byte")]
    Nul,
    #[error("host contains control character 0x{0:02x}")]
    Control(u8),
    #[error("host is {0} characters long (at most {MAX_NAME})")]
    TooLong(usize),
    #[error("label `{0}` is longer than {MAX_LABEL} characters")]
    LabelTooLong(String),
    #[error("host has an empty label")]
    EmptyLabel,
    #[error("host ends in a number but is not a dotted-quad IPv4 address")]
    Numeric,
    #[error("host is not a valid internationalised domain name (IDNA)")]
    Idna,
    #[error("IPv6 address must be written in brackets, as [addr]:port")]
    UnbracketedIpv6,
    #[error("bad IPv6 literal in brackets")]
    BadIpv6,
    #[error("missing port (expected host:port)")]
    MissingPort,
    #[error("bad port `{0}` (expected 1-65535)")]
    BadPort(String),
}

/// Normalise a host as written in a request or an allow-list entry (no port, no brackets).
pub fn normalize_host(raw: &str) -> Result<Host, HostError> {
    if raw.is_empty() {
        return Err(HostError::Empty);
    }
    if let Some(b) = raw.bytes().find(|b| b.is_ascii_control()) {
        return Err(if b == 0 {
            HostError::Nul
        } else {
            HostError::Control(b)
        });
    }
    // Cheap bound before IDNA does any work: even a Unicode name cannot map to more than this.
    if raw.len() > 4 * MAX_NAME {
        return Err(HostError::TooLong(raw.len()));
    }
    if let Ok(v4) = raw.parse::<Ipv4Addr>() {
        return Ok(Host::Ip(IpAddr::V4(v4)));
    }
    if raw.contains(':') {
        return Err(HostError::UnbracketedIpv6);
    }
    // One trailing dot is the fully qualified form of the same name.
    let name = raw.strip_suffix('.').unwrap_or(raw);
    if name.split('.').any(str::is_empty) {
        return Err(HostError::EmptyLabel);
    }
    // inet_aton would read "127.1" or "0x7f.1" as an address; a name may not pretend to be one.
    let last = name.rsplit('.').next().unwrap_or(name);
    if last.bytes().all(|b| b.is_ascii_digit())
        || (last.len() > 2 && last[..2].eq_ignore_ascii_case("0x"))
    {
        return Err(HostError::Numeric);
    }
    let ascii = Uts46::new()
        .to_ascii(
            name.as_bytes(),
            AsciiDenyList::STD3,
            Hyphens::CheckFirstLast,
            DnsLength::Ignore,
        )
        .map_err(|_| HostError::Idna)?;
    if ascii.len() > MAX_NAME {
        return Err(HostError::TooLong(ascii.len()));
    }
    for label in ascii.split('.') {
        if label.is_empty() {
            return Err(HostError::EmptyLabel);
        }
        if label.len() > MAX_LABEL {
            return Err(HostError::LabelTooLong(label.to_owned()));
        }
        // STD3 already allows only letters, digits and hyphens; this is the belt to its braces.
        if !label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            return Err(HostError::Idna);
        }
    }
    Ok(Host::Name(ascii.into_owned()))
}

/// Parse `host:port`, `[v6]:port`, or (with a default port) `host` / `[v6]`.
pub fn parse_authority(raw: &str, default_port: Option<u16>) -> Result<(Host, u16), HostError> {
    let (host, port) = if let Some(rest) = raw.strip_prefix('[') {
        let (inner, after) = rest.split_once(']').ok_or(HostError::BadIpv6)?;
        // Zone ids (`%eth0`) and anything else that is not a plain address are refused.
        let ip: Ipv6Addr = inner.parse().map_err(|_| HostError::BadIpv6)?;
        let port = match after {
            "" => None,
            _ => Some(after.strip_prefix(':').ok_or(HostError::BadIpv6)?),
        };
        (Host::Ip(address::canonical(IpAddr::V6(ip))), port)
    } else {
        let (host, port) = match raw.split_once(':') {
            Some((host, port)) if !port.contains(':') => (host, Some(port)),
            Some(_) => return Err(HostError::UnbracketedIpv6),
            None => (raw, None),
        };
        (normalize_host(host)?, port)
    };
    let port = match port {
        Some(port) => parse_port(port)?,
        None => default_port.ok_or(HostError::MissingPort)?,
    };
    Ok((host, port))
}

fn parse_port(raw: &str) -> Result<u16, HostError> {
    let bad = || HostError::BadPort(raw.escape_debug().to_string());
    if raw.is_empty() || raw.len() > 5 || !raw.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    match raw.parse::<u16>() {
        Ok(0) | Err(_) => Err(bad()),
        Ok(port) => Ok(port),
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Pattern {
    Exact(Host),
    /// `*.example.com`, stored as `.example.com`: one or more labels in front of the suffix,
    /// never the bare suffix itself.
    Subdomains(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    pattern: Pattern,
    port: u16,
    entry: String,
}

/// An allow-list checked once at load time; what the proxy matches requests against.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompiledAllowList {
    rules: Vec<Rule>,
    addresses: Vec<(Cidr, String)>,
}

/// A bad allow-list entry, named as written in the profile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllowListError {
    #[error("allow entry `{entry}`: {reason}")]
    Allow { entry: String, reason: String },
    #[error("allow_addresses entry `{entry}`: {reason}")]
    Address { entry: String, reason: String },
}

/// The port an allow entry without one stands for: HTTPS.
pub const DEFAULT_ALLOW_PORT: u16 = 443;

pub(super) fn compile(
    allow: &[String],
    allow_addresses: &[String],
) -> Result<CompiledAllowList, AllowListError> {
    let mut compiled = CompiledAllowList::default();
    for entry in allow {
        let fail = |reason: String| AllowListError::Allow {
            entry: entry.escape_debug().to_string(),
            reason,
        };
        let pattern_text = entry.trim();
        if pattern_text != entry {
            return Err(fail("leading or trailing white space".into()));
        }
        // A URL where a host belongs: say what to write instead.
        if let Some((scheme, rest)) = entry.split_once("://") {
            let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
            let authority = authority.rsplit('@').next().unwrap_or_default();
            return Err(fail(format!(
                "an entry is a host name (with an optional port), not a URL: write `{authority}`{}",
                if scheme.eq_ignore_ascii_case("http") && !authority.contains(':') {
                    format!(" (plain HTTP is port 80: `{authority}:80`)")
                } else {
                    String::new()
                }
            )));
        }
        if entry.contains('/') {
            return Err(fail(
                "an entry is a host name (with an optional port), not a path: no `/`".into(),
            ));
        }
        let (pattern, port) = if let Some(suffix) = entry.strip_prefix("*.") {
            let (host, port) = parse_authority(suffix, Some(DEFAULT_ALLOW_PORT))
                .map_err(|e| fail(e.to_string()))?;
            match host {
                Host::Name(name) => (Pattern::Subdomains(format!(".{name}")), port),
                Host::Ip(_) => {
                    return Err(fail("a wildcard cannot stand before an IP address".into()));
                }
            }
        } else if entry.contains('*') {
            return Err(fail(
                "`*` is allowed only as a whole first label (`*.example.com`); to allow every host use network mode `host`".into(),
            ));
        } else {
            let (host, port) = parse_authority(entry, Some(DEFAULT_ALLOW_PORT))
                .map_err(|e| fail(e.to_string()))?;
            (Pattern::Exact(host), port)
        };
        compiled.rules.push(Rule {
            pattern,
            port,
            entry: entry.clone(),
        });
    }
    for entry in allow_addresses {
        let cidr: Cidr = entry.parse().map_err(|reason| AllowListError::Address {
            entry: entry.escape_debug().to_string(),
            reason,
        })?;
        compiled.addresses.push((cidr, entry.clone()));
    }
    Ok(compiled)
}

impl CompiledAllowList {
    /// The allow entry (as written) that admits this host and port, if any.
    pub fn match_host(&self, host: &Host, port: u16) -> Option<&str> {
        self.rules
            .iter()
            .find(|rule| {
                rule.port == port
                    && match (&rule.pattern, host) {
                        (Pattern::Exact(want), got) => want == got,
                        (Pattern::Subdomains(suffix), Host::Name(name)) => {
                            name.len() > suffix.len() && name.ends_with(suffix.as_str())
                        }
                        (Pattern::Subdomains(_), Host::Ip(_)) => false,
                    }
            })
            .map(|rule| rule.entry.as_str())
    }

    /// Whether the proxy may connect to this exact address: ordinary global unicast always,
    /// a special address only when an `allow_addresses` entry names it. `Ok` carries the entry
    /// that admitted a special address.
    pub fn check_address(&self, ip: IpAddr) -> Result<Option<&str>, SpecialRange> {
        match address::classify(ip) {
            None => Ok(None),
            Some(range) => self
                .addresses
                .iter()
                .find(|(cidr, _)| cidr.contains(ip))
                .map(|(_, entry)| Some(entry.as_str()))
                .ok_or(range),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> Host {
        Host::Name(s.into())
    }

    #[test]
    fn normalize_table() {
        let ok: &[(&str, Host)] = &[
            ("api.anthropic.com", name("api.anthropic.com")),
            ("API.Anthropic.COM", name("api.anthropic.com")),
            ("api.anthropic.com.", name("api.anthropic.com")),
            ("localhost", name("localhost")),
            ("bücher.example", name("xn--bcher-kva.example")),
            ("xn--bcher-kva.example", name("xn--bcher-kva.example")),
            ("r3---sn-abc.example", name("r3---sn-abc.example")),
            ("127.0.0.1", Host::Ip("127.0.0.1".parse().unwrap())),
            (
                &format!("{}.com", "a".repeat(63)),
                name(&format!("{}.com", "a".repeat(63))),
            ),
        ];
        for (raw, want) in ok {
            assert_eq!(normalize_host(raw).as_ref(), Ok(want), "{raw}");
        }
        let long_name = format!("{}.com", vec!["a".repeat(60); 5].join("."));
        let bad: &[(&str, HostError)] = &[
            ("", HostError::Empty),
            ("api.anthropic.com\0.evil", HostError::Nul),
            ("api\r\nX: y", HostError::Control(b'\r')),
            ("a\tb", HostError::Control(b'\t')),
            ("a\x7fb", HostError::Control(0x7f)),
            ("xn--zz", HostError::Idna),
            ("xn--zz.example", HostError::Idna),
            ("a..b", HostError::EmptyLabel),
            (".a.b", HostError::EmptyLabel),
            ("a.b..", HostError::EmptyLabel),
            (".", HostError::EmptyLabel),
            (
                &format!("{}.com", "a".repeat(64)),
                HostError::LabelTooLong("a".repeat(64)),
            ),
            (&long_name, HostError::TooLong(long_name.len())),
            ("127.1", HostError::Numeric),
            ("0x7f.0x1", HostError::Numeric),
            ("example.123", HostError::Numeric),
            ("1.2.3.4.5", HostError::Numeric),
            ("::1", HostError::UnbracketedIpv6),
            ("under_score.example", HostError::Idna),
            ("sp ace.example", HostError::Idna),
            ("a/b.example", HostError::Idna),
            ("a@b.example", HostError::Idna),
            ("a%2eb.example", HostError::Idna),
            ("-lead.example", HostError::Idna),
            ("trail-.example", HostError::Idna),
        ];
        for (raw, want) in bad {
            assert_eq!(
                normalize_host(raw).as_ref(),
                Err(want),
                "{}",
                raw.escape_debug()
            );
        }
    }

    #[test]
    fn authority_table() {
        let ip = |s: &str| Host::Ip(s.parse().unwrap());
        let ok: &[(&str, Option<u16>, (Host, u16))] = &[
            ("api.test:443", None, (name("api.test"), 443)),
            ("api.test", Some(80), (name("api.test"), 80)),
            ("[::1]:8080", None, (ip("::1"), 8080)),
            ("[::1]", Some(443), (ip("::1"), 443)),
            ("[::ffff:127.0.0.1]:1", None, (ip("127.0.0.1"), 1)),
            ("127.0.0.1:65535", None, (ip("127.0.0.1"), 65535)),
        ];
        for (raw, default, want) in ok {
            assert_eq!(parse_authority(raw, *default).as_ref(), Ok(want), "{raw}");
        }
        let bad: &[(&str, Option<u16>)] = &[
            ("api.test", None),
            ("api.test:", None),
            ("api.test:0", None),
            ("api.test:65536", None),
            ("api.test:+443", None),
            ("api.test:443x", None),
            ("api.test:443/path", None),
            ("api.test:443:1", None),
            ("::1:443", None),
            ("[::1", None),
            ("[::1]443", None),
            ("[::1]:", None),
            ("[fe80::1%eth0]:443", None),
            ("[127.0.0.1]:443", None),
            ("[::1]x:443", None),
            (":443", None),
        ];
        for (raw, default) in bad {
            assert!(parse_authority(raw, *default).is_err(), "{raw}");
        }
    }

    fn list(allow: &[&str], addresses: &[&str]) -> CompiledAllowList {
        let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        compile(&s(allow), &s(addresses)).unwrap()
    }

    #[test]
    fn matching_table() {
        let allow = list(
            &[
                "api.anthropic.com",
                "*.example.com",
                "plain.test:80",
                "[::1]:8080",
                "127.0.0.1:9000",
                "Bücher.Example",
            ],
            &[],
        );
        let cases: &[(&str, u16, Option<&str>)] = &[
            ("api.anthropic.com", 443, Some("api.anthropic.com")),
            ("API.ANTHROPIC.COM.", 443, Some("api.anthropic.com")),
            ("api.anthropic.com", 80, None),
            ("api.anthropic.com", 8443, None),
            ("anthropic.com", 443, None),
            ("evilapi.anthropic.com", 443, None),
            ("api.anthropic.com.evil.com", 443, None),
            ("a.example.com", 443, Some("*.example.com")),
            ("a.b.example.com", 443, Some("*.example.com")),
            ("example.com", 443, None),
            ("badexample.com", 443, None),
            ("a.example.com", 80, None),
            ("plain.test", 80, Some("plain.test:80")),
            ("plain.test", 443, None),
            ("xn--bcher-kva.example", 443, Some("Bücher.Example")),
        ];
        for (host, port, want) in cases {
            let h = normalize_host(host).unwrap();
            assert_eq!(allow.match_host(&h, *port), *want, "{host}:{port}");
        }
        let ip = |s: &str| Host::Ip(s.parse().unwrap());
        assert_eq!(allow.match_host(&ip("::1"), 8080), Some("[::1]:8080"));
        assert_eq!(allow.match_host(&ip("::1"), 443), None);
        assert_eq!(
            allow.match_host(&ip("127.0.0.1"), 9000),
            Some("127.0.0.1:9000")
        );
        assert_eq!(allow.match_host(&ip("127.0.0.2"), 9000), None);
    }

    #[test]
    fn bad_entries_are_named() {
        let cases: &[(&str, &str)] = &[
            ("https://example.com/x", "not a URL: write `example.com`"),
            ("http://example.com", "`example.com:80`"),
            ("example.com/api", "not a path"),
            ("*", "`*` is allowed only"),
            ("*example.com", "`*` is allowed only"),
            ("a.*.com", "`*` is allowed only"),
            ("*.127.0.0.1", "wildcard cannot stand before an IP"),
            ("exa mple.com", "IDNA"),
            ("xn--zz", "IDNA"),
            ("host:0", "bad port"),
            ("::1", "brackets"),
            (" api.test", "white space"),
            ("a\0b", "NUL"),
        ];
        for (entry, want) in cases {
            let err = compile(&[entry.to_string()], &[]).unwrap_err().to_string();
            assert!(err.contains(want), "{entry}: {err}");
            assert!(err.starts_with("allow entry `"), "{err}");
        }
        let err = compile(&[], &["localhost".into()]).unwrap_err().to_string();
        assert!(err.contains("allow_addresses entry `localhost`"), "{err}");
    }

    #[test]
    fn address_check() {
        let allow = list(&[], &["127.0.0.1", "fd00::/8"]);
        assert_eq!(allow.check_address("1.1.1.1".parse().unwrap()), Ok(None));
        assert_eq!(
            allow.check_address("127.0.0.1".parse().unwrap()),
            Ok(Some("127.0.0.1"))
        );
        assert_eq!(
            allow.check_address("::ffff:127.0.0.1".parse().unwrap()),
            Ok(Some("127.0.0.1"))
        );
        assert_eq!(
            allow.check_address("fd01::1".parse().unwrap()),
            Ok(Some("fd00::/8"))
        );
        assert_eq!(
            allow.check_address("127.0.0.2".parse().unwrap()),
            Err(SpecialRange::Loopback)
        );
        assert_eq!(
            allow.check_address("169.254.169.254".parse().unwrap()),
            Err(SpecialRange::LinkLocal)
        );
    }
}
