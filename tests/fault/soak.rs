//! A bounded chaos soak: thousands of jobs through two jobwire replicas (real processes) on
//! one append-only Redis, while workers randomly ack, fail, hang and get SIGKILLed (real
//! child processes), a worker stops reading its stream, and the faults come one after the
//! other: Redis paused past the servers' Redis timeout, Redis SIGKILLed and restarted, Redis
//! flipped read-only (demoted to a replica) and back, one replica SIGKILLed and restarted,
//! and the other sent SIGINT through its process group (Ctrl-C) and restarted.
//!
//! At the end every job is completed or dead, none is in two states, none is lost, no job
//! was acked successfully twice, and **no job was charged an attempt for a lease that never
//! reached a worker**: each job's attempts are at most the leases workers read for it. Two
//! kinds of leases can be charged unseen, both caused by a SIGKILL, and are told apart:
//! - a worker child killed before it printed its lease (at most one each);
//! - leases of the streams open on the SIGKILLed replica that it had leased in Redis but not
//!   yet written to a socket (its outbox, up to 64 a stream, and what its HTTP/2 transport
//!   had taken but not sent): the process is gone, nothing can hand them back, and they
//!   expire as attempts. Every stream has its own worker id, so such an attempt shows in the
//!   job's errors as `LEASE_EXPIRED` of a stream opened on the killed replica; at most a
//!   stream's credits can be charged this way.
//!
//! Any other attempt charged beyond the leases read fails the soak. It prints deliveries,
//! re-deliveries, the faults and the time to drain.
//!
//! The short run is part of the suite; `chaos_soak_long` (ignored) runs
//! `JOBWIRE_SOAK_JOBS` jobs (default 50 000):
//! `cargo test --test fault chaos_soak_long -- --ignored --nocapture`.

mod faults;
mod workers;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use futures::StreamExt;
use jobwire::pb;
use rand::{Rng, SeedableRng};
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

use crate::harness::spec;
use crate::procs::{free_port, server_args, RedisOpts, RedisProc, ServerProc};

const QUEUE: &str = "soak";
const BATCH: usize = 50;
const WORKERS: usize = 6;
const CREDITS: u32 = 4;
const MAX_ATTEMPTS: u32 = 5;

/// The replicas' addresses and channels, as workers should find them now.
type Servers = Arc<RwLock<Vec<(String, Channel)>>>;

#[derive(Default)]
struct Stats {
    deliveries: Mutex<HashMap<String, u32>>,
    acks: Mutex<HashMap<String, u32>>,
    hangs: AtomicU64,
    fails: AtomicU64,
    kills: AtomicU64,
    /// Worker children killed before they reported a lease (one may have been in flight).
    unreported_kills: AtomicU64,
    /// Times the stalled reader stopped reading.
    stalls: AtomicU64,
    /// Each stream's worker id: the replica it was opened on and its credits.
    streams: Mutex<HashMap<String, (String, u32)>>,
    /// Leases read per (job id, worker id).
    read_by: Mutex<HashMap<(String, String), u32>>,
    /// Addresses of the replicas SIGKILLed (a restarted one listens on a new port).
    killed: Mutex<Vec<String>>,
}

impl Stats {
    /// The stream `worker_id` read a lease of job `id`.
    fn delivered(&self, id: &str, worker_id: &str) {
        if let Ok(mut d) = self.deliveries.lock() {
            *d.entry(id.to_owned()).or_default() += 1;
        }
        if let Ok(mut d) = self.read_by.lock() {
            *d.entry((id.to_owned(), worker_id.to_owned())).or_default() += 1;
        }
    }

    /// A stream named `worker_id` was opened on `addr` with `credits`.
    fn opened(&self, worker_id: &str, addr: &str, credits: u32) {
        if let Ok(mut s) = self.streams.lock() {
            s.insert(worker_id.to_owned(), (addr.to_owned(), credits));
        }
    }
}

fn pick(servers: &Servers, rng: &mut impl Rng) -> (String, Channel) {
    let s = servers.read().expect("servers");
    s[rng.random_range(0..s.len())].clone()
}

