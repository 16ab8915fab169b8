//! The global keys beside the queues: the registry of queue names (`jw:queues`, capped by the
//! server's queue limit) and the due index (`jw:due`, a sorted set: queue -> the next time the
//! reaper has work on it, ms on Redis's clock). Neither is written inside a queue script
//! (DESIGN.md section 10): they are updated beside the script calls, idempotently.
//!
//! A write that may create reaper work (a lease, a delayed enqueue, a fail, an ack) first
//! writes an intent, `+<queue>`, due at most [`INTENT_AHEAD`] later ([`Store::intend_due`],
//! `scripts/intent.lua`), then runs its queue script, then lowers `<queue>` to the work's
//! time. If the last step is lost (a crash, a timeout), the intent still makes the reaper
//! look at the queue, after the script ran, and record its real next due time; the
//! reaper's own update compares the score it read, so it never erases an intent written
//! meanwhile (`scripts/due.lua`). The reaper's slow sweep is only a last resort (for an
//! index edited by hand, or a Redis that lost writes). A queue with no leased, delayed or
//! age-limited finished jobs has no entry in the due index, so it costs the reaper nothing.

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use redis::Value;

use super::client::Store;
use super::codec::{array, int, next, string};
use super::keys::{DUE_KEY, QUEUES_KEY};
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

/// One due entry of the index, as [`Store::due_queues`] read it.
#[derive(Clone, Debug)]
pub struct DueEntry {
    /// The queue to reap.
    pub queue: QueueName,
    /// The score read (pass it back to [`Store::set_next_due`]).
    pub seen: String,
    /// A write's intent (`+<queue>`), not the queue's own entry.
    pub intent: bool,
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
            .arg(DUE_KEY)
            .arg(queue.as_str())
            .arg(format!("{INTENT_PREFIX}{queue}"))
            .query_async(&mut conn)
            .await?;
        Ok(())
    }

    /// Before a script that may create reaper work on `queue`: writes its intent
    /// (`+<queue>`, due between 100 ms and [`INTENT_AHEAD`] from now, `scripts/intent.lua`).
    /// A failure is only logged and the caller goes on: a timed-out intent is still queued in
    /// Redis ahead of the script (so it runs first if the script runs at all), and a refused
    /// one means the script will most likely be refused too; the index update after the
    /// script remains as a second chance.
    pub(super) async fn intend_due(&self, queue: &QueueName) {
        let args = [
            format!("{INTENT_PREFIX}{queue}"),
            INTENT_AHEAD.as_millis().to_string(),
            INTENT_GUARD.as_millis().to_string(),
        ];
        let r = self.eval(&scripts::INTENT, &[DUE_KEY], &args).await;
        if let Err(e) = r {
            tracing::debug!(queue = %queue, error = %e, "due-index intent not written");
        }
    }

    /// Tells the due index that `queue` has reaper work at `at_ms` (or earlier, if it already
    /// says so). Called after the script that created the work; a failure is only logged:
    /// the intent written before the script makes the reaper find the work anyway.
    pub(super) async fn mark_due(&self, queue: &QueueName, at_ms: u64) {
        let mut conn = self.conn.clone();
        let r: Result<Value, _> = redis::cmd("ZADD")
            .arg(DUE_KEY)
            .arg("LT")
            .arg(at_ms)
            .arg(queue.as_str())
            .query_async(&mut conn)
            .await;
        if let Err(e) = r {
            tracing::debug!(queue = %queue, error = %e, "due index not updated; the sweep repairs it");
        }
    }

    /// The entries whose due time has come (at most `max`, earliest first): queues' own
    /// entries and writes' intents.
    pub async fn due_queues(&self, max: usize) -> Result<Vec<DueEntry>, StoreError> {
        let mut conn = self.conn.clone();
        let time: Vec<String> = redis::cmd("TIME").query_async(&mut conn).await?;
        let secs: u64 = time.first().and_then(|s| s.parse().ok()).unwrap_or(0);
        let micros: u64 = time.get(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        let now_ms = secs * 1000 + micros / 1000;
        let reply: Vec<Value> = redis::cmd("ZRANGE")
            .arg(DUE_KEY)
            .arg("-inf")
            .arg(now_ms)
            .arg("BYSCORE")
            .arg("LIMIT")
            .arg(0)
            .arg(max)
            .arg("WITHSCORES")
            .query_async(&mut conn)
            .await?;
        let mut out = Vec::with_capacity(reply.len() / 2);
        let mut it = reply.into_iter();
        while let (Some(name), Some(score)) = (it.next(), it.next()) {
            let (name, seen) = (string(name)?, string(score)?);
            let (queue, intent) = match name.strip_prefix(INTENT_PREFIX) {
                Some(q) => (q, true),
                None => (name.as_str(), false),
            };
            match QueueName::parse(queue) {
                Ok(queue) => out.push(DueEntry {
                    queue,
                    seen,
                    intent,
                }),
                // Not a queue name: nobody should have written it; drop it.
                Err(_) => self.set_next_due_raw(&name, &seen, None, None).await?,
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
                self.set_next_due_raw(&member, &e.seen, next_ms, Some(queue.as_str()))
                    .await
            }
            Some(e) => {
                self.set_next_due_raw(queue.as_str(), &e.seen, next_ms, None)
                    .await
            }
            None => {
                self.set_next_due_raw(queue.as_str(), "", next_ms, None)
                    .await
            }
        }
    }

    async fn set_next_due_raw(
        &self,
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
        self.eval(&scripts::DUE, &[DUE_KEY], &args).await?;
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

    /// If the due index is missing (a fresh Redis, or data from before the index existed),
    /// marks every registered queue due now, so the reaper looks at each once. Returns how
    /// many were marked.
    pub async fn seed_due_index(&self) -> Result<usize, StoreError> {
        let mut conn = self.conn.clone();
        let exists: u64 = redis::cmd("EXISTS")
            .arg(DUE_KEY)
            .query_async(&mut conn)
            .await?;
        if exists > 0 {
            return Ok(0);
        }
        let queues = self.queues().await?;
        for chunk in queues.chunks(1000) {
            let mut cmd = redis::cmd("ZADD");
            cmd.arg(DUE_KEY).arg("LT");
            for q in chunk {
                cmd.arg(0).arg(q.as_str());
            }
            let _: Value = cmd.query_async(&mut conn).await?;
        }
        Ok(queues.len())
    }
}
