//! One lease loop per queue per replica. It gathers the free credits of every local stream
//! on the queue, leases that many jobs in one script call, and spreads them across the
//! streams round-robin. With nothing to lease it sleeps until a wake-up (an enqueue on any
//! replica, a credit returned while it may use one), the next delayed job's due time, or the
//! safety poll. It ends with the last local stream on its queue (see `Hub::close_session`).

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::hub::Hub;
use super::session::Session;
use super::unsent::Unsent;
use crate::jobs::QueueName;
use crate::store::Limit;
use crate::telemetry::Untrusted;

/// Most jobs one lease call takes.
const MAX_BATCH: usize = 256;
/// How long an idle loop sleeps with no wake-up before it looks again anyway.
const SAFETY_POLL: Duration = Duration::from_secs(2);
/// Pause after a failed lease call (Redis down), so the loop does not spin.
const ERROR_PAUSE: Duration = Duration::from_millis(500);
/// How long a delivered lease call may wait for the loop's next lease call (or an ack's,
/// `settle_lease.rs`) to carry its confirmation before the loop sends it alone. Under a
/// steady trickle (100 jobs/s or more) the next call comes sooner, so the confirmation costs
/// no script call of its own. The price: a replica that dies within this time after handing
/// out a job leaves that job's lease unconfirmed, released uncharged at its deadline (once
/// the call is [`crate::store::lost_call_after`] old: attempts.lua, "Lost lease replies")
/// where it would have counted as a failed attempt. `reap.lua` knows this delay too
/// (`CONFIRM_STEP_MS`).
pub(super) const CONFIRM_DELAY: Duration = Duration::from_millis(20);

pub(super) struct QueueLoop {
    queue: QueueName,
    pub(super) notify: Notify,
    sessions: Mutex<Vec<Arc<Session>>>,
    /// Rotates the first stream served, so no stream is always first (turned by each call
    /// that leased).
    turn: std::sync::atomic::AtomicUsize,
    /// More jobs are probably leasable now: the last lease call filled every slot, or a
    /// wake-up said jobs became ready (true until a lease call finds fewer jobs than slots).
    /// Streams on several queues give this queue its turn only while this holds.
    pub(super) backlog: AtomicBool,
    /// The loop may be waiting for a credit: set before each look for free credits, cleared
    /// when it found some. While neither this nor `backlog` holds, the loop's last call
    /// found the queue dry with credits to spare, so a credit a settle frees cannot get a
    /// job, and the settle does not wake the loop ([`QueueLoop::wants_freed_credits`]): new
    /// work wakes it on its own (an enqueue's or a release's wake-up, a due time).
    short_of_credits: AtomicBool,
    /// The last lease call was held back by the queue's max_active or a group's (a settle
    /// may free a slot: it wakes the loop, [`QueueLoop::wants_freed_credits`]).
    slot_limited: AtomicBool,
    /// Echoes of local enqueues' PUBLISHes still to come, which wake nothing (see
    /// `wakeup.rs`).
    pub(super) echoes: AtomicI64,
    /// The queue's wake-up subscription has taken effect (its SUBSCRIBE was answered), so
    /// the PUBLISH of any enqueue written to Redis from now on will reach the loop; before
    /// that, an early wake-up takes no echo credit (see `wakeup.rs`).
    pub(super) listened: AtomicBool,
    /// Cancelled when the loop's last local stream ends (or the replica stops).
    pub(super) stop: CancellationToken,
    /// This loop's lease calls whose replies arrived and whose jobs were handed to streams,
    /// not yet confirmed to Redis (attempts.lua, "Lost lease replies"). The next lease call
    /// carries them; a waiting loop confirms them on its own [`CONFIRM_DELAY`] after the
    /// oldest was kept, and a loop that stops confirms them first.
    unconfirmed: Mutex<Unconfirmed>,
    /// Woken when calls wait to be confirmed and none waited before (an ack-and-lease kept
    /// one while the loop slept): the loop then times their confirmation.
    confirm_wake: Notify,
    /// The replica's unsent leases: a call with one is not confirmed yet (`unsent.rs`).
    unsent: Arc<Unsent>,
}

/// Lease call ids to confirm, and since when the oldest has waited (after a failed
/// confirmation: when the next try's wait starts).
#[derive(Default)]
struct Unconfirmed {
    calls: Vec<String>,
    since: Option<Instant>,
}

