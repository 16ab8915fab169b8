//! The worker's event loop: one task owns the stream, the held leases and the credits.
//! Handlers, the stream reader, connects and unary calls run in their own tasks and report
//! back through one channel, so the bookkeeping needs no locks.

mod control;
mod settling;
mod stream;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::settle::{self, Extended, Outcome, Settled};
use super::{CancelCause, Ctx, Handler, ReportRequest, WorkerOptions, WorkerStats};
use crate::backoff::FullJitter;
use crate::stream::{LeaseStream, StreamEvent, StreamSender};
use crate::{Client, Error, JobError};

/// How often timers are checked (heartbeats, renewals, reconnects, the grace).
const TICK: Duration = Duration::from_millis(100);
/// The lease duration assumed until a lease shows the server's.
const DEFAULT_LEASE: Duration = Duration::from_secs(30);
/// After the grace: how long the final Fail calls may take before the worker exits anyway.
const FINAL_SETTLE: Duration = Duration::from_secs(5);

#[allow(clippy::large_enum_variant)] // most events are stream messages (leases)
enum Event {
    Done {
        token: String,
        result: Result<(), JobError>,
    },
    Stream {
        gen: u64,
        msg: Result<Option<StreamEvent>, tonic::Status>,
    },
    Connected {
        gen: u64,
        credits: u32,
        result: Result<(StreamSender, LeaseStream), Error>,
    },
    Unary {
        token: String,
        result: Settled,
    },
    Extend {
        token: String,
        result: Extended,
    },
    /// A handler's progress report.
    Report(ReportRequest),
}

enum State {
    /// The handler runs.
    Running,
    /// Its result was sent on the stream; waiting for the Settled reply.
    OnStream { outcome: Outcome, sent: Instant },
    /// Being settled with a unary call.
    Unary,
}

struct Held {
    ids: (String, String, String),
    /// The stream generation that leased it.
    gen: u64,
    /// The handler's context: its cancel token and cause, its result.
    ctx: Ctx,
    /// Progress reports sent on stream `gen`, oldest first, waiting for their ProgressSaved
    /// (the server answers a stream's reports in order).
    reports: VecDeque<PendingReport>,
    state: State,
    lease_for: Duration,
    next_extend: Instant,
    extending: bool,
    /// ExtendLease said the lease is gone: the handler's result will be dropped (logged).
    lost: bool,
    /// Failed at the end of the grace: a later result from the handler is dropped (logged).
    abandoned: bool,
}

/// A progress report sent on a stream.
struct PendingReport {
    req: crate::pb::ReportProgressRequest,
    reply: tokio::sync::oneshot::Sender<Result<(), Error>>,
    sent: Instant,
}

struct Live {
    tx: StreamSender,
    reader: JoinHandle<()>,
    gen: u64,
    opened: Instant,
    last_sent: Instant,
    server_draining: bool,
}

pub(super) struct Core {
    client: Client,
    o: WorkerOptions,
    handlers: HashMap<String, Handler>,
    worker_id: Arc<str>,
    shutdown: CancellationToken,
    hurry: CancellationToken,
    tx: mpsc::UnboundedSender<Event>,
    rx: mpsc::UnboundedReceiver<Event>,
    held: HashMap<String, Held>,
    live: Option<Live>,
    gen: u64,
    connecting: bool,
    reconnect: FullJitter,
    next_connect: Instant,
    lease_for: Duration,
    /// Set at shutdown: the end of the grace.
    deadline: Option<Instant>,
    /// Set when the grace ran out: the last moment to wait for the final settles.
    final_deadline: Option<Instant>,
    stats: Arc<WorkerStats>,
}

impl Core {
    pub(super) fn new(
        client: Client,
        o: WorkerOptions,
        handlers: HashMap<String, Handler>,
        worker_id: String,
        shutdown: CancellationToken,
        hurry: CancellationToken,
        stats: Arc<WorkerStats>,
    ) -> Core {
        let (tx, rx) = mpsc::unbounded_channel();
        Core {
            client,
            o,
            handlers,
            worker_id: worker_id.into(),
            shutdown,
            hurry,
            tx,
            rx,
            held: HashMap::new(),
            live: None,
            gen: 0,
            connecting: false,
            reconnect: FullJitter::reconnect(),
            next_connect: Instant::now(),
            lease_for: DEFAULT_LEASE,
            deadline: None,
            final_deadline: None,
            stats,
        }
    }

    pub(super) async fn run(mut self) -> Result<(), Error> {
        tracing::info!(worker_id = %self.worker_id, queues = ?self.o.queues,
            concurrency = self.o.concurrency, "worker starting");
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let (shutdown, hurry) = (self.shutdown.clone(), self.hurry.clone());
        self.maybe_connect();
        loop {
            if self.deadline.is_some() && self.held.is_empty() {
                break;
            }
            if self.final_deadline.is_some_and(|d| Instant::now() >= d) {
                for h in self.held.values() {
                    tracing::error!(queue = h.ids.0, job_id = h.ids.1,
                        "could not settle before exiting; the job comes back when its lease expires");
                }
                break;
            }
            tokio::select! {
                Some(ev) = self.rx.recv() => self.on_event(ev)?,
                _ = tick.tick() => self.on_tick(),
                _ = shutdown.cancelled(), if self.deadline.is_none() => self.begin_shutdown(),
                _ = hurry.cancelled(), if self.final_deadline.is_none() => {
                    self.begin_shutdown();
                    self.deadline = Some(Instant::now());
                    self.on_tick();
                }
            }
        }
        if let Some(live) = self.live.take() {
            drop(live.tx); // half-close: the server ends the stream
            live.reader.abort();
        }
        tracing::info!(worker_id = %self.worker_id, "worker stopped");
        Ok(())
    }

