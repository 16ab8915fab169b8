//! Due-index updates held back (`src/store/due_later.rs`): a lease or ack whose intent was
//! written does not send its queue's due time as a command of its own; the time leaves with
//! the queue's next intent or this server's next reaper tick. A worker taking one job at a
//! time then costs Redis one packet per job, and the index still holds every due time by
//! the next reaper tick. (The fault of a server killed while it holds one is in
//! `tests/fault/replicas.rs`.)

use std::time::Duration;

use crate::harness::*;

/// Read events Redis has processed (`total_reads_processed`): one per packet it read from
/// a client, however many commands the packet held.
async fn reads(redis: &TestRedis) -> u64 {
    let mut c = redis.masters().await.remove(0);
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query_async(&mut c)
        .await
        .expect("info");
    info.lines()
        .find_map(|l| l.strip_prefix("total_reads_processed:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("total_reads_processed")
}

/// The queue's own entry in the due index (its score, ms), if any.
async fn due_score(redis: &TestRedis, queue: &str) -> Option<u64> {
    let q = jobwire::jobs::QueueName::parse(queue).expect("queue");
    let shards = if on_cluster() {
        jobwire::store::DUE_SHARDS
    } else {
        1
    };
    let score: Option<f64> = redis::cmd("ZSCORE")
        .arg(jobwire::store::due_key(&q, shards))
        .arg(queue)
        .query_async(&mut redis.conn().await)
        .await
        .expect("ZSCORE");
    score.map(|s| s as u64)
}

/// The queue's own due-index entry once it appears, polled for up to `patience`.
async fn due_score_within(redis: &TestRedis, queue: &str, patience: Duration) -> Option<u64> {
    let until = tokio::time::Instant::now() + patience;
    loop {
        let score = due_score(redis, queue).await;
        if score.is_some() || tokio::time::Instant::now() >= until {
            return score;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Redis's clock, ms.
async fn redis_ms(redis: &TestRedis) -> u64 {
    let mut c = redis.masters().await.remove(0);
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut c).await.expect("TIME");
    secs * 1000 + micros / 1000
}

#[tokio::test]
async fn a_worker_taking_one_job_at_a_time_costs_redis_one_packet_per_job() {
    if single_only("counts the packets of one Redis; on a cluster a queue and its due shard may sit on two masters") {
        return;
    }
    const JOBS: u64 = 200;
    let (redis, app) = TestApp::with_redis().await;
    for i in 0..JOBS {
        enqueue(&app, spec("one-by-one", &format!("j{i}"))).await;
    }
    let mut w = TestWorker::open(&app, &["one-by-one"], 1, "w").await;
    let mut lease = w.lease().await;
    let before = reads(&redis).await;
    for _ in 1..JOBS {
        // The ack frees the stream's one credit: its ack and the next lease are one script
        // call, and the intent before it the only other command, in the same packet.
        assert_eq!(w.ack(&lease).await.code, 0);
        lease = w.lease().await;
    }
    let packets = reads(&redis).await - before;
    println!(
        "{} jobs acked one at a time: {packets} packets read by Redis",
        JOBS - 1
    );
    // One packet per job, plus the reaper's ticks and renewals over the run (a few dozen):
    // an index update sent on its own after each call would make it about two per job.
    assert!(
        packets < (JOBS - 1) * 3 / 2,
        "{packets} packets for {} jobs",
        JOBS - 1
    );
    assert_eq!(w.ack(&lease).await.code, 0);
}

#[tokio::test]
async fn a_held_lease_deadline_is_in_the_due_index_by_the_next_reaper_tick() {
    let (redis, app) = TestApp::with_redis().await;
    enqueue(&app, spec("held-tick", "j")).await;
    let mut w = TestWorker::open(&app, &["held-tick"], 1, "w").await;
    let leased_at = redis_ms(&redis).await;
    let lease = w.lease().await;
    // Reaper interval 100 ms: the tick after the lease writes what the lease held.
    let score = due_score_within(&redis, "held-tick", Duration::from_secs(2))
        .await
        .expect("the queue's due time");
    // The lease's deadline (lease duration 2 s), never later: the reaper acts on it.
    assert!(
        score > leased_at && score <= leased_at + 2_000 + 500,
        "due at {score}, leased at {leased_at}"
    );
    assert_eq!(w.ack(&lease).await.code, 0);
}

#[tokio::test]
async fn a_held_due_time_leaves_with_the_queues_next_intent() {
    let redis = TestRedis::start().await;
    // No reaper tick for 30 s: only the next intent can carry the held time.
    let mut cfg = test_config(&redis.url);
    cfg.reaper_interval = Duration::from_secs(30);
    let app = TestApp::spawn(cfg).await;
    enqueue(&app, spec("held-intent", "a")).await;
    enqueue(&app, spec("held-intent", "b")).await;
    let mut w = TestWorker::open(&app, &["held-intent"], 1, "w").await;
    let leased_at = redis_ms(&redis).await;
    let a = w.lease().await;
    // A barrier, not a wait: an update sent on its own leaves on the server's Redis
    // connection right after the lease's reply, so it is in Redis once a later call of the
    // server (this GetJob) has been answered.
    assert_eq!(get_job(&app, "held-intent", "b").await.job_id, "b");
    assert_eq!(
        due_score(&redis, "held-intent").await,
        None,
        "the lease's due time is held, not sent on its own"
    );
    // The ack (with the next lease) writes an intent first: it carries the held deadline.
    // The server answers only once both the intent and the script were answered.
    assert_eq!(w.ack(&a).await.code, 0);
    let b = w.lease().await;
    let score = due_score(&redis, "held-intent")
        .await
        .expect("the held time arrived with the next intent");
    assert!(
        score > leased_at && score <= leased_at + 2_000 + 500,
        "due at {score}, first lease at {leased_at}"
    );
    assert_eq!(w.ack(&b).await.code, 0);
}
