//! The replicas' worker-stream reports (ListWorkers): streams live in each replica's memory,
//! so each replica writes what it has to Redis on a timer, and any replica reads the others'.
//! Global keys outside every queue (each command touches one key, so a Redis Cluster takes
//! them; no queue script reads or writes them):
//! - `jw:replicas`: a sorted set, replica id -> the time of its last report (ms);
//! - `jw:replica:<id>:workers`: the report (JSON of [`ReplicaWorkers`]), with an expiry of a
//!   few report intervals, so a replica that stops without a clean shutdown drops out.
//!
//! A write is idempotent (SET, ZADD of the same member); a clean shutdown deletes both.

use std::time::Duration;

use super::client::Store;
use super::StoreError;
use crate::jobs::ReplicaWorkers;

/// The index of the replicas that reported.
const REPLICAS_KEY: &str = "jw:replicas";

/// Most replicas a read lists.
const MAX_REPLICAS: isize = 1000;

/// The key of `replica`'s report.
fn report_key(replica: &str) -> String {
    format!("jw:replica:{replica}:workers")
}

impl Store {
    /// Writes `report`, kept for `ttl`; drops index entries that have not reported for ten
    /// times `ttl` (their reports expired long ago).
    pub async fn write_workers_report(
        &self,
        report: &ReplicaWorkers,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        let json = serde_json::to_vec(report)
            .map_err(|e| StoreError::Decode(format!("workers report: {e}")))?;
        let mut conn = self.conn.clone();
        let () = redis::cmd("SET")
            .arg(report_key(&report.replica_id))
            .arg(json)
            .arg("PX")
            .arg(ttl.as_millis() as u64)
            .query_async(&mut conn)
            .await?;
        let _: i64 = redis::cmd("ZADD")
            .arg(REPLICAS_KEY)
            .arg(report.at_ms)
            .arg(&report.replica_id)
            .query_async(&mut conn)
            .await?;
        let stale = report.at_ms.saturating_sub(ttl.as_millis() as u64 * 10);
        let _: i64 = redis::cmd("ZREMRANGEBYSCORE")
            .arg(REPLICAS_KEY)
            .arg("-inf")
            .arg(format!("({stale}"))
            .query_async(&mut conn)
            .await?;
        Ok(())
    }

    /// Deletes `replica`'s report and its index entry (a clean shutdown).
    pub async fn remove_workers_report(&self, replica: &str) -> Result<(), StoreError> {
        let mut conn = self.conn.clone();
        let _: i64 = redis::cmd("DEL")
            .arg(report_key(replica))
            .query_async(&mut conn)
            .await?;
        let _: i64 = redis::cmd("ZREM")
            .arg(REPLICAS_KEY)
            .arg(replica)
            .query_async(&mut conn)
            .await?;
        Ok(())
    }

    /// The reports of every replica whose report has not expired, by replica id (at most
    /// 1000 replicas). A report that does not decode is skipped (logged).
    pub async fn workers_reports(&self) -> Result<Vec<ReplicaWorkers>, StoreError> {
        let mut conn = self.conn.clone();
        let mut ids: Vec<String> = redis::cmd("ZRANGE")
            .arg(REPLICAS_KEY)
            .arg(0)
            .arg(MAX_REPLICAS - 1)
            .query_async(&mut conn)
            .await?;
        ids.sort();
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let raw: Option<Vec<u8>> = redis::cmd("GET")
                .arg(report_key(&id))
                .query_async(&mut conn)
                .await?;
            let Some(raw) = raw else { continue };
            match serde_json::from_slice::<ReplicaWorkers>(&raw) {
                Ok(r) => out.push(r),
                Err(e) => {
                    tracing::warn!(replica = %id, error = %e, "skipping a workers report that does not decode")
                }
            }
        }
        Ok(out)
    }
}
