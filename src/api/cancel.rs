//! CancelJob, CancelJobs and DeleteJob (JobService): validation, the store calls, the
//! telling of a local lease holder, counting and logging. The holder of an active job on
//! another replica is told by that replica, which hears the cancel script's notice on the
//! queue's wake channel (`store/wake.rs`, `lease/background.rs`).

use super::pb;
use crate::jobs::{Job, JobState, QueueName};
use crate::lease::Hub;
use crate::store::{CancelFilter, CancelOutcome, DeletedJob, Store};
use crate::telemetry::Untrusted;
use crate::Error;

/// Longest cancel reason, bytes.
pub(crate) const MAX_REASON_BYTES: usize = 1024;
/// Longest job name, group key or metadata key of a JobFilter, bytes.
const MAX_FILTER_BYTES: usize = 128;
/// Longest metadata value of a JobFilter, bytes.
const MAX_FILTER_VALUE_BYTES: usize = 4096;
/// Most jobs one CancelJobs call cancels or signals.
const MAX_CANCEL_LIMIT: i32 = 10_000;
/// CancelJobs' limit when the request gives 0.
const DEFAULT_CANCEL_LIMIT: usize = 1000;
/// Most script calls one CancelJobs call makes (each examines at most a bounded number of
/// entries and bytes): past them it returns a page token.
const MAX_CANCEL_CALLS: usize = 20;

/// A validated cancel reason (at most [`MAX_REASON_BYTES`]).
pub(crate) fn reason(field: &str, r: &str) -> Result<String, Error> {
    if r.len() > MAX_REASON_BYTES {
        return Err(Error::invalid(
            field,
            format!("is {} bytes, the limit is {MAX_REASON_BYTES}", r.len()),
        ));
    }
    Ok(r.to_owned())
}

/// Cancels one job (see `Store::cancel_job`), tells a local holder at once, counts and
/// logs it. Returns the job after the call and whether this call cancelled it.
pub(crate) async fn one(
    hub: &Hub,
    queue: &QueueName,
    id: &str,
    reason: &str,
) -> Result<(Job, bool), Error> {
    match hub.store().cancel_job(queue, id, reason).await? {
        CancelOutcome::NotFound => Err(Error::JobNotFound {
            queue: queue.to_string(),
            id: id.to_owned(),
        }),
        CancelOutcome::Job {
            job,
            cancelled,
            token,
            revoke_ms,
        } => {
            if cancelled {
                crate::metrics::cancelled(queue.as_str(), 1);
                tracing::info!(queue = %queue, job_id = %Untrusted(id), reason = %Untrusted(reason),
                    state = job.state.as_str(), "job cancelled");
                if job.state == JobState::Active {
                    // A holder on this replica is told now; one elsewhere hears the notice.
                    hub.tell_cancel(queue, id, &token, revoke_ms, reason);
                }
            }
            Ok((*job, cancelled))
        }
    }
}

/// A validated CancelJobs request.
#[derive(Debug)]
pub(crate) struct BulkPlan {
    filter: CancelFilter,
    reason: String,
    limit: usize,
    cursor: Option<(String, u64)>,
}

impl BulkPlan {
    /// The filter as the audit line shows it.
    pub(crate) fn describe(&self) -> String {
        let f = &self.filter;
        let mut parts = Vec::new();
        if !f.name.is_empty() {
            parts.push(format!("name={:?}", f.name));
        }
        if !f.group_key.is_empty() {
            parts.push(format!("group_key={:?}", f.group_key));
        }
        if !f.metadata_key.is_empty() {
            parts.push(format!("metadata_key={:?}", f.metadata_key));
        }
        if let Some(v) = &f.metadata_value {
            parts.push(format!("metadata_value={v:?}"));
        }
        parts.join(" ")
    }
}

