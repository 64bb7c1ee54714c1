//! TLS termination for hosts with a credential rule and for read-only hosts (and only those):
//! the proxy answers the CONNECT, speaks TLS to the client with a leaf certificate of the run's
//! CA, reads each HTTP/1.1 request, checks it, adds the credential where a rule's scope covers
//! it, and forwards it over a verified TLS connection to the host that was checked. Responses
//! stream back as they come. A read-only host takes GET and HEAD without a body and without a
//! method override; anything else is refused (unless a credential rule of its own covers it).
//!
//! Per request: the target must be origin-form and the one `Host` header must name the CONNECT
//! host and port, or the request is refused with nothing added; a placeholder outside its own
//! rule's scope is refused and recorded as an exfiltration attempt; the rule's header is removed
//! from what the client sent and the real one added, with `Accept-Encoding: identity`; the
//! answer is searched for the value as it streams back, and the record says if it was there
//! (`credential_echoed`) or could not be searched (`credential_echo_unchecked`).

use super::{ConnectionRecord, HEAD_TIMEOUT, ProxyHandler, Target};
use crate::http::forward::{self, Body, Next, Onward};
use crate::http::io::{self as http, Framing, Input, TimedRead};
use crate::http::scan::EchoScan;
use crate::http::server::Sockets;
use crate::profile::allow::host::parse_authority;
use crate::supervisor::net::credentials::Broker;
use rustls::pki_types::ServerName;
use rustls::{ClientConnection, ServerConnection, StreamOwned};
use std::cell::RefCell;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long an idle keep-alive client connection is kept.
const CLIENT_IDLE: Duration = Duration::from_secs(300);
/// Longest silence from the upstream while a response is awaited or streamed.
const UPSTREAM_SILENCE: Duration = Duration::from_secs(600);

/// The client's socket with what the proxy read past the CONNECT head in front of it (a client
/// may send its TLS hello without waiting for the 200).
struct Prefixed<'a> {
    prefix: Vec<u8>,
    at: usize,
    sock: &'a TcpStream,
}

impl Read for Prefixed<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.at < self.prefix.len() {
            let n = buf.len().min(self.prefix.len() - self.at);
            buf[..n].copy_from_slice(&self.prefix[self.at..self.at + n]);
            self.at += n;
            return Ok(n);
        }
        self.sock.read(buf)
    }
}

impl Write for Prefixed<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.sock.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.sock.flush()
    }
}

/// The client's side of the TLS connection, readable and writable through a shared reference
/// (one thread serves a connection: it reads a request, then writes the answer).
struct ClientSide<'a> {
    tls: RefCell<StreamOwned<ServerConnection, Prefixed<'a>>>,
    sock: &'a TcpStream,
}

impl Read for &ClientSide<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.tls.borrow_mut().read(buf)
    }
}

impl Write for &ClientSide<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.tls.borrow_mut().write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.tls.borrow_mut().flush()
    }
}

impl TimedRead for ClientSide<'_> {
    fn timed_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.sock.set_read_timeout(timeout)
    }
}

type UpstreamTls = StreamOwned<ClientConnection, TcpStream>;

