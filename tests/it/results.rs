//! Issue 16, results: a worker attaches bounded result bytes to its Ack (on the stream or
//! unary); GetJob reads them while the completed job is kept; a queue that keeps no
//! completed jobs keeps no result; a result over the limit is refused (RESOURCE_EXHAUSTED
//! naming `result` and the limit, or a Settled with code 8 on the stream) and the job stays
//! leased, so the worker can ack it again.

use jobwire::pb;
use tonic::Code;

use crate::harness::*;
use crate::refusal::refuse;

fn unary_ack(l: &pb::Lease, result: &[u8]) -> pb::AckRequest {
    let job = l.job.as_ref().expect("job");
    pb::AckRequest {
        queue: job.queue.clone(),
        job_id: job.job_id.clone(),
        lease_token: l.lease_token.clone(),
        result: result.to_vec(),
    }
}

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
        .expect("config");
}

#[tokio::test]
async fn a_result_attached_at_ack_is_read_by_get_job_on_the_stream_and_unary() {
    let (_redis, app) = TestApp::with_redis().await;
    for id in ["stream", "unary", "none"] {
        enqueue(&app, spec("res", id)).await;
    }
    let mut w = TestWorker::open(&app, &["res"], 3, "w").await;
    let mut leases = Vec::new();
    for _ in 0..3 {
        let l = w.lease().await;
        assert!(l.job.as_ref().expect("job").result.is_empty());
        leases.push(l);
    }
    let by_id = |id: &str| {
        leases
            .iter()
            .find(|l| l.job.as_ref().expect("job").job_id == id)
            .expect("leased")
            .clone()
    };
    let s = w.ack_with(&by_id("stream"), b"{\"rows\":42}").await;
    assert_eq!(s.code, 0, "{}", s.message);
    app.workers()
        .ack(unary_ack(&by_id("unary"), b"\x00\xffbinary"))
        .await
        .expect("unary ack with a result");
    assert_eq!(w.ack(&by_id("none")).await.code, 0);

    let job = get_job(&app, "res", "stream").await;
    assert_eq!(job.state, pb::JobState::Completed as i32);
    assert_eq!(job.result, b"{\"rows\":42}");
    assert_eq!(
        get_job(&app, "res", "unary").await.result,
        b"\x00\xffbinary"
    );
    assert!(get_job(&app, "res", "none").await.result.is_empty());

    // ListJobs leaves results out (GetJob has them).
    let page = app
        .jobs()
        .list_jobs(pb::ListJobsRequest {
            queue: "res".into(),
            state: pb::JobState::Completed as i32,
            ..Default::default()
        })
        .await
        .expect("list")
        .into_inner();
    assert_eq!(page.jobs.len(), 3);
    assert!(page.jobs.iter().all(|j| j.result.is_empty()));
}

#[tokio::test]
async fn a_queue_that_keeps_no_completed_jobs_keeps_no_result() {
    let (redis, app) = TestApp::with_redis().await;
    keep_completed(&app, "gone", 0).await;
    enqueue(&app, spec("gone", "j")).await;
    let mut w = TestWorker::open(&app, &["gone"], 1, "w").await;
    let l = w.lease().await;
    assert_eq!(w.report(&l, Some(90), None, Some(b"ck")).await.code, 0);
    assert_eq!(w.ack_with(&l, b"result").await.code, 0);
    let e = app
        .jobs()
        .get_job(pb::GetJobRequest {
            queue: "gone".into(),
            job_id: "j".into(),
        })
        .await
        .expect_err("deleted at its ack");
    assert_eq!(e.code(), Code::NotFound);
    // Nothing of the job is left in the data hash: no result, progress or checkpoint.
    let mut c = redis.conn().await;
    let left: i64 = redis::cmd("HLEN")
        .arg("jw:{gone}:data")
        .query_async(&mut c)
        .await
        .expect("hlen");
    assert_eq!(left, 0);
}

#[tokio::test]
async fn a_result_over_the_limit_is_refused_and_the_job_stays_leased() {
    let redis = TestRedis::start().await;
    let mut cfg = test_config(&redis.url);
    cfg.max_result_bytes = 100;
    let app = TestApp::spawn(cfg).await;
    enqueue(&app, spec("big", "j")).await;
    let mut w = TestWorker::open(&app, &["big"], 1, "w").await;
    let l = w.lease().await;
    let mut c = redis.conn().await;
    wait_lease_calls_confirmed(&mut c, "big").await;

    refuse(
        &redis,
        "unary ack with a result over the limit",
        Code::ResourceExhausted,
        "result",
        "100",
        app.workers().ack(unary_ack(&l, &[1u8; 101])),
    )
    .await;
    let s = w.ack_with(&l, &[1u8; 101]).await;
    assert_eq!(s.code, Code::ResourceExhausted as i32);
    assert!(
        s.message.contains("result") && s.message.contains("100"),
        "{}",
        s.message
    );
    assert_eq!(
        get_job(&app, "big", "j").await.state,
        pb::JobState::Active as i32,
        "still leased"
    );
    // At the limit: accepted.
    let s = w.ack_with(&l, &[1u8; 100]).await;
    assert_eq!(s.code, 0, "{}", s.message);
    assert_eq!(get_job(&app, "big", "j").await.result, vec![1u8; 100]);
}
