//! The credit book of one stream, kept under one lock: free credits, credits reserved by a
//! lease call in flight, the leases the stream holds (keyed by lease token, so a job of the
//! stream's that expired and came back under a new token is a second entry, and a settle with
//! either token returns exactly its own credit), and the outbox: held leases not yet taken
//! by the transport.
//!
//! A lease waits in the outbox at most until its release time (see `Session::deliver`):
//! then it is taken out, its credit freed, and handed back to waiting without an attempt
//! ([`Book::release_overdue`]); the book is then *stalled* (no more leases) until the
//! transport polls again ([`Book::unstall`]).
//!
//! A cancel of a lease still in the outbox waits beside it ([`Book::tell_cancel`]) and
//! leaves with it ([`Book::take_outbox`]): the worker must see a CancelLease only after its
//! Lease (it ignores a cancel for a lease it does not hold, and would then run the job).
//!
//! Invariant (checked by the property test in `tests.rs`): `free + reserved + held` equals
//! what the worker granted, capped at [`MAX_CREDITS`]; a grant past the cap is clamped.

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use super::CancelLease;
use crate::jobs::{LeasedJob, QueueName};

/// A lease as the book needs to see it (the job id and token); the outbox stores it whole.
pub(crate) trait Lease {
    /// The job id.
    fn job_id(&self) -> &str;
    /// The lease token.
    fn token(&self) -> &str;
}

impl Lease for Box<LeasedJob> {
    fn job_id(&self) -> &str {
        &self.job.id
    }
    fn token(&self) -> &str {
        &self.token
    }
}

/// Most credits one stream may hold at once: free credits and held leases together.
pub const MAX_CREDITS: i64 = 10_000;

/// Most leases waiting inside the server for one stream's transport to take them. The lease
/// loop leases for a stream only while its outbox has room, so a worker that stops reading
/// holds this many plus what its HTTP/2 window admits, whatever its credits.
pub(crate) const OUTBOX_LEASES: usize = 64;

/// A lease this stream holds.
#[derive(Debug, Clone)]
pub(crate) struct Held {
    /// The job id.
    pub(crate) id: String,
    /// The renewal saw the lease taken over: stop renewing it.
    pub(crate) lost: bool,
    /// The worker was sent a CancelLease for it (sent once per lease).
    pub(crate) cancel_sent: bool,
    /// The attempt's span (queue, job id, name, attempt, worker id, trace id): settle
    /// events are logged inside it.
    pub(crate) span: tracing::Span,
}

/// A held lease named by queue, job id and token.
pub(crate) type LeaseRef = (QueueName, String, String);

/// A lease in the outbox: its queue, the lease, when it is released if still here, and the
/// cancel to send right after it, if its job was cancelled meanwhile.
#[derive(Debug)]
struct Waiting<L> {
    queue: QueueName,
    lease: L,
    release_at: Instant,
    cancel: Option<CancelLease>,
}

/// What [`Book::tell_cancel`] decided.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Tell {
    /// The book does not hold the lease, or its holder was told already: nothing to send.
    No,
    /// The lease has left the outbox: send the cancel now.
    Now,
    /// The lease is still in the outbox: the cancel waits beside it and leaves right after
    /// it ([`Book::take_outbox`]).
    AfterLease,
}

/// See the module docs.
#[derive(Debug)]
pub(crate) struct Book<L = Box<LeasedJob>> {
    free: i64,
    reserved: i64,
    /// Keyed by (queue, lease token).
    held: HashMap<(QueueName, String), Held>,
    /// Held leases the transport has not taken yet, oldest first.
    outbox: VecDeque<Waiting<L>>,
    /// Leases were released from the outbox because the transport did not take them: lease
    /// no more until it polls again.
    stalled: bool,
    closed: bool,
}

impl<L: Lease> Book<L> {
    /// A book with `credits` free (capped).
    pub(crate) fn new(credits: i64) -> Book<L> {
        Book {
            free: credits.clamp(0, MAX_CREDITS),
            reserved: 0,
            held: HashMap::new(),
            outbox: VecDeque::new(),
            stalled: false,
            closed: false,
        }
    }

