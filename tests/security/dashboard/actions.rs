//! Admin actions through the dashboard, each checked through gRPC: replay by filter touches
//! exactly the matching dead jobs (after a confirmation page with their count), delete of
//! selected ids, a dead job's replay, pause/resume, purge with its typed confirmation; the
//! result page shows the audit line the server recorded, and the admin-action counter moves.

use reqwest::StatusCode;

use super::*;
use crate::harness::metric_value;

async fn admin_actions(s: &Secured, action: &str) -> f64 {
    let text = Browser::new(s.app.http).get("/metrics").await.body;
    metric_value(&text, "jobwire_admin_actions_total", &[("action", action)]).unwrap_or(0.0)
}

#[tokio::test]
async fn replay_by_filter_replays_exactly_the_matching_dead_jobs() {
    let ops = ops();
    let s = start(&[&ops], false).await;
    let mut c = s.as_(&ops);
    for id in ["t1", "t2", "t3"] {
        kill(&mut c, "bulk", id, "charge", "timeout", b"{}").await;
    }
    kill(&mut c, "bulk", "b1", "charge", "bad_input", b"{}").await;
    kill(&mut c, "bulk", "t4", "refund", "timeout", b"{}").await;
    let mut b = Browser::new(s.app.http);
    b.login(&ops.token.reveal()).await;

    let page = b
        .get("/ui/queues/bulk/dead?error_type=timeout&job_name=charge")
        .await;
    assert_eq!(page.status, StatusCode::OK);
    for id in ["t1", "t2", "t3"] {
        assert!(
            page.body.contains(&format!(r#"data-job-id="{id}""#)),
            "{id}"
        );
    }
    assert!(!page.body.contains(r#"data-job-id="b1""#));
    assert!(!page.body.contains(r#"data-job-id="t4""#));
    let csrf = page.csrf();
    let filter = [("error_type", "timeout"), ("job_name", "charge")];
    let mut fields = vec![("csrf", csrf.as_str()), ("op", "replay-filter")];
    fields.extend(filter);

    // First the count, and nothing done yet.
    let confirm = b.post("/ui/queues/bulk/dead", &fields).await;
    assert_eq!(confirm.status, StatusCode::OK, "{}", confirm.body);
    assert!(
        confirm.body.contains(r#"id="confirm-count""#) && confirm.body.contains(">3<"),
        "{}",
        confirm.body
    );
    assert!(confirm.body.contains(r#"data-action="confirm""#));
    assert_eq!(state(&mut c, "bulk", "t1").await, pb::JobState::Dead);

    let before = admin_actions(&s, "replay_dead_letters").await;
    fields.push(("confirmed", "1"));
    let done = b.post("/ui/queues/bulk/dead", &fields).await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.body);
    assert!(done.body.contains("Replayed 3 jobs"), "{}", done.body);
    assert!(done.body.contains(r#"id="audit""#), "{}", done.body);
    for part in [
        "principal=ops-oncall",
        "action=replay_dead_letters",
        "queue=bulk",
        "count=3",
    ] {
        assert!(done.body.contains(part), "{part} in {}", done.body);
    }
    assert!(admin_actions(&s, "replay_dead_letters").await >= before + 1.0);
    for id in ["t1", "t2", "t3"] {
        assert_eq!(
            state(&mut c, "bulk", id).await,
            pb::JobState::Waiting,
            "{id}"
        );
    }
    for id in ["b1", "t4"] {
        assert_eq!(state(&mut c, "bulk", id).await, pb::JobState::Dead, "{id}");
    }
}

#[tokio::test]
async fn delete_selected_and_a_dead_jobs_own_replay() {
    let ops = ops();
    let s = start(&[&ops], false).await;
    let mut c = s.as_(&ops);
    for id in ["d1", "d2", "keep", "again"] {
        kill(&mut c, "sel", id, "send", "timeout", b"{}").await;
    }
    let mut b = Browser::new(s.app.http);
    b.login(&ops.token.reveal()).await;
    let page = b.get("/ui/queues/sel/dead").await;
    for a in [
        "replay-selected",
        "delete-selected",
        "replay-filter",
        "delete-filter",
    ] {
        assert!(page.body.contains(&format!(r#"data-action="{a}""#)), "{a}");
    }
    assert!(
        page.body
            .contains(r#"type="checkbox" name="job_id" value="d1""#),
        "{}",
        page.body
    );
    let csrf = page.csrf();
    let mut fields = vec![
        ("csrf", csrf.as_str()),
        ("op", "delete-selected"),
        ("job_id", "d1"),
        ("job_id", "d2"),
    ];
    let confirm = b.post("/ui/queues/sel/dead", &fields).await;
    assert!(
        confirm.body.contains(r#"data-count="2""#),
        "{}",
        confirm.body
    );
    fields.push(("confirmed", "1"));
    let done = b.post("/ui/queues/sel/dead", &fields).await;
    assert!(done.body.contains("Deleted 2 jobs"), "{}", done.body);
    assert!(
        done.body.contains("action=delete_dead_letters"),
        "{}",
        done.body
    );
    for id in ["d1", "d2"] {
        let r = c
            .jobs
            .get_job(pb::GetJobRequest {
                queue: "sel".into(),
                job_id: id.into(),
            })
            .await;
        assert_eq!(
            r.expect_err("deleted").code(),
            tonic::Code::NotFound,
            "{id}"
        );
    }
    assert_eq!(state(&mut c, "sel", "keep").await, pb::JobState::Dead);

    // A dead job's page has replay and delete; replay moves it back to waiting.
    let job = b.get("/ui/queues/sel/jobs/again").await;
    assert!(job.body.contains(r#"data-action="replay""#), "{}", job.body);
    assert!(job.body.contains(r#"data-action="delete""#), "{}", job.body);
    // Each first asks to confirm (count 1), changing nothing.
    for op in ["replay", "delete"] {
        let path = format!("/ui/queues/sel/jobs/again/{op}");
        let ask = b.post(&path, &[("csrf", &csrf)]).await;
        assert_eq!(ask.status, StatusCode::OK, "{}", ask.body);
        assert!(ask.body.contains(r#"data-count="1""#), "{}", ask.body);
        assert!(
            ask.body.contains(r#"data-action="confirm""#),
            "{}",
            ask.body
        );
        assert!(
            ask.body.contains(&format!(r#"action="{path}""#)),
            "{}",
            ask.body
        );
        assert_eq!(state(&mut c, "sel", "again").await, pb::JobState::Dead);
    }
    let done = b
        .post(
            "/ui/queues/sel/jobs/again/replay",
            &[("csrf", &csrf), ("confirmed", "1")],
        )
        .await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.body);
    assert!(done.body.contains("Replayed 1 job "), "{}", done.body);
    assert_eq!(state(&mut c, "sel", "again").await, pb::JobState::Waiting);
    // Not dead any more: no actions on its page.
    let job = b.get("/ui/queues/sel/jobs/again").await;
    assert!(!job.body.contains("data-action"), "{}", job.body);
}

#[tokio::test]
async fn pause_resume_and_purge_with_its_typed_confirmation() {
    let ops = ops();
    let s = start(&[&ops], false).await;
    let mut c = s.as_(&ops);
    for id in ["w1", "w2"] {
        put(&mut c, job("pq", id)).await;
    }
    let mut b = Browser::new(s.app.http);
    b.login(&ops.token.reveal()).await;
    let page = b.get("/ui/queues/pq").await;
    assert!(
        page.body.contains(r#"data-action="pause""#),
        "{}",
        page.body
    );
    assert!(
        page.body.contains(r#"data-action="purge""#),
        "{}",
        page.body
    );
    let csrf = page.csrf();
    let p = b.post("/ui/queues/pq/pause", &[("csrf", &csrf)]).await;
    assert!(
        p.body.contains(r#"id="result""#) && p.body.contains("action=pause_queue"),
        "{}",
        p.body
    );
    assert!(paused(&mut c, "pq").await);
    let page = b.get("/ui/queues/pq").await;
    assert!(page.body.contains(r#"data-paused="true""#), "{}", page.body);
    assert!(
        page.body.contains(r#"data-action="resume""#),
        "{}",
        page.body
    );
    b.post("/ui/queues/pq/resume", &[("csrf", &csrf)]).await;
    assert!(!paused(&mut c, "pq").await);

    // The wrong name purges nothing.
    let p = b
        .post(
            "/ui/queues/pq/purge",
            &[("csrf", &csrf), ("confirm", "pq2")],
        )
        .await;
    assert_eq!(p.status, StatusCode::BAD_REQUEST, "{}", p.body);
    assert_eq!(state(&mut c, "pq", "w1").await, pb::JobState::Waiting);
    let p = b
        .post("/ui/queues/pq/purge", &[("csrf", &csrf), ("confirm", "pq")])
        .await;
    assert_eq!(p.status, StatusCode::OK, "{}", p.body);
    assert!(p.body.contains("Purged 2 jobs"), "{}", p.body);
    assert!(p.body.contains("action=purge_queue") && p.body.contains("count=2"));
    let r = c
        .jobs
        .get_job(pb::GetJobRequest {
            queue: "pq".into(),
            job_id: "w1".into(),
        })
        .await;
    assert_eq!(r.expect_err("purged").code(), tonic::Code::NotFound);
}

#[tokio::test]
async fn a_dead_jobs_delete_asks_to_confirm_first() {
    let ops = ops();
    let s = start(&[&ops], false).await;
    let mut c = s.as_(&ops);
    kill(&mut c, "one", "doomed", "send", "timeout", b"{}").await;
    let mut b = Browser::new(s.app.http);
    b.login(&ops.token.reveal()).await;
    let csrf = b.get("/ui/queues/one/jobs/doomed").await.csrf();
    let ask = b
        .post("/ui/queues/one/jobs/doomed/delete", &[("csrf", &csrf)])
        .await;
    assert_eq!(ask.status, StatusCode::OK, "{}", ask.body);
    assert!(ask.body.contains(r#"id="confirm-count""#), "{}", ask.body);
    assert!(ask.body.contains("permanently"), "{}", ask.body);
    assert_eq!(state(&mut c, "one", "doomed").await, pb::JobState::Dead);
    let done = b
        .post(
            "/ui/queues/one/jobs/doomed/delete",
            &[("csrf", &csrf), ("confirmed", "1")],
        )
        .await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.body);
    assert!(done.body.contains("Deleted 1 job "), "{}", done.body);
    let r = c
        .jobs
        .get_job(pb::GetJobRequest {
            queue: "one".into(),
            job_id: "doomed".into(),
        })
        .await;
    assert_eq!(r.expect_err("deleted").code(), tonic::Code::NotFound);
}
