//! Cancel and delete (`cancel.lua`, `delete_job.lua`; `scripts/common.lua`, "Cancel and
//! expiry"), and the cancel notice the cancel script publishes on a queue's wake channel
//! for the replica whose stream holds the lease.

use redis::Value;

use super::client::{opt_ms, state};
use super::codec::{array, bad, bytes, int, job_from_record, next, string};
use super::keys::Keys;
use super::scripts;
use super::{Store, StoreError};
use crate::jobs::{Job, JobState, QueueName};

/// What [`Store::cancel_job`] did.
#[derive(Clone, Debug)]
pub enum CancelOutcome {
    /// No job has that id.
    NotFound,
    /// The job after the call, whether this call cancelled it (a waiting or delayed job is
    /// now CANCELLED) or told its holder (an active job), and for an active job the lease
    /// token and revoke time (ms) of its pending cancel.
    Job {
        /// The job (its `cancel_reason` filled in).
        job: Box<Job>,
        /// This call cancelled it or signalled its holder.
        cancelled: bool,
        /// The lease token of an active job ("" otherwise).
        token: String,
        /// When an active job's lease is revoked, ms (0 otherwise).
        revoke_ms: u64,
    },
}

/// A CancelJobs filter: every non-empty field must match; at least one is set.
#[derive(Clone, Debug, Default)]
pub struct CancelFilter {
    /// Exact job name ("" any).
    pub name: String,
    /// Exact group key ("" any).
    pub group_key: String,
    /// The metadata has this key ("" any).
    pub metadata_key: String,
    /// ... with this value.
    pub metadata_value: Option<String>,
}

/// One page of a bulk cancel.
#[derive(Clone, Debug, Default)]
pub struct CancelPage {
    /// Ids of the waiting and delayed jobs now CANCELLED.
    pub cancelled: Vec<String>,
    /// Ids of the active jobs whose holders were told.
    pub signalled: Vec<String>,
    /// Where the walk goes on (`None`: it is done): a phase and a position.
    pub cursor: Option<(String, u64)>,
}

/// What [`Store::delete_job`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeletedJob {
    /// No job has that id.
    NotFound,
    /// The job is leased: nothing deleted.
    Active,
    /// Deleted; the state it was in.
    Deleted(JobState),
}

/// A cancel the cancel script published on a queue's wake channel: the holder of `token`
/// must be told (`c:<revoke ms>:<token>:<id bytes>:<id><reason>`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CancelNotice {
    /// The job's id.
    pub id: String,
    /// The lease token being cancelled.
    pub token: String,
    /// When the lease is revoked, ms.
    pub revoke_ms: u64,
    /// The reason given with the cancel.
    pub reason: String,
}

impl CancelNotice {
    /// Decodes a wake-channel message; `None` when it is not a cancel notice (a plain
    /// wake-up is `1`).
    pub fn parse(msg: &[u8]) -> Option<CancelNotice> {
        let rest = msg.strip_prefix(b"c:")?;
        let (revoke, rest) = split_colon(rest)?;
        let (token, rest) = split_colon(rest)?;
        let (len, rest) = split_colon(rest)?;
        let len: usize = std::str::from_utf8(len).ok()?.parse().ok()?;
        if rest.len() < len {
            return None;
        }
        let (id, reason) = rest.split_at(len);
        Some(CancelNotice {
            id: String::from_utf8(id.to_vec()).ok()?,
            token: String::from_utf8(token.to_vec()).ok()?,
            revoke_ms: std::str::from_utf8(revoke).ok()?.parse().ok()?,
            reason: String::from_utf8_lossy(reason).into_owned(),
        })
    }
}

fn split_colon(b: &[u8]) -> Option<(&[u8], &[u8])> {
    let i = b.iter().position(|c| *c == b':')?;
    Some((&b[..i], &b[i + 1..]))
}

/// Most entries one bulk-cancel script call examines.
const CANCEL_EXAMINE: usize = 5000;

