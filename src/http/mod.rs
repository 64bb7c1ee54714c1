//! The ground floor of HTTP: the one chunked coding (`chunked`), HTTP/1.1 framing and the
//! counted tunnel (`io`), the one blocking client (`client`), the search of an
//! answer for the credential its request carried (`scan`), the accept loop of the proxy and the
//! gateway (`server`), TLS client configurations (`tls`), URLs split (`url`). Imports nothing of ours, so every
//! service at the boundary can share it without importing another.

pub mod chunked;
pub mod client;
pub mod forward;
pub mod io;
pub mod scan;
pub mod server;
pub mod tls;
pub mod url;
