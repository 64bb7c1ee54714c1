//! Service credentials at the boundary: the supervisor reads each rule's secret outside the
//! sandbox at launch, makes the run's certificate authority (ECDSA P-256; its key lives only in
//! this process's memory) and writes the public half into the sandbox's trust bundle. The proxy
//! terminates TLS only for hosts with a rule, and asks a [`Broker`] what to add and what to block.
//!
//! A secret comes from a [`SecretSource`]: the profile's `env:`, `file:` and `command:` sources
//! are read once at launch ([`FixedSecret`]); a source that refreshes (a login) answers each
//! request with its current value, so it plugs in as one more source for its host.

use crate::http::scan::EchoNeedles;
use crate::profile::allow::Host;
use crate::profile::credentials::{Injection, SourceSpec};
use crate::profile::presets::READ_METHODS;
use crate::sandbox::plan::SandboxPlan;
use crate::sandbox::plan::credentials::{BUNDLE_FILE, RUN_CA_FILE};
use base64::Engine as _;
use rustls::ClientConfig;
use rustls::ServerConfig;
use std::collections::HashMap;
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// A secret value. It has no `Display`; its `Debug` says only that it is redacted, so neither a
/// log line nor an error message can carry it by accident.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: String) -> Secret {
        Secret(value)
    }

    /// The value, for the one place that sends it: the request head going upstream.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// Where a credential's value comes from when a request needs it.
pub trait SecretSource: Send + Sync {
    /// The current value; the error never holds it.
    fn value(&self) -> Result<Secret, String>;
}

/// A value read once, at launch.
pub struct FixedSecret(pub Secret);

impl SecretSource for FixedSecret {
    fn value(&self) -> Result<Secret, String> {
        Ok(self.0.clone())
    }
}

/// The longest secret read from a file or a command.
const SECRET_MAX_BYTES: u64 = 64 * 1024;
/// How long a `command:` source may take at launch.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// Reads a profile source, outside the sandbox. A trailing line break is dropped; what is left
/// must be non-empty and free of control characters (a line break would let it write headers).
pub fn read_source(spec: &SourceSpec, home: &Path, workspace: &Path) -> Result<Secret, String> {
    let raw = match spec {
        SourceSpec::Env(name) => std::env::var(name).map_err(|e| match e {
            std::env::VarError::NotPresent => {
                format!("{name} is not set in stepproof-run's environment")
            }
            std::env::VarError::NotUnicode(_) => format!("{name} is not UTF-8"),
        })?,
        SourceSpec::File(spec) => {
            let path = spec.resolve(home, workspace);
            crate::regular_file::read_to_string(&path, SECRET_MAX_BYTES)
                .map_err(|e| format!("reading {}: {e}", path.display()))?
        }
        SourceSpec::Command(argv) => run_command(argv)?,
    };
    let value = raw.trim_end_matches(['\n', '\r']).to_string();
    if value.is_empty() {
        return Err(format!("{} gave an empty value", spec.describe()));
    }
    if value.bytes().any(|b| b.is_ascii_control()) {
        return Err(format!(
            "{} gave a value with control characters",
            spec.describe()
        ));
    }
    Ok(Secret(value))
}

/// Runs a `command:` source without a shell, with stepproof-run's environment; its standard
/// error goes to the terminal (it may ask how to log in), its output is the secret.
fn run_command(argv: &[String]) -> Result<String, String> {
    let shown = argv.join(" ");
    let mut child = std::process::Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("running `{shown}`: {e}"))?;
    let mut stdout = child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        let read = (&mut stdout)
            .take(SECRET_MAX_BYTES + 1)
            .read_to_end(&mut out);
        read.map(|_| out)
    });
    let deadline = Instant::now() + COMMAND_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "`{shown}` did not finish within {} s",
                    COMMAND_TIMEOUT.as_secs()
                ));
            }
            Err(e) => return Err(format!("waiting for `{shown}`: {e}")),
        }
    };
    let out = reader
        .join()
        .map_err(|_| format!("reading the output of `{shown}`"))?
        .map_err(|e| format!("reading the output of `{shown}`: {e}"))?;
    if !status.success() {
        return Err(format!("`{shown}` failed ({status})"));
    }
    if out.len() as u64 > SECRET_MAX_BYTES {
        return Err(format!(
            "`{shown}` printed more than {SECRET_MAX_BYTES} bytes"
        ));
    }
    String::from_utf8(out).map_err(|_| format!("`{shown}` printed something that is not UTF-8"))
}

