//! Redis topologies of real `redis-server` processes for the test suites: a Redis Cluster
//! ([`TestCluster`]) and a Sentinel-managed master with a replica ([`TestSentinel`]).
//!
//! Every process runs in its own process group on loopback ports of this module's choosing, in
//! a temp dir (its log, its `nodes-<port>.conf`, a sentinel's rewritable config), and is
//! SIGKILLed with its group on drop. The helpers speak to single nodes with plain redis-rs
//! connections (and `redis-cli --cluster create`), so this needs no cluster client.
//! Patiences are generous: the suites run in parallel on small machines.

use std::collections::{BTreeMap, HashMap};
use std::ops::RangeInclusive;
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
/// `--cluster-node-timeout`, ms: a killed master's replica takes over after about this plus
/// a second or two.
pub const NODE_TIMEOUT_MS: u64 = 2000;

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

// === impl TestCluster ===

/// A node as one cluster member sees it (a line of CLUSTER NODES).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeView {
    pub port: u16,
    pub id: String,
    /// A master (possibly without slots), else a replica.
    pub master: bool,
    /// A replica's master's node id.
    pub master_id: Option<String>,
    /// Flagged `fail` (or `fail?`) by the viewer.
    pub failing: bool,
    pub slots: Vec<RangeInclusive<u16>>,
}

fn parse_cluster_nodes(text: &str) -> Vec<NodeView> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // <id> <ip:port@cport[,hostname]> <flags> <master> <ping> <pong> <epoch> <link> <slot>...
            let port = f
                .get(1)?
                .split('@')
                .next()?
                .rsplit(':')
                .next()?
                .parse()
                .ok()?;
            let flags: Vec<&str> = f.get(2)?.split(',').collect();
            let slots = f
                .iter()
                .skip(8)
                .filter(|s| !s.starts_with('['))
                .filter_map(|s| {
                    let (a, b) = s.split_once('-').unwrap_or((s, s));
                    Some(a.parse().ok()?..=b.parse().ok()?)
                })
                .collect();
            Some(NodeView {
                port,
                id: f[0].to_owned(),
                master: flags.contains(&"master"),
                master_id: (f.get(3) != Some(&"-")).then(|| f[3].to_owned()),
                failing: flags.iter().any(|x| x.starts_with("fail")),
                slots,
            })
        })
        .collect()
}

/// Node port -> its master's port (None: the node is a master).
type Roles = BTreeMap<u16, Option<u16>>;

/// A Redis Cluster of real redis-server processes on loopback: `masters` masters with
/// `replicas` replicas each, node timeout [`NODE_TIMEOUT_MS`], any replica may take over
/// (`cluster-replica-validity-factor 0`). Nodes are named by their port.
pub struct TestCluster {
    nodes: Vec<Proc>,
    /// The nodes' dirs and logs; dropped after the processes.
    dir: tempfile::TempDir,
    /// `redis+cluster://127.0.0.1:P1,127.0.0.1:P2,...`, every node a seed.
    pub url: String,
    /// How long [`TestCluster::start`] took until the cluster was ok and every replica linked.
    pub formed_in: Duration,
}

