//! An `http(s)://host[:port][/prefix]` URL, split: the login's token endpoint, the gateway's
//! upstream, the approval webhook, server-managed settings. No user information, query or
//! fragment: none of them has one, and a credential never rides in a URL.

/// An `http(s)://host[:port][/prefix]` URL, split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    pub tls: bool,
    /// Lower-case; an IPv6 literal without its brackets.
    pub host: String,
    pub port: u16,
    /// The path, without a trailing `/` (empty for the root).
    pub path: String,
}

impl Url {
    pub fn parse(text: &str) -> Result<Url, String> {
        let bad = |why: &str| format!("URL {text:?}: {why}");
        let (tls, rest) = if let Some(rest) = strip_prefix_ci(text, "https://") {
            (true, rest)
        } else if let Some(rest) = strip_prefix_ci(text, "http://") {
            (false, rest)
        } else {
            return Err(bad("not http:// or https://"));
        };
        let (authority, path) = match rest.find(['/', '?', '#']) {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        if authority.contains('@') {
            return Err(bad("user information is not supported"));
        }
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (host, after) = v6.split_once(']').ok_or_else(|| bad("unclosed ["))?;
            (host.to_owned(), after.strip_prefix(':'))
        } else {
            match authority.rsplit_once(':') {
                Some((host, port)) => (host.to_owned(), Some(port)),
                None => (authority.to_owned(), None),
            }
        };
        let port = match port {
            Some(p) => p.parse::<u16>().map_err(|_| bad("bad port"))?,
            None if tls => 443,
            None => 80,
        };
        if host.is_empty()
            || !host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._:".contains(&b))
        {
            return Err(bad("bad host"));
        }
        if path.contains(['?', '#']) || path.bytes().any(|b| !b.is_ascii_graphic()) {
            return Err(bad("a query, fragment or unusual character in the path"));
        }
        Ok(Url {
            tls,
            host: host.to_ascii_lowercase(),
            port,
            path: path.trim_end_matches('/').to_owned(),
        })
    }

    /// `host` or `host:port` as a `Host` header says it.
    pub fn host_header(&self) -> String {
        host_header(&self.host, self.port, self.tls)
    }

    /// The path as a request line names it (`/` for the root).
    pub fn request_path(&self) -> &str {
        if self.path.is_empty() {
            "/"
        } else {
            &self.path
        }
    }
}

/// `host` or `host:port` as a `Host` header says it: an IPv6 literal in brackets, the port
/// left out when it is the scheme's own.
pub fn host_header(host: &str, port: u16, tls: bool) -> String {
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_owned()
    };
    if port == if tls { 443 } else { 80 } {
        host
    } else {
        format!("{host}:{port}")
    }
}

fn strip_prefix_ci<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    text.get(..prefix.len())
        .filter(|p| p.eq_ignore_ascii_case(prefix))
        .map(|_| &text[prefix.len()..])
}

/// The origin-form of a request target (`/v1/messages?beta=true`); absolute-form
/// (`http://localhost/v1/…`) is taken for its path only, and only with a plain authority (no
/// user part, nothing but its path after it). `None`: neither.
pub fn origin_form(target: &str) -> Option<String> {
    if target.starts_with('/') {
        return Some(target.to_owned());
    }
    let rest = strip_prefix_ci(target, "http://")?;
    let end = rest.find(['/', '?', '#', '\\', '@']).unwrap_or(rest.len());
    match rest[end..].chars().next() {
        None => Some("/".to_owned()),
        Some('/') => Some(rest[end..].to_owned()),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_their_parts() {
        assert_eq!(
            Url::parse("https://api.anthropic.com").unwrap(),
            Url {
                tls: true,
                host: "api.anthropic.com".into(),
                port: 443,
                path: String::new()
            }
        );
        assert_eq!(
            Url::parse("https://api.anthropic.com")
                .unwrap()
                .request_path(),
            "/"
        );
        let corp = Url::parse("http://GW.corp:8080/anthropic/").unwrap();
        assert_eq!(
            (corp.tls, corp.host.as_str(), corp.port, corp.path.as_str()),
            (false, "gw.corp", 8080, "/anthropic")
        );
        assert_eq!(corp.host_header(), "gw.corp:8080");
        assert_eq!(corp.request_path(), "/anthropic");
        let v6 = Url::parse("https://[::1]:9443").unwrap();
        assert_eq!((v6.host.as_str(), v6.port), ("::1", 9443));
        assert_eq!(v6.host_header(), "[::1]:9443");
        assert_eq!(host_header("::1", 443, true), "[::1]");
        assert_eq!(host_header("x.test", 80, true), "x.test:80");
        for bad in [
            "ftp://x",
            "https://user:pw@host",
            "https://host:99999",
            "https://",
            "https://ho st",
            "https://host/a?b",
            "api.anthropic.com",
        ] {
            assert!(Url::parse(bad).is_err(), "{bad}");
        }
    }
}
