//! The one forwarder: what the credential gateway and the TLS-terminating proxy do with each
//! request they pass on, written once. Each caller adds only its policy ([`Route`]: where the
//! upstream is and how it is reached, which credential goes into the head, what to do with a
//! first answer); the reading of the client's requests, the onward head, the body, the reuse of
//! the upstream connection, the relay of the answer and the refusals when something fails are
//! here, so the two boundaries cannot drift apart after a change to one of them.
//!
//! A request is read by [`next_request`] ([`read_request_head`] with the framing of
//! [`body_framing`]); its onward head is written by [`Onward::head`] (hop-by-hop headers and the
//! caller's own removed, `Host` written from the upstream, the caller's lines added); its body
//! is relayed by the one chunked coding, or read whole first when the caller may send it again
//! ([`Body::take`]); [`forward`] sends it on a reused or new connection and relays the answer
//! through an [`EchoScan`]. [`read_requests`] is the same reading of a byte string, for the fuzz
//! target and its replay in the suite.

use crate::http::io::{
    self, Framing, HeadError, Header, Input, RequestHead, TimedRead, body_framing, is_idle,
    read_request_head, relay_body, relay_response, write_forwarded_headers, write_status,
};
use crate::http::scan::EchoScan;
use crate::http::server::{Sock, Sockets};
use rustls::{ClientConnection, StreamOwned};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Headers never passed on: hop-by-hop (RFC 9110 §7.6.1), the proxy's own, and `Host` (written
/// from the upstream). `Expect` is answered by the forwarder itself ([`answer_continue`]).
pub const HOP_BY_HOP: &[&str] = &[
    "host",
    "connection",
    "proxy-connection",
    "proxy-authorization",
    "proxy-authenticate",
    "keep-alive",
    "upgrade",
    "te",
    "expect",
];

/// What replaces the client's `Accept-Encoding` on a request that carries a credential: an
/// encoded answer could not be searched for the credential as it passes (a service may encode
/// anyway; the record then says the search could not be made).
pub const IDENTITY: &[u8] = b"Accept-Encoding: identity\r\n";

/// What waiting for a client's next request gave.
#[derive(Debug)]
pub enum Next {
    Request(RequestHead),
    /// The connection ended (or idled out) between requests: nothing to answer or record.
    Ended,
    /// The head could not be read: answer with this status (the connection closes after it).
    Bad {
        code: u16,
        phrase: &'static str,
        error: String,
    },
}

/// Reads a client's next request head: it may wait `idle` for the first byte, then
/// `head_timeout` for the rest. A connection that ends, times out or fails with nothing of a
/// request read is [`Next::Ended`] (a TLS client that closes without close_notify between
/// requests among them); anything else that goes wrong is [`Next::Bad`], with the status that
/// says what: 431 for a head too large, 408 for one too slow, 400 for the rest.
pub fn next_request<'s, S: TimedRead>(
    input: &mut Input<&'s S>,
    idle: Option<Duration>,
    head_timeout: Duration,
) -> Next
where
    &'s S: Read,
{
    match read_request_head(input, idle, head_timeout) {
        Ok(head) => Next::Request(head),
        Err(HeadError::Closed) => Next::Ended,
        Err(HeadError::Timeout | HeadError::Io(_)) if input.buffered().is_empty() => Next::Ended,
        Err(e) => {
            let (code, phrase) = match e {
                HeadError::TooLarge => (431, "Request Header Fields Too Large"),
                HeadError::Timeout => (408, "Request Timeout"),
                _ => (400, "Bad Request"),
            };
            Next::Bad {
                code,
                phrase,
                error: e.to_string(),
            }
        }
    }
}

/// The request head as it goes upstream.
pub struct Onward<'a> {
    pub method: &'a str,
    /// The origin-form target (a path under the upstream's prefix already joined).
    pub target: &'a str,
    /// HTTP/1.`minor` on the request line.
    pub minor: u8,
    /// The `Host` header's value.
    pub host: &'a str,
    /// The client's headers.
    pub headers: &'a [Header],
    /// Removed beyond [`HOP_BY_HOP`] (lower-case): the client's credential headers, say.
    pub dropped: &'a [&'a str],
    /// Whole header lines added at the end (each ends in CRLF): the real credential, say.
    pub added: &'a [u8],
}

impl Onward<'_> {
    /// The head's bytes. The method, target and host come from a parsed head or the caller's
    /// own configuration; headers are copied as parsed (a value holds no CR or LF), so the head
    /// written is one request head with what is listed taken out.
    pub fn head(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(2048);
        out.extend_from_slice(
            format!(
                "{} {} HTTP/1.{}\r\nHost: {}\r\n",
                self.method, self.target, self.minor, self.host
            )
            .as_bytes(),
        );
        let dropped: Vec<&str> = HOP_BY_HOP
            .iter()
            .chain(self.dropped.iter())
            .copied()
            .collect();
        write_forwarded_headers(&mut out, self.headers, &dropped);
        out.extend_from_slice(self.added);
        out.extend_from_slice(b"\r\n");
        out
    }
}