/// Most call ids one confirmation carries (a loop that cannot reach Redis keeps the rest).
const MAX_CONFIRM: usize = 1000;

/// How the loop waits after a lease call.
enum Wait {
    /// Every slot was filled: go on at once.
    No,
    /// Until a wake-up (enqueue, credit, resume) or this long.
    Soft(Duration),
    /// This long, whatever wakes it: the queue's rate limit or a worker-reported throttle
    /// admits nothing sooner, and waking early would only spin on Redis.
    Hard(Duration),
}

impl QueueLoop {
    pub(super) fn new(queue: QueueName, stop: CancellationToken, unsent: Arc<Unsent>) -> QueueLoop {
        QueueLoop {
            stop,
            queue,
            notify: Notify::new(),
            sessions: Mutex::default(),
            turn: Default::default(),
            backlog: AtomicBool::new(true),
            short_of_credits: AtomicBool::new(true),
            slot_limited: AtomicBool::new(false),
            echoes: AtomicI64::new(0),
            listened: AtomicBool::new(false),
            unconfirmed: Mutex::default(),
            confirm_wake: Notify::new(),
            unsent,
        }
    }

    pub(super) fn add(&self, s: Arc<Session>) {
        if let Ok(mut v) = self.sessions.lock() {
            v.push(s);
        }
    }

    /// Whether a settle may let the loop lease: it may be waiting for a credit, its queue
    /// has backlog (see `short_of_credits`), or its last call was held back by a max_active
    /// the settle may have freed (the ack's published wake-up says so too; this does not
    /// wait for it).
    pub(super) fn wants_freed_credits(&self) -> bool {
        self.short_of_credits.load(Ordering::SeqCst)
            || self.backlog.load(Ordering::Relaxed)
            || self.slot_limited.load(Ordering::Relaxed)
    }

    /// Removes stream `id`; true when no stream is left.
    pub(super) fn remove(&self, id: u64) -> bool {
        match self.sessions.lock() {
            Ok(mut v) => {
                v.retain(|s| s.id != id);
                v.is_empty()
            }
            Err(_) => false,
        }
    }

    pub(super) fn sessions(&self) -> Vec<Arc<Session>> {
        self.sessions.lock().map(|v| v.clone()).unwrap_or_default()
    }

    /// Takes one credit at a time from each stream that wants leases, round-robin, up to
    /// [`MAX_BATCH`]: the slot list for one lease call.
    fn reserve(&self, hub: &Hub) -> Vec<Arc<Session>> {
        let sessions = self.sessions();
        let mut slots = Vec::new();
        if sessions.is_empty() {
            return slots;
        }
        let start = self.turn.load(Ordering::Relaxed) % sessions.len();
        loop {
            let before = slots.len();
            for i in 0..sessions.len() {
                let s = &sessions[(start + i) % sessions.len()];
                if slots.len() < MAX_BATCH && s.wants_leases() {
                    if s.take_credit_for(&self.queue, |q| hub.has_backlog(q)) {
                        slots.push(s.clone());
                    } else if s.take_turn_passed() {
                        // This take ended another queue's slice: the turn may be theirs now.
                        hub.notify_sessions_queues(std::slice::from_ref(s), &self.queue);
                    }
                }
            }
            if slots.len() == before || slots.len() >= MAX_BATCH {
                return slots;
            }
        }
    }

    pub(super) async fn run(self: Arc<Self>, hub: Hub) {
        let stop = self.stop.clone();
        loop {
            if stop.is_cancelled() {
                self.confirm_before_stop(&hub).await;
                return;
            }
            // Before the look: a settle that frees a credit the look misses sees it set.
            self.short_of_credits.store(true, Ordering::SeqCst);
            let slots = if hub.is_draining() {
                Vec::new()
            } else {
                self.reserve(&hub)
            };
            if slots.is_empty() {
                // A stream with a free credit refused it for another queue's slice: look
                // again when the slice ends (the take then passes the turn on).
                let poll = self
                    .sessions()
                    .iter()
                    .filter(|s| s.wants_leases())
                    .filter_map(|s| s.slice_left())
                    .min()
                    .map_or(SAFETY_POLL, |d| {
                        (d + Duration::from_micros(100)).min(SAFETY_POLL)
                    });
                if !self.wait(&hub, poll, true).await {
                    return;
                }
                continue;
            }
            self.short_of_credits.store(false, Ordering::SeqCst);
            let go_on = match self.lease_into(&hub, &slots).await {
                Wait::No => true,
                Wait::Soft(wait) => self.wait(&hub, wait, true).await,
                Wait::Hard(wait) => self.wait(&hub, wait, false).await,
            };
            if !go_on {
                return;
            }
        }
    }

