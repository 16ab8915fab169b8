//! Tests of [`super`] against a real `redis-server` from the PATH.

use super::*;

async fn con(r: &EmbeddedRedis) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(r.url()).expect("url");
    client
        .get_multiplexed_async_connection()
        .await
        .expect("connect")
}

#[tokio::test]
async fn data_survives_stop_and_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A stale socket file from a "crash" must not block start.
    std::fs::write(dir.path().join("redis.sock"), b"").expect("stale socket");

    let r = EmbeddedRedis::start(dir.path(), Fsync::Everysec)
        .await
        .expect("start");
    assert!(r.url().starts_with("redis+unix:///"));
    let mut c = con(&r).await;
    for (param, want) in [
        ("appendonly", "yes"),
        ("appendfsync", "everysec"),
        ("maxmemory-policy", "noeviction"),
        ("save", ""),
        ("port", "0"),
    ] {
        let got: (String, String) = redis::cmd("CONFIG")
            .arg("GET")
            .arg(param)
            .query_async(&mut c)
            .await
            .expect("CONFIG GET");
        assert_eq!(got.1, want, "{param}");
    }
    redis::cmd("SET")
        .arg("jw:test")
        .arg("kept")
        .query_async::<()>(&mut c)
        .await
        .expect("SET");
    drop(c);

    // A second instance on the same dir is refused while the first runs.
    let err = EmbeddedRedis::start(dir.path(), Fsync::Everysec)
        .await
        .expect_err("second start");
    assert!(matches!(err, EmbeddedError::AlreadyRunning(_)), "{err}");
    r.stop().await;
    assert!(
        !dir.path().join("redis.sock").exists(),
        "clean shutdown removes the socket"
    );

    let r = EmbeddedRedis::start(dir.path(), Fsync::Everysec)
        .await
        .expect("restart");
    let mut c = con(&r).await;
    let got: Option<String> = redis::cmd("GET")
        .arg("jw:test")
        .query_async(&mut c)
        .await
        .expect("GET");
    assert_eq!(got.as_deref(), Some("kept"));
    r.stop().await;
}

#[tokio::test]
async fn missing_binary_has_actionable_message() {
    let dir = tempfile::tempdir().expect("tempdir");
    let err =
        EmbeddedRedis::start_with_binary("jobwire-no-such-redis-server", dir.path(), Fsync::No)
            .await
            .expect_err("must fail");
    assert_eq!(
        err.to_string(),
        "redis-server was not found on the PATH; install it (Debian/Ubuntu: \
         `sudo apt-get install -y redis-server`) or pass --redis-url"
    );
}

#[tokio::test]
async fn early_exit_reports_log_tail() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("redis.log"), "boom: bad things\n").expect("log");
    // `false` accepts any arguments and exits 1 at once, like a misconfigured server.
    let err = EmbeddedRedis::start_with_binary("false", dir.path(), Fsync::No)
        .await
        .expect_err("must fail");
    assert!(matches!(err, EmbeddedError::ExitedEarly { .. }), "{err}");
    assert!(err.to_string().contains("boom: bad things"), "{err}");
}

/// Mode bits (permissions only) of `path`.
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .expect("metadata")
        .permissions()
        .mode()
        & 0o777
}

