//! Groups (a job's group_key): fair turns across the groups of a queue, per-group
//! max_active across replicas, the exact per-group rate limit, a group paused by a worker's
//! RATE_LIMITED Fail, and an idle group leaving nothing in Redis
//! (`src/store/scripts/groups.lua`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jobwire::pb;
use pb::queue_service_client::QueueServiceClient;

use crate::harness::*;

pub(crate) async fn configure(app: &TestApp, queue: &str, config: pb::QueueConfig) {
    QueueServiceClient::new(app.channel.clone())
        .update_queue_config(pb::UpdateQueueConfigRequest {
            queue: queue.into(),
            config: Some(config),
            update_mask: None,
        })
        .await
        .expect("update config");
}

/// Enqueues `n` jobs of `group` ('' none), ids `<group>-<i>`, in batches of 1000.
pub(crate) async fn fill_group(app: &TestApp, queue: &str, group: &str, n: usize) {
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let jobs = chunk
            .iter()
            .map(|i| pb::JobSpec {
                group_key: group.into(),
                ..spec(queue, &format!("{group}-{i}"))
            })
            .collect();
        let r = app
            .jobs()
            .enqueue_batch(pb::EnqueueBatchRequest { jobs })
            .await
            .expect("batch")
            .into_inner();
        assert!(r.results.iter().all(|r| r.error.is_none()), "{r:?}");
    }
}

/// The group of a leased job.
fn group_of(l: &pb::Lease) -> String {
    l.job.as_ref().expect("job").group_key.clone()
}

/// The lease time of a leased job, ms.
fn lease_ms(l: &pb::Lease) -> i64 {
    let t = l
        .job
        .as_ref()
        .and_then(|j| j.lease_time)
        .expect("lease time");
    t.seconds * 1000 + i64::from(t.nanos) / 1_000_000
}

#[tokio::test]
async fn a_small_tenant_is_not_starved_by_a_big_one() {
    let (_redis, app) = TestApp::with_redis().await;
    fill_group(&app, "fair", "big", 10_000).await;
    fill_group(&app, "fair", "small", 10).await;
    // Four workers take turns; every lease gets a place in one global order.
    let order = Arc::new(AtomicUsize::new(0));
    let small_places = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..4 {
        let mut w = TestWorker::open(&app, &["fair"], 1, &format!("w{i}")).await;
        let (order, small_places) = (order.clone(), small_places.clone());
        tasks.push(tokio::spawn(async move {
            while small_places.lock().expect("lock").len() < 10 {
                let Some(l) = w.lease_within(Duration::from_secs(5)).await else {
                    break;
                };
                let place = order.fetch_add(1, Ordering::SeqCst);
                if group_of(&l) == "small" {
                    small_places.lock().expect("lock").push(place);
                }
                assert_eq!(w.ack(&l).await.code, 0);
            }
        }));
    }
    for t in tasks {
        t.await.expect("worker");
    }
    let places = small_places.lock().expect("lock").clone();
    println!("small tenant's jobs started at places {places:?}");
    assert_eq!(places.len(), 10, "every small job ran");
    // Its fair share: one lease in two while both have jobs, so its 10 jobs start among the
    // first 20 leases; the 4 workers' leases in flight shift the order by at most 4.
    assert!(
        places.iter().all(|&p| p < 24),
        "a small job started late: {places:?}"
    );
}

#[tokio::test]
async fn turns_alternate_exactly_with_one_worker() {
    let (_redis, app) = TestApp::with_redis().await;
    fill_group(&app, "turns", "a", 6).await;
    fill_group(&app, "turns", "b", 3).await;
    fill_group(&app, "turns", "", 3).await;
    let mut w = TestWorker::open(&app, &["turns"], 1, "w").await;
    let mut seen = Vec::new();
    for _ in 0..12 {
        let l = w.lease().await;
        seen.push(l.job.as_ref().expect("job").job_id.clone());
        assert_eq!(w.ack(&l).await.code, 0);
    }
    // The default group and a and b take turns (the default group first on a tie, then by
    // name), each FIFO; once b and the default group are empty, a goes on alone.
    assert_eq!(
        seen,
        ["-0", "a-0", "b-0", "-1", "a-1", "b-1", "-2", "a-2", "b-2", "a-3", "a-4", "a-5"],
    );
}

