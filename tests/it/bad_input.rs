//! Bad input on every field of every RPC, beyond `validation.rs`: each call gets its status
//! code, names the field (and the limit, where there is one), and leaves Redis byte for byte
//! as it was (every key DUMPed before and after). The calls below are the table; in short:
//!
//! | input | code |
//! |---|---|
//! | a string over its byte limit (queue 128, job_id 256, name 128, content_type 128, metadata key 128 / value 4096, worker_id 128, lease_token 128, error message 8 KiB / type 128 / details 64 KiB) | INVALID_ARGUMENT, field + limit |
//! | queue empty, or with `:` `{` `}` NUL space (ids may hold all of these: `validation.rs`) | INVALID_ARGUMENT |
//! | job_id / lease_token empty where required, more than 64 metadata entries, empty metadata key | INVALID_ARGUMENT |
//! | durations negative, nanos out of range, past their cap (delay 365 d, timeout / backoff 7 d, ExtendLease 1 s..1 h) | INVALID_ARGUMENT |
//! | numbers out of range (priority ±1000, max_attempts 1..1000, page_size 0..1000, credits 1..10000) | INVALID_ARGUMENT |
//! | unknown enum values (backoff kind, disposition, dead reason filter) | INVALID_ARGUMENT |
//! | payload over --max-payload-bytes, more than 1000 jobs in a batch or ids in a Replay / Delete | RESOURCE_EXHAUSTED, field + limit |
//! | EnqueueBatch of 0 jobs | INVALID_ARGUMENT |
//! | a message over tonic's 4 MiB decode limit | OUT_OF_RANGE (tonic's framing check) |
//! | malformed UTF-8 in a string field | INTERNAL (tonic's decode error, as the gRPC status-code guide prescribes for unparsable requests), naming the message and field |
//! | Ack / Fail / ExtendLease of an unknown job | NOT_FOUND |
//! | Ack twice, Fail after Ack, a stale token | FAILED_PRECONDITION (LEASE_LOST) |
//! | Replay / Delete with neither or both of ids and filter, GetDeadLetter of a live job | INVALID_ARGUMENT / NOT_FOUND |

use std::future::Future;
use std::time::Duration;

use jobwire::pb;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::Code;
use tonic_types::StatusExt;

use crate::harness::*;

/// Every key and its DUMP: equal snapshots mean nothing changed.
async fn snapshot(redis: &TestRedis) -> Vec<(String, Vec<u8>)> {
    let mut c = redis.conn().await;
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut c)
        .await
        .expect("keys");
    keys.sort();
    let mut out = Vec::new();
    for k in keys {
        let v: Vec<u8> = redis::cmd("DUMP")
            .arg(&k)
            .query_async(&mut c)
            .await
            .expect("dump");
        out.push((k, v));
    }
    out
}

/// Runs `call`, expecting `code`; when `field` is not empty, the field violation (or the
/// message) names it, and the message contains `limit` when given. Redis must not change.
async fn refuse<T: std::fmt::Debug>(
    redis: &TestRedis,
    what: &str,
    code: Code,
    field: &str,
    limit: &str,
    call: impl Future<Output = Result<T, tonic::Status>>,
) {
    let before = snapshot(redis).await;
    let s = call.await.expect_err(what);
    assert_eq!(s.code(), code, "{what}: {}", s.message());
    if !field.is_empty() {
        let violation = s
            .get_error_details()
            .bad_request()
            .and_then(|b| b.field_violations.first().map(|v| v.field.clone()))
            .unwrap_or_default();
        assert!(
            violation == field || s.message().contains(field),
            "{what}: names {field}: {violation:?} / {}",
            s.message()
        );
    }
    assert!(
        s.message().contains(limit),
        "{what}: says the limit {limit}: {}",
        s.message()
    );
    assert_eq!(
        snapshot(redis).await,
        before,
        "{what}: nothing changed in redis"
    );
}

fn dur(seconds: i64, nanos: i32) -> Option<prost_types::Duration> {
    Some(prost_types::Duration { seconds, nanos })
}

fn with(f: impl FnOnce(&mut pb::JobSpec)) -> pb::EnqueueRequest {
    let mut s = spec("bad", "x");
    f(&mut s);
    pb::EnqueueRequest { job: Some(s) }
}

/// Sends raw protobuf bytes (for what the generated client cannot express).
#[derive(Clone, Default)]
struct Raw;
struct RawEnc;
struct RawDec;
impl Codec for Raw {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawEnc;
    type Decoder = RawDec;
    fn encoder(&mut self) -> RawEnc {
        RawEnc
    }
    fn decoder(&mut self) -> RawDec {
        RawDec
    }
}
impl Encoder for RawEnc {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        use bytes::BufMut;
        dst.put_slice(&item);
        Ok(())
    }
}
impl Decoder for RawDec {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, tonic::Status> {
        use bytes::Buf;
        Ok(Some(src.copy_to_bytes(src.remaining()).to_vec()))
    }
}

