//! The dashboard's gRPC client: tonic clients over the server's own [`Routes`] (the four
//! jobwire services behind the authentication interceptor, see `server::api_routes`), called
//! in process with the visitor's bearer token. No socket, no TLS: the request goes through
//! the same interceptor, handlers, authorization, validation and audit as a network call.

use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Routes;
use tonic::{Request, Status};

use crate::pb;
use pb::dead_letter_service_client::DeadLetterServiceClient;
use pb::job_service_client::JobServiceClient;
use pb::queue_service_client::QueueServiceClient;

/// Jobs asked for per ListDeadLetters page when the dashboard counts (the RPC's maximum).
pub const COUNT_PAGE: i32 = 1000;

/// The jobwire services, in process; cheap to clone.
#[derive(Clone, Debug)]
pub struct Api {
    routes: Routes,
    max_message: usize,
}

impl Api {
    /// Calls over `routes` (from `server::api_routes`), sending and accepting messages up to
    /// `max_message` bytes (the server's own request limit; replies as big as a GetJob of a
    /// maximal payload).
    pub fn new(routes: Routes, max_message: usize) -> Api {
        Api {
            routes,
            max_message,
        }
    }

    /// A caller with `token` as its bearer (`None`: no credentials, for a server without an
    /// auth file).
    pub fn caller(&self, token: Option<&str>) -> Result<Caller, Status> {
        let bearer = match token {
            Some(t) => Some(
                format!("Bearer {t}")
                    .parse::<MetadataValue<Ascii>>()
                    .map_err(|_| Status::unauthenticated("the token is not ASCII"))?,
            ),
            None => None,
        };
        Ok(Caller {
            api: self.clone(),
            bearer,
        })
    }
}

/// One visitor's calls, each carrying its bearer token.
#[derive(Clone)]
pub struct Caller {
    api: Api,
    bearer: Option<MetadataValue<Ascii>>,
}

impl std::fmt::Debug for Caller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caller")
            .field("bearer", &self.bearer.as_ref().map(|_| "<redacted>"))
            .finish_non_exhaustive()
    }
}

impl Caller {
    fn req<T>(&self, msg: T) -> Request<T> {
        let mut r = Request::new(msg);
        if let Some(b) = &self.bearer {
            r.metadata_mut().insert("authorization", b.clone());
        }
        r
    }

    fn jobs(&self) -> JobServiceClient<Routes> {
        JobServiceClient::new(self.api.routes.clone())
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(self.api.max_message)
    }

    fn queues(&self) -> QueueServiceClient<Routes> {
        QueueServiceClient::new(self.api.routes.clone())
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(self.api.max_message)
    }

    fn dead(&self) -> DeadLetterServiceClient<Routes> {
        DeadLetterServiceClient::new(self.api.routes.clone())
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(self.api.max_message)
    }

    /// QueueService.ListQueues: every queue the caller may see, with stats.
    pub async fn list_queues(&self) -> Result<Vec<pb::QueueStats>, Status> {
        let r = self
            .queues()
            .list_queues(self.req(pb::ListQueuesRequest {}))
            .await?;
        Ok(r.into_inner().queues)
    }

    /// QueueService.GetQueueStats.
    pub async fn queue_stats(&self, queue: &str) -> Result<pb::QueueStats, Status> {
        let r = self
            .queues()
            .get_queue_stats(self.req(pb::GetQueueStatsRequest {
                queue: queue.into(),
            }))
            .await?;
        r.into_inner()
            .stats
            .ok_or_else(|| Status::internal("GetQueueStats answered no stats"))
    }

    /// QueueService.PauseQueue.
    pub async fn pause(&self, queue: &str) -> Result<(), Status> {
        self.queues()
            .pause_queue(self.req(pb::PauseQueueRequest {
                queue: queue.into(),
            }))
            .await?;
        Ok(())
    }

