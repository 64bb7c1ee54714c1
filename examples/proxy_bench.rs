//! Drives the allow-list proxy for `scripts/bench-proxy.sh`. Modes:
//!
//! * `proxy_bench proxy ALLOW... [--address CIDR]...`: serve the proxy on 127.0.0.1 (port
//!   printed on the first line) until standard input closes; then print the record count.
//! * `proxy_bench source BYTES`: a loopback server sending BYTES to each client, then closing.
//! * `proxy_bench fetch ADDR BYTES [TARGET]`: read BYTES from ADDR (through `CONNECT TARGET`
//!   when given); prints MiB/s.
//! * `proxy_bench latency ADDR ROUNDS [TARGET]`: connect (and CONNECT) and wait for the first
//!   byte, ROUNDS times; prints the median in microseconds.
//!
//! With TLS (the credential path: the proxy terminates TLS for a host with a credential rule):
//!
//! * `proxy_bench tls-source BYTES CA_OUT`: an HTTPS server on 127.0.0.1 (its own test CA written
//!   to CA_OUT) answering every `GET` with BYTES of body (`GET /small`: one byte), keep-alive.
//! * `proxy_bench tls-proxy RUN_CA_OUT RULE_HOST RULE_CA ALLOW...`: the proxy with one credential
//!   rule (a header) for RULE_HOST, trusting RULE_CA onward; the run's CA written to RUN_CA_OUT.
//! * `proxy_bench tls-fetch PROXY BYTES TARGET CA`: CONNECT, TLS trusting CA, one GET; MiB/s.
//! * `proxy_bench tls-latency PROXY ROUNDS TARGET CA`: connect, CONNECT, TLS handshake, GET, to
//!   the first byte of the response, ROUNDS times; the median in microseconds.

use std::io::{BufRead, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Instant;
use stepproof::profile::AllowList;
use stepproof::supervisor::net::proxy::{self, SystemResolver};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("proxy") => run_proxy(&args[1..]),
        Some("source") => run_source(args[1].parse().expect("BYTES")),
        Some("fetch") => run_fetch(&args[1], args[2].parse().expect("BYTES"), args.get(3)),
        Some("latency") => run_latency(&args[1], args[2].parse().expect("ROUNDS"), args.get(3)),
        Some("tls-source") => tls::source(args[1].parse().expect("BYTES"), &args[2]),
        Some("tls-proxy") => tls::proxy(&args[1], &args[2], &args[3], &args[4..]),
        Some("tls-fetch") => tls::fetch(
            &args[1],
            args[2].parse().expect("BYTES"),
            &args[3],
            &args[4],
        ),
        Some("tls-latency") => tls::latency(
            &args[1],
            args[2].parse().expect("ROUNDS"),
            &args[3],
            &args[4],
        ),
        _ => {
            eprintln!("usage: proxy_bench proxy|source|fetch|latency …");
            std::process::exit(2);
        }
    }
}

fn run_proxy(args: &[String]) {
    let (mut hosts, mut addresses) = (Vec::new(), Vec::new());
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        if arg == "--address" {
            addresses.push(it.next().expect("CIDR").clone());
        } else {
            hosts.push(arg.clone());
        }
    }
    let list = AllowList::new(hosts, addresses).unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(2)
    });
    let compiled = list.compiled().clone();
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    println!("{}", listener.local_addr().expect("addr").port());
    let (tx, rx) = std::sync::mpsc::channel();
    let handle = proxy::serve(listener, compiled, Arc::new(SystemResolver), tx);
    let mut line = String::new();
    while std::io::stdin()
        .lock()
        .read_line(&mut line)
        .is_ok_and(|n| n > 0)
    {}
    handle.shutdown();
    eprintln!("records: {}", rx.try_iter().count());
}

fn run_source(bytes: u64) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    println!("{}", listener.local_addr().expect("addr").port());
    std::io::stdout().flush().ok();
    let block = vec![0x5au8; 1 << 20];
    for stream in listener.incoming().flatten() {
        let block = block.clone();
        std::thread::spawn(move || {
            let mut s = stream;
            let mut left = bytes;
            while left > 0 {
                let n = left.min(block.len() as u64) as usize;
                if s.write_all(&block[..n]).is_err() {
                    return;
                }
                left -= n as u64;
            }
        });
    }
}

