//! Redis topologies of real `redis-server` processes for the test suites: a Redis Cluster
//! ([`TestCluster`]) and a Sentinel-managed master with a replica ([`TestSentinel`]).
//!
//! Every process runs in its own process group on loopback ports of this module's choosing, in
//! a temp dir (its log, its `nodes-<port>.conf`, a sentinel's rewritable config), and is
//! SIGKILLed with its group on drop. The helpers speak to single nodes with plain redis-rs
//! connections (and `redis-cli --cluster create`), so this needs no cluster client.
//! Patiences are generous: the suites run in parallel on small machines.

mod cluster;
mod sentinel;

// Each test crate that includes this module uses a part of it.
#[allow(unused_imports)]
pub use cluster::{NodeView, TestCluster, NODE_TIMEOUT_MS};
#[allow(unused_imports)]
pub use sentinel::{TestSentinel, SENTINEL_MASTER};

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::AsyncConnectionConfig;

/// A cluster node's bus listens on its port + 10 000 (Redis's default `cluster-port` rule).
const BUS_OFFSET: u16 = 10_000;
/// Ports are taken from `[LOW, LOW + SPAN)` (buses `[LOW + 10 000, ...)`): below the kernel's
/// ephemeral range (32768-60999 by default), so `127.0.0.1:0` binds elsewhere never race them.
const LOW: u16 = 10_000;
const SPAN: u32 = 12_000;

/// Where the next port search starts (a random offset per test binary, then sequential, so
/// the tests of one binary never pick the same port twice).
static NEXT_PORT: AtomicU32 = AtomicU32::new(u32::MAX);

/// A loopback port that is free now and, with `with_bus`, whose port + 10 000 is free too.
pub fn free_topology_port(with_bus: bool) -> u16 {
    if NEXT_PORT.load(Ordering::Relaxed) == u32::MAX {
        let _ = NEXT_PORT.compare_exchange(
            u32::MAX,
            rand::random_range(0..SPAN),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }
    for _ in 0..SPAN {
        let port = LOW + (NEXT_PORT.fetch_add(1, Ordering::Relaxed) % SPAN) as u16;
        let free = |p: u16| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok();
        if free(port) && (!with_bus || free(port + BUS_OFFSET)) {
            return port;
        }
    }
    panic!("no free loopback port in {LOW}..{}", LOW as u32 + SPAN);
}

/// A connection to one node (not cluster-aware), with short timeouts so that a dead node
/// answers with an error rather than a hang.
pub async fn node_conn(port: u16) -> redis::RedisResult<MultiplexedConnection> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}"))?;
    let cfg = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(1)))
        .set_response_timeout(Some(Duration::from_secs(3)));
    client
        .get_multiplexed_async_connection_with_config(&cfg)
        .await
}

/// `cmd args...` on the node at `port`, as text.
async fn node_query(port: u16, args: &[&str]) -> redis::RedisResult<String> {
    let mut c = node_conn(port).await?;
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query_async(&mut c).await
}

/// The value of `field` in an INFO / CLUSTER INFO text.
fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .map(str::trim)
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

// === impl Proc ===

/// One redis-server (data node or sentinel) in its own process group, restartable with the
/// same arguments (and so the same port, dir and config files).
struct Proc {
    port: u16,
    args: Vec<String>,
    log: PathBuf,
    child: Option<Child>,
}

impl Proc {
    fn spawn(port: u16, args: Vec<String>, log: PathBuf) -> Proc {
        let mut p = Proc {
            port,
            args,
            log,
            child: None,
        };
        p.launch();
        p
    }

    fn launch(&mut self) {
        assert!(self.child.is_none(), "node {} already running", self.port);
        let child = Command::new("redis-server")
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own group: the SIGKILL reaches a fork (replication's RDB child) too.
            .process_group(0)
            .spawn()
            .expect("redis-server must be on the PATH (scripts/setup.sh installs it)");
        self.child = Some(child);
    }

    fn running(&self) -> bool {
        self.child.is_some()
    }

    /// Has the process exited by itself (e.g. its port was taken)?
    fn exited(&mut self) -> bool {
        matches!(self.child.as_mut().map(Child::try_wait), Some(Ok(Some(_))))
    }

    /// SIGKILL to the process group, then reap.
    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", c.id())])
                .stderr(Stdio::null())
                .status();
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Waits until the node answers PING; false if it exited or `patience` passed.
    async fn wait_ping(&mut self, patience: Duration) -> bool {
        let deadline = Instant::now() + patience;
        while Instant::now() < deadline {
            if self.exited() {
                self.child = None;
                return false;
            }
            if node_query(self.port, &["PING"]).await.is_ok() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }

    fn log_tail(&self) -> String {
        format!(
            "--- {} (port {}) ---\n{}",
            self.log.display(),
            self.port,
            tail(&self.log, 30)
        )
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Starts a redis-server on a free port with `args(port, its own dir <dir>/<port>, its log)`,
/// trying other ports if one was taken between the check and the bind.
async fn start_proc(
    dir: &Path,
    with_bus: bool,
    args: impl Fn(u16, &Path, &Path) -> Vec<String>,
) -> Proc {
    let mut last = String::new();
    for _ in 0..5 {
        let port = free_topology_port(with_bus);
        let own = dir.join(port.to_string());
        std::fs::create_dir_all(&own).expect("node dir");
        let log = own.join("redis.log");
        let mut p = Proc::spawn(port, args(port, &own, &log), log);
        if p.wait_ping(Duration::from_secs(20)).await {
            return p;
        }
        last = p.log_tail();
        p.kill();
    }
    panic!("redis-server did not start on 5 ports; last log:\n{last}");
}

/// The flags every data node gets: loopback, no persistence, no eviction.
fn data_node_args(port: u16, dir: &Path, log: &Path) -> Vec<String> {
    [
        "--port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "--dir",
        &dir.display().to_string(),
        "--logfile",
        &log.display().to_string(),
        "--save",
        "",
        "--appendonly",
        "no",
        "--maxmemory-policy",
        "noeviction",
    ]
    .map(String::from)
    .to_vec()
}
