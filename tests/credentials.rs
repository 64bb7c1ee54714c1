//! Service credentials at the proxy (`[[network.credentials]]`), against loopback origin servers
//! speaking TLS with a test CA: the credential is added only in its rule's scope, only when the
//! inner Host is the CONNECT host; a placeholder anywhere else is refused and recorded; hosts
//! without a rule stay end-to-end tunnels; the value is never in a record. The end-to-end part
//! (git push through stepproof-run, and a search of the sandbox for the token) is below.

mod support;

#[path = "support/net.rs"]
mod net;

use base64::Engine as _;
use net::*;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConfig, StreamOwned};
use std::cell::RefCell;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use stepproof::profile::CredentialRule;
use stepproof::profile::allow::AllowList;
use stepproof::supervisor::net::credentials::{
    Broker, FixedSecret, ReadOnlyHost, RunAuthority, Secret, ServiceCredential,
};
use stepproof::supervisor::net::proxy::{self, ConnectionRecord, ProxyHandle};

const TOKEN: &str = "ghs_REAL-token-never-inside-4f9a";
const OTHER_TOKEN: &str = "other-REAL-secret-81be";
const NPM_TOKEN: &str = "npm_REAL-publish-token-77c1";
/// The model login's placeholder: only the gateway accepts it, the proxy blocks it anywhere.
const MODEL_PLACEHOLDER: &str =
    "sk-ant-oat01-STEPPROOF-PLACEHOLDER-00112233445566778899aabbccddeeff";

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A test CA and a loopback origin that speaks TLS with a certificate it signed for every test
/// name, and answers each request with what it received (head and body length).
struct Origin {
    addr: SocketAddr,
    ca: CertificateDer<'static>,
    accepted: Arc<AtomicUsize>,
}

fn test_ca() -> (
    rcgen::Issuer<'static, rcgen::KeyPair>,
    CertificateDer<'static>,
) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "credentials test CA");
    let cert = params.self_signed(&key).unwrap();
    (rcgen::Issuer::new(params, key), cert.der().clone())
}

fn start_origin() -> Origin {
    let (issuer, ca) = test_ca();
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec![
        "git.test".to_string(),
        "other.test".to_string(),
        "plain.test".to_string(),
        "npm.test".to_string(),
        "127.0.0.1".to_string(),
    ])
    .unwrap();
    let cert = params.signed_by(&key, &issuer).unwrap();
    let config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
    let config = Arc::new(config);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let (addr, accepted) = origin_on(listener, move |tcp| {
        let _ = tcp.set_read_timeout(Some(Duration::from_secs(10)));
        let conn = rustls::ServerConnection::new(config.clone()).unwrap();
        let mut tls = StreamOwned::new(conn, tcp);
        echo_requests(&mut tls);
    });
    Origin { addr, ca, accepted }
}

