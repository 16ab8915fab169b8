//! Counters start at 0 for a queue as soon as this replica knows it (so Prometheus' rate()
//! and increase() see the first event), and replayed dead letters are counted.

use std::time::Duration;

use jobwire::pb;

use crate::harness::*;

const QUEUE_COUNTERS: [&str; 8] = [
    "jobwire_jobs_enqueued_total",
    "jobwire_jobs_deduplicated_total",
    "jobwire_jobs_leased_total",
    "jobwire_jobs_cancelled_total",
    "jobwire_jobs_expired_total",
    "jobwire_lease_expirations_total",
    "jobwire_rate_limit_throttled_total",
    "jobwire_dead_letters_replayed_total",
];

#[tokio::test]
async fn counters_start_at_zero_for_a_known_queue_and_replays_are_counted() {
    let (redis, app) = TestApp::with_redis().await;
    // The queue exists in Redis before this replica sees any event of it: another
    // replica's job, written with the store directly.
    let store = redis.store().await;
    let q = jobwire::jobs::QueueName::parse("mz-q").expect("queue");
    let job = jobwire::jobs::NewJob {
        queue: q.clone(),
        id: "j1".into(),
        name: "mz-name".into(),
        payload: Vec::new(),
        content_type: String::new(),
        metadata: Default::default(),
        delay_ms: 0,
        priority: 0,
        max_attempts: Some(1),
        backoff: None,
        timeout_ms: None,
        group_key: String::new(),
        expire_ms: 0,
        id_ours: false,
    };
    store.enqueue(&q, &[job], 1).await.expect("enqueue");

    let text = http_get(app.http, "/metrics").await;
    for name in QUEUE_COUNTERS {
        assert_eq!(
            metric_value(&text, name, &[("queue", "mz-q")]),
            Some(0.0),
            "{name}{{queue=\"mz-q\"}} at 0 once the queue is known"
        );
    }

    // Once a lease shows this replica the job name, the job_name counters start at 0 too.
    let mut w = TestWorker::open(&app, &["mz-q"], 1, "w").await;
    let l = w.lease().await;
    let text = http_get(app.http, "/metrics").await;
    let at = |n: &str, extra: &[(&str, &str)]| {
        let mut labels = vec![("queue", "mz-q"), ("job_name", "mz-name")];
        labels.extend_from_slice(extra);
        metric_value(&text, n, &labels)
    };
    assert_eq!(at("jobwire_jobs_completed_total", &[]), Some(0.0));
    assert_eq!(at("jobwire_job_retries_total", &[]), Some(0.0));
    for d in [
        "retry",
        "no_retry",
        "rate_limited",
        "lease_expired",
        "timed_out",
    ] {
        assert_eq!(
            at("jobwire_job_failures_total", &[("disposition", d)]),
            Some(0.0),
            "{d}"
        );
    }
    for r in [
        "NO_RETRY",
        "ATTEMPTS_EXHAUSTED",
        "LEASE_EXPIRED",
        "TIMED_OUT",
    ] {
        assert_eq!(
            at("jobwire_jobs_dead_lettered_total", &[("reason", r)]),
            Some(0.0),
            "{r}"
        );
    }

    // Dead, then replayed: the replica counts the replay.
    let s = w
        .fail(&l, pb::FailDisposition::NoRetry, "x", "e", None)
        .await;
    assert_eq!(s.code, 0);
    let r = app
        .dead()
        .replay_dead_letters(pb::ReplayDeadLettersRequest {
            queue: "mz-q".into(),
            job_ids: vec!["j1".into()],
            filter: None,
        })
        .await
        .expect("replay")
        .into_inner();
    assert_eq!(r.replayed_job_ids, ["j1"]);
    let text = http_get(app.http, "/metrics").await;
    assert_eq!(
        metric_value(
            &text,
            "jobwire_dead_letters_replayed_total",
            &[("queue", "mz-q")]
        ),
        Some(1.0)
    );
    let _ = w
        .lease_within(Duration::from_secs(5))
        .await
        .expect("the replayed job");
}
