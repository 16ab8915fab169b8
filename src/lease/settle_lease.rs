//! Settle and lease in one call. When a stream's acks give credits back and no other local
//! stream on the queue waits for a job, the ack lane's script call also leases the stream's
//! next jobs for those credits (`ack_lease.lua`): one call, one round trip, and the next
//! jobs go down the stream right after its Settled replies. Otherwise (or for a unary ack)
//! the credits go back to the queue's lease loop as before.
//!
//! Fairness: a stream takes its next job in its ack only while no other stream of this
//! replica on the queue has a free credit; a stream that waits makes every settling stream
//! hand its credits to the loop, which spreads the jobs round-robin. A stream on several
//! queues takes its credits queue by queue as the loop does (`Session::take_credit_for`;
//! a one-credit turn lasts a time slice, so its acks can lease for it).
//! The lease part is a lease call like the loop's, under the same rules (`lease_fn.lua`).
//!
//! Lost replies: the lease part has its own call id, confirmed like the loop's calls (by the
//! loop's next call, the next combined call, a renewal, or the loop's own confirm call when
//! none carried it within `CONFIRM_DELAY` or before the loop stops);
//! a call that fails is released by id (`Hub::release_lost_lease_call`). Reserved credits
//! and leased jobs ride the lane as guards: a credit dropped unused is free again, a job
//! dropped undelivered goes back to waiting uncharged.

use std::sync::{Arc, Weak};

use super::hub::{Hub, Inner};
use super::queue_loop::{hand_out, QueueLoop};
use super::session::Session;
use super::settle::{per_item, SettleOp};
use crate::jobs::{LeasedJob, QueueName};
use crate::store::{AckItem, AckOutcome, Limit, Settle, Store, StoreError};
use crate::Error;

/// One item of an ack lane call: an ack, or a credit reserved to lease into.
pub(super) enum AckPart {
    /// A job to complete.
    Ack(AckItem),
    /// A credit of a stream whose acks gave it back, reserved for the call's lease part.
    Slot(SlotGuard),
}

/// The result of one [`AckPart`].
pub(super) enum AckOut {
    /// The ack's outcome.
    Acked(AckOutcome),
    /// What the credit got.
    Leased(SlotOut),
}

/// What a reserved credit got from the call's lease part.
pub(super) enum SlotOut {
    /// A job.
    Job(Box<LeaseGuard>),
    /// Nothing; with `wake_loop`, the queue's loop should look again once the credit is free
    /// (jobs may still be leasable: a limit, a pause, delayed jobs, or backlog).
    Empty { wake_loop: bool },
}

/// A credit reserved on a stream for an ack call's lease part; dropped unused, it is free
/// again.
pub(super) struct SlotGuard(Option<Arc<Session>>);

impl SlotGuard {
    /// The stream, taking the reservation over (to deliver into).
    fn into_session(mut self) -> Option<Arc<Session>> {
        self.0.take()
    }
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        if let Some(s) = self.0.take() {
            s.unreserve();
        }
    }
}

/// A job an ack call leased, on its way to its stream; dropped undelivered, it goes back to
/// waiting without an attempt.
pub(super) struct LeaseGuard {
    hub: Hub,
    queue: QueueName,
    now_ms: u64,
    job: Option<LeasedJob>,
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        if let Some(lj) = self.job.take() {
            self.hub
                .release_undelivered(vec![(self.queue.clone(), lj.job.id, lj.token)]);
        }
    }
}

/// Acks through `ack.lua`, or `ack_lease.lua` when the call carries reserved credits.
pub(super) struct AckOp {
    pub(super) store: Store,
    /// The hub whose lane this is (for the queue loop's call bookkeeping).
    pub(super) hub: Weak<Inner>,
}

impl SettleOp for AckOp {
    type Item = AckPart;
    type Out = AckOut;
    async fn call(
        &self,
        queue: &QueueName,
        items: &[AckPart],
    ) -> Result<Vec<Settle<AckOut>>, StoreError> {
        let acks: Vec<&AckItem> = items
            .iter()
            .filter_map(|i| match i {
                AckPart::Ack(a) => Some(a),
                AckPart::Slot(_) => None,
            })
            .collect();
        let slots: Vec<&Arc<Session>> = items
            .iter()
            .filter_map(|i| match i {
                AckPart::Slot(s) => s.0.as_ref(),
                AckPart::Ack(_) => None,
            })
            .collect();
        let hub = self.hub.upgrade().map(|inner| Hub { inner });
        let lp = hub.as_ref().and_then(|h| h.local_loop(queue));
        let (outcomes, mut slot_outs) = match (hub, lp) {
            (Some(hub), Some(lp)) if !slots.is_empty() => {
                ack_lease(&self.store, &hub, &lp, queue, &acks, &slots).await?
            }
            _ => (self.store.ack(queue, &acks).await?, Vec::new()),
        };
        if outcomes.len() != acks.len() {
            return Err(StoreError::Decode(format!(
                "an ack call of {} acks returned {} outcomes",
                acks.len(),
                outcomes.len()
            )));
        }
        slot_outs.resize_with(slots.len(), || SlotOut::Empty { wake_loop: true });
        let (mut outcomes, mut slot_outs) = (outcomes.into_iter(), slot_outs.into_iter());
        Ok(items
            .iter()
            .filter_map(|i| match i {
                AckPart::Ack(_) => outcomes.next().map(|o| map_settle(o, AckOut::Acked)),
                AckPart::Slot(s) if s.0.is_some() => {
                    slot_outs.next().map(|o| Settle::Done(AckOut::Leased(o)))
                }
                AckPart::Slot(_) => Some(Settle::Done(AckOut::Leased(SlotOut::Empty {
                    wake_loop: true,
                }))),
            })
            .collect())
    }
}