#[tokio::test]
async fn redis_files_are_0600_also_after_a_rewrite_and_a_users_dir_keeps_its_mode() {
    use std::os::unix::fs::PermissionsExt;
    let parent = tempfile::tempdir().expect("tempdir");
    let dir = parent.path().join("data");
    // The user's existing, world-readable directory (`--data-dir .`, say) is not chmodded:
    // jobwire warns about it and keeps its own files in it private.
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    assert!(
        exposed_dir_warning(&dir)
            .is_some_and(|w| w.contains(&dir.display().to_string()) && w.contains("0755")),
        "the warning names the directory and its mode"
    );
    let r = EmbeddedRedis::start(&dir, Fsync::Always)
        .await
        .expect("start");
    let mut c = con(&r).await;
    redis::cmd("SET")
        .arg("jw:secret")
        .arg("payload")
        .query_async::<()>(&mut c)
        .await
        .expect("SET");
    // A rewrite makes new AOF files: they must be private too (not only the first ones).
    redis::cmd("BGREWRITEAOF")
        .query_async::<()>(&mut c)
        .await
        .expect("BGREWRITEAOF");
    let deadline = Instant::now() + PROCESS_TIMEOUT;
    loop {
        let info: String = redis::cmd("INFO")
            .arg("persistence")
            .query_async(&mut c)
            .await
            .expect("INFO");
        if info.contains("aof_rewrite_in_progress:0") && info.contains("aof_rewrite_scheduled:0") {
            break;
        }
        assert!(Instant::now() < deadline, "rewrite did not finish");
        sleep(POLL_INTERVAL).await;
    }
    assert_eq!(mode(&dir), 0o755, "the user's data dir keeps its mode");
    assert_eq!(mode(&dir.join("redis.log")), 0o600, "redis.log");
    let aof_dir = dir.join("appendonlydir");
    assert_eq!(mode(&aof_dir), 0o700, "appendonlydir");
    let mut files = 0;
    for e in std::fs::read_dir(&aof_dir).expect("read appendonlydir") {
        let p = e.expect("entry").path();
        assert_eq!(mode(&p), 0o600, "{}", p.display());
        files += 1;
    }
    assert!(files >= 2, "a manifest and at least one AOF file");
    drop(c);
    r.stop().await;
}

#[tokio::test]
async fn a_data_dir_jobwire_creates_is_0700() {
    let parent = tempfile::tempdir().expect("tempdir");
    let dir = parent.path().join("new/data");
    let r = EmbeddedRedis::start(&dir, Fsync::No).await.expect("start");
    assert_eq!(mode(&dir), 0o700, "created data dir");
    assert_eq!(mode(&parent.path().join("new")), 0o700, "created parent");
    assert_eq!(mode(&dir.join("redis.log")), 0o600, "redis.log");
    assert!(exposed_dir_warning(&dir).is_none());
    r.stop().await;
}

/// The parent-death signal follows the thread that forked, not the process: a child forked on
/// a thread that then ends (a tokio blocking-pool thread after 10 s idle, say) would be stopped
/// under a running jobwire. It must outlive the thread that called `start`.
#[cfg(target_os = "linux")]
#[test]
fn the_child_outlives_the_thread_that_started_it() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let r = std::thread::scope(|s| {
        s.spawn(|| rt.block_on(EmbeddedRedis::start(dir.path(), Fsync::No)))
            .join()
            .expect("starting thread")
    })
    .expect("start");
    // The starting thread has ended; give a death signal time to arrive and Redis to act on it.
    rt.block_on(async {
        sleep(Duration::from_millis(500)).await;
        let mut r = r;
        assert!(
            matches!(r.child.try_wait(), Ok(None)),
            "redis-server died with the thread that started it"
        );
        assert!(r.ping().await, "redis-server still answers");
        r.stop().await;
    });
}

/// A redis-server whose jobwire was just SIGKILLed is still shutting down on its death signal
/// (SIGTERM) for up to ~100 ms: a jobwire restarted at once on the same data dir (a supervisor,
/// a test harness) must wait for it to go, not refuse the data dir.
#[tokio::test]
async fn a_start_right_after_the_previous_server_got_sigterm_waits_for_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let old = EmbeddedRedis::start(dir.path(), Fsync::Everysec)
        .await
        .expect("start");
    let pid = old.child.id().expect("pid");
    let ok = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("run kill")
        .success();
    assert!(ok, "kill -TERM {pid}");
    let new = EmbeddedRedis::start(dir.path(), Fsync::Everysec)
        .await
        .expect("start while the previous server shuts down");
    new.stop().await;
    drop(old);
}
