//! The allow-list proxy and the credential gateway against loopback origin servers the tests
//! start. Names resolve through a scripted resolver (no DNS); nothing leaves the machine.

mod support;

#[path = "support/net.rs"]
mod net;

use net::*;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::time::Duration;

fn allow(entries: &[&str]) -> Vec<String> {
    entries.iter().map(|s| s.to_string()).collect()
}

#[test]
fn connect_tunnel_reaches_an_allowed_host_and_passes_half_close() {
    let (origin, _) = origin("127.0.0.1:0", echo_then_bye);
    let p = start_proxy(
        &[format!("api.test:{}", origin.port())],
        &["127.0.0.1"],
        ScriptedResolver::new(&[("api.test", &["127.0.0.1"])]),
    );
    let mut reply = p.connect(&format!("API.Test:{}", origin.port()));
    assert_eq!(reply.status, 200, "{}", reply.head);
    reply.stream.write_all(b"ping").unwrap();
    let mut got = [0u8; 4];
    reply.stream.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"ping");
    // Half-close: the origin sees end of stream and still gets its last word through.
    reply.stream.shutdown(Shutdown::Write).unwrap();
    let mut rest = String::new();
    reply.stream.read_to_string(&mut rest).unwrap();
    assert_eq!(rest, "bye");
    let r = p.record();
    assert!(r.allowed, "{r:?}");
    assert_eq!(
        (r.host.as_str(), r.port, r.method.as_str()),
        ("api.test", origin.port(), "CONNECT")
    );
    assert_eq!(r.resolved, Some(format!("127.0.0.1:{}", origin.port())));
    assert!(
        r.rule
            .contains(&format!("allow api.test:{}", origin.port())),
        "{}",
        r.rule
    );
    assert!(r.rule.contains("allow_addresses 127.0.0.1"), "{}", r.rule);
    assert_eq!((r.bytes_up, r.bytes_down), (4, 7));
    assert_eq!(r.error, None);
}

#[test]
fn plain_http_absolute_form_is_rewritten_to_origin_form() {
    let (origin, _) = origin("127.0.0.1:0", http_echo_head);
    let p = start_proxy(
        &[format!("web.test:{}", origin.port())],
        &["127.0.0.1"],
        ScriptedResolver::new(&[("web.test", &["127.0.0.1"])]),
    );
    let request = format!(
        "GET http://web.test:{}/path?q=1 HTTP/1.1\r\nHost: evil.example\r\nProxy-Connection: keep-alive\r\nProxy-Authorization: Basic eA==\r\nAccept: */*\r\n\r\n",
        origin.port()
    );
    let reply = p.send(request.as_bytes());
    assert_eq!(reply.status, 200, "{}", reply.head);
    let seen = reply.body();
    assert!(seen.starts_with("GET /path?q=1 HTTP/1.1\r\n"), "{seen}");
    assert!(
        seen.contains(&format!("Host: web.test:{}\r\n", origin.port())),
        "{seen}"
    );
    assert!(seen.contains("Accept: */*\r\n"), "{seen}");
    assert!(seen.contains("Connection: close\r\n"), "{seen}");
    assert!(!seen.to_ascii_lowercase().contains("proxy-"), "{seen}");
    assert!(!seen.contains("evil.example"), "{seen}");
    let r = p.record();
    assert!(r.allowed);
    // The query is the agent's free text: only its digest is recorded.
    assert_eq!(
        (
            r.method.as_str(),
            r.path.as_deref(),
            r.query_sha256.as_deref()
        ),
        (
            "GET",
            Some("/path"),
            Some("sha256:02f5e6e36c0369d5dbc9195fb0cf6d5eb415a620d0b80b8bc080039186e26925")
        )
    );
    let recorded = serde_json::to_string(&r).unwrap();
    assert!(!recorded.contains("q=1"), "{recorded}");
    assert_eq!(r.bytes_down as usize, reply_len(&seen));
    // Plain HTTP: the record carries the upstream's status.
    assert_eq!(r.status, Some(200));
}

fn reply_len(body: &str) -> usize {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .len()
}

#[test]
fn unreachable_allowed_host_is_a_502_recorded_as_an_error() {
    // A port nobody listens on: bind, note the port, close.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let p = start_proxy(
        &[format!("down.test:{port}"), "nxdomain.test".into()],
        &["127.0.0.1"],
        ScriptedResolver::new(&[("down.test", &["127.0.0.1"])]),
    );
    let reply = p.connect(&format!("down.test:{port}"));
    assert_eq!(reply.status, 502);
    assert!(reply.body().contains("cannot connect to down.test"));
    let r = p.record();
    assert!(r.allowed, "{r:?}");
    assert_eq!(r.rule, format!("allow down.test:{port}"));
    assert!(r.error.unwrap().contains("connecting to 127.0.0.1"));
    let reply = p.connect("nxdomain.test:443");
    assert_eq!(reply.status, 502);
    assert!(reply.body().contains("cannot resolve nxdomain.test"));
    assert!(p.record().error.unwrap().contains("cannot resolve"));
}

#[test]
fn plain_http_needs_port_80_named() {
    let p = start_proxy(
        &allow(&["web.test", "port80.test:80"]),
        &[],
        ScriptedResolver::new(&[]),
    );
    let reply = p.send(b"GET http://web.test/ HTTP/1.1\r\nHost: web.test\r\n\r\n");
    assert_eq!(reply.status, 403);
    // Plain HTTP is allowed by an entry with port 80: that is the key the answer names.
    assert_eq!(
        reply.body(),
        "StepProof: web.test is not in the network allow-list of this profile; add \"web.test:80\" to network.allow\n"
    );
    let r = p.record();
    assert!(!r.allowed);
    assert_eq!((r.host.as_str(), r.port), ("web.test", 80));
    // No resolution for a name that is not allowed.
    assert_eq!(p.resolver.calls_for("web.test"), 0);
}

