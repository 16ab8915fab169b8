//! The global keys beside the queues: the registry of queue names (`jw:queues`, capped by the
//! server's queue limit) and the due index (sorted sets: queue -> the next time the reaper has
//! work on it, ms on Redis's clock). Neither is written inside a queue script (DESIGN.md
//! section 10): they are updated beside the script calls, idempotently.
//!
//! The due index is one key on one Redis and [`DUE_SHARDS`] keys on a Redis Cluster
//! ([`DUE_KEYS`], `keys.rs`), so that its writes, two per lease, ack, fail and delayed
//! enqueue, spread over the masters instead of making the master of one key the cluster's
//! bottleneck. A queue always goes to the same shard ([`super::keys::due_key`]); the reaper
//! reads every shard.
//!
//! A write that may create reaper work (a lease, a delayed enqueue, a fail, an ack) first
//! writes an intent, `+<queue>`, due at most [`INTENT_AHEAD`] later ([`Store::intend_due`],
//! `scripts/intent.lua`), then runs its queue script, then lowers `<queue>` to the work's
//! time (at once, or, for a lease or an ack, held for the queue's next intent or the next
//! reaper tick: `due_later.rs`). If the last step is lost (a crash, a timeout), the intent
//! still makes the reaper look at the queue, after the script ran, and record its real next
//! due time; the reaper's own update compares the score it read, so it never erases an intent
//! written meanwhile (`scripts/due.lua`). The reaper's slow sweep is only a last resort (for
//! an index edited by hand, or a Redis that lost writes). A queue with no leased, delayed or
//! age-limited finished jobs has no entry in the due index, so it costs the reaper nothing.

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use redis::Value;

use super::client::Store;
use super::codec::{array, int, next, string};
use super::keys::{due_shard, DUE_KEYS, DUE_SHARDS, QUEUES_KEY};
use super::{scripts, StoreError};
use crate::jobs::QueueName;

/// Default for the most queues the registry holds (`--max-queues`).
pub const DEFAULT_MAX_QUEUES: usize = 10_000;

/// How long this store trusts that a queue it registered is still registered (another replica
/// may delete it); after that the next write registers it again.
const KNOWN_FOR: Duration = Duration::from_secs(10);

/// How far after a write its intent comes due in the index at the latest: a lease whose
/// own index update was lost is reaped at its deadline or this long after its call,
/// whichever is later.
pub const INTENT_AHEAD: Duration = Duration::from_secs(5);

/// How soon after a write its intent may come due at the earliest: longer than the gap
/// between the intent and the write's script reaching Redis (sent right after it), so the
/// reap the intent causes sees the write.
const INTENT_GUARD: Duration = Duration::from_millis(100);

/// Prefix of an intent member in the due index (not a queue-name character).
const INTENT_PREFIX: &str = "+";

/// Most due-index shards the reaper reads (one ZRANGE each), or writes held updates to
/// (one ZADD each, `due_later.rs`), at once: enough to reach every master of a typical
/// cluster in one round trip.
pub(super) const SHARD_READS: usize = 4;

/// One due entry of the index, as [`Store::due_queues`] read it.
#[derive(Clone, Debug)]
pub struct DueEntry {
    /// The queue to reap.
    pub queue: QueueName,
    /// The score read (pass it back to [`Store::set_next_due`]).
    pub seen: String,
    /// A write's intent (`+<queue>`), not the queue's own entry.
    pub intent: bool,
    /// The shard it was read from (index into [`DUE_KEYS`]): the reaper's conditional
    /// update goes there, even if the entry sits in a shard other than its queue's.
    pub shard: usize,
}

impl Store {
    /// This store refuses to register more than `max` queues (see [`Store::remember_queues`]).
    pub fn with_max_queues(mut self, max: usize) -> Store {
        self.max_queues = max;
        self
    }

    /// The most queues the registry may hold.
    pub fn max_queues(&self) -> usize {
        self.max_queues
    }

    /// How many shards the due index has here: [`DUE_SHARDS`] on a Redis Cluster, 1
    /// otherwise (`keys.rs`).
    pub fn due_shards(&self) -> usize {
        if self.is_cluster() {
            DUE_SHARDS
        } else {
            1
        }
    }

