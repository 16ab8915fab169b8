//! The real binary's JSON logs: every failed attempt is logged with job id, name, attempt and
//! worker, inside the attempt's span, which carries the producer's W3C trace id; the
//! `traceparent` reaches the worker in the lease unchanged.

use std::process::Stdio;
use std::time::Duration;

use jobwire::pb;
use tokio::io::{AsyncBufReadExt, BufReader};
use tonic::transport::Channel;

use crate::harness::*;

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// The real binary on `redis`, logging JSON at info to a pipe: the child, its log lines
/// and a channel to its gRPC port.
async fn spawn_json(
    redis: &TestRedis,
) -> (
    tokio::process::Child,
    tokio::io::Lines<BufReader<tokio::process::ChildStderr>>,
    Channel,
) {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_jobwire"))
        .args([
            "serve",
            "--log-format",
            "json",
            "--grpc-addr",
            "127.0.0.1:0",
            "--http-addr",
            "127.0.0.1:0",
        ])
        .args(["--redis-url", &redis.url])
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn jobwire");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let grpc = loop {
        let v = next_json(&mut lines).await;
        if v["message"] == "jobwire serving" {
            break v["grpc"].as_str().expect("grpc addr").to_owned();
        }
    };
    let channel = Channel::from_shared(format!("http://{grpc}"))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    (child, lines, channel)
}

/// The next log line, parsed.
async fn next_json(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStderr>>,
) -> serde_json::Value {
    let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .expect("a log line within 10 s")
        .expect("read")
        .expect("jobwire exited");
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
}

/// The next line logged with `message`.
async fn next_with(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStderr>>,
    message: &str,
) -> serde_json::Value {
    loop {
        let v = next_json(lines).await;
        if v["message"] == message {
            return v;
        }
    }
}

#[tokio::test]
async fn json_logs_carry_the_attempt_and_the_trace() {
    let redis = TestRedis::start().await;
    let (mut child, mut lines, channel) = spawn_json(&redis).await;
    let mut jobs = pb::job_service_client::JobServiceClient::new(channel.clone());
    let mut spec = spec("logs", "job-9");
    spec.name = "send-welcome-email".into();
    spec.metadata
        .insert("traceparent".into(), TRACEPARENT.into());
    jobs.enqueue(pb::EnqueueRequest { job: Some(spec) })
        .await
        .expect("enqueue");

    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    use pb::subscribe_request::Message as In;
    tx.send(pb::SubscribeRequest {
        message: Some(In::Open(pb::OpenStream {
            queues: vec!["logs".into()],
            credits: 1,
            worker_id: "mailer-3".into(),
        })),
    })
    .expect("send");
    let mut stream = pb::worker_service_client::WorkerServiceClient::new(channel)
        .subscribe(tokio_stream::wrappers::UnboundedReceiverStream::new(rx))
        .await
        .expect("subscribe")
        .into_inner();
    let Some(pb::subscribe_response::Message::Lease(lease)) =
        stream.message().await.expect("msg").and_then(|m| m.message)
    else {
        panic!("expected a lease")
    };
    let job = lease.job.expect("job");
    assert_eq!(
        job.metadata.get("traceparent").map(String::as_str),
        Some(TRACEPARENT),
        "trace context reaches the worker"
    );
    tx.send(pb::SubscribeRequest {
        message: Some(In::Fail(pb::FailRequest {
            pause_group: false,
            queue: "logs".into(),
            job_id: "job-9".into(),
            lease_token: lease.lease_token,
            disposition: pb::FailDisposition::NoRetry as i32,
            error: Some(pb::JobError {
                message: "400 invalid address".into(),
                error_type: "invalid_address".into(),
                details: String::new(),
            }),
            retry_after: None,
            pause_queue: false,
        })),
    })
    .expect("send");
    let failed = next_with(&mut lines, "attempt failed").await;
    assert_eq!(failed["job_id"], "job-9");
    assert_eq!(failed["name"], "send-welcome-email");
    assert_eq!(failed["attempt"], 1);
    assert_eq!(failed["worker_id"], "mailer-3");
    assert_eq!(failed["dead_reason"], "NO_RETRY");
    assert_eq!(failed["span"]["name"], "job_attempt");
    assert_eq!(
        failed["span"]["trace_id"],
        "4bf92f3577b34da6a3ce929d0e0e4736"
    );
    let _ = child.start_kill();
}

/// Two jobs leased in one lease call are told apart by their attempt spans' `lease` field
/// (issue 32, item 14): the call's prefix and the slot, `<8 hex>-<slot>`, never the whole
/// token (the token is what settles the job).
#[tokio::test]
async fn jobs_leased_in_one_call_log_distinct_lease_tags() {
    let redis = TestRedis::start().await;
    let (mut child, mut lines, channel) = spawn_json(&redis).await;
    let mut jobs = pb::job_service_client::JobServiceClient::new(channel.clone());
    jobs.enqueue_batch(pb::EnqueueBatchRequest {
        jobs: vec![spec("logs-call", "a"), spec("logs-call", "b")],
    })
    .await
    .expect("enqueue");
    let mut w = TestWorker::open_on(channel, &["logs-call"], 2, "w").await;
    let (a, b) = (w.lease().await, w.lease().await);
    let call = |t: &str| t.rsplit_once('-').expect("token").0.to_owned();
    assert_eq!(
        call(&a.lease_token),
        call(&b.lease_token),
        "one lease call leased both"
    );
    let mut tags = Vec::new();
    for l in [&a, &b] {
        let s = w
            .fail(l, pb::FailDisposition::NoRetry, "no", "E", None)
            .await;
        assert_eq!(s.code, 0);
        let failed = next_with(&mut lines, "attempt failed").await;
        let id = l.job.as_ref().expect("job").job_id.as_str();
        assert_eq!(failed["job_id"], id);
        let tag = failed["span"]["lease"]
            .as_str()
            .expect("a lease field")
            .to_owned();
        let (prefix, slot) = l.lease_token.rsplit_once('-').expect("token");
        assert_eq!(tag, format!("{}-{slot}", &prefix[..8]), "{id}");
        assert!(!tag.contains(prefix), "not the whole token");
        tags.push(tag);
    }
    assert_ne!(tags[0], tags[1], "one tag per lease");
    let _ = child.start_kill();
}
