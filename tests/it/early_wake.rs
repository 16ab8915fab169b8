//! A local Enqueue wakes its queue's lease loop as soon as the call is on the store's
//! connection, and the echo of its PUBLISH is skipped. Nothing may be lost by that: every
//! job reaches an idle worker well inside the 2 s safety poll, whether it came from this
//! replica, from another one, or after a duplicate enqueue that made nothing ready.

use std::time::Duration;

use crate::harness::*;
use jobwire::pb;

/// Well under the lease loop's 2 s safety poll: a delivery this fast came from a wake-up.
const PROMPT: Duration = Duration::from_millis(1000);

#[tokio::test]
async fn local_remote_and_duplicate_enqueues_all_wake_an_idle_worker() {
    let redis = TestRedis::start().await;
    let app = TestApp::spawn(test_config(&redis.url)).await;
    let other = TestApp::spawn(test_config(&redis.url)).await;
    let mut w = TestWorker::open(&app, &["early"], 4, "w").await;
    // The first enqueue registers the queue with the store; later ones take the early path.
    enqueue(&app, spec("early", "first")).await;
    let l = w
        .lease_within(PROMPT)
        .await
        .expect("the first job, promptly");
    assert_eq!(w.ack(&l).await.code, 0);

    for round in 0..5 {
        let local = format!("local-{round}");
        enqueue(&app, spec("early", &local)).await;
        let l = w.lease_within(PROMPT).await.expect("a local job, promptly");
        assert_eq!(l.job.as_ref().expect("job").job_id, local);
        assert_eq!(w.ack(&l).await.code, 0);

        // A duplicate makes nothing ready (no PUBLISH): its credit must come back, or the
        // next remote wake-up would be swallowed.
        let dup = enqueue(&app, spec("early", &local)).await;
        assert!(!dup.created);
        let remote = format!("remote-{round}");
        enqueue(&other, spec("early", &remote)).await;
        let l = w
            .lease_within(PROMPT)
            .await
            .expect("a remote job, promptly");
        assert_eq!(l.job.as_ref().expect("job").job_id, remote);
        assert_eq!(w.ack(&l).await.code, 0);
    }
    assert!(
        w.lease_within(Duration::from_millis(300)).await.is_none(),
        "each job delivered once"
    );
}

