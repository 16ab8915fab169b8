//! Leases of live, hung and slow workers: renewal keeps a long job with one worker, a hung
//! worker loses its lease and its stream and its late ack is fenced off, and a per-attempt timeout fails
//! attempts as TIMED_OUT until the job is dead.

use std::time::Duration;

use jobwire::pb;

use crate::harness::*;

const LEASE: Duration = Duration::from_secs(1);

/// A server with 1 s leases, a 1 s heartbeat timeout and a 100 ms reaper.
async fn app() -> (TestRedis, TestApp) {
    let redis = TestRedis::start().await;
    let mut cfg = test_config(&redis.url);
    cfg.lease_duration = LEASE;
    cfg.heartbeat_timeout = Duration::from_secs(1);
    let app = TestApp::spawn(cfg).await;
    (redis, app)
}

fn job_of(l: &pb::Lease) -> &pb::Job {
    l.job.as_ref().expect("job")
}

#[tokio::test]
async fn a_job_running_three_lease_durations_on_a_live_stream_is_delivered_once() {
    let (_redis, app) = app().await;
    enqueue(
        &app,
        pb::JobSpec {
            max_attempts: Some(3),
            ..spec("long", "j")
        },
    )
    .await;
    let mut busy = TestWorker::open(&app, &["long"], 1, "busy").await;
    let lease = busy.lease().await;
    assert_eq!(lease.attempt, 1);
    // A second worker with a free credit stands by the whole time.
    let mut idle = TestWorker::open(&app, &["long"], 1, "idle").await;

    // The job runs for 3 lease durations; the busy worker only heartbeats.
    let during = busy.heartbeat_for(LEASE * 3).await;
    assert!(during.is_empty(), "no second lease to the busy worker");
    assert!(
        idle.lease_within(Duration::from_millis(10)).await.is_none(),
        "the standby worker was never given the job"
    );
    let s = busy.ack(&lease).await;
    assert_eq!(
        s.code, 0,
        "the ack after 3 lease durations lands: {}",
        s.message
    );
    let job = get_job(&app, "long", "j").await;
    assert_eq!(job.state, pb::JobState::Completed as i32);
    assert_eq!(job.attempts_made, 1, "delivered exactly once");
    assert!(job.errors.is_empty(), "no expired attempt recorded");
}

#[tokio::test]
async fn a_hung_worker_loses_its_lease_and_its_late_ack_changes_nothing() {
    let (redis, app) = app().await;
    // The healthy worker opens first and is busy with another job, so it is first in the
    // queue's list of streams (a stale settle must not touch its leases).
    enqueue(&app, spec("hung", "other")).await;
    let mut healthy = TestWorker::open(&app, &["hung"], 1, "healthy").await;
    let other = healthy.lease().await;
    enqueue(
        &app,
        pb::JobSpec {
            max_attempts: Some(3),
            ..spec("hung", "j")
        },
    )
    .await;
    let mut hung = TestWorker::open(&app, &["hung"], 1, "hung").await;
    let stale = hung.lease().await;
    assert_eq!(job_of(&stale).job_id, "j");

    // The hung worker says nothing; the healthy one heartbeats until the job's lease
    // expires and the reaper puts it back (attempt 1 failed, LEASE_EXPIRED).
    let mut polls = 0;
    loop {
        assert!(healthy
            .heartbeat_for(Duration::from_millis(200))
            .await
            .is_empty());
        let job = get_job(&app, "hung", "j").await;
        if job.state != pb::JobState::Active as i32 {
            assert_eq!(job.errors[0].error_type, "LEASE_EXPIRED");
            break;
        }
        polls += 1;
        assert!(polls < 100, "the hung worker's lease never expired");
    }
    assert_eq!(healthy.ack(&other).await.code, 0);
    let fresh = healthy.lease().await;
    assert_eq!(job_of(&fresh).job_id, "j", "another worker gets the job");
    assert_eq!(fresh.attempt, 2);

    // The server ended the hung worker's silent stream (it held a lease).
    let ended = loop {
        match hung.recv(Duration::from_secs(10)).await {
            Recv::Msg(_) => continue,
            other => break other,
        }
    };
    assert!(
        matches!(&ended, Recv::Error(s) if s.code() == tonic::Code::Unavailable),
        "{ended:?}"
    );
    // The hung worker wakes up and acks with its old token (unary: its stream is gone).
    let before = redis.record("hung", "j").await;
    let s = app
        .workers()
        .ack(pb::AckRequest {
            result: Vec::new(),
            queue: "hung".into(),
            job_id: "j".into(),
            lease_token: stale.lease_token.clone(),
        })
        .await
        .expect_err("stale ack");
    assert_eq!(s.code(), tonic::Code::FailedPrecondition, "{}", s.message());
    assert_eq!(redis.record("hung", "j").await, before, "nothing changed");

    // The new holder keeps its lease (renewed) for 3 lease durations and acks.
    assert!(healthy.heartbeat_for(LEASE * 3).await.is_empty());
    let s = healthy.ack(&fresh).await;
    assert_eq!(
        s.code, 0,
        "the new holder still holds the lease: {}",
        s.message
    );
    let job = get_job(&app, "hung", "j").await;
    assert_eq!(job.state, pb::JobState::Completed as i32);
    assert_eq!(job.attempts_made, 2);
}

#[tokio::test]
async fn attempts_past_the_timeout_fail_as_timed_out_until_the_job_is_dead() {
    let (_redis, app) = app().await;
    enqueue(
        &app,
        pb::JobSpec {
            max_attempts: Some(2),
            timeout: Some(ms(Duration::from_millis(300))),
            ..spec("slow", "j")
        },
    )
    .await;
    let mut w = TestWorker::open(&app, &["slow"], 1, "slow").await;
    for attempt in 1..=2u32 {
        let l = w.lease().await;
        assert_eq!(l.attempt, attempt);
        // The worker is alive (heartbeats) but the attempt outlives its timeout.
        let mut polls = 0;
        while get_job(&app, "slow", "j").await.errors.len() < attempt as usize {
            assert!(w.heartbeat_for(Duration::from_millis(100)).await.is_empty());
            polls += 1;
            assert!(polls < 100, "attempt {attempt} never timed out");
        }
        let s = w.ack(&l).await;
        assert_eq!(
            s.code,
            tonic::Code::FailedPrecondition as i32,
            "a late ack is refused: {}",
            s.message
        );
    }
    let job = get_job(&app, "slow", "j").await;
    assert_eq!(job.state, pb::JobState::Dead as i32);
    assert_eq!(job.dead_reason, pb::DeadReason::TimedOut as i32);
    assert_eq!(job.attempts_made, 2);
    let types: Vec<&str> = job.errors.iter().map(|e| e.error_type.as_str()).collect();
    assert_eq!(types, ["TIMED_OUT", "TIMED_OUT"]);
    assert!(
        w.lease_within(Duration::from_millis(300)).await.is_none(),
        "a dead job is not delivered again"
    );
}
