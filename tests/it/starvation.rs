//! Priority starvation shows on `/metrics` (issue 32, item 12): under a saturated rate limit
//! a queue's higher priorities take every start, and a lower priority's jobs wait for good.
//! `jobwire_queue_priority_oldest_waiting_age_seconds{queue,priority}` gives the age of the
//! oldest waiting job per priority, so the starving priority's age grows while the served
//! one's stays small.

use std::time::{Duration, Instant};

use jobwire::pb;

use crate::cancel::{set_config, stats};
use crate::harness::*;

/// High-priority jobs kept waiting: more than one rate window admits, so every start
/// finds one.
const BACKLOG: usize = 12;

const AGE: &str = "jobwire_queue_priority_oldest_waiting_age_seconds";

fn age(text: &str, queue: &str, priority: &str) -> Option<f64> {
    metric_value(text, AGE, &[("queue", queue), ("priority", priority)])
}

#[tokio::test]
async fn a_starving_priority_shows_its_growing_waiting_age() {
    let (_redis, app) = TestApp::with_redis().await;
    let q = "starve";
    // 8 starts a second: the rate limit, not the worker, sets the pace.
    let config = pb::QueueConfig {
        rate_limit: Some(pb::RateLimit {
            max: 8,
            period: Some(ms(Duration::from_secs(1))),
        }),
        ..Default::default()
    };
    set_config(&app, q, config, &["rate_limit"]).await;
    let job = |id: String, priority: i32| pb::JobSpec {
        priority,
        ..spec(q, &id)
    };
    // One low-priority job (1), then a backlog of high-priority ones (9) that the worker
    // keeps topped up: every lease it gets enqueues another priority-9 job.
    enqueue(&app, job("low".into(), 1)).await;
    let mut next = 0;
    for _ in 0..BACKLOG {
        enqueue(&app, job(format!("high-{next}"), 9)).await;
        next += 1;
    }
    let mut w = TestWorker::open(&app, &[q], 4, "w").await;
    let start = Instant::now();
    let mut scrapes: Vec<(Duration, Option<f64>, Option<f64>)> = Vec::new();
    let mut last_scrape = Instant::now();
    while start.elapsed() < Duration::from_secs(7) {
        if let Some(l) = w.lease_within(Duration::from_millis(200)).await {
            let id = l.job.as_ref().expect("job").job_id.clone();
            assert_ne!(
                id, "low",
                "the low-priority job was leased: nothing starved"
            );
            assert_eq!(w.ack(&l).await.code, 0);
            enqueue(&app, job(format!("high-{next}"), 9)).await;
            next += 1;
        }
        if last_scrape.elapsed() >= Duration::from_millis(500) {
            let text = http_get(app.http, "/metrics").await;
            scrapes.push((start.elapsed(), age(&text, q, "1"), age(&text, q, "9")));
            last_scrape = Instant::now();
        }
    }
    let served = next - BACKLOG;
    println!(
        "{served} priority-9 jobs served in 7 s; scrapes (t, age of 1, age of 9): {scrapes:?}"
    );
    assert!(served >= 10, "only {served} high-priority jobs were served");
    let low = get_job(&app, q, "low").await;
    assert_eq!(low.state, pb::JobState::Waiting as i32, "{low:?}");
    assert_eq!(low.attempts_made, 0);
    assert!(stats(&app, q).await.waiting >= 2);

    // The starving priority's age grows with the run; the served one's stays small.
    let (early_t, early_low, _) = scrapes
        .iter()
        .find(|(_, l, _)| l.is_some())
        .copied()
        .expect("a scrape with priority 1's age");
    let (late_t, late_low, late_high) = *scrapes.last().expect("scrapes");
    let (early_low, late_low) = (
        early_low.unwrap_or(0.0),
        late_low.expect("priority 1's age"),
    );
    let late_high = late_high.expect("priority 9's age");
    assert!(
        late_low >= 5.0,
        "priority 1 waited the whole run but shows {late_low} s"
    );
    // Gauges are refreshed at most every 2 s: the growth trails the clock by that much.
    let grew = late_low - early_low;
    let elapsed = (late_t - early_t).as_secs_f64();
    assert!(
        grew >= elapsed - 2.5,
        "priority 1's age grew {grew} s over {elapsed} s of scrapes"
    );
    assert!(
        late_high < late_low / 2.0,
        "priority 9 is served but shows {late_high} s (priority 1: {late_low} s)"
    );
    // The other gauge, the queue's oldest waiting age, is the starving job's too.
    let text = http_get(app.http, "/metrics").await;
    let oldest = metric_value(
        &text,
        "jobwire_queue_oldest_waiting_age_seconds",
        &[("queue", q)],
    )
    .expect("oldest waiting age");
    assert!(oldest >= late_low, "{oldest} < {late_low}");
}
