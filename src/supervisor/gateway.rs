//! The credential gateway: the agent speaks plain HTTP/1.1 to a unix socket
//! (`ANTHROPIC_UNIX_SOCKET`), and the supervisor forwards each request over TLS to the real API
//! with the real credential added, so the credential never enters the sandbox (the agent holds
//! a placeholder). Responses are relayed as they arrive: server-sent events stream through.

use crate::supervisor::proxy::io::{self as http, Framing, HeadError, Header, Input};
use crate::supervisor::proxy::server::{Handler, Refused, Server, Sock, Sockets};
use crate::supervisor::proxy::{ConnectionRecord, HEAD_TIMEOUT, MAX_CONNECTIONS};
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, StreamOwned};
use std::fmt;
use std::io::{self, Write};
use std::net::{Shutdown, SocketAddr, TcpStream, ToSocketAddrs};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::Arc;
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

/// How long an idle keep-alive client connection is kept before the gateway closes it.
pub const CLIENT_IDLE: Duration = Duration::from_secs(300);
/// Longest silence from the upstream while a response is awaited or streamed (long
/// non-streaming completions answer late; streams send pings).
pub const UPSTREAM_SILENCE: Duration = Duration::from_secs(600);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The real credential, added to every forwarded request.
#[derive(Clone, PartialEq, Eq)]
pub enum Credential {
    /// Sent as `x-api-key`.
    ApiKey(String),
    /// Sent as `Authorization: Bearer …` (the OAuth token of a logged-in user).
    OAuthToken(String),
}

impl fmt::Debug for Credential {
    // Never print the secret, not even in a debug log.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credential::ApiKey(_) => f.write_str("ApiKey(<redacted>)"),
            Credential::OAuthToken(_) => f.write_str("OAuthToken(<redacted>)"),
        }
    }
}

impl Credential {
    /// The header line to add; `None` if the secret holds control characters (a line break
    /// would let it write headers of its own) or is empty.
    fn header(&self) -> Option<Vec<u8>> {
        let (name, value) = match self {
            Credential::ApiKey(key) => ("x-api-key: ", key.clone()),
            Credential::OAuthToken(token) => ("Authorization: Bearer ", token.clone()),
        };
        if value.is_empty() || value.bytes().any(|b| b.is_ascii_control()) {
            return None;
        }
        Some(format!("{name}{value}\r\n").into_bytes())
    }
}

/// Where the gateway forwards to.
#[derive(Clone)]
pub struct Upstream {
    /// Host name: the `Host` header and the name the certificate must carry.
    pub host: String,
    pub port: u16,
    pub tls: Arc<ClientConfig>,
    /// Where to connect instead of resolving `host` (tests: a loopback server); the
    /// certificate is still verified for `host`.
    pub connect_addr: Option<SocketAddr>,
}

impl fmt::Debug for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Upstream")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("connect_addr", &self.connect_addr)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("TLS configuration for the credential gateway: {0}")]
    Tls(#[from] rustls::Error),
}

