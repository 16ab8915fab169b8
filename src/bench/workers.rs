//! Scenarios with worker streams: end-to-end throughput (lease and ack pre-filled no-op
//! jobs), the failure path (every attempt fails RETRY with zero backoff until the job is
//! dead), and the server's memory with many leases held across many streams.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use super::client::{connect, prefill, remove_on_complete, Conn, SpecOpts, Stream, Target};
use super::cpu::{measure, rss_bytes, Pids, Snap};
use jobwire_client::{pb, StreamEvent};
use serde_json::{json, Map, Value};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// How a worker answers a lease.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Answer {
    Ack,
    FailRetry,
}

/// Counters shared by the worker tasks of one scenario.
struct Shared {
    pids: Pids,
    /// Clock readings at the first lease received.
    first: OnceLock<Snap>,
    /// Clock readings when the target count was reached.
    last: Mutex<Option<Snap>>,
    leases: AtomicUsize,
    /// Settled replies that finished the job (completed, or dead on the failure path).
    finished: AtomicUsize,
    refused: AtomicUsize,
    target: usize,
    done: Notify,
}

impl Shared {
    fn new(pids: &Pids, target: usize) -> Arc<Shared> {
        Arc::new(Shared {
            pids: pids.clone(),
            first: OnceLock::new(),
            last: Mutex::new(None),
            leases: AtomicUsize::new(0),
            finished: AtomicUsize::new(0),
            refused: AtomicUsize::new(0),
            target,
            done: Notify::new(),
        })
    }

    fn finish_one(&self) {
        if self.finished.fetch_add(1, Ordering::AcqRel) + 1 == self.target {
            if let Ok(mut l) = self.last.lock() {
                *l = Some(self.pids.snap());
            }
            self.done.notify_one();
        }
    }

    /// Waits for the target, at most `patience`; returns the window's two readings.
    async fn wait(&self, patience: Duration) -> anyhow::Result<(Snap, Snap)> {
        let reached = || self.finished.load(Ordering::Acquire) >= self.target;
        if !reached()
            && tokio::time::timeout(patience, self.done.notified())
                .await
                .is_err()
        {
            anyhow::bail!(
                "timed out: {} of {} jobs finished ({} leases, {} refused settles)",
                self.finished.load(Ordering::Acquire),
                self.target,
                self.leases.load(Ordering::Acquire),
                self.refused.load(Ordering::Acquire)
            );
        }
        let last = self.last.lock().ok().and_then(|l| *l);
        match (self.first.get(), last) {
            (Some(a), Some(b)) => Ok((*a, b)),
            _ => anyhow::bail!("no lease was received"),
        }
    }
}

/// Runs one worker stream until aborted: answers every lease, counts Settled replies.
fn spawn_worker(mut s: Stream, answer: Answer, shared: Arc<Shared>) -> JoinHandle<()> {
    tokio::spawn(async move {
        while let Ok(Some(m)) = s.rx.next().await {
            match m {
                StreamEvent::Lease(l) => {
                    shared.first.get_or_init(|| shared.pids.snap());
                    shared.leases.fetch_add(1, Ordering::Relaxed);
                    match answer {
                        Answer::Ack => s.ack(&l),
                        Answer::FailRetry => s.fail_retry(&l),
                    }
                }
                StreamEvent::Settled(st) => {
                    if st.code != 0 {
                        shared.refused.fetch_add(1, Ordering::Relaxed);
                    } else if answer == Answer::Ack || st.state == pb::JobState::Dead as i32 {
                        shared.finish_one();
                    }
                }
                _ => {}
            }
        }
    })
}

/// Patience for a scenario of `n` units: generous, so only a stuck run times out.
fn patience(n: usize) -> Duration {
    Duration::from_secs(60 + n as u64 / 500)
}

