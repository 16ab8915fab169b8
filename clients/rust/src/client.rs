//! [`Client`]: the producer side (enqueue, get_job, cancel, delete) and thin wrappers of the
//! dead-letter, queue and group services, over one HTTP/2 connection with optional TLS and
//! bearer token.

pub(crate) mod conn;
mod control;
mod groups;
mod options;

use std::future::Future;
use std::time::Duration;

use crate::backoff::FullJitter;
use crate::pb;
use crate::pb::dead_letter_service_client::DeadLetterServiceClient;
use crate::pb::group_service_client::GroupServiceClient;
use crate::pb::job_service_client::JobServiceClient;
use crate::pb::queue_service_client::QueueServiceClient;
use crate::pb::worker_service_client::WorkerServiceClient;
use crate::{Error, Payload};

pub use conn::Conn;
pub use control::{CancelledJobs, Report};
pub use options::{Backoff, ClientOptions, EnqueueOptions, Keepalive, NewJob, TlsOptions};

/// A jobwire client: cheap to clone (clones share the connection), safe to use from many
/// tasks at once.
#[derive(Clone)]
pub struct Client {
    conn: Conn,
}

/// The outcome of an Enqueue.
#[derive(Clone, Debug)]
pub struct Enqueued {
    /// The job as stored (for a duplicate job_id: the existing job).
    pub job: pb::Job,
    /// False when a job with the same `job_id` already existed (the call was a no-op: job_id
    /// is the idempotency key of Enqueue).
    pub created: bool,
}

/// How many times an idempotent call is tried when the server is UNAVAILABLE.
const IDEMPOTENT_TRIES: u32 = 5;

impl Client {
    /// Connects to `target` (`host:port`, `http://host:port`, or `https://host:port`; TLS is
    /// used when `options.tls` is set or the scheme is https). Fails fast when the server
    /// cannot be reached; once connected, the channel reconnects by itself.
    pub async fn connect(target: &str, options: ClientOptions) -> Result<Client, Error> {
        Ok(Client {
            conn: conn::connect(target, &options).await?,
        })
    }

    /// The underlying channel with the token interceptor, for the generated clients in
    /// [`pb`] (e.g. `pb::job_service_client::JobServiceClient::new(client.conn())`).
    pub fn conn(&self) -> Conn {
        self.conn.clone()
    }

    pub(crate) fn jobs(&self) -> JobServiceClient<Conn> {
        JobServiceClient::new(self.conn.clone())
    }

    pub(crate) fn workers(&self) -> WorkerServiceClient<Conn> {
        WorkerServiceClient::new(self.conn.clone())
    }

    fn dead_letters(&self) -> DeadLetterServiceClient<Conn> {
        DeadLetterServiceClient::new(self.conn.clone())
    }

    fn queues(&self) -> QueueServiceClient<Conn> {
        QueueServiceClient::new(self.conn.clone())
    }

    fn groups(&self) -> GroupServiceClient<Conn> {
        GroupServiceClient::new(self.conn.clone())
    }

    /// Enqueues job `name` on `queue` with `payload` (bytes, or [`Payload::json`]).
    /// With `options.job_id` the call is idempotent (a second one with the same id returns
    /// the existing job, `created` false) and is retried while the server is UNAVAILABLE.
    /// Without one the server chooses the id and the call is not repeated, except after
    /// NOT_REPLICATED (`--redis-wait-replicas`: the job was written on the Redis master):
    /// the retries carry the id the error names ([`Error::not_replicated_job_id`]), so they
    /// find that job (`created` stays true: this call created it); once the tries are spent
    /// the last error, which names the id, is returned.
    pub async fn enqueue(
        &self,
        queue: &str,
        name: &str,
        payload: impl Into<Payload>,
        options: EnqueueOptions,
    ) -> Result<Enqueued, Error> {
        let idempotent = options.job_id.is_some();
        let spec = NewJob::new(queue, name, payload, options).into_spec();
        let call = |spec: &pb::JobSpec| {
            let (mut jobs, spec) = (self.jobs(), spec.clone());
            async move { jobs.enqueue(pb::EnqueueRequest { job: Some(spec) }).await }
        };
        let r = if idempotent {
            retry_unavailable(|| call(&spec)).await?
        } else {
            match call(&spec).await {
                Ok(r) => r.into_inner(),
                Err(s) => {
                    let e = Error::from(s);
                    let Some(job_id) = e.not_replicated_job_id() else {
                        return Err(e);
                    };
                    let named = pb::JobSpec { job_id, ..spec };
                    let r = retry_unavailable_tries(|| call(&named), IDEMPOTENT_TRIES - 1).await?;
                    pb::EnqueueResponse { created: true, ..r }
                }
            }
        };
        Ok(Enqueued {
            job: r.job.unwrap_or_default(),
            created: r.created,
        })
    }

