//! Worker behaviour beyond the shared scenarios, against a real server: how each kind of
//! handler failure is reported, what a handler sees, the shutdown grace.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jobwire_client::{pb, Client, Ctx, EnqueueOptions, Job, Worker, WorkerOptions};

async fn enqueue(client: &Client, q: &str, name: &str, payload: &[u8], max_attempts: u32) {
    let o = EnqueueOptions {
        job_id: Some("j".into()),
        max_attempts: Some(max_attempts),
        metadata: [("tenant".to_owned(), "acme".to_owned())].into(),
        ..Default::default()
    };
    client
        .enqueue(q, name, payload.to_vec(), o)
        .await
        .expect("enqueue");
}

#[tokio::test]
async fn any_other_error_is_retried_with_its_type_message_and_a_stack_trace() {
    let server = support::server(&[]).await;
    let client = server.client().await.expect("connect");
    let q = support::queue("other");
    enqueue(&client, &q, "parse", b"{}", 2).await;
    let mut worker = Worker::new(client.clone(), support::options(&q, 1));
    worker.handle(
        "parse",
        |job: Job<serde_json::Value>, _ctx: Ctx| async move {
            if job.attempt == 1 {
                let _n: u32 = "twelve".parse()?;
            }
            Ok(())
        },
    );
    let w = support::run(worker);
    let job = support::finished(&client, &q, "j").await;
    w.stop().await;
    assert_eq!(job.state, pb::JobState::Completed as i32, "{job:?}");
    assert_eq!(job.attempts_made, 2);
    let e = &job.errors[0];
    assert_eq!(e.disposition, pb::FailDisposition::Retry as i32);
    assert_eq!(e.error_type, "core::num::error::ParseIntError");
    assert_eq!(e.message, "invalid digit found in string");
    assert!(
        !e.details.is_empty() && e.details.len() <= 8 * 1024,
        "{}",
        e.details
    );
}

#[tokio::test]
async fn a_panicking_handler_is_retried_and_the_worker_goes_on() {
    let server = support::server(&[]).await;
    let client = server.client().await.expect("connect");
    let q = support::queue("panic");
    enqueue(&client, &q, "boom", b"{}", 2).await;
    let mut worker = Worker::new(client.clone(), support::options(&q, 1));
    worker.handle(
        "boom",
        |job: Job<serde_json::Value>, _ctx: Ctx| async move {
            assert!(job.attempt > 1, "first attempt explodes");
            Ok(())
        },
    );
    let w = support::run(worker);
    let job = support::finished(&client, &q, "j").await;
    w.stop().await;
    assert_eq!(job.state, pb::JobState::Completed as i32, "{job:?}");
    assert_eq!(job.errors[0].error_type, "panic");
    assert!(job.errors[0].message.contains("first attempt explodes"));
}

