//! The hub's background tasks: batched lease renewal for live streams, the reaper (expired
//! leases, timed-out attempts, due delayed jobs, on every queue, whether or not a local
//! worker serves it), and the pub/sub listener that turns enqueues on any replica into
//! wake-ups of the local lease loops (subscribed to the queues those loops serve).

use std::collections::HashMap;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::mpsc;

use super::hub::Hub;
use crate::jobs::QueueName;
use crate::store::wake_channel;

/// Most leases one renew call renews: a stream may hold up to `MAX_CREDITS` (10 000) and a
/// queue may have many streams, so one queue's renewal is split into calls this size to keep
/// each script call short.
const RENEW_BATCH: usize = 1000;
/// Most expired leases one reap call fails (it is called again at once while it fills).
const REAP_BATCH: usize = 100;

impl Hub {
    /// Spawns renewal, reaper and the wake-up listener (for `redis_url`) on the hub's
    /// tracker; they stop at [`Hub::shutdown`].
    pub fn start_background(&self, redis_url: &str) {
        let hub = self.clone();
        self.inner
            .tracker
            .spawn(async move { hub.renew_loop().await });
        let hub = self.clone();
        self.inner
            .tracker
            .spawn(async move { hub.reap_loop().await });
        let hub = self.clone();
        let url = redis_url.to_owned();
        let new_queues = self
            .inner
            .new_queues_rx
            .lock()
            .ok()
            .and_then(|mut rx| rx.take());
        if let Some(new_queues) = new_queues {
            self.inner
                .tracker
                .spawn(async move { hub.wake_listener(url, new_queues).await });
        }
    }

    /// Every lease_duration / 3, renews the leases of streams that are alive, one script
    /// call per queue and [`RENEW_BATCH`] leases.
    async fn renew_loop(self) {
        let period = self.config().lease_duration / 3;
        let stop = self.inner.stop.clone();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(period) => {}
                _ = stop.cancelled() => return,
            }
            self.renew_once().await;
        }
    }

    async fn renew_once(&self) {
        let now = self.mono_ms();
        let mut by_queue: HashMap<QueueName, Vec<(String, String)>> = HashMap::new();
        for s in self.sessions() {
            if !s.alive(now, self.config().heartbeat_timeout) {
                continue;
            }
            for (q, id, token) in s.book().renewable() {
                by_queue.entry(q).or_default().push((id, token));
            }
        }
        let lease_ms = self.config().lease_duration.as_millis() as u64;
        for (queue, items) in by_queue {
            for chunk in items.chunks(RENEW_BATCH) {
                match self.store().renew(&queue, chunk, lease_ms).await {
                    Ok(results) => {
                        for ((_, token), r) in chunk.iter().zip(results) {
                            if !matches!(r, crate::store::Settle::Done(_)) {
                                self.mark_lost(&queue, token);
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

    fn mark_lost(&self, queue: &QueueName, token: &str) {
        for s in self.sessions() {
            s.book().mark_lost(queue, token);
        }
    }

    /// Every reaper_interval, reaps every known queue.
    async fn reap_loop(self) {
        let stop = self.inner.stop.clone();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(self.config().reaper_interval) => {}
                _ = stop.cancelled() => return,
            }
            let queues = match self.store().queues().await {
                Ok(q) => q,
                Err(e) => {
                    tracing::debug!(error = %e, "reaper cannot list queues");
                    continue;
                }
            };
            for queue in queues {
                self.reap_queue(&queue).await;
            }
        }
    }

    async fn reap_queue(&self, queue: &QueueName) {
        loop {
            let report = match self.store().reap(queue, REAP_BATCH).await {
                Ok(r) => r,
                Err(e) => {
                    tracing::debug!(queue = %queue, error = %e, "reap failed");
                    return;
                }
            };
            for r in &report.reaped {
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
                tracing::warn!(queue = %queue, job_id = %r.id, name = %r.name, attempt = r.attempt,
                    error_type = %r.error_type, state = r.state.as_str(),
                    dead_reason = r.dead_reason.map(|d| d.as_str()).unwrap_or(""),
                    "lease expired; attempt failed");
            }
            if report.promoted > 0 || !report.reaped.is_empty() {
                self.wake(queue);
            }
            if report.reaped.len() < REAP_BATCH {
                return;
            }
        }
    }

    /// Listens on the wake-up channel of every queue that has a local lease loop (and of
    /// each new one as its loop starts) and wakes that loop. Queues no local worker serves
    /// are not listened to, so their enqueues cost this replica nothing. Reconnects with a
    /// pause after any error, and wakes every loop after reconnecting, since messages sent
    /// while it was away are lost.
    async fn wake_listener(self, url: String, mut new_queues: mpsc::UnboundedReceiver<QueueName>) {
        let stop = self.inner.stop.clone();
        loop {
            let run = async {
                let client = redis::Client::open(url.as_str())?;
                let (mut sink, mut messages) = client.get_async_pubsub().await?.split();
                // Every queue announced so far has its loop in the map read below.
                while new_queues.try_recv().is_ok() {}
                for q in self.loop_queues() {
                    sink.subscribe(wake_channel(&q)).await?;
                }
                self.void_echo_credits();
                self.wake_all();
                loop {
                    tokio::select! {
                        msg = messages.next() => {
                            let Some(msg) = msg else { break };
                            let channel = msg.get_channel_name();
                            if let Some(q) = channel.strip_prefix("jw:wake:") {
                                if let Ok(q) = QueueName::parse(q) {
                                    self.wake_from_pubsub(&q);
                                }
                            }
                        }
                        q = new_queues.recv() => {
                            let Some(q) = q else { break };
                            sink.subscribe(wake_channel(&q)).await?;
                            // A job made ready before the subscription took effect.
                            self.wake(&q);
                        }
                    }
                }
                Ok::<(), redis::RedisError>(())
            };
            tokio::select! {
                r = run => {
                    if let Err(e) = r {
                        tracing::debug!(error = %e, "wake-up listener lost its connection");
                    }
                }
                _ = stop.cancelled() => return,
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                _ = stop.cancelled() => return,
            }
        }
    }
}
