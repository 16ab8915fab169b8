//! The Redis masters of the server under test, for `--redis-url`: their CPU from
//! `INFO cpu`, read before and after every scenario, and queue names placed evenly on them.
//!
//! A single Redis (`redis://`, `rediss://`, `redis+unix://`) is one master that owns every
//! slot. For `redis+cluster://h1:p1,h2:p2` (or `rediss+cluster://`) the masters come from
//! `CLUSTER NODES` asked of the first seed that answers; each master then gets its own plain
//! (non-cluster) connection, so the bench reads every node's own `INFO`.

use anyhow::Context;
use redis::aio::MultiplexedConnection;

/// Number of hash slots of a Redis Cluster.
const SLOTS: u16 = 16384;

/// One master: where it listens, the slots it serves, and a connection to it alone.
pub struct Master {
    /// `host:port` as the cluster announces it (or the URL's node for a single Redis).
    pub addr: String,
    /// Inclusive slot ranges served by this master.
    slots: Vec<(u16, u16)>,
    conn: MultiplexedConnection,
}

/// Every master of the Redis behind the server under test.
pub struct Nodes {
    /// The masters, in slot order (the one with slot 0 first).
    pub masters: Vec<Master>,
    /// Whether the URL named a cluster (queue placement then asks `CLUSTER KEYSLOT`).
    cluster: bool,
}

impl Nodes {
    /// Connects to the masters behind `url` (the `--redis-url` of the server under test).
    ///
    /// Errors: a URL redis-rs does not accept, no seed answering, a cluster with no master
    /// serving slots, or a master that refuses a connection.
    pub async fn discover(url: &str) -> anyhow::Result<Nodes> {
        let Some((scheme, userinfo, seeds, tail)) = split_cluster_url(url) else {
            let conn = connect(url).await?;
            let master = Master {
                addr: redact(url),
                slots: vec![(0, SLOTS - 1)],
                conn,
            };
            return Ok(Nodes {
                masters: vec![master],
                cluster: false,
            });
        };
        let node_url = |addr: &str| format!("{scheme}://{userinfo}{addr}{tail}");
        let mut last = None;
        let mut listing = None;
        let mut asked = "";
        for seed in &seeds {
            let r = async {
                let mut c = connect(&node_url(seed)).await?;
                redis::cmd("CLUSTER")
                    .arg("NODES")
                    .query_async::<String>(&mut c)
                    .await
                    .with_context(|| format!("CLUSTER NODES on {seed}"))
            };
            match r.await {
                Ok(text) => {
                    listing = Some(text);
                    asked = seed.rsplit_once(':').map_or("", |(h, _)| h);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let text = match (listing, last) {
            (Some(t), _) => t,
            (None, Some(e)) => return Err(e.context("no cluster seed answered")),
            (None, None) => anyhow::bail!("--redis-url names no cluster seed"),
        };
        let mut masters = Vec::new();
        for (addr, slots) in parse_cluster_nodes(&text, asked) {
            let conn = connect(&node_url(&addr)).await?;
            masters.push(Master { addr, slots, conn });
        }
        if masters.is_empty() {
            anyhow::bail!("the cluster has no master serving slots:\n{text}");
        }
        masters.sort_by_key(|m| m.slots.first().map_or(SLOTS, |s| s.0));
        Ok(Nodes {
            masters,
            cluster: true,
        })
    }

    /// CPU-seconds every master has used so far (`used_cpu_sys + used_cpu_user` of `INFO
    /// cpu`: the whole redis-server process, all threads), in the order of `masters`; NaN
    /// for a master that does not answer.
    pub async fn cpu_sec(&mut self) -> Vec<f64> {
        let mut out = Vec::with_capacity(self.masters.len());
        for m in &mut self.masters {
            let info: redis::RedisResult<String> =
                redis::cmd("INFO").arg("cpu").query_async(&mut m.conn).await;
            out.push(info.map_or(f64::NAN, |s| parse_info_cpu(&s)));
        }
        out
    }

    /// One `PING` to the first master (the bench's round-trip floor to Redis).
    ///
    /// Errors: the master does not answer, or answers something else than PONG.
    pub async fn ping_first(&mut self) -> anyhow::Result<()> {
        let m = self.masters.first_mut().context("no Redis master")?;
        let pong: String = redis::cmd("PING").query_async(&mut m.conn).await?;
        anyhow::ensure!(pong == "PONG", "PING answered {pong:?}");
        Ok(())
    }

    /// Bytes of memory every master uses now (`used_memory` of `INFO memory`), summed over
    /// the masters; NaN when one does not answer.
    pub async fn used_memory(&mut self) -> f64 {
        let mut total = 0.0;
        for m in &mut self.masters {
            let info: redis::RedisResult<String> = redis::cmd("INFO")
                .arg("memory")
                .query_async(&mut m.conn)
                .await;
            let used = info.ok().and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("used_memory:"))
                    .and_then(|v| v.trim().parse::<f64>().ok())
            });
            total += used.unwrap_or(f64::NAN);
        }
        total
    }

