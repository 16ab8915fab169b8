//! Idle lease loops stay idle: a stream on several empty queues must not make their loops
//! wake each other with the credits each empty lease call hands back (that once cost
//! thousands of empty lease calls a second), and it still gets jobs from both queues.

use std::time::Duration;

use crate::harness::*;

/// Script calls this test's own Redis has run (the metrics registry is shared by every
/// server in the test process, so it cannot tell this server's calls apart), summed over a
/// cluster's masters. With no job known to the reaper, they are the lease loops' calls.
async fn script_calls(redis: &TestRedis) -> u64 {
    redis.command_calls(&["evalsha", "fcall"]).await
}

#[tokio::test]
async fn a_stream_on_two_empty_queues_does_not_spin_their_lease_loops() {
    let (redis, app) = TestApp::with_redis().await;
    let mut w = TestWorker::open(&app, &["idle-a", "idle-b"], 5, "w").await;
    assert!(w.lease_within(Duration::from_millis(300)).await.is_none());
    let before = script_calls(&redis).await;
    assert!(w.lease_within(Duration::from_secs(1)).await.is_none());
    let calls = script_calls(&redis).await - before;
    // The safety poll alone allows about one call per loop per 2 s.
    assert!(calls <= 10, "{calls} lease calls in 1 s on two idle queues");

    enqueue(&app, spec("idle-a", "a")).await;
    enqueue(&app, spec("idle-b", "b")).await;
    let mut got = vec![
        w.lease().await.job.expect("job").job_id,
        w.lease().await.job.expect("job").job_id,
    ];
    got.sort();
    assert_eq!(got, ["a", "b"]);
}

/// Wake-up channels this test's own Redis has subscribers on: `jw:wake:<queue>` on one
/// Redis, the sharded `jw:{<queue>}:wake` on each master of a cluster.
/// Members of the due index (every shard, on every master): queues' entries and intents.
async fn due_members(redis: &TestRedis) -> usize {
    let mut sum = 0;
    for mut c in redis.masters().await {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("jw:due*")
            .query_async(&mut c)
            .await
            .expect("keys");
        for k in keys {
            let n: usize = redis::cmd("ZCARD")
                .arg(&k)
                .query_async(&mut c)
                .await
                .expect("zcard");
            sum += n;
        }
    }
    sum
}

async fn wake_channels(redis: &TestRedis) -> usize {
    let (kind, pattern) = if redis.cluster().is_some() {
        ("SHARDCHANNELS", "jw:{*}:wake")
    } else {
        ("CHANNELS", "jw:wake:*")
    };
    let mut sum = 0;
    for mut c in redis.masters().await {
        let channels: Vec<String> = redis::cmd("PUBSUB")
            .arg(kind)
            .arg(pattern)
            .query_async(&mut c)
            .await
            .expect("pubsub channels");
        sum += channels.len();
    }
    sum
}

