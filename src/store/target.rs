//! [`Target`]: what `--redis-url` names, parsed once at start-up: one Redis (the URL as
//! redis-rs reads it), a Redis Cluster (its seed nodes), or a Sentinel-managed master (the
//! sentinels and the master's name). Errors name the part of the URL that is wrong; none of
//! them repeats the password.
//!
//! Forms (userinfo and query as in `redis://`; a port may be left out):
//! - `redis://`, `rediss://`, `redis+unix://`, `unix://`: one Redis, as before.
//! - `redis+cluster://[user:pass@]h1:p1,h2:p2,...` (port 6379 by default), `rediss+cluster://`
//!   with TLS: any subset of the cluster's nodes as seeds; the rest is discovered
//!   (`CLUSTER SLOTS`). The credentials apply to every node. No database number (a cluster
//!   has only database 0).
//! - `redis+sentinel://[user:pass@]h1:p1,h2:p2/<master-name>[/<db>]` (port 26379 by
//!   default), `rediss+sentinel://` with TLS to the sentinels and the data nodes: the
//!   credentials are those of the data nodes (master and replicas); the sentinels are asked
//!   without credentials (Sentinel's own `requirepass` is not supported).

use redis::{ConnectionInfo, IntoConnectionInfo, RedisConnectionInfo};

/// The default port of a cluster seed without one (Redis's).
const REDIS_PORT: u16 = 6379;
/// The default port of a sentinel without one (Sentinel's).
const SENTINEL_PORT: u16 = 26379;

/// What `--redis-url` names.
#[derive(Clone, Debug)]
pub(crate) enum Target {
    /// One Redis at a fixed address (TCP, TLS or a Unix socket).
    Single(ConnectionInfo),
    /// A Redis Cluster: the seed nodes, each with the credentials and TLS mode.
    Cluster(Vec<ConnectionInfo>),
    /// A master that the sentinels name.
    Sentinel {
        /// The sentinels' addresses (no credentials).
        sentinels: Vec<ConnectionInfo>,
        /// The master's name as the sentinels know it (`sentinel monitor <name> ...`).
        master: String,
        /// Credentials and database of the data nodes.
        node: RedisConnectionInfo,
        /// TLS to the sentinels and the data nodes.
        tls: bool,
    },
}

/// Splits `scheme://rest` and says which family the scheme is.
enum Family {
    Single,
    Cluster { tls: bool },
    Sentinel { tls: bool },
}

fn family(url: &str) -> Result<(Family, &str), String> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(
            "--redis-url: no scheme (expected redis://, rediss://, redis+unix://, \
                    redis+cluster://, rediss+cluster://, redis+sentinel:// or rediss+sentinel://)"
                .into(),
        );
    };
    let f = match scheme.to_ascii_lowercase().as_str() {
        "redis" | "rediss" | "redis+unix" | "unix" => Family::Single,
        "redis+cluster" => Family::Cluster { tls: false },
        "rediss+cluster" => Family::Cluster { tls: true },
        "redis+sentinel" => Family::Sentinel { tls: false },
        "rediss+sentinel" => Family::Sentinel { tls: true },
        other => {
            return Err(format!(
                "--redis-url: unknown scheme {other:?} (expected redis, rediss, redis+unix, \
                 redis+cluster, rediss+cluster, redis+sentinel or rediss+sentinel)"
            ))
        }
    };
    Ok((f, rest))
}

/// `user:pass@hosts/path?query` -> (userinfo with '@' or "", hosts, path, query with '?' or "").
/// The userinfo ends at the last '@' before the path: a password may hold '@'.
fn split(rest: &str) -> (&str, &str, &str, &str) {
    let (before_query, query) = match rest.find('?') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let (userinfo, after) = match before_query.rfind('@') {
        Some(i) => (&before_query[..=i], &before_query[i + 1..]),
        None => ("", before_query),
    };
    let (hosts, path) = match after.find('/') {
        Some(i) => (&after[..i], &after[i + 1..]),
        None => (after, ""),
    };
    (userinfo, hosts, path, query)
}

/// The `host:port` entries of a comma-separated list, with `default_port` where none is given.
fn hosts(list: &str, what: &str, default_port: u16) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for (i, h) in list.split(',').enumerate() {
        let h = h.trim();
        if h.is_empty() {
            return Err(format!(
                "--redis-url: {what} #{} is empty (expected host:port,host:port,...)",
                i + 1
            ));
        }
        // [v6]:port, host:port or host.
        let has_port = match h.rfind(']') {
            Some(close) => h[close..].contains(':'),
            None => h.contains(':'),
        };
        if has_port {
            let port = &h[h.rfind(':').unwrap_or(0) + 1..];
            if port.parse::<u16>().map_or(true, |p| p == 0) {
                return Err(format!(
                    "--redis-url: {what} {h:?} has an invalid port {port:?}"
                ));
            }
            out.push(h.to_owned());
        } else {
            out.push(format!("{h}:{default_port}"));
        }
    }
    Ok(out)
}

/// A redis-rs connection info for `scheme://userinfo host / path query`; its error never
/// quotes the URL (which may hold the password).
fn info(url: &str, what: &str) -> Result<ConnectionInfo, String> {
    url.into_connection_info()
        .map_err(|e| format!("--redis-url: {what} is not valid ({e})"))
}

