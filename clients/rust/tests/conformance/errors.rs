//! The typed errors: non_retryable_dead_letters, retry_after_honoured,
//! rate_limited_uses_no_attempt.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jobwire_client::{pb, Ctx, EnqueueOptions, Job, JobError, Worker};

use crate::support;

/// One record per delivery: (attempt, when the handler started, when it returned).
type Deliveries = Arc<Mutex<Vec<(u32, Instant, Instant)>>>;

/// Runs one job through a worker whose handler answers `answer(attempt)`; returns the
/// final job and the deliveries.
async fn one_job(
    id: &str,
    max_attempts: Option<u32>,
    answer: fn(u32) -> Result<(), JobError>,
) -> (pb::Job, Vec<(u32, Instant, Instant)>, Vec<pb::Job>) {
    let (server, _) = crate::server_for(id).await;
    let client = server.client().await.expect("connect");
    let q = support::queue(id);
    client
        .enqueue(
            &q,
            "j",
            b"{}".to_vec(),
            EnqueueOptions {
                job_id: Some("j".into()),
                max_attempts,
                ..Default::default()
            },
        )
        .await
        .expect("enqueue");
    let deliveries: Deliveries = Arc::default();
    let mut worker = Worker::new(client.clone(), support::options(&q, 1));
    let d = deliveries.clone();
    worker.handle("j", move |job: Job<serde_json::Value>, _ctx: Ctx| {
        let d = d.clone();
        async move {
            let start = Instant::now();
            let r = answer(job.attempt);
            d.lock()
                .expect("lock")
                .push((job.attempt, start, Instant::now()));
            r
        }
    });
    let w = support::run(worker);
    let job = support::finished(&client, &q, "j").await;
    w.stop().await;
    let dead = client
        .list_dead_letters(&q, 100, "", None)
        .await
        .expect("list dead letters")
        .dead_letters;
    let deliveries = deliveries.lock().expect("lock").clone();
    (job, deliveries, dead)
}

#[tokio::test]
async fn non_retryable_dead_letters() {
    let (_, p) = crate::scenario("non_retryable_dead_letters");
    let max = crate::param(&p, "max_attempts") as u32;
    let (job, deliveries, dead) = one_job("non_retryable_dead_letters", Some(max), |_| {
        Err(JobError::non_retryable("invalid address: a,b"))
    })
    .await;
    assert_eq!(job.state, pb::JobState::Dead as i32);
    assert_eq!(job.dead_reason, pb::DeadReason::NoRetry as i32);
    assert_eq!(job.attempts_made, 1);
    assert_eq!(job.max_attempts, max);
    let last = job.errors.last().expect("an error recorded");
    assert_eq!(last.message, "invalid address: a,b");
    assert_eq!(last.error_type, "NonRetryable");
    assert_eq!(deliveries.len(), 1);
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].job_id, "j");
}

#[tokio::test]
async fn retry_after_honoured() {
    let (_, p) = crate::scenario("retry_after_honoured");
    let (retry_ms, slack_ms) = (
        crate::param(&p, "retry_after_ms"),
        crate::param(&p, "slack_ms"),
    );
    assert_eq!(
        retry_ms, 1000,
        "the handler below hard-codes the scenario's delay"
    );
    let (job, deliveries, _) = one_job("retry_after_honoured", Some(3), |attempt| {
        if attempt == 1 {
            Err(JobError::retry_after(Duration::from_millis(1000)))
        } else {
            Ok(())
        }
    })
    .await;
    assert_eq!(job.state, pb::JobState::Completed as i32);
    assert_eq!(job.attempts_made, 2);
    assert_eq!(deliveries.len(), 2, "{deliveries:?}");
    assert_eq!((deliveries[0].0, deliveries[1].0), (1, 2));
    let gap = deliveries[1].1.duration_since(deliveries[0].2);
    assert!(
        gap + Duration::from_millis(slack_ms) >= Duration::from_millis(retry_ms),
        "leased again after {gap:?}"
    );
    assert_eq!(
        job.errors.last().map(|e| e.error_type.as_str()),
        Some("RetryAfter")
    );
}

#[tokio::test]
async fn rate_limited_uses_no_attempt() {
    let (_, p) = crate::scenario("rate_limited_uses_no_attempt");
    let (limited_ms, max) = (
        crate::param(&p, "rate_limited_ms"),
        crate::param(&p, "max_attempts") as u32,
    );
    assert_eq!(
        limited_ms, 300,
        "the handler below hard-codes the scenario's delay"
    );
    static FIRST: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);
    let (job, deliveries, _) = one_job("rate_limited_uses_no_attempt", Some(max), |_| {
        if FIRST.swap(false, std::sync::atomic::Ordering::SeqCst) {
            Err(JobError::rate_limited(Duration::from_millis(300)))
        } else {
            Ok(())
        }
    })
    .await;
    assert_eq!(job.state, pb::JobState::Completed as i32, "{job:?}");
    assert_eq!(job.attempts_made, 1);
    assert_eq!(deliveries.len(), 2, "{deliveries:?}");
    assert_eq!(
        (deliveries[0].0, deliveries[1].0),
        (1, 1),
        "no attempt charged"
    );
    let gap = deliveries[1].1.duration_since(deliveries[0].2);
    assert!(
        gap >= Duration::from_millis(limited_ms),
        "back after {gap:?}"
    );
}
