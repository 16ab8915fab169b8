//! Orderly shutdown: streams are told, acks still land during the grace period, the rest of
//! the leases go back to waiting without consuming an attempt, and `run` returns.

use std::time::Duration;

use jobwire::pb;
use pb::subscribe_response::Message as Out;

use crate::harness::*;

#[tokio::test]
async fn shutdown_drains_streams_and_hands_unfinished_leases_back() {
    let (redis, app) = TestApp::with_redis().await;
    assert_eq!(http_get(app.http, "/readyz").await, "ready");
    enqueue(
        &app,
        pb::JobSpec {
            max_attempts: Some(1),
            ..spec("sd", "done")
        },
    )
    .await;
    enqueue(
        &app,
        pb::JobSpec {
            max_attempts: Some(1),
            ..spec("sd", "unfinished")
        },
    )
    .await;
    let mut w = TestWorker::open(&app, &["sd"], 2, "w").await;
    let a = w.lease().await;
    let b = w.lease().await;
    let (done, unfinished) = if a.job.as_ref().expect("job").job_id == "done" {
        (a, b)
    } else {
        (b, a)
    };

    let stopping = tokio::spawn(app.stop());
    // The worker is told, and may still settle what it holds during the grace period.
    let first = w.drain_messages(Duration::from_millis(1500)).await;
    assert!(
        first.iter().any(|m| matches!(m, Out::Draining(_))),
        "Draining sent: {first:?}"
    );
    let s = w.ack(&done).await;
    assert_eq!(
        s.code, 0,
        "an ack during the grace period lands: {}",
        s.message
    );
    let _ = unfinished;
    stopping.await.expect("join").expect("run returns Ok");

    let unfinished = redis.job("sd", "unfinished").await;
    assert_eq!(
        unfinished.state,
        jobwire::jobs::JobState::Waiting,
        "handed back at once"
    );
    assert_eq!(
        unfinished.attempts_made, 0,
        "the hand-back consumed no attempt"
    );
    let done_state = redis.job("sd", "done").await.state;
    assert_eq!(done_state, jobwire::jobs::JobState::Completed);
}
