//! A Redis that answers but cannot take writes: demoted to a replica (REPLICAOF), replaced
//! behind the same address by a new master, full (`maxmemory` reached), or switched to an
//! evicting `maxmemory-policy` at run time. Clients get UNAVAILABLE (retry) or
//! RESOURCE_EXHAUSTED (full), never INTERNAL; readiness and gRPC health follow whether a
//! write works; and jobwire recovers by itself, with no restart.

use std::process::Stdio;
use std::time::Duration;

use jobwire::pb;
use tokio::process::{Child, Command};

use crate::harness::*;
use crate::procs::{free_port, redis_cmd, server_args, RedisOpts, RedisProc, ServerProc};

/// How long a state change may take to show in health (the watch runs every 500 ms).
const PATIENCE: Duration = Duration::from_secs(15);

/// grpc.health.v1 status of the whole server: 1 SERVING, 2 NOT_SERVING, -1 no answer.
async fn health(app: &TestApp) -> i32 {
    let mut h = tonic_health::pb::health_client::HealthClient::new(app.channel.clone());
    h.check(tonic_health::pb::HealthCheckRequest {
        service: String::new(),
    })
    .await
    .map(|r| r.into_inner().status)
    .unwrap_or(-1)
}

/// The status line of GET /readyz.
async fn readyz(app: &TestApp) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(app.http)
        .await
        .expect("connect");
    s.write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .expect("write");
    let mut out = String::new();
    s.read_to_string(&mut out).await.expect("read");
    out.lines().next().unwrap_or_default().to_owned()
}

async fn try_enqueue(app: &TestApp, spec: pb::JobSpec) -> Result<(), tonic::Status> {
    app.jobs()
        .enqueue(pb::EnqueueRequest { job: Some(spec) })
        .await
        .map(|_| ())
}

/// Demotes `old` to a replica (of nobody reachable) and starts an empty new master on its
/// socket path, as a failover behind a fixed address does; `old` keeps serving the
/// connections it has. The new master lives as long as the returned values.
async fn new_master_behind(old: &RedisProc) -> (Child, tempfile::TempDir) {
    redis_cmd(old, &["REPLICAOF", "127.0.0.1", &free_port().to_string()]).await;
    let path = old.url.trim_start_matches("redis+unix://").to_owned();
    std::fs::remove_file(&path).expect("unlink the old socket");
    let dir = tempfile::tempdir().expect("tempdir");
    let new = Command::new("redis-server")
        .args(["--port", "0", "--unixsocket", &path, "--save", ""])
        .args(["--appendonly", "no", "--dir"])
        .arg(dir.path())
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("redis-server");
    wait_for_redis(&old.url, Duration::from_secs(20)).await;
    (new, dir)
}

/// A plain redis-server on a loopback TCP port (a master to replicate from), no persistence.
async fn tcp_redis() -> (Child, u16, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--dir"])
        .arg(dir.path())
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("redis-server");
    wait_for_redis(
        &format!("redis://127.0.0.1:{port}"),
        Duration::from_secs(20),
    )
    .await;
    (child, port, dir)
}

#[tokio::test]
async fn a_demoted_redis_gives_unavailable_and_not_ready_then_recovers_without_a_restart() {
    let redis = RedisProc::start(RedisOpts::default()).await;
    let (_master, master_port, _dir) = tcp_redis().await;
    let app = TestApp::spawn(test_config(&redis.url)).await;
    enqueue(&app, spec("ro", "before")).await;
    assert_eq!(readyz(&app).await, "HTTP/1.1 200 OK");

    redis_cmd(
        &redis,
        &["REPLICAOF", "127.0.0.1", &master_port.to_string()],
    )
    .await;
    let s = try_enqueue(&app, spec("ro", "during"))
        .await
        .expect_err("a replica takes no writes");
    assert_eq!(s.code(), tonic::Code::Unavailable, "{s:?}");
    eventually(PATIENCE, || async { health(&app).await == 2 }).await;
    assert_eq!(readyz(&app).await, "HTTP/1.1 503 Service Unavailable");
    // Reads still work on a replica; writes keep answering UNAVAILABLE.
    let s = try_enqueue(&app, spec("ro", "during"))
        .await
        .expect_err("still a replica");
    assert_eq!(s.code(), tonic::Code::Unavailable, "{s:?}");

    redis_cmd(&redis, &["REPLICAOF", "NO", "ONE"]).await;
    eventually(PATIENCE, || async { health(&app).await == 1 }).await;
    assert_eq!(readyz(&app).await, "HTTP/1.1 200 OK");
    enqueue(&app, spec("ro", "after")).await;
    let mut w = TestWorker::open(&app, &["ro"], 1, "w").await;
    let l = w.lease().await;
    assert_eq!(w.ack(&l).await.code, 0, "work flows again with no restart");
}

