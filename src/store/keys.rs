//! The Redis key schema (DESIGN.md section 4). Every key of a queue carries the hash tag
//! `{queue}`, so one script may touch them all, also on Redis Cluster. Queue names are
//! restricted to `[A-Za-z0-9._-]` (no braces), so the tag is always the queue name. Job ids
//! may be any UTF-8: a job key is the fixed prefix `jw:{queue}:job:` followed by the id, and
//! no other key starts with that prefix, so no id can collide with another key and none
//! needs escaping.

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

/// The twelve keys every script takes, in the order `scripts/common.lua` documents.
#[derive(Clone, Debug)]
pub(crate) struct Keys {
    pub(crate) all: [String; 12],
    pub(crate) wake: String,
}

impl Keys {
    /// Builds the keys of `queue`.
    pub(crate) fn new(queue: &QueueName) -> Keys {
        let p = format!("jw:{{{queue}}}:");
        Keys {
            all: [
                format!("{p}waiting"),
                format!("{p}delayed"),
                format!("{p}active"),
                format!("{p}completed"),
                format!("{p}dead"),
                format!("{p}meta"),
                format!("{p}job:"),
                format!("{p}limiter"),
                format!("{p}settled"),
                format!("{p}settled_at"),
                format!("{p}calls"),
                format!("{p}call_jobs"),
            ],
            wake: wake_channel(queue),
        }
    }

    /// The record of one job.
    pub(crate) fn job(&self, id: &str) -> String {
        format!("{}{id}", self.all[6])
    }

    /// The error history of one job (a hash, `scripts/common.lua`): `jw:{queue}:errors:<id>`,
    /// which the scripts derive from the job prefix; no job key starts with it.
    pub(crate) fn errors(&self, id: &str) -> String {
        let p = &self.all[6];
        format!("{}errors:{id}", &p[..p.len() - "job:".len()])
    }
}

/// The registry: the set of queue names in use (not hash-tagged: it spans queues).
pub(crate) const QUEUES_KEY: &str = "jw:queues";

/// The due index: a sorted set of queue name -> the next time the reaper has work on the
/// queue, ms (see `registry.rs`).
pub(crate) const DUE_KEY: &str = "jw:due";

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
        assert_eq!(k.job("a:b{c}"), "jw:{emails}:job:a:b{c}");
        assert_eq!(k.errors("a:b"), "jw:{emails}:errors:a:b");
        assert_eq!(wake_channel(&q), "jw:wake:emails");
        assert_eq!(shard_wake_channel(&q), "jw:{emails}:wake");
        assert_eq!(wake_arg(&k.wake, false), "PUBLISH jw:wake:emails");
        assert_eq!(wake_arg(&k.wake, true), "SPUBLISH jw:{emails}:wake");
        assert_eq!(wake_queue("jw:wake:emails"), Some(q.clone()));
        assert_eq!(wake_queue("jw:{emails}:wake"), Some(q.clone()));
        assert_eq!(wake_queue("jw:{emails}:other"), None);
    }
}
