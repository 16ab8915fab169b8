//! ListWorkers: two servers on one Redis list each other's worker streams (credits, held
//! leases, worker ids, queues), the queue filter, and a replica's streams go away on its
//! clean shutdown, or when its report expires.

use std::time::Duration;

use jobwire::pb;
use jobwire::pb::queue_service_client::QueueServiceClient;

use crate::harness::*;

fn config(redis: &TestRedis, replica: &str) -> jobwire::config::ServeArgs {
    let mut cfg = test_config(&redis.url);
    cfg.replica.replica_id = Some(replica.into());
    cfg.replica.workers_report_interval = Duration::from_millis(200);
    cfg
}

async fn list(app: &TestApp, queue: &str) -> pb::ListWorkersResponse {
    QueueServiceClient::new(app.channel.clone())
        .list_workers(pb::ListWorkersRequest {
            queue: queue.into(),
        })
        .await
        .expect("list workers")
        .into_inner()
}

fn stream<'a>(r: &'a pb::ListWorkersResponse, worker: &str) -> Option<&'a pb::WorkerStream> {
    r.streams.iter().find(|s| s.worker_id == worker)
}

#[tokio::test]
async fn two_replicas_list_each_others_streams_until_one_stops() {
    let redis = TestRedis::start().await;
    let a = TestApp::spawn(config(&redis, "rep-a")).await;
    let b = TestApp::spawn(config(&redis, "rep-b")).await;
    let mut wa = TestWorker::open(&a, &["wq"], 3, "worker-a").await;
    for id in ["j1", "j2"] {
        enqueue(&a, spec("wq", id)).await;
    }
    wa.lease().await;
    wa.lease().await;
    let _wb = TestWorker::open(&b, &["wq", "wq2"], 5, "worker-b").await;

    // A answers with its own stream live and B's from B's report (within an interval).
    eventually(Duration::from_secs(10), || async {
        let r = list(&a, "").await;
        stream(&r, "worker-a").is_some() && stream(&r, "worker-b").is_some()
    })
    .await;
    let r = list(&a, "").await;
    let sa = stream(&r, "worker-a").expect("a");
    assert_eq!(sa.replica_id, "rep-a");
    assert!(sa.stream_id.starts_with("rep-a/"), "{}", sa.stream_id);
    assert_eq!(sa.queues, ["wq"]);
    assert_eq!((sa.credits, sa.held_leases), (1, 2), "{sa:?}");
    let mut held: Vec<(&str, &str)> = sa
        .leases
        .iter()
        .map(|l| (l.queue.as_str(), l.job_id.as_str()))
        .collect();
    held.sort();
    assert_eq!(held, [("wq", "j1"), ("wq", "j2")]);
    let (opened, heard) = (
        sa.connect_time.expect("connect time"),
        sa.last_heard_time.expect("last heard"),
    );
    assert!(heard.seconds >= opened.seconds, "{sa:?}");
    let sb = stream(&r, "worker-b").expect("b");
    assert_eq!(sb.replica_id, "rep-b");
    assert!(sb.stream_id.starts_with("rep-b/"));
    assert_eq!(sb.queues, ["wq", "wq2"]);
    assert_eq!((sb.credits, sb.held_leases), (5, 0), "{sb:?}");
    assert!(!sb.draining);
    let replicas: Vec<(&str, bool)> = r
        .replicas
        .iter()
        .map(|x| (x.replica_id.as_str(), x.answered))
        .collect();
    assert_eq!(replicas, [("rep-a", true), ("rep-b", false)]);

    // B sees the same streams; the queue filter keeps the streams leasing from the queue.
    eventually(Duration::from_secs(10), || async {
        let r = list(&b, "wq2").await;
        r.streams.len() == 1 && stream(&r, "worker-b").is_some()
    })
    .await;
    let r = list(&b, "wq").await;
    assert!(stream(&r, "worker-a").is_some() && stream(&r, "worker-b").is_some());

    // B stops cleanly: its report goes with it.
    b.stop().await.expect("b stops");
    let r = list(&a, "").await;
    assert!(stream(&r, "worker-b").is_none(), "{r:?}");
    assert!(r.replicas.iter().all(|x| x.replica_id != "rep-b"), "{r:?}");
    assert!(stream(&r, "worker-a").is_some());
}

#[tokio::test]
async fn a_replica_that_stops_reporting_drops_out_when_its_report_expires() {
    let redis = TestRedis::start().await;
    let a = TestApp::spawn(config(&redis, "rep-a")).await;
    // A replica that wrote one report and died (no clean shutdown to remove it).
    let store = redis.store().await;
    let gone = jobwire::jobs::ReplicaWorkers {
        replica_id: "rep-dead".into(),
        at_ms: 1_700_000_000_000,
        streams: vec![jobwire::jobs::WorkerStreamInfo {
            stream: 7,
            worker_id: "ghost".into(),
            queues: vec!["wq".into()],
            credits: 4,
            leases: vec![("wq".into(), "j9".into())],
            held: [("wq".to_string(), 1)].into_iter().collect(),
            connected_ms: 1_700_000_000_000,
            last_heard_ms: 1_700_000_000_000,
            draining: false,
        }],
    };
    store
        .write_workers_report(&gone, Duration::from_secs(3))
        .await
        .expect("write");
    let r = list(&a, "").await;
    let ghost = stream(&r, "ghost").expect("listed while its report lives");
    assert_eq!(ghost.stream_id, "rep-dead/7");
    assert_eq!((ghost.credits, ghost.held_leases), (4, 1));
    eventually(Duration::from_secs(10), || async {
        stream(&list(&a, "").await, "ghost").is_none()
    })
    .await;
    let r = list(&a, "").await;
    assert_eq!(
        r.replicas
            .iter()
            .map(|x| x.replica_id.as_str())
            .collect::<Vec<_>>(),
        ["rep-a"]
    );
}