/// Pre-fills `n` jobs on queues with keep_completed 0 (the harness's removeOnComplete),
/// then `workers` streams with `credits` each lease and ack them.
/// Window: first lease received to the n-th successful Settled. After the window, as the
/// BullMQ harness does: `leftInQueue` (see [`drain_prefilled`]) and, with `nodes` (the
/// bench's `--redis-url`), `usedMemoryMB`, Redis's `used_memory` summed over the masters.
pub async fn end_to_end(
    ch: &Conn,
    pids: &Pids,
    n: usize,
    (workers, credits): (usize, u32),
    queues: &[String],
    o: &SpecOpts,
    nodes: Option<&mut super::nodes::Nodes>,
) -> anyhow::Result<Map<String, Value>> {
    remove_on_complete(ch, queues).await?;
    prefill(ch, queues, n, 1000, o).await?;
    let mut m = drain_prefilled(ch, pids, n, (workers, credits), queues).await?;
    // Redis memory after the drain, as the BullMQ harness reports it (MB, one decimal).
    if let Some(nodes) = nodes {
        let mb = nodes.used_memory().await / 1e6;
        m.insert("usedMemoryMB".into(), json!((mb * 10.0).round() / 10.0));
    }
    Ok(m)
}

/// A drain of `n` jobs pre-filled on queues that keep no completed job (River's benchmark
/// shape): Redis memory (`used_memory`, summed over the masters of `nodes`) before the
/// fill, when full and after the drain, the fill's rate, then `workers` streams with
/// `credits` each lease and ack them. Value: jobs/s drained, first lease to the n-th ack.
pub async fn drain(
    ch: &Conn,
    pids: &Pids,
    n: usize,
    (workers, credits): (usize, u32),
    queues: &[String],
    o: &SpecOpts,
    mut nodes: Option<&mut super::nodes::Nodes>,
) -> anyhow::Result<Map<String, Value>> {
    remove_on_complete(ch, queues).await?;
    let mut memory = Vec::new();
    if let Some(nodes) = nodes.as_deref_mut() {
        memory.push(nodes.used_memory().await);
    }
    let fill = std::time::Instant::now();
    prefill(ch, queues, n, 1000, o).await?;
    let fill_rate = n as f64 / fill.elapsed().as_secs_f64().max(1e-9);
    if let Some(nodes) = nodes.as_deref_mut() {
        memory.push(nodes.used_memory().await);
    }
    let mut m = drain_prefilled(ch, pids, n, (workers, credits), queues).await?;
    if let Some(nodes) = nodes {
        memory.push(nodes.used_memory().await);
    }
    m.insert("fillRate".into(), json!(fill_rate));
    m.insert("workers".into(), json!(format!("{workers} x {credits}")));
    for (k, v) in ["memBeforeMB", "memFullMB", "memAfterMB"]
        .iter()
        .zip(&memory)
    {
        m.insert((*k).into(), json!(v / 1e6));
    }
    Ok(m)
}

/// `workers` streams with `credits` each lease and ack the `n` jobs waiting on `queues`.
/// Window: first lease received to the n-th successful Settled.
async fn drain_prefilled(
    ch: &Conn,
    pids: &Pids,
    n: usize,
    (workers, credits): (usize, u32),
    queues: &[String],
) -> anyhow::Result<Map<String, Value>> {
    let shared = Shared::new(pids, n);
    let mut tasks = Vec::new();
    for _ in 0..workers {
        let s = Stream::open(ch, queues, credits).await?;
        tasks.push(spawn_worker(s, Answer::Ack, shared.clone()));
    }
    let result = shared.wait(patience(n)).await;
    tasks.iter().for_each(JoinHandle::abort);
    let (a, b) = result?;
    let mut m = measure(&a, &b, n as f64);
    m.insert(
        "leftInQueue".into(),
        json!(left_in_queue(ch, queues).await?),
    );
    m.insert(
        "refused".into(),
        json!(shared.refused.load(Ordering::Relaxed)),
    );
    Ok(m)
}

