//! `jobwire.v1.JobService`: Enqueue, EnqueueBatch, GetJob, ListJobs (`list_jobs.rs`),
//! CancelJob, CancelJobs and DeleteJob (`cancel.rs`).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use tonic::{Request, Response, Status};

use super::cancel;
use super::convert::{self, ApiLimits};
use super::limits::MAX_BATCH;
use super::pb;
use crate::auth::audit::{self, AdminAction};
use crate::auth::{Auth, Rpc};
use crate::jobs::{NewJob, QueueName};
use crate::lease::{enqueue_commit, EnqueueLanes, Hub};
use crate::store::{EnqueueOutcome, Store};
use crate::Error;

/// How long an Enqueue of server-chosen ids retries a store call that failed as unavailable
/// (the reply may be lost while the write happened). The server's `--request-timeout` may
/// cut it shorter.
const ENQUEUE_RETRY_BUDGET: Duration = Duration::from_secs(10);
/// First pause between those retries; it doubles up to [`ENQUEUE_RETRY_PAUSE_MAX`].
const ENQUEUE_RETRY_PAUSE: Duration = Duration::from_millis(50);
const ENQUEUE_RETRY_PAUSE_MAX: Duration = Duration::from_secs(1);

/// The JobService handlers.
pub struct JobApi {
    store: Store,
    hub: Hub,
    limits: ApiLimits,
    auth: Auth,
    /// Group commit of unary Enqueues, per queue.
    lanes: EnqueueLanes,
}

impl JobApi {
    /// Handlers over `hub`'s store; enqueues wake `hub`'s local lease loops directly. Every
    /// call is authorized by `auth`.
    pub fn new(hub: Hub, limits: ApiLimits, auth: Auth) -> JobApi {
        JobApi {
            store: hub.store().clone(),
            lanes: EnqueueLanes::new(hub.clone(), limits.default_max_attempts),
            hub,
            limits,
            auth,
        }
    }

