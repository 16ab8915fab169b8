//! `JobService.ListJobs`: a queue's jobs in one state, paged (AIP-158) and filtered by name
//! and time, read by one read-only script call a page (`store/list.rs`).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;

use super::convert;
use super::limits::MAX_NAME_BYTES;
use super::pb;
use crate::jobs::{JobState, QueueName};
use crate::store::{JobsCursor, JobsFilter, Store};
use crate::Error;

/// The opaque page token: `v1:<state>:<segment>:<position>:<job id>` in URL-safe base64
/// (the id last, so it may hold any character).
fn encode_token(state: JobState, c: &JobsCursor) -> String {
    URL_SAFE_NO_PAD.encode(format!(
        "v1:{}:{}:{}:{}",
        state.as_str(),
        c.segment,
        c.position,
        c.id
    ))
}

/// The cursor of `token` for a listing of `state`; `None` for the first page.
/// INVALID_ARGUMENT (field `page_token`) for a token this server did not issue, or one
/// issued for another state.
fn decode_token(token: &str, state: JobState) -> Result<Option<JobsCursor>, Error> {
    if token.is_empty() {
        return Ok(None);
    }
    let bad = || Error::invalid("page_token", "is not a token this server issued");
    let raw = URL_SAFE_NO_PAD.decode(token).map_err(|_| bad())?;
    let s = String::from_utf8(raw).map_err(|_| bad())?;
    let mut parts = s.splitn(5, ':');
    let (Some("v1"), Some(st), Some(segment), Some(position), Some(id)) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return Err(bad());
    };
    if JobState::parse(st) != Some(state) {
        return Err(Error::invalid(
            "page_token",
            format!(
                "was issued for another state ({st}); this request lists {}",
                state.as_str()
            ),
        ));
    }
    let cursor = JobsCursor {
        segment: segment.to_owned(),
        position: position.to_owned(),
        id: id.to_owned(),
    };
    if !cursor.fits(state) {
        return Err(bad());
    }
    Ok(Some(cursor))
}

/// The queue of a ListJobs request (validated first: the caller is authorized on it before
/// the rest of the request is looked at).
pub(crate) fn queue_of(r: &pb::ListJobsRequest) -> Result<QueueName, Error> {
    convert::queue("queue", &r.queue)
}

/// Serves one page of `r` (authorized already) from `store`.
pub(crate) async fn list(
    store: &Store,
    queue: &QueueName,
    r: &pb::ListJobsRequest,
) -> Result<pb::ListJobsResponse, Error> {
    let state = convert::job_state("state", r.state)?;
    let page_size = convert::page_size("page_size", r.page_size)?;
    let cursor = decode_token(&r.page_token, state)?;
    let filter = match &r.filter {
        None => JobsFilter::default(),
        Some(f) => {
            if f.name.len() > MAX_NAME_BYTES {
                return Err(Error::invalid(
                    "filter.name",
                    format!("is {} bytes, the limit is {MAX_NAME_BYTES}", f.name.len()),
                ));
            }
            JobsFilter {
                name: f.name.clone(),
                after_ms: convert::timestamp_ms("filter.after", f.after.as_ref())?,
                before_ms: convert::timestamp_ms("filter.before", f.before.as_ref())?,
            }
        }
    };
    let page = store
        .list_jobs(queue, state, &filter, cursor.as_ref(), page_size)
        .await?;
    Ok(pb::ListJobsResponse {
        jobs: page.jobs.into_iter().map(convert::job_pb).collect(),
        next_page_token: page
            .next_cursor
            .map(|c| encode_token(state, &c))
            .unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_refuse_what_was_not_issued() {
        let c = JobsCursor {
            segment: "l".into(),
            position: "12".into(),
            id: "a:b:c é".into(),
        };
        let t = encode_token(JobState::Waiting, &c);
        assert_eq!(
            decode_token(&t, JobState::Waiting).expect("valid"),
            Some(c.clone())
        );
        assert!(decode_token(&t, JobState::Dead).is_err());
        for bad in ["x", "djE6", &URL_SAFE_NO_PAD.encode("v1:waiting:z:1:a")] {
            assert!(decode_token(bad, JobState::Waiting).is_err(), "{bad}");
        }
        let bad_pos = URL_SAFE_NO_PAD.encode("v1:dead:z:1e3:a");
        assert!(decode_token(&bad_pos, JobState::Dead).is_err());
        assert_eq!(decode_token("", JobState::Dead).expect("first page"), None);
    }
}
