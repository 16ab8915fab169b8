//! `jobwire.v1.DeadLetterService`: list (paged per AIP-158, filtered), get, replay, delete.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use tonic::{Request, Response, Status};

use super::convert;
use super::limits::*;
use super::pb;
use crate::auth::audit::{self, AdminAction};
use crate::auth::{Auth, Rpc};
use crate::jobs::{DeadFilter, JobState, QueueName};
use crate::store::{DeadSelector, Store};
use crate::Error;

/// The DeadLetterService handlers.
pub struct DeadLetterApi {
    store: Store,
    auth: Auth,
}

impl DeadLetterApi {
    /// Handlers over `store`; every call is authorized by `auth`, and replays and deletes
    /// are audited.
    pub fn new(store: Store, auth: Auth) -> DeadLetterApi {
        DeadLetterApi { store, auth }
    }
}

/// What a replay or delete selected, for the audit line: the number of ids, or the filter.
fn selector_text(sel: &DeadSelector) -> String {
    match sel {
        DeadSelector::Ids(ids) => format!("job_ids({})", ids.len()),
        DeadSelector::Filter(f) => filter_text(f),
    }
}

/// A dead-letter filter for the audit line: the fields set, `name="value"` separated by
/// spaces (as the dashboard prints it: `error_type="smtp_timeout" reason="no_retry"`),
/// times as RFC 3339 UTC; `every dead job` when none is set.
fn filter_text(f: &DeadFilter) -> String {
    let time = |ms: Option<u64>| {
        ms.map(|ms| {
            humantime::format_rfc3339_millis(
                std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms),
            )
            .to_string()
        })
        .unwrap_or_default()
    };
    let pairs = [
        ("job_name", f.job_name.clone()),
        ("error_type", f.error_type.clone()),
        (
            "reason",
            f.reason
                .map(|r| r.as_str().to_ascii_lowercase())
                .unwrap_or_default(),
        ),
        ("message_prefix", f.error_message_prefix.clone()),
        ("dead_after", time(f.dead_after_ms)),
        ("dead_before", time(f.dead_before_ms)),
    ];
    let set: Vec<String> = pairs
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| format!("{k}={v:?}"))
        .collect();
    if set.is_empty() {
        "every dead job".into()
    } else {
        set.join(" ")
    }
}

/// The opaque page token: the dead-set score where the previous page ended.
fn encode_token(cursor: &str) -> String {
    URL_SAFE_NO_PAD.encode(format!("v1:{cursor}"))
}

fn decode_token(token: &str) -> Result<Option<String>, Error> {
    if token.is_empty() {
        return Ok(None);
    }
    let bad = || Error::invalid("page_token", "is not a token this server issued");
    let raw = URL_SAFE_NO_PAD.decode(token).map_err(|_| bad())?;
    let s = String::from_utf8(raw).map_err(|_| bad())?;
    let cursor = s.strip_prefix("v1:").ok_or_else(bad)?;
    if cursor.is_empty() || !cursor.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    Ok(Some(cursor.to_owned()))
}

fn selector(ids: &[String], filter: Option<&pb::DeadLetterFilter>) -> Result<DeadSelector, Error> {
    match (ids.is_empty(), filter) {
        (false, Some(_)) => Err(Error::invalid(
            "filter",
            "give job_ids or a filter, not both",
        )),
        (true, None) => Err(Error::invalid("job_ids", "give job_ids or a filter")),
        (true, Some(f)) => Ok(DeadSelector::Filter(convert::dead_filter("filter", f)?)),
        (false, None) => {
            if ids.len() > MAX_BATCH {
                return Err(Error::TooLarge {
                    field: "job_ids".into(),
                    reason: format!("{} ids, the limit is {MAX_BATCH}", ids.len()),
                });
            }
            ids.iter()
                .enumerate()
                .map(|(i, id)| convert::job_id(&format!("job_ids[{i}]"), id))
                .collect::<Result<Vec<_>, _>>()
                .map(DeadSelector::Ids)
        }
    }
}