/// A TLS client configuration trusting the Mozilla roots compiled in (webpki-roots), so the
/// gateway does not depend on the host's certificate store.
pub fn webpki_client_config() -> Result<Arc<ClientConfig>, GatewayError> {
    let roots = rustls::RootCertStore::from_iter(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    client_config(roots)
}

/// A TLS client configuration trusting exactly `roots` (tests: a test CA).
pub fn client_config(roots: rustls::RootCertStore) -> Result<Arc<ClientConfig>, GatewayError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// The upstream and credential a profile's `[network.gateway]` names, resolved before the
/// sandbox starts so that a missing credential or an unreadable CA stops the launch.
pub fn from_profile(
    config: &crate::profile::GatewayConfig,
    home: &std::path::Path,
) -> Result<(Upstream, Credential), String> {
    let (host, port) = match config.upstream.rsplit_once(':') {
        Some((host, port)) if !host.contains(']') || host.ends_with(']') => (
            host.to_string(),
            port.parse::<u16>()
                .map_err(|_| format!("network.gateway.upstream {:?}: bad port", config.upstream))?,
        ),
        _ => (config.upstream.clone(), 443),
    };
    let connect_addr = config
        .connect
        .as_deref()
        .map(|c| {
            c.parse::<SocketAddr>()
                .map_err(|e| format!("network.gateway.connect {c:?}: {e}"))
        })
        .transpose()?;
    let tls = match &config.ca_file {
        Some(spec) => {
            use rustls::pki_types::pem::PemObject;
            let path = spec.resolve(home, home);
            let mut roots = rustls::RootCertStore::empty();
            let certs = rustls::pki_types::CertificateDer::pem_file_iter(&path)
                .map_err(|e| format!("reading network.gateway.ca_file {}: {e}", path.display()))?;
            for cert in certs {
                let cert = cert.map_err(|e| {
                    format!("reading network.gateway.ca_file {}: {e}", path.display())
                })?;
                roots
                    .add(cert)
                    .map_err(|e| format!("network.gateway.ca_file {}: {e}", path.display()))?;
            }
            client_config(roots).map_err(|e| e.to_string())?
        }
        None => webpki_client_config().map_err(|e| e.to_string())?,
    };
    let credential = if let Some(name) = config.credential.strip_prefix("env:") {
        let value = std::env::var(name).map_err(|_| {
            format!("network.gateway.credential: {name} is not set in stepproof-run's environment")
        })?;
        Credential::ApiKey(value)
    } else {
        let path = home.join(".claude/.credentials.json");
        let text = std::fs::read_to_string(&path).map_err(|e| {
            format!(
                "network.gateway.credential claude-login: reading {}: {e}",
                path.display()
            )
        })?;
        let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
            format!(
                "network.gateway.credential claude-login: {}: {e}",
                path.display()
            )
        })?;
        let token = json["claudeAiOauth"]["accessToken"]
            .as_str()
            .ok_or_else(|| {
                format!(
                    "network.gateway.credential claude-login: no claudeAiOauth.accessToken in {}",
                    path.display()
                )
            })?;
        Credential::OAuthToken(token.to_string())
    };
    Ok((
        Upstream {
            host,
            port,
            tls,
            connect_addr,
        },
        credential,
    ))
}

/// A running gateway. `shutdown` stops it; dropping the handle leaves it running.
pub struct GatewayHandle {
    server: Server,
}

impl GatewayHandle {
    /// Stops accepting, ends open connections, and returns once every record has been sent.
    pub fn shutdown(self) {
        self.server.shutdown();
    }
}

/// Serves the gateway on `listener` from a new thread; one record per request to `records`.
pub fn serve_gateway(
    listener: UnixListener,
    upstream: Upstream,
    credential: Credential,
    records: Sender<ConnectionRecord>,
) -> GatewayHandle {
    let handler = GatewayHandler {
        upstream,
        credential,
        records,
    };
    GatewayHandle {
        server: Server::start("gateway", listener, handler),
    }
}

struct GatewayHandler {
    upstream: Upstream,
    credential: Credential,
    records: Sender<ConnectionRecord>,
}

type TlsStream = StreamOwned<ClientConnection, TcpStream>;

/// The upstream side of one client connection, reused across its keep-alive requests.
struct UpstreamConn {
    input: Input<TlsStream>,
    addr: SocketAddr,
}

impl Handler for GatewayHandler {
    type Stream = UnixStream;

    fn handle(&self, client: UnixStream, sockets: &Sockets) {
        let mut input = Input::new(&client);
        let mut upstream: Option<UpstreamConn> = None;
        loop {
            let start = Instant::now();
            let mut record = ConnectionRecord {
                host: self.upstream.host.clone(),
                port: self.upstream.port,
                rule: "credential gateway".into(),
                ..ConnectionRecord::default()
            };
            let keep_going =
                self.serve_request(&client, &mut input, &mut upstream, sockets, &mut record);
            let Some(keep_going) = keep_going else {
                return; // the client closed (or idled out) between requests: nothing to record
            };
            record.duration_ms = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
            let _ = self.records.send(record);
            if !keep_going {
                let _ = client.shutdown(Shutdown::Both);
                return;
            }
        }
    }

