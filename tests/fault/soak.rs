//! A bounded chaos soak: thousands of jobs through two jobwire replicas (real processes) on
//! one append-only Redis (or a 3-master Redis Cluster: `chaos_soak_cluster_short`), while
//! workers randomly ack (after 0-30 ms), fail, hang and get SIGKILLed (real child processes),
//! a worker stops reading its stream, a share of the jobs has a timeout under the server's
//! 20 ms lease-confirmation delay, jobs are cancelled at random on a queue whose cancel grace
//! is 0, a producer enqueues jobs without an id (the server picks it), and the faults come one
//! after the other: Redis paused past the servers' Redis timeout, Redis SIGKILLed and
//! restarted, Redis flipped read-only (demoted to a replica) and back (on the Cluster: the
//! queue's master paused, then SIGKILLed so its replica takes over, the servers running with
//! `--redis-wait-replicas 1`), one replica SIGKILLed and restarted, and the other sent SIGINT
//! through its process group (Ctrl-C) and restarted.
//!
//! At the end every job is completed, dead or cancelled, none is in two states, none is lost
//! (an id-less Enqueue answered OK has its job; one answered with an error has at most one),
//! none exists twice, no job was acked successfully twice, **no lease was handed to a second
//! worker while its first holder still held it validly** (two workers never read the same
//! attempt of a job, except where the first holder's replica was SIGKILLed or shut down and
//! handed its leases back), and **no job was charged an attempt for a lease that never
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
//! re-deliveries, cancels, id-less Enqueues, the faults and the time to drain.
//!
//! The short runs are part of the suite; `chaos_soak_long` (ignored) runs
//! `JOBWIRE_SOAK_JOBS` jobs (default 50 000):
//! `cargo test --test fault chaos_soak_long -- --ignored --nocapture`.

mod backend;
mod check;
mod faults;
mod producers;
mod workers;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

use crate::procs::{server_args, ServerProc};
use backend::{Backend, RedisFault};

const QUEUE: &str = "soak";
const BATCH: usize = 50;
const WORKERS: usize = 6;
const CREDITS: u32 = 4;
const MAX_ATTEMPTS: u32 = 5;
/// How long after a fault ends its effects may still show: leases that could not be renewed
/// or confirmed during it expire within the servers' 1 s lease duration, and the reaping of
/// the ones whose call was never confirmed comes after the servers' grace for renewals.
const FAULT_AFTERMATH: Duration = Duration::from_secs(5);

/// The replicas' addresses and channels, as workers should find them now.
type Servers = Arc<RwLock<Vec<(String, Channel)>>>;

/// A lease read: the worker id that read it, and when.
type Read = (String, Instant);

/// What the id-less producer saw, by the number in each Enqueue's payload.
#[derive(Default)]
struct Idless {
    /// Answered OK: the id the server chose.
    acknowledged: HashMap<u64, String>,
    /// Answered with an error: the job may exist (at most once) or not.
    unknown: HashSet<u64>,
}

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
    /// CancelJob calls that cancelled a job or told its holder.
    cancels: AtomicU64,
    /// Each stream's worker id: the replica it was opened on and its credits.
    streams: Mutex<HashMap<String, (String, u32)>>,
    /// Leases read per (job id, worker id).
    read_by: Mutex<HashMap<(String, String), u32>>,
    /// The worker ids that read each (job id, attempt), with when, in the order they read it.
    attempt_readers: Mutex<HashMap<(String, u32), Vec<Read>>>,
    /// From the start of each fault to [`FAULT_AFTERMATH`] after its end.
    fault_windows: Mutex<Vec<(Instant, Instant)>>,
    /// Addresses of the replicas SIGKILLed (a restarted one listens on a new port).
    killed: Mutex<Vec<String>>,
    /// Addresses of the replicas shut down by a signal (they hand their leases back).
    shut_down: Mutex<Vec<String>>,
    /// Ids of the batches acknowledged so far (the canceller picks among them).
    known: Mutex<Vec<String>>,
    idless: Mutex<Idless>,
}