    /// Index in `masters` of the master serving `queue`'s keys (`jw:{queue}:...` hash to
    /// the slot of `queue`, asked of the cluster with `CLUSTER KEYSLOT`).
    pub async fn master_of(&mut self, queue: &str) -> anyhow::Result<usize> {
        if !self.cluster {
            return Ok(0);
        }
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(format!("{{{queue}}}"))
            .query_async(&mut self.masters[0].conn)
            .await
            .context("CLUSTER KEYSLOT")?;
        self.masters
            .iter()
            .position(|m| m.slots.iter().any(|&(a, b)| (a..=b).contains(&slot)))
            .with_context(|| format!("no master serves slot {slot} (queue {queue})"))
    }

    /// Queue names like `fresh` gives, one suffix letter added where needed so that queue
    /// `q` lands on master `q mod masters`: with Q queues on M masters each master gets
    /// Q/M of them (±1), whatever the hash slots of the plain names would have done.
    pub async fn placed(&mut self, fresh: Vec<String>) -> anyhow::Result<Vec<String>> {
        let m = self.masters.len();
        if m == 1 {
            return Ok(fresh);
        }
        let mut out = Vec::with_capacity(fresh.len());
        for (q, base) in fresh.into_iter().enumerate() {
            let mut name = base.clone();
            // A name lands on a given master of M with probability about 1/M: 400 tries
            // miss with probability (1 - 1/M)^400, nothing for any sane M.
            for k in 0..400 {
                if self.master_of(&name).await? == q % m {
                    break;
                }
                name = format!("{base}-{k}");
            }
            out.push(name);
        }
        Ok(out)
    }
}

async fn connect(url: &str) -> anyhow::Result<MultiplexedConnection> {
    let client =
        redis::Client::open(url).with_context(|| format!("--redis-url {}", redact(url)))?;
    client
        .get_multiplexed_async_connection()
        .await
        .with_context(|| format!("cannot connect to Redis at {}", redact(url)))
}

/// `url` without its userinfo (a password must not reach the report).
fn redact(url: &str) -> String {
    match (url.split_once("://"), url.rfind('@')) {
        (Some((scheme, _)), Some(at)) => format!("{scheme}://***{}", &url[at..]),
        _ => url.to_owned(),
    }
}

/// Splits `redis+cluster://[userinfo@]h1:p1,h2:p2[/db][?query]` into the per-node scheme
/// (`redis` or `rediss`), the userinfo with its `@` (or ""), the seeds, and the tail after
/// the hosts (path, query, fragment) that every node URL keeps. None for a non-cluster URL.
fn split_cluster_url(url: &str) -> Option<(&'static str, &str, Vec<String>, &str)> {
    let (scheme, rest) = if let Some(r) = url.strip_prefix("redis+cluster://") {
        ("redis", r)
    } else if let Some(r) = url.strip_prefix("rediss+cluster://") {
        ("rediss", r)
    } else {
        return None;
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (userinfo, hosts) = match authority.rfind('@') {
        Some(at) => authority.split_at(at + 1),
        None => ("", authority),
    };
    let seeds = hosts
        .split(',')
        .filter(|h| !h.is_empty())
        .map(str::to_owned)
        .collect();
    Some((scheme, userinfo, seeds, tail))
}

/// The masters that serve slots in a `CLUSTER NODES` reply: `host:port` (from
/// `ip:port@cport[,hostname]`; an IPv6 address in brackets) and their slot ranges.
/// Lines: `<id> <addr> <flags> <master> <ping> <pong> <epoch> <link> <slot>...`; a master
/// flagged `fail` or `noaddr` is left out, and so are migrating/importing entries (`[...]`).
/// A node that never met another one (a 1-master cluster) lists itself with an empty IP
/// (`:7000@17000`): it gets `asked`, the host of the seed that answered.
fn parse_cluster_nodes(text: &str, asked: &str) -> Vec<(String, Vec<(u16, u16)>)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 8 {
            continue;
        }
        let flags: Vec<&str> = f[2].split(',').collect();
        if !flags.contains(&"master") || flags.iter().any(|x| *x == "fail" || *x == "noaddr") {
            continue;
        }
        let slots: Vec<(u16, u16)> = f[8..]
            .iter()
            .filter(|s| !s.starts_with('['))
            .filter_map(|s| match s.split_once('-') {
                Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                None => s.parse().ok().map(|x| (x, x)),
            })
            .collect();
        if slots.is_empty() {
            continue;
        }
        let addr = f[1].split(['@', ',']).next().unwrap_or_default();
        let Some((host, port)) = addr.rsplit_once(':') else {
            continue;
        };
        let host = if host.is_empty() {
            asked.to_owned()
        } else if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]")
        } else {
            host.to_owned()
        };
        out.push((format!("{host}:{port}"), slots));
    }
    out
}

