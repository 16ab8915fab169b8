//! Job control on the loop: a CancelLease cancels its handler, progress reports go on the
//! stream that leased the job (matched to their ProgressSaved replies in order) or, when
//! that stream is gone, through the unary ReportProgress.

use std::time::{Duration, Instant, SystemTime};

use super::{Core, PendingReport, State};
use crate::pb;
use crate::worker::settle::{self, lease_gone};
use crate::worker::{CancelCause, Ctx, ReportRequest};
use crate::Error;

impl Core {
    /// A handler's report: on the live stream if it leased the job, else unary.
    pub(super) fn on_report(&mut self, r: ReportRequest) {
        let Some(h) = self.held.get_mut(&r.lease_token) else {
            let _ = r.reply.send(Err(Error::LeaseLost(
                "the job is no longer held by this worker".into(),
            )));
            return;
        };
        if h.lost || h.abandoned || !matches!(h.state, State::Running) {
            let _ = r.reply.send(Err(Error::LeaseLost(
                "the attempt is over (lease lost or settled)".into(),
            )));
            return;
        }
        if let Some(live) = self.live.as_mut().filter(|l| l.gen == h.gen) {
            if live.tx.progress(r.req.clone()) {
                let now = Instant::now();
                live.last_sent = now;
                h.reports.push_back(PendingReport {
                    req: r.req,
                    reply: r.reply,
                    sent: now,
                });
                return;
            }
        }
        let ctx = h.ctx.clone();
        self.report_unary(ctx, r.req, r.reply);
    }

    /// Sends a report with the unary call; a lost lease cancels the handler.
    pub(super) fn report_unary(
        &self,
        ctx: Ctx,
        req: pb::ReportProgressRequest,
        reply: tokio::sync::oneshot::Sender<Result<(), Error>>,
    ) {
        let client = self.client.clone();
        tokio::spawn(async move {
            let r = settle::report(client, req).await;
            if matches!(r, Err(Error::LeaseLost(_))) {
                ctx.cancel_with(CancelCause::LeaseLost);
            }
            let _ = reply.send(r);
        });
    }

    /// A ProgressSaved: the answer to the oldest report of its lease.
    pub(super) fn on_progress_saved(&mut self, ps: pb::ProgressSaved) {
        let Some(h) = self.held.get_mut(&ps.lease_token) else {
            return;
        };
        let Some(p) = h.reports.pop_front() else {
            tracing::debug!(
                queue = ps.queue,
                job_id = ps.job_id,
                "progress reply for no pending report"
            );
            return;
        };
        let code = tonic::Code::from(ps.code);
        let r = match code {
            tonic::Code::Ok => Ok(()),
            c if lease_gone(c) => {
                tracing::warn!(
                    queue = ps.queue,
                    job_id = ps.job_id,
                    reason = ps.message,
                    "progress refused: the lease is lost; cancelling the handler"
                );
                // The handler's result is still settled on the stream: the server refuses it
                // (logged) and frees the stream's credit.
                h.ctx.cancel_with(CancelCause::LeaseLost);
                Err(Error::LeaseLost(ps.message))
            }
            c => Err(tonic::Status::new(c, ps.message).into()),
        };
        let _ = p.reply.send(r);
    }

    /// A CancelLease: the job is cancelled; its handler is told (the first cause is kept).
    pub(super) fn on_cancel(&mut self, cl: pb::CancelLease) {
        let Some(h) = self.held.get(&cl.lease_token) else {
            tracing::debug!(
                queue = cl.queue,
                job_id = cl.job_id,
                "cancel for a lease not held"
            );
            return;
        };
        if !matches!(h.state, State::Running) {
            tracing::info!(
                queue = cl.queue,
                job_id = cl.job_id,
                "job cancelled after its handler returned: settling it as it is"
            );
            return;
        }
        let revoke_time = cl.revoke_time.and_then(|t| SystemTime::try_from(t).ok());
        let revoke_in = revoke_time
            .and_then(|t| t.duration_since(SystemTime::now()).ok())
            .unwrap_or(Duration::ZERO);
        tracing::info!(
            queue = cl.queue,
            job_id = cl.job_id,
            reason = cl.reason,
            ?revoke_in,
            "job cancelled: cancelling its handler"
        );
        h.ctx.cancel_with(CancelCause::JobCancelled {
            reason: cl.reason,
            revoke_time,
        });
    }

    /// The reports of a stream that broke go out again with the unary call.
    pub(super) fn resend_reports(&mut self, gen: u64) {
        let mut moved = Vec::new();
        for h in self.held.values_mut().filter(|h| h.gen == gen) {
            for p in h.reports.drain(..) {
                moved.push((h.ctx.clone(), p));
            }
        }
        for (ctx, p) in moved {
            self.report_unary(ctx, p.req, p.reply);
        }
    }
}
