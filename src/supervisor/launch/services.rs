//! The services a run serves from outside while the sandbox runs — the allow-list proxy, the
//! credential gateway (each with the thread that writes its records), the hook's receiver and
//! the runbook's servers — and the one place they stop, in order ([`Services::stop`]).

use crate::audit::sink::AuditSink;
use crate::audit::{ReceiverCounts, ReceiverHandle};
use crate::supervisor::net::{credentials, gateway, proxy};
use crate::supervisor::runbook::engine::Serving;

/// A service with the thread that writes its records to the audit log.
pub(crate) type WithDrain<H> = (H, std::thread::JoinHandle<()>);

/// The services the launch started, held until the run is over. [`Services::stop`] stops them in
/// their order; dropping them (a launch that failed after one started, a panic) does the same.
#[derive(Default)]
pub(crate) struct Services {
    pub proxy: Option<WithDrain<proxy::ProxyHandle>>,
    pub gateway: Option<WithDrain<gateway::GatewayHandle>>,
    pub receiver: Option<ReceiverHandle>,
    pub runbook: Option<Serving>,
}

impl Services {
    /// Stops every service and returns what the hook's receiver counted. The order: each of the
    /// proxy, the gateway and the hook's receiver is told first, so that they wind down
    /// together; then the proxy, the gateway and the receiver in turn end their connections and
    /// write their last records; the runbook's servers last (in a run that ended early, by its
    /// deadline or a signal, their work in flight was stopped then, see `RunbookRun::stop_work`).
    pub fn stop(mut self) -> Option<ReceiverCounts> {
        self.stop_in_order()
    }

    fn stop_in_order(&mut self) -> Option<ReceiverCounts> {
        if let Some((handle, _)) = &mut self.proxy {
            handle.stop();
        }
        if let Some((handle, _)) = &mut self.gateway {
            handle.stop();
        }
        if let Some(receiver) = &mut self.receiver {
            receiver.stop();
        }
        if let Some((handle, drain)) = self.proxy.take() {
            handle.shutdown();
            let _ = drain.join();
        }
        if let Some((handle, drain)) = self.gateway.take() {
            handle.shutdown();
            let _ = drain.join();
        }
        let hook_records = self.receiver.take().map(|r| r.shutdown());
        if let Some(servers) = self.runbook.take() {
            servers.shutdown();
        }
        hook_records
    }
}

impl Drop for Services {
    /// The fallback: what [`Services::stop`] did not stop (a launch that failed after a service
    /// started) stops here, in the same order.
    fn drop(&mut self) {
        let _ = self.stop_in_order();
    }
}

/// Serves the allow-list proxy on the socket the init opened inside; every connection attempt
/// goes to the audit log.
pub(crate) fn start_proxy(
    listener: std::net::TcpListener,
    allow: crate::profile::allow::CompiledAllowList,
    broker: Option<std::sync::Arc<credentials::Broker>>,
    audit: Option<&AuditSink>,
    notices: Option<std::path::PathBuf>,
) -> (proxy::ProxyHandle, std::thread::JoinHandle<()>) {
    let (tx, rx) = std::sync::mpsc::channel::<proxy::ConnectionRecord>();
    let handle = proxy::serve_with_credentials(listener, allow, proxy_resolver(), tx, broker);
    let drain = drain_records("network", rx, audit, notices);
    (handle, drain)
}

/// The resolver the proxy uses: the system's, or for tests only the caller's own
/// `STEPPROOF_TEST_RESOLVE=name=address,…` (names it lists go to those addresses; the rest to
/// the system's resolver). It is the caller's environment: whoever sets it could as well run
/// the proxy's traffic anywhere, and the addresses it names are still checked against
/// `allow_addresses` like any other.
fn proxy_resolver() -> std::sync::Arc<dyn proxy::Resolver> {
    match std::env::var("STEPPROOF_TEST_RESOLVE") {
        Ok(spec) if !spec.is_empty() => std::sync::Arc::new(TestResolver::parse(&spec)),
        _ => std::sync::Arc::new(proxy::SystemResolver),
    }
}