    /// QueueService.ResumeQueue.
    pub async fn resume(&self, queue: &str) -> Result<(), Status> {
        self.queues()
            .resume_queue(self.req(pb::ResumeQueueRequest {
                queue: queue.into(),
            }))
            .await?;
        Ok(())
    }

    /// QueueService.PurgeQueue: the number of jobs deleted.
    pub async fn purge(
        &self,
        queue: &str,
        include_completed: bool,
        include_dead: bool,
    ) -> Result<u64, Status> {
        let r = self
            .queues()
            .purge_queue(self.req(pb::PurgeQueueRequest {
                queue: queue.into(),
                include_completed,
                include_dead,
            }))
            .await?;
        Ok(r.into_inner().deleted)
    }

    /// JobService.GetJob.
    pub async fn get_job(&self, queue: &str, job_id: &str) -> Result<pb::Job, Status> {
        let r = self
            .jobs()
            .get_job(self.req(pb::GetJobRequest {
                queue: queue.into(),
                job_id: job_id.into(),
            }))
            .await?;
        r.into_inner()
            .job
            .ok_or_else(|| Status::internal("GetJob answered no job"))
    }

    /// JobService.ListJobs: one page of the queue's jobs in `state` (without payloads).
    pub async fn list_jobs(
        &self,
        queue: &str,
        state: pb::JobState,
        filter: pb::ListJobsFilter,
        page_token: &str,
        page_size: i32,
    ) -> Result<pb::ListJobsResponse, Status> {
        let r = self
            .jobs()
            .list_jobs(self.req(pb::ListJobsRequest {
                queue: queue.into(),
                state: state as i32,
                page_size,
                page_token: page_token.into(),
                filter: Some(filter),
            }))
            .await?;
        Ok(r.into_inner())
    }

    /// QueueService.ListWorkers: every replica's worker streams (on queues the caller may
    /// view).
    pub async fn list_workers(&self) -> Result<pb::ListWorkersResponse, Status> {
        let r = self
            .queues()
            .list_workers(self.req(pb::ListWorkersRequest {
                queue: String::new(),
            }))
            .await?;
        Ok(r.into_inner())
    }

    /// DeadLetterService.ListDeadLetters: one page.
    pub async fn list_dead(
        &self,
        queue: &str,
        filter: Option<pb::DeadLetterFilter>,
        page_token: &str,
        page_size: i32,
    ) -> Result<pb::ListDeadLettersResponse, Status> {
        let r = self
            .dead()
            .list_dead_letters(self.req(pb::ListDeadLettersRequest {
                queue: queue.into(),
                page_size,
                page_token: page_token.into(),
                filter,
            }))
            .await?;
        Ok(r.into_inner())
    }

    /// DeadLetterService.ReplayDeadLetters by ids (at most 1000) or by filter: the ids
    /// replayed and the ids skipped.
    pub async fn replay(
        &self,
        queue: &str,
        job_ids: Vec<String>,
        filter: Option<pb::DeadLetterFilter>,
    ) -> Result<(Vec<String>, Vec<String>), Status> {
        let r = self
            .dead()
            .replay_dead_letters(self.req(pb::ReplayDeadLettersRequest {
                queue: queue.into(),
                job_ids,
                filter,
            }))
            .await?
            .into_inner();
        Ok((r.replayed_job_ids, r.skipped_job_ids))
    }

    /// DeadLetterService.DeleteDeadLetters by ids (at most 1000) or by filter: the ids
    /// deleted and the ids skipped.
    pub async fn delete(
        &self,
        queue: &str,
        job_ids: Vec<String>,
        filter: Option<pb::DeadLetterFilter>,
    ) -> Result<(Vec<String>, Vec<String>), Status> {
        let r = self
            .dead()
            .delete_dead_letters(self.req(pb::DeleteDeadLettersRequest {
                queue: queue.into(),
                job_ids,
                filter,
            }))
            .await?
            .into_inner();
        Ok((r.deleted_job_ids, r.skipped_job_ids))
    }
}