#[tokio::test]
async fn loops_and_wake_up_subscriptions_end_with_their_last_stream() {
    let (redis, app) = TestApp::with_redis().await;
    // 50 streams over 1000 queue names (20 each), all idle.
    let mut workers = Vec::new();
    for s in 0..50 {
        let names: Vec<String> = (0..20).map(|i| format!("gone-{s}-{i}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        workers.push(TestWorker::open(&app, &names, 1, "w").await);
    }
    // One stream that stays: its queue keeps its loop and its subscription.
    let mut stay = TestWorker::open(&app, &["stays"], 1, "w").await;
    eventually(Duration::from_secs(30), || async {
        wake_channels(&redis).await == 1001
    })
    .await;
    drop(workers);
    eventually(Duration::from_secs(30), || async {
        wake_channels(&redis).await == 1
    })
    .await;
    // Each closed queue's last lease call left an intent in the due index, which comes due
    // up to INTENT_AHEAD (5 s) later and costs one reap of that queue, once: a bounded
    // clean-up after the last activity, not idle work. Wait until the reaper has done it
    // (only the staying queue's entry and intent may remain), so that what is measured
    // next is the steady state.
    eventually(Duration::from_secs(60), || async {
        due_members(&redis).await <= 2
    })
    .await;
    // The loops are gone too: only the staying queue's loop polls (about one call per 2 s).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = script_calls(&redis).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let calls = script_calls(&redis).await - before;
    println!("after 1000 queues' streams closed: {calls} script calls in 2 s");
    assert!(
        calls <= 5,
        "{calls} script calls in 2 s after the streams closed"
    );
    // The staying stream is still served.
    enqueue(&app, spec("stays", "s")).await;
    assert_eq!(stay.lease().await.job.expect("job").job_id, "s");
    // A queue whose streams all ended gets a loop again with its next stream.
    let mut back = TestWorker::open(&app, &["gone-0-0"], 1, "w").await;
    enqueue(&app, spec("gone-0-0", "b")).await;
    assert_eq!(back.lease().await.job.expect("job").job_id, "b");
}

/// Script calls Redis runs for `jobs` jobs on `queue` enqueued, leased and acked one at a
/// time, with `gap` after each ack, by two streams of 16 credits (credits to spare, so an ack
/// does not lease in its own call, `settle_lease.rs`), with no reaper tick during the count;
/// counted once every lease call of the queue is confirmed.
async fn one_at_a_time_calls(queue: &str, jobs: u64, gap: Duration) -> u64 {
    let redis = TestRedis::start().await;
    let mut cfg = test_config(&redis.url);
    cfg.reaper_interval = Duration::from_secs(30);
    let app = TestApp::spawn(cfg).await;
    let mut a = TestWorker::open(&app, &[queue], 16, "a").await;
    let mut b = TestWorker::open(&app, &[queue], 16, "b").await;
    assert!(a.lease_within(Duration::from_millis(300)).await.is_none());
    let before = script_calls(&redis).await;
    for i in 0..jobs {
        enqueue(&app, spec(queue, &format!("j{i}"))).await;
        // The loop turns between the streams after each call that leased (a, b, a, ...);
        // should it not, the other stream has the job.
        let (first, second) = if i % 2 == 0 {
            (&mut a, &mut b)
        } else {
            (&mut b, &mut a)
        };
        let (w, l) = match first.lease_within(Duration::from_millis(500)).await {
            Some(l) => (first, l),
            None => {
                let l = second.lease().await;
                (second, l)
            }
        };
        assert_eq!(w.ack(&l).await.code, 0);
        tokio::time::sleep(gap).await;
    }
    wait_lease_calls_confirmed(&mut redis.conn().await, queue).await;
    script_calls(&redis).await - before
}

/// A queue that runs dry after every job (one enqueued at a time; two streams with credits to
/// spare, so an ack does not lease in its own call, `settle_lease.rs`): an ack's freed credit
/// does not wake the loop for a lease call that can only come back empty (the next job's
/// enqueue wakes it). Per job that leaves the enqueue, the lease and its intent, the confirm
/// of the lease call, and the ack and its intent: 6 script calls, where an empty lease call
/// and its intent after each ack made 8.
#[tokio::test]
async fn an_ack_on_a_queue_that_ran_dry_makes_no_empty_lease_call() {
    const JOBS: u64 = 20;
    // 30 ms: the loop's confirm and anything an ack would wake run before the next job.
    let calls = one_at_a_time_calls("dry", JOBS, Duration::from_millis(30)).await;
    assert!(
        calls <= JOBS * 6 + 6,
        "{calls} script calls for {JOBS} jobs enqueued, leased and acked one at a time"
    );
}

/// A fail that delays its job on a queue that ran dry still wakes the loop, so its next
/// lease call learns the retry's due time: the retry is leased when due, not at the loop's
/// 2 s safety poll (nor at a reaper tick, which this test sets far apart).
#[tokio::test]
async fn a_retry_with_backoff_on_a_queue_that_ran_dry_is_leased_when_due() {
    let redis = TestRedis::start().await;
    let mut cfg = test_config(&redis.url);
    cfg.reaper_interval = Duration::from_secs(30);
    let app = TestApp::spawn(cfg).await;
    let mut a = TestWorker::open(&app, &["dry-retry"], 16, "a").await;
    let mut b = TestWorker::open(&app, &["dry-retry"], 16, "b").await;
    enqueue(
        &app,
        jobwire::pb::JobSpec {
            max_attempts: Some(3),
            ..spec("dry-retry", "r")
        },
    )
    .await;
    let (w, l) = match a.lease_within(Duration::from_secs(2)).await {
        Some(l) => (&mut a, l),
        None => {
            let l = b.lease().await;
            (&mut b, l)
        }
    };
    let s = w
        .fail(
            &l,
            jobwire::pb::FailDisposition::Retry,
            "again",
            "test",
            Some(Duration::from_millis(300)),
        )
        .await;
    assert_eq!(s.code, 0, "{s:?}");
    let failed = std::time::Instant::now();
    let again = tokio::select! {
        l = a.lease_within(Duration::from_secs(3)) => l,
        l = b.lease_within(Duration::from_secs(3)) => l,
    }
    .expect("the retry is leased");
    let waited = failed.elapsed();
    assert_eq!(again.attempt, 2);
    assert!(
        waited < Duration::from_millis(1200),
        "the retry due after 300 ms was leased after {waited:?}"
    );
}

/// Under a steady trickle (one job at a time, the next enqueued a few ms after the last
/// ack) the next lease call carries the previous call's confirmation (`CONFIRM_DELAY`):
/// per job the enqueue, the lease and its intent, and the ack and its intent, 5 script
/// calls, where a confirm call of its own after each lease made 6. The last call's
/// confirmation still goes alone, soon after.
#[tokio::test]
async fn under_a_steady_trickle_the_next_lease_call_carries_the_confirmation() {
    if single_only("counts one redis-server's script calls") {
        return;
    }
    const JOBS: u64 = 40;
    let calls = one_at_a_time_calls("trickle", JOBS, Duration::from_millis(2)).await;
    // A loaded box may stretch a few gaps past the delay (each then confirms alone).
    assert!(
        calls <= JOBS * 5 + JOBS / 2,
        "{calls} script calls for {JOBS} jobs enqueued, leased and acked one after another"
    );
}
