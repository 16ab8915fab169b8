//! Progress reports and results the server refuses.

use std::time::Duration;

use jobwire_client::{pb, Ctx, EnqueueOptions, Error, Job, Report, Worker};
use tokio::sync::mpsc;

use crate::support;

fn with_id(id: &str) -> EnqueueOptions {
    EnqueueOptions {
        job_id: Some(id.into()),
        ..Default::default()
    }
}

#[tokio::test]
async fn refused_reports_come_back_to_the_handler() {
    let server = support::server(&[]).await;
    let client = server.client().await.expect("connect");
    let q = support::queue("progress");
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut worker = Worker::new(client.clone(), support::options(&q, 1));
    worker.handle_bytes("n", move |_job: Job<Vec<u8>>, ctx: Ctx| {
        let tx = tx.clone();
        async move {
            let too_far = ctx.progress(101, "too far").await;
            let too_big = ctx.save_checkpoint(vec![b'x'; 1 << 20]).await;
            let _ = tx.send((too_far, too_big));
            Ok(())
        }
    });
    let w = support::run(worker);
    client
        .enqueue(&q, "n", b"x".to_vec(), with_id("p1"))
        .await
        .expect("enqueue");
    let (too_far, too_big) = rx.recv().await.expect("reports");
    assert_eq!(
        too_far.expect_err("101").code(),
        Some(tonic::Code::InvalidArgument)
    );
    assert_eq!(
        too_big.expect_err("1 MiB").code(),
        Some(tonic::Code::ResourceExhausted)
    );
    let job = support::in_state(
        &client,
        &q,
        "p1",
        pb::JobState::Completed,
        Duration::from_secs(20),
    )
    .await;
    w.stop().await;
    assert_eq!(job.progress, 0);
    assert!(job.checkpoint.is_empty());
    let stale = client
        .report_progress(
            &q,
            "p1",
            "stale-token",
            Report {
                progress: Some(5),
                ..Default::default()
            },
        )
        .await
        .expect_err("stale token");
    assert_eq!(stale.code(), Some(tonic::Code::FailedPrecondition));
    assert!(matches!(
        client
            .report_progress(&q, "p1", "t", Report::default())
            .await,
        Err(Error::InvalidArgument(_))
    ));
}

#[tokio::test]
async fn a_result_too_large_fails_the_job_instead_of_leaving_it_leased() {
    let server = support::server(&[]).await;
    let client = server.client().await.expect("connect");
    let q = support::queue("big-result");
    let mut worker = Worker::new(client.clone(), support::options(&q, 1));
    worker.handle_bytes("n", |_job: Job<Vec<u8>>, ctx: Ctx| async move {
        ctx.set_result(vec![b'r'; 1 << 20]);
        Ok(())
    });
    let w = support::run(worker);
    let o = EnqueueOptions {
        max_attempts: Some(3),
        ..with_id("big1")
    };
    client
        .enqueue(&q, "n", b"x".to_vec(), o)
        .await
        .expect("enqueue");
    let job = support::in_state(
        &client,
        &q,
        "big1",
        pb::JobState::Dead,
        Duration::from_secs(20),
    )
    .await;
    w.stop().await;
    assert_eq!(job.attempts_made, 1);
    assert_eq!(
        job.errors.last().map(|e| e.error_type.as_str()),
        Some("result_too_large")
    );
}

#[tokio::test]
async fn a_report_after_the_stream_broke_goes_unary() {
    use jobwire_client::{Client, ClientOptions};
    let server = support::server(&[]).await;
    let direct = server.client().await.expect("connect");
    let proxy = support::proxy::Proxy::start(server.grpc_port()).await;
    let via_proxy = Client::connect(
        &format!("127.0.0.1:{}", proxy.port),
        ClientOptions::default(),
    )
    .await
    .expect("connect through the proxy");
    let q = support::queue("orphan-progress");
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let (cut_tx, cut) = tokio::sync::watch::channel(false);
    let (done_tx, mut done) = mpsc::unbounded_channel();
    let mut worker = Worker::new(via_proxy, support::options(&q, 1));
    worker.handle_bytes("n", move |_job: Job<Vec<u8>>, ctx: Ctx| {
        let (started_tx, done_tx, mut cut) = (started_tx.clone(), done_tx.clone(), cut.clone());
        async move {
            let _ = started_tx.send(());
            let _ = cut.wait_for(|c| *c).await;
            let r = ctx
                .report(Report {
                    progress: Some(70),
                    message: Some("after the cut".into()),
                    checkpoint: Some(b"c-7".to_vec()),
                })
                .await;
            let ok = r.is_ok();
            let _ = done_tx.send(r);
            if ok {
                Ok(())
            } else {
                Err(jobwire_client::JobError::failed("test", "report failed"))
            }
        }
    });
    let stats = worker.stats();
    let w = support::run(worker);
    direct
        .enqueue(&q, "n", b"x".to_vec(), with_id("o1"))
        .await
        .expect("enqueue");
    started.recv().await.expect("started");
    assert!(
        proxy.cut() >= 1,
        "the worker's connection went through the proxy"
    );
    cut_tx.send(true).expect("signal");
    done.recv()
        .await
        .expect("reported")
        .expect("the report after the cut is saved");
    let job = support::in_state(
        &direct,
        &q,
        "o1",
        pb::JobState::Completed,
        Duration::from_secs(20),
    )
    .await;
    w.stop().await;
    assert_eq!(
        (job.progress, job.progress_message.as_str()),
        (70, "after the cut")
    );
    assert_eq!(job.checkpoint, b"c-7");
    assert_eq!(job.attempts_made, 1);
    assert_eq!(
        stats.get(&stats.unary_settles),
        1,
        "the stream was gone: {stats:?}"
    );
}
