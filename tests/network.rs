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

/// A TLS origin for `api.test` on 127.0.0.1 with a fresh test CA (written as PEM to `ca_path`).
/// It answers every request with whether it saw `expected_key` as `x-api-key`, and whether the
/// placeholder reached it.
fn start_tls_origin(ca_path: &std::path::Path, expected_key: &'static str) -> u16 {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    use std::io::BufRead;
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    fs::write(ca_path, ca_cert.pem()).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["api.test".to_owned()])
        .unwrap()
        .signed_by(&leaf_key, &issuer)
        .unwrap();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into());
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = std::sync::Arc::new(
        rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![leaf.der().clone()], key)
            .unwrap(),
    );
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for tcp in listener.incoming().flatten() {
            let config = config.clone();
            std::thread::spawn(move || {
                let conn = rustls::ServerConnection::new(config).unwrap();
                let mut tls = std::io::BufReader::new(rustls::StreamOwned::new(conn, tcp));
                let mut head = String::new();
                loop {
                    let mut line = String::new();
                    if tls.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    head.push_str(&line);
                    if line == "\r\n" {
                        break;
                    }
                }
                let lower = head.to_ascii_lowercase();
                if let Some(len) = lower
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length: "))
                {
                    let mut body = vec![0u8; len.trim().parse().unwrap()];
                    let _ = tls.read_exact(&mut body);
                }
                let real =
                    lower.contains(&format!("x-api-key: {}", expected_key.to_ascii_lowercase()));
                let placeholder = lower.contains("placeholder");
                let body = format!("real-key-seen={real} placeholder-seen={placeholder}\n");
                let _ = write!(
                    tls.get_mut(),
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = tls.get_mut().flush();
            });
        }
    });
    port
}

both!(credential_gateway_adds_the_real_key_outside, |w: &World| {
    const KEY: &str = "sk-ant-test-real-key-0123456789";
    let ca = w.base.join("test-ca.pem");
    let port = start_tls_origin(&ca, KEY);
    fs::set_permissions(&ca, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let profile = w.base.join("gateway.toml");
    fs::write(
        &profile,
        format!(
            "extends = \"default\"\n[network.gateway]\nupstream = \"api.test:{port}\"\nconnect = \"127.0.0.1:{port}\"\nca_file = \"{}\"\ncredential = \"env:STEPPROOF_TEST_KEY\"\n",
            ca.display()
        ),
    )
    .unwrap();
    let log = audit_dir(w).join("audit.jsonl");
    let script = r#"env | grep -c sk-ant-test-real-key || true
curl -s --unix-socket "$ANTHROPIC_UNIX_SOCKET" -H "x-api-key: $ANTHROPIC_API_KEY" -H 'content-type: application/json' -d '{}' "$ANTHROPIC_BASE_URL/v1/messages"
"#;
    let out = w
        .command(
            &[
                "--profile",
                profile.to_str().unwrap(),
                "--audit-log",
                log.to_str().unwrap(),
            ],
            &["/bin/sh", "-c", script],
        )
        .env("STEPPROOF_TEST_KEY", KEY)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        text.starts_with("0\n"),
        "the real key is in the sandbox's environment: {}",
        describe(&out)
    );
    assert!(
        text.contains("real-key-seen=true placeholder-seen=false"),
        "{}",
        describe(&out)
    );
    let records: Vec<serde_json::Value> = fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|r: &serde_json::Value| r["kind"] == "gateway")
        .collect();
    assert_eq!(records.len(), 1, "{records:?}");
    assert!(
        !fs::read_to_string(&log).unwrap().contains(KEY),
        "the key reached the audit log"
    );

    // Without the credential in the supervisor's environment, nothing starts.
    let out = w
        .command(
            &["--profile", profile.to_str().unwrap()],
            &["/bin/sh", "-c", "touch ran"],
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("STEPPROOF_TEST_KEY is not set"),
        "{}",
        describe(&out)
    );
    assert!(!w.workspace.join("ran").exists());
});

both!(network_none_is_private_and_host_is_shared, |w: &World| {
    // `none` gets a namespace of its own (made by the launch's network maker while the plan is
    // built) with nothing but its loopback; `host` shares the supervisor's (the early seed made
    // for a private network is dropped for one without).
    let host_ns = fs::read_link("/proc/self/ns/net").unwrap();
    let log = audit_dir(w).join("modes.jsonl");
    for (mode, shared) in [("none", false), ("host", true)] {
        let path = w.base.join(format!("net-mode-{mode}.toml"));
        fs::write(
            &path,
            format!("extends = \"default\"\n[network]\nmode = \"{mode}\"\n"),
        )
        .unwrap();
        let out = w
            .command(
                &[
                    "--profile",
                    path.to_str().unwrap(),
                    "--audit-log",
                    log.to_str().unwrap(),
                ],
                &[
                    "/bin/sh",
                    "-c",
                    "readlink /proc/self/ns/net; tail -n +3 /proc/net/dev | cut -d: -f1",
                ],
            )
            .output()
            .unwrap();
        assert!(out.status.success(), "{mode}: {}", describe(&out));
        let text = String::from_utf8_lossy(&out.stdout);
        let mut lines = text.lines().map(str::trim);
        let ns = lines.next().unwrap_or_default();
        let interfaces: Vec<&str> = lines.collect();
        if shared {
            assert_eq!(ns, host_ns.to_str().unwrap(), "{mode}: {}", describe(&out));
        } else {
            assert!(ns.starts_with("net:["), "{mode}: {}", describe(&out));
            assert_ne!(ns, host_ns.to_str().unwrap(), "{mode}: {}", describe(&out));
            assert_eq!(interfaces, ["lo"], "{mode}: {}", describe(&out));
        }
    }
});
