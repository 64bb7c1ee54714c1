//! Blocking HTTP/1.1 plumbing shared by the proxy and the credential gateway: a read buffer
//! that keeps what was read past a message head, head parsing with a size limit, body framing
//! (Content-Length, chunked, until close) and a counted two-way tunnel with half-close.

use crate::http::scan::EchoScan;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

/// Largest request or response head accepted; beyond it the peer gets 431 (or the reply fails).
pub const MAX_HEAD: usize = 16 * 1024;
/// Most header lines accepted in one head.
const MAX_HEADERS: usize = 100;
/// Copy buffer: big enough that loopback copies are not dominated by system calls.
pub const COPY_BUFFER: usize = 64 * 1024;
/// Longest chunk-size or trailer line accepted in a chunked body.
const MAX_CHUNK_LINE: usize = crate::http::chunked::MAX_LINE;

/// A reader with a buffer: what was read past a message head stays here for the body or the
/// next request, rather than being lost.
pub struct Input<R> {
    pub inner: R,
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl<R: Read> Input<R> {
    pub fn new(inner: R) -> Self {
        Input {
            inner,
            buf: vec![0; COPY_BUFFER],
            start: 0,
            end: 0,
        }
    }

    pub fn buffered(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    pub fn consume(&mut self, n: usize) {
        self.start = (self.start + n).min(self.end);
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Reads more bytes after those buffered; `Ok(0)` is end of stream.
    pub fn fill_more(&mut self) -> io::Result<usize> {
        if self.end == self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            if self.end == self.buf.len() {
                return Err(io::Error::other("input buffer full"));
            }
        }
        loop {
            match self.inner.read(&mut self.buf[self.end..]) {
                Ok(n) => {
                    self.end += n;
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Buffered bytes if any, else one read's worth; empty at end of stream.
    fn fill(&mut self) -> io::Result<&[u8]> {
        if self.start == self.end {
            self.fill_more()?;
        }
        Ok(self.buffered())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum HeadError {
    #[error("connection closed before a request")]
    Closed,
    #[error("connection closed in the middle of a message head")]
    Truncated,
    #[error("message head larger than {MAX_HEAD} bytes or {MAX_HEADERS} headers")]
    TooLarge,
    #[error("timed out waiting for the message head")]
    Timeout,
    #[error("malformed message head: {0}")]
    Malformed(String),
    #[error("reading the message head: {0}")]
    Io(io::Error),
}

impl From<io::Error> for HeadError {
    fn from(e: io::Error) -> Self {
        match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => HeadError::Timeout,
            _ => HeadError::Io(e),
        }
    }
}

/// A header as received: the name is a token (ASCII), the value may hold any octets.
pub type Header = (String, Vec<u8>);

#[derive(Debug)]
pub struct RequestHead {
    pub method: String,
    pub target: String,
    /// HTTP/1.x minor version.
    pub minor: u8,
    pub headers: Vec<Header>,
}

#[derive(Debug)]
pub struct ResponseHead {
    pub code: u16,
    pub headers: Vec<Header>,
    /// The head exactly as received, relayed byte for byte.
    pub raw: Vec<u8>,
}

fn owned_headers(headers: &[httparse::Header<'_>]) -> Vec<Header> {
    headers
        .iter()
        .map(|h| (h.name.to_owned(), h.value.to_vec()))
        .collect()
}

/// Reads one request head. `deadline`, when given, bounds the time from the first byte on
/// (an idle keep-alive connection may wait for its next request as long as `idle` allows).
pub fn read_request_head<'s, S: TimedRead>(
    input: &mut Input<&'s S>,
    idle: Option<Duration>,
    head_timeout: Duration,
) -> Result<RequestHead, HeadError>
where
    &'s S: Read,
{
    let mut deadline: Option<Instant> = None;
    loop {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(input.buffered()) {
            Ok(httparse::Status::Complete(len)) if len > MAX_HEAD => {
                return Err(HeadError::TooLarge);
            }
            Ok(httparse::Status::Complete(len)) => {
                let head = RequestHead {
                    method: req.method.unwrap_or_default().to_owned(),
                    target: req.path.unwrap_or_default().to_owned(),
                    minor: req.version.unwrap_or(1),
                    headers: owned_headers(req.headers),
                };
                input.consume(len);
                return Ok(head);
            }
            Ok(httparse::Status::Partial) => {}
            Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooLarge),
            Err(e) => return Err(HeadError::Malformed(e.to_string())),
        }
        if input.buffered().len() >= MAX_HEAD {
            return Err(HeadError::TooLarge);
        }
        let timeout = if input.buffered().is_empty() {
            idle
        } else {
            let deadline = *deadline.get_or_insert_with(|| Instant::now() + head_timeout);
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(HeadError::Timeout);
            }
            Some(left)
        };
        input.inner.timed_read_timeout(timeout)?;
        let empty = input.buffered().is_empty();
        if input.fill_more()? == 0 {
            return Err(if empty {
                HeadError::Closed
            } else {
                HeadError::Truncated
            });
        }
    }
}

/// Reads one response head; the caller bounds the wait with the socket's read timeout.
pub fn read_response_head<R: Read>(input: &mut Input<R>) -> Result<ResponseHead, HeadError> {
    loop {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut resp = httparse::Response::new(&mut headers);
        match resp.parse(input.buffered()) {
            Ok(httparse::Status::Complete(len)) if len > MAX_HEAD => {
                return Err(HeadError::TooLarge);
            }
            Ok(httparse::Status::Complete(len)) => {
                let head = ResponseHead {
                    code: resp.code.unwrap_or_default(),
                    headers: owned_headers(resp.headers),
                    raw: input.buffered()[..len].to_vec(),
                };
                input.consume(len);
                return Ok(head);
            }
            Ok(httparse::Status::Partial) => {}
            Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooLarge),
            Err(e) => return Err(HeadError::Malformed(e.to_string())),
        }
        if input.buffered().len() >= MAX_HEAD {
            return Err(HeadError::TooLarge);
        }
        let empty = input.buffered().is_empty();
        if input.fill_more()? == 0 {
            return Err(if empty {
                HeadError::Closed
            } else {
                HeadError::Truncated
            });
        }
    }
}

/// The status of the response head at the front of `input`, read as far as its end (at most
/// [`MAX_HEAD`]) and left unconsumed, so that a relay after a look still sees all of it.
/// `Ok(None)`: no complete, well-formed head came (the stream ended, or the head is malformed
/// or too large); the relay that follows then says what is wrong.
pub fn peek_response_code<R: Read>(input: &mut Input<R>) -> io::Result<Option<u16>> {
    loop {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut response = httparse::Response::new(&mut headers);
        match response.parse(input.buffered()) {
            Ok(httparse::Status::Complete(_)) => return Ok(response.code),
            Ok(httparse::Status::Partial) => {}
            Err(_) => return Ok(None),
        }
        if input.buffered().len() >= MAX_HEAD || input.fill_more()? == 0 {
            return Ok(None);
        }
    }
}

/// The status code of an HTTP/1.x status line at the start of `raw` (the first bytes a tunnel
/// saw come back, say).
pub fn status_code(raw: &[u8]) -> Option<u16> {
    let rest = raw
        .strip_prefix(b"HTTP/1.1 ")
        .or_else(|| raw.strip_prefix(b"HTTP/1.0 "))?;
    let digits = rest.get(..3)?;
    if !digits.iter().all(u8::is_ascii_digit)
        || rest.get(3).is_some_and(|b| *b != b' ' && *b != b'\r')
    {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// The reason phrase of a status line (`HTTP/1.1 404 Not Found` → `Not Found`), control
/// characters taken out.
pub fn reason_phrase(raw: &[u8]) -> String {
    let line = raw.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let phrase = line.trim_end().splitn(3, ' ').nth(2).unwrap_or("").trim();
    phrase.chars().filter(|c| !c.is_control()).collect()
}

/// Sockets whose read timeout can be set (TCP and unix streams).
pub trait TimedRead {
    fn timed_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()>;
}

impl TimedRead for TcpStream {
    fn timed_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.set_read_timeout(timeout)
    }
}

impl TimedRead for std::os::unix::net::UnixStream {
    fn timed_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.set_read_timeout(timeout)
    }
}

/// The values of every header with this name (case-insensitive).
pub fn header_values<'a>(headers: &'a [Header], name: &'a str) -> impl Iterator<Item = &'a [u8]> {
    headers
        .iter()
        .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_slice())
}

/// How a message body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    None,
    Length(u64),
    Chunked,
    UntilClose,
}

/// The body framing the headers declare. Both Content-Length and Transfer-Encoding, differing
/// Content-Lengths, or a transfer coding other than a final `chunked` are refused: a relay that
/// read the framing differently from the server behind it would let requests be smuggled.
pub fn body_framing(headers: &[Header], absent: Framing) -> Result<Framing, String> {
    let mut te = header_values(headers, "transfer-encoding").peekable();
    let has_te = te.peek().is_some();
    let codings: Vec<String> = te
        .flat_map(|v| v.split(|b| *b == b','))
        .map(|c| String::from_utf8_lossy(c).trim().to_ascii_lowercase())
        .filter(|c| !c.is_empty())
        .collect();
    let mut lengths = header_values(headers, "content-length")
        .flat_map(|v| v.split(|b| *b == b','))
        .map(|v| {
            let v = String::from_utf8_lossy(v).trim().to_owned();
            if !v.is_empty() && v.len() <= 19 && v.bytes().all(|b| b.is_ascii_digit()) {
                v.parse::<u64>()
                    .map_err(|_| format!("bad Content-Length `{v}`"))
            } else {
                Err(format!("bad Content-Length `{}`", v.escape_debug()))
            }
        })
        .collect::<Result<Vec<u64>, String>>()?;
    lengths.dedup();
    if has_te {
        if !lengths.is_empty() {
            return Err("both Transfer-Encoding and Content-Length".into());
        }
        return match codings.as_slice() {
            [.., last] if last == "chunked" && codings.len() == 1 => Ok(Framing::Chunked),
            _ => Err(format!(
                "unsupported Transfer-Encoding `{}`",
                codings.join(", ")
            )),
        };
    }
    match lengths.as_slice() {
        [] => Ok(absent),
        [n] => Ok(Framing::Length(*n)),
        _ => Err("conflicting Content-Length headers".into()),
    }
}

/// Whether header `name` lists `token` among its comma-separated values (case-insensitive).
pub fn has_token(headers: &[Header], name: &str, token: &str) -> bool {
    header_values(headers, name)
        .flat_map(|v| v.split(|b| *b == b','))
        .any(|v| {
            String::from_utf8_lossy(v)
                .trim()
                .eq_ignore_ascii_case(token)
        })
}

/// Whether a message of HTTP/1.`minor` with these headers leaves its connection open.
pub fn wants_keep_alive(headers: &[Header], minor: u8) -> bool {
    if has_token(headers, "connection", "close") {
        return false;
    }
    minor >= 1 || has_token(headers, "connection", "keep-alive")
}

/// The proxy's answer to a CONNECT it lets through.
pub const CONNECT_ESTABLISHED: &[u8] = b"HTTP/1.1 200 Connection established\r\n\r\n";

/// A whole plain-text response that closes the connection.
pub fn write_status(out: &mut impl Write, code: u16, phrase: &str, body: &str) -> io::Result<()> {
    let response = format!(
        "HTTP/1.1 {code} {phrase}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    out.write_all(response.as_bytes())?;
    out.flush()
}

/// Relays an upstream's response to `client`: interim (1xx) heads, then the final head (its
/// code in `status` as soon as it is known) and its body, counting the bytes into `down`. A
/// switch of protocols (101) is refused before anything of it reaches the client. `scan` sees
/// every head and the body's payload as they are relayed (a chunked body without its chunk
/// framing, so a credential split across chunks is found too); an error's text, which may quote
/// the upstream's headers, has the scan's spellings taken out. `Ok(keep)`: whether the upstream
/// connection may carry another request.
pub fn relay_response<R: Read>(
    method: &str,
    conn: &mut Input<R>,
    client: &mut impl Write,
    down: &mut u64,
    status: &mut Option<u16>,
    scan: &mut EchoScan,
) -> Result<bool, String> {
    loop {
        let response =
            read_response_head(conn).map_err(|e| format!("reading the upstream response: {e}"))?;
        if response.code == 101 {
            return Err("upstream switched protocols; not supported".into());
        }
        scan.feed(&response.raw);
        client
            .write_all(&response.raw)
            .map_err(|e| format!("writing to the client: {e}"))?;
        *down += response.raw.len() as u64;
        if (100..200).contains(&response.code) {
            continue;
        }
        *status = Some(response.code);
        let no_body =
            method.eq_ignore_ascii_case("HEAD") || response.code == 204 || response.code == 304;
        let framing = if no_body {
            Framing::None
        } else {
            body_framing(&response.headers, Framing::UntilClose)
                .map_err(|e| scan.redact(format!("upstream response: {e}")))?
        };
        if !matches!(framing, Framing::None | Framing::Length(0)) {
            scan.note_content_codings(header_values(&response.headers, "content-encoding"));
        }
        *down += relay_body_scanned(conn, client, framing, scan)
            .map_err(|e| format!("relaying the response body: {e}"))?;
        client
            .flush()
            .map_err(|e| format!("writing to the client: {e}"))?;
        return Ok(framing != Framing::UntilClose && wants_keep_alive(&response.headers, 1));
    }
}

/// Whether an idle upstream connection may carry another request: nothing buffered from it, and
/// nothing (no data, no end of stream, a TLS close_notify) readable on its socket.
pub fn is_idle<R: Read>(conn: &Input<R>, sock: &TcpStream) -> bool {
    if !conn.buffered().is_empty() {
        return false;
    }
    if sock.set_nonblocking(true).is_err() {
        return false;
    }
    let mut probe = [0u8; 1];
    let quiet = matches!(sock.peek(&mut probe), Err(e) if e.kind() == io::ErrorKind::WouldBlock);
    sock.set_nonblocking(false).is_ok() && quiet
}

/// Copies a body with the given framing from `input` to `out`, chunk framing included, writing
/// each piece as soon as it arrives (server-sent events must not wait for a full buffer).
/// Returns the bytes written.
pub fn relay_body<R: Read, W: Write>(
    input: &mut Input<R>,
    out: &mut W,
    framing: Framing,
) -> io::Result<u64> {
    relay_body_scanned(input, out, framing, &mut EchoScan::default())
}

/// [`relay_body`], with `scan` fed the payload as it passes: the bytes of a length-framed or
/// until-close body, a chunked body's chunk data and trailer lines (not its chunk-size lines).
pub fn relay_body_scanned<R: Read, W: Write>(
    input: &mut Input<R>,
    out: &mut W,
    framing: Framing,
    scan: &mut EchoScan,
) -> io::Result<u64> {
    match framing {
        Framing::None => Ok(0),
        Framing::Length(n) => relay_exact(input, out, n, scan),
        Framing::UntilClose => {
            let mut total = 0;
            loop {
                let data = input.fill()?;
                if data.is_empty() {
                    return Ok(total);
                }
                let n = data.len();
                scan.feed(data);
                out.write_all(data)?;
                out.flush()?;
                input.consume(n);
                total += n as u64;
            }
        }
        Framing::Chunked => relay_chunked(input, out, scan),
    }
}

fn relay_exact<R: Read, W: Write>(
    input: &mut Input<R>,
    out: &mut W,
    len: u64,
    scan: &mut EchoScan,
) -> io::Result<u64> {
    let mut left = len;
    while left > 0 {
        let data = input.fill()?;
        if data.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("body ended {left} bytes early"),
            ));
        }
        let n = data.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        scan.feed(&data[..n]);
        out.write_all(&data[..n])?;
        out.flush()?;
        input.consume(n);
        left -= n as u64;
    }
    Ok(len)
}

