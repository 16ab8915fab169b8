//! A stream on several queues takes its credits queue by queue (`Session::take_credit_for`),
//! each turn a fair share of its free credits: the queues are served evenly and still in
//! batches (one credit a turn made every lease call one job per stream).

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
