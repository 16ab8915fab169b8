//! Queue statistics for gauges and operators: counts per state, oldest waiting age,
//! dead-letter depth and oldest age, paused flag, for many queues (one round trip per queue,
//! several queues at a time: on a cluster no call mixes two queues' slots).

use futures::{StreamExt, TryStreamExt};
use redis::Value;

use super::client::Store;
use super::codec::{array, int, next, string};
use super::keys::{Keys, ZERO_SCORE};
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
    /// Cancelled jobs kept by the completed retention.
    pub cancelled: u64,
    /// Expired jobs kept by the completed retention.
    pub expired: u64,
    /// Age of the oldest waiting job (now - the time it became ready), ms; 0 when none.
    pub oldest_waiting_ms: u64,
    /// Age of the oldest dead-letter entry, ms; 0 when none.
    pub oldest_dead_ms: u64,
    /// Leasing is paused.
    pub paused: bool,
    /// Groups with waiting jobs (the default group counts when it has some).
    pub groups_waiting: u64,
    /// Per priority with waiting jobs, highest first: (priority, age of its oldest waiting
    /// job in ms). Exact for jobs without a group key; of grouped jobs only the one made
    /// ready first counts, under its priority (`scripts/waiting_stats.lua`).
    pub oldest_waiting_by_priority: Vec<(i32, u64)>,
}

/// Commands per queue in the stats pipeline.
const PER_QUEUE: usize = 8;

/// Queues whose stats are read at the same time (each one pipeline and one script call).
pub(super) const PER_QUEUE_CONCURRENCY: usize = 64;

fn first_score(v: Value) -> Result<Option<f64>, StoreError> {
    let items = array(v)?;
    match items.into_iter().nth(1) {
        Some(score) => Ok(string(score)?.parse::<f64>().ok()),
        None => Ok(None),
    }
}

impl Store {
    /// Reads the stats of `queues`: one pipeline of a queue's reads (all in its slot) and its
    /// waiting-stats script per queue, [`PER_QUEUE_CONCURRENCY`] queues at a time (on a
    /// cluster each call goes to the queue's master), plus one TIME for Redis's clock.
    pub async fn queue_stats(&self, queues: &[QueueName]) -> Result<Vec<QueueStats>, StoreError> {
        let mut conn = self.conn.clone();
        let time: Vec<i64> = redis::cmd("TIME").query_async(&mut conn).await?;
        let secs = time.first().copied().unwrap_or_default();
        let micros = time.get(1).copied().unwrap_or_default();
        let now_ms = (secs * 1000 + micros / 1000) as f64;
        futures::stream::iter(queues.to_vec())
            .map(|q| {
                let store = self.clone();
                async move { store.one_queue_stats(&q, now_ms).await }
            })
            .buffered(PER_QUEUE_CONCURRENCY)
            .try_collect()
            .await
    }

    async fn one_queue_stats(&self, q: &QueueName, now_ms: f64) -> Result<QueueStats, StoreError> {
        let k = Keys::new(q);
        let mut pipe = redis::pipe();
        for i in 1..5 {
            pipe.cmd("ZCARD").arg(&k.all[i]);
        }
        pipe.cmd("ZRANGE")
            .arg(&k.all[4])
            .arg(0)
            .arg(0)
            .arg("WITHSCORES");
        pipe.cmd("HGET").arg(&k.all[5]).arg("paused");
        pipe.cmd("ZCARD").arg(&k.all[15]);
        pipe.cmd("ZCARD").arg(&k.all[16]);
        let mut conn = self.conn.clone();
        // The waiting-stats script goes out together with the pipeline: the connection is
        // multiplexed, so they share its round trip.
        let (replies, w): (Vec<Value>, Value) = futures::future::try_join(
            async { Ok(pipe.query_async(&mut conn).await?) },
            self.run_script(&scripts::WAITING_STATS, &k, Vec::new()),
        )
        .await?;
        if replies.len() != PER_QUEUE {
            return Err(StoreError::Decode("stats pipeline reply length".into()));
        }
        let mut it = replies.into_iter();
        let mut w = array(w)?.into_iter();
        let mut n = [0u64; 5];
        n[0] = int(next(&mut w)?)? as u64;
        let ready = Some(int(next(&mut w)?)?)
            .filter(|r| *r >= 0)
            .map(|r| r as f64);
        let groups_waiting = int(next(&mut w)?)? as u64;
        let mut levels = Vec::new();
        let mut flat = array(next(&mut w)?)?.into_iter();
        while let (Some(p), Some(rt)) = (flat.next(), flat.next()) {
            levels.push((int(p)? as i32, int(rt)? as f64));
        }
        for slot in &mut n[1..] {
            *slot = int(it.next().unwrap_or_default())? as u64;
        }
        let dead = first_score(it.next().unwrap_or_default())?;
        let paused = string(it.next().unwrap_or_default())? == "1";
        let cancelled = int(it.next().unwrap_or_default())? as u64;
        let expired = int(it.next().unwrap_or_default())? as u64;
        let age = |since: Option<f64>| since.map_or(0, |s| (now_ms - s).max(0.0) as u64);
        Ok(QueueStats {
            queue: q.to_string(),
            waiting: n[0],
            delayed: n[1],
            active: n[2],
            completed: n[3],
            dead: n[4],
            cancelled,
            expired,
            oldest_waiting_ms: age(ready),
            // Dead scores are dead_ms * 1000 + a sequence (see common.lua).
            oldest_dead_ms: age(dead.map(|s| (s / 1000.0).floor())),
            paused,
            groups_waiting,
            oldest_waiting_by_priority: levels
                .into_iter()
                .map(|(p, rt)| (p, age(Some(rt))))
                .collect(),
        })
    }
}

impl Store {
    /// The ids of `queue`'s waiting jobs: those of the default group in lease order (highest
    /// priority first, FIFO within a priority), then those of named groups in the order they
    /// became ready (`scripts/groups.lua`: the groups take turns at lease time). Reads every
    /// waiting id: for inspection and tests, not for hot paths.
    pub async fn waiting_ids(&self, queue: &QueueName) -> Result<Vec<String>, StoreError> {
        let keys = Keys::new(queue);
        let mut conn = self.conn.clone();
        // The other priorities sort around priority 0 by score (`scripts/common.lua`).
        let (prio, zero, grouped): (Vec<(String, f64)>, Vec<String>, Vec<String>) = redis::pipe()
            .cmd("ZRANGE")
            .arg(keys.prio())
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .cmd("LRANGE")
            .arg(keys.waiting())
            .arg(0)
            .arg(-1)
            .cmd("ZRANGE")
            .arg(keys.grouped_waiting())
            .arg(0)
            .arg(-1)
            .query_async(&mut conn)
            .await?;
        let above = prio.iter().take_while(|(_, s)| *s < ZERO_SCORE).count();
        let mut ids: Vec<String> = prio[..above].iter().map(|(id, _)| id.clone()).collect();
        ids.extend(zero);
        ids.extend(prio[above..].iter().map(|(id, _)| id.clone()));
        ids.extend(grouped);
        Ok(ids)
    }
}