/// One CRLF- (or LF-) terminated line, returned with its terminator.
fn read_line<R: Read>(input: &mut Input<R>) -> io::Result<Vec<u8>> {
    loop {
        if let Some(i) = input.buffered().iter().position(|b| *b == b'\n') {
            let line = input.buffered()[..=i].to_vec();
            input.consume(i + 1);
            return Ok(line);
        }
        if input.buffered().len() > MAX_CHUNK_LINE {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "chunk line too long",
            ));
        }
        if input.fill_more()? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "chunked body ended early",
            ));
        }
    }
}

fn relay_chunked<R: Read, W: Write>(
    input: &mut Input<R>,
    out: &mut W,
    scan: &mut EchoScan,
) -> io::Result<u64> {
    use crate::http::chunked;
    let bad = |e: chunked::ChunkError| {
        io::Error::new(io::ErrorKind::InvalidData, format!("chunked body: {e}"))
    };
    let mut total = 0u64;
    loop {
        let line = read_line(input)?;
        let size = chunked::size_line(&line).map_err(bad)?;
        out.write_all(&line)?;
        total += line.len() as u64;
        if size == 0 {
            // Trailer section: fields until an empty line.
            loop {
                let line = read_line(input)?;
                let end = chunked::trailer_line(&line).map_err(bad)?;
                scan.feed(&line);
                out.write_all(&line)?;
                total += line.len() as u64;
                if end {
                    out.flush()?;
                    return Ok(total);
                }
            }
        }
        total += relay_exact(input, out, size, scan)?;
        let end = read_line(input)?;
        chunked::data_end(&end).map_err(bad)?;
        out.write_all(&end)?;
        out.flush()?;
        total += end.len() as u64;
    }
}

