//! A Redis Cluster master SIGKILLed under `--redis-wait-replicas 1` (issue 32, item 8). Its
//! replica is promoted and serves the slots, but has no replica of its own until the killed
//! node comes back (as its replica). Meanwhile:
//!
//! - reads (GetJob) of the killed master's queues are served within seconds of the
//!   promotion, whatever writes are waiting for replicas;
//! - writes answer UNAVAILABLE `NOT_REPLICATED` promptly (not "timed out");
//! - once the node is back as a replica, writes succeed again, the worker stream opened before
//!   the kill leases and acks, and an idle worker is woken at once by a job enqueued on
//!   another server.
//!
//! Load runs throughout: a producer on the killed master's other queue retries its Enqueues
//! the way clients do, so WAITs are always in flight on that node. The test prints the time
//! from the SIGKILL to the first served GetJob.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use jobwire::pb;
use tokio_util::sync::CancellationToken;

use crate::harness::*;
use crate::topology::TestCluster;

/// A queue name whose keys live on master `port`, not in `taken`.
async fn queue_on(cluster: &TestCluster, port: u16, prefix: &str) -> String {
    for i in 0.. {
        let name = format!("{prefix}{i}");
        if cluster.master_for_key(&format!("jw:{{{name}}}:meta")).await == port {
            return name;
        }
    }
    unreachable!()
}

fn config(url: &str) -> jobwire::config::ServeArgs {
    let mut cfg = test_config(url);
    // The defaults: WAIT up to 1 s, every Redis command up to 3 s.
    cfg.redis_wait_replicas = 1;
    cfg.redis_wait_timeout = Duration::from_secs(1);
    cfg.redis_timeout = Duration::from_secs(3);
    cfg
}

