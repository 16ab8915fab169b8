//! The storage layout's own guarantees: a stray entry in a waiting list never delivers a job
//! twice, keep_completed 0 deletes a job at its ack (and a second ack of it is refused),
//! and a waiting job stays small in Redis.

use std::time::Duration;

use jobwire::pb;

use crate::harness::*;

async fn keep_completed(app: &TestApp, queue: &str, keep: u32) {
    pb::queue_service_client::QueueServiceClient::new(app.channel.clone())
        .update_queue_config(pb::UpdateQueueConfigRequest {
            queue: queue.into(),
            config: Some(pb::QueueConfig {
                retention: Some(pb::Retention {
                    keep_completed: Some(keep),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            update_mask: None,
        })
        .await
        .expect("update config");
}

#[tokio::test]
async fn a_duplicate_waiting_entry_delivers_the_job_once() {
    let (redis, app) = TestApp::with_redis().await;
    enqueue(&app, spec("dup", "j")).await;
    // The same id a second time in the waiting list, as a bug or a hand edit could leave it.
    let _: i64 = redis::cmd("RPUSH")
        .arg("jw:{dup}:waiting")
        .arg("j")
        .query_async(&mut redis.conn().await)
        .await
        .expect("rpush");
    let mut w = TestWorker::open(&app, &["dup"], 10, "w").await;
    let l = w.lease().await;
    assert_eq!(l.attempt, 1);
    assert!(
        w.lease_within(Duration::from_millis(500)).await.is_none(),
        "the stray entry delivered the job again"
    );
    assert_eq!(w.ack(&l).await.code, 0);
    let q = jobwire::jobs::QueueName::parse("dup").expect("queue");
    let left = redis.store().await.waiting_ids(&q).await.expect("waiting");
    assert!(left.is_empty(), "stray entry consumed: {left:?}");
}

#[tokio::test]
async fn keep_completed_zero_deletes_the_job_at_its_ack() {
    let (redis, app) = TestApp::with_redis().await;
    keep_completed(&app, "gone", 0).await;
    enqueue(&app, spec("gone", "j")).await;
    let mut w = TestWorker::open(&app, &["gone"], 1, "w").await;
    let l = w.lease().await;
    assert_eq!(w.ack(&l).await.code, 0);
    assert_eq!(redis.record("gone", "j").await, None, "deleted at the ack");
    // The record is gone, yet a repeated ack with the same token answers OK (the worker
    // may have lost the first reply) and brings nothing back.
    let again = w.ack(&l).await;
    assert_eq!(
        again.code, 0,
        "a second ack of a deleted job: {}",
        again.message
    );
    assert_eq!(redis.record("gone", "j").await, None, "still deleted");
    let completed: i64 = redis::cmd("ZCARD")
        .arg("jw:{gone}:completed")
        .query_async(&mut redis.conn().await)
        .await
        .expect("zcard");
    assert_eq!(completed, 0);
}

#[tokio::test]
async fn a_waiting_job_with_a_100_byte_payload_costs_under_400_bytes() {
    let (redis, app) = TestApp::with_redis().await;
    // One batch first, on another queue: the scripts it loads (their text, some 100 kB,
    // grows with every script change) are not the jobs' cost.
    let warm = (0..1000)
        .map(|i| spec("warm", &format!("job-{i}")))
        .collect();
    app.jobs()
        .enqueue_batch(pb::EnqueueBatchRequest { jobs: warm })
        .await
        .expect("warm-up batch");
    let before = redis.used_memory().await;
    for chunk in (0..10_000).collect::<Vec<_>>().chunks(1000) {
        let jobs = chunk
            .iter()
            .map(|i| pb::JobSpec {
                payload: vec![b'x'; 100],
                ..spec("mem", &format!("job-{i}"))
            })
            .collect();
        app.jobs()
            .enqueue_batch(pb::EnqueueBatchRequest { jobs })
            .await
            .expect("batch");
    }
    let per_job = (redis.used_memory().await - before) / 10_000;
    println!("redis memory per waiting job (100-byte payload): {per_job} B");
    // A hash per job (an old layout) measured 908 B; a string per job 319 B; the header
    // and body as entries of the queue's jobs and bodies hashes 370 B (common.lua); BullMQ's
    // job about 670 B. (Measured with the scripts' first load inside the window, as
    // before the warm-up, this read 396 B, then 402 B once the scripts grew: their text is
    // no per-job cost. After it: 331 B.)
    assert!(per_job < 400, "{per_job} B per waiting job");
}
