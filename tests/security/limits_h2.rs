//! HTTP/2 abuse limits of the gRPC port, driven by a raw client that ignores them:
//! `--max-concurrent-streams` (advertised and enforced), rapid reset (CVE-2023-44487,
//! `--http2-max-pending-reset-streams`), MadeYouReset (CVE-2025-8671,
//! `--http2-max-local-error-reset-streams`) and `--max-connection-age` (GOAWAY). Each flood
//! ends its own connection only: a well-behaved client on another one keeps working.

use std::time::Duration;

use jobwire::config::ServeArgs;

use crate::h2raw::{self, Frame, RawH2};
use crate::harness::*;

const HEALTH: &str = "/grpc.health.v1.Health/Check";
const SUBSCRIBE: &str = "/jobwire.v1.WorkerService/Subscribe";

async fn app(tune: impl FnOnce(&mut ServeArgs)) -> (TestRedis, TestApp) {
    let redis = TestRedis::start().await;
    let mut cfg = test_config(&redis.url);
    tune(&mut cfg);
    let app = TestApp::spawn(cfg).await;
    (redis, app)
}

/// A unary call on the harness's own connection still works.
async fn others_still_served(app: &TestApp) {
    let r = app
        .jobs()
        .get_job(jobwire::pb::GetJobRequest {
            queue: "q".into(),
            job_id: "nope".into(),
        })
        .await
        .expect_err("no such job");
    assert_eq!(r.code(), tonic::Code::NotFound, "{r:?}");
}

#[tokio::test]
async fn the_stream_limit_is_advertised_and_a_stream_past_it_is_refused() {
    let (_redis, app) = app(|c| {
        c.abuse.max_concurrent_streams = 4;
        c.abuse.max_streams_per_connection = 4;
    })
    .await;
    let mut c = RawH2::connect(app.grpc).await;
    assert_eq!(c.max_concurrent_streams, Some(4), "SETTINGS advertise it");
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(c.open(SUBSCRIBE).await);
    }
    let fifth = c.open(SUBSCRIBE).await;
    let refusal = loop {
        match c.next_frame(Duration::from_secs(5)).await {
            Some(Frame::RstStream { stream, code }) => break (stream, code),
            Some(_) => {}
            None => panic!("the fifth stream was not refused"),
        }
    };
    assert_eq!(refusal, (fifth, h2raw::REFUSED_STREAM));

    // One stream ends: a new one is served (a whole health check, answered with HEADERS).
    assert!(c.write(&RawH2::reset_frame(held[0], h2raw::CANCEL)).await);
    let next = c.unary_empty(HEALTH).await;
    loop {
        match c.next_frame(Duration::from_secs(5)).await {
            Some(Frame::Headers { stream }) if stream == next => break,
            Some(Frame::RstStream { stream, code }) if stream == next => {
                panic!("refused after a place came free: code {code}")
            }
            Some(_) => {}
            None => panic!("no answer on the new stream"),
        }
    }
    others_still_served(&app).await;
}

#[tokio::test]
async fn the_default_stream_limit_is_advertised() {
    let (_redis, app) = app(|_| {}).await;
    let c = RawH2::connect(app.grpc).await;
    assert_eq!(
        c.max_concurrent_streams,
        Some(100),
        "tonic alone would advertise no limit"
    );
}

/// Opens and at once resets `n` streams in one write, like the rapid reset attack.
async fn rapid_reset(c: &mut RawH2, n: usize) {
    let mut flood = Vec::new();
    for _ in 0..n {
        let (id, f) = c.open_frame(HEALTH, false);
        flood.extend(f);
        flood.extend(RawH2::reset_frame(id, h2raw::CANCEL));
    }
    // The server may close the connection before it has read everything.
    let _ = c.write(&flood).await;
}

#[tokio::test]
async fn a_rapid_reset_flood_gets_goaway_and_other_connections_keep_working() {
    let (_redis, app) = app(|_| {}).await;
    let mut c = RawH2::connect(app.grpc).await;
    rapid_reset(&mut c, 2000).await;
    let (goaway, _) = c.until_goaway(Duration::from_secs(10)).await;
    match goaway {
        Some(Frame::GoAway { code, debug, .. }) => {
            assert_eq!(code, h2raw::ENHANCE_YOUR_CALM, "{debug}");
        }
        other => panic!("no GOAWAY after the flood: {other:?}"),
    }
    assert!(c.closed_within(Duration::from_secs(5)).await, "closed");
    others_still_served(&app).await;
}

