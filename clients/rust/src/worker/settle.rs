//! Settling and renewing leases with the unary calls, for leases whose stream is gone.

use std::time::Duration;

use crate::backoff::FullJitter;
use crate::pb;
use crate::{Client, Error};

/// A handler's result, ready to send.
#[derive(Clone, Debug)]
pub(super) enum Outcome {
    /// The job completed, with these result bytes (empty: none).
    Ack(Vec<u8>),
    /// The attempt failed (ids and lease token filled in).
    Fail(pb::FailRequest),
}

/// How long one unary Ack/Fail/ExtendLease may take before it counts as failed (and is
/// retried): a connection that stopped answering must not hold a result forever (HTTP/2
/// keepalive replaces such a connection within its interval + timeout, 15 s by default).
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
    let mut outcome = outcome;
    loop {
        let call = async {
            match &outcome {
                Outcome::Ack(result) => {
                    client
                        .ack_with_result(&queue, &job_id, &token, result.clone())
                        .await
                }
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
            Err(Error::Status(s)) if s.code() == tonic::Code::ResourceExhausted => {
                match result_too_large(&outcome, (&queue, &job_id, &token), s.message()) {
                    Some(fail) => {
                        outcome = fail;
                        continue;
                    }
                    None => return Settled::Refused(s),
                }
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

/// The Fail that replaces an Ack whose result the server refused as too large
/// (RESOURCE_EXHAUSTED; the job stays leased until settled): NO_RETRY with error type
/// `result_too_large`, as running it again would make the same result. None for any other
/// outcome.
pub(super) fn result_too_large(
    outcome: &Outcome,
    (queue, job_id, token): (&str, &str, &str),
    why: &str,
) -> Option<Outcome> {
    let Outcome::Ack(result) = outcome else {
        return None;
    };
    if result.is_empty() {
        return None;
    }
    tracing::error!(
        queue,
        job_id,
        result_bytes = result.len(),
        reason = why,
        "the server refused the job's result as too large: failing the job NO_RETRY"
    );
    Some(Outcome::Fail(pb::FailRequest {
        queue: queue.into(),
        job_id: job_id.into(),
        lease_token: token.into(),
        disposition: pb::FailDisposition::NoRetry as i32,
        error: Some(pb::JobError {
            message: format!("result of {} bytes refused: {why}", result.len()),
            error_type: "result_too_large".into(),
            details: String::new(),
        }),
        ..Default::default()
    }))
}

/// Saves a progress report with the unary ReportProgress, retrying UNAVAILABLE and the like
/// a few times (the handler waits for it). FAILED_PRECONDITION and NOT_FOUND:
/// [`Error::LeaseLost`].
pub(super) async fn report(client: Client, req: pb::ReportProgressRequest) -> Result<(), Error> {
    let mut backoff = FullJitter::new(Duration::from_millis(200), Duration::from_secs(2));
    let mut tries = 0u32;
    loop {
        let call = async {
            client
                .workers()
                .report_progress(req.clone())
                .await
                .map(|_| ())
        };
        let r = tokio::time::timeout(CALL_TIMEOUT, call)
            .await
            .unwrap_or_else(|_| Err(tonic::Status::deadline_exceeded("no reply in time")));
        tries += 1;
        match r {
            Ok(()) => return Ok(()),
            Err(s) if lease_gone(s.code()) => return Err(Error::LeaseLost(s.message().into())),
            Err(s) if transient(s.code()) && tries < 5 => {
                tokio::time::sleep(backoff.next_delay()).await
            }
            Err(s) => return Err(s.into()),
        }
    }
}

/// FAILED_PRECONDITION or NOT_FOUND on a lease-token call: the lease is gone.
pub(super) fn lease_gone(code: tonic::Code) -> bool {
    matches!(
        code,
        tonic::Code::FailedPrecondition | tonic::Code::NotFound
    )
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