#[test]
fn denied_host_gets_a_clear_403_and_a_record() {
    let p = start_proxy(
        &allow(&["api.anthropic.com", "*.example.com"]),
        &[],
        ScriptedResolver::new(&[]),
    );
    for (target, shown, add) in [
        (
            "api.evil.com:443",
            "api.evil.com",
            "add \"api.evil.com\" to network.allow",
        ),
        (
            "api.anthropic.com:8443",
            "api.anthropic.com:8443",
            "add \"api.anthropic.com:8443\" to network.allow",
        ),
        (
            "example.com:443",
            "example.com",
            "add \"example.com\" to network.allow",
        ),
        (
            "api.anthropic.com.evil.com:443",
            "api.anthropic.com.evil.com",
            "add \"api.anthropic.com.evil.com\" to network.allow",
        ),
        // A host of a preset: the preset is the key to add.
        (
            "registry.npmjs.org:443",
            "registry.npmjs.org",
            "add preset \"node\" to network.presets (or \"registry.npmjs.org\" to network.allow)",
        ),
        (
            "REGISTRY.npmjs.org:8080",
            "registry.npmjs.org:8080",
            "add \"registry.npmjs.org:8080\" to network.allow",
        ),
    ] {
        let reply = p.connect(target);
        assert_eq!(reply.status, 403, "{target}: {}", reply.head);
        assert!(
            reply.head.contains("Content-Type: text/plain"),
            "{}",
            reply.head
        );
        // The status line's reason phrase is what Go and pip print: it names the host and
        // the key; the body says the same.
        let status_line = reply.head.lines().next().unwrap_or_default();
        assert_eq!(
            status_line,
            format!("HTTP/1.1 403 StepProof refused {shown}: {add}"),
            "{target}"
        );
        let body = reply.body();
        assert_eq!(
            body,
            format!("StepProof: {shown} is not in the network allow-list of this profile; {add}\n")
        );
        let r = p.record();
        assert!(!r.allowed, "{r:?}");
        assert_eq!(r.rule, body.trim_end());
        assert_eq!(r.method, "CONNECT");
        assert_eq!(r.resolved, None);
        assert_eq!(r.status, Some(403));
    }
    assert!(p.resolver.calls.lock().unwrap().is_empty());
}

#[test]
fn loopback_behind_an_allowed_name_is_refused_unless_its_address_is_allowed() {
    let (origin, accepted) = origin("127.0.0.1:0", echo_then_bye);
    let entry = format!("api.test:{}", origin.port());
    let resolver = || {
        ScriptedResolver::new(&[
            ("api.test", &["127.0.0.1"]),
            ("meta.test", &["169.254.169.254"]),
        ])
    };
    let p = start_proxy(&[entry.clone(), "meta.test".into()], &[], resolver());
    let reply = p.connect(&entry);
    assert_eq!(reply.status, 403);
    let body = reply.body();
    assert!(
        body.contains("api.test resolves to 127.0.0.1 (loopback)"),
        "{body}"
    );
    assert!(body.contains("allow_addresses"), "{body}");
    // Where the user looks: the host's loopback is not the sandbox's, and how to reach it.
    assert!(
        body.contains("that is the host's loopback") && body.contains("NO_PROXY"),
        "{body}"
    );
    let r = p.record();
    assert!(!r.allowed);
    assert_eq!(r.resolved, Some(format!("127.0.0.1:{}", origin.port())));
    // Cloud metadata: refused before any packet is sent.
    let reply = p.connect("meta.test:443");
    assert_eq!(reply.status, 403);
    assert!(reply.body().contains("169.254.169.254 (link-local"));
    assert!(!p.record().allowed);
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        0,
        "the origin must not have been reached"
    );

    // Named in allow_addresses: reachable.
    let p = start_proxy(std::slice::from_ref(&entry), &["127.0.0.0/8"], resolver());
    let reply = p.connect(&entry);
    assert_eq!(reply.status, 200);
    reply.stream.shutdown(Shutdown::Write).unwrap();
    assert_eq!(reply.body(), "bye");
    let r = p.record();
    assert!(
        r.allowed && r.rule.contains("allow_addresses 127.0.0.0/8"),
        "{r:?}"
    );
}

/// The rebinding attack needs a second lookup between check and connect. The proxy looks up
/// once and connects to exactly the address it checked. 127.0.0.2 (named in allow_addresses)
/// stands for the harmless public answer, so nothing leaves the machine.
#[test]
fn dns_rebinding_cannot_swap_the_checked_address() {
    // Same port on two loopback addresses: a harmless one and the forbidden 127.0.0.1.
    let (forbidden, harmless) = loop {
        let a = TcpListener::bind("127.0.0.1:0").unwrap();
        if let Ok(b) = TcpListener::bind(("127.0.0.2", a.local_addr().unwrap().port())) {
            break (a, b);
        }
    };
    let port = forbidden.local_addr().unwrap().port();
    let (_, forbidden_hits) = origin_on(forbidden, |mut s| {
        let _ = s.write_all(b"forbidden");
    });
    let (_, harmless_hits) = origin_on(harmless, |mut s| {
        let _ = s.write_all(b"harmless");
    });
    let resolver = ScriptedResolver::default()
        .then("rebind.test", &["127.0.0.2"])
        .then("rebind.test", &["127.0.0.1"])
        .then("mixed.test", &["127.0.0.1", "127.0.0.2"]);
    let p = start_proxy(
        &[format!("rebind.test:{port}"), format!("mixed.test:{port}")],
        &["127.0.0.2"],
        resolver,
    );
    let reply = p.connect(&format!("rebind.test:{port}"));
    assert_eq!(reply.status, 200);
    assert_eq!(reply.body(), "harmless");
    assert_eq!(
        p.resolver.calls_for("rebind.test"),
        1,
        "exactly one lookup per request"
    );
    assert_eq!(p.record().resolved, Some(format!("127.0.0.2:{port}")));
    // The second answer (127.0.0.1) is checked like any other: refused.
    let reply = p.connect(&format!("rebind.test:{port}"));
    assert_eq!(reply.status, 403);
    assert!(!p.record().allowed);
    // A mixed answer: the forbidden address is skipped, the allowed one is used.
    let reply = p.connect(&format!("mixed.test:{port}"));
    assert_eq!(reply.status, 200);
    assert_eq!(reply.body(), "harmless");
    assert_eq!(p.record().resolved, Some(format!("127.0.0.2:{port}")));
    assert_eq!(forbidden_hits.load(Ordering::SeqCst), 0);
    assert_eq!(harmless_hits.load(Ordering::SeqCst), 2);
}

