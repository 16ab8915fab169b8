//! [`TestSentinel`]: a master, its replica and three sentinels, real redis-server processes.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;

use super::{data_node_args, info_field, node_conn, node_query, start_proc, Proc};

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
