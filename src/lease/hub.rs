//! [`Hub`]: this replica's registry of worker streams and per-queue lease loops, and the
//! orderly shutdown (stop leasing, tell streams, wait for acks, hand the rest back).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::background::Subscription;
use super::outbound::OutboundStream;
use super::queue_loop::QueueLoop;
use super::session::{LeaseRef, Outbound, Session};
use super::settle::{Coalescer, FailOp, MAX_SETTLE_BATCH};
use super::settle_lease::AckOp;
use super::unsent::Unsent;
use crate::jobs::QueueName;
use crate::store::Store;
use crate::telemetry::Untrusted;

/// Lease timing knobs.
#[derive(Clone, Debug)]
pub struct HubConfig {
    /// A lease's deadline is this far ahead of each renewal.
    pub lease_duration: Duration,
    /// A stream silent for longer stops having its leases renewed.
    pub heartbeat_timeout: Duration,
    /// How often the reaper looks for expired leases and due delayed jobs.
    pub reaper_interval: Duration,
    /// Registered queues the reaper's safety sweep visits per second (0: none).
    pub sweep_rate: u32,
    /// This replica's id (ListWorkers).
    pub replica_id: String,
    /// How often this replica's worker streams are written to Redis (ListWorkers).
    pub workers_report_interval: Duration,
}

/// Shared by every stream and background task of this replica; cheap to clone.
#[derive(Clone)]
pub struct Hub {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub(super) store: Store,
    pub(super) config: HubConfig,
    pub(super) loops: Mutex<HashMap<QueueName, Arc<QueueLoop>>>,
    pub(super) sessions: Mutex<HashMap<u64, Arc<Session>>>,
    next_session: AtomicU64,
    pub(super) draining: AtomicBool,
    /// Cancelled when the replica stops: every background task ends.
    pub(super) stop: CancellationToken,
    pub(super) tracker: TaskTracker,
    started: Instant,
    /// The per-queue ack lanes (group commit, see `settle.rs`; with the next leases, see
    /// `settle_lease.rs`).
    pub(super) acks: Coalescer<AckOp>,
    /// The per-queue fail lanes.
    pub(super) fails: Coalescer<FailOp>,
    /// Tells the wake-up listener about each queue that gets or loses its local loop (sent
    /// under the `loops` lock, so the listener sees them in the map's order).
    new_queues: mpsc::UnboundedSender<Subscription>,
    /// The listener's end, taken when it starts.
    pub(super) new_queues_rx: Mutex<Option<mpsc::UnboundedReceiver<Subscription>>>,
    /// Leases got from Redis and not sent or handed back yet: their calls are not confirmed
    /// meanwhile (`unsent.rs`).
    pub(super) unsent: Arc<Unsent>,
}

impl Hub {
    /// A hub over `store`; call [`Hub::start_background`] to run renewal, reaper and wake-ups.
    pub fn new(store: Store, config: HubConfig) -> Hub {
        let stop = CancellationToken::new();
        let tracker = TaskTracker::new();
        let fails = Coalescer::new(
            FailOp(store.clone()),
            MAX_SETTLE_BATCH,
            tracker.clone(),
            stop.clone(),
        );
        let (new_queues, new_queues_rx) = mpsc::unbounded_channel();
        // The ack lanes reach back to the hub (the queue loops' lease-call bookkeeping).
        let inner = Arc::new_cyclic(|hub| Inner {
            acks: Coalescer::new(
                AckOp {
                    store: store.clone(),
                    hub: hub.clone(),
                },
                MAX_SETTLE_BATCH,
                tracker.clone(),
                stop.clone(),
            ),
            store,
            config,
            loops: Mutex::default(),
            sessions: Mutex::default(),
            next_session: AtomicU64::new(1),
            draining: AtomicBool::new(false),
            stop,
            tracker,
            started: Instant::now(),
            fails,
            new_queues,
            new_queues_rx: Mutex::new(Some(new_queues_rx)),
            unsent: Arc::default(),
        });
        Hub { inner }
    }

    /// The store this hub leases from.
    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// The lease timing knobs.
    pub fn config(&self) -> &HubConfig {
        &self.inner.config
    }

    /// Milliseconds since the hub started (a monotonic clock for heartbeats).
    pub(super) fn mono_ms(&self) -> u64 {
        self.inner.started.elapsed().as_millis() as u64
    }

