//! The stream side of the loop: opening it (credits = free slots), leases in, Settled
//! replies, the server's Draining, and what happens to held leases when it breaks.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio_util::sync::CancellationToken;

use super::{Core, Event, Held, Live, State};
use crate::stream::{lease_ids, LeaseStream, StreamEvent, StreamSender};
use crate::worker::settle;
use crate::worker::WorkerStats;
use crate::worker::{run_handler, Ctx, Reporter};
use crate::{pb, Error, JobError};

impl Core {
    pub(super) fn maybe_connect(&mut self) {
        if self.deadline.is_some()
            || self.live.is_some()
            || self.connecting
            || Instant::now() < self.next_connect
        {
            return;
        }
        let credits = self.free_slots();
        if credits == 0 {
            return; // every slot busy with leases of a broken stream: open when one frees
        }
        self.connecting = true;
        self.gen += 1;
        let (gen, client, tx) = (self.gen, self.client.clone(), self.tx.clone());
        let (queues, worker_id) = (self.o.queues.clone(), self.worker_id.clone());
        tokio::spawn(async move {
            let result = client.subscribe(&queues, credits, &worker_id).await;
            let _ = tx.send(Event::Connected {
                gen,
                credits,
                result,
            });
        });
    }

    pub(super) fn on_connected(
        &mut self,
        gen: u64,
        credits: u32,
        result: Result<(StreamSender, LeaseStream), Error>,
    ) -> Result<(), Error> {
        self.connecting = false;
        match result {
            Ok((tx, mut rx)) => {
                if self.deadline.is_some() {
                    return Ok(()); // shutting down: dropping it closes it
                }
                let events = self.tx.clone();
                let reader = tokio::spawn(async move {
                    loop {
                        let msg = rx.next().await;
                        let end = !matches!(msg, Ok(Some(_)));
                        if events.send(Event::Stream { gen, msg }).is_err() || end {
                            break;
                        }
                    }
                });
                let now = Instant::now();
                // Slots freed while connecting: grant them now.
                let extra = self.free_slots().saturating_sub(credits);
                if extra > 0 {
                    tx.grant_credits(extra);
                }
                tracing::info!(worker_id = %self.worker_id, credits = credits + extra,
                    held = self.held.len(), "stream open");
                WorkerStats::add(&self.stats.streams);
                // Every lease still held from a broken stream: renew it now.
                for h in self.held.values_mut() {
                    h.next_extend = now;
                }
                self.live = Some(Live {
                    tx,
                    reader,
                    gen,
                    opened: now,
                    last_sent: now,
                    server_draining: false,
                });
            }
            Err(e) => {
                let fatal = matches!(
                    e.code(),
                    Some(
                        tonic::Code::InvalidArgument
                            | tonic::Code::Unauthenticated
                            | tonic::Code::PermissionDenied
                    )
                );
                // Refused for good (a bad queue name, a token without the worker role): run() ends
                // with the error, once nothing is held (a held job is settled first).
                if fatal && self.held.is_empty() {
                    return Err(e);
                }
                let wait = self.reconnect.next_delay();
                tracing::warn!(error = %e, retry_in = ?wait, "cannot open the stream");
                self.next_connect = Instant::now() + wait;
            }
        }
        Ok(())
    }

    pub(super) fn on_stream(&mut self, m: StreamEvent) {
        match m {
            StreamEvent::Lease(l) => self.on_lease(l),
            StreamEvent::Settled(s) => {
                let Some(h) = self.held.get(&s.lease_token) else {
                    return;
                };
                if !matches!(h.state, State::OnStream { .. }) {
                    return;
                }
                if s.code == tonic::Code::ResourceExhausted as i32 {
                    if let State::OnStream { outcome, .. } = &h.state {
                        let ids = (h.ids.0.as_str(), h.ids.1.as_str(), h.ids.2.as_str());
                        if let Some(fail) = settle::result_too_large(outcome, ids, &s.message) {
                            // The lease is still held by this stream: settle it again on it.
                            self.settle(&s.lease_token, fail);
                            return;
                        }
                    }
                }
                match s.code {
                    0 => {
                        WorkerStats::add(&self.stats.settled);
                        tracing::debug!(queue = s.queue, job_id = s.job_id, "settled")
                    }
                    9 => {
                        WorkerStats::add(&self.stats.lost);
                        tracing::warn!(queue = s.queue, job_id = s.job_id, reason = s.message,
                            "lease lost: the result was not applied (the job is or will be redelivered)")
                    }
                    c => {
                        WorkerStats::add(&self.stats.refused);
                        tracing::error!(
                            queue = s.queue,
                            job_id = s.job_id,
                            code = c,
                            reason = s.message,
                            "the server refused the result"
                        )
                    }
                }
                self.held.remove(&s.lease_token);
                // The server returned this stream's credit with the Settled.
            }
            StreamEvent::Cancel(c) => self.on_cancel(c),
            StreamEvent::ProgressSaved(p) => self.on_progress_saved(p),
            StreamEvent::Draining { grace } => {
                WorkerStats::add(&self.stats.server_drains);
                tracing::info!(
                    ?grace,
                    "the server is draining: finishing held jobs, then reconnecting"
                );
                if let Some(l) = self.live.as_mut() {
                    l.server_draining = true;
                }
            }
        }
    }

