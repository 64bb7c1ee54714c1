//! An OTLP/HTTP logs receiver on loopback for the export tests: it decodes each `POST
//! /v1/logs` with the OpenTelemetry protobuf definitions (`opentelemetry-proto`), keeps every
//! request as received (duplicates included), and writes them back as OTLP/JSON lines, the form
//! a collector's file exporter writes and `stepproof audit verify` reads.
#![allow(dead_code)]

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use prost::Message;
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One log record as received, with its request's resource attributes and headers.
#[derive(Debug, Clone)]
pub struct Got {
    pub resource: Vec<(String, String)>,
    pub attributes: Vec<(String, Value)>,
    pub body: String,
    pub time_unix_nano: u64,
    pub severity_number: i32,
}

impl Got {
    pub fn attr(&self, key: &str) -> Option<&Value> {
        self.attributes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }

    pub fn attr_str(&self, key: &str) -> &str {
        self.attr(key).and_then(Value::as_str).unwrap_or_default()
    }

    pub fn attr_int(&self, key: &str) -> Option<i64> {
        self.attr(key).and_then(Value::as_i64)
    }

    pub fn resource_attr(&self, key: &str) -> Option<&str> {
        self.resource
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Default)]
struct State {
    requests: Vec<ExportLogsServiceRequest>,
    /// The request headers of each request (lowercase names).
    headers: Vec<Vec<(String, String)>>,
    paths: Vec<String>,
}

pub struct Receiver {
    pub addr: SocketAddr,
    /// `https`: the PEM of the CA that signed its certificate (for `localhost`).
    pub ca_pem: Option<String>,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    /// Answers still to withhold (the request is kept, the connection closed without an
    /// answer): the sender must send those records again.
    withhold: Arc<AtomicU64>,
}

fn any_to_json(value: &Option<AnyValue>) -> Value {
    match value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => Value::String(s.clone()),
        Some(any_value::Value::IntValue(i)) => json!(i),
        Some(any_value::Value::BoolValue(b)) => json!(b),
        Some(any_value::Value::DoubleValue(d)) => json!(d),
        _ => Value::Null,
    }
}

/// OTLP/JSON's encoding of an attribute value (64-bit integers as strings).
fn any_to_otlp_json(value: &Option<AnyValue>) -> Value {
    match value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => json!({ "stringValue": s }),
        Some(any_value::Value::IntValue(i)) => json!({ "intValue": i.to_string() }),
        Some(any_value::Value::BoolValue(b)) => json!({ "boolValue": b }),
        Some(any_value::Value::DoubleValue(d)) => json!({ "doubleValue": d }),
        _ => json!({}),
    }
}

fn kvs_to_otlp_json(kvs: &[KeyValue]) -> Value {
    Value::Array(
        kvs.iter()
            .map(|kv| json!({ "key": kv.key, "value": any_to_otlp_json(&kv.value) }))
            .collect(),
    )
}

/// One request as an OTLP/JSON line.
pub fn request_to_otlp_json(request: &ExportLogsServiceRequest) -> Value {
    let resource_logs: Vec<Value> = request
        .resource_logs
        .iter()
        .map(|rl| {
            let scope_logs: Vec<Value> = rl
                .scope_logs
                .iter()
                .map(|sl| {
                    let records: Vec<Value> = sl
                        .log_records
                        .iter()
                        .map(|r| {
                            json!({
                                "timeUnixNano": r.time_unix_nano.to_string(),
                                "observedTimeUnixNano": r.observed_time_unix_nano.to_string(),
                                "severityNumber": r.severity_number,
                                "severityText": r.severity_text,
                                "eventName": r.event_name,
                                "body": any_to_otlp_json(&r.body),
                                "attributes": kvs_to_otlp_json(&r.attributes),
                            })
                        })
                        .collect();
                    json!({
                        "scope": sl.scope.as_ref().map(|s| json!({ "name": s.name, "version": s.version })),
                        "logRecords": records,
                    })
                })
                .collect();
            json!({
                "resource": { "attributes": kvs_to_otlp_json(rl.resource.as_ref().map(|r| r.attributes.as_slice()).unwrap_or_default()) },
                "scopeLogs": scope_logs,
            })
        })
        .collect();
    json!({ "resourceLogs": resource_logs })
}

impl Receiver {
    /// Listens on 127.0.0.1 (an ephemeral port).
    pub fn start() -> Receiver {
        Receiver::bind("127.0.0.1:0".parse().unwrap())
    }

    /// Listens at `addr` (a port a test took down and brings back).
    pub fn bind(addr: SocketAddr) -> Receiver {
        Receiver::listen(addr, None)
    }

