//! The allow-list HTTP proxy the sandbox reaches through `HTTPS_PROXY`/`HTTP_PROXY`. It serves a
//! listener the sandbox created in its own network namespace, resolves names itself, connects
//! from the supervisor's namespace only to allow-listed names whose resolved address is ordinary
//! global unicast (or named in `allow_addresses`), and records every attempt.
//!
//! Policy, in one place:
//! * `CONNECT host:port` and absolute-form plain HTTP (`GET http://host[:port]/path`, forwarded
//!   in origin-form with `Connection: close`, one request per client connection).
//! * Names are normalised (IDNA to lower-case ASCII) and refused when malformed: NUL or control
//!   bytes, bad IDNA (`xn--zz`), empty or over-long labels, over 253 characters, numeric forms
//!   that are not a dotted quad (`127.1`), IPv6 without brackets or with a zone.
//! * An allow entry is `name`, `*.suffix` (one or more labels before the suffix, never the
//!   suffix itself), or an IP literal (`127.0.0.1:9000`, `[::1]:8080`), each with an optional
//!   `:port`; without one it means 443. Plain HTTP therefore needs `name:80` named explicitly.
//!   IP literals in requests match only IP entries, names only name entries.
//! * The name is resolved once; each resolved address is checked (special ranges refused unless
//!   in `allow_addresses`) and the proxy connects to exactly the address it checked, so DNS
//!   rebinding cannot slip a second answer in between.
//! * A second proxy inside the sandbox gains nothing: whatever it does, its traffic leaves
//!   through this one, and a CONNECT to an allowed host is only a byte tunnel to that host.

mod terminate;

use crate::profile::allow::{CompiledAllowList, Host, SpecialRange};
use crate::profile::allow::{address, host};
use crate::supervisor::net::credentials::Broker;

use crate::http::forward::{Onward, host_header};
use crate::http::io::{self, HeadError, Input, RequestHead};
use crate::http::server::{Handler, MAX_CONNECTIONS, Refused, Server, Sock, Sockets};
use crate::http::url::{self, NotAbsolute};
use serde::Serialize;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

/// Time a client has to send its request head once it has connected.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Time the proxy waits for one upstream address to accept a TCP connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Name resolution for the proxy. Injectable so tests map names to loopback without DNS.
pub trait Resolver: Send + Sync {
    fn resolve(&self, host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>>;
}

/// The system resolver (`getaddrinfo` through `ToSocketAddrs`), in the supervisor's namespace.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

impl Resolver for SystemResolver {
    fn resolve(&self, host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
        Ok((host, port).to_socket_addrs()?.collect())
    }
}

/// One connection attempt, sent when the connection ends (allowed or not, malformed included).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ConnectionRecord {
    /// Normalised host (as escaped text when it was malformed; empty when none was read).
    pub host: String,
    pub port: u16,
    /// The address connected to (or refused), `ip:port`.
    pub resolved: Option<String>,
    /// Whether the policy let the attempt through: the name matched an allow entry and the
    /// address passed the check. Network failures after that (DNS, refused connection) stay
    /// `true` and are in `error`.
    pub allowed: bool,
    /// The allow entry that matched (and the `allow_addresses` entry that admitted a special
    /// address), or why the attempt was refused.
    pub rule: String,
    /// Bytes sent to the upstream server (for plain HTTP, including the rewritten head).
    pub bytes_up: u64,
    /// Bytes received from the upstream server and passed to the client.
    pub bytes_down: u64,
    pub duration_ms: u64,
    pub error: Option<String>,
    /// `CONNECT`, `GET`, … (empty when no request head was read).
    pub method: String,
    /// Request path for plain HTTP and the gateway (never for CONNECT), without its query
    /// (set through [`ConnectionRecord::set_path`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The request's query, which the agent writes as it likes (a presigned URL's signature, a
    /// webhook's token): only its sha256 goes into the record, never the text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub query_sha256: Option<String>,
    /// The HTTP status the upstream answered, where the proxy can see it (plain HTTP: the first
    /// response on the connection; a CONNECT tunnel is encrypted end to end). A refusal's
    /// status is the proxy's own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// The service credential the proxy added to this request (the rule's name; never its
    /// value). Requests inside a terminated TLS connection get a record each.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credential: Option<String>,
    /// The answer relayed to the client (a head or the body's payload) held the value of the
    /// credential added to this request, in one of the spellings a service could hand it back
    /// in (`http::scan::EchoNeedles`): the agent may have read it. Only ever with `credential`;
    /// the value itself is never recorded.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub credential_echoed: bool,
    /// Why the answer's body could not be searched for the credential (`content-encoding gzip`:
    /// the service encoded it although the request asked for `identity`); its heads were.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credential_echo_unchecked: Option<String>,
    /// A placeholder seen where it does not belong (plain HTTP, a request head the proxy reads,
    /// a terminated request outside the placeholder's own scope): the credential it stands for.
    /// The request was refused; the record is written as an exfiltration attempt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placeholder_blocked: Option<String>,
    /// A host the allow-list does not name: how it was shown and the profile key that would
    /// allow it (for the notice the hook passes to the model; the rule says the same).
    #[serde(skip)]
    pub not_listed: Option<(String, String)>,
}

