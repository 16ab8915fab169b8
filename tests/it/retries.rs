//! Failures: backoff, attempt budgets, dispositions, stale tokens and expired leases.

use std::time::Duration;

use jobwire::pb;
use pb::FailDisposition as D;

use crate::harness::*;

fn ts_ms(t: &Option<prost_types::Timestamp>) -> i64 {
    let t = t.as_ref().expect("timestamp");
    t.seconds * 1000 + i64::from(t.nanos) / 1_000_000
}

fn dur_ms(d: &Option<prost_types::Duration>) -> i64 {
    let d = d.as_ref().expect("duration");
    d.seconds * 1000 + i64::from(d.nanos) / 1_000_000
}

fn retrying(
    queue: &str,
    id: &str,
    attempts: u32,
    kind: pb::BackoffKind,
    delay_ms: u64,
    jitter: f64,
) -> pb::JobSpec {
    pb::JobSpec {
        max_attempts: Some(attempts),
        backoff: Some(pb::Backoff {
            kind: kind as i32,
            delay: Some(ms(Duration::from_millis(delay_ms))),
            jitter,
            max_delay: None,
        }),
        ..spec(queue, id)
    }
}

/// Fails every delivery of the job; returns the leases seen.
async fn fail_until_dead(
    w: &mut TestWorker,
    app: &TestApp,
    queue: &str,
    id: &str,
) -> Vec<pb::Lease> {
    let mut leases = Vec::new();
    loop {
        let l = w.lease().await;
        let s = w
            .fail(&l, D::Retry, &format!("boom {}", l.attempt), "flaky", None)
            .await;
        assert_eq!(s.code, 0, "{}", s.message);
        leases.push(l);
        if get_job(app, queue, id).await.state == pb::JobState::Dead as i32 {
            return leases;
        }
    }
}

#[tokio::test]
async fn exponential_backoff_gaps_are_d_2d_4d_within_the_jitter_band() {
    let (_redis, app) = TestApp::with_redis().await;
    let d = 100;
    enqueue(
        &app,
        retrying("bo", "j", 4, pb::BackoffKind::Exponential, d, 0.5),
    )
    .await;
    let mut w = TestWorker::open(&app, &["bo"], 1, "w").await;
    let leases = fail_until_dead(&mut w, &app, "bo", "j").await;
    assert_eq!(leases.len(), 4);
    let job = get_job(&app, "bo", "j").await;
    assert_eq!(job.errors.len(), 4);
    for (i, e) in job.errors.iter().take(3).enumerate() {
        let full = d as i64 * (1 << i);
        let chosen = dur_ms(&e.retry_delay);
        assert!(
            (full / 2..=full).contains(&chosen),
            "retry {} waited {chosen} ms, band [{}, {full}]",
            i + 1,
            full / 2
        );
        // The next attempt was not leased before the chosen delay had passed.
        let next_lease = ts_ms(&leases[i + 1].job.as_ref().expect("job").lease_time);
        assert!(
            next_lease >= ts_ms(&e.fail_time) + chosen,
            "attempt {} leased early",
            i + 2
        );
    }
    assert_eq!(
        dur_ms(&job.errors[3].retry_delay),
        0,
        "no retry after the last attempt"
    );
}

#[tokio::test]
async fn fixed_and_exponential_backoff_without_jitter_are_exact() {
    let (_redis, app) = TestApp::with_redis().await;
    enqueue(
        &app,
        retrying("exact-exp", "j", 4, pb::BackoffKind::Exponential, 40, 0.0),
    )
    .await;
    enqueue(
        &app,
        retrying("exact-fix", "j", 3, pb::BackoffKind::Fixed, 40, 0.0),
    )
    .await;
    for queue in ["exact-exp", "exact-fix"] {
        let mut w = TestWorker::open(&app, &[queue], 1, "w").await;
        fail_until_dead(&mut w, &app, queue, "j").await;
    }
    let delays = |j: pb::Job| {
        j.errors
            .iter()
            .map(|e| dur_ms(&e.retry_delay))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        delays(get_job(&app, "exact-exp", "j").await),
        [40, 80, 160, 0]
    );
    assert_eq!(delays(get_job(&app, "exact-fix", "j").await), [40, 40, 0]);
}

