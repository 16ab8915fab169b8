//! The server under attack (the real binary with an auth file), its RSS, and the honest
//! client whose Enqueue -> lease -> Ack latency is measured during each attack.

use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::harness::TestRedis;
use crate::secured::{auth_yaml, Clients, Who};
use jobwire::pb;

pub(super) const MIB: usize = 1 << 20;
/// The defaults of the two budget flags (the tests run the server with its defaults).
pub(super) const PER_CONNECTION: usize = 80 * MIB;
pub(super) const PROCESS: usize = 160 * MIB;

/// The jobwire binary serving plaintext gRPC on 127.0.0.1 with an auth file.
pub(super) struct Server {
    pub(super) child: tokio::process::Child,
    pub(super) pid: u32,
    pub(super) grpc: SocketAddr,
    pub(super) _redis: TestRedis,
    pub(super) _dir: tempfile::TempDir,
}

impl Server {
    pub(super) async fn start(who: &[&Who]) -> Server {
        let dir = tempfile::tempdir().expect("tempdir");
        let auth_file = dir.path().join("auth.yaml");
        std::fs::write(&auth_file, auth_yaml(who)).expect("write auth file");
        let redis = TestRedis::start().await;
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_jobwire"))
            .args([
                "serve",
                "--log-format",
                "json",
                "--grpc-addr",
                "127.0.0.1:0",
            ])
            .args(["--http-addr", "127.0.0.1:0", "--redis-url", &redis.url])
            .arg("--auth-file")
            .arg(&auth_file)
            .env("RUST_LOG", "warn,jobwire=info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn jobwire");
        let pid = child.id().expect("pid");
        let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let grpc = tokio::time::timeout(Duration::from_secs(30), async {
            while let Ok(Some(line)) = lines.next_line().await {
                let v: serde_json::Value = match serde_json::from_str(&line) {
                    Ok(v) => v,
                    Err(_) => continue,
                };
                if v["message"] == "jobwire serving" {
                    return v["grpc"].as_str().expect("grpc").parse().expect("addr");
                }
            }
            panic!("jobwire exited before serving");
        })
        .await
        .expect("serving within 30 s");
        // Keep draining its log so that it never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Server {
            child,
            pid,
            grpc,
            _redis: redis,
            _dir: dir,
        }
    }

    /// (VmRSS, VmHWM) in bytes.
    pub(super) fn memory(&self) -> (usize, usize) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid))
            .expect("the server is running");
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<usize>().ok())
                .expect(name)
                * 1024
        };
        (field("VmRSS:"), field("VmHWM:"))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// Samples the server's VmRSS every 20 ms until stopped; the peak.
pub(super) struct RssPeak {
    pub(super) stop: Arc<Notify>,
    pub(super) task: JoinHandle<usize>,
}

impl RssPeak {
    pub(super) fn start(pid: u32) -> RssPeak {
        let stop = Arc::new(Notify::new());
        let s = stop.clone();
        let task = tokio::spawn(async move {
            let mut peak = 0;
            loop {
                if let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
                    if let Some(kb) = text.lines().find_map(|l| l.strip_prefix("VmRSS:")) {
                        let kb: usize =
                            kb.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
                        peak = peak.max(kb * 1024);
                    }
                }
                tokio::select! {
                    _ = s.notified() => return peak,
                    _ = tokio::time::sleep(Duration::from_millis(20)) => {}
                }
            }
        });
        RssPeak { stop, task }
    }

    pub(super) async fn stop(self) -> usize {
        self.stop.notify_one();
        self.task.await.expect("sampler")
    }
}

/// An authorized client's Enqueue -> lease (Subscribe) -> Ack cycles on its own connection.
pub(super) struct Honest {
    pub(super) clients: Clients,
    pub(super) stream: crate::secured::Stream,
    pub(super) next: u64,
}

impl Honest {
    pub(super) async fn start(grpc: SocketAddr, who: &Who) -> Honest {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{grpc}"))
            .expect("endpoint")
            .connect()
            .await
            .expect("connect");
        let mut clients = Clients::new(&channel, who.bearer());
        let stream = clients
            .subscribe(&["honest-q"], 10_000)
            .await
            .expect("the honest worker subscribes");
        Honest {
            clients,
            stream,
            next: 0,
        }
    }

