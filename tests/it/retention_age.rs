//! Retention by age holds with no traffic: a completed (or dead) job older than the queue's
//! max age is removed by the reaper, not only when some later job is acked (or dies), so its
//! id is free again; and every removal counts in `jobwire_jobs_trimmed_total{queue,state}`.

use std::time::Duration;

use jobwire::pb;
use pb::queue_service_client::QueueServiceClient;

use crate::harness::*;

/// Is the job gone (GetJob answers NOT_FOUND)?
async fn gone(app: &TestApp, queue: &str, id: &str) -> bool {
    let got = app
        .jobs()
        .get_job(pb::GetJobRequest {
            queue: queue.into(),
            job_id: id.into(),
        })
        .await;
    matches!(got, Err(s) if s.code() == tonic::Code::NotFound)
}

async fn set_retention(app: &TestApp, queue: &str, retention: pb::Retention) {
    QueueServiceClient::new(app.channel.clone())
        .update_queue_config(pb::UpdateQueueConfigRequest {
            queue: queue.into(),
            config: Some(pb::QueueConfig {
                retention: Some(retention),
                ..Default::default()
            }),
            update_mask: None,
        })
        .await
        .expect("update config");
}

fn trimmed(text: &str, queue: &str, state: &str) -> f64 {
    metric_value(
        text,
        "jobwire_jobs_trimmed_total",
        &[("queue", queue), ("state", state)],
    )
    .unwrap_or(0.0)
}

#[tokio::test]
async fn completed_max_age_frees_the_id_with_no_further_traffic() {
    let (_redis, app) = TestApp::with_redis().await;
    set_retention(
        &app,
        "age-c",
        pb::Retention {
            completed_max_age: Some(ms(Duration::from_secs(1))),
            ..Default::default()
        },
    )
    .await;
    assert!(enqueue(&app, spec("age-c", "once")).await.created);
    let mut w = TestWorker::open(&app, &["age-c"], 1, "w").await;
    let l = w.lease().await;
    assert_eq!(w.ack(&l).await.code, 0);
    drop(w);
    // Right after the ack the id is still taken.
    assert!(!enqueue(&app, spec("age-c", "once")).await.created);
    // No traffic but reads: GetJob trims nothing, so only the reaper can free the id.
    eventually(Duration::from_secs(10), || gone(&app, "age-c", "once")).await;
    let again = enqueue(&app, spec("age-c", "once")).await;
    assert!(
        again.created,
        "the completed job outlived completed_max_age = 1s with no traffic"
    );
    let text = http_get(app.http, "/metrics").await;
    assert!(
        trimmed(&text, "age-c", "completed") >= 1.0,
        "trimmed counter"
    );
}

#[tokio::test]
async fn dead_max_age_frees_the_id_with_no_further_traffic() {
    let (_redis, app) = TestApp::with_redis().await;
    set_retention(
        &app,
        "age-d",
        pb::Retention {
            dead_max_age: Some(ms(Duration::from_secs(1))),
            ..Default::default()
        },
    )
    .await;
    assert!(enqueue(&app, spec("age-d", "doomed")).await.created);
    let mut w = TestWorker::open(&app, &["age-d"], 1, "w").await;
    let l = w.lease().await;
    let s = w
        .fail(&l, pb::FailDisposition::NoRetry, "permanent", "Bad", None)
        .await;
    assert_eq!(s.code, 0);
    drop(w);
    assert!(!enqueue(&app, spec("age-d", "doomed")).await.created);
    // No traffic but reads: GetJob trims nothing, so only the reaper can free the id.
    eventually(Duration::from_secs(10), || gone(&app, "age-d", "doomed")).await;
    let again = enqueue(&app, spec("age-d", "doomed")).await;
    assert!(
        again.created,
        "the dead-letter entry outlived dead_max_age = 1s with no traffic"
    );
    let text = http_get(app.http, "/metrics").await;
    assert!(trimmed(&text, "age-d", "dead") >= 1.0, "trimmed counter");
}
