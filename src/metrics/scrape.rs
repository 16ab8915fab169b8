//! `/metrics`: refreshes the queue gauges from Redis (pipelined, a chunk of queues per round
//! trip, at most once per [`REFRESH_EVERY`]), sets this replica's worker counts, and renders.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use metrics::{counter, gauge};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::sync::Mutex;

use super::*;
use crate::lease::Hub;

/// Queue gauges are at most this old when rendered.
pub const REFRESH_EVERY: Duration = Duration::from_secs(2);

/// Renders `/metrics`; cheap to share behind an `Arc`.
pub struct Scraper {
    handle: PrometheusHandle,
    hub: Hub,
    last: Mutex<Option<Instant>>,
}

impl Scraper {
    /// A scraper over the installed recorder and this replica's hub.
    pub fn new(handle: PrometheusHandle, hub: Hub) -> Scraper {
        Scraper {
            handle,
            hub,
            last: Mutex::new(None),
        }
    }

    /// Refreshes the gauges if they are older than [`REFRESH_EVERY`], then renders the text
    /// format. A Redis error leaves the previous gauge values (and counts in
    /// `jobwire_redis_errors_total`).
    pub async fn render(&self) -> String {
        {
            let mut last = self.last.lock().await;
            if last.is_none_or(|t| t.elapsed() >= REFRESH_EVERY) {
                if let Err(e) = self.refresh().await {
                    tracing::debug!(error = %e, "queue gauges not refreshed");
                    counter!(REDIS_ERRORS, "kind" => "unavailable").increment(1);
                }
                *last = Some(Instant::now());
            }
        }
        self.handle.run_upkeep();
        self.handle.render()
    }

    /// Reads every registered queue's stats (in chunks of [`STATS_CHUNK`] queues, so other
    /// calls on the shared connection are not stuck behind one huge pipeline) and sets the
    /// gauges. Queues past the label cap are summed into `queue="other"` (ages and paused:
    /// the maximum). Named queues that are gone (deleted) read 0.
    async fn refresh(&self) -> Result<(), crate::store::StoreError> {
        let store = self.hub.store();
        let queues = store.queues().await?;
        let sessions = self.hub.sessions();
        let mut by_label: HashMap<String, Gauges> = HashMap::new();
        for label in labels::named_queues() {
            by_label.entry(label).or_default();
        }
        for chunk in queues.chunks(STATS_CHUNK) {
            for s in store.queue_stats(chunk).await? {
                let workers = sessions
                    .iter()
                    .filter(|w| w.queues.iter().any(|wq| wq.as_str() == s.queue))
                    .count() as u64;
                let g = by_label.entry(labels::queue(&s.queue)).or_default();
                for (i, n) in [
                    s.waiting,
                    s.delayed,
                    s.active,
                    s.completed,
                    s.dead,
                    s.cancelled,
                    s.expired,
                ]
                .into_iter()
                .enumerate()
                {
                    g.jobs[i] += n;
                }
                g.oldest_waiting_ms = g.oldest_waiting_ms.max(s.oldest_waiting_ms);
                g.oldest_dead_ms = g.oldest_dead_ms.max(s.oldest_dead_ms);
                g.paused |= s.paused;
                g.groups_waiting += s.groups_waiting;
                g.workers += workers;
            }
        }
        for (q, g) in by_label {
            for (state, n) in [
                "waiting",
                "delayed",
                "active",
                "completed",
                "dead",
                "cancelled",
                "expired",
            ]
            .into_iter()
            .zip(g.jobs)
            {
                gauge!(QUEUE_JOBS, "queue" => q.clone(), "state" => state).set(n as f64);
            }
            gauge!(QUEUE_OLDEST_WAITING_AGE, "queue" => q.clone())
                .set(g.oldest_waiting_ms as f64 / 1000.0);
            gauge!(DEAD_LETTER_OLDEST_AGE, "queue" => q.clone())
                .set(g.oldest_dead_ms as f64 / 1000.0);
            gauge!(QUEUE_PAUSED, "queue" => q.clone()).set(if g.paused { 1.0 } else { 0.0 });
            gauge!(QUEUE_GROUPS_WAITING, "queue" => q.clone()).set(g.groups_waiting as f64);
            gauge!(WORKERS_CONNECTED, "queue" => q.clone()).set(g.workers as f64);
            // Registered at zero so that rate() and alerts see every queue from the start.
            queue_known(&q);
        }
        Ok(())
    }
}

/// Queues per stats round trip.
const STATS_CHUNK: usize = 200;

/// One `queue` label's gauge values (one queue, or the sum of those labelled `other`).
#[derive(Default)]
struct Gauges {
    /// waiting, delayed, active, completed, dead.
    jobs: [u64; 7],
    oldest_waiting_ms: u64,
    oldest_dead_ms: u64,
    paused: bool,
    /// Groups with waiting jobs (summed over the queues of the label).
    groups_waiting: u64,
    workers: u64,
}
