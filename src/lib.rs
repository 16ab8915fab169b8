//! jobwire: a language-agnostic job server. Producers enqueue over gRPC, workers hold a
//! stream and receive leased jobs, and every job state change is one atomic Lua script in
//! Redis, so any number of stateless replicas can serve the same queues.
//!
//! Module map (dependencies point one way: `api` -> `lease`/`jobs` -> `store`):
//! - [`jobs`]: the domain types (job, states, backoff, dispositions, dead reasons).
//! - [`store`]: Redis only: key schema, Lua scripts, decoding.
//! - [`lease`]: worker streams, per-queue lease loops, renewal, reaper, wake-ups.
//! - [`api`]: the gRPC adapters and the one `Error -> Status` mapping.
//! - [`auth`]: who is calling (bearer tokens, client certificates) and what they may do
//!   (roles per queue pattern, from `--auth-file`), and the audit trail of admin actions.
//! - [`abuse`]: abuse limits of the gRPC port (HTTP/2 settings, streams per connection and
//!   per principal, connection age).
//! - [`server`]: wiring of gRPC, HTTP, health and shutdown; [`run`] is the entry point for
//!   `main` and for the tests.
//! - [`ui`]: the web dashboard at `/ui` (`--ui`): a gRPC client of the four services in
//!   process, with the visitor's token; never touches `store`.
//! - [`bench`]: `jobwire bench`, a load generator and BullMQ-comparable report.
//! - [`cli`]: the operator's commands (`queues`, `jobs`, `dlq`, `workers`, `token`): gRPC
//!   clients of a running server on the Rust SDK, never touching Redis.
//! - [`config`], [`telemetry`], [`shutdown`], [`http`], [`redis_embedded`]: process plumbing.

pub mod abuse;
pub mod api;
pub mod auth;
pub mod bench;
pub mod cli;
pub mod config;
pub mod error;
pub mod http;
pub mod jobs;
pub mod lease;
pub mod metrics;
pub mod queue_file;
pub mod redis_embedded;
pub mod reload;
pub mod server;
pub mod shutdown;
pub mod store;
pub mod telemetry;
pub mod transport;
pub mod ui;

pub use api::pb;
pub use error::Error;

use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;

use crate::config::ServeArgs;
use crate::redis_embedded::EmbeddedRedis;
use crate::store::Store;

/// How long start-up waits for Redis to answer.
const REDIS_START_WAIT: Duration = Duration::from_secs(30);

/// Runs a jobwire server on already-bound listeners until `shutdown` resolves. With no
/// `redis_url` in `cfg`, starts the embedded `redis-server` in `cfg.data_dir` and stops it at
/// the end. Errors: Redis unreachable at start, a `maxmemory-policy` other than `noeviction`
/// (unless `allow_eviction`), the embedded Redis failing to start, an auth file that does not
/// parse (the message names the line).
pub async fn run(
    cfg: ServeArgs,
    grpc: TcpListener,
    http: TcpListener,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    cfg.validate().map_err(anyhow::Error::msg)?;
    // A bad auth file refuses the start, before anything else is started.
    let auth = auth::Auth::from_args(&cfg.auth).map_err(anyhow::Error::msg)?;
    let embedded = match &cfg.redis_url {
        Some(_) => None,
        None => Some(EmbeddedRedis::start(&cfg.data_dir, cfg.redis_fsync).await?),
    };
    let url = match (&cfg.redis_url, &embedded) {
        (Some(u), _) => u.clone(),
        (None, Some(e)) => e.url(),
        (None, None) => unreachable!("embedded redis exists when no url is given"),
    };
    let result = async {
        let store = Store::connect(&url, cfg.redis_timeout)
            .await
            .context("redis url")?
            .with_max_queues(cfg.max_queues)
            .with_wait_replicas(cfg.wait_replicas());
        wait_for_redis(&store).await?;
        check_eviction(&store, cfg.allow_eviction).await?;
        if let Some(path) = &cfg.config {
            let queues = queue_file::QueueFile::load(path).map_err(anyhow::Error::msg)?;
            for (queue, config) in &queues {
                store
                    .set_queue_config(queue, config, &jobs::ConfigField::ALL)
                    .await
                    .with_context(|| format!("applying the config of queue {queue}"))?;
            }
            tracing::info!(path = %path.display(), queues = queues.len(), "queue config applied");
        }
        let worker_threads = tokio::runtime::Handle::current().metrics().num_workers();
        tracing::info!(grpc = %grpc.local_addr()?, http = %http.local_addr()?,
            redis = %config::redact_url(&url), worker_threads, "jobwire serving");
        server::serve(&cfg, auth, store, grpc, http, shutdown).await
    }
    .await;
    if let Some(e) = embedded {
        e.stop().await;
    }
    result
}

async fn wait_for_redis(store: &Store) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + REDIS_START_WAIT;
    loop {
        match store.ping().await {
            Ok(()) => return Ok(()),
            Err(e) if tokio::time::Instant::now() >= deadline => {
                return Err(e).context("redis did not answer PING at start-up")
            }
            Err(e) => tracing::warn!(error = %e, "waiting for redis"),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Refuses to run on a Redis that may evict keys: eviction silently deletes jobs and leases.
async fn check_eviction(store: &Store, allow: bool) -> anyhow::Result<()> {
    let policy = match store.maxmemory_policy().await {
        Ok(p) => p,
        // Managed Redis services often disable CONFIG: the policy cannot be read there.
        Err(e) if allow => {
            tracing::warn!(error = %e, "cannot read redis maxmemory-policy (CONFIG disabled?); make sure it is noeviction (--allow-eviction)");
            return Ok(());
        }
        Err(e) => {
            return Err(e).context(
                "cannot read redis maxmemory-policy with CONFIG GET; if CONFIG is disabled, make sure the policy is \
                 noeviction and pass --allow-eviction",
            )
        }
    };
    if policy == "noeviction" {
        return Ok(());
    }
    if allow {
        tracing::warn!(policy = %policy, "redis maxmemory-policy is not noeviction: under memory pressure redis will delete jobs and leases (--allow-eviction)");
        return Ok(());
    }
    anyhow::bail!(
        "redis maxmemory-policy is {policy:?}, not \"noeviction\": eviction would silently delete jobs and leases. \
         Set `maxmemory-policy noeviction` on the redis server, or pass --allow-eviction to run anyway"
    )
}
