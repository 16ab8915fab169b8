//! `/metrics`: refreshes the queue gauges from Redis (pipelined, a chunk of queues per round
//! trip, at most once per [`REFRESH_EVERY`]), sets this replica's worker counts, and renders.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use metrics::{counter, gauge};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::sync::Mutex;

use super::*;
use crate::lease::Hub;

/// Queue gauges are at most this old when rendered.
pub const REFRESH_EVERY: Duration = Duration::from_secs(2);

/// Most `priority` label values per queue label in
/// `jobwire_queue_priority_oldest_waiting_age_seconds`: the priorities whose oldest job has
/// waited longest; the others are reported together as `priority="other"` (their maximum).
/// Priorities are -1000 ..= 1000, so the label is bounded anyway; this keeps a queue that
/// uses hundreds of them from growing `/metrics` by as many series.
pub const MAX_PRIORITY_SERIES: usize = 20;

/// Renders `/metrics`; cheap to share behind an `Arc`.
pub struct Scraper {
    handle: PrometheusHandle,
    hub: Hub,
    last: Mutex<Option<Instant>>,
    /// The (queue, priority) label pairs set by the last refresh: those not set again read
    /// 0 (nothing of that priority waits any more).
    priority_series: Mutex<HashSet<(String, String)>>,
}

impl Scraper {
    /// A scraper over the installed recorder and this replica's hub.
    pub fn new(handle: PrometheusHandle, hub: Hub) -> Scraper {
        Scraper {
            handle,
            hub,
            last: Mutex::new(None),
            priority_series: Mutex::default(),
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
                for &(p, age) in &s.oldest_waiting_by_priority {
                    let a = g.by_priority.entry(p).or_default();
                    *a = (*a).max(age);
                }
                g.oldest_dead_ms = g.oldest_dead_ms.max(s.oldest_dead_ms);
                g.paused |= s.paused;
                g.groups_waiting += s.groups_waiting;
                g.workers += workers;
            }
        }
        let mut priority_series = HashSet::new();
        for (q, g) in by_label {
            for (p, age_ms) in priority_levels(&g.by_priority) {
                gauge!(QUEUE_PRIORITY_OLDEST_WAITING_AGE, "queue" => q.clone(), "priority" => p.clone())
                    .set(age_ms as f64 / 1000.0);
                priority_series.insert((q.clone(), p));
            }
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
        let mut last = self.priority_series.lock().await;
        for (q, p) in last.difference(&priority_series) {
            gauge!(QUEUE_PRIORITY_OLDEST_WAITING_AGE, "queue" => q.clone(), "priority" => p.clone())
                .set(0.0);
        }
        // Series that read 0 stay (a scrape must see them drop to 0): they are kept in the
        // set until this replica restarts, bounded by the queues and priorities ever used.
        last.extend(priority_series);
        Ok(())
    }
}

/// The `priority` label values and ages (ms) of one queue label: each priority in use,
/// clamped to the valid range, up to [`MAX_PRIORITY_SERIES`] (the oldest), the rest as
/// `other` with their maximum age.
fn priority_levels(by_priority: &BTreeMap<i32, u64>) -> Vec<(String, u64)> {
    let mut levels: Vec<(i32, u64)> = by_priority
        .iter()
        .map(|(p, age)| ((*p).clamp(MIN_PRIORITY, MAX_PRIORITY), *age))
        .collect();
    // Oldest first; ties by priority, highest first.
    levels.sort_by(|a, b| b.1.cmp(&a.1).then(b.0.cmp(&a.0)));
    let rest = levels.split_off(levels.len().min(MAX_PRIORITY_SERIES));
    let mut out: Vec<(String, u64)> = levels
        .into_iter()
        .map(|(p, age)| (p.to_string(), age))
        .collect();
    if let Some(oldest) = rest.iter().map(|(_, age)| *age).max() {
        out.push((labels::OTHER.to_owned(), oldest));
    }
    out
}

/// The valid priorities (`JobSpec.priority`, `api::limits::PRIORITY_RANGE`): the label
/// never leaves them.
const MIN_PRIORITY: i32 = -1000;
const MAX_PRIORITY: i32 = 1000;

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
    /// Priority -> age of its oldest waiting job, ms (the maximum over the label's queues).
    by_priority: BTreeMap<i32, u64>,
}
