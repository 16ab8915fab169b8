//! Errors: [`Error`] for client calls, [`JobError`] for what a handler returns.

use std::fmt;
use std::time::Duration;

/// An error of a client call (connect, enqueue, get_job, ...).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An option or argument is invalid (checked before anything is sent).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The channel could not be built or connected.
    #[error("cannot connect to {target}: {source}")]
    Connect {
        /// The target as given.
        target: String,
        /// tonic's transport error.
        source: tonic::transport::Error,
    },
    /// The server answered with a non-OK status (after the retries of UNAVAILABLE for
    /// idempotent calls).
    #[error("{0}")]
    Status(#[from] tonic::Status),
    /// A payload could not be encoded as JSON.
    #[error("JSON payload: {0}")]
    Json(#[from] serde_json::Error),
    /// Local I/O (reading TLS files, starting a test server).
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// A progress report or checkpoint was refused because the lease is gone (the server's
    /// FAILED_PRECONDITION or NOT_FOUND: expired and leased again, revoked after a cancel,
    /// or the job deleted); the handler should stop, its result will not be applied.
    #[error("lease lost: {0}")]
    LeaseLost(String),
}

impl Error {
    /// The gRPC code when the server answered with one.
    pub fn code(&self) -> Option<tonic::Code> {
        match self {
            Error::Status(s) => Some(s.code()),
            _ => None,
        }
    }

    /// The id of the job an Enqueue wrote on the Redis master though too few replicas
    /// acknowledged it (UNAVAILABLE with ErrorInfo reason NOT_REPLICATED and metadata
    /// `job_id`), or `None` for any other error. Retrying with this `job_id` finds that job
    /// instead of creating another.
    pub fn not_replicated_job_id(&self) -> Option<String> {
        match self {
            Error::Status(s) if s.code() == tonic::Code::Unavailable => {
                let info = error_info(s)?;
                (info.reason == "NOT_REPLICATED")
                    .then(|| info.metadata.get("job_id").cloned())
                    .flatten()
                    .filter(|id| !id.is_empty())
            }
            _ => None,
        }
    }
}

/// google.rpc.Status, as far as it is read here: its details (field 3).
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(message, repeated, tag = "3")]
    details: Vec<prost_types::Any>,
}

/// google.rpc.ErrorInfo, which the server attaches to every error.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ErrorInfo {
    /// The machine-readable reason, e.g. `NOT_REPLICATED`.
    #[prost(string, tag = "1")]
    pub(crate) reason: String,
    /// `jobwire.dev`.
    #[prost(string, tag = "2")]
    pub(crate) domain: String,
    /// Details of the reason, e.g. `job_id`.
    #[prost(map = "string, string", tag = "3")]
    pub(crate) metadata: std::collections::HashMap<String, String>,
}

/// The ErrorInfo of a status (from its `grpc-status-details-bin`), if it carries one.
pub(crate) fn error_info(s: &tonic::Status) -> Option<ErrorInfo> {
    use prost::Message;
    let status = RpcStatus::decode(s.details()).ok()?;
    status
        .details
        .iter()
        .find(|a| a.type_url == "type.googleapis.com/google.rpc.ErrorInfo")
        .and_then(|a| ErrorInfo::decode(a.value.as_slice()).ok())
}

/// The most a failure's `details` (the error chain and stack trace) carries: 8 KiB.
pub const MAX_DETAILS: usize = 8 * 1024;

/// How a handler's attempt failed; it decides the `Fail` disposition sent to the server.
///
/// Return one of the typed variants, or use `?` on any `std::error::Error`: that becomes
/// [`JobError::Failed`] (disposition RETRY, the job's backoff applies) with the error's type
/// name as `error_type`, its message, and its source chain plus a stack trace (cut to
/// [`MAX_DETAILS`]) as details. Like `anyhow::Error`, `JobError` deliberately does not
/// implement `std::error::Error`, so that this blanket conversion can exist.
#[derive(Debug, Clone, PartialEq)]
pub enum JobError {
    /// Do not retry: the job goes straight to the dead-letter queue (NO_RETRY).
    NonRetryable(String),
    /// Retry, but not before `delay` (RETRY with `retry_after`, overriding the backoff).
    RetryAfter {
        /// How long until the next attempt may be leased (0 to 7 days).
        delay: Duration,
        /// Why.
        message: String,
    },
    /// A downstream's rate limit was hit: the job comes back after `delay` without using an
    /// attempt (RATE_LIMITED). With `pause_queue`, the whole queue leases nothing for
    /// `delay`, on every replica (BullMQ's queue-wide rate limit after a 429). With
    /// `pause_group`, only the job's group (its `group_key`: the tenant whose limit was hit)
    /// leases nothing for `delay`; the rest of the queue goes on.
    RateLimited {
        /// When to come back (0 to 7 days).
        delay: Duration,
        /// Pause the whole queue for `delay`.
        pause_queue: bool,
        /// Pause the job's group for `delay`.
        pause_group: bool,
    },
    /// The handler stopped because its job was cancelled ([`crate::Ctx::cancel_cause`]):
    /// NO_RETRY with error type `cancelled`. Any Fail of a job whose cancel is pending ends
    /// it CANCELLED; this one also says so in the job's history.
    Cancelled(String),
    /// Any other failure: RETRY with the job's backoff.
    Failed {
        /// Machine-readable type (up to 128 bytes), e.g. the Rust error type's name.
        error_type: String,
        /// Human-readable message.
        message: String,
        /// Free-form details: error chain and stack trace, at most [`MAX_DETAILS`].
        details: String,
    },
}

