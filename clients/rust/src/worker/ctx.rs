//! [`Ctx`]: what one attempt shares with the worker running it: the cancellation signal and
//! its cause, progress and checkpoint reports (sent to the worker's loop, answered from the
//! stream), and the result the Ack carries.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::{pb, Error, JobError, Report};

/// Why a handler's [`Ctx::cancel`] token was cancelled ([`Ctx::cancel_cause`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CancelCause {
    /// The job was cancelled (CancelJob, CancelJobs): stop and return. An `Err` (e.g.
    /// [`Ctx::cancel_error`]) ends the job CANCELLED; `Ok` completes it after all.
    JobCancelled {
        /// The reason given with the cancel.
        reason: String,
        /// When the server revokes the lease if the job is not settled by then (the
        /// queue's `cancel_grace`).
        revoke_time: Option<SystemTime>,
    },
    /// The lease is gone (expired and leased again, or the job deleted): the result will
    /// not be applied.
    LeaseLost,
    /// The worker's shutdown grace ran out: the job was handed back (uncharged) already.
    Shutdown,
}

/// Sends a progress report to the worker's loop; false when the worker is gone.
pub(crate) type Reporter = Arc<dyn Fn(ReportRequest) -> bool + Send + Sync>;

/// A handler's progress report on its way to the worker's loop, with where to answer.
pub(crate) struct ReportRequest {
    pub(crate) lease_token: String,
    pub(crate) req: pb::ReportProgressRequest,
    pub(crate) reply: oneshot::Sender<Result<(), Error>>,
}

/// What one attempt shares with the worker: where reports go, the result, the cause of a
/// cancel.
struct Attempt {
    /// (queue, job id, lease token).
    ids: (String, String, String),
    /// None outside a worker ([`Ctx::new`]): reports are recorded instead.
    reporter: Option<Reporter>,
    state: Mutex<AttemptState>,
}

#[derive(Default)]
struct AttemptState {
    result: Option<Vec<u8>>,
    reports: Vec<Report>,
    cause: Option<CancelCause>,
}

impl fmt::Debug for Attempt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Attempt")
            .field("ids", &self.ids)
            .finish_non_exhaustive()
    }
}

/// The context of one attempt: a cancellation signal, progress and checkpoint reports, the
/// result, and the worker's id.
#[derive(Clone, Debug)]
pub struct Ctx {
    /// Cancelled when the handler should stop: the job was cancelled, the lease was lost
    /// (another worker may have the job now), or the worker's shutdown grace ran out
    /// ([`Ctx::cancel_cause`] says which). Check it in long loops, or `select!` on
    /// [`CancellationToken::cancelled`].
    pub cancel: CancellationToken,
    /// The worker's id (as the server records it in failed attempts).
    pub worker_id: Arc<str>,
    attempt: Arc<Attempt>,
}

impl Ctx {
    /// A context for tests and [`crate::testing::FakeLease`]: reports are recorded
    /// ([`Ctx::reports`]) instead of sent.
    pub fn new(worker_id: &str) -> Ctx {
        Ctx {
            cancel: CancellationToken::new(),
            worker_id: worker_id.into(),
            attempt: Arc::new(Attempt {
                ids: Default::default(),
                reporter: None,
                state: Mutex::default(),
            }),
        }
    }

