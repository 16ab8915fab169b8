//! Shared test harness: a private `redis-server` per test (Unix socket, killed on drop; a
//! private 3-master Redis Cluster instead with `JOBWIRE_TEST_REDIS=cluster`), a jobwire server spawned in-process on 127.0.0.1:0 through the same `jobwire::run` as the
//! binary, gRPC clients, a worker stream helper, and `eventually` instead of sleeps.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use jobwire::config::ServeArgs;
use jobwire::pb;
use jobwire::pb::dead_letter_service_client::DeadLetterServiceClient;
use jobwire::pb::job_service_client::JobServiceClient;
use jobwire::pb::worker_service_client::WorkerServiceClient;
use tokio::sync::oneshot;
use tonic::transport::Channel;

#[path = "harness_worker.rs"]
mod worker;
#[allow(unused_imports)] // Recv: used by some suites only
pub use worker::{Recv, TestWorker};

/// The environment variable that selects the Redis the suite runs against: unset (or
/// `single`): one private redis-server per test on a Unix socket; `cluster`: a private
/// 3-master Redis Cluster per test (tests/support/topology/), for the core of the suite.
pub const REDIS_ENV: &str = "JOBWIRE_TEST_REDIS";

/// Does this run use a Redis Cluster (`JOBWIRE_TEST_REDIS=cluster`)?
pub fn on_cluster() -> bool {
    std::env::var(REDIS_ENV).is_ok_and(|v| v == "cluster")
}

/// True (and says why) when this run is on a cluster and the test needs one single Redis
/// (e.g. it reads server-wide figures); the test then returns at once.
pub fn single_only(why: &str) -> bool {
    if on_cluster() {
        println!("skipped on the cluster ({REDIS_ENV}=cluster): {why}");
    }
    on_cluster()
}

/// The test's private Redis: one redis-server on a Unix socket in a temp dir, or a
/// 3-master cluster on loopback TCP when [`on_cluster`].
pub struct TestRedis {
    kind: Kind,
    pub url: String,
}

enum Kind {
    Single {
        child: Child,
        _dir: tempfile::TempDir,
    },
    Cluster(crate::topology::TestCluster),
}

/// A raw connection to the test Redis that routes like jobwire does: straight to the single
/// server, or on a cluster to the master of the command's first key (one slot per command).
#[derive(Clone)]
pub enum RawConn {
    Single(redis::aio::MultiplexedConnection),
    Cluster(redis::cluster_async::ClusterConnection),
}

/// How long [`TestRedis::conn`] waits for an answer (redis-rs's default is 500 ms).
const RAW_RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);

impl redis::aio::ConnectionLike for RawConn {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            RawConn::Single(c) => c.req_packed_command(cmd),
            RawConn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            RawConn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            RawConn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            RawConn::Single(c) => c.get_db(),
            RawConn::Cluster(c) => c.get_db(),
        }
    }
}

