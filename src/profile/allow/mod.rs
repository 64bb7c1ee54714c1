//! The network allow-list as a profile writes it (`[network] allow`, `allow_addresses`): the
//! grammar of names, ports and address ranges, and its compiled form, which the supervisor's
//! proxy consults for every connection.

pub(crate) mod address;
pub(crate) mod host;

pub use address::SpecialRange;
pub use host::{AllowListError, CompiledAllowList, DEFAULT_ALLOW_PORT, Host, HostError};

use serde::Serialize;

/// The profile's `[network]` allow-list: the keys as written (what `explain` prints and the
/// policy hash covers) and their compiled form, checked once when the profile loads.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct AllowList {
    /// Names the sandbox may reach: `api.anthropic.com`, `*.example.com`, `host:port`,
    /// `[::1]:8080`, `127.0.0.1:9000`. Port 443 unless named.
    allow: Vec<String>,
    /// Addresses or CIDR blocks that may be connected to although special (loopback, private,
    /// link-local, metadata, …), e.g. `127.0.0.1` for a local test server.
    allow_addresses: Vec<String>,
    #[serde(skip)]
    compiled: CompiledAllowList,
}

impl AllowList {
    /// Checks every entry; the error names the first bad one as written.
    pub fn new(allow: Vec<String>, allow_addresses: Vec<String>) -> Result<Self, AllowListError> {
        let compiled = host::compile(&allow, &allow_addresses)?;
        Ok(AllowList {
            allow,
            allow_addresses,
            compiled,
        })
    }

    /// The `allow` entries, as written.
    pub fn hosts(&self) -> &[String] {
        &self.allow
    }

    /// The `allow_addresses` entries, as written.
    pub fn addresses(&self) -> &[String] {
        &self.allow_addresses
    }

    /// What the proxy matches every connection against.
    pub fn compiled(&self) -> &CompiledAllowList {
        &self.compiled
    }
}
