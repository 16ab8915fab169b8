//! The Lua scripts, in two forms built from the same files.
//!
//! - **Functions** (the normal path): every queue script is a function of one Redis
//!   function library ([`LIBRARY`], `FUNCTION LOAD` once per master, then `FCALL`). The
//!   library runs `common.lua`, `groups.lua`, `attempts.lua`, `lease_fn.lua` and `ack_fn.lua`
//!   once, when Redis loads it; each function then starts with `begin_call` (common.lua)
//!   and runs its own file. As a script, Redis ran that whole prelude on every call: it
//!   created its ~140 closures each time, 10-30 µs of Redis CPU per call (measured with
//!   `redis-benchmark` on an empty prelude: ack-and-lease's 33 µs against 5 µs for a bare
//!   script), more than most calls' own work.
//! - **Scripts** (the fallback): the prelude and the file as one `EVALSHA` script (on
//!   NOSCRIPT, `EVAL` with the body). A call goes this way when its function is missing
//!   (a restarted Redis without persistence, `FUNCTION FLUSH`, a master that never got the
//!   library): it still runs the same code at once, and the library is loaded again behind
//!   it (`client.rs`). The global scripts (`due`, `intent`, `register`) go only this way.
//!
//! A function's flags (Redis 7 checks them before it runs; see "Script flags" in the Redis
//! docs): the read-only ones are `no-writes` (they run on a full Redis too, past
//! maxmemory); the ones that settle, reap, release or remove work are `allow-oom`, so a full
//! Redis still drains (its workers lease, ack and fail; what they free makes room); the
//! ones that add work or data (enqueue, progress, replay, queue and group settings) have no
//! flag, so a full Redis refuses them before they run (OOM: RESOURCE_EXHAUSTED).

use std::sync::LazyLock;

use redis::Script;

/// What a queue script may do, as its function's flags say (module doc).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Access {
    /// Only reads: `no-writes`, and no WAIT after it under `--redis-wait-replicas`.
    Read,
    /// Writes, and may run past maxmemory: `allow-oom`.
    Drain,
    /// Writes, refused past maxmemory: no flag.
    Grow,
}

/// A script and the name its latency metric carries.
pub(crate) struct NamedScript {
    pub(crate) name: &'static str,
    /// What a call may do; `None` for a global script (not in the library).
    access: Option<Access>,
    /// Its own file (after the shared parts and `begin_call`).
    own: &'static str,
    /// The source, for EVAL when Redis does not have the script (NOSCRIPT).
    pub(crate) body: LazyLock<String>,
    /// The script (its SHA1 for EVALSHA).
    pub(crate) script: LazyLock<Script>,
    /// Its function's name in [`LIBRARY`] (`None` for a global script).
    pub(crate) function: LazyLock<Option<String>>,
}

impl NamedScript {
    /// Whether a call may write (every script but the read-only ones).
    pub(crate) fn writes(&self) -> bool {
        self.access != Some(Access::Read)
    }
}

/// The shared files every queue script starts with, in order (`lease_fn.lua` and
/// `ack_fn.lua` only where named; `enqueue.lua` goes without `attempts.lua`, which it does not
/// use, to keep its fallback form small).
const COMMON: &str = include_str!("scripts/common.lua");
const GROUPS: &str = include_str!("scripts/groups.lua");
const ATTEMPTS: &str = include_str!("scripts/attempts.lua");
const LEASE_FN: &str = include_str!("scripts/lease_fn.lua");
const ACK_FN: &str = include_str!("scripts/ack_fn.lua");

/// The fallback script of a queue script: the shebang of a read-only one (which must open
/// it), the locals KEYS and ARGV (common.lua), the prelude `parts`, `begin_call`, its file.
fn script_form(access: Access, parts: &[&str], own: &str) -> String {
    let mut s = String::new();
    if access == Access::Read {
        s.push_str("#!lua flags=no-writes\n");
    }
    s.push_str("local KEYS, ARGV = KEYS, ARGV\n");
    for p in parts {
        s.push_str(p);
    }
    s.push_str("begin_call(KEYS, ARGV)\n");
    s.push_str(own);
    s
}

