//! Helpers of the bad-input suites: a byte-for-byte snapshot of Redis, `refuse` (the call
//! fails with the code, names the field and the limit, and changes nothing), a raw protobuf
//! codec for what the generated client cannot send, and the state refusals must leave alone.

use std::future::Future;

use jobwire::pb;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::Code;
use tonic_types::StatusExt;

use crate::harness::*;

/// Keys that are not job state and change by themselves, whatever a refused call does: the
/// due index's shards are the reaper's schedule (they move in the background after earlier,
/// accepted calls), the readiness probe rewrites `jw:health` every 500 ms
/// (`store/health.rs`), and each replica rewrites its worker-stream report and its entry in
/// `jw:replicas` on a timer (`store/workers.rs`).
fn not_job_state(key: &str) -> bool {
    jobwire::store::DUE_KEYS.contains(&key)
        || key == "jw:health"
        || key == "jw:replicas"
        || key.starts_with("jw:replica:")
}

/// Every key of job state, sorted: all keys but those [`not_job_state`] names.
pub(crate) async fn state_keys(redis: &TestRedis) -> Vec<String> {
    let mut c = redis.conn().await;
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut c)
        .await
        .expect("keys");
    keys.retain(|k| !not_job_state(k));
    keys.sort();
    keys
}

/// Redis byte for byte (DUMP of every key of [`state_keys`]), except the scores of each
/// queue's active set: a live stream renews its leases in the background, which moves their
/// deadlines; the set's members (which jobs are leased) are compared. Callers holding leases
/// wait for their lease calls' confirmation first ([`some_state`]), which is the other
/// background write.
pub(crate) async fn snapshot(redis: &TestRedis) -> Vec<(String, Vec<u8>)> {
    let mut c = redis.conn().await;
    let mut out = Vec::new();
    for k in state_keys(redis).await {
        let v: Vec<u8> = if k.ends_with(":active") {
            let mut ids: Vec<String> = redis::cmd("ZRANGE")
                .arg(&k)
                .arg(0)
                .arg(-1)
                .query_async(&mut c)
                .await
                .expect("zrange");
            ids.sort();
            format!("active members {ids:?}").into_bytes()
        } else {
            redis::cmd("DUMP")
                .arg(&k)
                .query_async(&mut c)
                .await
                .expect("dump")
        };
        out.push((k, v));
    }
    out
}

/// Runs `call`, expecting `code`; when `field` is not empty, the field violation (or the
/// message) names it, and the message contains `limit` when given. Redis must not change.
pub(crate) async fn refuse<T: std::fmt::Debug>(
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

pub(crate) fn dur(seconds: i64, nanos: i32) -> Option<prost_types::Duration> {
    Some(prost_types::Duration { seconds, nanos })
}

pub(crate) fn with(f: impl FnOnce(&mut pb::JobSpec)) -> pb::EnqueueRequest {
    let mut s = spec("bad", "x");
    f(&mut s);
    pb::EnqueueRequest { job: Some(s) }
}

/// Sends raw protobuf bytes (for what the generated client cannot express).
#[derive(Clone, Default)]
pub(crate) struct Raw;
pub(crate) struct RawEnc;
pub(crate) struct RawDec;
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

pub(crate) async fn raw_call(
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
pub(crate) fn field(tag: u8, bytes: &[u8]) -> Vec<u8> {
    assert!(bytes.len() < 128);
    let mut v = vec![(tag << 3) | 2, bytes.len() as u8];
    v.extend_from_slice(bytes);
    v
}

/// A completed, a leased (still held by the returned worker) and a dead job in queue "bad":
/// returns the worker and the leases of (done, held, dead).
pub(crate) async fn some_state(
    redis: &TestRedis,
    app: &TestApp,
) -> (TestWorker, pb::Lease, pb::Lease, pb::Lease) {
    // Some state that refusals must leave alone: a completed, a leased and a dead job.
    enqueue(app, spec("bad", "done")).await;
    enqueue(app, spec("bad", "held")).await;
    enqueue(
        app,
        pb::JobSpec {
            max_attempts: Some(1),
            ..spec("bad", "dead")
        },
    )
    .await;
    let mut w = TestWorker::open(app, &["bad"], 3, "w").await;
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

    // The server confirms delivered lease calls in the background (removing them from the
    // calls set and hash): wait for it, so that it cannot change Redis during a refusal.
    wait_lease_calls_confirmed(&mut redis.conn().await, "bad").await;
    (w, done, held, dead)
}