/// Serves a CONNECT to a host with credential rules; `record` is the connection's own record
/// (each request gets one more).
pub(super) fn serve(
    proxy: &ProxyHandler,
    broker: &Arc<Broker>,
    client: &TcpStream,
    input: Input<&TcpStream>,
    target: &Target,
    sockets: &Sockets,
    record: &mut ConnectionRecord,
) {
    record.allowed = true;
    let read_only = broker.is_read_only(&target.host, target.port);
    record.rule.push_str(if read_only {
        "; TLS terminated here (read-only host: GET and HEAD)"
    } else {
        "; TLS terminated here (this host has credential rules)"
    });
    if read_only && broker.authority.is_none() {
        // No CA the sandbox trusts (no private /run): the requests cannot be read, so the host
        // is not reached at all.
        return proxy.deny(
            client,
            record,
            super::refusal(
                403,
                "Forbidden",
                format!(
                    "StepProof: {} is read-only in this profile, and without namespaces the proxy cannot read its requests: refused",
                    target.host
                ),
            ),
        );
    }
    let config = match broker
        .authority
        .as_ref()
        .ok_or_else(|| format!("no certificate authority for {}", target.host))
        .and_then(|authority| authority.server_config(&target.host))
    {
        Ok(config) => config,
        Err(e) => {
            record.error = Some(e.clone());
            return proxy.deny(
                client,
                record,
                super::refusal(502, "Bad Gateway", format!("StepProof: {e}")),
            );
        }
    };
    let _ = client.set_nodelay(true);
    if let Err(e) = (&*client).write_all(http::CONNECT_ESTABLISHED) {
        record.error = Some(format!("answering CONNECT: {e}"));
        return;
    }
    let tls = match ServerConnection::new(config) {
        Ok(tls) => tls,
        Err(e) => {
            record.error = Some(format!("TLS with the client: {e}"));
            return;
        }
    };
    let prefixed = Prefixed {
        prefix: input.buffered().to_vec(),
        at: 0,
        sock: client,
    };
    let side = ClientSide {
        tls: RefCell::new(StreamOwned::new(tls, prefixed)),
        sock: client,
    };
    // The handshake, bounded like a request head.
    let _ = client.set_read_timeout(Some(HEAD_TIMEOUT));
    {
        let mut stream = side.tls.borrow_mut();
        while stream.conn.is_handshaking() {
            let StreamOwned { conn, sock } = &mut *stream;
            if let Err(e) = conn.complete_io(sock) {
                record.error = Some(format!(
                    "TLS handshake with the client: {e} (does it trust the run's CA? SSL_CERT_FILE and its kin point at it inside)"
                ));
                return;
            }
        }
    }
    let mut input = Input::new(&side);
    let mut upstream: Option<Input<UpstreamTls>> = None;
    let mut up_total = 0u64;
    let mut down_total = 0u64;
    loop {
        let start = Instant::now();
        let mut request = ConnectionRecord {
            host: record.host.clone(),
            port: record.port,
            rule: "TLS terminated; no credential rule covers this request".into(),
            allowed: true,
            ..ConnectionRecord::default()
        };
        let exchange = Exchange {
            proxy,
            broker,
            side: &side,
            target,
            sockets,
        };
        let keep = exchange.serve_request(&mut input, &mut upstream, &mut request);
        let Some(keep) = keep else { break };
        up_total += request.bytes_up;
        down_total += request.bytes_down;
        request.duration_ms = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
        if request.resolved.is_some() {
            record.resolved = request.resolved.clone();
        }
        let _ = proxy.records.send(request);
        if !keep {
            break;
        }
    }
    record.bytes_up = up_total;
    record.bytes_down = down_total;
    let mut stream = side.tls.borrow_mut();
    stream.conn.send_close_notify();
    let StreamOwned { conn, sock } = &mut *stream;
    let _ = conn.complete_io(sock);
    let _ = client.shutdown(Shutdown::Both);
}

/// What one request needs.
struct Exchange<'a, 'c> {
    proxy: &'a ProxyHandler,
    broker: &'a Broker,
    side: &'a ClientSide<'c>,
    target: &'a Target,
    sockets: &'a Sockets,
}

impl Exchange<'_, '_> {
    /// An answer of the proxy's own; the connection closes after it.
    fn refuse(&self, record: &mut ConnectionRecord, code: u16, phrase: &str, body: &str) -> bool {
        record.status = Some(code);
        let _ = http::write_status(&mut &*self.side, code, phrase, &format!("{body}\n"));
        false
    }

    /// The refusal of a request to a read-only host: 403, the reason phrase naming the method
    /// and the host (most clients show only the status line), recorded as not allowed.
    fn refuse_read_only(&self, record: &mut ConnectionRecord, method: &str, why: String) -> bool {
        record.allowed = false;
        record.rule = why.clone();
        let method: String = method
            .chars()
            .filter(|c| c.is_ascii_graphic())
            .take(32)
            .collect();
        let phrase = format!(
            "StepProof refused {method} to {}: read-only host",
            self.target.host
        );
        record.status = Some(403);
        let _ = http::write_status(&mut &*self.side, 403, &phrase, &format!("{why}\n"));
        false
    }