    /// Waits `wait`, or until a wake-up when `wakeable`, confirming the loop's delivered
    /// lease calls once they have waited [`CONFIRM_DELAY`] (no lease call carried them).
    /// Returns false when the loop is to stop; it confirms them first then.
    async fn wait(&self, hub: &Hub, wait: Duration, wakeable: bool) -> bool {
        let end = Instant::now() + wait;
        loop {
            let confirm_at = self.confirm_at();
            tokio::select! {
                _ = self.notify.notified(), if wakeable => return true,
                _ = self.confirm_wake.notified() => continue,
                _ = tokio::time::sleep_until(confirm_at.map_or(end, |at| at.min(end))) => {}
                _ = self.stop.cancelled() => {
                    self.confirm_before_stop(hub).await;
                    return false;
                }
            }
            if confirm_at.is_some_and(|at| at <= Instant::now()) {
                self.confirm_calls(hub).await;
            }
            if end <= Instant::now() {
                return true;
            }
        }
    }

    /// When the loop should confirm its delivered lease calls alone, if it has any.
    fn confirm_at(&self) -> Option<Instant> {
        let u = self.unconfirmed.lock().ok()?;
        u.since.map(|since| since + CONFIRM_DELAY)
    }

    /// The unconfirmed lease call ids, taken to send (at most [`MAX_CONFIRM`]); a call with
    /// a lease not sent yet (in a stream's outbox, or on its way back to waiting) stays,
    /// tried again [`CONFIRM_DELAY`] later (`unsent.rs`).
    pub(super) fn take_unconfirmed(&self) -> Vec<String> {
        self.unconfirmed
            .lock()
            .map(|mut u| {
                let mut taken = Vec::new();
                let mut kept = Vec::new();
                for call in u.calls.drain(..) {
                    if taken.len() < MAX_CONFIRM && !self.unsent.holds(&call) {
                        taken.push(call);
                    } else {
                        kept.push(call);
                    }
                }
                // Calls were kept for their unsent leases, not for the cap.
                let held = taken.len() < MAX_CONFIRM && !kept.is_empty();
                u.calls = kept;
                if u.calls.is_empty() {
                    u.since = None;
                } else if held {
                    u.since = Some(Instant::now());
                }
                taken
            })
            .unwrap_or_default()
    }

    /// Keeps lease call ids to confirm later (alone, [`CONFIRM_DELAY`] from now, unless a
    /// lease call carries them sooner or older ones wait already).
    pub(super) fn keep_unconfirmed(&self, calls: Vec<String>) {
        if calls.is_empty() {
            return;
        }
        let first = match self.unconfirmed.lock() {
            Ok(mut u) => {
                u.calls.extend(calls);
                let first = u.since.is_none();
                u.since.get_or_insert_with(Instant::now);
                first
            }
            Err(_) => false,
        };
        if first {
            self.confirm_wake.notify_one();
        }
    }

    /// Confirms before the loop ends (its last stream closed, or the replica stops), for at
    /// most [`ERROR_PAUSE`]: a Redis that does not answer must not hold up a shutdown (whose
    /// hand-back of held leases has run by then).
    /// Calls with unsent leases (the closed stream's outbox, being handed back) are waited
    /// for within that time, then confirmed anyway: an unconfirmed call outlives the loop
    /// and the reaper would hand its expired leases back uncharged, also those of workers
    /// that died with the job.
    async fn confirm_before_stop(&self, hub: &Hub) {
        let _ = tokio::time::timeout(ERROR_PAUSE, async {
            loop {
                self.confirm_calls(hub).await;
                if self.confirm_at().is_none() {
                    return;
                }
                tokio::time::sleep(CONFIRM_DELAY).await;
            }
        })
        .await;
        let rest = match self.unconfirmed.lock() {
            Ok(mut u) => {
                u.since = None;
                std::mem::take(&mut u.calls)
            }
            Err(_) => Vec::new(),
        };
        if !rest.is_empty() {
            let confirm = hub.store().confirm_lease_calls(&self.queue, &rest);
            let _ = tokio::time::timeout(ERROR_PAUSE, confirm).await;
        }
    }