impl ConnectionRecord {
    /// `target` as the request's path: recorded without its query, whose digest is kept.
    pub fn set_path(&mut self, target: Option<&str>) {
        use sha2::{Digest, Sha256};
        let (path, query) = match target {
            Some(target) => match target.split_once('?') {
                Some((path, query)) => (Some(path.to_string()), Some(query)),
                None => (Some(target.to_string()), None),
            },
            None => (None, None),
        };
        self.path = path;
        self.query_sha256 =
            query.map(|q| format!("sha256:{}", hex::encode(Sha256::digest(q.as_bytes()))));
    }
}

/// A running proxy. `shutdown` stops it; dropping the handle leaves it running.
pub struct ProxyHandle {
    server: Server,
}

impl ProxyHandle {
    /// Tells it to stop accepting, without waiting ([`Server::stop`]).
    pub fn stop(&mut self) {
        self.server.stop();
    }

    /// Stops accepting, ends open connections, and returns once every record has been sent.
    pub fn shutdown(self) {
        self.server.shutdown();
    }
}

/// Serves the proxy on `listener` from a new thread; one record per connection to `records`.
pub fn serve(
    listener: TcpListener,
    allow: CompiledAllowList,
    resolver: Arc<dyn Resolver>,
    records: Sender<ConnectionRecord>,
) -> ProxyHandle {
    serve_with_credentials(listener, allow, resolver, records, None)
}

/// [`serve`], with the run's service credentials: TLS is terminated for their hosts (only),
/// and placeholders are looked for in every request head the proxy reads.
pub fn serve_with_credentials(
    listener: TcpListener,
    allow: CompiledAllowList,
    resolver: Arc<dyn Resolver>,
    records: Sender<ConnectionRecord>,
    broker: Option<Arc<Broker>>,
) -> ProxyHandle {
    let handler = ProxyHandler {
        allow,
        resolver,
        records,
        broker,
    };
    ProxyHandle {
        server: Server::start("proxy", listener, handler),
    }
}

struct ProxyHandler {
    allow: CompiledAllowList,
    resolver: Arc<dyn Resolver>,
    records: Sender<ConnectionRecord>,
    broker: Option<Arc<Broker>>,
}

impl Handler for ProxyHandler {
    type Stream = TcpStream;

    fn handle(&self, client: TcpStream, sockets: &Sockets) {
        let start = Instant::now();
        let mut record = ConnectionRecord::default();
        self.serve_connection(&client, sockets, &mut record);
        record.duration_ms = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
        let _ = self.records.send(record);
    }

    fn refuse(&self, client: TcpStream, why: Refused) {
        let reason = match why {
            Refused::Full => format!(
                "StepProof: the proxy is already serving {MAX_CONNECTIONS} connections; try again later"
            ),
            Refused::ShuttingDown => "StepProof: the proxy is shutting down".to_owned(),
        };
        refuse(
            &client,
            503,
            "Service Unavailable",
            &reason,
            Duration::from_millis(100),
        );
        let _ = self.records.send(ConnectionRecord {
            rule: reason,
            error: Some(why.to_string()),
            ..ConnectionRecord::default()
        });
    }
}

/// A refusal: status, reason phrase, and the one-line body (also the record's rule).
struct Refusal {
    code: u16,
    phrase: std::borrow::Cow<'static, str>,
    body: String,
}

/// The refusal of a request that carries the placeholder of a credential added elsewhere (the
/// model login, which only the gateway accepts).
fn elsewhere_refusal(name: &str) -> Refusal {
    refusal(
        403,
        "Forbidden",
        format!(
            "StepProof: this request carries the placeholder of credential {name}, which only StepProof's gateway for the model API accepts; refused and recorded as an exfiltration attempt"
        ),
    )
}

fn refusal(code: u16, phrase: &'static str, body: String) -> Refusal {
    Refusal {
        code,
        phrase: phrase.into(),
        body,
    }
}

