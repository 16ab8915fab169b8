//! The lease side of [`Store`]: lease, ack, fail, renew, release, the lease-call
//! bookkeeping of lost replies (confirm, release by call id) and the reaper's call.

use super::client::{opt_ms, push_pairs, state, FAIL_CALL_BYTES};
use super::codec::{array, bad, bytes, int, job_from_record, next, string};
use super::keys::Keys;
use super::scripts;
use super::types::*;
use super::{Store, StoreError};
use crate::jobs::{DeadReason, LeasedJob, QueueName};
use redis::Value;
use std::time::Duration;

impl Store {
    /// Promotes due delayed jobs, then leases up to `worker_ids.len()` jobs (`lease.lua`):
    /// the i-th job goes to `worker_ids[i]`, with deadline now + `lease_ms`. `call` is this
    /// call's id ([`new_lease_call_id`]): the jobs stay recorded under it as unconfirmed
    /// until a later call lists it in `confirm` (or [`Store::confirm_lease_calls`], or a
    /// renewal of one of its leases); if this call fails, release it with
    /// [`Store::release_lease_call`]. See attempts.lua, "Lost lease replies".
    pub async fn lease(
        &self,
        queue: &QueueName,
        worker_ids: &[&str],
        lease_ms: u64,
        call: &str,
        confirm: &[String],
    ) -> Result<LeaseBatch, StoreError> {
        let keys = Keys::shared(queue);
        let tokens: Vec<String> = (1..=worker_ids.len())
            .map(|i| format!("{call}-{i}"))
            .collect();
        let mut args = Vec::with_capacity(4 + confirm.len() + worker_ids.len());
        args.push(worker_ids.len().to_string().into_bytes());
        args.push(lease_ms.to_string().into_bytes());
        args.push(call.as_bytes().to_vec());
        args.push(confirm.len().to_string().into_bytes());
        args.extend(confirm.iter().map(|c| c.as_bytes().to_vec()));
        args.extend(worker_ids.iter().map(|w| w.as_bytes().to_vec()));
        // The intent and the script leave together (one round trip, in this order on the
        // connection), so the lease call stays right behind an Enqueue that woke it.
        let (intended, reply) = tokio::join!(
            self.intend_due(queue),
            self.run_script(&scripts::LEASE, &keys, args)
        );
        let batch = lease_batch(queue, tokens, reply?)?;
        if let Some(first) = batch.jobs.iter().map(|j| j.deadline_ms).min() {
            self.due_after_write(queue, first, intended);
        }
        Ok(batch)
    }

    /// Completes leased jobs whose token matches (`ack.lua`), keeping each item's result
    /// on its completed job when the queue keeps completed jobs. An ack repeated with the
    /// token of one already applied is `Done` with `repeated` set (nothing changes). A call
    /// whose byte budget ([`CALL_BYTES`]) runs out answers for the first items; the rest go
    /// in the next call.
    pub async fn ack<I: AckInput>(
        &self,
        queue: &QueueName,
        items: &[I],
    ) -> Result<Vec<Settle<AckOutcome>>, StoreError> {
        let mut out = Vec::with_capacity(items.len());
        while out.len() < items.len() {
            let done = self.ack_call(queue, &items[out.len()..]).await?;
            if done.is_empty() {
                return Err(bad("ack.lua answered for no job"));
            }
            out.extend(done);
        }
        Ok(out)
    }

    /// One `ack.lua` call: the outcomes of the first items (all unless the budget ran out).
    async fn ack_call<I: AckInput>(
        &self,
        queue: &QueueName,
        items: &[I],
    ) -> Result<Vec<Settle<AckOutcome>>, StoreError> {
        let args = ack_args(items);
        let keys = Keys::shared(queue);
        let (intended, reply) = tokio::join!(
            self.intend_due(queue),
            self.run_script(&scripts::ACK, &keys, args)
        );
        let outcomes = ack_outcomes(items.len(), reply?)?;
        if let Some(now_ms) = acked_at(&outcomes) {
            // Retention: the reaper applies the age limit and counts what was trimmed.
            self.due_after_write(queue, now_ms, intended);
        }
        Ok(outcomes)
    }

