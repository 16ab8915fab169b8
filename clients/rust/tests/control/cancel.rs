//! Cancel and expiry beyond the conformance scenarios: a cancelled handler that finishes,
//! expire_at with ttl, the queue config fields.

use std::time::{Duration, SystemTime};

use jobwire_client::{pb, Ctx, EnqueueOptions, Job, Worker};
use tokio::sync::mpsc;

use crate::support;

fn with_id(id: &str) -> EnqueueOptions {
    EnqueueOptions {
        job_id: Some(id.into()),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_cancelled_handler_that_finishes_completes_the_job() {
    let server = support::server(&[]).await;
    let client = server.client().await.expect("connect");
    let q = support::queue("cancel-ack");
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let mut worker = Worker::new(client.clone(), support::options(&q, 1));
    worker.handle_bytes("n", move |_job: Job<Vec<u8>>, ctx: Ctx| {
        let started_tx = started_tx.clone();
        async move {
            let _ = started_tx.send(());
            ctx.cancel.cancelled().await;
            if ctx.is_job_cancelled() {
                ctx.set_result(b"finished anyway".to_vec());
                return Ok(());
            }
            Err(ctx.cancel_error())
        }
    });
    let w = support::run(worker);
    client
        .enqueue(&q, "n", b"x".to_vec(), with_id("ca1"))
        .await
        .expect("enqueue");
    started.recv().await.expect("started");
    let (_, cancelled) = client
        .cancel_job(&q, "ca1", "too late")
        .await
        .expect("cancel");
    assert!(cancelled);
    let job = support::in_state(
        &client,
        &q,
        "ca1",
        pb::JobState::Completed,
        Duration::from_secs(20),
    )
    .await;
    w.stop().await;
    assert_eq!(job.result, b"finished anyway");
}

#[tokio::test]
async fn expire_at_and_ttl_together_are_refused() {
    let server = support::server(&[]).await;
    let client = server.client().await.expect("connect");
    let o = EnqueueOptions {
        expire_at: Some(SystemTime::now() + Duration::from_secs(60)),
        ttl: Some(Duration::from_secs(60)),
        ..Default::default()
    };
    let e = client
        .enqueue("x", "n", b"x".to_vec(), o)
        .await
        .expect_err("both set");
    assert_eq!(e.code(), Some(tonic::Code::InvalidArgument));
}

#[tokio::test]
async fn queue_config_job_control_fields() {
    let server = support::server(&[]).await;
    let client = server.client().await.expect("connect");
    let q = support::queue("qc");
    let config = pb::QueueConfig {
        group_max_active: Some(4),
        cancel_grace: Some(prost_types::Duration {
            seconds: 5,
            nanos: 0,
        }),
        dead_letter_expired: true,
        ..Default::default()
    };
    let paths = ["group_max_active", "cancel_grace", "dead_letter_expired"];
    let set = client
        .update_queue_config(&q, config, &paths)
        .await
        .expect("update");
    let got = client.get_queue_config(&q).await.expect("get");
    for c in [set, got] {
        assert_eq!(c.group_max_active, Some(4));
        assert_eq!(c.cancel_grace.map(|d| d.seconds), Some(5));
        assert!(c.dead_letter_expired);
    }
}

#[tokio::test]
async fn a_handler_past_the_cancel_grace_loses_its_lease_and_the_slot_serves_the_next_job() {
    let server = support::server(&[]).await;
    let client = server.client().await.expect("connect");
    let q = support::queue("grace-over");
    let config = pb::QueueConfig {
        cancel_grace: Some(prost_types::Duration {
            seconds: 0,
            nanos: 300_000_000,
        }),
        ..Default::default()
    };
    client
        .update_queue_config(&q, config, &["cancel_grace"])
        .await
        .expect("cancel_grace");
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let mut worker = Worker::new(client.clone(), support::options(&q, 1));
    worker.handle_bytes("stubborn", move |_job: Job<Vec<u8>>, ctx: Ctx| {
        let started_tx = started_tx.clone();
        async move {
            let _ = started_tx.send(());
            tokio::time::sleep(Duration::from_millis(1500)).await; // ignores ctx.cancel
            ctx.set_result(b"too late".to_vec());
            Ok(())
        }
    });
    worker.handle_bytes("next", |_job: Job<Vec<u8>>, _ctx: Ctx| async { Ok(()) });
    let stats = worker.stats();
    let w = support::run(worker);
    client
        .enqueue(&q, "stubborn", b"x".to_vec(), with_id("s1"))
        .await
        .expect("enqueue");
    started.recv().await.expect("started");
    let (_, cancelled) = client.cancel_job(&q, "s1", "stop").await.expect("cancel");
    assert!(cancelled);
    let job = support::in_state(
        &client,
        &q,
        "s1",
        pb::JobState::Cancelled,
        Duration::from_secs(10),
    )
    .await;
    assert!(job.result.is_empty());
    client
        .enqueue(&q, "next", b"x".to_vec(), with_id("n1"))
        .await
        .expect("enqueue");
    support::in_state(
        &client,
        &q,
        "n1",
        pb::JobState::Completed,
        Duration::from_secs(20),
    )
    .await;
    w.stop().await;
    let job = client.get_job(&q, "s1").await.expect("get");
    assert_eq!(job.state, pb::JobState::Cancelled as i32);
    assert_eq!(
        stats.get(&stats.lost),
        1,
        "the late ack was refused: {stats:?}"
    );
}
