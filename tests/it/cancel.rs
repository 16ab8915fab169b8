//! CancelJob, CancelJobs and DeleteJob against real Redis and real streams: a waiting or
//! delayed job ends CANCELLED at once and is never leased; the holder of an active one is
//! sent a CancelLease (also from another replica), its Fail ends the job CANCELLED and its
//! Ack COMPLETED; with no settle the lease is revoked after the cancel grace (renewal never
//! pushes it past) and a late Ack is fenced off; bulk cancel by name, group and metadata,
//! paged, DeleteJob and bad inputs are in cancel_bulk.rs.

use std::time::{Duration, Instant};

use jobwire::pb;
use pb::queue_service_client::QueueServiceClient;
use pb::subscribe_request::Message as In;
use tonic::Code;

use crate::harness::*;

pub(crate) async fn set_config(
    app: &TestApp,
    queue: &str,
    config: pb::QueueConfig,
    paths: &[&str],
) {
    QueueServiceClient::new(app.channel.clone())
        .update_queue_config(pb::UpdateQueueConfigRequest {
            queue: queue.into(),
            config: Some(config),
            update_mask: Some(prost_types::FieldMask {
                paths: paths.iter().map(|p| p.to_string()).collect(),
            }),
        })
        .await
        .expect("update config");
}

pub(crate) async fn set_grace(app: &TestApp, queue: &str, grace: Duration) {
    let config = pb::QueueConfig {
        cancel_grace: Some(ms(grace)),
        ..Default::default()
    };
    set_config(app, queue, config, &["cancel_grace"]).await;
}

pub(crate) async fn cancel(
    app: &TestApp,
    queue: &str,
    id: &str,
    reason: &str,
) -> Result<pb::CancelJobResponse, tonic::Status> {
    app.jobs()
        .cancel_job(pb::CancelJobRequest {
            queue: queue.into(),
            job_id: id.into(),
            reason: reason.into(),
        })
        .await
        .map(|r| r.into_inner())
}

pub(crate) async fn stats(app: &TestApp, queue: &str) -> pb::QueueStats {
    QueueServiceClient::new(app.channel.clone())
        .get_queue_stats(pb::GetQueueStatsRequest {
            queue: queue.into(),
        })
        .await
        .expect("stats")
        .into_inner()
        .stats
        .expect("stats")
}

pub(crate) fn state(j: &pb::Job) -> pb::JobState {
    pb::JobState::try_from(j.state).expect("state")
}

#[tokio::test]
async fn waiting_and_delayed_jobs_end_cancelled_at_once_and_are_never_leased() {
    let (redis, app) = TestApp::with_redis().await;
    let q = "cx-wait";
    enqueue(&app, spec(q, "plain")).await;
    enqueue(
        &app,
        pb::JobSpec {
            priority: 5,
            ..spec(q, "high")
        },
    )
    .await;
    enqueue(
        &app,
        pb::JobSpec {
            priority: -5,
            ..spec(q, "low")
        },
    )
    .await;
    enqueue(
        &app,
        pb::JobSpec {
            delay: Some(ms(Duration::from_secs(3600))),
            ..spec(q, "later")
        },
    )
    .await;
    enqueue(&app, spec(q, "kept")).await;
    for id in ["plain", "high", "low", "later"] {
        let r = cancel(&app, q, id, "not needed").await.expect("cancel");
        assert!(r.cancelled, "{id}");
        let job = r.job.expect("job");
        assert_eq!(state(&job), pb::JobState::Cancelled, "{id}");
        assert_eq!(job.cancel_reason, "not needed");
        assert!(job.cancel_time.is_some() && job.finish_time.is_some());
        // GetJob shows the same.
        let got = get_job(&app, q, id).await;
        assert_eq!(state(&got), pb::JobState::Cancelled);
        assert_eq!(got.cancel_reason, "not needed");
        // A second cancel changes nothing and says so.
        let again = cancel(&app, q, id, "other reason")
            .await
            .expect("cancel again");
        assert!(!again.cancelled);
        assert_eq!(again.job.expect("job").cancel_reason, "not needed");
    }
    let store = redis.store().await;
    let qn = jobwire::jobs::QueueName::parse(q).expect("queue");
    assert_eq!(
        store.waiting_ids(&qn).await.expect("ids"),
        vec!["kept".to_owned()]
    );
    // Only the job left waiting is leased.
    let mut w = TestWorker::open(&app, &[q], 10, "w").await;
    let l = w.lease().await;
    assert_eq!(l.job.as_ref().expect("job").job_id, "kept");
    assert!(w.lease_within(Duration::from_millis(500)).await.is_none());
    let s = stats(&app, q).await;
    assert_eq!((s.cancelled, s.waiting, s.delayed), (4, 0, 0));
    // ListJobs lists the CANCELLED jobs.
    let listed = app
        .jobs()
        .list_jobs(pb::ListJobsRequest {
            queue: q.into(),
            state: pb::JobState::Cancelled as i32,
            ..Default::default()
        })
        .await
        .expect("list")
        .into_inner();
    assert_eq!(listed.jobs.len(), 4);
    // Unknown job: NOT_FOUND.
    let e = cancel(&app, q, "nope", "").await.expect_err("unknown");
    assert_eq!(e.code(), Code::NotFound);
    let text = http_get(app.http, "/metrics").await;
    assert_eq!(
        metric_value(&text, "jobwire_jobs_cancelled_total", &[("queue", q)]),
        Some(4.0)
    );
}

