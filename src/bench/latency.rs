//! Idle pickup latency: one subscribed, idle stream; jobs enqueued one at a time with a
//! small gap; for each job the time from just before the Enqueue call (the BullMQ harness's
//! definition) and from the Enqueue reply to the lease arriving on the stream, and the
//! Enqueue call's own round trip.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::client::{spec, Conn, SpecOpts, Stream};
use super::cpu::{measure, Pids};
use jobwire_client::StreamEvent;
use serde_json::{json, Map, Value};
use tokio::sync::Notify;

/// The `p`-th percentile of sorted `xs` (nearest rank, as the harness computes it).
pub fn pct(xs: &[f64], p: f64) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * xs.len() as f64).ceil() as usize;
    xs[rank.clamp(1, xs.len()) - 1]
}

/// Runs the probe: `n` jobs, `gap` after each, one idle stream with `credits`.
pub async fn idle_pickup(
    ch: &Conn,
    pids: &Pids,
    n: usize,
    gap: Duration,
    credits: u32,
    queues: &[String],
    o: &SpecOpts,
) -> anyhow::Result<Map<String, Value>> {
    let base = Instant::now();
    let ns = move || base.elapsed().as_nanos() as u64;
    let received: Arc<Vec<AtomicU64>> = Arc::new((0..n).map(|_| AtomicU64::new(0)).collect());
    let got = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(Notify::new());
    let mut s = Stream::open(ch, queues, credits).await?;
    let worker = {
        let (received, got, done) = (received.clone(), got.clone(), done.clone());
        tokio::spawn(async move {
            while let Ok(Some(m)) = s.rx.next().await {
                if let StreamEvent::Lease(l) = m {
                    let t = ns();
                    let i: usize = l
                        .job
                        .as_ref()
                        .and_then(|j| j.job_id.parse().ok())
                        .unwrap_or(0);
                    if let Some(slot) = received.get(i) {
                        slot.store(t, Ordering::Release);
                    }
                    s.ack(&l);
                    if got.fetch_add(1, Ordering::AcqRel) + 1 == n {
                        done.notify_one();
                    }
                }
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await; // let the loop go idle
    let (mut before, mut after) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let a = pids.snap();
    for i in 0..n {
        let job = spec(queues, i, o);
        before.push(ns());
        ch.enqueue_spec(job).await?;
        after.push(ns());
        tokio::time::sleep(gap).await;
    }
    let all = got.load(Ordering::Acquire) >= n
        || tokio::time::timeout(Duration::from_secs(30), done.notified())
            .await
            .is_ok();
    let b = pids.snap();
    worker.abort();
    if !all {
        anyhow::bail!("only {} of {n} leases arrived", got.load(Ordering::Acquire));
    }
    let ms = |from: &[u64]| {
        let mut v: Vec<f64> = from
            .iter()
            .zip(received.iter())
            .map(|(t0, r)| (r.load(Ordering::Acquire) as f64 - *t0 as f64).max(0.0) / 1e6)
            .collect();
        v.sort_by(|x, y| x.total_cmp(y));
        v
    };
    let (hi, ret) = (ms(&before), ms(&after));
    let early = after
        .iter()
        .zip(received.iter())
        .filter(|(t1, r)| r.load(Ordering::Acquire) < **t1)
        .count();
    let mut rpc: Vec<f64> = before
        .iter()
        .zip(&after)
        .map(|(t0, t1)| (*t1 as f64 - *t0 as f64) / 1e6)
        .collect();
    rpc.sort_by(|x, y| x.total_cmp(y));
    let mut m = measure(&a, &b, n as f64);
    for (k, v) in [
        ("value", pct(&hi, 50.0)),
        ("p50", pct(&hi, 50.0)),
        ("p90", pct(&hi, 90.0)),
        ("p95", pct(&hi, 95.0)),
        ("p99", pct(&hi, 99.0)),
        ("max", hi[hi.len() - 1]),
        ("fromReturnP50", pct(&ret, 50.0)),
        ("fromReturnP99", pct(&ret, 99.0)),
        ("fromReturnMax", ret[ret.len() - 1]),
        ("rpcP50", pct(&rpc, 50.0)),
        ("rpcP99", pct(&rpc, 99.0)),
    ] {
        m.insert(k.into(), json!(v));
    }
    m.insert("leasedBeforeReply".into(), json!(early));
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::pct;

    #[test]
    fn nearest_rank_percentiles() {
        let xs: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(pct(&xs, 50.0), 50.0);
        assert_eq!(pct(&xs, 99.0), 99.0);
        assert_eq!(pct(&xs, 100.0), 100.0);
        assert_eq!(pct(&[7.0], 99.0), 7.0);
        assert!(pct(&[], 50.0).is_nan());
    }
}