    /// Fails the current attempt of leased jobs whose token matches (`fail.lua`): retry,
    /// rate-limited return, or dead letter, each job in one atomic step. The items go in
    /// script calls of at most [`FAIL_CALL_BYTES`] of error text each (at least one item),
    /// and a call whose byte budget ([`CALL_BYTES`]) runs out on the records answers for its
    /// first items (the rest go in the next call), so no call holds Redis long; outcomes keep the items' order.
    /// A fail repeated with the token of one already applied is `Done` with the first
    /// outcome and `repeated` set (nothing changes).
    pub async fn fail(
        &self,
        queue: &QueueName,
        items: &[FailItem],
    ) -> Result<Vec<Settle<FailOutcome>>, StoreError> {
        let mut out = Vec::with_capacity(items.len());
        let mut start = 0;
        while start < items.len() {
            let mut end = start + 1;
            let mut size = items[start].message.len() + items[start].details.len();
            while end < items.len() {
                size += items[end].message.len() + items[end].details.len();
                if size > FAIL_CALL_BYTES {
                    break;
                }
                end += 1;
            }
            let done = self.fail_call(queue, &items[start..end]).await?;
            if done.is_empty() {
                return Err(bad("fail.lua answered for no job"));
            }
            // Short when the call's byte budget ran out: the rest go in the next call.
            start += done.len();
            out.extend(done);
        }
        Ok(out)
    }

    /// One `fail.lua` call for `items`.
    async fn fail_call(
        &self,
        queue: &QueueName,
        items: &[FailItem],
    ) -> Result<Vec<Settle<FailOutcome>>, StoreError> {
        let mut args = vec![items.len().to_string().into_bytes()];
        for i in items {
            args.extend([
                i.id.clone().into_bytes(),
                i.token.clone().into_bytes(),
                i.disposition.as_str().as_bytes().to_vec(),
                i.message.clone().into_bytes(),
                i.error_type.clone().into_bytes(),
                i.details.clone().into_bytes(),
                i.retry_after_ms
                    .map_or(-1, |ms| ms as i64)
                    .to_string()
                    .into_bytes(),
                rand::random::<f64>().to_string().into_bytes(),
                (u8::from(i.pause_queue) + 2 * u8::from(i.pause_group))
                    .to_string()
                    .into_bytes(),
            ]);
        }
        let (_, outcomes) = tokio::join!(
            self.intend_due(queue),
            self.settle_call(&scripts::FAIL, queue, args, |mut it, repeated| {
                Ok(FailOutcome {
                    repeated,
                    state: state(&string(next(&mut it)?)?)?,
                    at_ms: int(next(&mut it)?)? as u64,
                    dead_reason: DeadReason::parse(&string(next(&mut it)?)?),
                    lease_ms: int(next(&mut it)?)? as u64,
                    name: string(next(&mut it)?)?,
                    attempt: int(next(&mut it)?)? as u32,
                    now_ms: int(next(&mut it)?)? as u64,
                })
            })
        );
        let outcomes = outcomes?;
        // A retry's due time, or a dead letter's retention, is reaper work.
        let now = outcomes.iter().find_map(|o| match o {
            Settle::Done(f) => Some(f.now_ms),
            _ => None,
        });
        if let Some(now) = now {
            self.mark_due(queue, now).await;
        }
        Ok(outcomes)
    }

    /// Sets the deadline of leases whose token matches to now + `lease_ms`, capped by the
    /// attempt timeout and, for a lease whose cancel is pending, its revoke time
    /// (`renew.lua`); `Done` carries the new deadline and the pending cancel, if any. With
    /// `confirm` the renewal also confirms the leases' calls (attempts.lua, "Lost lease
    /// replies"); without, it leaves them as they are (a lease of the call still unsent).
    pub async fn renew(
        &self,
        queue: &QueueName,
        items: &[(String, String)],
        lease_ms: u64,
        confirm: bool,
    ) -> Result<Vec<Settle<Renewed>>, StoreError> {
        let mut args = vec![
            lease_ms.to_string().into_bytes(),
            items.len().to_string().into_bytes(),
        ];
        push_pairs(&mut args, items);
        if !confirm {
            args.push(b"0".to_vec());
        }
        self.settle_call(&scripts::RENEW, queue, args, |mut it, _| {
            let deadline_ms = int(next(&mut it)?)? as u64;
            let cancel = match it.next() {
                Some(revoke) => Some((int(revoke)? as u64, string(next(&mut it)?)?)),
                None => None,
            };
            Ok(Renewed {
                deadline_ms,
                cancel,
            })
        })
        .await
    }

    /// Hands leased jobs back to waiting without consuming the attempt (`release.lua`);
    /// returns how many were released. A call whose byte budget ([`CALL_BYTES`]) runs out
    /// answers for its first items; the rest go in the next call.
    pub async fn release(
        &self,
        queue: &QueueName,
        items: &[(String, String)],
    ) -> Result<usize, StoreError> {
        let (mut start, mut released) = (0, 0);
        while start < items.len() {
            let rest = &items[start..];
            let mut args = vec![rest.len().to_string().into_bytes()];
            push_pairs(&mut args, rest);
            let reply = array(
                self.run_script(&scripts::RELEASE, &Keys::shared(queue), args)
                    .await?,
            )?;
            if reply.is_empty() {
                return Err(bad("release.lua answered for no job"));
            }
            start += reply.len();
            for v in reply {
                if int(v)? == 1 {
                    released += 1;
                }
            }
        }
        Ok(released)
    }

