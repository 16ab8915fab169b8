//! Max-size payloads through the lease loop: a lease call stops at its byte budget
//! (`CALL_BYTES`, one MiB of records), so a batch of 1 MiB jobs takes several calls; the loop
//! must call again at once (not wait for its two-second safety poll) and the jobs not
//! reached must keep their place (priority first, then FIFO).

use std::time::{Duration, Instant};

use jobwire::pb;

use crate::harness::*;

#[tokio::test]
async fn max_size_jobs_beyond_one_lease_calls_budget_are_all_delivered_in_order() {
    let (_redis, app) = TestApp::with_redis().await;
    // Ten 1 MiB jobs: priority 1 (a0..a4) before priority 0 (b0..b4), FIFO within each.
    let mut jobs = Vec::new();
    for (pri, prefix) in [(0, "b"), (1, "a")] {
        for i in 0..5 {
            jobs.push(pb::JobSpec {
                priority: pri,
                payload: vec![b'x'; 1024 * 1024],
                ..spec("big", &format!("{prefix}{i}"))
            });
        }
    }
    // The reply carries the jobs, payloads included.
    app.jobs()
        .max_decoding_message_size(usize::MAX)
        .enqueue_batch(pb::EnqueueBatchRequest { jobs })
        .await
        .expect("enqueue");
    let start = Instant::now();
    let mut w = TestWorker::open(&app, &["big"], 10, "w").await;
    let mut got = Vec::new();
    while got.len() < 10 {
        let Some(l) = w.lease_within(Duration::from_secs(10)).await else {
            panic!("only {got:?} leased");
        };
        let job = l.job.expect("job");
        assert_eq!(job.payload.len(), 1024 * 1024);
        got.push(job.job_id);
    }
    let took = start.elapsed();
    println!("ten 1 MiB jobs leased in {took:?}");
    let want: Vec<String> = ["a", "b"]
        .iter()
        .flat_map(|p| (0..5).map(move |i| format!("{p}{i}")))
        .collect();
    assert_eq!(got, want, "priority, then FIFO");
    // Several lease calls, none waiting for the safety poll (2 s) in between.
    assert!(took < Duration::from_millis(1900), "took {took:?}");
}