    /// Enqueues `jobs` of `queue`, through the queue's enqueue lane (group commit with the
    /// concurrent unary Enqueues of the queue, `lease/enqueue_commit.rs`) when `coalesce`,
    /// else in calls of their own. When `ids_ours` (the server chose every id, before the
    /// first call), a call that fails as unavailable is retried with the same ids within
    /// [`ENQUEUE_RETRY_BUDGET`]: the failed call may have written the jobs (its reply was
    /// lost), and the retry then finds them taken. Such a job is still reported as created,
    /// truthfully: nobody but this request can hold a freshly generated id, so the job is
    /// the one this request created. Client-chosen ids are not retried here: a taken one
    /// may be a real duplicate, and the client's own retry dedupes on it anyway.
    async fn enqueue_retrying(
        &self,
        queue: &QueueName,
        mut jobs: Vec<NewJob>,
        ids_ours: bool,
        coalesce: bool,
    ) -> Result<Vec<EnqueueOutcome>, Error> {
        let deadline = Instant::now() + ENQUEUE_RETRY_BUDGET;
        let mut pause = ENQUEUE_RETRY_PAUSE;
        let mut retried = false;
        loop {
            let (back, result) = if coalesce {
                self.lanes.enqueue(queue, jobs).await
            } else {
                let r = self.enqueue_in(queue, &jobs).await;
                (jobs, r)
            };
            jobs = back;
            match result {
                Ok(mut outcomes) => {
                    if retried {
                        for o in &mut outcomes {
                            o.created = true;
                        }
                    }
                    return Ok(outcomes);
                }
                Err(Error::Unavailable(e))
                    if ids_ours && !jobs.is_empty() && Instant::now() + pause < deadline =>
                {
                    tracing::debug!(queue = %queue, error = %e, "enqueue unavailable; retrying with the same ids");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(ENQUEUE_RETRY_PAUSE_MAX);
                    retried = true;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// One enqueue of `jobs` of `queue` in calls of its own (EnqueueBatch), waking a local
    /// lease loop early (`enqueue_commit::write`).
    async fn enqueue_in(
        &self,
        queue: &QueueName,
        jobs: &[NewJob],
    ) -> Result<Vec<EnqueueOutcome>, Error> {
        let (outcomes, stopped) =
            enqueue_commit::write(&self.hub, queue, jobs, self.limits.default_max_attempts).await;
        if let Some(e) = stopped {
            return Err(e.into());
        }
        outcomes
            .into_iter()
            .map(|o| o.map_err(Error::from))
            .collect()
    }
}

#[tonic::async_trait]
impl pb::job_service_server::JobService for JobApi {
    #[tracing::instrument(skip_all, fields(queue, job_id))]
    async fn enqueue(
        &self,
        request: Request<pb::EnqueueRequest>,
    ) -> Result<Response<pb::EnqueueResponse>, Status> {
        let spec = request
            .get_ref()
            .job
            .as_ref()
            .ok_or_else(|| Error::invalid("job", "is required"))?;
        let job = convert::new_job("job", spec, &self.limits)?;
        self.auth.check(&request, Rpc::Enqueue, &[&job.queue])?;
        let id_ours = spec.job_id.is_empty();
        tracing::Span::current().record("queue", job.queue.as_str());
        tracing::Span::current().record("job_id", job.id.as_str());
        let queue = job.queue.clone();
        let id = job.id.clone();
        let outcome = match self
            .enqueue_retrying(&queue, vec![job], id_ours, true)
            .await
        {
            Ok(outcomes) => outcomes,
            // The job was written on the master: the client's retry must name it.
            Err(e @ Error::NotReplicated(_)) => {
                return Err(super::status::with_job_id(Status::from(e), &id))
            }
            Err(e) => return Err(e.into()),
        }
        .pop()
        .ok_or_else(|| Error::Internal("enqueue returned no outcome".into()))?;
        crate::metrics::enqueued(queue.as_str(), outcome.created);
        Ok(Response::new(pb::EnqueueResponse {
            job: Some(convert::job_pb(outcome.job)),
            created: outcome.created,
        }))
    }

    #[tracing::instrument(skip_all, fields(jobs))]
    async fn enqueue_batch(
        &self,
        request: Request<pb::EnqueueBatchRequest>,
    ) -> Result<Response<pb::EnqueueBatchResponse>, Status> {
        let specs = &request.get_ref().jobs;
        tracing::Span::current().record("jobs", specs.len());
        if specs.is_empty() {
            return Err(Error::invalid("jobs", "must hold at least one job").into());
        }
        if specs.len() > MAX_BATCH {
            return Err(Error::TooLarge {
                field: "jobs".into(),
                reason: format!("{} jobs, the limit is {MAX_BATCH}", specs.len()),
            }
            .into());
        }
        let mut results: Vec<Option<pb::EnqueueResult>> = vec![None; specs.len()];
        let mut by_queue: BTreeMap<QueueName, Vec<(usize, NewJob)>> = BTreeMap::new();
        for (i, spec) in specs.iter().enumerate() {
            match convert::new_job(&format!("jobs[{i}]"), spec, &self.limits) {
                Ok(job) => by_queue
                    .entry(job.queue.clone())
                    .or_default()
                    .push((i, job)),
                Err(e) => results[i] = Some(item_error(e)),
            }
        }
        // The principal must be producer on every queue of the batch: otherwise the whole
        // batch is refused before anything is written.
        let queues: Vec<QueueName> = by_queue.keys().cloned().collect();
        let named: Vec<&QueueName> = queues.iter().collect();
        self.auth.check(&request, Rpc::EnqueueBatch, &named)?;
        // Every new queue of the batch is registered first, all or none: past the queue
        // limit the whole batch is refused before anything is written.
        self.store
            .remember_queues(&queues)
            .await
            .map_err(Error::from)?;
        // One store call per queue. A queue whose call fails gives its items that error and
        // the other queues are still written, so a retry of the whole batch duplicates
        // nothing; only when no call wrote anything does the call itself fail (e.g.
        // UNAVAILABLE while Redis is down), which is as safe to retry. A NOT_REPLICATED
        // call wrote its jobs on the master: its items get that error, each naming its
        // job's id (the retry of an item must name it), and the call does not fail.
        let (mut written, mut first_failure) = (false, None);
        for (queue, items) in by_queue {
            let ids_ours = items.iter().all(|(i, _)| specs[*i].job_id.is_empty());
            let (index, jobs): (Vec<usize>, Vec<NewJob>) = items.into_iter().unzip();
            let ids: Vec<String> = jobs.iter().map(|j| j.id.clone()).collect();
            let outcomes = match self.enqueue_retrying(&queue, jobs, ids_ours, false).await {
                Ok(o) => o,
                Err(e @ Error::NotReplicated(_)) => {
                    let status = Status::from(e);
                    for (i, id) in index.iter().zip(&ids) {
                        let named = super::status::with_job_id(status.clone(), id);
                        results[*i] = Some(item_result(&named, String::new()));
                    }
                    written = true;
                    continue;
                }
                Err(e) => {
                    let status = Status::from(e);
                    let refused = item_result(&status, String::new());
                    for i in &index {
                        results[*i] = Some(refused.clone());
                    }
                    first_failure.get_or_insert(status);
                    continue;
                }
            };
            written = true;
            for (i, o) in index.iter().zip(outcomes) {
                crate::metrics::enqueued(queue.as_str(), o.created);
                results[*i] = Some(pb::EnqueueResult {
                    job: Some(convert::job_pb(o.job)),
                    created: o.created,
                    error: None,
                });
            }
        }
        if let (false, Some(status)) = (written, first_failure) {
            return Err(status);
        }
        Ok(Response::new(pb::EnqueueBatchResponse {
            results: results.into_iter().flatten().collect(),
        }))
    }

    #[tracing::instrument(skip_all, fields(queue, job_id))]
    async fn get_job(
        &self,
        request: Request<pb::GetJobRequest>,
    ) -> Result<Response<pb::GetJobResponse>, Status> {
        let r = request.get_ref();
        let queue = convert::queue("queue", &r.queue)?;
        let id = convert::job_id("job_id", &r.job_id)?;
        self.auth.check(&request, Rpc::GetJob, &[&queue])?;
        let job = self
            .store
            .get_job(&queue, &id)
            .await
            .map_err(Error::from)?
            .ok_or_else(|| Error::JobNotFound {
                queue: queue.to_string(),
                id,
            })?;
        Ok(Response::new(pb::GetJobResponse {
            job: Some(convert::job_pb(job)),
        }))
    }

    #[tracing::instrument(skip_all, fields(queue))]
    async fn list_jobs(
        &self,
        request: Request<pb::ListJobsRequest>,
    ) -> Result<Response<pb::ListJobsResponse>, Status> {
        let queue = super::list_jobs::queue_of(request.get_ref())?;
        self.auth.check(&request, Rpc::ListJobs, &[&queue])?;
        let page = super::list_jobs::list(&self.store, &queue, request.get_ref()).await?;
        Ok(Response::new(page))
    }

    #[tracing::instrument(skip_all, fields(queue, job_id))]
    async fn cancel_job(
        &self,
        request: Request<pb::CancelJobRequest>,
    ) -> Result<Response<pb::CancelJobResponse>, Status> {
        let r = request.get_ref();
        let queue = convert::queue("queue", &r.queue)?;
        self.auth.check(&request, Rpc::CancelJob, &[&queue])?;
        let id = convert::job_id("job_id", &r.job_id)?;
        let reason = cancel::reason("reason", &r.reason)?;
        tracing::Span::current().record("queue", queue.as_str());
        tracing::Span::current().record("job_id", id.as_str());
        let (job, cancelled) = cancel::one(&self.hub, &queue, &id, &reason).await?;
        Ok(Response::new(pb::CancelJobResponse {
            job: Some(convert::job_pb(job)),
            cancelled,
        }))
    }

    #[tracing::instrument(skip_all, fields(queue))]
    async fn cancel_jobs(
        &self,
        request: Request<pb::CancelJobsRequest>,
    ) -> Result<Response<pb::CancelJobsResponse>, Status> {
        let r = request.get_ref();
        let queue = convert::queue("queue", &r.queue)?;
        // The role first: a caller without it learns nothing about the request's form.
        let who = self.auth.check(&request, Rpc::CancelJobs, &[&queue])?;
        let plan = cancel::bulk_request(r)?;
        tracing::Span::current().record("queue", queue.as_str());
        let page = cancel::bulk(&self.store, &queue, &plan).await?;
        audit::record(
            &who,
            AdminAction::CancelJobs,
            queue.as_str(),
            &plan.describe(),
            page.cancelled + page.signalled,
        );
        Ok(Response::new(page))
    }

    #[tracing::instrument(skip_all, fields(queue, job_id))]
    async fn delete_job(
        &self,
        request: Request<pb::DeleteJobRequest>,
    ) -> Result<Response<pb::DeleteJobResponse>, Status> {
        let r = request.get_ref();
        let queue = convert::queue("queue", &r.queue)?;
        let who = self.auth.check(&request, Rpc::DeleteJob, &[&queue])?;
        let id = convert::job_id("job_id", &r.job_id)?;
        tracing::Span::current().record("queue", queue.as_str());
        tracing::Span::current().record("job_id", id.as_str());
        let state = cancel::delete(&self.store, &queue, &id).await?;
        audit::record(
            &who,
            AdminAction::DeleteJob,
            queue.as_str(),
            &format!("id={id:?}"),
            1,
        );
        Ok(Response::new(pb::DeleteJobResponse {
            state: convert::state_pb(state) as i32,
        }))
    }
}

/// A refused batch item: its code, message and field, as the item's result.
pub(crate) fn item_error(e: Error) -> pb::EnqueueResult {
    let field = match &e {
        Error::InvalidArgument { field, .. } | Error::TooLarge { field, .. } => field.clone(),
        _ => String::new(),
    };
    item_result(&Status::from(e), field)
}

/// A batch item answered with `status` (and the offending `field`, if any).
fn item_result(status: &Status, field: String) -> pb::EnqueueResult {
    pb::EnqueueResult {
        job: None,
        created: false,
        error: Some(pb::ItemError {
            code: status.code() as i32,
            message: status.message().to_owned(),
            field,
        }),
    }
}
