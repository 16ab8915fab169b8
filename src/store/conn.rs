//! [`Conn`]: the store's one backend, whatever `--redis-url` names ([`Target`]): one Redis, a
//! Redis Cluster, or a master named by Sentinel. It implements redis-rs's [`ConnectionLike`],
//! so commands, pipelines and scripts run on it alike; nothing outside `store/` knows which
//! backend it is. What differs:
//!
//! - One Redis: a redis-rs `ConnectionManager` (multiplexed; reconnects by itself after I/O
//!   errors), replaced by a fresh one when Redis answers that it is a replica (READONLY,
//!   MASTERDOWN). After a failover behind a fixed address (a proxy, a DNS name, an
//!   operator-managed service) the old master lives on as a replica and keeps the connection
//!   open: connecting again reaches whatever now answers at the address.
//! - Sentinel: the same, but the address is asked of the sentinels (`SENTINEL
//!   get-master-addr-by-name`, then `ROLE` on the answer: redis-rs's `SentinelClient`) at the
//!   first call and again after a reply that says "replica" or a connection error (refused,
//!   dropped, timed out): the old master is gone or demoted, the sentinels name the new one
//!   once they promoted it.
//! - Cluster: a redis-rs `cluster_async::ClusterConnection` (one multiplexed connection per
//!   node, routed by slot; follows MOVED/ASK and refreshes the slot map after errors), made
//!   lazily at the first call, with `--redis-timeout` as connection and response timeout and
//!   a few short retries; reads go to masters only (no read-from-replicas).
//!
//! Replacements of a direct connection happen at most once per [`MIN_RECONNECT_GAP`], so a
//! burst of failing calls reconnects once; calls already in flight finish on the old one.
//!
//! Each backend holds two connections (per node): one for everything, and one only for the
//! script calls followed by `WAIT` under `--redis-wait-replicas` ([`Conn::for_waits`]). Redis
//! runs one client's commands in order and `WAIT` blocks its client until the replicas
//! answer or its timeout passes: on a master without a replica every such call holds its
//! connection for the whole wait timeout, and reads, health probes and unwaited writes queued
//! behind them on one shared connection timed out (issue 32, item 8).

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use futures::FutureExt;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{Cmd, ConnectionInfo, Pipeline, RedisError, RedisFuture, RedisResult, Value};

use super::error::says_replica;
use super::target::Target;

/// Least time between two replacements (or Sentinel look-ups) of a direct connection.
const MIN_RECONNECT_GAP: Duration = Duration::from_millis(250);

/// Retries of one cluster call after a MOVED/ASK, TRYAGAIN, CLUSTERDOWN or a connection error
/// (each after a slot-map refresh), with waits from [`CLUSTER_MIN_WAIT_MS`] doubling up to
/// [`CLUSTER_MAX_WAIT_MS`]; all within `--redis-timeout` (then the call fails UNAVAILABLE and
/// its caller retries).
const CLUSTER_RETRIES: u32 = 6;
const CLUSTER_MIN_WAIT_MS: u64 = 20;
const CLUSTER_MAX_WAIT_MS: u64 = 500;

/// A cheap-to-clone handle on the store's backend (see the module doc).
#[derive(Clone)]
pub(crate) struct Conn {
    backend: Backend,
    /// Commands go on the connection kept for `WAIT` pipelines ([`Conn::for_waits`]).
    waits: bool,
}

#[derive(Clone)]
enum Backend {
    /// One Redis at a fixed or Sentinel-resolved address.
    Direct(Arc<Direct>),
    /// A Redis Cluster.
    Cluster(Arc<Cluster>),
}

/// Where a direct connection's address comes from.
enum Source {
    Fixed(redis::Client),
    Sentinel {
        client: tokio::sync::Mutex<SentinelClient>,
        master: String,
    },
}

struct Direct {
    source: Source,
    config: ConnectionManagerConfig,
    timeout: Duration,
    state: RwLock<State>,
    /// One replacement at a time.
    refresh: tokio::sync::Mutex<()>,
    /// The current generation, for those who follow replacements (the wake-up listener's
    /// pub/sub connection must move to the new master too).
    generation: tokio::sync::watch::Sender<u64>,
}