#[test]
fn ipv6_literals_need_brackets_and_an_ip_entry() {
    let Ok(listener) = TcpListener::bind("[::1]:0") else {
        support::skip_or_fail("no IPv6 loopback on this machine");
        return;
    };
    let (origin, _) = origin_on(listener, echo_then_bye);
    let port = origin.port();
    let p = start_proxy(
        &[format!("[::1]:{port}"), format!("v6.test:{port}")],
        &["::1"],
        ScriptedResolver::new(&[("v6.test", &["::1"])]),
    );
    for target in [
        format!("[::1]:{port}"),
        format!("[0:0:0:0:0:0:0:1]:{port}"),
        format!("v6.test:{port}"),
    ] {
        let reply = p.connect(&target);
        assert_eq!(reply.status, 200, "{target}: {}", reply.head);
        reply.stream.shutdown(Shutdown::Write).unwrap();
        assert_eq!(reply.body(), "bye");
        let r = p.record();
        assert_eq!(r.resolved, Some(format!("[::1]:{port}")), "{target}");
    }
    // Plain HTTP to an IPv6 literal.
    let (http_origin, _) = net::origin("[::1]:0", http_echo_head);
    let p2 = start_proxy(
        &[format!("[::1]:{}", http_origin.port())],
        &["::1"],
        ScriptedResolver::default(),
    );
    let reply =
        p2.send(format!("GET http://[::1]:{}/x HTTP/1.1\r\n\r\n", http_origin.port()).as_bytes());
    assert_eq!(reply.status, 200);
    assert!(
        reply
            .body()
            .contains(&format!("Host: [::1]:{}", http_origin.port()))
    );
    // Malformed or unlisted forms.
    for (target, status) in [
        (format!("::1:{port}"), 400),
        (format!("[::1]{port}"), 400),
        (format!("[::1:{port}"), 400),
        (format!("[fe80::1%lo]:{port}"), 400),
        (format!("[::1]:{}", port.wrapping_add(1).max(1)), 403),
        (format!("[::2]:{port}"), 403),
    ] {
        let reply = p.connect(&target);
        assert_eq!(reply.status, status, "{target}");
        assert!(!p.record().allowed);
    }
    // Allowed literal, but its address is not in allow_addresses: refused.
    let p3 = start_proxy(&[format!("[::1]:{port}")], &[], ScriptedResolver::default());
    let reply = p3.connect(&format!("[::1]:{port}"));
    assert_eq!(reply.status, 403);
    assert!(reply.body().contains("[::1] resolves to ::1 (loopback)"));
}

#[test]
fn malformed_hosts_are_refused_with_a_record() {
    let p = start_proxy(&allow(&["*.test"]), &[], ScriptedResolver::default());
    let long_label = format!("{}.test:443", "a".repeat(64));
    let long_name = format!("{}.test:443", vec!["a".repeat(60); 5].join("."));
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            b"CONNECT api.test\0x:443 HTTP/1.1\r\n\r\n".to_vec(),
            "malformed",
        ),
        (
            b"CONNECT api\x01.test:443 HTTP/1.1\r\n\r\n".to_vec(),
            "malformed",
        ),
        (b"CONNECT xn--zz.test:443 HTTP/1.1\r\n\r\n".to_vec(), "IDNA"),
        (b"CONNECT xn--zz:443 HTTP/1.1\r\n\r\n".to_vec(), "IDNA"),
        (
            format!("CONNECT {long_label} HTTP/1.1\r\n\r\n").into_bytes(),
            "longer than 63",
        ),
        (
            format!("CONNECT {long_name} HTTP/1.1\r\n\r\n").into_bytes(),
            "at most 253",
        ),
        (
            b"CONNECT a..test:443 HTTP/1.1\r\n\r\n".to_vec(),
            "empty label",
        ),
        (
            b"CONNECT api.test:443junk HTTP/1.1\r\n\r\n".to_vec(),
            "bad port",
        ),
        (
            b"CONNECT api.test HTTP/1.1\r\n\r\n".to_vec(),
            "missing port",
        ),
        (
            b"CONNECT api.test:443/x HTTP/1.1\r\n\r\n".to_vec(),
            "bad port",
        ),
        (
            b"CONNECT under_score.test:443 HTTP/1.1\r\n\r\n".to_vec(),
            "IDNA",
        ),
        (
            b"CONNECT 127.1:443 HTTP/1.1\r\n\r\n".to_vec(),
            "dotted-quad",
        ),
        (
            b"GET http://user@api.test/ HTTP/1.1\r\n\r\n".to_vec(),
            "user information",
        ),
        (
            b"GET https://api.test/ HTTP/1.1\r\n\r\n".to_vec(),
            "use CONNECT",
        ),
        (
            b"GET /index.html HTTP/1.1\r\nHost: api.test\r\n\r\n".to_vec(),
            "absolute-form",
        ),
        (b"GARBAGE\r\n\r\n".to_vec(), "malformed"),
    ];
    for (request, want) in cases {
        let shown = String::from_utf8_lossy(&request).escape_debug().to_string();
        let reply = p.send(&request);
        assert_eq!(reply.status, 400, "{shown}: {}", reply.head);
        let body = reply.body();
        assert!(
            body.starts_with("StepProof: ") && body.contains(want),
            "{shown}: {body}"
        );
        assert_eq!(body.lines().count(), 1, "{body}");
        let r = p.record();
        assert!(!r.allowed, "{shown}");
        assert!(
            r.rule.contains(want) || r.error.as_deref().is_some_and(|e| e.contains(want)),
            "{shown}: {r:?}"
        );
    }
    assert!(p.resolver.calls.lock().unwrap().is_empty());
}

