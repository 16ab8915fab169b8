//! Memory before authorization (issue 31, item 1), against the real binary: request bytes a
//! client makes the server buffer are bounded by `--max-buffered-request-bytes-per-connection`
//! and `--max-buffered-request-bytes`, health and reflection take only tiny messages, a
//! principal that may call the RPC on no queue is refused before its body is read, and an
//! authorized client's Enqueue -> lease -> Ack goes on during each attack.
//!
//! The server's RSS is read from /proc/<pid>/status (VmRSS sampled every 20 ms, and VmHWM);
//! jemalloc keeps freed pages for a while, so the peak during the attack is what counts.
//! The attacker is the `h2` crate's client: it honours flow control and
//! SETTINGS_MAX_CONCURRENT_STREAMS, so it gets exactly as far as the server lets it.

use std::future::poll_fn;
use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;

use crate::harness::TestRedis;
use crate::secured::{auth_yaml, Clients, Who};
use jobwire::pb;

const MIB: usize = 1 << 20;
/// The defaults of the two budget flags (the tests run the server with its defaults).
const PER_CONNECTION: usize = 80 * MIB;
const PROCESS: usize = 160 * MIB;

/// The jobwire binary serving plaintext gRPC on 127.0.0.1 with an auth file.
struct Server {
    child: tokio::process::Child,
    pid: u32,
    grpc: SocketAddr,
    _redis: TestRedis,
    _dir: tempfile::TempDir,
}

