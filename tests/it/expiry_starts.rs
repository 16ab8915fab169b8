//! Expiry bounds every start, not only the first (issue 32, items 5 and 6): a job past its
//! expire time never starts again. A first lease handed back uncharged (a server's drain)
//! puts the job back under its expire time; a retry due after the expire time expires at the
//! expire time, still delayed; a retry asked for past it ends EXPIRED at once (DEAD with
//! reason EXPIRED where the queue dead-letters expired jobs). A replay of a dead-lettered
//! job clears its expire time: a person replaying on purpose gets a run. Deliveries are
//! counted over real streams.

use std::time::{Duration, Instant, SystemTime};

use jobwire::pb;

use crate::expiry::dead_letter_expired;
use crate::harness::*;

fn state(j: &pb::Job) -> pb::JobState {
    pb::JobState::try_from(j.state).expect("state")
}

/// Reads `w`'s leases for `period` (heartbeating), failing each at once with RETRY, and
/// returns when each came (since `t0`) and its attempt.
async fn fail_each(w: &mut TestWorker, t0: Instant, period: Duration) -> Vec<(Duration, u32)> {
    let mut seen = Vec::new();
    let end = Instant::now() + period;
    while Instant::now() < end {
        w.heartbeat();
        if let Some(l) = w.lease_within(Duration::from_millis(100)).await {
            seen.push((t0.elapsed(), l.attempt));
            let s = w
                .fail(&l, pb::FailDisposition::Retry, "again", "E", None)
                .await;
            assert_eq!(s.code, 0, "{}", s.message);
        }
    }
    seen
}

