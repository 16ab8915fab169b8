//! Wake-ups of the local lease loops. A local Enqueue wakes its queue's loop as soon as the
//! enqueue call has been written to the store's (multiplexed, in-order) connection, not when
//! its PUBLISH comes back over pub/sub: the loop's lease call then travels right behind the
//! enqueue, Redis runs the two back to back, and the lease saves a pub/sub hop and a round
//! trip. The echo of that PUBLISH is skipped, so it does not cost a second, empty lease call.
//!
//! Bookkeeping: with each early wake-up the queue's loop gets one echo credit (every enqueue
//! call that makes a job ready PUBLISHes exactly once). A pub/sub wake-up that finds a
//! credit spends it and wakes nothing; one that finds none wakes the loop. A remote wake-up
//! that spends a local credit is still covered: after it, either a new early wake-up comes
//! or some echo finds no credit left (there is one echo more than credits), and either
//! wakes the loop, whose lease call sees every job made ready before. A call that made
//! nothing ready returns its credit, or wakes the loop if someone spent it. A lost PUBLISH
//! (pub/sub reconnect) voids every credit.
//!
//! The caller must only wake early once the enqueue is really on the wire (see
//! `enqueue_commit::write`); if it is not, the lease may run first, find nothing, and the job
//! waits for the next wake-up or the loop's safety poll. The same holds when the enqueue
//! did not run on its first write: after a Redis restart, failover or `SCRIPT FLUSH` it
//! met NOSCRIPT and ran again after loading its script, behind the lease it woke. So an
//! enqueue that made jobs ready but took that path (or any other that loses the order)
//! wakes its loop once more when it returns (`in_order = false`): the wake-up never
//! depends on the path the call took.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::hub::Hub;
use super::queue_loop::QueueLoop;
use crate::jobs::QueueName;

/// Proof that [`Hub::before_enqueue`] took an echo credit for a queue's local loop.
#[derive(Debug)]
#[must_use = "pass it to Hub::after_enqueue"]
pub struct EchoCredit(Option<QueueName>);

impl EchoCredit {
    /// No credit: the loop was not woken early.
    pub fn none() -> EchoCredit {
        EchoCredit(None)
    }
}

/// Takes one echo credit of `lp` if it has any; false when it has none.
fn take_echo_credit(lp: &QueueLoop) -> bool {
    lp.echoes
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| {
            (c > 0).then_some(c - 1)
        })
        .is_ok()
}

impl Hub {
    /// The local lease loop of `queue`, if there is one.
    pub(super) fn local_loop(&self, queue: &QueueName) -> Option<Arc<QueueLoop>> {
        self.inner
            .loops
            .lock()
            .ok()
            .and_then(|l| l.get(queue).cloned())
    }

    /// A local enqueue on `queue` has just been submitted on the store's connection (the
    /// caller polled it once): if a local loop serves the queue, wake it now. Its lease call
    /// goes out on the same connection behind the enqueue, so Redis runs it right after and
    /// it sees the new jobs; the echo of the enqueue's PUBLISH is then skipped.
    pub fn early_wake(&self, queue: &QueueName) -> EchoCredit {
        let lp = self.local_loop(queue);
        let Some(lp) = lp else {
            return EchoCredit(None);
        };
        lp.echoes.fetch_add(1, Ordering::AcqRel);
        lp.backlog.store(true, Ordering::Relaxed);
        lp.notify.notify_one();
        EchoCredit(Some(queue.clone()))
    }

    /// The enqueue of [`Hub::early_wake`] returned; `made_ready` says whether it made at
    /// least one job ready (and so PUBLISHed), `in_order` whether it ran on its first write
    /// (so before the lease call the early wake-up sent behind it). If it made nothing
    /// ready, no echo will come: the credit is handed back, or, if a remote wake-up spent
    /// it meanwhile, that wake-up is delivered now. If it made jobs ready out of order, the
    /// woken lease may have missed them: the loop is woken again (the echo still comes and
    /// spends the credit).
    pub fn after_enqueue(&self, credit: EchoCredit, made_ready: bool, in_order: bool) {
        let Some(queue) = credit.0 else { return };
        if made_ready {
            if !in_order {
                self.wake(&queue);
            }
            return;
        }
        let lp = self.local_loop(&queue);
        if let Some(lp) = lp {
            if !take_echo_credit(&lp) {
                self.wake(&queue);
            }
        }
    }

    /// A wake-up for `queue` arrived over pub/sub: wake the loop unless it is the echo of a
    /// local enqueue that already woke it.
    pub(super) fn wake_from_pubsub(&self, queue: &QueueName) {
        let lp = self.local_loop(queue);
        let Some(lp) = lp else { return };
        if !take_echo_credit(&lp) {
            lp.backlog.store(true, Ordering::Relaxed);
            lp.notify.notify_one();
        }
    }

    /// Pub/sub messages may have been lost: no echo can be counted on.
    pub(super) fn void_echo_credits(&self) {
        if let Ok(l) = self.inner.loops.lock() {
            for lp in l.values() {
                lp.echoes.store(0, Ordering::Release);
            }
        }
    }
}