/// Serves HTTP/1.1 requests on one connection: each answer's body is the request head as
/// received, then `body-bytes=N` — except, by the path's last segment, `quiet` (only
/// `body-bytes=N`), `chunked-echo` (the head sent back chunked, 3 bytes a chunk, so that what
/// it holds is split across chunks) and `gzip` (an encoded body, whatever was asked for).
fn echo_requests(stream: &mut impl ReadWrite) {
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let head_end = loop {
            if let Some(i) = find(&buf, b"\r\n\r\n") {
                break i + 4;
            }
            let mut chunk = [0u8; 16384];
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        buf.drain(..head_end);
        let lower = head.to_ascii_lowercase();
        let mut body = 0usize;
        if lower.contains("transfer-encoding: chunked") {
            loop {
                let line_end = loop {
                    if let Some(i) = find(&buf, b"\r\n") {
                        break i;
                    }
                    let mut chunk = [0u8; 16384];
                    match stream.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                };
                let size = usize::from_str_radix(
                    std::str::from_utf8(&buf[..line_end]).unwrap().trim(),
                    16,
                )
                .unwrap();
                buf.drain(..line_end + 2);
                while buf.len() < size + 2 {
                    let mut chunk = [0u8; 16384];
                    match stream.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                buf.drain(..size + 2);
                body += size;
                if size == 0 {
                    break;
                }
            }
        } else if let Some(at) = lower.find("content-length:") {
            let n: usize = lower[at + 15..]
                .lines()
                .next()
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            while buf.len() < n {
                let mut chunk = [0u8; 16384];
                match stream.read(&mut chunk) {
                    Ok(0) | Err(_) => return,
                    Ok(k) => buf.extend_from_slice(&chunk[..k]),
                }
            }
            buf.drain(..n);
            body = n;
        }
        let path = head.split(' ').nth(1).unwrap_or_default();
        let path = path.split('?').next().unwrap_or_default();
        let answer = format!("{head}body-bytes={body}");
        let response = if path.ends_with("/quiet") {
            let answer = format!("body-bytes={body}");
            format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{answer}",
                answer.len()
            )
            .into_bytes()
        } else if path.ends_with("/chunked-echo") {
            let mut response = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
            for chunk in answer.as_bytes().chunks(3) {
                response.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
                response.extend_from_slice(chunk);
                response.extend_from_slice(b"\r\n");
            }
            response.extend_from_slice(b"0\r\n\r\n");
            response
        } else if path.ends_with("/gzip") {
            b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 4\r\n\r\n\x1f\x8b\x08\x00".to_vec()
        } else {
            format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{answer}",
                answer.len()
            )
            .into_bytes()
        };
        if stream.write_all(&response).is_err() || stream.flush().is_err() {
            return;
        }
    }
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn rule(
    name: &str,
    host: &str,
    paths: &[&str],
    methods: Option<&[&str]>,
    inject: &str,
) -> CredentialRule {
    let methods = methods.map_or(String::new(), |m| {
        format!(
            "methods = [{}]\n",
            m.iter()
                .map(|m| format!("{m:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    });
    let paths = paths
        .iter()
        .map(|p| format!("{p:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    toml::from_str(&format!(
        "name = {name:?}\nhost = {host:?}\npaths = [{paths}]\n{methods}source = \"env:UNUSED\"\n{inject}\n"
    ))
    .unwrap()
}

fn placeholder(name: &str) -> String {
    format!("stepproof-placeholder-{name}-5e1f0c3a9b7d2e4f6a8c0b1d3e5f7a9c")
}

struct Setup {
    origin: Origin,
    proxy_addr: SocketAddr,
    broker: Arc<Broker>,
    handle: Option<ProxyHandle>,
    records: Mutex<Receiver<ConnectionRecord>>,
}

/// The proxy with two credential rules (git.test, other.test), a host without one
/// (plain.test) and a read-only host (npm.test, GET and HEAD, with a rule for PUT under /pub/),
/// all resolving to the origin; plain HTTP to web.test reaches it too.
fn setup() -> Setup {
    let origin = start_origin();
    let port = origin.addr.port();
    let mut roots = RootCertStore::empty();
    roots.add(origin.ca.clone()).unwrap();
    let tls = stepproof::http::tls::client_config(roots).unwrap();
    let gh = rule(
        "gh",
        &format!("git.test:{port}"),
        &["/o/r.git/"],
        Some(&["GET", "POST"]),
        "basic = \"x-access-token\"",
    );
    let other = rule(
        "other",
        &format!("other.test:{port}"),
        &["/api/"],
        None,
        "header = \"Authorization\"\nformat = \"Bearer {}\"",
    );
    let npm = rule(
        "npmpub",
        &format!("npm.test:{port}"),
        &["/pub/"],
        Some(&["PUT"]),
        "header = \"Authorization\"\nformat = \"Bearer {}\"",
    );
    let broker = Arc::new(Broker {
        credentials: vec![
            ServiceCredential::new(
                gh,
                placeholder("gh"),
                Arc::new(FixedSecret(Secret::new(TOKEN.into()))),
                tls.clone(),
            ),
            ServiceCredential::new(
                other,
                placeholder("other"),
                Arc::new(FixedSecret(Secret::new(OTHER_TOKEN.into()))),
                tls.clone(),
            ),
            ServiceCredential::new(
                npm,
                placeholder("npmpub"),
                Arc::new(FixedSecret(Secret::new(NPM_TOKEN.into()))),
                tls.clone(),
            ),
        ],
        authority: Some(RunAuthority::generate().unwrap()),
        read_only: vec![ReadOnlyHost {
            host: stepproof::profile::allow::Host::Name("npm.test".into()),
            port,
            tls,
        }],
        elsewhere: vec![("model-login".into(), MODEL_PLACEHOLDER.into())],
    });
    let allow = AllowList::new(
        vec![
            format!("git.test:{port}"),
            format!("other.test:{port}"),
            format!("plain.test:{port}"),
            format!("web.test:{port}"),
            format!("npm.test:{port}"),
        ],
        vec!["127.0.0.1".into()],
    )
    .unwrap();
    let resolver = ScriptedResolver::new(&[
        ("git.test", &["127.0.0.1"]),
        ("other.test", &["127.0.0.1"]),
        ("plain.test", &["127.0.0.1"]),
        ("web.test", &["127.0.0.1"]),
        ("npm.test", &["127.0.0.1"]),
    ]);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy_addr = listener.local_addr().unwrap();
    let (tx, rx) = channel();
    let handle = proxy::serve_with_credentials(
        listener,
        allow.compiled().clone(),
        Arc::new(resolver),
        tx,
        Some(broker.clone()),
    );
    Setup {
        origin,
        proxy_addr,
        broker,
        handle: Some(handle),
        records: Mutex::new(rx),
    }
}

type Tls = StreamOwned<ClientConnection, TcpStream>;

impl Setup {
    fn port(&self) -> u16 {
        self.origin.addr.port()
    }

    /// A client that trusts exactly `roots`, through a CONNECT to `host`.
    fn tls_through(&self, host: &str, roots: RootCertStore) -> std::io::Result<Tls> {
        let mut tcp = TcpStream::connect(self.proxy_addr).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let target = format!("{host}:{}", self.port());
        tcp.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
            .unwrap();
        let (status, head) = read_head(&mut tcp);
        assert_eq!(status, 200, "{head}");
        let config = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let conn = ClientConnection::new(
            Arc::new(config),
            ServerName::try_from(host.to_string()).unwrap(),
        )
        .unwrap();
        let mut tls = StreamOwned::new(conn, tcp);
        while tls.conn.is_handshaking() {
            tls.conn.complete_io(&mut tls.sock)?;
        }
        Ok(tls)
    }

    /// A client that trusts the run's CA only (as tools inside do, through the bundle).
    fn inside(&self, host: &str) -> Tls {
        let mut roots = RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice_compat(
                self.broker.authority.as_ref().unwrap().certificate_pem(),
            ))
            .unwrap();
        self.tls_through(host, roots).expect("TLS with the proxy")
    }

    fn record(&self) -> ConnectionRecord {
        self.records
            .lock()
            .unwrap()
            .recv_timeout(Duration::from_secs(30))
            .expect("a record")
    }

    fn finish(mut self) -> Vec<ConnectionRecord> {
        self.handle.take().unwrap().shutdown();
        self.records.lock().unwrap().try_iter().collect()
    }
}

trait PemCompat {
    fn from_pem_slice_compat(pem: &str) -> CertificateDer<'static>;
}

impl PemCompat for CertificateDer<'static> {
    fn from_pem_slice_compat(pem: &str) -> CertificateDer<'static> {
        use rustls::pki_types::pem::PemObject;
        CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()
    }
}

/// Sends one request and reads its response (head and Content-Length body).
fn exchange(tls: &mut Tls, request: &str) -> (u16, String) {
    tls.write_all(request.as_bytes()).unwrap();
    tls.flush().unwrap();
    let (status, head) = read_head(tls);
    let length: usize = head
        .to_ascii_lowercase()
        .lines()
        .find_map(|l| {
            l.strip_prefix("content-length:")
                .map(|v| v.trim().parse().unwrap())
        })
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    tls.read_exact(&mut body).unwrap();
    (status, String::from_utf8_lossy(&body).into_owned())
}

fn basic(user: &str, password: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
}

#[test]
fn the_credential_is_added_in_scope_only_and_replaces_what_the_client_sent() {
    let s = setup();
    let port = s.port();
    let mut tls = s.inside("git.test");
    // In scope, with git's placeholder answer: the origin sees the real token, once.
    let (status, seen) = exchange(
        &mut tls,
        &format!(
            "GET /o/r.git/info/refs?service=git-receive-pack HTTP/1.1\r\nHost: git.test:{port}\r\nAuthorization: Basic {}\r\n\r\n",
            basic("x-access-token", &placeholder("gh"))
        ),
    );
    assert_eq!(status, 200, "{seen}");
    let real = format!(
        "Authorization: Basic {}\r\n",
        basic("x-access-token", TOKEN)
    );
    assert_eq!(seen.matches("Authorization").count(), 1, "{seen}");
    assert!(seen.contains(&real), "{seen}");
    assert!(!seen.contains("stepproof-placeholder"), "{seen}");
    let r = s.record();
    assert_eq!(
        (
            r.credential.as_deref(),
            r.method.as_str(),
            r.path.as_deref(),
            r.status
        ),
        (Some("gh"), "GET", Some("/o/r.git/info/refs"), Some(200)),
        "{r:?}"
    );
    assert!(r.query_sha256.is_some(), "{r:?}");
    // Keep-alive, a chunked upload, a credential the client did not ask for: added anyway (the
    // scope is what the rule allows).
    tls.write_all(
        format!("POST /o/r.git/git-receive-pack HTTP/1.1\r\nHost: git.test:{port}\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
            .as_bytes(),
    )
    .unwrap();
    let (status, head) = read_head(&mut tls);
    assert_eq!(status, 200, "{head}");
    let length: usize = head
        .to_ascii_lowercase()
        .lines()
        .find_map(|l| {
            l.strip_prefix("content-length:")
                .map(|v| v.trim().parse().unwrap())
        })
        .unwrap();
    let mut body = vec![0u8; length];
    tls.read_exact(&mut body).unwrap();
    let seen = String::from_utf8_lossy(&body);
    assert!(
        seen.contains(&real) && seen.ends_with("body-bytes=11"),
        "{seen}"
    );
    assert_eq!(s.record().credential.as_deref(), Some("gh"));
    // Outside the scope (another repository, another method): forwarded without it.
    for request in [
        format!("GET /o/other.git/info/refs HTTP/1.1\r\nHost: git.test:{port}\r\n\r\n"),
        format!("DELETE /o/r.git/x HTTP/1.1\r\nHost: git.test:{port}\r\n\r\n"),
        format!("GET /o/r.git/../other.git/info/refs HTTP/1.1\r\nHost: git.test:{port}\r\n\r\n"),
    ] {
        let (status, seen) = exchange(&mut tls, &request);
        assert_eq!(status, 200, "{seen}");
        assert!(!seen.contains("Authorization"), "{seen}");
        let r = s.record();
        assert_eq!(r.credential, None, "{r:?}");
    }
    // A header rule: the client's own Authorization is replaced by the rule's format.
    let mut tls = s.inside("other.test");
    let (_, seen) = exchange(
        &mut tls,
        &format!(
            "GET /api/user HTTP/1.1\r\nHost: other.test:{port}\r\nAuthorization: token {}\r\n\r\n",
            placeholder("other")
        ),
    );
    assert!(
        seen.contains(&format!("Authorization: Bearer {OTHER_TOKEN}\r\n"))
            && seen.matches("Authorization").count() == 1,
        "{seen}"
    );
    assert_eq!(s.record().credential.as_deref(), Some("other"));
    drop(tls);
    let all = s.finish();
    let json = serde_json::to_string(&all).unwrap();
    assert!(
        !json.contains(TOKEN) && !json.contains(OTHER_TOKEN),
        "{json}"
    );
    assert!(!json.contains(&basic("x-access-token", TOKEN)), "{json}");
}

/// Sends one request and reads its answer as the client gets it: the status, and the head and
/// body as raw text (a chunked body with its chunk framing, read to its last chunk).
fn raw_exchange(tls: &mut Tls, request: &str) -> (u16, String) {
    tls.write_all(request.as_bytes()).unwrap();
    tls.flush().unwrap();
    let (status, head) = read_head(tls);
    let lower = head.to_ascii_lowercase();
    let mut body = Vec::new();
    if lower.contains("transfer-encoding: chunked") {
        let mut byte = [0u8; 1];
        while !body.ends_with(b"\r\n0\r\n\r\n") {
            tls.read_exact(&mut byte).unwrap();
            body.push(byte[0]);
        }
    } else {
        let length: usize = lower
            .lines()
            .find_map(|l| l.strip_prefix("content-length:")?.trim().parse().ok())
            .unwrap_or(0);
        body.resize(length, 0);
        tls.read_exact(&mut body).unwrap();
    }
    (status, format!("{head}{}", String::from_utf8_lossy(&body)))
}

/// A service that hands the credential back — the header it got, in basic auth's base64 or as
/// it was added, whole or split across chunks — is relayed as it is (the agent may read it), and
/// its record says so; the same credential with an answer that does not hold it, an encoded
/// answer, and an echo of a request that carried no credential are not flagged. The records
/// never hold the value.
#[test]
fn an_answer_that_hands_the_credential_back_is_flagged_and_never_recorded() {
    let s = setup();
    let port = s.port();
    let mut tls = s.inside("git.test");
    let gzip = "Accept-Encoding: gzip, deflate, br\r\n";
    // Basic auth, echoed: only the base64 of `user:token` is in the answer.
    let (status, answer) = raw_exchange(
        &mut tls,
        &format!(
            "GET /o/r.git/info/refs HTTP/1.1\r\nHost: git.test:{port}\r\n{gzip}Authorization: Basic {}\r\n\r\n",
            basic("x-access-token", &placeholder("gh"))
        ),
    );
    assert_eq!(status, 200, "{answer}");
    assert!(
        answer.contains(&basic("x-access-token", TOKEN)) && !answer.contains(TOKEN),
        "{answer}"
    );
    // The request went out asking for no encoding, in place of what the client asked.
    assert!(
        answer.contains("Accept-Encoding: identity\r\n") && !answer.contains("gzip"),
        "{answer}"
    );
    let r = s.record();
    assert_eq!(
        (
            r.credential.as_deref(),
            r.credential_echoed,
            r.credential_echo_unchecked.as_deref()
        ),
        (Some("gh"), true, None),
        "{r:?}"
    );
    // The same credential, an answer without it: not flagged.
    let (status, answer) = raw_exchange(
        &mut tls,
        &format!("GET /o/r.git/quiet HTTP/1.1\r\nHost: git.test:{port}\r\n\r\n"),
    );
    assert_eq!(
        (status, answer.ends_with("body-bytes=0")),
        (200, true),
        "{answer}"
    );
    let r = s.record();
    assert_eq!(
        (
            r.credential.as_deref(),
            r.credential_echoed,
            r.credential_echo_unchecked.as_deref()
        ),
        (Some("gh"), false, None),
        "{r:?}"
    );
    // No credential added (outside the scope), the head echoed: nothing to flag, and the
    // client's Accept-Encoding went out as it was.
    let (_, answer) = raw_exchange(
        &mut tls,
        &format!("GET /o/other.git/info/refs HTTP/1.1\r\nHost: git.test:{port}\r\n{gzip}\r\n"),
    );
    assert!(answer.contains(gzip), "{answer}");
    let r = s.record();
    assert!(
        r.credential.is_none() && !r.credential_echoed && r.credential_echo_unchecked.is_none(),
        "{r:?}"
    );
    drop(tls);
    let _ = s.record();
    // A header rule, the answer chunked 3 bytes a chunk: the token is split across chunks on
    // the wire, and found all the same.
    let mut tls = s.inside("other.test");
    let (status, answer) = raw_exchange(
        &mut tls,
        &format!("GET /api/chunked-echo HTTP/1.1\r\nHost: other.test:{port}\r\n\r\n"),
    );
    assert_eq!(status, 200, "{answer}");
    assert!(!answer.contains(OTHER_TOKEN), "split on the wire: {answer}");
    let r = s.record();
    assert_eq!(
        (r.credential.as_deref(), r.credential_echoed),
        (Some("other"), true),
        "{r:?}"
    );
    // An answer encoded although the request asked for none: said to be unchecked.
    let (status, _) = raw_exchange(
        &mut tls,
        &format!("GET /api/gzip HTTP/1.1\r\nHost: other.test:{port}\r\n{gzip}\r\n"),
    );
    assert_eq!(status, 200);
    let r = s.record();
    assert_eq!(
        (
            r.credential.as_deref(),
            r.credential_echoed,
            r.credential_echo_unchecked.as_deref()
        ),
        (Some("other"), false, Some("content-encoding gzip")),
        "{r:?}"
    );
    drop(tls);
    let all = s.finish();
    let json = serde_json::to_string(&all).unwrap();
    for value in [
        TOKEN.to_string(),
        OTHER_TOKEN.to_string(),
        basic("x-access-token", TOKEN),
        basic("x-access-token", TOKEN)
            .trim_end_matches('=')
            .to_string(),
    ] {
        assert!(!json.contains(&value), "{json}");
    }
}

#[test]
fn an_inner_host_other_than_the_connect_host_gets_nothing() {
    let s = setup();
    let port = s.port();
    let before = s.origin.accepted.load(Ordering::SeqCst);
    for host_lines in [
        "Host: other.test\r\n".to_string(),
        format!("Host: other.test:{port}\r\n"),
        format!("Host: git.test:{}\r\n", port.wrapping_add(1)),
        String::new(),
        format!("Host: git.test:{port}\r\nHost: other.test:{port}\r\n"),
    ] {
        let mut tls = s.inside("git.test");
        let (status, body) = exchange(
            &mut tls,
            &format!("GET /o/r.git/info/refs HTTP/1.1\r\n{host_lines}\r\n"),
        );
        assert_eq!(status, 403, "{body}");
        assert!(body.contains("nothing added"), "{body}");
        let r = s.record();
        assert!(
            !r.allowed && r.credential.is_none() && r.status == Some(403),
            "{r:?}"
        );
        assert!(r.rule.contains("is not git.test"), "{r:?}");
        // And the connection's own record.
        let _ = s.record();
    }
    // An absolute-form target inside the tunnel is refused too.
    let mut tls = s.inside("git.test");
    let (status, _) = exchange(
        &mut tls,
        &format!("GET https://other.test:{port}/api/ HTTP/1.1\r\nHost: git.test:{port}\r\n\r\n"),
    );
    assert_eq!(status, 403);
    // The origin was never asked.
    assert_eq!(s.origin.accepted.load(Ordering::SeqCst), before);
}

#[test]
fn a_placeholder_where_it_does_not_belong_is_blocked_and_recorded() {
    let s = setup();
    let port = s.port();
    let before = s.origin.accepted.load(Ordering::SeqCst);
    let gh = placeholder("gh");
    // To another terminated host, even inside that host's own scope.
    let mut tls = s.inside("other.test");
    let (status, body) = exchange(
        &mut tls,
        &format!("GET /api/x?leak={gh} HTTP/1.1\r\nHost: other.test:{port}\r\n\r\n"),
    );
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains("placeholder of credential gh") && body.contains("exfiltration"),
        "{body}"
    );
    let r = s.record();
    assert_eq!(r.placeholder_blocked.as_deref(), Some("gh"), "{r:?}");
    assert_eq!(r.credential, None);
    let _ = s.record();
    // To its own host, outside its path or method scope (git's helper answer on a push to
    // another repository), in any header, in basic auth, upper-cased, percent-encoded.
    for request in [
        format!(
            "POST /o/other.git/git-receive-pack HTTP/1.1\r\nHost: git.test:{port}\r\nAuthorization: Basic {}\r\nContent-Length: 0\r\n\r\n",
            basic("x-access-token", &gh)
        ),
        format!("PUT /o/r.git/x HTTP/1.1\r\nHost: git.test:{port}\r\nX-Token: {gh}\r\n\r\n"),
        format!(
            "GET /elsewhere?t={} HTTP/1.1\r\nHost: git.test:{port}\r\n\r\n",
            gh.to_ascii_uppercase()
        ),
        format!(
            "GET /elsewhere?t={} HTTP/1.1\r\nHost: git.test:{port}\r\n\r\n",
            gh.replace('-', "%2D")
        ),
    ] {
        let mut tls = s.inside("git.test");
        let (status, body) = exchange(&mut tls, &request);
        assert_eq!(status, 403, "{request}: {body}");
        let r = s.record();
        assert_eq!(
            r.placeholder_blocked.as_deref(),
            Some("gh"),
            "{request}: {r:?}"
        );
        let _ = s.record();
    }
    // Over plain HTTP (allowed host), and in a CONNECT's own head.
    let mut plain = TcpStream::connect(s.proxy_addr).unwrap();
    plain
        .write_all(
            format!("GET http://web.test:{port}/collect?k={gh} HTTP/1.1\r\nHost: web.test\r\n\r\n")
                .as_bytes(),
        )
        .unwrap();
    let (status, _) = read_head(&mut plain);
    assert_eq!(status, 403);
    let r = s.record();
    assert_eq!(r.placeholder_blocked.as_deref(), Some("gh"), "{r:?}");
    assert!(!r.allowed);
    let mut connect = TcpStream::connect(s.proxy_addr).unwrap();
    connect
        .write_all(
            format!(
                "CONNECT plain.test:{port} HTTP/1.1\r\nProxy-Authorization: Basic {}\r\n\r\n",
                basic("u", &placeholder("other"))
            )
            .as_bytes(),
        )
        .unwrap();
    let (status, _) = read_head(&mut connect);
    assert_eq!(status, 403);
    assert_eq!(s.record().placeholder_blocked.as_deref(), Some("other"));
    // The model login's placeholder: on a terminated host, even in that host's credential
    // scope, over plain HTTP, and in a CONNECT's own head, lower-cased.
    let mut tls = s.inside("git.test");
    let (status, body) = exchange(
        &mut tls,
        &format!(
            "GET /o/r.git/info/refs HTTP/1.1\r\nHost: git.test:{port}\r\nX-Api-Key: {MODEL_PLACEHOLDER}\r\n\r\n"
        ),
    );
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("model API"), "{body}");
    let r = s.record();
    assert_eq!(
        r.placeholder_blocked.as_deref(),
        Some("model-login"),
        "{r:?}"
    );
    assert_eq!(r.credential, None);
    let _ = s.record();
    let mut plain = TcpStream::connect(s.proxy_addr).unwrap();
    plain
        .write_all(
            format!(
                "GET http://web.test:{port}/v1/messages HTTP/1.1\r\nHost: web.test\r\nAuthorization: Bearer {MODEL_PLACEHOLDER}\r\n\r\n"
            )
            .as_bytes(),
        )
        .unwrap();
    let (status, _) = read_head(&mut plain);
    assert_eq!(status, 403);
    let r = s.record();
    assert_eq!(
        r.placeholder_blocked.as_deref(),
        Some("model-login"),
        "{r:?}"
    );
    assert!(!r.allowed);
    let mut connect = TcpStream::connect(s.proxy_addr).unwrap();
    connect
        .write_all(
            format!(
                "CONNECT plain.test:{port} HTTP/1.1\r\nX-Leak: {}\r\n\r\n",
                MODEL_PLACEHOLDER.to_ascii_lowercase()
            )
            .as_bytes(),
        )
        .unwrap();
    let (status, _) = read_head(&mut connect);
    assert_eq!(status, 403);
    assert_eq!(
        s.record().placeholder_blocked.as_deref(),
        Some("model-login")
    );
    // Nothing reached the origin.
    assert_eq!(s.origin.accepted.load(Ordering::SeqCst), before);
}

#[test]
fn hosts_without_a_rule_stay_end_to_end_tunnels() {
    let s = setup();
    let port = s.port();
    // The client sees the origin's certificate (from the test CA), not one of the run's CA:
    // the proxy cannot read this traffic.
    let mut roots = RootCertStore::empty();
    roots.add(s.origin.ca.clone()).unwrap();
    let mut tls = s
        .tls_through("plain.test", roots)
        .expect("the origin's own certificate, end to end");
    let (status, seen) = exchange(
        &mut tls,
        &format!(
            "GET /x?t={} HTTP/1.1\r\nHost: plain.test:{port}\r\n\r\n",
            placeholder("gh")
        ),
    );
    // Inside a tunnel the proxy cannot see the placeholder: it passes (worthless there).
    assert_eq!(status, 200);
    assert!(!seen.contains("Authorization"), "{seen}");
    drop(tls);
    let r = s.record();
    assert!(
        r.allowed && r.method == "CONNECT" && r.credential.is_none(),
        "{r:?}"
    );
    assert!(!r.rule.contains("terminated"), "{r:?}");
    // A client trusting only the run's CA fails there: no certificate of it is shown.
    let mut run_ca = RootCertStore::empty();
    run_ca
        .add(CertificateDer::from_pem_slice_compat(
            s.broker.authority.as_ref().unwrap().certificate_pem(),
        ))
        .unwrap();
    assert!(s.tls_through("plain.test", run_ca).is_err());
    // And a host with a rule is terminated: the run's CA, not the origin's.
    let mut roots = RootCertStore::empty();
    roots.add(s.origin.ca.clone()).unwrap();
    assert!(s.tls_through("git.test", roots).is_err());
}

/// A read-only host (the node preset's registry.npmjs.org): TLS terminated with the run's CA,
/// GET and HEAD forwarded with nothing added, every other method refused with a 403 that
/// names the method and the host, before any onward connection, and recorded; so are
/// method-override headers and parameters, a body on GET, and plain HTTP. A credential rule of
/// the host lifts the restriction for its own scope only.
#[test]
fn a_read_only_host_takes_get_and_head_only() {
    let s = setup();
    let port = s.port();
    let host = format!("npm.test:{port}");
    // GET and HEAD on one kept-alive connection: forwarded, the client's own header kept
    // (a read is no upload), nothing added.
    let mut tls = s.inside("npm.test");
    let (status, seen) = exchange(
        &mut tls,
        &format!(
            "GET /left-pad HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer agent-own\r\n\r\n"
        ),
    );
    assert_eq!(status, 200, "{seen}");
    assert!(seen.starts_with("GET /left-pad HTTP/1.1\r\n"), "{seen}");
    assert!(
        seen.contains("Bearer agent-own") && !seen.contains(NPM_TOKEN),
        "{seen}"
    );
    tls.write_all(format!("HEAD /left-pad HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes())
        .unwrap();
    let (status, head) = read_head(&mut tls);
    assert_eq!(status, 200, "{head}");
    // Content-Length: 0 is no body.
    let (status, seen) = exchange(
        &mut tls,
        &format!("GET /a HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\n\r\n"),
    );
    assert_eq!(status, 200, "{seen}");
    // On the same connection, a PUT after the reads is refused; the connection ends.
    let (status, why) = exchange(
        &mut tls,
        &format!("PUT /left-pad HTTP/1.1\r\nHost: {host}\r\nContent-Length: 2\r\n\r\n{{}}"),
    );
    assert_eq!(status, 403, "{why}");
    drop(tls);

    let onward_before = s.origin.accepted.load(Ordering::SeqCst);
    // (method, what the reason says): each must be in a refused request's record at the end.
    let expected: RefCell<Vec<(String, String)>> =
        RefCell::new(vec![("PUT".into(), "PUT refused; an upload needs".into())]);
    let refused = |request: String, expect: &str| {
        let mut tls = s.inside("npm.test");
        tls.write_all(request.as_bytes()).unwrap();
        tls.flush().unwrap();
        let (status, head) = read_head(&mut tls);
        let mut body = String::new();
        let _ = tls.read_to_string(&mut body);
        assert_eq!(status, 403, "{request:?}: {head}{body}");
        assert!(
            head.contains(" to npm.test: read-only host\r\n") && body.contains(expect),
            "{request:?}: {head}{body}"
        );
        let method = request.split(' ').next().unwrap().to_string();
        expected.borrow_mut().push((method, expect.to_string()));
    };
    // Every other method, as written: methods are case-sensitive (`get` is not GET).
    for method in [
        "PUT", "POST", "DELETE", "PATCH", "OPTIONS", "TRACE", "PROPFIND", "get", "Get", "head",
        "put",
    ] {
        refused(
            format!(
                "{method} /-/user/org.couchdb.user:x HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\n\r\n"
            ),
            &format!("{method} refused; an upload needs a [[network.credentials]] rule"),
        );
    }
    // The reason phrase names the method (what npm and curl show).
    {
        let mut tls = s.inside("npm.test");
        tls.write_all(format!("DELETE /x HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes())
            .unwrap();
        let (_, head) = read_head(&mut tls);
        assert!(
            head.starts_with(
                "HTTP/1.1 403 StepProof refused DELETE to npm.test: read-only host\r\n"
            ),
            "{head}"
        );
    }
    // Method overrides, whatever the request line says, in any letter case.
    for header in [
        "X-HTTP-Method-Override: PUT",
        "x-http-method-override: DELETE",
        "X-Http-Method: PUT",
        "X-Method-Override: PATCH",
    ] {
        let name = header.split(':').next().unwrap();
        refused(
            format!("GET /x HTTP/1.1\r\nHost: {host}\r\n{header}\r\n\r\n"),
            &format!("method-override header ({name})"),
        );
    }
    for target in [
        "/x?_method=PUT",
        "/x?a=1&_METHOD=delete",
        "/x?%5Fmethod=PUT",
        "/x?x-http-method-override=PUT",
    ] {
        refused(
            format!("GET {target} HTTP/1.1\r\nHost: {host}\r\n\r\n"),
            "method-override parameter",
        );
    }
    // A body on GET or HEAD: not a read.
    refused(
        format!("GET /x HTTP/1.1\r\nHost: {host}\r\nContent-Length: 5\r\n\r\nhello"),
        "with a body is refused",
    );
    refused(
        format!(
            "HEAD /x HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
        ),
        "with a body is refused",
    );
    // None of the refused requests opened an onward connection.
    assert_eq!(s.origin.accepted.load(Ordering::SeqCst), onward_before);

    // Plain HTTP to the read-only host: refused, GET included (a pipelined request would pass
    // unread behind the first).
    for method in ["GET", "PUT"] {
        let mut tcp = TcpStream::connect(s.proxy_addr).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        tcp.write_all(
            format!("{method} http://{host}/x HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes(),
        )
        .unwrap();
        let (status, head) = read_head(&mut tcp);
        assert_eq!(status, 403, "{head}");
        expected
            .borrow_mut()
            .push((method.into(), "plain HTTP refused".into()));
    }
    assert_eq!(s.origin.accepted.load(Ordering::SeqCst), onward_before);

    // The host's own credential rule covers PUT under /pub/: allowed there, with its token in
    // place of the client's; outside its scope the restriction holds.
    let mut tls = s.inside("npm.test");
    let (status, seen) = exchange(
        &mut tls,
        &format!(
            "PUT /pub/pkg HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer agent-own\r\nContent-Length: 2\r\n\r\n{{}}"
        ),
    );
    assert_eq!(status, 200, "{seen}");
    assert!(
        seen.contains(&format!("Authorization: Bearer {NPM_TOKEN}")) && !seen.contains("agent-own"),
        "{seen}"
    );
    let (status, _) = exchange(
        &mut tls,
        &format!("POST /pub/pkg HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\n\r\n"),
    );
    assert_eq!(status, 403);
    drop(tls);
    let records = s.finish();
    let put = records
        .iter()
        .find(|r| r.method == "PUT" && r.path.as_deref() == Some("/pub/pkg"))
        .expect("the PUT's record");
    assert!(
        put.allowed && put.credential.as_deref() == Some("npmpub"),
        "{put:?}"
    );
    expected
        .borrow_mut()
        .push(("POST".into(), "POST refused".into()));
    // Each refusal is recorded: not allowed, 403, the method, the host, the reason.
    for (method, expect) in expected.borrow().iter() {
        assert!(
            records.iter().any(|r| r.method == *method
                && !r.allowed
                && r.status == Some(403)
                && r.host == "npm.test"
                && r.port == port
                && r.rule.contains(expect.as_str())),
            "{method} {expect}: {records:#?}"
        );
    }
    // The GETs and the HEAD went through, recorded as allowed.
    assert!(
        records
            .iter()
            .filter(|r| (r.method == "GET" || r.method == "HEAD")
                && r.allowed
                && r.status == Some(200))
            .count()
            >= 3,
        "{records:#?}"
    );
}

// ───────────────────────── end to end: git push through stepproof-run ─────────────────────────

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
#[allow(unused_imports)]
use support::*;
use support::{Who, World, chown_tree, describe};

const PUSH_TOKEN: &str = "ghs_e2e-PUSH-token-0d6c2b8a91";
const GIT: &str = "git -c user.name=t -c user.email=t@t -c safe.directory=*";

/// A smart-HTTP git server over TLS on `ip`, `git http-backend` as its CGI, serving the bare
/// repositories under `root`; every request must carry basic auth with [`PUSH_TOKEN`] or gets
/// 401. Returns its port and the Authorization headers it saw (`-` for none).
fn git_server(ip: &str, root: PathBuf) -> (u16, Arc<Mutex<Vec<String>>>) {
    let (issuer, ca) = test_ca_pem_pair();
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec![ip.to_string()]).unwrap();
    let cert = params.signed_by(&key, &issuer).unwrap();
    let config = Arc::new(
        ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .unwrap(),
    );
    fs::write(root.join("test-ca.pem"), ca).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let listener = TcpListener::bind(format!("{ip}:0")).unwrap();
    let port = listener.local_addr().unwrap().port();
    origin_on(listener, move |tcp| {
        let _ = tcp.set_read_timeout(Some(Duration::from_secs(30)));
        let conn = rustls::ServerConnection::new(config.clone()).unwrap();
        let mut tls = StreamOwned::new(conn, tcp);
        serve_git(&mut tls, &root, &log);
    });
    (port, seen)
}

use std::fs;

fn test_ca_pem_pair() -> (rcgen::Issuer<'static, rcgen::KeyPair>, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "git server test CA");
    let cert = params.self_signed(&key).unwrap();
    (rcgen::Issuer::new(params, key), cert.pem())
}

/// One connection: requests until it closes, each answered by `git http-backend`.
fn serve_git(stream: &mut impl ReadWrite, root: &Path, seen: &Mutex<Vec<String>>) {
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let head_end = loop {
            if let Some(i) = find(&buf, b"\r\n\r\n") {
                break i + 4;
            }
            let mut chunk = [0u8; 65536];
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        buf.drain(..head_end);
        let mut lines = head.lines();
        let request_line = lines.next().unwrap_or_default().to_string();
        let mut headers: Vec<(String, String)> = Vec::new();
        for line in lines {
            if let Some((n, v)) = line.split_once(':') {
                headers.push((n.trim().to_ascii_lowercase(), v.trim().to_string()));
            }
        }
        let header = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
        };
        // The body, de-chunked.
        let mut body = Vec::new();
        let mut fill = |buf: &mut Vec<u8>| -> bool {
            let mut chunk = [0u8; 65536];
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => false,
                Ok(n) => {
                    buf.extend_from_slice(&chunk[..n]);
                    true
                }
            }
        };
        if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
            loop {
                let line_end = loop {
                    if let Some(i) = find(&buf, b"\r\n") {
                        break i;
                    }
                    if !fill(&mut buf) {
                        return;
                    }
                };
                let size = usize::from_str_radix(
                    std::str::from_utf8(&buf[..line_end]).unwrap().trim(),
                    16,
                )
                .unwrap();
                buf.drain(..line_end + 2);
                while buf.len() < size + 2 {
                    if !fill(&mut buf) {
                        return;
                    }
                }
                body.extend_from_slice(&buf[..size]);
                buf.drain(..size + 2);
                if size == 0 {
                    break;
                }
            }
        } else if let Some(n) = header("content-length").and_then(|v| v.parse::<usize>().ok()) {
            while buf.len() < n {
                if !fill(&mut buf) {
                    return;
                }
            }
            body = buf.drain(..n).collect();
        }
        let auth = header("authorization");
        seen.lock()
            .unwrap()
            .push(auth.clone().unwrap_or_else(|| "-".into()));
        let expected = format!("Basic {}", basic("x-access-token", PUSH_TOKEN));
        let response = if auth.as_deref() != Some(expected.as_str()) {
            b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"git\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_vec()
        } else {
            let mut response = cgi(root, &request_line, &header, &body);
            // A service that hands the credential back: the ref advertisement quotes the
            // Authorization header it got (git pays no attention to the header).
            if request_line.starts_with("GET ")
                && request_line.contains("/info/refs")
                && let Some(at) = find(&response, b"\r\n")
            {
                let quoted = format!("\r\nX-Seen-Authorization: {expected}");
                response.splice(at..at, quoted.into_bytes());
            }
            response
        };
        if stream.write_all(&response).is_err() || stream.flush().is_err() {
            return;
        }
        if response.starts_with(b"HTTP/1.1 401") {
            return;
        }
    }
}

fn cgi(
    root: &Path,
    request_line: &str,
    header: &dyn Fn(&str) -> Option<String>,
    body: &[u8],
) -> Vec<u8> {
    let mut parts = request_line.split(' ');
    let method = parts.next().unwrap_or_default();
    let target = parts.next().unwrap_or_default();
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut cmd = Command::new("/usr/lib/git-core/git-http-backend");
    cmd.env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("GIT_PROJECT_ROOT", root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("REQUEST_METHOD", method)
        .env("PATH_INFO", path)
        .env("QUERY_STRING", query)
        .env("REMOTE_USER", "x-access-token")
        .env("REMOTE_ADDR", "127.0.0.1")
        .env("CONTENT_LENGTH", body.len().to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    for (name, var) in [
        ("content-type", "CONTENT_TYPE"),
        ("content-encoding", "HTTP_CONTENT_ENCODING"),
        ("git-protocol", "GIT_PROTOCOL"),
    ] {
        if let Some(v) = header(name) {
            cmd.env(var, v);
        }
    }
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let body = body.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&body);
    });
    let out = child.wait_with_output().unwrap();
    let _ = writer.join();
    let split = find(&out.stdout, b"\r\n\r\n")
        .map(|i| (i, 4))
        .or_else(|| find(&out.stdout, b"\n\n").map(|i| (i, 2)))
        .unwrap_or((out.stdout.len(), 0));
    let cgi_head = String::from_utf8_lossy(&out.stdout[..split.0]).into_owned();
    let cgi_body = &out.stdout[split.0 + split.1..];
    let mut status = "200 OK".to_string();
    let mut response = Vec::new();
    let mut lines = Vec::new();
    for line in cgi_head.lines() {
        if let Some(v) = line.strip_prefix("Status:") {
            status = v.trim().to_string();
        } else if !line.is_empty() {
            lines.push(line.to_string());
        }
    }
    response.extend_from_slice(format!("HTTP/1.1 {status}\r\n").as_bytes());
    for line in lines {
        response.extend_from_slice(format!("{line}\r\n").as_bytes());
    }
    response.extend_from_slice(format!("Content-Length: {}\r\n\r\n", cgi_body.len()).as_bytes());
    response.extend_from_slice(cgi_body);
    response
}

/// A bare repository `o/NAME.git` under `root` that accepts pushes.
fn bare_repository(root: &Path, name: &str) -> PathBuf {
    let repo = root.join(format!("o/{name}.git"));
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "set -e; git init -q --bare {0}; git -C {0} config http.receivepack true",
            repo.display()
        ))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    repo
}

