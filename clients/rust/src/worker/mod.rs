//! [`Worker`]: runs handlers per job name on leases from a `Subscribe` stream.
//!
//! - Concurrency = credits (Pub/Sub-style flow control): the stream is opened with as many
//!   credits as there are free slots, and a credit comes back only when a slot frees (the
//!   server returns one per ack/fail on the stream; for a job settled outside the stream
//!   the worker grants one). The worker never holds more leases than `concurrency`.
//! - Liveness: a heartbeat every `min(heartbeat_interval, lease duration / 3)` while the
//!   stream is up, sent by the same task that reads the stream, so a stalled worker stops
//!   heartbeating (unlike a heartbeat thread that outlives a stuck stream); a stall
//!   watchdog drops a stream whose settle replies stop coming; HTTP/2 keepalive on the
//!   connection ([`crate::Client::connect`]).
//! - A broken stream: reconnect with full-jitter backoff 0.5 s -> 30 s
//!   ([`crate::backoff`]), same worker id; every lease still held is renewed with
//!   ExtendLease (then every lease duration / 3 while its handler runs), and results are
//!   settled with unary Ack/Fail meanwhile (FAILED_PRECONDITION: the lease was lost, logged
//!   and dropped; UNAVAILABLE: kept and retried). A result is never dropped silently.
//! - Shutdown ([`WorkerOptions::handle_signals`], SIGTERM/SIGINT, or
//!   [`Worker::shutdown_token`]): Drain, wait for held jobs up to `grace`, then cancel the
//!   handlers' [`Ctx::cancel`] and fail what is left as RETRY (retry_after 1 s), then close.
//!   A second signal ends the grace at once.
//! - Job control: a `CancelLease` from the server cancels that handler's [`Ctx::cancel`]
//!   ([`CancelCause::JobCancelled`]) and the handler's return is settled as usual (an
//!   error ends the job CANCELLED); [`Ctx::progress`] and [`Ctx::save_checkpoint`] go on
//!   the stream and wait for the matching `ProgressSaved` (unary ReportProgress when the
//!   stream is gone); [`Ctx::set_result`] rides on the Ack.

mod core;
mod ctx;
mod handler;
mod settle;
mod signal;
mod stats;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

pub use ctx::{CancelCause, Ctx};
pub(crate) use ctx::{ReportRequest, Reporter};
pub use handler::Job;
pub(crate) use handler::{bytes_handler, fail_request, json_handler, run as run_handler, Handler};
pub use stats::WorkerStats;

use crate::{Client, Error, JobError};

/// A worker's options (`..Default::default()` for the rest).
#[derive(Clone, Debug)]
pub struct WorkerOptions {
    /// The queues to lease from (1 to 32).
    pub queues: Vec<String>,
    /// How many handlers run at once = how many leases are held at most (1 to 10000;
    /// default 1).
    pub concurrency: u32,
    /// Names the worker in the server's logs and failed attempts (up to 128 bytes); kept
    /// across reconnects. `None`: `<hostname>-<pid>-<random>`.
    pub worker_id: Option<String>,
    /// How long a shutdown waits for held jobs before cancelling them (default 25 s; must
    /// be above 0, like Kubernetes' 30 s termination grace minus a margin).
    pub grace: Duration,
    /// Shut down on SIGTERM or SIGINT (default true). Off: only
    /// [`Worker::shutdown_token`] stops the worker.
    pub handle_signals: bool,
    /// The most time between heartbeats (default 2 s; the server's `--heartbeat-timeout`
    /// defaults to 10 s). A third of the lease duration is used when that is shorter.
    pub heartbeat_interval: Duration,
    /// A stream whose settle replies are this late is treated as broken and replaced
    /// (default 30 s).
    pub stall_timeout: Duration,
}

impl Default for WorkerOptions {
    fn default() -> WorkerOptions {
        WorkerOptions {
            queues: Vec::new(),
            concurrency: 1,
            worker_id: None,
            grace: Duration::from_secs(25),
            handle_signals: true,
            heartbeat_interval: Duration::from_secs(2),
            stall_timeout: Duration::from_secs(30),
        }
    }
}