/// The `Host` value for `host` on `port`: the port only when it is not the scheme's default.
pub fn host_header(host: &str, port: u16, default_port: u16) -> String {
    let host = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_owned()
    };
    if port == default_port {
        host
    } else {
        format!("{host}:{port}")
    }
}

/// Answers `Expect: 100-continue` at once: the forwarder relays the body only as it reads it,
/// so waiting for the upstream's 100 would stall until the client's own timeout. `Err`: the
/// client is gone.
pub fn answer_continue(head: &RequestHead, out: &mut impl Write) -> std::io::Result<()> {
    if io::has_token(&head.headers, "expect", "100-continue") {
        out.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
        out.flush()?;
    }
    Ok(())
}

/// A request's body: read whole (so the request can be sent again), or relayed as it arrives.
pub enum Body {
    Buffered(Vec<u8>),
    Streamed(Framing),
}

impl Body {
    /// Reads a length-framed body of at most `buffer_max` bytes whole (chunk framing is
    /// relayed as it comes: its size is unknown); anything else is left to stream.
    pub fn take<R: Read>(
        input: &mut Input<R>,
        framing: Framing,
        buffer_max: u64,
    ) -> std::io::Result<Body> {
        match framing {
            Framing::Length(n) if n <= buffer_max => {
                let mut bytes = Vec::with_capacity(usize::try_from(n).unwrap_or(0));
                relay_body(input, &mut bytes, framing)?;
                Ok(Body::Buffered(bytes))
            }
            framing => Ok(Body::Streamed(framing)),
        }
    }
}

/// An upstream connection: TCP, or TLS over it.
pub trait Upstream: Read + Write {
    fn sock(&self) -> &TcpStream;
}

impl Upstream for TcpStream {
    fn sock(&self) -> &TcpStream {
        self
    }
}

impl Upstream for StreamOwned<ClientConnection, TcpStream> {
    fn sock(&self) -> &TcpStream {
        &self.sock
    }
}

/// What a caller does with the first answer to a request it may send again.
pub enum Answer {
    /// Relay it.
    Relay,
    /// Send the request again with this head (the caller read the answer; `keep`: whether
    /// the upstream connection may carry the next try).
    Again { head: Vec<u8>, keep: bool },
    /// The caller read the answer: these bytes go to the client as they are.
    Taken {
        bytes: Vec<u8>,
        status: u16,
        keep: bool,
    },
}

/// A caller's policy for [`forward`].
pub trait Route {
    type Conn: Upstream;
    /// A new connection to the upstream, reached and checked as the caller's policy says.
    fn connect(&mut self) -> Result<Self::Conn, String>;
    /// Called once a request whose body was read whole went out, before its answer is relayed
    /// (at most once a request): the caller may read the answer and send again, or answer
    /// itself. `echo` is the search the client's answer goes through; a caller that sends again
    /// with another credential replaces it.
    fn first_answer(
        &mut self,
        _conn: &mut Input<Self::Conn>,
        _echo: &mut EchoScan,
    ) -> Result<Answer, String> {
        Ok(Answer::Relay)
    }
}

/// What became of a forwarded request, for its record.
#[derive(Debug, Default)]
pub struct Forwarded {
    /// Bytes sent upstream (heads and bodies of every try) and relayed to the client.
    pub up: u64,
    pub down: u64,
    /// The final answer's status (the forwarder's own 502 included).
    pub status: Option<u16>,
    /// The upstream address the request went to.
    pub resolved: Option<SocketAddr>,
    /// What failed; the client got a 502 if nothing of an answer had reached it.
    pub error: Option<String>,
    /// Whether the client connection stays open.
    pub keep: bool,
    /// Whether the request was sent again ([`Answer::Again`]).
    pub resent: bool,
}

