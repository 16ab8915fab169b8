//! The rate limit, fleet-wide and exact: two jobwire replicas and eight workers on a backlog,
//! limit 50 starts per second. No sliding window of one second ever holds more than 50
//! starts, the queue runs at >= 95% of the limit, and the lease loops do not spin on Redis
//! while throttled (lease script calls stay bounded). Its own test binary, so the
//! process-wide metrics recorder counts only this test's lease calls.

#[allow(dead_code)]
#[path = "it/harness.rs"]
mod harness;
#[allow(dead_code)]
#[path = "support/topology/mod.rs"]
mod topology;

use std::time::Duration;

use harness::*;
use jobwire::pb;

const MAX: usize = 50;
const PERIOD_MS: i64 = 1000;
const RUN: Duration = Duration::from_millis(5500);

async fn lease_calls(app: &TestApp) -> f64 {
    let text = http_get(app.http, "/metrics").await;
    metric_value(
        &text,
        "jobwire_redis_script_seconds_count",
        &[("script", "lease")],
    )
    .unwrap_or(0.0)
}

#[tokio::test]
async fn fifty_per_second_across_two_replicas_and_eight_workers() {
    let redis = TestRedis::start().await;
    let a = TestApp::spawn(test_config(&redis.url)).await;
    let b = TestApp::spawn(test_config(&redis.url)).await;
    let mut queues = pb::queue_service_client::QueueServiceClient::new(a.channel.clone());
    queues
        .update_queue_config(pb::UpdateQueueConfigRequest {
            queue: "rl".into(),
            config: Some(pb::QueueConfig {
                rate_limit: Some(pb::RateLimit {
                    max: MAX as u32,
                    period: Some(ms(Duration::from_millis(PERIOD_MS as u64))),
                }),
                ..Default::default()
            }),
            update_mask: None,
        })
        .await
        .expect("config");
    let jobs = (0..1000).map(|i| spec("rl", &format!("j{i}"))).collect();
    a.jobs()
        .enqueue_batch(pb::EnqueueBatchRequest { jobs })
        .await
        .expect("batch");

    let calls_before = lease_calls(&a).await;
    let deadline = tokio::time::Instant::now() + RUN;
    let mut tasks = Vec::new();
    for i in 0..8 {
        let mut w = TestWorker::open(
            if i % 2 == 0 { &a } else { &b },
            &["rl"],
            4,
            &format!("w{i}"),
        )
        .await;
        tasks.push(tokio::spawn(async move {
            let mut starts = Vec::new();
            while tokio::time::Instant::now() < deadline {
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                let Some(l) = w.lease_within(left).await else {
                    break;
                };
                let t = l
                    .job
                    .as_ref()
                    .and_then(|j| j.lease_time)
                    .expect("lease time");
                starts.push(t.seconds * 1000 + i64::from(t.nanos) / 1_000_000);
                assert_eq!(w.ack(&l).await.code, 0);
            }
            starts
        }));
    }
    let mut starts = Vec::new();
    for t in tasks {
        starts.extend(t.await.expect("worker"));
    }
    let calls = lease_calls(&a).await - calls_before;
    starts.sort_unstable();
    assert!(!starts.is_empty());

    // No window (t - 1 s, t] ever holds more than MAX starts.
    let mut worst = 0;
    for (i, &t) in starts.iter().enumerate() {
        let in_window = starts[..=i]
            .iter()
            .rev()
            .take_while(|&&s| s > t - PERIOD_MS)
            .count();
        worst = worst.max(in_window);
    }
    // Utilisation over the first five full windows from the first start.
    let first = starts[0];
    let in_five = starts
        .iter()
        .filter(|&&s| s < first + 5 * PERIOD_MS)
        .count();
    println!(
        "rate limit {MAX}/s: {} starts in {:?}; busiest 1 s window {worst}; first 5 s {in_five} starts ({:.1}% of {}); {calls} lease calls",
        starts.len(), RUN, 100.0 * in_five as f64 / (5 * MAX) as f64, 5 * MAX
    );
    assert!(worst <= MAX, "a window held {worst} starts");
    assert!(
        in_five as f64 >= 0.95 * (5 * MAX) as f64,
        "only {in_five} starts in 5 s"
    );
    // A limiter that polled would call the lease script thousands of times in 5 s.
    assert!(
        calls <= 3.0 * starts.len() as f64,
        "{calls} lease calls for {} starts",
        starts.len()
    );
}
