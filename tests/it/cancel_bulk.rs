//! CancelJobs and DeleteJob against real Redis and real streams: bulk cancel by name, group
//! and metadata, paged; DeleteJob frees the id and refuses an active job; DeleteQueue removes
//! the keys cancel and expiry added; bad cancel and delete inputs change nothing. (CancelJob of
//! one job, its holder and the grace: cancel.rs.)

use std::time::Duration;

use jobwire::pb;
use pb::queue_service_client::QueueServiceClient;
use tonic::Code;

use crate::cancel::{cancel, state, stats};
use crate::harness::*;

async fn cancel_jobs(
    app: &TestApp,
    queue: &str,
    filter: pb::JobFilter,
    limit: i32,
    token: &str,
) -> Result<pb::CancelJobsResponse, tonic::Status> {
    app.jobs()
        .cancel_jobs(pb::CancelJobsRequest {
            queue: queue.into(),
            filter: Some(filter),
            reason: "bulk".into(),
            limit,
            page_token: token.into(),
        })
        .await
        .map(|r| r.into_inner())
}

/// Cancels page by page until the token is empty: (cancelled, signalled, pages).
async fn cancel_all(
    app: &TestApp,
    queue: &str,
    filter: pb::JobFilter,
    limit: i32,
) -> (u64, u64, usize) {
    let (mut c, mut s, mut pages, mut token) = (0, 0, 0, String::new());
    loop {
        let r = cancel_jobs(app, queue, filter.clone(), limit, &token)
            .await
            .expect("cancel jobs");
        c += r.cancelled;
        s += r.signalled;
        pages += 1;
        assert!(pages < 100, "the walk ends");
        if r.next_page_token.is_empty() {
            return (c, s, pages);
        }
        token = r.next_page_token;
    }
}

#[tokio::test]
async fn cancel_jobs_by_name_group_and_metadata_paged() {
    let (redis, app) = TestApp::with_redis().await;
    let q = "cx-bulk";
    for i in 0..10 {
        let mut s = pb::JobSpec {
            name: "report".into(),
            ..spec(q, &format!("r{i}"))
        };
        if i % 3 == 0 {
            s.priority = 2;
        }
        if i % 4 == 0 {
            s.delay = Some(ms(Duration::from_secs(600)));
        }
        if i < 4 {
            s.metadata.insert("tenant".into(), "t1".into());
        }
        enqueue(&app, s).await;
    }
    for i in 0..5 {
        let mut s = pb::JobSpec {
            name: "mail".into(),
            ..spec(q, &format!("m{i}"))
        };
        s.metadata
            .insert("tenant".into(), if i < 2 { "t1" } else { "t2" }.into());
        enqueue(&app, s).await;
    }
    // Grouped jobs written with the store (the API's group_key is another part's work).
    let store = redis.store().await;
    let qn = jobwire::jobs::QueueName::parse(q).expect("queue");
    let grouped: Vec<jobwire::jobs::NewJob> = (0..3)
        .map(|i| jobwire::jobs::NewJob {
            queue: qn.clone(),
            id: format!("g{i}"),
            name: "other".into(),
            payload: Vec::new(),
            content_type: String::new(),
            metadata: Default::default(),
            delay_ms: 0,
            priority: 0,
            max_attempts: None,
            backoff: None,
            timeout_ms: None,
            group_key: "acme".into(),
            expire_ms: 0,
            id_ours: false,
        })
        .collect();
    store
        .enqueue(&qn, &grouped, 1)
        .await
        .expect("enqueue grouped");
    // Metadata key and value: t1 jobs (r0..r3, m0, m1), 2 per page.
    let f = pb::JobFilter {
        metadata_key: "tenant".into(),
        metadata_value: Some("t1".into()),
        ..Default::default()
    };
    let (c, s, pages) = cancel_all(&app, q, f, 2).await;
    assert_eq!((c, s), (6, 0));
    assert!(pages >= 3, "paged: {pages}");
    // By name: the remaining reports.
    let f = pb::JobFilter {
        name: "report".into(),
        ..Default::default()
    };
    assert_eq!(cancel_all(&app, q, f.clone(), 4).await.0, 6);
    assert_eq!(
        cancel_all(&app, q, f, 4).await.0,
        0,
        "nothing left to cancel"
    );
    // By group.
    let f = pb::JobFilter {
        group_key: "acme".into(),
        ..Default::default()
    };
    assert_eq!(cancel_all(&app, q, f, 0).await.0, 3);
    // By metadata key alone: the t2 mails.
    let f = pb::JobFilter {
        metadata_key: "tenant".into(),
        ..Default::default()
    };
    assert_eq!(cancel_all(&app, q, f, 0).await.0, 3);
    assert_eq!(stats(&app, q).await.cancelled, 18);
    assert!(store.waiting_ids(&qn).await.expect("ids").is_empty());
    // An active job matching the filter is signalled, its holder told.
    enqueue(
        &app,
        pb::JobSpec {
            name: "live".into(),
            ..spec(q, "live")
        },
    )
    .await;
    let mut w = TestWorker::open(&app, &[q], 1, "w").await;
    let l = w.lease().await;
    let f = pb::JobFilter {
        name: "live".into(),
        ..Default::default()
    };
    assert_eq!(cancel_all(&app, q, f, 0).await, (0, 1, 1));
    let c = w.cancel_within(Duration::from_secs(5)).await.expect("told");
    assert_eq!(c.lease_token, l.lease_token);
    assert_eq!(c.reason, "bulk");
}