/// One request of a client connection, forwarded: on the connection in `link` if it is still
/// open and quiet (else on a new one from `route`, registered in `sockets` so shutdown can end
/// it), its head then its body, and the answer relayed to `client` through `echo`. A failure
/// before anything of an answer reached the client is answered with a 502 whose text starts with
/// `who`; the connection to the upstream is dropped after any failure or an answer that closes.
#[allow(clippy::too_many_arguments)]
pub fn forward<R: Route, C: Read, W: Write>(
    route: &mut R,
    link: &mut Option<Input<R::Conn>>,
    sockets: &Sockets,
    input: &mut Input<C>,
    mut client: W,
    method: &str,
    mut head: Vec<u8>,
    mut body: Body,
    client_keep: bool,
    echo: &mut EchoScan,
    who: &str,
) -> Forwarded {
    let mut done = Forwarded::default();
    let bad_gateway = |done: &mut Forwarded, client: &mut W, error: String, said: &str| {
        done.status = Some(502);
        done.error = Some(error);
        done.keep = false;
        let _ = write_status(client, 502, "Bad Gateway", &format!("{who}: {said}\n"));
    };
    loop {
        if link
            .as_ref()
            .is_some_and(|conn| !is_idle(conn, conn.inner.sock()))
        {
            *link = None;
        }
        if link.is_none() {
            match route.connect() {
                Ok(conn) => {
                    if let Ok(clone) = conn.sock().try_clone() {
                        sockets.register(Sock::Tcp(clone));
                    }
                    *link = Some(Input::new(conn));
                }
                Err(e) => {
                    bad_gateway(&mut done, &mut client, e.clone(), &e);
                    return done;
                }
            }
        }
        let Some(conn) = link.as_mut() else {
            return done;
        };
        done.resolved = conn.inner.sock().peer_addr().ok();
        let sent = (|| -> std::io::Result<u64> {
            conn.inner.write_all(&head)?;
            let n = match &mut body {
                Body::Buffered(bytes) => {
                    conn.inner.write_all(bytes)?;
                    bytes.len() as u64
                }
                Body::Streamed(framing) => relay_body(input, &mut conn.inner, *framing)?,
            };
            conn.inner.flush()?;
            Ok(head.len() as u64 + n)
        })();
        match sent {
            Ok(n) => done.up += n,
            Err(e) => {
                *link = None;
                let why = format!("sending the request upstream: {e}");
                bad_gateway(&mut done, &mut client, why.clone(), &why);
                return done;
            }
        }
        if !done.resent && matches!(body, Body::Buffered(_)) {
            match route.first_answer(conn, echo) {
                Ok(Answer::Relay) => {}
                Ok(Answer::Again { head: again, keep }) => {
                    if !keep {
                        *link = None;
                    }
                    head = again;
                    done.resent = true;
                    continue;
                }
                Ok(Answer::Taken {
                    bytes,
                    status,
                    keep,
                }) => {
                    if !keep {
                        *link = None;
                    }
                    done.status = Some(status);
                    done.down = bytes.len() as u64;
                    let written = client.write_all(&bytes).and_then(|()| client.flush());
                    done.keep = written.is_ok() && client_keep && keep;
                    return done;
                }
                Err(e) => {
                    *link = None;
                    bad_gateway(&mut done, &mut client, e.clone(), &e);
                    return done;
                }
            }
        }
        break;
    }
    let Some(conn) = link.as_mut() else {
        return done;
    };
    let mut down = 0u64;
    let mut status = None;
    let result = relay_response(method, conn, &mut client, &mut down, &mut status, echo);
    done.down += down;
    done.status = status;
    match result {
        Ok(upstream_keep) => {
            if !upstream_keep {
                *link = None;
            }
            // The upstream's head went to the client as it was: if it said close, so do we.
            done.keep = client_keep && upstream_keep;
        }
        Err(e) => {
            *link = None;
            if down == 0 {
                bad_gateway(&mut done, &mut client, e, "no response from the upstream");
            } else {
                done.error = Some(e);
                done.keep = false;
            }
        }
    }
    done
}

/// One request of a stream as the forwarder reads it: its head, its framing, how many body
/// bytes were read, and the head it would send on (to a `upstream.test`, nothing added).
#[derive(Debug)]
pub struct ReadRequest {
    pub head: RequestHead,
    pub framing: Framing,
    pub body_bytes: u64,
    pub onward: Vec<u8>,
}

/// A byte string read as a client's connection (no timeouts: it is all there).
struct Replayed(std::cell::RefCell<std::io::Cursor<Vec<u8>>>);

impl Read for &Replayed {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.borrow_mut().read(buf)
    }
}

impl TimedRead for Replayed {
    fn timed_read_timeout(&self, _: Option<Duration>) -> std::io::Result<()> {
        Ok(())
    }
}