impl Server {
    async fn start(who: &[&Who]) -> Server {
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
    fn memory(&self) -> (usize, usize) {
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
struct RssPeak {
    stop: Arc<Notify>,
    task: JoinHandle<usize>,
}

impl RssPeak {
    fn start(pid: u32) -> RssPeak {
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

    async fn stop(self) -> usize {
        self.stop.notify_one();
        self.task.await.expect("sampler")
    }
}

/// An authorized client's Enqueue -> lease (Subscribe) -> Ack cycles on its own connection.
struct Honest {
    clients: Clients,
    stream: crate::secured::Stream,
    next: u64,
}

impl Honest {
    async fn start(grpc: SocketAddr, who: &Who) -> Honest {
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
    async fn cycle(&mut self) -> Result<Duration, String> {
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
    async fn cycles(&mut self, n: usize) -> Vec<Duration> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(self.cycle().await.expect("an honest cycle succeeds"));
        }
        out
    }
}

/// The honest client on a thread and runtime of its own, so that its latencies are the
/// server's and not the attacker's (which runs on the test's runtime).
struct HonestThread {
    go: Option<tokio::sync::oneshot::Sender<()>>,
    stop: Arc<Notify>,
    done: Option<tokio::sync::oneshot::Receiver<(Vec<Duration>, Vec<String>)>>,
    /// The latencies of 200 cycles before the attack.
    quiet: Vec<Duration>,
}

impl HonestThread {
    async fn start(grpc: SocketAddr, who: &Who) -> HonestThread {
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

    fn go(&mut self) {
        let _ = self.go.take().expect("once").send(());
    }

    async fn stop(&mut self) -> (Vec<Duration>, Vec<String>) {
        self.stop.notify_one();
        tokio::time::timeout(Duration::from_secs(30), self.done.take().expect("once"))
            .await
            .expect("the honest client stops within 30 s")
            .expect("the honest client ran")
    }
}

fn p99(lat: &[Duration]) -> Duration {
    let mut v = lat.to_vec();
    v.sort();
    v[(v.len() * 99 / 100).min(v.len() - 1)]
}

/// grpc-status values as the answers carry them.
const PERMISSION_DENIED: &str = "7";
const RESOURCE_EXHAUSTED: &str = "8";

/// The attacker's message bytes, shared by every stream.
static ZEROS: std::sync::OnceLock<Bytes> = std::sync::OnceLock::new();

/// An attacking HTTP/2 connection.
async fn h2_connect(addr: SocketAddr) -> h2::client::SendRequest<Bytes> {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    tcp.set_nodelay(true).expect("nodelay");
    let (client, conn) = h2::client::handshake(tcp).await.expect("h2 handshake");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

/// What became of one attacking stream.
#[derive(Debug)]
struct Outcome {
    /// The grpc-status and grpc-message the server answered with, if it answered.
    status: Option<(String, String)>,
}

/// Opens a stream to `path` (with `token`, if any), sends the header of a `len`-byte message
/// and all of it but its last byte, as fast as flow control allows (for 6 s), and holds the
/// stream open (until the task is aborted), reporting what became of it to `report`. `None`
/// when the connection has no stream left to give within 1 s (its
/// SETTINGS_MAX_CONCURRENT_STREAMS is reached).
async fn hold_message(
    client: &mut h2::client::SendRequest<Bytes>,
    addr: SocketAddr,
    path: &str,
    token: Option<&str>,
    len: usize,
    report: &mpsc::UnboundedSender<Outcome>,
) -> Option<JoinHandle<()>> {
    let ready = tokio::time::timeout(Duration::from_secs(1), client.clone().ready()).await;
    let mut ready = match ready {
        Ok(Ok(r)) => r,
        _ => return None,
    };
    let mut req = http::Request::builder()
        .method("POST")
        .uri(format!("http://{addr}{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let (response, mut send) = ready
        .send_request(req.body(()).expect("request"), false)
        .ok()?;
    *client = ready;
    let mut header = vec![0u8];
    header.extend_from_slice(&(len as u32).to_be_bytes());
    let report = report.clone();
    Some(tokio::spawn(async move {
        let status = tokio::spawn(async move {
            let resp = tokio::time::timeout(Duration::from_secs(60), response).await;
            let header = |r: &http::Response<h2::RecvStream>, name: &str| {
                r.headers()
                    .get(name)
                    .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            };
            match resp {
                Ok(Ok(r)) => Some((
                    header(&r, "grpc-status").unwrap_or_else(|| "(in trailers)".into()),
                    header(&r, "grpc-message").unwrap_or_default(),
                )),
                Ok(Err(e)) => Some((format!("(reset: {:?})", e.reason()), String::new())),
                Err(_) => None,
            }
        });
        // All of it but the last byte, handed to h2 at once (one shared buffer, sliced): h2
        // sends it as the server's flow-control windows open, and drops it if the server
        // resets the stream.
        let body = ZEROS
            .get_or_init(|| Bytes::from(vec![0x5a; 64 * MIB]))
            .slice(..len - 1);
        // A refused stream fails these sends: what became of it is in its answer.
        let _ = send
            .send_data(Bytes::from(header), false)
            .and_then(|()| send.send_data(body, false));
        // Let it flow (or be refused) for 6 s.
        let _ =
            tokio::time::timeout(Duration::from_secs(6), poll_fn(|cx| send.poll_reset(cx))).await;
        let status = tokio::time::timeout(Duration::from_secs(1), status)
            .await
            .ok()
            .and_then(Result::ok)
            .flatten();
        let _ = report.send(Outcome { status });
        // Hold the stream (and its unsent last byte) until the test aborts the task.
        let _keep = send;
        std::future::pending::<()>().await;
    }))
}

/// Runs `attack` while the honest client cycles; checks the RSS rise and the honest p99.
/// `attack` returns the attacking streams' tasks once they are all under way.
async fn under_attack<F, Fut>(
    name: &str,
    server: &Server,
    mut honest: HonestThread,
    rss_bound: usize,
    attack: F,
) -> Answers
where
    F: FnOnce(mpsc::UnboundedSender<Outcome>) -> Fut,
    Fut: std::future::Future<Output = Vec<JoinHandle<()>>>,
{
    let (report, mut outcomes) = mpsc::unbounded_channel();
    let (base_rss, base_hwm) = server.memory();
    let sampler = RssPeak::start(server.pid);
    honest.go();
    let t = Instant::now();
    let streams = attack(report).await;
    // Let every stream push what flow control lets through (6 s), then keep holding.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let (lat, failed) = honest.stop().await;
    let quiet = &honest.quiet;
    let peak = sampler.stop().await;
    let (_, hwm) = server.memory();
    let mut statuses = std::collections::BTreeMap::<String, usize>::new();
    let mut messages = std::collections::BTreeSet::<String>::new();
    let mut reported = 0;
    while let Ok(o) = outcomes.try_recv() {
        reported += 1;
        let (status, message) = o
            .status
            .unwrap_or_else(|| ("(no answer)".into(), String::new()));
        if !message.is_empty() {
            messages.insert(message);
        }
        *statuses.entry(status).or_default() += 1;
    }
    let opened = streams.len();
    for s in streams {
        s.abort();
        let _ = s.await;
    }
    let rise = peak.saturating_sub(base_rss);
    let hwm_rise = hwm.saturating_sub(base_hwm.max(base_rss));
    let quiet_p99 = p99(quiet);
    let attack_p99 = if lat.is_empty() {
        Duration::MAX
    } else {
        p99(&lat)
    };
    eprintln!(
        "{name}: server RSS {} MiB before, peak rise {} MiB (VmHWM rise {} MiB) over {:.1} s; \
         {opened} streams ({reported} done pushing) grpc-status {statuses:?} {messages:?}; \
         honest cycles: {} quiet p99 {:?}, {} under attack p99 {:?}, {} failed",
        base_rss / MIB,
        rise / MIB,
        hwm_rise / MIB,
        t.elapsed().as_secs_f64(),
        quiet.len(),
        quiet_p99,
        lat.len(),
        attack_p99,
        failed.len(),
    );
    assert!(failed.is_empty(), "{name}: honest calls failed: {failed:?}");
    assert!(
        lat.len() >= 20,
        "{name}: only {} honest cycles in the attack",
        lat.len()
    );
    let allowed = (quiet_p99 * 2 + Duration::from_millis(50)).max(Duration::from_millis(250));
    assert!(
        attack_p99 < allowed,
        "{name}: honest p99 {attack_p99:?} under attack, quiet {quiet_p99:?}"
    );
    assert!(
        rise < rss_bound,
        "{name}: server RSS rose by {} MiB, bound {} MiB",
        rise / MIB,
        rss_bound / MIB
    );
    Answers { statuses, messages }
}

/// What the attacking streams were answered.
struct Answers {
    /// How many streams got each grpc-status (or `(no answer)`, `(reset: <reason>)`).
    statuses: std::collections::BTreeMap<String, usize>,
    /// The distinct grpc-messages.
    messages: std::collections::BTreeSet<String>,
}

fn principals() -> (Who, Who, Who) {
    let honest = Who::new("honest", &[(&["honest-*"], &["producer", "worker"])]);
    let nobody = Who::new("no-grants", &[]);
    let big = Who::new("big-producer", &[(&["big-*"], &["producer"])]);
    (honest, nobody, big)
}

/// (a) No token: one connection, every stream the server allows, each holding all but the
/// last byte of a 3.5 MiB health check (under tonic's 4 MiB default, which health had).
#[tokio::test]
async fn unauthenticated_streams_cannot_fill_memory() {
    let (honest, nobody, big) = principals();
    let server = Server::start(&[&honest, &nobody, &big]).await;
    let h = HonestThread::start(server.grpc, &honest).await;
    let addr = server.grpc;
    under_attack(
        "no token, one connection",
        &server,
        h,
        PER_CONNECTION,
        |report| async move {
            let mut c = h2_connect(addr).await;
            let mut held = Vec::new();
            // Streams the server refuses at once free their place: at most 200 tries.
            for _ in 0..200 {
                match hold_message(
                    &mut c,
                    addr,
                    "/grpc.health.v1.Health/Check",
                    None,
                    3 * MIB + MIB / 2,
                    &report,
                )
                .await
                {
                    Some(t) => held.push(t),
                    None => break,
                }
            }
            held
        },
    )
    .await;
}

/// (b) A token with no grants: 16 concurrent 50 MiB Enqueue bodies on one connection.
#[tokio::test]
async fn a_principal_without_grants_is_refused_before_its_body() {
    let (honest, nobody, big) = principals();
    let server = Server::start(&[&honest, &nobody, &big]).await;
    let h = HonestThread::start(server.grpc, &honest).await;
    let addr = server.grpc;
    let token = nobody.token.reveal();
    // Refused before a byte is buffered: only HTTP/2 windows (1 MiB a connection) and noise.
    let Answers { statuses, .. } = under_attack(
        "no grants, 16 x 50 MiB",
        &server,
        h,
        32 * MIB,
        |report| async move {
            let mut c = h2_connect(addr).await;
            let mut held = Vec::new();
            for _ in 0..16 {
                let t = hold_message(
                    &mut c,
                    addr,
                    "/jobwire.v1.JobService/Enqueue",
                    Some(&token),
                    50 * MIB,
                    &report,
                )
                .await
                .expect("a stream");
                held.push(t);
            }
            held
        },
    )
    .await;
    assert_eq!(
        statuses.get(PERMISSION_DENIED),
        Some(&16),
        "every call refused for the role: {statuses:?}"
    );
}

/// (c) An authorized producer: 10 connections, each holding all but the last byte of a
/// 60 MiB Enqueue (fits the per-connection budget): the process budget bounds them all.
#[tokio::test]
async fn an_authorized_principal_is_bounded_by_the_process_budget() {
    let (honest, nobody, big) = principals();
    let server = Server::start(&[&honest, &nobody, &big]).await;
    let h = HonestThread::start(server.grpc, &honest).await;
    let addr = server.grpc;
    let token = big.token.reveal();
    let Answers { statuses, messages } = under_attack(
        "authorized, 10 connections x 60 MiB",
        &server,
        h,
        PROCESS + 64 * MIB,
        |report| async move {
            let mut held = Vec::new();
            for _ in 0..10 {
                let mut c = h2_connect(addr).await;
                let t = hold_message(
                    &mut c,
                    addr,
                    "/jobwire.v1.JobService/Enqueue",
                    Some(&token),
                    60 * MIB,
                    &report,
                )
                .await
                .expect("a stream");
                held.push(t);
            }
            held
        },
    )
    .await;
    // 160 MiB hold at most two whole unfinished 60 MiB messages: streams are refused past it.
    assert!(
        statuses.get(RESOURCE_EXHAUSTED).copied().unwrap_or(0) > 0
            && messages
                .iter()
                .any(|m| m.contains("(--max-buffered-request-bytes)")),
        "refused past the process budget, naming the flag: {statuses:?} {messages:?}"
    );
}

/// (d) An authorized producer, one connection: every stream the server allows holding all but
/// the last byte of a 3.5 MiB Enqueue: the connection's budget bounds them. Messages under
/// 8 MiB are small allocations for jemalloc, which keeps the freed pages of the refused ones
/// for up to its 10 s decay: RSS may rise to about twice the budget (measured 1.8 times).
#[tokio::test]
async fn one_connection_is_bounded_by_its_budget() {
    let (honest, nobody, big) = principals();
    let server = Server::start(&[&honest, &nobody, &big]).await;
    let h = HonestThread::start(server.grpc, &honest).await;
    let addr = server.grpc;
    let token = big.token.reveal();
    let Answers { statuses, messages } = under_attack(
        "authorized, one connection, streams x 3.5 MiB",
        &server,
        h,
        2 * PER_CONNECTION + 32 * MIB,
        |report| async move {
            let mut c = h2_connect(addr).await;
            let mut held = Vec::new();
            for _ in 0..200 {
                match hold_message(
                    &mut c,
                    addr,
                    "/jobwire.v1.JobService/Enqueue",
                    Some(&token),
                    3 * MIB + MIB / 2,
                    &report,
                )
                .await
                {
                    Some(t) => held.push(t),
                    None => break,
                }
            }
            held
        },
    )
    .await;
    assert!(
        statuses.get(RESOURCE_EXHAUSTED).copied().unwrap_or(0) > 0
            && messages
                .iter()
                .any(|m| m.contains("(--max-buffered-request-bytes-per-connection)")),
        "refused past the connection's budget, naming the flag: {statuses:?} {messages:?}"
    );
}

/// (e) An authorized producer, four connections, every stream each allows holding all but
/// the last byte of a 3.5 MiB Enqueue: the process budget bounds them (within twice: RSS
/// counts the pages jemalloc kept from the refused messages, as in (d)).
#[tokio::test]
async fn many_connections_of_small_messages_are_bounded_by_the_process_budget() {
    let (honest, nobody, big) = principals();
    let server = Server::start(&[&honest, &nobody, &big]).await;
    let h = HonestThread::start(server.grpc, &honest).await;
    let addr = server.grpc;
    let token = big.token.reveal();
    under_attack(
        "authorized, 4 connections x streams x 3.5 MiB",
        &server,
        h,
        2 * PROCESS + 64 * MIB,
        |report| async move {
            let mut held = Vec::new();
            for _ in 0..4 {
                let mut c = h2_connect(addr).await;
                // Let the connection's SETTINGS arrive: no stream past its limit.
                tokio::time::sleep(Duration::from_millis(200)).await;
                for _ in 0..100 {
                    match hold_message(
                        &mut c,
                        addr,
                        "/jobwire.v1.JobService/Enqueue",
                        Some(&token),
                        3 * MIB + MIB / 2,
                        &report,
                    )
                    .await
                    {
                        Some(t) => held.push(t),
                        None => break,
                    }
                }
            }
            held
        },
    )
    .await;
}
