//! Settling and renewing leases with the unary calls, for leases whose stream is gone.

use std::time::Duration;

use crate::backoff::FullJitter;
use crate::pb;
use crate::{Client, Error};

/// A handler's result, ready to send.
#[derive(Clone, Debug)]
pub(super) enum Outcome {
    /// The job completed.
    Ack,
    /// The attempt failed (ids and lease token filled in).
    Fail(pb::FailRequest),
}

/// How long one unary Ack/Fail/ExtendLease may take before it counts as failed (and is
/// retried): a connection that stopped answering must not hold a result forever (HTTP/2
/// keepalive replaces such a connection within about 30 s).
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// How a unary settle ended.
#[derive(Debug)]
pub(super) enum Settled {
    /// Applied.
    Applied,
    /// FAILED_PRECONDITION: the lease was lost (expired and leased again, or already
    /// settled by an ack whose reply the broken stream never delivered).
    Lost(String),
    /// Refused for another reason (INVALID_ARGUMENT, NOT_FOUND, ...): not retried.
    Refused(tonic::Status),
}

/// Codes worth retrying: the server or the network was down, or the call was cut.
pub(super) fn transient(code: tonic::Code) -> bool {
    matches!(
        code,
        tonic::Code::Unavailable
            | tonic::Code::Unknown
            | tonic::Code::DeadlineExceeded
            | tonic::Code::Cancelled
            | tonic::Code::Internal
    )
}

/// Sends `outcome` with unary Ack/Fail until it is applied or refused; while the server is
/// unreachable it keeps the result and retries with full-jitter backoff (0.2 s to 5 s), so
/// a finished result is never dropped silently.
pub(super) async fn unary(
    client: Client,
    (queue, job_id, token): (String, String, String),
    outcome: Outcome,
) -> Settled {
    let mut backoff = FullJitter::new(Duration::from_millis(200), Duration::from_secs(5));
    let mut tries = 0u32;
    loop {
        let call = async {
            match &outcome {
                Outcome::Ack => client.ack(&queue, &job_id, &token).await,
                Outcome::Fail(req) => client.fail(req.clone()).await.map(|_| ()),
            }
        };
        let r = tokio::time::timeout(CALL_TIMEOUT, call)
            .await
            .unwrap_or_else(|_| Err(tonic::Status::deadline_exceeded("no reply in time").into()));
        tries += 1;
        match r {
            Ok(()) => return Settled::Applied,
            Err(Error::Status(s)) if s.code() == tonic::Code::FailedPrecondition => {
                return Settled::Lost(s.message().to_owned())
            }
            Err(Error::Status(s)) if transient(s.code()) => {
                if tries == 1 || tries.is_multiple_of(10) {
                    tracing::warn!(queue, job_id, tries, error = %s,
                        "cannot settle the job yet; keeping its result and retrying");
                }
            }
            Err(Error::Status(s)) => return Settled::Refused(s),
            Err(e) => tracing::warn!(queue, job_id, error = %e, "settle failed; retrying"),
        }
        tokio::time::sleep(backoff.next_delay()).await;
    }
}

/// How an ExtendLease ended.
#[derive(Debug)]
pub(super) enum Extended {
    /// The deadline moved.
    Renewed,
    /// FAILED_PRECONDITION or NOT_FOUND: the lease is gone.
    Lost(String),
    /// Could not reach the server (or another error): try again soon.
    Retry(String),
}

/// One ExtendLease with the server's lease duration.
pub(super) async fn extend(
    client: Client,
    (queue, job_id, token): (String, String, String),
) -> Extended {
    let call = client.extend_lease(&queue, &job_id, &token, None);
    let r = tokio::time::timeout(CALL_TIMEOUT, call)
        .await
        .unwrap_or_else(|_| Err(tonic::Status::deadline_exceeded("no reply in time").into()));
    match r {
        Ok(_) => Extended::Renewed,
        Err(Error::Status(s))
            if matches!(
                s.code(),
                tonic::Code::FailedPrecondition | tonic::Code::NotFound
            ) =>
        {
            Extended::Lost(s.message().to_owned())
        }
        Err(e) => Extended::Retry(e.to_string()),
    }
}
