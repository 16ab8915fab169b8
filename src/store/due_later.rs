//! Due-index updates held back (see `registry.rs` for the index and its intents).
//!
//! A lease or an ack whose intent was written before its script no longer sends the
//! queue's new due time (the first lease deadline, or now for retention) as a command of its
//! own after the reply. That command travelled alone, one more packet for Redis per job at
//! low concurrency (about 30 µs of Redis CPU, `docs/benchmark-history.md`). It is held here
//! instead, the earliest per queue, and leaves with whichever comes first:
//! - the next intent written for the queue by this store (`intent.lua` takes it: the same
//!   key, no extra packet), or
//! - this server's next reaper tick, which flushes every held update before it reads the
//!   index ([`Store::flush_held_due`]).
//!
//! So the index holds the time before the first reaper tick after the write, as when the
//! update was sent at once: the reaper acts at the same tick. If the server dies while it
//! holds an update, the call's intent (written, or the update would not have been held)
//! sends the reaper of any replica to the queue within [`super::INTENT_AHEAD`], the same
//! guarantee as for an update lost after the reply before.

use std::collections::HashMap;

use futures::StreamExt;
use redis::Value;

use super::client::Store;
use super::registry::SHARD_READS;
use super::StoreError;
use crate::jobs::QueueName;

impl Store {
    /// After a call that created reaper work at `at_ms` (Redis ms): holds the due-index update
    /// when the call's intent was written (`intended`), or sends it at once, in a task of its
    /// own, when it was not.
    pub(super) fn due_after_write(&self, queue: &QueueName, at_ms: u64, intended: bool) {
        if intended {
            self.hold_due(queue, at_ms);
        } else {
            self.mark_due_soon(queue, at_ms);
        }
    }

    /// Holds `queue`'s update at `at_ms` (the earliest one held wins).
    pub(super) fn hold_due(&self, queue: &QueueName, at_ms: u64) {
        if let Ok(mut held) = self.held_due.lock() {
            held.entry(queue.clone())
                .and_modify(|t| *t = (*t).min(at_ms))
                .or_insert(at_ms);
        }
    }

    /// Takes `queue`'s held update, if any (for its intent to carry).
    pub(super) fn take_held_due(&self, queue: &QueueName) -> Option<u64> {
        self.held_due.lock().ok()?.remove(queue)
    }

    /// Writes every held update to the due index: one `ZADD LT` per due-index shard, with
    /// all of its queues, [`SHARD_READS`] shards at a time (the reaper calls it at the start
    /// of each tick). Errors: a command Redis did not take; its updates are held again for
    /// the next flush or intent (`ZADD LT` is safe to repeat).
    pub(crate) async fn flush_held_due(&self) -> Result<(), StoreError> {
        let held: Vec<(QueueName, u64)> = match self.held_due.lock() {
            Ok(mut h) if !h.is_empty() => h.drain().collect(),
            _ => return Ok(()),
        };
        let mut by_key: HashMap<&'static str, Vec<(QueueName, u64)>> = HashMap::new();
        for (queue, at) in held {
            by_key
                .entry(self.due_key(&queue))
                .or_default()
                .push((queue, at));
        }
        let mut calls = Vec::with_capacity(by_key.len());
        for (key, updates) in by_key {
            let mut conn = self.conn.clone();
            calls.push(async move {
                let mut cmd = redis::cmd("ZADD");
                cmd.arg(key).arg("LT");
                for (queue, at) in &updates {
                    cmd.arg(*at).arg(queue.as_str());
                }
                let r: Result<Value, _> = cmd.query_async(&mut conn).await;
                (updates, r)
            });
        }
        let results: Vec<_> = futures::stream::iter(calls)
            .buffer_unordered(SHARD_READS)
            .collect()
            .await;
        let mut failed = None;
        for (updates, r) in results {
            if let Err(e) = r {
                for (queue, at) in &updates {
                    self.hold_due(queue, *at);
                }
                failed = Some(e);
            }
        }
        failed.map_or(Ok(()), |e| Err(e.into()))
    }
}
