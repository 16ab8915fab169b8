//! Issue 16, progress and checkpoints: a worker reports progress (0-100, a message) and a
//! checkpoint under its lease, on the stream (answered by a ProgressSaved) or unary; GetJob
//! shows them with their time and, for an ACTIVE job, the lease deadline and the holder's
//! worker id; the next attempt's lease carries the last checkpoint, after a retry, after the
//! worker's stream died and its lease expired, and after a server restart; a stale lease
//! token saves nothing; sizes over the limits are refused naming the field and the limit.

use std::time::Duration;

use jobwire::pb;
use pb::FailDisposition as D;
use tonic::Code;

use crate::harness::*;
use crate::refusal::refuse;

fn ts_ms(t: &Option<prost_types::Timestamp>) -> i64 {
    let t = t.as_ref().expect("timestamp");
    t.seconds * 1000 + i64::from(t.nanos) / 1_000_000
}

/// A unary ReportProgress for the job of lease `l` (its own token unless `token` is given).
fn report(
    l: &pb::Lease,
    progress: Option<u32>,
    message: Option<&str>,
    checkpoint: Option<&[u8]>,
) -> pb::ReportProgressRequest {
    let job = l.job.as_ref().expect("job");
    pb::ReportProgressRequest {
        queue: job.queue.clone(),
        job_id: job.job_id.clone(),
        lease_token: l.lease_token.clone(),
        progress,
        message: message.map(str::to_owned),
        checkpoint: checkpoint.map(<[u8]>::to_vec),
    }
}

fn retrying(queue: &str, id: &str, attempts: u32) -> pb::JobSpec {
    pb::JobSpec {
        max_attempts: Some(attempts),
        ..spec(queue, id)
    }
}

#[tokio::test]
async fn progress_on_the_stream_and_unary_shows_in_get_job_with_its_time_and_the_holder() {
    let (_redis, app) = TestApp::with_redis().await;
    enqueue(&app, spec("prog", "j")).await;
    let mut w = TestWorker::open(&app, &["prog"], 1, "w-prog").await;
    let l = w.lease().await;
    let lease_time = ts_ms(&l.job.as_ref().expect("job").lease_time);

    // Before any report: nothing, but the holder and the lease deadline of the ACTIVE job.
    let job = get_job(&app, "prog", "j").await;
    assert_eq!((job.progress, job.progress_message.as_str()), (0, ""));
    assert!(job.progress_time.is_none() && job.checkpoint.is_empty());
    assert_eq!(job.worker_id, "w-prog");
    let deadline = ts_ms(&job.lease_deadline);
    assert!(
        deadline > lease_time && deadline <= lease_time + 2_000 + 1_000,
        "lease deadline {deadline} for a 2 s lease taken at {lease_time}"
    );

    let saved = w.report(&l, Some(30), Some("step 1 of 3"), None).await;
    assert_eq!(saved.code, 0, "{}", saved.message);
    assert_eq!(
        (saved.job_id.as_str(), saved.lease_token.as_str()),
        ("j", l.lease_token.as_str())
    );
    let job = get_job(&app, "prog", "j").await;
    assert_eq!(
        (job.progress, job.progress_message.as_str()),
        (30, "step 1 of 3")
    );
    let first_time = ts_ms(&job.progress_time);
    assert!(first_time >= lease_time, "{first_time} < {lease_time}");

    // Unary, progress only: the message stays; then the message only: the progress stays.
    let mut workers = app.workers();
    workers
        .report_progress(report(&l, Some(60), None, None))
        .await
        .expect("unary progress");
    let job = get_job(&app, "prog", "j").await;
    assert_eq!(
        (job.progress, job.progress_message.as_str()),
        (60, "step 1 of 3")
    );
    assert!(ts_ms(&job.progress_time) >= first_time);
    workers
        .report_progress(report(&l, None, Some("step 2 of 3"), None))
        .await
        .expect("unary message");
    let job = get_job(&app, "prog", "j").await;
    assert_eq!(
        (job.progress, job.progress_message.as_str()),
        (60, "step 2 of 3")
    );

    // Acked: COMPLETED keeps the last progress; the holder and deadline are gone.
    assert_eq!(w.ack(&l).await.code, 0);
    let job = get_job(&app, "prog", "j").await;
    assert_eq!(job.state, pb::JobState::Completed as i32);
    assert_eq!(
        (job.progress, job.progress_message.as_str()),
        (60, "step 2 of 3")
    );
    assert!(
        job.lease_deadline.is_none() && job.worker_id.is_empty(),
        "{job:?}"
    );
}