impl JobError {
    /// [`JobError::NonRetryable`] with `message`.
    pub fn non_retryable(message: impl Into<String>) -> JobError {
        JobError::NonRetryable(message.into())
    }

    /// [`JobError::RetryAfter`]: retry no sooner than `delay`.
    pub fn retry_after(delay: Duration) -> JobError {
        JobError::RetryAfter {
            delay,
            message: format!("retry after {delay:?}"),
        }
    }

    /// [`JobError::RateLimited`] for this job only (`pause_queue` false).
    pub fn rate_limited(delay: Duration) -> JobError {
        JobError::RateLimited {
            delay,
            pause_queue: false,
            pause_group: false,
        }
    }

    /// [`JobError::RateLimited`] that also pauses the job's group for `delay`, on every
    /// replica: the downstream's limit is the tenant's.
    pub fn rate_limited_group(delay: Duration) -> JobError {
        JobError::RateLimited {
            delay,
            pause_queue: false,
            pause_group: true,
        }
    }

    /// [`JobError::Cancelled`] with `reason` (e.g. the cancel's, from
    /// [`crate::Ctx::cancel_cause`]).
    pub fn cancelled(reason: impl Into<String>) -> JobError {
        JobError::Cancelled(reason.into())
    }

    /// A plain retryable failure with a type and message, without a stack trace.
    pub fn failed(error_type: impl Into<String>, message: impl Into<String>) -> JobError {
        JobError::Failed {
            error_type: error_type.into(),
            message: message.into(),
            details: String::new(),
        }
    }
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JobError::NonRetryable(m) => write!(f, "non-retryable: {m}"),
            JobError::RetryAfter { delay, message } => write!(f, "{message} ({delay:?})"),
            JobError::RateLimited {
                delay,
                pause_queue,
                pause_group,
            } => write!(
                f,
                "rate limited for {delay:?} (pause queue: {pause_queue}, pause group: {pause_group})"
            ),
            JobError::Cancelled(reason) => write!(f, "cancelled: {reason}"),
            JobError::Failed {
                error_type,
                message,
                ..
            } => write!(f, "{error_type}: {message}"),
        }
    }
}

impl<E: std::error::Error + Send + Sync + 'static> From<E> for JobError {
    fn from(e: E) -> JobError {
        let mut details = String::new();
        let mut source = e.source();
        while let Some(s) = source {
            details.push_str(&format!("caused by: {s}\n"));
            source = s.source();
        }
        details.push_str(&std::backtrace::Backtrace::force_capture().to_string());
        JobError::Failed {
            error_type: std::any::type_name::<E>().to_owned(),
            message: e.to_string(),
            details: truncate(details, MAX_DETAILS),
        }
    }
}

/// Cuts `s` to at most `max` bytes on a char boundary, marking the cut.
pub(crate) fn truncate(mut s: String, max: usize) -> String {
    if s.len() <= max {
        return s;
    }
    let marker = "\n…[truncated]";
    let mut cut = max.saturating_sub(marker.len());
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    s.truncate(cut);
    s.push_str(marker);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_error_becomes_a_retryable_failure_with_its_type_and_a_bounded_trace() {
        let parse = "x".parse::<u32>().map_err(JobError::from);
        let Err(JobError::Failed {
            error_type,
            message,
            details,
        }) = parse
        else {
            panic!("expected Failed");
        };
        assert_eq!(error_type, "core::num::error::ParseIntError");
        assert_eq!(message, "invalid digit found in string");
        assert!(details.len() <= MAX_DETAILS);
    }

    #[test]
    fn truncate_keeps_char_boundaries_and_the_limit() {
        let s = "é".repeat(10_000);
        let t = truncate(s, MAX_DETAILS);
        assert!(t.len() <= MAX_DETAILS);
        assert!(t.ends_with("[truncated]"));
    }
}