    /// Serves one request. `None`: the connection ended before a request began.
    fn serve_request(
        &self,
        input: &mut Input<&ClientSide<'_>>,
        upstream: &mut Option<Input<UpstreamTls>>,
        record: &mut ConnectionRecord,
    ) -> Option<bool> {
        let head = match forward::next_request(input, Some(CLIENT_IDLE), HEAD_TIMEOUT) {
            Next::Request(head) => head,
            Next::Ended => return None,
            Next::Bad {
                code,
                phrase,
                error,
            } => {
                let said = format!("StepProof: {error}");
                record.error = Some(error);
                return Some(self.refuse(record, code, phrase, &said));
            }
        };
        let _ = self.side.sock.set_read_timeout(Some(UPSTREAM_SILENCE));
        record.method = head.method.clone();
        record.set_path(Some(&head.target));
        let (host, port) = (&self.target.host, self.target.port);
        let deny = |record: &mut ConnectionRecord, why: String| {
            record.allowed = false;
            record.rule = why.clone();
            self.refuse(record, 403, "Forbidden", &why)
        };
        if !head.target.starts_with('/') {
            record.set_path(None);
            return Some(deny(
                record,
                format!(
                    "StepProof: a request inside the TLS connection to {host} must name a path (origin-form), not `{}`: refused, nothing added",
                    head.target.escape_debug()
                ),
            ));
        }
        // The inner Host must be the host this connection was opened to (and checked for).
        let hosts: Vec<&[u8]> = http::header_values(&head.headers, "host").collect();
        let same_host = match hosts.as_slice() {
            [one] => std::str::from_utf8(one)
                .ok()
                .and_then(|h| parse_authority(h.trim(), Some(443)).ok())
                .is_some_and(|(h, p)| h == *host && p == port),
            _ => false,
        };
        if !same_host {
            let shown: Vec<String> = hosts
                .iter()
                .map(|h| String::from_utf8_lossy(h).escape_debug().to_string())
                .collect();
            return Some(deny(
                record,
                format!(
                    "StepProof: the request's Host ({}) is not {host}:{port}, the host this connection was opened to: refused, nothing added",
                    if shown.is_empty() {
                        "none".to_string()
                    } else {
                        shown.join(", ")
                    }
                ),
            ));
        }
        // A placeholder of a credential added elsewhere (the model login) never belongs here.
        if let Some(name) = self.broker.elsewhere_in(&head.target, &head.headers) {
            record.placeholder_blocked = Some(name.to_owned());
            let refused = super::elsewhere_refusal(name);
            return Some(deny(record, refused.body));
        }
        // A placeholder outside its own rule's scope is on its way where it does not belong.
        if let Some(found) = self
            .broker
            .placeholders_in(&head.target, &head.headers)
            .into_iter()
            .find(|c| !c.covers(host, port, &head.method, &head.target))
        {
            record.placeholder_blocked = Some(found.name.clone());
            return Some(deny(
                record,
                format!(
                    "StepProof: this request carries the placeholder of credential {}, which is sent only to {} {} on https://{}:{}; refused and recorded as an exfiltration attempt",
                    found.name,
                    found
                        .rule
                        .methods
                        .as_ref()
                        .map_or("any method".to_string(), |m| m.join("/")),
                    found.rule.paths.join(", "),
                    found.host,
                    found.port
                ),
            ));
        }
        // A read-only host: GET and HEAD (or what a credential rule of its own covers).
        if let Some(why) =
            self.broker
                .read_only_refusal(host, port, &head.method, &head.target, &head.headers)
        {
            return Some(self.refuse_read_only(record, &head.method, why));
        }
        let framing = match http::body_framing(&head.headers, Framing::None) {
            Ok(framing) => framing,
            Err(why) => {
                record.error = Some(why.clone());
                return Some(self.refuse(record, 400, "Bad Request", &format!("StepProof: {why}")));
            }
        };
        if self.broker.is_read_only(host, port)
            && !matches!(framing, Framing::None | Framing::Length(0))
            && self
                .broker
                .matching(host, port, &head.method, &head.target)
                .is_none()
        {
            return Some(self.refuse_read_only(
                record,
                &head.method,
                format!(
                    "StepProof: {host} is read-only in this profile (GET and HEAD without a body): a {} request with a body is refused; recorded",
                    head.method.escape_debug()
                ),
            ));
        }
        let credential = self.broker.matching(host, port, &head.method, &head.target);
        let mut dropped: Vec<String> = Vec::new();
        // The answer to a request with the real credential is searched for it as it is relayed.
        let mut echo = EchoScan::default();
        let mut added = Vec::new();
        if let Some(credential) = credential {
            match credential.to_add() {
                Ok(credential_added) => {
                    dropped.push(credential.injection.header_name());
                    record.credential = Some(credential.name.clone());
                    record.rule = format!("credential {}", credential.name);
                    echo = EchoScan::new(credential_added.echo);
                    // An encoded answer cannot be searched as it passes: ask for none.
                    dropped.push("accept-encoding".into());
                    added = credential_added.header_line;
                    added.extend_from_slice(forward::IDENTITY);
                }
                Err(e) => {
                    record.error = Some(e.clone());
                    return Some(self.refuse(
                        record,
                        502,
                        "Bad Gateway",
                        &format!("StepProof: {e}"),
                    ));
                }
            }
        }
        let client_keep = http::wants_keep_alive(&head.headers, head.minor);
        if forward::answer_continue(&head, &mut &*self.side).is_err() {
            return Some(false);
        }
        let dropped: Vec<&str> = dropped.iter().map(String::as_str).collect();
        let onward = Onward {
            method: &head.method,
            target: &head.target,
            minor: 1,
            host: &forward::host_header(&host.to_string(), port, 443),
            headers: &head.headers,
            dropped: &dropped,
            added: &added,
        }
        .head();
        let mut route = Route {
            exchange: self,
            record,
        };
        let done = forward::forward(
            &mut route,
            upstream,
            self.sockets,
            input,
            self.side,
            &head.method,
            onward,
            Body::Streamed(framing),
            client_keep,
            &mut echo,
            "StepProof",
        );
        record.bytes_up = done.up;
        record.bytes_down = done.down;
        record.status = done.status.or(record.status);
        if let Some(addr) = done.resolved {
            record.resolved = Some(addr.to_string());
        }
        if done.error.is_some() {
            record.error = done.error;
        }
        record.credential_echoed = echo.found();
        record.credential_echo_unchecked = echo.unchecked().map(str::to_owned);
        Some(done.keep)
    }