fn git_available() -> bool {
    let ok = Path::new("/usr/lib/git-core/git-http-backend").exists();
    if !ok {
        support::skip_or_fail(
            "git http-backend (/usr/lib/git-core/git-http-backend) is not installed",
        );
    }
    ok
}

/// `git push` from inside to a local server that wants a token: the proxy adds it (from a file
/// the sandbox cannot read); a server without a rule gets none and the push fails; nothing
/// readable inside holds the token; the audit log records the use by name, never the value.
fn git_push_with_the_token_added_at_the_proxy(w: &World) {
    if !git_available() {
        return;
    }
    let root = w.base.join("git-server");
    fs::create_dir_all(&root).unwrap();
    let main = bare_repository(&root, "r");
    let other = bare_repository(&root, "other");
    let (port, seen) = git_server("127.0.0.5", root.clone());
    let other_root = w.base.join("git-server-2");
    fs::create_dir_all(&other_root).unwrap();
    let unruled = bare_repository(&other_root, "r");
    let (other_port, other_seen) = git_server("127.0.0.6", other_root.clone());
    // The token, in a file of the home the sandbox must not read.
    let token_file = w.home.join(".config/stepproof/git-token");
    fs::create_dir_all(token_file.parent().unwrap()).unwrap();
    fs::write(&token_file, format!("{PUSH_TOKEN}\n")).unwrap();
    // A repository with one commit inside the workspace, and the second server's CA in it (so
    // that git there can reach the server without a rule directly, end to end).
    let repo = w.workspace.join("repo");
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "set -e; {GIT} init -q {0}; echo hi > {0}/f; {GIT} -C {0} add f; {GIT} -C {0} commit -q -m one",
            repo.display()
        ))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    fs::copy(
        other_root.join("test-ca.pem"),
        w.workspace.join("other-ca.pem"),
    )
    .unwrap();
    chown_tree(&w.home, w.owner);
    let profile_dir = w.base.join("profiles");
    fs::create_dir_all(&profile_dir).unwrap();
    let profile = profile_dir.join("push.toml");
    fs::write(
        &profile,
        format!(
            "extends = \"default\"\n[network]\nmode = \"allowlist\"\nallow = [\"127.0.0.6:{other_port}\"]\nallow_addresses = [\"127.0.0.5\", \"127.0.0.6\"]\n\
             [[network.credentials]]\nname = \"git-push\"\nhost = \"127.0.0.5:{port}\"\npaths = [\"/o/r.git/\"]\n\
             source = \"file:~/.config/stepproof/git-token\"\nbasic = \"x-access-token\"\ngit = true\nplaceholder_env = \"GIT_TOKEN\"\n\
             ca_file = \"{}\"\n",
            root.join("test-ca.pem").display()
        ),
    )
    .unwrap();
    let world_readable = |p: &Path| {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(p, fs::Permissions::from_mode(0o755)).unwrap();
    };
    world_readable(&profile_dir);
    world_readable(&root);
    // What runs inside: the push with the rule; the push without one (git trusts that server's
    // CA directly there, and has no credential for it); then a search of everything readable.
    let script = format!(
        r#"cd repo
{GIT} push https://127.0.0.5:{port}/o/r.git HEAD:refs/heads/main >/tmp/push.out 2>&1; echo "push=$?"
GIT_SSL_CAINFO=../other-ca.pem {GIT} push https://127.0.0.6:{other_port}/o/r.git HEAD:refs/heads/main >/tmp/push2.out 2>&1; echo "unruled=$?"
{GIT} push https://127.0.0.5:{port}/o/other.git HEAD:refs/heads/main >/tmp/push3.out 2>&1; echo "outside-scope=$?"
cat ~/.config/stepproof/git-token >/dev/null 2>&1; echo "token-file=$?"
found=$(grep -rlsF -e "$NEEDLE" / --exclude-dir=proc --exclude-dir=sys 2>/dev/null | head -5)
echo "files=[$found]"
hits=0; seen=0
for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline /proc/self/environ; do
  seen=$((seen+1))
  if grep -qsF -e "$NEEDLE" "$f"; then hits=$((hits+1)); echo "hit=$f"; fi
done
echo "proc-files=$seen proc-hits=$hits"
placeholder=0; grep -qsF -e "$GIT_TOKEN" /proc/self/environ && placeholder=1
echo "placeholder-in-environ=$placeholder"
tail -n 3 /tmp/push.out /tmp/push2.out /tmp/push3.out || true
"#
    );
    // The needle is built inside from two halves, so that the search's own command line and
    // environment do not hold it whole.
    let (a, b) = PUSH_TOKEN.split_at(9);
    let script = format!("NEEDLE=\"{a}\"\"{b}\"\n{script}");
    let out = w
        .command(
            &["--profile", profile.to_str().unwrap()],
            &["/bin/sh", "-c", &script],
        )
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let shown = describe(&out);
    assert!(out.status.success(), "{shown}");
    // The push with the rule went through: the commit is on the server.
    assert!(stdout.contains("push=0"), "{shown}");
    let pushed = Command::new("git")
        .args([
            "--git-dir",
            main.to_str().unwrap(),
            "rev-parse",
            "refs/heads/main",
        ])
        .output()
        .unwrap();
    let local = Command::new("git")
        .args([
            "-C",
            repo.to_str().unwrap(),
            "-c",
            "safe.directory=*",
            "rev-parse",
            "HEAD",
        ])
        .output()
        .unwrap();
    assert!(pushed.status.success(), "{}", describe(&pushed));
    assert_eq!(pushed.stdout, local.stdout);
    let real = format!("Basic {}", basic("x-access-token", PUSH_TOKEN));
    // Every request the server saw carried the real token or nothing (the push outside the
    // rule's path below got nothing added, and its placeholder answer never left the proxy).
    let saw = seen.lock().unwrap().clone();
    assert!(
        saw.iter().all(|a| *a == real || a == "-")
            && saw.iter().filter(|a| **a == real).count() >= 2,
        "{saw:?}"
    );
    // Without a rule: the server got no credential, and the push failed.
    assert!(
        stdout.contains("unruled=") && !stdout.contains("unruled=0"),
        "{shown}"
    );
    assert!(
        !other_seen.lock().unwrap().is_empty()
            && other_seen.lock().unwrap().iter().all(|a| a == "-"),
        "{:?}",
        other_seen.lock().unwrap()
    );
    let unpushed = Command::new("git")
        .args([
            "--git-dir",
            unruled.to_str().unwrap(),
            "rev-parse",
            "--verify",
            "-q",
            "refs/heads/main",
        ])
        .output()
        .unwrap();
    assert!(!unpushed.status.success());
    // Outside the rule's path: no credential added, git's placeholder answer blocked.
    assert!(!stdout.contains("outside-scope=0"), "{shown}");
    let other_pushed = Command::new("git")
        .args([
            "--git-dir",
            other.to_str().unwrap(),
            "rev-parse",
            "--verify",
            "-q",
            "refs/heads/main",
        ])
        .output()
        .unwrap();
    assert!(!other_pushed.status.success());
    // Nothing readable inside holds the token; the search does see the placeholder in the
    // environment (it reads what it claims to).
    assert!(stdout.contains("token-file=1"), "{shown}");
    assert!(stdout.contains("files=[]"), "{shown}");
    assert!(stdout.contains("proc-hits=0"), "{shown}");
    assert!(stdout.contains("placeholder-in-environ=1"), "{shown}");
    let proc_files: usize = stdout
        .lines()
        .find_map(|l| {
            l.strip_prefix("proc-files=")?
                .split(' ')
                .next()?
                .parse()
                .ok()
        })
        .unwrap();
    assert!(proc_files >= 4, "{shown}");
    // The audit log: the use by name, the exfiltration attempt, never the value.
    let log = audit_log_of(&out);
    let basic_value = basic("x-access-token", PUSH_TOKEN);
    assert!(!log.contains(PUSH_TOKEN) && !log.contains(basic_value.trim_end_matches('=')));
    let records: Vec<serde_json::Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let used: Vec<&serde_json::Value> = records
        .iter()
        .filter(|r| r["kind"] == "network" && r["credential"] == "git-push")
        .collect();
    assert!(used.len() >= 2, "{log}");
    // The server quoted the credential in its answers to the ref advertisement: those records
    // (and only those) say it was handed back; the terminal was told, by name only.
    for r in &used {
        let advertisement = r["method"] == "GET"
            && r["path"]
                .as_str()
                .is_some_and(|p| p.ends_with("/info/refs"));
        assert_eq!(r["credential_echoed"] == true, advertisement, "{r}\n{log}");
    }
    assert!(used.iter().any(|r| r["credential_echoed"] == true), "{log}");
    assert!(
        shown.contains("held the value of credential git-push"),
        "{shown}"
    );
    assert!(
        !shown.contains(PUSH_TOKEN) && !shown.contains(basic_value.trim_end_matches('=')),
        "{shown}"
    );
    assert!(
        records.iter().any(|r| r["kind"] == "exfiltration-attempt"
            && r["placeholder_blocked"] == "git-push"
            && r["path"]
                .as_str()
                .is_some_and(|p| p.starts_with("/o/other.git/"))),
        "{log}"
    );
    // explain names the rule and its source, never the value.
    let explain = w
        .as_owner(Path::new(support::STEPPROOF))
        .args(["explain", "--profile", profile.to_str().unwrap()])
        .current_dir(&w.workspace)
        .env_clear()
        .env("HOME", &w.home)
        .env("PATH", "/usr/bin:/bin")
        .envs(field_ledger())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&explain.stdout);
    assert!(
        text.contains("credential git-push: https://127.0.0.5:")
            && text.contains("from file:~/.config/stepproof/git-token"),
        "{}",
        describe(&explain)
    );
    assert!(!text.contains(PUSH_TOKEN));
}

