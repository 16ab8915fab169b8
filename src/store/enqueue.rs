//! [`Store::enqueue`] and [`Store::get_job`]: creating jobs (in calls bounded by
//! [`CALL_BYTES`] of payload) and reading one back with its error history.

use super::client::CALL_BYTES;
use super::codec::{
    array, bad, bytes, encode_body, int, job_from_record, next, string, with_history, with_progress,
};
use super::keys::Keys;
use super::scripts;
use super::types::*;
use super::{Store, StoreError};
use crate::jobs::{Backoff, Job, JobState, NewJob, QueueName};
use redis::Value;

impl Store {
    /// Creates jobs of one queue (`enqueue.lua`); a taken id returns the existing job with
    /// `created = false`. Outcomes are in input order. The jobs go in script calls of at most
    /// [`CALL_BYTES`] of payload (at least one job each), and a call whose budget runs out on
    /// the records of taken ids answers for the first jobs only: the rest go in the next
    /// call. Each job is created (or found taken) atomically; a batch spanning several calls
    /// is not one atomic step, so an error may leave its first jobs created (a retry finds
    /// their ids taken).
    pub async fn enqueue(
        &self,
        queue: &QueueName,
        jobs: &[NewJob],
        default_max_attempts: u32,
    ) -> Result<Vec<EnqueueOutcome>, StoreError> {
        let (outcomes, stopped) = self.enqueue_each(queue, jobs, default_max_attempts).await;
        if let Some(e) = stopped {
            return Err(e);
        }
        outcomes.into_iter().collect()
    }

    /// [`Store::enqueue`] with one result per job: the outcomes of the jobs the calls
    /// answered for, in input order (a job whose taken id holds a record that does not
    /// decode gets that error, and only it), and the error that stopped the calls before
    /// the rest (`None` when every job was answered). Jobs answered before the error were
    /// written (or found taken) whatever comes after them; the group commit of unary
    /// Enqueues (`api/enqueue_commit.rs`) hands each caller its own part.
    pub async fn enqueue_each(
        &self,
        queue: &QueueName,
        jobs: &[NewJob],
        default_max_attempts: u32,
    ) -> (Vec<Result<EnqueueOutcome, StoreError>>, Option<StoreError>) {
        let mut out = Vec::with_capacity(jobs.len());
        if let Err(e) = self.refuse_if_evicting() {
            return (out, Some(e));
        }
        if let Err(e) = self.remember_queue(queue).await {
            return (out, Some(e));
        }
        let keys = Keys::shared(queue);
        let mut start = 0;
        while start < jobs.len() {
            let mut end = start + 1;
            let mut size = jobs[start].payload.len();
            while end < jobs.len() {
                size += jobs[end].payload.len();
                if size > CALL_BYTES {
                    break;
                }
                end += 1;
            }
            let done = match self
                .enqueue_call(queue, &keys, &jobs[start..end], default_max_attempts)
                .await
            {
                Ok(done) if done.is_empty() => {
                    return (out, Some(bad("enqueue.lua answered for no job")))
                }
                Ok(done) => done,
                Err(e) => return (out, Some(e)),
            };
            start += done.len();
            out.extend(done);
        }
        (out, None)
    }

    /// Does an enqueue of `jobs` write the due index's intent before its script (some job
    /// has a delay or an expire time, `Store::intend_due`)? Then the first thing the call
    /// puts on the connection is the intent, not the enqueue: a lease call written behind
    /// it may run before the jobs exist (`lease/enqueue_commit.rs`).
    pub fn enqueue_writes_intent(jobs: &[NewJob]) -> bool {
        jobs.iter().any(|j| j.delay_ms > 0 || j.expire_ms > 0)
    }

