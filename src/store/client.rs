//! [`Store`]: the handle on the store's backend ([`Conn`]: one Redis, a Redis Cluster or a
//! Sentinel-named master; it connects again when Redis answers as a replica), the script runner every call goes
//! through, and the server's own checks. The methods named after the job scripts are in
//! `enqueue.rs` (enqueue, get_job) and `leases.rs` (lease, ack, fail, renew, release, reap).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::Value;

use super::codec::{array, bad, next, string};
use super::conn::Conn;
use super::durability::WaitReplicas;
use super::keys::{wake_arg, Keys};
use super::replica_gate::{slot_of, ReplicaGate};
use super::scripts::NamedScript;
use super::target::Target;
use super::types::*;
use super::StoreError;
use crate::jobs::{JobState, QueueName};

/// A handle on jobwire's Redis; cheap to clone (one shared multiplexed connection).
#[derive(Clone)]
pub struct Store {
    pub(super) conn: Conn,
    /// Queues this store registered, and when (see `registry.rs`).
    pub(super) known_queues: Arc<Mutex<HashMap<QueueName, Instant>>>,
    /// Due-index updates held for the next intent or reaper tick, the earliest per queue
    /// (see `due_later.rs`).
    pub(super) held_due: Arc<Mutex<HashMap<QueueName, u64>>>,
    /// The most queues the registry may hold.
    pub(super) max_queues: usize,
    /// Script calls that found their script missing (NOSCRIPT) and ran again after loading
    /// it; see [`Store::script_reloads`].
    reloads: Arc<AtomicU64>,
    /// Whether the function library is in use, and its loads (see `functions.rs`).
    pub(super) functions: Arc<super::functions::Functions>,
    /// `--redis-wait-replicas` (see `durability.rs`).
    pub(super) wait: WaitReplicas,
    /// How old an unconfirmed lease call must be before the reaper takes it for lost
    /// ([`crate::store::lost_call_after`] of the command timeout).
    pub(super) lost_call_after: Duration,
    /// Refuses writes to masters short of replicas under `--redis-wait-replicas`
    /// (`replica_gate.rs`).
    gate: Arc<ReplicaGate>,
    /// The evicting `maxmemory-policy` the health watch saw, if any (`eviction.rs`).
    pub(super) eviction: Arc<super::eviction::Eviction>,
}

/// The byte budget of one script call, as `scripts/common.lua` sets it (`CALL_BYTES`): a
/// script walking jobs stops taking the next one once the records it read (or, for
/// enqueue, the bodies it wrote) reach it, and replies for the jobs it did; the store then
/// calls again for the rest. Copying a record costs about 2-5 ms per MiB inside Redis
/// (`tests/it/script_time.rs`), so a call stays near 10 ms with max-size payloads.
pub const CALL_BYTES: usize = 1 << 20;

/// Most error text (message + details bytes) one `fail.lua` call takes. Recording an error
/// costs about 1.3 ms per 72 KiB inside Redis (measured: `tests/it/script_time.rs`), so a
/// call stays near 5 ms; a batch of small errors still goes in one call.
pub(super) const FAIL_CALL_BYTES: usize = 256 * 1024;

/// Appends (id, lease token) pairs as script arguments.
pub(super) fn push_pairs(args: &mut Vec<Vec<u8>>, items: &[(String, String)]) {
    for (id, token) in items {
        args.push(id.clone().into_bytes());
        args.push(token.clone().into_bytes());
    }
}

pub(super) fn opt_ms(v: i64) -> Option<u64> {
    u64::try_from(v).ok()
}

pub(super) fn state(s: &str) -> Result<JobState, StoreError> {
    JobState::parse(s).ok_or_else(|| bad("unknown job state"))
}

/// Decodes one settle reply; `done` gets the values after 'OK' or 'DONE' and whether the
/// settle was a repeat of one already applied ('DONE').
fn settle_status<T>(
    item: Value,
    done: impl FnOnce(std::vec::IntoIter<Value>, bool) -> Result<T, StoreError>,
) -> Result<Settle<T>, StoreError> {
    let mut it = array(item)?.into_iter();
    match string(next(&mut it)?)?.as_str() {
        "OK" => Ok(Settle::Done(done(it, false)?)),
        "DONE" => Ok(Settle::Done(done(it, true)?)),
        "NOT_FOUND" => Ok(Settle::NotFound),
        "LEASE_LOST" => Ok(Settle::LeaseLost(string(next(&mut it)?)?)),
        _ => Err(bad("unknown settle status")),
    }
}

