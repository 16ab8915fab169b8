//! The one mapping from [`crate::Error`] to `tonic::Status` (exhaustive, no catch-all), with
//! google.rpc details: ErrorInfo{reason, domain} always, BadRequest field violations for bad
//! input, RetryInfo where a retry helps. Errors are logged here, once.

use std::collections::HashMap;
use std::time::Duration;

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::Error;

/// The `domain` of every ErrorInfo jobwire sends.
pub const ERROR_DOMAIN: &str = "jobwire.dev";

impl From<Error> for Status {
    fn from(e: Error) -> Status {
        let mut d = ErrorDetails::new();
        let mut info = HashMap::new();
        let (code, reason, message) = match &e {
            Error::InvalidArgument { field, reason } => {
                d.add_bad_request_violation(field.clone(), reason.clone());
                (Code::InvalidArgument, "INVALID_ARGUMENT", e.to_string())
            }
            Error::TooLarge { field, reason } => {
                d.add_bad_request_violation(field.clone(), reason.clone());
                (Code::ResourceExhausted, "TOO_LARGE", e.to_string())
            }
            Error::JobNotFound { queue, id } => {
                d.set_resource_info("job", format!("{queue}/{id}"), "", "no such job");
                (Code::NotFound, "JOB_NOT_FOUND", e.to_string())
            }
            Error::LeaseLost { id, .. } => {
                d.add_precondition_failure_violation(
                    "LEASE",
                    id.clone(),
                    "the lease token is not the job's current one",
                );
                (Code::FailedPrecondition, "LEASE_LOST", e.to_string())
            }
            Error::TooManyQueues { limit } => {
                d.add_quota_failure_violation("max-queues", format!("at most {limit} queues"));
                (Code::ResourceExhausted, "TOO_MANY_QUEUES", e.to_string())
            }
            Error::QueueNotFound { queue } => {
                d.set_resource_info("queue", queue.clone(), "", "no such queue");
                (Code::NotFound, "QUEUE_NOT_FOUND", e.to_string())
            }
            Error::QueueBusy { queue, .. } => {
                d.add_precondition_failure_violation(
                    "LEASED_JOBS",
                    queue.clone(),
                    "the queue has leased jobs; pass force to delete them too",
                );
                (Code::FailedPrecondition, "QUEUE_BUSY", e.to_string())
            }
            Error::JobActive { queue, id } => {
                d.add_precondition_failure_violation(
                    "JOB_ACTIVE",
                    format!("{queue}/{id}"),
                    "the job is leased; cancel it first",
                );
                (Code::FailedPrecondition, "JOB_ACTIVE", e.to_string())
            }
            Error::Unavailable(_) => {
                d.set_retry_info(Some(Duration::from_secs(1)));
                (
                    Code::Unavailable,
                    "STORE_UNAVAILABLE",
                    "the job store is unavailable; retry with backoff".to_owned(),
                )
            }
            Error::NotReplicated(why) => {
                d.set_retry_info(Some(Duration::from_secs(1)));
                (Code::Unavailable, "NOT_REPLICATED", format!("{why}; retry"))
            }
            Error::Evicting(why) => {
                d.set_retry_info(Some(Duration::from_secs(5)));
                (Code::Unavailable, "REDIS_EVICTS", why.clone())
            }
            Error::StoreFull(_) => {
                d.set_retry_info(Some(Duration::from_secs(5)));
                (
                    Code::ResourceExhausted,
                    "STORE_FULL",
                    "the job store is full (redis maxmemory reached); retry after jobs are \
                     consumed or memory is added"
                        .to_owned(),
                )
            }
            Error::Unauthenticated(_) => (Code::Unauthenticated, "UNAUTHENTICATED", e.to_string()),
            Error::PermissionDenied { queue, roles, .. } => {
                if let Some(q) = queue {
                    info.insert("queue".to_owned(), q.clone());
                }
                info.insert("roles".to_owned(), roles.clone());
                (Code::PermissionDenied, "PERMISSION_DENIED", e.to_string())
            }
            Error::TooManyStreams { limit, scope, flag } => {
                d.add_quota_failure_violation(
                    (*flag).to_owned(),
                    format!("at most {limit} worker streams per {scope}"),
                );
                (Code::ResourceExhausted, "TOO_MANY_STREAMS", e.to_string())
            }
            Error::RequestMemory { limit, scope, flag } => {
                d.add_quota_failure_violation(
                    (*flag).to_owned(),
                    format!("at most {limit} bytes of unfinished request messages per {scope}"),
                );
                d.set_retry_info(Some(Duration::from_secs(1)));
                (Code::ResourceExhausted, "REQUEST_MEMORY", e.to_string())
            }
            Error::StreamClosed(_) => {
                d.set_retry_info(Some(Duration::from_secs(1)));
                (Code::Unavailable, "STREAM_CLOSED", e.to_string())
            }
            Error::Internal(_) => (Code::Internal, "INTERNAL", "internal error".to_owned()),
        };
        match (code, &e) {
            (Code::Internal | Code::Unavailable, _) | (_, Error::StoreFull(_)) => {
                tracing::error!(error = %crate::telemetry::Untrusted(&e.to_string()), "request failed")
            }
            _ => {
                tracing::debug!(error = %crate::telemetry::Untrusted(&e.to_string()), "request refused")
            }
        }
        d.set_error_info(reason, ERROR_DOMAIN, info);
        Status::with_error_details(code, message, d)
    }
}