    /// One `enqueue.lua` call for `jobs`: the outcomes of the first jobs (all of them unless
    /// the call's byte budget ran out); a taken id whose record does not decode fails that
    /// job only.
    async fn enqueue_call(
        &self,
        queue: &QueueName,
        keys: &Keys,
        jobs: &[NewJob],
        default_max_attempts: u32,
    ) -> Result<Vec<Result<EnqueueOutcome, StoreError>>, StoreError> {
        let mut args: Vec<Vec<u8>> = Vec::with_capacity(2 + jobs.len() * 11);
        args.push(jobs.len().to_string().into_bytes());
        args.push(default_max_attempts.to_string().into_bytes());
        for j in jobs {
            let metadata = if j.metadata.is_empty() {
                String::new()
            } else {
                serde_json::to_string(&j.metadata)
                    .map_err(|e| StoreError::Decode(format!("metadata: {e}")))?
            };
            args.extend([
                j.id.clone().into_bytes(),
                j.name.clone().into_bytes(),
                encode_body(&j.payload, &j.content_type, &metadata),
                j.delay_ms.to_string().into_bytes(),
                j.priority.to_string().into_bytes(),
                j.max_attempts
                    .map(|m| m.to_string())
                    .unwrap_or_default()
                    .into_bytes(),
                j.backoff
                    .as_ref()
                    .map(|b| b.encode())
                    .unwrap_or_default()
                    .into_bytes(),
                j.timeout_ms
                    .map(|t| t.to_string())
                    .unwrap_or_default()
                    .into_bytes(),
                j.group_key.clone().into_bytes(),
                j.expire_ms.to_string().into_bytes(),
                if j.id_ours { b"1".to_vec() } else { Vec::new() },
            ]);
        }
        if Store::enqueue_writes_intent(jobs) {
            self.intend_due(queue).await;
        }
        let mut reply = array(self.run_script(&scripts::ENQUEUE, keys, args).await?)?.into_iter();
        let now = int(next(&mut reply)?)? as u64;
        let default_max = int(next(&mut reply)?)? as u32;
        let default_backoff = Backoff::decode(&string(next(&mut reply)?)?);
        let default_timeout = int(next(&mut reply)?)? as u64;
        let answered = &jobs[..reply.len().min(jobs.len())];
        if let Some(delay) = answered.iter().map(|j| j.delay_ms).filter(|d| *d > 0).min() {
            self.mark_due(queue, now + delay).await;
        }
        // The reaper expires a job no lease took by its expire time.
        if let Some(at) = answered
            .iter()
            .map(|j| j.expire_ms)
            .filter(|x| *x > 0)
            .min()
        {
            self.mark_due(queue, at).await;
        }
        let mut out = Vec::with_capacity(answered.len());
        for j in answered {
            let item = bytes(next(&mut reply)?)?;
            let backoff = || j.backoff.clone().or_else(|| default_backoff.clone());
            let max = j.max_attempts.unwrap_or(default_max);
            let timeout = j.timeout_ms.unwrap_or(default_timeout);
            out.push(if item == b"C" {
                Ok(EnqueueOutcome {
                    job: created_job(j, now, max, backoff(), timeout),
                    created: true,
                })
            } else if let Some(at) = item.strip_prefix(b"G") {
                // Created by an earlier write of this id (a retry whose first write's reply
                // was lost) and gone since: the job as that write created it.
                let at = std::str::from_utf8(at)
                    .ok()
                    .and_then(|s| s.parse::<u64>().ok())
                    .ok_or_else(|| bad("enqueue.lua: a remembered id without its time"))?;
                Ok(EnqueueOutcome {
                    job: created_job(j, at, max, backoff(), timeout),
                    created: false,
                })
            } else {
                job_from_record(queue, j.id.clone(), &item).map(|job| EnqueueOutcome {
                    job,
                    created: false,
                })
            });
        }
        Ok(out)
    }

    /// Reads one job (`None` if there is none with that id).
    pub async fn get_job(&self, queue: &QueueName, id: &str) -> Result<Option<Job>, StoreError> {
        // One read-only script: the record and its history as of the same moment, also
        // on a Redis past maxmemory (which refuses MULTI).
        let reply = self
            .run_script(
                &scripts::GET_JOB,
                &Keys::new(queue),
                vec![id.as_bytes().to_vec()],
            )
            .await?;
        let mut reply = array(reply)?.into_iter();
        let rec = match next(&mut reply)? {
            Value::Nil => return Ok(None),
            v => bytes(v)?,
        };
        let history = next(&mut reply)?;
        let mut job = job_from_record(queue, id.to_owned(), &rec)?;
        with_history(&mut job, history)?;
        let mut data = array(next(&mut reply)?)?.into_iter();
        with_progress(&mut job.data, next(&mut data)?)?;
        job.data.checkpoint = bytes(next(&mut data)?)?;
        job.data.result = bytes(next(&mut data)?)?;
        if let Some(Value::BulkString(x)) = data.next() {
            job.cancel_reason = super::codec::cancel_field(&x).1;
        }
        if job.state == JobState::Active {
            job.lease_deadline_ms = match next(&mut reply)? {
                Value::Nil => 0,
                v => int(v)?.max(0) as u64,
            };
        }
        Ok(Some(job))
    }
}

/// The stored form of a job `enqueue.lua` just created at `now` (ms), with the max
/// attempts, backoff and timeout it got (its own, else the defaults).
fn created_job(
    j: &NewJob,
    now: u64,
    max_attempts: u32,
    backoff: Option<Backoff>,
    timeout_ms: u64,
) -> Job {
    Job {
        queue: j.queue.clone(),
        id: j.id.clone(),
        name: j.name.clone(),
        payload: j.payload.clone(),
        content_type: j.content_type.clone(),
        metadata: j.metadata.clone(),
        state: if j.delay_ms > 0 {
            JobState::Delayed
        } else {
            JobState::Waiting
        },
        priority: j.priority,
        max_attempts,
        attempts_made: 0,
        backoff,
        timeout_ms,
        errors: Vec::new(),
        errors_dropped: 0,
        dead_reason: None,
        create_ms: now,
        ready_ms: now + j.delay_ms,
        lease_ms: 0,
        finish_ms: 0,
        idempotency_key: super::codec::idempotency_key(&j.queue, &j.id, now),
        replays: 0,
        group_key: j.group_key.clone(),
        expire_ms: j.expire_ms,
        cancel_ms: 0,
        data: Default::default(),
        lease_deadline_ms: 0,
        worker_id: String::new(),
        cancel_reason: String::new(),
    }
}
