//! Test helpers: run a handler against a fake lease (no server), and start a real
//! `jobwire serve` on free loopback ports.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use jobwire_client::testing::{FakeLease, TestServer, ServerOptions};
//! use jobwire_client::{Ctx, Job, JobError};
//! // A handler, no server:
//! let r = FakeLease::json("emails", "welcome", &serde_json::json!({"to": ""}))?
//!     .run(|job: Job<serde_json::Value>, _ctx: Ctx| async move {
//!         Err::<(), _>(JobError::non_retryable(format!("bad: {}", job.payload)))
//!     })
//!     .await;
//! assert!(matches!(r, Err(JobError::NonRetryable(_))));
//! // A real server (the binary from JOBWIRE_BIN, else `jobwire` on PATH):
//! let server = TestServer::start(ServerOptions::default()).await?;
//! let client = server.client().await?;
//! # Ok(()) }
//! ```

use std::future::Future;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use tokio::process::{Child, Command};

use crate::worker::{fail_request, run_handler, Ctx, Job};
use crate::{pb, Client, ClientOptions, Error, JobError, Payload};

/// A lease made up locally, to run a handler on without a server.
#[derive(Clone, Debug)]
pub struct FakeLease {
    /// The lease the handler gets (attempt 1, a fake token and idempotency key).
    pub lease: pb::Lease,
}

impl FakeLease {
    /// A lease of job `name` on `queue` with `payload`.
    pub fn new(queue: &str, name: &str, payload: impl Into<Payload>) -> FakeLease {
        let p = payload.into();
        FakeLease {
            lease: pb::Lease {
                job: Some(pb::Job {
                    queue: queue.into(),
                    job_id: "fake-job".into(),
                    name: name.into(),
                    payload: p.bytes,
                    content_type: p.content_type,
                    state: pb::JobState::Active as i32,
                    max_attempts: 3,
                    attempts_made: 1,
                    ..Default::default()
                }),
                attempt: 1,
                lease_token: "fake-lease-token".into(),
                idempotency_key: "fake-idempotency-key".into(),
                ..Default::default()
            },
        }
    }

    /// A lease whose payload is `value` as JSON.
    pub fn json<T: serde::Serialize + ?Sized>(
        queue: &str,
        name: &str,
        value: &T,
    ) -> Result<FakeLease, Error> {
        Ok(FakeLease::new(queue, name, Payload::json(value)?))
    }

    /// Sets the attempt number (1-based).
    pub fn attempt(mut self, n: u32) -> FakeLease {
        self.lease.attempt = n;
        if let Some(j) = self.lease.job.as_mut() {
            j.attempts_made = n;
        }
        self
    }

    /// Adds a metadata pair.
    pub fn metadata(mut self, key: &str, value: &str) -> FakeLease {
        if let Some(j) = self.lease.job.as_mut() {
            j.metadata.insert(key.into(), value.into());
        }
        self
    }

    /// Runs a JSON handler (as [`crate::Worker::handle`] would) with a fresh [`Ctx`].
    pub async fn run<T, F, Fut>(self, f: F) -> Result<(), JobError>
    where
        T: DeserializeOwned + Send + 'static,
        F: Fn(Job<T>, Ctx) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), JobError>> + Send + 'static,
    {
        self.run_with(f, Ctx::new("test-worker")).await
    }

    /// [`FakeLease::run`] with a given context (e.g. a cancelled one).
    pub async fn run_with<T, F, Fut>(self, f: F, ctx: Ctx) -> Result<(), JobError>
    where
        T: DeserializeOwned + Send + 'static,
        F: Fn(Job<T>, Ctx) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), JobError>> + Send + 'static,
    {
        run_handler(crate::worker::json_handler(f), self.lease, ctx).await
    }

    /// Runs a raw-bytes handler (as [`crate::Worker::handle_bytes`] would).
    pub async fn run_bytes<F, Fut>(self, f: F) -> Result<(), JobError>
    where
        F: Fn(Job<Vec<u8>>, Ctx) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), JobError>> + Send + 'static,
    {
        let ctx = Ctx::new("test-worker");
        run_handler(crate::worker::bytes_handler(f), self.lease, ctx).await
    }
}

/// The Fail request (disposition, error, retry_after, pause_queue) the worker sends for a
/// handler's error, without the lease ids: to check a handler's error mapping in tests.
pub fn fail_request_for(e: JobError) -> pb::FailRequest {
    fail_request(e)
}

/// How to start a [`TestServer`].
#[derive(Clone, Debug, Default)]
pub struct ServerOptions {
    /// The binary; `None`: `JOBWIRE_BIN`, else `jobwire` on `PATH`.
    pub bin: Option<PathBuf>,
    /// Extra `jobwire serve` flags (e.g. `["--lease-duration", "1s"]`).
    pub args: Vec<String>,
    /// Use this Redis (`--redis-url`) instead of the embedded one (`--data-dir` in a fresh
    /// temporary directory).
    pub redis_url: Option<String>,
    /// How the readiness check and [`TestServer::client`] connect (TLS, token) when `args`
    /// turn on TLS or an auth file; default plaintext.
    pub client: ClientOptions,
}

