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