/// `used_cpu_sys + used_cpu_user` (seconds) from an `INFO cpu` reply; NaN if absent.
fn parse_info_cpu(info: &str) -> f64 {
    let field = |k: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(k)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    field("used_cpu_sys") + field("used_cpu_user")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_a_cluster_url_into_node_urls() {
        let (s, u, seeds, tail) =
            split_cluster_url("rediss+cluster://u:p@w@a:1,b:2/0?x=1").expect("cluster");
        assert_eq!((s, u, tail), ("rediss", "u:p@w@", "/0?x=1"));
        assert_eq!(seeds, ["a:1", "b:2"]);
        let (s, u, seeds, tail) = split_cluster_url("redis+cluster://h:7000").expect("cluster");
        assert_eq!((s, u, tail), ("redis", "", ""));
        assert_eq!(seeds, ["h:7000"]);
        assert!(split_cluster_url("redis://h:1").is_none());
        assert!(split_cluster_url("redis+unix:///tmp/r.sock").is_none());
        assert_eq!(redact("redis://u:pw@h:1/0"), "redis://***@h:1/0");
        assert_eq!(redact("redis+unix:///tmp/s"), "redis+unix:///tmp/s");
    }

    #[test]
    fn reads_masters_and_slots_from_cluster_nodes() {
        // Shape of a Redis 7.0 reply (ids shortened); a replica, a failed master, a master
        // with no slots and a migrating entry.
        let text = "\
a1 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460
b2 127.0.0.1:7002@17002,host-b master - 0 1 2 connected 5461-10922 [10923->-c3]
c3 127.0.0.1:7003@17003 master - 0 1 3 connected 10923-16383 42
d4 127.0.0.1:7004@17004 slave a1 0 1 1 connected
e5 127.0.0.1:7005@17005 master,fail - 0 1 5 disconnected 100-200
f6 ::1:7006@17006 master - 0 1 6 connected
g7 ::1:7007@17007 master - 0 1 7 connected 9
";
        let m = parse_cluster_nodes(text, "seed");
        assert_eq!(
            m,
            [
                ("127.0.0.1:7001".to_owned(), vec![(0, 5460)]),
                ("127.0.0.1:7002".to_owned(), vec![(5461, 10922)]),
                ("127.0.0.1:7003".to_owned(), vec![(10923, 16383), (42, 42)]),
                ("[::1]:7007".to_owned(), vec![(9, 9)]),
            ]
        );
        // A 1-master cluster (slots added by hand, no other node met) has no IP for itself.
        let alone = "a1 :7001@17001 myself,master - 0 0 0 connected 0-16383\n";
        assert_eq!(
            parse_cluster_nodes(alone, "127.0.0.1"),
            [("127.0.0.1:7001".to_owned(), vec![(0, 16383)])]
        );
    }

    #[test]
    fn sums_system_and_user_cpu_from_info() {
        let info = "# CPU\r\nused_cpu_sys:1.250000\r\nused_cpu_user:0.750000\r\n\
                    used_cpu_sys_children:9.0\r\nused_cpu_user_main_thread:0.5\r\n";
        assert_eq!(parse_info_cpu(info), 2.0);
        assert!(parse_info_cpu("# CPU\r\n").is_nan());
    }
}