    /// The due-index key of `queue`'s shard.
    pub(super) fn due_key(&self, queue: &QueueName) -> &'static str {
        DUE_KEYS[due_shard(queue, self.due_shards())]
    }

    /// Every registered queue name (sorted).
    pub async fn queues(&self) -> Result<Vec<QueueName>, StoreError> {
        let mut conn = self.conn.clone();
        let names: Vec<String> = redis::cmd("SMEMBERS")
            .arg(QUEUES_KEY)
            .query_async(&mut conn)
            .await?;
        let mut queues: Vec<QueueName> = names
            .iter()
            .filter_map(|n| QueueName::parse(n).ok())
            .collect();
        queues.sort();
        Ok(queues)
    }

    /// Has this store registered `queue` in the last few seconds? Until then a write to it
    /// first registers it (one extra round trip).
    pub fn knows_queue(&self, queue: &QueueName) -> bool {
        self.known_queues
            .lock()
            .map(|k| k.get(queue).is_some_and(|t| t.elapsed() < KNOWN_FOR))
            .unwrap_or(false)
    }

    pub(super) async fn remember_queue(&self, queue: &QueueName) -> Result<(), StoreError> {
        self.remember_queues(std::slice::from_ref(queue)).await
    }

    /// Registers `queues` (all or none): [`StoreError::TooManyQueues`] when the new ones would
    /// take the registry past the limit; nothing is registered then.
    pub async fn remember_queues(&self, queues: &[QueueName]) -> Result<(), StoreError> {
        let mut new: Vec<&QueueName> = queues.iter().filter(|q| !self.knows_queue(q)).collect();
        new.sort();
        new.dedup();
        if new.is_empty() {
            return Ok(());
        }
        let mut args = vec![self.max_queues.to_string()];
        args.extend(new.iter().map(|q| q.to_string()));
        let reply = self.eval(&scripts::REGISTER, &[QUEUES_KEY], &args).await?;
        let mut reply = array(reply)?.into_iter();
        if int(next(&mut reply)?)? != 1 {
            return Err(StoreError::TooManyQueues {
                limit: self.max_queues,
            });
        }
        if let Ok(mut k) = self.known_queues.lock() {
            let now = Instant::now();
            if k.len() > self.max_queues.saturating_mul(2) {
                k.retain(|_, t| t.elapsed() < KNOWN_FOR);
            }
            for q in new {
                k.insert(q.clone(), now);
            }
        }
        Ok(())
    }

    /// Forgets `queue` here and removes it from the registry and the due index (after
    /// [`Store::delete_queue`] emptied it).
    pub(super) async fn unregister_queue(&self, queue: &QueueName) -> Result<(), StoreError> {
        self.take_held_due(queue);
        if let Ok(mut k) = self.known_queues.lock() {
            k.remove(queue);
            if k.capacity() > 64 && k.len() < k.capacity() / 4 {
                k.shrink_to_fit();
            }
        }
        let mut conn = self.conn.clone();
        // Two keys in two slots: two calls (a cluster refuses a pipeline across slots).
        let _: Value = redis::cmd("SREM")
            .arg(QUEUES_KEY)
            .arg(queue.as_str())
            .query_async(&mut conn)
            .await?;
        let _: Value = redis::cmd("ZREM")
            .arg(self.due_key(queue))
            .arg(queue.as_str())
            .arg(format!("{INTENT_PREFIX}{queue}"))
            .query_async(&mut conn)
            .await?;
        Ok(())
    }

    /// Before a script that may create reaper work on `queue`: writes its intent
    /// (`+<queue>`, due between 100 ms and [`INTENT_AHEAD`] from now, `scripts/intent.lua`),
    /// and with it the queue's due-index update held from an earlier call, if any
    /// (`due_later.rs`). Returns whether Redis took it. A failure is only logged and the
    /// caller goes on, sending its own index update after the script at once rather than
    /// holding it: a timed-out intent is still queued in Redis ahead of the script (so it
    /// runs first if the script runs at all), and a refused one means the script will most
    /// likely be refused too. The held update it carried is held again.
    pub(super) async fn intend_due(&self, queue: &QueueName) -> bool {
        let held = self.take_held_due(queue);
        let mut args = vec![
            format!("{INTENT_PREFIX}{queue}"),
            INTENT_AHEAD.as_millis().to_string(),
            INTENT_GUARD.as_millis().to_string(),
        ];
        if let Some(at) = held {
            args.push(queue.to_string());
            args.push(at.to_string());
        }
        let r = self
            .eval(&scripts::INTENT, &[self.due_key(queue)], &args)
            .await;
        match r {
            Ok(_) => true,
            Err(e) => {
                if let Some(at) = held {
                    self.hold_due(queue, at);
                }
                tracing::debug!(queue = %queue, error = %e, "due-index intent not written");
                false
            }
        }
    }

    /// Tells the due index that `queue` has reaper work at `at_ms` (or earlier, if it already
    /// says so). Called after the script that created the work; a failure is only logged:
    /// the intent written before the script makes the reaper find the work anyway.
    pub(super) async fn mark_due(&self, queue: &QueueName, at_ms: u64) {
        let mut conn = self.conn.clone();
        let r: Result<Value, _> = redis::cmd("ZADD")
            .arg(self.due_key(queue))
            .arg("LT")
            .arg(at_ms)
            .arg(queue.as_str())
            .query_async(&mut conn)
            .await;
        if let Err(e) = r {
            tracing::debug!(queue = %queue, error = %e, "due index not updated; the sweep repairs it");
        }
    }

    /// The entries whose due time has come (at most `max`, earliest first over all shards):
    /// queues' own entries and writes' intents. Every shard is read ([`SHARD_READS`] at a
    /// time), each for up to `max` entries, so one shard holding a whole backlog still
    /// fills a tick (the common case: a burst on a few queues); the merge keeps the `max`
    /// earliest, and the rest stay due for the next tick. The clock is read once, from one
    /// node (`TIME`); masters' clocks agree to within the reaper's precision.
    pub async fn due_queues(&self, max: usize) -> Result<Vec<DueEntry>, StoreError> {
        let mut conn = self.conn.clone();
        let time: Vec<String> = redis::cmd("TIME").query_async(&mut conn).await?;
        let secs: u64 = time.first().and_then(|s| s.parse().ok()).unwrap_or(0);
        let micros: u64 = time.get(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        let now_ms = secs * 1000 + micros / 1000;
        let reads = futures::stream::iter(0..self.due_shards())
            .map(|shard| {
                let mut conn = self.conn.clone();
                async move {
                    let reply: Vec<Value> = redis::cmd("ZRANGE")
                        .arg(DUE_KEYS[shard])
                        .arg("-inf")
                        .arg(now_ms)
                        .arg("BYSCORE")
                        .arg("LIMIT")
                        .arg(0)
                        .arg(max)
                        .arg("WITHSCORES")
                        .query_async(&mut conn)
                        .await?;
                    Ok::<_, StoreError>((shard, reply))
                }
            })
            .buffer_unordered(SHARD_READS);
        let replies: Vec<(usize, Vec<Value>)> = reads.try_collect().await?;
        let mut read = Vec::new();
        for (shard, reply) in replies {
            let mut it = reply.into_iter();
            while let (Some(name), Some(score)) = (it.next(), it.next()) {
                let (name, seen) = (string(name)?, string(score)?);
                let at = seen.parse::<f64>().unwrap_or(f64::MIN);
                read.push((at, shard, name, seen));
            }
        }
        read.sort_by(|a, b| a.0.total_cmp(&b.0));
        read.truncate(max);
        let mut out = Vec::with_capacity(read.len());
        for (_, shard, name, seen) in read {
            let (queue, intent) = match name.strip_prefix(INTENT_PREFIX) {
                Some(q) => (q, true),
                None => (name.as_str(), false),
            };
            match QueueName::parse(queue) {
                Ok(queue) => out.push(DueEntry {
                    queue,
                    seen,
                    intent,
                    shard,
                }),
                // Not a queue name: nobody should have written it; drop it.
                Err(_) => {
                    self.set_next_due_raw(shard, &name, &seen, None, None)
                        .await?
                }
            }
        }
        Ok(out)
    }

    /// After a reap of `queue` for `entry` (`None` for the sweep): the queue's entry becomes
    /// `next_ms` (or goes, with `None`) unless a writer announced earlier work since the
    /// reaper read it; a reaped intent goes unless a newer one replaced it, and `next_ms`
    /// lowers the queue's own entry (`scripts/due.lua`).
    pub async fn set_next_due(
        &self,
        queue: &QueueName,
        entry: Option<&DueEntry>,
        next_ms: Option<u64>,
    ) -> Result<(), StoreError> {
        match entry {
            Some(e) if e.intent => {
                let member = format!("{INTENT_PREFIX}{queue}");
                self.set_next_due_raw(e.shard, &member, &e.seen, next_ms, Some(queue.as_str()))
                    .await
            }
            Some(e) => {
                self.set_next_due_raw(e.shard, queue.as_str(), &e.seen, next_ms, None)
                    .await
            }
            None => {
                let shard = due_shard(queue, self.due_shards());
                self.set_next_due_raw(shard, queue.as_str(), "", next_ms, None)
                    .await
            }
        }
    }

    async fn set_next_due_raw(
        &self,
        shard: usize,
        member: &str,
        seen: &str,
        next_ms: Option<u64>,
        own: Option<&str>,
    ) -> Result<(), StoreError> {
        let mut args = vec![
            member.to_owned(),
            seen.to_owned(),
            next_ms.map_or(-1, |n| n as i64).to_string(),
        ];
        args.extend(own.map(str::to_owned));
        self.eval(&scripts::DUE, &[DUE_KEYS[shard]], &args).await?;
        Ok(())
    }

    /// One step of a walk over the registry (SSCAN from `cursor`, about `count` names):
    /// returns the next cursor (0 when the walk is complete) and the names.
    pub async fn scan_queues(
        &self,
        cursor: u64,
        count: usize,
    ) -> Result<(u64, Vec<QueueName>), StoreError> {
        let mut conn = self.conn.clone();
        let (next, names): (u64, Vec<String>) = redis::cmd("SSCAN")
            .arg(QUEUES_KEY)
            .arg(cursor)
            .arg("COUNT")
            .arg(count)
            .query_async(&mut conn)
            .await?;
        Ok((
            next,
            names
                .iter()
                .filter_map(|n| QueueName::parse(n).ok())
                .collect(),
        ))
    }

    /// Those of `queues` that have leased or delayed jobs (one EXISTS a queue, a few queues
    /// at a time; on a cluster each goes to the queue's master): the sweep reaps only these,
    /// so a registered queue without such jobs costs it one command.
    pub async fn with_timed_work(
        &self,
        queues: Vec<QueueName>,
    ) -> Result<Vec<QueueName>, StoreError> {
        let checks = futures::stream::iter(queues)
            .map(|q| async move {
                let keys = super::keys::Keys::new(&q);
                let mut conn = self.conn.clone();
                // all[1]: delayed, all[2]: active (keys.rs).
                let n: u64 = redis::cmd("EXISTS")
                    .arg(&keys.all[1])
                    .arg(&keys.all[2])
                    .query_async(&mut conn)
                    .await?;
                Ok::<_, StoreError>((q, n))
            })
            .buffered(super::stats::PER_QUEUE_CONCURRENCY);
        let found: Vec<(QueueName, u64)> = checks.try_collect().await?;
        Ok(found
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .map(|(q, _)| q)
            .collect())
    }

    /// If the due index is missing (every shard: a fresh Redis, or data from before the index
    /// existed), marks every registered queue due now, so the reaper looks at each once.
    /// Returns how many were marked.
    pub async fn seed_due_index(&self) -> Result<usize, StoreError> {
        let mut conn = self.conn.clone();
        let shards = self.due_shards();
        for key in &DUE_KEYS[..shards] {
            // One key a call: the shards are in different slots.
            let exists: u64 = redis::cmd("EXISTS").arg(key).query_async(&mut conn).await?;
            if exists > 0 {
                return Ok(0);
            }
        }
        let queues = self.queues().await?;
        let mut by_shard = vec![Vec::new(); shards];
        for q in &queues {
            by_shard[due_shard(q, shards)].push(q);
        }
        for (shard, queues) in by_shard.iter().enumerate() {
            for chunk in queues.chunks(1000) {
                let mut cmd = redis::cmd("ZADD");
                cmd.arg(DUE_KEYS[shard]).arg("LT");
                for q in chunk {
                    cmd.arg(0).arg(q.as_str());
                }
                let _: Value = cmd.query_async(&mut conn).await?;
            }
        }
        Ok(queues.len())
    }
}