/// Jobs not yet finished on `queues` (each counted once): waiting, delayed and leased, from
/// `GetQueueStats`. Read after a drain's window, so a run that ends with jobs still in the
/// queue (a refused settle, a lost ack) says so in its `leftInQueue`.
async fn left_in_queue(ch: &Conn, queues: &[String]) -> anyhow::Result<u64> {
    let mut seen = std::collections::BTreeSet::new();
    let mut left = 0;
    for q in queues.iter().filter(|q| seen.insert(q.as_str())) {
        let st = ch.get_queue_stats(q).await?;
        left += st.waiting + st.delayed + st.active;
    }
    Ok(left)
}

/// `n` jobs with max_attempts 3 and a fixed zero backoff; `workers` streams with `credits`
/// each fail every attempt with RETRY. Value: attempts/s, first lease to the n-th dead job.
pub async fn failure_path(
    ch: &Conn,
    pids: &Pids,
    n: usize,
    credits: u32,
    queues: &[String],
    payload: usize,
) -> anyhow::Result<Map<String, Value>> {
    let o = SpecOpts {
        payload,
        max_attempts: Some(3),
        backoff: Some(super::client::fixed_backoff(0)),
        ..Default::default()
    };
    prefill(ch, queues, n, 1000, &o).await?;
    let shared = Shared::new(pids, n);
    let worker = spawn_worker(
        Stream::open(ch, queues, credits).await?,
        Answer::FailRetry,
        shared.clone(),
    );
    let result = shared.wait(patience(3 * n)).await;
    worker.abort();
    let (a, b) = result?;
    let attempts = shared.leases.load(Ordering::Relaxed);
    let mut m = measure(&a, &b, attempts as f64);
    let sec = m["sec"].as_f64().unwrap_or(1.0);
    m.insert("attempts".into(), json!(attempts));
    m.insert(
        "failedCount".into(),
        json!(shared.finished.load(Ordering::Relaxed)),
    );
    m.insert("jobsPerSec".into(), json!(n as f64 / sec));
    Ok(m)
}

/// The server's RSS with `streams` x `credits` jobs leased across `streams` streams (100
/// streams per connection). Value: RSS in MB once every lease arrived; then all are acked.
pub async fn rss(
    server: &Target,
    pids: &Pids,
    streams: usize,
    credits: u32,
    queues: &[String],
    payload: usize,
) -> anyhow::Result<Map<String, Value>> {
    let pid = pids
        .server
        .clone()
        .ok_or_else(|| anyhow::anyhow!("the rss scenario needs --server-pid"))?;
    let before = rss_bytes(&pid).unwrap_or(0);
    let n = streams * credits as usize;
    let mut open = Vec::new();
    let mut ch = connect(server).await?;
    for i in 0..streams {
        if i > 0 && i % 100 == 0 {
            ch = connect(server).await?;
        }
        open.push(Stream::open(&ch, queues, credits).await?);
    }
    let o = SpecOpts {
        payload,
        ..Default::default()
    };
    prefill(&ch, queues, n, 1000, &o).await?;
    // Collect every lease without answering, then read the RSS, then ack them all.
    let mut held = Vec::new();
    for s in open.iter_mut() {
        for _ in 0..credits {
            let m = tokio::time::timeout(patience(n), s.rx.next()).await??;
            if let Some(StreamEvent::Lease(l)) = m {
                held.push(l);
            }
        }
    }
    let after = rss_bytes(&pid).unwrap_or(0);
    let mb = |b: u64| b as f64 / 1e6;
    for (s, chunk) in open.iter().zip(held.chunks(credits as usize)) {
        chunk.iter().for_each(|l| s.ack(l));
    }
    for s in open.iter_mut() {
        for _ in 0..credits {
            let _ = tokio::time::timeout(Duration::from_secs(30), s.rx.next()).await;
        }
    }
    let mut m = Map::new();
    m.insert("value".into(), json!(mb(after)));
    m.insert("rssBeforeMB".into(), json!(mb(before)));
    m.insert("leased".into(), json!(held.len()));
    m.insert("streams".into(), json!(streams));
    m.insert(
        "bytesPerLease".into(),
        json!((after.saturating_sub(before)) as f64 / held.len().max(1) as f64),
    );
    Ok(m)
}