#[derive(Default)]
struct State {
    /// Grows with each replacement.
    generation: u64,
    /// The client of the current address and its connection (None before the first
    /// Sentinel look-up).
    current: Option<(redis::Client, ConnectionManager)>,
    /// The second connection to the same address, for `WAIT` pipelines (made with `current`).
    waits: Option<ConnectionManager>,
    /// The current connection should be replaced (it reached a replica or a dead address).
    stale: bool,
    /// When the connection was last replaced or a replacement last tried.
    tried_at: Option<Instant>,
}

pub(crate) struct Cluster {
    /// Seeds, credentials, TLS mode.
    nodes: Vec<ConnectionInfo>,
    timeout: Duration,
    conn: tokio::sync::OnceCell<ClusterConnection>,
    /// The second cluster connection, for `WAIT` pipelines.
    waits: tokio::sync::OnceCell<ClusterConnection>,
}

fn recent(at: Option<Instant>) -> bool {
    at.is_some_and(|t| t.elapsed() < MIN_RECONNECT_GAP)
}

/// An error that means "the address does not answer" (no reply at all).
fn unreachable(e: &RedisError) -> bool {
    e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_connection_refusal()
}

impl Conn {
    /// A lazily connecting backend for `target` (the first command connects); every command
    /// and connection attempt times out after `timeout`.
    pub(crate) fn new(target: Target, timeout: Duration) -> RedisResult<Conn> {
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(timeout))
            .set_connection_timeout(Some(timeout))
            .set_number_of_retries(1);
        let direct = |source: Source, current: Option<(redis::Client, ConnectionManager)>| {
            let waits = match &current {
                Some((client, _)) => Some(ConnectionManager::new_lazy_with_config(
                    client.clone(),
                    config.clone(),
                )?),
                None => None,
            };
            Ok::<_, RedisError>(Direct {
                source,
                config: config.clone(),
                timeout,
                state: RwLock::new(State {
                    current,
                    waits,
                    ..State::default()
                }),
                refresh: tokio::sync::Mutex::new(()),
                generation: tokio::sync::watch::Sender::new(0),
            })
        };
        let backend = match target {
            Target::Single(info) => {
                let client = redis::Client::open(info)?;
                let manager =
                    ConnectionManager::new_lazy_with_config(client.clone(), config.clone())?;
                Backend::Direct(Arc::new(direct(
                    Source::Fixed(client.clone()),
                    Some((client, manager)),
                )?))
            }
            Target::Sentinel {
                sentinels,
                master,
                node,
                tls,
            } => {
                let mut info =
                    SentinelNodeConnectionInfo::default().set_redis_connection_info(node);
                if tls {
                    info = info.set_tls_mode(redis::TlsMode::Secure);
                }
                let client = SentinelClient::build(
                    sentinels,
                    master.clone(),
                    Some(info),
                    SentinelServerType::Master,
                )?;
                Backend::Direct(Arc::new(direct(
                    Source::Sentinel {
                        client: tokio::sync::Mutex::new(client),
                        master,
                    },
                    None,
                )?))
            }
            Target::Cluster(nodes) => {
                // Checks the seeds (same credentials and TLS mode) now, connects later.
                cluster_builder(&nodes, timeout).build()?;
                Backend::Cluster(Arc::new(Cluster {
                    nodes,
                    timeout,
                    conn: tokio::sync::OnceCell::new(),
                    waits: tokio::sync::OnceCell::new(),
                }))
            }
        };
        Ok(Conn {
            backend,
            waits: false,
        })
    }

    /// The same backend, on the connection kept for script calls followed by `WAIT` (see the
    /// module doc): their blocking never delays other commands.
    pub(crate) fn for_waits(&self) -> Conn {
        Conn {
            backend: self.backend.clone(),
            waits: true,
        }
    }

    /// The cluster backend, if this is one.
    pub(crate) fn cluster(&self) -> Option<&Arc<Cluster>> {
        match &self.backend {
            Backend::Cluster(c) => Some(c),
            Backend::Direct(_) => None,
        }
    }

    /// Is this a Redis Cluster?
    pub(crate) fn is_cluster(&self) -> bool {
        self.cluster().is_some()
    }

    /// The client of the current master of a direct backend (a Sentinel backend asks the
    /// sentinels first if it has none yet); None on a cluster.
    pub(crate) async fn direct_client(&self) -> Option<RedisResult<redis::Client>> {
        match &self.backend {
            Backend::Direct(d) => Some(d.current(false).await.map(|(_, client, _)| client)),
            Backend::Cluster(_) => None,
        }
    }

    /// Changes each time a direct connection is replaced (a replica or a dead address was
    /// found, a new master was named); never on a cluster.
    pub(crate) fn replacements(&self) -> tokio::sync::watch::Receiver<u64> {
        match &self.backend {
            Backend::Direct(d) => d.generation.subscribe(),
            Backend::Cluster(_) => tokio::sync::watch::Sender::new(0).subscribe(),
        }
    }

    /// Runs `cmd` on every master: one reply per master, each with its address (one
    /// unnamed reply on a direct backend).
    pub(crate) async fn on_every_master(&self, cmd: Cmd) -> RedisResult<Vec<(String, Value)>> {
        match &self.backend {
            Backend::Direct(_) => {
                let mut conn = self.clone();
                let v: Value = cmd.query_async(&mut conn).await?;
                Ok(vec![(String::new(), v)])
            }
            Backend::Cluster(c) => {
                use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
                let mut conn = c.get().await?;
                let reply = conn
                    .route_command(
                        cmd,
                        RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None)),
                    )
                    .await?;
                match reply {
                    Value::Map(pairs) => pairs
                        .into_iter()
                        .map(|(k, v)| Ok((redis::from_redis_value::<String>(k)?, v)))
                        .collect(),
                    other => Ok(vec![(String::new(), other)]),
                }
            }
        }
    }
}

