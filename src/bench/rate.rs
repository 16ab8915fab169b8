//! Fixed-rate load (the shape of Hatchet's load test): unary Enqueue calls sent on a fixed
//! schedule, `rate` a second for `secs` seconds, each call in its own task so a slow call
//! never delays the next send (open loop: no coordinated omission), while worker streams
//! lease and ack every job. For each job it records the send (just before the Enqueue
//! call), the lease arriving on a stream and the Settled reply of its ack, and reports the
//! enqueue->lease and enqueue->ack percentiles, the rate reached and the CPU per job.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use jobwire_client::StreamEvent;
use serde_json::{json, Map, Value};
use tokio::sync::{Notify, Semaphore};

use super::client::{remove_on_complete, spec, Conn, SpecOpts, Stream};
use super::cpu::{measure, Pids};
use super::latency::pct;

/// Most Enqueue calls in flight; past it the schedule slips (counted as late sends).
const MAX_IN_FLIGHT: usize = 4096;

/// A send later than this after its scheduled time is counted as late (the generator, not
/// the server, fell behind).
const LATE: Duration = Duration::from_millis(5);

/// Per-job clock readings, ns since the scenario's start (0: not yet).
struct Clocks {
    sent: Vec<AtomicU64>,
    leased: Vec<AtomicU64>,
    acked: Vec<AtomicU64>,
}

impl Clocks {
    fn new(n: usize) -> Clocks {
        let v = || (0..n).map(|_| AtomicU64::new(0)).collect();
        Clocks {
            sent: v(),
            leased: v(),
            acked: v(),
        }
    }
}

/// Sorted latencies in ms from `from` to `to` over the jobs that have both readings.
fn spans(from: &[AtomicU64], to: &[AtomicU64]) -> Vec<f64> {
    let mut v: Vec<f64> = from
        .iter()
        .zip(to)
        .filter_map(|(a, b)| {
            let (a, b) = (a.load(Ordering::Acquire), b.load(Ordering::Acquire));
            (a > 0 && b > 0).then(|| b.saturating_sub(a) as f64 / 1e6)
        })
        .collect();
    v.sort_by(|x, y| x.total_cmp(y));
    v
}

/// Runs `rate` jobs/s of unary Enqueue for `secs` s against `workers` streams of `credits`
/// each (they ack every lease at once). Value: jobs/s from the first send to the last ack;
/// CPU over that window. Fails if not every job is acked within 60 s of the last send.
pub async fn fixed_rate(
    ch: &Conn,
    pids: &Pids,
    (rate, secs): (u32, u64),
    (workers, credits): (usize, u32),
    queues: &[String],
    o: &SpecOpts,
) -> anyhow::Result<Map<String, Value>> {
    let n = (u64::from(rate) * secs) as usize;
    if n == 0 {
        anyhow::bail!("a fixed-rate run needs a rate and a duration above 0");
    }
    remove_on_complete(ch, queues).await?;
    let base = Instant::now();
    let ns = move || base.elapsed().as_nanos().max(1) as u64;
    let clocks = Arc::new(Clocks::new(n));
    let acked = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(Notify::new());
    let mut tasks = Vec::new();
    for _ in 0..workers {
        let mut s = Stream::open(ch, queues, credits).await?;
        let (clocks, acked, done) = (clocks.clone(), acked.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            let index = |id: &str| id.parse::<usize>().ok().filter(|&i| i < n);
            while let Ok(Some(m)) = s.rx.next().await {
                match m {
                    StreamEvent::Lease(l) => {
                        if let Some(i) = l.job.as_ref().and_then(|j| index(&j.job_id)) {
                            clocks.leased[i].store(ns(), Ordering::Release);
                        }
                        s.ack(&l);
                    }
                    StreamEvent::Settled(st) if st.code == 0 => {
                        if let Some(i) = index(&st.job_id) {
                            clocks.acked[i].store(ns(), Ordering::Release);
                        }
                        if acked.fetch_add(1, Ordering::AcqRel) + 1 == n {
                            done.notify_one();
                        }
                    }
                    _ => {}
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await; // the streams are open and idle
    let permits = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let errors = Arc::new(AtomicUsize::new(0));
    let mut late = 0usize;
    let period = Duration::from_secs_f64(1.0 / f64::from(rate));
    let a = pids.snap();
    let start = tokio::time::Instant::now();
    for i in 0..n {
        let at = start + period.mul_f64(i as f64);
        tokio::time::sleep_until(at).await;
        let permit = permits.clone().acquire_owned().await?;
        if tokio::time::Instant::now() > at + LATE {
            late += 1;
        }
        let (ch, clocks, errors) = (ch.clone(), clocks.clone(), errors.clone());
        let job = spec(queues, i, o);
        tokio::spawn(async move {
            clocks.sent[i].store(ns(), Ordering::Release);
            if ch.enqueue_spec(job).await.is_err() {
                errors.fetch_add(1, Ordering::Relaxed);
            }
            drop(permit);
        });
    }
    let all = acked.load(Ordering::Acquire) >= n
        || tokio::time::timeout(Duration::from_secs(60), done.notified())
            .await
            .is_ok();
    let b = pids.snap();
    tasks.iter().for_each(|t| t.abort());
    if !all {
        anyhow::bail!(
            "only {} of {n} jobs acked within 60 s of the last send ({} Enqueue errors)",
            acked.load(Ordering::Acquire),
            errors.load(Ordering::Relaxed)
        );
    }
    let to_lease = spans(&clocks.sent, &clocks.leased);
    let to_ack = spans(&clocks.sent, &clocks.acked);
    let mut m = measure(&a, &b, n as f64);
    for (k, xs) in [("lease", &to_lease), ("ack", &to_ack)] {
        for p in [50.0, 95.0, 99.0] {
            m.insert(format!("{k}P{p:.0}"), json!(pct(xs, p)));
        }
        m.insert(
            format!("{k}Max"),
            json!(xs.last().copied().unwrap_or(f64::NAN)),
        );
    }
    m.insert("targetRate".into(), json!(rate));
    m.insert("workers".into(), json!(format!("{workers} x {credits}")));
    m.insert("lateSends".into(), json!(late));
    m.insert(
        "enqueueErrors".into(),
        json!(errors.load(Ordering::Relaxed)),
    );
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::spans;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn spans_skip_jobs_without_both_readings_and_sort() {
        let v = |xs: &[u64]| xs.iter().map(|&x| AtomicU64::new(x)).collect::<Vec<_>>();
        let from = v(&[1_000_000, 2_000_000, 0, 4_000_000]);
        let to = v(&[4_000_000, 2_500_000, 9_000_000, 0]);
        assert_eq!(spans(&from, &to), vec![0.5, 3.0]);
    }
}
