//! [`ReplicaGate`]: under `--redis-wait-replicas N`, writes to a master that has fewer than N
//! replicas online are refused at once (`NOT_REPLICATED`, nothing written) instead of each
//! one waiting the whole `--redis-wait-timeout` for replicas that are not there.
//!
//! Why: after a master's loss its replica is promoted and, until another replica joins it,
//! every `WAIT` there runs to its timeout. Redis runs one client's commands in order, so the
//! writes queued on the connection answered one per wait timeout, then timed out
//! (UNAVAILABLE "timed out") instead of answering NOT_REPLICATED (issue 32, item 8).
//!
//! How: nothing is checked while every `WAIT` is answered. When one comes back short (or
//! times out), the gate asks every master how many replicas it has online (`INFO
//! replication`: `slaveN:...,state=online`) and, on a cluster, which slots each master
//! serves (`CLUSTER SLOTS`), on the connection that never carries a `WAIT`. Writes to the
//! slots of a master found short are then refused without being sent, and the masters are
//! asked again at most every [`RECHECK`] while any is short: once a replica is online again
//! (the killed node restarted as the new master's replica and synced), writes go through and
//! `WAIT` as before. A check that fails (a master unreachable) changes nothing.

use std::ops::RangeInclusive;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use redis::Value;

use super::conn::Conn;
use super::StoreError;

/// Least time between two checks of the masters' replicas.
pub(super) const RECHECK: Duration = Duration::from_millis(250);

/// What the last check found.
#[derive(Debug, Default)]
struct Found {
    /// When the masters were last asked (None: never, or nothing short since).
    at: Option<Instant>,
    /// Slot ranges of the masters with too few replicas online, each with that count. On a
    /// direct backend one range covers every slot.
    short: Vec<(RangeInclusive<u16>, i64)>,
}

/// See the module doc.
#[derive(Debug, Default)]
pub(crate) struct ReplicaGate {
    found: Mutex<Found>,
    /// One check at a time; the others wait for its result.
    checking: tokio::sync::Mutex<()>,
}

/// The Redis Cluster slot of a key: CRC-16/XMODEM of its hash tag (the part between the
/// first `{` and the next `}`, when not empty) or of the whole key, mod 16 384.
pub(super) fn slot_of(key: &[u8]) -> u16 {
    let tag = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    crc16::State::<crc16::XMODEM>::calculate(tag.unwrap_or(key)) % 16384
}

/// Replicas a master's `INFO replication` text counts as online.
fn online(info: &str) -> i64 {
    info.lines()
        .filter(|l| l.starts_with("slave") && l.contains("state=online"))
        .count() as i64
}

/// `CLUSTER SLOTS`: each slot range with its master's `host:port`.
fn slot_owners(reply: Value) -> Result<Vec<(RangeInclusive<u16>, String)>, StoreError> {
    let bad = || StoreError::Decode("CLUSTER SLOTS".into());
    let Value::Array(ranges) = reply else {
        return Err(bad());
    };
    let mut out = Vec::new();
    for r in ranges {
        let Value::Array(r) = r else {
            return Err(bad());
        };
        let int = |v: Option<&Value>| match v {
            Some(Value::Int(n)) => u16::try_from(*n).map_err(|_| bad()),
            _ => Err(bad()),
        };
        let (start, end) = (int(r.first())?, int(r.get(1))?);
        let Some(Value::Array(master)) = r.get(2) else {
            return Err(bad());
        };
        let host: String =
            redis::from_redis_value(master.first().cloned().ok_or_else(bad)?).map_err(|_| bad())?;
        let port = int(master.get(1))?;
        out.push((start..=end, format!("{host}:{port}")));
    }
    Ok(out)
}

impl ReplicaGate {
    /// Ok if a write to `slot` may go (then it `WAIT`s as usual); else
    /// [`StoreError::TooFewReplicas`]: its master had fewer than `wanted` replicas online at
    /// the last check, made at most [`RECHECK`] ago (checks again first if older).
    pub(super) async fn admit(
        &self,
        conn: &Conn,
        slot: u16,
        wanted: u32,
    ) -> Result<(), StoreError> {
        for _ in 0..2 {
            let (short, fresh) = {
                let f = self.found.lock().unwrap_or_else(|p| p.into_inner());
                let short = f
                    .short
                    .iter()
                    .find(|(r, _)| r.contains(&slot))
                    .map(|(_, n)| *n);
                (short, f.at.is_some_and(|t| t.elapsed() < RECHECK))
            };
            match short {
                None => return Ok(()),
                Some(online) if fresh => {
                    return Err(StoreError::TooFewReplicas { online, wanted });
                }
                Some(_) => self.check(conn, wanted).await,
            }
        }
        Ok(())
    }

