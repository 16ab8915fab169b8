//! The fault tests' process harness: a restartable `redis-server`, the real `jobwire` binary as
//! a child process (SIGTERM, SIGKILL, restart), and a real worker child process that can be
//! SIGKILLed mid-job. The worker child is this very test binary, run again with a filter that
//! selects [`child_worker`] and the settings in environment variables, so there is nothing
//! extra to build and it always speaks the current protocol.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use jobwire::pb;
use jobwire::pb::job_service_client::JobServiceClient;
use jobwire::pb::worker_service_client::WorkerServiceClient;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};
use tonic::transport::Channel;

use crate::harness::wait_for_redis;

/// A loopback TCP port that is free right now.
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// Sends `sig` (e.g. "-TERM") to `pid` with kill(1).
pub fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("run kill")
        .success();
    assert!(ok, "kill {sig} {pid}");
}

/// The children of `pid`, read from /proc (for the embedded redis-server of a jobwire).
pub fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(child) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid ...: comm may hold spaces, so split after the last ')'.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(pid) {
            out.push(child);
        }
    }
    out
}

fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// How a [`RedisProc`] persists.
#[derive(Clone, Copy)]
pub struct RedisOpts {
    /// appendonly yes, with this appendfsync; None: no persistence at all.
    pub aof: Option<&'static str>,
    /// maxmemory-policy.
    pub policy: &'static str,
}

impl Default for RedisOpts {
    fn default() -> Self {
        RedisOpts {
            aof: Some("always"),
            policy: "noeviction",
        }
    }
}

/// A redis-server on a Unix socket in its own directory, which can be killed and started
/// again on the same socket and data (append-only file).
pub struct RedisProc {
    dir: tempfile::TempDir,
    opts: RedisOpts,
    /// Also listening on this loopback TCP port (0: socket only).
    port: u16,
    child: Option<Child>,
    pub url: String,
}

impl RedisProc {
    pub async fn start(opts: RedisOpts) -> RedisProc {
        RedisProc::start_on(opts, 0).await
    }

    /// Starts one that also listens on loopback TCP `port` (replication speaks TCP only).
    pub async fn start_on(opts: RedisOpts, port: u16) -> RedisProc {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = format!("redis+unix://{}", dir.path().join("r.sock").display());
        let mut r = RedisProc {
            dir,
            opts,
            port,
            child: None,
            url,
        };
        r.restart().await;
        r
    }

    /// Starts the server (again) and waits for PING.
    pub async fn restart(&mut self) {
        assert!(self.child.is_none(), "already running");
        let sock = self.dir.path().join("r.sock");
        let _ = std::fs::remove_file(&sock);
        let mut cmd = Command::new("redis-server");
        cmd.args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .arg("--unixsocket")
            .arg(&sock)
            .arg("--dir")
            .arg(self.dir.path())
            .args(["--save", "", "--maxmemory-policy", self.opts.policy])
            .args(["--enable-debug-command", "yes"])
            .arg("--logfile")
            .arg(self.dir.path().join("redis.log"));
        match self.opts.aof {
            Some(fsync) => cmd.args(["--appendonly", "yes", "--appendfsync", fsync]),
            None => cmd.args(["--appendonly", "no"]),
        };
        let child = cmd
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("redis-server must be on the PATH (apt-get install redis-server)");
        self.child = Some(child);
        wait_for_redis(&self.url, Duration::from_secs(20)).await;
    }

    /// SIGKILL: an outage or a crash; nothing is flushed beyond what appendfsync did.
    pub async fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill().await;
        }
    }

    pub async fn conn(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url.as_str())
            .expect("url")
            .get_multiplexed_async_connection()
            .await
            .expect("connect")
    }
}

