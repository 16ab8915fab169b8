//! Idle streams (`--heartbeat-timeout`): a stream that holds leases and goes silent is ended
//! (UNAVAILABLE, STREAM_CLOSED) and its job goes to another worker as a failed attempt
//! (LEASE_EXPIRED, DESIGN.md section 3); a worker that holds nothing may wait in silence for
//! work; a stream that never sends `open` is ended at the heartbeat timeout.

use std::time::Duration;

use jobwire::pb;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic_types::StatusExt;

use crate::harness::*;

const HEARTBEAT: Duration = Duration::from_secs(1);

async fn app() -> (TestRedis, TestApp) {
    let redis = TestRedis::start().await;
    let mut cfg = test_config(&redis.url);
    cfg.lease_duration = Duration::from_secs(1);
    cfg.heartbeat_timeout = HEARTBEAT;
    let app = TestApp::spawn(cfg).await;
    (redis, app)
}

fn reason(s: &tonic::Status) -> String {
    s.get_error_details()
        .error_info()
        .map(|i| i.reason.clone())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_silent_stream_holding_a_lease_is_ended_and_its_job_goes_to_another_worker() {
    let (_redis, app) = app().await;
    enqueue(
        &app,
        pb::JobSpec {
            max_attempts: Some(3),
            ..spec("idle", "j")
        },
    )
    .await;
    let mut hung = TestWorker::open(&app, &["idle"], 1, "hung").await;
    let stale = hung.lease().await;

    // Silent: the server ends the stream itself.
    let end = loop {
        match hung.recv(Duration::from_secs(10)).await {
            Recv::Msg(_) => continue,
            other => break other,
        }
    };
    let Recv::Error(s) = end else {
        panic!("the silent stream was not ended: {end:?}")
    };
    assert_eq!(s.code(), tonic::Code::Unavailable, "{s:?}");
    assert_eq!(reason(&s), "STREAM_CLOSED");
    assert!(
        s.message().contains("--heartbeat-timeout"),
        "{}",
        s.message()
    );

    // The job is leased again, as a failed attempt of the hung worker.
    let mut fresh = TestWorker::open(&app, &["idle"], 1, "fresh").await;
    let again = fresh.lease().await;
    assert_eq!(again.attempt, 2);
    let job = get_job(&app, "idle", "j").await;
    assert_eq!(job.errors[0].error_type, "LEASE_EXPIRED");

    // The hung worker's late ack (unary, its stream is gone) changes nothing.
    let late = app
        .workers()
        .ack(pb::AckRequest {
            result: Vec::new(),
            queue: "idle".into(),
            job_id: "j".into(),
            lease_token: stale.lease_token.clone(),
        })
        .await
        .expect_err("stale");
    assert_eq!(late.code(), tonic::Code::FailedPrecondition);
    assert_eq!(fresh.ack(&again).await.code, 0);
}

#[tokio::test]
async fn an_idle_worker_may_wait_in_silence_and_then_gets_and_keeps_its_job() {
    let (_redis, app) = app().await;
    let mut idle = TestWorker::open(&app, &["wait"], 1, "idle").await;
    // Three heartbeat timeouts without a word from either side.
    assert!(
        matches!(idle.recv(HEARTBEAT * 3).await, Recv::Timeout),
        "the idle stream stays open"
    );
    enqueue(&app, spec("wait", "j")).await;
    let lease = idle.lease().await;
    // Its heartbeat clock started with the job, not with its last word 3 s ago: silent for
    // half the timeout (past a renewal tick) it keeps its stream and its lease.
    assert!(
        matches!(idle.recv(HEARTBEAT / 2).await, Recv::Timeout),
        "the stream stays open"
    );
    // It is renewed while the worker heartbeats.
    assert!(idle.heartbeat_for(HEARTBEAT * 3).await.is_empty());
    assert_eq!(idle.ack(&lease).await.code, 0);
    assert_eq!(get_job(&app, "wait", "j").await.attempts_made, 1);
}

#[tokio::test]
async fn a_stream_that_never_opens_is_ended_at_the_heartbeat_timeout() {
    let (_redis, app) = app().await;
    let (tx, rx) = mpsc::unbounded_channel::<pb::SubscribeRequest>();
    let started = tokio::time::Instant::now();
    let r = tokio::time::timeout(
        Duration::from_secs(10),
        app.workers().subscribe(UnboundedReceiverStream::new(rx)),
    )
    .await
    .expect("ended by the server");
    let s = r.expect_err("refused");
    assert_eq!(s.code(), tonic::Code::InvalidArgument, "{s:?}");
    assert!(s.message().contains("open"), "{}", s.message());
    assert!(started.elapsed() >= HEARTBEAT, "not before the timeout");
    drop(tx);
}