impl Target {
    /// Parses `--redis-url`. Errors name the part at fault (scheme, a node, the master name,
    /// the database) and never contain the password.
    pub(crate) fn parse(url: &str) -> Result<Target, String> {
        let (family, rest) = family(url)?;
        match family {
            Family::Single => Ok(Target::Single(info(url, "the URL")?)),
            Family::Cluster { tls } => {
                let (userinfo, list, path, query) = split(rest);
                if !path.is_empty() {
                    return Err(format!(
                        "--redis-url: a cluster URL takes no path (database), got /{path}"
                    ));
                }
                let scheme = if tls { "rediss" } else { "redis" };
                let nodes = hosts(list, "cluster node", REDIS_PORT)?
                    .iter()
                    .map(|h| {
                        info(
                            &format!("{scheme}://{userinfo}{h}{query}"),
                            &format!("cluster node {h:?}"),
                        )
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(Target::Cluster(nodes))
            }
            Family::Sentinel { tls } => {
                let (userinfo, list, path, query) = split(rest);
                let (master, db) = match path.split_once('/') {
                    Some((m, db)) => (m, db),
                    None => (path, ""),
                };
                if master.is_empty() {
                    return Err(
                        "--redis-url: a sentinel URL needs the master's name as its \
                                path: redis+sentinel://host:port,.../<master-name>"
                            .into(),
                    );
                }
                if !db.is_empty() && db.parse::<u32>().is_err() {
                    return Err(format!(
                        "--redis-url: database {db:?} after the master name is not a number"
                    ));
                }
                let scheme = if tls { "rediss" } else { "redis" };
                let sentinels = hosts(list, "sentinel", SENTINEL_PORT)?
                    .iter()
                    .map(|h| info(&format!("{scheme}://{h}"), &format!("sentinel {h:?}")))
                    .collect::<Result<Vec<_>, _>>()?;
                // The data nodes' settings (credentials, database, protocol) as redis-rs
                // reads them from a URL of the same userinfo, database and query (the host
                // is a placeholder: the sentinels name the master).
                let node = info(
                    &format!("{scheme}://{userinfo}localhost/{db}{query}"),
                    "the credentials or options",
                )?
                .redis_settings()
                .clone();
                Ok(Target::Sentinel {
                    sentinels,
                    master: master.to_owned(),
                    node,
                    tls,
                })
            }
        }
    }

    /// A short name of the kind of deployment, for logs: `single`, `cluster`, `sentinel`.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Target::Single(_) => "single",
            Target::Cluster(_) => "cluster",
            Target::Sentinel { .. } => "sentinel",
        }
    }
}

/// Checks `--redis-url` at start-up (see [`Target::parse`] for the forms); the error names the
/// part at fault.
pub fn check_redis_url(url: &str) -> Result<(), String> {
    Target::parse(url).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::ConnectionAddr;

    fn addr(i: &ConnectionInfo) -> (String, u16, bool) {
        match i.addr() {
            ConnectionAddr::Tcp(h, p) => (h.clone(), *p, false),
            ConnectionAddr::TcpTls { host, port, .. } => (host.clone(), *port, true),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn single_urls_stay_as_they_were() {
        let t = Target::parse("redis://:pw@127.0.0.1:7000/2").expect("valid");
        assert_eq!(t.kind(), "single");
        let t = Target::parse("redis+unix:///tmp/r.sock").expect("valid");
        assert_eq!(t.kind(), "single");
    }

    #[test]
    fn cluster_seeds_carry_credentials_and_default_ports() {
        let t = Target::parse("redis+cluster://u:p%40ss@a:7000,b,[::1]:7002").expect("valid");
        let Target::Cluster(nodes) = t else {
            panic!("not a cluster")
        };
        assert_eq!(nodes.len(), 3);
        assert_eq!(addr(&nodes[0]), ("a".into(), 7000, false));
        assert_eq!(addr(&nodes[1]), ("b".into(), 6379, false));
        assert_eq!(addr(&nodes[2]).1, 7002);
        for n in &nodes {
            assert_eq!(n.redis_settings().username(), Some("u"));
            assert_eq!(n.redis_settings().password(), Some("p@ss"));
        }
        let Target::Cluster(nodes) = Target::parse("rediss+cluster://h:1").expect("valid") else {
            panic!("not a cluster")
        };
        assert!(addr(&nodes[0]).2, "TLS");
    }

    #[test]
    fn sentinel_url_names_master_and_node_credentials() {
        let t = Target::parse("redis+sentinel://:secret@s1:5000,s2/mymaster/3").expect("valid");
        let Target::Sentinel {
            sentinels,
            master,
            node,
            tls,
        } = t
        else {
            panic!("not sentinel")
        };
        assert_eq!(master, "mymaster");
        assert_eq!(addr(&sentinels[0]), ("s1".into(), 5000, false));
        assert_eq!(addr(&sentinels[1]), ("s2".into(), 26379, false));
        assert_eq!(sentinels[0].redis_settings().password(), None);
        assert_eq!(node.password(), Some("secret"));
        assert_eq!(node.db(), 3);
        assert!(!tls);
    }

    #[test]
    fn errors_name_the_part_and_hide_the_password() {
        let cases = [
            ("redis+clustr://h:1", "unknown scheme"),
            ("redis+cluster://:pw@h:1,,h:2", "cluster node #2 is empty"),
            ("redis+cluster://:pw@h:1,h:x", "invalid port \"x\""),
            ("redis+cluster://:pw@h:1/0", "takes no path"),
            ("redis+sentinel://:pw@s:1", "master's name"),
            ("redis+sentinel://:pw@s:1/m/x", "database \"x\""),
            ("h:1", "no scheme"),
        ];
        for (url, want) in cases {
            let e = Target::parse(url).expect_err(url);
            assert!(e.contains(want), "{url}: {e}");
            assert!(!e.contains("pw"), "{url} leaks the password: {e}");
        }
    }
}
