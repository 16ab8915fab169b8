//! The gRPC message limits and malformed messages, over real HTTP/2 to a real server: a body
//! that is not valid protobuf (or holds malformed UTF-8 in a string field) is
//! INVALID_ARGUMENT, unary or on the Subscribe stream; a message over the server's size limit
//! (sized from `--max-payload-bytes`) is RESOURCE_EXHAUSTED naming the limit; and a payload
//! above tonic's 4 MiB default goes through enqueue, lease and GetJob when the flag allows it.

use std::time::Duration;

use jobwire::pb;
use prost::Message;
use tonic::Code;

use crate::harness::*;
use crate::refusal::*;

/// A Subscribe call sending `messages` (raw protobuf bodies) and then holding the stream
/// open; returns what the server answered first (a message, the end, or the error).
async fn raw_subscribe(
    app: &TestApp,
    messages: Vec<Vec<u8>>,
) -> Result<Option<Vec<u8>>, tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(app.channel.clone());
    grpc.ready().await.expect("ready");
    let path =
        tonic::codegen::http::uri::PathAndQuery::from_static("/jobwire.v1.WorkerService/Subscribe");
    let outbound = futures::stream::iter(messages).chain(futures::stream::pending());
    let mut inbound = grpc
        .streaming(tonic::Request::new(outbound), path, Raw)
        .await?
        .into_inner();
    tokio::time::timeout(Duration::from_secs(10), inbound.message())
        .await
        .expect("the server answers the stream")
}

fn open(queue: &str) -> Vec<u8> {
    pb::SubscribeRequest {
        message: Some(pb::subscribe_request::Message::Open(pb::OpenStream {
            queues: vec![queue.into()],
            credits: 1,
            worker_id: "raw".into(),
        })),
    }
    .encode_to_vec()
}

use futures::StreamExt;

#[tokio::test]
async fn a_malformed_message_is_invalid_argument_unary_and_on_the_stream() {
    let (redis, app) = TestApp::with_redis().await;
    let r = &redis;
    // Not protobuf at all: a length-delimited field whose length runs past the end.
    refuse(
        r,
        "truncated protobuf",
        Code::InvalidArgument,
        "",
        "",
        raw_call(&app, "/jobwire.v1.JobService/Enqueue", vec![0x0a, 0x7f, 1]),
    )
    .await;
    // Malformed UTF-8 in a string field: see the table in bad_input.rs.

    // On a stream: the first message, and a later one after a valid open.
    let s = raw_subscribe(&app, vec![vec![0x0a, 0x7f, 1]])
        .await
        .expect_err("a malformed first message");
    assert_eq!(s.code(), Code::InvalidArgument, "{s:?}");
    let ack = [field(1, b"q"), field(2, b"id\xc3"), field(3, b"t")].concat();
    let before = snapshot(r).await;
    let s = raw_subscribe(&app, vec![open("q"), field(2, &ack)])
        .await
        .expect_err("a malformed ack on an open stream");
    assert_eq!(s.code(), Code::InvalidArgument, "{s:?}");
    assert!(s.message().contains("AckRequest.job_id"), "{s:?}");
    assert_eq!(snapshot(r).await, before, "nothing changed in redis");
}

#[tokio::test]
async fn a_message_over_the_limit_is_resource_exhausted_naming_the_limit() {
    let redis = TestRedis::start().await;
    let mut cfg = test_config(&redis.url);
    // 1000-byte payloads: the limit is 1000 x 1000 (a full batch) + 1 MiB = 2 048 576 bytes.
    cfg.max_payload_bytes = 1000;
    let app = TestApp::spawn(cfg).await;
    let limit = "2048576";
    let mut jobs = app.jobs();
    refuse(
        &redis,
        "a 5 MB Enqueue",
        Code::ResourceExhausted,
        "",
        limit,
        jobs.enqueue(with(|s| s.payload = vec![0; 5_000_000])),
    )
    .await;
    // Just over the limit, in a batch of jobs each within the payload limit.
    let batch = (0..2100)
        .map(|i| pb::JobSpec {
            payload: vec![0; 1000],
            ..spec("bad", &format!("b{i}"))
        })
        .collect();
    refuse(
        &redis,
        "a 2.1 MB batch",
        Code::ResourceExhausted,
        "",
        limit,
        jobs.enqueue_batch(pb::EnqueueBatchRequest { jobs: batch }),
    )
    .await;
    // On the stream.
    let big = pb::SubscribeRequest {
        message: Some(pb::subscribe_request::Message::Ack(pb::AckRequest {
            result: Vec::new(),
            queue: "q".into(),
            job_id: "x".repeat(3_000_000),
            lease_token: "t".into(),
        })),
    }
    .encode_to_vec();
    let s = raw_subscribe(&app, vec![open("q"), big])
        .await
        .expect_err("an oversized stream message");
    assert_eq!(s.code(), Code::ResourceExhausted, "{s:?}");
    assert!(s.message().contains(limit), "{s:?}");
}

#[tokio::test]
async fn an_8_mib_payload_limit_carries_a_6_mib_payload_end_to_end() {
    let redis = TestRedis::start().await;
    let mut cfg = test_config(&redis.url);
    cfg.max_payload_bytes = 8 << 20;
    let app = TestApp::spawn(cfg).await;
    let payload: Vec<u8> = (0..6 << 20).map(|i: u32| (i % 251) as u8).collect();
    let big = 64 << 20;
    let mut jobs = pb::job_service_client::JobServiceClient::new(app.channel.clone())
        .max_decoding_message_size(big);
    let r = jobs
        .enqueue(pb::EnqueueRequest {
            job: Some(pb::JobSpec {
                payload: payload.clone(),
                ..spec("big", "six")
            }),
        })
        .await
        .expect("enqueue 6 MiB")
        .into_inner();
    assert!(r.created);

    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tx.send(pb::SubscribeRequest::decode(&open("big")[..]).expect("open"))
        .expect("send");
    let mut stream = pb::worker_service_client::WorkerServiceClient::new(app.channel.clone())
        .max_decoding_message_size(big)
        .subscribe(tokio_stream::wrappers::UnboundedReceiverStream::new(rx))
        .await
        .expect("subscribe")
        .into_inner();
    let lease = loop {
        let m = tokio::time::timeout(Duration::from_secs(10), stream.message())
            .await
            .expect("a lease in time")
            .expect("the stream stays up")
            .expect("a message");
        if let Some(pb::subscribe_response::Message::Lease(l)) = m.message {
            break l;
        }
    };
    let job = lease.job.clone().expect("job");
    assert_eq!(job.payload.len(), payload.len());
    assert!(
        job.payload == payload,
        "the leased payload is the enqueued one"
    );

    let got = jobs
        .get_job(pb::GetJobRequest {
            queue: "big".into(),
            job_id: "six".into(),
        })
        .await
        .expect("get 6 MiB job")
        .into_inner()
        .job
        .expect("job");
    assert!(got.payload == payload, "GetJob returns the payload");
    drop(tx);
}