    /// [`Client::enqueue`] with a ready-made [`pb::JobSpec`], sent once (no retries).
    pub async fn enqueue_spec(&self, spec: pb::JobSpec) -> Result<Enqueued, Error> {
        let r = self
            .jobs()
            .enqueue(pb::EnqueueRequest { job: Some(spec) })
            .await?
            .into_inner();
        Ok(Enqueued {
            job: r.job.unwrap_or_default(),
            created: r.created,
        })
    }

    /// Enqueues several jobs in one call (EnqueueBatch, up to the server's batch limit).
    /// Returns one result per job, in order: a job refused on its own (invalid field) is an
    /// `Err` item without failing the others. Retried while UNAVAILABLE when every job has
    /// a `job_id`.
    pub async fn enqueue_batch(
        &self,
        jobs: Vec<NewJob>,
    ) -> Result<Vec<Result<Enqueued, pb::ItemError>>, Error> {
        let idempotent = jobs.iter().all(|j| j.options.job_id.is_some());
        let specs: Vec<pb::JobSpec> = jobs.into_iter().map(NewJob::into_spec).collect();
        self.enqueue_specs(specs, idempotent).await
    }

    /// [`Client::enqueue_batch`] with ready-made [`pb::JobSpec`]s (no conversion).
    pub async fn enqueue_specs(
        &self,
        specs: Vec<pb::JobSpec>,
        idempotent: bool,
    ) -> Result<Vec<Result<Enqueued, pb::ItemError>>, Error> {
        let call = || {
            let (mut c, jobs) = (self.jobs(), specs.clone());
            async move { c.enqueue_batch(pb::EnqueueBatchRequest { jobs }).await }
        };
        let r = if idempotent {
            retry_unavailable(call).await?
        } else {
            call().await?.into_inner()
        };
        Ok(r.results
            .into_iter()
            .map(|x| match x.error {
                Some(e) => Err(e),
                None => Ok(Enqueued {
                    job: x.job.unwrap_or_default(),
                    created: x.created,
                }),
            })
            .collect())
    }

    /// The job `job_id` of `queue` with its full error history (NOT_FOUND when unknown).
    pub async fn get_job(&self, queue: &str, job_id: &str) -> Result<pb::Job, Error> {
        let req = pb::GetJobRequest {
            queue: queue.into(),
            job_id: job_id.into(),
        };
        let r = retry_unavailable(|| {
            let (mut c, req) = (self.jobs(), req.clone());
            async move { c.get_job(req).await }
        })
        .await?;
        Ok(r.job.unwrap_or_default())
    }

    /// One page of `queue`'s jobs in `state` (WAITING, DELAYED, ACTIVE, COMPLETED, DEAD, ...),
    /// in that state's order (waiting in lease order, delayed by due time, active by lease
    /// deadline, completed by finish time, dead by death time), without payloads (`get_job`
    /// has them); `page_size` 0: the server's default (100). Pass the response's
    /// `next_page_token` for the next page; only an empty one ends the walk.
    pub async fn list_jobs(
        &self,
        queue: &str,
        state: pb::JobState,
        page_size: i32,
        page_token: &str,
        filter: Option<pb::ListJobsFilter>,
    ) -> Result<pb::ListJobsResponse, Error> {
        let req = pb::ListJobsRequest {
            queue: queue.into(),
            state: state as i32,
            page_size,
            page_token: page_token.into(),
            filter,
        };
        retry_unavailable(|| {
            let (mut c, req) = (self.jobs(), req.clone());
            async move { c.list_jobs(req).await }
        })
        .await
    }

