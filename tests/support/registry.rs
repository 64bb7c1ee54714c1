//! A package registry stand-in for the network presets: one HTTPS server on a loopback address
//! of its own, port 443, with a test CA, serving fixed files by host name and path (the preset's
//! real names: `index.crates.io`, `proxy.golang.org`, `pypi.org`, …). `stepproof-run` reaches it
//! through its own proxy when its caller sets `STEPPROOF_TEST_RESOLVE` to [`Registry::resolve`]
//! and the profile allows the address ([`Registry::ip`] in `allow_addresses`); the tools inside
//! trust [`Registry::ca`] (`CARGO_HTTP_CAINFO`, `SSL_CERT_FILE`, `PIP_CERT`,
//! `npm_config_cafile`). Every request is recorded with its answer.
//!
//! The packages themselves are built by the tests (archives with Python's `zipfile` and
//! `tarfile`, which `scripts/test` requires anyway): [`archive`].
#![allow(dead_code)]

use std::collections::HashMap;
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One file the stand-in serves.
pub struct Served {
    pub host: String,
    pub path: String,
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

pub fn served(host: &str, path: &str, content_type: &'static str, body: Vec<u8>) -> Served {
    Served {
        host: host.to_owned(),
        path: path.to_owned(),
        content_type,
        body,
    }
}

pub struct Registry {
    /// The loopback address it listens on (port 443).
    pub ip: Ipv4Addr,
    /// The test CA's certificate (PEM), readable by everyone.
    pub ca: PathBuf,
    hosts: Vec<String>,
    log: Arc<Mutex<Vec<String>>>,
}

static NEXT: AtomicU32 = AtomicU32::new(0);

impl Registry {
    /// Serves `files` (their hosts are the certificate's names) on 127.88.x.y:443; the CA goes
    /// to `dir` (0755).
    pub fn start(dir: &Path, files: Vec<Served>) -> Registry {
        let mut hosts: Vec<String> = files.iter().map(|f| f.host.clone()).collect();
        hosts.sort();
        hosts.dedup();
        fs::create_dir_all(dir).unwrap();
        fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).unwrap();
        let ca = dir.join("registry-ca.pem");
        let config =
            crate::support::server_tls("StepProof registry stand-in CA", hosts.clone(), Some(&ca));
        // An address of its own per stand-in (tests run in parallel, all on port 443).
        let (ip, listener) = (0..512)
            .find_map(|_| {
                let n = NEXT.fetch_add(1, Ordering::Relaxed) + std::process::id() * 7;
                let ip = Ipv4Addr::new(127, 88, (n >> 8) as u8, (n & 0xff) as u8 | 1);
                TcpListener::bind((ip, 443)).ok().map(|l| (ip, l))
            })
            .expect("no free 127.88.x.y:443 for the registry stand-in (binding 443 needs root)");
        let files: Arc<HashMap<(String, String), Served>> = Arc::new(
            files
                .into_iter()
                .map(|f| ((f.host.clone(), f.path.clone()), f))
                .collect(),
        );
        let log = Arc::new(Mutex::new(Vec::new()));
        let log2 = log.clone();
        std::thread::spawn(move || {
            for tcp in listener.incoming().flatten() {
                let (config, files, log) = (config.clone(), files.clone(), log2.clone());
                std::thread::spawn(move || {
                    let _ = tcp.set_read_timeout(Some(Duration::from_secs(60)));
                    let Ok(conn) = rustls::ServerConnection::new(config) else {
                        return;
                    };
                    let tls = rustls::StreamOwned::new(conn, tcp);
                    serve(BufReader::new(tls), &files, &log);
                });
            }
        });
        Registry { ip, ca, hosts, log }
    }

