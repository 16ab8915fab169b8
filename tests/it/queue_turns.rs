//! A stream on several queues takes its credits queue by queue (`Session::take_credit_for`),
//! each turn a fair share of its free credits: the queues are served evenly and still in
//! batches (one credit a turn made every lease call one job per stream). A turn of one credit
//! lasts up to a slice of time (`TURN_SLICE`), tested at given times in the session's unit
//! tests; here, jobs that outlast it still alternate the queues.

use std::time::Duration;

use jobwire::pb;

use crate::harness::*;

/// Script calls Redis ran so far: lease calls (FCALL of `lease` or `ack_lease`) and their
/// due-index intents (EVALSHA).
async fn script_calls(redis: &TestRedis) -> u64 {
    redis.command_calls(&["evalsha", "fcall"]).await
}

#[tokio::test]
async fn a_stream_on_three_busy_queues_leases_them_evenly_and_in_batches() {
    if single_only("counts one redis-server's script calls") {
        return;
    }
    let redis = TestRedis::start().await;
    let app = TestApp::spawn(test_config(&redis.url)).await;
    let queues = ["turn-a", "turn-b", "turn-c"];
    for q in queues {
        let jobs = (0..300).map(|i| spec(q, &format!("j{i}"))).collect();
        app.jobs()
            .enqueue_batch(pb::EnqueueBatchRequest { jobs })
            .await
            .expect("batch");
    }
    let before = script_calls(&redis).await;
    let mut w = TestWorker::open(&app, &queues, 300, "w").await;
    let mut per_queue = std::collections::BTreeMap::new();
    for _ in 0..300 {
        let l = w
            .lease_within(Duration::from_secs(5))
            .await
            .expect("a lease");
        *per_queue.entry(l.job.expect("job").queue).or_insert(0usize) += 1;
    }
    let calls = script_calls(&redis).await - before;
    println!("300 leases: {per_queue:?}, {calls} script calls (lease calls and their intents)");
    for q in queues {
        let n = per_queue.get(q).copied().unwrap_or(0);
        assert!((70..=130).contains(&n), "{q}: {n} of 300: {per_queue:?}");
    }
    // Each lease call is 2 script calls (its due-index intent first); one credit a turn
    // made 300 lease calls.
    assert!(calls <= 60, "{calls} script calls for 300 leases");
}

/// Leases and acks `n` jobs on a worker of one credit, sleeping `work` before each ack;
/// returns the queue of each job, in lease order.
async fn one_credit_run(queues: &[&str], n: usize, work: Duration) -> Vec<String> {
    let redis = TestRedis::start().await;
    let app = TestApp::spawn(test_config(&redis.url)).await;
    for q in queues {
        let jobs = (0..n).map(|i| spec(q, &format!("j{i}"))).collect();
        app.jobs()
            .enqueue_batch(pb::EnqueueBatchRequest { jobs })
            .await
            .expect("batch");
    }
    let mut w = TestWorker::open(&app, queues, 1, "w").await;
    let mut order = Vec::new();
    for _ in 0..n {
        let l = w
            .lease_within(Duration::from_secs(5))
            .await
            .expect("a lease");
        tokio::time::sleep(work).await;
        w.ack(&l).await;
        order.push(l.job.expect("job").queue);
    }
    order
}

#[tokio::test]
async fn a_one_credit_stream_alternates_its_queues_when_jobs_outlast_the_turn_slice() {
    let queues = ["slow-a", "slow-b", "slow-c"];
    // Each job takes longer than a turn's slice (2 ms): every ack ends its queue's turn.
    let order = one_credit_run(&queues, 12, Duration::from_millis(10)).await;
    for (i, q) in order.iter().enumerate() {
        assert_eq!(q, queues[i % 3], "job {i} of {order:?}");
    }
}

#[tokio::test]
async fn a_one_credit_stream_moves_on_at_once_when_its_queue_runs_dry_within_the_slice() {
    let redis = TestRedis::start().await;
    let app = TestApp::spawn(test_config(&redis.url)).await;
    let mut jobs = vec![spec("dry-a", "only")];
    jobs.extend((0..5).map(|i| spec("dry-b", &format!("j{i}"))));
    app.jobs()
        .enqueue_batch(pb::EnqueueBatchRequest { jobs })
        .await
        .expect("batch");
    let mut w = TestWorker::open(&app, &["dry-a", "dry-b"], 1, "w").await;
    let mut order = Vec::new();
    for _ in 0..6 {
        // No credit may sit idle for the loops' 2 s safety poll.
        let l = w
            .lease_within(Duration::from_millis(500))
            .await
            .unwrap_or_else(|| panic!("no lease within 500 ms after {order:?}"));
        w.ack(&l).await;
        order.push(l.job.expect("job").queue);
    }
    assert_eq!(
        order.iter().filter(|q| *q == "dry-b").count(),
        5,
        "{order:?}"
    );
}