    /// One page of `queue`'s dead letters (oldest death first; `page_size` 0: the server's
    /// default). Pass the response's `next_page_token` for the next page.
    pub async fn list_dead_letters(
        &self,
        queue: &str,
        page_size: i32,
        page_token: &str,
        filter: Option<pb::DeadLetterFilter>,
    ) -> Result<pb::ListDeadLettersResponse, Error> {
        let req = pb::ListDeadLettersRequest {
            queue: queue.into(),
            page_size,
            page_token: page_token.into(),
            filter,
        };
        retry_unavailable(|| {
            let (mut c, req) = (self.dead_letters(), req.clone());
            async move { c.list_dead_letters(req).await }
        })
        .await
    }

    /// One dead letter of `queue`.
    pub async fn get_dead_letter(&self, queue: &str, job_id: &str) -> Result<pb::Job, Error> {
        let req = pb::GetDeadLetterRequest {
            queue: queue.into(),
            job_id: job_id.into(),
        };
        let r = retry_unavailable(|| {
            let (mut c, req) = (self.dead_letters(), req.clone());
            async move { c.get_dead_letter(req).await }
        })
        .await?;
        Ok(r.dead_letter.unwrap_or_default())
    }

    /// Replays dead letters (by id, or by `filter` when `job_ids` is empty) as fresh
    /// attempts. Not retried: a replay is not idempotent.
    pub async fn replay_dead_letters(
        &self,
        queue: &str,
        job_ids: Vec<String>,
        filter: Option<pb::DeadLetterFilter>,
    ) -> Result<pb::ReplayDeadLettersResponse, Error> {
        let req = pb::ReplayDeadLettersRequest {
            queue: queue.into(),
            job_ids,
            filter,
        };
        Ok(self
            .dead_letters()
            .replay_dead_letters(req)
            .await?
            .into_inner())
    }

    /// Deletes dead letters (by id, or by `filter` when `job_ids` is empty).
    pub async fn delete_dead_letters(
        &self,
        queue: &str,
        job_ids: Vec<String>,
        filter: Option<pb::DeadLetterFilter>,
    ) -> Result<pb::DeleteDeadLettersResponse, Error> {
        let req = pb::DeleteDeadLettersRequest {
            queue: queue.into(),
            job_ids,
            filter,
        };
        Ok(self
            .dead_letters()
            .delete_dead_letters(req)
            .await?
            .into_inner())
    }

    /// Every known queue with its counts.
    pub async fn list_queues(&self) -> Result<Vec<pb::QueueStats>, Error> {
        let r = retry_unavailable(|| {
            let mut c = self.queues();
            async move { c.list_queues(pb::ListQueuesRequest {}).await }
        })
        .await?;
        Ok(r.queues)
    }

    /// Every replica's worker streams (replica, stream id, worker id, queues, free credits,
    /// held leases, connected since, last heard); `queue` non-empty: only the streams that
    /// lease from it. Other replicas' streams are up to one report interval (5 s) old.
    pub async fn list_workers(&self, queue: &str) -> Result<pb::ListWorkersResponse, Error> {
        let queue = queue.to_owned();
        retry_unavailable(|| {
            let (mut c, queue) = (self.queues(), queue.clone());
            async move { c.list_workers(pb::ListWorkersRequest { queue }).await }
        })
        .await
    }

    /// `queue`'s counts (waiting, delayed, active, completed, dead, cancelled, expired),
    /// paused flag, config, and its groups with waiting jobs (`groups_waiting`,
    /// `top_groups`).
    pub async fn get_queue_stats(&self, queue: &str) -> Result<pb::QueueStats, Error> {
        let queue = queue.to_owned();
        let r = retry_unavailable(|| {
            let (mut c, queue) = (self.queues(), queue.clone());
            async move { c.get_queue_stats(pb::GetQueueStatsRequest { queue }).await }
        })
        .await?;
        Ok(r.stats.unwrap_or_default())
    }

