//! [`Store`]: one method per script, on one multiplexed, self-reconnecting connection
//! ([`Conn`]: it also connects again when Redis answers as a replica).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::aio::ConnectionManagerConfig;
use redis::Value;

use super::codec::{
    array, bad, bytes, encode_body, int, job_from_record, next, string, with_history,
};
use super::conn::Conn;
use super::keys::Keys;
use super::scripts::{self, NamedScript};
use super::types::*;
use super::StoreError;
use crate::jobs::{Backoff, DeadReason, Job, JobState, LeasedJob, NewJob, QueueName};

/// A handle on jobwire's Redis; cheap to clone (one shared multiplexed connection).
#[derive(Clone)]
pub struct Store {
    pub(super) conn: Conn,
    /// Queues this store registered, and when (see `registry.rs`).
    pub(super) known_queues: Arc<Mutex<HashMap<QueueName, Instant>>>,
    /// The most queues the registry may hold.
    pub(super) max_queues: usize,
    /// Script calls that found their script missing (NOSCRIPT) and ran again after loading
    /// it; see [`Store::script_reloads`].
    reloads: Arc<AtomicU64>,
}

/// The byte budget of one script call, as `scripts/common.lua` sets it (`CALL_BYTES`): a
/// script walking jobs stops taking the next one once the records it read (or, for
/// enqueue, the bodies it wrote) reach it, and replies for the jobs it did; the store then
/// calls again for the rest. Copying a record costs about 2-5 ms per MiB inside Redis
/// (`tests/it/script_time.rs`), so a call stays near 10 ms with max-size payloads.
pub const CALL_BYTES: usize = 1 << 20;

/// Most error text (message + details bytes) one `fail.lua` call takes. Recording an error
/// costs about 1.3 ms per 72 KiB inside Redis (measured: `tests/it/script_time.rs`), so a
/// call stays near 5 ms; a batch of small errors still goes in one call.
pub const FAIL_CALL_BYTES: usize = 256 * 1024;

/// Appends (id, lease token) pairs as script arguments.
fn push_pairs(args: &mut Vec<Vec<u8>>, items: &[(String, String)]) {
    for (id, token) in items {
        args.push(id.clone().into_bytes());
        args.push(token.clone().into_bytes());
    }
}

fn opt_ms(v: i64) -> Option<u64> {
    u64::try_from(v).ok()
}

fn state(s: &str) -> Result<JobState, StoreError> {
    JobState::parse(s).ok_or_else(|| bad("unknown job state"))
}

/// Decodes one settle reply; `done` gets the values after 'OK' or 'DONE' and whether the
/// settle was a repeat of one already applied ('DONE').
fn settle_status<T>(
    item: Value,
    done: impl FnOnce(std::vec::IntoIter<Value>, bool) -> Result<T, StoreError>,
) -> Result<Settle<T>, StoreError> {
    let mut it = array(item)?.into_iter();
    match string(next(&mut it)?)?.as_str() {
        "OK" => Ok(Settle::Done(done(it, false)?)),
        "DONE" => Ok(Settle::Done(done(it, true)?)),
        "NOT_FOUND" => Ok(Settle::NotFound),
        "LEASE_LOST" => Ok(Settle::LeaseLost(string(next(&mut it)?)?)),
        _ => Err(bad("unknown settle status")),
    }
}