    /// Confirms this loop's delivered lease calls on their own (no lease call carried them
    /// within [`CONFIRM_DELAY`], or the loop stops). On failure they are kept for the next
    /// call or the next try; a renewal of their leases confirms them too.
    async fn confirm_calls(&self, hub: &Hub) {
        let calls = self.take_unconfirmed();
        if calls.is_empty() {
            return;
        }
        if let Err(e) = hub.store().confirm_lease_calls(&self.queue, &calls).await {
            tracing::debug!(queue = %self.queue, error = %e, "could not confirm lease calls yet");
            self.keep_unconfirmed(calls);
            // Alone, tried again the error pause plus `CONFIRM_DELAY` later (a lease call
            // may carry them sooner).
            if let Ok(mut u) = self.unconfirmed.lock() {
                u.since = Some(Instant::now() + ERROR_PAUSE);
            }
        }
    }

    /// Leases for `slots` and delivers. Returns how to wait before trying again.
    async fn lease_into(&self, hub: &Hub, slots: &[Arc<Session>]) -> Wait {
        let workers: Vec<&str> = slots.iter().map(|s| s.worker_id.as_str()).collect();
        let lease_ms = hub.config().lease_duration.as_millis() as u64;
        let call = crate::store::new_lease_call_id();
        let confirm = self.take_unconfirmed();
        let result = hub
            .store()
            .lease(&self.queue, &workers, lease_ms, &call, &confirm)
            .await;
        let batch = match result {
            Ok(b) => {
                if !b.jobs.is_empty() {
                    // Unsent before the call can be confirmed: a stream's transport, or a
                    // hand-back, will have them first.
                    self.unsent.add(b.jobs.iter().map(|j| j.token.as_str()));
                    self.keep_unconfirmed(vec![call]);
                }
                b
            }
            Err(e) => {
                for s in slots {
                    s.unreserve();
                }
                self.keep_unconfirmed(confirm);
                // The call may still run (or have run) in Redis: hand back whatever it
                // leased, uncharged. No worker got those jobs.
                hub.release_lost_lease_call(self.queue.clone(), call);
                tracing::warn!(queue = %self.queue, error = %e, "lease call failed");
                self.backlog.store(false, Ordering::Relaxed);
                return Wait::Hard(ERROR_PAUSE);
            }
        };
        let leased = batch.jobs.len();
        if leased > 0 {
            // The next call starts with the next stream. Turned per call that leased, not
            // per call: a queue at its max_active makes an empty call after each job
            // (woken by the ack and by its wake-up), and turning on those too could bring
            // the same stream first every time.
            self.turn.fetch_add(1, Ordering::Relaxed);
        }
        if batch.expired > 0 {
            crate::metrics::expired(self.queue.as_str(), batch.expired);
            tracing::info!(queue = %self.queue, jobs = batch.expired, "jobs expired before a lease took them");
        }
        let mut orphans = Vec::new();
        for (slot, lj) in slots.iter().zip(batch.jobs) {
            orphans.extend(hand_out(hub, &self.queue, slot, lj, batch.now_ms));
        }
        // A call whose byte budget ran out leased fewer than asked with jobs still waiting.
        let full = leased == slots.len() || batch.more;
        self.backlog.store(full, Ordering::Relaxed);
        // A settle of this queue may free its max_active or a group's: the ack publishes a
        // wake-up for that, and a local settle wakes the loop as well, as before.
        self.slot_limited.store(
            matches!(batch.limited, Some(Limit::Concurrency | Limit::Group)),
            Ordering::Relaxed,
        );
        for s in &slots[leased..] {
            s.unreserve();
        }
        // Streams on several queues: credits that came back may serve their other queues,
        // and the streams that got a job moved their turn on to the next queue, whose loop
        // would otherwise wait for its safety poll (only loops with backlog are woken).
        hub.notify_sessions_queues(slots, &self.queue);
        if batch.limited.is_some_and(|l| l != Limit::Group) {
            crate::metrics::throttled(self.queue.as_str());
        }
        if !orphans.is_empty() {
            // The stream went away between reserving and delivering: hand the jobs back,
            // retried like any undelivered lease (a single failed try would let them expire
            // into an attempt no worker received).
            let queue = &self.queue;
            hub.release_undelivered(
                orphans
                    .into_iter()
                    .map(|(id, token)| (queue.clone(), id, token))
                    .collect(),
            );
        }
        let until = |ms: u64| Duration::from_millis(ms.saturating_sub(batch.now_ms).max(1));
        match (batch.limited, batch.wait_until_ms) {
            (Some(Limit::Rate | Limit::Throttle), Some(at)) => return Wait::Hard(until(at)),
            (Some(Limit::Concurrency), _) => return Wait::Soft(SAFETY_POLL),
            // Other groups may get jobs, or a blocked group's job may leave active, at any
            // time: a wake-up (enqueue, ack) must still reach the loop.
            (Some(Limit::Group), at) => {
                return Wait::Soft(at.map_or(SAFETY_POLL, |at| until(at).min(SAFETY_POLL)))
            }
            _ => {}
        }
        if full {
            return Wait::No;
        }
        if batch.paused {
            return Wait::Soft(SAFETY_POLL);
        }
        Wait::Soft(
            batch
                .next_due_ms
                .map_or(SAFETY_POLL, |due| until(due).min(SAFETY_POLL)),
        )
    }
}