#[tonic::async_trait]
impl pb::dead_letter_service_server::DeadLetterService for DeadLetterApi {
    #[tracing::instrument(skip_all, fields(queue))]
    async fn list_dead_letters(
        &self,
        request: Request<pb::ListDeadLettersRequest>,
    ) -> Result<Response<pb::ListDeadLettersResponse>, Status> {
        let queue = convert::queue("queue", &request.get_ref().queue)?;
        self.auth.check(&request, Rpc::ListDeadLetters, &[&queue])?;
        let r = request.into_inner();
        let page_size = match r.page_size {
            0 => DEFAULT_PAGE_SIZE,
            n if (1..=MAX_PAGE_SIZE).contains(&n) => n,
            n => {
                return Err(Error::invalid(
                    "page_size",
                    format!("is {n}, must be 0 (default 100) to {MAX_PAGE_SIZE}"),
                )
                .into())
            }
        };
        let cursor = decode_token(&r.page_token)?;
        let filter = match &r.filter {
            Some(f) => convert::dead_filter("filter", f)?,
            None => DeadFilter::default(),
        };
        let page = self
            .store
            .list_dead(&queue, &filter, cursor.as_deref(), page_size as usize)
            .await
            .map_err(Error::from)?;
        Ok(Response::new(pb::ListDeadLettersResponse {
            dead_letters: page.jobs.into_iter().map(convert::job_pb).collect(),
            next_page_token: page
                .next_cursor
                .as_deref()
                .map(encode_token)
                .unwrap_or_default(),
        }))
    }

    #[tracing::instrument(skip_all, fields(queue, job_id))]
    async fn get_dead_letter(
        &self,
        request: Request<pb::GetDeadLetterRequest>,
    ) -> Result<Response<pb::GetDeadLetterResponse>, Status> {
        let r = request.get_ref();
        let queue: QueueName = convert::queue("queue", &r.queue)?;
        let id = convert::job_id("job_id", &r.job_id)?;
        self.auth.check(&request, Rpc::GetDeadLetter, &[&queue])?;
        let job = self.store.get_job(&queue, &id).await.map_err(Error::from)?;
        match job {
            Some(j) if j.state == JobState::Dead => Ok(Response::new(pb::GetDeadLetterResponse {
                dead_letter: Some(convert::job_pb(j)),
            })),
            _ => Err(Error::JobNotFound {
                queue: queue.to_string(),
                id,
            }
            .into()),
        }
    }

    #[tracing::instrument(skip_all, fields(queue))]
    async fn replay_dead_letters(
        &self,
        request: Request<pb::ReplayDeadLettersRequest>,
    ) -> Result<Response<pb::ReplayDeadLettersResponse>, Status> {
        let r = request.get_ref();
        let queue = convert::queue("queue", &r.queue)?;
        // The role before the rest of the request: a caller without it learns nothing
        // from our validation, and its refusal is audited.
        let who = self
            .auth
            .check(&request, Rpc::ReplayDeadLetters, &[&queue])?;
        let r = request.get_ref();
        let sel = selector(&r.job_ids, r.filter.as_ref())?;
        let (replayed, skipped) = self.store.replay(&queue, &sel).await.map_err(Error::from)?;
        crate::metrics::replayed(queue.as_str(), replayed.len());
        tracing::info!(queue = %queue, replayed = replayed.len(), skipped = skipped.len(), "replayed dead letters");
        audit::record(
            &who,
            AdminAction::ReplayDeadLetters,
            queue.as_str(),
            &selector_text(&sel),
            replayed.len() as u64,
        );
        Ok(Response::new(pb::ReplayDeadLettersResponse {
            replayed_job_ids: replayed,
            skipped_job_ids: skipped,
        }))
    }

    #[tracing::instrument(skip_all, fields(queue))]
    async fn delete_dead_letters(
        &self,
        request: Request<pb::DeleteDeadLettersRequest>,
    ) -> Result<Response<pb::DeleteDeadLettersResponse>, Status> {
        let r = request.get_ref();
        let queue = convert::queue("queue", &r.queue)?;
        // The role before the rest of the request: a caller without it learns nothing
        // from our validation, and its refusal is audited.
        let who = self
            .auth
            .check(&request, Rpc::DeleteDeadLetters, &[&queue])?;
        let r = request.get_ref();
        let sel = selector(&r.job_ids, r.filter.as_ref())?;
        let (deleted, skipped) = self
            .store
            .delete_dead(&queue, &sel)
            .await
            .map_err(Error::from)?;
        tracing::info!(queue = %queue, deleted = deleted.len(), skipped = skipped.len(), "deleted dead letters");
        audit::record(
            &who,
            AdminAction::DeleteDeadLetters,
            queue.as_str(),
            &selector_text(&sel),
            deleted.len() as u64,
        );
        Ok(Response::new(pb::DeleteDeadLettersResponse {
            deleted_job_ids: deleted,
            skipped_job_ids: skipped,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_tokens_round_trip_and_garbage_is_refused() {
        let t = encode_token("1764480000123001");
        assert_eq!(
            decode_token(&t).expect("valid").as_deref(),
            Some("1764480000123001")
        );
        assert_eq!(decode_token("").expect("empty"), None);
        for bad in [
            "%%%",
            "abc",
            &URL_SAFE_NO_PAD.encode("v1:12a"),
            &URL_SAFE_NO_PAD.encode("v2:12"),
        ] {
            assert!(decode_token(bad).is_err(), "{bad}");
        }
    }
}
