//! HTTPS for the login and its neighbours: one TLS client configuration per list of trusted
//! files per process, and one bounded request to an https URL.

use super::{HTTP_TIMEOUT, RESPONSE_MAX_BYTES, RefreshEndpoint};
use crate::http::client;
use crate::http::client::Request;
use crate::http::url::Url;
use std::path::PathBuf;
use std::sync::Arc;

/// A TLS client configuration trusting the public web roots (webpki-roots) plus the PEM
/// certificates in `extra` (a corporate CA, `NODE_EXTRA_CA_CERTS`, a test CA).
/// One launch asks for the same trust up to three times (the gateway's upstream, the login's
/// refresh, the server settings' fetch), and parsing a system-sized bundle costs most of a
/// millisecond: each list of files is parsed once per process, and [`prepare_client_config`]
/// may have started it already.
pub fn client_config(extra: &[PathBuf]) -> Result<Arc<rustls::ClientConfig>, String> {
    let pending = {
        let mut made = client_configs();
        match made.iter().position(|(k, _)| k == extra) {
            Some(i) => match &made[i].1 {
                Made::Ready(config) => return Ok(config.clone()),
                Made::Pending(_) => match made.swap_remove(i).1 {
                    Made::Pending(thread) => Some(thread),
                    Made::Ready(_) => None,
                },
            },
            None => None,
        }
    };
    let config = match pending.map(std::thread::JoinHandle::join) {
        Some(Ok(result)) => result?,
        Some(Err(_)) | None => new_client_config(extra)?,
    };
    client_configs().push((extra.to_vec(), Made::Ready(config.clone())));
    Ok(config)
}

enum Made {
    Pending(std::thread::JoinHandle<Result<Arc<rustls::ClientConfig>, String>>),
    Ready(Arc<rustls::ClientConfig>),
}

type ClientConfigs = Vec<(Vec<PathBuf>, Made)>;

fn client_configs() -> std::sync::MutexGuard<'static, ClientConfigs> {
    static MADE: std::sync::Mutex<ClientConfigs> = std::sync::Mutex::new(Vec::new());
    MADE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts parsing `extra` for [`client_config`] on a thread of its own, while the launch goes
/// on (`NODE_EXTRA_CA_CERTS` is often the whole system bundle). [`settle_client_configs`] ends
/// it before the init is cloned from this process's memory.
pub fn prepare_client_config(extra: Vec<PathBuf>) {
    let mut made = client_configs();
    if made.iter().any(|(k, _)| *k == extra) {
        return;
    }
    let paths = extra.clone();
    if let Ok(thread) = std::thread::Builder::new()
        .name("stepproof-trust".into())
        .spawn(move || new_client_config(&paths))
    {
        made.push((extra, Made::Pending(thread)));
    }
}

/// Waits for every parse [`prepare_client_config`] started: no thread of it is left.
pub fn settle_client_configs() {
    let pending: Vec<(Vec<PathBuf>, Made)> = {
        let mut made = client_configs();
        let (pending, ready) = std::mem::take(&mut *made)
            .into_iter()
            .partition(|(_, m)| matches!(m, Made::Pending(_)));
        *made = ready;
        pending
    };
    for (extra, made) in pending {
        if let Made::Pending(thread) = made
            && let Ok(Ok(config)) = thread.join()
        {
            client_configs().push((extra, Made::Ready(config)));
        }
    }
}

fn new_client_config(extra: &[PathBuf]) -> Result<Arc<rustls::ClientConfig>, String> {
    let mut roots = crate::http::tls::webpki_roots();
    for path in extra {
        crate::http::tls::add_pem_file(&mut roots, path)?;
    }
    crate::http::tls::client_config(roots).map_err(|e| e.to_string())
}

/// POSTs `body` as JSON to an https endpoint; returns the status and the body.
pub(super) fn post_json(
    endpoint: &RefreshEndpoint,
    body: &serde_json::Value,
) -> Result<(u16, Vec<u8>), String> {
    let payload = serde_json::to_vec(body).expect("JSON values serialize");
    https_request(
        &endpoint.url,
        &endpoint.tls,
        "POST",
        &[("Content-Type", "application/json")],
        &payload,
    )
    .map_err(|e| match e.strip_suffix(": must be https") {
        Some(url) => format!("{url}: the token endpoint must be https"),
        None => e,
    })
}

/// One request to an https URL through [`crate::http::client`] (`Accept: application/json`,
/// `extra` headers, `body`); returns the status and the body (at most `RESPONSE_MAX_BYTES`,
/// the whole exchange within `HTTP_TIMEOUT`). Errors name the host.
pub fn https_request(
    url_text: &str,
    tls_config: &Arc<rustls::ClientConfig>,
    method: &str,
    extra: &[(&str, &str)],
    payload: &[u8],
) -> Result<(u16, Vec<u8>), String> {
    let url = Url::parse(url_text)?;
    if !url.tls {
        return Err(format!("{url_text}: must be https"));
    }
    let headers: Vec<(&str, &str)> = [("Accept", "application/json")]
        .into_iter()
        .chain(extra.iter().copied())
        .collect();
    let deadline = std::time::Instant::now() + HTTP_TIMEOUT;
    let response = client::request(&Request {
        headers: &headers,
        body: payload,
        ..Request::to(&url, method, tls_config, deadline, RESPONSE_MAX_BYTES)
    })
    .map_err(|e| e.message)?;
    Ok((response.status, response.body))
}
