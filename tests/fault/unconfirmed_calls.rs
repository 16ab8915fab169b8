//! Leases reaped before their lease call is confirmed (issue 32, item 1). A delivered lease
//! call stays unconfirmed for up to the confirmation delay (20 ms, `CONFIRM_DELAY`); a job
//! timeout under it, or a CancelJob with `cancel_grace` 0 just after a lease, makes the
//! reaper look at a lease of such a call. It must not take the call for lost: the other jobs
//! of the call stay with their workers (their acks land, each is delivered once), a timed-out
//! attempt is charged (a `max_attempts` 2 job is delivered twice, attempts 1 then 2, then
//! dead), and a cancelled job ends CANCELLED and is never delivered again. Eight jobs are
//! leased in one call to two workers; a 10 ms reaper makes it look inside the 20 ms window.
//! The deliveries and attempts are counted.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use jobwire::pb;

use crate::harness::*;

/// A server whose reaper looks every 10 ms (the least `--reaper-interval` allows), so it
/// finds an expired lease well within the confirmation delay.
async fn app() -> (TestRedis, TestApp) {
    let redis = TestRedis::start().await;
    let mut cfg = test_config(&redis.url);
    cfg.reaper_interval = Duration::from_millis(10);
    let app = TestApp::spawn(cfg).await;
    (redis, app)
}

/// Two workers with 16 credits each on `q` (more than the jobs: a job handed back would be
/// delivered again at once), open before the jobs exist.
async fn two_workers(app: &TestApp, q: &str) -> [TestWorker; 2] {
    [
        TestWorker::open(app, &[q], 16, "w1").await,
        TestWorker::open(app, &[q], 16, "w2").await,
    ]
}

/// Sets `q`'s cancel grace to 0: a cancelled active job's lease is revoked at once.
async fn no_cancel_grace(app: &TestApp, q: &str) {
    pb::queue_service_client::QueueServiceClient::new(app.channel.clone())
        .update_queue_config(pb::UpdateQueueConfigRequest {
            queue: q.into(),
            config: Some(pb::QueueConfig {
                cancel_grace: Some(ms(Duration::ZERO)),
                ..Default::default()
            }),
            update_mask: Some(prost_types::FieldMask {
                paths: vec!["cancel_grace".into()],
            }),
        })
        .await
        .expect("update config");
}

/// Enqueues `specs` in one EnqueueBatch: one wake-up, so one lease call takes them all.
async fn enqueue_all(app: &TestApp, specs: Vec<pb::JobSpec>) {
    let r = app
        .jobs()
        .enqueue_batch(pb::EnqueueBatchRequest { jobs: specs })
        .await
        .expect("enqueue batch")
        .into_inner();
    assert!(r.results.iter().all(|r| r.error.is_none()), "{r:?}");
}

/// Every lease seen: job id -> (worker index, lease) in arrival order.
type Seen = BTreeMap<String, Vec<(usize, pb::Lease)>>;

/// Reads both workers' leases for `period` (heartbeating), recording each in `seen`, and
/// checks after every read that none of `held` (jobs a worker holds and must keep) is shown
/// anything but ACTIVE with one attempt.
async fn collect(
    app: &TestApp,
    q: &str,
    w: &mut [TestWorker; 2],
    seen: &mut Seen,
    held: &[&str],
    period: Duration,
) {
    let end = Instant::now() + period;
    while Instant::now() < end {
        for (i, worker) in w.iter_mut().enumerate() {
            worker.heartbeat();
            while let Some(l) = worker.lease_within(Duration::from_millis(15)).await {
                let id = l.job.as_ref().expect("job").job_id.clone();
                seen.entry(id).or_default().push((i, l));
            }
        }
        for id in held {
            if !seen.contains_key(*id) {
                continue;
            }
            let j = get_job(app, q, id).await;
            assert_eq!(
                (j.state, j.attempts_made),
                (pb::JobState::Active as i32, 1),
                "{id}, running on its worker, is shown {:?} with {} attempts",
                pb::JobState::try_from(j.state),
                j.attempts_made
            );
        }
    }
}