/// Bytes moved by a tunnel, and the first error that ended it abnormally.
#[derive(Debug, Default)]
pub struct TunnelStats {
    pub up: u64,
    pub down: u64,
    pub error: Option<String>,
    /// The first bytes received from upstream (at most [`HEAD_SEEN`]): for plain HTTP, the
    /// response's status line.
    pub first_down: Vec<u8>,
}

/// How many of the first bytes from upstream a tunnel keeps for its record.
pub const HEAD_SEEN: usize = 32;

/// Relays both ways between `client` and `upstream` until both directions have ended.
/// `first_up` is sent upstream first (the rewritten request head, or bytes the client sent
/// right after its CONNECT). End of stream in one direction is passed on as a half-close, so a
/// client that shuts down its sending side still receives the rest of the answer; an error in
/// one direction tears down both.
pub fn tunnel(client: &TcpStream, upstream: &TcpStream, first_up: &[u8]) -> TunnelStats {
    std::thread::scope(|scope| {
        let up = std::thread::Builder::new()
            .name("stepproof-proxy-up".into())
            .stack_size(crate::http::server::CONNECTION_STACK)
            .spawn_scoped(scope, || {
                let mut sent = 0u64;
                let first = (&*upstream)
                    .write_all(first_up)
                    .map(|()| sent += first_up.len() as u64);
                let result = first.and_then(|()| copy_half(client, upstream, &mut sent, None));
                (sent, result)
            });
        let mut down = 0u64;
        let mut first_down = Vec::new();
        let down_result = copy_half(upstream, client, &mut down, Some(&mut first_down));
        let (up, up_result) = match up {
            Ok(handle) => handle
                .join()
                .unwrap_or((0, Err(io::Error::other("relay thread panicked")))),
            Err(e) => {
                // Could not start the second thread: nothing went up; close so the peer sees it.
                let _ = client.shutdown(Shutdown::Both);
                (0, Err(e))
            }
        };
        let error = match (up_result, down_result) {
            (Err(e), _) => Some(format!("client to upstream: {e}")),
            (_, Err(e)) => Some(format!("upstream to client: {e}")),
            _ => None,
        };
        TunnelStats {
            up,
            down,
            error,
            first_down,
        }
    })
}