    /// Credits granted in all: free, reserved and held.
    pub(crate) fn granted(&self) -> i64 {
        self.free + self.reserved + self.held.len() as i64
    }

    /// Held leases (delivered or in the outbox).
    pub(crate) fn held_count(&self) -> usize {
        self.held.len()
    }

    /// Free credits, counting those reserved by a lease call in flight.
    pub(crate) fn free_credits(&self) -> i64 {
        self.free + self.reserved
    }

    /// How many leases it holds per queue.
    pub(crate) fn held_per_queue(&self) -> std::collections::BTreeMap<String, u64> {
        let mut per = std::collections::BTreeMap::new();
        for (q, _) in self.held.keys() {
            *per.entry(q.to_string()).or_insert(0) += 1;
        }
        per
    }

    /// The first `max` held leases as (queue, job id), sorted.
    pub(crate) fn held_ids(&self, max: usize) -> Vec<(String, String)> {
        let mut ids: Vec<(String, String)> = self
            .held
            .iter()
            .map(|((q, _), h)| (q.to_string(), h.id.clone()))
            .collect();
        ids.sort();
        ids.truncate(max);
        ids
    }

    /// Leases in the outbox.
    pub(crate) fn outbox_len(&self) -> usize {
        self.outbox.len()
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed
    }

    /// Adds `n` credits, clamped so that free + reserved + held stays at most
    /// [`MAX_CREDITS`]; returns how many were added.
    pub(crate) fn grant(&mut self, n: i64) -> i64 {
        let add = n.clamp(0, (MAX_CREDITS - self.granted()).max(0));
        self.free += add;
        add
    }

    /// Could a lease call use a credit of this stream now (open, not stalled, a free credit,
    /// room in the outbox)? Draining is the session's business.
    pub(crate) fn can_reserve(&self) -> bool {
        !self.closed
            && !self.stalled
            && self.free > 0
            && self.outbox.len() + (self.reserved as usize) < OUTBOX_LEASES
    }

    /// Moves one credit from free to reserved for a lease call, if [`Book::can_reserve`].
    pub(crate) fn reserve(&mut self) -> bool {
        if !self.can_reserve() {
            return false;
        }
        self.free -= 1;
        self.reserved += 1;
        true
    }

    /// A reserved credit that got no job (or whose call failed) is free again.
    pub(crate) fn unreserve(&mut self) {
        if self.reserved > 0 {
            self.reserved -= 1;
            self.free += 1;
        }
    }

    /// A reserved credit got `lj`: it is held and waits in the outbox, at most until
    /// `release_at`. On a closed book the credit is freed and the lease is handed back as
    /// `Err` (the caller releases it).
    pub(crate) fn deliver(
        &mut self,
        queue: &QueueName,
        lj: L,
        span: tracing::Span,
        release_at: Instant,
    ) -> Result<(), L> {
        self.reserved = (self.reserved - 1).max(0);
        if self.closed {
            self.free += 1;
            return Err(lj);
        }
        self.held.insert(
            (queue.clone(), lj.token().to_owned()),
            Held {
                id: lj.job_id().to_owned(),
                lost: false,
                cancel_sent: false,
                span,
            },
        );
        self.outbox.push_back(Waiting {
            queue: queue.clone(),
            lease: lj,
            release_at,
            cancel: None,
        });
        Ok(())
    }

    /// The oldest lease the transport has not taken yet, and the cancel to send right after
    /// it (its job was cancelled while it waited here).
    pub(crate) fn take_outbox(&mut self) -> Option<(L, Option<CancelLease>)> {
        self.outbox.pop_front().map(|w| (w.lease, w.cancel))
    }

    /// Takes the leases whose release time is at or before `now` out of the outbox: the
    /// transport did not take them in time, so they never reached the worker. They are
    /// forgotten (credits freed) and returned, to hand back to waiting without an attempt,
    /// and the book stalls until [`Book::unstall`].
    pub(crate) fn release_overdue(&mut self, now: Instant) -> Vec<LeaseRef> {
        if self.outbox.iter().all(|w| w.release_at > now) {
            return Vec::new();
        }
        let mut out = Vec::new();
        let mut keep = VecDeque::with_capacity(self.outbox.len());
        for w in std::mem::take(&mut self.outbox) {
            if w.release_at > now {
                keep.push_back(w);
                continue;
            }
            // A cancel waiting beside it goes with it: the worker never saw the lease, and
            // the hand-back ends a job whose cancel is pending CANCELLED.
            out.extend(self.unhold(w.queue, &w.lease));
        }
        self.outbox = keep;
        self.stalled = true;
        out
    }

