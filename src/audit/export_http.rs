//! The one request the exporter makes: `POST` of a protobuf body over HTTP/1.1 (rustls for
//! `https`), blocking, on the shipper's own thread, with a deadline on every step. One
//! connection per request (`Connection: close`): batches are few, and nothing is left half-read.

use crate::audit::export_config::{Endpoint, ExportConfig};
use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The largest response read (a collector answers with a small protobuf or a short error).
const MAX_RESPONSE: usize = 1 << 20;

/// Why a request did not deliver its records.
#[derive(Debug)]
pub enum SendError {
    /// Nothing reached a collector (refused, unreachable, name not found): waiting for it at the
    /// end of a run is pointless.
    Unreachable(String),
    /// A collector was reached but the request failed or timed out (retry later).
    Transient(String),
    /// The collector refused these records for good (HTTP 4xx other than 408/429); they stay in
    /// the outbox, and shipping stops until a person looks.
    Refused(String),
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SendError::Unreachable(m) | SendError::Transient(m) | SendError::Refused(m) => {
                f.write_str(m)
            }
        }
    }
}

/// A collector's answer to a delivered request.
#[derive(Debug, Default)]
pub struct Delivered {
    /// Records the collector said it rejected (OTLP partial success).
    pub rejected: u64,
    pub message: Option<String>,
}

/// The TLS configuration for `https` endpoints: the public web roots, or the PEM roots of
/// `OTEL_EXPORTER_OTLP_CERTIFICATE`.
pub fn tls_config(config: &ExportConfig) -> Result<Option<Arc<rustls::ClientConfig>>, String> {
    if !config.endpoint.tls {
        return Ok(None);
    }
    let roots = match &config.certificate {
        Some(path) => {
            let mut roots = rustls::RootCertStore::empty();
            if crate::http::tls::add_pem_file(&mut roots, path)? == 0 {
                return Err(format!("no certificate in {}", path.display()));
            }
            roots
        }
        None => crate::http::tls::webpki_roots(),
    };
    crate::http::tls::client_config(roots)
        .map(Some)
        .map_err(|e| format!("TLS set-up: {e}"))
}

trait Stream: Read + Write {}
impl<T: Read + Write> Stream for T {}

/// Sends one request body; the whole exchange ends by `deadline`.
pub fn post(
    endpoint: &Endpoint,
    headers: &[(String, String)],
    tls: Option<&Arc<rustls::ClientConfig>>,
    body: &[u8],
    deadline: Instant,
) -> Result<Delivered, SendError> {
    let left = || {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| SendError::Transient("timed out".to_string()))
    };
    let where_ = format!("{}:{}", endpoint.host, endpoint.port);
    let addrs: Vec<_> = (endpoint.host.as_str(), endpoint.port)
        .to_socket_addrs()
        .map_err(|e| SendError::Unreachable(format!("resolving {}: {e}", endpoint.host)))?
        .collect();
    let mut last = None;
    let mut tcp = None;
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, left()?) {
            Ok(s) => {
                tcp = Some(s);
                break;
            }
            Err(e) => last = Some(e),
        }
    }
    let tcp = tcp.ok_or_else(|| {
        let why = last.map_or("no address".to_string(), |e| e.to_string());
        SendError::Unreachable(format!("connecting to {where_}: {why}"))
    })?;
    let _ = tcp.set_nodelay(true);
    let timeouts = |tcp: &TcpStream| -> Result<(), SendError> {
        let d = left()?;
        tcp.set_read_timeout(Some(d))
            .and_then(|()| tcp.set_write_timeout(Some(d)))
            .map_err(|e| SendError::Transient(format!("{where_}: {e}")))
    };
    timeouts(&tcp)?;
    let mut stream: Box<dyn Stream> = match tls {
        None => Box::new(tcp),
        Some(config) => {
            let name = rustls::pki_types::ServerName::try_from(endpoint.host.clone())
                .map_err(|e| SendError::Refused(format!("TLS name {}: {e}", endpoint.host)))?;
            let mut conn = rustls::ClientConnection::new(config.clone(), name)
                .map_err(|e| SendError::Transient(format!("TLS to {where_}: {e}")))?;
            let mut tcp = tcp;
            // The handshake alone first: a certificate that is not trusted will not be
            // trusted a second later, so it counts as not reaching the collector.
            while conn.is_handshaking() {
                if let Err(e) = conn.complete_io(&mut tcp) {
                    return Err(if e.kind() == io::ErrorKind::InvalidData {
                        SendError::Unreachable(format!("TLS handshake with {where_}: {e}"))
                    } else {
                        SendError::Transient(format!("TLS handshake with {where_}: {e}"))
                    });
                }
            }
            Box::new(rustls::StreamOwned::new(conn, tcp))
        }
    };
    let host = if endpoint.host.contains(':') {
        format!("[{}]", endpoint.host)
    } else {
        endpoint.host.clone()
    };
    let mut head = format!(
        "POST {} HTTP/1.1\r\nHost: {host}:{}\r\nUser-Agent: stepproof/{}\r\nContent-Type: application/x-protobuf\r\nContent-Length: {}\r\nConnection: close\r\n",
        endpoint.path,
        endpoint.port,
        env!("CARGO_PKG_VERSION"),
        body.len()
    );
    for (name, value) in headers {
        head.push_str(name);
        head.push_str(": ");
        head.push_str(value);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    let io = |what: &str, e: io::Error| {
        SendError::Transient(format!("{what} {where_}{}: {e}", endpoint.path))
    };
    stream
        .write_all(head.as_bytes())
        .and_then(|()| stream.write_all(body))
        .and_then(|()| stream.flush())
        .map_err(|e| io("sending to", e))?;
    let response =
        read_response(&mut stream, deadline).map_err(|e| io("reading the answer of", e))?;
    let status = response.status;
    let message = || {
        let text = String::from_utf8_lossy(&response.body);
        let text: String = text.chars().filter(|c| !c.is_control()).take(200).collect();
        format!("{} answered HTTP {status}: {text}", endpoint.url())
    };
    match status {
        200..=299 => {
            let mut delivered = Delivered::default();
            if let Ok(answer) = <opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceResponse as prost::Message>::decode(response.body.as_slice())
                && let Some(partial) = answer.partial_success
            {
                delivered.rejected = partial.rejected_log_records.max(0) as u64;
                if !partial.error_message.is_empty() {
                    delivered.message = Some(partial.error_message);
                }
            }
            Ok(delivered)
        }
        408 | 429 | 500..=599 => Err(SendError::Transient(message())),
        _ => Err(SendError::Refused(message())),
    }
}