#[tokio::test]
async fn a_payload_that_does_not_decode_is_not_retried_and_unknown_names_are() {
    #[derive(serde::Deserialize)]
    struct Signup {
        #[allow(dead_code)]
        email: String,
    }
    let server = support::server(&[]).await;
    let client = server.client().await.expect("connect");
    let q = support::queue("decode");
    enqueue(&client, &q, "signup", br#"{"mail": 1}"#, 3).await;
    let o = EnqueueOptions {
        job_id: Some("nameless".into()),
        max_attempts: Some(1),
        ..Default::default()
    };
    client
        .enqueue(&q, "no-such-handler", b"{}".to_vec(), o)
        .await
        .expect("enqueue");
    let mut worker = Worker::new(client.clone(), support::options(&q, 2));
    worker.handle(
        "signup",
        |_job: Job<Signup>, _ctx: Ctx| async move { Ok(()) },
    );
    let w = support::run(worker);
    let job = support::finished(&client, &q, "j").await;
    let nameless = support::finished(&client, &q, "nameless").await;
    w.stop().await;
    assert_eq!(job.state, pb::JobState::Dead as i32);
    assert_eq!(job.dead_reason, pb::DeadReason::NoRetry as i32);
    assert_eq!(
        job.attempts_made, 1,
        "not retried: it would not decode next time"
    );
    assert!(job.errors[0].message.contains("payload does not decode"));
    let e = &nameless.errors[0];
    assert_eq!(e.disposition, pb::FailDisposition::Retry as i32);
    assert_eq!(e.error_type, "no_handler");
}

#[tokio::test]
async fn a_bytes_handler_sees_the_payload_and_the_lease_facts() {
    let server = support::server(&[]).await;
    let client = server.client().await.expect("connect");
    let q = support::queue("bytes");
    enqueue(&client, &q, "raw", &[0, 159, 146, 150], 1).await;
    let seen: Arc<Mutex<Option<Job<Vec<u8>>>>> = Arc::default();
    let mut worker = Worker::new(client.clone(), support::options(&q, 1));
    let s = seen.clone();
    worker.handle_bytes("raw", move |job: Job<Vec<u8>>, _ctx: Ctx| {
        let s = s.clone();
        async move {
            *s.lock().expect("lock") = Some(job);
            Ok(())
        }
    });
    let w = support::run(worker);
    support::finished(&client, &q, "j").await;
    w.stop().await;
    let job = seen.lock().expect("lock").take().expect("handled");
    assert_eq!(job.payload, vec![0, 159, 146, 150]);
    assert_eq!(job.attempt, 1);
    assert_eq!(
        (job.id(), job.queue(), job.name()),
        ("j", q.as_str(), "raw")
    );
    assert_eq!(
        job.metadata().get("tenant").map(String::as_str),
        Some("acme")
    );
    assert!(!job.idempotency_key.is_empty() && !job.lease_token.is_empty());
    assert!(job.info.payload.is_empty(), "moved into job.payload");
}

#[tokio::test]
async fn at_the_end_of_the_grace_handlers_are_cancelled_and_their_jobs_handed_back() {
    let server = support::server(&[]).await;
    let client = server.client().await.expect("connect");
    let q = support::queue("grace");
    enqueue(&client, &q, "stuck", b"{}", 3).await;
    let cancelled = Arc::new(AtomicBool::new(false));
    let started = Arc::new(tokio::sync::Notify::new());
    let mut worker = Worker::new(
        client.clone(),
        WorkerOptions {
            grace: Duration::from_millis(300),
            ..support::options(&q, 1)
        },
    );
    let (c, st) = (cancelled.clone(), started.clone());
    worker.handle("stuck", move |_job: Job<serde_json::Value>, ctx: Ctx| {
        let (c, st) = (c.clone(), st.clone());
        async move {
            st.notify_one();
            ctx.cancel.cancelled().await;
            c.store(true, Ordering::SeqCst);
            Ok(())
        }
    });
    let shutdown = worker.shutdown_token();
    let task = tokio::spawn(worker.run());
    started.notified().await;
    let t0 = Instant::now();
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("the worker exits after the grace")
        .expect("join")
        .expect("run");
    assert!(
        t0.elapsed() >= Duration::from_millis(300),
        "waited the grace"
    );
    assert!(
        cancelled.load(Ordering::SeqCst),
        "the handler saw the cancellation"
    );
    // RELEASE: waiting again at once, the attempt not counted, no error recorded.
    let job = client.get_job(&q, "j").await.expect("job");
    assert_eq!(job.state, pb::JobState::Waiting as i32, "{job:?}");
    assert_eq!(job.attempts_made, 0);
    assert!(job.errors.is_empty(), "{:?}", job.errors);
}

#[tokio::test]
async fn invalid_worker_options_are_refused_before_connecting() {
    let server = support::server(&[]).await;
    let client = server.client().await.expect("connect");
    for (o, what) in [
        (support::options("q", 0), "concurrency 0"),
        (
            WorkerOptions {
                grace: Duration::ZERO,
                ..support::options("q", 1)
            },
            "grace 0",
        ),
        (
            WorkerOptions {
                queues: vec![],
                ..support::options("q", 1)
            },
            "no queues",
        ),
    ] {
        let r = Worker::new(client.clone(), o).run().await;
        assert!(
            matches!(r, Err(jobwire_client::Error::InvalidArgument(_))),
            "{what}: {r:?}"
        );
    }
}

#[tokio::test]
async fn a_stream_refused_at_open_ends_run_with_the_error() {
    let server = support::server(&[]).await;
    let client = server.client().await.expect("connect");
    // Not a valid queue name: the server refuses the stream (INVALID_ARGUMENT) and run()
    // returns that instead of reconnecting forever.
    let r = tokio::time::timeout(
        Duration::from_secs(10),
        Worker::new(client, support::options("no spaces allowed", 1)).run(),
    )
    .await
    .expect("run() ends");
    let code = r.as_ref().err().and_then(|e| e.code());
    assert_eq!(code, Some(tonic::Code::InvalidArgument), "{r:?}");
}

#[tokio::test]
async fn a_server_draining_stops_leases_then_the_worker_reconnects() {
    // --max-connection-age retires each connection after 1 s: its streams get Draining, may
    // settle what they hold, then end; the worker finishes its job and comes back.
    let server = support::server(&[
        "--max-connection-age",
        "1s",
        "--max-connection-age-grace",
        "10s",
    ])
    .await;
    let client = server.client().await.expect("connect");
    let q = support::queue("drain");
    let o = |id: &str| EnqueueOptions {
        job_id: Some(id.into()),
        ..Default::default()
    };
    client
        .enqueue(&q, "slow", b"{}".to_vec(), o("first"))
        .await
        .expect("enqueue");
    let seen: Arc<Mutex<Vec<(String, u32)>>> = Arc::default();
    let mut worker = Worker::new(client.clone(), support::options(&q, 1));
    let s = seen.clone();
    worker.handle("slow", move |job: Job<serde_json::Value>, _ctx: Ctx| {
        let s = s.clone();
        async move {
            s.lock()
                .expect("lock")
                .push((job.id().to_owned(), job.attempt));
            if job.id() == "first" {
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            Ok(())
        }
    });
    let stats = worker.stats();
    let w = support::run(worker);
    support::finished(&client, &q, "first").await;
    client
        .enqueue(&q, "slow", b"{}".to_vec(), o("second"))
        .await
        .expect("enqueue");
    let second = support::finished(&client, &q, "second").await;
    w.stop().await;
    let first = client.get_job(&q, "first").await.expect("first");
    let seen = seen.lock().expect("lock").clone();
    assert_eq!(
        seen,
        vec![("first".to_owned(), 1), ("second".to_owned(), 1)]
    );
    assert_eq!((first.attempts_made, second.attempts_made), (1, 1));
    assert_eq!(first.state, pb::JobState::Completed as i32);
    assert!(stats.get(&stats.server_drains) >= 1, "{stats:?}");
    assert!(stats.get(&stats.streams) >= 2, "reconnected: {stats:?}");
    assert_eq!(stats.get(&stats.lost), 0, "{stats:?}");
}
