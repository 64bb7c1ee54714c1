//! The one blocking HTTP/1.1 client of the supervisor: the login refresh, server-managed
//! settings, the approval webhook and the OTLP export each make a handful of small requests a
//! run through [`request`]. One connection per request (`Connection: close`), plain or over
//! rustls, one deadline for the whole exchange, and its failures sorted into the three kinds
//! its callers act on ([`ErrorKind`]).
//!
//! What it does, in order: checks the request (a method, path, header name or value that could
//! write a line of its own is refused before anything is sent); resolves the host; connects
//! with the time left (trying each address); over TLS, completes the handshake before sending
//! anything (a certificate that is not trusted now will not be a second later); sends the head
//! (`Host`, `User-Agent: stepproof/<version>` unless the caller names its own, `Connection: close`, `Content-Length` when there
//! is a body or the method expects one, then the caller's headers) and the body; reads until
//! the body is complete or the server closes, never more than `max_response` bytes; parses the
//! head with `httparse` and decodes the body by `Content-Length`, with the one chunked coding
//! ([`crate::http::chunked::dechunk`]), or to the end of the connection. An answer that
//! contradicts itself (a `Content-Length` beside `Transfer-Encoding`, two lengths, a body cut
//! short of its length or last chunk) is an error, never read as something else.
//!
//! **Why not `ureq`.** Issue 40 asked to consider `ureq` 3 with rustls instead; measured on this
//! tree, it adds five crates (`ureq`, `ureq-proto`, `http`, `percent-encoding`, `utf8-zero`:
//! 179 → 184 in `cargo tree -e normal`), and a one-GET program over rustls built with our
//! release profile (LTO, one codegen unit, stripped) is 2.08 MB with ureq against 1.70 MB with
//! rustls and httparse by hand: about 370 KB more. What it would do for us is small: a handful
//! of small requests a run, each on a fresh connection, with one deadline for the whole
//! exchange and errors sorted by whether a server was reached. ureq takes its own list of root
//! certificates rather than our `Arc<rustls::ClientConfig>` (the trust the login, the settings
//! and the webhook share, parsed once per process); its errors would be mapped back to our three
//! kinds by variant and message (an untrusted certificate and a reset both arrive as TLS or I/O
//! errors); its pool, redirects, proxies and body readers are features we would turn off; and
//! the chunked decoding would no longer be the boundary's one decoder. What is left here is a
//! connect, a handshake, a write and a read loop: kept.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Instant;

use rustls::ClientConfig;

use crate::http::url::{Url, host_header};

/// The longest head of an answer read (status line and headers).
const MAX_HEAD: usize = 64 * 1024;

/// One request: where (`tls`, `host`, `port`, `path`), what (`method`, `headers`, `body`) and
/// the bounds of the exchange (`deadline`, `max_response`).
#[derive(Debug, Clone)]
pub struct Request<'a> {
    pub method: &'a str,
    /// `Some` for https: the trust the server's certificate is checked against.
    pub tls: Option<Arc<ClientConfig>>,
    /// A name or an IP address (an IPv6 literal without brackets).
    pub host: &'a str,
    pub port: u16,
    /// The request target in origin form (`/v1/logs`, with a query if any).
    pub path: &'a str,
    /// Headers besides the client's own (`Host`, `Connection`, `Content-Length`,
    /// `Transfer-Encoding`), which they may not name; a `User-Agent` here replaces the client's.
    pub headers: &'a [(&'a str, &'a str)],
    pub body: &'a [u8],
    /// When the whole exchange (resolution, connection, handshake, request and answer) ends.
    pub deadline: Instant,
    /// The most bytes of the answer read, head and body as sent.
    pub max_response: usize,
}

impl<'a> Request<'a> {
    /// A request to `url` without headers or body (`tls` is used for an `https` URL only).
    pub fn to(
        url: &'a Url,
        method: &'a str,
        tls: &Arc<ClientConfig>,
        deadline: Instant,
        max_response: usize,
    ) -> Request<'a> {
        Request {
            method,
            tls: url.tls.then(|| tls.clone()),
            host: &url.host,
            port: url.port,
            path: url.request_path(),
            headers: &[],
            body: b"",
            deadline,
            max_response,
        }
    }
}

