//! The HTTP port: `/metrics` behind a bearer token (`--metrics-token-file`, reloaded when the
//! file changes) or on its own address (`--metrics-addr`); `/healthz` and `/readyz` open and
//! saying nothing but up or down. Real HTTP requests against a real server.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::harness::*;

/// An HTTP/1.1 answer: status code, header lines (lowercase), body.
struct Answer {
    status: u16,
    headers: String,
    body: String,
}

async fn get(addr: SocketAddr, path: &str, token: Option<&str>) -> Answer {
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.expect("write");
    let mut out = String::new();
    s.read_to_string(&mut out).await.expect("read");
    let (head, body) = out.split_once("\r\n\r\n").expect("a response");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status");
    Answer {
        status,
        headers: head.to_ascii_lowercase(),
        body: body.to_owned(),
    }
}

/// `/healthz` and `/readyz` answer without a token and reveal nothing.
async fn health_is_open_and_quiet(app: &TestApp, redis_url: &str) {
    for (path, word) in [("/healthz", "ok"), ("/readyz", "ready")] {
        let a = get(app.http, path, None).await;
        assert_eq!((a.status, a.body.as_str()), (200, word), "{path}");
        let all = format!("{}{}", a.headers, a.body);
        for secret in [env!("CARGO_PKG_VERSION"), redis_url, "redis"] {
            assert!(!all.contains(secret), "{path} reveals {secret:?}: {all}");
        }
    }
}

#[tokio::test]
async fn metrics_require_the_token_and_a_rotated_token_replaces_the_old() {
    let redis = TestRedis::start().await;
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("metrics-token");
    std::fs::write(&file, "first-token\n").expect("write");
    let mut cfg = test_config(&redis.url);
    cfg.abuse.metrics_token_file = Some(file.clone());
    let app = TestApp::spawn(cfg).await;

    for token in [None, Some("wrong"), Some("first-token-but-longer")] {
        let a = get(app.http, "/metrics", token).await;
        assert_eq!(a.status, 401, "{token:?}");
        assert!(
            a.headers.contains("www-authenticate: bearer"),
            "{}",
            a.headers
        );
        assert!(!a.body.contains("jobwire_"), "no metrics leak: {}", a.body);
    }
    let a = get(app.http, "/metrics", Some("first-token")).await;
    assert_eq!(a.status, 200);
    assert!(a.body.contains("jobwire_build_info"), "{}", a.body);
    health_is_open_and_quiet(&app, &redis.url).await;

    // Rotation: the new token works and the old one stops working, without a restart.
    std::fs::write(&file, "second-token").expect("write");
    eventually(Duration::from_secs(10), || async {
        get(app.http, "/metrics", Some("second-token")).await.status == 200
    })
    .await;
    assert_eq!(
        get(app.http, "/metrics", Some("first-token")).await.status,
        401
    );

    // An emptied file is refused: the token in force stays.
    std::fs::write(&file, "").expect("write");
    tokio::time::sleep(Duration::from_secs(3)).await; // past one poll of the file
    assert_eq!(
        get(app.http, "/metrics", Some("second-token")).await.status,
        200
    );
    assert_eq!(get(app.http, "/metrics", None).await.status, 401);
}

#[tokio::test]
async fn a_missing_token_file_stops_the_start_naming_the_flag() {
    let redis = TestRedis::start().await;
    let mut cfg = test_config(&redis.url);
    cfg.abuse.metrics_token_file = Some("/nonexistent/metrics-token".into());
    let grpc = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let http = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let e = jobwire::run(cfg, grpc, http, std::future::pending())
        .await
        .expect_err("refused");
    assert!(
        e.to_string()
            .contains("--metrics-token-file /nonexistent/metrics-token"),
        "{e:#}"
    );
}

/// A loopback address with a port free right now.
fn free_addr() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr")
}

#[tokio::test]
async fn metrics_on_their_own_address_leave_the_main_port_to_health() {
    let redis = TestRedis::start().await;
    let metrics = free_addr();
    let mut cfg = test_config(&redis.url);
    cfg.abuse.metrics_addr = Some(metrics);
    let app = TestApp::spawn(cfg).await;

    assert_eq!(get(app.http, "/metrics", None).await.status, 404);
    health_is_open_and_quiet(&app, &redis.url).await;
    let a = get(metrics, "/metrics", None).await;
    assert_eq!(a.status, 200);
    assert!(a.body.contains("jobwire_build_info"), "{}", a.body);
    assert_eq!(get(metrics, "/healthz", None).await.status, 404);
}