impl TestCluster {
    /// Starts the nodes, joins them with `redis-cli --cluster create`, and waits until every
    /// node says `cluster_state:ok` and every replica's link is up (panics with the nodes'
    /// logs after 60 s). Needs `masters >= 3` (redis-cli's minimum).
    pub async fn start(masters: usize, replicas: usize) -> TestCluster {
        assert!(masters >= 3, "a Redis Cluster needs at least 3 masters");
        let t0 = Instant::now();
        let dir = tempfile::tempdir().expect("tempdir");
        let mut nodes = Vec::new();
        for _ in 0..masters * (1 + replicas) {
            let p = start_proc(dir.path(), true, |port, own, log| {
                let mut a = data_node_args(port, own, log);
                let conf = own.join(format!("nodes-{port}.conf"));
                a.extend(
                    [
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        &conf.display().to_string(),
                        "--cluster-node-timeout",
                        &NODE_TIMEOUT_MS.to_string(),
                        "--cluster-replica-validity-factor",
                        "0",
                    ]
                    .map(String::from),
                );
                a
            })
            .await;
            nodes.push(p);
        }
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let mut c = TestCluster {
            url: format!("redis+cluster://{}", addrs.join(",")),
            nodes,
            dir,
            formed_in: Duration::ZERO,
        };
        let out = tokio::process::Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .await
            .expect("redis-cli must be on the PATH (scripts/setup.sh installs redis-tools)");
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed:\n{}\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            c.logs()
        );
        c.wait_ok(Duration::from_secs(60)).await;
        c.formed_in = t0.elapsed();
        c
    }

    /// Every node's port, in start order.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.port).collect()
    }

    /// Is the process of node `port` running (not killed)?
    pub fn running(&self, port: u16) -> bool {
        self.node(port).running()
    }

    fn node(&self, port: u16) -> &Proc {
        self.nodes
            .iter()
            .find(|n| n.port == port)
            .unwrap_or_else(|| panic!("no node on port {port}"))
    }

    fn node_mut(&mut self, port: u16) -> &mut Proc {
        self.nodes
            .iter_mut()
            .find(|n| n.port == port)
            .unwrap_or_else(|| panic!("no node on port {port}"))
    }

    fn running_ports(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .filter(|n| n.running())
            .map(|n| n.port)
            .collect()
    }

    /// The last lines of every node's log (for panic messages).
    pub fn logs(&self) -> String {
        self.nodes
            .iter()
            .map(Proc::log_tail)
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The temp dir holding the nodes' logs and configs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A plain (not cluster-aware) connection to node `port`.
    pub async fn conn(&self, port: u16) -> MultiplexedConnection {
        node_conn(port)
            .await
            .unwrap_or_else(|e| panic!("connect to node {port}: {e}"))
    }

    /// CLUSTER NODES as the first running node that answers sees it.
    pub async fn view(&self) -> Vec<NodeView> {
        for port in self.running_ports() {
            if let Ok(text) = node_query(port, &["CLUSTER", "NODES"]).await {
                return parse_cluster_nodes(&text);
            }
        }
        panic!("no running node answers CLUSTER NODES\n{}", self.logs());
    }

    /// The ports of the masters that serve slots now, in slot order.
    pub async fn masters(&self) -> Vec<u16> {
        let mut v: Vec<NodeView> = self
            .view()
            .await
            .into_iter()
            .filter(|n| n.master && !n.slots.is_empty())
            .collect();
        v.sort_by_key(|n| *n.slots[0].start());
        v.into_iter().map(|n| n.port).collect()
    }

    /// The ports of the replicas of master `port` now.
    pub async fn replicas_of(&self, port: u16) -> Vec<u16> {
        let view = self.view().await;
        let id = view
            .iter()
            .find(|n| n.port == port)
            .map(|n| n.id.clone())
            .unwrap_or_else(|| panic!("node {port} is not in the cluster"));
        view.iter()
            .filter(|n| !n.master && n.master_id.as_deref() == Some(&id))
            .map(|n| n.port)
            .collect()
    }

    /// The slot of `key` (CLUSTER KEYSLOT).
    pub async fn keyslot(&self, key: &str) -> u16 {
        for port in self.running_ports() {
            if let Ok(mut c) = node_conn(port).await {
                if let Ok(slot) = redis::cmd("CLUSTER")
                    .arg("KEYSLOT")
                    .arg(key)
                    .query_async(&mut c)
                    .await
                {
                    return slot;
                }
            }
        }
        panic!("no running node answers CLUSTER KEYSLOT");
    }

    /// The port of the master that serves `slot` now.
    pub async fn master_for_slot(&self, slot: u16) -> u16 {
        self.view()
            .await
            .into_iter()
            .find(|n| n.master && n.slots.iter().any(|r| r.contains(&slot)))
            .map(|n| n.port)
            .unwrap_or_else(|| panic!("no master serves slot {slot}"))
    }

    /// The port of the master that serves `key` now.
    pub async fn master_for_key(&self, key: &str) -> u16 {
        let slot = self.keyslot(key).await;
        self.master_for_slot(slot).await
    }

    /// A plain connection to the master that serves `key` now (for single-key commands).
    pub async fn conn_for_key(&self, key: &str) -> MultiplexedConnection {
        let port = self.master_for_key(key).await;
        self.conn(port).await
    }

    /// `CLUSTER FAILOVER` on replica `port` (graceful: it catches up first), then waits until
    /// it is a master and the cluster is ok again.
    pub async fn failover(&self, port: u16) {
        let mut c = self.conn(port).await;
        let ok: String = redis::cmd("CLUSTER")
            .arg("FAILOVER")
            .query_async(&mut c)
            .await
            .unwrap_or_else(|e| panic!("CLUSTER FAILOVER on {port}: {e}"));
        assert_eq!(ok, "OK");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let info = node_query(port, &["INFO", "replication"])
                .await
                .unwrap_or_default();
            if info_field(&info, "role") == Some("master") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "node {port} not master 30 s after CLUSTER FAILOVER\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.wait_ok(Duration::from_secs(30)).await;
    }

    /// SIGKILL node `port` (its slots stall until a replica takes over: [`Self::wait_ok`]).
    pub fn kill(&mut self, port: u16) {
        self.node_mut(port).kill();
    }

    /// Starts killed node `port` again with its `nodes.conf` (it rejoins; a master whose
    /// replica took over comes back as that replica's replica, empty, and resyncs). Waits
    /// for PING only; call [`Self::wait_ok`] for the cluster.
    pub async fn restart(&mut self, port: u16) {
        let node = self.node_mut(port);
        node.launch();
        if !node.wait_ping(Duration::from_secs(20)).await {
            panic!("node {port} did not restart\n{}", self.logs());
        }
    }

    /// Waits until the cluster has settled: every running node says `cluster_state:ok`,
    /// knows every node, and sees the same running masters serving all slots; every running
    /// replica's link to its master is up. After a master's SIGKILL this lasts until its
    /// replica has taken over. Panics with the nodes' logs after `patience`.
    pub async fn wait_ok(&self, patience: Duration) {
        let deadline = Instant::now() + patience;
        let mut why = String::new();
        while Instant::now() < deadline {
            match self.settled().await {
                Ok(()) => return,
                Err(e) => why = e,
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("cluster not ok within {patience:?}: {why}\n{}", self.logs());
    }

    /// Ok, or why the cluster has not settled.
    async fn settled(&self) -> Result<(), String> {
        let running = self.running_ports();
        // What the first node sees: running node -> its master's port (None: a master), and
        // slot range start -> owner port. Every other node must see the same.
        let mut agreed: Option<(Roles, BTreeMap<u16, u16>)> = None;
        for &port in &running {
            let err = |e: redis::RedisError| format!("node {port}: {e}");
            let info = node_query(port, &["CLUSTER", "INFO"]).await.map_err(err)?;
            if info_field(&info, "cluster_state") != Some("ok") {
                return Err(format!("node {port}: cluster_state not ok"));
            }
            let known = info_field(&info, "cluster_known_nodes").unwrap_or("?");
            if known != self.nodes.len().to_string() {
                return Err(format!("node {port} knows {known} nodes"));
            }
            let view =
                parse_cluster_nodes(&node_query(port, &["CLUSTER", "NODES"]).await.map_err(err)?);
            let port_of = |id: &str| view.iter().find(|n| n.id == id).map(|n| n.port);
            let mut roles = BTreeMap::new();
            for n in view.iter().filter(|n| running.contains(&n.port)) {
                if n.master && n.slots.is_empty() {
                    return Err(format!(
                        "node {port} sees {} as a master without slots",
                        n.port
                    ));
                }
                let of = if n.master {
                    None
                } else {
                    Some(n.master_id.as_deref().and_then(port_of).unwrap_or(0))
                };
                roles.insert(n.port, of);
            }
            let owners: BTreeMap<u16, u16> = view
                .iter()
                .filter(|n| n.master)
                .flat_map(|n| n.slots.iter().map(move |r| (*r.start(), n.port)))
                .collect();
            if let Some(dead) = owners.values().find(|p| !running.contains(p)) {
                return Err(format!("node {port} sees killed node {dead} serving slots"));
            }
            let repl = node_query(port, &["INFO", "replication"])
                .await
                .map_err(err)?;
            let role = info_field(&repl, "role");
            match roles.get(&port) {
                Some(None) if role == Some("master") => {}
                Some(Some(m)) if role == Some("slave") => {
                    if info_field(&repl, "master_port") != Some(&m.to_string())
                        || info_field(&repl, "master_link_status") != Some("up")
                    {
                        return Err(format!("replica {port}: link to master {m} not up"));
                    }
                }
                _ => {
                    return Err(format!(
                        "node {port}: role {role:?} not yet as the cluster says"
                    ))
                }
            }
            match &agreed {
                None => agreed = Some((roles, owners)),
                Some(a) if *a != (roles, owners) => {
                    return Err(format!("node {port} disagrees on roles or slot owners"));
                }
                Some(_) => {}
            }
        }
        Ok(())
    }
}

// === impl TestSentinel ===

/// The master name the sentinels monitor.
pub const SENTINEL_MASTER: &str = "jwmaster";

/// A master, its replica (`--replicaof`) and three sentinels (quorum 2,
/// `down-after-milliseconds 1000`, `failover-timeout 5000`), real processes on loopback.
pub struct TestSentinel {
    /// The two data nodes (first the initial master), then the three sentinels.
    data: Vec<Proc>,
    sentinels: Vec<Proc>,
    dir: tempfile::TempDir,
    /// `redis+sentinel://127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3/<master name>`.
    pub url: String,
    /// How long [`TestSentinel::start`] took until every sentinel knew everything.
    pub formed_in: Duration,
}

impl TestSentinel {
    /// Starts master, replica and sentinels and waits (60 s at most) until the replica is
    /// linked and every sentinel sees the master, the replica and the two other sentinels.
    pub async fn start() -> TestSentinel {
        let t0 = Instant::now();
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let master = start_proc(d, false, data_node_args).await;
        let mport = master.port.to_string();
        let replica = start_proc(d, false, |p, own, log| {
            let mut a = data_node_args(p, own, log);
            a.extend(["--replicaof", "127.0.0.1", &mport].map(String::from));
            a
        })
        .await;
        let mut sentinels = Vec::new();
        for _ in 0..3 {
            let s = start_proc(d, false, |p, own, log| {
                // Sentinels rewrite their config file: it lives in the writable temp dir.
                let conf = own.join("sentinel.conf");
                let text = format!(
                    "port {p}\nbind 127.0.0.1\ndir {dir}\nlogfile {log}\n\
                     sentinel monitor {m} 127.0.0.1 {mport} 2\n\
                     sentinel down-after-milliseconds {m} 1000\n\
                     sentinel failover-timeout {m} 5000\n",
                    dir = own.display(),
                    log = log.display(),
                    m = SENTINEL_MASTER,
                );
                std::fs::write(&conf, text).expect("write sentinel conf");
                vec![conf.display().to_string(), "--sentinel".into()]
            })
            .await;
            sentinels.push(s);
        }
        let url = format!(
            "redis+sentinel://{}/{SENTINEL_MASTER}",
            sentinels
                .iter()
                .map(|s| format!("127.0.0.1:{}", s.port))
                .collect::<Vec<_>>()
                .join(",")
        );
        let mut t = TestSentinel {
            data: vec![master, replica],
            sentinels,
            dir,
            url,
            formed_in: Duration::ZERO,
        };
        t.wait_ready(Duration::from_secs(60)).await;
        t.formed_in = t0.elapsed();
        t
    }

    /// The sentinels' ports.
    pub fn sentinel_ports(&self) -> Vec<u16> {
        self.sentinels.iter().map(|s| s.port).collect()
    }

    /// The two data nodes' ports (first the initial master).
    pub fn data_ports(&self) -> Vec<u16> {
        self.data.iter().map(|s| s.port).collect()
    }

    /// The temp dir holding logs and sentinel configs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The last lines of every process's log.
    pub fn logs(&self) -> String {
        self.data
            .iter()
            .chain(&self.sentinels)
            .map(Proc::log_tail)
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// A plain connection to data node `port`.
    pub async fn conn(&self, port: u16) -> MultiplexedConnection {
        node_conn(port)
            .await
            .unwrap_or_else(|e| panic!("connect to node {port}: {e}"))
    }

    /// The master's port as sentinel `sentinel` says (`SENTINEL get-master-addr-by-name`).
    async fn master_by(sentinel: u16) -> redis::RedisResult<u16> {
        let mut c = node_conn(sentinel).await?;
        let (_host, port): (String, u16) = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(SENTINEL_MASTER)
            .query_async(&mut c)
            .await?;
        Ok(port)
    }

    /// The current master's port, as the first running sentinel that answers says.
    pub async fn master_port(&self) -> u16 {
        for s in self.sentinels.iter().filter(|s| s.running()) {
            if let Ok(p) = Self::master_by(s.port).await {
                return p;
            }
        }
        panic!(
            "no sentinel answers get-master-addr-by-name\n{}",
            self.logs()
        );
    }

    /// SIGKILL the current master; returns its port.
    pub async fn kill_master(&mut self) -> u16 {
        let port = self.master_port().await;
        self.data
            .iter_mut()
            .find(|n| n.port == port)
            .unwrap_or_else(|| panic!("master {port} is not one of ours"))
            .kill();
        port
    }

    /// Starts killed data node `port` again (sentinels turn a former master into a replica).
    pub async fn restart(&mut self, port: u16) {
        let node = self
            .data
            .iter_mut()
            .find(|n| n.port == port)
            .unwrap_or_else(|| panic!("no data node {port}"));
        node.launch();
        if !node.wait_ping(Duration::from_secs(20)).await {
            panic!("node {port} did not restart\n{}", self.logs());
        }
    }

    /// Waits until every sentinel names a master other than `old` and that node says
    /// `role:master`; returns its port. Panics with the logs after `patience`.
    pub async fn wait_promoted(&self, old: u16, patience: Duration) -> u16 {
        let deadline = Instant::now() + patience;
        loop {
            let mut seen = Vec::new();
            for s in &self.sentinels {
                seen.push(Self::master_by(s.port).await.ok());
            }
            if let Some(Some(new)) = seen.first().copied() {
                let role = node_query(new, &["INFO", "replication"])
                    .await
                    .unwrap_or_default();
                if new != old
                    && seen.iter().all(|p| *p == Some(new))
                    && info_field(&role, "role") == Some("master")
                {
                    return new;
                }
            }
            assert!(
                Instant::now() < deadline,
                "no promotion away from {old} within {patience:?} (sentinels say {seen:?})\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn wait_ready(&self, patience: Duration) {
        let deadline = Instant::now() + patience;
        let mut why = String::new();
        while Instant::now() < deadline {
            match self.ready().await {
                Ok(()) => return,
                Err(e) => why = e,
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "sentinels not ready within {patience:?}: {why}\n{}",
            self.logs()
        );
    }

    async fn ready(&self) -> Result<(), String> {
        let (master, replica) = (self.data[0].port, self.data[1].port);
        let repl = node_query(replica, &["INFO", "replication"])
            .await
            .map_err(|e| e.to_string())?;
        if info_field(&repl, "master_link_status") != Some("up") {
            return Err("replica not linked".into());
        }
        for s in &self.sentinels {
            let err = |e: redis::RedisError| format!("sentinel {}: {e}", s.port);
            if Self::master_by(s.port).await.map_err(err)? != master {
                return Err(format!("sentinel {} names another master", s.port));
            }
            let mut c = node_conn(s.port).await.map_err(err)?;
            let replicas: Vec<HashMap<String, String>> = redis::cmd("SENTINEL")
                .arg("replicas")
                .arg(SENTINEL_MASTER)
                .query_async(&mut c)
                .await
                .map_err(err)?;
            let linked = replicas.iter().any(|r| {
                r.get("port").map(String::as_str) == Some(&replica.to_string())
                    && r.get("flags").is_some_and(|f| f == "slave")
            });
            if !linked {
                return Err(format!("sentinel {} does not see the replica", s.port));
            }
            let others: Vec<HashMap<String, String>> = redis::cmd("SENTINEL")
                .arg("sentinels")
                .arg(SENTINEL_MASTER)
                .query_async(&mut c)
                .await
                .map_err(err)?;
            if others.len() != self.sentinels.len() - 1 {
                return Err(format!(
                    "sentinel {} sees {} other sentinels",
                    s.port,
                    others.len()
                ));
            }
        }
        Ok(())
    }
}