    /// Longest a lease waits in a stream's outbox for the transport to take it: 1 s, or a
    /// quarter of the lease duration if shorter (each lease also at most half its job's
    /// timeout, see `Session::deliver`). Past it, the lease goes back to waiting uncharged.
    fn outbox_wait(&self) -> Duration {
        OUTBOX_MAX_WAIT.min(self.config().lease_duration / 4)
    }

    /// Is the replica shutting down (no new leases, no new streams)?
    pub fn is_draining(&self) -> bool {
        self.inner.draining.load(Ordering::Relaxed)
    }

    /// Registers a stream that leases from `queues` with `credits` free slots (capped at
    /// [`super::MAX_CREDITS`]). Returns the session and its outbound half; dropping the
    /// outbound half closes the session.
    pub fn open_session(
        &self,
        queues: Vec<QueueName>,
        credits: u32,
        worker_id: String,
    ) -> (Arc<Session>, OutboundStream) {
        let id = self.inner.next_session.fetch_add(1, Ordering::Relaxed);
        let session = Session::new(
            id,
            worker_id,
            queues,
            credits,
            self.mono_ms(),
            self.outbox_wait(),
            self.inner.unsent.clone(),
        );
        let session = Arc::new(session);
        if let Ok(mut s) = self.inner.sessions.lock() {
            s.insert(id, session.clone());
        }
        for q in &session.queues {
            let lp = self.join_loop(q, &session);
            lp.notify.notify_one();
        }
        let out = OutboundStream::new(self.clone(), session.clone());
        (session, out)
    }

    /// The stream ended: stop leasing to it and stop renewing its leases (they expire at
    /// their deadline unless a reconnecting worker extends them by token). The leases still
    /// in its outbox never reached the worker: they go back to waiting at once, without an
    /// attempt. Idempotent.
    pub fn close_session(&self, session: &Arc<Session>) {
        let undelivered = session.close();
        if !undelivered.is_empty() {
            self.release_undelivered(undelivered);
        }
        if let Ok(mut s) = self.inner.sessions.lock() {
            s.remove(&session.id);
        }
        // A loop whose last stream this was ends, and its wake-up subscription with it: a
        // queue no local stream serves costs this replica nothing.
        let mut loops = match self.inner.loops.lock() {
            Ok(l) => l,
            Err(p) => p.into_inner(),
        };
        for q in &session.queues {
            if let Some(lp) = loops.get(q) {
                if lp.remove(session.id) {
                    lp.stop.cancel();
                    loops.remove(q);
                    let _ = self.inner.new_queues.send(Subscription::Drop(q.clone()));
                }
            }
        }
    }

    /// Waits while too many replies wait unread on `session`'s outbound half (see
    /// [`Session`]'s `outbound_room`); the stream's reader calls it before reading more.
    pub async fn outbound_room(&self, session: &Session) {
        session.outbound_room().await;
    }

    /// The worker was heard from.
    pub fn touch(&self, session: &Session) {
        session.touch(self.mono_ms());
    }

    /// The worker grants `n` more credits. Free credits and held leases together stay at
    /// most [`super::MAX_CREDITS`]: a grant past the cap is clamped (the proto says "the
    /// total is capped at 10000"). Returns how many were added.
    pub fn grant(&self, session: &Session, n: u32) -> u32 {
        let added = session.grant(i64::from(n));
        if added > 0 {
            self.notify_queues(&session.queues);
        }
        added as u32
    }

    /// Ends `session` for a reason of the server's (`why` is the stream's final status).
    /// With `hand_back`, the leases it holds go back to waiting at once, without an attempt
    /// (an orderly end the worker was told of, like a drain); without, they are no longer
    /// renewed and expire at their deadline like those of a stream that broke. The leases
    /// still in its outbox go back either way. Idempotent.
    pub async fn end_session(&self, session: &Arc<Session>, why: crate::Error, hand_back: bool) {
        if session.is_closed() {
            return;
        }
        session.draining.store(true, Ordering::Relaxed);
        let held = if hand_back {
            session.book().take_all()
        } else {
            Vec::new()
        };
        session.send(Outbound::Fatal(why));
        self.close_session(session);
        if !held.is_empty() {
            let patience = self.config().lease_duration;
            self.release(
                held,
                "handed back the leases of a stream the server ended",
                patience,
            )
            .await;
        }
    }

