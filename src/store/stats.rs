//! Queue statistics for gauges and operators: counts per state, oldest waiting age,
//! dead-letter depth and oldest age, paused flag, for many queues in one pipelined round trip.

use redis::Value;

use super::client::Store;
use super::codec::{array, int, next, string};
use super::keys::Keys;
use super::{scripts, StoreError};
use crate::jobs::QueueName;

/// One queue's numbers, read at `now_ms` (Redis's clock).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueueStats {
    /// The queue.
    pub queue: String,
    /// Jobs waiting to be leased.
    pub waiting: u64,
    /// Jobs waiting out a delay or backoff.
    pub delayed: u64,
    /// Jobs leased.
    pub active: u64,
    /// Completed jobs kept by retention.
    pub completed: u64,
    /// Dead-letter depth.
    pub dead: u64,
    /// Age of the oldest waiting job (now - the time it became ready), ms; 0 when none.
    pub oldest_waiting_ms: u64,
    /// Age of the oldest dead-letter entry, ms; 0 when none.
    pub oldest_dead_ms: u64,
    /// Leasing is paused.
    pub paused: bool,
}

/// Commands per queue in the stats pipeline.
const PER_QUEUE: usize = 6;

fn first_score(v: Value) -> Result<Option<f64>, StoreError> {
    let items = array(v)?;
    match items.into_iter().nth(1) {
        Some(score) => Ok(string(score)?.parse::<f64>().ok()),
        None => Ok(None),
    }
}

impl Store {
    /// Reads the stats of `queues` in one pipelined round trip (plus TIME for Redis's clock).
    pub async fn queue_stats(&self, queues: &[QueueName]) -> Result<Vec<QueueStats>, StoreError> {
        let mut pipe = redis::pipe();
        pipe.cmd("TIME");
        for q in queues {
            let k = Keys::new(q);
            for i in 1..5 {
                pipe.cmd("ZCARD").arg(&k.all[i]);
            }
            pipe.cmd("ZRANGE")
                .arg(&k.all[4])
                .arg(0)
                .arg(0)
                .arg("WITHSCORES");
            pipe.cmd("HGET").arg(&k.all[5]).arg("paused");
        }
        let mut conn = self.conn.clone();
        // The waiting-stats scripts go out together with the pipeline: the connection is
        // multiplexed, so they share its round trip.
        let waiting = futures::future::try_join_all(queues.iter().map(|q| async move {
            let keys = Keys::new(q);
            self.run_script(&scripts::WAITING_STATS, &keys, Vec::new())
                .await
        }));
        let (replies, waiting): (Vec<Value>, Vec<Value>) =
            futures::future::try_join(async { Ok(pipe.query_async(&mut conn).await?) }, waiting)
                .await?;
        if replies.len() != 1 + queues.len() * PER_QUEUE {
            return Err(StoreError::Decode("stats pipeline reply length".into()));
        }
        let mut it = replies.into_iter();
        let time = array(it.next().unwrap_or_default())?;
        let mut t = time.into_iter();
        let secs = int(t.next().unwrap_or_default())?;
        let micros = int(t.next().unwrap_or_default())?;
        let now_ms = (secs * 1000 + micros / 1000) as f64;
        let mut out = Vec::with_capacity(queues.len());
        for (q, w) in queues.iter().zip(waiting) {
            let mut w = array(w)?.into_iter();
            let mut n = [0u64; 5];
            n[0] = int(next(&mut w)?)? as u64;
            let ready = Some(int(next(&mut w)?)?)
                .filter(|r| *r >= 0)
                .map(|r| r as f64);
            for slot in &mut n[1..] {
                *slot = int(it.next().unwrap_or_default())? as u64;
            }
            let dead = first_score(it.next().unwrap_or_default())?;
            let paused = string(it.next().unwrap_or_default())? == "1";
            let age = |since: Option<f64>| since.map_or(0, |s| (now_ms - s).max(0.0) as u64);
            out.push(QueueStats {
                queue: q.to_string(),
                waiting: n[0],
                delayed: n[1],
                active: n[2],
                completed: n[3],
                dead: n[4],
                oldest_waiting_ms: age(ready),
                // Dead scores are dead_ms * 1000 + a sequence (see common.lua).
                oldest_dead_ms: age(dead.map(|s| (s / 1000.0).floor())),
                paused,
            });
        }
        Ok(out)
    }
}

impl Store {
    /// The ids of `queue`'s waiting jobs in lease order (highest priority first, FIFO within
    /// a priority). Reads every waiting id: for inspection and tests, not for hot paths.
    pub async fn waiting_ids(&self, queue: &QueueName) -> Result<Vec<String>, StoreError> {
        let keys = Keys::new(queue);
        let mut conn = self.conn.clone();
        let levels: Vec<String> = redis::cmd("ZRANGE")
            .arg(&keys.all[0])
            .arg(0)
            .arg(-1)
            .query_async(&mut conn)
            .await?;
        let mut ids = Vec::new();
        for level in levels {
            let chunk: Vec<String> = redis::cmd("LRANGE")
                .arg(format!("{}:{level}", keys.all[0]))
                .arg(0)
                .arg(-1)
                .query_async(&mut conn)
                .await?;
            ids.extend(chunk);
        }
        Ok(ids)
    }
}
