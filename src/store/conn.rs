//! [`Conn`]: the store's one Redis connection. It is a redis-rs `ConnectionManager`
//! (multiplexed; reconnects by itself after I/O errors), replaced by a fresh one when Redis
//! answers that it is a replica (READONLY, MASTERDOWN).
//!
//! Why: after a failover behind a fixed address (a proxy, a DNS name, a Sentinel- or
//! operator-managed service), the old master lives on as a replica and keeps the connection
//! open, so the `ConnectionManager` would stay on it forever, failing every write. Making the
//! connection again reaches whatever now answers at the address. Calls already in flight
//! finish on the old connection; only the first reply that says "replica" per connection
//! triggers the replacement, at most once per [`MIN_RECONNECT_GAP`], so a burst of them
//! reconnects once.

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use futures::FutureExt;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, Pipeline, RedisError, RedisFuture, RedisResult, Value};

use super::error::says_replica;

/// Least time between two replacements: a replica answering a burst of calls (or a Redis
/// that stays a replica) makes one new connection per this period, not one per call.
const MIN_RECONNECT_GAP: Duration = Duration::from_millis(250);

/// A cheap-to-clone handle on the current connection; implements redis-rs's
/// [`ConnectionLike`], so commands and scripts run on it as on a `ConnectionManager`.
#[derive(Clone)]
pub struct Conn {
    shared: Arc<Shared>,
}

struct Shared {
    client: redis::Client,
    config: ConnectionManagerConfig,
    /// The connection, with a generation number that grows with each replacement.
    current: RwLock<(u64, ConnectionManager)>,
    /// When the connection was last replaced (None: never).
    replaced_at: RwLock<Option<Instant>>,
    /// The current generation, for those who follow replacements (the wake-up listener's
    /// pub/sub connection must move to the new master too).
    generation: tokio::sync::watch::Sender<u64>,
}

impl Conn {
    /// A lazily connecting connection to `client` (the first command connects).
    pub fn new(client: redis::Client, config: ConnectionManagerConfig) -> RedisResult<Conn> {
        let manager = ConnectionManager::new_lazy_with_config(client.clone(), config.clone())?;
        Ok(Conn {
            shared: Arc::new(Shared {
                client,
                config,
                current: RwLock::new((0, manager)),
                replaced_at: RwLock::new(None),
                generation: tokio::sync::watch::Sender::new(0),
            }),
        })
    }

    fn current(&self) -> (u64, ConnectionManager) {
        let guard = self
            .shared
            .current
            .read()
            .unwrap_or_else(|p| p.into_inner());
        (guard.0, guard.1.clone())
    }

    /// Replaces connection `generation` if `reply` says the node is a replica (and no other
    /// call replaced it already). Error replies come back as `Ok(Value::ServerError)` from
    /// [`ConnectionLike`] (they become `Err` only when decoded), so both are looked at.
    fn check<'v>(
        &self,
        generation: u64,
        reply: Result<impl Iterator<Item = &'v Value>, &RedisError>,
    ) {
        let replica = match reply {
            Err(e) => says_replica(e),
            Ok(mut values) => values.any(|v| match v {
                Value::ServerError(se) => says_replica(&RedisError::from(se.clone())),
                _ => false,
            }),
        };
        if !replica {
            return;
        }
        let mut guard = self
            .shared
            .current
            .write()
            .unwrap_or_else(|p| p.into_inner());
        let mut replaced_at = self
            .shared
            .replaced_at
            .write()
            .unwrap_or_else(|p| p.into_inner());
        let recent = replaced_at.is_some_and(|t| t.elapsed() < MIN_RECONNECT_GAP);
        if guard.0 != generation || recent {
            return;
        }
        match ConnectionManager::new_lazy_with_config(
            self.shared.client.clone(),
            self.shared.config.clone(),
        ) {
            Ok(fresh) => {
                *guard = (generation + 1, fresh);
                *replaced_at = Some(Instant::now());
                self.shared.generation.send_replace(generation + 1);
                tracing::warn!("redis answered as a replica (READONLY or MASTERDOWN); connecting again to reach the current master");
            }
            Err(err) => tracing::warn!(error = %err, "cannot make a new redis connection"),
        }
    }
}

impl super::Store {
    /// Changes each time the store's connection is replaced because Redis answered as a
    /// replica: whatever else holds a connection to the same address (the wake-up
    /// listener's pub/sub) should connect again to reach the current master.
    pub fn connection_replaced(&self) -> tokio::sync::watch::Receiver<u64> {
        self.conn.shared.generation.subscribe()
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        async move {
            let (generation, mut conn) = self.current();
            let result = conn.req_packed_command(cmd).await;
            self.check(generation, result.as_ref().map(std::iter::once));
            result
        }
        .boxed()
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        async move {
            let (generation, mut conn) = self.current();
            let result = conn.req_packed_commands(pipeline, offset, count).await;
            self.check(generation, result.as_ref().map(|v| v.iter()));
            result
        }
        .boxed()
    }

    fn get_db(&self) -> i64 {
        self.current().1.get_db()
    }
}
