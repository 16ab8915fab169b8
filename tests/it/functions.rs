//! The function library (`src/store/scripts.rs`, `functions.rs`): loaded on every master by
//! the first calls, then every queue script call is an FCALL; when Redis loses it, calls go
//! on as scripts and the library comes back; when Redis refuses it, calls stay scripts.

use std::time::Duration;

use crate::harness::*;

/// How many masters list a `jobwire_` library, of how many.
async fn masters_with_library(redis: &TestRedis) -> (usize, usize) {
    let masters = redis.masters().await;
    let mut with = 0;
    for mut c in masters.clone() {
        let list: redis::Value = redis::cmd("FUNCTION")
            .arg("LIST")
            .arg("LIBRARYNAME")
            .arg("jobwire_*")
            .query_async(&mut c)
            .await
            .expect("function list");
        if matches!(&list, redis::Value::Array(a) if !a.is_empty()) {
            with += 1;
        }
    }
    (with, masters.len())
}

/// Enqueues, leases and acks `n` jobs of `queue`, one at a time.
async fn cycle(app: &TestApp, w: &mut TestWorker, queue: &str, from: usize, n: usize) {
    for i in from..from + n {
        enqueue(app, spec(queue, &format!("j{i}"))).await;
        let l = w
            .lease_within(Duration::from_secs(5))
            .await
            .expect("a lease");
        assert_eq!(w.ack(&l).await.code, 0);
    }
}

/// Jobs j0 .. j<n-1> of `queue` are all completed.
async fn all_completed(app: &TestApp, queue: &str, n: usize) {
    for i in 0..n {
        let job = get_job(app, queue, &format!("j{i}")).await;
        assert_eq!(
            job.state,
            jobwire::pb::JobState::Completed as i32,
            "j{i}: {job:?}"
        );
    }
}

/// Waits up to 10 s until every master has the library.
async fn library_everywhere(redis: &TestRedis) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (with, of) = masters_with_library(redis).await;
        if with == of {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the library is on {with} of {of} masters after 10 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn the_first_calls_load_the_library_on_every_master_and_later_calls_are_fcalls() {
    let redis = TestRedis::start().await;
    assert_eq!(masters_with_library(&redis).await.0, 0);
    let app = TestApp::spawn(test_config(&redis.url)).await;
    let mut w = TestWorker::open(&app, &["fn"], 1, "w").await;
    cycle(&app, &mut w, "fn", 0, 3).await;
    library_everywhere(&redis).await;
    // Calls sent before the load ran as scripts; wait (one job at a time, 10 s at most)
    // until none is still arriving.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut next = 3;
    loop {
        slowlog(&redis, Some(0)).await;
        cycle(&app, &mut w, "fn", next, 1).await;
        next += 1;
        let late = ran_as_scripts(&slowlog(&redis, None).await);
        if late.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still scripts after 10 s: {late:?}"
        );
    }
    let f0 = redis.command_calls(&["fcall"]).await;
    slowlog(&redis, Some(0)).await;
    cycle(&app, &mut w, "fn", next, 20).await;
    let log = slowlog(&redis, None).await;
    let f1 = redis.command_calls(&["fcall"]).await;
    println!("20 jobs: {} FCALL; EVALSHA: {log:?}", f1 - f0);
    assert!(
        f1 - f0 >= 40,
        "an enqueue and an ack-and-lease a job: {}",
        f1 - f0
    );
    // EVALSHA only of the global scripts (the due index, the registry).
    let late = ran_as_scripts(&log);
    assert!(late.is_empty(), "queue scripts ran as scripts: {late:?}");
}

/// The queue scripts whose SHA1 is among `log`'s (they ran as scripts, not functions).
fn ran_as_scripts(log: &[String]) -> Vec<&'static str> {
    jobwire::store::script_hashes()
        .into_iter()
        .filter(|(_, sha, function)| function.is_some() && log.contains(sha))
        .map(|(name, _, _)| name)
        .collect()
}

