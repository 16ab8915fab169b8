//! A bounded chaos soak: thousands of jobs through two jobwire replicas (real processes) on
//! one append-only Redis, while workers randomly ack, fail, hang and get SIGKILLed (real
//! child processes), Redis is SIGKILLed and restarted once, and one replica is SIGKILLed and
//! restarted once. At the end every acknowledged job is completed or dead, none is in two
//! states, none is lost, and no job was acked successfully twice. It prints deliveries,
//! duplicates (re-deliveries) and the time to drain.
//!
//! The short run is part of the suite; `chaos_soak_long` (ignored) runs
//! `JOBWIRE_SOAK_JOBS` jobs (default 50 000):
//! `cargo test --test fault chaos_soak_long -- --ignored --nocapture`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use jobwire::pb;
use jobwire::pb::worker_service_client::WorkerServiceClient;
use pb::subscribe_request::Message as In;
use pb::subscribe_response::Message as Out;
use rand::{Rng, SeedableRng};
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

use crate::harness::spec;
use crate::procs::{server_args, RedisOpts, RedisProc, ServerProc, WorkerProc};

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
}

impl Stats {
    fn delivered(&self, id: &str) {
        if let Ok(mut d) = self.deliveries.lock() {
            *d.entry(id.to_owned()).or_default() += 1;
        }
    }
}

fn pick(servers: &Servers, rng: &mut impl Rng) -> (String, Channel) {
    let s = servers.read().expect("servers");
    s[rng.random_range(0..s.len())].clone()
}

