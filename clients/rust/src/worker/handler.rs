//! What a handler sees ([`Job`]; its [`Ctx`] is in `ctx.rs`) and how its result becomes a
//! settle request.

use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;

use futures::FutureExt;
use serde::de::DeserializeOwned;

use super::Ctx;
use crate::client::pb_duration;
use crate::error::truncate;
use crate::pb::{self, FailDisposition};
use crate::JobError;

/// A leased job as a handler receives it: the decoded payload and the lease's facts.
#[derive(Clone, Debug)]
pub struct Job<T> {
    /// The payload: `T` decoded from JSON ([`crate::Worker::handle`]) or the raw bytes
    /// ([`crate::Worker::handle_bytes`]).
    pub payload: T,
    /// This attempt's number, 1-based.
    pub attempt: u32,
    /// Stable across attempts and replays of this job: pass it to downstream providers so
    /// a retried attempt does not charge a card twice.
    pub idempotency_key: String,
    /// The fencing token of this lease.
    pub lease_token: String,
    /// The job as leased (queue, id, name, metadata, max_attempts, the last failed
    /// attempt in `errors`); its `payload` is empty (moved into [`Job::payload`]).
    pub info: pb::Job,
}

impl<T> Job<T> {
    /// The job's id.
    pub fn id(&self) -> &str {
        &self.info.job_id
    }

    /// The job's queue.
    pub fn queue(&self) -> &str {
        &self.info.queue
    }

    /// The job's name.
    pub fn name(&self) -> &str {
        &self.info.name
    }

    /// The job's metadata.
    pub fn metadata(&self) -> &HashMap<String, String> {
        &self.info.metadata
    }

    /// The job's group (empty: the queue's default group).
    pub fn group_key(&self) -> &str {
        &self.info.group_key
    }

    /// The checkpoint the previous attempt saved ([`Ctx::save_checkpoint`]); `None` when
    /// none: resume from it.
    pub fn checkpoint(&self) -> Option<&[u8]> {
        Some(self.info.checkpoint.as_slice()).filter(|c| !c.is_empty())
    }
}

/// The future a handler returns, boxed.
pub(crate) type HandlerFuture = Pin<Box<dyn Future<Output = Result<(), JobError>> + Send>>;

/// A handler with its payload decoding erased.
pub(crate) type Handler = Arc<dyn Fn(pb::Lease, Ctx) -> HandlerFuture + Send + Sync>;

/// Wraps a typed JSON handler: a payload that does not decode as `T` fails NO_RETRY (it
/// will not decode on the next attempt either).
pub(crate) fn json_handler<T, F, Fut>(f: F) -> Handler
where
    T: DeserializeOwned + Send + 'static,
    F: Fn(Job<T>, Ctx) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), JobError>> + Send + 'static,
{
    Arc::new(move |lease, ctx| {
        let (bytes, job) = split(lease);
        match serde_json::from_slice::<T>(&bytes) {
            Ok(payload) => Box::pin(f(with_payload(job, payload), ctx)),
            Err(e) => {
                let msg = format!(
                    "payload does not decode as {}: {e}",
                    std::any::type_name::<T>()
                );
                Box::pin(async move { Err(JobError::NonRetryable(msg)) })
            }
        }
    })
}

/// Wraps a raw-bytes handler.
pub(crate) fn bytes_handler<F, Fut>(f: F) -> Handler
where
    F: Fn(Job<Vec<u8>>, Ctx) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), JobError>> + Send + 'static,
{
    Arc::new(move |lease, ctx| {
        let (bytes, job) = split(lease);
        Box::pin(f(with_payload(job, bytes), ctx))
    })
}

fn split(mut lease: pb::Lease) -> (Vec<u8>, Job<()>) {
    let mut info = lease.job.take().unwrap_or_default();
    let bytes = std::mem::take(&mut info.payload);
    (
        bytes,
        Job {
            payload: (),
            attempt: lease.attempt,
            idempotency_key: lease.idempotency_key,
            lease_token: lease.lease_token,
            info,
        },
    )
}

fn with_payload<T>(j: Job<()>, payload: T) -> Job<T> {
    Job {
        payload,
        attempt: j.attempt,
        idempotency_key: j.idempotency_key,
        lease_token: j.lease_token,
        info: j.info,
    }
}

/// Runs a handler to its end; a panic becomes a retryable failure of type `panic`.
pub(crate) async fn run(handler: Handler, lease: pb::Lease, ctx: Ctx) -> Result<(), JobError> {
    match AssertUnwindSafe(handler(lease, ctx)).catch_unwind().await {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "handler panicked".into());
            Err(JobError::failed("panic", msg))
        }
    }
}

/// The most bytes of an error type the server accepts.
const MAX_ERROR_TYPE: usize = 128;

/// The Fail request for a handler's error, without the lease ids (filled by the caller).
pub(crate) fn fail_request(e: JobError) -> pb::FailRequest {
    let mut req = pb::FailRequest {
        disposition: FailDisposition::Retry as i32,
        ..Default::default()
    };
    let (error_type, message, details) = match e {
        JobError::NonRetryable(m) => {
            req.disposition = FailDisposition::NoRetry as i32;
            ("NonRetryable".to_owned(), m, String::new())
        }
        JobError::RetryAfter { delay, message } => {
            req.retry_after = Some(pb_duration(delay));
            ("RetryAfter".to_owned(), message, String::new())
        }
        JobError::RateLimited {
            delay,
            pause_queue,
            pause_group,
        } => {
            req.disposition = FailDisposition::RateLimited as i32;
            req.retry_after = Some(pb_duration(delay));
            (req.pause_queue, req.pause_group) = (pause_queue, pause_group);
            (
                "RateLimited".to_owned(),
                format!("rate limited for {delay:?}"),
                String::new(),
            )
        }
        JobError::Cancelled(reason) => {
            req.disposition = FailDisposition::NoRetry as i32;
            ("cancelled".to_owned(), reason, String::new())
        }
        JobError::Failed {
            error_type,
            message,
            details,
        } => (error_type, message, details),
    };
    req.error = Some(pb::JobError {
        message: truncate(message, crate::error::MAX_DETAILS),
        error_type: truncate_plain(error_type, MAX_ERROR_TYPE),
        details: truncate(details, crate::error::MAX_DETAILS),
    });
    req
}

fn truncate_plain(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}