/// Validates a CancelJobsRequest (the queue is checked by the caller).
pub(crate) fn bulk_request(r: &pb::CancelJobsRequest) -> Result<BulkPlan, Error> {
    let f = r.filter.clone().unwrap_or_default();
    let bounded = |field: &str, v: &str, max: usize| -> Result<(), Error> {
        if v.len() > max {
            return Err(Error::invalid(
                field,
                format!("is {} bytes, the limit is {max}", v.len()),
            ));
        }
        Ok(())
    };
    bounded("filter.name", &f.name, MAX_FILTER_BYTES)?;
    bounded("filter.group_key", &f.group_key, MAX_FILTER_BYTES)?;
    bounded("filter.metadata_key", &f.metadata_key, MAX_FILTER_BYTES)?;
    if let Some(v) = &f.metadata_value {
        bounded("filter.metadata_value", v, MAX_FILTER_VALUE_BYTES)?;
        if f.metadata_key.is_empty() {
            return Err(Error::invalid(
                "filter.metadata_key",
                "is required with filter.metadata_value",
            ));
        }
    }
    if f.name.is_empty() && f.group_key.is_empty() && f.metadata_key.is_empty() {
        return Err(Error::invalid(
            "filter",
            "must set at least one of name, group_key, metadata_key",
        ));
    }
    let limit = match r.limit {
        0 => DEFAULT_CANCEL_LIMIT,
        n if (1..=MAX_CANCEL_LIMIT).contains(&n) => n as usize,
        n => {
            return Err(Error::invalid(
                "limit",
                format!("is {n}, must be 0 (default {DEFAULT_CANCEL_LIMIT}) to {MAX_CANCEL_LIMIT}"),
            ))
        }
    };
    Ok(BulkPlan {
        filter: CancelFilter {
            name: f.name,
            group_key: f.group_key,
            metadata_key: f.metadata_key,
            metadata_value: f.metadata_value,
        },
        reason: reason("reason", &r.reason)?,
        limit,
        cursor: decode_token(&r.page_token)?,
    })
}

/// Page tokens of CancelJobs: `c1.<phase>.<position>` (phase: see `cancel.lua`).
fn encode_token(c: &(String, u64)) -> String {
    format!("c1.{}.{}", c.0, c.1)
}

fn decode_token(t: &str) -> Result<Option<(String, u64)>, Error> {
    if t.is_empty() {
        return Ok(None);
    }
    let bad = || Error::invalid("page_token", "is not a token a CancelJobs response gave");
    let rest = t.strip_prefix("c1.").ok_or_else(bad)?;
    let (phase, pos) = rest.split_once('.').ok_or_else(bad)?;
    if !matches!(phase, "d" | "h" | "l" | "w" | "g" | "a") {
        return Err(bad());
    }
    let pos = pos.parse::<u64>().map_err(|_| bad())?;
    Ok(Some((phase.to_owned(), pos)))
}

/// Cancels the jobs `plan` selects, in bounded script calls, until its limit was reached
/// or [`MAX_CANCEL_CALLS`] calls were made; counts and logs each job.
pub(crate) async fn bulk(
    store: &Store,
    queue: &QueueName,
    plan: &BulkPlan,
) -> Result<pb::CancelJobsResponse, Error> {
    let mut cursor = plan.cursor.clone();
    let (mut cancelled, mut signalled) = (0u64, 0u64);
    for _ in 0..MAX_CANCEL_CALLS {
        let left = plan.limit - (cancelled + signalled) as usize;
        let page = store
            .cancel_jobs(queue, &plan.filter, &plan.reason, left, cursor.as_ref())
            .await?;
        for id in &page.cancelled {
            tracing::info!(queue = %queue, job_id = %Untrusted(id), reason = %Untrusted(&plan.reason), "job cancelled");
        }
        for id in &page.signalled {
            tracing::info!(queue = %queue, job_id = %Untrusted(id), reason = %Untrusted(&plan.reason),
                state = "active", "job cancelled; its holder is told");
        }
        cancelled += page.cancelled.len() as u64;
        signalled += page.signalled.len() as u64;
        cursor = page.cursor;
        if cursor.is_none() || (cancelled + signalled) as usize >= plan.limit {
            break;
        }
    }
    crate::metrics::cancelled(queue.as_str(), cancelled + signalled);
    Ok(pb::CancelJobsResponse {
        cancelled,
        signalled,
        next_page_token: cursor.as_ref().map(encode_token).unwrap_or_default(),
    })
}

/// Deletes one job in any state but active; the state it was in.
pub(crate) async fn delete(store: &Store, queue: &QueueName, id: &str) -> Result<JobState, Error> {
    match store.delete_job(queue, id).await? {
        DeletedJob::NotFound => Err(Error::JobNotFound {
            queue: queue.to_string(),
            id: id.to_owned(),
        }),
        DeletedJob::Active => Err(Error::JobActive {
            queue: queue.to_string(),
            id: id.to_owned(),
        }),
        DeletedJob::Deleted(state) => {
            tracing::info!(queue = %queue, job_id = %Untrusted(id), state = state.as_str(), "job deleted");
            Ok(state)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_tokens_round_trip_and_bad_ones_are_refused() {
        let c = ("l".to_owned(), 42);
        assert_eq!(decode_token(&encode_token(&c)).expect("ok"), Some(c));
        assert_eq!(decode_token("").expect("first"), None);
        for bad in ["x", "c1.z.1", "c1.l", "c1.l.-1", "c2.l.1"] {
            assert!(decode_token(bad).is_err(), "{bad}");
        }
    }
}
