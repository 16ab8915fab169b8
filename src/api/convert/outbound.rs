//! Outbound conversions: the server's job records, states and reasons as protobuf.

use super::super::pb;
use crate::jobs::{AttemptError, Backoff, BackoffKind, DeadReason, Disposition, Job, JobState};

pub(crate) fn dead_reason_pb(r: Option<DeadReason>) -> pb::DeadReason {
    match r {
        None => pb::DeadReason::Unspecified,
        Some(DeadReason::NoRetry) => pb::DeadReason::NoRetry,
        Some(DeadReason::AttemptsExhausted) => pb::DeadReason::AttemptsExhausted,
        Some(DeadReason::LeaseExpired) => pb::DeadReason::LeaseExpired,
        Some(DeadReason::TimedOut) => pb::DeadReason::TimedOut,
        Some(DeadReason::Expired) => pb::DeadReason::Expired,
    }
}

pub(crate) fn state_pb(s: JobState) -> pb::JobState {
    match s {
        JobState::Waiting => pb::JobState::Waiting,
        JobState::Delayed => pb::JobState::Delayed,
        JobState::Active => pb::JobState::Active,
        JobState::Completed => pb::JobState::Completed,
        JobState::Dead => pb::JobState::Dead,
        JobState::Cancelled => pb::JobState::Cancelled,
        JobState::Expired => pb::JobState::Expired,
    }
}

/// ms since the epoch -> Timestamp; `None` for 0 (unset).
pub(crate) fn timestamp(ms: u64) -> Option<prost_types::Timestamp> {
    (ms > 0).then(|| prost_types::Timestamp {
        seconds: (ms / 1000) as i64,
        nanos: ((ms % 1000) * 1_000_000) as i32,
    })
}

/// ms -> Duration.
pub(crate) fn duration(ms: u64) -> prost_types::Duration {
    prost_types::Duration {
        seconds: (ms / 1000) as i64,
        nanos: ((ms % 1000) * 1_000_000) as i32,
    }
}

fn attempt_error(e: &AttemptError) -> pb::AttemptError {
    let disposition = match Disposition::parse(&e.disposition) {
        Some(Disposition::Retry) => pb::FailDisposition::Retry,
        Some(Disposition::NoRetry) => pb::FailDisposition::NoRetry,
        Some(Disposition::RateLimited) => pb::FailDisposition::RateLimited,
        Some(Disposition::Release) => pb::FailDisposition::Release,
        None => pb::FailDisposition::Unspecified,
    };
    pb::AttemptError {
        attempt: e.attempt as u32,
        message: e.message.clone(),
        error_type: e.error_type.clone(),
        details: e.details.clone(),
        worker_id: e.worker_id.clone(),
        fail_time: timestamp(e.fail_ms as u64),
        disposition: disposition as i32,
        retry_delay: Some(duration(e.retry_delay_ms as u64)),
    }
}

/// A backoff as protobuf.
pub(crate) fn backoff_pb(b: &Backoff) -> pb::Backoff {
    pb::Backoff {
        kind: match b.kind {
            BackoffKind::Fixed => pb::BackoffKind::Fixed,
            BackoffKind::Exponential => pb::BackoffKind::Exponential,
        } as i32,
        delay: Some(duration(b.delay_ms)),
        jitter: b.jitter,
        max_delay: (b.max_delay_ms > 0).then(|| duration(b.max_delay_ms)),
    }
}

/// A stored job as protobuf.
pub(crate) fn job_pb(j: Job) -> pb::Job {
    pb::Job {
        queue: j.queue.to_string(),
        job_id: j.id,
        name: j.name,
        payload: j.payload,
        content_type: j.content_type,
        metadata: j.metadata.into_iter().collect(),
        state: state_pb(j.state) as i32,
        priority: j.priority,
        max_attempts: j.max_attempts,
        attempts_made: j.attempts_made,
        backoff: j.backoff.as_ref().map(backoff_pb),
        timeout: (j.timeout_ms > 0).then(|| duration(j.timeout_ms)),
        errors: j.errors.iter().map(attempt_error).collect(),
        errors_dropped: j.errors_dropped,
        dead_reason: dead_reason_pb(j.dead_reason) as i32,
        create_time: timestamp(j.create_ms),
        ready_time: timestamp(j.ready_ms),
        lease_time: timestamp(j.lease_ms),
        finish_time: timestamp(j.finish_ms),
        idempotency_key: j.idempotency_key,
        replays: j.replays,
        // i16: filled by the groups, cancel/expiry and progress work.
        group_key: j.group_key,
        expire_time: timestamp(j.expire_ms),
        progress: j.data.progress,
        progress_message: j.data.progress_message,
        checkpoint: j.data.checkpoint,
        result: j.data.result,
        cancel_time: timestamp(j.cancel_ms),
        cancel_reason: j.cancel_reason,
        lease_deadline: timestamp(j.lease_deadline_ms),
        worker_id: j.worker_id,
        progress_time: timestamp(j.data.progress_ms),
    }
}