    /// The server got the replies of these lease calls of `queue` and handed their jobs to
    /// its streams (`confirm_calls.lua`): their leases now count as delivered.
    pub async fn confirm_lease_calls(
        &self,
        queue: &QueueName,
        calls: &[String],
    ) -> Result<(), StoreError> {
        if calls.is_empty() {
            return Ok(());
        }
        let args = calls.iter().map(|c| c.as_bytes().to_vec()).collect();
        self.run_script(&scripts::CONFIRM_CALLS, &Keys::shared(queue), args)
            .await?;
        Ok(())
    }

    /// The reply of lease call `call` was lost (`release_call.lua`): its jobs go back to
    /// waiting without an attempt charged, and the call leases nothing if it runs later
    /// (within `tombstone_ms`). Idempotent; returns how many jobs went back.
    pub async fn release_lease_call(
        &self,
        queue: &QueueName,
        call: &str,
        tombstone_ms: u64,
    ) -> Result<u64, StoreError> {
        let args = vec![
            call.as_bytes().to_vec(),
            tombstone_ms.to_string().into_bytes(),
        ];
        let reply = self
            .run_script(&scripts::RELEASE_CALL, &Keys::new(queue), args)
            .await?;
        Ok(int(reply)? as u64)
    }

    /// Fails up to `max` expired leases, promotes due delayed jobs and applies the retention
    /// limits (`reap.lua`). An expired lease of an unconfirmed lease call is handed back
    /// uncharged once the call is [`lost_call_after`] old, looked at again later before.
    pub async fn reap(&self, queue: &QueueName, max: usize) -> Result<ReapReport, StoreError> {
        let mut args = vec![
            max.to_string().into_bytes(),
            self.lost_call_after.as_millis().to_string().into_bytes(),
        ];
        args.extend((0..max).map(|_| rand::random::<f64>().to_string().into_bytes()));
        let mut reply = array(
            self.run_script(&scripts::REAP, &Keys::new(queue), args)
                .await?,
        )?
        .into_iter();
        let promoted = int(next(&mut reply)?)? as u64;
        let next_deadline_ms = opt_ms(int(next(&mut reply)?)?);
        let next_due_ms = opt_ms(int(next(&mut reply)?)?);
        let next_retention_ms = opt_ms(int(next(&mut reply)?)?);
        let trimmed_completed = int(next(&mut reply)?)? as u64;
        let trimmed_dead = int(next(&mut reply)?)? as u64;
        let more = int(next(&mut reply)?)? == 1;
        let expired = int(next(&mut reply)?)? as u64;
        let mut reaped = Vec::new();
        for item in reply {
            let mut f = array(item)?.into_iter();
            reaped.push(ReapedJob {
                id: string(next(&mut f)?)?,
                name: string(next(&mut f)?)?,
                error_type: string(next(&mut f)?)?,
                state: state(&string(next(&mut f)?)?)?,
                dead_reason: DeadReason::parse(&string(next(&mut f)?)?),
                attempt: int(next(&mut f)?)? as u32,
            });
        }
        Ok(ReapReport {
            promoted,
            next_deadline_ms,
            next_due_ms,
            next_retention_ms,
            trimmed_completed,
            trimmed_dead,
            reaped,
            more,
            expired,
        })
    }
}

impl Store {
    /// [`Store::mark_due`] in a task of its own, off the caller's path: the leases and acks
    /// it follows reach their streams a round trip sooner. As for `mark_due`, a failure
    /// (or its loss to a crash) is harmless when the intent written before the script was
    /// taken (`registry.rs`); when it was not, this is the only update (`due_later.rs`).
    pub(super) fn mark_due_soon(&self, queue: &QueueName, at_ms: u64) {
        let (store, queue) = (self.clone(), queue.clone());
        tokio::spawn(async move { store.mark_due(&queue, at_ms).await });
    }
}

/// How old an unconfirmed lease call must be before the reaper takes it for lost and hands
/// its expired leases back uncharged (attempts.lua, "Lost lease replies"), for a server
/// whose Redis commands time out after `redis_timeout`. A server confirms a delivered call
/// within the confirmation delay (20 ms, `lease::queue_loop::CONFIRM_DELAY`) by a call that
/// may take up to `redis_timeout`, and tries a failed one again 520 ms later: twice the
/// timeout plus 1 s covers the delay, that call and one retry, with slack for a loaded box
/// (7 s with the default 3 s timeout). Before that age an expired lease of the call is
/// neither released nor failed, so a job timeout or cancel grace shorter than the
/// confirmation takes effect once the call is confirmed (within about twice its age).
pub fn lost_call_after(redis_timeout: Duration) -> Duration {
    redis_timeout * 2 + Duration::from_secs(1)
}

