//! The credential gateway: the agent speaks plain HTTP/1.1 to a unix socket
//! (`ANTHROPIC_UNIX_SOCKET`), and the supervisor forwards each request to the model API (over
//! TLS, or to the user's own `ANTHROPIC_BASE_URL`) with the real credential added, so the
//! credential never enters the sandbox: the agent holds a placeholder, and a request that does
//! not carry this run's placeholder is refused. Only the model API's paths get the credential
//! ([`model_paths`]: the login is also the key to the account); every other request is refused
//! with 403 and recorded. Responses are relayed as they arrive: server-sent events stream
//! through, searched for the login as they pass (the record says when an answer held it:
//! `credential_echoed`). A 401 makes the login refresh itself (by the rule of [`ModelLogin::after_401`]) and
//! the request is sent once more.

use crate::http::forward::{self, Answer, Next, Onward};
use crate::http::io::{self as http, Framing, Header, Input};
use crate::http::scan::EchoScan;
use crate::http::server::MAX_CONNECTIONS;
use crate::http::server::{Handler, Refused, Server, Sock, Sockets};
use crate::http::url;
use crate::http::url::Url;
use crate::profile::LoginPath;
use crate::supervisor::net::login::ModelLogin;
use crate::supervisor::net::model_paths::{self, Verdict};
use crate::supervisor::net::proxy::{ConnectionRecord, HEAD_TIMEOUT};
use crate::supervisor::net::server_settings::{self, ServerSettings};
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, StreamOwned};
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream, ToSocketAddrs};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::Arc;
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

pub use crate::supervisor::net::login::Credential;

/// How long an idle keep-alive client connection is kept before the gateway closes it.
pub const CLIENT_IDLE: Duration = Duration::from_secs(300);
/// Longest silence from the upstream while a response is awaited or streamed (long
/// non-streaming completions answer late; streams send pings).
pub const UPSTREAM_SILENCE: Duration = Duration::from_secs(600);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Request bodies up to this size are read before they are sent, so that a request refused
/// with 401 can be sent again after a refresh (a Messages request is JSON, well below this).
const RETRY_BODY_MAX: u64 = 32 * 1024 * 1024;
/// The most of a 401's body read before it is relayed or dropped.
const REFUSAL_BODY_MAX: u64 = 64 * 1024;

/// Where the gateway forwards to.
#[derive(Clone)]
pub struct Upstream {
    /// Host name: the `Host` header and the name the certificate must carry.
    pub host: String,
    pub port: u16,
    /// `None`: plain HTTP (a user's `ANTHROPIC_BASE_URL` that says `http://`).
    pub tls: Option<Arc<ClientConfig>>,
    /// Where to connect instead of resolving `host` (tests: a loopback server); the
    /// certificate is still verified for `host`.
    pub connect_addr: Option<SocketAddr>,
    /// A path the upstream's API lives under (`https://gateway.corp/anthropic`), without a
    /// trailing `/`; empty for the root.
    pub path_prefix: String,
    /// Requests beyond the model API's that get the credential (`network.gateway.login_paths`).
    pub login_paths: Vec<LoginPath>,
}

impl fmt::Debug for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Upstream")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("tls", &self.tls.is_some())
            .field("connect_addr", &self.connect_addr)
            .field("path_prefix", &self.path_prefix)
            .field("login_paths", &self.login_paths)
            .finish_non_exhaustive()
    }
}

impl Upstream {
    /// The upstream a URL names (`https://api.anthropic.com`, a user's `ANTHROPIC_BASE_URL`),
    /// trusting `tls` for an https one.
    pub fn from_url(url: &Url, tls: Arc<ClientConfig>) -> Upstream {
        Upstream {
            host: url.host.clone(),
            port: url.port,
            tls: url.tls.then_some(tls),
            connect_addr: None,
            path_prefix: url.path.clone(),
            login_paths: Vec::new(),
        }
    }
}