/// One credential the proxy adds, ready for requests.
pub struct ServiceCredential {
    pub name: String,
    pub host: Host,
    pub port: u16,
    pub rule: crate::profile::CredentialRule,
    pub injection: Injection,
    /// What the sandbox holds instead (see `sandbox::plan::credentials`).
    pub placeholder: String,
    pub source: Arc<dyn SecretSource>,
    /// Trust for the onward connection: the web roots, or the rule's `ca_file`.
    pub tls: Arc<ClientConfig>,
}

impl fmt::Debug for ServiceCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServiceCredential")
            .field("name", &self.name)
            .field("host", &self.host)
            .field("port", &self.port)
            .field("source", &self.rule.source)
            .finish_non_exhaustive()
    }
}

impl ServiceCredential {
    /// A credential for `rule`, whose value `source` gives, sent onward with `tls`'s trust.
    pub fn new(
        rule: crate::profile::CredentialRule,
        placeholder: String,
        source: Arc<dyn SecretSource>,
        tls: Arc<ClientConfig>,
    ) -> ServiceCredential {
        let (host, port) = rule.host_port();
        ServiceCredential {
            name: rule.name.clone(),
            host,
            port,
            injection: rule.injection(),
            rule,
            placeholder,
            source,
            tls,
        }
    }

    /// Whether a request for this host, method and target is in this credential's scope.
    pub fn covers(&self, host: &Host, port: u16, method: &str, target: &str) -> bool {
        *host == self.host && port == self.port && self.rule.covers(method, target)
    }

    /// What to add to a request now: the header line with the current secret, and the
    /// spellings of that same value an answer could hand back (both from one read of the
    /// source, so a source that refreshes cannot make them disagree).
    pub fn to_add(&self) -> Result<AddedCredential, String> {
        let secret = self
            .source
            .value()
            .map_err(|e| format!("credential {}: {e}", self.name))?;
        let value = secret.expose();
        if value.is_empty() || value.bytes().any(|b| b.is_ascii_control()) {
            return Err(format!(
                "credential {}: the value is empty or holds control characters",
                self.name
            ));
        }
        Ok(match &self.injection {
            Injection::Header { name, format } => AddedCredential {
                header_line: format!("{name}: {}\r\n", format.replacen("{}", value, 1))
                    .into_bytes(),
                echo: EchoNeedles::of_secret(value, None),
            },
            Injection::Basic { user } => AddedCredential {
                header_line: format!(
                    "Authorization: Basic {}\r\n",
                    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{value}"))
                )
                .into_bytes(),
                echo: EchoNeedles::of_secret(value, Some(user)),
            },
        })
    }
}

/// What the proxy adds to one request. No `Debug`: the line holds the secret.
pub struct AddedCredential {
    /// `Name: value\r\n`, sent upstream and nowhere else.
    pub header_line: Vec<u8>,
    /// The value's spellings, looked for in the answer (see [`crate::http::scan`]).
    pub echo: EchoNeedles,
}

/// The run's certificate authority: its key is generated here and never written anywhere; leaf
/// certificates for the terminated hosts are made on first use and kept for the run.
pub struct RunAuthority {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    der: rustls::pki_types::CertificateDer<'static>,
    pem: String,
    leaves: Mutex<HashMap<String, Arc<ServerConfig>>>,
}

impl fmt::Debug for RunAuthority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RunAuthority(<key redacted>)")
    }
}

/// How long the run's certificates are valid, either side of now.
const VALID_BEFORE: time::Duration = time::Duration::days(1);
const VALID_AFTER: time::Duration = time::Duration::days(90);

fn rcgen_error(what: &str) -> impl Fn(rcgen::Error) -> String + '_ {
    move |e| format!("{what}: {e}")
}

