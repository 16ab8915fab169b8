//! A worker stream on a connection past `--max-connection-age`: it is sent `Draining` with
//! the grace, gets no new leases, may still ack, and after `--max-connection-age-grace` the
//! leases it holds go back to waiting without using an attempt and the stream ends with
//! UNAVAILABLE (STREAM_CLOSED), so the worker reconnects (on a new connection: the old one
//! had its GOAWAY).

use std::time::Duration;

use jobwire::pb;
use pb::subscribe_response::Message as Out;
use tonic_types::StatusExt;

use crate::harness::*;
use crate::limits_streams::new_channel;

const AGE: Duration = Duration::from_secs(2);
const GRACE: Duration = Duration::from_secs(2);

#[tokio::test]
async fn a_stream_past_its_connection_age_drains_then_hands_back_what_it_holds() {
    let redis = TestRedis::start().await;
    let mut cfg = test_config(&redis.url);
    cfg.abuse.max_connection_age = AGE;
    cfg.abuse.max_connection_age_grace = GRACE;
    let app = TestApp::spawn(cfg).await;
    for id in ["a", "b", "c"] {
        enqueue(&app, spec("aged", id)).await;
    }
    let channel = new_channel(&app).await;
    let mut w = TestWorker::open_on(channel, &["aged"], 2, "aging").await;
    let first = w.lease().await;
    let kept = w.lease().await;

    // Draining arrives with the grace; acks still land; no new lease comes.
    let grace = loop {
        match w.recv(AGE * 5).await {
            Recv::Msg(Out::Draining(d)) => break d.grace.expect("grace"),
            Recv::Msg(Out::Lease(l)) => panic!("a lease past the age: {l:?}"),
            Recv::Msg(_) => continue,
            other => panic!("no Draining: {other:?}"),
        }
    };
    assert_eq!(grace, ms(GRACE));
    assert_eq!(w.ack(&first).await.code, 0, "an ack in the grace lands");

    // After the grace the stream ends; the job it kept is handed back uncharged.
    let end = loop {
        match w.recv(GRACE * 5).await {
            Recv::Msg(Out::Lease(l)) => panic!("a lease while draining: {l:?}"),
            Recv::Msg(_) => continue,
            other => break other,
        }
    };
    let Recv::Error(s) = end else {
        panic!("the stream did not end: {end:?}")
    };
    assert_eq!(s.code(), tonic::Code::Unavailable, "{s:?}");
    assert_eq!(
        s.get_error_details().error_info().map(|i| i.reason.clone()),
        Some("STREAM_CLOSED".to_owned())
    );
    assert!(
        s.message().contains("--max-connection-age"),
        "{}",
        s.message()
    );
    let kept_id = kept.job.as_ref().expect("job").job_id.clone();
    let job = get_job(&app, "aged", &kept_id).await;
    assert_eq!(job.state, pb::JobState::Waiting as i32);
    assert!(
        job.errors.is_empty(),
        "no attempt charged: {:?}",
        job.errors
    );

    // A worker on a new connection gets the rest, the kept job as a first attempt.
    let mut fresh = TestWorker::open_on(new_channel(&app).await, &["aged"], 2, "fresh").await;
    let mut ids = Vec::new();
    for _ in 0..2 {
        let l = fresh.lease().await;
        let id = l.job.as_ref().expect("job").job_id.clone();
        if id == kept_id {
            assert_eq!(l.attempt, 1, "the hand-back used no attempt");
        }
        ids.push(id);
        assert_eq!(fresh.ack(&l).await.code, 0);
    }
    ids.sort();
    let mut want = vec!["a", "b", "c"];
    want.retain(|i| *i != first.job.as_ref().expect("job").job_id);
    assert_eq!(ids, want);
}

/// An ack sent in the grace gets its Settled before the stream ends, even when Redis is
/// slow to apply it: the stream ends once nothing is held and no settle is in flight (the
/// book gives a lease's credit back when its ack is read, before the script runs).
#[tokio::test]
async fn an_ack_in_flight_at_the_age_is_answered_before_the_stream_ends() {
    let redis = TestRedis::start().await;
    let mut cfg = test_config(&redis.url);
    cfg.abuse.max_connection_age = AGE;
    cfg.abuse.max_connection_age_grace = GRACE;
    let app = TestApp::spawn(cfg).await;
    enqueue(&app, spec("aged-slow", "a")).await;
    let mut w = TestWorker::open_on(new_channel(&app).await, &["aged-slow"], 1, "aging").await;
    let held = w.lease().await;
    w.until_draining(AGE * 5).await;
    // Writes wait 600 ms in Redis: the ack is in flight for 12 looks of the drain (every
    // 50 ms), well within the grace.
    redis.pause_writes(600).await;
    assert_eq!(w.ack(&held).await.code, 0, "the ack in flight is answered");
    let job = get_job(&app, "aged-slow", "a").await;
    assert_eq!(job.state, pb::JobState::Completed as i32);
}