/// After `SCRIPT FLUSH` and `FUNCTION FLUSH` (as after a Redis restart without persistence)
/// the first enqueue goes through the fallback path (function not found, NOSCRIPT, EVAL), and the lease call it woke early can run before the
/// reloaded enqueue. The job must still reach the idle worker by a wake-up, not by the 2 s
/// safety poll: whether the lease script is loaded or flushed too, over several rounds.
#[tokio::test]
async fn an_enqueue_after_script_flush_still_wakes_an_idle_worker() {
    let redis = TestRedis::start().await;
    let app = TestApp::spawn(test_config(&redis.url)).await;
    let mut w = TestWorker::open(&app, &["flushed"], 4, "w").await;
    enqueue(&app, spec("flushed", "first")).await;
    let l = w.lease_within(PROMPT).await.expect("the first job");
    assert_eq!(w.ack(&l).await.code, 0);
    let mut c = redis.conn().await;
    for round in 0..6 {
        for kind in ["SCRIPT", "FUNCTION"] {
            let _: () = redis::cmd(kind)
                .arg("FLUSH")
                .query_async(&mut c)
                .await
                .expect("flush");
        }
        if round % 2 == 1 {
            // Let the lease loop load its script again (a credit wakes it), so only the
            // enqueue finds its script missing.
            w.send(pb::subscribe_request::Message::GrantCredits(
                pb::GrantCredits { credits: 1 },
            ));
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let id = format!("after-flush-{round}");
        let t = std::time::Instant::now();
        enqueue(&app, spec("flushed", &id)).await;
        let l = w
            .lease_within(Duration::from_secs(5))
            .await
            .expect("a lease");
        let took = t.elapsed();
        println!("round {round}: lease {took:?} after the enqueue");
        assert_eq!(l.job.as_ref().expect("job").job_id, id);
        assert!(
            took < PROMPT,
            "round {round}: {took:?}, the safety poll's pace"
        );
        assert_eq!(w.ack(&l).await.code, 0);
    }
}

/// Enqueues on a paused queue keep coming while a worker opens it, so some take their
/// early wake-up after the queue's loop exists but before its pub/sub subscription has
/// taken effect: their PUBLISH echoes never come back. Their echo credits must not be left
/// to swallow a later wake-up, such as the resume's: the waiting jobs are leased at once.
#[tokio::test]
async fn echoes_lost_before_the_subscription_do_not_swallow_the_resume() {
    let redis = TestRedis::start().await;
    let app = TestApp::spawn(test_config(&redis.url)).await;
    let admin = jobwire::pb::queue_service_client::QueueServiceClient::new(app.channel.clone());
    for round in 0..6 {
        let q = format!("opening-{round}");
        admin
            .clone()
            .pause_queue(pb::PauseQueueRequest { queue: q.clone() })
            .await
            .expect("pause");
        // Known to the store, so later enqueues take the early path.
        enqueue(&app, spec(&q, "first")).await;
        let feeder = {
            let (app_channel, q) = (app.channel.clone(), q.clone());
            tokio::spawn(async move {
                let mut jobs = jobwire::pb::job_service_client::JobServiceClient::new(app_channel);
                for i in 0..60 {
                    jobs.enqueue(pb::EnqueueRequest {
                        job: Some(spec(&q, &format!("j{i}"))),
                    })
                    .await
                    .expect("enqueue");
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            })
        };
        tokio::time::sleep(Duration::from_millis(15)).await;
        let mut w = TestWorker::open(&app, &[&q], 1, "w").await;
        feeder.await.expect("feeder");
        assert!(
            w.lease_within(Duration::from_millis(300)).await.is_none(),
            "round {round}: nothing leased while paused"
        );
        admin
            .clone()
            .resume_queue(pb::ResumeQueueRequest { queue: q.clone() })
            .await
            .expect("resume");
        let t = std::time::Instant::now();
        assert!(
            w.lease_within(PROMPT).await.is_some(),
            "round {round}: the resume's wake-up was swallowed ({:?})",
            t.elapsed()
        );
    }
}

/// EnqueueBatch of jobs with a ttl (issue 32, item 7): the enqueue writes its due-index
/// intent first, so its first poll puts the intent, not the enqueue, on the connection. The
/// idle worker must still get the jobs from a wake-up, well inside the 2 s safety poll, and a
/// 1 s ttl job must be delivered, not expire while the worker sits idle. Single Enqueues
/// with a ttl, and batches without, are the controls.
#[tokio::test]
async fn a_batch_with_a_ttl_wakes_an_idle_worker() {
    let redis = TestRedis::start().await;
    let app = TestApp::spawn(test_config(&redis.url)).await;
    let q = "ttl-batch";
    let mut w = TestWorker::open(&app, &[q], 4, "w").await;
    // The first enqueue registers the queue with the store; later ones take the early path.
    enqueue(&app, spec(q, "first")).await;
    let l = w.lease_within(PROMPT).await.expect("the first job");
    assert_eq!(w.ack(&l).await.code, 0);
    let with_ttl = |id: &str| pb::JobSpec {
        ttl: Some(ms(Duration::from_secs(1))),
        ..spec(q, id)
    };
    for round in 0..4 {
        // A control: a single Enqueue with a ttl, and a batch without.
        for (kind, batch, job) in [
            ("single ttl", false, with_ttl(&format!("one-{round}"))),
            ("batch", true, spec(q, &format!("plain-{round}"))),
            ("batch ttl", true, with_ttl(&format!("ttl-{round}"))),
        ] {
            let id = job.job_id.clone();
            // Idle long enough that the loop sleeps on its safety poll.
            tokio::time::sleep(Duration::from_millis(300)).await;
            let t = std::time::Instant::now();
            if batch {
                let r = app
                    .jobs()
                    .enqueue_batch(pb::EnqueueBatchRequest { jobs: vec![job] })
                    .await
                    .expect("enqueue batch")
                    .into_inner();
                assert!(r.results[0].job.is_some(), "{r:?}");
            } else {
                enqueue(&app, job).await;
            }
            let l = w
                .lease_within(Duration::from_secs(5))
                .await
                .unwrap_or_else(|| panic!("round {round}: {kind}: no lease within 5 s"));
            let took = t.elapsed();
            println!("round {round}: {kind}: leased {took:?} after the enqueue");
            assert_eq!(l.job.as_ref().expect("job").job_id, id);
            assert!(
                took < PROMPT,
                "round {round}: {kind}: {took:?}, the safety poll's pace"
            );
            assert_eq!(w.ack(&l).await.code, 0, "round {round}: {kind}: acked");
            let j = get_job(&app, q, &id).await;
            assert_eq!(j.state, pb::JobState::Completed as i32, "{id}: {j:?}");
        }
    }
}