#[tokio::test]
async fn the_next_attempt_gets_the_last_checkpoint_after_a_retry_and_an_empty_one_clears_it() {
    let (_redis, app) = TestApp::with_redis().await;
    enqueue(&app, retrying("ckpt", "j", 3)).await;
    let mut w = TestWorker::open(&app, &["ckpt"], 1, "w").await;
    let first = w.lease().await;
    assert!(first.job.as_ref().expect("job").checkpoint.is_empty());
    assert_eq!(
        w.report(&first, Some(10), None, Some(b"step-1")).await.code,
        0
    );
    // The last checkpoint wins; a report without one keeps it.
    assert_eq!(
        w.report(&first, Some(20), None, Some(b"step-2")).await.code,
        0
    );
    assert_eq!(
        w.report(&first, Some(25), Some("charging"), None)
            .await
            .code,
        0
    );
    assert_eq!(get_job(&app, "ckpt", "j").await.checkpoint, b"step-2");
    let s = w
        .fail(&first, D::Retry, "card declined", "flaky", None)
        .await;
    assert_eq!(s.code, 0, "{}", s.message);

    let second = w.lease().await;
    assert_eq!(second.attempt, 2);
    let job = second.job.as_ref().expect("job");
    assert_eq!(
        job.checkpoint, b"step-2",
        "the retry resumes from the checkpoint"
    );
    // The progress is kept across attempts too (GetJob; a lease carries the checkpoint only).
    let got = get_job(&app, "ckpt", "j").await;
    assert_eq!(
        (got.progress, got.progress_message.as_str()),
        (25, "charging")
    );

    // An empty checkpoint clears it: the third attempt starts from scratch.
    assert_eq!(w.report(&second, None, None, Some(b"")).await.code, 0);
    assert!(get_job(&app, "ckpt", "j").await.checkpoint.is_empty());
    assert_eq!(
        w.fail(&second, D::Retry, "again", "flaky", None).await.code,
        0
    );
    let third = w.lease().await;
    assert_eq!(third.attempt, 3);
    assert!(third.job.as_ref().expect("job").checkpoint.is_empty());
    assert_eq!(w.ack(&third).await.code, 0);
}

#[tokio::test]
async fn a_checkpoint_survives_a_dead_stream_and_a_stale_token_saves_nothing() {
    let (_redis, app) = TestApp::with_redis().await;
    enqueue(&app, retrying("crash", "j", 2)).await;
    let stale = {
        let mut w = TestWorker::open(&app, &["crash"], 1, "dies").await;
        let l = w.lease().await;
        assert_eq!(
            w.report(&l, Some(50), Some("half"), Some(b"row 5000"))
                .await
                .code,
            0
        );
        l
        // The stream ends here without settling: the lease is no longer renewed.
    };
    let mut w2 = TestWorker::open(&app, &["crash"], 1, "w2").await;
    let l = w2
        .lease_within(Duration::from_secs(8))
        .await
        .expect("delivered again after the lease expired");
    assert_eq!(l.attempt, 2);
    let job = l.job.as_ref().expect("job");
    assert_eq!(job.errors[0].error_type, "LEASE_EXPIRED");
    assert_eq!(
        job.checkpoint, b"row 5000",
        "resumes where the dead worker stopped"
    );
    assert_eq!(w2.report(&l, Some(70), Some("resumed"), None).await.code, 0);

    // The dead attempt's token is fenced off, unary and on a stream: nothing is saved.
    let before = get_job(&app, "crash", "j").await;
    let e = app
        .workers()
        .report_progress(report(&stale, Some(99), Some("stale"), Some(b"stale")))
        .await
        .expect_err("a stale token is refused");
    assert_eq!(e.code(), Code::FailedPrecondition, "{}", e.message());
    let saved = w2
        .report(&stale, Some(99), Some("stale"), Some(b"stale"))
        .await;
    assert_eq!(
        saved.code,
        Code::FailedPrecondition as i32,
        "{}",
        saved.message
    );
    assert_eq!(saved.lease_token, stale.lease_token);
    let after = get_job(&app, "crash", "j").await;
    assert_eq!(
        (
            after.progress,
            after.progress_message.as_str(),
            after.checkpoint.as_slice()
        ),
        (70, "resumed", b"row 5000".as_slice())
    );
    assert_eq!(after.progress_time, before.progress_time);
    assert_eq!(after.worker_id, "w2");
    // The stream goes on after a refused report.
    assert_eq!(w2.ack(&l).await.code, 0);
    let e = app
        .workers()
        .report_progress(report(&l, Some(100), None, None))
        .await
        .expect_err("a settled lease takes no progress");
    assert_eq!(e.code(), Code::FailedPrecondition);
}