/// A `jobwire serve` child process on free loopback ports, SERVING once started; killed
/// (and its data directory removed) on drop.
#[derive(Debug)]
pub struct TestServer {
    child: Option<Child>,
    bin: PathBuf,
    options: ServerOptions,
    grpc: u16,
    http: u16,
    data_dir: PathBuf,
}

/// A free TCP port on 127.0.0.1 (bound and released; another process could take it first,
/// which is unlikely).
pub fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The jobwire binary: `JOBWIRE_BIN`, else `jobwire` (looked up on `PATH`).
pub fn jobwire_bin() -> PathBuf {
    std::env::var_os("JOBWIRE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("jobwire"))
}

/// How long a server may take to become SERVING.
const START_TIMEOUT: Duration = Duration::from_secs(30);

impl TestServer {
    /// Starts a server and waits until the gRPC health check says SERVING.
    pub async fn start(options: ServerOptions) -> Result<TestServer, Error> {
        let data_dir = std::env::temp_dir().join(format!(
            "jobwire-client-test-{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&data_dir)?;
        let mut s = TestServer {
            child: None,
            bin: options.bin.clone().unwrap_or_else(jobwire_bin),
            options,
            grpc: free_port()?,
            http: free_port()?,
            data_dir,
        };
        s.spawn().await?;
        Ok(s)
    }

    async fn spawn(&mut self) -> Result<(), Error> {
        let mut cmd = Command::new(&self.bin);
        cmd.arg("serve")
            .args(["--grpc-addr", &format!("127.0.0.1:{}", self.grpc)])
            .args(["--http-addr", &format!("127.0.0.1:{}", self.http)]);
        match &self.options.redis_url {
            Some(url) => cmd.args(["--redis-url", url]),
            None => cmd.arg("--data-dir").arg(&self.data_dir),
        };
        cmd.args(&self.options.args)
            .current_dir(&self.data_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.data_dir.join("jobwire.log"))?)
            .kill_on_drop(true);
        // The server reads JOBWIRE_* settings from the environment: keep the caller's out.
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("JOBWIRE_") {
                cmd.env_remove(k);
            }
        }
        let child = cmd.spawn().map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!(
                    "cannot start {} (set JOBWIRE_BIN or put jobwire on PATH): {e}",
                    self.bin.display()
                ),
            )
        })?;
        self.child = Some(child);
        self.wait_serving().await
    }

    async fn wait_serving(&mut self) -> Result<(), Error> {
        use tonic_health::pb::health_check_response::ServingStatus;
        use tonic_health::pb::{health_client::HealthClient, HealthCheckRequest};
        let opts = ClientOptions {
            connect_timeout: Some(Duration::from_secs(1)),
            ..self.options.client.clone()
        };
        let started = Instant::now();
        loop {
            if let Some(c) = self.child.as_mut() {
                if let Some(status) = c.try_wait()? {
                    return Err(Error::Io(std::io::Error::other(format!(
                        "jobwire exited with {status} before SERVING:\n{}",
                        self.log_tail(40)
                    ))));
                }
            }
            if let Ok(ch) = crate::client::conn::connect(&self.target(), &opts).await {
                let r = HealthClient::new(ch)
                    .check(HealthCheckRequest {
                        service: String::new(),
                    })
                    .await;
                if r.is_ok_and(|r| r.into_inner().status == ServingStatus::Serving as i32) {
                    return Ok(());
                }
            }
            if started.elapsed() > START_TIMEOUT {
                return Err(Error::Io(std::io::Error::other(format!(
                    "jobwire not SERVING within {START_TIMEOUT:?}:\n{}",
                    self.log_tail(40)
                ))));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `http://127.0.0.1:<grpc port>`.
    pub fn target(&self) -> String {
        format!("http://127.0.0.1:{}", self.grpc)
    }

    /// The gRPC port.
    pub fn grpc_port(&self) -> u16 {
        self.grpc
    }

    /// The HTTP port (`/metrics`, `/healthz`, `/readyz`).
    pub fn http_port(&self) -> u16 {
        self.http
    }

    /// The process id (None once killed).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(Child::id)
    }

    /// A client of this server (with [`ServerOptions::client`]'s TLS and token).
    pub async fn client(&self) -> Result<Client, Error> {
        Client::connect(&self.target(), self.options.client.clone()).await
    }

    /// Kills the server with SIGKILL and waits for it to exit.
    pub async fn kill(&mut self) -> Result<(), Error> {
        if let Some(mut c) = self.child.take() {
            c.kill().await?;
        }
        Ok(())
    }

    /// Starts the server again on the same ports, Redis and flags (after [`TestServer::kill`]).
    pub async fn restart(&mut self) -> Result<(), Error> {
        self.kill().await?;
        self.spawn().await
    }

    /// The last `lines` lines of the server's log.
    pub fn log_tail(&self, lines: usize) -> String {
        let log = std::fs::read_to_string(self.data_dir.join("jobwire.log")).unwrap_or_default();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = c.start_kill();
        }
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}