impl Store {
    /// Connects to `url` (`redis://`, `rediss://`, `redis+unix://`); every command then
    /// times out after `timeout`, so a Redis outage gives errors, not hangs.
    pub async fn connect(url: &str, timeout: Duration) -> Result<Store, StoreError> {
        let client = redis::Client::open(url)?;
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(timeout))
            .set_connection_timeout(Some(timeout))
            .set_number_of_retries(1);
        let conn = Conn::new(client, config)?;
        Ok(Store {
            conn,
            known_queues: Arc::default(),
            reloads: Arc::default(),
            max_queues: super::registry::DEFAULT_MAX_QUEUES,
        })
    }

    /// How many script calls so far found their script missing in Redis (after a restart,
    /// a failover or `SCRIPT FLUSH`) and were sent again after loading it. Such a call ran
    /// later than its first write, behind commands sent after it on the connection; a
    /// caller that counted on that order (an enqueue's early wake-up) compares this count
    /// before and after its call.
    pub fn script_reloads(&self) -> u64 {
        self.reloads.load(Ordering::Acquire)
    }

    /// EVALSHA of `script` with `keys`, the wake channel and `args`; on NOSCRIPT, SCRIPT
    /// LOAD and EVALSHA again (counted in [`Store::script_reloads`]).
    pub(super) async fn run_script(
        &self,
        script: &NamedScript,
        keys: &Keys,
        args: Vec<Vec<u8>>,
    ) -> Result<Value, StoreError> {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(script.script.get_hash())
            .arg(keys.all.len())
            .arg(&keys.all[..])
            .arg(&keys.wake)
            .arg(args);
        let mut conn = self.conn.clone();
        let start = std::time::Instant::now();
        let mut result = cmd.query_async::<Value>(&mut conn).await;
        if matches!(&result, Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript))
        {
            self.reloads.fetch_add(1, Ordering::AcqRel);
            result = match script.script.load_async(&mut conn).await {
                Ok(_) => cmd.query_async(&mut conn).await,
                Err(e) => Err(e),
            };
        }
        let result = result.map_err(StoreError::from);
        let kind = match &result {
            Ok(_) => None,
            Err(StoreError::Unavailable(_)) => Some("unavailable"),
            Err(_) => Some("error"),
        };
        crate::metrics::redis_call(script.name, start.elapsed().as_secs_f64(), kind);
        result
    }

    /// Runs a settle-type script (fail, renew) and decodes its per-job replies, each
    /// `{'OK', ...}` or `{'DONE', ...}` (a repeat; both decoded by `done`), `{'NOT_FOUND'}`
    /// or `{'LEASE_LOST', state}`.
    async fn settle_call<T>(
        &self,
        script: &NamedScript,
        queue: &QueueName,
        args: Vec<Vec<u8>>,
        done: impl Fn(std::vec::IntoIter<Value>, bool) -> Result<T, StoreError>,
    ) -> Result<Vec<Settle<T>>, StoreError> {
        let reply = array(self.run_script(script, &Keys::new(queue), args).await?)?;
        reply
            .into_iter()
            .map(|item| settle_status(item, &done))
            .collect()
    }

    /// PING: is Redis answering?
    pub async fn ping(&self) -> Result<(), StoreError> {
        let mut conn = self.conn.clone();
        let _: String = redis::cmd("PING").query_async(&mut conn).await?;
        Ok(())
    }

    /// Redis's `maxmemory-policy` (jobwire needs `noeviction`: eviction deletes jobs).
    pub async fn maxmemory_policy(&self) -> Result<String, StoreError> {
        let mut conn = self.conn.clone();
        let v: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("maxmemory-policy")
            .query_async(&mut conn)
            .await?;
        v.get(1)
            .cloned()
            .ok_or_else(|| bad("CONFIG GET maxmemory-policy"))
    }

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
        self.remember_queue(queue).await?;
        let keys = Keys::new(queue);
        let mut out = Vec::with_capacity(jobs.len());
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
            let done = self
                .enqueue_call(queue, &keys, &jobs[start..end], default_max_attempts)
                .await?;
            if done.is_empty() {
                return Err(bad("enqueue.lua answered for no job"));
            }
            start += done.len();
            out.extend(done);
        }
        Ok(out)
    }

    /// One `enqueue.lua` call for `jobs`: the outcomes of the first jobs (all of them unless
    /// the call's byte budget ran out).
    async fn enqueue_call(
        &self,
        queue: &QueueName,
        keys: &Keys,
        jobs: &[NewJob],
        default_max_attempts: u32,
    ) -> Result<Vec<EnqueueOutcome>, StoreError> {
        let mut args: Vec<Vec<u8>> = Vec::with_capacity(2 + jobs.len() * 8);
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
            ]);
        }
        if jobs.iter().any(|j| j.delay_ms > 0) {
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
        answered
            .iter()
            .map(|j| {
                let item = bytes(next(&mut reply)?)?;
                if item == b"C" {
                    let backoff = j.backoff.clone().or_else(|| default_backoff.clone());
                    let max = j.max_attempts.unwrap_or(default_max);
                    let timeout = j.timeout_ms.unwrap_or(default_timeout);
                    Ok(EnqueueOutcome {
                        job: created_job(j, now, max, backoff, timeout),
                        created: true,
                    })
                } else {
                    Ok(EnqueueOutcome {
                        job: job_from_record(queue, j.id.clone(), &item)?,
                        created: false,
                    })
                }
            })
            .collect()
    }

    /// Reads one job (`None` if there is none with that id).
    pub async fn get_job(&self, queue: &QueueName, id: &str) -> Result<Option<Job>, StoreError> {
        let mut conn = self.conn.clone();
        let keys = Keys::new(queue);
        // One MULTI: the record and its history as of the same moment.
        let (rec, history): (Option<Vec<u8>>, redis::Value) = redis::pipe()
            .atomic()
            .get(keys.job(id))
            .hgetall(keys.errors(id))
            .query_async(&mut conn)
            .await?;
        let Some(rec) = rec else { return Ok(None) };
        let mut job = job_from_record(queue, id.to_owned(), &rec)?;
        with_history(&mut job, history)?;
        Ok(Some(job))
    }

    /// Promotes due delayed jobs, then leases up to `worker_ids.len()` jobs (`lease.lua`):
    /// the i-th job goes to `worker_ids[i]`, with deadline now + `lease_ms`. `call` is this
    /// call's id ([`new_lease_call_id`]): the jobs stay recorded under it as unconfirmed
    /// until a later call lists it in `confirm` (or [`Store::confirm_lease_calls`], or a
    /// renewal of one of its leases); if this call fails, release it with
    /// [`Store::release_lease_call`]. See common.lua, "Lost lease replies".
    pub async fn lease(
        &self,
        queue: &QueueName,
        worker_ids: &[&str],
        lease_ms: u64,
        call: &str,
        confirm: &[String],
    ) -> Result<LeaseBatch, StoreError> {
        let keys = Keys::new(queue);
        let tokens: Vec<String> = (1..=worker_ids.len())
            .map(|i| format!("{call}-{i}"))
            .collect();
        let mut args = Vec::with_capacity(4 + confirm.len() + worker_ids.len());
        args.push(worker_ids.len().to_string().into_bytes());
        args.push(lease_ms.to_string().into_bytes());
        args.push(call.as_bytes().to_vec());
        args.push(confirm.len().to_string().into_bytes());
        args.extend(confirm.iter().map(|c| c.as_bytes().to_vec()));
        args.extend(worker_ids.iter().map(|w| w.as_bytes().to_vec()));
        // The intent and the script leave together (one round trip, in this order on the
        // connection), so the lease call stays right behind an Enqueue that woke it.
        let (_, reply) = tokio::join!(
            self.intend_due(queue),
            self.run_script(&scripts::LEASE, &keys, args)
        );
        let mut reply = array(reply?)?.into_iter();
        let now_ms = int(next(&mut reply)?)? as u64;
        let next_due_ms = opt_ms(int(next(&mut reply)?)?);
        let paused = int(next(&mut reply)?)? == 1;
        let limited = match string(next(&mut reply)?)?.as_str() {
            "" => None,
            "rate" => Some(Limit::Rate),
            "throttle" => Some(Limit::Throttle),
            "concurrency" => Some(Limit::Concurrency),
            _ => return Err(bad("lease limit")),
        };
        let wait_until_ms = opt_ms(int(next(&mut reply)?)?);
        let more = int(next(&mut reply)?)? == 1;
        let mut jobs = Vec::new();
        for token in tokens {
            let Some(id) = reply.next() else { break };
            let id = string(id)?;
            let deadline_ms = int(next(&mut reply)?)? as u64;
            let job = job_from_record(queue, id, &bytes(next(&mut reply)?)?)?;
            jobs.push(LeasedJob {
                attempt: job.attempts_made,
                job,
                token,
                deadline_ms,
            });
        }
        if let Some(first) = jobs.iter().map(|j| j.deadline_ms).min() {
            self.mark_due(queue, first).await;
        }
        Ok(LeaseBatch {
            now_ms,
            jobs,
            next_due_ms,
            paused,
            limited,
            wait_until_ms,
            more,
        })
    }

    /// Completes leased jobs whose token matches (`ack.lua`). An ack repeated with the token
    /// of one already applied is `Done` with `repeated` set (nothing changes). A call whose
    /// byte budget ([`CALL_BYTES`]) runs out answers for the first items; the rest go in the
    /// next call.
    pub async fn ack(
        &self,
        queue: &QueueName,
        items: &[(String, String)],
    ) -> Result<Vec<Settle<AckOutcome>>, StoreError> {
        let mut out = Vec::with_capacity(items.len());
        while out.len() < items.len() {
            let done = self.ack_call(queue, &items[out.len()..]).await?;
            if done.is_empty() {
                return Err(bad("ack.lua answered for no job"));
            }
            out.extend(done);
        }
        Ok(out)
    }

    /// One `ack.lua` call: the outcomes of the first items (all unless the budget ran out).
    async fn ack_call(
        &self,
        queue: &QueueName,
        items: &[(String, String)],
    ) -> Result<Vec<Settle<AckOutcome>>, StoreError> {
        let mut args = vec![items.len().to_string().into_bytes()];
        push_pairs(&mut args, items);
        let keys = Keys::new(queue);
        let (_, reply) = tokio::join!(
            self.intend_due(queue),
            self.run_script(&scripts::ACK, &keys, args)
        );
        let reply = reply?;
        let mut reply = array(reply)?.into_iter();
        let now_ms = int(next(&mut reply)?)? as u64;
        let answered = (reply.len() / 3).min(items.len());
        let outcomes: Vec<Settle<AckOutcome>> = items[..answered]
            .iter()
            .map(|_| {
                let status = string(next(&mut reply)?)?;
                let lease_ms = int(next(&mut reply)?)? as u64;
                let text = string(next(&mut reply)?)?;
                Ok(match status.as_str() {
                    "OK" | "DONE" => Settle::Done(AckOutcome {
                        lease_ms,
                        name: text,
                        now_ms,
                        repeated: status == "DONE",
                    }),
                    "NOT_FOUND" => Settle::NotFound,
                    "LEASE_LOST" => Settle::LeaseLost(text),
                    _ => return Err(bad("unknown settle status")),
                })
            })
            .collect::<Result<_, StoreError>>()?;
        if outcomes.iter().any(|o| matches!(o, Settle::Done(_))) {
            // Retention: the reaper applies the age limit and counts what was trimmed.
            self.mark_due(queue, now_ms).await;
        }
        Ok(outcomes)
    }

    /// Fails the current attempt of leased jobs whose token matches (`fail.lua`): retry,
    /// rate-limited return, or dead letter, each job in one atomic step. The items go in
    /// script calls of at most [`FAIL_CALL_BYTES`] of error text each (at least one item),
    /// and a call whose byte budget ([`CALL_BYTES`]) runs out on the records answers for its
    /// first items (the rest go in the next call), so no call holds Redis long; outcomes keep the items' order.
    /// A fail repeated with the token of one already applied is `Done` with the first
    /// outcome and `repeated` set (nothing changes).
    pub async fn fail(
        &self,
        queue: &QueueName,
        items: &[FailItem],
    ) -> Result<Vec<Settle<FailOutcome>>, StoreError> {
        let mut out = Vec::with_capacity(items.len());
        let mut start = 0;
        while start < items.len() {
            let mut end = start + 1;
            let mut size = items[start].message.len() + items[start].details.len();
            while end < items.len() {
                size += items[end].message.len() + items[end].details.len();
                if size > FAIL_CALL_BYTES {
                    break;
                }
                end += 1;
            }
            let done = self.fail_call(queue, &items[start..end]).await?;
            if done.is_empty() {
                return Err(bad("fail.lua answered for no job"));
            }
            // Short when the call's byte budget ran out: the rest go in the next call.
            start += done.len();
            out.extend(done);
        }
        Ok(out)
    }

    /// One `fail.lua` call for `items`.
    async fn fail_call(
        &self,
        queue: &QueueName,
        items: &[FailItem],
    ) -> Result<Vec<Settle<FailOutcome>>, StoreError> {
        let mut args = vec![items.len().to_string().into_bytes()];
        for i in items {
            args.extend([
                i.id.clone().into_bytes(),
                i.token.clone().into_bytes(),
                i.disposition.as_str().as_bytes().to_vec(),
                i.message.clone().into_bytes(),
                i.error_type.clone().into_bytes(),
                i.details.clone().into_bytes(),
                i.retry_after_ms
                    .map_or(-1, |ms| ms as i64)
                    .to_string()
                    .into_bytes(),
                rand::random::<f64>().to_string().into_bytes(),
                if i.pause_queue {
                    b"1".to_vec()
                } else {
                    b"0".to_vec()
                },
            ]);
        }
        let (_, outcomes) = tokio::join!(
            self.intend_due(queue),
            self.settle_call(&scripts::FAIL, queue, args, |mut it, repeated| {
                Ok(FailOutcome {
                    repeated,
                    state: state(&string(next(&mut it)?)?)?,
                    at_ms: int(next(&mut it)?)? as u64,
                    dead_reason: DeadReason::parse(&string(next(&mut it)?)?),
                    lease_ms: int(next(&mut it)?)? as u64,
                    name: string(next(&mut it)?)?,
                    attempt: int(next(&mut it)?)? as u32,
                    now_ms: int(next(&mut it)?)? as u64,
                })
            })
        );
        let outcomes = outcomes?;
        // A retry's due time, or a dead letter's retention, is reaper work.
        let now = outcomes.iter().find_map(|o| match o {
            Settle::Done(f) => Some(f.now_ms),
            _ => None,
        });
        if let Some(now) = now {
            self.mark_due(queue, now).await;
        }
        Ok(outcomes)
    }

    /// Sets the deadline of leases whose token matches to now + `lease_ms`, capped by the
    /// attempt timeout (`renew.lua`); `Done` carries the new deadline, ms.
    pub async fn renew(
        &self,
        queue: &QueueName,
        items: &[(String, String)],
        lease_ms: u64,
    ) -> Result<Vec<Settle<u64>>, StoreError> {
        let mut args = vec![
            lease_ms.to_string().into_bytes(),
            items.len().to_string().into_bytes(),
        ];
        push_pairs(&mut args, items);
        self.settle_call(&scripts::RENEW, queue, args, |mut it, _| {
            Ok(int(next(&mut it)?)? as u64)
        })
        .await
    }

    /// Hands leased jobs back to waiting without consuming the attempt (`release.lua`);
    /// returns how many were released. A call whose byte budget ([`CALL_BYTES`]) runs out
    /// answers for its first items; the rest go in the next call.
    pub async fn release(
        &self,
        queue: &QueueName,
        items: &[(String, String)],
    ) -> Result<usize, StoreError> {
        let (mut start, mut released) = (0, 0);
        while start < items.len() {
            let rest = &items[start..];
            let mut args = vec![rest.len().to_string().into_bytes()];
            push_pairs(&mut args, rest);
            let reply = array(
                self.run_script(&scripts::RELEASE, &Keys::new(queue), args)
                    .await?,
            )?;
            if reply.is_empty() {
                return Err(bad("release.lua answered for no job"));
            }
            start += reply.len();
            for v in reply {
                if int(v)? == 1 {
                    released += 1;
                }
            }
        }
        Ok(released)
    }

    /// The server got the replies of these lease calls of `queue` and handed their jobs to
    /// its streams (`confirm_calls.lua`): their leases now count as delivered.
    pub async fn confirm_lease_calls(
        &self,
        queue: &QueueName,
        calls: &[String],
    ) -> Result<(), StoreError> {
        if calls.is_empty() {
            return Ok(());
        }
        let args = calls.iter().map(|c| c.as_bytes().to_vec()).collect();
        self.run_script(&scripts::CONFIRM_CALLS, &Keys::new(queue), args)
            .await?;
        Ok(())
    }

    /// The reply of lease call `call` was lost (`release_call.lua`): its jobs go back to
    /// waiting without an attempt charged, and the call leases nothing if it runs later
    /// (within `tombstone_ms`). Idempotent; returns how many jobs went back.
    pub async fn release_lease_call(
        &self,
        queue: &QueueName,
        call: &str,
        tombstone_ms: u64,
    ) -> Result<u64, StoreError> {
        let args = vec![
            call.as_bytes().to_vec(),
            tombstone_ms.to_string().into_bytes(),
        ];
        let reply = self
            .run_script(&scripts::RELEASE_CALL, &Keys::new(queue), args)
            .await?;
        Ok(int(reply)? as u64)
    }

    /// Fails up to `max` expired leases, promotes due delayed jobs and applies the retention
    /// limits (`reap.lua`).
    pub async fn reap(&self, queue: &QueueName, max: usize) -> Result<ReapReport, StoreError> {
        let mut args = vec![max.to_string().into_bytes()];
        args.extend((0..max).map(|_| rand::random::<f64>().to_string().into_bytes()));
        let mut reply = array(
            self.run_script(&scripts::REAP, &Keys::new(queue), args)
                .await?,
        )?
        .into_iter();
        let promoted = int(next(&mut reply)?)? as u64;
        let next_deadline_ms = opt_ms(int(next(&mut reply)?)?);
        let next_due_ms = opt_ms(int(next(&mut reply)?)?);
        let next_retention_ms = opt_ms(int(next(&mut reply)?)?);
        let trimmed_completed = int(next(&mut reply)?)? as u64;
        let trimmed_dead = int(next(&mut reply)?)? as u64;
        let more = int(next(&mut reply)?)? == 1;
        let mut reaped = Vec::new();
        for item in reply {
            let mut f = array(item)?.into_iter();
            reaped.push(ReapedJob {
                id: string(next(&mut f)?)?,
                name: string(next(&mut f)?)?,
                error_type: string(next(&mut f)?)?,
                state: state(&string(next(&mut f)?)?)?,
                dead_reason: DeadReason::parse(&string(next(&mut f)?)?),
                attempt: int(next(&mut f)?)? as u32,
            });
        }
        Ok(ReapReport {
            promoted,
            next_deadline_ms,
            next_due_ms,
            next_retention_ms,
            trimmed_completed,
            trimmed_dead,
            reaped,
            more,
        })
    }
}

/// A fresh lease call id (128 random bits, hex): the prefix of the call's lease tokens.
pub fn new_lease_call_id() -> String {
    format!("{:032x}", rand::random::<u128>())
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
    }
}
