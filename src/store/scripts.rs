//! The Lua scripts, each built once as a static `redis::Script` (called with EVALSHA, loaded
//! again on NOSCRIPT). Each script is `common.lua` followed by its own file.

use std::sync::LazyLock;

use redis::Script;

macro_rules! script {
    ($name:ident, $file:literal) => {
        #[doc = concat!("`scripts/", $file, "`, after `scripts/common.lua`.")]
        pub(crate) static $name: LazyLock<Script> = LazyLock::new(|| {
            Script::new(concat!(
                include_str!("scripts/common.lua"),
                include_str!(concat!("scripts/", $file))
            ))
        });
    };
}

script!(ENQUEUE, "enqueue.lua");
script!(LEASE, "lease.lua");
script!(ACK, "ack.lua");
script!(FAIL, "fail.lua");
script!(REAP, "reap.lua");
script!(RENEW, "renew.lua");
script!(RELEASE, "release.lua");
script!(REPLAY, "replay.lua");
script!(DELETE_DEAD, "delete_dead.lua");
script!(LIST_DEAD, "list_dead.lua");