#[test]
fn unicode_names_are_normalised_before_matching() {
    let (origin, _) = origin("127.0.0.1:0", echo_then_bye);
    let port = origin.port();
    let p = start_proxy(
        &[format!("bücher.test:{port}")],
        &["127.0.0.1"],
        ScriptedResolver::new(&[("xn--bcher-kva.test", &["127.0.0.1"])]),
    );
    let reply = p.send(format!("CONNECT BÜCHER.test:{port} HTTP/1.1\r\n\r\n").as_bytes());
    assert_eq!(reply.status, 200, "{}", reply.head);
    reply.stream.shutdown(Shutdown::Write).unwrap();
    assert_eq!(reply.body(), "bye");
    assert_eq!(p.record().host, "xn--bcher-kva.test");
}

#[test]
fn oversized_head_gets_431_and_silent_close_gets_a_record() {
    let p = start_proxy(&allow(&["api.test"]), &[], ScriptedResolver::default());
    let mut request = b"CONNECT api.test:443 HTTP/1.1\r\n".to_vec();
    while request.len() < 20 * 1024 {
        request.extend_from_slice(b"X-Filler: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
    }
    let reply = p.send(&request);
    assert_eq!(reply.status, 431);
    assert!(!p.record().allowed);
    let big = format!(
        "CONNECT api.test:443 HTTP/1.1\r\nX-Big: {}\r\n\r\n",
        "b".repeat(20 * 1024)
    );
    let reply = p.send(big.as_bytes());
    assert_eq!(reply.status, 431);
    assert!(reply.body().contains("larger than 16384 bytes"));
    assert!(!p.record().allowed);
    drop(p.stream());
    let r = p.record();
    assert!(!r.allowed && r.method.is_empty(), "{r:?}");
    assert!(r.error.unwrap().contains("closed"));
}

#[test]
fn large_transfer_both_ways_with_exact_byte_counts() {
    const DOWN: usize = 64 << 20;
    const UP: usize = 16 << 20;
    let (origin, _) = origin("127.0.0.1:0", |mut s| {
        // Take the whole upload, then send the download.
        let mut got = 0usize;
        let mut buf = vec![0u8; 1 << 16];
        while got < UP {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => got += n,
            }
        }
        let chunk: Vec<u8> = (0..1 << 16).map(|i| (i % 251) as u8).collect();
        for _ in 0..DOWN / chunk.len() {
            if s.write_all(&chunk).is_err() {
                return;
            }
        }
    });
    let p = start_proxy(
        &[format!("bulk.test:{}", origin.port())],
        &["127.0.0.1"],
        ScriptedResolver::new(&[("bulk.test", &["127.0.0.1"])]),
    );
    let reply = p.connect(&format!("bulk.test:{}", origin.port()));
    assert_eq!(reply.status, 200);
    let mut writer = reply.stream.try_clone().unwrap();
    let upload = std::thread::spawn(move || {
        let block = vec![7u8; 1 << 16];
        for _ in 0..UP / block.len() {
            writer.write_all(&block).unwrap();
        }
    });
    let mut reader = reply.stream;
    let mut got = 0usize;
    let mut buf = vec![0u8; 1 << 16];
    let mut checksum = 0u64;
    loop {
        let n = reader.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        for (i, b) in buf[..n].iter().enumerate() {
            assert_eq!(*b, ((got + i) % (1 << 16) % 251) as u8);
        }
        checksum += n as u64;
        got += n;
    }
    upload.join().unwrap();
    drop(reader);
    assert_eq!(got, DOWN);
    assert_eq!(checksum, DOWN as u64);
    let r = p.record();
    assert_eq!(
        (r.bytes_up, r.bytes_down),
        (UP as u64, DOWN as u64),
        "{r:?}"
    );
}