/// An answer: status, headers (names lower-case, in order) and the decoded body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Vec<u8>,
}

impl Response {
    /// The first header of this (lower-case) name.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_slice())
    }
}

/// What a failure means to the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// No server was reached: the name does not resolve, no address takes the connection, or
    /// the TLS handshake failed on the certificate or the protocol (it will fail again).
    Unreachable,
    /// A server was reached but the exchange failed: a timeout (the deadline), a reset, an
    /// answer too large, cut short or malformed. Trying again later may work.
    Transient,
    /// The request itself cannot be sent: a header, method or path that could write lines of
    /// its own, or a host that is not a TLS server name.
    Refused,
}

/// Why a request brought no answer; the message names the host.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ClientError {
    pub kind: ErrorKind,
    pub message: String,
}

impl ClientError {
    fn new(kind: ErrorKind, message: String) -> ClientError {
        ClientError { kind, message }
    }
}

/// The connection, plain or over TLS.
enum Conn {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Conn {
    fn tcp(&self) -> &TcpStream {
        match self {
            Conn::Plain(tcp) => tcp,
            Conn::Tls(tls) => &tls.sock,
        }
    }

    fn stream(&mut self) -> &mut dyn ReadWrite {
        match self {
            Conn::Plain(tcp) => tcp,
            Conn::Tls(tls) => tls.as_mut(),
        }
    }
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

/// Sends `req` and reads its answer, all by `req.deadline`.
pub fn request(req: &Request<'_>) -> Result<Response, ClientError> {
    let head = request_head(req)?;
    let where_ = if req.host.contains(':') {
        format!("[{}]:{}", req.host, req.port)
    } else {
        format!("{}:{}", req.host, req.port)
    };
    let timed_out = || ClientError::new(ErrorKind::Transient, format!("{where_}: timed out"));
    let left = || {
        req.deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(timed_out)
    };
    let unreachable = |what: String| ClientError::new(ErrorKind::Unreachable, what);
    let transient = |what: String| ClientError::new(ErrorKind::Transient, what);
    let server_name = match &req.tls {
        Some(_) => Some(
            rustls::pki_types::ServerName::try_from(req.host.to_owned()).map_err(|e| {
                ClientError::new(ErrorKind::Refused, format!("TLS name {}: {e}", req.host))
            })?,
        ),
        None => None,
    };

    let addrs: Vec<SocketAddr> = (req.host, req.port)
        .to_socket_addrs()
        .map_err(|e| unreachable(format!("resolving {}: {e}", req.host)))?
        .collect();
    let mut last = None;
    let mut tcp = None;
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, left()?) {
            Ok(stream) => {
                tcp = Some(stream);
                break;
            }
            Err(e) => last = Some(e),
        }
    }
    let tcp = tcp.ok_or_else(|| {
        let why = last.map_or("no address".to_owned(), |e| e.to_string());
        unreachable(format!("connecting to {where_}: {why}"))
    })?;
    let _ = tcp.set_nodelay(true);
    let set_timeouts = |tcp: &TcpStream| -> Result<(), ClientError> {
        let d = left()?;
        tcp.set_read_timeout(Some(d))
            .and_then(|()| tcp.set_write_timeout(Some(d)))
            .map_err(|e| transient(format!("{where_}: {e}")))
    };
    set_timeouts(&tcp)?;

    let mut conn = match (&req.tls, server_name) {
        (Some(config), Some(name)) => {
            let mut tls = rustls::ClientConnection::new(config.clone(), name)
                .map_err(|e| transient(format!("TLS with {where_}: {e}")))?;
            let mut tcp = tcp;
            // The handshake alone first: a certificate that is not trusted (InvalidData) will
            // not be trusted a second later, so it counts as not reaching the server.
            while tls.is_handshaking() {
                set_timeouts(&tcp)?;
                if let Err(e) = tls.complete_io(&mut tcp) {
                    let why = format!("TLS handshake with {where_}: {e}");
                    return Err(match e.kind() {
                        io::ErrorKind::InvalidData => unreachable(why),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => timed_out(),
                        _ => transient(why),
                    });
                }
            }
            Conn::Tls(Box::new(rustls::StreamOwned::new(tls, tcp)))
        }
        _ => Conn::Plain(tcp),
    };

