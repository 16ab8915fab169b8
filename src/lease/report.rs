//! This replica's worker streams for ListWorkers: a live snapshot for the replica that
//! answers, and a report written to Redis every `workers_report_interval` (kept three
//! intervals) for the other replicas; removed on a clean shutdown.

use super::hub::Hub;
use super::session::wall_ms;
use crate::jobs::ReplicaWorkers;

/// A report lives this many report intervals: a replica that stops without a clean
/// shutdown drops out of ListWorkers after at most that long.
pub const REPORT_TTL_INTERVALS: u32 = 3;

impl Hub {
    /// This replica's id (`--replica-id`, or the one made up at start).
    pub fn replica_id(&self) -> &str {
        &self.config().replica_id
    }

    /// This replica's open streams now, sorted by when they opened.
    pub fn worker_streams(&self) -> ReplicaWorkers {
        let now = self.mono_ms();
        let mut streams: Vec<_> = self.sessions().iter().map(|s| s.info(now)).collect();
        streams.sort_by_key(|s| (s.connected_ms, s.stream));
        ReplicaWorkers {
            replica_id: self.replica_id().to_owned(),
            at_ms: wall_ms(),
            streams,
        }
    }

    /// Writes this replica's streams to Redis every report interval until the hub stops,
    /// then removes the report (a failed write is logged and tried at the next tick).
    pub(super) async fn report_loop(self) {
        let period = self.config().workers_report_interval;
        let ttl = period * REPORT_TTL_INTERVALS;
        let stop = self.inner.stop.clone();
        let mut failing = false;
        loop {
            match self
                .store()
                .write_workers_report(&self.worker_streams(), ttl)
                .await
            {
                Ok(()) => failing = false,
                Err(e) => {
                    if !failing {
                        tracing::warn!(error = %e, "cannot write this replica's worker streams to redis (ListWorkers on other replicas will miss them); retrying");
                    }
                    failing = true;
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(period) => {}
                _ = stop.cancelled() => break,
            }
        }
        if let Err(e) = self.store().remove_workers_report(self.replica_id()).await {
            tracing::debug!(error = %e, "cannot remove this replica's worker report; it expires");
        }
    }
}