/// The audit log a run names on its standard error.
fn audit_log_of(out: &std::process::Output) -> String {
    fs::read_to_string(support::audit_log_named(&String::from_utf8_lossy(
        &out.stderr,
    )))
    .unwrap()
}

both!(git_push, git_push_with_the_token_added_at_the_proxy);

/// A service credential is read once, at launch, and nothing inside can make the supervisor
/// read it again: its `command:` source (which counts its runs) gives a token the service
/// refuses, and the agent's ten requests with the placeholder, each answered 401, leave the
/// count at one.
fn a_service_credential_is_read_once_whatever_the_service_answers(w: &World) {
    if !git_available() {
        return;
    }
    let root = w.base.join("git-server-401");
    fs::create_dir_all(&root).unwrap();
    bare_repository(&root, "r");
    let (port, seen) = git_server("127.0.0.5", root.clone());
    // The source runs as whoever runs stepproof-run: its count is kept where that user writes.
    let counts = w.base.join("source-counts");
    fs::create_dir_all(&counts).unwrap();
    chown_tree(&counts, w.owner);
    let counter = counts.join("runs");
    let source = w.base.join("token-source.sh");
    fs::write(
        &source,
        format!(
            "#!/bin/sh
echo run >> {}
echo not-the-token-the-server-wants
",
            counter.display()
        ),
    )
    .unwrap();
    let profile = w.base.join("refused.toml");
    fs::write(
        &profile,
        format!(
            "extends = \"default\"\n[network]\nmode = \"allowlist\"\nallow_addresses = [\"127.0.0.5\"]\n\
             [[network.credentials]]\nname = \"git-refused\"\nhost = \"127.0.0.5:{port}\"\npaths = [\"/o/r.git/\"]\n\
             source = \"command:{}\"\nbasic = \"x-access-token\"\ngit = true\n\
             ca_file = \"{}\"\n",
            source.display(),
            root.join("test-ca.pem").display()
        ),
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&source, fs::Permissions::from_mode(0o755)).unwrap();
        for p in [&profile, &root.join("test-ca.pem")] {
            fs::set_permissions(p, fs::Permissions::from_mode(0o644)).unwrap();
        }
        fs::set_permissions(&root, fs::Permissions::from_mode(0o755)).unwrap();
    }
    let script = format!(
        "for i in 1 2 3 4 5 6 7 8 9 10; do {GIT} ls-remote https://127.0.0.5:{port}/o/r.git >/dev/null 2>&1; echo \"try=$?\"; done"
    );
    let out = w
        .command(
            &["--profile", profile.to_str().unwrap()],
            &["/bin/sh", "-c", &script],
        )
        .output()
        .unwrap();
    let shown = describe(&out);
    assert!(out.status.success(), "{shown}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.matches("try=").count(), 10, "{shown}");
    assert!(!stdout.contains("try=0"), "{shown}");
    // The service saw the (wrong) real token and refused it, again and again.
    let wrong = format!(
        "Basic {}",
        basic("x-access-token", "not-the-token-the-server-wants")
    );
    let saw = seen.lock().unwrap().clone();
    assert!(saw.iter().filter(|a| **a == wrong).count() >= 10, "{saw:?}");
    // Read once, at launch.
    assert_eq!(
        fs::read_to_string(&counter).unwrap(),
        "run\n",
        "the source was read again"
    );
}

