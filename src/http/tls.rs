//! TLS client configurations for the supervisor's outward connections: the roots compiled in,
//! or exactly the roots a caller names (a test CA, a corporate gateway's).

use std::sync::Arc;

use rustls::ClientConfig;

#[derive(Debug, thiserror::Error)]
#[error("building a TLS client configuration: {0}")]
pub struct TlsConfigError(#[from] rustls::Error);

/// The Mozilla roots compiled in (webpki-roots), so the supervisor does not depend on the
/// host's certificate store.
pub fn webpki_roots() -> rustls::RootCertStore {
    rustls::RootCertStore::from_iter(webpki_roots::TLS_SERVER_ROOTS.iter().cloned())
}

/// A TLS client configuration trusting the roots compiled in ([`webpki_roots`]).
pub fn webpki_client_config() -> Result<Arc<ClientConfig>, TlsConfigError> {
    client_config(webpki_roots())
}

/// Adds every certificate of the PEM file `path` to `roots`; returns how many. The error names
/// the file.
pub fn add_pem_file(
    roots: &mut rustls::RootCertStore,
    path: &std::path::Path,
) -> Result<usize, String> {
    use rustls::pki_types::pem::PemObject;
    let certs = rustls::pki_types::CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("reading the CA file {}: {e}", path.display()))?;
    let mut added = 0;
    for cert in certs {
        let cert = cert.map_err(|e| format!("reading the CA file {}: {e}", path.display()))?;
        roots
            .add(cert)
            .map_err(|e| format!("the CA file {}: {e}", path.display()))?;
        added += 1;
    }
    Ok(added)
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
