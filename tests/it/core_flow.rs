//! The main path: enqueue, lease over a stream, ack; dedupe; priority; delay; wake-ups;
//! health and reflection.

use std::time::Duration;

use jobwire::pb;

use crate::harness::*;

#[tokio::test]
async fn enqueue_lease_ack_completes_the_job() {
    let (_redis, app) = TestApp::with_redis().await;
    let r = enqueue(
        &app,
        pb::JobSpec {
            payload: b"hello".to_vec(),
            ..spec("emails", "job-1")
        },
    )
    .await;
    assert!(r.created);
    assert_eq!(
        r.job.as_ref().expect("job").state,
        pb::JobState::Waiting as i32
    );

    let mut w = TestWorker::open(&app, &["emails"], 4, "w1").await;
    let lease = w.lease().await;
    let job = lease.job.clone().expect("job");
    assert_eq!(job.job_id, "job-1");
    assert_eq!(job.payload, b"hello");
    assert_eq!(lease.attempt, 1);
    assert!(!lease.lease_token.is_empty());
    assert!(!lease.idempotency_key.is_empty());
    assert_eq!(
        get_job(&app, "emails", "job-1").await.state,
        pb::JobState::Active as i32
    );

    let s = w.ack(&lease).await;
    assert_eq!(s.code, 0, "{}", s.message);
    assert_eq!(s.state, pb::JobState::Completed as i32);
    let stored = get_job(&app, "emails", "job-1").await;
    assert_eq!(stored.state, pb::JobState::Completed as i32);
    assert_eq!(stored.attempts_made, 1);
    assert!(stored.finish_time.is_some());
}

#[tokio::test]
async fn a_duplicate_id_returns_the_existing_job_and_creates_nothing() {
    let (redis, app) = TestApp::with_redis().await;
    let first = enqueue(
        &app,
        pb::JobSpec {
            payload: b"one".to_vec(),
            ..spec("q", "order:42/{x}")
        },
    )
    .await;
    let second = enqueue(
        &app,
        pb::JobSpec {
            payload: b"two".to_vec(),
            ..spec("q", "order:42/{x}")
        },
    )
    .await;
    assert!(first.created);
    assert!(!second.created);
    let existing = second.job.expect("job");
    assert_eq!(
        existing.payload, b"one",
        "the existing job is returned unchanged"
    );
    assert_eq!(
        existing.idempotency_key,
        first.job.expect("job").idempotency_key
    );
    let q = jobwire::jobs::QueueName::parse("q").expect("queue");
    let waiting = redis.store().await.waiting_ids(&q).await.expect("waiting");
    assert_eq!(waiting, ["order:42/{x}"]);

    let mut w = TestWorker::open(&app, &["q"], 10, "w").await;
    let l = w.lease().await;
    assert_eq!(l.job.expect("job").job_id, "order:42/{x}");
    assert!(
        w.lease_within(Duration::from_millis(300)).await.is_none(),
        "one job, one delivery"
    );
}

#[tokio::test]
async fn batch_enqueue_reports_each_item_on_its_own() {
    let (_redis, app) = TestApp::with_redis().await;
    let mut bad = spec("q", "b");
    bad.backoff = Some(pb::Backoff {
        kind: pb::BackoffKind::Fixed as i32,
        jitter: 2.0,
        ..Default::default()
    });
    let r = app
        .jobs()
        .enqueue_batch(pb::EnqueueBatchRequest {
            jobs: vec![spec("q", "a"), bad, spec("other", "c"), spec("q", "a")],
        })
        .await
        .expect("batch")
        .into_inner()
        .results;
    assert_eq!(r.len(), 4);
    assert!(r[0].created);
    let e = r[1].error.as_ref().expect("item error");
    assert_eq!(e.code, tonic::Code::InvalidArgument as i32);
    assert_eq!(e.field, "jobs[1].backoff.jitter");
    assert!(r[2].created);
    assert!(!r[3].created, "the same id later in the batch dedupes");
}

#[tokio::test]
async fn higher_priority_runs_first_and_equal_priority_is_fifo() {
    let (_redis, app) = TestApp::with_redis().await;
    for (id, p) in [
        ("low-1", -5),
        ("mid-1", 0),
        ("high-1", 10),
        ("mid-2", 0),
        ("high-2", 10),
        ("low-2", -5),
    ] {
        enqueue(
            &app,
            pb::JobSpec {
                priority: p,
                ..spec("prio", id)
            },
        )
        .await;
    }
    let mut w = TestWorker::open(&app, &["prio"], 1, "w").await;
    let mut order = Vec::new();
    for _ in 0..6 {
        let l = w.lease().await;
        order.push(l.job.clone().expect("job").job_id);
        assert_eq!(w.ack(&l).await.code, 0);
    }
    assert_eq!(
        order,
        ["high-1", "high-2", "mid-1", "mid-2", "low-1", "low-2"]
    );
}

