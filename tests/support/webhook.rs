//! An approval webhook stand-in: one HTTPS server on 127.0.0.1 (an ephemeral port), with a test
//! CA that `stepproof-run` trusts through its caller's `STEPPROOF_TEST_ONWARD_CA`. It takes the
//! supervisor's signed requests (`POST /hook`, checked with the key), and answers each poll
//! (`GET /hook/<nonce>`) as the test's [`Policy`] says: pending, or a body with a signature —
//! a real answer, a deny, one signed with another key, or an earlier answer replayed. Every
//! request is logged.
#![allow(dead_code)]

use serde_json::{Value, json};
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the stand-in answers a poll with.
pub enum Reply {
    Pending,
    /// 200 with this body and this `X-StepProof-Signature`.
    Answer {
        body: Vec<u8>,
        signature: String,
    },
}

/// Decides a poll's reply: the request it is about, its index among the requests received,
/// and the answers given so far (body, signature).
pub type Policy = Box<dyn Fn(&Value, usize, &[(Vec<u8>, String)]) -> Reply + Send + Sync>;

/// One request as the stand-in saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub body: Vec<u8>,
    /// For a POST: whether its signature held under the stand-in's key.
    pub signed: bool,
}

struct State {
    requests: Vec<Value>,
    answers: Vec<(Vec<u8>, String)>,
    seen: Vec<Seen>,
}

pub struct Webhook {
    /// `https://127.0.0.1:PORT/hook`
    pub url: String,
    pub port: u16,
    /// The test CA (PEM), readable by everyone.
    pub ca: PathBuf,
    /// The HMAC key both sides use.
    pub key: String,
    state: Arc<Mutex<State>>,
}

/// `sha256=<hex>` of `body` under `key`.
pub fn sign(key: &str, body: &[u8]) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key.as_bytes());
    format!(
        "sha256={}",
        hex::encode(ring::hmac::sign(&key, body).as_ref())
    )
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// An answer to `request` as a receiver writes it, signed with `key`.
pub fn answer(key: &str, request: &Value, decision: &str, reason: &str, approver: &str) -> Reply {
    let body = serde_json::to_vec(&json!({
        "type": "stepproof.approval.answer",
        "version": 1,
        "nonce": request["nonce"],
        "run": request["run"],
        "step": request["step"],
        "decision": decision,
        "reason": reason,
        "approver": approver,
        "answered_at": now(),
    }))
    .unwrap();
    let signature = sign(key, &body);
    Reply::Answer { body, signature }
}

impl Webhook {
    /// Serves on 127.0.0.1 (any port); the CA goes to `dir` (0755).
    pub fn start(dir: &Path, key: &str, policy: Policy) -> Webhook {
        fs::create_dir_all(dir).unwrap();
        fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).unwrap();
        let ca = dir.join("webhook-ca.pem");
        let config = crate::support::server_tls(
            "StepProof webhook stand-in CA",
            vec!["127.0.0.1".to_string()],
            Some(&ca),
        );
        let listener = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(Mutex::new(State {
            requests: Vec::new(),
            answers: Vec::new(),
            seen: Vec::new(),
        }));
        let policy = Arc::new(policy);
        let (state2, key2) = (state.clone(), key.to_string());
        std::thread::spawn(move || {
            for tcp in listener.incoming().flatten() {
                let (config, state, policy, key) =
                    (config.clone(), state2.clone(), policy.clone(), key2.clone());
                std::thread::spawn(move || {
                    let _ = tcp.set_read_timeout(Some(Duration::from_secs(20)));
                    let Ok(conn) = rustls::ServerConnection::new(config) else {
                        return;
                    };
                    let mut tls = rustls::StreamOwned::new(conn, tcp);
                    let Some((method, path, body, signature)) = read_request(&mut tls) else {
                        return;
                    };
                    let (status, body, signature) =
                        handle(&state, &policy, &key, method, path, body, signature);
                    let mut head = format!(
                        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
                        body.len()
                    );
                    if let Some(signature) = signature {
                        head.push_str(&format!("X-StepProof-Signature: {signature}\r\n"));
                    }
                    head.push_str("\r\n");
                    let _ = tls.write_all(head.as_bytes());
                    let _ = tls.write_all(&body);
                    tls.conn.send_close_notify();
                    let _ = tls.flush();
                });
            }
        });
        Webhook {
            url: format!("https://127.0.0.1:{port}/hook"),
            port,
            ca,
            key: key.to_string(),
            state,
        }
    }

    /// Every request seen, in order.
    pub fn seen(&self) -> Vec<Seen> {
        self.state.lock().unwrap().seen.clone()
    }

    /// The approval requests received (signed with the key), in order.
    pub fn requests(&self) -> Vec<Value> {
        self.state.lock().unwrap().requests.clone()
    }
}

fn handle(
    state: &Mutex<State>,
    policy: &Policy,
    key: &str,
    method: String,
    path: String,
    body: Vec<u8>,
    signature: Option<String>,
) -> (u16, Vec<u8>, Option<String>) {
    let mut state = state.lock().unwrap();
    let signed = signature.as_deref() == Some(sign(key, &body).as_str());
    state.seen.push(Seen {
        method: method.clone(),
        path: path.clone(),
        body: body.clone(),
        signed,
    });
    // A chat's incoming webhook (a notification): taken as it is, logged in `seen`.
    if method == "POST" && path.starts_with("/notify") {
        return (200, b"ok".to_vec(), None);
    }
    if method == "POST" && path == "/hook" {
        if !signed {
            return (401, b"{}".to_vec(), None);
        }
        let Ok(request) = serde_json::from_slice::<Value>(&body) else {
            return (400, b"{}".to_vec(), None);
        };
        if !state
            .requests
            .iter()
            .any(|r| r["nonce"] == request["nonce"])
        {
            state.requests.push(request);
        }
        return (202, b"{}".to_vec(), None);
    }
    if method == "GET"
        && let Some(nonce) = path.strip_prefix("/hook/")
    {
        let Some(index) = state.requests.iter().position(|r| r["nonce"] == nonce) else {
            return (404, b"{}".to_vec(), None);
        };
        let request = state.requests[index].clone();
        return match policy(&request, index, &state.answers) {
            Reply::Pending => (202, b"{}".to_vec(), None),
            Reply::Answer { body, signature } => {
                state.answers.push((body.clone(), signature.clone()));
                (200, body, Some(signature))
            }
        };
    }
    (404, b"{}".to_vec(), None)
}

/// Method, path, body and signature header of one HTTP/1.1 request.
fn read_request<S: Read>(stream: &mut S) -> Option<(String, String, Vec<u8>, Option<String>)> {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let path = parts.next()?.to_string();
    let mut length = 0usize;
    let mut signature = None;
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).ok()?;
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        let (name, value) = header.split_once(':')?;
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" => length = value.trim().parse().ok()?,
            "x-stepproof-signature" => signature = Some(value.trim().to_string()),
            _ => {}
        }
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body).ok()?;
    Some((method, path, body, signature))
}