/// The refusal of a host the allow-list does not name. Most clients show only the status
/// (`CONNECT tunnel failed, response 403`), some the reason phrase (Go, pip): the phrase itself
/// says what was refused and which profile key would allow it (`shown` is a normalised name or
/// address and a port, so it is plain ASCII without spaces).
fn not_listed_refusal(shown: &str, host: &Host, port: u16) -> Refusal {
    let add = allow_hint(host, port);
    Refusal {
        code: 403,
        phrase: format!("StepProof refused {shown}: {add}").into(),
        body: format!("StepProof: {shown} is not in the network allow-list of this profile; {add}"),
    }
}

/// Which profile key would allow `host:port`: the preset that lists it, else `network.allow`
/// (an allow entry without a port means 443).
pub fn allow_hint(host: &Host, port: u16) -> String {
    let name = host.to_string();
    let entry = if port == 443 {
        name.clone()
    } else {
        format!("{name}:{port}")
    };
    match crate::profile::presets::containing(&name).next() {
        Some(preset) if port == 443 => format!(
            "add preset \"{}\" to network.presets (or \"{entry}\" to network.allow)",
            preset.name
        ),
        _ => format!("add \"{entry}\" to network.allow"),
    }
}

/// What the client asked for, once its head has been read and checked.
struct Target {
    host: Host,
    port: u16,
    /// `None` for CONNECT; the origin-form path for plain HTTP.
    path: Option<String>,
}

impl ProxyHandler {
    fn serve_connection(
        &self,
        client: &TcpStream,
        sockets: &Sockets,
        record: &mut ConnectionRecord,
    ) {
        let mut input = Input::new(client);
        let head = match io::read_request_head(&mut input, Some(HEAD_TIMEOUT), HEAD_TIMEOUT) {
            Ok(head) => head,
            Err(e) => {
                record.rule = format!("no valid request: {e}");
                record.error = Some(e.to_string());
                let (code, phrase) = match e {
                    HeadError::Closed | HeadError::Truncated | HeadError::Io(_) => return,
                    HeadError::TooLarge => (431, "Request Header Fields Too Large"),
                    HeadError::Timeout => (408, "Request Timeout"),
                    HeadError::Malformed(_) => (400, "Bad Request"),
                };
                refuse(client, code, phrase, &format!("StepProof: {e}"), DRAIN);
                return;
            }
        };
        record.method = head.method.clone();
        let target = match parse_target(&head, record) {
            Ok(target) => target,
            Err(r) => return self.deny(client, record, r),
        };
        record.host = target.host.to_string();
        record.port = target.port;
        record.set_path(target.path.as_deref());
        // A placeholder in a head the proxy reads (plain HTTP, a CONNECT's own headers) is on
        // its way somewhere it does not belong: refused, whatever the allow-list says.
        if let Some(broker) = &self.broker
            && let Some(found) = broker.placeholders_in(&head.target, &head.headers).first()
        {
            record.placeholder_blocked = Some(found.name.clone());
            return self.deny(
                client,
                record,
                refusal(
                    403,
                    "Forbidden",
                    format!(
                        "StepProof: this request carries the placeholder of credential {}, which is sent only inside its own scope (https://{}:{}); refused and recorded as an exfiltration attempt",
                        found.name, found.host, found.port
                    ),
                ),
            );
        }
        if let Some(broker) = &self.broker
            && let Some(name) = broker.elsewhere_in(&head.target, &head.headers)
        {
            record.placeholder_blocked = Some(name.to_owned());
            return self.deny(client, record, elsewhere_refusal(name));
        }
        let Some(entry) = self.allow.match_host(&target.host, target.port) else {
            let shown = shown_host(&target, &head);
            record.not_listed = Some((shown.clone(), allow_hint(&target.host, target.port)));
            return self.deny(
                client,
                record,
                not_listed_refusal(&shown, &target.host, target.port),
            );
        };
        record.rule = format!("allow {entry}");
        if target.path.is_some()
            && let Some(broker) = &self.broker
            && broker.is_read_only(&target.host, target.port)
        {
            // Plain HTTP would leave the requests after the first unread.
            return self.deny(
                client,
                record,
                refusal(
                    403,
                    "Forbidden",
                    format!(
                        "StepProof: {} is read-only in this profile: reached over HTTPS (CONNECT) only, where the proxy reads each request; plain HTTP refused",
                        shown_host(&target, &head)
                    ),
                ),
            );
        }
        if target.path.is_none()
            && let Some(broker) = &self.broker
            && broker.terminates(&target.host, target.port)
        {
            // A host with a credential rule, or read-only: TLS ends here, each request is read.
            let broker = broker.clone();
            return terminate::serve(self, &broker, client, input, &target, sockets, record);
        }
        let upstream = match self.connect(&target, record) {
            Ok(upstream) => upstream,
            Err(r) => return self.deny(client, record, r),
        };
        if let Ok(clone) = upstream.try_clone() {
            sockets.register(Sock::Tcp(clone));
        }
        record.allowed = true;
        // Headers are in; a tunnel may stay quiet for as long as its protocol likes.
        let _ = client.set_read_timeout(None);
        let _ = client.set_nodelay(true);
        let _ = upstream.set_nodelay(true);
        let first_up = match &target.path {
            None => {
                if let Err(e) = (&*client).write_all(io::CONNECT_ESTABLISHED) {
                    record.error = Some(format!("answering CONNECT: {e}"));
                    return;
                }
                input.buffered().to_vec()
            }
            Some(path) => {
                let mut first = forwarded_head(&head, &target, path);
                first.extend_from_slice(input.buffered());
                first
            }
        };
        let stats = io::tunnel(client, &upstream, &first_up);
        record.bytes_up = stats.up;
        record.bytes_down = stats.down;
        record.error = stats.error;
        if target.path.is_some() {
            record.status = io::status_code(&stats.first_down);
        }
    }

