//! Abuse limits of the gRPC port: the HTTP/2 settings tonic applies per connection
//! ([`http2_limits`]) and the count of worker streams per connection and per principal
//! ([`StreamLimits`]), which also ends the streams of connections past their age.
//!
//! Why the HTTP/2 limits are always set explicitly: tonic 0.14 passes its own `None` for
//! every one it is not given, and for hyper that `None` means "no limit", overriding hyper's
//! defaults (200 concurrent streams, 1024 local error resets). Left alone, a jobwire server
//! would run without the MadeYouReset protection and without a stream cap.

mod streams;

pub use streams::{ConnKey, StreamGuard, StreamLimits};

use tonic::transport::Server;

use crate::config::AbuseArgs;

/// `server` with the HTTP/2 limits of `args`: SETTINGS_MAX_CONCURRENT_STREAMS, the
/// pending-accept reset limit (rapid reset, CVE-2023-44487), the local error reset limit
/// (MadeYouReset, CVE-2025-8671) and, when set, the connection age (GOAWAY when reached).
///
/// `--max-connection-age-grace` is deliberately not handed to tonic: in tonic 0.14 a grace
/// replaces the GOAWAY at the age by an abrupt close at age + grace. The grace is enforced on
/// the long streams instead ([`StreamLimits`]), and unary calls end by `--request-timeout`,
/// so a connection past its age closes once its streams have ended.
pub fn http2_limits<L>(server: Server<L>, args: &AbuseArgs) -> Server<L> {
    let server = server
        .max_concurrent_streams(args.max_concurrent_streams)
        .http2_max_pending_accept_reset_streams(Some(args.http2_max_pending_reset_streams))
        .http2_max_local_error_reset_streams(Some(args.http2_max_local_error_reset_streams));
    match args.connection_age() {
        Some(age) => server.max_connection_age(age),
        None => server,
    }
}
