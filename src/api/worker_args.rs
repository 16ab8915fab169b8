//! The WorkerService's messages checked and converted: an `open`'s queues, credits and worker
//! id, an Ack's or Fail's fields, a settle's outcome as an error, and what the hub sends a
//! stream as a `SubscribeResponse` (worker_service.rs serves the calls).

use super::convert::{self, ApiLimits};
use super::limits::*;
use super::pb;
use super::progress::{progress_saved_pb, too_large};
use crate::jobs::{Disposition, QueueName};
use crate::lease::Outbound;
use crate::store::{AckItem, FailItem, Settle};
use crate::Error;
use tonic::Status;

pub(super) fn open_args(o: pb::OpenStream) -> Result<(Vec<QueueName>, u32, String), Error> {
    if o.queues.is_empty() || o.queues.len() > MAX_STREAM_QUEUES {
        return Err(Error::invalid(
            "open.queues",
            format!(
                "has {} queues, must have 1 to {MAX_STREAM_QUEUES}",
                o.queues.len()
            ),
        ));
    }
    let mut queues = Vec::new();
    for (i, q) in o.queues.iter().enumerate() {
        let q = convert::queue(&format!("open.queues[{i}]"), q)?;
        if !queues.contains(&q) {
            queues.push(q);
        }
    }
    if !CREDITS_RANGE.contains(&o.credits) {
        return Err(Error::invalid(
            "open.credits",
            format!("is {}, must be in [1, 10000]", o.credits),
        ));
    }
    if o.worker_id.len() > MAX_WORKER_ID_BYTES {
        return Err(Error::invalid(
            "open.worker_id",
            format!(
                "is {} bytes, the limit is {MAX_WORKER_ID_BYTES}",
                o.worker_id.len()
            ),
        ));
    }
    super::limits::printable("open.worker_id", &o.worker_id)?;
    let worker = if o.worker_id.is_empty() {
        format!("worker-{}", uuid::Uuid::new_v4().simple())
    } else {
        o.worker_id
    };
    Ok((queues, o.credits, worker))
}

pub(super) fn outbound_pb(o: Outbound) -> Result<pb::SubscribeResponse, Status> {
    use pb::subscribe_response::Message as Out;
    let message = match o {
        Outbound::Lease(l) => Out::Lease(pb::Lease {
            attempt: l.attempt,
            lease_token: l.token,
            lease_deadline: convert::timestamp(l.deadline_ms),
            idempotency_key: l.job.idempotency_key.clone(),
            job: Some(convert::job_pb(l.job)),
        }),
        Outbound::Settled(s) => {
            let (code, message, state) = match s.result {
                Ok(state) => (0, String::new(), state.map(convert::state_pb)),
                Err(e) => {
                    let st = Status::from(e);
                    (st.code() as i32, st.message().to_owned(), None)
                }
            };
            Out::Settled(pb::Settled {
                queue: s.queue,
                job_id: s.id,
                lease_token: s.token,
                code,
                message,
                state: state.unwrap_or(pb::JobState::Unspecified) as i32,
            })
        }
        Outbound::Cancel(c) => Out::Cancel(pb::CancelLease {
            queue: c.queue.to_string(),
            job_id: c.id,
            lease_token: c.token,
            reason: c.reason,
            revoke_time: convert::timestamp(c.revoke_ms),
        }),
        Outbound::Draining(grace) => Out::Draining(pb::Draining {
            grace: Some(convert::duration(grace.as_millis() as u64)),
        }),
        Outbound::Fatal(e) => return Err(Status::from(e)),
        Outbound::ProgressSaved(s) => Out::ProgressSaved(progress_saved_pb(s)),
    };
    Ok(pb::SubscribeResponse {
        message: Some(message),
    })
}

pub(super) fn settle_error<T>(queue: &QueueName, id: &str, s: Settle<T>) -> Result<T, Error> {
    match s {
        Settle::Done(v) => Ok(v),
        Settle::NotFound => Err(Error::JobNotFound {
            queue: queue.to_string(),
            id: id.to_owned(),
        }),
        Settle::LeaseLost(state) => Err(Error::LeaseLost {
            id: id.to_owned(),
            state,
        }),
    }
}

/// Validates an Ack: ids as always, the result within the server's limit
/// (RESOURCE_EXHAUSTED naming `result`: the job stays leased).
pub(super) fn ack_args(
    r: &pb::AckRequest,
    limits: &ApiLimits,
) -> Result<(QueueName, AckItem), Error> {
    let queue = convert::queue("queue", &r.queue)?;
    let id = convert::job_id("job_id", &r.job_id)?;
    let token = convert::token("lease_token", &r.lease_token)?;
    too_large("result", r.result.len(), limits.max_result_bytes)?;
    let result = (!r.result.is_empty()).then(|| r.result.clone());
    Ok((queue, AckItem { id, token, result }))
}

pub(super) fn fail_args(r: &pb::FailRequest) -> Result<(QueueName, FailItem), Error> {
    let queue = convert::queue("queue", &r.queue)?;
    let (message, error_type, details) = convert::job_error("error", r.error.as_ref())?;
    let disposition = convert::disposition("disposition", r.disposition)?;
    if r.pause_queue && disposition != Disposition::RateLimited {
        return Err(Error::invalid(
            "pause_queue",
            "applies only with disposition FAIL_DISPOSITION_RATE_LIMITED",
        ));
    }
    if r.pause_group && disposition != Disposition::RateLimited {
        return Err(Error::invalid(
            "pause_group",
            "applies only with disposition FAIL_DISPOSITION_RATE_LIMITED",
        ));
    }
    if r.retry_after.is_some() && disposition == Disposition::Release {
        return Err(Error::invalid(
            "retry_after",
            "does not apply with disposition FAIL_DISPOSITION_RELEASE (the job is back at once)",
        ));
    }
    Ok((
        queue,
        FailItem {
            id: convert::job_id("job_id", &r.job_id)?,
            token: convert::token("lease_token", &r.lease_token)?,
            disposition,
            pause_queue: r.pause_queue,
            pause_group: r.pause_group,
            message,
            error_type,
            details,
            retry_after_ms: convert::duration_ms(
                "retry_after",
                r.retry_after.as_ref(),
                MAX_BACKOFF_MS,
            )?,
        },
    ))
}