/// A worker: handlers per job name, run on leases from the server.
///
/// ```no_run
/// # async fn demo(client: jobwire_client::Client) -> Result<(), jobwire_client::Error> {
/// use jobwire_client::{Ctx, Job, JobError, Worker, WorkerOptions};
/// #[derive(serde::Deserialize)]
/// struct Welcome { to: String }
/// let mut worker = Worker::new(client, WorkerOptions {
///     queues: vec!["emails".into()], concurrency: 8, ..Default::default() });
/// worker.handle("welcome", |job: Job<Welcome>, _ctx: Ctx| async move {
///     if job.payload.to.is_empty() { return Err(JobError::non_retryable("no address")); }
///     Ok(())
/// });
/// worker.run().await
/// # }
/// ```
pub struct Worker {
    client: Client,
    options: WorkerOptions,
    handlers: HashMap<String, Handler>,
    shutdown: CancellationToken,
    stats: Arc<WorkerStats>,
}

impl Worker {
    /// A worker on `client` with `options`; register handlers, then [`Worker::run`].
    pub fn new(client: Client, options: WorkerOptions) -> Worker {
        Worker {
            client,
            options,
            handlers: HashMap::new(),
            shutdown: CancellationToken::new(),
            stats: Arc::default(),
        }
    }

    /// Handles jobs named `name` whose payload is JSON decoding as `T`. A payload that does
    /// not decode fails the attempt NO_RETRY.
    pub fn handle<T, F, Fut>(&mut self, name: &str, f: F) -> &mut Worker
    where
        T: DeserializeOwned + Send + 'static,
        F: Fn(Job<T>, Ctx) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), JobError>> + Send + 'static,
    {
        self.handlers
            .insert(name.to_owned(), handler::json_handler(f));
        self
    }

    /// Handles jobs named `name` with their raw payload bytes.
    pub fn handle_bytes<F, Fut>(&mut self, name: &str, f: F) -> &mut Worker
    where
        F: Fn(Job<Vec<u8>>, Ctx) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), JobError>> + Send + 'static,
    {
        self.handlers
            .insert(name.to_owned(), handler::bytes_handler(f));
        self
    }

    /// The worker's counters (leases, settles, lost leases, reconnects, ...), live while it
    /// runs.
    pub fn stats(&self) -> Arc<WorkerStats> {
        self.stats.clone()
    }

    /// Cancel this token to shut the worker down gracefully (as SIGTERM does).
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Runs until shut down; returns once every held job is settled (or failed as RETRY
    /// at the end of the grace). Errors on invalid options, and with the server's status
    /// when it refuses the stream for good at open (INVALID_ARGUMENT, UNAUTHENTICATED,
    /// PERMISSION_DENIED; once nothing is held): other connection problems are retried (and
    /// logged) forever.
    pub async fn run(self) -> Result<(), Error> {
        let o = &self.options;
        if o.queues.is_empty() || o.queues.len() > 32 {
            return Err(Error::InvalidArgument("queues: 1 to 32 needed".into()));
        }
        if o.concurrency == 0 || o.concurrency > 10_000 {
            return Err(Error::InvalidArgument("concurrency: 1 to 10000".into()));
        }
        if o.grace.is_zero() {
            return Err(Error::InvalidArgument("grace must be above 0".into()));
        }
        if o.heartbeat_interval.is_zero() || o.stall_timeout.is_zero() {
            return Err(Error::InvalidArgument(
                "heartbeat_interval and stall_timeout must be above 0".into(),
            ));
        }
        let hurry = CancellationToken::new();
        let signals = o
            .handle_signals
            .then(|| signal::watch(self.shutdown.clone(), hurry.clone()))
            .transpose()?;
        let worker_id = o.worker_id.clone().unwrap_or_else(default_worker_id);
        let result = core::Core::new(
            self.client,
            self.options,
            self.handlers,
            worker_id,
            self.shutdown,
            hurry,
            self.stats,
        )
        .run()
        .await;
        if let Some(s) = signals {
            s.abort();
        }
        result
    }
}

/// `<hostname>-<pid>-<4 random hex digits>`.
fn default_worker_id() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
        })
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "worker".into());
    let mut id = format!(
        "{host}-{}-{:04x}",
        std::process::id(),
        rand::random::<u16>()
    );
    id.truncate(128);
    id
}
