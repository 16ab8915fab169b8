//! The dead-letter queue: listing with paging and filters, get, replay (by ids and by
//! filter, idempotent), delete.

use std::time::Duration;

use jobwire::pb;
use pb::FailDisposition as D;

use crate::harness::*;

/// Dead-letters `id` with one failed attempt of the given disposition and error.
async fn kill(
    app: &TestApp,
    w: &mut TestWorker,
    queue: &str,
    id: &str,
    name: &str,
    error_type: &str,
    message: &str,
) {
    enqueue(
        app,
        pb::JobSpec {
            name: name.into(),
            max_attempts: Some(1),
            ..spec(queue, id)
        },
    )
    .await;
    let l = w.lease().await;
    assert_eq!(l.job.as_ref().expect("job").job_id, id);
    let s = w.fail(&l, D::Retry, message, error_type, None).await;
    assert_eq!(s.state, pb::JobState::Dead as i32);
}

async fn list(
    app: &TestApp,
    queue: &str,
    page_size: i32,
    token: &str,
    filter: Option<pb::DeadLetterFilter>,
) -> pb::ListDeadLettersResponse {
    app.dead()
        .list_dead_letters(pb::ListDeadLettersRequest {
            queue: queue.into(),
            page_size,
            page_token: token.into(),
            filter,
        })
        .await
        .expect("list")
        .into_inner()
}

#[tokio::test]
async fn replay_restores_the_job_under_its_id_with_a_fresh_budget_once() {
    let (_redis, app) = TestApp::with_redis().await;
    enqueue(
        &app,
        pb::JobSpec {
            max_attempts: Some(2),
            ..spec("dl", "signup:7")
        },
    )
    .await;
    let mut w = TestWorker::open(&app, &["dl"], 1, "w").await;
    for _ in 0..2 {
        let l = w.lease().await;
        w.fail(
            &l,
            D::Retry,
            "503 service unavailable",
            "provider_unavailable",
            None,
        )
        .await;
    }
    let dead = app
        .dead()
        .get_dead_letter(pb::GetDeadLetterRequest {
            queue: "dl".into(),
            job_id: "signup:7".into(),
        })
        .await
        .expect("get dead")
        .into_inner()
        .dead_letter
        .expect("dead letter");
    assert_eq!(dead.errors.len(), 2);
    assert_eq!(dead.dead_reason, pb::DeadReason::AttemptsExhausted as i32);
    let key = dead.idempotency_key.clone();

    let r = app
        .dead()
        .replay_dead_letters(pb::ReplayDeadLettersRequest {
            queue: "dl".into(),
            job_ids: vec!["signup:7".into()],
            filter: None,
        })
        .await
        .expect("replay")
        .into_inner();
    assert_eq!(r.replayed_job_ids, ["signup:7"]);
    let l = w.lease().await;
    let job = l.job.clone().expect("job");
    assert_eq!(job.job_id, "signup:7");
    assert_eq!(l.attempt, 1, "a fresh attempt budget");
    assert_eq!(job.replays, 1);
    assert_eq!(
        l.idempotency_key, key,
        "same idempotency key across replays"
    );

    // A second replay while the job is no longer dead does nothing and says so.
    let again = app
        .dead()
        .replay_dead_letters(pb::ReplayDeadLettersRequest {
            queue: "dl".into(),
            job_ids: vec!["signup:7".into()],
            filter: None,
        })
        .await
        .expect("replay")
        .into_inner();
    assert!(again.replayed_job_ids.is_empty());
    assert_eq!(again.skipped_job_ids, ["signup:7"]);
    assert_eq!(w.ack(&l).await.code, 0);
    assert!(
        w.lease_within(Duration::from_millis(300)).await.is_none(),
        "delivered once"
    );
    let e = app
        .dead()
        .get_dead_letter(pb::GetDeadLetterRequest {
            queue: "dl".into(),
            job_id: "signup:7".into(),
        })
        .await
        .expect_err("no longer dead");
    assert_eq!(e.code(), tonic::Code::NotFound);
}