macro_rules! queue_script {
    ($name:ident, $label:literal, $access:ident, [$($part:ident),*]) => {
        #[doc = concat!("`scripts/", $label, ".lua`, a queue script (module doc).")]
        pub(crate) static $name: NamedScript = NamedScript {
            name: $label,
            access: Some(Access::$access),
            own: include_str!(concat!("scripts/", $label, ".lua")),
            body: LazyLock::new(|| script_form(Access::$access, &[$($part),*], $name.own)),
            script: LazyLock::new(|| Script::new(&$name.body)),
            function: LazyLock::new(|| Some(function_name($label))),
        };
    };
}

/// Every queue script: its static ([`queue_script!`]) and its place in `QUEUE_SCRIPTS` (the
/// library's order), from one list.
macro_rules! queue_scripts {
    ($(($name:ident, $label:literal, $access:ident, [$($part:ident),*])),* $(,)?) => {
        $(queue_script!($name, $label, $access, [$($part),*]);)*

        /// Every queue script, in the library's order.
        const QUEUE_SCRIPTS: &[&NamedScript] = &[$(&$name),*];
    };
}

queue_scripts! {
    (ENQUEUE, "enqueue", Grow, [COMMON, GROUPS]),
    (LEASE, "lease", Drain, [COMMON, GROUPS, ATTEMPTS, LEASE_FN]),
    (ACK, "ack", Drain, [COMMON, GROUPS, ATTEMPTS, ACK_FN]),
    (ACK_LEASE, "ack_lease", Drain, [COMMON, GROUPS, ATTEMPTS, ACK_FN, LEASE_FN]),
    (FAIL, "fail", Drain, [COMMON, GROUPS, ATTEMPTS]),
    (REAP, "reap", Drain, [COMMON, GROUPS, ATTEMPTS]),
    (RENEW, "renew", Drain, [COMMON, GROUPS, ATTEMPTS]),
    (RELEASE, "release", Drain, [COMMON, GROUPS, ATTEMPTS]),
    (RELEASE_CALL, "release_call", Drain, [COMMON, GROUPS, ATTEMPTS]),
    (CONFIRM_CALLS, "confirm_calls", Drain, [COMMON, GROUPS, ATTEMPTS]),
    (REPLAY, "replay", Grow, [COMMON, GROUPS, ATTEMPTS]),
    (DELETE_DEAD, "delete_dead", Drain, [COMMON, GROUPS, ATTEMPTS]),
    (SET_META, "set_meta", Grow, [COMMON, GROUPS, ATTEMPTS]),
    (PURGE, "purge", Drain, [COMMON, GROUPS, ATTEMPTS]),
    (DELETE_QUEUE, "delete_queue", Drain, [COMMON, GROUPS, ATTEMPTS]),
    (PROGRESS, "progress", Grow, [COMMON, GROUPS, ATTEMPTS]),
    (CANCEL, "cancel", Drain, [COMMON, GROUPS, ATTEMPTS]),
    (DELETE_JOB, "delete_job", Drain, [COMMON, GROUPS, ATTEMPTS]),
    (GROUP_ADMIN, "group_admin", Grow, [COMMON, GROUPS, ATTEMPTS]),
    (WAITING_STATS, "waiting_stats", Read, [COMMON, GROUPS, ATTEMPTS]),
    (LIST_DEAD, "list_dead", Read, [COMMON, GROUPS, ATTEMPTS]),
    (LIST_JOBS, "list_jobs", Read, [COMMON, GROUPS, ATTEMPTS]),
    (GROUPS_READ, "groups_read", Read, [COMMON, GROUPS, ATTEMPTS]),
    (GET_JOB, "get_job", Read, [COMMON, GROUPS, ATTEMPTS]),
}

