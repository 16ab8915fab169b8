//! Two jobwire replicas (real processes) on one Redis. SIGTERM one: it leases nothing new,
//! sends Draining, waits its grace period, hands its leases back to waiting without
//! consuming an attempt, and the other replica's worker takes them at once. SIGKILL one: its
//! leases expire and the jobs come through the other replica as a new attempt.

use std::time::{Duration, Instant};

use jobwire::pb;
use pb::subscribe_response::Message as Out;

use crate::harness::*;
use crate::procs::{server_args, RedisOpts, RedisProc, ServerProc};

const GRACE: Duration = Duration::from_secs(2);

/// A replica's flags with the safety sweep off (it would repair a lost index entry by chance)
/// and the reaper ticking every `reaper`.
fn no_sweep(redis_url: &str, reaper: &str) -> Vec<String> {
    let mut args = server_args(redis_url);
    let at = args
        .iter()
        .position(|a| a == "--reaper-interval")
        .expect("reaper flag");
    args[at + 1] = reaper.to_owned();
    args.extend(["--reaper-sweep-rate", "0"].map(String::from));
    args
}

/// The due-index key of `queue` on one Redis (one shard).
fn due_key(queue: &str) -> &'static str {
    jobwire::store::due_key(&jobwire::jobs::QueueName::parse(queue).expect("queue"), 1)
}

async fn enqueue_on(server: &ServerProc, queue: &str, id: &str) {
    server
        .jobs()
        .enqueue(pb::EnqueueRequest {
            job: Some(pb::JobSpec {
                max_attempts: Some(3),
                ..spec(queue, id)
            }),
        })
        .await
        .expect("enqueue");
}

fn id_of(l: &pb::Lease) -> String {
    l.job.as_ref().expect("job").job_id.clone()
}

#[tokio::test]
async fn sigterm_drains_one_replica_and_the_other_takes_its_jobs_without_an_attempt() {
    let redis = RedisProc::start(RedisOpts::default()).await;
    let mut a = ServerProc::spawn(server_args(&redis.url)).await;
    let b = ServerProc::spawn(server_args(&redis.url)).await;
    let mut on_a = TestWorker::open_on(a.channel.clone(), &["rt"], 3, "on-a").await;
    enqueue_on(&a, "rt", "j1").await;
    enqueue_on(&a, "rt", "j2").await;
    let mut held = vec![id_of(&on_a.lease().await), id_of(&on_a.lease().await)];
    held.sort();
    assert_eq!(held, ["j1", "j2"]);
    let mut on_b = TestWorker::open_on(b.channel.clone(), &["rt"], 3, "on-b").await;

    // The worker on A stays alive (heartbeats) and reports what A sends it.
    let watch_a = tokio::spawn(async move {
        let (mut draining, mut leased) = (None, Vec::new());
        while on_a.heartbeat() {
            match on_a.recv(Duration::from_millis(200)).await {
                Recv::Msg(Out::Draining(d)) => draining = d.grace,
                Recv::Msg(Out::Lease(l)) => leased.push(id_of(&l)),
                Recv::Msg(_) | Recv::Timeout => {}
                Recv::End | Recv::Error(_) => break,
            }
        }
        (draining, leased)
    });
    let term = Instant::now();
    a.sigterm();
    // A draining replica leases nothing new, though its worker has a free credit: the job
    // enqueued now goes through B (A's worker reports no lease below). After the grace period
    // A's unfinished leases come back to B too, attempt not consumed. On a slow machine the
    // grace can end before j3 is leased, so the order of the three is not checked.
    enqueue_on(&b, "rt", "j3").await;
    let mut got = Vec::new();
    let mut first_back = None;
    for _ in 0..3 {
        let l = on_b
            .lease_within(GRACE + Duration::from_secs(10))
            .await
            .expect("j3 and the two handed-back jobs leased through B");
        assert_eq!(l.attempt, 1, "the hand-back consumed no attempt");
        let id = id_of(&l);
        if id != "j3" {
            first_back.get_or_insert_with(|| term.elapsed());
        }
        assert_eq!(on_b.ack(&l).await.code, 0);
        got.push(id);
    }
    let took = first_back.expect("a handed-back job");
    println!("handed-back jobs delivered by the other replica {took:?} after SIGTERM");
    assert!(
        took >= GRACE,
        "the replica waited its grace period: {took:?}"
    );
    got.sort();
    assert_eq!(got, ["j1", "j2", "j3"]);
    let status = a.wait_exit(Duration::from_secs(20)).await;
    assert!(
        status.success(),
        "SIGTERM exits 0: {status}\n{}",
        a.log_tail()
    );
    let (draining, leased) = watch_a.await.expect("join");
    assert_eq!(
        draining.map(|g| g.seconds),
        Some(GRACE.as_secs() as i64),
        "Draining sent with the grace period"
    );
    assert!(leased.is_empty(), "the draining replica leased {leased:?}");
}

