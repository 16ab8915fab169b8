//! The store's readiness probe: a write, not a PING, because a replica, a Redis that is
//! loading or failing over, or one that is full all answer PING but refuse jobs.
//!
//! On a Redis Cluster the write reaches one master (the one of [`HEALTH_KEY`]'s slot), not
//! every master: with `cluster-require-full-coverage yes` (Redis's default) a cluster with
//! any slot unserved refuses every write (CLUSTERDOWN), so one write tells whether the
//! cluster takes jobs. With it set to `no`, a failed master's queues answer UNAVAILABLE on
//! their own calls while the probe, and so readiness, may still pass: jobwire keeps serving
//! the other masters' queues. (Start-up PINGs every master and reads every master's
//! `maxmemory-policy`.)

use std::time::Duration;

use super::keys::HEALTH_KEY;
use super::{Store, StoreError};

/// Expiry of [`HEALTH_KEY`]: it vanishes by itself once no server probes any more.
const HEALTH_TTL: Duration = Duration::from_secs(10);

impl Store {
    /// Proves that Redis takes writes: `SET jw:health 1 PX 10000`. Errors as every store
    /// call classifies them: [`StoreError::Unavailable`] on a replica (READONLY), while
    /// loading or failing over, or unreachable; [`StoreError::OutOfMemory`] when `maxmemory`
    /// is reached (a write of any size is refused then).
    pub async fn probe_write(&self) -> Result<(), StoreError> {
        let mut conn = self.conn.clone();
        let () = redis::cmd("SET")
            .arg(HEALTH_KEY)
            .arg(1)
            .arg("PX")
            .arg(HEALTH_TTL.as_millis() as u64)
            .query_async(&mut conn)
            .await?;
        Ok(())
    }
}