/// Runs one command (`args[0]` and its arguments) on `redis`; panics with the command on error.
pub async fn redis_cmd(redis: &RedisProc, args: &[&str]) -> redis::Value {
    let mut c = redis.conn().await;
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query_async(&mut c)
        .await
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// Flags for a jobwire child: fast leases and reaper, a short grace.
pub fn server_args(redis_url: &str) -> Vec<String> {
    [
        "--redis-url",
        redis_url,
        "--lease-duration",
        "1s",
        "--reaper-interval",
        "100ms",
        "--heartbeat-timeout",
        "1s",
        "--shutdown-grace",
        "2s",
    ]
    .map(String::from)
    .to_vec()
}

/// The real `jobwire serve` binary as a child process on free loopback ports.
pub struct ServerProc {
    child: Option<Child>,
    pub pid: u32,
    pub grpc: String,
    /// The HTTP address (`/metrics`, `/healthz`).
    pub http: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
    args: Vec<String>,
    /// Environment variables set for the child (besides RUST_LOG).
    envs: Vec<(String, String)>,
    pub channel: Channel,
}

impl ServerProc {
    /// Spawns `jobwire serve <args>` and waits until its health check says SERVING.
    pub async fn spawn(args: Vec<String>) -> ServerProc {
        ServerProc::spawn_with_env(args, Vec::new()).await
    }

    /// [`ServerProc::spawn`] with environment variables `envs` set for the child.
    pub async fn spawn_with_env(args: Vec<String>, envs: Vec<(String, String)>) -> ServerProc {
        let dir = tempfile::tempdir().expect("tempdir");
        let (child, grpc, http, log) = Self::launch(dir.path(), &args, &envs);
        let pid = child.id().expect("pid");
        let channel = Channel::from_shared(format!("http://{grpc}"))
            .expect("uri")
            .connect_lazy();
        let mut s = ServerProc {
            child: Some(child),
            pid,
            grpc,
            http,
            log,
            _dir: dir,
            args,
            envs,
            channel,
        };
        s.wait_serving().await;
        s
    }

    /// Runs `jobwire serve <args>` expecting it to exit by itself; returns status and log.
    pub async fn run_to_exit(args: Vec<String>, patience: Duration) -> (ExitStatus, String) {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut child, _, _, log) = Self::launch(dir.path(), &args, &[]);
        let status = tokio::time::timeout(patience, child.wait())
            .await
            .unwrap_or_else(|_| panic!("jobwire did not exit:\n{}", tail(&log)))
            .expect("wait");
        (status, std::fs::read_to_string(&log).unwrap_or_default())
    }

    fn launch(
        dir: &Path,
        args: &[String],
        envs: &[(String, String)],
    ) -> (Child, String, String, PathBuf) {
        let grpc = format!("127.0.0.1:{}", free_port());
        let http = format!("127.0.0.1:{}", free_port());
        // JOBWIRE_TEST_LOG_DIR keeps the servers' logs past the test (to read after a failure).
        let log_dir =
            std::env::var_os("JOBWIRE_TEST_LOG_DIR").map_or(dir.to_path_buf(), PathBuf::from);
        let log = log_dir.join(format!("jobwire-{}.log", free_port()));
        let f = std::fs::File::create(&log).expect("log");
        let child = Command::new(env!("CARGO_BIN_EXE_jobwire"))
            .arg("serve")
            .args(["--grpc-addr", &grpc, "--http-addr", &http])
            .args(args)
            .envs(envs.iter().map(|(k, v)| (k, v)))
            .env(
                "RUST_LOG",
                std::env::var("JOBWIRE_TEST_RUST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdout(Stdio::from(f.try_clone().expect("log")))
            .stderr(Stdio::from(f))
            // Its own process group (pgid = pid), as a shell job is: a signal to the group
            // (Ctrl-C) reaches jobwire and whatever it started, never the test runner.
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .expect("spawn jobwire");
        (child, grpc, http, log)
    }

    /// Waits until SERVING, failing with the log's tail if the process exits first.
    pub async fn wait_serving(&mut self) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(c) = self.child.as_mut() {
                if let Ok(Some(status)) = c.try_wait() {
                    panic!("jobwire exited with {status}:\n{}", self.log_tail());
                }
            }
            if self.serving().await {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "jobwire not SERVING in 30 s:\n{}",
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Does grpc.health.v1 say SERVING?
    pub async fn serving(&self) -> bool {
        let mut h = tonic_health::pb::health_client::HealthClient::new(self.channel.clone());
        let check = h.check(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        });
        matches!(
            tokio::time::timeout(Duration::from_secs(2), check).await,
            Ok(Ok(r)) if r.get_ref().status == 1
        )
    }

    pub fn log_tail(&self) -> String {
        tail(&self.log)
    }

    pub fn jobs(&self) -> JobServiceClient<Channel> {
        JobServiceClient::new(self.channel.clone())
    }

    #[allow(dead_code)]
    pub fn workers(&self) -> WorkerServiceClient<Channel> {
        WorkerServiceClient::new(self.channel.clone())
    }

    pub fn sigterm(&self) {
        signal(self.pid, "-TERM");
    }

    /// SIGINT to jobwire's whole process group, as Ctrl-C in a terminal sends it.
    pub fn sigint_group(&self) {
        let ok = std::process::Command::new("kill")
            .args(["-INT", "--", &format!("-{}", self.pid)])
            .status()
            .expect("run kill")
            .success();
        assert!(ok, "kill -INT -- -{}", self.pid);
    }

    /// SIGKILL: no drain, no hand-back, no destructors.
    pub async fn sigkill(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = c.kill().await;
        }
    }

    /// Waits for the process to exit (after a signal).
    pub async fn wait_exit(&mut self, patience: Duration) -> ExitStatus {
        let c = self.child.as_mut().expect("running");
        tokio::time::timeout(patience, c.wait())
            .await
            .unwrap_or_else(|_| panic!("jobwire still running:\n{}", tail(&self.log)))
            .expect("wait")
    }

    /// Starts the binary again with the same flags, on new ports.
    pub async fn restart(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill().await;
        }
        let (child, grpc, http, log) = Self::launch(self._dir.path(), &self.args, &self.envs);
        self.pid = child.id().expect("pid");
        self.child = Some(child);
        self.grpc = grpc;
        self.http = http;
        self.log = log;
        self.channel = Channel::from_shared(format!("http://{}", self.grpc))
            .expect("uri")
            .connect_lazy();
        self.wait_serving().await;
    }
}