async fn raw_call(
    app: &TestApp,
    path: &'static str,
    body: Vec<u8>,
) -> Result<Vec<u8>, tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(app.channel.clone());
    grpc.ready()
        .await
        .map_err(|e| tonic::Status::unknown(e.to_string()))?;
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(path);
    grpc.unary(tonic::Request::new(body), path, Raw)
        .await
        .map(|r| r.into_inner())
}

/// A length-delimited protobuf field (tags and lengths under 128 only).
fn field(tag: u8, bytes: &[u8]) -> Vec<u8> {
    assert!(bytes.len() < 128);
    let mut v = vec![(tag << 3) | 2, bytes.len() as u8];
    v.extend_from_slice(bytes);
    v
}

#[tokio::test]
async fn every_rpc_refuses_bad_fields_and_changes_nothing() {
    let (redis, app) = TestApp::with_redis().await;
    let r = &redis;
    // Some state that refusals must leave alone: a completed, a leased and a dead job.
    enqueue(&app, spec("bad", "done")).await;
    enqueue(&app, spec("bad", "held")).await;
    enqueue(
        &app,
        pb::JobSpec {
            max_attempts: Some(1),
            ..spec("bad", "dead")
        },
    )
    .await;
    let mut w = TestWorker::open(&app, &["bad"], 3, "w").await;
    let mut leases = Vec::new();
    for _ in 0..3 {
        let l = w.lease().await;
        leases.push((l.job.clone().expect("job").job_id, l));
    }
    let token = |id: &str| {
        leases
            .iter()
            .find(|(j, _)| j == id)
            .expect("leased")
            .1
            .clone()
    };
    let (done, held, dead) = (token("done"), token("held"), token("dead"));
    assert_eq!(w.ack(&done).await.code, 0);
    assert_eq!(
        w.fail(&dead, pb::FailDisposition::NoRetry, "x", "x", None)
            .await
            .code,
        0
    );

    let jobs = app.jobs();
    let e = |req: pb::EnqueueRequest| {
        let mut j = jobs.clone();
        async move { j.enqueue(req).await }
    };
    use Code::{FailedPrecondition as Fp, InvalidArgument as Ia, NotFound as Nf};
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

    let mut wk = app.workers();
    let ack = |id: &str, t: &str| pb::AckRequest {
        queue: "bad".into(),
        job_id: id.into(),
        lease_token: t.into(),
    };
    refuse(
        r,
        "Ack twice",
        Fp,
        "",
        "",
        wk.ack(ack("done", &done.lease_token)),
    )
    .await;
    refuse(
        r,
        "Ack stale token",
        Fp,
        "",
        "",
        wk.ack(ack("held", "not-the-token")),
    )
    .await;
    refuse(
        r,
        "Ack token too long",
        Ia,
        "lease_token",
        "128",
        wk.ack(ack("held", &"t".repeat(129))),
    )
    .await;
    refuse(r, "Ack unknown job", Nf, "", "", wk.ack(ack("nope", "t"))).await;
    refuse(
        r,
        "Ack empty job id",
        Ia,
        "job_id",
        "",
        wk.ack(ack("", "t")),
    )
    .await;
    let fail = |id: &str, t: &str, error: pb::JobError, retry_after| pb::FailRequest {
        queue: "bad".into(),
        job_id: id.into(),
        lease_token: t.into(),
        disposition: 1,
        error: Some(error),
        retry_after,
    };
    let err = |m: usize, t: usize, d: usize| pb::JobError {
        message: "m".repeat(m),
        error_type: "t".repeat(t),
        details: "d".repeat(d),
    };
    refuse(
        r,
        "Fail after Ack",
        Fp,
        "",
        "",
        wk.fail(fail("done", &done.lease_token, err(1, 1, 1), None)),
    )
    .await;
    refuse(
        r,
        "Fail message too long",
        Ia,
        "error.message",
        "8192",
        wk.fail(fail("held", &held.lease_token, err(8193, 1, 1), None)),
    )
    .await;
    refuse(
        r,
        "Fail type too long",
        Ia,
        "error.error_type",
        "128",
        wk.fail(fail("held", &held.lease_token, err(1, 129, 1), None)),
    )
    .await;
    refuse(
        r,
        "Fail details too long",
        Ia,
        "error.details",
        "65536",
        wk.fail(fail("held", &held.lease_token, err(1, 1, 65537), None)),
    )
    .await;
    refuse(
        r,
        "Fail retry_after negative",
        Ia,
        "retry_after",
        "",
        wk.fail(fail("held", &held.lease_token, err(1, 1, 1), dur(-1, 0))),
    )
    .await;
    refuse(
        r,
        "Fail retry_after huge",
        Ia,
        "retry_after",
        "",
        wk.fail(fail(
            "held",
            &held.lease_token,
            err(1, 1, 1),
            dur(30 * 86_400, 0),
        )),
    )
    .await;
    refuse(
        r,
        "Fail unknown job",
        Nf,
        "",
        "",
        wk.fail(fail("nope", "t", err(1, 1, 1), None)),
    )
    .await;
    let extend = |t: &str, d| pb::ExtendLeaseRequest {
        queue: "bad".into(),
        job_id: "held".into(),
        lease_token: t.into(),
        lease_duration: d,
    };
    refuse(
        r,
        "ExtendLease 0 s",
        Ia,
        "lease_duration",
        "1 s",
        wk.extend_lease(extend(&held.lease_token, dur(0, 1))),
    )
    .await;
    refuse(
        r,
        "ExtendLease negative",
        Ia,
        "lease_duration",
        "",
        wk.extend_lease(extend(&held.lease_token, dur(-10, 0))),
    )
    .await;
    refuse(
        r,
        "ExtendLease stale token",
        Fp,
        "",
        "",
        wk.extend_lease(extend("stale", None)),
    )
    .await;
    refuse(
        r,
        "ExtendLease of a completed job",
        Fp,
        "",
        "",
        wk.extend_lease(pb::ExtendLeaseRequest {
            job_id: "done".into(),
            ..extend(&done.lease_token, None)
        }),
    )
    .await;

    let mut d = app.dead();
    refuse(
        r,
        "page_size negative",
        Ia,
        "page_size",
        "1000",
        d.list_dead_letters(pb::ListDeadLettersRequest {
            queue: "bad".into(),
            page_size: -1,
            ..Default::default()
        }),
    )
    .await;
    let filter = pb::DeadLetterFilter {
        reason: 99,
        ..Default::default()
    };
    refuse(
        r,
        "filter reason 99",
        Ia,
        "filter.reason",
        "",
        d.list_dead_letters(pb::ListDeadLettersRequest {
            queue: "bad".into(),
            filter: Some(filter.clone()),
            ..Default::default()
        }),
    )
    .await;
    refuse(
        r,
        "GetDeadLetter of a live job",
        Nf,
        "",
        "",
        d.get_dead_letter(pb::GetDeadLetterRequest {
            queue: "bad".into(),
            job_id: "held".into(),
        }),
    )
    .await;
    refuse(
        r,
        "Replay with ids and filter",
        Ia,
        "",
        "",
        d.replay_dead_letters(pb::ReplayDeadLettersRequest {
            queue: "bad".into(),
            job_ids: vec!["dead".into()],
            filter: Some(pb::DeadLetterFilter::default()),
        }),
    )
    .await;
    refuse(
        r,
        "Replay 1001 ids",
        Code::ResourceExhausted,
        "job_ids",
        "1000",
        d.replay_dead_letters(pb::ReplayDeadLettersRequest {
            queue: "bad".into(),
            job_ids: vec!["x".into(); 1001],
            filter: None,
        }),
    )
    .await;
    refuse(
        r,
        "Replay an empty id",
        Ia,
        "job_ids",
        "",
        d.replay_dead_letters(pb::ReplayDeadLettersRequest {
            queue: "bad".into(),
            job_ids: vec![String::new()],
            filter: None,
        }),
    )
    .await;
    refuse(
        r,
        "Delete with neither",
        Ia,
        "",
        "",
        d.delete_dead_letters(pb::DeleteDeadLettersRequest {
            queue: "bad".into(),
            ..Default::default()
        }),
    )
    .await;
    refuse(
        r,
        "Delete bad queue",
        Ia,
        "queue",
        "",
        d.delete_dead_letters(pb::DeleteDeadLettersRequest {
            queue: "{bad}".into(),
            job_ids: vec!["dead".into()],
            filter: None,
        }),
    )
    .await;

    // What the generated client cannot send: malformed UTF-8 and an oversized message.
    let spec_bytes = [field(1, b"\xff\xfe"), field(3, b"n")].concat();
    refuse(
        r,
        "malformed UTF-8 queue",
        Code::Internal,
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
        Code::Internal,
        "AckRequest.job_id",
        "UTF-8",
        raw_call(&app, "/jobwire.v1.WorkerService/Ack", ack_bytes),
    )
    .await;
    refuse(
        r,
        "a 5 MB message",
        Code::OutOfRange,
        "",
        "4194304",
        e(with(|s| s.payload = vec![0; 5_000_000])),
    )
    .await;

    // The held lease is still intact after all of it.
    assert!(w.heartbeat_for(Duration::from_millis(10)).await.is_empty());
    assert_eq!(w.ack(&held).await.code, 0);
}