    set_timeouts(conn.tcp())?;
    let io_error = |what: &str, e: io::Error| match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => timed_out(),
        _ => transient(format!("{what} {where_}: {e}")),
    };
    let stream = conn.stream();
    stream
        .write_all(&head)
        .and_then(|()| stream.write_all(req.body))
        .and_then(|()| stream.flush())
        .map_err(|e| io_error("sending to", e))?;

    let mut reader = Reader::new(req.method == "HEAD", req.max_response);
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let d = left()?;
        conn.tcp()
            .set_read_timeout(Some(d))
            .map_err(|e| transient(format!("{where_}: {e}")))?;
        let n = read_some(conn.stream(), &mut chunk)
            .map_err(|e| io_error("reading the answer of", e))?;
        let more = if n == 0 { None } else { Some(&chunk[..n]) };
        match reader.take(more) {
            Ok(Some(response)) => return Ok(response),
            Ok(None) => {}
            Err(why) => return Err(transient(format!("{where_}: {why}"))),
        }
    }
}

/// The head of `req`, or why it is refused.
fn request_head(req: &Request<'_>) -> Result<Vec<u8>, ClientError> {
    let refused = |why: String| Err(ClientError::new(ErrorKind::Refused, why));
    if req.method.is_empty() || !req.method.bytes().all(is_tchar) {
        return refused(format!(
            "{}: the method {:?} is not a token",
            req.host, req.method
        ));
    }
    if !req.path.starts_with('/') || !req.path.bytes().all(|b| b.is_ascii_graphic()) {
        return refused(format!(
            "{}: the path {:?} is not an origin-form target",
            req.host, req.path
        ));
    }
    if req.host.is_empty()
        || !req
            .host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._:".contains(&b))
    {
        return refused(format!(
            "the host {:?} is not a name or an address",
            req.host
        ));
    }
    for (name, value) in req.headers {
        if name.is_empty() || !name.bytes().all(is_tchar) {
            return refused(format!(
                "{}: a header name holds control characters or separators",
                req.host
            ));
        }
        // RFC 9110's field-value: visible characters, spaces, tabs and obs-text.
        if value.bytes().any(|b| b.is_ascii_control() && b != b'\t') {
            return refused(format!(
                "{}: the header {name} holds control characters",
                req.host
            ));
        }
        let lower = name.to_ascii_lowercase();
        if matches!(
            lower.as_str(),
            "host" | "content-length" | "transfer-encoding" | "connection"
        ) {
            return refused(format!(
                "{}: the header {name} is the client's own",
                req.host
            ));
        }
    }
    let mut head = format!(
        "{} {} HTTP/1.1\r\nHost: {}\r\n",
        req.method,
        req.path,
        host_header(req.host, req.port, req.tls.is_some()),
    );
    // A caller's own User-Agent (an export's configured headers) replaces ours.
    if !req
        .headers
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case("user-agent"))
    {
        head.push_str(concat!(
            "User-Agent: stepproof/",
            env!("CARGO_PKG_VERSION"),
            "\r\n"
        ));
    }
    head.push_str("Connection: close\r\n");
    if !req.body.is_empty() || matches!(req.method, "POST" | "PUT" | "PATCH") {
        head.push_str(&format!("Content-Length: {}\r\n", req.body.len()));
    }
    for (name, value) in req.headers {
        head.push_str(name);
        head.push_str(": ");
        head.push_str(value);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    Ok(head.into_bytes())
}

/// RFC 9110's `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// A TLS peer that closes without `close_notify` ends the answer as an orderly close does.
fn read_some(stream: &mut dyn ReadWrite, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match stream.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// How the body of an answer ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    Length(usize),
    Chunked,
    UntilClose,
}

/// The answer as it arrives: bytes in, a [`Response`] out once it is complete.
struct Reader {
    head_request: bool,
    max: usize,
    buf: Vec<u8>,
    /// Once the head is read.
    head: Option<Head>,
}

/// The head of an answer, read.
struct Head {
    status: u16,
    headers: Vec<(String, Vec<u8>)>,
    /// Its length in bytes: the body starts there.
    len: usize,
    framing: Framing,
}

impl Reader {
    fn new(head_request: bool, max: usize) -> Reader {
        Reader {
            head_request,
            max,
            buf: Vec::new(),
            head: None,
        }
    }

