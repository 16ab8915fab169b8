//! Bad input on every field of every RPC, beyond `validation.rs`: each call gets its status
//! code, names the field (and the limit, where there is one), and leaves Redis byte for byte
//! as it was (every key DUMPed before and after). The calls below are the table; in short:
//!
//! | input | code |
//! |---|---|
//! | a string over its byte limit (queue 128, job_id 256, name 128, content_type 128, metadata key 128 / value 4096, worker_id 128, lease_token 128, error type 128) | INVALID_ARGUMENT, field + limit |
//! | a Fail's error message over 8 KiB or details over 64 KiB | accepted, cut to the limit with `…[truncated N bytes]` (`error_text.rs`): the failure is recorded, not lost |
//! | queue empty, or with `:` `{` `}` NUL space (ids may hold all of these: `validation.rs`) | INVALID_ARGUMENT |
//! | job_id / lease_token empty where required, more than 64 metadata entries, empty metadata key | INVALID_ARGUMENT |
//! | durations negative, nanos out of range, past their cap (delay 365 d, timeout / backoff 7 d, ExtendLease 1 s..1 h) | INVALID_ARGUMENT |
//! | numbers out of range (priority ±1000, max_attempts 1..1000, page_size 0..1000, credits 1..10000) | INVALID_ARGUMENT |
//! | unknown enum values (backoff kind, disposition, dead reason filter) | INVALID_ARGUMENT |
//! | payload over --max-payload-bytes, more than 1000 jobs in a batch or ids in a Replay / Delete | RESOURCE_EXHAUSTED, field + limit |
//! | EnqueueBatch of 0 jobs | INVALID_ARGUMENT |
//! | a message over the server's message limit (a full batch of max payloads + 1 MiB, at most 64 MiB + 1 MiB; `message_limits.rs`) | RESOURCE_EXHAUSTED, naming the limit |
//! | malformed protobuf, or malformed UTF-8 in a string field (unary or on the stream) | INVALID_ARGUMENT, naming the message and field (`message_limits.rs`) |
//! | Ack / Fail / ExtendLease of an unknown job | NOT_FOUND |

use std::time::Duration;

use jobwire::pb;
use tonic::Code;

use crate::harness::*;
use crate::refusal::*;

