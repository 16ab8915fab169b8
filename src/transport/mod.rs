//! The gRPC port's connections: plaintext or TLS (rustls, certificates reloaded without a
//! restart), each tagged with a [`ConnInfo`] that tonic puts into every request's extensions.
//!
//! - [`listener`]: the accept loop ([`incoming`]) and the connection type ([`Conn`]).
//! - [`tls`]: the TLS configuration from the `--tls-*` files and its reload ([`ServerTls`]).
//! - [`preface`]: the deadline of a new connection's HTTP/2 preface.
//! - [`caps`]: the caps on connections of a port, in total and per peer IP (both ports).
//! - [`fds`]: the descriptor limit, raised at start.

pub mod caps;
pub mod fds;
pub mod listener;
mod preface;
pub mod tls;

pub use caps::{ConnCaps, Port};
pub use listener::{incoming, Conn, ConnLimits};
pub use tls::ServerTls;

use std::net::SocketAddr;
use std::sync::Arc;

use rustls::pki_types::CertificateDer;

/// What the server knows about the connection a request came on; read it with
/// [`conn_info`]. Present on every request the jobwire listener accepted.
#[derive(Clone, Debug)]
pub struct ConnInfo {
    /// Process-unique id of the connection (for per-connection limits).
    pub id: u64,
    /// The peer's address.
    pub remote_addr: Option<SocketAddr>,
    /// The client's certificate chain (leaf first) when mTLS verified one; `None` otherwise.
    pub peer_certs: Option<Arc<Vec<CertificateDer<'static>>>>,
}

/// The [`ConnInfo`] of the connection `req` came on, if it came through jobwire's listener.
pub fn conn_info<T>(req: &tonic::Request<T>) -> Option<&ConnInfo> {
    req.extensions().get::<ConnInfo>()
}