/// The cluster client's settings: `timeout` for connections and each response, short
/// retries, masters only.
pub(crate) fn cluster_builder(nodes: &[ConnectionInfo], timeout: Duration) -> ClusterClientBuilder {
    ClusterClientBuilder::new(nodes.to_vec())
        .connection_timeout(timeout)
        .response_timeout(timeout)
        .retries(CLUSTER_RETRIES)
        .min_retry_wait(CLUSTER_MIN_WAIT_MS)
        .max_retry_wait(CLUSTER_MAX_WAIT_MS)
}

impl Cluster {
    /// The cluster connection, made at the first call (again after a failed attempt).
    async fn get(&self) -> RedisResult<ClusterConnection> {
        self.lane(false).await
    }

    /// The cluster connection for `WAIT` pipelines (`waits`) or for everything else.
    async fn lane(&self, waits: bool) -> RedisResult<ClusterConnection> {
        let cell = if waits { &self.waits } else { &self.conn };
        cell.get_or_try_init(|| async {
            cluster_builder(&self.nodes, self.timeout)
                .build()?
                .get_async_connection()
                .await
        })
        .await
        .cloned()
    }

    /// A client for another connection to the same cluster (the wake-up listener's RESP3
    /// push connection).
    pub(crate) fn builder(&self) -> ClusterClientBuilder {
        cluster_builder(&self.nodes, self.timeout)
    }
}

impl State {
    /// The current connection of the lane (`waits`: the one for `WAIT` pipelines).
    fn pick(&self, waits: bool) -> Option<(redis::Client, ConnectionManager)> {
        let (client, conn) = self.current.as_ref()?;
        let conn = if waits { self.waits.as_ref()? } else { conn };
        Some((client.clone(), conn.clone()))
    }
}

impl Direct {
    /// The current generation, client and connection (of the `WAIT` lane with `waits`);
    /// replaces a stale one first (or makes the first one of a Sentinel backend).
    async fn current(&self, waits: bool) -> RedisResult<(u64, redis::Client, ConnectionManager)> {
        {
            let s = self.state.read().unwrap_or_else(|p| p.into_inner());
            if let (Some((client, conn)), false) = (s.pick(waits), s.stale) {
                return Ok((s.generation, client, conn));
            }
        }
        let _one = self.refresh.lock().await;
        {
            let s = self.state.read().unwrap_or_else(|p| p.into_inner());
            if let Some((client, conn)) = s.pick(waits) {
                // Replaced by another call meanwhile, or tried too recently: use what is there.
                if !s.stale || recent(s.tried_at) {
                    return Ok((s.generation, client, conn));
                }
            }
        }
        let resolved = self.resolve().await.and_then(|client| {
            let lazy =
                || ConnectionManager::new_lazy_with_config(client.clone(), self.config.clone());
            Ok((client.clone(), lazy()?, lazy()?))
        });
        let mut s = self.state.write().unwrap_or_else(|p| p.into_inner());
        s.tried_at = Some(Instant::now());
        match resolved {
            Ok((client, conn, waits_conn)) => {
                if s.current.is_some() {
                    s.generation += 1;
                    self.generation.send_replace(s.generation);
                }
                s.current = Some((client.clone(), conn.clone()));
                s.waits = Some(waits_conn.clone());
                s.stale = false;
                Ok((s.generation, client, if waits { waits_conn } else { conn }))
            }
            // The old connection stays (its calls fail until a look-up succeeds).
            Err(e) => match s.pick(waits) {
                Some((client, conn)) => {
                    tracing::warn!(error = %e, "cannot find the redis master; retrying");
                    Ok((s.generation, client, conn))
                }
                None => Err(e),
            },
        }
    }

