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
            Error::Unavailable(_) => {
                d.set_retry_info(Some(Duration::from_secs(1)));
                (
                    Code::Unavailable,
                    "STORE_UNAVAILABLE",
                    "the job store is unavailable; retry with backoff".to_owned(),
                )
            }
            Error::Internal(_) => (Code::Internal, "INTERNAL", "internal error".to_owned()),
        };
        match code {
            Code::Internal | Code::Unavailable => tracing::error!(error = %e, "request failed"),
            _ => tracing::debug!(error = %e, "request refused"),
        }
        d.set_error_info(reason, ERROR_DOMAIN, HashMap::new());
        Status::with_error_details(code, message, d)
    }
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
            (Error::Internal("bug".into()), Code::Internal, "INTERNAL"),
        ];
        for (e, code, r) in cases {
            let s = Status::from(e);
            assert_eq!(s.code(), code);
            assert_eq!(reason(&s), r);
        }
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
}