#[tokio::test]
async fn group_max_active_holds_across_two_replicas() {
    let redis = TestRedis::start().await;
    let a = TestApp::spawn(test_config(&redis.url)).await;
    let b = TestApp::spawn(test_config(&redis.url)).await;
    configure(
        &a,
        "gconc",
        pb::QueueConfig {
            group_max_active: Some(2),
            ..Default::default()
        },
    )
    .await;
    for g in ["t1", "t2", "t3"] {
        fill_group(&a, "gconc", g, 20).await;
    }
    let held: Arc<HashMap<String, AtomicI64>> = Arc::new(
        ["t1", "t2", "t3"]
            .iter()
            .map(|g| (g.to_string(), AtomicI64::new(0)))
            .collect(),
    );
    let peaks: Arc<HashMap<String, AtomicI64>> = Arc::new(
        ["t1", "t2", "t3"]
            .iter()
            .map(|g| (g.to_string(), AtomicI64::new(0)))
            .collect(),
    );
    let total_held = Arc::new(AtomicI64::new(0));
    let total_peak = Arc::new(AtomicI64::new(0));
    let mut tasks = Vec::new();
    for i in 0..8 {
        let app = if i % 2 == 0 { &a } else { &b };
        let mut w = TestWorker::open(app, &["gconc"], 2, &format!("w{i}")).await;
        let (held, peaks) = (held.clone(), peaks.clone());
        let (total_held, total_peak) = (total_held.clone(), total_peak.clone());
        tasks.push(tokio::spawn(async move {
            let mut done = 0;
            while let Some(l) = w.lease_within(Duration::from_secs(3)).await {
                let g = group_of(&l);
                let now = held[&g].fetch_add(1, Ordering::SeqCst) + 1;
                peaks[&g].fetch_max(now, Ordering::SeqCst);
                let all = total_held.fetch_add(1, Ordering::SeqCst) + 1;
                total_peak.fetch_max(all, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(30)).await;
                held[&g].fetch_sub(1, Ordering::SeqCst);
                total_held.fetch_sub(1, Ordering::SeqCst);
                assert_eq!(w.ack(&l).await.code, 0);
                done += 1;
            }
            done
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.expect("worker");
    }
    assert_eq!(total, 60, "every job ran once");
    for (g, p) in peaks.iter() {
        assert_eq!(
            p.load(Ordering::SeqCst),
            2,
            "group {g}: never more than 2 at once, and 2 were reached"
        );
    }
    assert!(
        total_peak.load(Ordering::SeqCst) > 2,
        "the groups ran side by side"
    );
}

#[tokio::test]
async fn the_group_rate_limit_is_exact_and_per_group() {
    const MAX: usize = 10;
    const PERIOD_MS: i64 = 1000;
    let redis = TestRedis::start().await;
    let a = TestApp::spawn(test_config(&redis.url)).await;
    let b = TestApp::spawn(test_config(&redis.url)).await;
    configure(
        &a,
        "grate",
        pb::QueueConfig {
            group_rate_limit: Some(pb::RateLimit {
                max: MAX as u32,
                period: Some(ms(Duration::from_millis(PERIOD_MS as u64))),
            }),
            ..Default::default()
        },
    )
    .await;
    fill_group(&a, "grate", "x", 200).await;
    fill_group(&a, "grate", "y", 200).await;
    fill_group(&a, "grate", "", 50).await;
    let deadline = tokio::time::Instant::now() + Duration::from_millis(3500);
    let mut tasks = Vec::new();
    for i in 0..4 {
        let app = if i % 2 == 0 { &a } else { &b };
        let mut w = TestWorker::open(app, &["grate"], 4, &format!("w{i}")).await;
        tasks.push(tokio::spawn(async move {
            let mut starts = Vec::new();
            loop {
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                let Some(l) = w.lease_within(left).await else {
                    break;
                };
                starts.push((group_of(&l), lease_ms(&l)));
                assert_eq!(w.ack(&l).await.code, 0);
            }
            starts
        }));
    }
    let mut by_group: HashMap<String, Vec<i64>> = HashMap::new();
    for t in tasks {
        for (g, t) in t.await.expect("worker") {
            by_group.entry(g).or_default().push(t);
        }
    }
    assert_eq!(
        by_group.get("").map_or(0, Vec::len),
        50,
        "the default group is not limited by the groups' rate limit"
    );
    for g in ["x", "y"] {
        let starts = by_group.get_mut(g).expect("starts");
        starts.sort_unstable();
        let mut worst = 0;
        for (i, &t) in starts.iter().enumerate() {
            let n = starts[..=i]
                .iter()
                .rev()
                .take_while(|&&s| s > t - PERIOD_MS)
                .count();
            worst = worst.max(n);
        }
        println!("group {g}: {} starts, busiest window {worst}", starts.len());
        assert!(worst <= MAX, "group {g}: a window held {worst} starts");
        // Three full windows fit in the run: a limiter that admits late would start fewer.
        assert!(
            starts.len() >= 3 * MAX,
            "group {g}: only {} starts",
            starts.len()
        );
    }
}

/// Fails a leased job RATE_LIMITED with retry_after, pausing its group.
async fn fail_pausing_group(w: &mut TestWorker, l: &pb::Lease, retry_after: Duration) {
    let job = l.job.as_ref().expect("job");
    w.send(pb::subscribe_request::Message::Fail(pb::FailRequest {
        queue: job.queue.clone(),
        job_id: job.job_id.clone(),
        lease_token: l.lease_token.clone(),
        disposition: pb::FailDisposition::RateLimited as i32,
        error: None,
        retry_after: Some(ms(retry_after)),
        pause_queue: false,
        pause_group: true,
    }));
    assert_eq!(w.settled().await.code, 0);
}

#[tokio::test]
async fn a_rate_limited_fail_with_pause_group_pauses_only_that_group() {
    let (_redis, app) = TestApp::with_redis().await;
    fill_group(&app, "gpause", "slow", 5).await;
    let mut w = TestWorker::open(&app, &["gpause"], 1, "w").await;
    let l = w.lease().await;
    assert_eq!(group_of(&l), "slow");
    let paused_at = tokio::time::Instant::now();
    fail_pausing_group(&mut w, &l, Duration::from_millis(1500)).await;
    fill_group(&app, "gpause", "fast", 5).await;
    // While "slow" is paused, only "fast" is leased.
    for _ in 0..5 {
        let l = w.lease().await;
        assert_eq!(group_of(&l), "fast", "a paused group's job was leased");
        assert_eq!(w.ack(&l).await.code, 0);
    }
    assert!(
        w.lease_within(Duration::from_millis(500)).await.is_none()
            || paused_at.elapsed() >= Duration::from_millis(1400),
        "a paused group's job was leased early"
    );
    // After the pause, the group goes on by itself (no API call, no new enqueue).
    for _ in 0..5 {
        let l = w.lease_within(Duration::from_secs(5)).await.expect("lease");
        assert!(paused_at.elapsed() >= Duration::from_millis(1400));
        assert_eq!(group_of(&l), "slow");
        assert_eq!(w.ack(&l).await.code, 0);
    }
}

/// The queue's keys that exist in Redis, with their memory usage in bytes.
pub(crate) async fn queue_keys(redis: &TestRedis, queue: &str) -> Vec<(String, i64)> {
    let mut c = redis.conn().await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("jw:{{{queue}}}:*"))
        .query_async(&mut c)
        .await
        .expect("keys");
    let mut out = Vec::new();
    for k in keys {
        let bytes: Option<i64> = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(&k)
            .query_async(&mut c)
            .await
            .expect("memory usage");
        out.push((k, bytes.unwrap_or(0)));
    }
    out.sort();
    out
}

#[tokio::test]
async fn an_idle_group_leaves_nothing_in_redis() {
    if single_only("KEYS over one server") {
        return;
    }
    let (redis, app) = TestApp::with_redis().await;
    configure(
        &app,
        "idle",
        pb::QueueConfig {
            group_max_active: Some(5),
            group_rate_limit: Some(pb::RateLimit {
                max: 1000,
                period: Some(ms(Duration::from_millis(300))),
            }),
            retention: Some(pb::Retention {
                keep_completed: Some(0),
                ..Default::default()
            }),
            ..Default::default()
        },
    )
    .await;
    let before = queue_keys(&redis, "idle").await;
    for g in 0..50 {
        fill_group(&app, "idle", &format!("tenant-{g}"), 3).await;
    }
    let mut w = TestWorker::open(&app, &["idle"], 10, "w").await;
    w.ack_all(150).await;
    // The rate-window entries outlive the window until the reaper walks them.
    eventually(Duration::from_secs(30), || async {
        queue_keys(&redis, "idle").await.len() <= before.len() + 2
    })
    .await;
    let after: Vec<String> = queue_keys(&redis, "idle")
        .await
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    for k in &after {
        let name = k.rsplit(':').next().expect("name");
        assert!(
            ![
                "gwait", "gseq", "groups", "gready", "gblocked", "glimit", "gpause", "gconf",
                "gcount"
            ]
            .contains(&name),
            "{k} left behind by idle groups: {after:?}"
        );
    }
}
