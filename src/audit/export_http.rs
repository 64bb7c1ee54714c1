//! The one request the exporter makes: `POST` of a protobuf body over HTTP/1.1 (rustls for
//! `https`) through the supervisor's one client ([`crate::http::client`]), blocking, on the
//! shipper's own thread, with one deadline for the whole exchange. One connection per request
//! (`Connection: close`): batches are few, and nothing is left half-read.

use crate::audit::export_config::{Endpoint, ExportConfig};
use crate::http::client::{self, ErrorKind, Request};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The largest answer read, head and body (a collector answers with a small protobuf or a short
/// error); a larger one is a failed exchange.
const MAX_RESPONSE: usize = 1 << 20;

/// Why a request did not deliver its records.
#[derive(Debug)]
pub enum SendError {
    /// Nothing reached a collector (refused, unreachable, name not found): waiting for it at the
    /// end of a run is pointless.
    Unreachable(String),
    /// A collector was reached but the request failed or timed out (retry later).
    Transient(String),
    /// The collector refused these records for good (HTTP 4xx other than 408/429); they stay in
    /// the outbox, and shipping stops until a person looks.
    Refused(String),
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SendError::Unreachable(m) | SendError::Transient(m) | SendError::Refused(m) => {
                f.write_str(m)
            }
        }
    }
}

/// A collector's answer to a delivered request.
#[derive(Debug, Default)]
pub struct Delivered {
    /// Records the collector said it rejected (OTLP partial success).
    pub rejected: u64,
    pub message: Option<String>,
}

/// The TLS configuration for `https` endpoints: the public web roots, or the PEM roots of
/// `OTEL_EXPORTER_OTLP_CERTIFICATE`.
pub fn tls_config(config: &ExportConfig) -> Result<Option<Arc<rustls::ClientConfig>>, String> {
    if !config.endpoint.tls {
        return Ok(None);
    }
    let roots = match &config.certificate {
        Some(path) => {
            let mut roots = rustls::RootCertStore::empty();
            if crate::http::tls::add_pem_file(&mut roots, path)? == 0 {
                return Err(format!("no certificate in {}", path.display()));
            }
            roots
        }
        None => crate::http::tls::webpki_roots(),
    };
    crate::http::tls::client_config(roots)
        .map(Some)
        .map_err(|e| format!("TLS set-up: {e}"))
}

/// Sends one request body through [`crate::http::client`]; the whole exchange ends by
/// `deadline`. The client's kinds of failure are the export's: nothing reached (unresolved,
/// refused, an untrusted certificate), a failed or timed-out exchange, a request that cannot
/// be sent.
pub fn post(
    endpoint: &Endpoint,
    headers: &[(String, String)],
    tls: Option<&Arc<rustls::ClientConfig>>,
    body: &[u8],
    deadline: Instant,
) -> Result<Delivered, SendError> {
    let headers: Vec<(&str, &str)> = [("Content-Type", "application/x-protobuf")]
        .into_iter()
        .chain(headers.iter().map(|(n, v)| (n.as_str(), v.as_str())))
        .collect();
    let response = client::request(&Request {
        method: "POST",
        tls: tls.cloned(),
        host: &endpoint.host,
        port: endpoint.port,
        path: &endpoint.path,
        headers: &headers,
        body,
        deadline,
        max_response: MAX_RESPONSE,
    })
    .map_err(|e| match e.kind {
        ErrorKind::Unreachable => SendError::Unreachable(e.message),
        ErrorKind::Transient => SendError::Transient(e.message),
        ErrorKind::Refused => SendError::Refused(e.message),
    })?;
    let status = response.status;
    let message = || {
        let text = String::from_utf8_lossy(&response.body);
        let text: String = text.chars().filter(|c| !c.is_control()).take(200).collect();
        format!("{} answered HTTP {status}: {text}", endpoint.url())
    };
    match status {
        200..=299 => {
            let mut delivered = Delivered::default();
            if let Ok(answer) = <opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceResponse as prost::Message>::decode(response.body.as_slice())
                && let Some(partial) = answer.partial_success
            {
                delivered.rejected = partial.rejected_log_records.max(0) as u64;
                if !partial.error_message.is_empty() {
                    delivered.message = Some(partial.error_message);
                }
            }
            Ok(delivered)
        }
        408 | 429 | 500..=599 => Err(SendError::Transient(message())),
        _ => Err(SendError::Refused(message())),
    }
}

/// How long a single request may take: the configured timeout, cut to what is left.
pub fn request_deadline(config: &ExportConfig, until: Option<Instant>) -> Instant {
    let own = Instant::now() + config.request_timeout.max(Duration::from_millis(1));
    match until {
        Some(until) => own.min(until),
        None => own,
    }
}
