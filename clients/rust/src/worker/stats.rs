//! Counters of what a worker did, for tests and dashboards ([`super::Worker::stats`]).

use std::sync::atomic::{AtomicU64, Ordering};

/// What a worker did so far; read with [`WorkerStats::get`] (relaxed loads: each counter is
/// exact, a set of them read together need not be from one instant).
#[derive(Debug, Default)]
pub struct WorkerStats {
    /// Leases received.
    pub leases: AtomicU64,
    /// Results the server applied (ack or fail, on the stream or unary).
    pub settled: AtomicU64,
    /// Results dropped because the lease was lost (FAILED_PRECONDITION: it had expired and
    /// was leased again, or was already settled); the job is or will be redelivered.
    pub lost: AtomicU64,
    /// Results the server refused for another reason (logged as errors).
    pub refused: AtomicU64,
    /// Results sent with the unary Ack/Fail because their stream was gone.
    pub unary_settles: AtomicU64,
    /// Leases renewed with ExtendLease after their stream broke.
    pub extended: AtomicU64,
    /// Streams opened (the first, then one per reconnect).
    pub streams: AtomicU64,
    /// `Draining` messages from the server.
    pub server_drains: AtomicU64,
}

impl WorkerStats {
    /// Reads one counter, e.g. `stats.get(&stats.extended)`.
    pub fn get(&self, counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    pub(crate) fn add(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}
