//! `/metrics`: refreshes the queue gauges from Redis (all queues in one pipelined round trip,
//! at most once per [`REFRESH_EVERY`]), sets this replica's worker counts, and renders.

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

    async fn refresh(&self) -> Result<(), crate::store::StoreError> {
        let store = self.hub.store();
        let queues = store.queues().await?;
        let stats = store.queue_stats(&queues).await?;
        let sessions = self.hub.sessions();
        for s in stats {
            let q = s.queue.clone();
            for (state, n) in [
                ("waiting", s.waiting),
                ("delayed", s.delayed),
                ("active", s.active),
                ("completed", s.completed),
                ("dead", s.dead),
            ] {
                gauge!(QUEUE_JOBS, "queue" => q.clone(), "state" => state).set(n as f64);
            }
            gauge!(QUEUE_OLDEST_WAITING_AGE, "queue" => q.clone())
                .set(s.oldest_waiting_ms as f64 / 1000.0);
            gauge!(DEAD_LETTER_OLDEST_AGE, "queue" => q.clone())
                .set(s.oldest_dead_ms as f64 / 1000.0);
            gauge!(QUEUE_PAUSED, "queue" => q.clone()).set(if s.paused { 1.0 } else { 0.0 });
            let workers = sessions
                .iter()
                .filter(|w| w.queues.iter().any(|wq| wq.as_str() == q))
                .count();
            gauge!(WORKERS_CONNECTED, "queue" => q.clone()).set(workers as f64);
            // Registered at zero so that rate() and alerts see every queue from the start.
            queue_known(&q);
        }
        Ok(())
    }
}
