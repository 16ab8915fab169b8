//! The shapes of the store's answers.

use crate::jobs::{DeadReason, Disposition, Job, JobState, LeasedJob};

/// The result of enqueueing one job.
#[derive(Clone, Debug)]
pub struct EnqueueOutcome {
    /// The job as stored: the new one, or the existing one when `created` is false (for an
    /// id the server chose whose job was created by an earlier write and is gone since,
    /// the job as that write created it: `enqueue.lua` never creates it again).
    pub job: Job,
    /// False when the id was taken (nothing changed).
    pub created: bool,
}

/// The outcome of a settle-type call (ack, fail, renew) for one job.
#[derive(Clone, Debug, PartialEq)]
pub enum Settle<T> {
    /// Applied.
    Done(T),
    /// No such job.
    NotFound,
    /// The token is not the job's current lease token; the job is in the given state.
    LeaseLost(String),
}

/// One failed attempt to record.
#[derive(Clone, Debug)]
pub struct FailItem {
    /// Job id.
    pub id: String,
    /// The lease token presented.
    pub token: String,
    /// RETRY, NO_RETRY or RATE_LIMITED.
    pub disposition: Disposition,
    /// Error message.
    pub message: String,
    /// Error type.
    pub error_type: String,
    /// Error details.
    pub details: String,
    /// Overrides the backoff (RETRY) or sets the return time (RATE_LIMITED), ms.
    pub retry_after_ms: Option<u64>,
    /// With RATE_LIMITED: the whole queue leases nothing until the job's return time.
    pub pause_queue: bool,
    /// With RATE_LIMITED: the job's group (when it has one) leases nothing until the job's
    /// return time, on every replica (`scripts/groups.lua`).
    pub pause_group: bool,
}

/// The limit that kept a lease call from taking every waiting job it had room for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// The queue's rate limit (sliding window).
    Rate,
    /// A worker-reported throttle (Fail RATE_LIMITED with pause_queue).
    Throttle,
    /// The queue's max_active.
    Concurrency,
    /// Every group with waiting jobs is at its max_active, its rate limit, or paused
    /// (`scripts/groups.lua`); `wait_until_ms` is the earliest end of a rate window or pause.
    Group,
}

/// One ack to apply: the job id, the lease token and, optionally, the result to keep on
/// the completed job (`ack.lua`; the caller bounds its size).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AckItem {
    /// The job id.
    pub id: String,
    /// The lease token presented.
    pub token: String,
    /// The result bytes; `None` (or empty) keeps none.
    pub result: Option<Vec<u8>>,
}

/// What [`crate::store::Store::ack`] takes per job: an [`AckItem`], or a plain
/// (job id, lease token) pair (no result).
pub trait AckInput: Sync {
    /// The job id.
    fn id(&self) -> &str;
    /// The lease token presented.
    fn token(&self) -> &str;
    /// The result to keep, if any.
    fn result(&self) -> Option<&[u8]>;
}

impl AckInput for AckItem {
    fn id(&self) -> &str {
        &self.id
    }
    fn token(&self) -> &str {
        &self.token
    }
    fn result(&self) -> Option<&[u8]> {
        self.result.as_deref().filter(|r| !r.is_empty())
    }
}

impl<T: AckInput> AckInput for &T {
    fn id(&self) -> &str {
        (**self).id()
    }
    fn token(&self) -> &str {
        (**self).token()
    }
    fn result(&self) -> Option<&[u8]> {
        (**self).result()
    }
}

impl AckInput for (String, String) {
    fn id(&self) -> &str {
        &self.0
    }
    fn token(&self) -> &str {
        &self.1
    }
    fn result(&self) -> Option<&[u8]> {
        None
    }
}

/// An applied ack.
#[derive(Clone, Debug, PartialEq)]
pub struct AckOutcome {
    /// When the completed attempt was leased, ms.
    pub lease_ms: u64,
    /// The job's name.
    pub name: String,
    /// Redis's clock at the ack, ms.
    pub now_ms: u64,
    /// This ack repeated one already applied with the same token (its reply was lost):
    /// nothing changed, and `lease_ms` and `name` are unknown (0, empty).
    pub repeated: bool,
}

/// Where a failed job went.
#[derive(Clone, Debug, PartialEq)]
pub struct FailOutcome {
    /// Waiting, Delayed or Dead; Cancelled when a cancel was pending; Expired when its retry
    /// would have started past its expire time (Dead with reason Expired where the queue
    /// dead-letters expired jobs).
    pub state: JobState,
    /// Ready time (Waiting/Delayed) or finish time (Dead, Cancelled, Expired), ms.
    pub at_ms: u64,
    /// Set when dead.
    pub dead_reason: Option<DeadReason>,
    /// When the failed attempt was leased, ms.
    pub lease_ms: u64,
    /// The job's name.
    pub name: String,
    /// The attempt that failed.
    pub attempt: u32,
    /// Redis's clock at the failure, ms.
    pub now_ms: u64,
    /// This fail repeated one already applied with the same token (its reply was lost):
    /// nothing changed; state, time and dead reason are the first one's, the rest unknown.
    pub repeated: bool,
}

