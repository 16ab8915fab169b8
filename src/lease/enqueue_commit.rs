//! Group commit for unary Enqueue: one lane per queue on this replica. The first Enqueue of
//! an idle lane starts its store call at once (no timer); Enqueues of the same queue that
//! arrive while a call is in flight queue up and go together in the lane's next call, up to
//! [`MAX_COMMIT_JOBS`] jobs or [`CALL_BYTES`] of payload. The acks and fails of streams are
//! coalesced the same way (`settle.rs`); here a lane has no long-lived task. The caller that
//! finds the lane idle makes its own call, in its own task, as an uncoalesced Enqueue would
//! (so a lone Enqueue pays no hop to another task); when that call ends, or the caller is
//! cancelled, whatever queued up meanwhile is handed to a committer task, which runs calls
//! while submissions wait and ends (removing the lane) when none is left.
//!
//! Invariants: submissions go into calls in the order they reached the lane, each whole and
//! within one call (a call holds at most [`MAX_COMMIT_JOBS`] jobs and [`CALL_BYTES`] of
//! payload unless one submission alone is larger), so one caller's jobs stay in order and
//! callers are FIFO by arrival. Each submitter gets exactly one reply: its jobs back and its
//! own outcome, which is the outcomes of its jobs, or the first error among them (a record
//! that does not decode fails only the job it belongs to), or the error of the call that
//! stopped before its jobs. Coalesced calls run in the committer, apart from every caller:
//! a caller whose request is cancelled (deadline, client gone) drops only its wait, never
//! its neighbours' write; a first caller cancelled during its own call (which carries only
//! its jobs) hands the waiting ones on all the same. Authorization, validation and per-tenant limits are the caller's, before it
//! submits.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::task::Poll;

use tokio::sync::oneshot;

use super::hub::Hub;
use super::wakeup::EchoCredit;
use crate::jobs::{JobState, NewJob, QueueName};
use crate::store::{EnqueueOutcome, Store, StoreError, CALL_BYTES};
use crate::Error;

/// Most jobs one coalesced enqueue call carries (a single submission may hold more).
pub const MAX_COMMIT_JOBS: usize = 256;

/// What a store call answers for a run of items: one result for each of the first items
/// (all of them unless the call stopped), and the error that stopped it before the rest.
pub type Partial<O> = (Vec<Result<O, StoreError>>, Option<StoreError>);

/// A batchable write: one store call for many items of one queue.
pub(super) trait CommitOp: Send + Sync + 'static {
    /// One item to write.
    type Item: Send + 'static;
    /// What the store answers per item.
    type Out: Send + 'static;
    /// The item's weight against the call's byte budget.
    fn bytes(item: &Self::Item) -> usize;
    /// Writes `items` of `queue` in one call (see [`Partial`]).
    fn call<'a>(
        &'a self,
        queue: &'a QueueName,
        items: &'a [Self::Item],
    ) -> impl Future<Output = Partial<Self::Out>> + Send + 'a;
}

/// Enqueues through `enqueue.lua`, waking the queue's local lease loop early ([`write`]).
pub(super) struct EnqueueOp {
    hub: Hub,
    default_max_attempts: u32,
}

impl CommitOp for EnqueueOp {
    type Item = NewJob;
    type Out = EnqueueOutcome;
    fn bytes(job: &NewJob) -> usize {
        job.payload.len()
    }
    fn call<'a>(
        &'a self,
        queue: &'a QueueName,
        jobs: &'a [NewJob],
    ) -> impl Future<Output = Partial<EnqueueOutcome>> + Send + 'a {
        write(&self.hub, queue, jobs, self.default_max_attempts)
    }
}

/// The reply to one submission: its items back (for a retry with the same ids) and its
/// outcome.
pub type CommitReply<I, O> = (Vec<I>, Result<Vec<O>, Error>);

struct Submission<I, O> {
    items: Vec<I>,
    bytes: usize,
    reply: oneshot::Sender<CommitReply<I, O>>,
}

/// The submissions waiting for a queue's next call; present in the map while a committer
/// runs for the queue.
type Waiting<I, O> = VecDeque<Submission<I, O>>;

/// Every queue's waiting submissions, by queue.
type LaneMap<I, O> = Mutex<HashMap<QueueName, Waiting<I, O>>>;

struct Lanes<Op: CommitOp> {
    op: Op,
    max_items: usize,
    max_bytes: usize,
    lanes: LaneMap<Op::Item, Op::Out>,
}

/// Per-queue group commit over a [`CommitOp`]; cheap to clone.
pub(super) struct Committer<Op: CommitOp> {
    inner: Arc<Lanes<Op>>,
}

impl<Op: CommitOp> Clone for Committer<Op> {
    fn clone(&self) -> Self {
        Committer {
            inner: self.inner.clone(),
        }
    }
}

impl<Op: CommitOp> Committer<Op> {
    /// Lanes over `op`, each call bounded at `max_items` and `max_bytes`.
    pub(super) fn new(op: Op, max_items: usize, max_bytes: usize) -> Self {
        Committer {
            inner: Arc::new(Lanes {
                op,
                max_items: max_items.max(1),
                max_bytes,
                lanes: Mutex::default(),
            }),
        }
    }