/// With `Some(us)`: logs every command slower than `us` from now on (SLOWLOG reset). With
/// `None`: stops logging and returns the SHA1 of each EVAL and EVALSHA call logged.
async fn slowlog(redis: &TestRedis, us: Option<i64>) -> Vec<String> {
    let mut out = Vec::new();
    for mut c in redis.masters().await {
        let set = |name: &str, v: i64| {
            let mut cmd = redis::cmd("CONFIG");
            cmd.arg("SET").arg(name).arg(v);
            cmd
        };
        if let Some(us) = us {
            let _: () = set("slowlog-max-len", 100_000)
                .query_async(&mut c)
                .await
                .expect("config set");
            let _: () = redis::cmd("SLOWLOG")
                .arg("RESET")
                .query_async(&mut c)
                .await
                .expect("slowlog reset");
            let _: () = set("slowlog-log-slower-than", us)
                .query_async(&mut c)
                .await
                .expect("config set");
            continue;
        }
        let _: () = set("slowlog-log-slower-than", 10_000)
            .query_async(&mut c)
            .await
            .expect("config set");
        let log: Vec<redis::Value> = redis::cmd("SLOWLOG")
            .arg("GET")
            .arg(100_000)
            .query_async(&mut c)
            .await
            .expect("slowlog get");
        for e in log {
            let redis::Value::Array(f) = e else { continue };
            let Some(Ok(args)) = f
                .get(3)
                .map(|a| redis::from_redis_value::<Vec<Vec<u8>>>(a.clone()))
            else {
                continue;
            };
            let arg = |i: usize| String::from_utf8_lossy(&args[i]).into_owned();
            match arg(0).to_uppercase().as_str() {
                "EVALSHA" => out.push(arg(1).to_lowercase()),
                "EVAL" => out.push(redis::Script::new(&arg(1)).get_hash().to_owned()),
                _ => {}
            }
        }
    }
    out
}

#[tokio::test]
async fn after_function_flush_calls_go_on_as_scripts_and_the_library_comes_back() {
    let redis = TestRedis::start().await;
    let app = TestApp::spawn(test_config(&redis.url)).await;
    let mut w = TestWorker::open(&app, &["flush"], 1, "w").await;
    cycle(&app, &mut w, "flush", 0, 2).await;
    library_everywhere(&redis).await;
    for mut c in redis.masters().await {
        let _: () = redis::cmd("FUNCTION")
            .arg("FLUSH")
            .query_async(&mut c)
            .await
            .expect("function flush");
    }
    assert_eq!(masters_with_library(&redis).await.0, 0);
    // Every call still runs at once, each job leased and acked once.
    cycle(&app, &mut w, "flush", 2, 5).await;
    library_everywhere(&redis).await;
    cycle(&app, &mut w, "flush", 7, 2).await;
    all_completed(&app, "flush", 9).await;
}

/// FCALLs Redis ran or refused (an ACL's NOPERM counts as rejected, not as a call).
async fn fcall_attempts(redis: &TestRedis) -> u64 {
    redis.command_calls(&["fcall"]).await + redis.command_stat(&["fcall"], "rejected_calls").await
}

/// A Redis whose ACL denies jobwire's user `rule` (`-function`, `-fcall`): after the first
/// calls meet the refusal, every call runs as a script and every job completes.
async fn serves_every_call_as_a_script_under(rule: &str, queue: &str) {
    let redis = TestRedis::start().await;
    let mut c = redis.conn().await;
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("default")
        .arg(rule)
        .query_async(&mut c)
        .await
        .expect("acl");
    let app = TestApp::spawn(test_config(&redis.url)).await;
    let mut w = TestWorker::open(&app, &[queue], 1, "w").await;
    // The first calls meet the refusal (the load behind them, for `-function`); wait, one job
    // at a time and 10 s at most, until a job goes by without an FCALL.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut next = 0;
    loop {
        let before = fcall_attempts(&redis).await;
        cycle(&app, &mut w, queue, next, 1).await;
        next += 1;
        if fcall_attempts(&redis).await == before {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{rule}: still FCALL after 10 s"
        );
    }
    let f0 = fcall_attempts(&redis).await;
    cycle(&app, &mut w, queue, next, 10).await;
    let f1 = fcall_attempts(&redis).await;
    assert_eq!(
        f1, f0,
        "{rule}: the library turned off, no FCALL after the refusal"
    );
    all_completed(&app, queue, next + 10).await;
}

#[tokio::test]
async fn a_redis_that_refuses_the_library_serves_every_call_as_a_script() {
    if single_only("sets an ACL on the one redis-server") {
        return;
    }
    // As a managed Redis might: no FUNCTION command for jobwire's user.
    serves_every_call_as_a_script_under("-function", "refused").await;
}

#[tokio::test]
async fn a_redis_that_refuses_fcall_serves_every_call_as_a_script() {
    if single_only("sets an ACL on the one redis-server") {
        return;
    }
    serves_every_call_as_a_script_under("-fcall", "nofcall").await;
}