impl Store {
    /// Cancels job `id` of `queue` (`cancel.lua`): a waiting or delayed job ends CANCELLED at
    /// once; an active one gets a pending cancel (its holder is told over the wake channel,
    /// its lease revoked after the queue's cancel grace); a finished one is left as it is.
    pub async fn cancel_job(
        &self,
        queue: &QueueName,
        id: &str,
        reason: &str,
    ) -> Result<CancelOutcome, StoreError> {
        let args = vec![
            reason.as_bytes().to_vec(),
            b"id".to_vec(),
            id.as_bytes().to_vec(),
        ];
        let keys = Keys::new(queue);
        let (_, reply) = tokio::join!(
            self.intend_due(queue),
            self.run_script(&scripts::CANCEL, &keys, args)
        );
        let mut reply = array(reply?)?.into_iter();
        let outcome = string(next(&mut reply)?)?;
        if outcome == "NOT_FOUND" {
            return Ok(CancelOutcome::NotFound);
        }
        let rec = bytes(next(&mut reply)?)?;
        let revoke_ms = int(next(&mut reply)?)? as u64;
        let token = string(next(&mut reply)?)?;
        let mut job = job_from_record(queue, id.to_owned(), &rec)?;
        if job.cancel_ms > 0 {
            job.cancel_reason = reason.to_owned();
        }
        let cancelled = match outcome.as_str() {
            "CANCELLED" | "SIGNALLED" => true,
            "PENDING" | "FINISHED" => false,
            _ => return Err(bad("unknown cancel outcome")),
        };
        if !cancelled {
            // Any reason is an earlier cancel's: read it back.
            job = self.get_job(queue, id).await?.unwrap_or(job);
        }
        if revoke_ms > 0 {
            self.mark_due(queue, revoke_ms).await;
        }
        Ok(CancelOutcome::Job {
            job: Box::new(job),
            cancelled,
            token,
            revoke_ms,
        })
    }

    /// Cancels the waiting, delayed and active jobs of `queue` matching `filter`, from
    /// `cursor` (`None`: the start), until `limit` were cancelled or signalled or the call's
    /// budget ran out (`cancel.lua`, one call).
    pub async fn cancel_jobs(
        &self,
        queue: &QueueName,
        filter: &CancelFilter,
        reason: &str,
        limit: usize,
        cursor: Option<&(String, u64)>,
    ) -> Result<CancelPage, StoreError> {
        let (phase, pos) = cursor.map_or((String::new(), 0), |(p, n)| (p.clone(), *n));
        let args = vec![
            reason.as_bytes().to_vec(),
            b"filter".to_vec(),
            filter.name.as_bytes().to_vec(),
            filter.group_key.as_bytes().to_vec(),
            filter.metadata_key.as_bytes().to_vec(),
            if filter.metadata_value.is_some() {
                b"1".to_vec()
            } else {
                b"0".to_vec()
            },
            filter
                .metadata_value
                .clone()
                .unwrap_or_default()
                .into_bytes(),
            limit.to_string().into_bytes(),
            phase.into_bytes(),
            pos.to_string().into_bytes(),
            CANCEL_EXAMINE.to_string().into_bytes(),
        ];
        let keys = Keys::new(queue);
        let (_, reply) = tokio::join!(
            self.intend_due(queue),
            self.run_script(&scripts::CANCEL, &keys, args)
        );
        let mut reply = array(reply?)?.into_iter();
        let ids = |v: Value| -> Result<Vec<String>, StoreError> {
            array(v)?.into_iter().map(string).collect()
        };
        let cancelled = ids(next(&mut reply)?)?;
        let signalled = ids(next(&mut reply)?)?;
        let phase = string(next(&mut reply)?)?;
        let pos = int(next(&mut reply)?)? as u64;
        let earliest = opt_ms(int(next(&mut reply)?)?);
        if let Some(at) = earliest {
            self.mark_due(queue, at).await;
        }
        Ok(CancelPage {
            cancelled,
            signalled,
            cursor: (!phase.is_empty()).then_some((phase, pos)),
        })
    }

    /// Deletes job `id` of `queue` in any state but active, with everything it carries, so
    /// its id is free at once (`delete_job.lua`).
    pub async fn delete_job(&self, queue: &QueueName, id: &str) -> Result<DeletedJob, StoreError> {
        let reply = self
            .run_script(
                &scripts::DELETE_JOB,
                &Keys::new(queue),
                vec![id.as_bytes().to_vec()],
            )
            .await?;
        let mut reply = array(reply)?.into_iter();
        Ok(match string(next(&mut reply)?)?.as_str() {
            "NOT_FOUND" => DeletedJob::NotFound,
            "ACTIVE" => DeletedJob::Active,
            "OK" => DeletedJob::Deleted(state(&string(next(&mut reply)?)?)?),
            _ => return Err(bad("unknown delete_job outcome")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::CancelNotice;

    #[test]
    fn a_cancel_notice_round_trips_ids_and_reasons_with_colons() {
        let n = CancelNotice::parse(b"c:1700:abc-3:5:a:b:cwhy: because").expect("notice");
        assert_eq!(n.revoke_ms, 1700);
        assert_eq!(n.token, "abc-3");
        assert_eq!(n.id, "a:b:c");
        assert_eq!(n.reason, "why: because");
        assert_eq!(CancelNotice::parse(b"1"), None);
        assert_eq!(CancelNotice::parse(b"c:1:t:9:short"), None);
    }
}