/// The upstream a profile's `[network.gateway]` names (`host`, `host:port` or a URL), with
/// the CA files to trust beside the public roots; resolved before the sandbox starts so that
/// an unreadable CA stops the launch.
pub fn upstream_from_profile(
    config: &crate::profile::GatewayConfig,
    home: &std::path::Path,
    extra_roots: &[std::path::PathBuf],
) -> Result<Upstream, String> {
    let url = if config.upstream.contains("://") {
        config.upstream.clone()
    } else {
        format!("https://{}", config.upstream)
    };
    let url = Url::parse(&url).map_err(|e| format!("network.gateway.upstream: {e}"))?;
    let connect_addr = config
        .connect
        .as_deref()
        .map(|c| {
            c.parse::<SocketAddr>()
                .map_err(|e| format!("network.gateway.connect {c:?}: {e}"))
        })
        .transpose()?;
    let mut roots = extra_roots.to_vec();
    if let Some(spec) = &config.ca_file {
        roots.push(spec.resolve(home, home));
    }
    let tls = crate::supervisor::net::login::client_config(&roots)
        .map_err(|e| format!("network.gateway: {e}"))?;
    let mut upstream = Upstream::from_url(&url, tls);
    upstream.connect_addr = connect_addr;
    upstream.login_paths = config.login_paths.clone();
    Ok(upstream)
}

/// A running gateway. `shutdown` stops it; dropping the handle leaves it running.
pub struct GatewayHandle {
    server: Server,
}

impl GatewayHandle {
    /// Tells it to stop accepting, without waiting.
    pub fn stop(&mut self) {
        self.server.stop();
    }

    /// Stops accepting, ends open connections, and returns once every record has been sent.
    pub fn shutdown(self) {
        self.server.shutdown();
    }
}

/// What the gateway lays over the organisation's server-managed settings
/// ([`server_settings::merge_server_settings`]).
#[derive(Debug, Clone)]
pub struct ServerSettingsMerge {
    /// Exactly what StepProof writes to `/etc/claude-code/managed-settings.json`.
    pub ours: serde_json::Value,
    /// `assurance = "strict"`: a server that sets keys StepProof owns is refused.
    pub strict: bool,
}

/// Serves the gateway on `listener` from a new thread; one record per request to `records`.
/// With `settings`, `GET` [`server_settings::ENDPOINT`] is answered with StepProof's managed
/// settings laid over the server's (without it, as any other request).
pub fn serve_gateway(
    listener: UnixListener,
    upstream: Upstream,
    login: Arc<ModelLogin>,
    settings: Option<ServerSettingsMerge>,
    records: Sender<ConnectionRecord>,
) -> GatewayHandle {
    let handler = GatewayHandler {
        upstream,
        login,
        settings,
        records,
    };
    GatewayHandle {
        server: Server::start("gateway", listener, handler),
    }
}

struct GatewayHandler {
    upstream: Upstream,
    login: Arc<ModelLogin>,
    settings: Option<ServerSettingsMerge>,
    records: Sender<ConnectionRecord>,
}

/// The upstream connection: TLS, or plain TCP for an `http://` upstream.
enum Stream {
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
    Plain(TcpStream),
}

