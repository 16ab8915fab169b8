//! Cancel, delete and expiry: cancel_reaches_running_handler,
//! cancel_delete_expire_from_client.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use jobwire_client::{pb, CancelCause, CancelledJobs, Ctx, EnqueueOptions, Job, JobError, Worker};
use tokio::sync::mpsc;

use crate::support;

fn with_id(id: &str) -> EnqueueOptions {
    EnqueueOptions {
        job_id: Some(id.into()),
        ..Default::default()
    }
}

#[tokio::test]
async fn cancel_reaches_running_handler() {
    let (server, p) = crate::server_for("cancel_reaches_running_handler").await;
    let (max_signal, reason) = (
        Duration::from_millis(crate::param(&p, "max_signal_ms")),
        support::param_str(&p, "reason"),
    );
    let client = server.client().await.expect("connect");
    let q = support::queue("cancel");
    let runs = Arc::new(AtomicUsize::new(0));
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let (told_tx, mut told) = mpsc::unbounded_channel();
    let mut worker = Worker::new(client.clone(), support::options(&q, 1));
    {
        let runs = runs.clone();
        worker.handle_bytes("long", move |_job: Job<Vec<u8>>, ctx: Ctx| {
            let (runs, started_tx, told_tx) = (runs.clone(), started_tx.clone(), told_tx.clone());
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                let _ = started_tx.send(());
                tokio::select! {
                    _ = ctx.cancel.cancelled() => {
                        let _ = told_tx.send((Instant::now(), ctx.cancel_cause()));
                        Err(ctx.cancel_error())
                    }
                    _ = tokio::time::sleep(Duration::from_secs(10)) => {
                        Err(JobError::failed("test", "never told of the cancel"))
                    }
                }
            }
        });
    }
    let w = support::run(worker);
    let o = EnqueueOptions {
        max_attempts: Some(3),
        ..with_id("c1")
    };
    client
        .enqueue(&q, "long", b"x".to_vec(), o)
        .await
        .expect("enqueue");
    tokio::time::timeout(Duration::from_secs(20), started.recv())
        .await
        .expect("the handler starts");
    let asked = Instant::now();
    let (job, cancelled) = client
        .cancel_job(&q, "c1", &reason)
        .await
        .expect("cancel_job");
    assert!(cancelled, "a running job's cancel: {job:?}");
    assert!(job.cancel_time.is_some(), "{job:?}");
    assert_eq!(job.cancel_reason, reason);
    let (at, cause) = tokio::time::timeout(max_signal + Duration::from_secs(5), told.recv())
        .await
        .expect("the handler is told")
        .expect("told");
    assert!(
        at.duration_since(asked) <= max_signal,
        "told after {:?}",
        at.duration_since(asked)
    );
    match cause {
        Some(CancelCause::JobCancelled {
            reason: r,
            revoke_time,
        }) => {
            assert_eq!(r, reason);
            assert!(revoke_time.is_some());
        }
        other => panic!("cancel cause {other:?}"),
    }
    let job = support::in_state(
        &client,
        &q,
        "c1",
        pb::JobState::Cancelled,
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(job.cancel_reason, reason);
    assert!(job.cancel_time.is_some());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let job = client.get_job(&q, "c1").await.expect("get_job");
    assert_eq!(job.state, pb::JobState::Cancelled as i32, "never run again");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    w.stop().await;
}

#[tokio::test]
async fn cancel_delete_expire_from_client() {
    let (server, p) = crate::server_for("cancel_delete_expire_from_client").await;
    let (ttl, wait) = (
        Duration::from_millis(crate::param(&p, "ttl_ms")),
        Duration::from_millis(crate::param(&p, "wait_ms")),
    );
    let client = server.client().await.expect("connect");
    let q = support::queue("control");

    // A delayed job: cancelled at once, deleted, its id free again.
    let later = EnqueueOptions {
        delay: Some(Duration::from_secs(3600)),
        ..with_id("d1")
    };
    client
        .enqueue(&q, "later", b"x".to_vec(), later)
        .await
        .expect("enqueue");
    let (job, cancelled) = client
        .cancel_job(&q, "d1", "not needed")
        .await
        .expect("cancel");
    assert!(cancelled);
    assert_eq!(job.state, pb::JobState::Cancelled as i32);
    assert_eq!(job.cancel_reason, "not needed");
    let (_, again) = client
        .cancel_job(&q, "d1", "twice")
        .await
        .expect("cancel again");
    assert!(!again, "a finished job is left as it is");
    let unknown = client
        .cancel_job(&q, "nope", "")
        .await
        .expect_err("unknown job");
    assert_eq!(unknown.code(), Some(tonic::Code::NotFound));
    let state = client.delete_job(&q, "d1").await.expect("delete_job");
    assert_eq!(state, pb::JobState::Cancelled);
    let gone = client.get_job(&q, "d1").await.expect_err("deleted");
    assert_eq!(gone.code(), Some(tonic::Code::NotFound));
    let r = client
        .enqueue(&q, "later", b"y".to_vec(), with_id("d1"))
        .await
        .expect("enqueue the id again");
    assert!(r.created);

    // A job with a ttl on a queue no worker serves expires.
    let idle = format!("{q}-idle");
    let o = EnqueueOptions {
        ttl: Some(ttl),
        ..with_id("t1")
    };
    let r = client
        .enqueue(&idle, "short", b"x".to_vec(), o)
        .await
        .expect("enqueue");
    assert!(r.job.expire_time.is_some(), "{:?}", r.job);
    let job = support::in_state(&client, &idle, "t1", pb::JobState::Expired, wait).await;
    assert!(job.expire_time.is_some());

    // cancel_jobs by name: every waiting job of that name, none of another.
    let bulk = format!("{q}-bulk");
    for (name, n) in [("report", 3), ("invoice", 2)] {
        for i in 0..n {
            let id = format!("{name}-{i}");
            client
                .enqueue(&bulk, name, b"x".to_vec(), with_id(&id))
                .await
                .expect("enqueue");
        }
    }
    let filter = pb::JobFilter {
        name: "report".into(),
        ..Default::default()
    };
    let got = client
        .cancel_jobs(&bulk, filter, "report retired")
        .await
        .expect("cancel_jobs");
    assert_eq!(
        got,
        CancelledJobs {
            cancelled: 3,
            signalled: 0
        }
    );
    for i in 0..3 {
        let j = client
            .get_job(&bulk, &format!("report-{i}"))
            .await
            .expect("get");
        assert_eq!(j.state, pb::JobState::Cancelled as i32);
        assert_eq!(j.cancel_reason, "report retired");
    }
    for i in 0..2 {
        let j = client
            .get_job(&bulk, &format!("invoice-{i}"))
            .await
            .expect("get");
        assert_eq!(j.state, pb::JobState::Waiting as i32);
    }
    let stats = client.get_queue_stats(&bulk).await.expect("stats");
    assert_eq!((stats.cancelled, stats.waiting), (3, 2));
}