    /// Writes `items` of `queue` in the lane's next call: at once (in this task) when the
    /// lane is idle, else together with everything else that arrives while the current
    /// call runs.
    pub(super) async fn submit(
        &self,
        queue: &QueueName,
        items: Vec<Op::Item>,
    ) -> CommitReply<Op::Item, Op::Out> {
        let joined = {
            let mut lanes = lock(&self.inner.lanes);
            match lanes.get_mut(queue) {
                Some(waiting) => {
                    let (tx, rx) = oneshot::channel();
                    let bytes = items.iter().map(Op::bytes).sum();
                    waiting.push_back(Submission {
                        items,
                        bytes,
                        reply: tx,
                    });
                    Ok(rx)
                }
                None => {
                    lanes.insert(queue.clone(), VecDeque::new());
                    Err(items)
                }
            }
        };
        let rx = match joined {
            Ok(rx) => rx,
            Err(items) => return self.lead(queue, items).await,
        };
        rx.await.unwrap_or_else(|_| {
            (
                Vec::new(),
                Err(Error::Internal(
                    "an enqueue call ended without answering (it panicked)".into(),
                )),
            )
        })
    }

    /// The call of a caller that found the lane idle (it holds the lane now): its own
    /// items alone, then the lane goes to a committer if anything queued up meanwhile
    /// ([`Handoff`], also when this future is dropped).
    async fn lead(
        &self,
        queue: &QueueName,
        items: Vec<Op::Item>,
    ) -> CommitReply<Op::Item, Op::Out> {
        let handoff = Handoff {
            lanes: &self.inner,
            queue,
        };
        let (answered, stopped) = self.inner.op.call(queue, &items).await;
        drop(handoff);
        let outcome = outcome_of(answered, items.len(), stopped.as_ref());
        (items, outcome)
    }
}

/// Hands a lane on when its first caller's own call ends (or is dropped): to a committer
/// task when submissions wait, else the lane is removed (idle).
struct Handoff<'a, Op: CommitOp> {
    lanes: &'a Arc<Lanes<Op>>,
    queue: &'a QueueName,
}

impl<Op: CommitOp> Drop for Handoff<'_, Op> {
    fn drop(&mut self) {
        let mut map = lock(&self.lanes.lanes);
        if map.get(self.queue).is_none_or(|w| w.is_empty()) {
            map.remove(self.queue);
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                drop(map);
                rt.spawn(commit_while_waiting(self.lanes.clone(), self.queue.clone()));
            }
            // No runtime to run them on (it is shutting down): their callers get an error.
            Err(_) => {
                map.remove(self.queue);
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// Removes a queue's lane if its committer ends without emptying it (a panic in a call):
/// the submissions still waiting are dropped (their callers get an error) and the next
/// submission starts a fresh committer.
struct LaneGuard<'a, Op: CommitOp> {
    lanes: &'a Lanes<Op>,
    queue: &'a QueueName,
    done: bool,
}

impl<Op: CommitOp> Drop for LaneGuard<'_, Op> {
    fn drop(&mut self) {
        if !self.done {
            lock(&self.lanes.lanes).remove(self.queue);
        }
    }
}

/// A committer: takes the waiting submissions from the front of `queue`'s lane (whole, up
/// to the bounds), writes them in one call, replies to each, and repeats; when none waits,
/// it removes the lane (under the lock under which every submission is queued, so none is
/// left behind) and ends.
async fn commit_while_waiting<Op: CommitOp>(lanes: Arc<Lanes<Op>>, queue: QueueName) {
    let mut guard = LaneGuard {
        lanes: &lanes,
        queue: &queue,
        done: false,
    };
    loop {
        let batch = {
            let mut map = lock(&lanes.lanes);
            let Some(waiting) = map.get_mut(&queue) else {
                guard.done = true;
                return;
            };
            if waiting.is_empty() {
                map.remove(&queue);
                guard.done = true;
                return;
            }
            take_batch(waiting, lanes.max_items, lanes.max_bytes)
        };
        apply(&lanes.op, &queue, batch).await;
    }
}

/// Whole submissions from the front of `waiting`, at least one, then as many as fit in
/// `max_items` and `max_bytes`.
fn take_batch<I, O>(
    waiting: &mut Waiting<I, O>,
    max_items: usize,
    max_bytes: usize,
) -> Vec<Submission<I, O>> {
    let mut batch = Vec::new();
    let (mut items, mut bytes) = (0, 0);
    while let Some(next) = waiting.front() {
        let fits = items + next.items.len() <= max_items && bytes + next.bytes <= max_bytes;
        if !batch.is_empty() && !fits {
            break;
        }
        items += next.items.len();
        bytes += next.bytes;
        batch.extend(waiting.pop_front());
    }
    batch
}

