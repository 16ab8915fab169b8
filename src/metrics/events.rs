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
    counter!(name, "queue" => queue.to_owned()).increment(1);
}

/// A lease handed out `wait_ms` after the job became ready.
pub fn leased(queue: &str, wait_ms: u64) {
    counter!(JOBS_LEASED, "queue" => queue.to_owned()).increment(1);
    histogram!(JOB_WAIT_SECONDS, "queue" => queue.to_owned()).record(secs(wait_ms));
}

/// An ack applied `run_ms` after the lease.
pub fn completed(queue: &str, job_name: &str, run_ms: u64) {
    let name = labels::job_name(queue, job_name);
    counter!(JOBS_COMPLETED, "queue" => queue.to_owned(), "job_name" => name).increment(1);
    histogram!(JOB_RUN_SECONDS, "queue" => queue.to_owned()).record(secs(run_ms));
}

/// A failed attempt and where it sent the job. `disposition` is the label value: retry,
/// no_retry, rate_limited, lease_expired or timed_out. `run_ms` is set for worker failures.
pub fn failed(
    queue: &str,
    job_name: &str,
    disposition: &'static str,
    state: JobState,
    dead_reason: Option<DeadReason>,
    run_ms: Option<u64>,
) {
    let name = labels::job_name(queue, job_name);
    counter!(JOB_FAILURES, "queue" => queue.to_owned(), "job_name" => name.clone(), "disposition" => disposition).increment(1);
    if let Some(ms) = run_ms {
        histogram!(JOB_RUN_SECONDS, "queue" => queue.to_owned()).record(secs(ms));
    }
    match (state, dead_reason) {
        (JobState::Dead, Some(reason)) => {
            counter!(JOBS_DEAD_LETTERED, "queue" => queue.to_owned(), "job_name" => name, "reason" => reason.as_str()).increment(1);
        }
        (JobState::Waiting | JobState::Delayed, _) if disposition != "rate_limited" => {
            counter!(JOB_RETRIES, "queue" => queue.to_owned(), "job_name" => name).increment(1);
        }
        _ => {}
    }
}

/// The reaper failed an expired lease.
pub fn lease_expired(queue: &str) {
    counter!(LEASE_EXPIRATIONS, "queue" => queue.to_owned()).increment(1);
}

/// A lease attempt held back by the queue's rate or concurrency limit.
pub fn throttled(queue: &str) {
    counter!(RATE_LIMIT_THROTTLED, "queue" => queue.to_owned()).increment(1);
}

/// One Lua script call: its latency, and its error kind if it failed.
pub fn redis_call(script: &'static str, seconds: f64, error: Option<&'static str>) {
    histogram!(REDIS_SCRIPT_SECONDS, "script" => script).record(seconds);
    if let Some(kind) = error {
        counter!(REDIS_ERRORS, "kind" => kind).increment(1);
    }
}