#[tokio::test]
async fn a_checkpoint_is_handed_to_the_next_attempt_after_a_server_restart() {
    let redis = TestRedis::start().await;
    let app = TestApp::spawn(test_config(&redis.url)).await;
    enqueue(&app, retrying("restart", "j", 2)).await;
    let mut w = TestWorker::open(&app, &["restart"], 1, "w").await;
    let l = w.lease().await;
    assert_eq!(w.report(&l, Some(40), None, Some(b"page 4")).await.code, 0);
    // SIGTERM path: the lease goes back to waiting without an attempt charged.
    app.stop().await.expect("stopped");
    drop(w);

    let app = TestApp::spawn(test_config(&redis.url)).await;
    let mut w = TestWorker::open(&app, &["restart"], 1, "w").await;
    let l = w.lease().await;
    assert_eq!(l.attempt, 1, "the hand-back charged no attempt");
    assert_eq!(l.job.as_ref().expect("job").checkpoint, b"page 4");
    assert_eq!(get_job(&app, "restart", "j").await.progress, 40);
    assert_eq!(w.ack(&l).await.code, 0);
}

#[tokio::test]
async fn reports_over_the_limits_are_refused_naming_the_field_and_change_nothing() {
    let redis = TestRedis::start().await;
    let mut cfg = test_config(&redis.url);
    cfg.max_checkpoint_bytes = 1000;
    let app = TestApp::spawn(cfg).await;
    enqueue(&app, spec("lim", "j")).await;
    let mut w = TestWorker::open(&app, &["lim"], 1, "w").await;
    let l = w.lease().await;
    // At the limits: saved.
    let full = vec![7u8; 1000];
    let msg = "m".repeat(256);
    assert_eq!(
        w.report(&l, Some(100), Some(&msg), Some(&full)).await.code,
        0
    );
    let mut c = redis.conn().await;
    wait_lease_calls_confirmed(&mut c, "lim").await;

    let over = vec![7u8; 1001];
    let long = "m".repeat(257);
    let cases: Vec<(&str, Code, &str, &str, pb::ReportProgressRequest)> = vec![
        (
            "checkpoint",
            Code::ResourceExhausted,
            "checkpoint",
            "1000",
            report(&l, Some(1), None, Some(&over)),
        ),
        (
            "message",
            Code::InvalidArgument,
            "message",
            "256",
            report(&l, Some(1), Some(&long), None),
        ),
        (
            "progress",
            Code::InvalidArgument,
            "progress",
            "100",
            report(&l, Some(101), None, None),
        ),
    ];
    for (what, code, field, limit, req) in cases {
        refuse(
            &redis,
            what,
            code,
            field,
            limit,
            app.workers().report_progress(req),
        )
        .await;
    }
    // On the stream: a ProgressSaved with the code, and the stream goes on.
    let saved = w.report(&l, None, None, Some(&over)).await;
    assert_eq!(saved.code, Code::ResourceExhausted as i32);
    assert!(
        saved.message.contains("checkpoint") && saved.message.contains("1000"),
        "{}",
        saved.message
    );
    let saved = w.report(&l, Some(101), None, None).await;
    assert_eq!(
        saved.code,
        Code::InvalidArgument as i32,
        "{}",
        saved.message
    );
    let job = get_job(&app, "lim", "j").await;
    assert_eq!((job.progress, job.checkpoint.len()), (100, 1000));
    // An unknown job: NOT_FOUND.
    let mut missing = report(&l, Some(1), None, None);
    missing.job_id = "nope".into();
    let e = app
        .workers()
        .report_progress(missing)
        .await
        .expect_err("no such job");
    assert_eq!(e.code(), Code::NotFound);
    assert_eq!(w.ack(&l).await.code, 0);
}