#[tokio::test]
async fn the_holder_of_an_active_job_is_told_and_its_fail_ends_it_cancelled() {
    let (_redis, app) = TestApp::with_redis().await;
    let q = "cx-active";
    set_grace(&app, q, Duration::from_secs(20)).await;
    enqueue(
        &app,
        pb::JobSpec {
            max_attempts: Some(5),
            ..spec(q, "a")
        },
    )
    .await;
    let mut w = TestWorker::open(&app, &[q], 1, "w").await;
    let l = w.lease().await;
    let r = cancel(&app, q, "a", "customer left").await.expect("cancel");
    assert!(r.cancelled);
    let job = r.job.expect("job");
    assert_eq!(state(&job), pb::JobState::Active);
    assert!(job.cancel_time.is_some());
    assert_eq!(job.cancel_reason, "customer left");
    let c = w
        .cancel_within(Duration::from_secs(5))
        .await
        .expect("a CancelLease");
    assert_eq!((c.queue.as_str(), c.job_id.as_str()), (q, "a"));
    assert_eq!(c.lease_token, l.lease_token);
    assert_eq!(c.reason, "customer left");
    let revoke = c.revoke_time.expect("revoke time");
    let cancel_time = job.cancel_time.expect("cancel time");
    let grace_ms = (revoke.seconds - cancel_time.seconds) * 1000
        + i64::from(revoke.nanos - cancel_time.nanos) / 1_000_000;
    assert_eq!(grace_ms, 20_000);
    // A second cancel while pending: not cancelled again, the holder not told twice.
    assert!(
        !cancel(&app, q, "a", "again")
            .await
            .expect("cancel")
            .cancelled
    );
    assert!(w.cancel_within(Duration::from_millis(300)).await.is_none());
    // A Fail (RETRY with attempts left) ends it CANCELLED, never retried.
    let s = w
        .fail(&l, pb::FailDisposition::Retry, "stopped", "Cancelled", None)
        .await;
    assert_eq!(s.code, 0);
    assert_eq!(s.state, pb::JobState::Cancelled as i32);
    let got = get_job(&app, q, "a").await;
    assert_eq!(state(&got), pb::JobState::Cancelled);
    assert_eq!(got.dead_reason, pb::DeadReason::Unspecified as i32);
    assert!(w.lease_within(Duration::from_millis(500)).await.is_none());
}

#[tokio::test]
async fn an_ack_after_the_cancel_completes_the_job() {
    let (_redis, app) = TestApp::with_redis().await;
    let q = "cx-ack";
    enqueue(&app, spec(q, "a")).await;
    let mut w = TestWorker::open(&app, &[q], 1, "w").await;
    let l = w.lease().await;
    assert!(cancel(&app, q, "a", "").await.expect("cancel").cancelled);
    w.cancel_within(Duration::from_secs(5))
        .await
        .expect("a CancelLease");
    let s = w.ack(&l).await;
    assert_eq!(s.code, 0);
    let got = get_job(&app, q, "a").await;
    assert_eq!(state(&got), pb::JobState::Completed);
    assert!(
        got.cancel_time.is_some(),
        "the cancel request stays on record"
    );
    // A cancel now finds it finished.
    let r = cancel(&app, q, "a", "").await.expect("cancel");
    assert!(!r.cancelled);
    assert_eq!(state(&r.job.expect("job")), pb::JobState::Completed);
}

