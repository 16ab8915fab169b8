//! A server per test and a way to run the CLI against it.
//!
//! [`Server`] is the SDK's `TestServer` running this build's binary (`jobwire serve` on free
//! ports with an embedded redis-server in a temp dir). [`Server::jw`] runs `jobwire <args>`
//! with `--server` pointing at it, no `JOBWIRE_*` variables from the caller's environment,
//! and stdin not a terminal (an empty pipe), as in a script or CI.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use jobwire_client::testing::{ServerOptions, TestServer};
use jobwire_client::{pb, Client, ClientOptions, EnqueueOptions, Payload};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_jobwire");

/// A running server.
pub struct Server {
    pub inner: TestServer,
}

/// What a CLI run did.
#[derive(Debug)]
pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    /// stdout parsed as JSON; panics with the whole run when it is not.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {self:?}"))
    }

    /// Asserts the exit code, showing the run when it differs.
    #[track_caller]
    pub fn code(&self, code: i32) -> &Out {
        assert_eq!(self.code, code, "exit code of {self:#?}");
        self
    }

    /// Asserts success and returns stdout as JSON.
    #[track_caller]
    pub fn ok_json(&self) -> serde_json::Value {
        self.code(0);
        self.json()
    }
}

impl Server {
    /// A plaintext server without auth, with `args` added to `jobwire serve`.
    pub async fn start(args: &[&str]) -> Server {
        Server::start_with(args, ClientOptions::default()).await
    }

    /// A server with `args`, whose readiness check and SDK client use `client`.
    pub async fn start_with(args: &[&str], client: ClientOptions) -> Server {
        let inner = TestServer::start(ServerOptions {
            bin: Some(BIN.into()),
            args: args.iter().map(|s| (*s).to_owned()).collect(),
            redis_url: None,
            client,
        })
        .await
        .expect("start jobwire serve");
        Server { inner }
    }

    /// The server's log so far (its stderr).
    pub fn log(&self) -> String {
        self.inner.log_tail(usize::MAX)
    }

    /// An SDK client (the check side of the tests).
    pub async fn client(&self) -> Client {
        self.inner.client().await.expect("sdk client")
    }

    /// `http://127.0.0.1:<port>`.
    pub fn target(&self) -> String {
        self.inner.target()
    }

    /// Runs `jobwire <args> --server <this>`.
    pub fn jw(&self, args: &[&str]) -> Out {
        self.jw_env(args, &[], None)
    }

    /// [`Server::jw`] with environment variables and stdin bytes.
    pub fn jw_env(&self, args: &[&str], env: &[(&str, &str)], stdin: Option<&[u8]>) -> Out {
        let mut all: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        if !env.iter().any(|(k, _)| *k == "JOBWIRE_SERVER") {
            all.push("--server".into());
            all.push(self.target());
        }
        run(&all, env, stdin)
    }
}

/// Runs the binary with exactly these args and env (plus a clean `JOBWIRE_*` environment).
pub fn run(args: &[String], env: &[(&str, &str)], stdin: Option<&[u8]>) -> Out {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("JOBWIRE_") {
            cmd.env_remove(k);
        }
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("run jobwire");
    {
        let mut i = child.stdin.take().expect("stdin");
        if let Some(b) = stdin {
            i.write_all(b).expect("write stdin");
        }
    }
    let o = child.wait_with_output().expect("wait for jobwire");
    Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// Enqueues `n` JSON jobs named `name` (ids `<prefix>-<i>`) with one attempt each.
pub async fn enqueue_n(c: &Client, queue: &str, name: &str, prefix: &str, n: usize) {
    for i in 0..n {
        c.enqueue(
            queue,
            name,
            Payload::json(&serde_json::json!({ "i": i })).expect("json"),
            EnqueueOptions {
                job_id: Some(format!("{prefix}-{i}")),
                max_attempts: Some(1),
                ..Default::default()
            },
        )
        .await
        .expect("enqueue");
    }
}

/// Polls `probe` every 50 ms until it is true; panics with `what` after 20 s.
pub async fn eventually<F, Fut>(what: &str, mut probe: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !probe().await {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "not within 20 s: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The queue's stats through gRPC.
pub async fn stats(c: &Client, queue: &str) -> pb::QueueStats {
    c.get_queue_stats(queue).await.expect("stats")
}
