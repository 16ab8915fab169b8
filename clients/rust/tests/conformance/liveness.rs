//! Leases kept alive: long_handler_not_redelivered, server_restart_mid_run,
//! stream_killed_by_network.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jobwire_client::testing::{ServerOptions, TestServer};
use jobwire_client::{pb, Client, ClientOptions, Ctx, EnqueueOptions, Job, Worker};

use crate::support::{self, proxy::Proxy};

/// Counts deliveries per job id; each handler sleeps `ms`.
fn sleeper(worker: &mut Worker, ms: u64) -> Arc<Mutex<HashMap<String, u32>>> {
    let runs: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let r = runs.clone();
    worker.handle("sleep", move |job: Job<serde_json::Value>, _ctx: Ctx| {
        let r = r.clone();
        async move {
            *r.lock()
                .expect("lock")
                .entry(job.id().to_owned())
                .or_default() += 1;
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok(())
        }
    });
    runs
}

async fn enqueue(client: &Client, q: &str, ids: &[&str]) {
    for id in ids {
        let o = EnqueueOptions {
            job_id: Some((*id).to_owned()),
            ..Default::default()
        };
        client
            .enqueue(q, "sleep", b"null".to_vec(), o)
            .await
            .expect("enqueue");
    }
}

/// Waits until `n` handlers have started.
async fn started(runs: &Arc<Mutex<HashMap<String, u32>>>, n: usize) {
    support::eventually(Duration::from_secs(20), "handlers started", || async {
        (runs.lock().expect("lock").len() >= n).then_some(())
    })
    .await;
}

fn assert_once(job: &pb::Job, runs: &Arc<Mutex<HashMap<String, u32>>>) {
    assert_eq!(job.state, pb::JobState::Completed as i32, "{job:?}");
    assert_eq!(job.attempts_made, 1, "{job:?}");
    assert!(job.errors.is_empty(), "no failed attempt: {:?}", job.errors);
    assert_eq!(
        runs.lock().expect("lock").get(&job.job_id).copied(),
        Some(1),
        "{} delivered once",
        job.job_id
    );
}

#[tokio::test]
async fn long_handler_not_redelivered() {
    let (server, p) = crate::server_for("long_handler_not_redelivered").await;
    let handler_ms = crate::param(&p, "handler_ms");
    assert!(handler_ms >= 3 * crate::param(&p, "lease_ms"));
    let client = server.client().await.expect("connect");
    let q = support::queue("long");
    enqueue(&client, &q, &["long"]).await;
    let mut worker = Worker::new(client.clone(), support::options(&q, 2));
    let runs = sleeper(&mut worker, handler_ms);
    let w = support::run(worker);
    let job = support::finished(&client, &q, "long").await;
    w.stop().await;
    assert_once(&job, &runs);
}

#[tokio::test]
async fn server_restart_mid_run() {
    let (flags, p) = crate::scenario("server_restart_mid_run");
    let (jobs, concurrency, handler_ms, down_ms) = (
        crate::param(&p, "jobs") as usize,
        crate::param(&p, "concurrency") as u32,
        crate::param(&p, "handler_ms"),
        crate::param(&p, "down_ms"),
    );
    support::init_tracing();
    let redis = support::Redis::start();
    let mut server = TestServer::start(ServerOptions {
        bin: Some(support::bin()),
        args: flags,
        redis_url: Some(redis.url.clone()),
        ..Default::default()
    })
    .await
    .expect("start jobwire");
    let client = server.client().await.expect("connect");
    let q = support::queue("restart");
    let ids: Vec<String> = (0..jobs).map(|i| format!("r{i}")).collect();
    enqueue(
        &client,
        &q,
        &ids.iter().map(String::as_str).collect::<Vec<_>>(),
    )
    .await;
    let mut worker = Worker::new(client.clone(), support::options(&q, concurrency));
    let runs = sleeper(&mut worker, handler_ms);
    let stats = worker.stats();
    let w = support::run(worker);
    started(&runs, jobs).await;

    server.kill().await.expect("SIGKILL");
    tokio::time::sleep(Duration::from_millis(down_ms)).await;
    server.restart().await.expect("restart");

    for id in &ids {
        let job = support::finished(&client, &q, id).await;
        assert_once(&job, &runs);
    }
    w.stop().await;
    // Every result went out unary (their stream died with the server), none was lost.
    assert_eq!(stats.get(&stats.unary_settles), jobs as u64, "{stats:?}");
    assert_eq!(stats.get(&stats.settled), jobs as u64, "{stats:?}");
    assert_eq!(stats.get(&stats.lost), 0, "{stats:?}");
}

#[tokio::test]
async fn stream_killed_by_network() {
    let (server, p) = crate::server_for("stream_killed_by_network").await;
    let (handler_ms, cut_after_ms) = (
        crate::param(&p, "handler_ms"),
        crate::param(&p, "cut_after_ms"),
    );
    let proxy = Proxy::start(server.grpc_port()).await;
    let direct = server.client().await.expect("connect");
    let via_proxy = Client::connect(
        &format!("127.0.0.1:{}", proxy.port),
        ClientOptions::default(),
    )
    .await
    .expect("connect through the proxy");
    let q = support::queue("cut");
    enqueue(&direct, &q, &["cut"]).await;
    let mut worker = Worker::new(via_proxy, support::options(&q, 1));
    let runs = sleeper(&mut worker, handler_ms);
    let stats = worker.stats();
    let w = support::run(worker);
    started(&runs, 1).await;
    tokio::time::sleep(Duration::from_millis(cut_after_ms)).await;
    assert!(
        proxy.cut() >= 1,
        "the worker's connection went through the proxy"
    );

    let job = support::finished(&direct, &q, "cut").await;
    assert_once(&job, &runs);
    w.stop().await;
    // The lease was renewed by token after the cut and the ack went out unary (the only
    // slot was busy, so no new stream was needed before it).
    assert!(stats.get(&stats.extended) >= 1, "{stats:?}");
    assert_eq!(stats.get(&stats.unary_settles), 1, "{stats:?}");
    assert_eq!(stats.get(&stats.lost), 0, "{stats:?}");
}
