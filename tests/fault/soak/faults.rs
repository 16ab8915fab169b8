//! The soak's Redis faults that are not a crash: a pause longer than the server's Redis
//! timeout (replies lost while the calls still run), and a flip to read-only (the master
//! demoted to a replica, as in a failover) and back, done so that no write is lost.

use std::time::Duration;

use crate::procs::{free_port, RedisOpts, RedisProc};

async fn info_field(c: &mut redis::aio::MultiplexedConnection, field: &str) -> Option<String> {
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query_async(c)
        .await
        .ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .map(|v| v.trim().to_owned())
}

/// `CLIENT PAUSE <ms> ALL`: every client's commands wait, the servers' calls time out on
/// their side (their Redis timeout is 3 s) while Redis still runs them afterwards.
pub(super) async fn pause(redis: &RedisProc, ms: u64) {
    pause_conn(&mut redis.conn().await, ms).await;
}

/// [`pause`] through connection `c` (a Cluster node's).
pub(super) async fn pause_conn(c: &mut redis::aio::MultiplexedConnection, ms: u64) {
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(ms)
        .arg("ALL")
        .query_async(c)
        .await
        .expect("CLIENT PAUSE");
    tokio::time::sleep(Duration::from_millis(ms + 200)).await;
}

/// Demotes `redis` (listening on loopback `port`) to a replica for `hold`, then promotes it
/// back, without losing a write: a second redis-server first replicates it, writes are paused
/// until that copy has caught up, the copy is promoted and `redis` made its replica (every
/// write to it now answers READONLY), and at the end `redis` becomes a master again with the
/// same data (nothing writes to the copy).
pub(super) async fn read_only_for(redis: &RedisProc, port: u16, hold: Duration) {
    let copy_port = free_port();
    let copy = RedisProc::start_on(
        RedisOpts {
            aof: None,
            ..RedisOpts::default()
        },
        copy_port,
    )
    .await;
    let mut a = redis.conn().await;
    let mut b = copy.conn().await;
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(port)
        .query_async(&mut b)
        .await
        .expect("copy REPLICAOF");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while info_field(&mut b, "master_link_status").await.as_deref() != Some("up") {
        assert!(tokio::time::Instant::now() < deadline, "copy never in sync");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(5_000)
        .arg("WRITE")
        .query_async(&mut a)
        .await
        .expect("CLIENT PAUSE WRITE");
    loop {
        let master = info_field(&mut a, "master_repl_offset").await;
        let replica = info_field(&mut b, "master_repl_offset").await;
        if master.is_some() && master == replica {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "copy never caught up"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query_async(&mut b)
        .await
        .expect("promote the copy");
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(copy_port)
        .query_async(&mut a)
        .await
        .expect("demote");
    let _: () = redis::cmd("CLIENT")
        .arg("UNPAUSE")
        .query_async(&mut a)
        .await
        .expect("CLIENT UNPAUSE");
    tokio::time::sleep(hold).await;
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query_async(&mut a)
        .await
        .expect("promote back");
    drop(copy);
}
