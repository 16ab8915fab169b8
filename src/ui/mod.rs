//! The web dashboard at `/ui` on the HTTP port (`serve --ui`): server-rendered pages (maud)
//! for the queues, their jobs, the dead-letter queue and the workers, with actions (pause,
//! resume, purge, replay, delete) for admins.
//!
//! The dashboard is a gRPC client: every read and action is a call of the four jobwire
//! services made in process ([`Api`], over the server's own tonic routes with the
//! authentication interceptor), carrying the session's bearer token, so authentication,
//! authorization, validation, limits and the audit trail are exactly those of any client. It
//! never touches `store`.
//!
//! - [`session`]: in-memory sessions (opaque random id in the `jobwire_session` cookie, the
//!   token kept server-side), idle and absolute expiry, bounded per principal and in number.
//! - [`login_limit`]: the login rate limit per client address.
//! - [`csrf`]: the per-session token every POST form carries, compared in constant time.
//! - [`routes`]: the axum router, the login and the security headers; [`visitor`]: who
//!   is asking, and the gates of pages and POSTs (session, origin, CSRF, read-only, role).
//! - [`actions`]: the POST handlers.
//! - [`pages`]: one module per page; [`components`]: sparklines, tables, formatting.
//! - [`assets`]: the embedded stylesheet and the vendored htmx, served with a content hash
//!   in the URL and a long cache lifetime.
//!
//! See `docs/dashboard.md` for the flags, access, sessions and replicas, and the CSP.

mod actions;
mod api;
mod assets;
mod components;
mod csrf;
mod login_limit;
mod pages;
mod routes;
mod session;
mod visitor;

pub use api::Api;
pub use routes::{router, UiState};
