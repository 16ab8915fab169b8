//! A worker's stream as the lease machinery sees it: its credit book (free credits, the
//! leases it holds, the outbox of leases the transport has not taken yet), when it was last
//! heard from, and the messages waiting for its outbound half.
//!
//! Flow control: a lease is handed to the transport only when the transport polls the
//! outbound stream ([`Session::poll_outbound`]), which hyper does only while the worker's
//! HTTP/2 window has room; the lease loop leases for a stream only while its outbox has
//! room ([`OUTBOX_LEASES`]). A worker that stops reading therefore stops being leased to,
//! and the leases still in the outbox when its stream ends go back to waiting without an
//! attempt (`Hub::close_session`). A lease the transport leaves in the outbox too long goes
//! back the same way while the stream lives (`Session::release_overdue`, swept by the hub),
//! so its job's attempt timeout, running in Redis since the lease, never charges a worker
//! that did not receive it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use super::unsent::Unsent;
use crate::jobs::{LeasedJob, QueueName, WorkerStreamInfo, MAX_LISTED_LEASES};

mod book;
mod turns;

pub use book::MAX_CREDITS;
pub(crate) use book::{Book, Held, LeaseRef, Tell, OUTBOX_LEASES};

/// What the server sends down a stream; the api layer turns it into protobuf.
#[derive(Debug)]
pub enum Outbound {
    /// A leased job.
    Lease(Box<LeasedJob>),
    /// The outcome of an Ack or Fail sent on the stream.
    Settled(Settled),
    /// A job the stream holds was cancelled: stop and settle it before the revoke time.
    Cancel(CancelLease),
    /// The server is shutting down and will hand leases back after `grace`.
    Draining(Duration),
    /// The stream is ended with this error (a protocol violation by the worker).
    Fatal(crate::Error),
    /// The outcome of a progress report sent on the stream (`result` is `Ok(None)` when it
    /// was saved).
    ProgressSaved(Settled),
}

/// The outcome of a settle (or a progress report) sent on the stream.
#[derive(Debug)]
pub struct Settled {
    /// The job's queue.
    pub queue: String,
    /// The job id.
    pub id: String,
    /// The token presented.
    pub token: String,
    /// Ok(new state name) or the error.
    pub result: Result<Option<crate::jobs::JobState>, crate::Error>,
}

/// A cancel for the holder of a lease (sent once per lease).
#[derive(Debug, Clone)]
pub struct CancelLease {
    /// The job's queue.
    pub queue: QueueName,
    /// The job id.
    pub id: String,
    /// The lease token being cancelled.
    pub token: String,
    /// The reason given with the cancel.
    pub reason: String,
    /// When the lease is revoked unless settled, ms since the epoch.
    pub revoke_ms: u64,
}

/// Most replies (settled, draining) queued unread for one stream before its requests stop
/// being read; one inbound batch may add up to 256 more.
pub(crate) const CONTROL_BACKLOG: usize = 256;

/// One worker stream.
#[derive(Debug)]
pub struct Session {
    /// Unique within this replica.
    pub id: u64,
    /// The worker's name (for logs and attempt records).
    pub worker_id: String,
    /// The queues it leases from.
    pub queues: Vec<QueueName>,
    book: Mutex<Book>,
    /// Messages other than leases for the outbound half, and the waker of its last poll.
    out: Mutex<OutQueue>,
    /// Signalled when the outbound half takes a control message or the stream closes: the
    /// reader waits on it while [`CONTROL_BACKLOG`] replies are unread.
    out_room: tokio::sync::Notify,
    last_seen_ms: AtomicU64,
    /// When the stream opened, ms since the epoch (wall clock, for ListWorkers).
    opened_wall_ms: u64,
    pub(crate) draining: AtomicBool,
    /// Batches of the worker's messages being handled (see [`Session::handling`]).
    handling: AtomicUsize,
    /// Index into `queues` of the queue whose turn it is to use credits (fairness).
    turn: AtomicUsize,
    /// Credits the queue whose turn it is may still take in this turn (0: a new turn).
    turn_left: AtomicI64,
    /// When the current turn began, µs after `created`.
    turn_began_us: AtomicU64,
    /// A take found a sliced turn over and passed it on (see [`Session::take_turn_passed`]).
    turn_passed: AtomicBool,
    /// When the session was made (the clock of `turn_began_us`).
    created: Instant,
    /// Longest a lease waits in the outbox (shortened per lease by its job's timeout).
    outbox_wait: Duration,
    /// The replica's unsent leases: a lease the transport takes is sent (`unsent.rs`).
    unsent: Arc<Unsent>,
}

#[derive(Debug, Default)]
struct OutQueue {
    control: VecDeque<Outbound>,
    waker: Option<Waker>,
}

/// What one poll of the outbound half took.
pub(crate) enum Taken {
    /// A message; `low_water` says the outbox just fell to half: the lease loops may lease
    /// for this stream again.
    Msg(Outbound, bool),
    /// The stream is closed and everything queued was taken.
    End,
}

