//! The Redis key schema (DESIGN.md section 4). Every key of a queue carries the hash tag
//! `{queue}`, so one script may touch them all, also on Redis Cluster. Queue names are
//! restricted to `[A-Za-z0-9._-]` (no braces), so the tag is always the queue name.
//!
//! A queue has a fixed set of keys ([`Keys`]), and every queue script takes all of them in
//! KEYS and touches no other key: Redis Cluster refuses a script that touches a key it did
//! not declare, and scripts that walk jobs (lease, reap, replay by filter, purge, trim)
//! learn their ids only inside Redis. So jobs are not keys of their own but entries of
//! per-queue hashes keyed by job id (`jw:{queue}:jobs`, `jw:{queue}:bodies`) and their
//! error histories fields of one per-queue hash (`jw:{queue}:errors`, fields
//! `<name>:<id>`); `scripts/common.lua` describes each key and value. Job ids may be any
//! UTF-8: as hash fields they need no escaping and cannot collide with a key.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use crate::jobs::QueueName;

/// Pattern of every queue's wake-up channel on one Redis (or Sentinel), for PSUBSCRIBE.
pub const WAKE_PATTERN: &str = "jw:wake:*";

/// Prefix of a queue's wake-up channel on one Redis (or Sentinel): [`wake_channel`].
const WAKE_PREFIX: &str = "jw:wake:";

/// The channel a script PUBLISHes to when a job of `queue` becomes ready, on one Redis (or
/// behind Sentinel): `jw:wake:<queue>`.
pub fn wake_channel(queue: &QueueName) -> String {
    format!("{WAKE_PREFIX}{queue}")
}

/// The sharded channel a script SPUBLISHes to on a Redis Cluster: `jw:{<queue>}:wake`, in
/// the queue's slot (SPUBLISH inside a script must stay in the slot of the script's keys).
pub fn shard_wake_channel(queue: &QueueName) -> String {
    format!("jw:{{{queue}}}:wake")
}

/// The queue of a wake-up channel of either form ([`wake_channel`], [`shard_wake_channel`]).
pub(crate) fn wake_queue(channel: &str) -> Option<QueueName> {
    let name = match channel.strip_prefix(WAKE_PREFIX) {
        Some(q) => q,
        None => channel.strip_prefix("jw:{")?.strip_suffix("}:wake")?,
    };
    QueueName::parse(name).ok()
}

/// ARGV[1] of every queue script (`scripts/common.lua`): the publish command and the
/// channel, `PUBLISH jw:wake:<queue>`, or on a cluster (`sharded`) `SPUBLISH jw:{<queue>}:wake`.
/// `wake` is [`Keys::wake`].
pub(crate) fn wake_arg(wake: &str, sharded: bool) -> String {
    match (sharded, wake.strip_prefix(WAKE_PREFIX)) {
        (true, Some(queue)) => format!("SPUBLISH jw:{{{queue}}}:wake"),
        _ => format!("PUBLISH {wake}"),
    }
}

/// The names of a queue's keys after `jw:{queue}:`, in the order every script takes them
/// (`scripts/common.lua` documents each).
const KEY_NAMES: [&str; KEY_COUNT] = [
    "waiting",
    "delayed",
    "active",
    "completed",
    "dead",
    "meta",
    "jobs",
    "limiter",
    "settled",
    "settled_at",
    "calls",
    "call_jobs",
    "bodies",
    "errors",
    "prio",
    "cancelled",
    "expired",
    "expiry",
    "data",
    "gwait",
    "gseq",
    "groups",
    "gconf",
    "gready",
    "gblocked",
    "glimit",
    "gpause",
    "gcount",
    "created",
];

/// How many keys every queue script takes.
pub(crate) const KEY_COUNT: usize = 29;

/// The [`KEY_COUNT`] keys every queue script takes, in the order `scripts/common.lua`
/// documents (indexes into `all`: 0 waiting list, 1 delayed, 2 active, 3 completed, 4 dead,
/// 5 meta, 6 jobs, ..., 14 prio, 15 cancelled, 16 expired, 17 expiry, 18 data, 19 .. 27 the
/// named groups' keys, `scripts/groups.lua`, 28 the ids the server chose, `enqueue.lua`).
#[derive(Clone, Debug)]
pub(crate) struct Keys {
    pub(crate) all: [String; KEY_COUNT],
    pub(crate) wake: String,
}

