//! The test helpers themselves: a handler run against a fake lease (no server), and the
//! Fail request each kind of handler error becomes.

use std::time::Duration;

use jobwire_client::testing::{fail_request_for, FakeLease};
use jobwire_client::{pb, Ctx, Job, JobError};

#[derive(serde::Deserialize)]
struct Charge {
    cents: u64,
}

async fn charge(job: Job<Charge>, _ctx: Ctx) -> Result<(), JobError> {
    match job.payload.cents {
        0 => Err(JobError::non_retryable("nothing to charge")),
        c if c > 10_000 && job.attempt < 3 => Err(JobError::retry_after(Duration::from_secs(5))),
        _ => Ok(()),
    }
}

#[tokio::test]
async fn a_fake_lease_runs_a_typed_handler_without_a_server() {
    let zero = FakeLease::json("payments", "charge", &serde_json::json!({"cents": 0}))
        .expect("json")
        .run(charge)
        .await;
    assert_eq!(zero, Err(JobError::non_retryable("nothing to charge")));
    let big = serde_json::json!({"cents": 50_000});
    let early = FakeLease::json("payments", "charge", &big)
        .expect("json")
        .run(charge)
        .await;
    assert!(
        matches!(early, Err(JobError::RetryAfter { .. })),
        "{early:?}"
    );
    let late = FakeLease::json("payments", "charge", &big)
        .expect("json")
        .attempt(3)
        .run(charge)
        .await;
    assert_eq!(late, Ok(()));
    let garbage = FakeLease::new("payments", "charge", b"not json".to_vec())
        .run(charge)
        .await;
    assert!(
        matches!(garbage, Err(JobError::NonRetryable(_))),
        "{garbage:?}"
    );
}

#[tokio::test]
async fn a_cancelled_context_reaches_the_handler() {
    let ctx = Ctx::new("t");
    ctx.cancel.cancel();
    let r = FakeLease::new("q", "n", b"x".to_vec())
        .metadata("k", "v")
        .run_with(
            |job: Job<serde_json::Value>, ctx: Ctx| async move {
                assert_eq!(job.metadata().get("k").map(String::as_str), Some("v"));
                if ctx.cancel.is_cancelled() {
                    return Err(JobError::failed("Cancelled", "stopped early"));
                }
                Ok(())
            },
            ctx,
        )
        .await;
    // "x" is not JSON: the typed handler never runs.
    assert!(matches!(r, Err(JobError::NonRetryable(_))), "{r:?}");
    let ctx = Ctx::new("t");
    ctx.cancel.cancel();
    let r = FakeLease::json("q", "n", &1)
        .expect("json")
        .run_with(
            |_job: Job<u32>, ctx: Ctx| async move {
                if ctx.cancel.is_cancelled() {
                    return Err(JobError::failed("Cancelled", "stopped early"));
                }
                Ok(())
            },
            ctx,
        )
        .await;
    assert_eq!(r, Err(JobError::failed("Cancelled", "stopped early")));
}

#[test]
fn each_error_maps_to_its_disposition() {
    let no = fail_request_for(JobError::non_retryable("bad"));
    assert_eq!(no.disposition, pb::FailDisposition::NoRetry as i32);
    assert!(no.retry_after.is_none());
    assert_eq!(
        no.error.map(|e| e.error_type).as_deref(),
        Some("NonRetryable")
    );

    let later = fail_request_for(JobError::retry_after(Duration::from_millis(1500)));
    assert_eq!(later.disposition, pb::FailDisposition::Retry as i32);
    let d = later.retry_after.expect("retry_after");
    assert_eq!((d.seconds, d.nanos), (1, 500_000_000));
    assert_eq!(
        later.error.map(|e| e.error_type).as_deref(),
        Some("RetryAfter")
    );

    let limited = fail_request_for(JobError::RateLimited {
        delay: Duration::from_secs(2),
        pause_queue: true,
        pause_group: false,
    });
    assert_eq!(limited.disposition, pb::FailDisposition::RateLimited as i32);
    assert!(limited.pause_queue);
    assert_eq!(limited.retry_after.map(|d| d.seconds), Some(2));
    assert_eq!(
        limited.error.map(|e| e.error_type).as_deref(),
        Some("RateLimited")
    );

    let group = fail_request_for(JobError::rate_limited_group(Duration::from_millis(1500)));
    assert_eq!(group.disposition, pb::FailDisposition::RateLimited as i32);
    assert!(group.pause_group && !group.pause_queue);
    let d = group.retry_after.expect("retry_after");
    assert_eq!((d.seconds, d.nanos), (1, 500_000_000));

    let cancelled = fail_request_for(JobError::cancelled("customer left"));
    assert_eq!(cancelled.disposition, pb::FailDisposition::NoRetry as i32);
    let e = cancelled.error.expect("error");
    assert_eq!(
        (e.error_type.as_str(), e.message.as_str()),
        ("cancelled", "customer left")
    );

    let other = fail_request_for(JobError::failed("x".repeat(300), "m"));
    assert_eq!(other.disposition, pb::FailDisposition::Retry as i32);
    let e = other.error.expect("error");
    assert_eq!(e.error_type.len(), 128, "cut to the server's limit");
}

#[tokio::test]
async fn a_fake_lease_records_reports_and_the_result_and_shows_the_checkpoint() {
    let mut lease = FakeLease::json("q", "n", &serde_json::json!({})).expect("json");
    if let Some(j) = lease.lease.job.as_mut() {
        j.checkpoint = b"step-3".to_vec();
        j.group_key = "acme".into();
    }
    let ctx = Ctx::new("test-worker");
    let r = lease
        .run_with(
            |job: Job<serde_json::Value>, ctx: Ctx| async move {
                assert_eq!(job.checkpoint(), Some(&b"step-3"[..]));
                assert_eq!(job.group_key(), "acme");
                ctx.progress(60, "half").await.expect("recorded");
                ctx.save_checkpoint(b"step-4".to_vec())
                    .await
                    .expect("recorded");
                ctx.set_result(b"ok".to_vec());
                Ok(())
            },
            ctx.clone(),
        )
        .await;
    assert_eq!(r, Ok(()));
    assert_eq!(ctx.result().as_deref(), Some(&b"ok"[..]));
    let reports = ctx.reports();
    assert_eq!(reports.len(), 2);
    assert_eq!(
        (reports[0].progress, reports[0].message.as_deref()),
        (Some(60), Some("half"))
    );
    assert_eq!(reports[1].checkpoint.as_deref(), Some(&b"step-4"[..]));
}

#[tokio::test]
async fn cancel_with_keeps_the_first_cause() {
    use jobwire_client::CancelCause;
    let ctx = Ctx::new("w");
    assert_eq!(ctx.cancel_cause(), None);
    ctx.cancel_with(CancelCause::JobCancelled {
        reason: "customer left".into(),
        revoke_time: None,
    });
    ctx.cancel_with(CancelCause::Shutdown);
    assert!(ctx.cancel.is_cancelled());
    assert!(ctx.is_job_cancelled());
    assert_eq!(ctx.cancel_error(), JobError::cancelled("customer left"));
}