    /// The client of the address to connect to now: the fixed one, or the master the
    /// sentinels name (checked with ROLE), within the timeout.
    async fn resolve(&self) -> RedisResult<redis::Client> {
        match &self.source {
            Source::Fixed(client) => Ok(client.clone()),
            Source::Sentinel { client, master } => {
                let ask = async { client.lock().await.async_get_client().await };
                let found = match tokio::time::timeout(self.timeout, ask).await {
                    Ok(r) => r,
                    Err(_) => Err(RedisError::from(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "the sentinels did not answer in time",
                    ))),
                };
                match found {
                    Ok(c) => {
                        tracing::info!(master = %master, addr = %c.get_connection_info().addr(),
                            "sentinels name the redis master");
                        Ok(c)
                    }
                    // Unavailable for the caller: no master now, perhaps one later.
                    Err(e) => Err(RedisError::from(std::io::Error::new(
                        std::io::ErrorKind::NotConnected,
                        format!("no master {master:?} from the sentinels: {e}"),
                    ))),
                }
            }
        }
    }

    /// Marks connection `generation` stale if `reply` says its node is a replica (READONLY,
    /// MASTERDOWN), or, behind Sentinel, if the node did not answer. Error replies come back
    /// as `Ok(Value::ServerError)` from [`ConnectionLike`] (they become `Err` only when
    /// decoded), so both are looked at.
    fn check<'v>(
        &self,
        generation: u64,
        reply: Result<impl Iterator<Item = &'v Value>, &RedisError>,
    ) {
        let sentinel = matches!(self.source, Source::Sentinel { .. });
        let replace = match reply {
            Err(e) => says_replica(e) || (sentinel && unreachable(e)),
            Ok(mut values) => values.any(|v| match v {
                Value::ServerError(se) => says_replica(&RedisError::from(se.clone())),
                _ => false,
            }),
        };
        if !replace {
            return;
        }
        let mut s = self.state.write().unwrap_or_else(|p| p.into_inner());
        if s.generation != generation || s.stale || recent(s.tried_at) {
            return;
        }
        s.stale = true;
        tracing::warn!(
            "redis answered as a replica (READONLY or MASTERDOWN) or did not answer; \
             connecting again to reach the current master"
        );
    }
}

impl super::Store {
    /// Changes each time the store's connection is replaced because Redis answered as a
    /// replica (or, behind Sentinel, did not answer): whatever else holds a connection to the
    /// same master (the wake-up listener's pub/sub) should connect again to reach the
    /// current one.
    pub fn connection_replaced(&self) -> tokio::sync::watch::Receiver<u64> {
        self.conn.replacements()
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        async move {
            match &self.backend {
                Backend::Direct(d) => {
                    let (generation, _, mut conn) = d.current(self.waits).await?;
                    let result = conn.req_packed_command(cmd).await;
                    d.check(generation, result.as_ref().map(std::iter::once));
                    result
                }
                Backend::Cluster(c) => c.lane(self.waits).await?.req_packed_command(cmd).await,
            }
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
            match &self.backend {
                Backend::Direct(d) => {
                    let (generation, _, mut conn) = d.current(self.waits).await?;
                    let result = conn.req_packed_commands(pipeline, offset, count).await;
                    d.check(generation, result.as_ref().map(|v| v.iter()));
                    result
                }
                Backend::Cluster(c) => {
                    c.lane(self.waits)
                        .await?
                        .req_packed_commands(pipeline, offset, count)
                        .await
                }
            }
        }
        .boxed()
    }

    fn get_db(&self) -> i64 {
        match &self.backend {
            Backend::Direct(d) => {
                let s = d.state.read().unwrap_or_else(|p| p.into_inner());
                s.current.as_ref().map_or(0, |(_, c)| c.get_db())
            }
            Backend::Cluster(_) => 0,
        }
    }
}
