//! FAIL_DISPOSITION_RELEASE: a worker stopping before its handler finished hands the job back
//! uncharged (issue 32 item 10), fenced by the lease token like any settle.

use std::time::Duration;

use jobwire::pb;
use pb::FailDisposition as D;

use crate::cancel::{cancel, set_grace};
use crate::harness::*;

fn release_request(l: &pb::Lease) -> pb::FailRequest {
    let job = l.job.as_ref().expect("job");
    pb::FailRequest {
        queue: job.queue.clone(),
        job_id: job.job_id.clone(),
        lease_token: l.lease_token.clone(),
        disposition: D::Release as i32,
        error: Some(pb::JobError {
            message: "the worker shut down before the job finished".into(),
            error_type: "worker_shutdown".into(),
            details: String::new(),
        }),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_released_job_is_back_uncharged_and_never_dead_lettered() {
    let (_redis, app) = TestApp::with_redis().await;
    enqueue(
        &app,
        pb::JobSpec {
            max_attempts: Some(1),
            ..spec("rel", "j")
        },
    )
    .await;
    let mut w = TestWorker::open(&app, &["rel"], 1, "w").await;
    let first = w.lease().await;
    assert_eq!(first.attempt, 1);
    let s = w
        .fail(&first, D::Release, "shutting down", "worker_shutdown", None)
        .await;
    assert_eq!(
        (s.code, s.state),
        (0, pb::JobState::Waiting as i32),
        "{s:?}"
    );
    // Back to waiting uncharged, or (the stream's credit came back with the Settled)
    // leased again as attempt 1.
    let job = get_job(&app, "rel", "j").await;
    let state = (
        pb::JobState::try_from(job.state).expect("state"),
        job.attempts_made,
    );
    assert!(
        matches!(
            state,
            (pb::JobState::Waiting, 0) | (pb::JobState::Active, 1)
        ),
        "{state:?}"
    );
    assert!(job.errors.is_empty(), "no error recorded: {:?}", job.errors);

    // Repeated with the applied token (its reply was lost): the first outcome, no change.
    let again = app
        .workers()
        .fail(release_request(&first))
        .await
        .expect("a repeated release answers OK")
        .into_inner();
    assert_eq!(again.state, pb::JobState::Waiting as i32);

    let second = w.lease().await;
    assert_eq!(second.attempt, 1, "leased again as attempt 1");
    // A token that is not the current one: refused, and the live lease is untouched.
    let stale = app
        .workers()
        .fail(pb::FailRequest {
            lease_token: "not-the-current-token".into(),
            ..release_request(&second)
        })
        .await
        .expect_err("a stale token is refused");
    assert_eq!(stale.code(), tonic::Code::FailedPrecondition, "{stale:?}");
    assert_eq!(w.ack(&second).await.code, 0);
    let job = get_job(&app, "rel", "j").await;
    assert_eq!(job.state, pb::JobState::Completed as i32);
    assert_eq!(job.attempts_made, 1);
}

#[tokio::test]
async fn release_refuses_a_retry_after_and_changes_nothing() {
    let (_redis, app) = TestApp::with_redis().await;
    enqueue(&app, spec("rel-bad", "j")).await;
    let mut w = TestWorker::open(&app, &["rel-bad"], 1, "w").await;
    let l = w.lease().await;
    let err = app
        .workers()
        .fail(pb::FailRequest {
            retry_after: Some(ms(Duration::from_secs(1))),
            ..release_request(&l)
        })
        .await
        .expect_err("retry_after with RELEASE");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("retry_after"), "{err:?}");
    let job = get_job(&app, "rel-bad", "j").await;
    assert_eq!(job.state, pb::JobState::Active as i32);
    assert_eq!(w.ack(&l).await.code, 0);
}

#[tokio::test]
async fn a_released_job_whose_cancel_is_pending_ends_cancelled() {
    let (_redis, app) = TestApp::with_redis().await;
    let q = "rel-cx";
    set_grace(&app, q, Duration::from_secs(20)).await;
    enqueue(&app, spec(q, "j")).await;
    let mut w = TestWorker::open(&app, &[q], 1, "w").await;
    let l = w.lease().await;
    cancel(&app, q, "j", "stop").await.expect("cancel");
    w.cancel_within(Duration::from_secs(5))
        .await
        .expect("the cancel reaches the stream");
    let s = w
        .fail(&l, D::Release, "shutting down", "worker_shutdown", None)
        .await;
    assert_eq!(
        (s.code, s.state),
        (0, pb::JobState::Cancelled as i32),
        "{s:?}"
    );
    let job = get_job(&app, q, "j").await;
    assert_eq!(job.state, pb::JobState::Cancelled as i32);
    assert!(w.lease_within(Duration::from_millis(300)).await.is_none());
}