impl Store {
    /// A store on `url` (see [`super::check_redis_url`] for the forms: one Redis, a Redis
    /// Cluster, a Sentinel-managed master); connects at the first call. Every command then
    /// times out after `timeout`, so a Redis outage gives errors, not hangs. Errors: a URL
    /// that does not parse ([`StoreError::Config`], naming the part at fault).
    pub async fn connect(url: &str, timeout: Duration) -> Result<Store, StoreError> {
        let target = Target::parse(url).map_err(StoreError::Config)?;
        tracing::debug!(kind = target.kind(), "redis backend");
        let conn = Conn::new(target, timeout)?;
        Ok(Store {
            conn,
            known_queues: Arc::default(),
            held_due: Arc::default(),
            reloads: Arc::default(),
            functions: Arc::default(),
            max_queues: super::registry::DEFAULT_MAX_QUEUES,
            wait: WaitReplicas::default(),
            lost_call_after: super::leases::lost_call_after(timeout),
            gate: Arc::default(),
            eviction: Arc::default(),
        })
    }

    /// This store with the reaper taking an unconfirmed lease call for lost once it is
    /// `after` old instead of [`crate::store::lost_call_after`] of the command timeout (a
    /// test drives the reaper with calls old or young at will).
    pub fn with_lost_call_after(mut self, after: Duration) -> Store {
        self.lost_call_after = after;
        self
    }

    /// Is the store on a Redis Cluster? (Wake-ups use sharded pub/sub there.)
    pub fn is_cluster(&self) -> bool {
        self.conn.is_cluster()
    }

    /// How many script calls so far found their script missing in Redis (after a restart,
    /// a failover or `SCRIPT FLUSH`) and were sent again with its body (EVAL). Such a call ran
    /// later than its first write, behind commands sent after it on the connection; a
    /// caller that counted on that order (an enqueue's early wake-up) compares this count
    /// before and after its call.
    pub fn script_reloads(&self) -> u64 {
        self.reloads.load(Ordering::Acquire)
    }

    /// Counts a call that ran again as a script ([`Store::script_reloads`]).
    pub(super) fn count_reload(&self) {
        self.reloads.fetch_add(1, Ordering::AcqRel);
    }

    /// EVALSHA of `script` with `keys`, the wake-up (`keys.rs` [`wake_arg`]) and `args`; on
    /// NOSCRIPT, EVAL with the script's body (counted in [`Store::script_reloads`]). A script
    /// that writes is followed by WAIT under `--redis-wait-replicas` (`durability.rs`).
    pub(super) async fn run_script(
        &self,
        script: &NamedScript,
        keys: &Keys,
        args: Vec<Vec<u8>>,
    ) -> Result<Value, StoreError> {
        let start = std::time::Instant::now();
        let mut all = Vec::with_capacity(args.len() + 1);
        all.push(wake_arg(&keys.wake, self.conn.is_cluster()).into_bytes());
        all.extend(args);
        let wait = Some(self.wait).filter(|w| w.enabled() && script.writes());
        let result = self.eval_waiting(script, &keys.all[..], &all, wait).await;
        let kind = match &result {
            Ok(_) => None,
            Err(
                StoreError::Unavailable(_)
                | StoreError::NotReplicated { .. }
                | StoreError::TooFewReplicas { .. },
            ) => Some("unavailable"),
            Err(_) => Some("error"),
        };
        crate::metrics::redis_call(script.name, start.elapsed().as_secs_f64(), kind);
        result
    }

    /// EVALSHA of `script`; on NOSCRIPT (a restarted or failed-over Redis, `SCRIPT FLUSH`, a
    /// cluster node that never saw it) EVAL with its body, which also caches it there.
    /// Both route by the first key on a cluster, so no node but the key's master is asked
    /// (no SCRIPT LOAD on every node, which would fail while one is down).
    pub(super) async fn eval(
        &self,
        script: &NamedScript,
        keys: &[impl redis::ToRedisArgs],
        args: &[impl redis::ToRedisArgs],
    ) -> Result<Value, StoreError> {
        self.eval_waiting(script, keys, args, None).await
    }

    /// FCALL of `script`'s function (`scripts.rs`); when Redis does not have it, or the
    /// library is not in use, [`Store::eval`] (EVALSHA, then EVAL): the same code at once,
    /// and the library is loaded again behind it (`functions.rs`). Each call is followed by
    /// `wait`'s WAIT in the same pipeline, on the connection kept for them; a write to a
    /// master known to be short of replicas is refused first ([`ReplicaGate`]).
    async fn eval_waiting(
        &self,
        script: &NamedScript,
        keys: &[impl redis::ToRedisArgs],
        args: &[impl redis::ToRedisArgs],
        wait: Option<WaitReplicas>,
    ) -> Result<Value, StoreError> {
        let Some(w) = wait else {
            return self.eval_once(script, keys, args, None).await;
        };
        let first = keys
            .first()
            .and_then(|k| k.to_redis_args().into_iter().next())
            .unwrap_or_default();
        self.gate
            .admit(&self.conn, slot_of(&first), w.replicas)
            .await?;
        let result = self.eval_once(script, keys, args, wait).await;
        let timed_out = matches!(&result, Err(StoreError::Unavailable(e)) if e.is_timeout());
        if timed_out || matches!(result, Err(StoreError::NotReplicated { .. })) {
            self.gate.wait_failed(&self.conn, w.replicas).await;
        }
        result
    }

