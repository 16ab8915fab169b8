//! Idle lease loops stay idle: a stream on several empty queues must not make their loops
//! wake each other with the credits each empty lease call hands back (that once cost
//! thousands of empty lease calls a second), and it still gets jobs from both queues.

use std::time::Duration;

use crate::harness::*;

/// Script calls this test's own Redis has run (the metrics registry is shared by every
/// server in the test process, so it cannot tell this server's calls apart). With no job
/// known to the reaper, they are the lease loops' calls.
async fn script_calls(redis: &TestRedis) -> u64 {
    let mut c = redis.conn().await;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut c)
        .await
        .expect("info");
    info.lines()
        .filter_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .filter_map(|rest| rest.split(',').next()?.parse::<u64>().ok())
        .sum()
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