/// Enqueues `ids` on some replica, retrying (same ids: idempotent) until one answers OK.
async fn enqueue_until_ok(servers: &Servers, ids: &[String], rng: &mut impl Rng) {
    loop {
        let (_, channel) = pick(servers, rng);
        let jobs = ids
            .iter()
            .map(|id| pb::JobSpec {
                max_attempts: Some(MAX_ATTEMPTS),
                ..spec(QUEUE, id)
            })
            .collect();
        let mut client = pb::job_service_client::JobServiceClient::new(channel);
        let call = client.enqueue_batch(pb::EnqueueBatchRequest { jobs });
        if let Ok(Ok(r)) = tokio::time::timeout(Duration::from_secs(10), call).await {
            if r.get_ref().results.iter().all(|r| r.job.is_some()) {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn zcard(redis: &RedisProc, set: &str) -> Option<usize> {
    let mut c = redis::Client::open(redis.url.as_str())
        .ok()?
        .get_multiplexed_async_connection()
        .await
        .ok()?;
    redis::cmd("ZCARD")
        .arg(format!("jw:{{{QUEUE}}}:{set}"))
        .query_async(&mut c)
        .await
        .ok()
}

fn set_servers(servers: &Servers, list: &[&ServerProc]) {
    *servers.write().expect("servers") = list
        .iter()
        .map(|s| (s.grpc.clone(), s.channel.clone()))
        .collect();
}

/// The faults, each injected once at its point of the enqueue phase (a fraction of batches).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    PauseRedis,
    KillRedis,
    ReadOnlyRedis,
    KillReplicaB,
    SigintReplicaA,
}

const FAULTS: [(Fault, f64); 5] = [
    (Fault::PauseRedis, 1.0 / 6.0),
    (Fault::KillRedis, 2.0 / 6.0),
    (Fault::ReadOnlyRedis, 3.0 / 6.0),
    (Fault::KillReplicaB, 4.0 / 6.0),
    (Fault::SigintReplicaA, 5.0 / 6.0),
];

async fn soak(jobs: usize, drain_patience: Duration) {
    let redis_port = free_port();
    let mut redis = RedisProc::start_on(RedisOpts::default(), redis_port).await;
    {
        let mut c = redis.conn().await;
        let _: i64 = redis::cmd("HSET")
            .arg(format!("jw:{{{QUEUE}}}:meta"))
            .arg("keep_completed")
            .arg(100_000_000)
            .query_async(&mut c)
            .await
            .expect("retention off");
    }
    let mut a = ServerProc::spawn(server_args(&redis.url)).await;
    let mut b = ServerProc::spawn(server_args(&redis.url)).await;
    let servers: Servers = Arc::default();
    set_servers(&servers, &[&a, &b]);
    let stats = Arc::new(Stats::default());
    let stop = CancellationToken::new();
    let mut tasks = Vec::new();
    for n in 0..WORKERS as u64 {
        tasks.push(tokio::spawn(workers::worker(
            n,
            servers.clone(),
            stats.clone(),
            stop.clone(),
        )));
    }
    let stop_chaos = CancellationToken::new();
    tasks.push(tokio::spawn(workers::killer(
        servers.clone(),
        stats.clone(),
        stop_chaos.clone(),
    )));
    tasks.push(tokio::spawn(workers::stalled_reader(
        servers.clone(),
        stats.clone(),
        Duration::from_secs(3),
        stop_chaos.clone(),
    )));

    let started = Instant::now();
    let ids: Vec<String> = (0..jobs).map(|i| format!("s{i}")).collect();
    let batches: Vec<&[String]> = ids.chunks(BATCH).collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for (k, batch) in batches.iter().enumerate() {
        enqueue_until_ok(&servers, batch, &mut rng).await;
        let at = FAULTS
            .iter()
            .find(|(_, f)| k == (batches.len() as f64 * f) as usize)
            .map(|(fault, _)| *fault);
        let done = (k + 1) * BATCH;
        match at {
            Some(Fault::PauseRedis) => {
                println!(
                    "soak: CLIENT PAUSE 4000 ALL (past the 3 s Redis timeout) after {done} jobs"
                );
                faults::pause(&redis, 4_000).await;
            }
            Some(Fault::KillRedis) => {
                println!("soak: SIGKILL redis after {done} jobs");
                redis.kill().await;
                tokio::time::sleep(Duration::from_millis(500)).await; // an outage, not a blip
                redis.restart().await;
            }
            Some(Fault::ReadOnlyRedis) => {
                println!("soak: redis demoted to a read-only replica for 3 s after {done} jobs");
                faults::read_only_for(&redis, redis_port, Duration::from_secs(3)).await;
            }
            Some(Fault::KillReplicaB) => {
                println!("soak: SIGKILL replica B after {done} jobs");
                set_servers(&servers, &[&a]);
                stats.killed.lock().expect("killed").push(b.grpc.clone());
                b.sigkill().await;
                b.restart().await;
                set_servers(&servers, &[&a, &b]);
            }
            Some(Fault::SigintReplicaA) => {
                println!("soak: SIGINT to replica A's process group after {done} jobs");
                set_servers(&servers, &[&b]);
                a.sigint_group();
                a.wait_exit(Duration::from_secs(20)).await;
                a.restart().await;
                set_servers(&servers, &[&a, &b]);
            }
            None => {}
        }
        tokio::time::sleep(Duration::from_millis(50)).await; // pacing: jobs arrive over time
    }
    let enqueued_at = Instant::now();
    stop_chaos.cancel();
    let drain_deadline = enqueued_at + drain_patience;
    loop {
        let done = match (
            zcard(&redis, "completed").await,
            zcard(&redis, "dead").await,
        ) {
            (Some(c), Some(d)) => c + d,
            _ => 0,
        };
        if done >= jobs {
            break;
        }
        assert!(
            Instant::now() < drain_deadline,
            "only {done} of {jobs} jobs finished within {drain_patience:?} of the last enqueue"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let drain = enqueued_at.elapsed();
    stop.cancel();
    for t in tasks {
        let _ = t.await;
    }
    check(&redis, &ids, &stats, enqueued_at - started, drain).await;
}

/// The soak's verdict: one terminal state per job, none lost, none acked twice, no attempt
/// charged for a lease no worker read.
async fn check(
    redis: &RedisProc,
    ids: &[String],
    stats: &Stats,
    enqueue: Duration,
    drain: Duration,
) {
    let jobs = ids.len();
    let mut c = redis.conn().await;
    let mut where_: HashMap<String, Vec<&str>> = HashMap::new();
    let store = jobwire::store::Store::connect(&redis.url, Duration::from_secs(5))
        .await
        .expect("store");
    let queue = jobwire::jobs::QueueName::parse(QUEUE).expect("queue");
    for set in ["waiting", "delayed", "active", "completed", "dead"] {
        let members: Vec<String> = if set == "waiting" {
            store.waiting_ids(&queue).await.expect("waiting ids")
        } else {
            redis::cmd("ZRANGE")
                .arg(format!("jw:{{{QUEUE}}}:{set}"))
                .arg(0)
                .arg(-1)
                .query_async(&mut c)
                .await
                .expect("zrange")
        };
        for m in members {
            where_.entry(m).or_default().push(set);
        }
    }
    let (mut completed, mut dead) = (0, 0);
    for id in ids {
        match where_.get(id).map(Vec::as_slice) {
            Some(["completed"]) => completed += 1,
            Some(["dead"]) => dead += 1,
            other => panic!("job {id} is in {other:?}, not exactly one terminal state"),
        }
    }
    assert_eq!(where_.len(), jobs, "no stray job in the state sets");
    let acks = stats.acks.lock().expect("acks").clone();
    let twice: Vec<_> = acks.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "jobs acked successfully twice: {twice:?}");

    // Attempts charged against leases read: the promise this soak exists for.
    let deliveries = stats.deliveries.lock().expect("d").clone();
    let attempts: Vec<(String, u32, String)> = futures::stream::iter(ids.iter().cloned())
        .map(|id| {
            let (store, queue) = (store.clone(), queue.clone());
            async move {
                let job = store.get_job(&queue, &id).await.expect("get job");
                let errors = job.as_ref().map_or(String::new(), |j| {
                    j.errors
                        .iter()
                        .map(|e| format!("{}:{}@{}", e.attempt, e.error_type, e.worker_id))
                        .collect::<Vec<_>>()
                        .join(" ")
                });
                (id, job.map_or(0, |j| j.attempts_made), errors)
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    let mut overcharged = Vec::new();
    for (id, made, errors) in &attempts {
        let read = deliveries.get(id).copied().unwrap_or(0);
        if *made > read {
            overcharged.push((id.clone(), *made, read, errors.clone()));
        }
    }
    let unseen = stats.unreported_kills.load(Ordering::Relaxed) as usize;
    // Attempts charged unseen because the replica holding the lease was SIGKILLed: per job
    // and stream opened on a killed replica, its LEASE_EXPIRED attempts beyond the leases of
    // the job that stream read.
    let streams = stats.streams.lock().expect("streams").clone();
    let killed = stats.killed.lock().expect("killed").clone();
    let read_by = stats.read_by.lock().expect("read by").clone();
    let on_killed = |worker: &str| streams.get(worker).filter(|(a, _)| killed.contains(a));
    let mut lost_with_replica: HashMap<String, u32> = HashMap::new();
    let mut excess = 0;
    for (id, made, read, errors) in &overcharged {
        let mut expired: HashMap<&str, u32> = HashMap::new();
        for e in errors.split(' ') {
            if let Some((_, worker)) = e.split_once(":LEASE_EXPIRED@") {
                if on_killed(worker).is_some() {
                    *expired.entry(worker).or_default() += 1;
                }
            }
        }
        let mut over = made - read;
        for (worker, n) in expired {
            let seen = read_by
                .get(&(id.clone(), worker.to_owned()))
                .copied()
                .unwrap_or(0);
            let lost = n.saturating_sub(seen).min(over);
            over -= lost;
            if lost > 0 {
                *lost_with_replica.entry(worker.to_owned()).or_default() += lost;
            }
        }
        excess += over;
    }
    for (worker, n) in &lost_with_replica {
        let credits = on_killed(worker).map_or(0, |(_, c)| *c);
        assert!(
            *n <= credits,
            "{n} attempts charged to stream {worker} on the killed replica, past its {credits} credits"
        );
    }
    let lost: u32 = lost_with_replica.values().sum();
    if excess as usize > unseen {
        for (id, ..) in overcharged.iter().take(20) {
            let by: Vec<_> = read_by.iter().filter(|((j, _), _)| j == id).collect();
            println!("soak: job {id} read by {by:?}");
        }
    }
    assert!(
        excess as usize <= unseen,
        "jobs charged attempts for leases no worker read ({excess} attempts besides {lost} lost \
         with the SIGKILLed replica, at most {unseen} could be in killed children): (id, \
         attempts, leases read, attempt:error@worker) {:?}",
        &overcharged[..overcharged.len().min(20)]
    );
    let delivered: u32 = deliveries.values().sum();
    let fails = stats.fails.load(Ordering::Relaxed) as usize;
    println!(
        "soak: jobs {jobs}, completed {completed}, dead {dead}, lost 0, deliveries {delivered}, \
         re-deliveries {} ({} not asked for by a worker Fail), attempts charged beyond leases \
         read {excess} (children killed unseen {unseen}) plus {lost} lost unsent with the SIGKILLed \
         replica ({} of its streams), worker fails {fails}, hangs {}, \
         worker SIGKILLs {}, reader stalls {}, faults: redis pause 4 s, redis SIGKILL, \
         read-only 3 s, replica SIGKILL, replica SIGINT (process group); enqueue phase \
         {enqueue:?}, drain {drain:?}",
        (delivered as usize).saturating_sub(jobs),
        (delivered as usize).saturating_sub(jobs + fails),
        lost_with_replica.len(),
        stats.hangs.load(Ordering::Relaxed),
        stats.kills.load(Ordering::Relaxed),
        stats.stalls.load(Ordering::Relaxed),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_soak_short() {
    soak(5_000, Duration::from_secs(120)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long soak: JOBWIRE_SOAK_JOBS=50000 cargo test --test fault chaos_soak_long -- --ignored --nocapture"]
async fn chaos_soak_long() {
    let jobs = std::env::var("JOBWIRE_SOAK_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50_000);
    soak(jobs, Duration::from_secs(1800)).await;
}