    fn refuse(&self, client: UnixStream, why: Refused) {
        let body = match why {
            Refused::Full => format!(
                "StepProof: the credential gateway is already serving {MAX_CONNECTIONS} connections\n"
            ),
            Refused::ShuttingDown => {
                "StepProof: the credential gateway is shutting down\n".to_owned()
            }
        };
        let _ = client.set_write_timeout(Some(Duration::from_secs(1)));
        let _ = write_status(&mut &client, 503, "Service Unavailable", &body);
        let _ = self.records.send(ConnectionRecord {
            host: self.upstream.host.clone(),
            port: self.upstream.port,
            rule: body.trim_end().to_owned(),
            error: Some(why.to_string()),
            ..ConnectionRecord::default()
        });
    }
}

impl GatewayHandler {
    /// Serves one request. `None`: the connection ended before a request began; `Some(keep)`:
    /// a request was handled (or refused) and `keep` says whether the connection stays open.
    fn serve_request(
        &self,
        client: &UnixStream,
        input: &mut Input<&UnixStream>,
        upstream: &mut Option<UpstreamConn>,
        sockets: &Sockets,
        record: &mut ConnectionRecord,
    ) -> Option<bool> {
        let head = match http::read_request_head(input, Some(CLIENT_IDLE), HEAD_TIMEOUT) {
            Ok(head) => head,
            Err(HeadError::Closed) => return None,
            Err(HeadError::Timeout) if input.buffered().is_empty() => return None,
            Err(e) => {
                record.error = Some(e.to_string());
                let (code, phrase) = match e {
                    HeadError::TooLarge => (431, "Request Header Fields Too Large"),
                    HeadError::Timeout => (408, "Request Timeout"),
                    _ => (400, "Bad Request"),
                };
                let _ = write_status(
                    &mut &*client,
                    code,
                    phrase,
                    &format!("StepProof gateway: {e}\n"),
                );
                return Some(false);
            }
        };
        // Once the head is in, the body may come slowly (the client streams it).
        let _ = client.set_read_timeout(Some(UPSTREAM_SILENCE));
        record.method = head.method.clone();
        let path = match origin_path(&head.target) {
            Some(path) => path,
            None => {
                let why = format!(
                    "StepProof gateway: bad request target `{}`\n",
                    head.target.escape_debug()
                );
                record.error = Some(why.trim_end().to_owned());
                let _ = write_status(&mut &*client, 400, "Bad Request", &why);
                return Some(false);
            }
        };
        record.path = Some(path.clone());
        let framing = match http::body_framing(&head.headers, Framing::None) {
            Ok(framing) => framing,
            Err(why) => {
                record.error = Some(why.clone());
                let _ = write_status(
                    &mut &*client,
                    400,
                    "Bad Request",
                    &format!("StepProof gateway: {why}\n"),
                );
                return Some(false);
            }
        };
        let Some(credential_line) = self.credential.header() else {
            let why = "the configured credential is empty or holds control characters";
            record.error = Some(why.into());
            let _ = write_status(
                &mut &*client,
                500,
                "Internal Server Error",
                &format!("StepProof gateway: {why}\n"),
            );
            return Some(false);
        };
        let client_keep = wants_keep_alive(&head.headers, head.minor);
        if expects_continue(&head.headers) {
            // Answered here rather than relayed: the gateway sends the body only as it reads it,
            // so waiting for the upstream's 100 would stall until the client's own timeout.
            if (&*client)
                .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
                .is_err()
            {
                return Some(false);
            }
        }
        let forwarded = self.forwarded_head(&head.method, &path, &head.headers, &credential_line);

        // Reuse the upstream connection only if it is still open and quiet.
        if upstream.as_ref().is_some_and(|u| !is_reusable(u)) {
            *upstream = None;
        }
        if upstream.is_none() {
            match self.connect_upstream() {
                Ok(conn) => {
                    if let Ok(clone) = conn.input.inner.sock.try_clone() {
                        sockets.register(Sock::Tcp(clone));
                    }
                    *upstream = Some(conn);
                }
                Err(e) => {
                    record.error = Some(e.clone());
                    let _ = write_status(
                        &mut &*client,
                        502,
                        "Bad Gateway",
                        &format!("StepProof gateway: {e}\n"),
                    );
                    return Some(false);
                }
            }
        }
        let Some(conn) = upstream.as_mut() else {
            return Some(false);
        };
        record.resolved = Some(conn.addr.to_string());
        record.allowed = true;

        let sent = (|| -> io::Result<u64> {
            conn.input.inner.write_all(&forwarded)?;
            let body = http::relay_body(input, &mut conn.input.inner, framing)?;
            conn.input.inner.flush()?;
            Ok(forwarded.len() as u64 + body)
        })();
        match sent {
            Ok(n) => record.bytes_up = n,
            Err(e) => {
                record.error = Some(format!("sending the request upstream: {e}"));
                *upstream = None;
                let _ = write_status(
                    &mut &*client,
                    502,
                    "Bad Gateway",
                    "StepProof gateway: sending the request upstream failed\n",
                );
                return Some(false);
            }
        }

        // Relay the response: interim (1xx) heads, then the final head and its body.
        let mut down = 0u64;
        let result = (|| -> Result<bool, String> {
            loop {
                let response = http::read_response_head(&mut conn.input)
                    .map_err(|e| format!("reading the upstream response: {e}"))?;
                (&*client)
                    .write_all(&response.raw)
                    .map_err(|e| format!("writing to the client: {e}"))?;
                down += response.raw.len() as u64;
                if (100..200).contains(&response.code) {
                    if response.code == 101 {
                        return Err("upstream switched protocols; not supported".into());
                    }
                    continue;
                }
                let no_body = head.method.eq_ignore_ascii_case("HEAD")
                    || response.code == 204
                    || response.code == 304;
                let framing = if no_body {
                    Framing::None
                } else {
                    http::body_framing(&response.headers, Framing::UntilClose)
                        .map_err(|e| format!("upstream response: {e}"))?
                };
                let body = http::relay_body(&mut conn.input, &mut &*client, framing)
                    .map_err(|e| format!("relaying the response body: {e}"))?;
                down += body;
                let upstream_keep =
                    framing != Framing::UntilClose && wants_keep_alive(&response.headers, 1);
                return Ok(upstream_keep);
            }
        })();
        record.bytes_down = down;
        match result {
            Ok(upstream_keep) => {
                if !upstream_keep {
                    *upstream = None;
                }
                // The upstream's head went to the client as it was: if it said close, so do we.
                Some(client_keep && upstream_keep)
            }
            Err(e) => {
                record.error = Some(e);
                *upstream = None;
                if down == 0 {
                    let _ = write_status(
                        &mut &*client,
                        502,
                        "Bad Gateway",
                        "StepProof gateway: no response from the upstream\n",
                    );
                }
                Some(false)
            }
        }
    }

