//! Worker streams as ListWorkers reports them: what each replica knows of its own streams
//! (`lease`), writes to Redis for the others (`store`), and the API lists.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Most held leases listed per stream (the count covers them all).
pub const MAX_LISTED_LEASES: usize = 100;

/// One worker stream (a Subscribe call) of one replica.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerStreamInfo {
    /// The stream's number, unique within its replica.
    pub stream: u64,
    /// The worker id from its OpenStream (or the one the server made up).
    pub worker_id: String,
    /// The queues it leases from.
    pub queues: Vec<String>,
    /// Free credits (including those reserved by a lease call in flight).
    pub credits: u64,
    /// The leases it holds, (queue, job id), at most [`MAX_LISTED_LEASES`] per stream,
    /// sorted; `held` counts them all.
    pub leases: Vec<(String, String)>,
    /// How many leases it holds, per queue.
    pub held: BTreeMap<String, u64>,
    /// When it opened, ms since the epoch.
    pub connected_ms: u64,
    /// When the worker last sent a message on it, ms since the epoch.
    pub last_heard_ms: u64,
    /// It gets no more leases (the worker drains, or the replica shuts down).
    pub draining: bool,
}

/// A replica's streams at one moment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaWorkers {
    /// The replica's id (`--replica-id`).
    pub replica_id: String,
    /// When the streams were taken, ms since the epoch.
    pub at_ms: u64,
    /// Its streams.
    pub streams: Vec<WorkerStreamInfo>,
}
