//! Queues cost only while they are used: `--max-queues` refuses a request that would create
//! one more queue (RESOURCE_EXHAUSTED, naming the limit, changing nothing, also for a batch
//! that mixes known and new queues), and DeleteQueue removes a queue with all its keys
//! (refused while jobs are leased unless forced; NOT_FOUND for an unknown queue).

use std::time::Duration;

use jobwire::pb;
use pb::queue_service_client::QueueServiceClient;
use tonic::Code;

use crate::harness::*;
use crate::refusal::refuse;

fn admin(app: &TestApp) -> QueueServiceClient<tonic::transport::Channel> {
    QueueServiceClient::new(app.channel.clone())
}

async fn delete(
    app: &TestApp,
    queue: &str,
    force: bool,
) -> Result<pb::DeleteQueueResponse, tonic::Status> {
    admin(app)
        .delete_queue(pb::DeleteQueueRequest {
            queue: queue.into(),
            force,
        })
        .await
        .map(|r| r.into_inner())
}

#[tokio::test]
async fn past_max_queues_a_new_queue_is_refused_and_nothing_changes() {
    let redis = TestRedis::start().await;
    let mut cfg = test_config(&redis.url);
    cfg.max_queues = 3;
    let app = TestApp::spawn(cfg).await;
    for q in ["mq-1", "mq-2", "mq-3"] {
        assert!(enqueue(&app, spec(q, "a")).await.created);
    }
    // A known queue still takes jobs.
    assert!(enqueue(&app, spec("mq-1", "b")).await.created);
    refuse(
        &redis,
        "enqueue to a 4th queue",
        Code::ResourceExhausted,
        "",
        "3 queues",
        app.jobs().enqueue(pb::EnqueueRequest {
            job: Some(spec("mq-4", "a")),
        }),
    )
    .await;
    // A batch over a known and a new queue is refused whole: the known queue's job is not
    // written either.
    refuse(
        &redis,
        "a batch with a 4th queue",
        Code::ResourceExhausted,
        "",
        "3 queues",
        app.jobs().enqueue_batch(pb::EnqueueBatchRequest {
            jobs: vec![spec("mq-1", "c"), spec("mq-5", "a")],
        }),
    )
    .await;
    refuse(
        &redis,
        "pause a 4th queue",
        Code::ResourceExhausted,
        "",
        "3 queues",
        admin(&app).pause_queue(pb::PauseQueueRequest {
            queue: "mq-6".into(),
        }),
    )
    .await;
    // Deleting a queue frees its slot.
    delete(&app, "mq-1", false).await.expect("delete");
    assert!(enqueue(&app, spec("mq-4", "a")).await.created);
}

#[tokio::test]
async fn delete_queue_removes_every_key_and_is_refused_while_jobs_are_leased() {
    let (redis, app) = TestApp::with_redis().await;
    let q = "doomed";
    admin(&app)
        .update_queue_config(pb::UpdateQueueConfigRequest {
            queue: q.into(),
            config: Some(pb::QueueConfig {
                rate_limit: Some(pb::RateLimit {
                    max: 100,
                    period: Some(ms(Duration::from_secs(1))),
                }),
                ..Default::default()
            }),
            update_mask: None,
        })
        .await
        .expect("config");
    for id in ["done", "dies", "held"] {
        enqueue(&app, spec(q, id)).await;
    }
    let mut w = TestWorker::open(&app, &[q], 3, "w").await;
    let mut leases = [w.lease().await, w.lease().await, w.lease().await];
    leases.sort_by_key(|l| l.job.as_ref().map(|j| j.job_id.clone()));
    let [dies, done, held] = [&leases[0], &leases[1], &leases[2]];
    assert_eq!(w.ack(done).await.code, 0);
    let f = w
        .fail(dies, pb::FailDisposition::NoRetry, "x", "Bad", None)
        .await;
    assert_eq!(f.code, 0);
    for i in 0..3 {
        enqueue(&app, spec(q, &format!("w{i}"))).await;
    }
    enqueue(
        &app,
        pb::JobSpec {
            delay: Some(ms(Duration::from_secs(60))),
            ..spec(q, "later")
        },
    )
    .await;
    // The credits that came back take two of the new jobs: 3 leased, 1 waiting.
    w.lease().await;
    w.lease().await;
    // Renewal rewrites the leased jobs in the background, so compare keys and counts.
    let mut c = redis.conn().await;
    let keys = |mut c: RawConn| async move {
        let mut k: Vec<String> = redis::cmd("KEYS")
            .arg("jw:{doomed}*")
            .query_async(&mut c)
            .await
            .expect("keys");
        k.sort();
        k
    };
    let before = keys(c.clone()).await;
    let busy = delete(&app, q, false).await.expect_err("jobs are leased");
    assert_eq!(busy.code(), Code::FailedPrecondition, "{}", busy.message());
    assert!(busy.message().contains("force"), "{}", busy.message());
    assert_eq!(
        keys(c.clone()).await,
        before,
        "a refused delete changes nothing"
    );

    let d = delete(&app, q, true).await.expect("forced delete");
    assert_eq!(
        (d.waiting, d.active, d.delayed, d.completed, d.dead),
        (1, 3, 1, 1, 1),
        "{d:?}"
    );
    let left: Vec<String> = redis::cmd("KEYS")
        .arg("jw:{doomed}*")
        .query_async(&mut c)
        .await
        .expect("keys");
    assert!(left.is_empty(), "keys left: {left:?}");
    let registered: bool = redis::cmd("SISMEMBER")
        .arg("jw:queues")
        .arg(q)
        .query_async(&mut c)
        .await
        .expect("sismember");
    assert!(!registered);
    // A reap that ran beside the deletion may put the queue back in the due index; its next
    // reap finds nothing and takes it out.
    let shards = if redis.cluster().is_some() {
        jobwire::store::DUE_SHARDS
    } else {
        1
    };
    let due_key = jobwire::store::due_key(&jobwire::jobs::QueueName::parse(q).expect("q"), shards);
    eventually(Duration::from_secs(10), || {
        let mut c = c.clone();
        async move {
            let due: Option<f64> = redis::cmd("ZSCORE")
                .arg(due_key)
                .arg(q)
                .query_async(&mut c)
                .await
                .expect("zscore");
            due.is_none()
        }
    })
    .await;
    // The worker's late ack of a deleted job: NOT_FOUND.
    let late = w.ack(held).await;
    assert_eq!(late.code, Code::NotFound as i32, "{late:?}");

    let gone = delete(&app, q, false).await.expect_err("deleted");
    assert_eq!(gone.code(), Code::NotFound);
    let never = delete(&app, "never-was", true).await.expect_err("unknown");
    assert_eq!(never.code(), Code::NotFound);
    let bad = delete(&app, "bad name!", true).await.expect_err("bad name");
    assert_eq!(bad.code(), Code::InvalidArgument);
}
