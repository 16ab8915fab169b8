//! Workers SIGKILLed mid-job (real child processes): the job comes back within lease
//! duration + reaper interval; a worker that reconnects and extends its lease by token keeps
//! the job; a job that kills its worker every time is dead-lettered as LEASE_EXPIRED after
//! max_attempts deliveries.

use std::time::{Duration, Instant};

use jobwire::pb;

use crate::harness::*;
use crate::procs::WorkerProc;

const LEASE: Duration = Duration::from_secs(1);
const REAPER: Duration = Duration::from_millis(100);
/// Scheduling slack on top of lease + reaper (two busy cores, debug build).
const SLACK: Duration = Duration::from_millis(1500);

async fn app() -> (TestRedis, TestApp) {
    let redis = TestRedis::start().await;
    let mut cfg = test_config(&redis.url);
    cfg.lease_duration = LEASE;
    cfg.reaper_interval = REAPER;
    let app = TestApp::spawn(cfg).await;
    (redis, app)
}

#[tokio::test]
async fn a_killed_workers_job_is_delivered_again_within_lease_plus_reaper_interval() {
    let (_redis, app) = app().await;
    enqueue(
        &app,
        pb::JobSpec {
            max_attempts: Some(3),
            ..spec("kw", "j")
        },
    )
    .await;
    let mut child = WorkerProc::spawn(&app.grpc.to_string(), "kw");
    let first = child.leased(Duration::from_secs(30)).await.expect("leased");
    assert_eq!((first.job_id.as_str(), first.attempt), ("j", 1));
    let mut standby = TestWorker::open(&app, &["kw"], 1, "standby").await;

    let killed = Instant::now();
    child.sigkill().await;
    let again = standby
        .lease_within(LEASE + REAPER + SLACK)
        .await
        .expect("delivered again within lease duration + reaper interval");
    println!("redelivered {:?} after SIGKILL", killed.elapsed());
    assert_eq!(again.attempt, 2, "the expired lease counted as an attempt");
    assert_eq!(standby.ack(&again).await.code, 0);
    let job = get_job(&app, "kw", "j").await;
    assert_eq!(job.errors.len(), 1);
    assert_eq!(job.errors[0].error_type, "LEASE_EXPIRED");
}

#[tokio::test]
async fn a_worker_that_reconnects_and_extends_its_lease_keeps_the_job() {
    let (_redis, app) = app().await;
    enqueue(
        &app,
        pb::JobSpec {
            max_attempts: Some(3),
            ..spec("kx", "j")
        },
    )
    .await;
    let mut child = WorkerProc::spawn(&app.grpc.to_string(), "kx");
    let held = child.leased(Duration::from_secs(30)).await.expect("leased");
    let mut standby = TestWorker::open(&app, &["kx"], 1, "standby").await;
    child.sigkill().await;

    // The worker comes back (a new process would have persisted its tokens) and renews by
    // token, well before the deadline, for 3 lease durations.
    let until = tokio::time::Instant::now() + LEASE * 3;
    while tokio::time::Instant::now() < until {
        let r = app
            .workers()
            .extend_lease(pb::ExtendLeaseRequest {
                queue: "kx".into(),
                job_id: held.job_id.clone(),
                lease_token: held.token.clone(),
                lease_duration: None,
            })
            .await
            .expect("the lease is still ours");
        assert!(r.into_inner().lease_deadline.is_some());
        assert!(
            standby
                .lease_within(Duration::from_millis(300))
                .await
                .is_none(),
            "an extended lease is not delivered to anyone else"
        );
    }
    app.workers()
        .ack(pb::AckRequest {
            result: Vec::new(),
            queue: "kx".into(),
            job_id: held.job_id.clone(),
            lease_token: held.token.clone(),
        })
        .await
        .expect("ack by token after reconnecting");
    let job = get_job(&app, "kx", "j").await;
    assert_eq!(job.state, pb::JobState::Completed as i32);
    assert_eq!(job.attempts_made, 1);
}

#[tokio::test]
async fn a_job_that_kills_its_worker_every_time_is_dead_lettered_lease_expired() {
    let (_redis, app) = app().await;
    enqueue(
        &app,
        pb::JobSpec {
            max_attempts: Some(3),
            ..spec("poison", "j")
        },
    )
    .await;
    for attempt in 1..=3u32 {
        let mut child = WorkerProc::spawn(&app.grpc.to_string(), "poison");
        let l = child
            .leased(LEASE + REAPER + SLACK + Duration::from_secs(30))
            .await
            .unwrap_or_else(|| panic!("delivery {attempt}"));
        assert_eq!(l.attempt, attempt);
        child.sigkill().await;
    }
    eventually(LEASE + REAPER + SLACK, || async {
        get_job(&app, "poison", "j").await.state == pb::JobState::Dead as i32
    })
    .await;
    let job = get_job(&app, "poison", "j").await;
    assert_eq!(job.dead_reason, pb::DeadReason::LeaseExpired as i32);
    assert_eq!(job.attempts_made, 3);
    assert!(job.errors.iter().all(|e| e.error_type == "LEASE_EXPIRED"));
    let mut w = TestWorker::open(&app, &["poison"], 1, "after").await;
    assert!(
        w.lease_within(Duration::from_secs(1)).await.is_none(),
        "a dead job never loops back"
    );
}
