//! The hub's background tasks: batched lease renewal for live streams, the reaper (expired
//! leases, timed-out attempts, due delayed jobs and retention ages, on every queue whose
//! work is due, whether or not a local worker serves it), and the pub/sub listener that turns enqueues on any replica into
//! wake-ups of the local lease loops (subscribed to the queues those loops serve).

use std::collections::HashMap;
use std::time::Duration;

use tokio::sync::mpsc;

use super::hub::Hub;
use crate::jobs::QueueName;
use crate::store::{DueEntry, WakeEvent};
use crate::telemetry::Untrusted;

/// Most leases one renew call renews: a stream may hold up to `MAX_CREDITS` (10 000) and a
/// queue may have many streams, so one queue's renewal is split into calls this size to keep
/// each script call short.
const RENEW_BATCH: usize = 1000;
/// Most expired leases one reap call fails (it is called again at once while it fills).
const REAP_BATCH: usize = 100;
/// Most due queues one reaper tick reaps (the rest stay due for the next tick).
const DUE_BATCH: usize = 1000;
/// How often the safety sweep reaps a few registered queues whatever the due index says.
const SWEEP_EVERY: Duration = Duration::from_secs(1);
/// Default registered queues the sweep reaps each second (`--reaper-sweep-rate`): a full
/// sweep of N queues takes about N / rate seconds, at a cost independent of N.
pub const DEFAULT_SWEEP_RATE: u32 = 25;

/// How often the outbox sweep looks for leases waiting too long for their stream's
/// transport.
const OUTBOX_SWEEP: Duration = Duration::from_millis(100);

/// A change to the wake-up listener's subscriptions.
#[derive(Debug)]
pub(super) enum Subscription {
    /// The queue got a local lease loop: subscribe.
    Add(QueueName),
    /// The queue's local loop ended with its last stream: unsubscribe.
    Drop(QueueName),
}

impl Hub {
    /// Spawns renewal, reaper, the workers report and the wake-up listener on the hub's
    /// tracker; they stop at [`Hub::shutdown`].
    pub fn start_background(&self) {
        let hub = self.clone();
        self.inner
            .tracker
            .spawn(async move { hub.renew_loop().await });
        let hub = self.clone();
        self.inner
            .tracker
            .spawn(async move { hub.reap_loop().await });
        let hub = self.clone();
        self.inner
            .tracker
            .spawn(async move { hub.outbox_loop().await });
        let hub = self.clone();
        self.inner
            .tracker
            .spawn(async move { hub.report_loop().await });
        let hub = self.clone();
        let new_queues = self
            .inner
            .new_queues_rx
            .lock()
            .ok()
            .and_then(|mut rx| rx.take());
        if let Some(new_queues) = new_queues {
            self.inner
                .tracker
                .spawn(async move { hub.wake_listener(new_queues).await });
        }
    }