/// `STEPPROOF_TEST_RESOLVE`'s names and addresses (malformed entries are ignored).
struct TestResolver(Vec<(String, std::net::IpAddr)>);

impl TestResolver {
    fn parse(spec: &str) -> TestResolver {
        TestResolver(
            spec.split(',')
                .filter_map(|entry| {
                    let (name, ip) = entry.split_once('=')?;
                    Some((name.trim().to_ascii_lowercase(), ip.trim().parse().ok()?))
                })
                .collect(),
        )
    }
}

impl proxy::Resolver for TestResolver {
    fn resolve(&self, host: &str, port: u16) -> std::io::Result<Vec<std::net::SocketAddr>> {
        match self.0.iter().find(|(name, _)| name == host) {
            Some((_, ip)) => Ok(vec![std::net::SocketAddr::new(*ip, port)]),
            None => proxy::SystemResolver.resolve(host, port),
        }
    }
}

/// The most the refused-hosts notice file grows to; later refusals are only in the audit log.
const MAX_NOTICES: u64 = 64 << 10;

/// Appends a refused host to the notices the hook reads (`agent_layer::NOTICES_DIR`).
fn notice_refused(file: &std::path::Path, shown: &str, hint: &str) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if std::fs::metadata(file).is_ok_and(|m| m.len() >= MAX_NOTICES) {
        return;
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let line = format!("{now}\t{shown}\t{hint}\n");
    let opened = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(file);
    if let Ok(mut f) = opened {
        let _ = f.write_all(line.as_bytes());
    }
}

/// Writes every record of a proxy or gateway to the audit log, from a thread of its own.
fn drain_records(
    kind: &'static str,
    rx: std::sync::mpsc::Receiver<proxy::ConnectionRecord>,
    audit: Option<&AuditSink>,
    notices: Option<std::path::PathBuf>,
) -> std::thread::JoinHandle<()> {
    let audit = audit.map(|a| a.clone_handle());
    std::thread::spawn(move || {
        // Credentials a service has handed back this run: said once each on the terminal.
        let mut echoed: Vec<String> = Vec::new();
        for record in rx {
            if let (Some(file), Some((shown, hint))) = (&notices, &record.not_listed) {
                notice_refused(file, shown, hint);
            }
            if let Some(name) = record
                .credential
                .as_ref()
                .filter(|_| record.credential_echoed)
                && !echoed.contains(name)
            {
                // The name and where, never the value (the record says the same).
                crate::say!(
                    "stepproof-run: WARNING: an answer from {}:{} held the value of credential {name} that was added to its request: the agent may have read it (the audit log's {kind} record has credential_echoed); consider replacing it",
                    record.host,
                    record.port
                );
                echoed.push(name.clone());
            }
            tracing::info!(
                host = %record.host,
                port = record.port,
                allowed = record.allowed,
                rule = %record.rule,
                "{kind}"
            );
            if let Some(audit) = &audit {
                // A placeholder where it does not belong is its own kind of record: what a
                // reader of the log looks for first.
                let kind = if record.placeholder_blocked.is_some() {
                    "exfiltration-attempt"
                } else {
                    kind
                };
                // The agent decides how many connections it makes: charged to the run's budget
                // of what it causes to be recorded.
                audit.record_caused("supervisor", kind, &record);
            }
        }
    })
}

/// Serves the credential gateway on the socket the init made on the sandbox's /run.
pub(crate) fn start_gateway(
    listener: std::os::unix::net::UnixListener,
    upstream: gateway::Upstream,
    login: std::sync::Arc<crate::supervisor::net::login::ModelLogin>,
    settings: Option<gateway::ServerSettingsMerge>,
    audit: Option<&AuditSink>,
) -> (gateway::GatewayHandle, std::thread::JoinHandle<()>) {
    let (tx, rx) = std::sync::mpsc::channel::<proxy::ConnectionRecord>();
    let handle = gateway::serve_gateway(listener, upstream, login, settings, tx);
    (handle, drain_records("gateway", rx, audit, None))
}
