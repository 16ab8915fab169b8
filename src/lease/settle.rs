//! Group commit for acks and fails: one lane per queue per kind (ack, fail) on this replica.
//! A lane is a task that takes everything submitted to it so far (from any stream, or a
//! unary call), applies it in one script call, hands each submitter its own results, and
//! repeats. While a call is in flight, later submissions queue up and go in the next call
//! together; an idle lane calls at once, so a lone ack waits for no timer.
//!
//! Invariants: submissions are applied in the order they reached the lane, each whole and
//! within one call (a call holds at most [`MAX_SETTLE_BATCH`] items unless one submission
//! alone is larger); each submitter gets exactly one reply, with its items back in order and
//! one result per item, or the error of the call that carried them.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::hub::Hub;
use crate::jobs::{JobState, QueueName};
use crate::store::{FailItem, FailOutcome, Settle, Store, StoreError};
use crate::Error;

/// Most items one coalesced script call carries.
pub const MAX_SETTLE_BATCH: usize = 1000;

/// A batchable settle operation: one store call for many items of one queue.
pub(super) trait SettleOp: Send + Sync + 'static {
    /// One item to settle.
    type Item: Send + 'static;
    /// What the store answers per applied item.
    type Out: Send + 'static;
    /// Applies `items` of `queue` in one call; one result per item, in order.
    fn call<'a>(
        &'a self,
        queue: &'a QueueName,
        items: &'a [Self::Item],
    ) -> impl Future<Output = Result<Vec<Settle<Self::Out>>, StoreError>> + Send + 'a;
}

/// Fails through `fail.lua`.
pub(super) struct FailOp(pub(super) Store);

impl SettleOp for FailOp {
    type Item = FailItem;
    type Out = FailOutcome;
    fn call<'a>(
        &'a self,
        queue: &'a QueueName,
        items: &'a [FailItem],
    ) -> impl Future<Output = Result<Vec<Settle<FailOutcome>>, StoreError>> + Send + 'a {
        self.0.fail(queue, items)
    }
}

/// The reply to one submission: its items back, and one result per item or the error of
/// the call that carried them (shared by every submission of that call).
pub type SettleReply<I, O> = (Vec<I>, Result<Vec<Settle<O>>, Arc<StoreError>>);

struct Submission<I, O> {
    items: Vec<I>,
    reply: oneshot::Sender<SettleReply<I, O>>,
}

type Lane<Op> = mpsc::UnboundedSender<Submission<<Op as SettleOp>::Item, <Op as SettleOp>::Out>>;
type Lanes<Op> = Arc<Mutex<HashMap<QueueName, Lane<Op>>>>;

/// A lane with no submission for this long ends (a queue no one settles on any more costs
/// no task); the next submission starts a fresh one.
const LANE_IDLE: std::time::Duration = std::time::Duration::from_secs(60);

/// The lanes of one settle kind, created on first use per queue.
pub(super) struct Coalescer<Op: SettleOp> {
    op: Arc<Op>,
    max_items: usize,
    lanes: Lanes<Op>,
    tracker: TaskTracker,
    stop: CancellationToken,
}

impl<Op: SettleOp> Coalescer<Op> {
    /// Lanes over `op`, each call bounded at `max_items`; lane tasks run on `tracker` and
    /// end, once idle, when `stop` is cancelled.
    pub(super) fn new(
        op: Op,
        max_items: usize,
        tracker: TaskTracker,
        stop: CancellationToken,
    ) -> Self {
        Coalescer {
            op: Arc::new(op),
            max_items: max_items.max(1),
            lanes: Arc::default(),
            tracker,
            stop,
        }
    }

    /// Settles `items` of `queue` in the lane's next call. `Err` when the lane has stopped
    /// (the replica is shutting down) or died: the items handed back were not applied; items
    /// missing from it were lost in a call that panicked.
    pub(super) async fn submit(
        &self,
        queue: &QueueName,
        items: Vec<Op::Item>,
    ) -> Result<SettleReply<Op::Item, Op::Out>, Vec<Op::Item>> {
        let (tx, rx) = oneshot::channel();
        let sub = Submission { items, reply: tx };
        {
            let mut lanes = match self.lanes.lock() {
                Ok(l) => l,
                Err(p) => p.into_inner(),
            };
            let lane = lanes
                .entry(queue.clone())
                .or_insert_with(|| self.spawn(queue));
            if let Err(mpsc::error::SendError(sub)) = lane.send(sub) {
                if self.stop.is_cancelled() {
                    return Err(sub.items);
                }
                // The lane's task died (a panic in a call): start a fresh one.
                let fresh = self.spawn(queue);
                let sent = fresh.send(sub);
                lanes.insert(queue.clone(), fresh);
                if let Err(mpsc::error::SendError(sub)) = sent {
                    return Err(sub.items);
                }
            }
        }
        rx.await.map_err(|_| Vec::new())
    }

    fn spawn(&self, queue: &QueueName) -> Lane<Op> {
        let (tx, rx) = mpsc::unbounded_channel();
        let (op, queue, max) = (self.op.clone(), queue.clone(), self.max_items);
        let stop = self.stop.clone();
        let lanes = self.lanes.clone();
        self.tracker
            .spawn(run_lane(op, queue, max, rx, stop, lanes));
        tx
    }
}