#[tokio::test]
async fn max_attempts_3_gives_exactly_3_deliveries_then_dead() {
    let (_redis, app) = TestApp::with_redis().await;
    enqueue(
        &app,
        pb::JobSpec {
            max_attempts: Some(3),
            ..spec("three", "j")
        },
    )
    .await;
    let mut w = TestWorker::open(&app, &["three"], 1, "worker-7").await;
    let leases = fail_until_dead(&mut w, &app, "three", "j").await;
    assert_eq!(
        leases.iter().map(|l| l.attempt).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    assert!(
        w.lease_within(Duration::from_millis(300)).await.is_none(),
        "no fourth delivery"
    );
    let job = get_job(&app, "three", "j").await;
    assert_eq!(job.state, pb::JobState::Dead as i32);
    assert_eq!(job.dead_reason, pb::DeadReason::AttemptsExhausted as i32);
    assert_eq!(job.attempts_made, 3);
    // The dead-letter entry holds every attempt's error.
    let msgs: Vec<_> = job
        .errors
        .iter()
        .map(|e| (e.attempt, e.message.as_str(), e.worker_id.as_str()))
        .collect();
    assert_eq!(
        msgs,
        [
            (1, "boom 1", "worker-7"),
            (2, "boom 2", "worker-7"),
            (3, "boom 3", "worker-7")
        ]
    );
    assert!(job
        .errors
        .iter()
        .all(|e| e.error_type == "flaky" && e.fail_time.is_some()));
    // Every lease of the same job carried the same idempotency key.
    assert!(leases
        .iter()
        .all(|l| l.idempotency_key == leases[0].idempotency_key));
}

#[tokio::test]
async fn no_retry_dead_letters_after_one_delivery() {
    let (_redis, app) = TestApp::with_redis().await;
    enqueue(
        &app,
        pb::JobSpec {
            max_attempts: Some(5),
            ..spec("perm", "j")
        },
    )
    .await;
    let mut w = TestWorker::open(&app, &["perm"], 1, "w").await;
    let l = w.lease().await;
    let s = w
        .fail(
            &l,
            D::NoRetry,
            "400 invalid address",
            "invalid_address",
            None,
        )
        .await;
    assert_eq!(s.state, pb::JobState::Dead as i32);
    assert!(w.lease_within(Duration::from_millis(300)).await.is_none());
    let job = get_job(&app, "perm", "j").await;
    assert_eq!(job.dead_reason, pb::DeadReason::NoRetry as i32);
    assert_eq!(job.attempts_made, 1);
}

#[tokio::test]
async fn rate_limited_consumes_no_attempt() {
    let (_redis, app) = TestApp::with_redis().await;
    enqueue(
        &app,
        pb::JobSpec {
            max_attempts: Some(1),
            ..spec("rl", "j")
        },
    )
    .await;
    let mut w = TestWorker::open(&app, &["rl"], 1, "w").await;
    for _ in 0..3 {
        let l = w.lease().await;
        assert_eq!(l.attempt, 1, "a rate-limited return does not count");
        let s = w
            .fail(
                &l,
                D::RateLimited,
                "429 slow down",
                "rate_limited",
                Some(Duration::from_millis(50)),
            )
            .await;
        assert_eq!(s.state, pb::JobState::Delayed as i32);
    }
    let l = w.lease().await;
    assert_eq!(w.ack(&l).await.code, 0);
    let job = get_job(&app, "rl", "j").await;
    assert_eq!(job.state, pb::JobState::Completed as i32);
    assert_eq!(job.attempts_made, 1);
}

#[tokio::test]
async fn retry_after_overrides_the_backoff() {
    let (_redis, app) = TestApp::with_redis().await;
    enqueue(
        &app,
        retrying("ra", "j", 2, pb::BackoffKind::Fixed, 60_000, 0.0),
    )
    .await;
    let mut w = TestWorker::open(&app, &["ra"], 1, "w").await;
    let l = w.lease().await;
    w.fail(&l, D::Retry, "x", "t", Some(Duration::from_millis(30)))
        .await;
    assert_eq!(w.lease().await.attempt, 2, "retried after 30 ms, not 60 s");
}

#[tokio::test]
async fn a_stale_token_is_refused_and_changes_nothing() {
    let (redis, app) = TestApp::with_redis().await;
    enqueue(
        &app,
        pb::JobSpec {
            max_attempts: Some(3),
            ..spec("stale", "j")
        },
    )
    .await;
    let mut w = TestWorker::open(&app, &["stale"], 1, "w").await;
    let first = w.lease().await;
    w.fail(&first, D::Retry, "x", "t", None).await;
    let second = w.lease().await;
    let before = redis.record("stale", "j").await;
    // Ack, fail and extend with the first (stale) token: all refused.
    let s = w.ack(&first).await;
    assert_eq!(s.code, tonic::Code::FailedPrecondition as i32);
    let e = app
        .workers()
        .ack(pb::AckRequest {
            result: Vec::new(),
            queue: "stale".into(),
            job_id: "j".into(),
            lease_token: first.lease_token.clone(),
        })
        .await
        .expect_err("stale unary ack");
    assert_eq!(e.code(), tonic::Code::FailedPrecondition);
    let e = app
        .workers()
        .extend_lease(pb::ExtendLeaseRequest {
            queue: "stale".into(),
            job_id: "j".into(),
            lease_token: first.lease_token.clone(),
            lease_duration: None,
        })
        .await
        .expect_err("stale extend");
    assert_eq!(e.code(), tonic::Code::FailedPrecondition);
    let after = redis.record("stale", "j").await;
    assert!(before.is_some());
    assert_eq!(before, after, "the job record is untouched");
    // The current token still works.
    assert_eq!(w.ack(&second).await.code, 0);
    let done = redis.record("stale", "j").await;
    // Ack twice with the same token: the repeat answers OK (a worker whose reply was lost
    // retries) and changes nothing.
    assert_eq!(w.ack(&second).await.code, 0);
    assert_eq!(redis.record("stale", "j").await, done);
    // The stale token of the failed attempt stays refused: it was not acked.
    assert_eq!(
        w.ack(&first).await.code,
        tonic::Code::FailedPrecondition as i32
    );
}

#[tokio::test]
async fn an_expired_lease_is_delivered_again_and_counts_as_an_attempt() {
    let (_redis, app) = TestApp::with_redis().await;
    enqueue(
        &app,
        pb::JobSpec {
            max_attempts: Some(2),
            ..spec("exp", "j")
        },
    )
    .await;
    {
        let mut w = TestWorker::open(&app, &["exp"], 1, "dies").await;
        let l = w.lease().await;
        assert_eq!(l.attempt, 1);
        // The worker's stream ends without settling: its lease is no longer renewed.
    }
    let mut w2 = TestWorker::open(&app, &["exp"], 1, "w2").await;
    let l = w2
        .lease_within(Duration::from_secs(6))
        .await
        .expect("delivered again after the lease expired");
    assert_eq!(l.attempt, 2);
    let job = l.job.expect("job");
    assert_eq!(job.errors[0].error_type, "LEASE_EXPIRED");
    assert_eq!(job.errors[0].worker_id, "dies");
    // Let this one expire too: the last attempt dead-letters it with LEASE_EXPIRED.
    drop(w2);
    eventually(Duration::from_secs(6), || async {
        get_job(&app, "exp", "j").await.state == pb::JobState::Dead as i32
    })
    .await;
    assert_eq!(
        get_job(&app, "exp", "j").await.dead_reason,
        pb::DeadReason::LeaseExpired as i32
    );
}

#[tokio::test]
async fn a_live_stream_keeps_its_lease_past_the_lease_duration() {
    let (_redis, app) = TestApp::with_redis().await;
    enqueue(
        &app,
        pb::JobSpec {
            max_attempts: Some(3),
            ..spec("long", "j")
        },
    )
    .await;
    let mut w = TestWorker::open(&app, &["long"], 1, "w").await;
    let l = w.lease().await;
    let mut other = TestWorker::open(&app, &["long"], 1, "other").await;
    // 2.5x the 2 s lease duration, heartbeating: renewal keeps the lease.
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        w.send(pb::subscribe_request::Message::Heartbeat(pb::Heartbeat {}));
    }
    assert!(
        other
            .lease_within(Duration::from_millis(100))
            .await
            .is_none(),
        "never delivered twice"
    );
    assert_eq!(w.ack(&l).await.code, 0);
}