#[tokio::test]
async fn delete_job_frees_the_id_and_refuses_an_active_job() {
    let (redis, app) = TestApp::with_redis().await;
    let q = "cx-delete";
    let delete = |id: &'static str| {
        let mut c = app.jobs();
        async move {
            c.delete_job(pb::DeleteJobRequest {
                queue: "cx-delete".into(),
                job_id: id.into(),
            })
            .await
            .map(|r| r.into_inner())
        }
    };
    enqueue(&app, spec(q, "w")).await;
    enqueue(
        &app,
        pb::JobSpec {
            priority: 3,
            ..spec(q, "p")
        },
    )
    .await;
    enqueue(
        &app,
        pb::JobSpec {
            delay: Some(ms(Duration::from_secs(600))),
            ..spec(q, "d")
        },
    )
    .await;
    assert_eq!(
        delete("w").await.expect("delete").state,
        pb::JobState::Waiting as i32
    );
    assert_eq!(
        delete("p").await.expect("delete").state,
        pb::JobState::Waiting as i32
    );
    assert_eq!(
        delete("d").await.expect("delete").state,
        pb::JobState::Delayed as i32
    );
    let e = app
        .jobs()
        .get_job(pb::GetJobRequest {
            queue: q.into(),
            job_id: "w".into(),
        })
        .await
        .expect_err("gone");
    assert_eq!(e.code(), Code::NotFound);
    assert_eq!(delete("w").await.expect_err("gone").code(), Code::NotFound);
    // The id is free at once.
    assert!(enqueue(&app, spec(q, "w")).await.created);
    // Active: refused, nothing changes; once finished it may go.
    let mut w = TestWorker::open(&app, &[q], 1, "w").await;
    let l = w.lease().await;
    let e = delete("w").await.expect_err("active");
    assert_eq!(e.code(), Code::FailedPrecondition);
    assert_eq!(state(&get_job(&app, q, "w").await), pb::JobState::Active);
    // No more leases from here on: the worker's freed credit would take the next "w".
    QueueServiceClient::new(app.channel.clone())
        .pause_queue(pb::PauseQueueRequest { queue: q.into() })
        .await
        .expect("pause");
    assert_eq!(w.ack(&l).await.code, 0);
    assert_eq!(
        delete("w").await.expect("delete").state,
        pb::JobState::Completed as i32
    );
    assert!(enqueue(&app, spec(q, "w")).await.created);
    // A cancelled job: its cancel record goes too.
    cancel(&app, q, "w", "x").await.expect("cancel");
    assert_eq!(
        delete("w").await.expect("delete").state,
        pb::JobState::Cancelled as i32
    );
    let mut c = redis.conn().await;
    let data: i64 = redis::cmd("HLEN")
        .arg(format!("jw:{{{q}}}:data"))
        .query_async(&mut c)
        .await
        .expect("hlen");
    assert_eq!(data, 0);
    let cancelled: i64 = redis::cmd("ZCARD")
        .arg(format!("jw:{{{q}}}:cancelled"))
        .query_async(&mut c)
        .await
        .expect("zcard");
    assert_eq!(cancelled, 0);
}

