//! The worker's event loop: one task owns the stream, the held leases and the credits.
//! Handlers, the stream reader, connects and unary calls run in their own tasks and report
//! back through one channel, so the bookkeeping needs no locks.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::settle::{self, Extended, Outcome, Settled};
use super::{fail_request, run_handler, Ctx, Handler, WorkerOptions};
use crate::backoff::FullJitter;
use crate::client::pb_duration;
use crate::stream::{lease_ids, LeaseStream, StreamEvent, StreamSender};
use crate::{pb, Client, Error, JobError};

/// How often timers are checked (heartbeats, renewals, reconnects, the grace).
const TICK: Duration = Duration::from_millis(100);
/// The lease duration assumed until a lease shows the server's.
const DEFAULT_LEASE: Duration = Duration::from_secs(30);
/// After the grace: how long the final Fail calls may take before the worker exits anyway.
const FINAL_SETTLE: Duration = Duration::from_secs(5);
/// retry_after of the jobs failed at the end of a shutdown's grace.
const SHUTDOWN_RETRY_AFTER: Duration = Duration::from_secs(1);

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
    cancel: CancellationToken,
    state: State,
    lease_for: Duration,
    next_extend: Instant,
    extending: bool,
    /// ExtendLease said the lease is gone: the handler's result will be dropped (logged).
    lost: bool,
    /// Failed at the end of the grace: a later result from the handler is dropped (logged).
    abandoned: bool,
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
    ever_connected: bool,
    reconnect: FullJitter,
    next_connect: Instant,
    lease_for: Duration,
    /// Set at shutdown: the end of the grace.
    deadline: Option<Instant>,
    /// Set when the grace ran out: the last moment to wait for the final settles.
    final_deadline: Option<Instant>,
}