impl RunAuthority {
    pub fn generate() -> Result<RunAuthority, String> {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
            .map_err(rcgen_error("generating the run's CA key"))?;
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new())
            .map_err(rcgen_error("the run's CA"))?;
        let now = time::OffsetDateTime::now_utc();
        params.not_before = now - VALID_BEFORE;
        params.not_after = now + VALID_AFTER;
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        params.distinguished_name.push(
            rcgen::DnType::CommonName,
            format!("StepProof run CA {}", now.unix_timestamp()),
        );
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "StepProof (this run only)");
        let cert = params
            .self_signed(&key)
            .map_err(rcgen_error("signing the run's CA"))?;
        Ok(RunAuthority {
            der: cert.der().clone(),
            pem: cert.pem(),
            issuer: rcgen::Issuer::new(params, key),
            leaves: Mutex::new(HashMap::new()),
        })
    }

    /// The CA's certificate (public), PEM.
    pub fn certificate_pem(&self) -> &str {
        &self.pem
    }

    /// The TLS server configuration for `host`: a leaf certificate for that name (or address)
    /// signed by the run's CA, ALPN `http/1.1` only.
    pub fn server_config(&self, host: &Host) -> Result<Arc<ServerConfig>, String> {
        let name = match host {
            Host::Name(name) => name.clone(),
            Host::Ip(ip) => ip.to_string(),
        };
        let mut leaves = self.leaves.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(config) = leaves.get(&name) {
            return Ok(config.clone());
        }
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
            .map_err(rcgen_error("generating a leaf key"))?;
        let mut params = rcgen::CertificateParams::new(vec![name.clone()])
            .map_err(rcgen_error("a leaf certificate"))?;
        let now = time::OffsetDateTime::now_utc();
        params.not_before = now - VALID_BEFORE;
        params.not_after = now + VALID_AFTER;
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name.clone());
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(rcgen_error("signing a leaf certificate"))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let key_der = rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .and_then(|b| {
                b.with_no_client_auth()
                    .with_single_cert(vec![cert.der().clone(), self.der.clone()], key_der)
            })
            .map_err(|e| format!("TLS server configuration for {name}: {e}"))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        leaves.insert(name, config.clone());
        Ok(config)
    }
}

/// A host the proxy lets through with [`READ_METHODS`] only: it terminates TLS for it (adding
/// no credential unless a rule of its own covers the request) so that it can read each method.
pub struct ReadOnlyHost {
    pub host: Host,
    pub port: u16,
    /// Trust for the onward connection: the web roots (and, for tests only, the caller's
    /// `STEPPROOF_TEST_ONWARD_CA`).
    pub tls: Arc<ClientConfig>,
}

impl fmt::Debug for ReadOnlyHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ReadOnlyHost({}:{})", self.host, self.port)
    }
}

/// Headers that ask a server to take the request as another method than its request line's
/// (Rails, Laravel, Google's and Microsoft's APIs, many frameworks): refused on read-only hosts.
pub const METHOD_OVERRIDE_HEADERS: &[&str] = &[
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
];
/// Query parameters that do the same (`?_method=PUT`).
const METHOD_OVERRIDE_PARAMS: &[&str] = &["_method", "x-http-method-override"];

/// What the proxy asks about credentials: which hosts it terminates, what to add to a request,
/// which placeholders a request carries, which methods a read-only host takes.
#[derive(Debug)]
pub struct Broker {
    pub credentials: Vec<ServiceCredential>,
    /// The run's CA: made only when some rule or read-only host needs TLS terminated (`None`
    /// with read-only hosts where the sandbox has no private /run for it: the proxy refuses
    /// them).
    pub authority: Option<RunAuthority>,
    /// Hosts reached with [`READ_METHODS`] only.
    pub read_only: Vec<ReadOnlyHost>,
    /// Placeholders of credentials added elsewhere (the model login, at the gateway), by the
    /// credential's name: never sent through the proxy, wherever to.
    pub elsewhere: Vec<(String, String)>,
}

impl Broker {
    /// Whether the proxy terminates TLS for `host:port` (some rule names it, or it is
    /// read-only).
    pub fn terminates(&self, host: &Host, port: u16) -> bool {
        self.credentials
            .iter()
            .any(|c| c.host == *host && c.port == port)
            || self.is_read_only(host, port)
    }