/// A worker that reconnects forever: per lease it acks (89 %), fails RETRY (10 %) or hangs
/// (1 %: goes silent past the heartbeat timeout, then abandons its stream).
async fn worker(n: u64, servers: Servers, stats: Arc<Stats>, stop: CancellationToken) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(n);
    while !stop.is_cancelled() {
        let (_, channel) = pick(&servers, &mut rng);
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let open = In::Open(pb::OpenStream {
            queues: vec![QUEUE.into()],
            credits: CREDITS,
            worker_id: format!("soak-{n}"),
        });
        let _ = tx.send(pb::SubscribeRequest {
            message: Some(open),
        });
        let sub = WorkerServiceClient::new(channel)
            .subscribe(tokio_stream::wrappers::UnboundedReceiverStream::new(rx))
            .await;
        let Ok(resp) = sub else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let mut stream = resp.into_inner();
        let mut beat = tokio::time::interval(Duration::from_millis(250));
        loop {
            let msg = tokio::select! {
                _ = stop.cancelled() => return,
                _ = beat.tick() => {
                    let hb = pb::SubscribeRequest { message: Some(In::Heartbeat(pb::Heartbeat {})) };
                    if tx.send(hb).is_err() { break }
                    continue;
                }
                m = stream.message() => m,
            };
            match msg {
                Ok(Some(pb::SubscribeResponse {
                    message: Some(Out::Lease(l)),
                })) => {
                    let job = l.job.as_ref().expect("job");
                    stats.delivered(&job.job_id);
                    let (queue, job_id, lease_token) =
                        (job.queue.clone(), job.job_id.clone(), l.lease_token.clone());
                    let r: f64 = rng.random();
                    let m = if r < 0.01 {
                        stats.hangs.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(1500)).await;
                        break;
                    } else if r < 0.11 {
                        stats.fails.fetch_add(1, Ordering::Relaxed);
                        In::Fail(pb::FailRequest {
                            queue,
                            job_id,
                            lease_token,
                            disposition: pb::FailDisposition::Retry as i32,
                            error: Some(pb::JobError {
                                message: "chaos".into(),
                                error_type: "chaos".into(),
                                details: String::new(),
                            }),
                            retry_after: None,
                            pause_queue: false,
                        })
                    } else {
                        In::Ack(pb::AckRequest {
                            queue,
                            job_id,
                            lease_token,
                        })
                    };
                    if tx.send(pb::SubscribeRequest { message: Some(m) }).is_err() {
                        break;
                    }
                }
                Ok(Some(pb::SubscribeResponse {
                    message: Some(Out::Settled(s)),
                })) => {
                    if s.code == 0 && s.state == pb::JobState::Completed as i32 {
                        if let Ok(mut a) = stats.acks.lock() {
                            *a.entry(s.job_id).or_default() += 1;
                        }
                    }
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Spawns worker child processes on random replicas and SIGKILLs each mid-job.
async fn killer(servers: Servers, stats: Arc<Stats>, stop: CancellationToken) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(99);
    while !stop.is_cancelled() {
        let (addr, _) = pick(&servers, &mut rng);
        let mut child = WorkerProc::spawn(&addr, QUEUE);
        let leased = tokio::select! {
            l = child.leased(Duration::from_secs(5)) => l,
            _ = stop.cancelled() => None,
        };
        child.sigkill().await;
        if let Some(l) = leased {
            stats.delivered(&l.job_id);
            stats.kills.fetch_add(1, Ordering::Relaxed);
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
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

async fn soak(jobs: usize, drain_patience: Duration) {
    let mut redis = RedisProc::start(RedisOpts::default()).await;
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
    let a = ServerProc::spawn(server_args(&redis.url)).await;
    let mut b = ServerProc::spawn(server_args(&redis.url)).await;
    let servers: Servers = Arc::default();
    set_servers(&servers, &[&a, &b]);
    let stats = Arc::new(Stats::default());
    let stop = CancellationToken::new();
    let mut tasks = Vec::new();
    for n in 0..WORKERS as u64 {
        tasks.push(tokio::spawn(worker(
            n,
            servers.clone(),
            stats.clone(),
            stop.clone(),
        )));
    }
    let stop_killer = CancellationToken::new();
    tasks.push(tokio::spawn(killer(
        servers.clone(),
        stats.clone(),
        stop_killer.clone(),
    )));

    let started = Instant::now();
    let ids: Vec<String> = (0..jobs).map(|i| format!("s{i}")).collect();
    let batches: Vec<&[String]> = ids.chunks(BATCH).collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for (k, batch) in batches.iter().enumerate() {
        enqueue_until_ok(&servers, batch, &mut rng).await;
        if k == batches.len() / 3 {
            println!("soak: SIGKILL redis after {} jobs", (k + 1) * BATCH);
            redis.kill().await;
            tokio::time::sleep(Duration::from_millis(500)).await; // an outage, not a blip
            redis.restart().await;
        }
        if k == 2 * batches.len() / 3 {
            println!("soak: SIGKILL replica B after {} jobs", (k + 1) * BATCH);
            set_servers(&servers, &[&a]);
            b.sigkill().await;
            b.restart().await;
            set_servers(&servers, &[&a, &b]);
        }
        tokio::time::sleep(Duration::from_millis(50)).await; // pacing: jobs arrive over time
    }
    let enqueued_at = Instant::now();
    stop_killer.cancel();
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

    // Every job in exactly one state set, and that one terminal.
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
    for id in &ids {
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
    let deliveries: u32 = stats.deliveries.lock().expect("d").values().sum();
    println!(
        "soak: jobs {jobs}, completed {completed}, dead {dead}, lost 0, deliveries {deliveries}, \
         re-deliveries {} ({} not asked for by a worker Fail), worker fails {}, hangs {}, worker SIGKILLs {}, redis restarts 1, \
         server restarts 1, enqueue phase {:?}, drain {drain:?}",
        (deliveries as usize).saturating_sub(jobs),
        (deliveries as usize).saturating_sub(jobs + stats.fails.load(Ordering::Relaxed) as usize),
        stats.fails.load(Ordering::Relaxed),
        stats.hangs.load(Ordering::Relaxed),
        stats.kills.load(Ordering::Relaxed),
        enqueued_at - started,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_soak_short() {
    soak(5_000, Duration::from_secs(90)).await;
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
