//! Settle and lease in one call (issue 17): a stream's ack that gives a credit back brings
//! the stream's next job in the same script call (`ack_lease.lua`), the Settled first and
//! the Lease right after it, under every lease rule: max_active, the rate limit, pause, a
//! group's max_active. Two streams on one queue both get jobs. (A lost reply of the
//! combined call: tests/fault/lost_replies.rs.)

use std::time::{Duration, Instant};

use jobwire::pb;
use pb::queue_service_client::QueueServiceClient;
use pb::subscribe_response::Message as Out;

use crate::groups::{configure, fill_group};
use crate::harness::*;

/// Redis's count of FCALL and EVALSHA calls so far (every script call is one: a function
/// call, or a script call before the library loads).
async fn script_calls(redis: &TestRedis) -> u64 {
    redis.command_calls(&["evalsha", "fcall"]).await
}

/// The next two messages of the stream: they must be the Settled of the ack just sent,
/// then the next Lease (nothing else is going on).
async fn settled_then_lease(w: &mut TestWorker) -> pb::Lease {
    match w.recv(Duration::from_secs(10)).await {
        Recv::Msg(Out::Settled(s)) => assert_eq!(s.code, 0, "{s:?}"),
        other => panic!("expected the Settled first, got {other:?}"),
    }
    match w.recv(Duration::from_secs(10)).await {
        Recv::Msg(Out::Lease(l)) => l,
        other => panic!("expected the next Lease, got {other:?}"),
    }
}

fn ack_msg(l: &pb::Lease) -> pb::subscribe_request::Message {
    let job = l.job.as_ref().expect("job");
    pb::subscribe_request::Message::Ack(pb::AckRequest {
        queue: job.queue.clone(),
        job_id: job.job_id.clone(),
        lease_token: l.lease_token.clone(),
        result: Vec::new(),
    })
}

/// One worker of one credit: each ack brings the next job, Settled then Lease, in one
/// script call. Before, a job took an ack call and a lease call (each after its due-index
/// intent) and a confirmation: four or five EVALSHAs a job; now the intent and the
/// combined call, two.
#[tokio::test]
async fn an_ack_brings_the_next_job_in_the_same_call() {
    if single_only("counts one redis-server's script calls") {
        return;
    }
    let (redis, app) = TestApp::with_redis().await;
    const N: usize = 30;
    for i in 0..N {
        enqueue(&app, spec("al", &format!("j{i:02}"))).await;
    }
    let mut w = TestWorker::open(&app, &["al"], 1, "w").await;
    let mut l = w.lease().await;
    let before = script_calls(&redis).await;
    let mut ids = vec![l.job.as_ref().expect("job").job_id.clone()];
    for _ in 1..N {
        w.send(ack_msg(&l));
        l = settled_then_lease(&mut w).await;
        ids.push(l.job.as_ref().expect("job").job_id.clone());
    }
    let calls = script_calls(&redis).await - before;
    assert_eq!(w.ack(&l).await.code, 0);
    let want: Vec<String> = (0..N).map(|i| format!("j{i:02}")).collect();
    assert_eq!(ids, want, "FIFO, each job once");
    // The background (reaper ticks, renewal) adds a few calls; separate ack and lease
    // calls would make at least 4 per job.
    let per_job = calls as f64 / (N - 1) as f64;
    println!(
        "{calls} script calls (FCALL + EVALSHA) for {} jobs: {per_job:.2} a job",
        N - 1
    );
    assert!(per_job < 3.0, "{per_job:.2} script calls a job");
    for id in &want {
        assert_eq!(
            get_job(&app, "al", id).await.state,
            pb::JobState::Completed as i32
        );
    }
    wait_lease_calls_confirmed(&mut redis.conn().await, "al").await;
}

/// Two streams of one credit on a queue limited to one active job: whoever holds the job
/// acks it while the other waits; the waiting stream must get jobs too (a settling stream
/// takes its next job in its ack only while no other local stream waits).
#[tokio::test]
async fn a_waiting_stream_is_not_starved_by_a_settling_one() {
    let (_redis, app) = TestApp::with_redis().await;
    configure(
        &app,
        "fair",
        pb::QueueConfig {
            max_active: Some(1),
            ..Default::default()
        },
    )
    .await;
    const N: usize = 12;
    for i in 0..N {
        enqueue(&app, spec("fair", &format!("j{i:02}"))).await;
    }
    let mut ws = [
        TestWorker::open(&app, &["fair"], 1, "a").await,
        TestWorker::open(&app, &["fair"], 1, "b").await,
    ];
    let mut got = [0usize; 2];
    for _ in 0..N {
        // Exactly one of them holds the one active job.
        let (k, l) = loop {
            if let Some(l) = ws[0].lease_within(Duration::from_millis(50)).await {
                break (0, l);
            }
            if let Some(l) = ws[1].lease_within(Duration::from_millis(50)).await {
                break (1, l);
            }
        };
        got[k] += 1;
        assert!(
            ws[1 - k]
                .lease_within(Duration::from_millis(20))
                .await
                .is_none(),
            "max_active 1: two jobs active"
        );
        assert_eq!(ws[k].ack(&l).await.code, 0);
    }
    println!("jobs per stream: {got:?}");
    assert!(got[0] >= 2 && got[1] >= 2, "one stream starved: {got:?}");
}