    /// Whether `host:port` is reached with [`READ_METHODS`] only.
    pub fn is_read_only(&self, host: &Host, port: u16) -> bool {
        self.read_only
            .iter()
            .any(|r| r.host == *host && r.port == port)
    }

    /// The TLS client configuration for the onward connection to `host:port`: that of its
    /// first rule, else the read-only host's.
    pub fn upstream_tls(&self, host: &Host, port: u16) -> Option<Arc<ClientConfig>> {
        self.credentials
            .iter()
            .find(|c| c.host == *host && c.port == port)
            .map(|c| c.tls.clone())
            .or_else(|| {
                self.read_only
                    .iter()
                    .find(|r| r.host == *host && r.port == port)
                    .map(|r| r.tls.clone())
            })
    }

    /// Why a request to a read-only host is refused, if it is: a method other than
    /// [`READ_METHODS`] (as written: methods are case-sensitive, `get` is not `GET`) that no
    /// credential rule of the host covers, or a method-override header or query parameter
    /// (whatever the method). `None` for other hosts.
    pub fn read_only_refusal(
        &self,
        host: &Host,
        port: u16,
        method: &str,
        target: &str,
        headers: &[(String, Vec<u8>)],
    ) -> Option<String> {
        if !self.is_read_only(host, port) {
            return None;
        }
        let shown = if port == 443 {
            host.to_string()
        } else {
            format!("{host}:{port}")
        };
        if let Some((name, _)) = headers.iter().find(|(name, _)| {
            METHOD_OVERRIDE_HEADERS
                .iter()
                .any(|o| name.eq_ignore_ascii_case(o))
        }) {
            return Some(format!(
                "StepProof: {shown} is read-only in this profile (GET and HEAD): a request with a method-override header ({name}) is refused; recorded"
            ));
        }
        if let Some(param) = override_param(target) {
            return Some(format!(
                "StepProof: {shown} is read-only in this profile (GET and HEAD): a request with a method-override parameter ({param}) is refused; recorded"
            ));
        }
        if READ_METHODS.contains(&method) || self.matching(host, port, method, target).is_some() {
            return None;
        }
        Some(format!(
            "StepProof: {shown} is read-only in this profile (GET and HEAD): {} refused; an upload needs a [[network.credentials]] rule for {shown} whose scope covers it (the proxy adds the token; one brought inside is never sent); recorded",
            method.escape_debug()
        ))
    }

    /// The first credential whose scope covers the request.
    pub fn matching(
        &self,
        host: &Host,
        port: u16,
        method: &str,
        target: &str,
    ) -> Option<&ServiceCredential> {
        self.credentials
            .iter()
            .find(|c| c.covers(host, port, method, target))
    }

    /// The credentials whose placeholder appears in the request target or a header value —
    /// as written, percent-decoded, or inside a basic-auth value — compared without regard to
    /// letter case.
    pub fn placeholders_in(
        &self,
        target: &str,
        headers: &[(String, Vec<u8>)],
    ) -> Vec<&ServiceCredential> {
        let texts = searched_texts(target, headers);
        self.credentials
            .iter()
            .filter(|c| holds(&texts, &c.placeholder))
            .collect()
    }

    /// The name of a credential added elsewhere whose placeholder the request carries, looked
    /// for as [`Broker::placeholders_in`] does.
    pub fn elsewhere_in(&self, target: &str, headers: &[(String, Vec<u8>)]) -> Option<&str> {
        if self.elsewhere.is_empty() {
            return None;
        }
        let texts = searched_texts(target, headers);
        self.elsewhere
            .iter()
            .find(|(_, placeholder)| holds(&texts, placeholder))
            .map(|(name, _)| name.as_str())
    }
}

/// A method-override parameter in the query of `target`, by name (letter case ignored, the
/// name percent-decoded).
fn override_param(target: &str) -> Option<String> {
    let query = target.split_once('?')?.1;
    query.split(['&', ';']).find_map(|pair| {
        let name = pair.split('=').next().unwrap_or_default();
        let decoded = String::from_utf8_lossy(&percent_decode(name)).to_ascii_lowercase();
        METHOD_OVERRIDE_PARAMS
            .contains(&decoded.as_str())
            .then(|| name.escape_debug().to_string())
    })
}