struct Response {
    status: u16,
    body: Vec<u8>,
}

/// Reads the status line, the headers and the body (by `Content-Length`, chunked, or to the
/// end of the connection), at most [`MAX_RESPONSE`] bytes.
fn read_response(stream: &mut dyn Stream, deadline: Instant) -> io::Result<Response> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 8192];
    let (status, header_len, length, chunked) = loop {
        if Instant::now() >= deadline {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "timed out"));
        }
        let n = read_some(stream, &mut chunk)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the connection closed before an answer",
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut parsed = httparse::Response::new(&mut headers);
        match parsed.parse(&buf) {
            Ok(httparse::Status::Complete(len)) => {
                let status = parsed.code.unwrap_or(0);
                let mut length = None;
                let mut chunked = false;
                for h in parsed.headers.iter() {
                    if h.name.eq_ignore_ascii_case("content-length") {
                        length = std::str::from_utf8(h.value)
                            .ok()
                            .and_then(|v| v.trim().parse::<usize>().ok());
                    } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                        chunked = String::from_utf8_lossy(h.value)
                            .to_ascii_lowercase()
                            .contains("chunked");
                    }
                }
                break (status, len, length, chunked);
            }
            Ok(httparse::Status::Partial) if buf.len() < 64 * 1024 => {}
            Ok(httparse::Status::Partial) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "answer headers too long",
                ));
            }
            Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e.to_string())),
        }
    };
    let mut body = buf.split_off(header_len);
    let complete = |body: &Vec<u8>| match (length, chunked) {
        (_, true) => body.windows(5).any(|w| w == b"0\r\n\r\n"),
        (Some(n), false) => body.len() >= n,
        (None, false) => false,
    };
    while !complete(&body) && body.len() < MAX_RESPONSE && Instant::now() < deadline {
        let n = read_some(stream, &mut chunk)?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    if chunked {
        // A malformed chunked answer is read as no body (its status still counts).
        body = crate::http::chunked::dechunk(&body, body.len()).unwrap_or_default();
    } else if let Some(n) = length {
        body.truncate(n);
    }
    Ok(Response { status, body })
}

/// A TLS peer that closes without `close_notify` ends the body as well as an orderly close.
fn read_some(stream: &mut dyn Stream, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match stream.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// How long a single request may take: the configured timeout, cut to what is left.
pub fn request_deadline(config: &ExportConfig, until: Option<Instant>) -> Instant {
    let own = Instant::now() + config.request_timeout.max(Duration::from_millis(1));
    match until {
        Some(until) => own.min(until),
        None => own,
    }
}