    /// Takes the next bytes (`None`: the server closed); the answer once complete.
    fn take(&mut self, more: Option<&[u8]>) -> Result<Option<Response>, String> {
        let closed = more.is_none();
        if let Some(more) = more {
            self.buf.extend_from_slice(more);
            if self.buf.len() > self.max {
                return Err(format!("answered more than {} bytes", self.max));
            }
        }
        if self.head.is_none() {
            match self.parse_head()? {
                Some(head) => self.head = Some(head),
                None if closed && self.buf.is_empty() => {
                    return Err("the connection closed before an answer".into());
                }
                None if closed => return Err("the answer ended in its head".into()),
                None => return Ok(None),
            }
        }
        let Some(head) = &self.head else {
            return Ok(None);
        };
        let body = &self.buf[head.len..];
        let body = match head.framing {
            Framing::Length(n) if body.len() >= n => body[..n].to_vec(),
            Framing::Length(_) if closed => {
                return Err("the body is shorter than its Content-Length".into());
            }
            Framing::Length(_) => return Ok(None),
            Framing::Chunked => match crate::http::chunked::dechunk(body, self.max) {
                Ok(body) => body,
                Err(crate::http::chunked::ChunkError::CutShort) if !closed => return Ok(None),
                Err(e) => return Err(format!("chunked body: {e}")),
            },
            Framing::UntilClose if closed => body.to_vec(),
            Framing::UntilClose => return Ok(None),
        };
        Ok(Some(Response {
            status: head.status,
            headers: head.headers.clone(),
            body,
        }))
    }

    /// The head, once whole (interim 1xx answers skipped).
    fn parse_head(&mut self) -> Result<Option<Head>, String> {
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 64];
            let mut response = httparse::Response::new(&mut headers);
            let head_len = match response.parse(&self.buf) {
                Ok(httparse::Status::Complete(n)) => n,
                Ok(httparse::Status::Partial) if self.buf.len() > MAX_HEAD => {
                    return Err(format!("an answer head longer than {MAX_HEAD} bytes"));
                }
                Ok(httparse::Status::Partial) => return Ok(None),
                Err(e) => return Err(format!("a malformed answer: {e}")),
            };
            let status = response.code.unwrap_or(0);
            if (100..200).contains(&status) && status != 101 {
                self.buf.drain(..head_len);
                continue;
            }
            let headers: Vec<(String, Vec<u8>)> = response
                .headers
                .iter()
                .map(|h| (h.name.to_ascii_lowercase(), h.value.to_vec()))
                .collect();
            let framing = framing(status, self.head_request, &headers)?;
            if let Framing::Length(n) = framing
                && n > self.max.saturating_sub(head_len)
            {
                return Err(format!(
                    "answered more than {} bytes (Content-Length {n})",
                    self.max
                ));
            }
            return Ok(Some(Head {
                status,
                headers,
                len: head_len,
                framing,
            }));
        }
    }
}