    /// One cycle; its latency, or what failed.
    pub(super) async fn cycle(&mut self) -> Result<Duration, String> {
        self.next += 1;
        let id = format!("h-{}", self.next);
        let t = Instant::now();
        self.clients
            .jobs
            .enqueue(pb::EnqueueRequest {
                job: Some(crate::secured::job("honest-q", &id)),
            })
            .await
            .map_err(|e| format!("enqueue: {e:?}"))?;
        let lease = match self.stream.next(Duration::from_secs(10)).await {
            Ok(Some(pb::subscribe_response::Message::Lease(l))) => l,
            other => return Err(format!("lease: {other:?}")),
        };
        let job = lease.job.ok_or("a lease without a job")?;
        if job.job_id != id {
            return Err(format!("leased {} instead of {id}", job.job_id));
        }
        self.clients
            .workers
            .ack(pb::AckRequest {
                queue: "honest-q".into(),
                job_id: id,
                lease_token: lease.lease_token,
                result: Default::default(),
            })
            .await
            .map_err(|e| format!("ack: {e:?}"))?;
        Ok(t.elapsed())
    }

    /// `n` cycles: their latencies (every one must succeed).
    pub(super) async fn cycles(&mut self, n: usize) -> Vec<Duration> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(self.cycle().await.expect("an honest cycle succeeds"));
        }
        out
    }
}

/// The honest client on a thread and runtime of its own, so that its latencies are the
/// server's and not the attacker's (which runs on the test's runtime).
pub(super) struct HonestThread {
    pub(super) go: Option<tokio::sync::oneshot::Sender<()>>,
    pub(super) stop: Arc<Notify>,
    pub(super) done: Option<tokio::sync::oneshot::Receiver<(Vec<Duration>, Vec<String>)>>,
    /// The latencies of 200 cycles before the attack.
    pub(super) quiet: Vec<Duration>,
}

impl HonestThread {
    pub(super) async fn start(grpc: SocketAddr, who: &Who) -> HonestThread {
        let who = who.clone();
        let (quiet_tx, quiet_rx) = tokio::sync::oneshot::channel();
        let (go, go_rx) = tokio::sync::oneshot::channel::<()>();
        let (done_tx, done) = tokio::sync::oneshot::channel();
        let stop = Arc::new(Notify::new());
        let stopped = stop.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let mut h = Honest::start(grpc, &who).await;
                h.cycles(20).await; // warm up
                let _ = quiet_tx.send(h.cycles(200).await);
                if go_rx.await.is_err() {
                    return;
                }
                let (mut ok, mut failed) = (Vec::new(), Vec::new());
                let stopped = stopped.notified();
                tokio::pin!(stopped);
                loop {
                    tokio::select! {
                        _ = &mut stopped => break,
                        r = h.cycle() => match r {
                            Ok(d) => ok.push(d),
                            Err(e) => { failed.push(e); break }
                        },
                    }
                }
                let _ = done_tx.send((ok, failed));
            });
        });
        let quiet = tokio::time::timeout(Duration::from_secs(60), quiet_rx)
            .await
            .expect("quiet cycles within 60 s")
            .expect("the honest client ran");
        HonestThread {
            go: Some(go),
            stop,
            done: Some(done),
            quiet,
        }
    }

    pub(super) fn go(&mut self) {
        let _ = self.go.take().expect("once").send(());
    }

    pub(super) async fn stop(&mut self) -> (Vec<Duration>, Vec<String>) {
        self.stop.notify_one();
        tokio::time::timeout(Duration::from_secs(30), self.done.take().expect("once"))
            .await
            .expect("the honest client stops within 30 s")
            .expect("the honest client ran")
    }
}

pub(super) fn p99(lat: &[Duration]) -> Duration {
    let mut v = lat.to_vec();
    v.sort();
    v[(v.len() * 99 / 100).min(v.len() - 1)]
}
