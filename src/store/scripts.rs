//! The Lua scripts, each built once as a static `redis::Script` (called with EVALSHA; on NOSCRIPT
//! with EVAL and the body). Each script is `common.lua`, then `groups.lua`, then
//! `attempts.lua`, then the shared parts it names (`lease_fn.lua`, `ack_fn.lua`), then its own
//! file; `enqueue.lua`, which uses nothing of `attempts.lua`, goes without it (Redis runs the
//! whole prelude on every call: `attempts.lua` alone cost ~12 µs of Redis CPU per call, a
//! quarter of a one-job Enqueue's).

use std::sync::LazyLock;

use redis::Script;

/// A script and the name its latency metric carries.
pub(crate) struct NamedScript {
    pub(crate) name: &'static str,
    /// The source, for EVAL when Redis does not have the script (NOSCRIPT).
    pub(crate) body: &'static str,
    /// The script (its SHA1 for EVALSHA).
    pub(crate) script: LazyLock<Script>,
}

/// The queue scripts that only read: no WAIT after them under `--redis-wait-replicas`.
const READ_ONLY: [&str; 5] = [
    "get_job",
    "groups_read",
    "list_dead",
    "list_jobs",
    "waiting_stats",
];

impl NamedScript {
    /// Whether a call may write (every queue script but [`READ_ONLY`]).
    pub(crate) fn writes(&self) -> bool {
        !READ_ONLY.contains(&self.name)
    }
}

macro_rules! script {
    ($name:ident, $label:literal $(, $part:literal)*) => {
        #[doc = concat!("`scripts/", $label, ".lua`, after `scripts/common.lua`, `scripts/groups.lua`, `scripts/attempts.lua`", $(", `scripts/", $part, ".lua`",)* ".")]
        pub(crate) static $name: NamedScript = NamedScript {
            name: $label,
            body: concat!(
                include_str!("scripts/common.lua"),
                include_str!("scripts/groups.lua"),
                include_str!("scripts/attempts.lua"),
                $(include_str!(concat!("scripts/", $part, ".lua")),)*
                include_str!(concat!("scripts/", $label, ".lua"))
            ),
            script: LazyLock::new(|| {
                Script::new(concat!(
                    include_str!("scripts/common.lua"),
                    include_str!("scripts/groups.lua"),
                    include_str!("scripts/attempts.lua"),
                    $(include_str!(concat!("scripts/", $part, ".lua")),)*
                    include_str!(concat!("scripts/", $label, ".lua"))
                ))
            }),
        };
    };
}

/// `scripts/enqueue.lua` after `scripts/common.lua` and `scripts/groups.lua` only (see the
/// module doc).
pub(crate) static ENQUEUE: NamedScript = NamedScript {
    name: "enqueue",
    body: concat!(
        include_str!("scripts/common.lua"),
        include_str!("scripts/groups.lua"),
        include_str!("scripts/enqueue.lua")
    ),
    script: LazyLock::new(|| {
        Script::new(concat!(
            include_str!("scripts/common.lua"),
            include_str!("scripts/groups.lua"),
            include_str!("scripts/enqueue.lua")
        ))
    }),
};
script!(LEASE, "lease", "lease_fn");
script!(ACK, "ack", "ack_fn");
script!(ACK_LEASE, "ack_lease", "ack_fn", "lease_fn");
script!(FAIL, "fail");
script!(REAP, "reap");
script!(RENEW, "renew");
script!(RELEASE, "release");
script!(RELEASE_CALL, "release_call");
script!(CONFIRM_CALLS, "confirm_calls");
script!(REPLAY, "replay");
script!(DELETE_DEAD, "delete_dead");
script!(LIST_DEAD, "list_dead");
script!(SET_META, "set_meta");
script!(PURGE, "purge");
script!(WAITING_STATS, "waiting_stats");
script!(DELETE_QUEUE, "delete_queue");
script!(PROGRESS, "progress");
script!(CANCEL, "cancel");
script!(DELETE_JOB, "delete_job");
script!(GROUP_ADMIN, "group_admin");