/// Most queues whose [`Keys`] [`Keys::shared`] keeps; past it the cache starts afresh. Small
/// (about 2 KB a queue): the hot queues of a replica are few, and a server that saw 20 000
/// queues come and go must come back to its idle memory (`tests/fault/runaway_queues.rs`:
/// 4096 kept 9 MB, failing its 20 % bound).
const SHARED_KEYS_MAX: usize = 256;

impl Keys {
    /// The keys of `queue`, built once and then shared (a hot path such as Enqueue saves
    /// building 29 strings per call). At most [`SHARED_KEYS_MAX`] queues are kept.
    pub(crate) fn shared(queue: &QueueName) -> Arc<Keys> {
        static SHARED: OnceLock<Mutex<HashMap<QueueName, Arc<Keys>>>> = OnceLock::new();
        let cache = SHARED.get_or_init(Mutex::default);
        let mut cache = match cache.lock() {
            Ok(c) => c,
            Err(p) => p.into_inner(),
        };
        if let Some(k) = cache.get(queue) {
            return k.clone();
        }
        if cache.len() >= SHARED_KEYS_MAX {
            cache.clear();
        }
        let k = Arc::new(Keys::new(queue));
        cache.insert(queue.clone(), k.clone());
        k
    }

    /// Builds the keys of `queue`.
    pub(crate) fn new(queue: &QueueName) -> Keys {
        Keys {
            all: KEY_NAMES.map(|name| format!("jw:{{{queue}}}:{name}")),
            wake: wake_channel(queue),
        }
    }

    /// The waiting list (priority 0).
    pub(crate) fn waiting(&self) -> &str {
        &self.all[0]
    }

    /// The waiting jobs of other priorities (a sorted set, scores in `scripts/common.lua`).
    pub(crate) fn prio(&self) -> &str {
        &self.all[14]
    }

    /// The waiting jobs of named groups by the order they became ready (id -> sequence,
    /// `scripts/groups.lua`, KEY 21).
    pub(crate) fn grouped_waiting(&self) -> &str {
        &self.all[20]
    }
}

/// The score in [`Keys::prio`] from which jobs of priority below 0 start: 1000 * 2^40
/// (`scripts/common.lua`, ZERO_SCORE). Those below it have a priority above 0.
pub(crate) const ZERO_SCORE: f64 = 1000.0 * (1u64 << 40) as f64;

/// The registry: the set of queue names in use (not hash-tagged: it spans queues).
pub(crate) const QUEUES_KEY: &str = "jw:queues";

/// The due index's shards: each a sorted set of queue name -> the next time the reaper has
/// work on the queue, ms (see `registry.rs`). Every lease, ack, fail and delayed enqueue
/// writes its queue's shard twice (an intent before its script, the due time after it), so
/// on a Redis Cluster one global key would make its master do two calls for every call on
/// every other master; [`DUE_SHARDS`] keys, each with its own hash tag, spread that work.
/// Shard `i`'s tag is chosen so that its slot lies in the middle half of the `i`-th sixteenth
/// of the 16 384 slots (checked by a test): on a cluster whose masters hold even contiguous slot ranges
/// (what `redis-cli --cluster create` makes), the shards spread as evenly as they can, 5/6/5
/// over 3 masters (the plain tags `d0`..`d15` would give 6/6/4).
pub const DUE_KEYS: [&str; DUE_SHARDS] = [
    "jw:due:{d0.12}",
    "jw:due:{d1.19}",
    "jw:due:{d2.21}",
    "jw:due:{d3.9}",
    "jw:due:{d4.62}",
    "jw:due:{d5.69}",
    "jw:due:{d6.42}",
    "jw:due:{d7.49}",
    "jw:due:{d8.21}",
    "jw:due:{d9.39}",
    "jw:due:{d10.38}",
    "jw:due:{d11.20}",
    "jw:due:{d12.4}",
    "jw:due:{d13.3}",
    "jw:due:{d14.48}",
    "jw:due:{d15.43}",
];

