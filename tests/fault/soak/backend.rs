//! Where the soak's jobs live: one append-only redis-server (faults: a pause past the Redis
//! timeout, a SIGKILL and restart, a flip to read-only and back), or a 3-master Redis Cluster
//! with a replica each, the servers run with `--redis-wait-replicas 1` (faults: a pause of
//! the queue's master past the Redis timeout, and a SIGKILL of that master: its replica takes
//! over, then the killed node restarts and rejoins as the new master's replica).

use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;

use super::faults;
use super::QUEUE;
use crate::procs::{free_port, RedisOpts, RedisProc};
use crate::topology::TestCluster;

/// A fault of the Redis side, injected once during the enqueue phase.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum RedisFault {
    /// `CLIENT PAUSE 4000 ALL` on (the queue's master of) Redis: past the 3 s Redis timeout.
    Pause,
    /// SIGKILL of the single Redis, restarted 0.5 s later on its append-only file.
    Kill,
    /// The single Redis demoted to a read-only replica for 3 s, then promoted back.
    ReadOnly,
    /// SIGKILL of the Cluster master that holds the queue; its replica takes over.
    KillMaster,
}

pub(super) enum Backend {
    Single { redis: RedisProc, port: u16 },
    Cluster(TestCluster),
}

impl Backend {
    pub(super) async fn single() -> Backend {
        let port = free_port();
        let redis = RedisProc::start_on(RedisOpts::default(), port).await;
        Backend::Single { redis, port }
    }

    pub(super) async fn cluster() -> Backend {
        Backend::Cluster(TestCluster::start(3, 1).await)
    }

    pub(super) fn url(&self) -> &str {
        match self {
            Backend::Single { redis, .. } => &redis.url,
            Backend::Cluster(c) => &c.url,
        }
    }

    /// The server flags this backend needs besides `server_args`.
    pub(super) fn server_flags(&self) -> Vec<String> {
        match self {
            Backend::Single { .. } => Vec::new(),
            Backend::Cluster(_) => vec!["--redis-wait-replicas".into(), "1".into()],
        }
    }

    /// The Redis faults of this backend, in the order they come.
    pub(super) fn faults(&self) -> &'static [RedisFault] {
        match self {
            Backend::Single { .. } => &[RedisFault::Pause, RedisFault::Kill, RedisFault::ReadOnly],
            Backend::Cluster(_) => &[RedisFault::Pause, RedisFault::KillMaster],
        }
    }

    /// A connection to the node holding the queue's keys (on a Cluster, its master now).
    pub(super) async fn queue_conn(&self) -> Option<MultiplexedConnection> {
        match self {
            Backend::Single { redis, .. } => redis::Client::open(redis.url.as_str())
                .ok()?
                .get_multiplexed_async_connection()
                .await
                .ok(),
            Backend::Cluster(c) => {
                let port = c.master_for_key(&format!("jw:{{{QUEUE}}}:meta")).await;
                crate::topology::node_conn(port).await.ok()
            }
        }
    }

    /// `HSET` of a field of the queue's meta hash (setup, before any server runs).
    pub(super) async fn set_meta(&self, field: &str, value: i64) {
        let mut c = self.queue_conn().await.expect("queue's node");
        let _: i64 = redis::cmd("HSET")
            .arg(format!("jw:{{{QUEUE}}}:meta"))
            .arg(field)
            .arg(value)
            .query_async(&mut c)
            .await
            .expect("HSET meta");
    }

    /// Injects `fault`; returns a line for the soak's summary.
    pub(super) async fn inject(&mut self, fault: RedisFault) -> String {
        match (self, fault) {
            (Backend::Single { redis, .. }, RedisFault::Pause) => {
                faults::pause(redis, 4_000).await;
                "redis pause 4 s".into()
            }
            (Backend::Single { redis, .. }, RedisFault::Kill) => {
                redis.kill().await;
                tokio::time::sleep(Duration::from_millis(500)).await; // an outage, not a blip
                redis.restart().await;
                "redis SIGKILL".into()
            }
            (Backend::Single { redis, port }, RedisFault::ReadOnly) => {
                faults::read_only_for(redis, *port, Duration::from_secs(3)).await;
                "read-only 3 s".into()
            }
            (Backend::Cluster(c), RedisFault::Pause) => {
                let port = c.master_for_key(&format!("jw:{{{QUEUE}}}:meta")).await;
                let mut conn = crate::topology::node_conn(port).await.expect("master");
                faults::pause_conn(&mut conn, 4_000).await;
                "queue's master paused 4 s".into()
            }
            (Backend::Cluster(c), RedisFault::KillMaster) => {
                let port = c.master_for_key(&format!("jw:{{{QUEUE}}}:meta")).await;
                let at = Instant::now();
                c.kill(port);
                c.wait_ok(Duration::from_secs(60)).await;
                let promoted = at.elapsed();
                c.restart(port).await;
                c.wait_ok(Duration::from_secs(60)).await;
                format!(
                    "queue's master SIGKILL (replica promoted after {promoted:?}, killed node \
                     back as a replica after {:?})",
                    at.elapsed()
                )
            }
            (_, f) => unreachable!("fault {f:?} is not one of this backend's"),
        }
    }
}