impl TestRedis {
    /// A single redis-server, or a 3-master cluster when [`on_cluster`].
    pub async fn start() -> TestRedis {
        if on_cluster() {
            let c = crate::topology::TestCluster::start(3, 0).await;
            println!("3-master cluster formed in {:?}", c.formed_in);
            return TestRedis {
                url: c.url.clone(),
                kind: Kind::Cluster(c),
            };
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let sock = dir.path().join("r.sock");
        let child = Command::new("redis-server")
            .args(["--port", "0", "--unixsocket"])
            .arg(&sock)
            .args([
                "--save",
                "",
                "--appendonly",
                "no",
                "--maxmemory-policy",
                "noeviction",
            ])
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server must be on the PATH (apt-get install redis-server)");
        let url = format!("redis+unix://{}", sock.display());
        wait_for_redis(&url, Duration::from_secs(10)).await;
        TestRedis {
            kind: Kind::Single { child, _dir: dir },
            url,
        }
    }

    /// The cluster, when this run is on one.
    pub fn cluster(&self) -> Option<&crate::topology::TestCluster> {
        match &self.kind {
            Kind::Cluster(c) => Some(c),
            Kind::Single { .. } => None,
        }
    }

    /// A raw connection (commands of one slot each on a cluster), answers awaited up to 10 s
    /// (a test's bulk script may take a while on a loaded machine).
    pub async fn conn(&self) -> RawConn {
        match &self.kind {
            Kind::Single { .. } => RawConn::Single(
                redis::Client::open(self.url.as_str())
                    .expect("url")
                    .get_multiplexed_async_connection_with_config(
                        &redis::AsyncConnectionConfig::new()
                            .set_response_timeout(Some(RAW_RESPONSE_TIMEOUT)),
                    )
                    .await
                    .expect("connect"),
            ),
            Kind::Cluster(c) => {
                let nodes: Vec<String> = c
                    .ports()
                    .iter()
                    .map(|p| format!("redis://127.0.0.1:{p}"))
                    .collect();
                RawConn::Cluster(
                    redis::cluster::ClusterClient::builder(nodes)
                        .response_timeout(RAW_RESPONSE_TIMEOUT)
                        .build()
                        .expect("cluster client")
                        .get_async_connection()
                        .await
                        .expect("connect to the cluster"),
                )
            }
        }
    }

    /// Plain connections to every master (one, on a single Redis), for server-wide
    /// commands (DBSIZE, INFO, SLOWLOG) whose answers are summed or merged.
    pub async fn masters(&self) -> Vec<redis::aio::MultiplexedConnection> {
        match &self.kind {
            Kind::Single { .. } => match self.conn().await {
                RawConn::Single(c) => vec![c],
                RawConn::Cluster(_) => unreachable!("a single Redis"),
            },
            Kind::Cluster(c) => {
                let mut out = Vec::new();
                for port in c.masters().await {
                    out.push(c.conn(port).await);
                }
                out
            }
        }
    }

    /// A store on this redis, for reading jobs as the server stored them.
    pub async fn store(&self) -> jobwire::store::Store {
        jobwire::store::Store::connect(&self.url, Duration::from_secs(5))
            .await
            .expect("store")
    }

    /// The stored job `id` of `queue` (panics if there is none).
    pub async fn job(&self, queue: &str, id: &str) -> jobwire::jobs::Job {
        let q = jobwire::jobs::QueueName::parse(queue).expect("queue");
        self.store()
            .await
            .get_job(&q, id)
            .await
            .expect("get_job")
            .unwrap_or_else(|| panic!("no job {id:?} in {queue}"))
    }

    /// Makes Redis hold every write command (scripts that write included) for `ms` ms
    /// (`CLIENT PAUSE ms WRITE`): a write sent meanwhile is in flight that long. One Redis
    /// only (a cluster's masters are paused one by one by the tests that need it).
    pub async fn pause_writes(&self, ms: u64) {
        let mut c = self.conn().await;
        let _: () = redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(ms)
            .arg("WRITE")
            .query_async(&mut c)
            .await
            .expect("client pause");
    }

    /// Calls Redis ran of each of `cmds` (lower case, as `INFO commandstats` names them:
    /// `fcall`, `evalsha`), summed, and summed over the masters of a cluster.
    pub async fn command_calls(&self, cmds: &[&str]) -> u64 {
        self.command_stat(cmds, "calls").await
    }

    /// `INFO commandstats` field `field` (`calls`, `rejected_calls`, `failed_calls`) of each
    /// of `cmds`, summed, and summed over the masters of a cluster.
    pub async fn command_stat(&self, cmds: &[&str], field: &str) -> u64 {
        let mut sum = 0;
        for mut c in self.masters().await {
            let info: String = redis::cmd("INFO")
                .arg("commandstats")
                .query_async(&mut c)
                .await
                .expect("info");
            sum += info
                .lines()
                .filter_map(|l| {
                    let (name, stats) = l.strip_prefix("cmdstat_")?.split_once(':')?;
                    cmds.contains(&name).then_some(stats)
                })
                .filter_map(|stats| {
                    stats
                        .split(',')
                        .find_map(|kv| kv.strip_prefix(field)?.strip_prefix('='))?
                        .parse::<u64>()
                        .ok()
                })
                .sum::<u64>();
        }
        sum
    }

    /// Redis's `used_memory`, bytes (summed over the masters of a cluster).
    pub async fn used_memory(&self) -> i64 {
        let mut sum = 0;
        for mut c in self.masters().await {
            let info: String = redis::cmd("INFO")
                .arg("memory")
                .query_async(&mut c)
                .await
                .expect("info");
            sum += info
                .lines()
                .find_map(|l| l.strip_prefix("used_memory:"))
                .and_then(|v| v.trim().parse::<i64>().ok())
                .expect("used_memory");
        }
        sum
    }

    /// The number of keys (DBSIZE, summed over the masters of a cluster).
    pub async fn dbsize(&self) -> i64 {
        let mut sum = 0;
        for mut c in self.masters().await {
            sum += redis::cmd("DBSIZE")
                .query_async::<i64>(&mut c)
                .await
                .expect("dbsize");
        }
        sum
    }

    /// The raw header of job `id` of `queue` (None if there is none): an entry of the
    /// queue's jobs hash (src/store/scripts/common.lua).
    pub async fn record(&self, queue: &str, id: &str) -> Option<Vec<u8>> {
        redis::cmd("HGET")
            .arg(format!("jw:{{{queue}}}:jobs"))
            .arg(id)
            .query_async(&mut self.conn().await)
            .await
            .expect("hget")
    }

    /// Sets the ready time of waiting job `id` of `queue`, ms (the 13th header value, see
    /// src/store/scripts/common.lua), as if it had waited since then.
    pub async fn set_ready_ms(&self, queue: &str, id: &str, ready_ms: i64) {
        let _: () = redis::cmd("EVAL")
            .arg(
                "local h = { cmsgpack.unpack_limit(redis.call('HGET', KEYS[1], ARGV[1]), 17, 0) } \
                 h[14] = tonumber(ARGV[2]) \
                 redis.call('HSET', KEYS[1], ARGV[1], cmsgpack.pack(unpack(h, 2, 18)))",
            )
            .arg(1)
            .arg(format!("jw:{{{queue}}}:jobs"))
            .arg(id)
            .arg(ready_ms)
            .query_async(&mut self.conn().await)
            .await
            .expect("set ready time");
    }
}

impl Drop for TestRedis {
    fn drop(&mut self) {
        // A cluster's nodes are killed by the cluster's own drop.
        if let Kind::Single { child, .. } = &mut self.kind {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A jobwire server running in this process.
pub struct TestApp {
    pub grpc: SocketAddr,
    pub http: SocketAddr,
    pub channel: Channel,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

/// Test settings: short leases and a fast reaper.
pub fn test_config(redis_url: &str) -> ServeArgs {
    let mut cfg = ServeArgs::for_tests(redis_url);
    cfg.lease_duration = Duration::from_secs(2);
    cfg.reaper_interval = Duration::from_millis(100);
    cfg.shutdown_grace = Duration::from_secs(2);
    cfg
}

/// A plaintext channel to the gRPC port at `addr`.
pub async fn plain_channel(addr: SocketAddr) -> Channel {
    Channel::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect()
        .await
        .expect("connect to jobwire")
}

impl TestApp {
    pub async fn spawn(cfg: ServeArgs) -> TestApp {
        TestApp::spawn_with(cfg, plain_channel).await
    }

    /// Spawns like [`TestApp::spawn`], with `channel` (and the readiness check) made by
    /// `connect` from the gRPC address, e.g. a TLS channel.
    pub async fn spawn_with<F, Fut>(cfg: ServeArgs, connect: F) -> TestApp
    where
        F: FnOnce(SocketAddr) -> Fut,
        Fut: Future<Output = Channel>,
    {
        let grpc = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let http = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let (grpc_addr, http_addr) = (
            grpc.local_addr().expect("addr"),
            http.local_addr().expect("addr"),
        );
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(jobwire::run(cfg, grpc, http, async move {
            let _ = rx.await;
        }));
        let channel = connect(grpc_addr).await;
        let app = TestApp {
            grpc: grpc_addr,
            http: http_addr,
            channel,
            stop: Some(tx),
            task: Some(task),
        };
        let mut health = tonic_health::pb::health_client::HealthClient::new(app.channel.clone());
        eventually(Duration::from_secs(10), || {
            let mut h = health.clone();
            async move {
                h.check(tonic_health::pb::HealthCheckRequest {
                    service: String::new(),
                })
                .await
                .map(|r| r.into_inner().status == 1)
                .unwrap_or(false)
            }
        })
        .await;
        let _ = &mut health;
        app
    }

    pub async fn with_redis() -> (TestRedis, TestApp) {
        let redis = TestRedis::start().await;
        let app = TestApp::spawn(test_config(&redis.url)).await;
        (redis, app)
    }

    pub fn jobs(&self) -> JobServiceClient<Channel> {
        JobServiceClient::new(self.channel.clone())
    }

    pub fn workers(&self) -> WorkerServiceClient<Channel> {
        WorkerServiceClient::new(self.channel.clone())
    }

    pub fn dead(&self) -> DeadLetterServiceClient<Channel> {
        DeadLetterServiceClient::new(self.channel.clone())
    }

    /// Stops the server (SIGTERM path) and waits for `run` to return.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        match self.task.take() {
            Some(t) => t.await.expect("join"),
            None => Ok(()),
        }
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

/// Waits until the Redis at `url` answers PING, failing the test after `patience`.
pub async fn wait_for_redis(url: &str, patience: Duration) {
    let client = redis::Client::open(url).expect("url");
    eventually(patience, || async {
        match client.get_multiplexed_async_connection().await {
            Ok(mut c) => redis::cmd("PING")
                .query_async::<String>(&mut c)
                .await
                .is_ok(),
            Err(_) => false,
        }
    })
    .await;
}

/// Polls `probe` until it is true, failing the test after `patience`.
pub async fn eventually<F, Fut>(patience: Duration, mut probe: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        if probe().await {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "condition not met within {patience:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A job spec with the usual defaults.
pub fn spec(queue: &str, id: &str) -> pb::JobSpec {
    pb::JobSpec {
        queue: queue.into(),
        job_id: id.into(),
        name: "test-job".into(),
        payload: b"{}".to_vec(),
        ..Default::default()
    }
}

pub async fn enqueue(app: &TestApp, spec: pb::JobSpec) -> pb::EnqueueResponse {
    app.jobs()
        .enqueue(pb::EnqueueRequest { job: Some(spec) })
        .await
        .expect("enqueue")
        .into_inner()
}

/// Waits (polling, at most 5 s) until the server has confirmed every lease call of `queue`
/// (`confirm_calls.lua` removes the call records): from then on its leases count as
/// delivered, and no background confirmation changes Redis.
pub async fn wait_lease_calls_confirmed(c: &mut impl redis::aio::ConnectionLike, queue: &str) {
    for _ in 0..500 {
        let pending: i64 = redis::cmd("EXISTS")
            .arg(format!("jw:{{{queue}}}:calls"))
            .arg(format!("jw:{{{queue}}}:call_jobs"))
            .query_async(c)
            .await
            .expect("exists");
        if pending == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the lease calls of {queue} were never confirmed");
}

pub async fn get_job(app: &TestApp, queue: &str, id: &str) -> pb::Job {
    app.jobs()
        .get_job(pb::GetJobRequest {
            queue: queue.into(),
            job_id: id.into(),
        })
        .await
        .expect("get job")
        .into_inner()
        .job
        .expect("job")
}

pub fn ms(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}

/// Where the test binary's temp files go.
#[allow(dead_code)]
pub fn scratch() -> PathBuf {
    std::env::temp_dir()
}

/// GET `path` over plain HTTP/1.1; the status line must be 200; returns the body.
pub async fn http_get(addr: SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    // The address as Host, as a real client sends it (/metrics refuses other hosts).
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .expect("write");
    let mut out = String::new();
    s.read_to_string(&mut out).await.expect("read");
    assert!(
        out.starts_with("HTTP/1.1 200"),
        "{}",
        out.lines().next().unwrap_or_default()
    );
    out.split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default()
}

/// The value of the series `name{labels...}` in a Prometheus text page (all given labels
/// must match).
pub fn metric_value(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (series, v) = l.rsplit_once(' ')?;
        let (n, rest) = series.split_once('{').unwrap_or((series, ""));
        if n != name
            || !labels
                .iter()
                .all(|(k, val)| rest.contains(&format!("{k}=\"{val}\"")))
        {
            return None;
        }
        v.parse().ok()
    })
}