/// What a placeholder is looked for in: the request target and every header value, as written
/// and percent-decoded, and inside basic-auth values; in lower case.
fn searched_texts(target: &str, headers: &[(String, Vec<u8>)]) -> Vec<Vec<u8>> {
    let mut texts: Vec<Vec<u8>> = vec![target.as_bytes().to_vec(), percent_decode(target)];
    for (_, value) in headers {
        texts.push(value.clone());
        texts.push(percent_decode(&String::from_utf8_lossy(value)));
        if let Some(decoded) = basic_decoded(value) {
            texts.push(decoded);
        }
    }
    for text in &mut texts {
        text.make_ascii_lowercase();
    }
    texts
}

/// Whether one of `texts` (lower case) holds `placeholder`, letter case ignored.
fn holds(texts: &[Vec<u8>], placeholder: &str) -> bool {
    let needle = placeholder.to_ascii_lowercase();
    !needle.is_empty()
        && texts
            .iter()
            .any(|t| t.windows(needle.len()).any(|w| w == needle.as_bytes()))
}

fn percent_decode(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = bytes.get(i + 1..i + 3)
            && let Ok(hex) = std::str::from_utf8(hex)
            && let Ok(byte) = u8::from_str_radix(hex, 16)
        {
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    out
}

/// The decoded credentials of a `Basic …` header value.
fn basic_decoded(value: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(value).ok()?.trim();
    let (scheme, rest) = text.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let rest = rest.trim();
    base64::engine::general_purpose::STANDARD
        .decode(rest)
        .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(rest))
        .ok()
}

/// The system's CA bundle, as OpenSSL-based tools read it (the caller's `SSL_CERT_FILE` first).
const SYSTEM_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/ssl/ca-bundle.pem",
    "/etc/pki/tls/cacert.pem",
    "/etc/ssl/cert.pem",
];
const BUNDLE_MAX_BYTES: u64 = 16 << 20;

fn system_bundle() -> Option<(String, String)> {
    let from_env = std::env::var("SSL_CERT_FILE").ok();
    from_env
        .iter()
        .map(String::as_str)
        .chain(SYSTEM_BUNDLES.iter().copied())
        .find_map(|path| {
            let text =
                crate::regular_file::read_to_string(Path::new(path), BUNDLE_MAX_BYTES).ok()?;
            text.contains("-----BEGIN CERTIFICATE-----")
                .then(|| (path.to_string(), text))
        })
}

/// What [`prepare`] made: the broker the proxy asks, notes for the audit log, and the trust
/// files the init lays out at the plan's `TrustFiles` (names relative to it, contents).
pub struct Prepared {
    pub broker: Arc<Broker>,
    pub notes: Vec<String>,
    pub trust: Vec<(std::path::PathBuf, String)>,
}

