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
//! (pub/sub reconnect) voids every credit. An enqueue takes a credit only when its queue's
//! subscription had taken effect before the enqueue was written: the echoes of enqueues
//! before it never come, and their credits would swallow later wake-ups (a resume's); the
//! loop is still woken early, and an echo that does come wakes it once more.
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

    /// Will the PUBLISH of an enqueue on `queue` written to Redis from now on reach the
    /// local loop? True once the queue's wake-up subscription has taken effect. Read it
    /// before writing the enqueue and pass it to [`Hub::early_wake`].
    pub fn echo_will_come(&self, queue: &QueueName) -> bool {
        self.local_loop(queue)
            .is_some_and(|lp| lp.listened.load(Ordering::Acquire))
    }

    /// A local enqueue on `queue` has just been submitted on the store's connection (the
    /// caller polled it once): if a local loop serves the queue, wake it now. Its lease call
    /// goes out on the same connection behind the enqueue, so Redis runs it right after and
    /// it sees the new jobs; the echo of the enqueue's PUBLISH is then skipped, but only
    /// when `echo_comes` ([`Hub::echo_will_come`] before the write): an echo that never
    /// comes would leave its credit to swallow a later wake-up (a resume's).
    pub fn early_wake(&self, queue: &QueueName, echo_comes: bool) -> EchoCredit {
        let lp = self.local_loop(queue);
        let Some(lp) = lp else {
            return EchoCredit(None);
        };
        if echo_comes {
            lp.echoes.fetch_add(1, Ordering::AcqRel);
        }
        lp.backlog.store(true, Ordering::Relaxed);
        lp.notify.notify_one();
        EchoCredit(echo_comes.then(|| queue.clone()))
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

    /// `queue`'s subscription has just taken effect: from now on enqueues may take echo
    /// credits, and none taken before is counted on (an echo that does come wakes the loop
    /// once more, which costs one lease call; a credit left without its echo would
    /// swallow the next wake-up, a resume's or another replica's enqueue's, until the
    /// safety poll).
    pub(super) fn subscribed(&self, queue: &QueueName) {
        if let Some(lp) = self.local_loop(queue) {
            lp.listened.store(true, Ordering::Release);
            lp.echoes.store(0, Ordering::Release);
        }
    }

    /// The listener lost its connection: until each queue is subscribed again, no enqueue
    /// takes an echo credit.
    pub(super) fn none_listened(&self) {
        if let Ok(l) = self.inner.loops.lock() {
            for lp in l.values() {
                lp.listened.store(false, Ordering::Release);
            }
        }
    }

    /// Pub/sub messages may have been lost: no echo taken so far can be counted on.
    pub(super) fn void_echo_credits(&self) {
        if let Ok(l) = self.inner.loops.lock() {
            for lp in l.values() {
                lp.echoes.store(0, Ordering::Release);
            }
        }
    }
}
