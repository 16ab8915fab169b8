//! The producer client against a real server: enqueue with options, idempotent job ids,
//! per-item batch results, get_job, the queue wrappers, a bearer token.

mod support;

use std::collections::HashMap;
use std::time::Duration;

use jobwire_client::{pb, Backoff, EnqueueOptions, NewJob, Payload};
use serde_json::json;

#[tokio::test]
async fn enqueue_sends_every_option_and_a_job_id_makes_it_idempotent() {
    let server = support::server(&[]).await;
    let client = server.client().await.expect("connect");
    let q = support::queue("client");
    let expire_at = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(4_000_000_000);
    let opts = EnqueueOptions {
        job_id: Some("order-1".into()),
        delay: Some(Duration::from_secs(60)),
        priority: 7,
        max_attempts: Some(4),
        backoff: Some(Backoff::Exponential {
            delay: Duration::from_millis(250),
            max_delay: Some(Duration::from_secs(10)),
            jitter: 0.5,
        }),
        metadata: HashMap::from([("tenant".to_owned(), "acme".to_owned())]),
        timeout: Some(Duration::from_secs(30)),
        group_key: Some("acme".into()),
        expire_at: Some(expire_at),
        ttl: None,
    };
    let payload = Payload::json(&json!({"order": 1})).expect("json");
    let first = client
        .enqueue(&q, "charge", payload.clone(), opts.clone())
        .await
        .expect("enqueue");
    assert!(first.created);
    let again = client
        .enqueue(&q, "charge", payload, opts)
        .await
        .expect("enqueue again");
    assert!(!again.created, "same job_id: the existing job is returned");

    let job = client.get_job(&q, "order-1").await.expect("get_job");
    assert_eq!(job.state, pb::JobState::Delayed as i32);
    assert_eq!(job.name, "charge");
    assert_eq!(job.priority, 7);
    assert_eq!(job.max_attempts, 4);
    assert_eq!(job.content_type, "application/json");
    assert_eq!(job.payload, br#"{"order":1}"#);
    assert_eq!(job.metadata.get("tenant").map(String::as_str), Some("acme"));
    let b = job.backoff.expect("backoff");
    assert_eq!(b.kind, pb::BackoffKind::Exponential as i32);
    assert_eq!(b.jitter, 0.5);
    assert_eq!(job.timeout.map(|t| t.seconds), Some(30));
    assert_eq!(job.group_key, "acme");
    assert_eq!(job.expire_time.map(|t| t.seconds), Some(4_000_000_000));

    let missing = client.get_job(&q, "nope").await.expect_err("unknown job");
    assert_eq!(missing.code(), Some(tonic::Code::NotFound));
}

#[tokio::test]
async fn enqueue_batch_reports_each_item_on_its_own() {
    let server = support::server(&[]).await;
    let client = server.client().await.expect("connect");
    let q = support::queue("batch");
    let results = client
        .enqueue_batch(vec![
            NewJob::new(&q, "a", b"1".to_vec(), EnqueueOptions::default()),
            NewJob::new(
                &q,
                "b",
                b"2".to_vec(),
                EnqueueOptions {
                    max_attempts: Some(0), // invalid: at least 1
                    ..Default::default()
                },
            ),
            NewJob::new(&q, "c", b"3".to_vec(), EnqueueOptions::default()),
        ])
        .await
        .expect("batch");
    assert_eq!(results.len(), 3);
    assert!(results[0].is_ok() && results[2].is_ok(), "{results:?}");
    let err = results[1].as_ref().expect_err("item 2 refused");
    assert_eq!(err.code, tonic::Code::InvalidArgument as i32, "{err:?}");
    let stats = client.get_queue_stats(&q).await.expect("stats");
    assert_eq!(stats.waiting, 2);
}

#[tokio::test]
async fn queue_wrappers_pause_configure_purge_and_delete() {
    let server = support::server(&[]).await;
    let client = server.client().await.expect("connect");
    let q = support::queue("admin");
    client
        .enqueue(&q, "x", b"".to_vec(), EnqueueOptions::default())
        .await
        .expect("enqueue");
    client.pause_queue(&q).await.expect("pause");
    assert!(client.get_queue_stats(&q).await.expect("stats").paused);
    client.resume_queue(&q).await.expect("resume");
    assert!(!client.get_queue_stats(&q).await.expect("stats").paused);
    let listed = client.list_queues().await.expect("list");
    assert!(listed.iter().any(|s| s.queue == q), "{listed:?}");

    let config = pb::QueueConfig {
        default_max_attempts: Some(9),
        ..Default::default()
    };
    let got = client
        .update_queue_config(&q, config, &["default_max_attempts"])
        .await
        .expect("update config");
    assert_eq!(got.default_max_attempts, Some(9));
    assert_eq!(
        client
            .get_queue_config(&q)
            .await
            .expect("config")
            .default_max_attempts,
        Some(9)
    );
    assert_eq!(
        client.purge_queue(&q, false, false).await.expect("purge"),
        1
    );
    client.delete_queue(&q, true).await.expect("delete");
}

#[tokio::test]
async fn list_jobs_pages_a_state_and_list_workers_shows_the_stream() {
    let server = support::server(&[]).await;
    let client = server.client().await.expect("connect");
    let q = support::queue("listing");
    for (id, priority) in [("a", 0), ("b", 0), ("hi", 5)] {
        client
            .enqueue(
                &q,
                "x",
                b"payload".to_vec(),
                EnqueueOptions {
                    job_id: Some(id.into()),
                    priority,
                    ..Default::default()
                },
            )
            .await
            .expect("enqueue");
    }
    // Lease order, two pages of two: the priority-5 job first, then FIFO.
    let first = client
        .list_jobs(&q, pb::JobState::Waiting, 2, "", None)
        .await
        .expect("page 1");
    let ids: Vec<&str> = first.jobs.iter().map(|j| j.job_id.as_str()).collect();
    assert_eq!(ids, ["hi", "a"]);
    assert!(first.jobs[0].payload.is_empty(), "no payload in a listing");
    let second = client
        .list_jobs(&q, pb::JobState::Waiting, 2, &first.next_page_token, None)
        .await
        .expect("page 2");
    assert_eq!(second.jobs.len(), 1);
    assert_eq!(second.jobs[0].job_id, "b");
    let named = client
        .list_jobs(
            &q,
            pb::JobState::Waiting,
            0,
            "",
            Some(pb::ListJobsFilter {
                name: "other".into(),
                ..Default::default()
            }),
        )
        .await
        .expect("filtered");
    assert!(named.jobs.is_empty());
    let bad = client
        .list_jobs(&q, pb::JobState::Unspecified, 0, "", None)
        .await
        .expect_err("a state is required");
    assert_eq!(bad.code(), Some(tonic::Code::InvalidArgument));

    // A raw stream with 4 credits leases all three jobs: 3 held, 1 credit free.
    let (_tx, mut leases) = client
        .subscribe(std::slice::from_ref(&q), 4, "rust-lister")
        .await
        .expect("subscribe");
    for _ in 0..3 {
        match leases.next().await.expect("stream") {
            Some(jobwire_client::StreamEvent::Lease(_)) => {}
            other => panic!("expected a lease, got {other:?}"),
        }
    }
    let workers = client.list_workers(&q).await.expect("list workers");
    assert_eq!(workers.streams.len(), 1, "{workers:?}");
    let w = &workers.streams[0];
    assert_eq!(w.worker_id, "rust-lister");
    assert_eq!(w.queues, std::slice::from_ref(&q));
    assert_eq!((w.credits, w.held_leases), (1, 3));
    assert_eq!(workers.replicas.iter().filter(|r| r.answered).count(), 1);
}