/// A worker in a child process: it subscribes to `queue` on `addr` with one credit, prints
/// `LEASED <job id> <attempt> <token>` for each lease, heartbeats, and never settles (it is
/// there to be SIGKILLed mid-job).
pub struct WorkerProc {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

/// One lease a [`WorkerProc`] reported.
#[derive(Debug, Clone)]
pub struct ChildLease {
    pub job_id: String,
    pub attempt: u32,
    pub token: String,
}

impl WorkerProc {
    pub fn spawn(addr: &str, queue: &str) -> WorkerProc {
        let mut child = Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "--exact",
                "procs::child_worker",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("JW_CHILD_ADDR", addr)
            .env("JW_CHILD_QUEUE", queue)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn worker child");
        let lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        WorkerProc { child, lines }
    }

    /// The next lease the child reports within `patience`.
    pub async fn leased(&mut self, patience: Duration) -> Option<ChildLease> {
        let read = async {
            while let Ok(Some(line)) = self.lines.next_line().await {
                // libtest prints "test procs::child_worker ... " before the first line.
                let Some(at) = line.find("LEASED ") else {
                    continue;
                };
                let f: Vec<&str> = line[at..].split(' ').collect();
                if f.len() == 4 && f[0] == "LEASED" {
                    return Some(ChildLease {
                        job_id: f[1].to_owned(),
                        attempt: f[2].parse().ok()?,
                        token: f[3].to_owned(),
                    });
                }
            }
            None
        };
        tokio::time::timeout(patience, read).await.ok().flatten()
    }

    /// SIGKILL, and reap.
    pub async fn sigkill(mut self) {
        let _ = self.child.kill().await;
    }
}

/// The body of [`WorkerProc`]: does nothing unless started by it (JW_CHILD_ADDR set).
#[test]
#[ignore = "run as a child process by the fault tests"]
fn child_worker() {
    let (Ok(addr), Ok(queue)) = (
        std::env::var("JW_CHILD_ADDR"),
        std::env::var("JW_CHILD_QUEUE"),
    ) else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async move {
        use pb::subscribe_request::Message as In;
        use pb::subscribe_response::Message as Out;
        let channel = Channel::from_shared(format!("http://{addr}"))
            .expect("uri")
            .connect()
            .await
            .expect("connect");
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tx.send(pb::SubscribeRequest {
            message: Some(In::Open(pb::OpenStream {
                queues: vec![queue],
                credits: 1,
                worker_id: format!("child-{}", std::process::id()),
            })),
        })
        .expect("send");
        let beat = tx.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(200)).await;
                let hb = pb::SubscribeRequest {
                    message: Some(In::Heartbeat(pb::Heartbeat {})),
                };
                if beat.send(hb).is_err() {
                    return;
                }
            }
        });
        let mut stream = WorkerServiceClient::new(channel)
            .subscribe(tokio_stream::wrappers::UnboundedReceiverStream::new(rx))
            .await
            .expect("subscribe")
            .into_inner();
        while let Ok(Some(m)) = stream.message().await {
            if let Some(Out::Lease(l)) = m.message {
                let id = l.job.map(|j| j.job_id).unwrap_or_default();
                println!("LEASED {id} {} {}", l.attempt, l.lease_token);
            }
        }
    });
}
