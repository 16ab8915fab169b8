//! Shared by the test crates: the server binary, a real jobwire per test, a private
//! redis-server, a TCP proxy that can cut connections, polling helpers.
#![allow(dead_code)] // each test crate uses part of it

pub mod proxy;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use jobwire_client::testing::{free_port, ServerOptions, TestServer};
use jobwire_client::{pb, Client};

/// The server binary: `JOBWIRE_BIN`, else the workspace's `target/debug/jobwire` (built by
/// `cargo test --workspace`), else `jobwire` on PATH.
pub fn bin() -> PathBuf {
    if let Some(b) = std::env::var_os("JOBWIRE_BIN") {
        return b.into();
    }
    let built = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/debug/jobwire");
    if built.exists() {
        return built;
    }
    "jobwire".into()
}

/// Logs of the SDK at `JOBWIRE_TEST_LOG` level (default warn) to the test's output.
pub fn init_tracing() {
    let filter = std::env::var("JOBWIRE_TEST_LOG").unwrap_or_else(|_| "warn".into());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_test_writer()
        .with_ansi(false)
        .try_init();
}

/// A fresh server with the extra `serve` flags `args`.
pub async fn server(args: &[&str]) -> TestServer {
    init_tracing();
    TestServer::start(ServerOptions {
        bin: Some(bin()),
        args: args.iter().map(|s| (*s).to_owned()).collect(),
        redis_url: None,
        ..Default::default()
    })
    .await
    .expect("start jobwire")
}

/// A queue name unique in this process.
pub fn queue(prefix: &str) -> String {
    format!("{prefix}-{:08x}", rand::random::<u32>())
}

/// Polls `f` every 20 ms until it returns Some, at most `patience`.
pub async fn eventually<T, F, Fut>(patience: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            start.elapsed() < patience,
            "timed out after {patience:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until job `id` of `queue` is COMPLETED or DEAD; returns it.
pub async fn finished(client: &Client, queue: &str, id: &str) -> pb::Job {
    let what = format!("job {id} on {queue} finished");
    eventually(Duration::from_secs(30), &what, || async {
        let j = client.get_job(queue, id).await.ok()?;
        let done = [pb::JobState::Completed as i32, pb::JobState::Dead as i32];
        done.contains(&j.state).then_some(j)
    })
    .await
}

/// Waits until job `id` of `queue` is in `state` (at most `patience`); returns it.
pub async fn in_state(
    client: &Client,
    queue: &str,
    id: &str,
    state: pb::JobState,
    patience: Duration,
) -> pb::Job {
    let what = format!("job {id} on {queue} in {state:?}");
    eventually(patience, &what, || async {
        let j = client.get_job(queue, id).await.ok()?;
        (j.state == state as i32).then_some(j)
    })
    .await
}

/// A string parameter of a scenario.
pub fn param_str(params: &serde_json::Value, name: &str) -> String {
    params[name]
        .as_str()
        .unwrap_or_else(|| panic!("string param {name} missing"))
        .to_owned()
}

/// A private `redis-server` on a free port (no persistence), killed on drop.
pub struct Redis {
    child: std::process::Child,
    pub url: String,
}

impl Redis {
    pub fn start() -> Redis {
        let port = free_port().expect("free port");
        let child = std::process::Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .args(["--bind", "127.0.0.1"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("start redis-server (is it installed? scripts/setup.sh)");
        let url = format!("redis://127.0.0.1:{port}");
        let start = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "redis-server not up"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Redis { child, url }
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A worker (signals off) running in a task; `stop()` shuts it down gracefully and waits.
pub struct Running {
    pub shutdown: jobwire_client::CancellationToken,
    pub task: tokio::task::JoinHandle<Result<(), jobwire_client::Error>>,
}

impl Running {
    pub async fn stop(self) {
        self.shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(30), self.task)
            .await
            .expect("worker stops in time")
            .expect("join")
            .expect("worker ran");
    }
}

/// Runs `worker` in a task.
pub fn run(worker: jobwire_client::Worker) -> Running {
    let shutdown = worker.shutdown_token();
    Running {
        shutdown,
        task: tokio::spawn(worker.run()),
    }
}

/// Worker options on `queue` with `concurrency`, signals off (the test process is shared).
pub fn options(queue: &str, concurrency: u32) -> jobwire_client::WorkerOptions {
    jobwire_client::WorkerOptions {
        queues: vec![queue.to_owned()],
        concurrency,
        handle_signals: false,
        ..Default::default()
    }
}
