//! Expiry (JobSpec.expire_time / ttl) against real Redis: a job no lease took by its expire
//! time ends EXPIRED, found by the reaper with no worker and by the lease script when a
//! worker asks; counted, not dead-lettered unless the queue says so (then DEAD, reason
//! EXPIRED); a job leased before its expire time may finish after it (its retries may not
//! start: expiry_starts.rs); bad inputs are refused.

use std::time::Duration;

use jobwire::pb;
use tonic::Code;

use crate::cancel::set_config;
use crate::harness::*;

fn state(j: &pb::Job) -> pb::JobState {
    pb::JobState::try_from(j.state).expect("state")
}

async fn wait_state(app: &TestApp, q: &str, id: &str, want: pb::JobState) -> pb::Job {
    let mut last = None;
    for _ in 0..250 {
        let j = get_job(app, q, id).await;
        if state(&j) == want {
            return j;
        }
        last = Some(j);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{id} never reached {want:?}: {last:?}");
}

#[tokio::test]
async fn the_reaper_expires_a_job_no_worker_took() {
    let (_redis, app) = TestApp::with_redis().await;
    let q = "ex-reap";
    let r = enqueue(
        &app,
        pb::JobSpec {
            ttl: Some(ms(Duration::from_millis(300))),
            ..spec(q, "a")
        },
    )
    .await;
    let job = r.job.expect("job");
    assert!(job.expire_time.is_some());
    // A delayed job due after its expire time never becomes ready.
    enqueue(
        &app,
        pb::JobSpec {
            ttl: Some(ms(Duration::from_millis(300))),
            delay: Some(ms(Duration::from_secs(60))),
            ..spec(q, "d")
        },
    )
    .await;
    enqueue(&app, spec(q, "forever")).await;
    let a = wait_state(&app, q, "a", pb::JobState::Expired).await;
    assert!(a.finish_time.is_some());
    assert_eq!(a.attempts_made, 0);
    wait_state(&app, q, "d", pb::JobState::Expired).await;
    assert_eq!(
        state(&get_job(&app, q, "forever").await),
        pb::JobState::Waiting
    );
    let stats = pb::queue_service_client::QueueServiceClient::new(app.channel.clone())
        .get_queue_stats(pb::GetQueueStatsRequest { queue: q.into() })
        .await
        .expect("stats")
        .into_inner()
        .stats
        .expect("stats");
    assert_eq!(
        (stats.expired, stats.waiting, stats.delayed, stats.dead),
        (2, 1, 0, 0)
    );
    let listed = app
        .jobs()
        .list_jobs(pb::ListJobsRequest {
            queue: q.into(),
            state: pb::JobState::Expired as i32,
            ..Default::default()
        })
        .await
        .expect("list")
        .into_inner();
    assert_eq!(listed.jobs.len(), 2);
    let text = http_get(app.http, "/metrics").await;
    assert_eq!(
        metric_value(&text, "jobwire_jobs_expired_total", &[("queue", q)]),
        Some(2.0)
    );
}

#[tokio::test]
async fn the_lease_script_expires_a_popped_job_past_its_time_without_a_slot() {
    // No server: the store alone, so no reaper runs before the lease.
    let redis = TestRedis::start().await;
    let store = redis.store().await;
    let qn = jobwire::jobs::QueueName::parse("ex-lease").expect("queue");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64;
    let job = |id: &str, expire_ms: u64| jobwire::jobs::NewJob {
        queue: qn.clone(),
        id: id.into(),
        name: "n".into(),
        payload: Vec::new(),
        content_type: String::new(),
        metadata: Default::default(),
        delay_ms: 0,
        priority: 0,
        max_attempts: None,
        backoff: None,
        timeout_ms: None,
        group_key: String::new(),
        expire_ms,
        id_ours: false,
    };
    store
        .enqueue(
            &qn,
            &[job("old", now + 100), job("fresh", now + 600_000)],
            1,
        )
        .await
        .expect("enqueue");
    tokio::time::sleep(Duration::from_millis(250)).await;
    let call = jobwire::store::new_lease_call_id();
    let batch = store
        .lease(&qn, &["w"], 10_000, &call, &[])
        .await
        .expect("lease");
    assert_eq!(batch.expired, 1);
    assert!(batch.more, "the caller leases again at once");
    // The expired job took no slot: the second call leases the fresh one.
    let leased: Vec<String> = batch.jobs.iter().map(|j| j.job.id.clone()).collect();
    let ids = if leased.is_empty() {
        let call = jobwire::store::new_lease_call_id();
        let b = store
            .lease(&qn, &["w"], 10_000, &call, &[])
            .await
            .expect("lease");
        b.jobs.iter().map(|j| j.job.id.clone()).collect()
    } else {
        leased
    };
    assert_eq!(ids, vec!["fresh".to_owned()]);
    let old = store.get_job(&qn, "old").await.expect("get").expect("job");
    assert_eq!(old.state, jobwire::jobs::JobState::Expired);
    // The leased job left the expiry index: it can no longer expire.
    let mut c = redis.conn().await;
    let left: i64 = redis::cmd("ZCARD")
        .arg("jw:{ex-lease}:expiry")
        .query_async(&mut c)
        .await
        .expect("zcard");
    assert_eq!(left, 0);
}

/// Sets queue `q`'s `dead_letter_expired`: its expired jobs go to the dead-letter queue
/// (reason EXPIRED).
pub(crate) async fn dead_letter_expired(app: &TestApp, q: &str) {
    set_config(
        app,
        q,
        pb::QueueConfig {
            dead_letter_expired: true,
            ..Default::default()
        },
        &["dead_letter_expired"],
    )
    .await;
}

#[tokio::test]
async fn a_queue_that_dead_letters_expired_jobs_gets_them_dead_with_reason_expired() {
    let (_redis, app) = TestApp::with_redis().await;
    let q = "ex-dead";
    dead_letter_expired(&app, q).await;
    let expire_time = std::time::SystemTime::now() + Duration::from_millis(300);
    enqueue(
        &app,
        pb::JobSpec {
            expire_time: Some(expire_time.into()),
            ..spec(q, "a")
        },
    )
    .await;
    let a = wait_state(&app, q, "a", pb::JobState::Dead).await;
    assert_eq!(a.dead_reason, pb::DeadReason::Expired as i32);
    let dl = app
        .dead()
        .list_dead_letters(pb::ListDeadLettersRequest {
            queue: q.into(),
            ..Default::default()
        })
        .await
        .expect("list dead")
        .into_inner();
    assert_eq!(dl.dead_letters.len(), 1);
}

/// A job leased before its expire time is not stopped by it: its attempt may finish after
/// it. (Its retries do not start after it: expiry_starts.rs.)
#[tokio::test]
async fn a_job_leased_before_its_expire_time_may_finish_after_it() {
    let (_redis, app) = TestApp::with_redis().await;
    let q = "ex-leased";
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
    assert!(w.heartbeat_for(Duration::from_millis(600)).await.is_empty());
    assert_eq!(state(&get_job(&app, q, "a").await), pb::JobState::Active);
    assert_eq!(w.ack(&l).await.code, 0);
    assert_eq!(state(&get_job(&app, q, "a").await), pb::JobState::Completed);
}

#[tokio::test]
async fn bad_expiry_inputs_name_the_field() {
    let (_redis, app) = TestApp::with_redis().await;
    let q = "ex-bad";
    let past = std::time::SystemTime::now() - Duration::from_secs(1);
    let future = std::time::SystemTime::now() + Duration::from_secs(60);
    let cases = [
        (
            pb::JobSpec {
                ttl: Some(ms(Duration::from_secs(1))),
                expire_time: Some(future.into()),
                ..spec(q, "both")
            },
            "job.ttl",
        ),
        (
            pb::JobSpec {
                ttl: Some(ms(Duration::ZERO)),
                ..spec(q, "zero")
            },
            "job.ttl",
        ),
        (
            pb::JobSpec {
                ttl: Some(ms(Duration::from_secs(366 * 24 * 3600))),
                ..spec(q, "long")
            },
            "job.ttl",
        ),
        (
            pb::JobSpec {
                expire_time: Some(past.into()),
                ..spec(q, "past")
            },
            "job.expire_time",
        ),
    ];
    for (s, field) in cases {
        let id = s.job_id.clone();
        let e = app
            .jobs()
            .enqueue(pb::EnqueueRequest { job: Some(s) })
            .await
            .expect_err("refused");
        assert_eq!(e.code(), Code::InvalidArgument, "{id}");
        assert!(e.message().contains(field), "{id}: {}", e.message());
        let got = app
            .jobs()
            .get_job(pb::GetJobRequest {
                queue: q.into(),
                job_id: id.clone(),
            })
            .await;
        assert!(got.is_err(), "{id} was not created");
    }
}
