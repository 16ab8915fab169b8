//! Job control from the producer's side: cancel, delete, and progress outside a handler.

use super::retry_unavailable;
use crate::{pb, Client, Error};

/// What [`Client::cancel_jobs`] did, summed over its pages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CancelledJobs {
    /// WAITING and DELAYED jobs moved to CANCELLED.
    pub cancelled: u64,
    /// ACTIVE jobs whose holders were told (CANCELLED when they settle or after the
    /// queue's `cancel_grace`).
    pub signalled: u64,
}

/// A progress report of a leased job: each field set is saved, each `None` keeps its last
/// value.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Percent done, 0 to 100.
    pub progress: Option<u32>,
    /// A short message shown with the progress (up to 256 bytes).
    pub message: Option<String>,
    /// Bytes the next attempt receives ([`crate::Job::checkpoint`]), up to the server's
    /// checkpoint limit (64 KiB by default: longer is RESOURCE_EXHAUSTED and nothing is
    /// saved); `Some(vec![])` clears it.
    pub checkpoint: Option<Vec<u8>>,
}

impl Report {
    /// True when it sets nothing.
    pub fn is_empty(&self) -> bool {
        self.progress.is_none() && self.message.is_none() && self.checkpoint.is_none()
    }

    pub(crate) fn request(
        self,
        queue: &str,
        job_id: &str,
        lease_token: &str,
    ) -> pb::ReportProgressRequest {
        pb::ReportProgressRequest {
            queue: queue.into(),
            job_id: job_id.into(),
            lease_token: lease_token.into(),
            progress: self.progress,
            message: self.message,
            checkpoint: self.checkpoint,
        }
    }
}

impl Client {
    /// Cancels job `job_id` of `queue`. A WAITING or DELAYED job moves to CANCELLED at once;
    /// the holder of an ACTIVE one is told on its stream (its handler's [`crate::Ctx`] is
    /// cancelled) and the job ends CANCELLED when the worker settles it with a Fail, or
    /// when the queue's `cancel_grace` runs out (an Ack in between completes it). Returns
    /// the job after the call and whether this call cancelled it: false when it had already
    /// finished or a cancel was already pending. `reason` (up to 1024 bytes) is recorded on
    /// the job and sent to the holder. NOT_FOUND for an unknown job. Retried while
    /// UNAVAILABLE (a second call changes nothing).
    pub async fn cancel_job(
        &self,
        queue: &str,
        job_id: &str,
        reason: &str,
    ) -> Result<(pb::Job, bool), Error> {
        let req = pb::CancelJobRequest {
            queue: queue.into(),
            job_id: job_id.into(),
            reason: reason.into(),
        };
        let r = retry_unavailable(|| {
            let (mut c, req) = (self.jobs(), req.clone());
            async move { c.cancel_job(req).await }
        })
        .await?;
        Ok((r.job.unwrap_or_default(), r.cancelled))
    }

    /// Cancels every WAITING, DELAYED and ACTIVE job of `queue` matching `filter` (every
    /// set field must match; at least one must be set), as [`Client::cancel_job`] does
    /// each: calls CancelJobs page after page (up to 1000 jobs each) until every match was
    /// reached, and returns the totals. See [`Client::cancel_jobs_page`] for one call.
    pub async fn cancel_jobs(
        &self,
        queue: &str,
        filter: pb::JobFilter,
        reason: &str,
    ) -> Result<CancelledJobs, Error> {
        let mut total = CancelledJobs::default();
        let mut req = pb::CancelJobsRequest {
            queue: queue.into(),
            filter: Some(filter),
            reason: reason.into(),
            limit: 0,
            page_token: String::new(),
        };
        loop {
            let r = self.cancel_jobs_page(req.clone()).await?;
            total.cancelled += r.cancelled;
            total.signalled += r.signalled;
            if r.next_page_token.is_empty() {
                return Ok(total);
            }
            if r.next_page_token == req.page_token {
                return Err(Error::InvalidArgument(
                    "CancelJobs: the server returned the same page token twice".into(),
                ));
            }
            req.page_token = r.next_page_token;
        }
    }

    /// One CancelJobs call (`req.limit` jobs at most, 0: 1000): pass the response's
    /// `next_page_token` as `req.page_token` until it is empty. Retried while UNAVAILABLE
    /// (a second run skips what is already cancelled).
    pub async fn cancel_jobs_page(
        &self,
        req: pb::CancelJobsRequest,
    ) -> Result<pb::CancelJobsResponse, Error> {
        retry_unavailable(|| {
            let (mut c, req) = (self.jobs(), req.clone());
            async move { c.cancel_jobs(req).await }
        })
        .await
    }

    /// Deletes job `job_id` of `queue` in any state but ACTIVE (FAILED_PRECONDITION: cancel
    /// it first), with its history, checkpoint and result; returns the state it was in. Its
    /// id is free for a new Enqueue at once. NOT_FOUND for an unknown job. Not retried (a
    /// second call would be NOT_FOUND).
    pub async fn delete_job(&self, queue: &str, job_id: &str) -> Result<pb::JobState, Error> {
        let r = self
            .jobs()
            .delete_job(pb::DeleteJobRequest {
                queue: queue.into(),
                job_id: job_id.into(),
            })
            .await?
            .into_inner();
        Ok(r.state())
    }

    /// Saves a leased job's progress and/or checkpoint with the unary call, fenced by its
    /// lease token (FAILED_PRECONDITION: the lease is lost). A handler run by a
    /// [`crate::Worker`] uses [`crate::Ctx::progress`] and [`crate::Ctx::save_checkpoint`]
    /// instead, which go on the stream. Not retried here.
    pub async fn report_progress(
        &self,
        queue: &str,
        job_id: &str,
        lease_token: &str,
        report: Report,
    ) -> Result<(), Error> {
        if report.is_empty() {
            return Err(Error::InvalidArgument(
                "report_progress: nothing to report".into(),
            ));
        }
        self.workers()
            .report_progress(report.request(queue, job_id, lease_token))
            .await?;
        Ok(())
    }
}