/// The forwarder's reading of a client's byte stream, request after request (at most
/// `max_requests`): each head ([`next_request`]), its framing ([`body_framing`], no body when
/// none is declared), its body (relayed by the one chunked coding) and its onward head
/// ([`Onward::head`]), until the stream ends or a step refuses it (the `Err`, after which the
/// forwarder closes the connection). For the fuzz target of the request parsing (`tests/fuzz`)
/// and the replay of its corpus in the suite; the gateway and the terminating proxy read their
/// sockets with the same functions.
pub fn read_requests(data: &[u8], max_requests: usize) -> Vec<Result<ReadRequest, String>> {
    let stream = Replayed(std::cell::RefCell::new(std::io::Cursor::new(data.to_vec())));
    let mut input = Input::new(&stream);
    let mut out = Vec::new();
    while out.len() < max_requests {
        let head = match next_request(&mut input, None, Duration::from_secs(1)) {
            Next::Request(head) => head,
            Next::Ended => break,
            Next::Bad { error, .. } => {
                out.push(Err(error));
                break;
            }
        };
        let framing = match body_framing(&head.headers, Framing::None) {
            Ok(framing) => framing,
            Err(e) => {
                out.push(Err(e));
                break;
            }
        };
        let onward = Onward {
            method: &head.method,
            target: &head.target,
            minor: 1,
            host: "upstream.test",
            headers: &head.headers,
            dropped: &["authorization"],
            added: b"",
        }
        .head();
        match relay_body(&mut input, &mut std::io::sink(), framing) {
            Ok(body_bytes) => out.push(Ok(ReadRequest {
                head,
                framing,
                body_bytes,
                onward,
            })),
            Err(e) => {
                out.push(Err(e.to_string()));
                break;
            }
        }
    }
    out
}

/// One request head read from a byte string as [`next_request`] reads it, and how many bytes
/// were left after it: for checking that an onward head reads back as it was meant.
pub fn read_head(data: &[u8]) -> Result<(RequestHead, usize), String> {
    let stream = Replayed(std::cell::RefCell::new(std::io::Cursor::new(data.to_vec())));
    let mut input = Input::new(&stream);
    match next_request(&mut input, None, Duration::from_secs(1)) {
        Next::Request(head) => {
            let mut rest = input.buffered().len();
            rest += std::io::copy(&mut input.inner, &mut std::io::sink()).unwrap_or(0) as usize;
            Ok((head, rest))
        }
        Next::Ended => Err("no request".into()),
        Next::Bad { error, .. } => Err(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head_of(raw: &str) -> RequestHead {
        match read_requests(raw.as_bytes(), 1).pop() {
            Some(Ok(read)) => read.head,
            other => panic!("{raw:?}: {other:?}"),
        }
    }

    #[test]
    fn the_onward_head_drops_hop_by_hop_and_what_connection_names() {
        let head = head_of(
            "POST /v1/x HTTP/1.1\r\nHost: evil\r\nConnection: close, X-Secret\r\nX-Secret: 1\r\nTE: trailers\r\nProxy-Authorization: Basic x\r\nExpect: 100-continue\r\nAuthorization: Bearer placeholder\r\nKeep: yes\r\nContent-Length: 0\r\n\r\n",
        );
        let onward = Onward {
            method: &head.method,
            target: "/prefix/v1/x",
            minor: 1,
            host: "api.example:8443",
            headers: &head.headers,
            dropped: &["authorization"],
            added: b"X-Api-Key: real\r\n",
        }
        .head();
        assert_eq!(
            String::from_utf8(onward).unwrap(),
            "POST /prefix/v1/x HTTP/1.1\r\nHost: api.example:8443\r\nKeep: yes\r\nContent-Length: 0\r\nX-Api-Key: real\r\n\r\n"
        );
    }

    #[test]
    fn host_headers_name_the_port_only_when_it_is_not_the_default() {
        assert_eq!(host_header("api.example", 443, 443), "api.example");
        assert_eq!(host_header("api.example", 8443, 443), "api.example:8443");
        assert_eq!(host_header("::1", 80, 80), "[::1]");
        assert_eq!(host_header("::1", 8080, 80), "[::1]:8080");
    }

    #[test]
    fn a_head_that_cannot_be_read_says_which_status() {
        let bad = |raw: &[u8]| match read_requests(raw, 1).pop() {
            Some(Err(e)) => e,
            other => panic!("{raw:?}: {other:?}"),
        };
        assert!(bad(b"GET / HTTP/1.1\r\nBad Header\r\n\r\n").contains("malformed"));
        assert!(bad(b"GET / HTTP/1.1\r\nHost: x\r\n").contains("middle of a message head"));
        assert!(read_requests(b"", 1).is_empty());
        // A head too large: 431.
        let big = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(io::MAX_HEAD));
        let stream = Replayed(std::cell::RefCell::new(std::io::Cursor::new(
            big.into_bytes(),
        )));
        let mut input = Input::new(&stream);
        assert!(matches!(
            next_request(&mut input, None, Duration::from_secs(1)),
            Next::Bad { code: 431, .. }
        ));
    }
}