#[tokio::test]
async fn without_a_settle_the_lease_is_revoked_after_the_grace_despite_renewal() {
    let (_redis, app) = TestApp::with_redis().await;
    let q = "cx-revoke";
    // Leases are 2 s, renewed every ~0.67 s while the worker heartbeats: without the cap
    // the renewal would keep the lease alive for ever.
    set_grace(&app, q, Duration::from_millis(1500)).await;
    enqueue(
        &app,
        pb::JobSpec {
            max_attempts: Some(3),
            ..spec(q, "a")
        },
    )
    .await;
    let mut w = TestWorker::open(&app, &[q], 1, "w").await;
    let l = w.lease().await;
    let t0 = Instant::now();
    assert!(
        cancel(&app, q, "a", "too slow")
            .await
            .expect("cancel")
            .cancelled
    );
    w.cancel_within(Duration::from_secs(5))
        .await
        .expect("a CancelLease");
    let mut revoked = false;
    while t0.elapsed() < Duration::from_secs(8) {
        w.heartbeat();
        if state(&get_job(&app, q, "a").await) == pb::JobState::Cancelled {
            revoked = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(revoked, "the lease was revoked");
    assert!(
        t0.elapsed() >= Duration::from_millis(1400),
        "not before the grace"
    );
    let got = get_job(&app, q, "a").await;
    assert_eq!(got.attempts_made, 1);
    assert!(got.errors.is_empty(), "a revoke is not a failed attempt");
    // A late Ack is fenced off: FAILED_PRECONDITION, and nothing changes.
    let s = w.ack(&l).await;
    assert_eq!(s.code, Code::FailedPrecondition as i32);
    assert_eq!(state(&get_job(&app, q, "a").await), pb::JobState::Cancelled);
    let e = app
        .workers()
        .ack(pb::AckRequest {
            queue: q.into(),
            job_id: "a".into(),
            lease_token: l.lease_token.clone(),
            result: Vec::new(),
        })
        .await
        .expect_err("late unary ack");
    assert_eq!(e.code(), Code::FailedPrecondition);
    assert!(w.lease_within(Duration::from_millis(300)).await.is_none());
}

#[tokio::test]
async fn a_holder_on_another_replica_is_told() {
    let redis = TestRedis::start().await;
    let a = TestApp::spawn(test_config(&redis.url)).await;
    let b = TestApp::spawn(test_config(&redis.url)).await;
    let q = "cx-replicas";
    enqueue(&a, spec(q, "x")).await;
    let mut w = TestWorker::open(&b, &[q], 1, "w-on-b").await;
    let l = w.lease().await;
    assert!(
        cancel(&a, q, "x", "from a")
            .await
            .expect("cancel")
            .cancelled
    );
    let c = w
        .cancel_within(Duration::from_secs(5))
        .await
        .expect("a CancelLease via b");
    assert_eq!(c.lease_token, l.lease_token);
    assert_eq!(c.reason, "from a");
    let s = w
        .fail(
            &l,
            pb::FailDisposition::NoRetry,
            "stopped",
            "Cancelled",
            None,
        )
        .await;
    assert_eq!(s.state, pb::JobState::Cancelled as i32);
}

#[tokio::test]
async fn a_cancel_of_a_job_on_a_draining_replica_ends_it_cancelled_not_waiting() {
    let redis = TestRedis::start().await;
    let a = TestApp::spawn(test_config(&redis.url)).await;
    let b = TestApp::spawn(test_config(&redis.url)).await;
    let q = "cx-drain";
    set_grace(&a, q, Duration::from_secs(30)).await;
    enqueue(&a, spec(q, "x")).await;
    let mut w = TestWorker::open(&b, &[q], 1, "w-on-b").await;
    w.lease().await;
    assert!(cancel(&a, q, "x", "").await.expect("cancel").cancelled);
    w.cancel_within(Duration::from_secs(5)).await.expect("told");
    // b shuts down: it hands its leases back, and a cancel-pending one ends CANCELLED.
    b.stop().await.expect("stop");
    assert_eq!(state(&get_job(&a, q, "x").await), pb::JobState::Cancelled);
}

#[tokio::test]
async fn cancel_to_worker_latency_is_measured() {
    let redis = TestRedis::start().await;
    let a = TestApp::spawn(test_config(&redis.url)).await;
    let b = TestApp::spawn(test_config(&redis.url)).await;
    const N: usize = 200;
    for (label, holder) in [("same replica", &a), ("other replica", &b)] {
        let q = if std::ptr::eq(holder, &a) {
            "cx-lat-a"
        } else {
            "cx-lat-b"
        };
        for i in 0..N {
            enqueue(&a, spec(q, &format!("j{i}"))).await;
        }
        let mut w = TestWorker::open(holder, &[q], N as u32, "lat").await;
        let mut leases = Vec::new();
        for _ in 0..N {
            leases.push(w.lease().await);
        }
        let mut lat = Vec::with_capacity(N);
        for l in &leases {
            let id = l.job.as_ref().expect("job").job_id.clone();
            let t0 = Instant::now();
            assert!(cancel(&a, q, &id, "lat").await.expect("cancel").cancelled);
            let c = w.cancel_within(Duration::from_secs(5)).await.expect("told");
            lat.push(t0.elapsed());
            assert_eq!(c.job_id, id);
        }
        lat.sort();
        let p = |f: f64| lat[((lat.len() as f64 * f).ceil() as usize).saturating_sub(1)];
        println!(
            "cancel-to-worker latency ({label}, {N} cancels): p50 {:?}, p99 {:?}, max {:?}",
            p(0.50),
            p(0.99),
            lat[lat.len() - 1]
        );
        for l in &leases {
            w.send(In::Fail(pb::FailRequest {
                queue: q.into(),
                job_id: l.job.as_ref().expect("job").job_id.clone(),
                lease_token: l.lease_token.clone(),
                disposition: pb::FailDisposition::NoRetry as i32,
                error: Some(pb::JobError {
                    message: "cancelled".into(),
                    error_type: "Cancelled".into(),
                    details: String::new(),
                }),
                ..Default::default()
            }));
        }
        for _ in 0..N {
            assert_eq!(w.settled().await.state, pb::JobState::Cancelled as i32);
        }
    }
}

#[tokio::test]
async fn a_lost_cancel_notice_reaches_the_holder_at_its_next_renewal() {
    let (redis, app) = TestApp::with_redis().await;
    let q = "cx-lost-notice";
    enqueue(&app, spec(q, "a")).await;
    let mut w = TestWorker::open(&app, &[q], 1, "w").await;
    let l = w.lease().await;
    // The replica's wake-up listener loses its connection, so the notice published by the
    // cancel (made by another client, not through this replica) reaches nobody.
    let mut c = redis.conn().await;
    let _: redis::Value = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(&mut c)
        .await
        .expect("client kill");
    let store = redis.store().await;
    let qn = jobwire::jobs::QueueName::parse(q).expect("queue");
    let got = store.cancel_job(&qn, "a", "lost").await.expect("cancel");
    assert!(matches!(
        got,
        jobwire::store::CancelOutcome::Job {
            cancelled: true,
            ..
        }
    ));
    // Renewal (every lease_duration / 3 while the worker heartbeats) tells it.
    let mut told = None;
    for _ in 0..20 {
        w.heartbeat();
        if let Some(c) = w.cancel_within(Duration::from_millis(200)).await {
            told = Some(c);
            break;
        }
    }
    let c = told.expect("told at a renewal");
    assert_eq!(
        (c.lease_token.as_str(), c.reason.as_str()),
        (l.lease_token.as_str(), "lost")
    );
    // Once per lease: later renewals do not repeat it.
    for _ in 0..8 {
        w.heartbeat();
        assert!(
            w.cancel_within(Duration::from_millis(200)).await.is_none(),
            "told twice"
        );
    }
}

#[tokio::test]
async fn a_cancelled_job_of_a_lease_call_whose_reply_was_lost_ends_cancelled() {
    // The store alone: a lease call the server never confirmed (its reply lost), then a
    // cancel, then the release of that call: the job is not handed back to waiting.
    let redis = TestRedis::start().await;
    let store = redis.store().await;
    let qn = jobwire::jobs::QueueName::parse("cx-lost-call").expect("queue");
    let job = jobwire::jobs::NewJob {
        queue: qn.clone(),
        id: "a".into(),
        name: "n".into(),
        payload: Vec::new(),
        content_type: String::new(),
        metadata: Default::default(),
        delay_ms: 0,
        priority: 0,
        max_attempts: Some(3),
        backoff: None,
        timeout_ms: None,
        group_key: String::new(),
        expire_ms: 0,
        id_ours: false,
    };
    store.enqueue(&qn, &[job], 1).await.expect("enqueue");
    let call = jobwire::store::new_lease_call_id();
    let batch = store
        .lease(&qn, &["w"], 60_000, &call, &[])
        .await
        .expect("lease");
    assert_eq!(batch.jobs.len(), 1);
    let got = store.cancel_job(&qn, "a", "stop").await.expect("cancel");
    assert!(matches!(
        got,
        jobwire::store::CancelOutcome::Job {
            cancelled: true,
            ..
        }
    ));
    assert_eq!(
        store
            .release_lease_call(&qn, &call, 60_000)
            .await
            .expect("release"),
        0
    );
    let a = store.get_job(&qn, "a").await.expect("get").expect("job");
    assert_eq!(a.state, jobwire::jobs::JobState::Cancelled);
    assert_eq!(a.attempts_made, 0, "no attempt charged: no worker got it");
    assert_eq!(a.cancel_reason, "stop");
    let call = jobwire::store::new_lease_call_id();
    let again = store
        .lease(&qn, &["w"], 60_000, &call, &[])
        .await
        .expect("lease");
    assert!(again.jobs.is_empty(), "never leased again");
}