    /// The worker asked for no more leases on this stream.
    pub fn drain_session(&self, session: &Session) {
        session.draining.store(true, Ordering::Relaxed);
    }

    /// A job was settled with lease `token` (acked or failed, by stream or unary call,
    /// applied or refused): the local stream that held it under that token gets its credit
    /// back. Matching the token matters: a stale settle from a worker whose lease was lost
    /// must not strip the job from the stream that holds it now (which would stop renewing
    /// the live lease). Returns the attempt's span when a local stream held it
    /// (`Span::none()` otherwise), to log the outcome in.
    pub fn settled(&self, queue: &QueueName, id: &str, token: &str) -> tracing::Span {
        let sessions = match self.inner.loops.lock() {
            Ok(l) => l.get(queue).map(|lp| lp.sessions()),
            Err(_) => None,
        };
        for s in sessions.unwrap_or_default() {
            if let Some(held) = s.settle(queue, id, token) {
                self.credits_freed(&s.queues);
                return held.span;
            }
        }
        tracing::Span::none()
    }

    /// Job `id` of `queue`, leased under `token`, was cancelled: the local stream holding
    /// that lease (if any) is sent a CancelLease, once per lease (a notice over pub/sub and
    /// the renewal's report may both arrive). Returns whether a stream was told now.
    pub fn tell_cancel(
        &self,
        queue: &QueueName,
        id: &str,
        token: &str,
        revoke_ms: u64,
        reason: &str,
    ) -> bool {
        let sessions = match self.inner.loops.lock() {
            Ok(l) => l.get(queue).map(|lp| lp.sessions()),
            Err(_) => None,
        };
        let notice = super::session::CancelLease {
            queue: queue.clone(),
            id: id.to_owned(),
            token: token.to_owned(),
            reason: reason.to_owned(),
            revoke_ms,
        };
        for s in sessions.unwrap_or_default() {
            if s.cancel(&notice) {
                tracing::info!(queue = %queue, job_id = %Untrusted(id), worker_id = %Untrusted(&s.worker_id),
                    reason = %Untrusted(reason), revoke_ms, "told the lease holder its job was cancelled");
                return true;
            }
        }
        false
    }

    /// Something may be ready on `queue` (a pub/sub wake-up): its loop looks again.
    pub fn wake(&self, queue: &QueueName) {
        if let Ok(l) = self.inner.loops.lock() {
            if let Some(lp) = l.get(queue) {
                lp.backlog.store(true, Ordering::Relaxed);
                lp.notify.notify_one();
            }
        }
    }

    /// A lease call of `queue` failed, so its reply (if it ran) is lost: releases the call
    /// by id in the background, retried until Redis answers or the replica stops. Its jobs
    /// go back to waiting uncharged; if this never runs, the reaper does the same at the
    /// call's deadline (attempts.lua, "Lost lease replies").
    pub(super) fn release_lost_lease_call(&self, queue: QueueName, call: String) {
        let hub = self.clone();
        let stop = self.inner.stop.clone();
        // Long enough for the call to have run or died: several lease durations.
        let tombstone_ms = (self.config().lease_duration.as_millis() as u64).saturating_mul(4);
        self.inner.tracker.spawn(async move {
            let mut pause = Duration::from_millis(100);
            loop {
                match hub
                    .store()
                    .release_lease_call(&queue, &call, tombstone_ms)
                    .await
                {
                    Ok(n) => {
                        if n > 0 {
                            tracing::info!(queue = %queue, jobs = n, "released the jobs of a lease call whose reply was lost");
                        }
                        return;
                    }
                    Err(e) => {
                        tracing::debug!(queue = %queue, error = %e, "cannot release a lost lease call yet");
                    }
                }
                tokio::select! {
                    _ = tokio::time::sleep(pause) => {}
                    _ = stop.cancelled() => return,
                }
                pause = (pause * 2).min(Duration::from_secs(2));
            }
        });
    }

