//! A filtered replay acts on what was dead when the call began: jobs it replays that die
//! again while it is still walking the dead set are not replayed a second time, so the call
//! ends and replays each job once.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use jobwire::pb;

use crate::harness::*;

const TARGETS: usize = 50;
/// Non-matching dead entries after the targets: the walk over them (500 per script call)
/// gives the worker time to kill the replayed targets again before the walk ends.
const FILLERS: usize = 30_000;

async fn dead_count(redis: &TestRedis) -> usize {
    let mut c = redis.conn().await;
    redis::cmd("ZCARD")
        .arg("jw:{rq}:dead")
        .query_async(&mut c)
        .await
        .expect("zcard")
}

#[tokio::test]
async fn a_filtered_replay_of_jobs_that_die_again_replays_each_once() {
    let (redis, app) = TestApp::with_redis().await;
    // A worker that fails everything it gets with NO_RETRY, at once.
    let stop = Arc::new(AtomicBool::new(false));
    let fails = Arc::new(AtomicUsize::new(0));
    let mut w = TestWorker::open(&app, &["rq"], 100, "killer").await;
    let worker = tokio::spawn({
        let (stop, fails) = (stop.clone(), fails.clone());
        async move {
            while !stop.load(Ordering::Relaxed) {
                if let Some(l) = w.lease_within(Duration::from_millis(50)).await {
                    let s = w
                        .fail(&l, pb::FailDisposition::NoRetry, "boom", "e", None)
                        .await;
                    assert_eq!(s.code, 0);
                    fails.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    });
    let one = |id: String, name: &str| pb::JobSpec {
        name: name.into(),
        max_attempts: Some(1),
        ..spec("rq", &id)
    };
    enqueue(&app, one("filler".into(), "filler")).await;
    eventually(Duration::from_secs(10), || async {
        dead_count(&redis).await == 1
    })
    .await;
    let targets: Vec<_> = (0..TARGETS)
        .map(|i| one(format!("t{i}"), "target"))
        .collect();
    app.jobs()
        .enqueue_batch(pb::EnqueueBatchRequest { jobs: targets })
        .await
        .expect("enqueue targets");
    eventually(Duration::from_secs(10), || async {
        dead_count(&redis).await == 1 + TARGETS
    })
    .await;
    // Copies of the filler's dead job, dead just after the targets (in calls of 5000: one
    // call of all stays in Redis long enough to time out on a loaded box).
    let mut c = redis.conn().await;
    let copy = redis::Script::new(
        r"local hdr = redis.call('HGET', KEYS[1], 'filler')
          local body = redis.call('HGET', KEYS[3], 'filler')
          local top = redis.call('ZRANGE', KEYS[2], '+inf', '-inf', 'BYSCORE', 'REV', 'LIMIT', 0, 1, 'WITHSCORES')
          local s = tonumber(top[2])
          for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do
            redis.call('HSET', KEYS[1], 'c' .. i, hdr)
            redis.call('HSET', KEYS[3], 'c' .. i, body)
            redis.call('ZADD', KEYS[2], s + i - tonumber(ARGV[1]) + 1, 'c' .. i)
          end",
    );
    for from in (1..=FILLERS).step_by(5000) {
        let _: () = copy
            .key("jw:{rq}:jobs")
            .key("jw:{rq}:dead")
            .key("jw:{rq}:bodies")
            .arg(from)
            .arg((from + 4999).min(FILLERS))
            .invoke_async(&mut c)
            .await
            .expect("copy fillers");
    }
    // Later deaths get later scores than every copy.
    tokio::time::sleep(Duration::from_millis(100)).await;

    let r = tokio::time::timeout(
        Duration::from_secs(30),
        app.dead()
            .replay_dead_letters(pb::ReplayDeadLettersRequest {
                queue: "rq".into(),
                job_ids: vec![],
                filter: Some(pb::DeadLetterFilter {
                    job_name: "target".into(),
                    ..Default::default()
                }),
            }),
    )
    .await
    .expect("the replay ends")
    .expect("replay")
    .into_inner();
    let unique: HashSet<_> = r.replayed_job_ids.iter().collect();
    assert_eq!(
        unique.len(),
        TARGETS,
        "every target replayed: {:?}",
        r.replayed_job_ids
    );
    assert_eq!(
        r.replayed_job_ids.len(),
        TARGETS,
        "each replayed once ({} ids for {TARGETS} jobs)",
        r.replayed_job_ids.len()
    );
    // They did die again (the chase was possible).
    eventually(Duration::from_secs(10), || async {
        dead_count(&redis).await == 1 + TARGETS + FILLERS
    })
    .await;
    assert_eq!(fails.load(Ordering::Relaxed), 1 + 2 * TARGETS);
    stop.store(true, Ordering::Relaxed);
    worker.await.expect("worker");
}
