//! `--redis-wait-replicas`: after each call that writes job state, Redis `WAIT`s until that
//! many replicas have acknowledged the write (or the timeout passes), so that a reply jobwire
//! gives (an Enqueue's id, an Ack's OK) describes a write that survives the loss of the
//! master. Without it, Redis replication is asynchronous: a master killed a few milliseconds
//! after a write may take it with it, and the replica promoted in its place never saw it.
//!
//! How: the `WAIT n timeout` is sent in the same pipeline as the script call, right behind
//! it, so it runs on the connection (and, on a cluster, the node: a pipeline is routed by its
//! first key) that made the write; WAIT covers every write that connection made before it.
//! Source: the Redis `WAIT` command documentation (it "blocks the current client until all
//! the previous write commands are successfully transferred and acknowledged by at least the
//! specified number of replicas"); it does not make Redis strongly consistent: a write that
//! timed out may or may not have reached a replica, and a failover may still pick a replica
//! that had not acknowledged it (use `min-replicas-to-write` on the Redis side as well for
//! the strictest setups).
//!
//! Cost: every writing call waits for one replication round trip, and WAIT blocks its
//! connection meanwhile, so calls queued behind it on the same multiplexed connection wait
//! too (README, "Redis deployments", gives the measured throughput cost).

use std::time::Duration;

use redis::Value;

use super::codec::array;
use super::StoreError;

/// The replicas a write must reach before jobwire answers, and how long to wait for them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaitReplicas {
    /// Replicas that must acknowledge each write (0: do not wait; asynchronous replication).
    pub replicas: u32,
    /// The longest wait for them (WAIT's timeout; ms resolution).
    pub timeout: Duration,
}

impl WaitReplicas {
    /// Whether writes wait at all.
    pub fn enabled(&self) -> bool {
        self.replicas > 0
    }

    /// WAIT's timeout argument: ms, at least 1 (0 would mean "forever").
    fn timeout_ms(&self) -> u64 {
        u64::try_from(self.timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1)
    }

    /// The pipeline `cmd` + `WAIT replicas timeout_ms`.
    pub(super) fn pipeline(&self, cmd: &redis::Cmd) -> redis::Pipeline {
        let mut pipe = redis::pipe();
        pipe.add_command(cmd.clone());
        pipe.cmd("WAIT").arg(self.replicas).arg(self.timeout_ms());
        pipe
    }

    /// Splits the pipeline's reply: the script's reply, after checking WAIT's count of
    /// replicas that acknowledged. Too few: [`StoreError::NotReplicated`] (the write is done
    /// on the master but may be lost with it; every jobwire write is safe to repeat).
    pub(super) fn reply(&self, values: Value) -> Result<Value, StoreError> {
        let mut it = array(values)?.into_iter();
        let (Some(reply), Some(acked)) = (it.next(), it.next()) else {
            return Err(StoreError::Decode("script + WAIT pipeline reply".into()));
        };
        let acked = match acked {
            Value::Int(n) => n,
            other => return Err(StoreError::Decode(format!("WAIT replied {other:?}"))),
        };
        if acked < i64::from(self.replicas) {
            return Err(StoreError::NotReplicated {
                acked,
                wanted: self.replicas,
                timeout_ms: self.timeout_ms(),
            });
        }
        Ok(reply)
    }
}

impl super::Store {
    /// Makes every writing script call wait for `wait` (see the module doc).
    pub fn with_wait_replicas(mut self, wait: WaitReplicas) -> super::Store {
        self.wait = wait;
        self
    }
}
