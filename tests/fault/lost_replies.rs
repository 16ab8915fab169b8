//! Lost replies: a Redis call that times out on jobwire's side may still run in Redis
//! afterwards. Redis is stalled past the server's `--redis-timeout`, once with
//! `CLIENT PAUSE <ms> ALL` (commands wait, then run) and once with `DEBUG SLEEP` (Redis
//! itself blocks), and then comes back. Whatever ran meanwhile, no job is duplicated, no
//! job is charged an attempt for a lease no worker received, and a settle that was applied
//! answers OK when the worker repeats it.

use std::time::Duration;

use jobwire::pb;

use crate::harness::*;
use crate::procs::{RedisOpts, RedisProc};

/// The server's Redis command timeout in these tests.
const REDIS_TIMEOUT: Duration = Duration::from_millis(500);
/// How long Redis stalls: well past the timeout (a call times out, then runs).
const STALL_MS: u64 = 2000;
/// No fsync per write: on a busy machine it alone can pass the short timeout before the
/// stall (persistence is not what these tests are about).
const NO_AOF: RedisOpts = RedisOpts {
    aof: None,
    policy: "noeviction",
};

#[derive(Clone, Copy, Debug)]
enum Stall {
    Pause,
    DebugSleep,
}

/// Stalls Redis for [`STALL_MS`], starting now.
async fn stall(redis: &RedisProc, how: Stall) {
    let mut c = redis.conn().await;
    match how {
        Stall::Pause => {
            let _: () = redis::cmd("CLIENT")
                .arg("PAUSE")
                .arg(STALL_MS)
                .arg("ALL")
                .query_async(&mut c)
                .await
                .expect("client pause");
        }
        Stall::DebugSleep => {
            tokio::spawn(async move {
                let _: Result<(), _> = redis::cmd("DEBUG")
                    .arg("SLEEP")
                    .arg(STALL_MS as f64 / 1000.0)
                    .query_async(&mut c)
                    .await;
            });
            // DEBUG SLEEP blocks the whole server: give it a moment to start.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

async fn app_on(redis: &RedisProc) -> TestApp {
    let mut cfg = test_config(&redis.url);
    cfg.redis_timeout = REDIS_TIMEOUT;
    cfg.lease_duration = Duration::from_secs(3);
    TestApp::spawn(cfg).await
}

/// How many jobs `queue` holds in Redis, in any state.
async fn job_count(redis: &RedisProc, queue: &str) -> usize {
    let mut c = redis.conn().await;
    // Job headers are the entries of the queue's jobs hash (src/store/scripts/common.lua).
    redis::cmd("HLEN")
        .arg(format!("jw:{{{queue}}}:jobs"))
        .query_async(&mut c)
        .await
        .expect("hlen")
}

/// Enqueue without a job_id while Redis stalls: the server chose the id before the call
/// and retries it itself, so the producer gets one answer (created) and Redis one job. A
/// producer that still sees UNAVAILABLE retries, as clients do: that must not duplicate
/// the job either (it can, with no id of its own, only if the server gave up).
async fn enqueue_without_id_during(how: Stall) {
    let redis = RedisProc::start(NO_AOF).await;
    let app = app_on(&redis).await;
    enqueue(&app, spec("enq", "warm-up")).await;
    stall(&redis, how).await;
    let r = app
        .jobs()
        .enqueue(pb::EnqueueRequest {
            job: Some(spec("enq", "")),
        })
        .await;
    match &r {
        Ok(resp) => {
            let resp = resp.get_ref();
            println!("{how:?}: Enqueue answered created={}", resp.created);
            assert!(
                resp.created,
                "{how:?}: the server generated the id: created"
            );
        }
        Err(s) => panic!("{how:?}: Enqueue failed ({s:?}); a producer retry would duplicate"),
    }
    tokio::time::sleep(Duration::from_millis(STALL_MS)).await;
    eventually(Duration::from_secs(10), || async {
        job_count(&redis, "enq").await >= 2
    })
    .await;
    assert_eq!(
        job_count(&redis, "enq").await,
        2,
        "{how:?}: exactly one new job"
    );
}

#[tokio::test]
async fn an_enqueue_without_id_is_written_once_when_redis_pauses() {
    enqueue_without_id_during(Stall::Pause).await;
}

#[tokio::test]
async fn an_enqueue_without_id_is_written_once_when_redis_sleeps() {
    enqueue_without_id_during(Stall::DebugSleep).await;
}

/// A lease call times out while Redis stalls, then runs: the job it leased reached no
/// worker. It must come back uncharged (attempt 1 when delivered) and never be
/// dead-lettered, though its max_attempts is 1.
async fn lost_lease_is_not_charged(how: Stall) {
    let redis = RedisProc::start(NO_AOF).await;
    let app = app_on(&redis).await;
    enqueue(&app, spec("lost", "hold")).await;
    let mut w = TestWorker::open(&app, &["lost"], 1, "w").await;
    let hold = w.lease().await;
    enqueue(&app, spec("lost", "victim")).await;
    stall(&redis, how).await;
    // A credit wakes the lease loop: its lease call meets the stalled Redis.
    w.send(pb::subscribe_request::Message::GrantCredits(
        pb::GrantCredits { credits: 1 },
    ));
    let l = victim_arrives(&mut w, how).await;
    let job = l.job.as_ref().expect("job");
    assert_eq!(job.job_id, "victim");
    assert_eq!(l.attempt, 1, "{how:?}: the lost lease was not charged");
    assert_eq!(w.ack(&l).await.code, 0);
    assert_eq!(w.ack(&hold).await.code, 0);
    let v = get_job(&app, "lost", "victim").await;
    assert_eq!(v.state, pb::JobState::Completed as i32);
    assert_eq!(v.attempts_made, 1, "{how:?}");
}

#[tokio::test]
async fn a_lease_whose_reply_is_lost_is_not_charged_when_redis_pauses() {
    lost_lease_is_not_charged(Stall::Pause).await;
}

#[tokio::test]
async fn a_lease_whose_reply_is_lost_is_not_charged_when_redis_sleeps() {
    lost_lease_is_not_charged(Stall::DebugSleep).await;
}

/// A stream's ack that brings its next job (one ack-and-lease call, `ack_lease.lua`) times
/// out while Redis stalls, then runs: the ack is applied (the worker's repeat answers OK),
/// and the job it leased reached no worker: it comes back uncharged (attempt 1 when
/// delivered) and is never dead-lettered, though its max_attempts is 1.
async fn lost_ack_lease_is_not_charged(how: Stall) {
    let redis = RedisProc::start(NO_AOF).await;
    let app = app_on(&redis).await;
    enqueue(&app, spec("al-lost", "warm-up")).await;
    enqueue(&app, spec("al-lost", "hold")).await;
    let mut w = TestWorker::open(&app, &["al-lost"], 1, "w").await;
    // The warm-up's ack leases the next job, so Redis has the script before the stall (a
    // first call would meet NOSCRIPT after the stall and apply nothing).
    let warm = w.lease().await;
    assert_eq!(w.ack(&warm).await.code, 0);
    let hold = w.lease().await;
    assert_eq!(hold.job.as_ref().expect("job").job_id, "hold");
    enqueue(&app, spec("al-lost", "victim")).await;
    stall(&redis, how).await;
    // The ack gives the stream's credit back: its call acks and leases the victim.
    let job = hold.job.as_ref().expect("job");
    w.send(pb::subscribe_request::Message::Ack(pb::AckRequest {
        queue: job.queue.clone(),
        job_id: job.job_id.clone(),
        lease_token: hold.lease_token.clone(),
        result: Vec::new(),
    }));
    let l = victim_arrives(&mut w, how).await;
    assert_eq!(l.job.as_ref().expect("job").job_id, "victim");
    assert_eq!(l.attempt, 1, "{how:?}: the lost lease was not charged");
    let first = w.settled().await;
    println!(
        "{how:?}: the ack in the stalled call answered code {}",
        first.code
    );
    assert_eq!(w.ack(&l).await.code, 0);
    // The stalled call's ack was applied, or not: repeated, it answers OK.
    assert_eq!(w.ack(&hold).await.code, 0, "{how:?}");
    let v = get_job(&app, "al-lost", "victim").await;
    assert_eq!(v.state, pb::JobState::Completed as i32);
    assert_eq!(v.attempts_made, 1, "{how:?}");
    let h = get_job(&app, "al-lost", "hold").await;
    assert_eq!(h.state, pb::JobState::Completed as i32);
    assert_eq!(h.attempts_made, 1, "{how:?}");
}

#[tokio::test]
async fn an_ack_and_lease_whose_reply_is_lost_is_not_charged_when_redis_pauses() {
    lost_ack_lease_is_not_charged(Stall::Pause).await;
}

#[tokio::test]
async fn an_ack_and_lease_whose_reply_is_lost_is_not_charged_when_redis_sleeps() {
    lost_ack_lease_is_not_charged(Stall::DebugSleep).await;
}

/// The first lease the worker reads within 8 s (heartbeating meanwhile): the victim of a
/// lost reply, which must come back to a worker, not be charged and dead-lettered.
async fn victim_arrives(w: &mut TestWorker, how: Stall) -> pb::Lease {
    w.heartbeat_for(Duration::from_secs(8))
        .await
        .into_iter()
        .next()
        .unwrap_or_else(|| {
            panic!("{how:?}: the victim never reached the worker (charged and dead-lettered?)")
        })
}

#[derive(Clone, Copy, Debug)]
enum SettleKind {
    Ack,
    /// Ack on a queue that keeps no completed jobs (the record is gone at once).
    AckKeepNone,
    Fail,
}

async fn settle_once(app: &TestApp, l: &pb::Lease, kind: SettleKind) -> Result<(), tonic::Status> {
    let job = l.job.as_ref().expect("job");
    let mut workers = app.workers();
    match kind {
        SettleKind::Ack | SettleKind::AckKeepNone => workers
            .ack(pb::AckRequest {
                result: Vec::new(),
                queue: job.queue.clone(),
                job_id: job.job_id.clone(),
                lease_token: l.lease_token.clone(),
            })
            .await
            .map(|_| ()),
        SettleKind::Fail => workers
            .fail(pb::FailRequest {
                pause_group: false,
                queue: job.queue.clone(),
                job_id: job.job_id.clone(),
                lease_token: l.lease_token.clone(),
                disposition: pb::FailDisposition::NoRetry as i32,
                error: Some(pb::JobError {
                    message: "boom".into(),
                    error_type: "test".into(),
                    details: String::new(),
                }),
                retry_after: None,
                pause_queue: false,
            })
            .await
            .map(|r| {
                assert_eq!(r.get_ref().state, pb::JobState::Dead as i32);
            }),
    }
}

/// An ack (or fail) times out while Redis stalls, then is applied: the worker's retry with
/// the same token answers OK, not LEASE_LOST or NOT_FOUND.
async fn repeated_settle_answers_ok(how: Stall, kind: SettleKind) {
    let redis = RedisProc::start(NO_AOF).await;
    // No reaper or renewal call during the stall: the settle is the only call in flight, so
    // the server's connection is not replaced before it reaches Redis.
    let mut cfg = test_config(&redis.url);
    cfg.redis_timeout = REDIS_TIMEOUT;
    cfg.lease_duration = Duration::from_secs(60);
    cfg.reaper_interval = Duration::from_secs(60);
    let app = TestApp::spawn(cfg).await;
    if let SettleKind::AckKeepNone = kind {
        let mut c = redis.conn().await;
        let _: () = redis::cmd("HSET")
            .arg("jw:{settle}:meta")
            .arg("keep_completed")
            .arg(0)
            .query_async(&mut c)
            .await
            .expect("hset");
    }
    let mut w = TestWorker::open(&app, &["settle"], 1, "w").await;
    // One settle of the same kind first, so its script is loaded (a NOSCRIPT answer is not
    // a lost reply: nothing ran).
    enqueue(&app, spec("settle", "warm-up")).await;
    let l = w.lease().await;
    settle_once(&app, &l, kind).await.expect("warm-up settle");
    enqueue(&app, spec("settle", "j")).await;
    let l = w.lease().await;
    stall(&redis, how).await;
    let t = std::time::Instant::now();
    let first = settle_once(&app, &l, kind).await;
    println!(
        "{how:?} {kind:?}: first settle during the stall, after {:?}: {:?}",
        t.elapsed(),
        first.as_ref().map_err(|s| s.code())
    );
    tokio::time::sleep(Duration::from_millis(STALL_MS)).await;
    let mut c = redis.conn().await;
    let active: i64 = redis::cmd("ZCARD")
        .arg("jw:{settle}:active")
        .query_async(&mut c)
        .await
        .expect("zcard");
    assert_eq!(active, 0, "{how:?} {kind:?}: the first settle was applied");
    let mut again = settle_once(&app, &l, kind).await;
    for _ in 0..50 {
        match &again {
            Err(s) if s.code() == tonic::Code::Unavailable => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                again = settle_once(&app, &l, kind).await;
            }
            _ => break,
        }
    }
    if let Err(s) = &again {
        panic!(
            "{how:?} {kind:?}: the repeated settle answered {:?} {}",
            s.code(),
            s.message()
        );
    }
    // Repeated once more, long after: still OK.
    settle_once(&app, &l, kind)
        .await
        .unwrap_or_else(|s| panic!("{how:?} {kind:?}: third settle: {s:?}"));
}

#[tokio::test]
async fn a_repeated_ack_answers_ok_when_redis_paused() {
    repeated_settle_answers_ok(Stall::Pause, SettleKind::Ack).await;
    repeated_settle_answers_ok(Stall::Pause, SettleKind::AckKeepNone).await;
    repeated_settle_answers_ok(Stall::Pause, SettleKind::Fail).await;
}

#[tokio::test]
async fn a_repeated_ack_answers_ok_when_redis_slept() {
    repeated_settle_answers_ok(Stall::DebugSleep, SettleKind::Ack).await;
    repeated_settle_answers_ok(Stall::DebugSleep, SettleKind::AckKeepNone).await;
    repeated_settle_answers_ok(Stall::DebugSleep, SettleKind::Fail).await;
}
