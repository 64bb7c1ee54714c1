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

/// Why a request target is not a usable absolute-form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotAbsolute {
    /// No `scheme://`.
    NoScheme,
    /// A user part (`http://user@host/`): a credential riding in a URL, or a host spelt to
    /// mislead (`http://good.example@evil.example/`).
    UserInfo,
}

/// An absolute-form request target (`http://host:port/path?query#fragment`), split: its scheme
/// as written, its authority, and the origin-form the request is sent on with (`/` for none,
/// `/?query` for a bare query, the fragment dropped). The one reading of absolute-form, for the
/// proxy's plain HTTP and the gateway.
pub fn absolute_form(target: &str) -> Result<(&str, &str, String), NotAbsolute> {
    let (scheme, rest) = target.split_once("://").ok_or(NotAbsolute::NoScheme)?;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    if authority.contains('@') {
        return Err(NotAbsolute::UserInfo);
    }
    let path = path.split('#').next().unwrap_or_default();
    let path = match path {
        "" => "/".to_owned(),
        p if p.starts_with('?') => format!("/{p}"),
        p => p.to_owned(),
    };
    Ok((scheme, authority, path))
}

/// The origin-form of a request target (`/v1/messages?beta=true`): as it is, or taken from an
/// `http://` absolute-form whose authority is a plain host and port and is followed by its
/// path or nothing (`http://host?/v1/x` is a query that reads like a path: refused). `None`:
/// neither.
pub fn origin_form(target: &str) -> Option<String> {
    if target.starts_with('/') {
        return Some(target.to_owned());
    }
    let (scheme, authority, path) = absolute_form(target).ok()?;
    let after = &target[scheme.len() + 3 + authority.len()..];
    let plain = !authority.is_empty()
        && (after.is_empty() || after.starts_with('/'))
        && authority
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-.:[]".contains(&b));
    (scheme.eq_ignore_ascii_case("http") && plain).then_some(path)
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

    #[test]
    fn absolute_form_is_read_one_way() {
        use super::{NotAbsolute, absolute_form, origin_form};
        assert_eq!(
            absolute_form("http://h:8/p?q#f"),
            Ok(("http", "h:8", "/p?q".to_owned()))
        );
        assert_eq!(
            absolute_form("http://h?q"),
            Ok(("http", "h", "/?q".to_owned()))
        );
        assert_eq!(
            absolute_form("http://h#f"),
            Ok(("http", "h", "/".to_owned()))
        );
        assert_eq!(absolute_form("/p"), Err(NotAbsolute::NoScheme));
        assert_eq!(absolute_form("http://u@h/"), Err(NotAbsolute::UserInfo));
        assert_eq!(origin_form("/v1/messages"), Some("/v1/messages".to_owned()));
        assert_eq!(
            origin_form("HTTP://localhost/v1/x?y"),
            Some("/v1/x?y".to_owned())
        );
        assert_eq!(origin_form("http://[::1]:8/v1"), Some("/v1".to_owned()));
        for refused in [
            "https://localhost/v1",
            "http://a\\b/v1",
            "http://u@localhost/v1",
            "http:///v1",
            "http://localhost?/v1/messages",
            "http://localhost#/v1/messages",
            "*",
            "localhost/v1",
        ] {
            assert_eq!(origin_form(refused), None, "{refused}");
        }
    }
}
