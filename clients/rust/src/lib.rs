//! The Rust client SDK of jobwire: a producer [`Client`] and a
//! [`Worker`] that speaks the `Subscribe` stream protocol for you.
//!
//! ```no_run
//! # async fn demo() -> Result<(), jobwire_client::Error> {
//! use jobwire_client::{Client, ClientOptions, EnqueueOptions, Payload};
//! let client = Client::connect("http://127.0.0.1:50051", ClientOptions::default()).await?;
//! let payload = Payload::json(&serde_json::json!({"to": "ada@example.com"}))?;
//! client.enqueue("emails", "welcome", payload, EnqueueOptions::default()).await?;
//! # Ok(()) }
//! ```
//!
//! Modules:
//! - [`client`]: [`Client`] (enqueue, get_job, cancel/delete, dead letters, queues,
//!   groups), connection options (TLS, bearer token), retries of UNAVAILABLE for idempotent
//!   calls.
//! - [`stream`]: the low-level `Subscribe` stream ([`Client::subscribe`]): typed lease and
//!   settle halves, for programs that drive credits themselves (`jobwire bench`).
//! - [`worker`]: [`Worker`], handlers per job name, credits = concurrency, heartbeats,
//!   reconnects with ExtendLease, graceful shutdown.
//! - [`error`]: [`Error`] (client calls) and [`JobError`] (what a handler returns).
//! - [`testing`]: run a handler against a fake lease; start a real `jobwire serve` on free
//!   ports.
//! - [`pb`]: the generated messages and tonic clients of `jobwire.v1`.

pub mod backoff;
pub mod client;
pub mod error;
mod payload;
pub mod stream;
pub mod testing;
pub mod worker;

/// The generated protobuf messages and tonic clients of package `jobwire.v1` (from
/// `proto/jobwire/v1/*.proto`, compiled by this crate's build.rs).
#[allow(missing_docs, clippy::all)]
pub mod pb {
    tonic::include_proto!("jobwire.v1");
}

pub use client::{
    Backoff, CancelledJobs, Client, ClientOptions, EnqueueOptions, Enqueued, Keepalive, NewJob,
    Report, TlsOptions,
};
pub use error::{Error, JobError};
pub use payload::Payload;
pub use stream::{LeaseStream, StreamEvent, StreamSender};
pub use tokio_util::sync::CancellationToken;
pub use worker::{CancelCause, Ctx, Job, Worker, WorkerOptions, WorkerStats};