/// One `ack_lease.lua` call: the acks' outcomes, and per slot what it got.
async fn ack_lease(
    store: &Store,
    hub: &Hub,
    lp: &QueueLoop,
    queue: &QueueName,
    acks: &[&AckItem],
    slots: &[&Arc<Session>],
) -> Result<(Vec<Settle<AckOutcome>>, Vec<SlotOut>), StoreError> {
    let workers: Vec<&str> = slots.iter().map(|s| s.worker_id.as_str()).collect();
    let lease_ms = hub.config().lease_duration.as_millis() as u64;
    let call = crate::store::new_lease_call_id();
    let confirm = lp.take_unconfirmed();
    let result = store
        .ack_lease(queue, acks, &workers, lease_ms, &call, &confirm)
        .await;
    let (mut outcomes, batch) = match result {
        Ok(r) => r,
        Err(e) => {
            lp.keep_unconfirmed(confirm);
            // The call may still run (or have run): its leases go back uncharged.
            hub.release_lost_lease_call(queue.clone(), call);
            return Err(e);
        }
    };
    let Some(batch) = batch else {
        // The acks ran out of the call's byte budget, so nothing was leased: the rest of
        // the acks in calls of their own.
        let rest = store.ack(queue, &acks[outcomes.len()..]).await?;
        outcomes.extend(rest);
        return Ok((outcomes, Vec::new()));
    };
    if !batch.jobs.is_empty() {
        // Unsent until a stream's transport takes them or they are handed back: the call
        // is confirmed only then (`unsent.rs`).
        hub.inner
            .unsent
            .add(batch.jobs.iter().map(|j| j.token.as_str()));
        lp.keep_unconfirmed(vec![call]);
    }
    if batch.expired > 0 {
        crate::metrics::expired(queue.as_str(), batch.expired);
        tracing::info!(queue = %queue, jobs = batch.expired, "jobs expired before a lease took them");
    }
    if batch.limited.is_some_and(|l| l != Limit::Group) {
        crate::metrics::throttled(queue.as_str());
    }
    if batch.more {
        lp.backlog.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    // A credit left without a job wakes the loop when jobs may still be leasable; the loop
    // then works out how long to wait (a rate limit, a delayed job) as after its own calls.
    let wake_loop = lp.backlog.load(std::sync::atomic::Ordering::Relaxed)
        || batch.more
        || batch.limited.is_some()
        || batch.paused
        || batch.next_due_ms.is_some();
    let now_ms = batch.now_ms;
    let outs = batch
        .jobs
        .into_iter()
        .map(|job| {
            SlotOut::Job(Box::new(LeaseGuard {
                hub: hub.clone(),
                queue: queue.clone(),
                now_ms,
                job: Some(job),
            }))
        })
        .chain(std::iter::repeat_with(|| SlotOut::Empty { wake_loop }))
        .take(slots.len())
        .collect();
    Ok((outcomes, outs))
}

fn map_settle<T, U>(s: Settle<T>, f: impl FnOnce(T) -> U) -> Settle<U> {
    match s {
        Settle::Done(t) => Settle::Done(f(t)),
        Settle::NotFound => Settle::NotFound,
        Settle::LeaseLost(st) => Settle::LeaseLost(st),
    }
}

/// An ack lane result as an ack's.
fn acked(s: Settle<AckOut>) -> Result<Settle<AckOutcome>, Error> {
    match s {
        Settle::Done(AckOut::Acked(o)) => Ok(Settle::Done(o)),
        Settle::Done(AckOut::Leased(_)) => {
            Err(Error::Internal("an ack got a lease slot's result".into()))
        }
        Settle::NotFound => Ok(Settle::NotFound),
        Settle::LeaseLost(st) => Ok(Settle::LeaseLost(st)),
    }
}

/// Each ack with its result, and the span of the attempt it ended.
pub type StreamAck = (AckItem, Result<Settle<AckOutcome>, Error>, tracing::Span);

impl Hub {
    /// Acks jobs of `queue` (id, lease token, optional result) in this replica's next ack
    /// call for the queue, together with whatever other streams ack meanwhile. One result
    /// per item, in order; `Err` only if the call carrying them panicked.
    pub async fn ack(
        &self,
        queue: &QueueName,
        items: Vec<AckItem>,
    ) -> Result<super::Settles<AckItem, AckOutcome>, Error> {
        let n = items.len();
        let parts = items.into_iter().map(AckPart::Ack).collect();
        per_item(n, self.inner.acks.submit(queue, parts).await)?
            .into_iter()
            .map(|(part, r)| match part {
                AckPart::Ack(item) => Ok((item, r.and_then(acked))),
                AckPart::Slot(_) => Err(Error::Internal("an ack call returned a slot".into())),
            })
            .collect()
    }

    /// Acks jobs of `queue` that `session`'s worker sent on its stream, as [`Hub::ack`]
    /// does, and gives the stream its next jobs in the same call when the acks free its
    /// credits and no other local stream on the queue waits (see the module doc). Calls
    /// `settled` for each ack in order (with the span of the attempt it ended) before any
    /// new job goes down the stream; the credits of the acked jobs are back either way.
    pub async fn ack_stream(
        &self,
        session: &Arc<Session>,
        queue: &QueueName,
        items: Vec<AckItem>,
        mut settled: impl FnMut(StreamAck),
    ) -> Result<(), Error> {
        // The stream's own leases give their credits back now, to lease into.
        let held: Vec<Option<tracing::Span>> = items
            .iter()
            .map(|i| session.settle(queue, &i.id, &i.token).map(|h| h.span))
            .collect();
        let freed = held.iter().filter(|h| h.is_some()).count();
        let mut parts: Vec<AckPart> = items.into_iter().map(AckPart::Ack).collect();
        let mut taken = 0;
        if freed > 0 && self.may_combine(session, queue) {
            while taken < freed && session.take_credit_for(queue, |q| self.has_backlog(q)) {
                parts.push(AckPart::Slot(SlotGuard(Some(session.clone()))));
                taken += 1;
            }
        }
        let n = parts.len();
        let reply = self.inner.acks.submit(queue, parts).await;
        if taken < freed {
            // Credits the call did not lease into (or a take passed a sliced turn on): the
            // loops look, as for any settle.
            session.take_turn_passed();
            self.credits_freed(&session.queues);
        }
        let results = match per_item(n, reply) {
            Ok(r) => r,
            Err(e) => {
                self.wake_loop(queue);
                return Err(e);
            }
        };
        let (mut held, mut jobs, mut wake) = (held.into_iter(), Vec::new(), false);
        for (part, r) in results {
            match part {
                AckPart::Ack(item) => {
                    let span = match held.next().flatten() {
                        Some(span) => span,
                        // Not this stream's lease: whichever local stream holds it.
                        None => self.settled(queue, &item.id, &item.token),
                    };
                    settled((item, r.and_then(acked), span));
                }
                AckPart::Slot(guard) => match r {
                    Ok(Settle::Done(AckOut::Leased(SlotOut::Job(lease)))) => {
                        jobs.push((guard, lease))
                    }
                    Ok(Settle::Done(AckOut::Leased(SlotOut::Empty { wake_loop }))) => {
                        wake |= wake_loop
                    }
                    _ => wake = true,
                },
            }
        }
        // The Settled replies are queued: now the next jobs.
        let mut orphans = Vec::new();
        for (guard, mut lease) in jobs {
            let Some(lj) = lease.job.take() else { continue };
            let Some(slot) = guard.into_session() else {
                lease.job = Some(lj);
                continue;
            };
            if let Some((id, token)) = hand_out(self, queue, &slot, lj, lease.now_ms) {
                orphans.push((queue.clone(), id, token));
            }
        }
        if !orphans.is_empty() {
            self.release_undelivered(orphans);
        }
        if wake {
            self.wake_loop(queue);
        }
        if taken > 0 && session.queues.len() > 1 {
            // As after a loop's call: the stream moved its turn on to its next queue.
            self.notify_sessions_queues(std::slice::from_ref(session), queue);
        }
        Ok(())
    }

    /// May `session`'s acks on `queue` lease its next jobs? Not while the replica or the
    /// stream drains, and not while another local stream on the queue waits for a job.
    fn may_combine(&self, session: &Arc<Session>, queue: &QueueName) -> bool {
        if self.is_draining() || session.draining.load(std::sync::atomic::Ordering::Relaxed) {
            return false;
        }
        let Some(lp) = self.local_loop(queue) else {
            return false;
        };
        lp.sessions()
            .iter()
            .all(|s| s.id == session.id || !s.wants_leases())
    }

    /// Wakes `queue`'s local loop, if any.
    pub(super) fn wake_loop(&self, queue: &QueueName) {
        if let Some(lp) = self.local_loop(queue) {
            lp.notify.notify_one();
        }
    }
}