    /// The onward connection: to the address the allow-list checked, TLS verified for the
    /// CONNECT host with the rule's trust.
    fn connect_upstream(&self, record: &mut ConnectionRecord) -> Result<UpstreamTls, String> {
        let target = self.target;
        let tcp = self
            .proxy
            .connect(target, record)
            .map_err(|refusal| refusal.body)?;
        let _ = tcp.set_nodelay(true);
        let _ = tcp.set_read_timeout(Some(UPSTREAM_SILENCE));
        let tls = self
            .broker
            .upstream_tls(&target.host, target.port)
            .ok_or_else(|| format!("no onward trust for {}", target.host))?;
        let name = match &target.host {
            crate::profile::allow::Host::Name(n) => {
                ServerName::try_from(n.clone()).map_err(|e| format!("upstream host `{n}`: {e}"))?
            }
            crate::profile::allow::Host::Ip(ip) => ServerName::IpAddress((*ip).into()),
        };
        let conn = ClientConnection::new(tls, name)
            .map_err(|e| format!("TLS with {}: {e}", target.host))?;
        let mut stream = StreamOwned::new(conn, tcp);
        while stream.conn.is_handshaking() {
            stream
                .conn
                .complete_io(&mut stream.sock)
                .map_err(|e| format!("TLS handshake with {}: {e}", target.host))?;
        }
        Ok(stream)
    }
}

/// The terminating proxy's part in [`forward::forward`]: the onward connection goes to the
/// address the allow-list checked, TLS verified with the rule's trust.
struct Route<'e, 'a, 'c> {
    exchange: &'e Exchange<'a, 'c>,
    record: &'e mut ConnectionRecord,
}

impl forward::Route for Route<'_, '_, '_> {
    type Conn = UpstreamTls;

    fn connect(&mut self) -> Result<UpstreamTls, String> {
        self.exchange.connect_upstream(self.record)
    }
}