    /// Answers with the refusal. A policy refusal (403, 400) is recorded as not allowed with
    /// the reason as its rule; a network failure (502) keeps the allow rule and is an error.
    fn deny(&self, client: &TcpStream, record: &mut ConnectionRecord, r: Refusal) {
        if r.code == 502 {
            record.allowed = true;
            if record.error.is_none() {
                record.error = Some(r.body.clone());
            }
        } else {
            record.allowed = false;
            record.rule = r.body.clone();
        }
        record.status = Some(r.code);
        refuse(client, r.code, &r.phrase, &r.body, DRAIN);
    }

    /// Resolves once, checks each address, and connects to the first that is allowed and
    /// answers — the address checked is the address connected to.
    fn connect(
        &self,
        target: &Target,
        record: &mut ConnectionRecord,
    ) -> Result<TcpStream, Refusal> {
        let bad_gateway = |body: String| refusal(502, "Bad Gateway", body);
        let candidates = match &target.host {
            Host::Ip(ip) => vec![SocketAddr::new(*ip, target.port)],
            Host::Name(name) => match self.resolver.resolve(name, target.port) {
                Ok(addrs) if !addrs.is_empty() => addrs,
                Ok(_) => return Err(bad_gateway(format!("StepProof: {name} has no addresses"))),
                Err(e) => {
                    return Err(bad_gateway(format!(
                        "StepProof: cannot resolve {name}: {e}"
                    )));
                }
            },
        };
        let mut refused: Vec<(SocketAddr, SpecialRange)> = Vec::new();
        let mut failed: Option<(SocketAddr, std::io::Error)> = None;
        for addr in candidates {
            let addr = SocketAddr::new(address::canonical(addr.ip()), addr.port());
            let admitted = match self.allow.check_address(addr.ip()) {
                Ok(admitted) => admitted,
                Err(range) => {
                    refused.push((addr, range));
                    continue;
                }
            };
            match TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
                Ok(stream) => {
                    record.resolved = Some(addr.to_string());
                    if let Some(entry) = admitted {
                        record.rule.push_str(&format!(
                            "; address {} allowed by allow_addresses {entry}",
                            addr.ip()
                        ));
                    }
                    return Ok(stream);
                }
                Err(e) => failed = Some((addr, e)),
            }
        }
        if let Some((addr, e)) = failed {
            record.resolved = Some(addr.to_string());
            record.error = Some(format!("connecting to {addr}: {e}"));
            return Err(bad_gateway(format!(
                "StepProof: cannot connect to {} ({addr}): {e}",
                target.host
            )));
        }
        record.resolved = refused.first().map(|(addr, _)| addr.to_string());
        let listed: Vec<String> = refused
            .iter()
            .map(|(addr, range)| format!("{} ({range})", addr.ip()))
            .collect();
        let loopback = refused
            .iter()
            .any(|(_, range)| matches!(range, SpecialRange::Loopback));
        Err(refusal(
            403,
            "Forbidden",
            format!(
                "StepProof: {} resolves to {}, which this profile does not allow (name the address in allow_addresses to allow it){}",
                target.host,
                listed.join(", "),
                if loopback { LOOPBACK_HINT } else { "" }
            ),
        ))
    }
}