#[tokio::test]
async fn list_pages_and_filters_and_filtered_replay_and_delete() {
    let (_redis, app) = TestApp::with_redis().await;
    let mut w = TestWorker::open(&app, &["f"], 1, "w").await;
    for i in 0..5 {
        kill(
            &app,
            &mut w,
            "f",
            &format!("outage-{i}"),
            "welcome",
            "provider_unavailable",
            "503 service unavailable",
        )
        .await;
    }
    for i in 0..3 {
        kill(
            &app,
            &mut w,
            "f",
            &format!("typo-{i}"),
            "welcome",
            "invalid_address",
            "400 invalid address",
        )
        .await;
    }
    kill(
        &app,
        &mut w,
        "f",
        "invoice-0",
        "invoice",
        "provider_unavailable",
        "503 service unavailable",
    )
    .await;

    // Paging: 9 entries in pages of 4, oldest death first, no repeats.
    let mut seen = Vec::new();
    let mut token = String::new();
    loop {
        let page = list(&app, "f", 4, &token, None).await;
        assert!(page.dead_letters.len() <= 4);
        seen.extend(page.dead_letters.into_iter().map(|j| j.job_id));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(seen.len(), 9);
    assert_eq!(seen[0], "outage-0");
    assert_eq!(seen[8], "invoice-0");

    let filters = [
        (
            pb::DeadLetterFilter {
                error_type: "invalid_address".into(),
                ..Default::default()
            },
            3,
        ),
        (
            pb::DeadLetterFilter {
                job_name: "invoice".into(),
                ..Default::default()
            },
            1,
        ),
        (
            pb::DeadLetterFilter {
                error_message_prefix: "503".into(),
                ..Default::default()
            },
            6,
        ),
        (
            pb::DeadLetterFilter {
                reason: pb::DeadReason::NoRetry as i32,
                ..Default::default()
            },
            0,
        ),
    ];
    for (filter, want) in filters {
        let page = list(&app, "f", 100, "", Some(filter.clone())).await;
        assert_eq!(page.dead_letters.len(), want, "{filter:?}");
    }

    // Replay the welcome outages only.
    let r = app
        .dead()
        .replay_dead_letters(pb::ReplayDeadLettersRequest {
            queue: "f".into(),
            job_ids: vec![],
            filter: Some(pb::DeadLetterFilter {
                job_name: "welcome".into(),
                error_type: "provider_unavailable".into(),
                ..Default::default()
            }),
        })
        .await
        .expect("replay")
        .into_inner();
    assert_eq!(r.replayed_job_ids.len(), 5);
    assert_eq!(list(&app, "f", 100, "", None).await.dead_letters.len(), 4);

    // Delete the typos by filter, then the invoice by id.
    let d = app
        .dead()
        .delete_dead_letters(pb::DeleteDeadLettersRequest {
            queue: "f".into(),
            job_ids: vec![],
            filter: Some(pb::DeadLetterFilter {
                error_message_prefix: "400".into(),
                ..Default::default()
            }),
        })
        .await
        .expect("delete")
        .into_inner();
    assert_eq!(d.deleted_job_ids.len(), 3);
    let d = app
        .dead()
        .delete_dead_letters(pb::DeleteDeadLettersRequest {
            queue: "f".into(),
            job_ids: vec!["invoice-0".into(), "outage-0".into()],
            filter: None,
        })
        .await
        .expect("delete")
        .into_inner();
    assert_eq!(d.deleted_job_ids, ["invoice-0"]);
    assert_eq!(
        d.skipped_job_ids,
        ["outage-0"],
        "outage-0 was replayed, not dead"
    );
    assert!(list(&app, "f", 100, "", None).await.dead_letters.is_empty());
    let e = app
        .jobs()
        .get_job(pb::GetJobRequest {
            queue: "f".into(),
            job_id: "invoice-0".into(),
        })
        .await
        .expect_err("deleted");
    assert_eq!(e.code(), tonic::Code::NotFound);
}