#[tokio::test]
async fn sigkill_of_a_replica_lets_its_leases_expire_into_the_other() {
    let redis = RedisProc::start(RedisOpts::default()).await;
    let mut a = ServerProc::spawn(server_args(&redis.url)).await;
    let b = ServerProc::spawn(server_args(&redis.url)).await;
    let on_a = TestWorker::open_on(a.channel.clone(), &["rk"], 1, "on-a").await;
    enqueue_on(&a, "rk", "j").await;
    let mut on_a = on_a;
    let first = on_a.lease().await;
    assert_eq!(first.attempt, 1);
    // A confirms in the background that its lease call reached a stream; a lease whose call
    // was never confirmed goes back uncharged at its deadline (nobody can tell whether a
    // worker got it). Wait for the confirmation, so the lease counts as delivered.
    wait_lease_calls_confirmed(&mut redis.conn().await, "rk").await;
    let mut on_b = TestWorker::open_on(b.channel.clone(), &["rk"], 1, "on-b").await;
    // The worker on A is alive and busy: only A's death can cost it the lease.
    tokio::spawn(async move {
        while on_a.heartbeat() {
            if let Recv::End | Recv::Error(_) = on_a.recv(Duration::from_millis(200)).await {
                break;
            }
        }
    });

    let killed = Instant::now();
    a.sigkill().await;
    // Lease 1 s + reaper 100 ms, with slack for a busy machine.
    let again = on_b
        .lease_within(Duration::from_secs(5))
        .await
        .expect("the job comes through the surviving replica");
    println!(
        "delivered by the other replica {:?} after SIGKILL",
        killed.elapsed()
    );
    assert_eq!(id_of(&again), "j");
    assert_eq!(again.attempt, 2, "an expired lease counts as an attempt");
    assert_eq!(on_b.ack(&again).await.code, 0);
    let job = b
        .jobs()
        .get_job(pb::GetJobRequest {
            queue: "rk".into(),
            job_id: "j".into(),
        })
        .await
        .expect("get")
        .into_inner()
        .job
        .expect("job");
    assert_eq!(job.state, pb::JobState::Completed as i32);
    assert_eq!(job.errors[0].error_type, "LEASE_EXPIRED");
}

