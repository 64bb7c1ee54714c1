//! Tests of the credential gateway: requests forwarded with the real credential, answers relayed, server-managed settings served.

use super::*;
use crate::sandbox::plan::agent_layer::{managed_settings, managed_settings_problems};
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::sync::mpsc::channel;

/// A plain-HTTP upstream that answers every request with `response` and hands each
/// request's head to the test.
fn upstream(response: &'static [u8]) -> (SocketAddr, std::sync::mpsc::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for tcp in listener.incoming().flatten() {
            let mut reader = BufReader::new(tcp.try_clone().unwrap());
            let mut head = String::new();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                head.push_str(&line);
            }
            let _ = tx.send(head);
            let _ = (&tcp).write_all(response);
        }
    });
    (addr, rx)
}

/// One GET of the settings endpoint through a gateway in front of `response`: the request
/// the upstream saw, the answer the client got, and the gateway's record.
fn through_gateway(response: &'static [u8], strict: bool) -> (String, String, ConnectionRecord) {
    let (addr, heads) = upstream(response);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("api.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let login = ModelLogin::fixed(Credential::ApiKey("sk-real".into()));
    let placeholder = String::from_utf8(login.placeholder().header_line().unwrap()).unwrap();
    let (tx, records) = channel();
    let ours = managed_settings(
        &serde_json::Map::new(),
        &[("PATH".into(), "/bin".into())],
        false,
        false,
    );
    let handle = serve_gateway(
        listener,
        Upstream {
            host: "api.test".into(),
            port: addr.port(),
            tls: None,
            connect_addr: Some(addr),
            path_prefix: String::new(),
            login_paths: Vec::new(),
        },
        Arc::new(login),
        Some(ServerSettingsMerge { ours, strict }),
        tx,
    );
    let mut client = UnixStream::connect(&path).unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    write!(
        client,
        "GET /api/claude_code/settings HTTP/1.1\r\nHost: localhost\r\n{placeholder}If-None-Match: \"abc\"\r\nAccept-Encoding: gzip, br\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    client.read_to_string(&mut answer).unwrap();
    let record = records.recv_timeout(Duration::from_secs(20)).unwrap();
    handle.shutdown();
    let head = heads.recv_timeout(Duration::from_secs(5)).unwrap();
    (head, answer, record)
}

const SERVER: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nx-claude-code-signature: sig\r\nETag: \"e\"\r\nTransfer-Encoding: chunked\r\n\r\n82\r\n{\"uuid\":\"u\",\"checksum\":\"c\",\"settings\":{\"disableAllHooks\":true,\"hooks\":{},\"permissions\":{\"deny\":[\"Bash(git push:*)\"]},\"model\":\"m\"}}\r\n0\r\n\r\n";

#[test]
fn server_settings_are_answered_with_stepproofs_laid_over() {
    let (head, answer, record) = through_gateway(SERVER, false);
    // Sent without what would bring a cached or encoded answer, with the real credential.
    let lower = head.to_ascii_lowercase();
    assert!(
        lower.starts_with("get /api/claude_code/settings http/1.1"),
        "{head}"
    );
    assert!(!lower.contains("if-none-match"), "{head}");
    assert!(
        lower.contains("accept-encoding: identity\r\n") && !lower.contains("gzip"),
        "{head}"
    );
    assert!(head.contains("x-api-key: sk-real"), "{head}");
    assert!(!record.credential_echoed, "{record:?}");
    let (answer_head, body) = answer.split_once("\r\n\r\n").unwrap();
    let answer_lower = answer_head.to_ascii_lowercase();
    assert!(answer_lower.starts_with("http/1.1 200 ok"), "{answer}");
    assert!(
        answer_lower.contains("content-type: application/json"),
        "{answer}"
    );
    assert!(
        answer_lower.contains(&format!("content-length: {}", body.len())),
        "{answer}"
    );
    for gone in ["x-claude-code-signature", "etag", "transfer-encoding"] {
        assert!(!answer_lower.contains(gone), "{gone}: {answer}");
    }
    let json: serde_json::Value = serde_json::from_str(body).unwrap();
    let settings = &json["settings"];
    assert_eq!(json["uuid"], "u");
    assert_eq!(settings["model"], "m");
    assert_eq!(
        settings["permissions"]["deny"],
        serde_json::json!(["Bash(git push:*)"])
    );
    assert_eq!(
        managed_settings_problems(settings, false),
        Vec::<String>::new()
    );
    assert!(settings.get("disableAllHooks").is_none(), "{settings}");
    assert!(
        record.rule.contains("disableAllHooks") && record.rule.contains("hooks"),
        "{record:?}"
    );
    assert_eq!(record.path.as_deref(), Some("/api/claude_code/settings"));
}

#[test]
fn strict_refuses_and_other_answers_pass_as_they_are() {
    let (_, answer, record) = through_gateway(SERVER, true);
    assert!(answer.starts_with("HTTP/1.1 502"), "{answer}");
    assert!(!answer.contains("disableAllHooks\":true"), "{answer}");
    assert!(
        record.error.as_deref().unwrap_or("").contains("strict"),
        "{record:?}"
    );
    assert!(record.rule.contains("refused"), "{record:?}");

    let (_, answer, _) = through_gateway(
        b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot found",
        false,
    );
    assert!(answer.starts_with("HTTP/1.1 404 Not Found\r\n"), "{answer}");
    assert!(answer.ends_with("\r\n\r\nnot found"), "{answer}");

    // A 304 would send Claude Code to its cache: never passed on.
    let (_, answer, _) = through_gateway(b"HTTP/1.1 304 Not Modified\r\n\r\n", false);
    assert!(answer.starts_with("HTTP/1.1 502"), "{answer}");

    // A forwarded answer that quotes the login: relayed as it is, and flagged.
    let (_, answer, record) = through_gateway(
        b"HTTP/1.1 404 Not Found\r\nContent-Length: 22\r\n\r\nno such key: sk-real !",
        false,
    );
    assert!(answer.ends_with("no such key: sk-real !"), "{answer}");
    assert!(record.credential_echoed, "{record:?}");
    assert!(!serde_json::to_string(&record).unwrap().contains("sk-real"));
}

/// The login the echo tests send: long enough to be unlikely anywhere by chance, with a `/`
/// so that a JSON encoder that escapes slashes writes it differently.
const ECHOED_LOGIN: &str = "sk-ant-oat01-REAL/echo+test-7d1f09c2";

/// A plain-HTTP upstream standing in for the model API, serving requests on each connection
/// until it closes. It answers with server-sent events in 5-byte chunks (so the login, when
/// it is in them, is split across chunks); by the request's path: `/echo` sends the request
/// head back as a JSON string with `/` escaped (as a service that echoes its request
/// would), `/gzip` answers with an encoded body, `/unauthorized-echo` is a 401 that quotes
/// the request head, anything else is one `ok` event (each as the query of
/// `/v1/messages`, the path the gateway adds the login to).
fn echoing_upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for tcp in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut reader = BufReader::new(tcp.try_clone().unwrap());
                loop {
                    let mut head = String::new();
                    loop {
                        let mut line = String::new();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        head.push_str(&line);
                        if line == "\r\n" {
                            break;
                        }
                    }
                    let length = head
                        .to_ascii_lowercase()
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:")?.trim().parse().ok())
                        .unwrap_or(0usize);
                    let mut body = vec![0u8; length];
                    if reader.read_exact(&mut body).is_err() {
                        return;
                    }
                    let target = head.split(' ').nth(1).unwrap_or_default();
                    let path = format!("/{}", target.split_once('?').map_or("", |(_, q)| q));
                    let echoed = serde_json::to_string(&head).unwrap().replace('/', "\\/");
                    let answer: Vec<u8> = match path.as_str() {
                        "/gzip" => b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\nContent-Length: 4\r\n\r\n\x1f\x8b\x08\x00".to_vec(),
                        "/unauthorized-echo" => format!(
                            "HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{echoed}",
                            echoed.len()
                        )
                        .into_bytes(),
                        _ => {
                            let events = if path == "/echo" {
                                format!("event: echo\ndata: {{\"head\":{echoed}}}\n\n")
                            } else {
                                "event: message\ndata: ok\n\n".to_owned()
                            };
                            let mut answer = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
                            for chunk in events.as_bytes().chunks(5) {
                                answer.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
                                answer.extend_from_slice(chunk);
                                answer.extend_from_slice(b"\r\n");
                            }
                            answer.extend_from_slice(b"0\r\n\r\n");
                            answer
                        }
                    };
                    if (&tcp).write_all(&answer).is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// Requests through a gateway (no server settings) in front of [`echoing_upstream`], with
/// `login` as the real credential, on one keep-alive connection: each answer as the client
/// got it, and each record.
fn through_echoing_gateway(login: Credential, paths: &[&str]) -> Vec<(String, ConnectionRecord)> {
    let addr = echoing_upstream();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("api.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let login = ModelLogin::fixed(login);
    let placeholder = String::from_utf8(login.placeholder().header_line().unwrap()).unwrap();
    let (tx, records) = channel();
    let handle = serve_gateway(
        listener,
        Upstream {
            host: "api.test".into(),
            port: addr.port(),
            tls: None,
            connect_addr: Some(addr),
            path_prefix: String::new(),
            login_paths: Vec::new(),
        },
        Arc::new(login),
        None,
        tx,
    );
    let client = UnixStream::connect(&path).unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut input = Input::new(&client);
    let mut out = Vec::new();
    for path in paths {
        let body = r#"{"model":"m","stream":true}"#;
        write!(
            &client,
            "POST {path} HTTP/1.1\r\nHost: localhost\r\n{placeholder}Accept-Encoding: gzip, br\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut answer = Vec::new();
        let keep = http::relay_response(
            "POST",
            &mut input,
            &mut answer,
            &mut 0,
            &mut None,
            &mut EchoScan::default(),
        )
        .unwrap();
        assert!(keep, "{}", String::from_utf8_lossy(&answer));
        let record = records.recv_timeout(Duration::from_secs(20)).unwrap();
        out.push((String::from_utf8_lossy(&answer).into_owned(), record));
    }
    drop(input);
    drop(client);
    handle.shutdown();
    out
}

/// The payload of a chunked answer (whose chunks hold no line breaks).
fn payload_of(answer: &str) -> String {
    answer
        .split("\r\n")
        .skip_while(|l| !l.is_empty())
        .skip(1)
        .collect::<Vec<_>>()
        .chunks(2)
        .filter_map(|c| c.get(1).copied())
        .collect()
}

#[test]
fn an_answer_that_echoes_the_login_is_flagged_and_the_record_never_holds_it() {
    let escaped = ECHOED_LOGIN.replace('/', "\\/");
    let answers = through_echoing_gateway(
        Credential::Bearer(ECHOED_LOGIN.into()),
        &[
            "/v1/messages?echo",
            "/v1/messages",
            "/v1/messages?gzip",
            "/v1/messages?unauthorized-echo",
        ],
    );
    // The echo: streamed through as it came (chunked events), the login in it with `/`
    // escaped; the request went out asking for no encoding.
    let (answer, record) = &answers[0];
    assert!(
        answer.starts_with("HTTP/1.1 200 OK\r\n")
            && answer.contains("text/event-stream")
            && answer.ends_with("\r\n0\r\n\r\n"),
        "{answer}"
    );
    let payload = payload_of(answer);
    assert!(payload.contains(&format!("Bearer {escaped}")), "{payload}");
    assert!(!payload.contains(ECHOED_LOGIN), "{payload}");
    assert!(
        payload.contains("Accept-Encoding: identity") && !payload.contains("gzip"),
        "{payload}"
    );
    assert_eq!(
        (
            record.credential.as_deref(),
            record.credential_echoed,
            record.credential_echo_unchecked.as_deref(),
            record.status
        ),
        (Some("model-login"), true, None, Some(200)),
        "{record:?}"
    );
    // The control: the same login, an answer without it.
    let (answer, record) = &answers[1];
    assert!(payload_of(answer).contains("data: ok"), "{answer}");
    assert!(
        record.credential.is_some()
            && !record.credential_echoed
            && record.credential_echo_unchecked.is_none(),
        "{record:?}"
    );
    // An encoded answer, although the request asked for none: said to be unchecked.
    let (_, record) = &answers[2];
    assert!(!record.credential_echoed, "{record:?}");
    assert_eq!(
        record.credential_echo_unchecked.as_deref(),
        Some("content-encoding gzip")
    );
    // A 401 relayed without a refresh (a fixed login): searched as well.
    let (answer, record) = &answers[3];
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    assert!(answer.contains(&escaped), "{answer}");
    assert!(
        record.credential_echoed && record.status == Some(401),
        "{record:?}"
    );
    // Whatever the records say, they never hold the login, in any spelling.
    let json = serde_json::to_string(&answers.iter().map(|(_, r)| r).collect::<Vec<_>>()).unwrap();
    for spelling in [ECHOED_LOGIN, &escaped, "REAL"] {
        assert!(!json.contains(spelling), "{json}");
    }
    assert!(json.contains("\"credential_echoed\":true"), "{json}");
    // An API key the same way.
    let answers = through_echoing_gateway(
        Credential::ApiKey(ECHOED_LOGIN.into()),
        &["/v1/messages?echo"],
    );
    assert!(answers[0].1.credential_echoed, "{:?}", answers[0].1);
}
