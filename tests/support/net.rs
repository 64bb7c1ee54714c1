//! Helpers for the proxy and gateway tests: a scripted resolver (names map to loopback without
//! DNS), a proxy fixture that collects records, loopback origin servers, and a test CA.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use stepproof::profile::AllowList;
use stepproof::supervisor::net::proxy::{self, ConnectionRecord, ProxyHandle, Resolver};

/// Answers from a table: each name has a sequence of answers, one per call (the last repeats),
/// so a test can play a DNS server that changes its mind (rebinding).
#[derive(Default)]
pub struct ScriptedResolver {
    answers: HashMap<String, Vec<Vec<IpAddr>>>,
    pub calls: Mutex<Vec<String>>,
}

impl ScriptedResolver {
    pub fn new(entries: &[(&str, &[&str])]) -> Self {
        let mut r = ScriptedResolver::default();
        for (name, ips) in entries {
            r = r.then(name, ips);
        }
        r
    }

    /// Adds the next answer for `name`.
    pub fn then(mut self, name: &str, ips: &[&str]) -> Self {
        self.answers
            .entry(name.to_owned())
            .or_default()
            .push(ips.iter().map(|ip| ip.parse().unwrap()).collect());
        self
    }

    pub fn calls_for(&self, name: &str) -> usize {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|n| *n == name)
            .count()
    }
}

impl Resolver for ScriptedResolver {
    fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
        let n = {
            let mut calls = self.calls.lock().unwrap();
            calls.push(host.to_owned());
            calls.iter().filter(|c| *c == host).count()
        };
        let answers = self
            .answers
            .get(host)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such test name"))?;
        let answer = &answers[(n - 1).min(answers.len() - 1)];
        Ok(answer.iter().map(|ip| SocketAddr::new(*ip, port)).collect())
    }
}

pub struct Proxy {
    pub addr: SocketAddr,
    handle: Option<ProxyHandle>,
    records: Mutex<Receiver<ConnectionRecord>>,
    pub resolver: Arc<ScriptedResolver>,
}

pub fn start_proxy(allow: &[String], addresses: &[&str], resolver: ScriptedResolver) -> Proxy {
    let list = AllowList::new(
        allow.to_vec(),
        addresses.iter().map(|s| s.to_string()).collect(),
    )
    .expect("test allow-list compiles");
    let compiled = list.compiled().clone();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let resolver = Arc::new(resolver);
    let (tx, rx) = channel();
    let handle = proxy::serve(listener, compiled, resolver.clone(), tx);
    Proxy {
        addr,
        handle: Some(handle),
        records: Mutex::new(rx),
        resolver,
    }
}

/// A proxy response head and the stream after it.
pub struct Reply {
    pub status: u16,
    pub head: String,
    pub stream: TcpStream,
}

impl Reply {
    /// The rest of the response (for refusals: the one-line body).
    pub fn body(mut self) -> String {
        let mut body = String::new();
        let _ = self.stream.read_to_string(&mut body);
        body
    }
}

impl Proxy {
    pub fn stream(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s
    }

    /// Sends `request` (raw bytes) and reads the response head.
    pub fn send(&self, request: &[u8]) -> Reply {
        let mut stream = self.stream();
        stream.write_all(request).unwrap();
        let (status, head) = read_head(&mut stream);
        Reply {
            status,
            head,
            stream,
        }
    }

    pub fn connect(&self, target: &str) -> Reply {
        self.send(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
    }

    /// The next record, waiting for the connection to end.
    pub fn record(&self) -> ConnectionRecord {
        self.records
            .lock()
            .unwrap()
            .recv_timeout(Duration::from_secs(30))
            .expect("a connection record")
    }

    /// Stops the proxy and returns every record not yet taken.
    pub fn finish(mut self) -> Vec<ConnectionRecord> {
        self.handle.take().unwrap().shutdown();
        self.records.lock().unwrap().try_iter().collect()
    }
}

/// Reads a response head byte by byte (so nothing after it is consumed).
pub fn read_head(stream: &mut impl Read) -> (u16, String) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => break,
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, head)
}

/// A loopback server: each accepted connection is handed to `serve` on its own thread.
/// Returns its address and a count of accepted connections.
pub fn origin<F>(bind: &str, serve: F) -> (SocketAddr, Arc<AtomicUsize>)
where
    F: Fn(TcpStream) + Send + Sync + 'static,
{
    let listener = TcpListener::bind(bind).unwrap();
    origin_on(listener, serve)
}

pub fn origin_on<F>(listener: TcpListener, serve: F) -> (SocketAddr, Arc<AtomicUsize>)
where
    F: Fn(TcpStream) + Send + Sync + 'static,
{
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    let serve = Arc::new(serve);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            count.fetch_add(1, Ordering::SeqCst);
            let serve = serve.clone();
            std::thread::spawn(move || serve(stream));
        }
    });
    (addr, accepted)
}

/// Echoes until the client half-closes, then says "bye" and closes: shows half-close works.
pub fn echo_then_bye(mut s: TcpStream) {
    let mut buf = [0u8; 65536];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if s.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
        }
    }
    let _ = s.write_all(b"bye");
}

/// A minimal HTTP origin: reads one request head, sends it back as the body.
pub fn http_echo_head(mut s: TcpStream) {
    let (_, head) = read_request_head(&mut s);
    let response = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{head}",
        head.len()
    );
    let _ = s.write_all(response.as_bytes());
}

pub fn read_request_head(s: &mut impl Read) -> (String, String) {
    let (_, head) = read_head(s);
    let first = head.lines().next().unwrap_or_default().to_owned();
    (first, head)
}

/// A test CA and a server certificate for `name` signed by it.
pub struct TestPki {
    pub ca_der: rustls::pki_types::CertificateDer<'static>,
    pub server: Arc<rustls::ServerConfig>,
}

/// (Every test binary that includes this module includes `support` too.)
pub fn test_pki(name: &str) -> TestPki {
    let (ca_cert, server) = crate::support::ca_and_server(None, vec![name.to_owned()]);
    TestPki {
        ca_der: ca_cert.der().clone(),
        server,
    }
}