#[tokio::test]
async fn a_first_lease_handed_back_by_a_drain_never_starts_after_the_expire_time() {
    let redis = TestRedis::start().await;
    let mut cfg = test_config(&redis.url);
    cfg.shutdown_grace = Duration::from_millis(100);
    let first = TestApp::spawn(cfg).await;
    let q = "exs-handback";
    let t0 = Instant::now();
    enqueue(
        &first,
        pb::JobSpec {
            ttl: Some(ms(Duration::from_millis(1500))),
            max_attempts: Some(3),
            ..spec(q, "a")
        },
    )
    .await;
    let mut w = TestWorker::open(&first, &[q], 1, "w1").await;
    let l = w.lease().await;
    assert_eq!(l.attempt, 1);
    // The server stops before the worker settles: the lease goes back uncharged (its
    // stream is told first; the stop itself ends later, with the stream).
    let stopping = tokio::spawn(first.stop());
    let mut back = None;
    while back.is_none() && t0.elapsed() < Duration::from_millis(1400) {
        let a = redis.job(q, "a").await;
        if a.state != jobwire::jobs::JobState::Active {
            back = Some(a);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let a = back.expect("handed back before its expire time");
    assert_eq!(
        (a.state, a.attempts_made),
        (jobwire::jobs::JobState::Waiting, 0),
        "handed back uncharged"
    );
    drop(w);
    stopping.await.expect("join").expect("stop");
    // Past its expire time a worker asks on another server: the job never starts.
    tokio::time::sleep(Duration::from_millis(2000).saturating_sub(t0.elapsed())).await;
    let second = TestApp::spawn(test_config(&redis.url)).await;
    let mut w2 = TestWorker::open(&second, &[q], 1, "w2").await;
    let late = w2.lease_within(Duration::from_millis(1500)).await;
    assert!(
        late.is_none(),
        "delivered {:?} after its expire time: {late:?}",
        t0.elapsed()
    );
    let a = get_job(&second, q, "a").await;
    assert_eq!(state(&a), pb::JobState::Expired);
    assert_eq!(a.attempts_made, 0);
}

#[tokio::test]
async fn a_retry_due_after_the_expire_time_expires_at_the_expire_time() {
    let (_redis, app) = TestApp::with_redis().await;
    let q = "exs-backoff";
    let t0 = Instant::now();
    enqueue(
        &app,
        pb::JobSpec {
            ttl: Some(ms(Duration::from_secs(2))),
            max_attempts: Some(5),
            backoff: Some(pb::Backoff {
                kind: pb::BackoffKind::Fixed as i32,
                delay: Some(ms(Duration::from_millis(1500))),
                jitter: 0.0,
                max_delay: None,
            }),
            ..spec(q, "a")
        },
    )
    .await;
    let mut w = TestWorker::open(&app, &[q], 1, "w").await;
    // Deliveries at 0 and 1.5 s; the retry after that is due at 3 s, past the 2 s ttl.
    let seen = fail_each(&mut w, t0, Duration::from_millis(4500)).await;
    println!("deliveries (time, attempt): {seen:?}");
    let attempts: Vec<u32> = seen.iter().map(|(_, a)| *a).collect();
    assert_eq!(attempts, [1, 2], "no start after the expire time");
    let a = get_job(&app, q, "a").await;
    assert_eq!(state(&a), pb::JobState::Expired);
    assert_eq!(a.attempts_made, 2);
    // It expired at its expire time, while its retry (due at 3 s) was still delayed.
    let expire = SystemTime::try_from(a.expire_time.expect("expire time")).expect("time");
    let finish = SystemTime::try_from(a.finish_time.expect("finish time")).expect("time");
    let retry_due = expire + Duration::from_millis(1000);
    assert!(
        finish >= expire && finish < retry_due,
        "expired {:?} after its expire time",
        finish.duration_since(expire)
    );
    let text = http_get(app.http, "/metrics").await;
    assert_eq!(
        metric_value(&text, "jobwire_jobs_expired_total", &[("queue", q)]),
        Some(1.0)
    );
}

/// A worker holds the job past its expire time and fails it RETRY: the job ends at once,
/// never delivered again; EXPIRED, or DEAD with reason EXPIRED when `dead_letter` says so.
async fn retry_past_the_expire_time(q: &str, dead_letter: bool) {
    let (_redis, app) = TestApp::with_redis().await;
    if dead_letter {
        dead_letter_expired(&app, q).await;
    }
    enqueue(
        &app,
        pb::JobSpec {
            ttl: Some(ms(Duration::from_millis(400))),
            max_attempts: Some(3),
            ..spec(q, "a")
        },
    )
    .await;
    let mut w = TestWorker::open(&app, &[q], 1, "w").await;
    let l = w.lease().await;
    w.heartbeat_for(Duration::from_millis(700)).await;
    let s = w
        .fail(
            &l,
            pb::FailDisposition::Retry,
            "again",
            "E",
            Some(Duration::from_millis(10)),
        )
        .await;
    assert_eq!(s.code, 0, "{}", s.message);
    let want = if dead_letter {
        pb::JobState::Dead
    } else {
        pb::JobState::Expired
    };
    assert_eq!(s.state, want as i32, "the Fail's outcome");
    let a = get_job(&app, q, "a").await;
    assert_eq!(state(&a), want);
    assert_eq!(a.attempts_made, 1);
    assert_eq!(a.errors.len(), 1, "the failed attempt is recorded");
    if dead_letter {
        assert_eq!(a.dead_reason, pb::DeadReason::Expired as i32);
    }
    assert!(
        w.lease_within(Duration::from_millis(500)).await.is_none(),
        "never delivered again"
    );
    let text = http_get(app.http, "/metrics").await;
    assert_eq!(
        metric_value(&text, "jobwire_jobs_expired_total", &[("queue", q)]),
        Some(1.0)
    );
}

#[tokio::test]
async fn a_retry_past_the_expire_time_ends_expired() {
    retry_past_the_expire_time("exs-retry", false).await;
}

#[tokio::test]
async fn a_retry_past_the_expire_time_is_dead_lettered_expired_where_the_queue_says_so() {
    retry_past_the_expire_time("exs-retry-dead", true).await;
}

#[tokio::test]
async fn a_replayed_job_runs_and_retries_whatever_its_old_expire_time() {
    let (_redis, app) = TestApp::with_redis().await;
    let q = "exs-replay";
    dead_letter_expired(&app, q).await;
    enqueue(
        &app,
        pb::JobSpec {
            ttl: Some(ms(Duration::from_millis(200))),
            max_attempts: Some(2),
            ..spec(q, "a")
        },
    )
    .await;
    // No worker: it is dead-lettered with reason EXPIRED.
    let mut dead = false;
    for _ in 0..250 {
        let a = get_job(&app, q, "a").await;
        if state(&a) == pb::JobState::Dead {
            assert_eq!(a.dead_reason, pb::DeadReason::Expired as i32);
            dead = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(dead, "dead-lettered as EXPIRED");
    let r = app
        .dead()
        .replay_dead_letters(pb::ReplayDeadLettersRequest {
            queue: q.into(),
            job_ids: vec!["a".into()],
            filter: None,
        })
        .await
        .expect("replay")
        .into_inner();
    assert_eq!(r.replayed_job_ids, ["a"]);
    assert!(
        get_job(&app, q, "a").await.expire_time.is_none(),
        "replay clears the expire time"
    );
    // It runs, and its retry runs too.
    let mut w = TestWorker::open(&app, &[q], 1, "w").await;
    let l = w.lease().await;
    assert_eq!(l.attempt, 1);
    let s = w
        .fail(
            &l,
            pb::FailDisposition::Retry,
            "again",
            "E",
            Some(Duration::from_millis(10)),
        )
        .await;
    assert_eq!(
        s.state,
        pb::JobState::Delayed as i32,
        "retried, not expired"
    );
    let l2 = w.lease().await;
    assert_eq!(l2.attempt, 2);
    assert_eq!(w.ack(&l2).await.code, 0);
    assert_eq!(state(&get_job(&app, q, "a").await), pb::JobState::Completed);
}
