//! A stream's turns among its queues: which queue may use a free credit next (fairness),
//! and the time slice of a one-credit stream's turn.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Session;
use crate::jobs::QueueName;

/// How long a turn of a stream of one credit may last (`Session::take_credit_for`): about
/// ten one-job round trips of a worker of concurrency 1 on a quiet box
/// (`docs/benchmark-results.md`; the turns' A/B: `docs/benchmark-history.md`), and the most
/// a busy queue delays the others' next job beyond the job in hand.
pub const TURN_SLICE: Duration = Duration::from_millis(2);

impl Session {
    /// Reserves one credit for `queue` if it is that queue's turn: a stream on several
    /// queues serves them round-robin, skipping queues that have nothing leasable right now
    /// (`backlog` says which do), so a busy queue cannot starve another. A turn is worth a
    /// fair share of the stream's credits: all it was granted divided among its queues with
    /// backlog (at least one), as in weighted round-robin with that quantum. So a stream on
    /// several busy queues still leases in batches: with one credit a turn, every lease call
    /// took one job per stream, and a 2 x 256-credit worker on 3 queues ran at a quarter of
    /// the jobs/s it reaches on one queue (`jobwire bench --queues 3`).
    ///
    /// The turn of a stream of one credit (a worker of concurrency 1) also lasts up to
    /// [`TURN_SLICE`] after it began, as a time slice does in a round-robin scheduler: while
    /// its jobs are acked within the slice, the ack that frees the credit leases the queue's
    /// next job in its own call (`settle_lease.rs`); a job that takes longer ends the turn at
    /// its ack. (Streams of 2-5 credits on three queues also have turns of one credit;
    /// slicing them gave every free credit to one queue, or, passing the turn on while
    /// credits were free, measured 20 % slower at 2 credits: they keep a turn per credit.)
    /// The take that finds a slice over passes the turn on and says so
    /// ([`Session::take_turn_passed`]: its caller wakes the other queues' loops), and a loop
    /// refused by a slice sleeps only until the slice ends ([`Session::slice_left`]).
    pub(crate) fn take_credit_for(
        &self,
        queue: &QueueName,
        backlog: impl Fn(&QueueName) -> bool,
    ) -> bool {
        self.take_credit_at(queue, backlog, self.created.elapsed())
    }

    /// [`Session::take_credit_for`] at `now`, the time since the session was made.
    pub(super) fn take_credit_at(
        &self,
        queue: &QueueName,
        backlog: impl Fn(&QueueName) -> bool,
        now: Duration,
    ) -> bool {
        let n = self.queues.len();
        if n <= 1 {
            return self.reserve();
        }
        let now_us = u64::try_from(now.as_micros()).unwrap_or(u64::MAX);
        let mut t = self.turn.load(Ordering::Acquire);
        if self.sliced()
            && self.turn_left.load(Ordering::Acquire) > 0
            && now_us.saturating_sub(self.turn_began_us.load(Ordering::Acquire))
                >= TURN_SLICE.as_micros() as u64
        {
            // The one-credit turn's slice is over: the turn passes on.
            t = (t + 1) % n;
            self.turn.store(t, Ordering::Release);
            self.turn_left.store(0, Ordering::Release);
            self.turn_passed.store(true, Ordering::Release);
        }
        for k in 0..n {
            let candidate = &self.queues[(t + k) % n];
            if candidate == queue {
                let (left, new_turn) = match self.turn_left.load(Ordering::Acquire) {
                    left if k == 0 && left > 0 => (left, false),
                    _ => (self.turn_share(queue, &backlog), true),
                };
                if !self.reserve() {
                    return false;
                }
                if new_turn {
                    self.turn_began_us.store(now_us, Ordering::Release);
                }
                if left > 1 || self.sliced() {
                    // A one-credit stream keeps its turn until the slice is over.
                    self.turn.store((t + k) % n, Ordering::Release);
                    self.turn_left.store((left - 1).max(1), Ordering::Release);
                } else {
                    self.turn.store((t + k + 1) % n, Ordering::Release);
                    self.turn_left.store(0, Ordering::Release);
                }
                return true;
            }
            if backlog(candidate) {
                return false;
            }
        }
        false
    }

    /// Whether the stream's turns are sliced: it has one credit.
    fn sliced(&self) -> bool {
        self.book().granted() == 1
    }

    /// Whether a take passed a sliced turn on since the last call (then the other queues'
    /// loops should look: the turn may now be theirs); clears it.
    pub(crate) fn take_turn_passed(&self) -> bool {
        self.turn_passed.swap(false, Ordering::AcqRel)
    }

    /// Time left in the current turn's slice, if it is a sliced turn (zero once over, until a
    /// take passes it on).
    pub(crate) fn slice_left(&self) -> Option<Duration> {
        if !self.sliced() || self.turn_left.load(Ordering::Acquire) <= 0 {
            return None;
        }
        let began = Duration::from_micros(self.turn_began_us.load(Ordering::Acquire));
        Some(TURN_SLICE.saturating_sub(self.created.elapsed().saturating_sub(began)))
    }

    /// The credits a turn of `queue` starts with: the stream's granted credits divided among
    /// its queues with backlog (`queue` counted), at least 1.
    fn turn_share(&self, queue: &QueueName, backlog: &impl Fn(&QueueName) -> bool) -> i64 {
        let busy = self
            .queues
            .iter()
            .filter(|q| *q == queue || backlog(q))
            .count()
            .max(1);
        (self.book().granted() / busy as i64).max(1)
    }
}