impl Stream {
    fn sock(&self) -> &TcpStream {
        match self {
            Stream::Tls(s) => &s.sock,
            Stream::Plain(s) => s,
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tls(s) => s.read(buf),
            Stream::Plain(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tls(s) => s.write(buf),
            Stream::Plain(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Tls(s) => s.flush(),
            Stream::Plain(s) => s.flush(),
        }
    }
}

impl forward::Upstream for Stream {
    fn sock(&self) -> &TcpStream {
        Stream::sock(self)
    }
}

impl Handler for GatewayHandler {
    type Stream = UnixStream;

    fn handle(&self, client: UnixStream, sockets: &Sockets) {
        let mut input = Input::new(&client);
        let mut upstream: Option<Input<Stream>> = None;
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
        let _ = http::write_status(&mut &client, 503, "Service Unavailable", &body);
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
    /// Whether a request for `method` `target` may go out with the real login: `Ok(true)` for
    /// `GET` [`server_settings::ENDPOINT`], which the supervisor answers itself (its own use of
    /// the login, see [`GatewayHandler::serve_server_settings`]); `Ok(false)` for a path of the
    /// model API (or one the profile adds, which the record's rule names); `Err` with the 403's
    /// text for anything else, or a path not spelt plainly (the record's rule says which).
    fn admit_path(
        &self,
        method: &str,
        target: &str,
        record: &mut ConnectionRecord,
    ) -> Result<bool, String> {
        let shown = target.split('?').next().unwrap_or_default().escape_debug();
        let path = match model_paths::plain_path(target) {
            Ok((path, _)) => path,
            Err(why) => {
                record.rule = "credential gateway: refused, the path is not spelt plainly".into();
                return Err(format!(
                    "{method} {shown} is not spelt plainly ({why}); the real login is used only for the model API, on paths spelt plainly"
                ));
            }
        };
        if self.settings.is_some() && method == "GET" && path == server_settings::ENDPOINT {
            return Ok(true);
        }
        match model_paths::classify(method, path, &self.upstream.login_paths) {
            Verdict::Model(_) => Ok(false),
            Verdict::Added(entry) => {
                record.rule = format!("credential gateway (network.gateway.login_paths: {entry})");
                Ok(false)
            }
            Verdict::Refused(class, _) => {
                record.rule =
                    format!("credential gateway: refused, not a model API path ({class})");
                Err(format!(
                    "{method} {shown} is not a model API path; the real login is used only for the model API; a path you need can be added with network.gateway.login_paths in a profile outside the workspace"
                ))
            }
        }
    }

    /// Serves one request. `None`: the connection ended before a request began; `Some(keep)`:
    /// a request was handled (or refused) and `keep` says whether the connection stays open.
    fn serve_request(
        &self,
        client: &UnixStream,
        input: &mut Input<&UnixStream>,
        upstream: &mut Option<Input<Stream>>,
        sockets: &Sockets,
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
                let said = format!("StepProof gateway: {error}\n");
                record.error = Some(error);
                let _ = http::write_status(&mut &*client, code, phrase, &said);
                return Some(false);
            }
        };
        // Once the head is in, the body may come slowly (the client streams it).
        let _ = client.set_read_timeout(Some(UPSTREAM_SILENCE));
        record.method = head.method.clone();
        let refuse = |record: &mut ConnectionRecord, code: u16, phrase: &str, why: String| {
            record.error = Some(why.clone());
            let _ = http::write_status(
                &mut &*client,
                code,
                phrase,
                &format!("StepProof gateway: {why}\n"),
            );
            Some(false)
        };
        let path = match url::origin_form(&head.target) {
            Some(path) => path,
            None => {
                let why = format!("bad request target `{}`", head.target.escape_debug());
                return refuse(record, 400, "Bad Request", why);
            }
        };
        record.set_path(Some(&path));
        let framing = match http::body_framing(&head.headers, Framing::None) {
            Ok(framing) => framing,
            Err(why) => return refuse(record, 400, "Bad Request", why),
        };
        // The real login goes only with the model API's paths (and those the profile adds).
        let settings_request = match self.admit_path(&head.method, &path, record) {
            Ok(settings_request) => settings_request,
            Err(why) => return refuse(record, 403, "Forbidden", why),
        };
        // Only what carries this run's placeholder goes out with the real credential.
        if let Err(why) = self.login.admits(
            http::header_values(&head.headers, "x-api-key"),
            http::header_values(&head.headers, "authorization"),
        ) {
            record.rule = "credential gateway: refused, no placeholder of this run".into();
            let why = format!("refused: the request carries {why}; recorded");
            return refuse(record, 403, "Forbidden", why);
        }
        let credential = match self.login.credential() {
            Ok(credential) => credential,
            Err(e) => return refuse(record, 503, "Service Unavailable", e.to_string()),
        };
        if credential.header_line().is_none() {
            let why = "the model credential is empty or holds control characters".to_owned();
            return refuse(record, 500, "Internal Server Error", why);
        }
        // The record says the real login went out with this request (its name, never its value).
        record.credential = Some(crate::sandbox::plan::MODEL_LOGIN.to_string());
        let client_keep = http::wants_keep_alive(&head.headers, head.minor);
        if forward::answer_continue(&head, &mut &*client).is_err() {
            return Some(false);
        }
        // Read whole when it can be (a Messages request is JSON, well below the cap), so that a
        // request refused with 401 can be sent again after a refresh.
        let body = match forward::Body::take(input, framing, RETRY_BODY_MAX) {
            Ok(body) => body,
            Err(e) => {
                record.error = Some(format!("reading the request body: {e}"));
                return Some(false);
            }
        };

        if settings_request && let Some(merge) = &self.settings {
            let keep = self.serve_server_settings(
                client,
                upstream,
                sockets,
                record,
                merge,
                &path,
                &head,
                &credential,
            );
            return Some(keep && client_keep);
        }
        let onward = self.forwarded_head(&head.method, &path, &head.headers, &credential);
        let mut echo = EchoScan::new(credential.echo_needles());
        let mut route = Route {
            gateway: self,
            record,
            credential,
            method: &head.method,
            path: &path,
            headers: &head.headers,
        };
        let done = forward::forward(
            &mut route,
            upstream,
            sockets,
            input,
            client,
            &head.method,
            onward,
            body,
            client_keep,
            &mut echo,
            "StepProof gateway",
        );
        record.allowed = done.resolved.is_some();
        if let Some(addr) = done.resolved {
            record.resolved = Some(addr.to_string());
        }
        record.bytes_up += done.up;
        record.bytes_down += done.down;
        record.status = done.status;
        record.error = done.error;
        record.credential_echoed = echo.found();
        record.credential_echo_unchecked = echo.unchecked().map(str::to_owned);
        Some(done.keep)
    }

    /// `GET` [`server_settings::ENDPOINT`]: sent without [`server_settings::STRIP_REQUEST_HEADERS`],
    /// the answer read whole (at most [`server_settings::BODY_MAX`]) and answered as
    /// [`server_settings::merge_server_settings`] says; a refusal is a 502, said at once and
    /// recorded (Claude Code then has no server settings and reads StepProof's `/etc`, or does
    /// not start a session its organisation requires them for: either way the refused settings
    /// are never used). Returns whether the connection may stay open.
    #[allow(clippy::too_many_arguments)]
    fn serve_server_settings(
        &self,
        client: &UnixStream,
        upstream: &mut Option<Input<Stream>>,
        sockets: &Sockets,
        record: &mut ConnectionRecord,
        merge: &ServerSettingsMerge,
        path: &str,
        head: &http::RequestHead,
        credential: &Credential,
    ) -> bool {
        let refuse = |record: &mut ConnectionRecord, code: u16, phrase: &str, why: String| {
            record.error = Some(why.clone());
            let _ = http::write_status(
                &mut &*client,
                code,
                phrase,
                &format!("StepProof gateway: {why}\n"),
            );
            false
        };
        // A fresh connection, closed after: this answer is read whole, never relayed.
        *upstream = None;
        let mut conn = match self.connect_upstream() {
            Ok(conn) => Input::new(conn),
            Err(e) => return refuse(record, 502, "Bad Gateway", e),
        };
        if let Ok(clone) = conn.inner.sock().try_clone() {
            sockets.register(Sock::Tcp(clone));
        }
        record.resolved = conn.inner.sock().peer_addr().ok().map(|a| a.to_string());
        record.allowed = true;
        let stripped: Vec<Header> = head
            .headers
            .iter()
            .filter(|(name, _)| {
                !server_settings::STRIP_REQUEST_HEADERS
                    .iter()
                    .any(|s| name.eq_ignore_ascii_case(s))
            })
            .cloned()
            .collect();
        let forwarded = self.forwarded_head("GET", path, &stripped, credential);
        let sent = conn
            .inner
            .write_all(&forwarded)
            .and_then(|()| conn.inner.flush());
        if let Err(e) = sent {
            return refuse(
                record,
                502,
                "Bad Gateway",
                format!("sending the request upstream: {e}"),
            );
        }
        record.bytes_up += forwarded.len() as u64;
        let answer = (|| -> Result<(http::ResponseHead, Vec<u8>), String> {
            let response = loop {
                let response = http::read_response_head(&mut conn)
                    .map_err(|e| format!("reading the upstream response: {e}"))?;
                if !(100..200).contains(&response.code) {
                    break response;
                }
            };
            let framing = if matches!(response.code, 204 | 304) {
                Framing::None
            } else {
                http::body_framing(&response.headers, Framing::UntilClose).map_err(|e| {
                    // The header's value is quoted: never the login, should the server echo it.
                    credential
                        .echo_needles()
                        .redact(format!("upstream response: {e}"))
                })?
            };
            let mut raw = Vec::new();
            let mut capped = CappedWriter {
                out: &mut raw,
                left: server_settings::BODY_MAX + 1,
            };
            http::relay_body(&mut conn, &mut capped, framing)
                .map_err(|e| format!("reading the settings answer: {e}"))?;
            if raw.len() as u64 > server_settings::BODY_MAX {
                return Err(format!(
                    "the settings answer is larger than {} bytes",
                    server_settings::BODY_MAX
                ));
            }
            let body = if framing == Framing::Chunked {
                crate::http::chunked::dechunk(&raw, raw.len())
                    .map_err(|e| format!("the settings answer: chunked body: {e}"))?
            } else {
                raw
            };
            Ok((response, body))
        })();
        let (response, body) = match answer {
            Ok(answer) => answer,
            Err(why) => return refuse(record, 502, "Bad Gateway", why),
        };
        record.bytes_down += body.len() as u64;
        let encoded = http::header_values(&response.headers, "content-encoding")
            .any(|v| !v.eq_ignore_ascii_case(b"identity"));
        let outcome = if encoded && response.code == 200 {
            ServerSettings::Refuse(
                "the settings server's answer is encoded although the request asked for none; it is not used".into(),
            )
        } else {
            server_settings::merge_server_settings(response.code, &body, &merge.ours, merge.strict)
        };
        let (code, phrase, body, json) = match outcome {
            ServerSettings::Forward => {
                let phrase = http::reason_phrase(&response.raw);
                (response.code, phrase, body, false)
            }
            ServerSettings::Replace { body, removed } => {
                if !removed.is_empty() {
                    record.rule = format!(
                        "credential gateway: server-managed settings, keys StepProof owns removed: {}",
                        removed.join(", ")
                    );
                    crate::say!(
                        "stepproof-run: WARNING: the organisation's server-managed settings set keys StepProof owns; they were removed from the answer, the hook stays: {}",
                        removed.join(", ")
                    );
                } else {
                    record.rule =
                        "credential gateway: server-managed settings, StepProof's laid over".into();
                }
                (200, "OK".to_owned(), body, true)
            }
            ServerSettings::Refuse(why) => {
                record.rule = "credential gateway: server-managed settings refused".into();
                crate::say!(
                    "stepproof-run: WARNING: server-managed settings refused, the agent got none: {why}"
                );
                return refuse(record, 502, "Bad Gateway", why);
            }
        };
        // Framing is ours now (the body was read whole); a replaced body drops what described
        // the server's bytes.
        let mut dropped = vec![
            "content-length",
            "transfer-encoding",
            "connection",
            "keep-alive",
        ];
        if json {
            dropped.extend(server_settings::STRIP_RESPONSE_HEADERS);
            dropped.push("content-type");
        }
        let mut out = format!("HTTP/1.1 {code} {phrase}\r\n").into_bytes();
        http::write_forwarded_headers(&mut out, &response.headers, &dropped);
        if json {
            out.extend_from_slice(b"Content-Type: application/json\r\n");
        }
        out.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
        out.extend_from_slice(&body);
        // What goes to the client is searched as a whole (it was read whole, de-chunked): the
        // server's settings laid over, or its answer forwarded, may quote the login.
        let mut echo = EchoScan::new(credential.echo_needles());
        if !json && !body.is_empty() {
            echo.note_content_codings(http::header_values(&response.headers, "content-encoding"));
        }
        echo.feed(&out);
        record.credential_echoed = echo.found();
        record.credential_echo_unchecked = echo.unchecked().map(str::to_owned);
        (&*client).write_all(&out).is_ok()
    }

    /// Peeks at the final response head: a 401 is read whole here (capped) and, if the login
    /// has a better credential, dropped for a retry; anything else is left for the relay.
    fn answer_to_unauthorized(
        &self,
        conn: &mut Input<Stream>,
        method: &str,
        used: &Credential,
    ) -> Result<Retry, String> {
        // Only the first head is looked at here; anything but a 401 (interim heads included)
        // is left unread for the relay.
        let code = http::peek_response_code(conn)
            .map_err(|e| format!("reading the upstream response: {e}"))?;
        if code != Some(401) {
            return Ok(Retry::No);
        }
        let response = http::read_response_head(conn)
            .map_err(|e| format!("reading the upstream response: {e}"))?;
        // Searched for the login that went out, in case it is relayed (a body longer
        // than the cap is searched whole although only its start would be relayed).
        let mut echo = EchoScan::new(used.echo_needles());
        echo.feed(&response.raw);
        let framing = if method.eq_ignore_ascii_case("HEAD") {
            Framing::None
        } else {
            http::body_framing(&response.headers, Framing::UntilClose)
                .map_err(|e| echo.redact(format!("upstream response: {e}")))?
        };
        if !matches!(framing, Framing::None | Framing::Length(0)) {
            echo.note_content_codings(http::header_values(&response.headers, "content-encoding"));
        }
        let keep = framing != Framing::UntilClose && http::wants_keep_alive(&response.headers, 1);
        let mut body = Vec::new();
        let mut capped = CappedWriter {
            out: &mut body,
            left: REFUSAL_BODY_MAX,
        };
        http::relay_body_scanned(conn, &mut capped, framing, &mut echo)
            .map_err(|e| format!("reading the upstream's 401: {e}"))?;
        match self.login.after_401(used) {
            Ok(Ok(fresh)) => Ok(Retry::With(fresh, keep)),
            Ok(Err(why)) => {
                let mut whole = response.raw;
                whole.extend_from_slice(&body);
                Ok(Retry::Relay(whole, keep, why, echo))
            }
            Err(e) => Err(e.to_string()),
        }
    }

    /// The request as sent upstream: `Host` set to the upstream, the path under its prefix,
    /// the client's credentials and hop-by-hop headers removed, the real credential added, and
    /// `Accept-Encoding: identity` in place of the client's (the answer is searched for the
    /// credential as it passes, which an encoded body would hide; server-sent events stream the
    /// same either way).
    fn forwarded_head(
        &self,
        method: &str,
        path: &str,
        headers: &[Header],
        credential: &Credential,
    ) -> Vec<u8> {
        let default_port = if self.upstream.tls.is_some() { 443 } else { 80 };
        let mut added = credential.header_line().unwrap_or_default();
        added.extend_from_slice(forward::IDENTITY);
        Onward {
            method,
            target: &format!("{}{path}", self.upstream.path_prefix),
            minor: 1,
            host: &forward::host_header(&self.upstream.host, self.upstream.port, default_port),
            headers,
            // The client's credentials (the placeholder), and its Accept-Encoding (replaced by
            // `identity`: an encoded answer could not be searched for the login).
            dropped: &["x-api-key", "authorization", "accept-encoding"],
            added: &added,
        }
        .head()
    }

    fn connect_upstream(&self) -> Result<Stream, String> {
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
            let Some(config) = &up.tls else {
                return Ok(Stream::Plain(tcp));
            };
            let name = ServerName::try_from(up.host.clone())
                .map_err(|e| format!("upstream host `{}`: {e}", up.host))?;
            let tls = ClientConnection::new(config.clone(), name)
                .map_err(|e| format!("TLS with {}: {e}", up.host))?;
            let mut stream = StreamOwned::new(tls, tcp);
            // Handshake now, so a certificate problem is reported as such.
            while stream.conn.is_handshaking() {
                stream
                    .conn
                    .complete_io(&mut stream.sock)
                    .map_err(|e| format!("TLS handshake with {} ({addr}): {e}", up.host))?;
            }
            return Ok(Stream::Tls(Box::new(stream)));
        }
        Err(last)
    }
}

