//! Settling: a handler's result goes on the stream that leased the job, or through the
//! unary calls when that stream is gone; credits for slots the current stream did not
//! lease; failing what is left when the shutdown grace runs out.

use std::time::Instant;

use super::{Core, Event, Held, State, FINAL_SETTLE};
use crate::worker::settle::{self, Outcome};
use crate::worker::{fail_request, CancelCause, WorkerStats};
use crate::{pb, JobError};

impl Core {
    pub(super) fn on_done(&mut self, token: String, result: Result<(), JobError>) {
        let Some(h) = self.held.get_mut(&token) else {
            return;
        };
        let (q, id) = (h.ids.0.clone(), h.ids.1.clone());
        if h.abandoned {
            tracing::info!(queue = q, job_id = id, ok = result.is_ok(),
                "handler finished after the shutdown grace; its attempt was already failed as RETRY");
            return;
        }
        if h.lost {
            WorkerStats::add(&self.stats.lost);
            tracing::warn!(queue = q, job_id = id, ok = result.is_ok(),
                "handler finished but its lease was lost; result dropped (the job is or will be redelivered)");
            if let Some(h) = self.held.remove(&token) {
                self.slot_freed(&h);
            }
            return;
        }
        let outcome = match result {
            Ok(()) => Outcome::Ack(h.ctx.result().unwrap_or_default()),
            Err(e) => {
                if matches!(e, JobError::Failed { .. }) {
                    tracing::warn!(queue = q, job_id = id, error = %e, "job failed");
                } else {
                    tracing::info!(queue = q, job_id = id, error = %e, "job failed");
                }
                let mut req = fail_request(e);
                (req.queue, req.job_id, req.lease_token) = h.ids.clone();
                Outcome::Fail(req)
            }
        };
        self.settle(&token, outcome);
    }

    /// Sends `outcome` for the held lease `token`: on the stream that leased it if it is
    /// still up, else with a unary call.
    pub(super) fn settle(&mut self, token: &str, outcome: Outcome) {
        let Some(h) = self.held.get_mut(token) else {
            return;
        };
        match self.live.as_mut().filter(|l| l.gen == h.gen) {
            Some(live) => {
                let sent = match &outcome {
                    Outcome::Ack(result) => {
                        live.tx
                            .send(pb::subscribe_request::Message::Ack(pb::AckRequest {
                                result: result.clone(),
                                queue: h.ids.0.clone(),
                                job_id: h.ids.1.clone(),
                                lease_token: h.ids.2.clone(),
                            }))
                    }
                    Outcome::Fail(req) => live.tx.fail(req.clone()),
                };
                let now = Instant::now();
                live.last_sent = now;
                h.state = State::OnStream { outcome, sent: now };
                if !sent {
                    self.stream_lost("the stream's request side closed");
                }
            }
            None => {
                WorkerStats::add(&self.stats.unary_settles);
                h.state = State::Unary;
                let (client, events, ids) = (self.client.clone(), self.tx.clone(), h.ids.clone());
                let token = token.to_owned();
                tokio::spawn(async move {
                    let result = settle::unary(client, ids, outcome).await;
                    let _ = events.send(Event::Unary { token, result });
                });
            }
        }
    }

    /// A lease left the books: if the current stream did not lease it, its slot is a new
    /// credit for that stream.
    pub(super) fn slot_freed(&mut self, h: &Held) {
        if let Some(live) = self.live.as_mut() {
            if live.gen != h.gen && !live.server_draining && self.deadline.is_none() {
                live.tx.grant_credits(1);
                live.last_sent = Instant::now();
            }
        }
    }

    /// The grace ran out: cancel the handlers and hand what they hold back uncharged
    /// (RELEASE: waiting again at once, the attempt not counted, as the server's own drain
    /// does), so a deploy never dead-letters work.
    pub(super) fn abandon(&mut self) {
        self.final_deadline = Some(Instant::now() + FINAL_SETTLE);
        let mut fails = Vec::new();
        let mut gone = Vec::new();
        for (token, h) in self.held.iter_mut() {
            if !matches!(h.state, State::Running) {
                continue;
            }
            h.ctx.cancel_with(CancelCause::Shutdown);
            if h.lost {
                gone.push(token.clone());
                continue;
            }
            h.abandoned = true;
            let (queue, job_id, lease_token) = h.ids.clone();
            fails.push((
                token.clone(),
                Outcome::Fail(pb::FailRequest {
                    queue,
                    job_id,
                    lease_token,
                    disposition: pb::FailDisposition::Release as i32,
                    error: Some(pb::JobError {
                        message: format!(
                            "the worker shut down before the job finished (grace {:?})",
                            self.o.grace
                        ),
                        error_type: "worker_shutdown".into(),
                        details: String::new(),
                    }),
                    ..Default::default()
                }),
            ));
        }
        if !fails.is_empty() {
            tracing::warn!(
                jobs = fails.len(),
                "grace over: cancelling handlers, handing their jobs back uncharged"
            );
        }
        for t in gone {
            self.held.remove(&t);
        }
        for (token, outcome) in fails {
            self.settle(&token, outcome);
        }
    }
}
