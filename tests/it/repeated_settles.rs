//! A settle repeated within one script call: the worker's Ack or Fail sent twice with the
//! same lease token (a retry of one whose reply it never got) may be coalesced into the same
//! call as the first. The repeat answers as the first did, as a repeat in a later call does
//! (the settle memory, attempts.lua), instead of LEASE_LOST for a lease the first one settled.
//!
//! To put both into one call, the stream's first batch (another job's ack) is held in Redis
//! by `CLIENT PAUSE ... WRITE`; a stream's batches run one after another, so the two copies
//! sent meanwhile are read as the next batch, and one queue's acks (or fails) of one batch
//! go to Redis in one call.

use std::time::Duration;

use jobwire::pb;
use pb::subscribe_request::Message as In;

use crate::harness::*;

/// Leases `first` and `twice` on `queue`, holds a batch acking `first` in Redis for 300 ms,
/// sends `copy(twice)` two times meanwhile, and returns the three Settled replies.
async fn settle_twice_in_one_call(
    queue: &str,
    copy: impl Fn(&pb::Lease) -> In,
) -> (TestRedis, Vec<pb::Settled>) {
    let (redis, app) = TestApp::with_redis().await;
    enqueue(&app, spec(queue, "first")).await;
    enqueue(
        &app,
        pb::JobSpec {
            max_attempts: Some(3),
            ..spec(queue, "twice")
        },
    )
    .await;
    let mut w = TestWorker::open(&app, &[queue], 2, "w").await;
    let (a, b) = (w.lease().await, w.lease().await);
    let (first, twice) = if a.job.as_ref().expect("job").job_id == "first" {
        (a, b)
    } else {
        (b, a)
    };
    redis.pause_writes(300).await;
    let fj = first.job.as_ref().expect("job");
    w.send(In::Ack(pb::AckRequest {
        queue: fj.queue.clone(),
        job_id: fj.job_id.clone(),
        lease_token: first.lease_token.clone(),
        result: Vec::new(),
    }));
    // The first batch is read and waits in Redis; these two are read together after it.
    tokio::time::sleep(Duration::from_millis(100)).await;
    w.send(copy(&twice));
    w.send(copy(&twice));
    let mut replies = Vec::new();
    for _ in 0..3 {
        replies.push(w.settled().await);
    }
    drop(app);
    (redis, replies)
}

#[tokio::test]
async fn an_ack_repeated_in_the_same_call_answers_ok() {
    let (redis, replies) = settle_twice_in_one_call("rep-ack", |l| {
        let job = l.job.as_ref().expect("job");
        In::Ack(pb::AckRequest {
            queue: job.queue.clone(),
            job_id: job.job_id.clone(),
            lease_token: l.lease_token.clone(),
            result: Vec::new(),
        })
    })
    .await;
    for s in &replies {
        assert_eq!(s.code, 0, "{s:?}");
    }
    assert_eq!(
        replies.iter().filter(|s| s.job_id == "twice").count(),
        2,
        "{replies:?}"
    );
    let job = redis.job("rep-ack", "twice").await;
    assert_eq!(job.state, jobwire::jobs::JobState::Completed);
    assert_eq!(job.attempts_made, 1);
}

#[tokio::test]
async fn a_fail_repeated_in_the_same_call_answers_as_the_first() {
    let (redis, replies) = settle_twice_in_one_call("rep-fail", |l| {
        let job = l.job.as_ref().expect("job");
        In::Fail(pb::FailRequest {
            pause_group: false,
            queue: job.queue.clone(),
            job_id: job.job_id.clone(),
            lease_token: l.lease_token.clone(),
            disposition: pb::FailDisposition::Retry as i32,
            error: Some(pb::JobError {
                message: "boom".into(),
                error_type: "test".into(),
                details: String::new(),
            }),
            retry_after: Some(prost_types::Duration {
                seconds: 60,
                nanos: 0,
            }),
            pause_queue: false,
        })
    })
    .await;
    let twice: Vec<_> = replies.iter().filter(|s| s.job_id == "twice").collect();
    assert_eq!(twice.len(), 2, "{replies:?}");
    for s in &twice {
        assert_eq!(s.code, 0, "{s:?}");
        assert_eq!(s.state, pb::JobState::Delayed as i32, "{s:?}");
    }
    let job = redis.job("rep-fail", "twice").await;
    assert_eq!(job.state, jobwire::jobs::JobState::Delayed);
    assert_eq!(job.attempts_made, 1, "the repeat charged no second attempt");
}