/// Two streams of one credit each, both busy, on one queue: they share the jobs, each
/// taking its next one in its ack.
#[tokio::test]
async fn two_busy_streams_share_a_queue() {
    let (_redis, app) = TestApp::with_redis().await;
    const N: usize = 40;
    for i in 0..N {
        enqueue(&app, spec("two", &format!("j{i:02}"))).await;
    }
    let mut tasks = Vec::new();
    for (name, pause) in [("fast", 0), ("slow", 5)] {
        let mut w = TestWorker::open(&app, &["two"], 1, name).await;
        tasks.push(tokio::spawn(async move {
            let mut n = 0;
            while let Some(l) = w.lease_within(Duration::from_millis(1500)).await {
                tokio::time::sleep(Duration::from_millis(pause)).await;
                assert_eq!(w.ack(&l).await.code, 0);
                n += 1;
            }
            n
        }));
    }
    let mut got = Vec::new();
    for t in tasks {
        got.push(t.await.expect("worker"));
    }
    println!("jobs per stream (fast, slow): {got:?}");
    assert_eq!(got.iter().sum::<usize>(), N, "every job once");
    assert!(got.iter().all(|&n| n > 0), "a stream got nothing: {got:?}");
}

/// A stream of two credits on a queue of max_active 1 (or a group of group_max_active 1):
/// each ack brings the next job, never a second one while it holds one.
async fn one_at_a_time(app: &TestApp, queue: &str) {
    let mut w = TestWorker::open(app, &[queue], 2, "w").await;
    for _ in 0..6 {
        let l = w.lease().await;
        assert!(
            w.lease_within(Duration::from_millis(150)).await.is_none(),
            "{queue}: a second job while one is active"
        );
        assert_eq!(w.ack(&l).await.code, 0);
    }
    assert!(w.lease_within(Duration::from_millis(300)).await.is_none());
}

#[tokio::test]
async fn the_combined_call_keeps_max_active() {
    let (_redis, app) = TestApp::with_redis().await;
    configure(
        &app,
        "ma",
        pb::QueueConfig {
            max_active: Some(1),
            ..Default::default()
        },
    )
    .await;
    for i in 0..6 {
        enqueue(&app, spec("ma", &format!("j{i}"))).await;
    }
    one_at_a_time(&app, "ma").await;
}

#[tokio::test]
async fn the_combined_call_keeps_a_groups_max_active() {
    let (_redis, app) = TestApp::with_redis().await;
    configure(
        &app,
        "gma",
        pb::QueueConfig {
            group_max_active: Some(1),
            ..Default::default()
        },
    )
    .await;
    fill_group(&app, "gma", "acme", 6).await;
    one_at_a_time(&app, "gma").await;
}

/// A rate limit of 2 starts a second: the third job starts a second after the first,
/// though the worker acks at once (the combined call is refused by the limiter, and the
/// loop then waits for the window).
#[tokio::test]
async fn the_combined_call_keeps_the_rate_limit() {
    let (_redis, app) = TestApp::with_redis().await;
    configure(
        &app,
        "rl",
        pb::QueueConfig {
            rate_limit: Some(pb::RateLimit {
                max: 2,
                period: Some(ms(Duration::from_secs(1))),
            }),
            ..Default::default()
        },
    )
    .await;
    for i in 0..4 {
        enqueue(&app, spec("rl", &format!("j{i}"))).await;
    }
    let mut w = TestWorker::open(&app, &["rl"], 1, "w").await;
    let first = w.lease().await;
    let t0 = Instant::now();
    assert_eq!(w.ack(&first).await.code, 0);
    let second = w.lease().await;
    assert_eq!(w.ack(&second).await.code, 0);
    let third = w
        .lease_within(Duration::from_secs(5))
        .await
        .expect("the third job once the window opens");
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_millis(800),
        "the third start came {waited:?} after the first"
    );
    assert_eq!(w.ack(&third).await.code, 0);
}

/// A paused queue leases nothing, in the combined call too; resumed, the next job comes.
#[tokio::test]
async fn the_combined_call_leases_nothing_from_a_paused_queue() {
    let (_redis, app) = TestApp::with_redis().await;
    for i in 0..3 {
        enqueue(&app, spec("pz", &format!("j{i}"))).await;
    }
    let mut w = TestWorker::open(&app, &["pz"], 1, "w").await;
    let first = w.lease().await;
    let mut queues = QueueServiceClient::new(app.channel.clone());
    queues
        .pause_queue(pb::PauseQueueRequest { queue: "pz".into() })
        .await
        .expect("pause");
    assert_eq!(w.ack(&first).await.code, 0);
    assert!(
        w.lease_within(Duration::from_millis(400)).await.is_none(),
        "a lease from a paused queue"
    );
    queues
        .resume_queue(pb::ResumeQueueRequest { queue: "pz".into() })
        .await
        .expect("resume");
    let next = w
        .lease_within(Duration::from_secs(5))
        .await
        .expect("a lease after the resume");
    assert_eq!(w.ack(&next).await.code, 0);
}