/// A replica killed right after a lease call whose due-index update (made after the reply)
/// never happened: the lease must still expire into the other replica within a few reaper
/// intervals, not wait for the safety sweep (turned off here, as with many queues it
/// would take minutes to reach this one).
#[tokio::test]
async fn sigkill_after_a_lease_whose_due_index_update_was_lost_still_expires() {
    let redis = RedisProc::start(RedisOpts::default()).await;
    let mut a = ServerProc::spawn(no_sweep(&redis.url, "100ms")).await;
    let b = ServerProc::spawn(no_sweep(&redis.url, "100ms")).await;
    // B's reaper has looked at the (missing) index once: it seeds an empty index with every
    // registered queue only at its start, which would repair the loss by chance.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut on_a = TestWorker::open_on(a.channel.clone(), &["lost-due"], 1, "on-a").await;
    enqueue_on(&a, "lost-due", "j").await;
    let first = on_a.lease().await;
    assert_eq!(first.attempt, 1);
    // The update after the reply is lost (as if A died just before it).
    let mut conn = redis.conn().await;
    let _: i64 = redis::cmd("ZREM")
        .arg(due_key("lost-due"))
        .arg("lost-due")
        .query_async(&mut conn)
        .await
        .expect("ZREM");
    let killed = Instant::now();
    a.sigkill().await;
    drop(on_a);
    let mut on_b = TestWorker::open_on(b.channel.clone(), &["lost-due"], 1, "on-b").await;
    // The intent written before the lease call comes due at most 5 s after it (the lease
    // of 1 s has expired by then); reaper 100 ms; slack for a busy machine.
    let again = on_b.lease_within(Duration::from_secs(10)).await;
    println!(
        "lease with a lost due-index update: back through the other replica after {:?} ({:?})",
        killed.elapsed(),
        again.as_ref().map(|l| l.attempt)
    );
    let again = again.unwrap_or_else(|| {
        panic!(
            "the expired lease is reaped without the sweep\n{}",
            b.log_tail()
        )
    });
    assert_eq!(id_of(&again), "j");
    assert_eq!(on_b.ack(&again).await.code, 0);
}

/// A replica killed while it holds a lease's due-index update (held for its next reaper
/// tick or the queue's next intent, `src/store/due_later.rs`; its reaper ticks only every
/// 30 s here, so the update is surely still held): the intent written before the lease
/// call sends the other replica's reaper to the queue, and the lease expires into it within
/// seconds, with no safety sweep.
#[tokio::test]
async fn sigkill_while_a_lease_due_time_is_held_still_expires() {
    let redis = RedisProc::start(RedisOpts::default()).await;
    let mut a = ServerProc::spawn(no_sweep(&redis.url, "30s")).await;
    let b = ServerProc::spawn(no_sweep(&redis.url, "100ms")).await;
    // B's reaper has started and seeded the (empty) index: seeding would repair by chance.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut on_a = TestWorker::open_on(a.channel.clone(), &["held-due"], 1, "on-a").await;
    enqueue_on(&a, "held-due", "j").await;
    let first = on_a.lease().await;
    assert_eq!(first.attempt, 1);
    let mut conn = redis.conn().await;
    // A confirms the lease call once no other call has carried the confirmation for
    // `CONFIRM_DELAY`; killed before that, its job would come back uncharged (attempt 1).
    wait_lease_calls_confirmed(&mut conn, "held-due").await;
    let due: Option<f64> = redis::cmd("ZSCORE")
        .arg(due_key("held-due"))
        .arg("held-due")
        .query_async(&mut conn)
        .await
        .expect("ZSCORE");
    assert_eq!(due, None, "A holds the lease's due time");
    let killed = Instant::now();
    a.sigkill().await;
    drop(on_a);
    let mut on_b = TestWorker::open_on(b.channel.clone(), &["held-due"], 1, "on-b").await;
    // The intent comes due at most 5 s after the lease call; slack for a busy machine.
    let again = on_b.lease_within(Duration::from_secs(10)).await;
    println!(
        "lease whose due time A held: back through the other replica after {:?} ({:?})",
        killed.elapsed(),
        again.as_ref().map(|l| l.attempt)
    );
    let again = again.unwrap_or_else(|| {
        panic!(
            "the expired lease is reaped without the held update\n{}",
            b.log_tail()
        )
    });
    assert_eq!(id_of(&again), "j");
    assert_eq!(again.attempt, 2);
    assert_eq!(on_b.ack(&again).await.code, 0);
}
