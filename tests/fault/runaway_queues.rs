//! A client that invents queue names must not leave the server paying for them forever: 20 000
//! queues created (EnqueueBatch over many queues) and then deleted leave the real `jobwire`
//! binary idle again: under 100 Redis commands a second, `/metrics` under 1 MB, and its RSS
//! within 20 % of the warmed-up fresh server's (a few requests on a handful of queues and one
//! scrape), after two such rounds. Prints the figures.

use std::time::{Duration, Instant};

use futures::StreamExt;
use jobwire::pb;
use pb::queue_service_client::QueueServiceClient;

use crate::harness::http_get;
use crate::procs::{server_args, RedisOpts, RedisProc, ServerProc};

const QUEUES: usize = 20_000;
const PER_BATCH: usize = 1000;

/// Resident set size of `pid`, kB (VmRSS in /proc/<pid>/status).
fn rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmRSS")
}

/// Commands Redis processed per second over `window`, not counting this probe's own INFO.
async fn commands_per_sec(redis: &RedisProc, window: Duration) -> f64 {
    let mut c = redis.conn().await;
    async fn total(c: &mut redis::aio::MultiplexedConnection) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("stats")
            .query_async(c)
            .await
            .expect("info");
        info.lines()
            .find_map(|l| l.strip_prefix("total_commands_processed:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("total_commands_processed")
    }
    let a = total(&mut c).await;
    tokio::time::sleep(window).await;
    let b = total(&mut c).await;
    (b - a - 1) as f64 / window.as_secs_f64()
}

async fn metrics_page(server: &ServerProc) -> (usize, Duration) {
    let start = Instant::now();
    let text = http_get(server.http.parse().expect("http addr"), "/metrics").await;
    (text.len(), start.elapsed())
}

/// Creates [`QUEUES`] queues named `<prefix>-<n>` (one job each, [`PER_BATCH`] queues per
/// EnqueueBatch), optionally measures the server while they exist, then deletes them all.
async fn cycle(
    server: &ServerProc,
    redis: &RedisProc,
    prefix: &str,
    measure: bool,
) -> (
    Duration,
    Duration,
    Option<(f64, usize, Duration, u64, Duration, u64)>,
) {
    let start = Instant::now();
    let jobs = server.jobs();
    futures::stream::iter(0..QUEUES / PER_BATCH)
        .map(|b| {
            let mut jobs = jobs.clone();
            let batch = (0..PER_BATCH)
                .map(|i| spec(&format!("{prefix}-{}", b * PER_BATCH + i), "j"))
                .collect();
            async move {
                let r = jobs
                    .enqueue_batch(pb::EnqueueBatchRequest { jobs: batch })
                    .await
                    .expect("batch")
                    .into_inner();
                assert!(r.results.iter().all(|r| r.created));
            }
        })
        .buffer_unordered(4)
        .collect::<Vec<()>>()
        .await;
    let created_in = start.elapsed();
    let mut extra = 0;
    let full = if measure {
        let idle = commands_per_sec(redis, Duration::from_secs(2)).await;
        // Enqueues keep going while /metrics reads every queue's stats: the slowest one.
        let done = std::sync::atomic::AtomicBool::new(false);
        let scrape = async {
            let r = metrics_page(server).await;
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            r
        };
        let enqueues = async {
            let mut jobs = server.jobs();
            let (mut slowest, mut n) = (Duration::ZERO, 0u64);
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let start = Instant::now();
                jobs.enqueue(pb::EnqueueRequest {
                    job: Some(spec(&format!("{prefix}-0"), &format!("during-{n}"))),
                })
                .await
                .expect("enqueue during a scrape");
                slowest = slowest.max(start.elapsed());
                n += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            (slowest, n)
        };
        let ((page, took), (slowest, n)) = tokio::join!(scrape, enqueues);
        extra = n;
        Some((idle, page, took, rss_kb(server.pid), slowest, n))
    } else {
        None
    };
    let start = Instant::now();
    let admin = QueueServiceClient::new(server.channel.clone());
    let deleted = futures::stream::iter(0..QUEUES)
        .map(|i| {
            let mut admin = admin.clone();
            let queue = format!("{prefix}-{i}");
            async move {
                admin
                    .delete_queue(pb::DeleteQueueRequest {
                        queue,
                        force: false,
                    })
                    .await
                    .expect("delete")
                    .into_inner()
                    .waiting
            }
        })
        .buffer_unordered(64)
        .fold(0, |n, w| async move { n + w })
        .await;
    assert_eq!(deleted, QUEUES as u64 + extra);
    (created_in, start.elapsed(), full)
}

#[tokio::test]
async fn twenty_thousand_queues_created_and_deleted_leave_the_server_idle() {
    let redis = RedisProc::start(RedisOpts {
        aof: None,
        ..Default::default()
    })
    .await;
    // The default --max-queues (10 000) would refuse half of them.
    let mut args = server_args(&redis.url);
    args.extend(["--max-queues".to_owned(), QUEUES.to_string()]);
    let server = ServerProc::spawn(args).await;
    // Warm-up: a few requests on a handful of queues and one scrape, then the baseline.
    let (c1, d1) = warm_up(&server).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_before = rss_kb(server.pid);
    let idle_cold = commands_per_sec(&redis, Duration::from_secs(2)).await;
    let (w1, e1, _) = cycle(&server, &redis, "first", false).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_first = rss_kb(server.pid);

    let (created_in, deleted_in, full) = cycle(&server, &redis, "rq", true).await;
    let (idle_full, page_full, scrape_full, rss_full, enqueue_p100, enqueues) =
        full.expect("measured");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle_after = commands_per_sec(&redis, Duration::from_secs(3)).await;
    let (page_after, scrape_after) = metrics_page(&server).await;
    let rss_after = rss_kb(server.pid);
    println!(
        "runaway queues: {QUEUES} queues created in {created_in:.1?} (first round {w1:.1?}), \
         deleted in {deleted_in:.1?} (first round {e1:.1?}); idle Redis commands/s: \
         {idle_cold:.0} fresh, {idle_full:.0} with {QUEUES} queues, {idle_after:.0} after \
         deleting them; /metrics {page_full} B in {scrape_full:.0?} with them (slowest of \
         {enqueues} enqueues meanwhile: {enqueue_p100:.0?}), {page_after} B in \
         {scrape_after:.0?} after; RSS {rss_before} kB warmed-up fresh (baseline; warm-up {c1:.0?} + \
         {d1:.0?}), {rss_first} kB after a first round, {rss_full} kB with the queues, {rss_after} kB after deleting them"
    );
    assert!(idle_after < 100.0, "{idle_after:.0} Redis commands/s idle");
    assert!(page_after < 1_000_000, "/metrics is {page_after} B");
    assert!(
        (rss_after as f64) <= rss_before as f64 * 1.2,
        "RSS {rss_after} kB after, {rss_before} kB warmed-up fresh"
    );
}

/// A few enqueues and deletes on a handful of queues and one `/metrics` scrape: the server
/// has served each kind of request the measured rounds send. Returns how long each took.
async fn warm_up(server: &ServerProc) -> (Duration, Duration) {
    let start = Instant::now();
    let mut jobs = server.jobs();
    for q in 0..5 {
        for j in 0..4 {
            jobs.enqueue(pb::EnqueueRequest {
                job: Some(spec(&format!("warm-{q}"), &format!("j{j}"))),
            })
            .await
            .expect("warm-up enqueue");
        }
    }
    let batch = (0..5).map(|q| spec(&format!("warm-{q}"), "b")).collect();
    jobs.enqueue_batch(pb::EnqueueBatchRequest { jobs: batch })
        .await
        .expect("warm-up batch");
    metrics_page(server).await;
    let enqueued = start.elapsed();
    let start = Instant::now();
    let mut admin = QueueServiceClient::new(server.channel.clone());
    for q in 0..5 {
        admin
            .delete_queue(pb::DeleteQueueRequest {
                queue: format!("warm-{q}"),
                force: false,
            })
            .await
            .expect("warm-up delete");
    }
    (enqueued, start.elapsed())
}

fn spec(queue: &str, id: &str) -> pb::JobSpec {
    pb::JobSpec {
        queue: queue.into(),
        job_id: id.into(),
        name: "n".into(),
        payload: b"{}".to_vec(),
        ..Default::default()
    }
}