    /// The context of a lease run by the worker.
    pub(crate) fn for_lease(
        worker_id: Arc<str>,
        cancel: CancellationToken,
        ids: (String, String, String),
        reporter: Reporter,
    ) -> Ctx {
        Ctx {
            cancel,
            worker_id,
            attempt: Arc::new(Attempt {
                ids,
                reporter: Some(reporter),
                state: Mutex::default(),
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, AttemptState> {
        // A handler that panicked while holding it left nothing half-written.
        self.attempt.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reports how far the attempt got: `percent` (0 to 100) and a short `message` (up to
    /// 256 bytes; empty keeps the last one), saved on the job for GetJob, dashboards and
    /// the next attempt. Sent on the worker's stream; waits for the server's answer:
    /// [`Error::LeaseLost`] when the lease is gone (stop: the result cannot be applied),
    /// [`Error::Status`] when refused (INVALID_ARGUMENT for a percent above 100, ...).
    pub async fn progress(&self, percent: u32, message: &str) -> Result<(), Error> {
        self.report(Report {
            progress: Some(percent),
            message: Some(message.to_owned()).filter(|m| !m.is_empty()),
            checkpoint: None,
        })
        .await
    }

    /// Saves `checkpoint` on the job: if this attempt fails, the next one gets it in
    /// [`crate::Job::checkpoint`] and can resume from there. Up to the server's checkpoint
    /// limit (64 KiB by default: longer is RESOURCE_EXHAUSTED and nothing is saved); empty
    /// clears it. Errors as [`Ctx::progress`].
    pub async fn save_checkpoint(&self, checkpoint: impl Into<Vec<u8>>) -> Result<(), Error> {
        self.report(Report {
            checkpoint: Some(checkpoint.into()),
            ..Report::default()
        })
        .await
    }

    /// Saves progress, message and checkpoint at once (the fields set); see
    /// [`Ctx::progress`].
    pub async fn report(&self, report: Report) -> Result<(), Error> {
        if report.is_empty() {
            return Ok(());
        }
        let Some(reporter) = &self.attempt.reporter else {
            self.state().reports.push(report);
            return Ok(());
        };
        let (queue, job_id, token) = &self.attempt.ids;
        let (reply, answer) = oneshot::channel();
        let sent = reporter(ReportRequest {
            lease_token: token.clone(),
            req: report.request(queue, job_id, token),
            reply,
        });
        if !sent {
            return Err(Error::LeaseLost("the worker stopped".into()));
        }
        answer
            .await
            .unwrap_or_else(|_| Err(Error::LeaseLost("the worker stopped".into())))
    }

    /// Attaches `result` to the job's Ack: when the handler returns `Ok` the job completes
    /// with it (GetJob's `job.result`; up to the server's result limit, 64 KiB by default).
    /// A later call replaces it; ignored when the handler returns an error.
    pub fn set_result(&self, result: impl Into<Vec<u8>>) {
        self.state().result = Some(result.into());
    }

    /// The result set with [`Ctx::set_result`] (for tests).
    pub fn result(&self) -> Option<Vec<u8>> {
        self.state().result.clone()
    }

    /// The reports made on a context built with [`Ctx::new`], in order (for tests; a
    /// worker sends them instead).
    pub fn reports(&self) -> Vec<Report> {
        self.state().reports.clone()
    }

    /// Why [`Ctx::cancel`] was cancelled; `None` while it is not.
    pub fn cancel_cause(&self) -> Option<CancelCause> {
        self.state().cause.clone()
    }

    /// True when the job was cancelled (CancelJob, CancelJobs).
    pub fn is_job_cancelled(&self) -> bool {
        matches!(self.cancel_cause(), Some(CancelCause::JobCancelled { .. }))
    }

    /// The error to return when stopping because of [`Ctx::cancel`]:
    /// [`JobError::Cancelled`] with the cancel's reason (the job ends CANCELLED).
    pub fn cancel_error(&self) -> JobError {
        JobError::Cancelled(match self.cancel_cause() {
            Some(CancelCause::JobCancelled { reason, .. }) => reason,
            Some(CancelCause::LeaseLost) => "the lease was lost".into(),
            Some(CancelCause::Shutdown) => "the worker shut down".into(),
            None => "cancelled".into(),
        })
    }

    /// Cancels [`Ctx::cancel`] with `cause` (the first cause is kept). The worker does this;
    /// tests may too.
    pub fn cancel_with(&self, cause: CancelCause) {
        self.state().cause.get_or_insert(cause);
        self.cancel.cancel();
    }
}
