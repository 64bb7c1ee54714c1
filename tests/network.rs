//! The `allowlist` network against the real sandbox: the sandbox has only its own loopback,
//! HTTP(S)_PROXY points at the supervisor's proxy, and an origin server the test starts on the
//! host's loopback (127.0.0.2) is reachable only through the proxy and only when allow-listed.
//! As root and as the test user.

mod support;

use std::fs;
use std::io::{Read, Write};
use std::net::TcpListener;
use support::*;

const BIG: usize = 32 * 1024 * 1024;

/// A tiny HTTP origin on 127.0.0.2: `/big` is 32 MiB, anything else says hello.
fn start_origin() -> u16 {
    let listener = TcpListener::bind("127.0.0.2:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut stream = stream;
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
                    head.push(byte[0]);
                }
                let big = head.starts_with(b"GET /big");
                let body_len = if big { BIG } else { 6 };
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Length: {body_len}\r\nConnection: close\r\n\r\n"
                );
                if big {
                    let chunk = vec![b'x'; 1 << 20];
                    for _ in 0..BIG / chunk.len() {
                        if stream.write_all(&chunk).is_err() {
                            return;
                        }
                    }
                } else {
                    let _ = stream.write_all(b"hello\n");
                }
            });
        }
    });
    port
}

/// A profile allowing the origin (and, with `admit_loopback`, its special address).
fn profile(w: &World, port: u16, admit_loopback: bool) -> String {
    let path = w.base.join(format!("net-{port}-{admit_loopback}.toml"));
    let addresses = if admit_loopback {
        "[\"127.0.0.2\"]"
    } else {
        "[]"
    };
    fs::write(
        &path,
        format!("extends = \"default\"\n[network]\nmode = \"allowlist\"\nallow = [\"127.0.0.2:{port}\"]\nallow_addresses = {addresses}\n"),
    )
    .unwrap();
    path.display().to_string()
}

fn audit_dir(w: &World) -> std::path::PathBuf {
    let dir = w.base.join("audit");
    fs::create_dir_all(&dir).unwrap();
    chown_tree(&dir, w.owner);
    dir
}

fn network_records(path: &std::path::Path) -> Vec<serde_json::Value> {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|r| r["kind"] == "network")
        .collect()
}

both!(
    allowed_origin_is_reached_through_the_proxy_only,
    |w: &World| {
        let port = start_origin();
        let profile = profile(w, port, true);
        let log = audit_dir(w).join("audit.jsonl");
        let script = format!(
            r#"set -u
# plain HTTP, absolute-form through HTTP_PROXY
python3 -c "import urllib.request; print('plain', urllib.request.urlopen('http://127.0.0.2:{port}/').read().decode().strip())"
# CONNECT tunnel
curl -s -p -x "$HTTPS_PROXY" http://127.0.0.2:{port}/ | sed 's/^/tunnel /'
# a large download
curl -s -x "$HTTP_PROXY" -o /dev/null -w 'big %{{size_download}}\n' http://127.0.0.2:{port}/big
# ignoring the proxy: the host's loopback is not this loopback
python3 -c "
import socket, errno
s = socket.socket()
try:
    s.connect(('127.0.0.2', {port})); print('direct OK')
except OSError as e:
    print('direct', errno.errorcode[e.errno])
"
# no DNS inside: the proxy resolves names
python3 -c "
import socket
try:
    socket.getaddrinfo('example.com', 443); print('dns OK')
except OSError as e:
    print('dns failed')
"
"#
        );
        let out = w
            .command(
                &["--profile", &profile, "--audit-log", log.to_str().unwrap()],
                &["/bin/sh", "-c", &script],
            )
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{}", describe(&out));
        assert!(text.contains("plain hello"), "{}", describe(&out));
        assert!(text.contains("tunnel hello"), "{}", describe(&out));
        assert!(text.contains(&format!("big {BIG}")), "{}", describe(&out));
        assert!(text.contains("direct ECONNREFUSED"), "{}", describe(&out));
        assert!(text.contains("dns failed"), "{}", describe(&out));
        let records = network_records(&log);
        assert_eq!(
            records.len(),
            3,
            "one record per proxied attempt: {records:?}"
        );
        assert!(
            records
                .iter()
                .all(|r| r["allowed"] == true && r["source"] == "supervisor"),
            "{records:?}"
        );
        assert!(
            records.iter().any(|r| r["method"] == "CONNECT"),
            "{records:?}"
        );
        assert!(
            records
                .iter()
                .any(|r| r["bytes_down"].as_u64().unwrap() >= BIG as u64),
            "{records:?}"
        );
    }
);

both!(
    denied_names_and_loopback_targets_get_403_and_a_record,
    |w: &World| {
        let port = start_origin();
        // Allowed by name, but its address is loopback and not admitted.
        let profile = profile(w, port, false);
        let log = audit_dir(w).join("audit.jsonl");
        let script = format!(
            r#"curl -s -x "$HTTP_PROXY" -w ' code=%{{http_code}}\n' http://127.0.0.2:{port}/
curl -s -x "$HTTP_PROXY" -w ' code=%{{http_code}}\n' http://example.com:{port}/
curl -s -p -x "$HTTPS_PROXY" -w ' code=%{{http_code}}\n' https://evil.example/ ; echo
"#
        );
        let out = w
            .command(
                &["--profile", &profile, "--audit-log", log.to_str().unwrap()],
                &["/bin/sh", "-c", &script],
            )
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(text.matches("code=403").count(), 2, "{}", describe(&out));
        assert!(
            text.contains("not in the network allow-list"),
            "{}",
            describe(&out)
        );
        assert!(
            !text.contains("hello"),
            "the origin was reached: {}",
            describe(&out)
        );
        let records = network_records(&log);
        assert_eq!(records.len(), 3, "{records:?}");
        assert!(records.iter().all(|r| r["allowed"] == false), "{records:?}");
        assert!(
            records.iter().any(|r| r["host"] == "evil.example"),
            "{records:?}"
        );
    }
);

both!(many_parallel_connections, |w: &World| {
    let port = start_origin();
    let profile = profile(w, port, true);
    let script = format!(
        "for i in $(seq 1 32); do curl -s -p -x \"$HTTPS_PROXY\" http://127.0.0.2:{port}/ & done; wait"
    );
    let out = w
        .command(&["--profile", &profile], &["/bin/sh", "-c", &script])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.matches("hello").count(), 32, "{}", describe(&out));
});
