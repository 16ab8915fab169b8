//! URLs typed or bookmarked by hand: a queue that does not exist is a 404 "queue not found"
//! page on the queue, dead-letter and job pages (an empty but known queue still renders),
//! and a GET of an action's URL is a 303 to the page the action belongs to, doing nothing.

use reqwest::StatusCode;

use super::*;

#[tokio::test]
async fn an_unknown_queue_is_a_404_page_and_an_empty_known_queue_still_renders() {
    let ops = ops();
    let s = start(&[&ops], false).await;
    let mut c = s.as_(&ops);
    put(&mut c, job("real", "r1")).await;
    // "emptied" is registered (a job was enqueued) and then purged: known, with no jobs.
    put(&mut c, job("emptied", "e1")).await;
    c.queues
        .purge_queue(pb::PurgeQueueRequest {
            queue: "emptied".into(),
            ..Default::default()
        })
        .await
        .expect("purge");
    let mut b = Browser::new(s.app.http);
    b.login(&ops.token.reveal()).await;

    for path in [
        "/ui/queues/nope",
        "/ui/queues/nope?state=dead",
        "/ui/queues/nope/dead",
        "/ui/queues/nope/jobs/r1",
    ] {
        let p = b.get(path).await;
        assert_eq!(p.status, StatusCode::NOT_FOUND, "{path}: {}", p.body);
        assert!(p.body.contains("queue not found"), "{path}: {}", p.body);
        assert!(p.body.contains("Back to the queues"), "{path}: {}", p.body);
        assert!(!p.body.contains("data-action="), "no actions on {path}");
    }
    // Known queues: the pages render; an unknown job of a known queue is the job's 404.
    for path in [
        "/ui/queues/real",
        "/ui/queues/real/dead",
        "/ui/queues/real/jobs/r1",
        "/ui/queues/emptied",
        "/ui/queues/emptied/dead",
    ] {
        let p = b.get(path).await;
        assert_eq!(p.status, StatusCode::OK, "{path}: {}", p.body);
    }
    let p = b.get("/ui/queues/real/jobs/nope").await;
    assert_eq!(p.status, StatusCode::NOT_FOUND, "{}", p.body);
    assert!(!p.body.contains("queue not found"), "{}", p.body);
}

#[tokio::test]
async fn a_get_of_an_action_url_redirects_to_its_page_and_does_nothing() {
    let ops = ops();
    let s = start(&[&ops], false).await;
    let mut c = s.as_(&ops);
    kill(&mut c, "acts", "d1", "send", "timeout", b"{}").await;
    put(&mut c, job("acts", "w1")).await;
    let mut b = Browser::new(s.app.http);
    b.login(&ops.token.reveal()).await;

    for (path, to) in [
        ("/ui/queues/acts/pause", "/ui/queues/acts"),
        ("/ui/queues/acts/resume", "/ui/queues/acts"),
        ("/ui/queues/acts/purge", "/ui/queues/acts"),
        ("/ui/queues/acts/jobs/d1/replay", "/ui/queues/acts/jobs/d1"),
        ("/ui/queues/acts/jobs/d1/delete", "/ui/queues/acts/jobs/d1"),
        ("/ui/logout", "/ui/"),
    ] {
        let p = b.get(path).await;
        assert_eq!(p.status, StatusCode::SEE_OTHER, "{path}: {}", p.body);
        assert_eq!(p.location(), to, "{path}");
    }
    // Nothing happened: not paused, nothing purged, the dead job still dead, still logged in.
    assert!(!paused(&mut c, "acts").await);
    assert_eq!(state(&mut c, "acts", "d1").await, pb::JobState::Dead);
    assert_eq!(state(&mut c, "acts", "w1").await, pb::JobState::Waiting);
    let p = b.get("/ui/").await;
    assert_eq!(p.status, StatusCode::OK, "still logged in: {}", p.body);
}