both!(
    read_once,
    a_service_credential_is_read_once_whatever_the_service_answers
);

/// A profile inside the workspace that declares credentials (or pulls them in through
/// `extends`) is refused before anything runs.
fn credentials_from_the_workspace_are_refused(w: &World) {
    let rule = "[[network.credentials]]\nname = \"x\"\nhost = \"example.com\"\npaths = [\"/\"]\nsource = \"command:id -un\"\nheader = \"X-Token\"\n";
    let inside = w.workspace.join("stepproof.toml");
    fs::write(
        &inside,
        format!("extends = \"default\"\n[network]\nmode = \"allowlist\"\n{rule}"),
    )
    .unwrap();
    // Outside, but extending the workspace's file.
    let outside = w.base.join("outer.toml");
    fs::write(&outside, format!("extends = \"{}\"\n", inside.display())).unwrap();
    chown_tree(&w.workspace, w.owner);
    for profile in [&inside, &outside] {
        let out = w
            .command(
                &["--profile", profile.to_str().unwrap()],
                &["/bin/echo", "ran"],
            )
            .output()
            .unwrap();
        let shown = describe(&out);
        assert_eq!(out.status.code(), Some(120), "{shown}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("from inside the workspace"),
            "{shown}"
        );
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("ran"),
            "{shown}"
        );
    }
}