#[test]
fn many_parallel_connections_all_work() {
    const N: usize = 64;
    let (origin, _) = origin("127.0.0.1:0", echo_then_bye);
    let p = std::sync::Arc::new(start_proxy(
        &[format!("par.test:{}", origin.port())],
        &["127.0.0.1"],
        ScriptedResolver::new(&[("par.test", &["127.0.0.1"])]),
    ));
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(N));
    let threads: Vec<_> = (0..N)
        .map(|i| {
            let p = p.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let mut reply = p.connect(&format!("par.test:{}", origin.port()));
                assert_eq!(reply.status, 200);
                // All tunnels open at once before any finishes.
                barrier.wait();
                let msg = format!("hello {i}");
                reply.stream.write_all(msg.as_bytes()).unwrap();
                reply.stream.shutdown(Shutdown::Write).unwrap();
                assert_eq!(reply.body(), format!("{msg}bye"));
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let records: Vec<_> = (0..N).map(|_| p.record()).collect();
    assert!(
        records.iter().all(|r| r.allowed && r.error.is_none()),
        "{records:?}"
    );
}

#[test]
fn connections_over_the_cap_get_503() {
    let p = start_proxy(&allow(&["api.test"]), &[], ScriptedResolver::default());
    // Fill every slot with a client that has not sent its head yet.
    let idle: Vec<TcpStream> = (0..stepproof::http::server::MAX_CONNECTIONS)
        .map(|_| p.stream())
        .collect();
    // Give the proxy time to take them all in.
    let mut status = 0;
    for _ in 0..100 {
        std::thread::sleep(Duration::from_millis(50));
        let reply = p.connect("api.test:443");
        status = reply.status;
        if status == 503 {
            assert!(reply.body().contains("already serving"));
            break;
        }
    }
    assert_eq!(status, 503);
    drop(idle);
    let records = p.finish();
    assert!(records.iter().any(|r| r.rule.contains("already serving")));
}

#[test]
fn every_attempt_leaves_exactly_one_record() {
    let (origin, _) = origin("127.0.0.1:0", echo_then_bye);
    let port = origin.port();
    let p = start_proxy(
        &[format!("ok.test:{port}"), format!("lo.test:{port}")],
        &["127.0.0.1"],
        ScriptedResolver::new(&[("ok.test", &["127.0.0.1"]), ("lo.test", &["127.0.0.3"])]),
    );
    let mut attempts = 0;
    let mut open = Vec::new();
    for target in [
        format!("ok.test:{port}"),
        "no.test:443".into(),
        format!("lo.test:{port}"),
        "bad\x01:1".into(),
    ] {
        let reply = p.connect(&target);
        attempts += 1;
        open.push(reply.stream);
    }
    drop(p.stream()); // closes without a request
    attempts += 1;
    let mut s = p.stream();
    s.write_all(b"CONNECT ok.te").unwrap(); // half a head, then the proxy shuts down
    attempts += 1;
    std::thread::sleep(Duration::from_millis(200));
    // One more right before shutdown: served or still queued, it is answered and recorded.
    let _late = p.stream();
    attempts += 1;
    // Shutdown ends the tunnel still open and returns after every record was sent.
    let records = p.finish();
    assert_eq!(records.len(), attempts, "{records:#?}");
    assert_eq!(records.iter().filter(|r| r.allowed).count(), 1);
    drop(open);
}

// ───────────────────────── credential gateway ─────────────────────────

mod gateway {
    use super::net::*;
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpListener;
    use std::os::unix::net::{UnixListener, UnixStream};
    use std::sync::mpsc::{Receiver, Sender, channel};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;
    use stepproof::supervisor::net::gateway::{self, Credential, GatewayHandle, Upstream};
    use stepproof::supervisor::net::login::ModelLogin;
    use stepproof::supervisor::net::proxy::ConnectionRecord;

    /// What the TLS origin saw: one entry per request (connection number, head, body).
    type Seen = Arc<Mutex<Vec<(usize, String, Vec<u8>)>>>;

    struct Origin {
        addr: std::net::SocketAddr,
        seen: Seen,
        /// Each message lets the streaming endpoint send its next event.
        go: Sender<()>,
        ca: rustls::pki_types::CertificateDer<'static>,
    }

    /// A TLS origin for `api.test` on loopback. `POST /v1/messages?stream=1` answers with
    /// chunked server-sent events, one per message on `go`; anything else with a
    /// Content-Length body.
    fn tls_origin() -> Origin {
        let pki = test_pki("api.test");
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let seen: Seen = Arc::default();
        let (go, go_rx) = channel::<()>();
        let go_rx = Arc::new(Mutex::new(go_rx));
        let server = pki.server.clone();
        let seen2 = seen.clone();
        std::thread::spawn(move || {
            for (conn_no, tcp) in listener.incoming().flatten().enumerate() {
                let server = server.clone();
                let seen = seen2.clone();
                let go_rx = go_rx.clone();
                std::thread::spawn(move || {
                    let conn = rustls::ServerConnection::new(server).unwrap();
                    let tls = rustls::StreamOwned::new(conn, tcp);
                    let mut reader = BufReader::new(tls);
                    serve_tls(conn_no, &mut reader, &seen, &go_rx);
                });
            }
        });
        Origin {
            addr,
            seen,
            go,
            ca: pki.ca_der,
        }
    }

    fn serve_tls(
        conn_no: usize,
        reader: &mut BufReader<rustls::StreamOwned<rustls::ServerConnection, std::net::TcpStream>>,
        seen: &Seen,
        go: &Mutex<Receiver<()>>,
    ) {
        loop {
            let mut head = String::new();
            loop {
                let mut line = String::new();
                match reader.read_line(&mut line) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
                head.push_str(&line);
                if line == "\r\n" {
                    break;
                }
            }
            let lower = head.to_ascii_lowercase();
            let body = if let Some(len) = lower
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
            {
                let mut body = vec![0u8; len.trim().parse().unwrap()];
                reader.read_exact(&mut body).unwrap();
                body
            } else if lower.contains("transfer-encoding: chunked") {
                let mut body = Vec::new();
                loop {
                    let mut size = String::new();
                    reader.read_line(&mut size).unwrap();
                    let n = usize::from_str_radix(size.trim(), 16).unwrap();
                    let mut chunk = vec![0u8; n + 2];
                    reader.read_exact(&mut chunk).unwrap();
                    if n == 0 {
                        break;
                    }
                    body.extend_from_slice(&chunk[..n]);
                }
                body
            } else {
                Vec::new()
            };
            seen.lock()
                .unwrap()
                .push((conn_no, head.clone(), body.clone()));
            let out = reader.get_mut();
            if head.starts_with("POST /v1/messages?stream=1 ") {
                out.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
                    .unwrap();
                out.flush().unwrap();
                for i in 0..3 {
                    go.lock()
                        .unwrap()
                        .recv_timeout(Duration::from_secs(30))
                        .unwrap();
                    let event = format!("event: delta\ndata: {{\"n\":{i}}}\n\n");
                    out.write_all(format!("{:x}\r\n{event}\r\n", event.len()).as_bytes())
                        .unwrap();
                    out.flush().unwrap();
                }
                out.write_all(b"0\r\n\r\n").unwrap();
                out.flush().unwrap();
            } else {
                let reply = format!("ok {} bytes", body.len());
                out.write_all(
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{reply}",
                        reply.len()
                    )
                    .as_bytes(),
                )
                .unwrap();
                out.flush().unwrap();
            }
        }
    }

    struct Gateway {
        path: std::path::PathBuf,
        /// The header a request from inside carries: this run's placeholder.
        placeholder: String,
        _dir: tempfile::TempDir,
        handle: Option<GatewayHandle>,
        records: Receiver<ConnectionRecord>,
    }

    fn start_gateway(
        origin: &Origin,
        ca: &rustls::pki_types::CertificateDer<'static>,
        credential: Credential,
    ) -> Gateway {
        start_gateway_with(origin, ca, credential, &[])
    }

    /// The same, with paths a profile adds (`network.gateway.login_paths`).
    fn start_gateway_with(
        origin: &Origin,
        ca: &rustls::pki_types::CertificateDer<'static>,
        credential: Credential,
        login_paths: &[&str],
    ) -> Gateway {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("api.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca.clone()).unwrap();
        let upstream = Upstream {
            host: "api.test".into(),
            port: origin.addr.port(),
            tls: Some(stepproof::http::tls::client_config(roots).unwrap()),
            connect_addr: Some(origin.addr),
            path_prefix: String::new(),
            login_paths: login_paths
                .iter()
                .map(|p| stepproof::profile::LoginPath::parse(p).unwrap())
                .collect(),
        };
        let (tx, rx) = channel();
        let login = ModelLogin::fixed(credential);
        let placeholder = String::from_utf8(login.placeholder().header_line().unwrap()).unwrap();
        let handle = gateway::serve_gateway(listener, upstream, Arc::new(login), None, tx);
        Gateway {
            path,
            placeholder,
            _dir: dir,
            handle: Some(handle),
            records: rx,
        }
    }

    impl Gateway {
        fn client(&self) -> UnixStream {
            let s = UnixStream::connect(&self.path).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            s
        }
        fn record(&self) -> ConnectionRecord {
            self.records.recv_timeout(Duration::from_secs(30)).unwrap()
        }
        fn finish(mut self) -> Vec<ConnectionRecord> {
            self.handle.take().unwrap().shutdown();
            self.records.try_iter().collect()
        }
    }

    /// Reads a Content-Length response; returns (head, body).
    fn read_response(s: &mut UnixStream) -> (String, String) {
        let (_, head) = read_head(s);
        let len: usize = head
            .to_ascii_lowercase()
            .lines()
            .find_map(|l| {
                l.strip_prefix("content-length: ")
                    .map(|v| v.trim().parse().unwrap())
            })
            .unwrap_or(0);
        let mut body = vec![0u8; len];
        s.read_exact(&mut body).unwrap();
        (head, String::from_utf8(body).unwrap())
    }

    #[test]
    fn api_key_is_injected_and_placeholder_removed_over_keep_alive() {
        let origin = tls_origin();
        let g = start_gateway(
            &origin,
            &origin.ca,
            Credential::ApiKey("sk-real-secret".into()),
        );
        let mut c = g.client();
        let body = r#"{"model":"m","messages":[]}"#;
        for _ in 0..2 {
            c.write_all(
                format!(
                    "POST /v1/messages?beta=true HTTP/1.1\r\nHost: localhost\r\n{}content-type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                    g.placeholder,
                    body.len()
                )
                .as_bytes(),
            )
            .unwrap();
            let (head, reply) = read_response(&mut c);
            assert!(head.starts_with("HTTP/1.1 200"), "{head}");
            assert_eq!(reply, format!("ok {} bytes", body.len()));
        }
        // A chunked request body on the same connection.
        c.write_all(format!("POST /v1/messages/count_tokens HTTP/1.1\r\nHost: localhost\r\n{}Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", g.placeholder).as_bytes())
            .unwrap();
        let (_, reply) = read_response(&mut c);
        assert_eq!(reply, "ok 11 bytes");
        let seen = origin.seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 3);
        for (conn, head, _) in &seen {
            assert_eq!(*conn, 0, "keep-alive: one upstream connection\n{head}");
            let lower = head.to_ascii_lowercase();
            assert!(lower.contains("x-api-key: sk-real-secret\r\n"), "{head}");
            assert!(!lower.contains("placeholder"), "{head}");
            assert!(!lower.contains("authorization"), "{head}");
            assert_eq!(lower.matches("x-api-key").count(), 1, "{head}");
            assert!(
                head.contains(&format!("Host: api.test:{}\r\n", origin.addr.port())),
                "{head}"
            );
            assert!(!head.contains("localhost"), "{head}");
        }
        assert!(
            seen[0]
                .1
                .starts_with("POST /v1/messages?beta=true HTTP/1.1\r\n")
        );
        assert_eq!(seen[0].2, body.as_bytes());
        assert_eq!(seen[2].2, b"hello world");
        let r = g.record();
        assert!(r.allowed && r.error.is_none(), "{r:?}");
        // The record says the real login went out (by name).
        assert_eq!(r.credential.as_deref(), Some("model-login"), "{r:?}");
        assert_eq!(
            (
                r.method.as_str(),
                r.path.as_deref(),
                r.query_sha256.as_deref()
            ),
            (
                "POST",
                Some("/v1/messages"),
                Some("sha256:4ea1291d832654363528e6cc0965f896d50dca53420f1e564b3139cafe1c4b26")
            )
        );
        assert_eq!(r.resolved, Some(origin.addr.to_string()));
        drop(c);
        assert_eq!(g.finish().len(), 2);
    }

    #[test]
    fn oauth_token_replaces_client_authorization() {
        let origin = tls_origin();
        let g = start_gateway(&origin, &origin.ca, Credential::Bearer("oauth-real".into()));
        let mut c = g.client();
        c.write_all(
            format!(
                "GET /v1/models HTTP/1.1\r\nHost: localhost\r\n{}Connection: close\r\n\r\n",
                g.placeholder
            )
            .as_bytes(),
        )
        .unwrap();
        let (head, _) = read_response(&mut c);
        assert!(head.starts_with("HTTP/1.1 200"));
        let seen = origin.seen.lock().unwrap().clone();
        let head = &seen[0].1;
        assert!(
            head.contains("Authorization: Bearer oauth-real\r\n"),
            "{head}"
        );
        assert!(!head.contains("placeholder"), "{head}");
        assert!(!head.to_ascii_lowercase().contains("x-api-key"), "{head}");
        // Connection: close from the client: the gateway closes after the response.
        let mut rest = Vec::new();
        assert_eq!(c.read_to_end(&mut rest).unwrap(), 0);
    }

    /// Only this run's placeholder is let through: no credential, a real-looking one, another
    /// run's placeholder or a bearer beside the key are refused before anything goes upstream.
    #[test]
    fn a_request_without_this_runs_placeholder_is_refused() {
        let origin = tls_origin();
        let g = start_gateway(&origin, &origin.ca, Credential::ApiKey("sk-real".into()));
        let other = ModelLogin::fixed(Credential::ApiKey("sk-real".into()));
        let other = String::from_utf8(other.placeholder().header_line().unwrap()).unwrap();
        for extra in [
            String::new(),
            "x-api-key: sk-ant-api03-guess\r\n".to_owned(),
            other,
            format!("{}Authorization: Bearer sk-ant-oat01-x\r\n", g.placeholder),
        ] {
            let mut c = g.client();
            c.write_all(
                format!("GET /v1/models HTTP/1.1\r\nHost: localhost\r\n{extra}\r\n").as_bytes(),
            )
            .unwrap();
            let (head, body) = read_response(&mut c);
            assert!(head.starts_with("HTTP/1.1 403"), "{extra:?}: {head}");
            assert!(body.contains("placeholder"), "{body}");
            let r = g.record();
            assert!(
                r.error.as_deref().is_some_and(|e| e.contains("refused"))
                    && r.rule.contains("no placeholder"),
                "{r:?}"
            );
        }
        assert!(origin.seen.lock().unwrap().is_empty());
    }

    /// The login is the key to the account too: only the model API's paths (and those a
    /// profile adds) get it. An account path, a path spelt to be read as another one upstream,
    /// an absolute-form target that is not plain: 403 with what to do, a record that says why,
    /// nothing sent upstream.
    #[test]
    fn only_the_model_api_gets_the_login() {
        let origin = tls_origin();
        let g = start_gateway_with(
            &origin,
            &origin.ca,
            Credential::Bearer("oauth-real".into()),
            &["GET /api/oauth/usage"],
        );
        for (request, why) in [
            (
                "POST /api/oauth/claude_cli/create_api_key",
                "is not a model API path",
            ),
            ("GET /api/oauth/profile", "is not a model API path"),
            ("POST /api/oauth/usage", "is not a model API path"),
            ("GET /api/claude_code/settings", "is not a model API path"),
            ("POST /v1/files", "is not a model API path"),
            ("GET /v1/messages", "is not a model API path"),
            ("POST /V1/MESSAGES", "is not a model API path"),
            ("post /v1/messages", "is not a model API path"),
            (
                "POST /api/oauth/claude_cli/create_api_key?x=/v1/messages",
                "is not a model API path",
            ),
            ("POST //v1/messages", "is not spelt plainly"),
            ("POST /v1/messages/", "is not spelt plainly"),
            (
                "POST /v1/messages/../../api/oauth/claude_cli/create_api_key",
                "is not spelt plainly",
            ),
            (
                "POST /v1/messages/%2e%2e/%2e%2e/api/oauth/profile",
                "is not spelt plainly",
            ),
            ("POST /v1/messages;x", "is not spelt plainly"),
            (
                "POST http://localhost/api/oauth/claude_cli/create_api_key",
                "is not a model API path",
            ),
            ("POST http://localhost//v1/messages", "is not spelt plainly"),
        ] {
            let mut c = g.client();
            c.write_all(
                format!(
                    "{request} HTTP/1.1\r\nHost: localhost\r\n{}Content-Length: 2\r\n\r\n{{}}",
                    g.placeholder
                )
                .as_bytes(),
            )
            .unwrap();
            let (head, body) = read_response(&mut c);
            assert!(head.starts_with("HTTP/1.1 403"), "{request}: {head}");
            assert!(
                body.starts_with("StepProof gateway: ")
                    && body.contains(why)
                    && body.contains("the real login is used only for the model API"),
                "{request}: {body}"
            );
            if why.contains("model API path") {
                assert!(
                    body.contains("network.gateway.login_paths in a profile outside the workspace"),
                    "{body}"
                );
            }
            let r = g.record();
            assert!(
                !r.allowed && r.credential.is_none() && r.rule.contains("refused"),
                "{request}: {r:?}"
            );
            assert!(r.error.as_deref().is_some_and(|e| e.contains(why)), "{r:?}");
        }
        // Absolute-form targets that are not plain are refused before they are judged.
        for target in [
            "http://user@localhost/v1/messages",
            "http://localhost?/v1/messages",
            "https://localhost/v1/messages",
        ] {
            let mut c = g.client();
            c.write_all(
                format!(
                    "POST {target} HTTP/1.1\r\nHost: localhost\r\n{}Content-Length: 2\r\n\r\n{{}}",
                    g.placeholder
                )
                .as_bytes(),
            )
            .unwrap();
            let (head, _) = read_response(&mut c);
            assert!(head.starts_with("HTTP/1.1 400"), "{target}: {head}");
            assert!(g.record().credential.is_none());
        }
        assert!(
            origin.seen.lock().unwrap().is_empty(),
            "a refused request reached the upstream"
        );
        // The model API, also as an absolute-form target, and the path the profile adds.
        let mut c = g.client();
        let mut rules = Vec::new();
        for request in [
            "POST http://localhost/v1/messages?beta=true",
            "GET /api/oauth/usage",
        ] {
            c.write_all(
                format!(
                    "{request} HTTP/1.1\r\nHost: localhost\r\n{}Content-Length: 2\r\n\r\n{{}}",
                    g.placeholder
                )
                .as_bytes(),
            )
            .unwrap();
            let (head, _) = read_response(&mut c);
            assert!(head.starts_with("HTTP/1.1 200"), "{request}: {head}");
            let r = g.record();
            assert_eq!(r.credential.as_deref(), Some("model-login"), "{r:?}");
            rules.push(r.rule);
        }
        assert_eq!(
            rules,
            [
                "credential gateway",
                "credential gateway (network.gateway.login_paths: GET /api/oauth/usage)"
            ]
        );
        let seen = origin.seen.lock().unwrap().clone();
        assert!(
            seen[0]
                .1
                .starts_with("POST /v1/messages?beta=true HTTP/1.1\r\n")
        );
        assert!(seen[1].1.starts_with("GET /api/oauth/usage HTTP/1.1\r\n"));
        assert!(seen[1].1.contains("Authorization: Bearer oauth-real\r\n"));
        drop(c);
        assert!(g.finish().is_empty());
    }

    #[test]
    fn streamed_response_arrives_incrementally() {
        let origin = tls_origin();
        let g = start_gateway(&origin, &origin.ca, Credential::ApiKey("k".into()));
        let mut c = g.client();
        c.write_all(
            format!(
                "POST /v1/messages?stream=1 HTTP/1.1\r\nHost: localhost\r\n{}Content-Length: 2\r\n\r\n{{}}",
                g.placeholder
            )
            .as_bytes(),
        )
        .unwrap();
        let (status, head) = read_head(&mut c);
        assert_eq!(status, 200, "{head}");
        assert!(head.contains("Transfer-Encoding: chunked"));
        let mut reader = BufReader::new(c.try_clone().unwrap());
        for i in 0..3 {
            // The origin sends event i only now: if the gateway buffered, this would hang.
            origin.go.send(()).unwrap();
            let mut size = String::new();
            reader.read_line(&mut size).unwrap();
            let n = usize::from_str_radix(size.trim(), 16).unwrap();
            let mut chunk = vec![0u8; n + 2];
            reader.read_exact(&mut chunk).unwrap();
            let text = String::from_utf8_lossy(&chunk);
            assert!(text.contains(&format!("\"n\":{i}")), "{text}");
        }
        let mut last = String::new();
        reader.read_line(&mut last).unwrap();
        assert_eq!(last, "0\r\n");
        reader.read_line(&mut last).unwrap();
        let r = g.record();
        assert!(r.allowed && r.error.is_none(), "{r:?}");
        assert!(r.bytes_down > 100);
        // The connection is still usable afterwards.
        c.write_all(
            format!(
                "GET /v1/models HTTP/1.1\r\nHost: localhost\r\n{}\r\n",
                g.placeholder
            )
            .as_bytes(),
        )
        .unwrap();
        let (head, body) = read_response(&mut c);
        assert!(head.starts_with("HTTP/1.1 200") && body == "ok 0 bytes");
    }

    #[test]
    fn untrusted_certificate_is_refused() {
        let origin = tls_origin();
        let other = test_pki("api.test");
        let g = start_gateway(
            &origin,
            &other.ca_der,
            Credential::ApiKey("sk-real-secret".into()),
        );
        let mut c = g.client();
        c.write_all(
            format!(
                "GET /v1/models HTTP/1.1\r\nHost: localhost\r\n{}\r\n",
                g.placeholder
            )
            .as_bytes(),
        )
        .unwrap();
        let (head, body) = read_response(&mut c);
        assert!(head.starts_with("HTTP/1.1 502"), "{head}");
        assert!(body.contains("TLS handshake"), "{body}");
        let r = g.record();
        assert!(r.error.unwrap().contains("TLS handshake"));
        assert!(
            origin.seen.lock().unwrap().is_empty(),
            "the key must not reach an untrusted server"
        );
    }

    #[test]
    fn a_credential_with_a_line_break_is_never_sent() {
        let origin = tls_origin();
        let g = start_gateway(
            &origin,
            &origin.ca,
            Credential::ApiKey("k\r\nX-Injected: 1".into()),
        );
        let mut c = g.client();
        c.write_all(
            format!(
                "GET /v1/models HTTP/1.1\r\nHost: localhost\r\n{}\r\n",
                g.placeholder
            )
            .as_bytes(),
        )
        .unwrap();
        let (head, _) = read_response(&mut c);
        assert!(head.starts_with("HTTP/1.1 500"), "{head}");
        assert!(g.record().error.is_some());
        assert!(origin.seen.lock().unwrap().is_empty());
    }

    #[test]
    fn smuggling_shapes_are_refused() {
        let origin = tls_origin();
        let g = start_gateway(&origin, &origin.ca, Credential::ApiKey("k".into()));
        for request in [
            &b"POST /x HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"[..],
            b"POST /x HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
            b"POST /x HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
            b"POST /x HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
        ] {
            let mut c = g.client();
            c.write_all(request).unwrap();
            let (head, _) = read_response(&mut c);
            assert!(head.starts_with("HTTP/1.1 400"), "{head}");
            assert!(g.record().error.is_some());
        }
        assert!(origin.seen.lock().unwrap().is_empty());
    }
}
