//! TLS client configurations for the supervisor's outward connections: the roots compiled in,
//! or exactly the roots a caller names (a test CA, a corporate gateway's).

use std::sync::Arc;

use rustls::ClientConfig;

#[derive(Debug, thiserror::Error)]
#[error("building a TLS client configuration: {0}")]
pub struct TlsConfigError(#[from] rustls::Error);

/// A TLS client configuration trusting the Mozilla roots compiled in (webpki-roots), so the
/// supervisor does not depend on the host's certificate store.
pub fn webpki_client_config() -> Result<Arc<ClientConfig>, TlsConfigError> {
    let roots = rustls::RootCertStore::from_iter(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    client_config(roots)
}

/// A TLS client configuration trusting exactly `roots` (tests: a test CA).
pub fn client_config(roots: rustls::RootCertStore) -> Result<Arc<ClientConfig>, TlsConfigError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}