#[tokio::test]
async fn job_service_refuses_bad_fields_and_changes_nothing() {
    let (redis, app) = TestApp::with_redis().await;
    let r = &redis;
    let (mut w, _done, held, _dead) = some_state(&redis, &app).await;
    let jobs = app.jobs();
    let e = |req: pb::EnqueueRequest| {
        let mut j = jobs.clone();
        async move { j.enqueue(req).await }
    };
    use Code::{InvalidArgument as Ia, NotFound as Nf};
    refuse(
        r,
        "queue with NUL",
        Ia,
        "job.queue",
        "",
        e(with(|s| s.queue = "a\0b".into())),
    )
    .await;
    refuse(
        r,
        "queue with {",
        Ia,
        "job.queue",
        "",
        e(with(|s| s.queue = "a{b".into())),
    )
    .await;
    refuse(
        r,
        "queue with }",
        Ia,
        "job.queue",
        "",
        e(with(|s| s.queue = "a}b".into())),
    )
    .await;
    refuse(
        r,
        "queue with space",
        Ia,
        "job.queue",
        "",
        e(with(|s| s.queue = "a b".into())),
    )
    .await;
    refuse(
        r,
        "name too long",
        Ia,
        "job.name",
        "128",
        e(with(|s| s.name = "n".repeat(129))),
    )
    .await;
    refuse(
        r,
        "content_type too long",
        Ia,
        "job.content_type",
        "128",
        e(with(|s| s.content_type = "c".repeat(129))),
    )
    .await;
    refuse(
        r,
        "metadata key too long",
        Ia,
        "job.metadata",
        "128",
        e(with(|s| {
            s.metadata.insert("k".repeat(129), "v".into());
        })),
    )
    .await;
    refuse(
        r,
        "metadata value too long",
        Ia,
        "job.metadata",
        "4096",
        e(with(|s| {
            s.metadata.insert("k".into(), "v".repeat(4097));
        })),
    )
    .await;
    refuse(
        r,
        "metadata empty key",
        Ia,
        "job.metadata",
        "",
        e(with(|s| {
            s.metadata.insert(String::new(), "v".into());
        })),
    )
    .await;
    refuse(
        r,
        "65 metadata entries",
        Ia,
        "job.metadata",
        "64",
        e(with(|s| {
            for i in 0..65 {
                s.metadata.insert(format!("k{i}"), "v".into());
            }
        })),
    )
    .await;
    refuse(
        r,
        "priority -1001",
        Ia,
        "job.priority",
        "1000",
        e(with(|s| s.priority = -1001)),
    )
    .await;
    refuse(
        r,
        "delay nanos out of range",
        Ia,
        "job.delay",
        "",
        e(with(|s| s.delay = dur(0, 1_000_000_000))),
    )
    .await;
    refuse(
        r,
        "delay negative nanos",
        Ia,
        "job.delay",
        "",
        e(with(|s| s.delay = dur(0, -1))),
    )
    .await;
    refuse(
        r,
        "timeout negative",
        Ia,
        "job.timeout",
        "",
        e(with(|s| s.timeout = dur(-5, 0))),
    )
    .await;
    refuse(
        r,
        "timeout over 7 days",
        Ia,
        "job.timeout",
        "",
        e(with(|s| s.timeout = dur(8 * 86_400, 0))),
    )
    .await;
    let backoff = |kind: i32, delay, max_delay| {
        Some(pb::Backoff {
            kind,
            delay,
            jitter: 0.0,
            max_delay,
        })
    };
    refuse(
        r,
        "backoff kind 99",
        Ia,
        "job.backoff.kind",
        "",
        e(with(|s| s.backoff = backoff(99, None, None))),
    )
    .await;
    refuse(
        r,
        "backoff delay negative",
        Ia,
        "job.backoff.delay",
        "",
        e(with(|s| s.backoff = backoff(1, dur(-1, 0), None))),
    )
    .await;
    refuse(
        r,
        "backoff delay huge",
        Ia,
        "job.backoff.delay",
        "",
        e(with(|s| s.backoff = backoff(1, dur(i64::MAX, 0), None))),
    )
    .await;
    refuse(
        r,
        "backoff max_delay negative",
        Ia,
        "job.backoff.max_delay",
        "",
        e(with(|s| s.backoff = backoff(1, None, dur(-1, 0)))),
    )
    .await;

    let mut j = app.jobs();
    refuse(
        r,
        "EnqueueBatch of 0",
        Ia,
        "jobs",
        "",
        j.enqueue_batch(pb::EnqueueBatchRequest { jobs: vec![] }),
    )
    .await;
    let many = (0..1001).map(|i| spec("bad", &format!("m{i}"))).collect();
    let s = j
        .enqueue_batch(pb::EnqueueBatchRequest { jobs: many })
        .await
        .expect_err("1001 jobs");
    assert!(matches!(s.code(), Ia | Code::ResourceExhausted), "{s:?}");
    assert!(s.message().contains("1000"), "{}", s.message());
    refuse(
        r,
        "GetJob empty id",
        Ia,
        "job_id",
        "",
        j.get_job(pb::GetJobRequest {
            queue: "bad".into(),
            job_id: String::new(),
        }),
    )
    .await;
    refuse(
        r,
        "GetJob id too long",
        Ia,
        "job_id",
        "256",
        j.get_job(pb::GetJobRequest {
            queue: "bad".into(),
            job_id: "i".repeat(257),
        }),
    )
    .await;
    refuse(
        r,
        "GetJob bad queue",
        Ia,
        "queue",
        "",
        j.get_job(pb::GetJobRequest {
            queue: "a:b".into(),
            job_id: "x".into(),
        }),
    )
    .await;
    refuse(
        r,
        "GetJob unknown",
        Nf,
        "",
        "",
        j.get_job(pb::GetJobRequest {
            queue: "bad".into(),
            job_id: "nope".into(),
        }),
    )
    .await;

    // What the generated client cannot send: malformed UTF-8 and an oversized message.
    let spec_bytes = [field(1, b"\xff\xfe"), field(3, b"n")].concat();
    refuse(
        r,
        "malformed UTF-8 queue",
        Code::InvalidArgument,
        "JobSpec.queue",
        "UTF-8",
        raw_call(
            &app,
            "/jobwire.v1.JobService/Enqueue",
            field(1, &spec_bytes),
        ),
    )
    .await;
    let ack_bytes = [field(1, b"bad"), field(2, b"held\xc3"), field(3, b"t")].concat();
    refuse(
        r,
        "malformed UTF-8 job_id",
        Code::InvalidArgument,
        "AckRequest.job_id",
        "UTF-8",
        raw_call(&app, "/jobwire.v1.WorkerService/Ack", ack_bytes),
    )
    .await;
    refuse(
        r,
        "a 5 MB payload (the message limit is sized from --max-payload-bytes)",
        Code::ResourceExhausted,
        "job.payload",
        "1048576",
        e(with(|s| s.payload = vec![0; 5_000_000])),
    )
    .await;

    // The held lease is still intact after all of it.
    assert!(w.heartbeat_for(Duration::from_millis(10)).await.is_empty());
    assert_eq!(w.ack(&held).await.code, 0);
}