/// The sandbox's loopback is its own: a service on the host's is reached through this proxy.
const LOOPBACK_HINT: &str = "; that is the host's loopback, which the sandbox reaches only through this proxy: allow the service (allow = [\"127.0.0.1:PORT\"], allow_addresses = [\"127.0.0.1\"]) and send its requests through the proxy (the sandbox's NO_PROXY keeps 127.0.0.1 and localhost on the sandbox's own loopback)";

/// How the refused target is named in the 403: the host alone for its usual port.
fn shown_host(target: &Target, head: &RequestHead) -> String {
    let usual = if head.method == "CONNECT" { 443 } else { 80 };
    if target.port == usual {
        target.host.to_string()
    } else {
        format!("{}:{}", target.host, target.port)
    }
}

/// A target written in a request, escaped and shortened for a record or a message.
fn quoted(raw: &str) -> String {
    let escaped: String = raw.escape_debug().collect();
    if escaped.chars().count() > 300 {
        let cut: String = escaped.chars().take(300).collect();
        format!("{cut}…")
    } else {
        escaped
    }
}

fn parse_target(head: &RequestHead, record: &mut ConnectionRecord) -> Result<Target, Refusal> {
    let bad = |record: &mut ConnectionRecord, why: String| {
        record.host = quoted(&head.target);
        refusal(400, "Bad Request", format!("StepProof: {why}"))
    };
    if head.method == "CONNECT" {
        return match host::parse_authority(&head.target, None) {
            Ok((host, port)) => Ok(Target {
                host,
                port,
                path: None,
            }),
            Err(e) => Err(bad(
                record,
                format!("bad CONNECT target `{}`: {e}", quoted(&head.target)),
            )),
        };
    }
    let (scheme, authority, path) = match url::absolute_form(&head.target) {
        Ok(split) => split,
        Err(NotAbsolute::NoScheme) => {
            return Err(bad(
                record,
                "this is a proxy: send `CONNECT host:port` or an absolute-form `http://` request"
                    .into(),
            ));
        }
        Err(NotAbsolute::UserInfo) => {
            return Err(bad(
                record,
                "user information in the URL is not allowed".into(),
            ));
        }
    };
    if !scheme.eq_ignore_ascii_case("http") {
        return Err(bad(
            record,
            format!(
                "scheme `{}` is not proxied as plain HTTP; use CONNECT",
                quoted(scheme)
            ),
        ));
    }
    let (host, port) = host::parse_authority(authority, Some(80))
        .map_err(|e| bad(record, format!("bad host `{}`: {e}", quoted(authority))))?;
    Ok(Target {
        host,
        port,
        path: Some(path),
    })
}

/// The request as sent upstream ([`Onward`]): origin-form target, `Host` from the URL, proxy
/// and hop-by-hop headers removed, and `Connection: close` (one request per connection keeps
/// every request of the connection aimed at the host that was checked). `Expect` is passed on:
/// after this head the connection is a tunnel, and the upstream answers it.
fn forwarded_head(head: &RequestHead, target: &Target, path: &str) -> Vec<u8> {
    let expect: Vec<io::Header> = io::header_values(&head.headers, "expect")
        .map(|v| ("Expect".to_owned(), v.to_vec()))
        .collect();
    let mut added: Vec<u8> = Vec::new();
    for (name, value) in &expect {
        added.extend_from_slice(name.as_bytes());
        added.extend_from_slice(b": ");
        added.extend_from_slice(value);
        added.extend_from_slice(b"\r\n");
    }
    added.extend_from_slice(b"Connection: close\r\n");
    Onward {
        method: &head.method,
        target: path,
        minor: head.minor,
        host: &host_header(&target.host.to_string(), target.port, 80),
        headers: &head.headers,
        dropped: &[],
        added: &added,
    }
    .head()
}

/// How long a refused client may keep sending before the proxy closes (so it reads the
/// refusal instead of a reset).
const DRAIN: Duration = Duration::from_millis(500);

/// Writes a short plain-text error response, half-closes, and drains briefly.
fn refuse(client: &TcpStream, code: u16, phrase: &str, body: &str, drain: Duration) {
    let _ = client.set_write_timeout(Some(Duration::from_secs(5)));
    if io::write_status(&mut &*client, code, phrase, &format!("{body}\n")).is_err() {
        return;
    }
    let _ = client.shutdown(Shutdown::Write);
    let _ = client.set_read_timeout(Some(drain));
    let deadline = Instant::now() + drain;
    let mut sink = [0u8; 4096];
    let mut drained = 0usize;
    while Instant::now() < deadline && drained < 1 << 20 {
        match (&*client).read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(n) => drained += n,
        }
    }
}