    /// [`Store::eval_waiting`] without the gate.
    async fn eval_once(
        &self,
        script: &NamedScript,
        keys: &[impl redis::ToRedisArgs],
        args: &[impl redis::ToRedisArgs],
        wait: Option<WaitReplicas>,
    ) -> Result<Value, StoreError> {
        let call = |cmd: &str, first: &dyn Fn(&mut redis::Cmd)| {
            let mut c = redis::cmd(cmd);
            first(&mut c);
            c.arg(keys.len()).arg(keys).arg(args);
            c
        };
        let mut ran = None;
        if let Some(f) = script.function.as_deref() {
            if self.functions.in_use() {
                let fcall = call("FCALL", &|c| {
                    c.arg(f);
                });
                let reply = self.exec(&fcall, wait).await;
                ran = Some(reply).filter(|r| !self.function_missing(r));
            }
        }
        let mut result = match ran {
            Some(reply) => reply,
            None => {
                let evalsha = call("EVALSHA", &|c| {
                    c.arg(script.script.get_hash());
                });
                self.exec(&evalsha, wait).await
            }
        };
        if matches!(&result, Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript))
        {
            self.count_reload();
            let eval = call("EVAL", &|c| {
                c.arg(script.body.as_str());
            });
            result = self.exec(&eval, wait).await;
        }
        result.map_err(StoreError::from).and_then(|v| match wait {
            Some(w) => w.reply(v),
            None => Ok(v),
        })
    }

    /// Sends `cmd`, alone or followed by WAIT in one pipeline (then the reply is the
    /// pipeline's: [`WaitReplicas::reply`] splits it).
    async fn exec(
        &self,
        cmd: &redis::Cmd,
        wait: Option<WaitReplicas>,
    ) -> redis::RedisResult<Value> {
        match wait {
            None => cmd.query_async::<Value>(&mut self.conn.clone()).await,
            Some(w) => {
                w.pipeline(cmd)
                    .query_async::<Value>(&mut self.conn.for_waits())
                    .await
            }
        }
    }

    /// Runs a settle-type script (fail, renew) and decodes its per-job replies, each
    /// `{'OK', ...}` or `{'DONE', ...}` (a repeat; both decoded by `done`), `{'NOT_FOUND'}`
    /// or `{'LEASE_LOST', state}`.
    pub(super) async fn settle_call<T>(
        &self,
        script: &NamedScript,
        queue: &QueueName,
        args: Vec<Vec<u8>>,
        done: impl Fn(std::vec::IntoIter<Value>, bool) -> Result<T, StoreError>,
    ) -> Result<Vec<Settle<T>>, StoreError> {
        let reply = array(self.run_script(script, &Keys::shared(queue), args).await?)?;
        reply
            .into_iter()
            .map(|item| settle_status(item, &done))
            .collect()
    }

    /// PING: is Redis answering? On a cluster, every master must answer.
    pub async fn ping(&self) -> Result<(), StoreError> {
        for (_, reply) in self.conn.on_every_master(redis::cmd("PING")).await? {
            if let Value::ServerError(e) = reply {
                return Err(redis::RedisError::from(e).into());
            }
        }
        Ok(())
    }

    /// Redis's `maxmemory-policy` (jobwire needs `noeviction`: eviction deletes jobs). On a
    /// cluster every master is asked: the first policy other than `noeviction` is returned
    /// (with the master's address), else `noeviction`.
    pub async fn maxmemory_policy(&self) -> Result<String, StoreError> {
        let mut cmd = redis::cmd("CONFIG");
        cmd.arg("GET").arg("maxmemory-policy");
        let mut policy = None;
        for (addr, reply) in self.conn.on_every_master(cmd).await? {
            let v: Vec<String> =
                redis::from_redis_value(reply).map_err(|_| bad("CONFIG GET maxmemory-policy"))?;
            let p = v
                .get(1)
                .cloned()
                .ok_or_else(|| bad("CONFIG GET maxmemory-policy"))?;
            if p != "noeviction" {
                return Ok(if addr.is_empty() {
                    p
                } else {
                    format!("{p} (on {addr})")
                });
            }
            policy = Some(p);
        }
        policy.ok_or_else(|| bad("CONFIG GET maxmemory-policy: no master answered"))
    }
}