/// How the body of an answer with this status and these headers ends (RFC 9112 §6.3); an
/// answer that says it two ways is refused.
fn framing(
    status: u16,
    head_request: bool,
    headers: &[(String, Vec<u8>)],
) -> Result<Framing, String> {
    if head_request || status == 204 || status == 304 || (100..200).contains(&status) {
        return Ok(Framing::Length(0));
    }
    let values = |name: &str| -> Vec<String> {
        headers
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| String::from_utf8_lossy(v).trim().to_ascii_lowercase())
            .collect()
    };
    let te = values("transfer-encoding");
    let lengths = values("content-length");
    if !te.is_empty() {
        if !lengths.is_empty() {
            return Err("an answer with both Transfer-Encoding and Content-Length".into());
        }
        let last = te
            .iter()
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .rfind(|c| !c.is_empty());
        return Ok(if last == Some("chunked") {
            Framing::Chunked
        } else {
            Framing::UntilClose
        });
    }
    let mut length = None;
    for value in lengths.iter().flat_map(|v| v.split(',')).map(str::trim) {
        let n = (!value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()))
            .then(|| value.parse::<usize>().ok())
            .flatten()
            .ok_or_else(|| format!("a bad Content-Length {value:?}"))?;
        if length.is_some_and(|l| l != n) {
            return Err("an answer with two different Content-Lengths".into());
        }
        length = Some(n);
    }
    Ok(length.map_or(Framing::UntilClose, Framing::Length))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::sync::mpsc;
    use std::thread;
    use std::time::Duration;

    /// What a test server does with its one connection: writes `parts` with `pause` between
    /// them, then closes. The request it read comes back on the channel.
    struct Script {
        parts: Vec<Vec<u8>>,
        pause: Duration,
    }

    fn answer(parts: &[&[u8]]) -> Script {
        Script {
            parts: parts.iter().map(|p| p.to_vec()).collect(),
            pause: Duration::ZERO,
        }
    }

    /// Reads a request head and its `Content-Length` body.
    fn read_request(stream: &mut dyn Read) -> Vec<u8> {
        let mut got = Vec::new();
        let mut byte = [0u8; 1];
        while !got.ends_with(b"\r\n\r\n") {
            match stream.read(&mut byte) {
                Ok(1) => got.push(byte[0]),
                _ => return got,
            }
        }
        let head = String::from_utf8_lossy(&got).to_ascii_lowercase();
        let length = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .map_or(0, |n| n.trim().parse::<usize>().unwrap());
        let mut body = vec![0u8; length];
        stream.read_exact(&mut body).unwrap();
        got.extend_from_slice(&body);
        got
    }

    fn serve(
        stream: &mut dyn ReadWrite,
        script: &Script,
        requests: &mpsc::Sender<Vec<u8>>,
    ) -> io::Result<()> {
        let _ = requests.send(read_request(stream));
        for (i, part) in script.parts.iter().enumerate() {
            if i > 0 {
                thread::sleep(script.pause);
            }
            stream.write_all(part)?;
            stream.flush()?;
        }
        Ok(())
    }

    /// A loopback server for one connection: plain, or TLS with `tls`.
    fn server(
        script: Script,
        tls: Option<Arc<rustls::ServerConfig>>,
    ) -> (u16, mpsc::Receiver<Vec<u8>>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let (mut tcp, _) = listener.accept().unwrap();
            tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            match tls {
                Some(config) => {
                    let conn = rustls::ServerConnection::new(config).unwrap();
                    let mut tls = rustls::StreamOwned::new(conn, tcp);
                    if serve(&mut tls, &script, &tx).is_ok() {
                        tls.conn.send_close_notify();
                        let _ = tls.flush();
                    }
                }
                None => {
                    let _ = serve(&mut tcp, &script, &tx);
                }
            }
        });
        (port, rx)
    }

    /// A CA, and a server configuration for `localhost` and 127.0.0.1 signed by it.
    fn test_ca() -> (Arc<rustls::ServerConfig>, Arc<ClientConfig>) {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "client test CA");
        let ca_cert = ca_params.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let server = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca_cert.der().clone()).unwrap();
        let client = crate::http::tls::client_config(roots).unwrap();
        (Arc::new(server), client)
    }

    fn post<'a>(port: u16, tls: Option<Arc<ClientConfig>>, body: &'a [u8]) -> Request<'a> {
        Request {
            method: "POST",
            tls,
            host: "localhost",
            port,
            path: "/v1/logs?x=1",
            headers: &[("Content-Type", "application/json"), ("X-Tab", "a\tb")],
            body,
            deadline: Instant::now() + Duration::from_secs(10),
            max_response: 4096,
        }
    }

    #[test]
    fn a_content_length_body_is_read_to_its_length_and_the_request_is_framed() {
        let (port, requests) = server(
            answer(&[b"HTTP/1.1 201 Created\r\nX-Sig: sha256=ab\r\nContent-Length: 2\r\n\r\n{}"]),
            None,
        );
        let r = request(&post(port, None, b"hello")).unwrap();
        assert_eq!((r.status, r.body.as_slice()), (201, b"{}".as_slice()));
        assert_eq!(r.header("x-sig"), Some(b"sha256=ab".as_slice()));
        let sent = String::from_utf8(requests.recv().unwrap()).unwrap();
        assert_eq!(
            sent,
            format!(
                "POST /v1/logs?x=1 HTTP/1.1\r\nHost: localhost:{port}\r\nUser-Agent: stepproof/{}\r\nConnection: close\r\nContent-Length: 5\r\nContent-Type: application/json\r\nX-Tab: a\tb\r\n\r\nhello",
                env!("CARGO_PKG_VERSION")
            )
        );
    }

    #[test]
    fn a_get_has_no_content_length_and_a_callers_user_agent_replaces_ours() {
        let (port, requests) = server(answer(&[b"HTTP/1.1 204 No Content\r\n\r\n"]), None);
        let url = Url::parse(&format!("http://127.0.0.1:{port}/status/")).unwrap();
        let tls = crate::http::tls::client_config(rustls::RootCertStore::empty()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let r = request(&Request {
            headers: &[("user-agent", "collector-probe/1")],
            ..Request::to(&url, "GET", &tls, deadline, 4096)
        })
        .unwrap();
        assert_eq!((r.status, r.body.len()), (204, 0));
        let sent = String::from_utf8(requests.recv().unwrap()).unwrap();
        assert_eq!(
            sent,
            format!(
                "GET /status HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nuser-agent: collector-probe/1\r\n\r\n"
            )
        );
    }

    #[test]
    fn a_content_length_body_ends_the_answer_while_the_server_keeps_the_connection() {
        // The server would keep the connection for 10 s: the client stops at the length.
        let (port, _requests) = server(
            Script {
                parts: vec![
                    b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc".to_vec(),
                    vec![],
                ],
                pause: Duration::from_secs(10),
            },
            None,
        );
        let start = Instant::now();
        let r = request(&post(port, None, b"")).unwrap();
        assert_eq!(r.body, b"abc");
        assert!(start.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_chunked_body_is_decoded_over_tls_and_as_it_arrives() {
        let (server_tls, client_tls) = test_ca();
        let (port, _requests) = server(
            Script {
                parts: vec![
                    b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 400 Bad\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n".to_vec(),
                    b"2;x=y\r\nde\r\n0\r\n\r\n".to_vec(),
                    vec![],
                ],
                pause: Duration::from_millis(100),
            },
            Some(server_tls),
        );
        let r = request(&post(port, Some(client_tls), b"{}")).unwrap();
        assert_eq!((r.status, r.body.as_slice()), (400, b"abcde".as_slice()));
    }

    #[test]
    fn a_body_without_length_is_read_until_close() {
        let (port, _requests) = server(answer(&[b"HTTP/1.1 200 OK\r\n\r\nuntil-", b"close"]), None);
        let r = request(&post(port, None, b"")).unwrap();
        assert_eq!(r.body, b"until-close");
        // Over TLS, with or without close_notify (the server here sends it).
        let (server_tls, client_tls) = test_ca();
        let (port, _requests) = server(
            answer(&[b"HTTP/1.1 200 OK\r\n\r\nuntil-close"]),
            Some(server_tls),
        );
        let r = request(&Request {
            method: "GET",
            ..post(port, Some(client_tls), b"")
        })
        .unwrap();
        assert_eq!(r.body, b"until-close");
    }

    #[test]
    fn an_oversize_answer_is_refused() {
        for answer_bytes in [
            // Announced too long...
            b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\nabc".to_vec(),
            // ... or sent too long, until close...
            [b"HTTP/1.1 200 OK\r\n\r\n".as_slice(), &[b'x'; 5000]].concat(),
            // ... or chunked.
            [
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1388\r\n".as_slice(),
                &[b'x'; 5000],
            ]
            .concat(),
        ] {
            let (port, _requests) = server(answer(&[&answer_bytes]), None);
            let e = request(&post(port, None, b"")).unwrap_err();
            assert_eq!(e.kind, ErrorKind::Transient, "{e}");
            assert!(e.message.contains("more than 4096 bytes"), "{e}");
            assert!(e.message.contains("localhost"), "{e}");
        }
    }

    #[test]
    fn a_deadline_that_expires_mid_read_is_transient() {
        let (port, _requests) = server(
            Script {
                parts: vec![
                    b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc".to_vec(),
                    b"defghij".to_vec(),
                ],
                pause: Duration::from_secs(5),
            },
            None,
        );
        let start = Instant::now();
        let e = request(&Request {
            deadline: Instant::now() + Duration::from_millis(500),
            ..post(port, None, b"")
        })
        .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Transient, "{e}");
        assert!(e.message.contains("timed out"), "{e}");
        let took = start.elapsed();
        assert!(
            took >= Duration::from_millis(450) && took < Duration::from_secs(3),
            "{took:?}"
        );
    }

    #[test]
    fn a_refused_connection_and_an_unknown_name_are_unreachable() {
        // A port just released: nothing listens there.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let e = request(&Request {
            host: "127.0.0.1",
            ..post(port, None, b"")
        })
        .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Unreachable, "{e}");
        assert!(
            e.message
                .contains(&format!("connecting to 127.0.0.1:{port}")),
            "{e}"
        );
        let e = request(&Request {
            host: "nxdomain.invalid",
            ..post(port, None, b"")
        })
        .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Unreachable, "{e}");
        assert!(e.message.contains("resolving nxdomain.invalid"), "{e}");
    }

    #[test]
    fn an_untrusted_certificate_is_unreachable_and_nothing_is_sent() {
        let (server_tls, _) = test_ca();
        let (_, other_ca) = test_ca();
        let (port, requests) = server(answer(&[b"HTTP/1.1 200 OK\r\n\r\n"]), Some(server_tls));
        let e = request(&post(port, Some(other_ca), b"secret")).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Unreachable, "{e}");
        assert!(e.message.contains("TLS handshake with localhost"), "{e}");
        // The server's handshake failed too: it read no request.
        assert!(
            requests
                .recv_timeout(Duration::from_secs(5))
                .unwrap_or_default()
                .is_empty()
        );
    }

    #[test]
    fn header_injection_is_refused_before_connecting() {
        // Nothing listens on port 9: a refusal here is the request's, not the connection's.
        let base = || Request {
            host: "127.0.0.1",
            ..post(9, None, b"")
        };
        for headers in [
            &[("X-A", "v\r\nX-Injected: 1")][..],
            &[("X-A", "v\nX-Injected: 1")],
            &[("X-A", "nul\0")],
            &[("X-A\r\nX-Injected", "1")],
            &[("X A", "1")],
            &[("X-A:", "1")],
            &[("", "1")],
            &[("Content-Length", "0")],
            &[("transfer-encoding", "chunked")],
            &[("Host", "elsewhere")],
            &[("Connection", "keep-alive")],
        ] {
            let e = request(&Request { headers, ..base() }).unwrap_err();
            assert_eq!(e.kind, ErrorKind::Refused, "{headers:?}: {e}");
        }
        for (method, path) in [
            ("GET /x HTTP/1.1\r\nX:", "/"),
            ("GET", "/a b"),
            ("GET", "/a\r\nX: 1"),
            ("GET", "http://elsewhere/"),
            ("GET", ""),
        ] {
            let e = request(&Request {
                method,
                path,
                ..base()
            })
            .unwrap_err();
            assert_eq!(e.kind, ErrorKind::Refused, "{method:?} {path:?}: {e}");
        }
        let e = request(&Request {
            host: "a\r\nb",
            ..base()
        })
        .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Refused, "{e}");
    }

    #[test]
    fn answers_that_contradict_themselves_are_refused() {
        let reader = |raw: &[u8]| {
            let mut r = Reader::new(false, 4096);
            match r.take(Some(raw)) {
                Ok(Some(response)) => Ok((response.status, response.body)),
                Ok(None) => r.take(None).map(|r| {
                    let r = r.unwrap();
                    (r.status, r.body)
                }),
                Err(e) => Err(e),
            }
        };
        assert_eq!(
            reader(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}extra").unwrap(),
            (200, b"{}".to_vec())
        );
        assert_eq!(
            reader(b"HTTP/1.1 204 No Content\r\n\r\n").unwrap(),
            (204, vec![])
        );
        assert_eq!(
            reader(b"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\nab").unwrap(),
            (200, b"ab".to_vec())
        );
        for bad in [
            b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nab".as_slice(),
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc",
            b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\nab",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\nabc\r\n0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n",
            b"HTTP/1.1 200 OK\r\nX: 1\r\n",
            b"",
            b"NOT HTTP\r\n\r\n",
        ] {
            assert!(reader(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
        // A HEAD's answer has no body, whatever its Content-Length.
        let mut head = Reader::new(true, 4096);
        let r = head
            .take(Some(b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n"))
            .unwrap()
            .unwrap();
        assert!(r.body.is_empty());
    }
}
