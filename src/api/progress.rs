//! Progress reports and results, the api side: validation of ReportProgress (unary or on a
//! stream) and of Ack results against the server's limits, and the stream's ProgressSaved
//! replies. The store keeps them in the queue's `data` hash (`store/scripts/progress.lua`,
//! `ack.lua`).

use super::convert::{self, ApiLimits};
use super::limits::{MAX_PROGRESS, MAX_PROGRESS_MESSAGE_BYTES};
use super::pb;
use crate::jobs::{ProgressReport, QueueName};
use crate::lease::Settled;
use crate::Error;

/// A validated progress report: queue, job id, lease token and what it saves.
pub(crate) type ProgressArgs = (QueueName, String, String, ProgressReport);

/// Validates a ReportProgressRequest: ids as for Ack, `progress` 0-100 and `message` up to
/// 256 bytes (INVALID_ARGUMENT), `checkpoint` up to the server's limit (RESOURCE_EXHAUSTED).
/// Each error names the field and the limit.
pub(crate) fn progress_args(
    r: pb::ReportProgressRequest,
    limits: &ApiLimits,
) -> Result<ProgressArgs, Error> {
    let queue = convert::queue("queue", &r.queue)?;
    let id = convert::job_id("job_id", &r.job_id)?;
    let token = convert::token("lease_token", &r.lease_token)?;
    if let Some(p) = r.progress {
        if p > MAX_PROGRESS {
            return Err(Error::invalid(
                "progress",
                format!("is {p}, must be 0 to {MAX_PROGRESS}"),
            ));
        }
    }
    if let Some(m) = &r.message {
        if m.len() > MAX_PROGRESS_MESSAGE_BYTES {
            return Err(Error::invalid(
                "message",
                format!(
                    "is {} bytes, the limit is {MAX_PROGRESS_MESSAGE_BYTES}",
                    m.len()
                ),
            ));
        }
    }
    if let Some(c) = &r.checkpoint {
        too_large("checkpoint", c.len(), limits.max_checkpoint_bytes)?;
    }
    Ok((
        queue,
        id,
        token,
        ProgressReport {
            progress: r.progress,
            message: r.message,
            checkpoint: r.checkpoint,
        },
    ))
}

/// RESOURCE_EXHAUSTED naming `field` and the limit when `len` exceeds `max` bytes.
pub(crate) fn too_large(field: &str, len: usize, max: usize) -> Result<(), Error> {
    if len > max {
        return Err(Error::TooLarge {
            field: field.into(),
            reason: format!("is {len} bytes, the limit is {max} bytes"),
        });
    }
    Ok(())
}

/// The ProgressSaved a stream gets for a report: code 0, or the error's code and message.
pub(crate) fn progress_saved_pb(s: Settled) -> pb::ProgressSaved {
    let (code, message) = match s.result {
        Ok(_) => (0, String::new()),
        Err(e) => {
            let st = tonic::Status::from(e);
            (st.code() as i32, st.message().to_owned())
        }
    };
    pb::ProgressSaved {
        queue: s.queue,
        job_id: s.id,
        lease_token: s.token,
        code,
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(
        progress: Option<u32>,
        message: Option<&str>,
        checkpoint: Option<usize>,
    ) -> pb::ReportProgressRequest {
        pb::ReportProgressRequest {
            queue: "q".into(),
            job_id: "j".into(),
            lease_token: "t".into(),
            progress,
            message: message.map(str::to_owned),
            checkpoint: checkpoint.map(|n| vec![0; n]),
        }
    }

    #[test]
    fn reports_are_checked_against_each_limit_naming_the_field() {
        let limits = ApiLimits {
            max_checkpoint_bytes: 10,
            ..ApiLimits::default()
        };
        let ok = progress_args(req(Some(100), Some(&"m".repeat(256)), Some(10)), &limits)
            .expect("at the limits");
        assert_eq!(ok.3.progress, Some(100));
        assert_eq!(ok.3.checkpoint.as_deref().map(<[u8]>::len), Some(10));
        let unset = progress_args(req(None, None, None), &limits).expect("nothing set");
        assert_eq!(unset.3, ProgressReport::default());
        for (r, field, code) in [
            (
                req(Some(101), None, None),
                "progress",
                tonic::Code::InvalidArgument,
            ),
            (
                req(None, Some(&"m".repeat(257)), None),
                "message",
                tonic::Code::InvalidArgument,
            ),
            (
                req(None, None, Some(11)),
                "checkpoint",
                tonic::Code::ResourceExhausted,
            ),
        ] {
            let st = tonic::Status::from(progress_args(r, &limits).expect_err(field));
            assert_eq!(st.code(), code, "{field}");
            assert!(st.message().contains(field), "{}", st.message());
        }
        let e = too_large("result", 65_537, 65_536).expect_err("over");
        assert!(e.to_string().contains("65536"), "{e}");
    }
}