/// One direction of a tunnel. On end of stream, half-closes the destination; on error, shuts
/// both sockets so the other direction's blocking read returns too.
fn copy_half(
    from: &TcpStream,
    to: &TcpStream,
    count: &mut u64,
    seen: Option<&mut Vec<u8>>,
) -> io::Result<()> {
    let result = copy_stream(from, to, count, seen);
    match &result {
        Ok(()) => {
            let _ = to.shutdown(Shutdown::Write);
        }
        Err(_) => {
            let _ = from.shutdown(Shutdown::Both);
            let _ = to.shutdown(Shutdown::Both);
        }
    }
    result
}

/// Copies `from` to `to` until end of stream. The first [`HEAD_SEEN`] bytes (when `seen` wants
/// them) are read into memory; the rest moves through a pipe with splice(2), so the bytes stay in
/// the kernel: one copy fewer each way than read and write, the relay's whole cost on loopback.
/// Where splice is refused (no pipe to be had, a kernel without it), read and write.
fn copy_stream(
    from: &TcpStream,
    to: &TcpStream,
    count: &mut u64,
    seen: Option<&mut Vec<u8>>,
) -> io::Result<()> {
    if let Some(seen) = seen {
        let mut head = [0u8; HEAD_SEEN];
        while seen.len() < HEAD_SEEN {
            let n = match (&*from).read(&mut head[..HEAD_SEEN - seen.len()]) {
                Ok(0) => return Ok(()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            seen.extend_from_slice(&head[..n]);
            (&*to).write_all(&head[..n])?;
            *count += n as u64;
        }
    }
    match splice_stream(from, to, count) {
        Err(Unspliced(e)) if e == nix::errno::Errno::EINVAL || e == nix::errno::Errno::ENOSYS => {
            copy_buffered(from, to, count)
        }
        Err(Unspliced(e)) => Err(e.into()),
        Ok(result) => result,
    }
}

/// splice(2) could not start (nothing was moved yet): the caller may copy another way.
struct Unspliced(nix::errno::Errno);

/// The bytes of one pipe's worth: as much as the pipe holds by default.
const SPLICE_CHUNK: usize = 64 * 1024;

fn splice_stream(
    from: &TcpStream,
    to: &TcpStream,
    count: &mut u64,
) -> Result<io::Result<()>, Unspliced> {
    use nix::errno::Errno;
    use nix::fcntl::{OFlag, SpliceFFlags, splice};
    let (pipe_out, pipe_in) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(Unspliced)?;
    // Not SPLICE_F_MORE: it corks the socket, holding a short message (a TLS handshake, a small
    // answer) back until more comes or the cork times out.
    let flags = SpliceFFlags::SPLICE_F_MOVE;
    let mut started = false;
    loop {
        let n = match splice(from, None, &pipe_in, None, SPLICE_CHUNK, flags) {
            Ok(0) => return Ok(Ok(())),
            Ok(n) => n,
            Err(Errno::EINTR) => continue,
            Err(e) if !started => return Err(Unspliced(e)),
            Err(e) => return Ok(Err(e.into())),
        };
        started = true;
        let mut left = n;
        while left > 0 {
            match splice(&pipe_out, None, to, None, left, flags) {
                Ok(0) => return Ok(Err(io::ErrorKind::WriteZero.into())),
                Ok(m) => left -= m,
                Err(Errno::EINTR) => continue,
                Err(e) => return Ok(Err(e.into())),
            }
        }
        *count += n as u64;
    }
}

/// The same copy through a buffer in user space.
fn copy_buffered(from: &TcpStream, to: &TcpStream, count: &mut u64) -> io::Result<()> {
    let mut buf = vec![0u8; COPY_BUFFER];
    loop {
        let n = match (&*from).read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        (&*to).write_all(&buf[..n])?;
        *count += n as u64;
    }
}

/// Copies `headers` to `out` as `Name: value` lines, leaving out the names in `dropped` and the
/// hop-by-hop headers the request's own `Connection` header names (both compared lower-case).
pub fn write_forwarded_headers(out: &mut Vec<u8>, headers: &[Header], dropped: &[&str]) {
    let named_by_connection: Vec<String> = header_values(headers, "connection")
        .flat_map(|v| v.split(|b| *b == b','))
        .map(|v| String::from_utf8_lossy(v).trim().to_ascii_lowercase())
        .collect();
    for (name, value) in headers {
        let lower = name.to_ascii_lowercase();
        if dropped.contains(&lower.as_str()) || named_by_connection.contains(&lower) {
            continue;
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_line_gives_the_code_and_the_phrase() {
        assert_eq!(status_code(b"HTTP/1.1 404 Not Found\r\n"), Some(404));
        assert_eq!(status_code(b"HTTP/1.0 200\r\n"), Some(200));
        for bad in [
            &b"HTTP/2 200 OK"[..],
            b"HTTP/1.1 20",
            b"HTTP/1.1 2000 x",
            b"\x16\x03\x01",
            b"",
        ] {
            assert_eq!(status_code(bad), None, "{bad:?}");
        }
        assert_eq!(
            reason_phrase(b"HTTP/1.1 404 Not Found\r\nX: y\r\n"),
            "Not Found"
        );
        assert_eq!(reason_phrase(b"HTTP/1.1 200\r\n"), "");
        assert_eq!(reason_phrase(b"HTTP/1.1 200 O\x07K\r\n"), "OK");
    }

    #[test]
    fn a_peek_at_the_status_leaves_the_head_for_the_relay() {
        let mut input =
            Input::new(&b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 2\r\n\r\nno"[..]);
        assert_eq!(peek_response_code(&mut input).unwrap(), Some(401));
        assert!(input.buffered().starts_with(b"HTTP/1.1 401"));
        let mut input = Input::new(&b"HTTP/1.1 40"[..]);
        assert_eq!(peek_response_code(&mut input).unwrap(), None);
        let mut input = Input::new(&b"HTTP/1.1 200 OK\r\nBad Header\r\n\r\n"[..]);
        assert_eq!(peek_response_code(&mut input).unwrap(), None);
    }
    use crate::http::scan::EchoNeedles;

    const SECRET: &str = "sk-REAL-split-across-chunks-77";

    /// `response` relayed to a buffer, with a scan for [`SECRET`].
    fn relayed(method: &str, response: &[u8]) -> (Vec<u8>, EchoScan, Result<bool, String>) {
        let mut input = Input::new(response);
        let mut out = Vec::new();
        let mut scan = EchoScan::new(EchoNeedles::of_secret(SECRET, None));
        let result = relay_response(method, &mut input, &mut out, &mut 0, &mut None, &mut scan);
        (out, scan, result)
    }

    #[test]
    fn the_relay_reads_chunked_framing_by_the_one_codec() {
        // What the old relay let through and the codec refuses: a bare LF, a control character
        // in an extension, an obs-fold trailer, an empty size line; the well-formed control.
        for body in [
            "3\nabc\n0\n\n",
            "3;a\u{1}b\r\nabc\r\n0\r\n\r\n",
            "3\r\nabc\r\n0\r\nX: 1\r\n folded\r\n\r\n",
            "\r\nabc\r\n0\r\n\r\n",
        ] {
            let response = format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{body}");
            let (_, _, result) = relayed("GET", response.as_bytes());
            assert!(result.is_err(), "{body:?}: {result:?}");
        }
        let good = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3 ;x=y\r\nabc\r\n0\r\nX: 1\r\n\r\n";
        let (out, _, result) = relayed("GET", good.as_bytes());
        assert_eq!((result, out.as_slice()), (Ok(true), good.as_bytes()));
    }

    #[test]
    fn a_credential_split_across_chunks_is_found_in_the_payload() {
        // The chunk-size line between the halves is not payload: the secret is found whatever
        // the cut, and the client gets the bytes exactly as sent.
        for cut in 1..SECRET.len() {
            let (a, b) = SECRET.split_at(cut);
            let response = format!(
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{{\"k\":\"{a}\r\n{:x};ext=1\r\n{b}\"}}\r\n0\r\n\r\n",
                a.len() + 6,
                b.len() + 2
            );
            let (out, scan, result) = relayed("GET", response.as_bytes());
            assert_eq!(result, Ok(true), "cut at {cut}");
            assert_eq!(out, response.as_bytes(), "cut at {cut}");
            assert!(scan.found(), "cut at {cut}");
            assert_eq!(scan.unchecked(), None);
        }
        // In a trailer, in a header, in an interim head, in a body read until close.
        for response in [
            format!(
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nX-Echo: {SECRET}\r\n\r\n"
            ),
            format!("HTTP/1.1 200 OK\r\nX-Echo: Bearer {SECRET}\r\nContent-Length: 0\r\n\r\n"),
            format!(
                "HTTP/1.1 103 Early Hints\r\nLink: </{SECRET}>\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n"
            ),
            format!("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\ndata: {SECRET}\n\n"),
        ] {
            let (out, scan, result) = relayed("GET", response.as_bytes());
            assert!(result.is_ok(), "{result:?}");
            assert_eq!(out, response.as_bytes());
            assert!(scan.found(), "{response}");
        }
        // Not there: no find (the secret without its last byte, split across chunks).
        let almost = &SECRET[..SECRET.len() - 1];
        let (a, b) = almost.split_at(10);
        let response = format!(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n",
            a.len(),
            b.len()
        );
        let (_, scan, result) = relayed("GET", response.as_bytes());
        assert_eq!(result, Ok(true));
        assert!(!scan.found());
    }

    #[test]
    fn an_error_that_quotes_the_upstream_has_the_credential_taken_out() {
        let response = format!("HTTP/1.1 200 OK\r\nContent-Length: {SECRET}\r\n\r\n");
        let (out, scan, result) = relayed("GET", response.as_bytes());
        let error = result.unwrap_err();
        assert!(
            error.contains("Content-Length") && !error.contains(SECRET),
            "{error}"
        );
        // The head reached the client, and the record will say so.
        assert_eq!(out, response.as_bytes());
        assert!(scan.found());
    }

    #[test]
    fn an_encoded_body_is_unchecked_and_a_bodiless_answer_is_not() {
        let gzip =
            b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 3\r\n\r\n\x1f\x8b\x08";
        let (_, scan, _) = relayed("GET", gzip);
        assert_eq!(scan.unchecked(), Some("content-encoding gzip"));
        let (_, scan, _) = relayed("HEAD", gzip);
        assert_eq!(scan.unchecked(), None);
        let empty = "HTTP/1.1 200 OK\r\nContent-Encoding: br\r\nContent-Length: 0\r\n\r\n";
        let (_, scan, _) = relayed("GET", empty.as_bytes());
        assert_eq!(scan.unchecked(), None);
    }
}
