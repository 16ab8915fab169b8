//! Shared test harness: a private `redis-server` per test (Unix socket, killed on drop), a
//! jobwire server spawned in-process on 127.0.0.1:0 through the same `jobwire::run` as the
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
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::transport::Channel;
use tonic::Streaming;

/// A private redis-server on a Unix socket in a temp dir.
pub struct TestRedis {
    child: Child,
    _dir: tempfile::TempDir,
    pub url: String,
}

impl TestRedis {
    pub async fn start() -> TestRedis {
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
            child,
            _dir: dir,
            url,
        }
    }

    pub async fn conn(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url.as_str())
            .expect("url")
            .get_multiplexed_async_connection()
            .await
            .expect("connect")
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

    /// Redis's `used_memory`, bytes.
    pub async fn used_memory(&self) -> i64 {
        let info: String = redis::cmd("INFO")
            .arg("memory")
            .query_async(&mut self.conn().await)
            .await
            .expect("info");
        info.lines()
            .find_map(|l| l.strip_prefix("used_memory:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("used_memory")
    }

    /// The raw record of job `id` of `queue` (None if there is none).
    pub async fn record(&self, queue: &str, id: &str) -> Option<Vec<u8>> {
        redis::cmd("GET")
            .arg(format!("jw:{{{queue}}}:job:{id}"))
            .query_async(&mut self.conn().await)
            .await
            .expect("get")
    }

    /// Sets the ready time of waiting job `id` of `queue`, ms (the 13th header value of the
    /// job record, see src/store/scripts/common.lua), as if it had waited since then.
    pub async fn set_ready_ms(&self, queue: &str, id: &str, ready_ms: i64) {
        let _: () = redis::cmd("EVAL")
            .arg(
                "local rec = redis.call('GET', KEYS[1]) \
                 local h = { cmsgpack.unpack_limit(rec, 17, 0) } \
                 h[14] = tonumber(ARGV[1]) \
                 redis.call('SET', KEYS[1], cmsgpack.pack(unpack(h, 2, 18)) .. string.sub(rec, h[1] + 1))",
            )
            .arg(1)
            .arg(format!("jw:{{{queue}}}:job:{id}"))
            .arg(ready_ms)
            .query_async(&mut self.conn().await)
            .await
            .expect("set ready time");
    }
}

impl Drop for TestRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
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

impl TestApp {
    pub async fn spawn(cfg: ServeArgs) -> TestApp {
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
        let channel = Channel::from_shared(format!("http://{grpc_addr}"))
            .expect("uri")
            .connect()
            .await
            .expect("connect to jobwire");
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

/// What [`TestWorker::recv`] saw.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum Recv {
    Msg(Out),
    End,
    Error(tonic::Status),
    Timeout,
}

/// A worker holding a Subscribe stream.
pub struct TestWorker {
    tx: mpsc::UnboundedSender<pb::SubscribeRequest>,
    rx: Streaming<pb::SubscribeResponse>,
    /// Settled messages read while waiting for leases, and vice versa.
    pending_leases: Vec<pb::Lease>,
    pending_settled: Vec<pb::Settled>,
}

use pb::subscribe_request::Message as In;
use pb::subscribe_response::Message as Out;

impl TestWorker {
    pub async fn open(app: &TestApp, queues: &[&str], credits: u32, worker_id: &str) -> TestWorker {
        TestWorker::open_on(app.channel.clone(), queues, credits, worker_id).await
    }

    /// Opens a stream on any server's channel (e.g. a jobwire child process).
    pub async fn open_on(
        channel: Channel,
        queues: &[&str],
        credits: u32,
        worker_id: &str,
    ) -> TestWorker {
        let (tx, rx) = mpsc::unbounded_channel();
        tx.send(pb::SubscribeRequest {
            message: Some(In::Open(pb::OpenStream {
                queues: queues.iter().map(|q| q.to_string()).collect(),
                credits,
                worker_id: worker_id.into(),
            })),
        })
        .expect("send");
        let rx = WorkerServiceClient::new(channel)
            .subscribe(UnboundedReceiverStream::new(rx))
            .await
            .expect("subscribe")
            .into_inner();
        TestWorker {
            tx,
            rx,
            pending_leases: Vec::new(),
            pending_settled: Vec::new(),
        }
    }

    pub fn send(&self, m: In) {
        self.tx
            .send(pb::SubscribeRequest { message: Some(m) })
            .expect("stream open");
    }

    /// Sends a heartbeat; false when the stream is gone.
    pub fn heartbeat(&self) -> bool {
        self.tx
            .send(pb::SubscribeRequest {
                message: Some(In::Heartbeat(pb::Heartbeat {})),
            })
            .is_ok()
    }

    /// The next message, without panicking on the end of the stream or an error status.
    pub async fn recv(&mut self, patience: Duration) -> Recv {
        match tokio::time::timeout(patience, self.rx.message()).await {
            Ok(Ok(Some(m))) => m.message.map_or(Recv::End, Recv::Msg),
            Ok(Ok(None)) => Recv::End,
            Ok(Err(status)) => Recv::Error(status),
            Err(_) => Recv::Timeout,
        }
    }

    /// Heartbeats every 200 ms for `period`, collecting any leases that arrive meanwhile
    /// (a busy worker that keeps its stream alive).
    pub async fn heartbeat_for(&mut self, period: Duration) -> Vec<pb::Lease> {
        let deadline = tokio::time::Instant::now() + period;
        let mut leases = Vec::new();
        while tokio::time::Instant::now() < deadline {
            self.send(In::Heartbeat(pb::Heartbeat {}));
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if let Some(l) = self
                .lease_within(left.min(Duration::from_millis(200)))
                .await
            {
                leases.push(l);
            }
        }
        leases
    }

    async fn read(&mut self, patience: Duration) -> Option<Out> {
        match tokio::time::timeout(patience, self.rx.message()).await {
            Ok(Ok(Some(m))) => m.message,
            Ok(Ok(None)) => None,
            Ok(Err(status)) => panic!("stream error: {status:?}"),
            Err(_) => None,
        }
    }

    /// The next lease within `patience`, or None.
    pub async fn lease_within(&mut self, patience: Duration) -> Option<pb::Lease> {
        if !self.pending_leases.is_empty() {
            return Some(self.pending_leases.remove(0));
        }
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.read(left).await? {
                Out::Lease(l) => return Some(l),
                Out::Settled(s) => self.pending_settled.push(s),
                Out::Draining(_) => {}
            }
        }
    }

    pub async fn lease(&mut self) -> pb::Lease {
        self.lease_within(Duration::from_secs(10))
            .await
            .expect("a lease within 10 s")
    }

    pub async fn settled(&mut self) -> pb::Settled {
        if !self.pending_settled.is_empty() {
            return self.pending_settled.remove(0);
        }
        loop {
            match self
                .read(Duration::from_secs(10))
                .await
                .expect("a settled within 10 s")
            {
                Out::Settled(s) => return s,
                Out::Lease(l) => self.pending_leases.push(l),
                Out::Draining(_) => {}
            }
        }
    }

    /// Reads until the server ends the stream or `patience` passes; returns what came.
    pub async fn drain_messages(&mut self, patience: Duration) -> Vec<Out> {
        let mut out = Vec::new();
        while let Some(m) = self.read(patience).await {
            out.push(m);
        }
        out
    }

    /// Leases `n` jobs, acks them all on the stream, and waits for every ack to be applied.
    pub async fn ack_all(&mut self, n: usize) {
        for _ in 0..n {
            let l = self.lease().await;
            let job = l.job.as_ref().expect("job");
            self.send(In::Ack(pb::AckRequest {
                queue: job.queue.clone(),
                job_id: job.job_id.clone(),
                lease_token: l.lease_token.clone(),
            }));
        }
        for _ in 0..n {
            assert_eq!(self.settled().await.code, 0);
        }
    }

    pub async fn ack(&mut self, l: &pb::Lease) -> pb::Settled {
        let job = l.job.as_ref().expect("job");
        self.send(In::Ack(pb::AckRequest {
            queue: job.queue.clone(),
            job_id: job.job_id.clone(),
            lease_token: l.lease_token.clone(),
        }));
        self.settled().await
    }

    pub async fn fail(
        &mut self,
        l: &pb::Lease,
        disposition: pb::FailDisposition,
        message: &str,
        error_type: &str,
        retry_after: Option<Duration>,
    ) -> pb::Settled {
        let job = l.job.as_ref().expect("job");
        self.send(In::Fail(pb::FailRequest {
            queue: job.queue.clone(),
            job_id: job.job_id.clone(),
            lease_token: l.lease_token.clone(),
            disposition: disposition as i32,
            error: Some(pb::JobError {
                message: message.into(),
                error_type: error_type.into(),
                details: String::new(),
            }),
            retry_after: retry_after.map(ms),
            pause_queue: false,
        }));
        self.settled().await
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
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
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