/// A fresh lease call id (128 random bits, hex): the prefix of the call's lease tokens.
pub fn new_lease_call_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// Decodes `lease_fn.lua`'s reply: the i-th job leased has the i-th of `tokens`.
pub(super) fn lease_batch(
    queue: &QueueName,
    tokens: Vec<String>,
    reply: Value,
) -> Result<LeaseBatch, StoreError> {
    let mut reply = array(reply)?.into_iter();
    let now_ms = int(next(&mut reply)?)? as u64;
    let next_due_ms = opt_ms(int(next(&mut reply)?)?);
    let paused = int(next(&mut reply)?)? == 1;
    let limited = match string(next(&mut reply)?)?.as_str() {
        "" => None,
        "rate" => Some(Limit::Rate),
        "throttle" => Some(Limit::Throttle),
        "concurrency" => Some(Limit::Concurrency),
        "group" => Some(Limit::Group),
        _ => return Err(bad("lease limit")),
    };
    let wait_until_ms = opt_ms(int(next(&mut reply)?)?);
    let more = int(next(&mut reply)?)? == 1;
    let expired = int(next(&mut reply)?)? as u64;
    // Three values per job, then each job's checkpoint.
    let leased = reply.len() / 4;
    let mut jobs = Vec::with_capacity(leased);
    for token in tokens.into_iter().take(leased) {
        let id = string(next(&mut reply)?)?;
        let deadline_ms = int(next(&mut reply)?)? as u64;
        let mut job = job_from_record(queue, id, &bytes(next(&mut reply)?)?)?;
        job.lease_deadline_ms = deadline_ms;
        jobs.push(LeasedJob {
            attempt: job.attempts_made,
            job,
            token,
            deadline_ms,
        });
    }
    for j in &mut jobs {
        j.job.data.checkpoint = bytes(next(&mut reply)?)?;
    }
    Ok(LeaseBatch {
        now_ms,
        jobs,
        next_due_ms,
        paused,
        limited,
        wait_until_ms,
        more,
        expired,
    })
}

/// Decodes `ack_fn.lua`'s reply for a call of `items` acks: the outcomes of the first ones
/// (all unless the call's byte budget ran out).
pub(super) fn ack_outcomes(
    items: usize,
    reply: Value,
) -> Result<Vec<Settle<AckOutcome>>, StoreError> {
    let mut reply = array(reply)?.into_iter();
    let now_ms = int(next(&mut reply)?)? as u64;
    let answered = (reply.len() / 3).min(items);
    let outcomes: Vec<Settle<AckOutcome>> = (0..answered)
        .map(|_| {
            let status = string(next(&mut reply)?)?;
            let lease_ms = int(next(&mut reply)?)? as u64;
            let text = string(next(&mut reply)?)?;
            Ok(match status.as_str() {
                "OK" | "DONE" => Settle::Done(AckOutcome {
                    lease_ms,
                    name: text,
                    now_ms,
                    repeated: status == "DONE",
                }),
                "NOT_FOUND" => Settle::NotFound,
                "LEASE_LOST" => Settle::LeaseLost(text),
                _ => return Err(bad("unknown settle status")),
            })
        })
        .collect::<Result<_, StoreError>>()?;
    Ok(outcomes)
}

/// `ack_fn.lua`'s arguments for `items`: n, the (id, token) pairs, then the results.
pub(super) fn ack_args<I: AckInput>(items: &[I]) -> Vec<Vec<u8>> {
    let mut args = Vec::with_capacity(2 + items.len() * 2);
    args.push(items.len().to_string().into_bytes());
    for i in items {
        args.push(i.id().as_bytes().to_vec());
        args.push(i.token().as_bytes().to_vec());
    }
    // The results after the pairs, as (item index, bytes): acks without one add nothing.
    let results: Vec<(usize, &[u8])> = items
        .iter()
        .enumerate()
        .filter_map(|(k, i)| i.result().map(|r| (k, r)))
        .collect();
    if !results.is_empty() {
        args.push(results.len().to_string().into_bytes());
        for (k, r) in results {
            args.push(k.to_string().into_bytes());
            args.push(r.to_vec());
        }
    }
    args
}

/// Redis's clock at an ack call that completed a job (retention is reaper work from then).
pub(super) fn acked_at(outcomes: &[Settle<AckOutcome>]) -> Option<u64> {
    outcomes.iter().find_map(|o| match o {
        Settle::Done(a) => Some(a.now_ms),
        _ => None,
    })
}
