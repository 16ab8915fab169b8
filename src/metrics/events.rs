//! Recording helpers: one call per domain event, so call sites stay one line and label
//! sets stay consistent.

use metrics::{counter, histogram};

use super::labels;
use super::*;
use crate::jobs::{DeadReason, JobState};

fn secs(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

/// An Enqueue outcome: created, or deduplicated by its job_id.
pub fn enqueued(queue: &str, created: bool) {
    let name = if created {
        JOBS_ENQUEUED
    } else {
        JOBS_DEDUPLICATED
    };
    counter!(name, "queue" => labels::queue(queue)).increment(1);
}

/// The counters labelled by queue alone, registered at 0 by [`queue_known`].
const QUEUE_COUNTERS: [&str; 8] = [
    JOBS_ENQUEUED,
    JOBS_DEDUPLICATED,
    JOBS_LEASED,
    JOBS_CANCELLED,
    JOBS_EXPIRED,
    LEASE_EXPIRATIONS,
    RATE_LIMIT_THROTTLED,
    DEAD_LETTERS_REPLAYED,
];
/// Every `disposition` label value of [`JOB_FAILURES`].
const DISPOSITIONS: [&str; 6] = [
    "retry",
    "no_retry",
    "rate_limited",
    "lease_expired",
    "timed_out",
    "cancelled",
];
/// Every `reason` label value of [`JOBS_DEAD_LETTERED`].
const DEAD_REASONS: [DeadReason; 4] = [
    DeadReason::NoRetry,
    DeadReason::AttemptsExhausted,
    DeadReason::LeaseExpired,
    DeadReason::TimedOut,
];

/// This replica knows `queue` (the scrape found it in Redis): its counters labelled by queue
/// alone exist from now on, at 0 until their first event, so that Prometheus' `rate()` and
/// `increase()` count that event (a series that appears at 1 hides it).
pub fn queue_known(queue: &str) {
    for name in QUEUE_COUNTERS {
        counter!(name, "queue" => labels::queue(queue)).increment(0);
    }
    for state in ["completed", "dead"] {
        counter!(JOBS_TRIMMED, "queue" => labels::queue(queue), "state" => state).increment(0);
    }
}

/// The first time this replica sees `job_name` on `queue` (as a label, see
/// [`labels::job_name_first`]): the counters of every label set with that name start at 0.
fn job_name_known(queue: &str, job_name: &str) {
    let (q, n) = (labels::queue(queue), job_name.to_owned());
    counter!(JOBS_COMPLETED, "queue" => q.clone(), "job_name" => n.clone()).increment(0);
    counter!(JOB_RETRIES, "queue" => q.clone(), "job_name" => n.clone()).increment(0);
    for d in DISPOSITIONS {
        counter!(JOB_FAILURES, "queue" => q.clone(), "job_name" => n.clone(), "disposition" => d)
            .increment(0);
    }
    for r in DEAD_REASONS {
        counter!(JOBS_DEAD_LETTERED, "queue" => q.clone(), "job_name" => n.clone(), "reason" => r.as_str())
            .increment(0);
    }
}

/// A lease of a `job_name` job handed out `wait_ms` after the job became ready. The first
/// lease of a name starts that name's counters at 0 (before its ack or failure).
pub fn leased(queue: &str, job_name: &str, wait_ms: u64) {
    if let (name, true) = labels::job_name_first(queue, job_name) {
        job_name_known(queue, &name);
    }
    counter!(JOBS_LEASED, "queue" => labels::queue(queue)).increment(1);
    histogram!(JOB_WAIT_SECONDS, "queue" => labels::queue(queue)).record(secs(wait_ms));
}

/// An ack applied `run_ms` after the lease.
pub fn completed(queue: &str, job_name: &str, run_ms: u64) {
    let name = labels::job_name(queue, job_name);
    counter!(JOBS_COMPLETED, "queue" => labels::queue(queue), "job_name" => name).increment(1);
    super::history::record(queue, 1, 0);
    histogram!(JOB_RUN_SECONDS, "queue" => labels::queue(queue)).record(secs(run_ms));
}

/// A failed attempt and where it sent the job. `disposition` is the label value: retry,
/// no_retry, rate_limited, lease_expired, timed_out, or cancelled (a Fail of a job that was
/// cancelled: it ends CANCELLED, not in the failure history). `run_ms` is set for worker
/// failures.
pub fn failed(
    queue: &str,
    job_name: &str,
    disposition: &'static str,
    state: JobState,
    dead_reason: Option<DeadReason>,
    run_ms: Option<u64>,
) {
    let name = labels::job_name(queue, job_name);
    counter!(JOB_FAILURES, "queue" => labels::queue(queue), "job_name" => name.clone(), "disposition" => disposition).increment(1);
    if disposition != "rate_limited" && disposition != "cancelled" {
        super::history::record(queue, 0, 1);
    }
    if let Some(ms) = run_ms {
        histogram!(JOB_RUN_SECONDS, "queue" => labels::queue(queue)).record(secs(ms));
    }
    match (state, dead_reason) {
        (JobState::Dead, Some(reason)) => {
            counter!(JOBS_DEAD_LETTERED, "queue" => labels::queue(queue), "job_name" => name, "reason" => reason.as_str()).increment(1);
        }
        (JobState::Waiting | JobState::Delayed, _) if disposition != "rate_limited" => {
            counter!(JOB_RETRIES, "queue" => labels::queue(queue), "job_name" => name).increment(1);
        }
        _ => {}
    }
}

/// `n` dead-letter entries of `queue` replayed back to waiting.
pub fn replayed(queue: &str, n: usize) {
    counter!(DEAD_LETTERS_REPLAYED, "queue" => labels::queue(queue)).increment(n as u64);
}

/// `n` jobs of `state` (completed or dead) removed by the queue's retention limits.
pub fn trimmed(queue: &str, state: &'static str, n: u64) {
    if n > 0 {
        counter!(JOBS_TRIMMED, "queue" => labels::queue(queue), "state" => state).increment(n);
    }
}

/// `n` jobs of `queue` cancelled (ended, or their holders told).
pub fn cancelled(queue: &str, n: u64) {
    if n > 0 {
        counter!(JOBS_CANCELLED, "queue" => labels::queue(queue)).increment(n);
    }
}

/// `n` jobs of `queue` expired before a lease took them.
pub fn expired(queue: &str, n: u64) {
    if n > 0 {
        counter!(JOBS_EXPIRED, "queue" => labels::queue(queue)).increment(n);
    }
}

/// The reaper failed an expired lease.
pub fn lease_expired(queue: &str) {
    counter!(LEASE_EXPIRATIONS, "queue" => labels::queue(queue)).increment(1);
}

/// A lease attempt held back by the queue's rate or concurrency limit.
pub fn throttled(queue: &str) {
    counter!(RATE_LIMIT_THROTTLED, "queue" => labels::queue(queue)).increment(1);
}

/// One Lua script call: its latency, and its error kind if it failed.
pub fn redis_call(script: &'static str, seconds: f64, error: Option<&'static str>) {
    histogram!(REDIS_SCRIPT_SECONDS, "script" => script).record(seconds);
    if let Some(kind) = error {
        counter!(REDIS_ERRORS, "kind" => kind).increment(1);
    }
}