    /// Pauses `queue`: nothing is leased from it until [`Client::resume_queue`].
    pub async fn pause_queue(&self, queue: &str) -> Result<(), Error> {
        let queue = queue.to_owned();
        retry_unavailable(|| {
            let (mut c, queue) = (self.queues(), queue.clone());
            async move { c.pause_queue(pb::PauseQueueRequest { queue }).await }
        })
        .await?;
        Ok(())
    }

    /// Resumes a paused `queue`.
    pub async fn resume_queue(&self, queue: &str) -> Result<(), Error> {
        let queue = queue.to_owned();
        retry_unavailable(|| {
            let (mut c, queue) = (self.queues(), queue.clone());
            async move { c.resume_queue(pb::ResumeQueueRequest { queue }).await }
        })
        .await?;
        Ok(())
    }

    /// `queue`'s configuration (defaults for jobs, retention, rate limit).
    pub async fn get_queue_config(&self, queue: &str) -> Result<pb::QueueConfig, Error> {
        let queue = queue.to_owned();
        let r = retry_unavailable(|| {
            let (mut c, queue) = (self.queues(), queue.clone());
            async move {
                c.get_queue_config(pb::GetQueueConfigRequest { queue })
                    .await
            }
        })
        .await?;
        Ok(r.config.unwrap_or_default())
    }

    /// Sets the fields of `config` named in `paths` (a FieldMask, e.g. `["retention"]`;
    /// also `group_max_active`, `group_rate_limit`, `cancel_grace`, `dead_letter_expired`)
    /// on `queue`; returns the whole new configuration.
    pub async fn update_queue_config(
        &self,
        queue: &str,
        config: pb::QueueConfig,
        paths: &[&str],
    ) -> Result<pb::QueueConfig, Error> {
        let req = pb::UpdateQueueConfigRequest {
            queue: queue.into(),
            config: Some(config),
            update_mask: Some(prost_types::FieldMask {
                paths: paths.iter().map(|p| (*p).to_owned()).collect(),
            }),
        };
        let r = retry_unavailable(|| {
            let (mut c, req) = (self.queues(), req.clone());
            async move { c.update_queue_config(req).await }
        })
        .await?;
        Ok(r.config.unwrap_or_default())
    }

    /// Deletes `queue`'s waiting and delayed jobs (and completed/dead ones when asked);
    /// returns how many were deleted.
    pub async fn purge_queue(
        &self,
        queue: &str,
        include_completed: bool,
        include_dead: bool,
    ) -> Result<u64, Error> {
        let req = pb::PurgeQueueRequest {
            queue: queue.into(),
            include_completed,
            include_dead,
        };
        Ok(self.queues().purge_queue(req).await?.into_inner().deleted)
    }

    /// Deletes `queue` and its configuration (`force`: even with jobs in it).
    pub async fn delete_queue(
        &self,
        queue: &str,
        force: bool,
    ) -> Result<pb::DeleteQueueResponse, Error> {
        let req = pb::DeleteQueueRequest {
            queue: queue.into(),
            force,
        };
        Ok(self.queues().delete_queue(req).await?.into_inner())
    }
}

/// Runs `call` until it succeeds or fails with anything but UNAVAILABLE, at most
/// [`IDEMPOTENT_TRIES`] times, waiting a full-jitter backoff (50 ms growing to 2 s) between
/// tries. Only for idempotent calls.
pub(crate) async fn retry_unavailable<T, F, Fut>(call: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
{
    retry_unavailable_tries(call, IDEMPOTENT_TRIES).await
}

/// [`retry_unavailable`] with at most `max_tries` tries in all.
async fn retry_unavailable_tries<T, F, Fut>(mut call: F, max_tries: u32) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
{
    let mut backoff = FullJitter::new(Duration::from_millis(50), Duration::from_secs(2));
    let mut tries = 0;
    loop {
        tries += 1;
        match call().await {
            Ok(r) => return Ok(r.into_inner()),
            Err(s) if s.code() == tonic::Code::Unavailable && tries < max_tries => {
                tracing::debug!(error = %s, tries, "server unavailable, retrying");
                tokio::time::sleep(backoff.next_delay()).await;
            }
            Err(s) => return Err(s.into()),
        }
    }
}

/// `Duration` -> protobuf Duration.
pub(crate) fn pb_duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}