/// What one lease call returned.
#[derive(Debug)]
pub struct LeaseBatch {
    /// Redis's clock at the call, ms.
    pub now_ms: u64,
    /// The jobs leased, in slot order (the i-th went to the i-th worker id).
    pub jobs: Vec<LeasedJob>,
    /// When the earliest delayed job is due, ms.
    pub next_due_ms: Option<u64>,
    /// The queue is paused: nothing was leased.
    pub paused: bool,
    /// Jobs were left waiting because of this limit.
    pub limited: Option<Limit>,
    /// When the limit admits the next start, ms (rate, throttle and group limits).
    pub wait_until_ms: Option<u64>,
    /// The call's byte budget ([`super::CALL_BYTES`]) ran out before the slots did, with jobs
    /// still waiting: fewer jobs than slots, yet the caller should lease again at once.
    /// Also set when popped jobs had expired (see `expired`).
    pub more: bool,
    /// Jobs popped past their expire time: EXPIRED (or DEAD with reason EXPIRED), not
    /// leased.
    pub expired: u64,
}

/// A job whose lease the reaper failed.
#[derive(Clone, Debug)]
pub struct ReapedJob {
    /// Job id.
    pub id: String,
    /// Job name.
    pub name: String,
    /// LEASE_EXPIRED or TIMED_OUT.
    pub error_type: String,
    /// Where it went: Waiting, Delayed or Dead.
    pub state: JobState,
    /// Set when dead.
    pub dead_reason: Option<DeadReason>,
    /// The attempt that expired.
    pub attempt: u32,
}

/// What one reap call did.
#[derive(Debug)]
pub struct ReapReport {
    /// Delayed jobs promoted to waiting.
    pub promoted: u64,
    /// The next lease deadline, ms.
    pub next_deadline_ms: Option<u64>,
    /// The next delayed due time, ms.
    pub next_due_ms: Option<u64>,
    /// When the oldest kept completed or dead job passes its age limit, ms (now when the
    /// call's trim budget ran out).
    pub next_retention_ms: Option<u64>,
    /// Completed jobs removed by retention (this call's, and the ack calls' since the last
    /// reap of the queue on any replica).
    pub trimmed_completed: u64,
    /// Dead-letter entries removed by retention (likewise).
    pub trimmed_dead: u64,
    /// Expired leases failed.
    pub reaped: Vec<ReapedJob>,
    /// The call's byte budget ([`super::CALL_BYTES`]) ran out before the expired leases
    /// did (so `reaped` may hold fewer than asked): call again.
    pub more: bool,
    /// Waiting and delayed jobs this call expired (EXPIRED, or DEAD with reason EXPIRED).
    pub expired: u64,
}

/// A renewed lease (`Store::renew`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Renewed {
    /// Its new deadline, ms.
    pub deadline_ms: u64,
    /// Its pending cancel, if one was requested: (revoke ms, reason).
    pub cancel: Option<(u64, String)>,
}

impl ReapReport {
    /// The earliest time the queue has reaper work again (lease deadline, delayed job due,
    /// retention age), ms; `None` when it has none.
    pub fn next_work_ms(&self) -> Option<u64> {
        [
            self.next_deadline_ms,
            self.next_due_ms,
            self.next_retention_ms,
        ]
        .into_iter()
        .flatten()
        .min()
    }
}

/// What [`crate::store::Store::delete_queue`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeletedQueue {
    /// Waiting jobs deleted.
    pub waiting: u64,
    /// Delayed jobs deleted.
    pub delayed: u64,
    /// Leased jobs deleted (only with `force`).
    pub active: u64,
    /// Completed jobs deleted.
    pub completed: u64,
    /// Dead-letter entries deleted.
    pub dead: u64,
}

/// The outcome of a queue deletion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeleteQueue {
    /// The queue and all of its jobs are gone.
    Deleted(DeletedQueue),
    /// The queue is not registered and has no keys.
    NotFound,
    /// Jobs are leased and `force` was not given: the leased count, and what an earlier
    /// call of this deletion had already deleted (a job leased mid-deletion stops it).
    Busy {
        /// Jobs leased.
        leased: u64,
        /// Deleted before the refusal.
        deleted: DeletedQueue,
    },
}