/// A lane's task: waits for a submission, takes whatever else is queued (up to `max` items),
/// applies it all in one call, replies to each submitter, repeats. Idle for [`LANE_IDLE`],
/// it removes itself from `lanes` and ends; it checks under the map's lock, under which
/// every submission is sent, that nothing is queued, so no submission is left behind.
async fn run_lane<Op: SettleOp>(
    op: Arc<Op>,
    queue: QueueName,
    max: usize,
    mut rx: mpsc::UnboundedReceiver<Submission<Op::Item, Op::Out>>,
    stop: CancellationToken,
    lanes: Lanes<Op>,
) {
    let mut carry: Option<Submission<Op::Item, Op::Out>> = None;
    loop {
        let first = match carry.take() {
            Some(s) => s,
            None => tokio::select! {
                biased;
                s = rx.recv() => match s {
                    Some(s) => s,
                    None => return,
                },
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(LANE_IDLE) => {
                    let mut map = match lanes.lock() {
                        Ok(l) => l,
                        Err(p) => p.into_inner(),
                    };
                    if rx.is_empty() {
                        map.remove(&queue);
                        return;
                    }
                    continue;
                }
            },
        };
        let mut subs = vec![first];
        let mut total = subs[0].items.len();
        while total < max {
            match rx.try_recv() {
                Ok(s) if total + s.items.len() > max => {
                    carry = Some(s);
                    break;
                }
                Ok(s) => {
                    total += s.items.len();
                    subs.push(s);
                }
                Err(_) => break,
            }
        }
        apply(&*op, &queue, subs, total).await;
    }
}

/// One call for `subs` (holding `total` items), then one reply per submission.
async fn apply<Op: SettleOp>(
    op: &Op,
    queue: &QueueName,
    subs: Vec<Submission<Op::Item, Op::Out>>,
    total: usize,
) {
    let mut sizes = Vec::with_capacity(subs.len());
    let mut replies = Vec::with_capacity(subs.len());
    let mut items = Vec::with_capacity(total);
    for s in subs {
        sizes.push(s.items.len());
        replies.push(s.reply);
        items.extend(s.items);
    }
    let result = match op.call(queue, &items).await {
        Ok(r) if r.len() == items.len() => Ok(r),
        Ok(r) => Err(StoreError::Decode(format!(
            "a settle call of {} items returned {} results",
            items.len(),
            r.len()
        ))),
        Err(e) => Err(e),
    };
    let mut items = items.into_iter();
    match result {
        Ok(results) => {
            let mut results = results.into_iter();
            for (n, reply) in sizes.into_iter().zip(replies) {
                let mine = items.by_ref().take(n).collect();
                let _ = reply.send((mine, Ok(results.by_ref().take(n).collect())));
            }
        }
        Err(e) => {
            let e = Arc::new(e);
            for (n, reply) in sizes.into_iter().zip(replies) {
                let mine = items.by_ref().take(n).collect();
                let _ = reply.send((mine, Err(e.clone())));
            }
        }
    }
}

/// Each item with its own result: the script's answer, or the error of the call.
pub type Settles<I, O> = Vec<(I, Result<Settle<O>, Error>)>;

/// The error an item of a failed call gets: the call's error, classified as for any call.
fn item_error(e: &StoreError) -> Error {
    Error::from(e)
}

/// Pairs each item with its result; `Err` when the lane lost items (see
/// [`Coalescer::submit`]).
pub(super) fn per_item<I, O>(
    sent: usize,
    reply: Result<SettleReply<I, O>, Vec<I>>,
) -> Result<Settles<I, O>, Error> {
    let out: Settles<I, O> = match reply {
        Ok((items, Ok(results))) => items.into_iter().zip(results.into_iter().map(Ok)).collect(),
        Ok((items, Err(e))) => items
            .into_iter()
            .map(|i| (i, Err(item_error(&e))))
            .collect(),
        Err(items) => items
            .into_iter()
            .map(|i| {
                (
                    i,
                    Err(Error::Unavailable("the server is shutting down".into())),
                )
            })
            .collect(),
    };
    if out.len() != sent {
        return Err(Error::Internal(format!(
            "a settle lane lost {} of {sent} items",
            sent - out.len()
        )));
    }
    Ok(out)
}

impl Hub {
    /// Fails attempts of `queue` in this replica's next fail call for the queue, together
    /// with whatever other streams fail meanwhile (see [`Hub::ack`]).
    ///
    /// A fail that delays its job (a retry with backoff, a rate-limited return) wakes the
    /// queue's local loop: its next lease call learns the new due time (a settle's credit
    /// alone does not wake a loop whose queue ran dry, [`Hub::credits_freed`], and no
    /// wake-up is published for a delayed job).
    pub async fn fail(
        &self,
        queue: &QueueName,
        items: Vec<FailItem>,
    ) -> Result<Settles<FailItem, FailOutcome>, Error> {
        let n = items.len();
        let settles = per_item(n, self.inner.fails.submit(queue, items).await)?;
        let delayed = settles
            .iter()
            .any(|(_, r)| matches!(r, Ok(Settle::Done(o)) if o.state == JobState::Delayed));
        if delayed {
            self.wake_loop(queue);
        }
        Ok(settles)
    }
}

#[cfg(test)]
mod tests;
