//! Store errors, classified once: Redis unable to take the call right now (retry), Redis full,
//! and everything else.

/// Error codes of replies that mean "this Redis cannot take the call now, another attempt
/// (later, or on the new master) can": a replica (READONLY), loading its data (LOADING), a
/// replica that lost its master (MASTERDOWN), a cluster in failover (CLUSTERDOWN, TRYAGAIN),
/// a script or function running too long (BUSY), too few replicas for `min-replicas-to-write`
/// (NOREPLICAS). Source: the error prefixes of redis 7.0 `server.c` / `cluster.c` replies.
const TRANSIENT_CODES: [&str; 7] = [
    "READONLY",
    "LOADING",
    "MASTERDOWN",
    "CLUSTERDOWN",
    "TRYAGAIN",
    "BUSY",
    "NOREPLICAS",
];
/// Error code of a write refused because `maxmemory` is reached (under `noeviction`).
const OOM_CODE: &str = "OOM";

/// Error codes of a cluster redirect (MOVED, ASK): the client follows them; one that reaches
/// the caller means the redirects were exhausted while slots moved (a failover, a
/// resharding), so another attempt later can succeed.
const REDIRECT_CODES: [&str; 2] = ["MOVED", "ASK"];

/// A failed store call.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Redis refused, dropped or timed out the connection, is loading, is a replica (READONLY)
    /// or is failing over: the caller should retry later.
    #[error("redis unavailable: {0}")]
    Unavailable(#[source] redis::RedisError),
    /// Redis refused a write because it reached `maxmemory` (OOM): retry once memory is freed
    /// (jobs consumed, retention trimmed) or raised.
    #[error("redis full: {0}")]
    OutOfMemory(#[source] redis::RedisError),
    /// Redis answered with an error (a script bug, a wrong type).
    #[error("redis error: {0}")]
    Redis(#[source] redis::RedisError),
    /// A script reply or a stored job did not have the expected shape.
    #[error("undecodable store data: {0}")]
    Decode(String),
    /// `--redis-wait-replicas`: the write was made on the master, but fewer replicas than
    /// wanted acknowledged it within the timeout, so it may be lost if the master fails
    /// now. Retry (every jobwire write is safe to repeat) or check the replicas.
    #[error("write acknowledged by {acked} of {wanted} replicas within {timeout_ms} ms (--redis-wait-replicas); it may be lost if the Redis master fails now")]
    NotReplicated {
        /// Replicas that acknowledged (WAIT's reply).
        acked: i64,
        /// Replicas wanted.
        wanted: u32,
        /// WAIT's timeout, ms.
        timeout_ms: u64,
    },
    /// `--redis-wait-replicas`: the master of the key's slot had fewer replicas online than
    /// wanted at its last check (`replica_gate.rs`), so the write was refused without being
    /// made; retry once a replica is back.
    #[error("the Redis master has {online} of {wanted} replicas online; the write was not made (--redis-wait-replicas)")]
    TooFewReplicas {
        /// Replicas online at the last check.
        online: i64,
        /// Replicas wanted.
        wanted: u32,
    },
    /// Redis's `maxmemory-policy` evicts (it may delete jobs) and `--allow-eviction` is off:
    /// new jobs are refused, nothing was written (`eviction.rs`).
    #[error("redis maxmemory-policy is {policy}, which lets redis delete jobs under memory pressure: new jobs are refused until it is noeviction again (CONFIG SET maxmemory-policy noeviction on the redis server), or run jobwire with --allow-eviction")]
    Evicting {
        /// The policy as CONFIG GET answered it (with the master's address on a cluster).
        policy: String,
    },
    /// `--redis-url` does not parse; the text names the part at fault (never the password).
    #[error("{0}")]
    Config(String),
    /// Registering the queue(s) would take the registry past the server's queue limit;
    /// nothing was written.
    #[error("the server's limit of {limit} queues is reached")]
    TooManyQueues {
        /// The limit (`--max-queues`).
        limit: usize,
    },
}

/// What a Redis error means for the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    /// Retry later (see [`TRANSIENT_CODES`]) or the connection failed.
    Transient,
    /// `maxmemory` reached.
    Full,
    /// Anything else.
    Other,
}

/// The code of `e` if it is one jobwire treats specially ([`TRANSIENT_CODES`], [`OOM_CODE`]):
/// the reply's own code, or for an error raised inside a script that Redis 6 wraps as
/// `ERR Error running script ... -READONLY ...`, the code it quotes.
fn special_code(e: &redis::RedisError) -> Option<String> {
    let special = |c: &str| c == OOM_CODE || TRANSIENT_CODES.contains(&c);
    if let Some(c) = e.code().filter(|c| special(c)) {
        return Some(c.to_owned());
    }
    e.to_string()
        .split(" -")
        .skip(1)
        .filter_map(|rest| rest.split_whitespace().next())
        .find(|c| special(c))
        .map(str::to_owned)
}

/// Classifies `e` by its connection state and its (possibly quoted) error code.
pub(crate) fn classify(e: &redis::RedisError) -> Class {
    if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_connection_refusal() {
        return Class::Transient;
    }
    // A cluster node gone from the client's map, or redirects exhausted (MOVED / ASK).
    if e.kind() == redis::ErrorKind::ClusterConnectionNotFound
        || e.code().is_some_and(|c| REDIRECT_CODES.contains(&c))
    {
        return Class::Transient;
    }
    match special_code(e).as_deref() {
        Some(OOM_CODE) => Class::Full,
        Some(_) => Class::Transient,
        None => Class::Other,
    }
}

/// Does `e` say the node is a replica (READONLY, or MASTERDOWN: a replica without its
/// master)? Then the master may now be another server behind the same address, and the
/// connection should be made again.
pub(crate) fn says_replica(e: &redis::RedisError) -> bool {
    matches!(special_code(e).as_deref(), Some("READONLY" | "MASTERDOWN"))
}

impl From<redis::RedisError> for StoreError {
    fn from(e: redis::RedisError) -> StoreError {
        match classify(&e) {
            Class::Transient => StoreError::Unavailable(e),
            Class::Full => StoreError::OutOfMemory(e),
            Class::Other => StoreError::Redis(e),
        }
    }
}
