//! Authentication and authorization of the gRPC API (DESIGN.md section 11).
//!
//! - [`token`]: bearer tokens `jw_<id>_<secret>`; only the SHA-256 of the secret is stored,
//!   compared in constant time.
//! - [`identity`]: the [`Principal`] of a request, from its bearer token or its client
//!   certificate (URI SAN, then DNS SAN; the CN only without SANs or with
//!   `--tls-client-identity-cn`).
//! - [`file`]: the auth file (`--auth-file`, YAML or TOML): principals and their grants.
//! - [`policy`]: roles, the RPCs each allows, queue patterns; deny by default.
//! - [`guard`]: [`Auth`], the one place that decides: an interceptor authenticates every
//!   call of the jobwire services (health and reflection stay open) and refuses, before the
//!   request body is read, a principal no grant of which allows the RPC on any queue; every
//!   handler then asks [`Auth::check`] with the queue(s) of its request. The policy reloads
//!   on change.
//! - [`method`]: tells the interceptor which RPC a request calls (from its path).
//! - [`audit`]: one structured line and a counter per admin action.
//!
//! `jobwire token new` (which makes tokens and auth-file entries) lives in `crate::cli::token`.
//!
//! Without `--auth-file` every caller is the principal `anonymous` and may call everything.

pub mod audit;
pub mod file;
mod guard;
pub mod identity;
mod method;
pub mod policy;
pub mod token;

pub use guard::{Auth, AuthInterceptor};
pub use identity::Principal;
pub use method::{rpc_of_path, Guarded};
pub use policy::{Role, Rpc};

/// The principal the interceptor authenticated for `req`; `None` on a request that did not
/// go through it (health, reflection).
pub fn principal<T>(req: &tonic::Request<T>) -> Option<&Principal> {
    req.extensions().get::<Principal>()
}
