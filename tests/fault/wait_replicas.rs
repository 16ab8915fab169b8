//! `--redis-wait-replicas`: Redis replication is asynchronous, so a master that dies right
//! after a write can take an acknowledged job with it. A real master and replica (two
//! redis-server processes): with the replica cut off from its master, a plain jobwire
//! acknowledges an Enqueue that the promoted replica never saw; with `--redis-wait-replicas 1`
//! the same Enqueue answers UNAVAILABLE instead (nothing acknowledged is lost), and with the
//! replica linked every acknowledged Enqueue and Ack is on the replica the moment the reply
//! arrives, so a master SIGKILLed right then loses none of them.

use std::time::{Duration, Instant};

use jobwire::pb;

use crate::harness::*;
use crate::procs::{free_port, redis_cmd, RedisOpts, RedisProc};

const NO_PERSISTENCE: RedisOpts = RedisOpts {
    aof: None,
    policy: "noeviction",
};

async fn info(redis: &RedisProc, field: &str) -> String {
    let text: String = redis::cmd("INFO")
        .arg("replication")
        .query_async(&mut redis.conn().await)
        .await
        .expect("INFO");
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// A master on a TCP port and a replica linked to it (both also on Unix sockets).
pub(crate) async fn master_and_replica() -> (RedisProc, RedisProc, u16) {
    let port = free_port();
    let master = RedisProc::start_on(NO_PERSISTENCE, port).await;
    let replica = RedisProc::start_on(NO_PERSISTENCE, free_port()).await;
    redis_cmd(&replica, &["REPLICAOF", "127.0.0.1", &port.to_string()]).await;
    eventually(Duration::from_secs(20), || async {
        info(&replica, "master_link_status").await == "up"
    })
    .await;
    (master, replica, port)
}

/// Whether job `id` of `queue` is stored on `redis` (read through a store on it).
async fn stored(redis: &RedisProc, queue: &str, id: &str) -> bool {
    let store = jobwire::store::Store::connect(&redis.url, Duration::from_secs(5))
        .await
        .expect("store");
    let q = jobwire::jobs::QueueName::parse(queue).expect("queue");
    store.get_job(&q, id).await.expect("get_job").is_some()
}

/// Kills the master and promotes the replica, as a failover does.
async fn fail_over(master: &mut RedisProc, replica: &RedisProc) {
    master.kill().await;
    redis_cmd(replica, &["REPLICAOF", "NO", "ONE"]).await;
}

fn config(url: &str, replicas: u32) -> jobwire::config::ServeArgs {
    let mut cfg = test_config(url);
    cfg.redis_wait_replicas = replicas;
    cfg.redis_wait_timeout = Duration::from_millis(500);
    cfg
}

#[tokio::test]
async fn without_waiting_an_acknowledged_enqueue_is_lost_with_its_master() {
    let (mut master, replica, _) = master_and_replica().await;
    let app = TestApp::spawn(config(&master.url, 0)).await;
    enqueue(&app, spec("wr", "before")).await;
    eventually(Duration::from_secs(10), || stored(&replica, "wr", "before")).await;
    // The replica loses its link (it keeps its data and tries a master that is gone).
    redis_cmd(
        &replica,
        &["REPLICAOF", "127.0.0.1", &free_port().to_string()],
    )
    .await;
    let r = enqueue(&app, spec("wr", "acked")).await;
    assert!(r.created, "the Enqueue was acknowledged");
    fail_over(&mut master, &replica).await;
    assert!(stored(&replica, "wr", "before").await);
    assert!(
        !stored(&replica, "wr", "acked").await,
        "asynchronous replication: the acknowledged job died with its master"
    );
}

#[tokio::test]
async fn with_wait_replicas_an_unreplicated_write_answers_unavailable_and_a_retry_succeeds() {
    let (master, replica, port) = master_and_replica().await;
    let app = TestApp::spawn(config(&master.url, 1)).await;
    enqueue(&app, spec("wr", "linked")).await;
    assert!(
        stored(&replica, "wr", "linked").await,
        "on the replica at the reply"
    );

    redis_cmd(
        &replica,
        &["REPLICAOF", "127.0.0.1", &free_port().to_string()],
    )
    .await;
    let start = Instant::now();
    let s = app
        .jobs()
        .enqueue(pb::EnqueueRequest {
            job: Some(spec("wr", "cut-off")),
        })
        .await
        .expect_err("no replica acknowledges the write");
    assert_eq!(s.code(), tonic::Code::Unavailable, "{s:?}");
    assert!(
        s.message().contains("0 of 1 replicas") && s.message().contains("--redis-wait-replicas"),
        "{s:?}"
    );
    eprintln!("unreplicated Enqueue answered in {:?}", start.elapsed());

    // The replica comes back; the client retries the same job id: it is there once.
    redis_cmd(&replica, &["REPLICAOF", "127.0.0.1", &port.to_string()]).await;
    eventually(Duration::from_secs(20), || async {
        info(&replica, "master_link_status").await == "up"
    })
    .await;
    // Writes are refused without being made (NOT_REPLICATED) until the server's next look at
    // the master's replicas (at most 250 ms apart) finds the replica online: retry as the
    // error's RetryInfo says.
    let deadline = Instant::now() + Duration::from_secs(10);
    let r = loop {
        match app
            .jobs()
            .enqueue(pb::EnqueueRequest {
                job: Some(spec("wr", "cut-off")),
            })
            .await
        {
            Ok(r) => break r.into_inner(),
            Err(s) => {
                assert!(s.message().contains("--redis-wait-replicas"), "{s:?}");
                assert!(
                    Instant::now() < deadline,
                    "no write 10 s after the relink: {s:?}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    assert!(
        !r.created,
        "the first call's write was made; the retry finds it"
    );
    assert!(stored(&replica, "wr", "cut-off").await);
}

#[tokio::test]
async fn with_wait_replicas_every_acknowledged_enqueue_and_ack_survives_a_master_sigkill() {
    let (mut master, replica, _) = master_and_replica().await;
    let app = TestApp::spawn(config(&master.url, 1)).await;
    let mut w = TestWorker::open(&app, &["wr"], 50, "w").await;
    let mut acked = Vec::new();
    let start = Instant::now();
    for i in 0..100 {
        enqueue(&app, spec("wr", &format!("j{i}"))).await;
        if i % 2 == 0 {
            let l = w.lease().await;
            assert_eq!(w.ack(&l).await.code, 0);
            acked.push(l.job.expect("job").job_id);
        }
    }
    eprintln!(
        "100 enqueues + 50 lease/acks with WAIT 1: {:?}",
        start.elapsed()
    );
    // The master dies the moment the last reply arrived.
    fail_over(&mut master, &replica).await;
    let store = jobwire::store::Store::connect(&replica.url, Duration::from_secs(5))
        .await
        .expect("store");
    let q = jobwire::jobs::QueueName::parse("wr").expect("queue");
    for i in 0..100 {
        let id = format!("j{i}");
        let job = store.get_job(&q, &id).await.expect("get_job");
        let job = job.unwrap_or_else(|| panic!("acknowledged job {id} lost"));
        if acked.contains(&id) {
            assert_eq!(
                job.state,
                jobwire::jobs::JobState::Completed,
                "acknowledged Ack of {id} lost"
            );
        }
    }
}

/// `INFO server`'s process_id of the node on `port`.
async fn node_pid(cluster: &crate::topology::TestCluster, port: u16) -> u32 {
    let text: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut cluster.conn(port).await)
        .await
        .expect("INFO server");
    text.lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .and_then(|p| p.trim().parse().ok())
        .expect("process_id")
}

/// On a cluster, WAIT must run on the master that made the write (a keyless WAIT sent to any
/// other master would count that master's replicas and answer at once). With the replica of
/// one queue's master stopped (SIGSTOP), an Enqueue on that queue answers NOT_REPLICATED
/// while a queue on another master is served; after SIGCONT both are.
#[tokio::test]
async fn on_a_cluster_wait_replicas_waits_on_the_master_that_made_the_write() {
    let cluster = crate::topology::TestCluster::start(3, 1).await;
    let masters = cluster.masters().await;
    let mut on: std::collections::HashMap<u16, String> = std::collections::HashMap::new();
    for i in 0.. {
        let q = format!("wc{i}");
        let m = cluster.master_for_key(&format!("jw:{{{q}}}:meta")).await;
        on.entry(m).or_insert(q);
        if on.len() == masters.len() {
            break;
        }
    }
    let (stalled, served) = (&on[&masters[0]], &on[&masters[1]]);
    let app = TestApp::spawn(config(&cluster.url, 1)).await;
    enqueue(&app, spec(stalled, "before")).await;
    enqueue(&app, spec(served, "before")).await;

    let replica = cluster.replicas_of(masters[0]).await[0];
    let pid = node_pid(&cluster, replica).await;
    crate::procs::signal(pid, "-STOP");
    let refused = app
        .jobs()
        .enqueue(pb::EnqueueRequest {
            job: Some(spec(stalled, "during")),
        })
        .await;
    let other = app
        .jobs()
        .enqueue(pb::EnqueueRequest {
            job: Some(spec(served, "during")),
        })
        .await;
    crate::procs::signal(pid, "-CONT");
    let s = refused.expect_err("the stalled shard's replica acknowledges nothing");
    assert_eq!(s.code(), tonic::Code::Unavailable, "{s:?}");
    assert!(s.message().contains("0 of 1 replicas"), "{s:?}");
    assert!(other.is_ok(), "another master's queue is served: {other:?}");
    eventually(Duration::from_secs(20), || async {
        app.jobs()
            .enqueue(pb::EnqueueRequest {
                job: Some(spec(stalled, "after")),
            })
            .await
            .is_ok()
    })
    .await;
}
