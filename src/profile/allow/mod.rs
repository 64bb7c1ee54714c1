//! The network allow-list as a profile writes it (`[network] allow`, `allow_addresses`): the
//! grammar of names, ports and address ranges, and its compiled form, which the supervisor's
//! proxy consults for every connection.

pub(crate) mod address;
pub(crate) mod host;

pub use address::SpecialRange;
pub use host::{AllowListError, CompiledAllowList, DEFAULT_ALLOW_PORT, Host, HostError};

use serde::{Deserialize, Serialize};

/// The profile's `[network]` allow-list keys, as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllowList {
    /// Names the sandbox may reach: `api.anthropic.com`, `*.example.com`, `host:port`,
    /// `[::1]:8080`, `127.0.0.1:9000`. Port 443 unless named.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Addresses or CIDR blocks that may be connected to although special (loopback, private,
    /// link-local, metadata, …), e.g. `127.0.0.1` for a local test server.
    #[serde(default)]
    pub allow_addresses: Vec<String>,
}

impl AllowList {
    /// Checks every entry; the error names the first bad one as written.
    pub fn compile(&self) -> Result<CompiledAllowList, AllowListError> {
        host::compile(&self.allow, &self.allow_addresses)
    }
}