#[tokio::test]
async fn bad_cancel_and_delete_inputs_are_refused_and_change_nothing() {
    let (_redis, app) = TestApp::with_redis().await;
    let q = "cx-bad";
    enqueue(&app, spec(q, "a")).await;
    let e = cancel(&app, q, "a", &"x".repeat(1025))
        .await
        .expect_err("long reason");
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("reason"), "{}", e.message());
    let e = cancel(&app, "bad queue!", "a", "")
        .await
        .expect_err("bad queue");
    assert_eq!(e.code(), Code::InvalidArgument);
    let e = cancel(&app, q, "", "").await.expect_err("no id");
    assert_eq!(e.code(), Code::InvalidArgument);
    let e = cancel_jobs(&app, q, pb::JobFilter::default(), 0, "")
        .await
        .expect_err("no filter");
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("filter"), "{}", e.message());
    let f = pb::JobFilter {
        name: "test-job".into(),
        ..Default::default()
    };
    for (limit, token) in [(10_001, ""), (-1, ""), (0, "garbage")] {
        let e = cancel_jobs(&app, q, f.clone(), limit, token)
            .await
            .expect_err("bad");
        assert_eq!(e.code(), Code::InvalidArgument, "{limit} {token}");
    }
    let f = pb::JobFilter {
        metadata_value: Some("v".into()),
        ..Default::default()
    };
    let e = cancel_jobs(&app, q, f, 0, "")
        .await
        .expect_err("value without key");
    assert_eq!(e.code(), Code::InvalidArgument);
    let e = QueueServiceClient::new(app.channel.clone())
        .update_queue_config(pb::UpdateQueueConfigRequest {
            queue: q.into(),
            config: Some(pb::QueueConfig {
                cancel_grace: Some(ms(Duration::from_secs(3601))),
                ..Default::default()
            }),
            update_mask: None,
        })
        .await
        .expect_err("grace over 1 h");
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("cancel_grace"), "{}", e.message());
    assert_eq!(state(&get_job(&app, q, "a").await), pb::JobState::Waiting);
    // The config reads back with its default grace and the flag.
    let got = QueueServiceClient::new(app.channel.clone())
        .get_queue_config(pb::GetQueueConfigRequest { queue: q.into() })
        .await
        .expect("config")
        .into_inner()
        .config
        .expect("config");
    assert_eq!(got.cancel_grace, Some(ms(Duration::from_secs(30))));
    assert!(!got.dead_letter_expired);
}

/// Cancel-to-worker latency: the time from sending CancelJob to the holder's stream
/// receiving its CancelLease, over 200 cancels, with the holder on the same replica and on
/// another one. Printed (run with --nocapture), never asserted: timing claims belong to
/// benchmarks.
#[tokio::test]
async fn delete_queue_removes_the_cancelled_expired_expiry_and_data_keys() {
    let (redis, app) = TestApp::with_redis().await;
    let q = "cx-doomed";
    enqueue(&app, spec(q, "c")).await;
    cancel(&app, q, "c", "gone").await.expect("cancel");
    enqueue(
        &app,
        pb::JobSpec {
            ttl: Some(ms(Duration::from_millis(100))),
            ..spec(q, "e")
        },
    )
    .await;
    enqueue(
        &app,
        pb::JobSpec {
            ttl: Some(ms(Duration::from_secs(600))),
            ..spec(q, "later")
        },
    )
    .await;
    let mut w = TestWorker::open(&app, &[q], 1, "w").await;
    let l = w.lease().await;
    let held = l.job.as_ref().expect("job").job_id.clone();
    cancel(&app, q, &held, "pending").await.expect("cancel");
    let mut c = redis.conn().await;
    let keys = |mut c: RawConn| async move {
        let mut k: Vec<String> = redis::cmd("KEYS")
            .arg(format!("jw:{{{q}}}*"))
            .query_async(&mut c)
            .await
            .expect("keys");
        k.sort();
        k
    };
    // Wait for "e" to expire (unless the worker took it first).
    for _ in 0..100 {
        if state(&get_job(&app, q, "e").await) == pb::JobState::Expired || held == "e" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let before = keys(c.clone()).await;
    for k in ["cancelled", "data", "expiry"] {
        assert!(
            before.contains(&format!("jw:{{{q}}}:{k}")),
            "{k} in {before:?}"
        );
    }
    let d = QueueServiceClient::new(app.channel.clone())
        .delete_queue(pb::DeleteQueueRequest {
            queue: q.into(),
            force: true,
        })
        .await
        .expect("delete queue")
        .into_inner();
    assert_eq!(d.active, 1, "{d:?}");
    let left = keys(c.clone()).await;
    assert!(left.is_empty(), "keys left: {left:?}");
    let _ = &mut c;
}
