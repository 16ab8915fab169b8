//! EnqueueBatch answers per item: a batch spanning queues where one queue's write fails
//! still writes the others and reports each item's own outcome, so retrying the batch never
//! duplicates what was written.

use jobwire::pb;
use tonic::Code;

use crate::harness::*;

#[tokio::test]
async fn a_batch_across_queues_reports_each_item_and_a_retry_duplicates_nothing() {
    let (redis, app) = TestApp::with_redis().await;
    // A real per-queue store failure: the queue's config key holds the wrong Redis type, so
    // its enqueue script fails (WRONGTYPE) while other queues work.
    let mut c = redis.conn().await;
    let _: () = redis::cmd("SET")
        .arg("jw:{broken}:meta")
        .arg("not a hash")
        .query_async(&mut c)
        .await
        .expect("set");
    let batch = || pb::EnqueueBatchRequest {
        jobs: vec![
            spec("alpha", "a1"),
            spec("broken", "b1"),
            spec("gamma", "g1"),
            spec("a b", "x1"),
            spec("alpha", "a2"),
        ],
    };
    let code = |r: &pb::EnqueueResult| r.error.as_ref().map_or(0, |e| e.code);
    let first = app
        .jobs()
        .enqueue_batch(batch())
        .await
        .expect("the batch answers per item")
        .into_inner()
        .results;
    assert_eq!(first.len(), 5, "{first:?}");
    for i in [0, 2, 4] {
        assert_eq!(code(&first[i]), 0, "item {i}: {:?}", first[i]);
        assert!(first[i].created, "item {i} written");
    }
    assert_eq!(code(&first[1]), Code::Internal as i32, "{:?}", first[1]);
    assert!(first[1].job.is_none());
    assert_eq!(
        code(&first[3]),
        Code::InvalidArgument as i32,
        "{:?}",
        first[3]
    );
    assert_eq!(
        first[3].error.as_ref().map(|e| e.field.as_str()),
        Some("jobs[3].queue")
    );

    // The retry writes nothing twice.
    let again = app
        .jobs()
        .enqueue_batch(batch())
        .await
        .expect("retry")
        .into_inner()
        .results;
    for i in [0, 2, 4] {
        assert_eq!(code(&again[i]), 0, "item {i}: {:?}", again[i]);
        assert!(!again[i].created, "item {i} already there");
    }
    assert_eq!(get_job(&app, "alpha", "a1").await.job_id, "a1");
    // When nothing at all was written, the call itself fails (as safe to retry).
    let s = app
        .jobs()
        .enqueue_batch(pb::EnqueueBatchRequest {
            jobs: vec![spec("broken", "b2"), spec("a b", "x2")],
        })
        .await
        .expect_err("nothing written");
    assert_eq!(s.code(), Code::Internal, "{s:?}");
    assert_eq!(get_job(&app, "gamma", "g1").await.job_id, "g1");
}