/// `status` (a NOT_REPLICATED failure of an Enqueue) naming the job the write made on the
/// master: its id in ErrorInfo metadata `job_id` and in the message, so that a client whose
/// request had no job_id (the server chose it) retries with it and finds the job instead of
/// creating another (README, "Lost replies").
pub(crate) fn with_job_id(status: Status, job_id: &str) -> Status {
    let mut d = status.get_error_details();
    let (reason, mut metadata) = match d.error_info() {
        Some(i) => (i.reason.clone(), i.metadata.clone()),
        None => ("NOT_REPLICATED".to_owned(), HashMap::new()),
    };
    metadata.insert("job_id".to_owned(), job_id.to_owned());
    d.set_error_info(reason, ERROR_DOMAIN, metadata);
    let message = format!(
        "{} with job_id {job_id:?} (the job's id: the write was made)",
        status.message()
    );
    Status::with_error_details(status.code(), message, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(s: &Status) -> String {
        s.get_error_details()
            .error_info()
            .map(|i| i.reason.clone())
            .unwrap_or_default()
    }

    #[test]
    fn every_variant_maps_to_its_code_and_reason() {
        let cases = [
            (
                Error::invalid("job.queue", "must not be empty"),
                Code::InvalidArgument,
                "INVALID_ARGUMENT",
            ),
            (
                Error::TooLarge {
                    field: "job.payload".into(),
                    reason: "big".into(),
                },
                Code::ResourceExhausted,
                "TOO_LARGE",
            ),
            (
                Error::JobNotFound {
                    queue: "q".into(),
                    id: "1".into(),
                },
                Code::NotFound,
                "JOB_NOT_FOUND",
            ),
            (
                Error::LeaseLost {
                    id: "1".into(),
                    state: "completed".into(),
                },
                Code::FailedPrecondition,
                "LEASE_LOST",
            ),
            (
                Error::Unavailable("down".into()),
                Code::Unavailable,
                "STORE_UNAVAILABLE",
            ),
            (
                Error::StoreFull("OOM".into()),
                Code::ResourceExhausted,
                "STORE_FULL",
            ),
            (Error::Internal("bug".into()), Code::Internal, "INTERNAL"),
            (
                Error::Unauthenticated("no token".into()),
                Code::Unauthenticated,
                "UNAUTHENTICATED",
            ),
            (
                Error::PermissionDenied {
                    principal: "p".into(),
                    rpc: "Enqueue",
                    queue: Some("q".into()),
                    roles: "producer".into(),
                },
                Code::PermissionDenied,
                "PERMISSION_DENIED",
            ),
            (
                Error::TooManyQueues { limit: 10 },
                Code::ResourceExhausted,
                "TOO_MANY_QUEUES",
            ),
            (
                Error::QueueNotFound { queue: "q".into() },
                Code::NotFound,
                "QUEUE_NOT_FOUND",
            ),
            (
                Error::QueueBusy {
                    queue: "q".into(),
                    leased: 1,
                },
                Code::FailedPrecondition,
                "QUEUE_BUSY",
            ),
            (
                Error::TooManyStreams {
                    limit: 1,
                    scope: "connection",
                    flag: "max-streams-per-connection",
                },
                Code::ResourceExhausted,
                "TOO_MANY_STREAMS",
            ),
            (
                Error::RequestMemory {
                    limit: 1,
                    scope: "connection",
                    flag: "max-buffered-request-bytes-per-connection",
                },
                Code::ResourceExhausted,
                "REQUEST_MEMORY",
            ),
            (
                Error::StreamClosed("idle".into()),
                Code::Unavailable,
                "STREAM_CLOSED",
            ),
        ];
        for (e, code, r) in cases {
            let s = Status::from(e);
            assert_eq!(s.code(), code);
            assert_eq!(reason(&s), r);
        }
    }

    #[test]
    fn a_not_replicated_enqueue_names_its_job_id() {
        let s = with_job_id(
            Status::from(Error::NotReplicated("0 of 1".into())),
            "0193-x",
        );
        assert_eq!(s.code(), Code::Unavailable);
        assert_eq!(reason(&s), "NOT_REPLICATED");
        let info = s.get_error_details().error_info().cloned().expect("info");
        assert_eq!(info.metadata["job_id"], "0193-x");
        assert!(
            s.message().contains("retry with job_id \"0193-x\""),
            "{}",
            s.message()
        );
        assert!(s.get_error_details().retry_info().is_some());
    }

    #[test]
    fn bad_input_names_the_field_and_internal_detail_stays_inside() {
        let s = Status::from(Error::invalid(
            "job.backoff.jitter",
            "is 2, must be in [0, 1]",
        ));
        let br = s
            .get_error_details()
            .bad_request()
            .cloned()
            .expect("bad request");
        assert_eq!(br.field_violations[0].field, "job.backoff.jitter");
        let s = Status::from(Error::Internal("redis said XYZ".into()));
        assert!(!s.message().contains("XYZ"));
    }

    /// A Redis error reply as the wire carries it (`-CODE message`).
    fn reply(line: &str) -> redis::RedisError {
        redis::parse_redis_value(format!("-{line}\r\n").as_bytes())
            .and_then(|v| v.extract_error())
            .expect_err("an error reply")
    }

    /// Every Redis failure a client can see, classified: transient ones (a replica, loading,
    /// failing over, busy, unreachable) are UNAVAILABLE, a full Redis is RESOURCE_EXHAUSTED,
    /// the rest (script bugs) INTERNAL. Redis 7 keeps the code of an error raised inside a
    /// script and appends `script: ...`; Redis 6 wraps it in `ERR Error running script`.
    #[test]
    fn redis_errors_map_to_unavailable_resource_exhausted_or_internal() {
        use crate::store::StoreError;
        let script = " script: 131b5f2e, on @user_script:1.";
        let wrapped =
            "ERR Error running script (call to f_131b5f2e): @user_script:1: @user_script: 1: -";
        let readonly = "READONLY You can't write against a read only replica.";
        let oom = "OOM command not allowed when used memory > 'maxmemory'.";
        let masterdown =
            "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.";
        let busy = "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.";
        let replies: Vec<(String, Code)> = vec![
            (readonly.into(), Code::Unavailable),
            (format!("{readonly}{script}"), Code::Unavailable),
            (format!("{wrapped}{readonly}"), Code::Unavailable),
            (
                "LOADING Redis is loading the dataset in memory".into(),
                Code::Unavailable,
            ),
            (masterdown.into(), Code::Unavailable),
            (format!("{masterdown}{script}"), Code::Unavailable),
            ("CLUSTERDOWN The cluster is down".into(), Code::Unavailable),
            (
                "TRYAGAIN Multiple keys request during rehashing of slot".into(),
                Code::Unavailable,
            ),
            (busy.into(), Code::Unavailable),
            // A cluster's redirects exhausted while slots move (failover, resharding).
            ("MOVED 3999 127.0.0.1:6381".into(), Code::Unavailable),
            ("ASK 3999 127.0.0.1:6381".into(), Code::Unavailable),
            (
                "NOREPLICAS Not enough good replicas to write.".into(),
                Code::Unavailable,
            ),
            (oom.into(), Code::ResourceExhausted),
            (format!("{oom}{script}"), Code::ResourceExhausted),
            (format!("{wrapped}{oom}"), Code::ResourceExhausted),
            (
                "ERR user_script:12: attempt to index a nil value".into(),
                Code::Internal,
            ),
            (
                "ERR user_script:1: job BUSY READONLY OOM".into(),
                Code::Internal,
            ),
            (
                "WRONGTYPE Operation against a key holding the wrong kind of value".into(),
                Code::Internal,
            ),
            ("NOSCRIPT No matching script.".into(), Code::Internal),
        ];
        for (line, code) in replies {
            let s = Status::from(Error::from(StoreError::from(reply(&line))));
            assert_eq!(s.code(), code, "{line}");
        }
        for kind in [
            std::io::ErrorKind::ConnectionRefused,
            std::io::ErrorKind::ConnectionReset,
            std::io::ErrorKind::BrokenPipe,
            std::io::ErrorKind::TimedOut,
            std::io::ErrorKind::NotFound,
        ] {
            let e = redis::RedisError::from(std::io::Error::new(kind, "socket"));
            let s = Status::from(Error::from(StoreError::from(e)));
            assert_eq!(s.code(), Code::Unavailable, "{kind:?}");
        }
    }
}