/// One call for the items of `subs`, then one reply per submission.
async fn apply<Op: CommitOp>(op: &Op, queue: &QueueName, subs: Vec<Submission<Op::Item, Op::Out>>) {
    let total = subs.iter().map(|s| s.items.len()).sum();
    let mut items = Vec::with_capacity(total);
    let mut replies = Vec::with_capacity(subs.len());
    for s in subs {
        replies.push((s.items.len(), s.reply));
        items.extend(s.items);
    }
    let (results, stopped) = op.call(queue, &items).await;
    let mut items = items.into_iter();
    let mut results = results.into_iter();
    for (n, reply) in replies {
        let mine: Vec<Op::Item> = items.by_ref().take(n).collect();
        let answered: Vec<Result<Op::Out, StoreError>> = results.by_ref().take(n).collect();
        let outcome = outcome_of(answered, n, stopped.as_ref());
        // A caller that gave up (its request was cancelled) no longer listens.
        let _ = reply.send((mine, outcome));
    }
}

/// The outcome of a submission of `n` items given the results `answered` for its first
/// ones: their outcomes if every item was answered and none failed, else the first
/// item's error, or the error that `stopped` the call before its items.
fn outcome_of<O>(
    answered: Vec<Result<O, StoreError>>,
    n: usize,
    stopped: Option<&StoreError>,
) -> Result<Vec<O>, Error> {
    if answered.len() < n {
        return Err(match stopped {
            Some(e) => Error::from(e),
            None => Error::Internal(format!(
                "an enqueue call answered for {} of {n} jobs",
                answered.len()
            )),
        });
    }
    answered
        .into_iter()
        .map(|r| r.map_err(Error::from))
        .collect()
}

/// One enqueue store call for `jobs` of `queue`. A local lease loop of the queue is woken
/// as soon as the call is on the store's connection (see `wakeup.rs`): the future is polled
/// once, which writes the FCALL (or EVALSHA) into the connection's pipeline unless the store
/// first has something else to send: a one-time SADD for a queue new to it, or the due
/// index's intent for jobs with a delay or a ttl ([`Store::enqueue_writes_intent`]). So
/// only plain jobs of queues the store already knows take the early path; the others wake
/// the loop when the call returns, having made jobs ready (never only by their PUBLISH's
/// echo, which misses a loop whose subscription is not in effect yet).
///
/// [`Store::enqueue_writes_intent`]: crate::store::Store::enqueue_writes_intent
pub async fn write(
    hub: &Hub,
    queue: &QueueName,
    jobs: &[NewJob],
    default_max_attempts: u32,
) -> Partial<EnqueueOutcome> {
    let store = hub.store();
    let known = store.knows_queue(queue);
    let reloads = store.script_reloads();
    let may_ready = jobs.iter().any(|j| j.delay_ms == 0);
    let early = known && may_ready && !Store::enqueue_writes_intent(jobs);
    // Read before the write: only then does a subscription in effect see its PUBLISH.
    let echo_comes = hub.echo_will_come(queue);
    let mut call = std::pin::pin!(store.enqueue_each(queue, jobs, default_max_attempts));
    let (result, credit, woken) = match futures::poll!(&mut call) {
        Poll::Ready(r) => (r, EchoCredit::none(), false),
        Poll::Pending if early => {
            let credit = hub.early_wake(queue, echo_comes);
            (call.await, credit, true)
        }
        Poll::Pending => (call.await, EchoCredit::none(), false),
    };
    let made_ready = result.0.iter().any(|o| {
        o.as_ref()
            .is_ok_and(|o| o.created && o.job.state == JobState::Waiting)
    });
    if !woken {
        // Not woken early: the jobs are ready now. The echo, if it comes, finds no credit
        // and wakes the loop once more (one lease call).
        if made_ready {
            hub.wake(queue);
        }
        return result;
    }
    // Any script reload meanwhile (this call's or another's) may have put the enqueue
    // behind the lease it woke: wake again rather than wait for the safety poll.
    let in_order = store.script_reloads() == reloads;
    hub.after_enqueue(credit, made_ready, in_order);
    result
}

/// The enqueue lanes of this replica (one per queue while it has Enqueues in flight).
#[derive(Clone)]
pub struct EnqueueLanes(Committer<EnqueueOp>);

impl EnqueueLanes {
    /// Lanes over `hub`'s store; jobs that leave max_attempts unset get
    /// `default_max_attempts` unless their queue sets its own.
    pub fn new(hub: Hub, default_max_attempts: u32) -> EnqueueLanes {
        EnqueueLanes(Committer::new(
            EnqueueOp {
                hub,
                default_max_attempts,
            },
            MAX_COMMIT_JOBS,
            CALL_BYTES,
        ))
    }

    /// Enqueues `jobs` of `queue` in the lane's next call (see the module doc): the jobs
    /// back, and their outcomes in order or the error that stopped them.
    pub async fn enqueue(
        &self,
        queue: &QueueName,
        jobs: Vec<NewJob>,
    ) -> CommitReply<NewJob, EnqueueOutcome> {
        self.0.submit(queue, jobs).await
    }
}

#[cfg(test)]
mod tests;
