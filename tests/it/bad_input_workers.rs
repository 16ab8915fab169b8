//! Bad input to WorkerService and DeadLetterService (the table is in `bad_input.rs`).

use std::time::Duration;

use jobwire::pb;
use tonic::Code;

use crate::harness::*;
use crate::refusal::*;

#[tokio::test]
async fn worker_and_dead_letter_services_refuse_bad_input_and_change_nothing() {
    use Code::{FailedPrecondition as Fp, InvalidArgument as Ia, NotFound as Nf};
    let (redis, app) = TestApp::with_redis().await;
    let r = &redis;
    let (mut w, done, held, _dead) = some_state(&redis, &app).await;
    let mut wk = app.workers();
    let ack = |id: &str, t: &str| pb::AckRequest {
        result: Vec::new(),
        queue: "bad".into(),
        job_id: id.into(),
        lease_token: t.into(),
    };
    // (Ack twice with the same token answers OK: idempotent, see lost_replies.rs.)
    refuse(
        r,
        "Ack a completed job with another lease's token",
        Fp,
        "",
        "",
        wk.ack(ack("done", &held.lease_token)),
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
        pause_group: false,
        queue: "bad".into(),
        job_id: id.into(),
        lease_token: t.into(),
        disposition: 1,
        error: Some(error),
        retry_after,
        pause_queue: false,
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
        "Fail type too long",
        Ia,
        "error.error_type",
        "128",
        wk.fail(fail("held", &held.lease_token, err(1, 129, 1), None)),
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

    // The held lease is still intact after all of it.
    assert!(w.heartbeat_for(Duration::from_millis(10)).await.is_empty());
    assert_eq!(w.ack(&held).await.code, 0);
}