fn open(addr: &str, target: Option<&String>) -> TcpStream {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_nodelay(true).ok();
    if let Some(target) = target {
        s.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
            .expect("CONNECT");
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            s.read_exact(&mut byte).expect("proxy reply");
            head.push(byte[0]);
        }
        assert!(
            head.starts_with(b"HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&head)
        );
    }
    s
}

fn run_fetch(addr: &str, bytes: u64, target: Option<&String>) {
    let start = Instant::now();
    let mut s = open(addr, target);
    let mut buf = vec![0u8; 1 << 18];
    let mut got = 0u64;
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got += n as u64,
            Err(e) => panic!("read: {e}"),
        }
    }
    let secs = start.elapsed().as_secs_f64();
    assert_eq!(got, bytes, "short transfer");
    println!("{:.1}", bytes as f64 / (1 << 20) as f64 / secs);
}

fn run_latency(addr: &str, rounds: usize, target: Option<&String>) {
    let mut times: Vec<u128> = (0..rounds)
        .map(|_| {
            let start = Instant::now();
            let mut s = open(addr, target);
            let mut byte = [0u8; 1];
            s.read_exact(&mut byte).expect("first byte");
            start.elapsed().as_micros()
        })
        .collect();
    times.sort_unstable();
    println!("{}", times[times.len() / 2]);
}