    /// Every lease_duration / 3, renews the leases of streams that are alive, one script
    /// call per queue and [`RENEW_BATCH`] leases, and ends the streams that went silent
    /// while holding leases (`Hub::end_silent`).
    async fn renew_loop(self) {
        let period = self.config().lease_duration / 3;
        let stop = self.inner.stop.clone();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(period) => {}
                _ = stop.cancelled() => return,
            }
            self.renew_once().await;
            self.end_silent(self.mono_ms()).await;
        }
    }

    async fn renew_once(&self) {
        let now = self.mono_ms();
        // Per queue, and apart the leases of calls with a lease still unsent: their renewal
        // must not confirm the call (`unsent.rs`).
        let mut by_queue: HashMap<(QueueName, bool), Vec<(String, String)>> = HashMap::new();
        for s in self.sessions() {
            if !s.alive(now, self.config().heartbeat_timeout) {
                continue;
            }
            for (q, id, token) in s.book().renewable() {
                let held = self.inner.unsent.holds_token(&token);
                by_queue.entry((q, !held)).or_default().push((id, token));
            }
        }
        let lease_ms = self.config().lease_duration.as_millis() as u64;
        for ((queue, confirm), items) in by_queue {
            for chunk in items.chunks(RENEW_BATCH) {
                match self.store().renew(&queue, chunk, lease_ms, confirm).await {
                    Ok(results) => {
                        for ((id, token), r) in chunk.iter().zip(results) {
                            match r {
                                crate::store::Settle::Done(crate::store::Renewed {
                                    cancel: Some((revoke_ms, reason)),
                                    ..
                                }) => {
                                    // The safety net of a lost cancel notice: told once.
                                    self.tell_cancel(&queue, id, token, revoke_ms, &reason);
                                }
                                crate::store::Settle::Done(_) => {}
                                _ => self.mark_lost(&queue, token),
                            }
                        }
                    }
                    Err(e) => {
                        tracing::warn!(queue = %queue, error = %e, "lease renewal failed")
                    }
                }
            }
        }
    }

    /// Every [`OUTBOX_SWEEP`], hands back to waiting (without an attempt) the leases that
    /// waited in a stream's outbox past their release time: the stream's transport did not
    /// take them (its worker stopped reading), so no worker received them, and their
    /// attempt deadline, running in Redis since the lease, must not charge an attempt.
    async fn outbox_loop(self) {
        let stop = self.inner.stop.clone();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(OUTBOX_SWEEP) => {}
                _ = stop.cancelled() => return,
            }
            let now = std::time::Instant::now();
            let mut overdue = Vec::new();
            for s in self.sessions() {
                let taken = s.release_overdue(now);
                if !taken.is_empty() {
                    tracing::info!(worker_id = %Untrusted(&s.worker_id), leases = taken.len(),
                        "the stream did not take its leases in time; handing them back");
                    overdue.extend(taken);
                }
            }
            if !overdue.is_empty() {
                // In the background: a hand-back that waits for Redis to answer again must
                // not hold up the next sweep.
                let hub = self.clone();
                let patience = self.undelivered_patience();
                self.inner.tracker.spawn(async move {
                    hub.release(
                        overdue,
                        "handed back leases a stalled stream did not take",
                        patience,
                    )
                    .await
                });
            }
        }
    }

    fn mark_lost(&self, queue: &QueueName, token: &str) {
        for s in self.sessions() {
            s.book().mark_lost(queue, token);
        }
    }

    /// Every reaper_interval, reaps the queues the due index says have work due (expired
    /// leases, due delayed jobs, retention ages) or a write announced (an intent, see
    /// `store/registry.rs`); a queue with none costs nothing. Each reap moves the queue's
    /// entry to its next due time. As a last resort (an index edited by hand, a Redis that
    /// lost writes), a sweep also looks at `sweep_rate` registered queues every
    /// [`SWEEP_EVERY`] (one EXISTS each) and reaps those with leased or delayed jobs,
    /// whatever the index says, and on start an empty index (a deployment
    /// from before it existed) is seeded with every registered queue. After a reaper call
    /// Redis did not take, reaping resumes only once a write probe succeeds and
    /// [`Hub::outage_grace`] has passed.
    async fn reap_loop(self) {
        let stop = self.inner.stop.clone();
        let mut seeded = false;
        let mut cursor = 0u64;
        let mut last_sweep = tokio::time::Instant::now();
        // The last reaper call found Redis not answering.
        let mut unanswered = false;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(self.config().reaper_interval) => {}
                _ = stop.cancelled() => {
                    self.flush_held_due().await;
                    return;
                }
            }
            if !seeded {
                match self.store().seed_due_index().await {
                    Ok(n) => {
                        seeded = true;
                        if n > 0 {
                            tracing::info!(
                                queues = n,
                                "due index seeded with every registered queue"
                            );
                        }
                    }
                    Err(e) => tracing::debug!(error = %e, "reaper cannot seed the due index"),
                }
            }
            if unanswered {
                // Redis did not answer the last reaper call: every deadline that passed since
                // is due at once. Wait until it takes writes again (a probe), then let the
                // live streams' renewal and the retried hand-backs of undelivered leases go
                // first: the hand-back of a lease no worker received must beat its reaping,
                // which would charge it an attempt.
                if self.store().probe_write().await.is_err() {
                    continue;
                }
                unanswered = false;
                let grace = self.outage_grace();
                tracing::info!(grace = ?grace, "Redis takes writes again: reaping resumes after a grace for renewals and hand-backs");
                tokio::select! {
                    _ = tokio::time::sleep(grace) => {}
                    _ = stop.cancelled() => return,
                }
            }
            // The due-index updates this server held since the last tick go first, so this
            // tick reads them (`store/due_later.rs`).
            self.flush_held_due().await;
            let due = self.store().due_queues(DUE_BATCH).await;
            match due {
                Ok(mut due) => {
                    // A queue's own entry and an intent for it may both be due: one reap.
                    due.sort_by(|a, b| a.queue.cmp(&b.queue));
                    for entries in due.chunk_by(|a, b| a.queue == b.queue) {
                        if !self.reap_queue(&entries[0].queue, entries).await {
                            unanswered = true;
                            break;
                        }
                    }
                }
                Err(e) => {
                    unanswered = true;
                    tracing::debug!(error = %e, "reaper cannot read the due index");
                }
            }
            let sweep_chunk = self.config().sweep_rate as usize;
            if sweep_chunk > 0 && last_sweep.elapsed() >= SWEEP_EVERY {
                last_sweep = tokio::time::Instant::now();
                match self.store().scan_queues(cursor, sweep_chunk).await {
                    Ok((next, queues)) => {
                        cursor = next;
                        match self.store().with_timed_work(queues).await {
                            Ok(queues) => {
                                for queue in queues {
                                    if !self.reap_queue(&queue, &[]).await {
                                        unanswered = true;
                                        break;
                                    }
                                }
                            }
                            Err(e) => tracing::debug!(error = %e, "reaper sweep cannot look"),
                        }
                    }
                    Err(e) => tracing::debug!(error = %e, "reaper sweep cannot list queues"),
                }
            }
        }
    }

    /// Writes the due-index updates held since the last tick; a failure is only logged (they
    /// stay held for the next tick, and the intents written before them cover them).
    async fn flush_held_due(&self) {
        if let Err(e) = self.store().flush_held_due().await {
            tracing::debug!(error = %e, "held due-index updates not written; held for the next tick");
        }
    }

    /// How long reaping waits after Redis takes writes again: two renewal periods (a
    /// lease duration / 3 each), so every live stream's leases are renewed and every
    /// retried hand-back (every 100-500 ms, `Hub::release`) has run, at least a reaper
    /// interval.
    pub(super) fn outage_grace(&self) -> Duration {
        (self.config().lease_duration * 2 / 3).max(self.config().reaper_interval)
    }

    /// Reaps `queue` until no expired lease is left, then moves the due-index `entries` it
    /// was reaped for (none for the sweep) to its next due time. Returns false when Redis
    /// did not take the reap.
    async fn reap_queue(&self, queue: &QueueName, entries: &[DueEntry]) -> bool {
        loop {
            let report = match self.store().reap(queue, REAP_BATCH).await {
                Ok(r) => r,
                Err(e) => {
                    tracing::debug!(queue = %queue, error = %e, "reap failed");
                    return false;
                }
            };
            crate::metrics::expired(queue.as_str(), report.expired);
            if report.expired > 0 {
                tracing::info!(queue = %queue, jobs = report.expired, "jobs expired before a lease took them");
            }
            for r in &report.reaped {
                if r.state == crate::jobs::JobState::Cancelled {
                    tracing::info!(queue = %queue, job_id = %Untrusted(&r.id), name = %Untrusted(&r.name), attempt = r.attempt,
                        "cancelled job's lease revoked: its holder did not settle it within the cancel grace");
                    continue;
                }
                crate::metrics::lease_expired(queue.as_str());
                let disposition = if r.error_type == "TIMED_OUT" {
                    "timed_out"
                } else {
                    "lease_expired"
                };
                crate::metrics::failed(
                    queue.as_str(),
                    &r.name,
                    disposition,
                    r.state,
                    r.dead_reason,
                    None,
                );
                tracing::warn!(queue = %queue, job_id = %Untrusted(&r.id), name = %Untrusted(&r.name), attempt = r.attempt,
                    error_type = %Untrusted(&r.error_type), state = r.state.as_str(),
                    dead_reason = r.dead_reason.map(|d| d.as_str()).unwrap_or(""),
                    "lease expired; attempt failed");
            }
            if report.promoted > 0 || !report.reaped.is_empty() {
                self.wake(queue);
            }
            crate::metrics::trimmed(queue.as_str(), "completed", report.trimmed_completed);
            crate::metrics::trimmed(queue.as_str(), "dead", report.trimmed_dead);
            if report.reaped.len() < REAP_BATCH && !report.more {
                let next = report.next_work_ms();
                // The sweep's update only lowers the entry: with nothing due, none.
                let updates: Vec<Option<&DueEntry>> = if entries.is_empty() {
                    next.map(|_| None).into_iter().collect()
                } else {
                    entries.iter().map(Some).collect()
                };
                for entry in updates {
                    if let Err(e) = self.store().set_next_due(queue, entry, next).await {
                        tracing::debug!(queue = %queue, error = %e, "due index not updated");
                    }
                }
                return true;
            }
        }
    }

    /// Listens on the wake-up channel of every queue that has a local lease loop (and of
    /// each new one as its loop starts, until the loop ends) and wakes that loop. Queues no
    /// local worker serves are not listened to, so their enqueues cost this replica nothing.
    /// The store's [`crate::store::WakeListener`] hides the backend (pub/sub on one Redis or
    /// Sentinel, sharded pub/sub on a cluster). Reconnects with a pause after a lost
    /// connection, at once when the master moved, and wakes every loop after reconnecting
    /// (and the loops of queues whose subscription was made again), since messages sent
    /// while it was away are lost.
    async fn wake_listener(self, mut new_queues: mpsc::UnboundedReceiver<Subscription>) {
        let stop = self.inner.stop.clone();
        loop {
            let run = async {
                let mut listener = self.store().wake_listener().await?;
                // Every queue announced so far has its loop in the map read below.
                while new_queues.try_recv().is_ok() {}
                self.void_echo_credits();
                for q in self.loop_queues() {
                    if listener.subscribe(&q).await? {
                        self.subscribed(&q);
                    }
                }
                self.wake_all();
                loop {
                    let step = tokio::select! {
                        ev = listener.next() => Step::Event(ev),
                        change = new_queues.recv() => Step::Change(change),
                    };
                    match step {
                        Step::Event(None) | Step::Change(None) => break,
                        Step::Event(Some(WakeEvent::Ready(q))) => self.wake_from_pubsub(&q),
                        Step::Event(Some(WakeEvent::Cancel(q, n))) => {
                            self.tell_cancel(&q, &n.id, &n.token, n.revoke_ms, &n.reason);
                        }
                        Step::Event(Some(WakeEvent::Resubscribed(qs))) => {
                            self.void_echo_credits();
                            for q in qs {
                                self.subscribed(&q);
                                self.wake(&q);
                            }
                        }
                        // The store found a replica (or a dead master) and connected
                        // again: so must pub/sub, or it stays on the old node, where the new
                        // master's PUBLISHes never arrive.
                        Step::Event(Some(WakeEvent::Moved)) => {
                            tracing::info!("wake-up listener connects again: the store's connection was replaced");
                            return Ok(true);
                        }
                        Step::Change(Some(Subscription::Add(q))) => {
                            if listener.subscribe(&q).await? {
                                self.subscribed(&q);
                            }
                            // The echoes of enqueues that woke the loop before the
                            // subscription took effect never come: their credits would
                            // swallow later wake-ups (a resume's). A job made ready
                            // before it may also have woken nothing.
                            self.wake(&q);
                        }
                        Step::Change(Some(Subscription::Drop(q))) => {
                            listener.unsubscribe(&q).await?;
                        }
                    }
                }
                Ok::<bool, crate::store::StoreError>(false)
            };
            let r = tokio::select! {
                r = run => r,
                _ = stop.cancelled() => return,
            };
            // Until subscribed again, PUBLISHes are lost: no enqueue may count on its echo.
            self.none_listened();
            match r {
                // At once: the new master is known to answer.
                Ok(true) => continue,
                Ok(false) => {}
                Err(e) => tracing::debug!(error = %e, "wake-up listener lost its connection"),
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                _ = stop.cancelled() => return,
            }
        }
    }
}

/// What woke the wake-up listener.
enum Step {
    Event(Option<WakeEvent>),
    Change(Option<Subscription>),
}