    /// Over TLS, with a certificate for `localhost` signed by a CA of its own.
    pub fn start_tls() -> Receiver {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "otlp test CA");
        let ca_cert = ca_params.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .unwrap();
        let mut receiver = Receiver::listen("127.0.0.1:0".parse().unwrap(), Some(Arc::new(config)));
        receiver.ca_pem = Some(ca_cert.pem());
        receiver
    }

    fn listen(addr: SocketAddr, tls: Option<Arc<rustls::ServerConfig>>) -> Receiver {
        let listener = TcpListener::bind(addr).unwrap_or_else(|e| panic!("binding {addr}: {e}"));
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let withhold = Arc::new(AtomicU64::new(0));
        let (s, st, w) = (state.clone(), stop.clone(), withhold.clone());
        std::thread::spawn(move || {
            while !st.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        let (s, w, tls) = (s.clone(), w.clone(), tls.clone());
                        std::thread::spawn(move || {
                            let _ = conn.set_nonblocking(false);
                            let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
                            match tls {
                                Some(config) => {
                                    let tls = rustls::ServerConnection::new(config).unwrap();
                                    serve(rustls::StreamOwned::new(tls, conn), &s, &w)
                                }
                                None => serve(conn, &s, &w),
                            }
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Receiver {
            addr,
            ca_pem: None,
            state,
            stop,
            withhold,
        }
    }

    /// The base URL for `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub fn endpoint(&self) -> String {
        match self.ca_pem {
            Some(_) => format!("https://localhost:{}", self.addr.port()),
            None => format!("http://{}", self.addr),
        }
    }

    /// The next `n` requests are kept but not answered.
    pub fn withhold_answers(&self, n: u64) {
        self.withhold.store(n, Ordering::SeqCst);
    }

    pub fn requests(&self) -> usize {
        self.state.lock().unwrap().requests.len()
    }

    pub fn headers(&self) -> Vec<Vec<(String, String)>> {
        self.state.lock().unwrap().headers.clone()
    }

    pub fn paths(&self) -> Vec<String> {
        self.state.lock().unwrap().paths.clone()
    }

    /// Every log record received, in arrival order, duplicates included.
    pub fn records(&self) -> Vec<Got> {
        let state = self.state.lock().unwrap();
        let mut out = Vec::new();
        for request in &state.requests {
            for rl in &request.resource_logs {
                let resource: Vec<(String, String)> = rl
                    .resource
                    .iter()
                    .flat_map(|r| &r.attributes)
                    .map(|kv| {
                        (
                            kv.key.clone(),
                            any_to_json(&kv.value)
                                .as_str()
                                .unwrap_or_default()
                                .to_string(),
                        )
                    })
                    .collect();
                for sl in &rl.scope_logs {
                    for r in &sl.log_records {
                        out.push(Got {
                            resource: resource.clone(),
                            attributes: r
                                .attributes
                                .iter()
                                .map(|kv| (kv.key.clone(), any_to_json(&kv.value)))
                                .collect(),
                            body: any_to_json(&r.body)
                                .as_str()
                                .unwrap_or_default()
                                .to_string(),
                            time_unix_nano: r.time_unix_nano,
                            severity_number: r.severity_number,
                        });
                    }
                }
            }
        }
        out
    }

    /// Everything received as OTLP/JSON lines (one request a line).
    pub fn otlp_json(&self) -> String {
        let state = self.state.lock().unwrap();
        state
            .requests
            .iter()
            .map(|r| format!("{}\n", request_to_otlp_json(r)))
            .collect()
    }

    /// Waits until `done` holds for the records received (or the time is up).
    pub fn wait_for(&self, timeout: Duration, done: impl Fn(&[Got]) -> bool) -> bool {
        let end = Instant::now() + timeout;
        loop {
            if done(&self.records()) {
                return true;
            }
            if Instant::now() > end {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so the listening socket closes now.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(100));
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn serve(mut conn: impl Read + Write, state: &Mutex<State>, withhold: &AtomicU64) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16384];
    let (path, headers, body_start, length) = loop {
        let n = match conn.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        let mut hs = [httparse::EMPTY_HEADER; 64];
        let mut req = httparse::Request::new(&mut hs);
        if let Ok(httparse::Status::Complete(len)) = req.parse(&buf) {
            let headers: Vec<(String, String)> = req
                .headers
                .iter()
                .map(|h| {
                    (
                        h.name.to_ascii_lowercase(),
                        String::from_utf8_lossy(h.value).into_owned(),
                    )
                })
                .collect();
            let length = headers
                .iter()
                .find(|(k, _)| k == "content-length")
                .and_then(|(_, v)| v.parse::<usize>().ok())
                .unwrap_or(0);
            break (req.path.unwrap_or("").to_string(), headers, len, length);
        }
    };
    while buf.len() < body_start + length {
        match conn.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let body = &buf[body_start..body_start + length];
    let Ok(request) = ExportLogsServiceRequest::decode(body) else {
        let _ = conn.write_all(
            b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        );
        return;
    };
    {
        let mut s = state.lock().unwrap();
        s.requests.push(request);
        s.headers.push(headers);
        s.paths.push(path);
    }
    let withheld = withhold
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok();
    if withheld {
        // Taken, but the answer is lost: the sender cannot know.
        return;
    }
    let _ = conn.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    );
}