both!(
    workspace_profiles,
    credentials_from_the_workspace_are_refused
);

/// The run's trust files on their tmpfs: where the caller's `NODE_EXTRA_CA_CERTS` is the system
/// bundle (a common set-up), the file `NODE_EXTRA_CA_CERTS` names inside is the bundle itself (one
/// file, two names: written once); where it holds one corporate CA, the two are files of their
/// own, the CA file holding that CA and the run's.
fn trust_files_are_written_once(w: &World) {
    let system = Path::new("/etc/ssl/certs/ca-certificates.crt");
    let Ok(bundle) = fs::read_to_string(system) else {
        support::skip_or_fail("no system CA bundle at /etc/ssl/certs/ca-certificates.crt");
        return;
    };
    let first_end = bundle.find("-----END CERTIFICATE-----").unwrap() + 25;
    let one = w.base.join("one-ca.pem");
    fs::write(&one, format!("{}\n", &bundle[..first_end])).unwrap();
    chown_tree(&one, w.owner);
    let script = "cd /run/stepproof-trust && stat -c '%n %i %h %a' ca-bundle.pem run-ca.pem && \
                  grep -c 'BEGIN CERTIFICATE' ca-bundle.pem run-ca.pem && \
                  test \"$NODE_EXTRA_CA_CERTS\" = /run/stepproof-trust/run-ca.pem && \
                  if ( : > run-ca.pem ) 2>/dev/null; then echo writable; fi";
    let certs = bundle.matches("BEGIN CERTIFICATE").count();
    for (extra, same, ca_certs) in [(system, true, certs + 1), (one.as_path(), false, 2)] {
        let mut cmd = w.command(&[], &["/bin/sh", "-c", script]);
        cmd.env("NODE_EXTRA_CA_CERTS", extra);
        let out = cmd.output().unwrap();
        let shown = describe(&out);
        assert_eq!(out.status.code(), Some(0), "{shown}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<Vec<&str>> = stdout.lines().map(|l| l.split(' ').collect()).collect();
        let (bundle_file, ca_file) = (&lines[0], &lines[1]);
        assert_eq!(bundle_file[3], "644", "{shown}");
        assert_eq!(ca_file[3], "644", "{shown}");
        assert_eq!(bundle_file[1] == ca_file[1], same, "{shown}");
        assert_eq!(bundle_file[2], if same { "2" } else { "1" }, "{shown}");
        assert!(
            stdout.contains(&format!("ca-bundle.pem:{}", certs + 1)),
            "{shown}"
        );
        assert!(
            stdout.contains(&format!("run-ca.pem:{ca_certs}")),
            "{shown}"
        );
        assert!(!stdout.contains("writable"), "{shown}");
    }
}

both!(trust_files, trust_files_are_written_once);