#[tokio::test]
async fn the_pending_reset_limit_follows_its_flag() {
    // A limit far above the flood: the same flood is served to the end.
    let (_redis, app) = app(|c| c.abuse.http2_max_pending_reset_streams = 10_000).await;
    let mut c = RawH2::connect(app.grpc).await;
    rapid_reset(&mut c, 2000).await;
    let (goaway, _) = c.until_goaway(Duration::from_secs(3)).await;
    assert_eq!(goaway, None, "no GOAWAY below the flag's limit");
}

/// Opens streams and makes the server reset each: a WINDOW_UPDATE that overflows the
/// stream's send window is a stream error (FLOW_CONTROL_ERROR), one of MadeYouReset's.
async fn made_you_reset(c: &mut RawH2, n: usize) {
    let mut flood = Vec::new();
    for _ in 0..n {
        let (id, f) = c.open_frame(HEALTH, false);
        flood.extend(f);
        flood.extend(RawH2::window_update_frame(id, 0x7fff_ffff));
    }
    let _ = c.write(&flood).await;
}

#[tokio::test]
async fn a_made_you_reset_flood_gets_goaway_at_the_default_limit() {
    let (_redis, app) = app(|_| {}).await;
    let mut c = RawH2::connect(app.grpc).await;
    made_you_reset(&mut c, 1100).await;
    let (goaway, seen) = c.until_goaway(Duration::from_secs(10)).await;
    let resets = seen
        .iter()
        .filter(|f| matches!(f, Frame::RstStream { .. }))
        .count();
    match goaway {
        Some(Frame::GoAway { code, debug, .. }) => {
            assert_eq!(code, h2raw::ENHANCE_YOUR_CALM, "{debug}");
        }
        other => panic!("no GOAWAY after {resets} server resets: {other:?}"),
    }
    assert!(resets <= 1024, "{resets} resets before the GOAWAY");
    others_still_served(&app).await;
}

#[tokio::test]
async fn the_local_error_reset_limit_follows_its_flag() {
    let (_redis, app) = app(|c| c.abuse.http2_max_local_error_reset_streams = 10).await;
    let mut c = RawH2::connect(app.grpc).await;
    made_you_reset(&mut c, 50).await;
    let (goaway, seen) = c.until_goaway(Duration::from_secs(10)).await;
    assert!(
        matches!(goaway, Some(Frame::GoAway { code, .. }) if code == h2raw::ENHANCE_YOUR_CALM),
        "{goaway:?}"
    );
    let resets = seen
        .iter()
        .filter(|f| matches!(f, Frame::RstStream { .. }))
        .count();
    assert!(resets <= 10, "{resets} resets before the GOAWAY");
}

#[tokio::test]
async fn a_connection_past_its_age_gets_goaway_and_a_new_one_works() {
    let (_redis, app) = app(|c| c.abuse.max_connection_age = Duration::from_secs(1)).await;
    let mut c = RawH2::connect(app.grpc).await;
    let (goaway, _) = c.until_goaway(Duration::from_secs(10)).await;
    assert!(
        matches!(goaway, Some(Frame::GoAway { code, .. }) if code == h2raw::NO_ERROR),
        "{goaway:?}"
    );
    assert!(
        c.closed_within(Duration::from_secs(5)).await,
        "a connection without streams closes after its GOAWAY"
    );
    // A fresh connection is served (tonic's channel reconnects the same way).
    let mut fresh = RawH2::connect(app.grpc).await;
    let id = fresh.unary_empty(HEALTH).await;
    loop {
        match fresh.next_frame(Duration::from_secs(5)).await {
            Some(Frame::Headers { stream }) if stream == id => break,
            Some(Frame::GoAway { .. }) | None => panic!("the new connection is not served"),
            Some(_) => {}
        }
    }
}