    /// The queues that have a local lease loop.
    pub(super) fn loop_queues(&self) -> Vec<QueueName> {
        self.inner
            .loops
            .lock()
            .map(|l| l.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Wakes every queue loop (after a pub/sub reconnect, when messages may have been lost).
    pub(super) fn wake_all(&self) {
        if let Ok(l) = self.inner.loops.lock() {
            for lp in l.values() {
                lp.notify.notify_one();
            }
        }
    }

    /// Does `queue`'s local lease loop believe more jobs are leasable right now?
    pub(super) fn has_backlog(&self, queue: &QueueName) -> bool {
        self.inner
            .loops
            .lock()
            .ok()
            .and_then(|l| l.get(queue).map(|lp| lp.backlog.load(Ordering::Relaxed)))
            .unwrap_or(false)
    }

    /// Wakes the loops of every queue the given streams lease from that may have jobs to
    /// lease (backlog), but `except`'s (the caller's own loop, which would otherwise wake
    /// itself in a loop). A loop without backlog found its queue empty and is woken anyway
    /// when jobs become ready; waking it for credits alone made two empty queues of one
    /// stream ping-pong empty lease calls (thousands a second).
    pub(super) fn notify_sessions_queues(&self, sessions: &[Arc<Session>], except: &QueueName) {
        if let Ok(l) = self.inner.loops.lock() {
            for s in sessions {
                for q in s.queues.iter().filter(|q| *q != except) {
                    if let Some(lp) = l.get(q) {
                        if lp.backlog.load(Ordering::Relaxed) {
                            lp.notify.notify_one();
                        }
                    }
                }
            }
        }
    }

    /// A settle gave credits back to a stream on `queues`: wakes the loops that may use
    /// them ([`QueueLoop::wants_freed_credits`]). A loop whose last call found its queue dry
    /// with credits to spare is not woken: a wake-up for credits alone made it lease
    /// nothing after every ack of a queue that keeps running dry (one empty lease call and
    /// its intent a job at a fixed low rate).
    pub(super) fn credits_freed(&self, queues: &[QueueName]) {
        if let Ok(l) = self.inner.loops.lock() {
            for q in queues {
                if let Some(lp) = l.get(q) {
                    if lp.wants_freed_credits() {
                        lp.notify.notify_one();
                    }
                }
            }
        }
    }

    pub(super) fn notify_queues(&self, queues: &[QueueName]) {
        if let Ok(l) = self.inner.loops.lock() {
            for q in queues {
                if let Some(lp) = l.get(q) {
                    lp.notify.notify_one();
                }
            }
        }
    }

    /// Adds `session` to `queue`'s local loop, starting the loop (and its wake-up
    /// subscription) if the queue has none. Under the `loops` lock, so a loop that
    /// [`Hub::close_session`] is ending never gets a new stream.
    fn join_loop(&self, queue: &QueueName, session: &Arc<Session>) -> Arc<QueueLoop> {
        let mut loops = match self.inner.loops.lock() {
            Ok(l) => l,
            Err(p) => p.into_inner(),
        };
        if let Some(lp) = loops.get(queue) {
            lp.add(session.clone());
            return lp.clone();
        }
        let lp = Arc::new(QueueLoop::new(
            queue.clone(),
            self.inner.stop.child_token(),
            self.inner.unsent.clone(),
        ));
        lp.add(session.clone());
        loops.insert(queue.clone(), lp.clone());
        let _ = self.inner.new_queues.send(Subscription::Add(queue.clone()));
        let hub = self.clone();
        let task_loop = lp.clone();
        self.inner
            .tracker
            .spawn(async move { task_loop.run(hub).await });
        lp
    }

    /// Every open stream.
    pub fn sessions(&self) -> Vec<Arc<Session>> {
        self.inner
            .sessions
            .lock()
            .map(|s| s.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Orderly shutdown: stop leasing, send `Draining` to every stream, wait up to `grace`
    /// for the workers to settle what they hold (and for those settles' replies to be
    /// queued: [`Session::settled_all`]), then hand the remaining leases back to
    /// waiting (no attempt consumed), close the streams and stop the background tasks.
    pub async fn shutdown(&self, grace: Duration) {
        self.inner.draining.store(true, Ordering::Relaxed);
        self.wake_all();
        let sessions = self.sessions();
        for s in &sessions {
            s.send(Outbound::Draining(grace));
        }
        let deadline = tokio::time::Instant::now() + grace;
        while tokio::time::Instant::now() < deadline
            && sessions.iter().any(|s| !s.settled_all() && !s.is_closed())
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.release_all(&sessions).await;
        for s in &sessions {
            self.close_session(s);
        }
        self.inner.stop.cancel();
        self.inner.tracker.close();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.inner.tracker.wait()).await;
    }

    /// How long a hand-back of leases no worker received keeps trying while Redis does not
    /// answer: [`UNDELIVERED_PATIENCE`], or a lease duration when that is longer.
    pub(super) fn undelivered_patience(&self) -> Duration {
        self.config().lease_duration.max(UNDELIVERED_PATIENCE)
    }

    /// Hands `leases` (taken by no worker: a closed stream's outbox, an orphaned delivery)
    /// back to waiting in a task of its own, trying
    /// again for up to [`UNDELIVERED_PATIENCE`] (at least a lease duration) while Redis does
    /// not answer: during an outage the reaper cannot take them either, and after it the
    /// first of the two to reach Redis decides whether an attempt is charged.
    pub(super) fn release_undelivered(&self, leases: Vec<LeaseRef>) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(
                leases = leases.len(),
                "no runtime to hand undelivered leases back; they expire"
            );
            return;
        };
        let hub = self.clone();
        let _guard = rt.enter();
        self.inner.tracker.spawn(async move {
            let patience = hub.undelivered_patience();
            hub.release(
                leases,
                "handed undelivered leases back to waiting",
                patience,
            )
            .await
        });
    }

    async fn release_all(&self, sessions: &[Arc<Session>]) {
        let mut all = Vec::new();
        for s in sessions {
            all.extend(s.book().take_all());
        }
        // Shutdown waits for this: a Redis that is down must not hold the exit for a whole
        // lease duration. What is not handed back then expires at its deadline.
        let patience = self.config().lease_duration.min(SHUTDOWN_RELEASE_PATIENCE);
        self.release(all, "handed leases back to waiting", patience)
            .await;
    }

    /// Hands `leases` back to waiting (no attempt consumed), one script call per queue and
    /// at most [`RELEASE_BATCH`] leases per call. A call Redis does not answer is tried
    /// again with backoff (100 ms doubling to 2 s) for up to `patience`, or until the hub
    /// stops: the leases never reached a worker, and left alone they would be reclaimed at
    /// their deadline and charged an attempt. `release.lua` hands back only a lease whose
    /// token still matches, so a call that ran although its reply was lost, or a lease the
    /// reaper took meanwhile, makes a repeat harmless. Once Redis answered (or the tries
    /// ran out), the leases no longer hold their calls' confirmation back (`unsent.rs`):
    /// confirmed before the hand-back landed, an expired one would be charged.
    pub(super) async fn release(
        &self,
        leases: Vec<LeaseRef>,
        what: &'static str,
        patience: Duration,
    ) {
        let mut by_queue: HashMap<QueueName, Vec<(String, String)>> = HashMap::new();
        for (q, id, token) in leases {
            by_queue.entry(q).or_default().push((id, token));
        }
        let give_up = tokio::time::Instant::now() + patience;
        for (queue, items) in by_queue {
            for chunk in items.chunks(RELEASE_BATCH) {
                let mut pause = Duration::from_millis(100);
                loop {
                    match self.inner.store.release(&queue, chunk).await {
                        Ok(n) => {
                            tracing::info!(queue = %queue, released = n, "{what}");
                            break;
                        }
                        Err(e) if tokio::time::Instant::now() + pause >= give_up => {
                            tracing::warn!(queue = %queue, leases = chunk.len(), error = %e, "could not hand leases back; they expire at their deadline");
                            break;
                        }
                        Err(e) => {
                            tracing::debug!(queue = %queue, error = %e, "cannot hand leases back yet; trying again");
                        }
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(pause) => {}
                        _ = self.inner.stop.cancelled() => return,
                    }
                    pause = (pause * 2).min(Duration::from_millis(500));
                }
                for (_, token) in chunk {
                    self.inner.unsent.sent(token);
                }
            }
        }
    }
}

/// Longest a lease waits in a stream's outbox (see `Hub::outbox_wait`).
const OUTBOX_MAX_WAIT: Duration = Duration::from_secs(1);

/// Longest a live replica keeps trying to hand undelivered leases back to a Redis that
/// does not answer (a lease duration when that is longer).
const UNDELIVERED_PATIENCE: Duration = Duration::from_secs(30);

/// Longest shutdown tries to hand leases back to a Redis that does not answer.
const SHUTDOWN_RELEASE_PATIENCE: Duration = Duration::from_secs(5);

/// Most leases one release call hands back.
const RELEASE_BATCH: usize = 1000;