    /// The request as sent upstream: `Host` set to the upstream, the client's credentials and
    /// hop-by-hop headers removed, the real credential added.
    fn forwarded_head(
        &self,
        method: &str,
        path: &str,
        headers: &[Header],
        credential_line: &[u8],
    ) -> Vec<u8> {
        const DROPPED: &[&str] = &[
            "host",
            "x-api-key",
            "authorization",
            "proxy-authorization",
            "connection",
            "proxy-connection",
            "keep-alive",
            "upgrade",
            "te",
            "expect",
        ];
        let mut out = Vec::with_capacity(2048);
        out.extend_from_slice(format!("{method} {path} HTTP/1.1\r\n").as_bytes());
        let host = if self.upstream.port == 443 {
            self.upstream.host.clone()
        } else {
            format!("{}:{}", self.upstream.host, self.upstream.port)
        };
        out.extend_from_slice(format!("Host: {host}\r\n").as_bytes());
        http::write_forwarded_headers(&mut out, headers, DROPPED);
        out.extend_from_slice(credential_line);
        out.extend_from_slice(b"\r\n");
        out
    }

    fn connect_upstream(&self) -> Result<UpstreamConn, String> {
        let up = &self.upstream;
        let addrs: Vec<SocketAddr> = match up.connect_addr {
            Some(addr) => vec![addr],
            None => (up.host.as_str(), up.port)
                .to_socket_addrs()
                .map_err(|e| format!("cannot resolve {}: {e}", up.host))?
                .collect(),
        };
        let mut last = format!("{} has no addresses", up.host);
        for addr in addrs {
            let tcp = match TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
                Ok(tcp) => tcp,
                Err(e) => {
                    last = format!("cannot connect to {} ({addr}): {e}", up.host);
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            let _ = tcp.set_read_timeout(Some(UPSTREAM_SILENCE));
            let name = ServerName::try_from(up.host.clone())
                .map_err(|e| format!("upstream host `{}`: {e}", up.host))?;
            let tls = ClientConnection::new(up.tls.clone(), name)
                .map_err(|e| format!("TLS with {}: {e}", up.host))?;
            let mut stream = StreamOwned::new(tls, tcp);
            // Handshake now, so a certificate problem is reported as such.
            while stream.conn.is_handshaking() {
                stream
                    .conn
                    .complete_io(&mut stream.sock)
                    .map_err(|e| format!("TLS handshake with {} ({addr}): {e}", up.host))?;
            }
            return Ok(UpstreamConn {
                input: Input::new(stream),
                addr,
            });
        }
        Err(last)
    }
}

/// An idle upstream connection is reusable when nothing is waiting on it: no buffered bytes and
/// neither end of stream nor data (a TLS close_notify, say) readable on the socket.
fn is_reusable(conn: &UpstreamConn) -> bool {
    if !conn.input.buffered().is_empty() {
        return false;
    }
    let sock = &conn.input.inner.sock;
    if sock.set_nonblocking(true).is_err() {
        return false;
    }
    let mut probe = [0u8; 1];
    let quiet = matches!(sock.peek(&mut probe), Err(e) if e.kind() == io::ErrorKind::WouldBlock);
    sock.set_nonblocking(false).is_ok() && quiet
}

/// The origin-form path of a request to the gateway (`/v1/messages?beta=true`); absolute-form
/// (`http://localhost/v1/…`) is accepted for its path only.
fn origin_path(target: &str) -> Option<String> {
    if target.starts_with('/') {
        return Some(target.to_owned());
    }
    let rest = target
        .strip_prefix("http://")
        .or_else(|| target.strip_prefix("HTTP://"))?;
    match rest.find('/') {
        Some(i) => Some(rest[i..].to_owned()),
        None => Some("/".to_owned()),
    }
}

fn has_token(headers: &[Header], name: &str, token: &str) -> bool {
    http::header_values(headers, name)
        .flat_map(|v| v.split(|b| *b == b','))
        .any(|v| {
            String::from_utf8_lossy(v)
                .trim()
                .eq_ignore_ascii_case(token)
        })
}

fn wants_keep_alive(headers: &[Header], minor: u8) -> bool {
    if has_token(headers, "connection", "close") {
        return false;
    }
    minor >= 1 || has_token(headers, "connection", "keep-alive")
}

fn expects_continue(headers: &[Header]) -> bool {
    has_token(headers, "expect", "100-continue")
}

fn write_status(out: &mut impl Write, code: u16, phrase: &str, body: &str) -> io::Result<()> {
    let response = format!(
        "HTTP/1.1 {code} {phrase}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    out.write_all(response.as_bytes())
}