mod tls {
    use super::open;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConfig, StreamOwned};
    use std::io::{BufRead, Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::sync::Arc;
    use std::time::Instant;
    use stepproof::profile::{AllowList, CredentialRule};
    use stepproof::supervisor::net::credentials::{
        Broker, FixedSecret, RunAuthority, Secret, ServiceCredential,
    };
    use stepproof::supervisor::net::proxy::{self, SystemResolver};

    fn provider() -> Arc<rustls::crypto::CryptoProvider> {
        Arc::new(rustls::crypto::ring::default_provider())
    }

    pub fn source(bytes: u64, ca_out: &str) {
        let ca_key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = params.self_signed(&ca_key).expect("CA");
        std::fs::write(ca_out, ca.pem()).expect("write CA");
        let issuer = rcgen::Issuer::new(params, ca_key);
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
            .expect("params")
            .signed_by(&key, &issuer)
            .expect("leaf");
        let config = Arc::new(
            ServerConfig::builder_with_provider(provider())
                .with_safe_default_protocol_versions()
                .expect("versions")
                .with_no_client_auth()
                .with_single_cert(
                    vec![cert.der().clone()],
                    PrivateKeyDer::Pkcs8(key.serialize_der().into()),
                )
                .expect("config"),
        );
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        println!("{}", listener.local_addr().expect("addr").port());
        std::io::stdout().flush().ok();
        let block = vec![0x5au8; 1 << 16];
        for stream in listener.incoming().flatten() {
            let (config, block) = (config.clone(), block.clone());
            std::thread::spawn(move || {
                let _ = stream.set_nodelay(true);
                let conn = rustls::ServerConnection::new(config).expect("TLS");
                let mut tls = StreamOwned::new(conn, stream);
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                loop {
                    head.clear();
                    while !head.ends_with(b"\r\n\r\n") {
                        if tls.read(&mut byte).unwrap_or(0) != 1 {
                            return;
                        }
                        head.push(byte[0]);
                    }
                    // `/small`: one byte (the set-up latency); anything else: BYTES.
                    let bytes = if head.starts_with(b"GET /small ") {
                        1
                    } else {
                        bytes
                    };
                    let answer = format!("HTTP/1.1 200 OK\r\nContent-Length: {bytes}\r\n\r\n");
                    if tls.write_all(answer.as_bytes()).is_err() {
                        return;
                    }
                    let mut left = bytes;
                    while left > 0 {
                        let n = left.min(block.len() as u64) as usize;
                        if tls.write_all(&block[..n]).is_err() {
                            return;
                        }
                        left -= n as u64;
                    }
                    if tls.flush().is_err() {
                        return;
                    }
                }
            });
        }
    }

    fn roots(ca: &str) -> RootCertStore {
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(ca).expect("CA file") {
            roots.add(cert.expect("CA")).expect("CA");
        }
        roots
    }

    pub fn proxy(run_ca_out: &str, rule_host: &str, rule_ca: &str, allow: &[String]) {
        let rule: CredentialRule = toml::from_str(&format!(
            "name = \"bench\"\nhost = \"{rule_host}\"\npaths = [\"/\"]\nsource = \"env:UNUSED\"\nheader = \"Authorization\"\nformat = \"Bearer {{}}\"\n"
        ))
        .expect("rule");
        let tls = stepproof::http::tls::client_config(roots(rule_ca)).expect("TLS");
        let broker = Arc::new(Broker {
            credentials: vec![ServiceCredential::new(
                rule,
                "stepproof-placeholder-bench-0".into(),
                Arc::new(FixedSecret(Secret::new("bench-secret".into()))),
                tls,
            )],
            authority: Some(RunAuthority::generate().expect("run CA")),
            read_only: Vec::new(),
            elsewhere: Vec::new(),
        });
        let authority = broker.authority.as_ref().expect("run CA");
        std::fs::write(run_ca_out, authority.certificate_pem()).expect("write run CA");
        let list = AllowList::new(allow.to_vec(), vec!["127.0.0.1".into()]).expect("allow");
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        println!("{}", listener.local_addr().expect("addr").port());
        std::io::stdout().flush().ok();
        let (tx, rx) = std::sync::mpsc::channel();
        let handle = proxy::serve_with_credentials(
            listener,
            list.compiled().clone(),
            Arc::new(SystemResolver),
            tx,
            Some(broker),
        );
        let mut line = String::new();
        while std::io::stdin()
            .lock()
            .read_line(&mut line)
            .is_ok_and(|n| n > 0)
        {}
        handle.shutdown();
        eprintln!("records: {}", rx.try_iter().count());
    }

    fn connect(addr: &str, target: &String, ca: &str) -> StreamOwned<ClientConnection, TcpStream> {
        let tcp = open(addr, Some(target));
        let config = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots(ca))
            .with_no_client_auth();
        let host = target.rsplit_once(':').expect("host:port").0;
        let name = ServerName::try_from(host.to_string()).expect("name");
        let conn = ClientConnection::new(Arc::new(config), name).expect("TLS");
        StreamOwned::new(conn, tcp)
    }

    fn get(tls: &mut StreamOwned<ClientConnection, TcpStream>, target: &str, path: &str) -> u64 {
        tls.write_all(format!("GET {path} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
            .expect("request");
        tls.flush().expect("flush");
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            tls.read_exact(&mut byte).expect("response head");
            head.push(byte[0]);
        }
        let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
        assert!(text.starts_with("http/1.1 200"), "{text}");
        text.lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("Content-Length")
    }

    pub fn fetch(addr: &str, bytes: u64, target: &String, ca: &str) {
        let start = Instant::now();
        let mut tls = connect(addr, target, ca);
        let length = get(&mut tls, target, "/data");
        assert_eq!(length, bytes);
        let mut buf = vec![0u8; 1 << 18];
        let mut got = 0u64;
        while got < bytes {
            let n = tls.read(&mut buf).expect("read");
            assert!(n > 0, "short transfer");
            got += n as u64;
        }
        let secs = start.elapsed().as_secs_f64();
        println!("{:.1}", bytes as f64 / (1 << 20) as f64 / secs);
    }

    pub fn latency(addr: &str, rounds: usize, target: &String, ca: &str) {
        let mut times: Vec<u128> = (0..rounds)
            .map(|_| {
                let start = Instant::now();
                let mut tls = connect(addr, target, ca);
                let _ = get(&mut tls, target, "/small");
                let mut byte = [0u8; 1];
                tls.read_exact(&mut byte).expect("first byte");
                start.elapsed().as_micros()
            })
            .collect();
        times.sort_unstable();
        println!("{}", times[times.len() / 2]);
    }
}