    pub(super) fn on_lease(&mut self, l: pb::Lease) {
        let Some(gen) = self.live.as_ref().map(|l| l.gen) else {
            return;
        };
        WorkerStats::add(&self.stats.leases);
        let now = Instant::now();
        let lease_for = l
            .lease_deadline
            .as_ref()
            .and_then(|d| {
                let at = SystemTime::UNIX_EPOCH
                    + Duration::new(u64::try_from(d.seconds).ok()?, d.nanos.max(0) as u32);
                at.duration_since(SystemTime::now()).ok()
            })
            .unwrap_or(self.lease_for)
            .clamp(Duration::from_millis(300), Duration::from_secs(3600));
        self.lease_for = lease_for;
        let token = l.lease_token.clone();
        let ids = {
            let (q, id) = lease_ids(&l);
            (q, id, token.clone())
        };
        if self.held.len() as u32 >= self.o.concurrency {
            tracing::error!(
                queue = ids.0,
                job_id = ids.1,
                "leased beyond the credits granted (a server bug); running it anyway"
            );
        }
        let events = self.tx.clone();
        let reporter: Reporter = Arc::new(move |r| events.send(Event::Report(r)).is_ok());
        let ctx = Ctx::for_lease(
            self.worker_id.clone(),
            CancellationToken::new(),
            ids.clone(),
            reporter,
        );
        let held_ctx = ctx.clone();
        let name = l.job.as_ref().map(|j| j.name.clone()).unwrap_or_default();
        let handler = self.handlers.get(&name).cloned();
        let events = self.tx.clone();
        let t = token.clone();
        tokio::spawn(async move {
            let result = match handler {
                Some(h) => run_handler(h, l, ctx).await,
                None => Err(JobError::failed(
                    "no_handler",
                    format!("this worker has no handler for job name {name:?}"),
                )),
            };
            let _ = events.send(Event::Done { token: t, result });
        });
        self.held.insert(
            token,
            Held {
                ids,
                gen,
                ctx: held_ctx,
                reports: VecDeque::new(),
                state: State::Running,
                lease_for,
                next_extend: now + lease_for / 3,
                extending: false,
                lost: false,
                abandoned: false,
            },
        );
    }

    /// The stream is gone: its leases become orphans (renewed with ExtendLease, settled with
    /// unary calls), results sent on it without a reply are re-sent unary, and a new stream
    /// is opened after a full-jitter backoff.
    pub(super) fn stream_lost(&mut self, why: &str) {
        let Some(live) = self.live.take() else {
            return;
        };
        live.reader.abort();
        if live.opened.elapsed() >= Duration::from_secs(1) {
            self.reconnect.reset();
        }
        let wait = if live.server_draining {
            Duration::ZERO
        } else {
            self.reconnect.next_delay()
        };
        self.next_connect = Instant::now() + wait;
        tracing::warn!(reason = why, held = self.held.len(), reconnect_in = ?wait, "stream lost");
        let now = Instant::now();
        let mut resend = Vec::new();
        for (token, h) in self.held.iter_mut() {
            if h.gen != live.gen {
                continue;
            }
            match &h.state {
                State::Running => h.next_extend = now,
                State::OnStream { outcome, .. } => resend.push((token.clone(), outcome.clone())),
                State::Unary => {}
            }
        }
        for (token, outcome) in resend {
            self.settle(&token, outcome);
        }
        self.resend_reports(live.gen);
    }
}