/// Shards of the due index on a Redis Cluster: 16, more than the masters of most clusters
/// (so each master holds some) and few enough that the reaper reads them all every tick
/// cheaply (one ZRANGE each). On one Redis (or behind Sentinel) there is nothing to spread,
/// and the index is the single shard [`DUE_KEYS`]`[0]`: the reaper's idle cost stays one
/// ZRANGE a tick.
pub const DUE_SHARDS: usize = 16;

/// The due-index key of `queue` when the index has `shards` shards (1 or [`DUE_SHARDS`]):
/// shard `crc16(queue) mod shards` (CRC-16/XMODEM, the hash Redis Cluster uses for slots:
/// stable across processes and versions; since 16 divides 16 384, a queue's shard is its
/// own slot mod 16).
pub fn due_key(queue: &QueueName, shards: usize) -> &'static str {
    DUE_KEYS[due_shard(queue, shards)]
}

/// The shard index of `queue` ([`due_key`]).
pub(crate) fn due_shard(queue: &QueueName, shards: usize) -> usize {
    let h = crc16::State::<crc16::XMODEM>::calculate(queue.as_str().as_bytes());
    h as usize % shards.clamp(1, DUE_SHARDS)
}

/// The key the readiness probe writes (`health.rs`), outside every queue's keys (one key:
/// fine on a cluster).
pub(crate) const HEALTH_KEY: &str = "jw:health";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_carries_the_queue_hash_tag() {
        let q = QueueName::parse("emails").expect("valid");
        let k = Keys::new(&q);
        for key in &k.all {
            assert!(key.starts_with("jw:{emails}:"), "{key}");
        }
        assert_eq!(k.all[6], "jw:{emails}:jobs");
        assert_eq!(k.prio(), "jw:{emails}:prio");
        assert_eq!(wake_channel(&q), "jw:wake:emails");
        assert_eq!(shard_wake_channel(&q), "jw:{emails}:wake");
        assert_eq!(wake_arg(&k.wake, false), "PUBLISH jw:wake:emails");
        assert_eq!(wake_arg(&k.wake, true), "SPUBLISH jw:{emails}:wake");
        assert_eq!(wake_queue("jw:wake:emails"), Some(q.clone()));
        assert_eq!(wake_queue("jw:{emails}:wake"), Some(q.clone()));
        assert_eq!(wake_queue("jw:{emails}:other"), None);
    }

    /// The Redis Cluster slot of `key` (CRC-16/XMODEM of its hash tag, mod 16 384).
    fn slot(key: &str) -> usize {
        let open = key.find('{').expect("tag");
        let close = open + key[open..].find('}').expect("tag end");
        crc16::State::<crc16::XMODEM>::calculate(&key.as_bytes()[open + 1..close]) as usize % 16384
    }

    #[test]
    fn due_shards_spread_over_the_slot_space_and_queues_over_the_shards() {
        for (i, key) in DUE_KEYS.iter().enumerate() {
            let inside = slot(key) - i * 1024;
            assert!((256..768).contains(&inside), "{key} in slot {}", slot(key));
        }
        // On a default 3-master cluster (slots 0-5460, 5461-10922, 10923-16383): 5/6/5.
        let mut per_master = [0; 3];
        for key in DUE_KEYS {
            per_master[[5460, 10922, 16383]
                .iter()
                .position(|e| slot(key) <= *e)
                .expect("a master")] += 1;
        }
        assert_eq!(per_master, [5, 6, 5]);
        // A queue's shard is its own slot mod 16; one shard off a cluster.
        let q = QueueName::parse("emails").expect("valid");
        assert_eq!(due_shard(&q, DUE_SHARDS), slot("{emails}") % 16);
        assert_eq!(due_key(&q, 1), DUE_KEYS[0]);
        let mut used = [0; DUE_SHARDS];
        for n in 0..1600 {
            let q = QueueName::parse(&format!("q-{n}")).expect("valid");
            used[due_shard(&q, DUE_SHARDS)] += 1;
        }
        // CRC-16 is linear, so sequential names spread unevenly (68 to 154 here): a bound of half
        // to twice the mean.
        assert!(used.iter().all(|u| (50..=200).contains(u)), "{used:?}");
    }
}