    /// `STEPPROOF_TEST_RESOLVE`'s value: every name it serves to its address.
    pub fn resolve(&self) -> String {
        self.hosts
            .iter()
            .map(|h| format!("{h}={}", self.ip))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Every request so far: `GET host/path -> status`.
    pub fn requests(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// Whether `host` + `path` was answered 200.
    pub fn served(&self, host: &str, path: &str) -> bool {
        self.requests()
            .iter()
            .any(|r| r.ends_with(&format!(" {host}{path} -> 200")))
    }
}

/// HTTP/1.1 with keep-alive: each request answered from `files` (the query string ignored), a
/// 404 otherwise.
fn serve<S: std::io::Read + Write>(
    mut stream: BufReader<S>,
    files: &HashMap<(String, String), Served>,
    log: &Mutex<Vec<String>>,
) {
    loop {
        let mut head = Vec::new();
        loop {
            let mut line = String::new();
            match stream.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if line == "\r\n" || line == "\n" {
                break;
            }
            head.push(line.trim_end().to_owned());
        }
        let Some(first) = head.first() else { return };
        let mut parts = first.split(' ');
        let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let header = |name: &str| {
            head[1..].iter().find_map(|l| {
                let (n, v) = l.split_once(':')?;
                n.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
            })
        };
        let host = header("host").unwrap_or_default();
        let host = host.split(':').next().unwrap_or("").to_ascii_lowercase();
        let path = target.split('?').next().unwrap_or("").to_owned();
        let close = header("connection").is_some_and(|v| v.eq_ignore_ascii_case("close"));
        // A request body (none expected from a download) is skipped.
        if let Some(len) = header("content-length").and_then(|v| v.parse::<u64>().ok()) {
            let _ = std::io::copy(&mut (&mut stream).take(len), &mut std::io::sink());
        }
        let found = files.get(&(host.clone(), path.clone()));
        let (status, reason, content_type, body): (u16, &str, &str, &[u8]) = match found {
            Some(f) => (200, "OK", f.content_type, &f.body),
            None => (404, "Not Found", "text/plain", b"not found\n"),
        };
        log.lock()
            .unwrap()
            .push(format!("{method} {host}{path} -> {status}"));
        let head = format!(
            "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{}{}\r\n",
            body.len(),
            // As the real registries do: what a tool's HTTP cache (pip's) keeps.
            if status == 200 {
                format!("Cache-Control: max-age=600\r\nDate: {}\r\n", http_date())
            } else {
                String::new()
            },
            if close { "Connection: close\r\n" } else { "" }
        );
        let inner = stream.get_mut();
        let sent = inner.write_all(head.as_bytes()).is_ok()
            && (method == "HEAD" || inner.write_all(body).is_ok())
            && inner.flush().is_ok();
        if !sent || close {
            return;
        }
    }
}

/// Now as an HTTP date (`Tue, 02 Dec 2025 01:02:03 GMT`).
fn http_date() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let weekday = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][days.rem_euclid(7) as usize];
    let months = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{weekday}, {day:02} {} {year} {:02}:{:02}:{:02} GMT",
        months[(month - 1) as usize],
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// An archive of `files` (path, contents) built by Python: `kind` is `zip` or `tgz`.
pub fn archive(kind: &str, files: &[(&str, &[u8])]) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let mut names = Vec::new();
    for (i, (name, body)) in files.iter().enumerate() {
        let src = dir.path().join(format!("f{i}"));
        fs::write(&src, body).unwrap();
        names.push(format!("({:?}, {:?})", src.to_str().unwrap(), name));
    }
    let out = dir.path().join("out");
    // Fixed times and modes: the same inputs make the same bytes.
    let script = match kind {
        "zip" => format!(
            "import zipfile\nwith zipfile.ZipFile({out:?}, 'w', zipfile.ZIP_DEFLATED) as z:\n    for src, name in [{list}]:\n        i = zipfile.ZipInfo(name, (2024, 1, 1, 0, 0, 0))\n        i.external_attr = 0o644 << 16\n        z.writestr(i, open(src, 'rb').read(), zipfile.ZIP_DEFLATED)\n",
            out = out.to_str().unwrap(),
            list = names.join(", ")
        ),
        "tgz" => format!(
            "import tarfile, io\nwith tarfile.open({out:?}, 'w:gz', format=tarfile.PAX_FORMAT) as t:\n    for src, name in [{list}]:\n        data = open(src, 'rb').read()\n        i = tarfile.TarInfo(name)\n        i.size, i.mtime, i.mode = len(data), 1704067200, 0o644\n        t.addfile(i, io.BytesIO(data))\n",
            out = out.to_str().unwrap(),
            list = names.join(", ")
        ),
        other => panic!("archive kind {other}"),
    };
    let status = Command::new("/usr/bin/python3")
        .args(["-c", &script])
        .status()
        .unwrap();
    assert!(
        status.success(),
        "python3 could not build the {kind} archive"
    );
    fs::read(out).unwrap()
}

/// Lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn sha256(bytes: &[u8]) -> Vec<u8> {
    ring::digest::digest(&ring::digest::SHA256, bytes)
        .as_ref()
        .to_vec()
}