impl Session {
    pub(crate) fn new(
        id: u64,
        worker_id: String,
        queues: Vec<QueueName>,
        credits: u32,
        now_ms: u64,
        outbox_wait: Duration,
        unsent: Arc<Unsent>,
    ) -> Session {
        Session {
            id,
            worker_id,
            queues,
            book: Mutex::new(Book::new(i64::from(credits))),
            out: Mutex::default(),
            out_room: tokio::sync::Notify::new(),
            last_seen_ms: AtomicU64::new(now_ms),
            opened_wall_ms: wall_ms(),
            draining: AtomicBool::new(false),
            handling: AtomicUsize::new(0),
            turn: AtomicUsize::new(0),
            turn_left: AtomicI64::new(0),
            turn_began_us: AtomicU64::new(0),
            turn_passed: AtomicBool::new(false),
            created: Instant::now(),
            outbox_wait,
            unsent,
        }
    }

    /// The credit book; a poisoned lock is taken over (the book stays consistent: every
    /// method changes it in one step).
    pub(crate) fn book(&self) -> MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn out(&self) -> MutexGuard<'_, OutQueue> {
        self.out.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wake_outbound(&self) {
        if let Some(w) = self.out().waker.take() {
            w.wake();
        }
    }

    /// Queues a message other than a lease for the stream; false when the stream is closed.
    pub fn send(&self, msg: Outbound) -> bool {
        if self.is_closed() {
            return false;
        }
        self.out().control.push_back(msg);
        self.wake_outbound();
        true
    }

    /// The lease loop got `lj` for a credit it reserved here: the stream holds it and the
    /// transport takes it from the outbox. `Err` gives it back when the stream has closed.
    ///
    /// If the transport has not taken it after the session's outbox wait, or half the job's
    /// per-attempt timeout if that is shorter, [`Session::release_overdue`] takes it back:
    /// its attempt deadline runs in Redis from the lease, and a lease no worker received
    /// must not time out as an attempt.
    pub(crate) fn deliver(
        &self,
        queue: &QueueName,
        lj: Box<LeasedJob>,
        span: tracing::Span,
    ) -> Result<(), Box<LeasedJob>> {
        let mut wait = self.outbox_wait;
        if lj.job.timeout_ms > 0 {
            wait = wait.min(Duration::from_millis(lj.job.timeout_ms / 2));
        }
        let release_at = std::time::Instant::now() + wait;
        self.book().deliver(queue, lj, span, release_at)?;
        self.wake_outbound();
        Ok(())
    }

    /// The next outbound message: queued control messages first, then the oldest lease of
    /// the outbox (a cancel that waited beside it is queued first among the control
    /// messages, so it leaves right after it). Registers `cx`'s waker when there is nothing.
    pub(crate) fn poll_outbound(&self, cx: &mut Context<'_>) -> Poll<Taken> {
        let mut out = self.out();
        if let Some(m) = out.control.pop_front() {
            if out.control.len() < CONTROL_BACKLOG {
                self.out_room.notify_one();
            }
            return Poll::Ready(Taken::Msg(m, false));
        }
        let mut book = self.book();
        if let Some((lj, cancel)) = book.take_outbox() {
            self.unsent.sent(&lj.token);
            if let Some(c) = cancel {
                out.control.push_front(Outbound::Cancel(c));
            }
            let low_water = book.outbox_len() == OUTBOX_LEASES / 2;
            return Poll::Ready(Taken::Msg(Outbound::Lease(lj), low_water));
        }
        if book.is_closed() {
            return Poll::Ready(Taken::End);
        }
        out.waker = Some(cx.waker().clone());
        Poll::Pending
    }

    /// Takes the leases that waited in the outbox past their release time (see
    /// [`Session::deliver`]) to hand back to waiting without an attempt; the stream gets no
    /// more leases until its transport polls again.
    pub(crate) fn release_overdue(&self, now: std::time::Instant) -> Vec<LeaseRef> {
        self.book().release_overdue(now)
    }

    /// The transport polled: a stream stalled by [`Session::release_overdue`] may be
    /// leased to again. True if it was stalled (its queues' loops should look again).
    pub(crate) fn unstall(&self) -> bool {
        self.book().unstall()
    }

    /// Closes the stream's book: no more leases; returns the undelivered leases to hand
    /// back (empty when already closed). The outbound half ends once it has taken the
    /// queued control messages.
    pub(crate) fn close(&self) -> Vec<LeaseRef> {
        let undelivered = self.book().close();
        self.wake_outbound();
        self.out_room.notify_one();
        undelivered
    }

    /// Waits while [`CONTROL_BACKLOG`] or more replies wait unread for the outbound half
    /// (returns at once when the stream is closed). The stream's reader calls it before
    /// reading more requests, so a worker that sends but never reads stops being read, and
    /// HTTP/2 flow control then stops its sends: the replies it owes cannot pile up.
    pub(crate) async fn outbound_room(&self) {
        loop {
            let room = self.out_room.notified();
            if self.is_closed() || self.out().control.len() < CONTROL_BACKLOG {
                return;
            }
            room.await;
        }
    }

