//! The topology harness itself (tests/support/topology/), checked with plain redis-rs
//! connections to single nodes: a cluster forms with linked replicas, a key lives on its
//! master, CLUSTER FAILOVER and a master's SIGKILL promote the replica, and Sentinel promotes
//! the replica when the master dies. The times printed are the ones the cluster tests of
//! jobwire wait through.

use std::time::{Duration, Instant};

use crate::topology::{TestCluster, TestSentinel, NODE_TIMEOUT_MS};

async fn set(
    c: &mut redis::aio::MultiplexedConnection,
    key: &str,
    v: &str,
) -> redis::RedisResult<()> {
    redis::cmd("SET").arg(key).arg(v).query_async(c).await
}

async fn get(c: &mut redis::aio::MultiplexedConnection, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query_async(c)
        .await
        .expect("GET")
}

/// Waits until replica `port` has the master's writes so far (WAIT on the master).
async fn replicated(master: &mut redis::aio::MultiplexedConnection) {
    let n: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(5000)
        .query_async(master)
        .await
        .expect("WAIT");
    assert_eq!(n, 1, "the replica acknowledged the writes");
}

#[tokio::test]
async fn a_cluster_forms_and_a_key_is_written_on_its_master_only() {
    let c = TestCluster::start(3, 1).await;
    println!("cluster 3 masters + 3 replicas formed in {:?}", c.formed_in);
    assert!(c.url.starts_with("redis+cluster://127.0.0.1:"), "{}", c.url);
    assert_eq!(c.url.matches(',').count(), 5, "{}", c.url);
    let masters = c.masters().await;
    assert_eq!(masters.len(), 3);
    for &m in &masters {
        assert_eq!(c.replicas_of(m).await.len(), 1, "master {m}'s replicas");
    }
    // Queue keys are hash-tagged: three queues whose tags land on three different masters.
    let mut seen = std::collections::BTreeSet::new();
    for q in ["a", "b", "c", "d", "e", "f", "g", "h"] {
        let key = format!("jw:{{{q}}}:job:1");
        let owner = c.master_for_key(&key).await;
        assert_eq!(owner, c.master_for_slot(c.keyslot(&key).await).await);
        seen.insert(owner);
        set(&mut c.conn_for_key(&key).await, &key, q)
            .await
            .expect("SET on the key's master");
        for &other in masters.iter().filter(|&&m| m != owner) {
            let e = set(&mut c.conn(other).await, &key, q)
                .await
                .expect_err("another master refuses the key");
            assert_eq!(e.code(), Some("MOVED"), "{e}");
        }
        assert_eq!(
            get(&mut c.conn(owner).await, &key).await.as_deref(),
            Some(q)
        );
    }
    assert!(seen.len() >= 2, "8 queues all on one master: {seen:?}");
}

#[tokio::test]
async fn cluster_failover_swaps_master_and_replica_and_the_cluster_stays_ok() {
    let c = TestCluster::start(3, 1).await;
    let key = "jw:{fo}:job:1";
    let old = c.master_for_key(key).await;
    let replica = c.replicas_of(old).await[0];
    let mut m = c.conn(old).await;
    set(&mut m, key, "v").await.expect("SET");
    let t = Instant::now();
    c.failover(replica).await;
    println!(
        "CLUSTER FAILOVER: roles swapped and cluster ok in {:?}",
        t.elapsed()
    );
    assert_eq!(c.master_for_key(key).await, replica);
    assert_eq!(
        c.replicas_of(replica).await,
        [old],
        "the old master follows"
    );
    assert_eq!(
        get(&mut c.conn(replica).await, key).await.as_deref(),
        Some("v")
    );
    let e = set(&mut m, key, "w")
        .await
        .expect_err("old master redirects");
    assert_eq!(e.code(), Some("MOVED"), "{e}");
}

#[tokio::test]
async fn a_sigkilled_master_is_replaced_by_its_replica_within_the_node_timeout_and_rejoins() {
    let mut c = TestCluster::start(3, 1).await;
    let key = "jw:{kill}:job:1";
    let old = c.master_for_key(key).await;
    let replica = c.replicas_of(old).await[0];
    let mut m = c.conn(old).await;
    set(&mut m, key, "v").await.expect("SET");
    replicated(&mut m).await;
    let t = Instant::now();
    c.kill(old);
    c.wait_ok(Duration::from_secs(30)).await;
    let took = t.elapsed();
    println!(
        "SIGKILL of a master: replica promoted and cluster ok in {took:?} (node timeout {NODE_TIMEOUT_MS} ms)"
    );
    assert!(
        took < Duration::from_millis(NODE_TIMEOUT_MS) + Duration::from_secs(15),
        "{took:?}"
    );
    assert_eq!(c.master_for_key(key).await, replica);
    assert_eq!(
        get(&mut c.conn(replica).await, key).await.as_deref(),
        Some("v")
    );
    let t = Instant::now();
    c.restart(old).await;
    c.wait_ok(Duration::from_secs(30)).await;
    println!(
        "the killed master rejoined as a replica in {:?}",
        t.elapsed()
    );
    assert_eq!(c.replicas_of(replica).await, [old]);
}

#[tokio::test]
async fn sentinel_promotes_the_replica_when_the_master_is_killed() {
    let mut s = TestSentinel::start().await;
    println!(
        "sentinel: master + replica + 3 sentinels ready in {:?}",
        s.formed_in
    );
    assert!(
        s.url.starts_with("redis+sentinel://127.0.0.1:"),
        "{}",
        s.url
    );
    assert!(s.url.ends_with("/jwmaster"), "{}", s.url);
    let [first, second] = s.data_ports()[..] else {
        panic!("two data nodes")
    };
    assert_eq!(s.master_port().await, first);
    let mut m = s.conn(first).await;
    set(&mut m, "k", "v").await.expect("SET");
    replicated(&mut m).await;
    let t = Instant::now();
    let old = s.kill_master().await;
    assert_eq!(old, first);
    let new = s.wait_promoted(old, Duration::from_secs(40)).await;
    println!(
        "sentinel: master SIGKILLed, replica promoted (all sentinels agree) in {:?}",
        t.elapsed()
    );
    assert_eq!(new, second);
    let mut n = s.conn(new).await;
    assert_eq!(get(&mut n, "k").await.as_deref(), Some("v"));
    set(&mut n, "k", "w")
        .await
        .expect("the new master takes writes");
    // The old master comes back as the new one's replica.
    s.restart(old).await;
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut s.conn(old).await)
            .await
            .expect("INFO");
        if info.contains("role:slave") && info.contains(&format!("master_port:{new}")) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "old master not reconfigured:\n{info}\n{}",
            s.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
