//! The start-up check: jobwire refuses a Redis whose maxmemory-policy may evict keys, saying
//! why, unless --allow-eviction is given, in which case it warns on every start.

use std::time::Duration;

use crate::procs::{server_args, RedisOpts, RedisProc, ServerProc};

#[tokio::test]
async fn an_evicting_redis_is_refused_with_the_reason_unless_allowed() {
    let redis = RedisProc::start(RedisOpts {
        aof: None,
        policy: "allkeys-lru",
    })
    .await;
    let (status, log) =
        ServerProc::run_to_exit(server_args(&redis.url), Duration::from_secs(30)).await;
    assert!(!status.success(), "refused to start:\n{log}");
    for needle in [
        "allkeys-lru",
        "noeviction",
        "--allow-eviction",
        "delete jobs",
    ] {
        assert!(log.contains(needle), "the message says {needle:?}:\n{log}");
    }

    let mut args = server_args(&redis.url);
    args.push("--allow-eviction".into());
    let mut server = ServerProc::spawn(args).await;
    for start in 0..2 {
        if start > 0 {
            server.restart().await;
        }
        let log = server.log_tail();
        assert!(
            log.contains("WARN") && log.contains("not noeviction"),
            "warns on every start:\n{log}"
        );
    }
}