/// Hands `lj`, leased at Redis time `now_ms` for a credit reserved on `slot`, to that
/// stream (metrics, the attempt's span). Returns the job's (id, token) when the stream has
/// closed, to hand back to waiting.
pub(super) fn hand_out(
    hub: &Hub,
    queue: &QueueName,
    slot: &Session,
    lj: crate::jobs::LeasedJob,
    now_ms: u64,
) -> Option<(String, String)> {
    crate::metrics::leased(
        queue.as_str(),
        &lj.job.name,
        now_ms.saturating_sub(lj.job.ready_ms),
    );
    let span = attempt_span(queue, &lj, &slot.worker_id);
    span.in_scope(|| tracing::debug!("leased"));
    // A stream that held nothing was idle, not silent: its heartbeat clock starts with its
    // first job (an idle worker need not heartbeat, see `Hub::end_silent`).
    let was_idle = slot.held_count() == 0;
    match slot.deliver(queue, Box::new(lj), span) {
        Ok(()) if was_idle => {
            hub.touch(slot);
            None
        }
        Ok(()) => None,
        Err(lj) => Some((lj.job.id, lj.token)),
    }
}

/// The span of one job attempt: queue, job id, name, attempt, worker id, the lease's tag
/// ([`lease_tag`]), and the W3C trace id when the producer put a `traceparent` in the job's
/// metadata.
fn attempt_span(queue: &QueueName, lj: &crate::jobs::LeasedJob, worker_id: &str) -> tracing::Span {
    let trace_id = lj
        .job
        .metadata
        .get("traceparent")
        .and_then(|tp| crate::jobs::trace_id(tp))
        .unwrap_or_default();
    tracing::info_span!("job_attempt", queue = %queue, job_id = %Untrusted(&lj.job.id), name = %Untrusted(&lj.job.name),
        attempt = lj.attempt, worker_id = %Untrusted(worker_id),
        lease = %lease_tag(&lj.token), trace_id = %trace_id)
}

/// What the logs show of lease token `token` (`<call id>-<slot>`): the call id's first 8
/// characters and the slot, `ad232bb1-2`, so the jobs of one lease call are told apart (the
/// call id alone is the same for all of them), without logging the token that settles the
/// job. A token of another shape: its first 8 characters.
fn lease_tag(token: &str) -> String {
    let head = |s: &str| s.chars().take(8).collect::<String>();
    match token.rsplit_once('-') {
        Some((call, slot)) => format!("{}-{slot}", head(call)),
        None => head(token),
    }
}

#[cfg(test)]
mod tests {
    use super::lease_tag;

    #[test]
    fn a_lease_tag_is_the_call_prefix_and_the_slot() {
        assert_eq!(
            lease_tag("ad232bb1c0ffee00ad232bb1c0ffee00-1"),
            "ad232bb1-1"
        );
        assert_eq!(
            lease_tag("ad232bb1c0ffee00ad232bb1c0ffee00-12"),
            "ad232bb1-12"
        );
        assert_eq!(lease_tag("short"), "short");
        assert_eq!(lease_tag("0123456789"), "01234567");
    }
}