/// Enqueues fresh jobs on `queue` until cancelled, each retried with its id until accepted
/// (as a client does after UNAVAILABLE); counts accepted and refused calls.
async fn produce(
    app_jobs: pb::job_service_client::JobServiceClient<tonic::transport::Channel>,
    queue: String,
    tag: String,
    ok: Arc<AtomicUsize>,
    refused: Arc<AtomicUsize>,
    stop: CancellationToken,
) {
    let mut client = app_jobs;
    let mut n = 0;
    while !stop.is_cancelled() {
        let id = format!("{tag}-{n}");
        n += 1;
        while !stop.is_cancelled() {
            let call = client.enqueue(pb::EnqueueRequest {
                job: Some(spec(&queue, &id)),
            });
            match tokio::time::timeout(Duration::from_secs(10), call).await {
                Ok(Ok(_)) => {
                    ok.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                _ => {
                    refused.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
    }
}

/// GetJob of `id` until it is served; returns when (panics after `patience`).
async fn first_read(
    app: &TestApp,
    who: &str,
    queue: &str,
    id: &str,
    patience: Duration,
) -> Instant {
    let deadline = Instant::now() + patience;
    let mut last = None;
    while Instant::now() < deadline {
        let mut jobs = app.jobs();
        let call = jobs.get_job(pb::GetJobRequest {
            queue: queue.into(),
            job_id: id.into(),
        });
        match tokio::time::timeout(Duration::from_secs(5), call).await {
            Ok(Ok(_)) => return Instant::now(),
            Ok(Err(s)) => last = Some(format!("{:?}: {}", s.code(), s.message())),
            Err(_) => last = Some("no answer in 5 s".into()),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("GetJob {queue}/{id} on {who} not served within {patience:?}; last: {last:?}");
}

/// One Enqueue's outcome and how long it took.
async fn try_enqueue(
    app: &TestApp,
    queue: &str,
    id: &str,
) -> (Result<(), tonic::Status>, Duration) {
    let t = Instant::now();
    let r = app
        .jobs()
        .enqueue(pb::EnqueueRequest {
            job: Some(spec(queue, id)),
        })
        .await
        .map(|_| ());
    (r, t.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_master_sigkill_with_wait_replicas_serves_reads_then_writes_once_a_replica_is_back()
{
    let mut cluster = TestCluster::start(3, 1).await;
    let victim = cluster.masters().await[0];
    let queue = queue_on(&cluster, victim, "wf").await;
    let load_queue = queue_on(&cluster, victim, "wl").await;
    // `consumer` serves the worker; `producer` enqueues (wake-ups travel over pub/sub).
    let consumer = TestApp::spawn(config(&cluster.url)).await;
    let producer = TestApp::spawn(config(&cluster.url)).await;
    let mut w = TestWorker::open(&consumer, &[&queue], 1, "w").await;
    enqueue(&producer, spec(&queue, "before")).await;
    let l = w.lease().await;
    assert_eq!(w.ack(&l).await.code, 0);

    let stop = CancellationToken::new();
    let (ok, refused) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    // Three producers, as clients under load: writes are always waiting on that master.
    let load: Vec<_> = [producer.jobs(), producer.jobs(), consumer.jobs()]
        .into_iter()
        .enumerate()
        .map(|(i, jobs)| {
            tokio::spawn(produce(
                jobs,
                load_queue.clone(),
                format!("load{i}"),
                ok.clone(),
                refused.clone(),
                stop.clone(),
            ))
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(ok.load(Ordering::Relaxed) > 0, "the load runs");

    // SIGKILL; the replica takes over after the node timeout (2 s) and has no replica.
    let killed = Instant::now();
    cluster.kill(victim);
    let (read_at, ()) = tokio::join!(
        first_read(
            &producer,
            "producer",
            &queue,
            "before",
            Duration::from_secs(60)
        ),
        cluster.wait_ok(Duration::from_secs(60))
    );
    let promoted = killed.elapsed();
    let first_get = read_at - killed;
    // Reads keep being served (on both servers) while writes wait for replicas.
    first_read(
        &producer,
        "producer",
        &queue,
        "before",
        Duration::from_secs(10),
    )
    .await;
    first_read(
        &consumer,
        "consumer",
        &queue,
        "before",
        Duration::from_secs(10),
    )
    .await;
    let served_after = killed.elapsed();

    // Writes: NOT_REPLICATED, promptly (the wait timeout is 1 s).
    let mut refusals = Vec::new();
    for i in 0..3 {
        let (r, took) = try_enqueue(&producer, &queue, &format!("unreplicated{i}")).await;
        let s = r.expect_err("no replica: the write is not acknowledged");
        assert_eq!(s.code(), tonic::Code::Unavailable, "{s:?}");
        assert!(
            s.message().contains("--redis-wait-replicas"),
            "a write without a replica answers NOT_REPLICATED, not {s:?}"
        );
        refusals.push(took);
    }
    // The first may wait for its WAIT's timeout (1 s) behind the others on the connection;
    // the next ones are refused at once: the master is known to have no replica.
    assert!(
        refusals[0] < Duration::from_secs(5),
        "NOT_REPLICATED took {refusals:?}"
    );
    assert!(
        refusals[1..]
            .iter()
            .all(|t| *t < Duration::from_millis(900)),
        "NOT_REPLICATED not prompt: {refusals:?}"
    );

    // The killed node comes back as the new master's replica: writes succeed again.
    cluster.restart(victim).await;
    cluster.wait_ok(Duration::from_secs(60)).await;
    let rejoined = killed.elapsed();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match try_enqueue(&producer, &queue, "after").await {
            (Ok(()), _) => break,
            (Err(s), _) => {
                assert!(
                    Instant::now() < deadline,
                    "no write 30 s after the replica rejoined: {s:?}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    let written_after = killed.elapsed();

    // The stream opened before the kill leases and acks every job of the queue, each once:
    // "after", and those of the refused writes that were made (a write refused after its
    // WAIT was made on the master; one refused by the replica gate was not).
    let mut expected = vec!["after".to_owned()];
    for i in 0..3 {
        let id = format!("unreplicated{i}");
        let mut jobs = producer.jobs();
        let found = jobs
            .get_job(pb::GetJobRequest {
                queue: queue.clone(),
                job_id: id.clone(),
            })
            .await;
        match found {
            Ok(_) => expected.push(id),
            Err(s) => assert_eq!(s.code(), tonic::Code::NotFound, "{s:?}"),
        }
    }
    let made = expected.len() - 1;
    let mut leased = Vec::new();
    while leased.len() < expected.len() {
        w.heartbeat();
        let l = w
            .lease_within(Duration::from_secs(30))
            .await
            .unwrap_or_else(|| panic!("leased only {leased:?} of {expected:?} within 30 s"));
        let job = l.job.as_ref().expect("job");
        assert_eq!(l.attempt, 1, "{job:?}");
        leased.push(job.job_id.clone());
        assert_eq!(w.ack(&l).await.code, 0, "ack of {}", job.job_id);
    }
    leased.sort();
    expected.sort();
    assert_eq!(leased, expected);

    // An idle worker is woken at once by a job enqueued on the other server.
    let mut pickups = Vec::new();
    for i in 0..10 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        w.heartbeat();
        let t = Instant::now();
        enqueue(&producer, spec(&queue, &format!("wake{i}"))).await;
        let l = w
            .lease_within(Duration::from_secs(10))
            .await
            .unwrap_or_else(|| panic!("wake{i} not leased within 10 s"));
        pickups.push(t.elapsed());
        assert_eq!(l.job.as_ref().expect("job").job_id, format!("wake{i}"));
        assert_eq!(w.ack(&l).await.code, 0);
    }
    pickups.sort();
    let p50 = pickups[pickups.len() / 2];
    stop.cancel();
    for t in load {
        let _ = t.await;
    }
    println!(
        "cluster master SIGKILL under --redis-wait-replicas 1: first GetJob served \
         {first_get:?} after the kill (replica promoted, cluster ok, at {promoted:?}; both \
         servers reading at {served_after:?}); NOT_REPLICATED answered in {refusals:?} ({made} of them made on the master); \
         node back as a replica at {rejoined:?}, first write accepted at {written_after:?}; \
         pickup after it p50 {p50:?} max {:?}; load: {} enqueues accepted, {} refused",
        pickups[pickups.len() - 1],
        ok.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed)
    );
    assert!(
        first_get < promoted + Duration::from_secs(10),
        "GetJob served {first_get:?} after the kill, promotion at {promoted:?}"
    );
    assert!(p50 < Duration::from_millis(500), "wake-ups: p50 {p50:?}");
}