    /// The stream has ended.
    pub(crate) fn is_closed(&self) -> bool {
        self.book().is_closed()
    }

    /// Records that the worker was heard from at `now_ms`.
    pub(crate) fn touch(&self, now_ms: u64) {
        self.last_seen_ms.store(now_ms, Ordering::Relaxed);
    }

    /// The stream is open, not draining, and was heard from within `heartbeat_timeout`.
    pub(crate) fn alive(&self, now_ms: u64, heartbeat_timeout: Duration) -> bool {
        !self.is_closed()
            && now_ms.saturating_sub(self.last_seen_ms.load(Ordering::Relaxed))
                <= heartbeat_timeout.as_millis() as u64
    }

    /// May the lease loop give this stream a job now (open, not draining, a free credit,
    /// room in the outbox)?
    pub(crate) fn wants_leases(&self) -> bool {
        !self.draining.load(Ordering::Relaxed) && self.book().can_reserve()
    }

    /// Reserves one credit for a lease call if [`Session::wants_leases`].
    fn reserve(&self) -> bool {
        !self.draining.load(Ordering::Relaxed) && self.book().reserve()
    }

    /// A credit reserved for a lease call got no job: it is free again.
    pub(crate) fn unreserve(&self) {
        self.book().unreserve();
    }

    /// The worker grants `n` more credits; clamped so that free credits and held leases
    /// together stay at most [`MAX_CREDITS`]. Returns how many were added.
    pub(crate) fn grant(&self, n: i64) -> i64 {
        self.book().grant(n)
    }

    /// A lease was settled with `token`; `Some` if this stream held it under that token
    /// (its credit is free again).
    pub(crate) fn settle(&self, queue: &QueueName, id: &str, token: &str) -> Option<Held> {
        let held = self.book().settle(queue, id, token);
        if held.is_some() {
            // Settled while still in the outbox (it left it): its call may be confirmed.
            self.unsent.sent(token);
        }
        held
    }

    /// Queues a [`CancelLease`] for the lease `c.token` if this stream holds it (for job
    /// `c.id`) and was not told yet. True when it was queued. Never ahead of the lease: a
    /// lease still in the outbox takes its cancel along ([`Book::tell_cancel`]), since
    /// control messages otherwise go first and a worker ignores a cancel for a lease it
    /// has not seen.
    pub(crate) fn cancel(&self, c: &CancelLease) -> bool {
        let tell = self.book().tell_cancel(c);
        match tell {
            Tell::No => false,
            Tell::AfterLease => true,
            Tell::Now => self.send(Outbound::Cancel(c.clone())),
        }
    }

    /// How many leases it holds (delivered or waiting in the outbox).
    pub fn held_count(&self) -> usize {
        self.book().held_count()
    }

    /// Marks a batch of the worker's messages as being handled until the guard drops. An
    /// ack gives its lease's credit back when it is read, before its script runs, so a
    /// drain that waited only for the book to empty could end the stream before the ack's
    /// Settled reply was queued (the worker would then repeat an ack already applied).
    pub fn handling(&self) -> Handling<'_> {
        self.handling.fetch_add(1, Ordering::SeqCst);
        Handling(self)
    }

    /// It holds no lease and no batch of its messages is being handled: every settle of a
    /// lease it held has its reply queued, and a drain may end it.
    pub fn settled_all(&self) -> bool {
        // The book first: a batch marks itself before it settles anything in the book.
        self.held_count() == 0 && self.handling.load(Ordering::SeqCst) == 0
    }

    /// The stream as ListWorkers shows it, at `now_ms` on the hub's monotonic clock (the
    /// time it was last heard is turned into wall-clock time from there).
    pub(crate) fn info(&self, now_ms: u64) -> WorkerStreamInfo {
        let (credits, held, leases) = {
            let book = self.book();
            (
                book.free_credits().max(0) as u64,
                book.held_per_queue(),
                book.held_ids(MAX_LISTED_LEASES),
            )
        };
        let silent = now_ms.saturating_sub(self.last_seen_ms.load(Ordering::Relaxed));
        WorkerStreamInfo {
            stream: self.id,
            worker_id: self.worker_id.clone(),
            queues: self.queues.iter().map(|q| q.to_string()).collect(),
            credits,
            leases,
            held,
            connected_ms: self.opened_wall_ms,
            last_heard_ms: wall_ms().saturating_sub(silent),
            draining: self.draining.load(Ordering::Relaxed) || self.is_closed(),
        }
    }
}

/// A batch of a stream's messages being handled (from [`Session::handling`]).
#[derive(Debug)]
pub struct Handling<'a>(&'a Session);

impl Drop for Handling<'_> {
    fn drop(&mut self) {
        self.0.handling.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Now, ms since the epoch.
pub(crate) fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests;