#[tokio::test]
async fn a_delayed_job_is_not_delivered_before_its_time() {
    let (_redis, app) = TestApp::with_redis().await;
    let r = enqueue(
        &app,
        pb::JobSpec {
            delay: Some(ms(Duration::from_millis(800))),
            ..spec("later", "d")
        },
    )
    .await;
    let job = r.job.expect("job");
    assert_eq!(job.state, pb::JobState::Delayed as i32);
    let ready = job.ready_time.expect("ready time");
    let created = job.create_time.expect("create time");
    let ready_ms = ready.seconds * 1000 + i64::from(ready.nanos) / 1_000_000;
    let created_ms = created.seconds * 1000 + i64::from(created.nanos) / 1_000_000;
    assert_eq!(ready_ms - created_ms, 800);

    let mut w = TestWorker::open(&app, &["later"], 1, "w").await;
    assert!(
        w.lease_within(Duration::from_millis(500)).await.is_none(),
        "not before its time"
    );
    let l = w.lease().await;
    let leased = l.job.expect("job").lease_time.expect("lease time");
    let leased_ms = leased.seconds * 1000 + i64::from(leased.nanos) / 1_000_000;
    assert!(
        leased_ms >= ready_ms,
        "leased at {leased_ms}, due at {ready_ms}"
    );
}

#[tokio::test]
async fn an_idle_subscriber_gets_a_new_job_without_polling() {
    let (_redis, app) = TestApp::with_redis().await;
    let mut w = TestWorker::open(&app, &["idle"], 1, "w").await;
    // Let the lease loop go idle (it found nothing), so only a wake-up can deliver quickly.
    assert!(w.lease_within(Duration::from_millis(300)).await.is_none());
    enqueue(&app, spec("idle", "now")).await;
    // The safety poll is 2 s: a delivery well inside it came from the pub/sub wake-up.
    let l = w.lease_within(Duration::from_millis(1000)).await;
    assert!(l.is_some(), "an idle worker is woken by the enqueue");
}

#[tokio::test]
async fn credits_bound_the_leases_a_stream_holds() {
    let (_redis, app) = TestApp::with_redis().await;
    for i in 0..5 {
        enqueue(&app, spec("credits", &format!("j{i}"))).await;
    }
    let mut w = TestWorker::open(&app, &["credits"], 2, "w").await;
    let a = w.lease().await;
    let _b = w.lease().await;
    assert!(
        w.lease_within(Duration::from_millis(300)).await.is_none(),
        "two credits, two leases"
    );
    w.ack(&a).await;
    assert!(
        w.lease_within(Duration::from_secs(2)).await.is_some(),
        "an ack returns a credit"
    );
    w.send(pb::subscribe_request::Message::GrantCredits(
        pb::GrantCredits { credits: 2 },
    ));
    assert!(w.lease_within(Duration::from_secs(2)).await.is_some());
    assert!(w.lease_within(Duration::from_secs(2)).await.is_some());
}

#[tokio::test]
async fn health_serves_and_reflection_lists_the_services() {
    let (_redis, app) = TestApp::with_redis().await;
    let mut health = tonic_health::pb::health_client::HealthClient::new(app.channel.clone());
    for service in [
        "",
        "jobwire.v1.JobService",
        "jobwire.v1.WorkerService",
        "jobwire.v1.DeadLetterService",
    ] {
        let r = health
            .check(tonic_health::pb::HealthCheckRequest {
                service: service.into(),
            })
            .await
            .expect("health")
            .into_inner();
        assert_eq!(r.status, 1, "{service} SERVING");
    }
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    let mut refl = ServerReflectionClient::new(app.channel.clone());
    let req = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut stream = refl
        .server_reflection_info(tokio_stream::iter(vec![req]))
        .await
        .expect("reflection")
        .into_inner();
    let resp = stream.message().await.expect("message").expect("some");
    let Some(MessageResponse::ListServicesResponse(list)) = resp.message_response else {
        panic!("unexpected reflection reply")
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    for want in [
        "jobwire.v1.JobService",
        "jobwire.v1.WorkerService",
        "jobwire.v1.DeadLetterService",
        "grpc.health.v1.Health",
    ] {
        assert!(names.iter().any(|n| n == want), "{want} in {names:?}");
    }
}