    fn free_slots(&self) -> u32 {
        self.o.concurrency.saturating_sub(self.held.len() as u32)
    }

    fn on_event(&mut self, ev: Event) -> Result<(), Error> {
        match ev {
            Event::Connected {
                gen,
                credits,
                result,
            } => return self.on_connected(gen, credits, result),
            Event::Stream { gen, msg } => {
                if self.live.as_ref().is_some_and(|l| l.gen == gen) {
                    match msg {
                        Ok(Some(m)) => self.on_stream(m),
                        Ok(None) => self.stream_lost("the server ended the stream"),
                        Err(s) => self.stream_lost(&format!("stream broke: {s}")),
                    }
                }
            }
            Event::Done { token, result } => self.on_done(token, result),
            Event::Report(r) => self.on_report(r),
            Event::Unary { token, result } => {
                if let Some(h) = self.held.remove(&token) {
                    let (q, id) = (&h.ids.0, &h.ids.1);
                    match result {
                        Settled::Applied => {
                            WorkerStats::add(&self.stats.settled);
                            tracing::debug!(queue = q, job_id = id, "settled")
                        }
                        Settled::Lost(m) => {
                            WorkerStats::add(&self.stats.lost);
                            tracing::warn!(queue = q, job_id = id, reason = m,
                                "lease lost before the result was settled; result dropped (the job is or will be redelivered)")
                        }
                        Settled::Refused(s) => {
                            WorkerStats::add(&self.stats.refused);
                            tracing::error!(queue = q, job_id = id, error = %s,
                                "the server refused the result")
                        }
                    }
                    self.slot_freed(&h);
                }
            }
            Event::Extend { token, result } => {
                if let Some(h) = self.held.get_mut(&token) {
                    h.extending = false;
                    match result {
                        Extended::Renewed => {
                            WorkerStats::add(&self.stats.extended);
                            tracing::debug!(
                                queue = h.ids.0,
                                job_id = h.ids.1,
                                "lease renewed (ExtendLease)"
                            );
                            h.next_extend = Instant::now() + h.lease_for / 3;
                        }
                        Extended::Lost(m) => {
                            tracing::warn!(
                                queue = h.ids.0,
                                job_id = h.ids.1,
                                reason = m,
                                "lease lost while reconnecting; cancelling its handler"
                            );
                            h.lost = true;
                            h.ctx.cancel_with(CancelCause::LeaseLost);
                        }
                        Extended::Retry(e) => {
                            tracing::debug!(
                                queue = h.ids.0,
                                job_id = h.ids.1,
                                error = e,
                                "ExtendLease failed; retrying"
                            );
                            h.next_extend = Instant::now() + Duration::from_millis(500);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn on_tick(&mut self) {
        let now = Instant::now();
        if let Some(live) = self.live.as_mut() {
            let every = self.o.heartbeat_interval.min(self.lease_for / 3);
            if now.duration_since(live.last_sent) >= every {
                live.tx.heartbeat();
                live.last_sent = now;
            }
            let stall = self.o.stall_timeout;
            let stalled = self.held.values().any(|h| {
                h.gen == live.gen
                    && (matches!(h.state, State::OnStream { sent, .. } if now.duration_since(sent) >= stall)
                        || h.reports.front().is_some_and(|p| now.duration_since(p.sent) >= stall))
            });
            if stalled {
                self.stream_lost("stalled: settle or progress replies are overdue");
            }
        }
        let live_gen = self.live.as_ref().map(|l| l.gen);
        for (token, h) in self.held.iter_mut() {
            let orphan = live_gen != Some(h.gen);
            if orphan
                && matches!(h.state, State::Running)
                && !h.extending
                && !h.lost
                && !h.abandoned
                && now >= h.next_extend
            {
                h.extending = true;
                let (client, events, ids) = (self.client.clone(), self.tx.clone(), h.ids.clone());
                let token = token.clone();
                tokio::spawn(async move {
                    let result = settle::extend(client, ids).await;
                    let _ = events.send(Event::Extend { token, result });
                });
            }
        }
        if self.deadline.is_some_and(|d| now >= d) && self.final_deadline.is_none() {
            self.abandon();
        }
        self.maybe_connect();
    }

    fn begin_shutdown(&mut self) {
        if self.deadline.is_some() {
            return;
        }
        self.deadline = Some(Instant::now() + self.o.grace);
        tracing::info!(held = self.held.len(), grace = ?self.o.grace,
            "draining: no more leases; waiting for held jobs");
        if let Some(live) = self.live.as_ref() {
            live.tx.drain();
        }
    }
}