/// Reads every rule's secret, makes the run's CA and its trust files for the plan's
/// `TrustFiles`; `None` for a plan without credentials. Refused: a source that cannot be read, a
/// secret that the sandbox's environment would carry anyway.
pub fn prepare(plan: &SandboxPlan) -> Result<Option<Prepared>, String> {
    if plan.credentials.is_empty() && plan.read_only.is_empty() {
        return Ok(None);
    }
    let mut notes = Vec::new();
    let mut credentials = Vec::new();
    for planned in &plan.credentials {
        let rule = &planned.rule;
        let spec = rule.source_spec();
        let secret = read_source(&spec, &plan.home, &plan.workspace)
            .map_err(|e| format!("credential {} ({}): {e}", rule.name, spec.describe()))?;
        if let Some((name, _)) = plan
            .env
            .iter()
            .find(|(_, value)| value.contains(secret.expose()))
        {
            return Err(format!(
                "credential {}: the sandbox's variable {name} holds its value; remove it from process.env or process.set_env",
                rule.name
            ));
        }
        let tls = match &rule.ca_file {
            Some(spec) => {
                use rustls::pki_types::pem::PemObject;
                let path = spec.resolve(&plan.home, &plan.workspace);
                let mut roots = rustls::RootCertStore::empty();
                let certs =
                    rustls::pki_types::CertificateDer::pem_file_iter(&path).map_err(|e| {
                        format!("credential {}: ca_file {}: {e}", rule.name, path.display())
                    })?;
                for cert in certs {
                    let cert = cert.map_err(|e| {
                        format!("credential {}: ca_file {}: {e}", rule.name, path.display())
                    })?;
                    roots.add(cert).map_err(|e| {
                        format!("credential {}: ca_file {}: {e}", rule.name, path.display())
                    })?;
                }
                crate::http::tls::client_config(roots).map_err(|e| e.to_string())?
            }
            None => crate::http::tls::webpki_client_config().map_err(|e| e.to_string())?,
        };
        credentials.push(ServiceCredential::new(
            rule.clone(),
            planned.placeholder.clone(),
            Arc::new(FixedSecret(secret)),
            tls,
        ));
    }
    let read_only = read_only_hosts(&plan.read_only, &mut notes)?;
    tracing::debug!("credentials: read-only hosts");
    let mut trust = Vec::new();
    let authority = match plan_has_trust(plan) {
        true => {
            let authority = RunAuthority::generate()?;
            tracing::debug!("credentials: run CA made");
            trust = trust_files(&authority, &mut notes);
            Some(authority)
        }
        false if !credentials.is_empty() => {
            return Err("the plan has credential rules but no trust mount".into());
        }
        false => {
            // Without a private /run (no namespaces) the CA could not reach the sandbox: the
            // proxy refuses the read-only hosts rather than tunnel to them unread.
            notes.push(format!(
                "network: read-only hosts {} are refused: no private /run for the run's CA",
                plan.read_only.join(", ")
            ));
            None
        }
    };
    Ok(Some(Prepared {
        broker: Arc::new(Broker {
            credentials,
            authority,
            read_only,
            elsewhere: Vec::new(),
        }),
        notes,
        trust,
    }))
}

/// For tests only: a PEM file of CAs the proxy trusts beside the web roots on its onward
/// connections to read-only hosts (a registry stand-in with a test CA). It is
/// `stepproof-run`'s caller's own environment, like `STEPPROOF_TEST_RESOLVE`: whoever sets it
/// could as well run the proxy's traffic anywhere; never a profile key.
pub const TEST_ONWARD_CA_VAR: &str = "STEPPROOF_TEST_ONWARD_CA";