impl Stats {
    /// The stream `worker_id` read a lease of job `id`, attempt `attempt`.
    fn delivered(&self, id: &str, attempt: u32, worker_id: &str) {
        if let Ok(mut d) = self.deliveries.lock() {
            *d.entry(id.to_owned()).or_default() += 1;
        }
        if let Ok(mut d) = self.read_by.lock() {
            *d.entry((id.to_owned(), worker_id.to_owned())).or_default() += 1;
        }
        if let Ok(mut d) = self.attempt_readers.lock() {
            d.entry((id.to_owned(), attempt))
                .or_default()
                .push((worker_id.to_owned(), Instant::now()));
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

fn set_servers(servers: &Servers, list: &[&ServerProc]) {
    *servers.write().expect("servers") = list
        .iter()
        .map(|s| (s.grpc.clone(), s.channel.clone()))
        .collect();
}

/// The faults, each injected once at its point of the enqueue phase.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    Redis(RedisFault),
    KillReplicaB,
    SigintReplicaA,
}

async fn soak(mut backend: Backend, jobs: usize, drain_patience: Duration) {
    backend.set_meta("keep_completed", 100_000_000).await;
    backend.set_meta("cancel_grace_ms", 0).await;
    let mut args = server_args(backend.url());
    args.extend(backend.server_flags());
    let mut a = ServerProc::spawn(args.clone()).await;
    let mut b = ServerProc::spawn(args).await;
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
    tasks.push(tokio::spawn(producers::idless(
        servers.clone(),
        stats.clone(),
        stop_chaos.clone(),
    )));
    tasks.push(tokio::spawn(producers::canceller(
        servers.clone(),
        stats.clone(),
        stop_chaos.clone(),
    )));

    let mut faults: Vec<Fault> = backend.faults().iter().map(|f| Fault::Redis(*f)).collect();
    faults.extend([Fault::KillReplicaB, Fault::SigintReplicaA]);
    let started = Instant::now();
    let ids: Vec<String> = (0..jobs).map(|i| format!("s{i}")).collect();
    let batches: Vec<&[String]> = ids.chunks(BATCH).collect();
    let fault_at = |i: usize| batches.len() * (i + 1) / (faults.len() + 1);
    let mut injected = Vec::new();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for (k, batch) in batches.iter().enumerate() {
        producers::enqueue_until_ok(&servers, k, batch, &mut rng).await;
        stats
            .known
            .lock()
            .expect("known")
            .extend(batch.iter().cloned());
        let done = (k + 1) * BATCH;
        let at = (0..faults.len())
            .find(|i| fault_at(*i) == k)
            .map(|i| faults[i]);
        let fault_start = Instant::now();
        match at {
            Some(Fault::Redis(f)) => {
                println!("soak: {f:?} after {done} jobs");
                injected.push(backend.inject(f).await);
            }
            Some(Fault::KillReplicaB) => {
                println!("soak: SIGKILL replica B after {done} jobs");
                set_servers(&servers, &[&a]);
                stats.killed.lock().expect("killed").push(b.grpc.clone());
                b.sigkill().await;
                b.restart().await;
                set_servers(&servers, &[&a, &b]);
                injected.push("replica SIGKILL".into());
            }
            Some(Fault::SigintReplicaA) => {
                println!("soak: SIGINT to replica A's process group after {done} jobs");
                set_servers(&servers, &[&b]);
                stats
                    .shut_down
                    .lock()
                    .expect("shut down")
                    .push(a.grpc.clone());
                a.sigint_group();
                a.wait_exit(Duration::from_secs(20)).await;
                a.restart().await;
                set_servers(&servers, &[&a, &b]);
                injected.push("replica SIGINT (process group)".into());
            }
            None => {}
        }
        if at.is_some() {
            let window = (fault_start, Instant::now() + FAULT_AFTERMATH);
            stats.fault_windows.lock().expect("windows").push(window);
        }
        tokio::time::sleep(Duration::from_millis(50)).await; // pacing: jobs arrive over time
    }
    let enqueued_at = Instant::now();
    stop_chaos.cancel();
    // The id-less producer's last call returns before its task ends.
    let chaos: Vec<_> = tasks.drain(WORKERS..).collect();
    for t in chaos {
        let _ = t.await;
    }
    let expected = jobs + stats.idless.lock().expect("idless").acknowledged.len();
    let drain_deadline = enqueued_at + drain_patience;
    loop {
        let (finished, open) = check::progress(&backend).await;
        if finished >= expected && open == 0 {
            break;
        }
        assert!(
            Instant::now() < drain_deadline,
            "only {finished} of {expected} jobs finished ({open} open) within \
             {drain_patience:?} of the last enqueue"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let drain = enqueued_at.elapsed();
    stop.cancel();
    for t in tasks {
        let _ = t.await;
    }
    let report = check::Report {
        enqueue: enqueued_at - started,
        drain,
        faults: injected.join(", "),
    };
    check::check(&backend, &ids, &stats, report).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_soak_short() {
    soak(Backend::single().await, 5_000, Duration::from_secs(120)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_soak_cluster_short() {
    soak(Backend::cluster().await, 3_000, Duration::from_secs(120)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long soak: JOBWIRE_SOAK_JOBS=50000 cargo test --test fault chaos_soak_long -- --ignored --nocapture"]
async fn chaos_soak_long() {
    let jobs = std::env::var("JOBWIRE_SOAK_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50_000);
    soak(Backend::single().await, jobs, Duration::from_secs(1800)).await;
}