/// The Redis behind jobwire's address is replaced by a new master while the old one lives on
/// as a replica (as a failover behind a proxy or DNS name does): after one READONLY answer
/// jobwire drops its connection and the next call reaches the new master.
#[tokio::test]
async fn after_readonly_jobwire_reconnects_and_uses_the_new_master_behind_the_same_address() {
    let mut old = RedisProc::start(RedisOpts::default()).await;
    let app = TestApp::spawn(test_config(&old.url)).await;
    enqueue(&app, spec("swap", "first")).await;

    // Demote the old master, then put a new master on the same socket path; the old one
    // keeps serving the connections it has.
    let _new = new_master_behind(&old).await;

    // At most the calls racing the first READONLY fail (UNAVAILABLE); then writes succeed.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let mut refused = 0;
    while let Err(s) = try_enqueue(&app, spec("swap", "second")).await {
        assert_eq!(s.code(), tonic::Code::Unavailable, "{s:?}");
        assert!(
            tokio::time::Instant::now() < deadline,
            "still refused after {PATIENCE:?}: {s:?}"
        );
        refused += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!("enqueues refused before the reconnect: {refused}");
    eventually(PATIENCE, || async { health(&app).await == 1 }).await;
    old.kill().await;
    assert_eq!(
        get_job(&app, "swap", "second").await.job_id,
        "second",
        "written to the new master"
    );
}

#[tokio::test]
async fn a_full_redis_gives_resource_exhausted_not_internal() {
    let redis = RedisProc::start(RedisOpts {
        aof: None,
        policy: "noeviction",
    })
    .await;
    let app = TestApp::spawn(test_config(&redis.url)).await;
    enqueue(&app, spec("full", "warm")).await;
    let info = match redis_cmd(&redis, &["INFO", "memory"]).await {
        redis::Value::BulkString(b) => String::from_utf8(b).expect("utf8"),
        redis::Value::VerbatimString { text, .. } => text,
        v => panic!("{v:?}"),
    };
    let used: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("used_memory");
    let limit = used + 2 * 1024 * 1024;
    redis_cmd(&redis, &["CONFIG", "SET", "maxmemory", &limit.to_string()]).await;

    let mut err = None;
    for i in 0..200 {
        let mut s = spec("full", &format!("j{i}"));
        s.payload = vec![b'x'; 64 * 1024];
        if let Err(e) = try_enqueue(&app, s).await {
            err = Some((i, e));
            break;
        }
    }
    let (written, s) = err.expect("redis filled up within 200 x 64 KiB");
    println!("maxmemory reached after {written} jobs of 64 KiB: {s:?}");
    assert_eq!(s.code(), tonic::Code::ResourceExhausted, "{s:?}");
    // Full is not down: reads, acks and the health check still work.
    assert_eq!(health(&app).await, 1);
    assert_eq!(get_job(&app, "full", "j0").await.job_id, "j0");
    // Workers drain a full Redis: leases and acks run past maxmemory (allow-oom).
    let mut w = TestWorker::open(&app, &["full"], 2, "w").await;
    for _ in 0..4 {
        let l = w.lease().await;
        assert_eq!(w.ack(&l).await.code, 0, "an ack on a full Redis");
    }
    let refused = try_enqueue(&app, spec("full", "still-full")).await;
    assert_eq!(
        refused.map_err(|s| s.code()),
        Err(tonic::Code::ResourceExhausted),
        "enqueues stay refused while full"
    );

    redis_cmd(&redis, &["CONFIG", "SET", "maxmemory", "0"]).await;
    enqueue(&app, spec("full", "after")).await;
}

#[tokio::test]
async fn an_evicting_policy_set_at_run_time_means_not_serving_with_the_reason_in_the_log() {
    let redis = RedisProc::start(RedisOpts::default()).await;
    let mut server = ServerProc::spawn(server_args(&redis.url)).await;

    redis_cmd(
        &redis,
        &["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"],
    )
    .await;
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while server.serving().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "still SERVING on an evicting redis:\n{}",
            server.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let log = server.log_tail();
    assert!(
        log.contains("maxmemory-policy") && log.contains("allkeys-lru"),
        "the log says why:\n{log}"
    );

    redis_cmd(&redis, &["CONFIG", "SET", "maxmemory-policy", "noeviction"]).await;
    server.wait_serving().await;
}

/// After the Redis behind jobwire's address is replaced by a new master, wake-ups still
/// reach an idle worker at once: the pub/sub listener follows the store's connection to the
/// new master instead of staying subscribed on the demoted one (where no PUBLISH arrives,
/// so only the lease loop's 2 s safety poll found new jobs).
#[tokio::test]
async fn after_a_new_master_wake_ups_reach_an_idle_worker_at_once() {
    let mut old = RedisProc::start(RedisOpts::default()).await;
    // `a` serves the worker; `b` enqueues, so the wake-up must travel over pub/sub.
    let a = TestApp::spawn(test_config(&old.url)).await;
    let b = TestApp::spawn(test_config(&old.url)).await;
    let mut w = TestWorker::open(&a, &["wake"], 1, "w").await;
    enqueue(&b, spec("wake", "before")).await;
    let l = w.lease().await;
    assert_eq!(w.ack(&l).await.code, 0);

    let _new = new_master_behind(&old).await;
    // Both replicas' health probes meet READONLY and reconnect; then they are ready.
    eventually(PATIENCE, || async {
        health(&a).await == 1 && health(&b).await == 1 && {
            w.heartbeat();
            try_enqueue(&b, spec("wake", "probe")).await.is_ok()
        }
    })
    .await;
    let probe = w.lease().await;
    assert_eq!(w.ack(&probe).await.code, 0);

    let mut slowest = Duration::ZERO;
    for i in 0..4 {
        // Give the loop time to go idle after its last lease.
        tokio::time::sleep(Duration::from_millis(300)).await;
        w.heartbeat();
        let t = std::time::Instant::now();
        enqueue(&b, spec("wake", &format!("after{i}"))).await;
        let l = w.lease().await;
        slowest = slowest.max(t.elapsed());
        assert_eq!(w.ack(&l).await.code, 0);
    }
    println!("slowest enqueue-to-lease after the new master: {slowest:?}");
    assert!(
        slowest < Duration::from_secs(1),
        "wake-ups wait for the safety poll: {slowest:?}"
    );
    old.kill().await;
}