/// The read-only hosts, parsed, with the onward trust: the web roots (and the caller's
/// [`TEST_ONWARD_CA_VAR`]).
fn read_only_hosts(
    entries: &[String],
    notes: &mut Vec<String>,
) -> Result<Vec<ReadOnlyHost>, String> {
    if entries.is_empty() {
        return Ok(Vec::new());
    }
    let mut roots =
        rustls::RootCertStore::from_iter(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(path) = std::env::var_os(TEST_ONWARD_CA_VAR).filter(|p| !p.is_empty()) {
        use rustls::pki_types::pem::PemObject;
        let path = std::path::PathBuf::from(path);
        let fail = |e: &dyn fmt::Display| format!("{TEST_ONWARD_CA_VAR} {}: {e}", path.display());
        for cert in rustls::pki_types::CertificateDer::pem_file_iter(&path).map_err(|e| fail(&e))? {
            roots
                .add(cert.map_err(|e| fail(&e))?)
                .map_err(|e| fail(&e))?;
        }
        notes.push(format!(
            "network: read-only hosts also trust {} onward ({TEST_ONWARD_CA_VAR}, for tests only)",
            path.display()
        ));
    }
    let tls = crate::http::tls::client_config(roots).map_err(|e| e.to_string())?;
    entries
        .iter()
        .map(|entry| {
            let (host, port) = crate::profile::allow::host::parse_authority(entry, Some(443))
                .map_err(|e| format!("network.read_only \"{entry}\": {e}"))?;
            Ok(ReadOnlyHost {
                host,
                port,
                tls: tls.clone(),
            })
        })
        .collect()
}

/// Whether the plan lays out the run's trust files (not without namespaces).
fn plan_has_trust(plan: &SandboxPlan) -> bool {
    plan.mounts
        .iter()
        .any(|op| matches!(op, crate::sandbox::plan::MountOp::TrustFiles { .. }))
}

/// The certificate blocks of the PEM file stepproof-run's variable `var` names (empty when
/// unset or unreadable, with a note).
fn caller_pem_certificates(var: &str, notes: &mut Vec<String>) -> String {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let Some(path) = std::env::var_os(var).filter(|p| !p.is_empty()) else {
        return String::new();
    };
    let path = std::path::PathBuf::from(path);
    let text = match crate::regular_file::read_to_string(&path, BUNDLE_MAX_BYTES) {
        Ok(text) => text,
        Err(e) => {
            notes.push(format!(
                "credentials: {var} {}: {e}; the sandbox's {var} trusts the run's CA only",
                path.display()
            ));
            return String::new();
        }
    };
    // Often the whole system bundle: searched with memchr's vectorised finder (a quarter of a
    // millisecond with `str::find`, where the launch waits for it).
    let (begin, end) = (
        memchr::memmem::Finder::new(BEGIN),
        memchr::memmem::Finder::new(END),
    );
    let mut out = String::with_capacity(text.len() + 1);
    let mut rest = text.as_str();
    while let Some(start) = begin.find(rest.as_bytes()) {
        let Some(len) = end.find(&rest.as_bytes()[start..]) else {
            break;
        };
        // Both ends are ASCII: the slice is on character boundaries.
        out.push_str(&rest[start..start + len + END.len()]);
        out.push('\n');
        rest = &rest[start + len + END.len()..];
    }
    out
}

/// The bundle (system roots, then the run's CA) and the CA alone (after the caller's
/// `NODE_EXTRA_CA_CERTS`), as the init lays them out (world-readable, on a read-only tmpfs of
/// the sandbox's: nothing of them is written on the host).
fn trust_files(authority: &RunAuthority, notes: &mut Vec<String>) -> Vec<(PathBuf, String)> {
    let mut bundle = String::new();
    match system_bundle() {
        Some((path, text)) => {
            bundle = text;
            if !bundle.ends_with('\n') {
                bundle.push('\n');
            }
            notes.push(format!(
                "credentials: the sandbox's CA bundle is {path} and the run's CA"
            ));
        }
        None => notes.push(
            "WARNING: credentials: no system CA bundle found: the sandbox's SSL_CERT_FILE trusts only the run's CA (hosts without a credential rule fail TLS for OpenSSL tools)".into(),
        ),
    }
    bundle.push_str(authority.certificate_pem());
    // NODE_EXTRA_CA_CERTS names this file inside: the caller's own extra CAs (a corporate CA)
    // stay trusted beside the run's.
    let mut node_extra = caller_pem_certificates("NODE_EXTRA_CA_CERTS", notes);
    node_extra.push_str(authority.certificate_pem());
    vec![
        (PathBuf::from(BUNDLE_FILE), bundle),
        (PathBuf::from(RUN_CA_FILE), node_extra),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_never_prints() {
        let s = Secret::new("ghp_verysecret".into());
        assert_eq!(format!("{s:?}"), "Secret(<redacted>)");
        assert_eq!(
            format!("{:?}", Some(FixedSecret(s.clone())).map(|f| f.0)),
            "Some(Secret(<redacted>))"
        );
    }

    #[test]
    fn sources_are_read_and_trimmed() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("t");
        std::fs::write(&file, "abc\n").unwrap();
        let spec =
            SourceSpec::File(crate::profile::PathSpec::parse(file.to_str().unwrap()).unwrap());
        assert_eq!(
            read_source(&spec, dir.path(), dir.path()).unwrap().expose(),
            "abc"
        );
        let cmd = SourceSpec::Command(vec!["printf".into(), "x\\ny\\n".into()]);
        let e = read_source(&cmd, dir.path(), dir.path()).unwrap_err();
        assert!(
            e.contains("control characters") && !e.contains("x\ny"),
            "{e}"
        );
        let cmd = SourceSpec::Command(vec!["false".into()]);
        assert!(
            read_source(&cmd, dir.path(), dir.path())
                .unwrap_err()
                .contains("failed")
        );
        let env = SourceSpec::Env("STEPPROOF_TEST_SURELY_UNSET".into());
        assert!(
            read_source(&env, dir.path(), dir.path())
                .unwrap_err()
                .contains("not set")
        );
    }

    #[test]
    fn placeholders_are_found_as_written_encoded_and_in_basic_auth() {
        let authority = RunAuthority::generate().unwrap();
        let rule: crate::profile::CredentialRule = toml::from_str(
            "name = \"gh\"\nhost = \"github.com\"\npaths = [\"/o/r.git/\"]\nsource = \"env:X\"\nbasic = \"x-access-token\"\n",
        )
        .unwrap();
        let placeholder = "stepproof-placeholder-gh-0123abcd".to_string();
        let broker = Broker {
            credentials: vec![ServiceCredential::new(
                rule,
                placeholder.clone(),
                Arc::new(FixedSecret(Secret::new("real".into()))),
                crate::http::tls::webpki_client_config().unwrap(),
            )],
            authority: Some(authority),
            read_only: Vec::new(),
            elsewhere: Vec::new(),
        };
        let none: &[(String, Vec<u8>)] = &[];
        assert_eq!(
            broker
                .placeholders_in("/x?t=STEPPROOF-placeholder-gh-0123ABCD", none)
                .len(),
            1
        );
        assert_eq!(
            broker
                .placeholders_in("/x?t=stepproof%2Dplaceholder-gh-0123abcd", none)
                .len(),
            1
        );
        let basic = base64::engine::general_purpose::STANDARD.encode(format!("u:{placeholder}"));
        let headers = vec![(
            "Authorization".to_string(),
            format!("Basic {basic}").into_bytes(),
        )];
        assert_eq!(broker.placeholders_in("/", &headers).len(), 1);
        let headers = vec![("X-Token".to_string(), placeholder.clone().into_bytes())];
        assert_eq!(broker.placeholders_in("/", &headers).len(), 1);
        assert!(
            broker
                .placeholders_in("/stepproof-placeholder-gh-other", none)
                .is_empty()
        );
        // The header carries the real value, for the scope only.
        let c = &broker.credentials[0];
        assert!(c.covers(
            &Host::Name("github.com".into()),
            443,
            "POST",
            "/o/r.git/git-receive-pack"
        ));
        assert!(!c.covers(
            &Host::Name("github.com".into()),
            8443,
            "POST",
            "/o/r.git/git-receive-pack"
        ));
        assert_eq!(
            String::from_utf8(c.to_add().unwrap().header_line).unwrap(),
            format!(
                "Authorization: Basic {}\r\n",
                base64::engine::general_purpose::STANDARD.encode("x-access-token:real")
            )
        );
        // What an answer could hand back: the value, and the basic-auth value it was sent in.
        let echo = c.to_add().unwrap().echo;
        assert_eq!(echo.len(), 2, "{echo:?}");
        assert!(!format!("{echo:?}").contains("real"));
        assert!(!format!("{broker:?}").contains("real"));
    }

    #[test]
    fn the_run_ca_signs_a_leaf_per_host_and_caches_it() {
        let started = Instant::now();
        let authority = RunAuthority::generate().unwrap();
        let generated = started.elapsed();
        assert!(
            authority
                .certificate_pem()
                .starts_with("-----BEGIN CERTIFICATE-----")
        );
        let a = authority
            .server_config(&Host::Name("git.test".into()))
            .unwrap();
        let b = authority
            .server_config(&Host::Name("git.test".into()))
            .unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        let ip = authority
            .server_config(&Host::Ip("127.0.0.5".parse().unwrap()))
            .unwrap();
        assert!(!Arc::ptr_eq(&a, &ip));
        assert_eq!(a.alpn_protocols, vec![b"http/1.1".to_vec()]);
        // The launch's other cost: the bundle (the system's roots and the CA) and the CA alone.
        let started = Instant::now();
        let mut notes = Vec::new();
        let files = trust_files(&authority, &mut notes);
        let made = started.elapsed();
        let names: Vec<&Path> = files.iter().map(|(name, _)| name.as_path()).collect();
        assert_eq!(names, [Path::new(BUNDLE_FILE), Path::new(RUN_CA_FILE)]);
        let bundle = &files[0].1;
        assert!(bundle.ends_with(authority.certificate_pem()));
        assert!(files[1].1.ends_with(authority.certificate_pem()));
        eprintln!(
            "run CA generated in {generated:?}; trust files ({} bytes) made in {made:?}",
            bundle.len()
        );
    }
}