macro_rules! global_script {
    ($name:ident, $label:literal) => {
        #[doc = concat!("`scripts/", $label, ".lua`: a script on one global key (not a queue's).")]
        pub(crate) static $name: NamedScript = NamedScript {
            name: $label,
            access: None,
            own: include_str!(concat!("scripts/", $label, ".lua")),
            body: LazyLock::new(|| $name.own.to_owned()),
            script: LazyLock::new(|| Script::new(&$name.body)),
            function: LazyLock::new(|| None),
        };
    };
}

global_script!(DUE, "due");
global_script!(INTENT, "intent");
global_script!(REGISTER, "register");

/// The jobwire function library: its name and its code for `FUNCTION LOAD`.
pub(crate) struct Library {
    /// `jobwire_` and the first 16 hex digits of the SHA1 of its functions' code: a server
    /// of another version loads its own library beside it, never over it.
    pub(crate) name: String,
    /// The code, `#!lua name=<name>` first.
    pub(crate) code: String,
}

/// The function library (module doc).
pub(crate) static LIBRARY: LazyLock<Library> = LazyLock::new(|| {
    let name = format!(
        "jobwire_{}",
        &Script::new(&library_functions("")).get_hash()[..16]
    );
    let code = format!(
        "#!lua name={name}\n{}",
        library_functions(&format!("{name}_"))
    );
    Library { name, code }
});

/// Function `label`'s name in [`LIBRARY`]: `<library>_<label>`.
fn function_name(label: &str) -> String {
    format!("{}_{label}", LIBRARY.name)
}

/// The library's code after its shebang, each function named `'<prefix><label>'`.
fn library_functions(prefix: &str) -> String {
    let mut s = String::from("local KEYS, ARGV\n");
    for p in [COMMON, GROUPS, ATTEMPTS, LEASE_FN, ACK_FN] {
        s.push_str(p);
    }
    for script in QUEUE_SCRIPTS.iter().copied() {
        let flags = match script.access {
            Some(Access::Read) => ", flags = { 'no-writes' }",
            Some(Access::Drain) => ", flags = { 'allow-oom' }",
            _ => "",
        };
        s.push_str(&format!(
            "\nredis.register_function{{ function_name = '{prefix}{}', callback = function(keys, argv)\nbegin_call(keys, argv)\n{}\nend{flags} }}\n",
            script.name, script.own
        ));
    }
    s
}

/// Every script this crate sends, as (name, SHA1 of its fallback body, function name): the
/// SHA1 names it in EVALSHA, the function name in FCALL (SLOWLOG, MONITOR). For tests and
/// tools that tell script calls apart. The global scripts have no function.
pub fn script_hashes() -> Vec<(&'static str, String, Option<String>)> {
    QUEUE_SCRIPTS
        .iter()
        .copied()
        .chain([&DUE, &INTENT, &REGISTER])
        .map(|s| {
            (
                s.name,
                s.script.get_hash().to_owned(),
                (*s.function).clone(),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_function_is_named_after_its_library_and_script() {
        assert!(LIBRARY
            .code
            .starts_with(&format!("#!lua name={}\n", LIBRARY.name)));
        for s in QUEUE_SCRIPTS.iter().copied() {
            let f = s
                .function
                .as_deref()
                .expect("a queue script has a function");
            assert_eq!(f, format!("{}_{}", LIBRARY.name, s.name));
            assert!(
                LIBRARY.code.contains(&format!("function_name = '{f}'")),
                "{f}"
            );
        }
        assert_eq!(LIBRARY.code.matches("redis.register_function").count(), 24);
    }

    #[test]
    fn the_fallback_script_of_a_read_only_script_opens_with_its_flags() {
        assert!(GET_JOB.body.starts_with("#!lua flags=no-writes\n"));
        assert!(LEASE.body.starts_with("local KEYS, ARGV = KEYS, ARGV\n"));
        assert!(!ENQUEUE.body.contains(ATTEMPTS));
        assert!(LEASE.body.ends_with(include_str!("scripts/lease.lua")));
    }
}
