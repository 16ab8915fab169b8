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

/// An ack the worker sends during the grace period gets its Settled before the stream ends,
/// even when Redis is slow to apply it: the drain waits for settles in flight, not only for
/// the stream's book to empty (the book gives a lease's credit back when its ack is read,
/// before the script runs). Redis is paused for writes while the ack is in flight; before
/// the fix the shutdown saw an empty book, closed the stream and the reply was lost, so the
/// worker had to repeat an ack that had been applied.
#[tokio::test]
async fn shutdown_answers_an_ack_still_in_flight_before_ending_the_stream() {
    let (redis, app) = TestApp::with_redis().await;
    enqueue(&app, spec("sd-slow", "slow-ack")).await;
    let mut w = TestWorker::open(&app, &["sd-slow"], 1, "w").await;
    let l = w.lease().await;

    let stopping = tokio::spawn(app.stop());
    w.until_draining(Duration::from_secs(5)).await;
    // Writes wait 600 ms in Redis: the ack's script is in flight for that long, far longer
    // than the shutdown's look at the streams (every 20 ms), and well within its grace (2 s).
    redis.pause_writes(600).await;
    let s = w.ack(&l).await;
    assert_eq!(s.code, 0, "the ack in flight is answered: {}", s.message);
    stopping.await.expect("join").expect("run returns Ok");
    assert_eq!(
        redis.job("sd-slow", "slow-ack").await.state,
        jobwire::jobs::JobState::Completed
    );
}
