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

    let mut c = redis.conn().await;
    let (st, att): (String, String) = redis::cmd("HMGET")
        .arg("jw:{sd}:job:unfinished")
        .arg("st")
        .arg("att")
        .query_async(&mut c)
        .await
        .expect("hmget");
    assert_eq!(st, "waiting", "handed back at once");
    assert_eq!(att, "0", "the hand-back consumed no attempt");
    let done_state: String = redis::cmd("HGET")
        .arg("jw:{sd}:job:done")
        .arg("st")
        .query_async(&mut c)
        .await
        .expect("hget");
    assert_eq!(done_state, "completed");
}