macro_rules! global_script {
    ($name:ident, $label:literal) => {
        #[doc = concat!("`scripts/", $label, ".lua`: a script on one global key (not a queue's).")]
        pub(crate) static $name: NamedScript = NamedScript {
            name: $label,
            body: include_str!(concat!("scripts/", $label, ".lua")),
            script: LazyLock::new(|| {
                Script::new(include_str!(concat!("scripts/", $label, ".lua")))
            }),
        };
    };
}

global_script!(DUE, "due");
global_script!(INTENT, "intent");
global_script!(REGISTER, "register");

/// A read-only queue script: `#!lua flags=no-writes` (which must open the script), then
/// `common.lua`, `groups.lua`, `attempts.lua` and its own file. It runs on a full Redis too
/// (past maxmemory, where MULTI is refused).
macro_rules! read_script {
    ($name:ident, $label:literal) => {
        #[doc = concat!("`scripts/", $label, ".lua` (read-only), after `scripts/common.lua`, `scripts/groups.lua` and `scripts/attempts.lua`.")]
        pub(crate) static $name: NamedScript = NamedScript {
            name: $label,
            body: concat!(
                "#!lua flags=no-writes\n",
                include_str!("scripts/common.lua"),
                include_str!("scripts/groups.lua"),
                include_str!("scripts/attempts.lua"),
                include_str!(concat!("scripts/", $label, ".lua"))
            ),
            script: LazyLock::new(|| {
                Script::new(concat!(
                    "#!lua flags=no-writes\n",
                    include_str!("scripts/common.lua"),
                    include_str!("scripts/groups.lua"),
                    include_str!("scripts/attempts.lua"),
                    include_str!(concat!("scripts/", $label, ".lua"))
                ))
            }),
        };
    };
}

read_script!(LIST_JOBS, "list_jobs");
read_script!(GROUPS_READ, "groups_read");

/// `scripts/get_job.lua` after `scripts/common.lua`, `scripts/groups.lua` and
/// `scripts/attempts.lua` (it takes the same keys as every queue script): a job's record and error history in one read-only
/// call (`flags=no-writes`, which must open the script: it runs on a full Redis too, where
/// MULTI is refused).
pub(crate) static GET_JOB: NamedScript = NamedScript {
    name: "get_job",
    body: concat!(
        "#!lua flags=no-writes\n",
        include_str!("scripts/common.lua"),
        include_str!("scripts/groups.lua"),
        include_str!("scripts/attempts.lua"),
        include_str!("scripts/get_job.lua")
    ),
    script: LazyLock::new(|| {
        Script::new(concat!(
            "#!lua flags=no-writes\n",
            include_str!("scripts/common.lua"),
            include_str!("scripts/groups.lua"),
            include_str!("scripts/attempts.lua"),
            include_str!("scripts/get_job.lua")
        ))
    }),
};

/// Every script this crate sends, as (name, SHA1 of its body): the SHA1 names it in
/// EVALSHA, SLOWLOG and MONITOR. For tests and tools that tell script calls apart.
pub fn script_hashes() -> Vec<(&'static str, String)> {
    [
        &ENQUEUE,
        &LEASE,
        &ACK,
        &ACK_LEASE,
        &FAIL,
        &REAP,
        &RENEW,
        &RELEASE,
        &RELEASE_CALL,
        &CONFIRM_CALLS,
        &REPLAY,
        &DELETE_DEAD,
        &LIST_DEAD,
        &SET_META,
        &PURGE,
        &WAITING_STATS,
        &DELETE_QUEUE,
        &PROGRESS,
        &CANCEL,
        &DELETE_JOB,
        &GROUP_ADMIN,
        &DUE,
        &INTENT,
        &REGISTER,
        &LIST_JOBS,
        &GROUPS_READ,
        &GET_JOB,
    ]
    .into_iter()
    .map(|s| (s.name, s.script.get_hash().to_owned()))
    .collect()
}
