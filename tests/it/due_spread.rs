//! The due index does not make one master of a Redis Cluster the bottleneck: every lease,
//! ack and fail also writes the due index (an intent before the queue's script, the due
//! time after it), so one global index key would make its master handle about two calls
//! for every call on every other master. Lease/ack traffic on queues spread over all three
//! masters of a real cluster must load each master about evenly (calls counted from INFO
//! commandstats on each master). Prints the per-master counts.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;

use crate::cluster::queues_on_every_master;
use crate::harness::*;
use crate::topology::TestCluster;

const PER_QUEUE: usize = 150;

/// Calls of the commands a lease/ack cycle sends (FCALL of the queue functions, EVALSHA of
/// the index scripts and of queue scripts before the library loads, ZADD of the index
/// update), per master port.
async fn calls_by_master(c: &TestCluster) -> BTreeMap<u16, u64> {
    let mut out = BTreeMap::new();
    for port in c.masters().await {
        let mut conn = c.conn(port).await;
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut conn)
            .await
            .expect("info");
        let n: u64 = info
            .lines()
            .filter_map(|l| {
                l.strip_prefix("cmdstat_evalsha:calls=")
                    .or_else(|| l.strip_prefix("cmdstat_fcall:calls="))
                    .or_else(|| l.strip_prefix("cmdstat_zadd:calls="))
            })
            .filter_map(|rest| rest.split(',').next()?.parse::<u64>().ok())
            .sum();
        out.insert(port, n);
    }
    out
}

#[tokio::test]
async fn lease_and_ack_traffic_loads_every_master_of_a_cluster_evenly() {
    let cluster = TestCluster::start(3, 0).await;
    let by_master = queues_on_every_master(&cluster, "even-", 3).await;
    assert_eq!(by_master.len(), 3, "three masters serve slots");
    let queues: Vec<String> = by_master.values().flatten().cloned().collect();
    let app = TestApp::spawn(test_config(&cluster.url)).await;
    let jobs: Vec<(String, String)> = (0..PER_QUEUE)
        .flat_map(|i| queues.iter().map(move |q| (q.clone(), format!("j{i}"))))
        .collect();
    futures::stream::iter(jobs)
        .for_each_concurrent(16, |(q, id)| {
            let app = &app;
            async move {
                enqueue(app, spec(&q, &id)).await;
            }
        })
        .await;

    let names: Vec<&str> = queues.iter().map(String::as_str).collect();
    let before = calls_by_master(&cluster).await;
    let mut w = TestWorker::open(&app, &names, 4, "even").await;
    for _ in 0..(queues.len() * PER_QUEUE / 4) {
        w.ack_all(4).await;
    }
    // The reaps the acks asked for (retention) run within a few reaper ticks.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = calls_by_master(&cluster).await;
    let calls: BTreeMap<u16, u64> = after.iter().map(|(p, n)| (*p, n - before[p])).collect();
    println!(
        "{} jobs leased and acked on {} queues (3 a master): EVALSHA + ZADD calls by master port: {calls:?}",
        queues.len() * PER_QUEUE,
        queues.len()
    );
    let max = *calls.values().max().expect("masters");
    let min = *calls.values().min().expect("masters");
    assert!(min > 0, "{calls:?}");
    assert!(
        (max as f64) / (min as f64) < 2.0,
        "one master handles far more calls than another: {calls:?}"
    );
}