impl Core {
    pub(super) fn new(
        client: Client,
        o: WorkerOptions,
        handlers: HashMap<String, Handler>,
        worker_id: String,
        shutdown: CancellationToken,
        hurry: CancellationToken,
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
            ever_connected: false,
            reconnect: FullJitter::reconnect(),
            next_connect: Instant::now(),
            lease_for: DEFAULT_LEASE,
            deadline: None,
            final_deadline: None,
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

    fn maybe_connect(&mut self) {
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
            Event::Unary { token, result } => {
                if let Some(h) = self.held.remove(&token) {
                    let (q, id) = (&h.ids.0, &h.ids.1);
                    match result {
                        Settled::Applied => tracing::debug!(queue = q, job_id = id, "settled"),
                        Settled::Lost(m) => tracing::warn!(queue = q, job_id = id, reason = m,
                            "lease lost before the result was settled; result dropped (the job is or will be redelivered)"),
                        Settled::Refused(s) => tracing::error!(queue = q, job_id = id, error = %s,
                            "the server refused the result"),
                    }
                    self.slot_freed(&h);
                }
            }
            Event::Extend { token, result } => {
                if let Some(h) = self.held.get_mut(&token) {
                    h.extending = false;
                    match result {
                        Extended::Renewed => {
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
                            h.cancel.cancel();
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

    fn on_connected(
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
                self.ever_connected = true;
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
                if fatal && !self.ever_connected && self.held.is_empty() {
                    return Err(e);
                }
                let wait = self.reconnect.next_delay();
                tracing::warn!(error = %e, retry_in = ?wait, "cannot open the stream");
                self.next_connect = Instant::now() + wait;
            }
        }
        Ok(())
    }

    fn on_stream(&mut self, m: StreamEvent) {
        match m {
            StreamEvent::Lease(l) => self.on_lease(l),
            StreamEvent::Settled(s) => {
                let Some(h) = self.held.get(&s.lease_token) else {
                    return;
                };
                if !matches!(h.state, State::OnStream { .. }) {
                    return;
                }
                match s.code {
                    0 => tracing::debug!(queue = s.queue, job_id = s.job_id, "settled"),
                    9 => tracing::warn!(queue = s.queue, job_id = s.job_id, reason = s.message,
                        "lease lost: the result was not applied (the job is or will be redelivered)"),
                    c => tracing::error!(queue = s.queue, job_id = s.job_id, code = c,
                        reason = s.message, "the server refused the result"),
                }
                self.held.remove(&s.lease_token);
                // The server returned this stream's credit with the Settled.
            }
            StreamEvent::Draining { grace } => {
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

    fn on_lease(&mut self, l: pb::Lease) {
        let Some(gen) = self.live.as_ref().map(|l| l.gen) else {
            return;
        };
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
        let cancel = CancellationToken::new();
        let ctx = Ctx {
            cancel: cancel.clone(),
            worker_id: self.worker_id.clone(),
        };
        let name = l.job.as_ref().map(|j| j.name.clone()).unwrap_or_default();
        let handler = self.handlers.get(&name).cloned();
        let events = self.tx.clone();
        let t = token.clone();
        tokio::spawn(async move {
            let result = match handler {
                Some(h) => run_handler(h, l, ctx).await,
                None => Err(JobError::failed(
                    "NoHandler",
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
                cancel,
                state: State::Running,
                lease_for,
                next_extend: now + lease_for / 3,
                extending: false,
                lost: false,
                abandoned: false,
            },
        );
    }

    fn on_done(&mut self, token: String, result: Result<(), JobError>) {
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
            tracing::warn!(queue = q, job_id = id, ok = result.is_ok(),
                "handler finished but its lease was lost; result dropped (the job is or will be redelivered)");
            if let Some(h) = self.held.remove(&token) {
                self.slot_freed(&h);
            }
            return;
        }
        let outcome = match result {
            Ok(()) => Outcome::Ack,
            Err(e) => {
                tracing::warn!(queue = q, job_id = id, error = %e, "job failed");
                let mut req = fail_request(e);
                (req.queue, req.job_id, req.lease_token) = h.ids.clone();
                Outcome::Fail(req)
            }
        };
        self.settle(&token, outcome);
    }

    /// Sends `outcome` for the held lease `token`: on the stream that leased it if it is
    /// still up, else with a unary call.
    fn settle(&mut self, token: &str, outcome: Outcome) {
        let Some(h) = self.held.get_mut(token) else {
            return;
        };
        match self.live.as_mut().filter(|l| l.gen == h.gen) {
            Some(live) => {
                let sent = match &outcome {
                    Outcome::Ack => {
                        live.tx
                            .send(pb::subscribe_request::Message::Ack(pb::AckRequest {
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
    fn slot_freed(&mut self, h: &Held) {
        if let Some(live) = self.live.as_mut() {
            if live.gen != h.gen && !live.server_draining && self.deadline.is_none() {
                live.tx.grant_credits(1);
                live.last_sent = Instant::now();
            }
        }
    }

    /// The stream is gone: its leases become orphans (renewed with ExtendLease, settled with
    /// unary calls), results sent on it without a reply are re-sent unary, and a new stream
    /// is opened after a full-jitter backoff.
    fn stream_lost(&mut self, why: &str) {
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
                    && matches!(h.state, State::OnStream { sent, .. } if now.duration_since(sent) >= stall)
            });
            if stalled {
                self.stream_lost("stalled: settle replies are overdue");
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

    /// The grace ran out: cancel the handlers and fail what they hold as RETRY.
    fn abandon(&mut self) {
        self.final_deadline = Some(Instant::now() + FINAL_SETTLE);
        let mut fails = Vec::new();
        let mut gone = Vec::new();
        for (token, h) in self.held.iter_mut() {
            if !matches!(h.state, State::Running) {
                continue;
            }
            h.cancel.cancel();
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
                    disposition: pb::FailDisposition::Retry as i32,
                    error: Some(pb::JobError {
                        message: format!(
                            "the worker shut down before the job finished (grace {:?})",
                            self.o.grace
                        ),
                        error_type: "WorkerShutdown".into(),
                        details: String::new(),
                    }),
                    retry_after: Some(pb_duration(SHUTDOWN_RETRY_AFTER)),
                    ..Default::default()
                }),
            ));
        }
        if !fails.is_empty() {
            tracing::warn!(
                jobs = fails.len(),
                "grace over: cancelling handlers, failing their jobs as RETRY"
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
