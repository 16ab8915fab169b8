//! [`TestCluster`]: a Redis Cluster of real redis-server processes.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;

use super::{data_node_args, info_field, node_conn, node_query, start_proc, Proc};

/// `--cluster-node-timeout`, ms: a killed master's replica takes over after about this plus
/// a second or two.
pub const NODE_TIMEOUT_MS: u64 = 2000;

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