    /// The transport polled: leasing may go on. True if the book was stalled.
    pub(crate) fn unstall(&mut self) -> bool {
        std::mem::take(&mut self.stalled)
    }

    /// A lease was settled with `token`: `Some` if this stream held it (its credit is free
    /// again). A settle with another token of the same job changes nothing here.
    pub(crate) fn settle(&mut self, queue: &QueueName, id: &str, token: &str) -> Option<Held> {
        let key = (queue.clone(), token.to_owned());
        if self.held.get(&key).is_none_or(|h| h.id != id) {
            return None;
        }
        let held = self.held.remove(&key)?;
        self.outbox
            .retain(|w| !(&w.queue == queue && w.lease.token() == token));
        self.free += 1;
        Some(held)
    }

    /// Marks a held lease lost (renewal found it taken over): it is no longer renewed.
    pub(crate) fn mark_lost(&mut self, queue: &QueueName, token: &str) {
        if let Some(h) = self.held.get_mut(&(queue.clone(), token.to_owned())) {
            h.lost = true;
        }
    }

    /// The holder of lease `c.token` (job `c.id`) is to be told of its cancel, once: [`Tell`]
    /// says whether to send it now, or (the lease still in the outbox) that it now waits
    /// beside the lease and leaves right after it ([`Book::take_outbox`]), or that there is
    /// nothing to send (told already, or not held here).
    pub(crate) fn tell_cancel(&mut self, c: &CancelLease) -> Tell {
        match self.held.get_mut(&(c.queue.clone(), c.token.clone())) {
            Some(h) if h.id == c.id && !h.cancel_sent => h.cancel_sent = true,
            _ => return Tell::No,
        }
        let waiting = self
            .outbox
            .iter_mut()
            .find(|w| w.queue == c.queue && w.lease.token() == c.token);
        match waiting {
            Some(w) => {
                w.cancel = Some(c.clone());
                Tell::AfterLease
            }
            None => Tell::Now,
        }
    }

    /// The held leases to renew (not lost).
    pub(crate) fn renewable(&self) -> Vec<LeaseRef> {
        self.held
            .iter()
            .filter(|(_, h)| !h.lost)
            .map(|((q, token), h)| (q.clone(), h.id.clone(), token.clone()))
            .collect()
    }

    /// Closes the book: no more leases. The leases still in the outbox never reached the
    /// worker: they are forgotten (credits freed) and returned, to hand back to waiting.
    /// Empty if it was closed already.
    pub(crate) fn close(&mut self) -> Vec<LeaseRef> {
        if self.closed {
            return Vec::new();
        }
        self.closed = true;
        let undelivered: Vec<_> = self.outbox.drain(..).collect();
        let mut out = Vec::with_capacity(undelivered.len());
        for w in undelivered {
            out.extend(self.unhold(w.queue, &w.lease));
        }
        out
    }

    /// Forgets an outbox lease that never reached the worker, freeing its credit; the lease
    /// to hand back to waiting, if the book still held it.
    fn unhold(&mut self, q: QueueName, lj: &L) -> Option<LeaseRef> {
        self.held.remove(&(q.clone(), lj.token().to_owned()))?;
        self.free += 1;
        Some((q, lj.job_id().to_owned(), lj.token().to_owned()))
    }

    /// Takes every held lease (orderly shutdown hands them all back); the outbox empties.
    pub(crate) fn take_all(&mut self) -> Vec<LeaseRef> {
        self.outbox.clear();
        let n = self.held.len() as i64;
        self.free += n;
        self.held
            .drain()
            .map(|((q, token), h)| (q, h.id, token))
            .collect()
    }
}

#[cfg(test)]
mod tests;