    /// A `WAIT` came back short or timed out: asks the masters (unless asked within
    /// [`RECHECK`]) so that the next writes to a short master are refused at once.
    pub(super) async fn wait_failed(&self, conn: &Conn, wanted: u32) {
        self.check(conn, wanted).await;
    }

    /// Asks every master for its replicas online (and a cluster for its slot owners), one
    /// check at a time, at most every [`RECHECK`]; a failed check changes nothing.
    async fn check(&self, conn: &Conn, wanted: u32) {
        let _one = self.checking.lock().await;
        let recent = |f: &Found| f.at.is_some_and(|t| t.elapsed() < RECHECK);
        if recent(&self.found.lock().unwrap_or_else(|p| p.into_inner())) {
            return;
        }
        match Self::ask(conn, wanted).await {
            Ok(short) => {
                let mut f = self.found.lock().unwrap_or_else(|p| p.into_inner());
                if short.is_empty() && !f.short.is_empty() {
                    tracing::info!("every master has its replicas online again: writes resume");
                } else if !short.is_empty() && f.short.is_empty() {
                    tracing::warn!(wanted, "a redis master has too few replicas online: writes to its slots answer NOT_REPLICATED until one is back (--redis-wait-replicas)");
                }
                f.at = Some(Instant::now());
                f.short = short;
            }
            Err(e) => {
                tracing::debug!(error = %e, "cannot count the masters' replicas");
                // Not asked again at once by every write meanwhile.
                let mut f = self.found.lock().unwrap_or_else(|p| p.into_inner());
                if !f.short.is_empty() {
                    f.at = Some(Instant::now());
                }
            }
        }
    }

    /// The slot ranges of the masters with fewer than `wanted` replicas online.
    async fn ask(conn: &Conn, wanted: u32) -> Result<Vec<(RangeInclusive<u16>, i64)>, StoreError> {
        let mut info = redis::cmd("INFO");
        info.arg("replication");
        let mut counts = Vec::new();
        for (addr, reply) in conn.on_every_master(info).await? {
            let text: String =
                redis::from_redis_value(reply).map_err(|_| StoreError::Decode("INFO".into()))?;
            counts.push((addr, online(&text)));
        }
        let short = |n: i64| n < i64::from(wanted);
        if !conn.is_cluster() {
            return Ok(counts
                .into_iter()
                .filter(|(_, n)| short(*n))
                .map(|(_, n)| (0..=u16::MAX, n))
                .collect());
        }
        let mut slots = redis::cmd("CLUSTER");
        slots.arg("SLOTS");
        let owners = slot_owners(slots.query_async(&mut conn.clone()).await?)?;
        Ok(owners
            .into_iter()
            .filter_map(|(range, addr)| {
                let n = counts.iter().find(|(a, _)| *a == addr)?.1;
                short(n).then_some((range, n))
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_redis_cluster_slots() {
        // CLUSTER KEYSLOT foo = 12182; a hash tag picks the part between braces.
        assert_eq!(slot_of(b"foo"), 12182);
        assert_eq!(slot_of(b"jw:{foo}:meta"), 12182);
    }

    #[test]
    fn only_online_replicas_count() {
        let info = "# Replication\r\nrole:master\r\nconnected_slaves:2\r\n\
            slave0:ip=127.0.0.1,port=7001,state=online,offset=10,lag=0\r\n\
            slave1:ip=127.0.0.1,port=7002,state=wait_bgsave,offset=0,lag=0\r\n";
        assert_eq!(online(info), 1);
        assert_eq!(online("role:master\r\nconnected_slaves:0\r\n"), 0);
    }

    #[test]
    fn cluster_slots_name_each_range_master() {
        let node = |host: &str, port| {
            Value::Array(vec![
                Value::BulkString(host.into()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let reply = Value::Array(vec![Value::Array(vec![
            Value::Int(0),
            Value::Int(5460),
            node("127.0.0.1", 7000),
            node("127.0.0.1", 7003),
        ])]);
        assert_eq!(
            slot_owners(reply).expect("parses"),
            vec![(0..=5460, "127.0.0.1:7000".to_owned())]
        );
    }
}