/// What became of a request's first answer.
enum Retry {
    /// Not a 401: relay it.
    No,
    /// A 401, and a better credential: send again (the bool: the upstream connection stays).
    With(Credential, bool),
    /// A 401 and nothing better (and why): these bytes are the whole answer for the client,
    /// and what the search of them for the login found.
    Relay(Vec<u8>, bool, String, EchoScan),
}

/// Keeps the first `left` bytes written and drops the rest.
struct CappedWriter<'a> {
    out: &'a mut Vec<u8>,
    left: u64,
}

impl Write for CappedWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let take = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        self.out.extend_from_slice(&buf[..take]);
        self.left -= take as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The gateway's part in [`forward::forward`]: the upstream it was given, and a 401 to a
/// request it can send again answered by a refresh of the login (by the rule of
/// [`ModelLogin::after_401`]) and one more try.
struct Route<'g, 'r> {
    gateway: &'g GatewayHandler,
    record: &'r mut ConnectionRecord,
    credential: Credential,
    method: &'r str,
    path: &'r str,
    headers: &'r [Header],
}

impl forward::Route for Route<'_, '_> {
    type Conn = Stream;

    fn connect(&mut self) -> Result<Stream, String> {
        self.gateway.connect_upstream()
    }

    fn first_answer(
        &mut self,
        conn: &mut Input<Stream>,
        echo: &mut EchoScan,
    ) -> Result<Answer, String> {
        match self
            .gateway
            .answer_to_unauthorized(conn, self.method, &self.credential)?
        {
            Retry::No => Ok(Answer::Relay),
            Retry::With(fresh, keep) => {
                self.credential = fresh;
                *echo = EchoScan::new(self.credential.echo_needles());
                self.record.rule = "credential gateway (retried after a refresh)".into();
                let head = self.gateway.forwarded_head(
                    self.method,
                    self.path,
                    self.headers,
                    &self.credential,
                );
                Ok(Answer::Again { head, keep })
            }
            Retry::Relay(bytes, keep, why, scan) => {
                // The record says why the host's login was not refreshed for it.
                self.record.rule = format!("credential gateway: 401 relayed, no refresh ({why})");
                *echo = scan;
                Ok(Answer::Taken {
                    bytes,
                    status: 401,
                    keep,
                })
            }
        }
    }
}