#[tokio::test]
async fn list_jobs_shows_progress_but_not_the_checkpoint() {
    let (_redis, app) = TestApp::with_redis().await;
    enqueue(&app, spec("listp", "j")).await;
    let mut w = TestWorker::open(&app, &["listp"], 1, "w").await;
    let l = w.lease().await;
    assert_eq!(
        w.report(&l, Some(33), Some("a third"), Some(b"ck"))
            .await
            .code,
        0
    );
    let page = app
        .jobs()
        .list_jobs(pb::ListJobsRequest {
            queue: "listp".into(),
            state: pb::JobState::Active as i32,
            ..Default::default()
        })
        .await
        .expect("list")
        .into_inner();
    let job = &page.jobs[0];
    assert_eq!(
        (job.progress, job.progress_message.as_str()),
        (33, "a third")
    );
    assert!(job.progress_time.is_some());
    assert!(job.checkpoint.is_empty() && job.result.is_empty());
    assert_eq!(w.ack(&l).await.code, 0);
}

#[tokio::test]
async fn a_replay_from_the_dead_letter_queue_keeps_the_checkpoint() {
    let (_redis, app) = TestApp::with_redis().await;
    enqueue(&app, retrying("replay", "j", 1)).await;
    let mut w = TestWorker::open(&app, &["replay"], 1, "w").await;
    let l = w.lease().await;
    assert_eq!(
        w.report(&l, Some(80), Some("4 of 5"), Some(b"step-4"))
            .await
            .code,
        0
    );
    let s = w.fail(&l, D::NoRetry, "provider down", "fatal", None).await;
    assert_eq!(s.state, pb::JobState::Dead as i32);
    let dead = get_job(&app, "replay", "j").await;
    assert_eq!(
        (dead.checkpoint.as_slice(), dead.progress),
        (b"step-4".as_slice(), 80)
    );
    let replayed = app
        .dead()
        .replay_dead_letters(pb::ReplayDeadLettersRequest {
            queue: "replay".into(),
            job_ids: vec!["j".into()],
            filter: None,
        })
        .await
        .expect("replay")
        .into_inner();
    assert_eq!(replayed.replayed_job_ids, ["j"]);
    let again = w.lease().await;
    assert_eq!(again.attempt, 1, "a fresh attempt budget");
    let job = again.job.as_ref().expect("job");
    assert_eq!(
        job.checkpoint, b"step-4",
        "the replay resumes after the last step"
    );
    assert_eq!(w.ack(&again).await.code, 0);
}

#[tokio::test]
async fn checkpoints_count_in_the_byte_budget_of_a_lease_call() {
    // Three jobs with 600 KiB checkpoints: a lease call stops taking jobs once the bytes
    // it read pass its 1 MiB budget (common.lua), checkpoints included, and says more wait.
    let redis = TestRedis::start().await;
    let store = redis.store().await;
    let app = TestApp::spawn(test_config(&redis.url)).await;
    for id in ["a", "b", "c"] {
        enqueue(&app, spec("budget", id)).await;
    }
    let mut c = redis.conn().await;
    for id in ["a", "b", "c"] {
        let _: () = redis::cmd("HSET")
            .arg("jw:{budget}:data")
            .arg(format!("c:{id}"))
            .arg(vec![b'c'; 600 * 1024])
            .query_async(&mut c)
            .await
            .expect("hset");
    }
    let q = jobwire::jobs::QueueName::parse("budget").expect("queue");
    let call = jobwire::store::new_lease_call_id();
    let b = store
        .lease(&q, &["w", "w", "w"], 30_000, &call, &[])
        .await
        .expect("lease");
    assert_eq!(
        b.jobs.len(),
        2,
        "the budget stops the call after the second job"
    );
    assert!(b.more, "the reply says more are waiting");
    assert!(b
        .jobs
        .iter()
        .all(|j| j.job.data.checkpoint.len() == 600 * 1024));
    let call = jobwire::store::new_lease_call_id();
    let rest = store
        .lease(&q, &["w"], 30_000, &call, &[])
        .await
        .expect("lease");
    assert_eq!(rest.jobs.len(), 1);
    assert_eq!(rest.jobs[0].job.id, "c");
}