fn attempts(seen: &Seen, id: &str) -> Vec<u32> {
    seen.get(id)
        .map(|v| v.iter().map(|(_, l)| l.attempt).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_timeout_under_the_confirmation_delay_is_charged_and_takes_no_other_job_back() {
    let (_redis, app) = app().await;
    let mut deliveries = 0;
    for round in 0..3 {
        let q = format!("uc-timeout-{round}");
        let q = q.as_str();
        let mut w = two_workers(&app, q).await;
        // Alternating: each worker gets short and long jobs from the same call.
        let mut specs = Vec::new();
        let (mut short, mut long) = (Vec::new(), Vec::new());
        for i in 0..4 {
            let t = format!("t{i}");
            specs.push(pb::JobSpec {
                max_attempts: Some(2),
                timeout: Some(ms(Duration::from_millis(5))),
                ..spec(q, &t)
            });
            short.push(t);
            let l = format!("l{i}");
            specs.push(pb::JobSpec {
                max_attempts: Some(2),
                ..spec(q, &l)
            });
            long.push(l);
        }
        enqueue_all(&app, specs).await;
        let mut seen = Seen::new();
        let held: Vec<&str> = long.iter().map(String::as_str).collect();
        collect(
            &app,
            q,
            &mut w,
            &mut seen,
            &held,
            Duration::from_millis(1500),
        )
        .await;
        deliveries += seen.values().map(Vec::len).sum::<usize>();
        println!(
            "round {round}: attempts per job {:?}",
            seen.iter()
                .map(|(id, v)| (
                    id.as_str(),
                    v.iter().map(|(_, l)| l.attempt).collect::<Vec<_>>()
                ))
                .collect::<Vec<_>>()
        );
        for id in &long {
            assert_eq!(attempts(&seen, id), [1], "{q}/{id}: delivered once");
        }
        for id in &short {
            assert_eq!(
                attempts(&seen, id),
                [1, 2],
                "{q}/{id}: two charged attempts, never a third delivery"
            );
            let j = get_job(&app, q, id).await;
            assert_eq!(j.state, pb::JobState::Dead as i32, "{q}/{id}");
            assert_eq!(j.dead_reason, pb::DeadReason::TimedOut as i32, "{q}/{id}");
            assert_eq!(j.attempts_made, 2, "{q}/{id}");
        }
        // The long jobs' holders ack them: every ack lands.
        for id in &long {
            let (i, l) = seen[id.as_str()][0].clone();
            let s = w[i].ack(&l).await;
            assert_eq!(s.code, 0, "{q}/{id}: the holder's ack: {}", s.message);
            let j = get_job(&app, q, id).await;
            assert_eq!(j.state, pb::JobState::Completed as i32, "{q}/{id}");
            assert_eq!(j.attempts_made, 1, "{q}/{id}");
        }
    }
    println!("deliveries over 3 rounds of 8 jobs: {deliveries} (24 once each + 12 retries = 36)");
}

#[tokio::test]
async fn a_cancel_with_no_grace_just_after_a_lease_takes_no_other_job_back() {
    let (_redis, app) = app().await;
    let mut deliveries = 0;
    for round in 0..3 {
        let q = format!("uc-cancel-{round}");
        let q = q.as_str();
        no_cancel_grace(&app, q).await;
        let mut w = two_workers(&app, q).await;
        let ids: Vec<String> = (0..8).map(|i| format!("j{i}")).collect();
        enqueue_all(
            &app,
            ids.iter()
                .map(|id| pb::JobSpec {
                    max_attempts: Some(2),
                    ..spec(q, id)
                })
                .collect(),
        )
        .await;
        // The first lease to arrive: its job is cancelled at once, with no grace.
        let [w1, w2] = &mut w;
        let (first, l) = tokio::select! {
            l = w1.lease() => (0, l),
            l = w2.lease() => (1, l),
        };
        let victim = l.job.as_ref().expect("job").job_id.clone();
        let r = app
            .jobs()
            .cancel_job(pb::CancelJobRequest {
                queue: q.into(),
                job_id: victim.clone(),
                reason: "stop".into(),
            })
            .await
            .expect("cancel")
            .into_inner();
        assert!(r.cancelled, "{q}/{victim}");
        let mut seen = Seen::new();
        seen.entry(victim.clone()).or_default().push((first, l));
        let held: Vec<&str> = ids
            .iter()
            .map(String::as_str)
            .filter(|id| *id != victim)
            .collect();
        collect(
            &app,
            q,
            &mut w,
            &mut seen,
            &held,
            Duration::from_millis(1000),
        )
        .await;
        deliveries += seen.values().map(Vec::len).sum::<usize>();
        println!(
            "round {round}: cancelled {victim}; attempts per job {:?}",
            seen.iter()
                .map(|(id, v)| (
                    id.as_str(),
                    v.iter().map(|(_, l)| l.attempt).collect::<Vec<_>>()
                ))
                .collect::<Vec<_>>()
        );
        assert_eq!(
            attempts(&seen, &victim),
            [1],
            "{q}/{victim}: never delivered again"
        );
        let v = get_job(&app, q, &victim).await;
        assert_eq!(v.state, pb::JobState::Cancelled as i32, "{q}/{victim}");
        for id in &held {
            assert_eq!(attempts(&seen, id), [1], "{q}/{id}: delivered once");
            let (i, l) = seen[*id][0].clone();
            let s = w[i].ack(&l).await;
            assert_eq!(s.code, 0, "{q}/{id}: the holder's ack: {}", s.message);
            let j = get_job(&app, q, id).await;
            assert_eq!(j.state, pb::JobState::Completed as i32, "{q}/{id}");
            assert_eq!(j.attempts_made, 1, "{q}/{id}");
        }
    }
    println!("deliveries over 3 rounds of 8 jobs: {deliveries} (24 once each)");
}