pub use crate::supervisor::net::login::EXTRA_CA_ENV;

/// The CA files the caller's environment adds to the public roots onward (its
/// `NODE_EXTRA_CA_CERTS`: a corporate CA, a test CA).
pub fn caller_extra_roots() -> Vec<std::path::PathBuf> {
    std::env::var_os(EXTRA_CA_ENV)
        .filter(|v| !v.to_string_lossy().trim().is_empty())
        .into_iter()
        .map(Into::into)
        .collect()
}

/// The gateway's upstream and login for a plan's `[network.gateway]`, resolved before the
/// sandbox starts (a missing credential named by the profile, or an unreadable CA, stops the
/// launch). `held` are the login variables the plan kept outside; the caller's own
/// environment gives `NODE_EXTRA_CA_CERTS`, `CLAUDE_CONFIG_DIR` and the token endpoint for tests
/// ([`crate::supervisor::net::login::TOKEN_URL_ENV`]).
pub fn prepare(
    config: &crate::profile::GatewayConfig,
    home: &std::path::Path,
    held: &[(String, String)],
) -> Result<(Upstream, Arc<ModelLogin>), String> {
    use crate::supervisor::net::login::{self, RefreshEndpoint, Sources};
    let caller = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    let extra_roots = caller_extra_roots();
    let upstream = upstream_from_profile(config, home, &extra_roots)?;
    let refresh = RefreshEndpoint {
        url: caller(login::TOKEN_URL_ENV).unwrap_or_else(|| login::TOKEN_URL.to_owned()),
        tls: login::client_config(&extra_roots)?,
    };
    let (claude_dir, user_config) = match caller("CLAUDE_CONFIG_DIR") {
        Some(dir) => {
            let dir = std::path::PathBuf::from(dir);
            (dir.clone(), dir.join(".claude.json"))
        }
        None => (home.join(".claude"), home.join(".claude.json")),
    };
    let model_login = if let Some(name) = config.credential.strip_prefix("env:") {
        let value = std::env::var(name).map_err(|_| {
            format!("network.gateway.credential: {name} is not set in stepproof-run's environment")
        })?;
        ModelLogin::fixed(Credential::ApiKey(value))
    } else if config.credential == "claude-login" {
        let found = ModelLogin::claude_ai(&claude_dir, refresh).map_err(|e| e.to_string())?;
        if found.is_none() {
            return Err(format!(
                "network.gateway.credential claude-login: no claude.ai login in {}",
                claude_dir.join(login::STORE_FILE).display()
            ));
        }
        found
    } else if config.credential == crate::sandbox::plan::MODEL_LOGIN {
        ModelLogin::discover(&Sources {
            env: held,
            claude_dir,
            user_config,
            refresh,
        })
        .map_err(|e| e.to_string())?
    } else {
        return Err(format!(
            "network.gateway.credential {:?}: expected env:NAME, claude-login or {}",
            config.credential,
            crate::sandbox::plan::MODEL_LOGIN
        ));
    };
    Ok((upstream, Arc::new(model_login)))
}

#[cfg(test)]
mod tests;
