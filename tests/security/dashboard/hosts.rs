//! DNS rebinding (issue 31 item 3): with `--ui` on loopback and no auth file, a page on
//! `evil.example` whose name re-resolves to 127.0.0.1 sends `Host: evil.example` and a
//! matching `Origin`. /ui and /metrics refuse that host with 421 and change nothing; they
//! answer IP literals, `localhost` and the names of `--http-allowed-hosts`; /healthz and
//! /readyz answer any host.

use reqwest::StatusCode;

use super::*;
use crate::harness::{test_config, TestApp, TestRedis};

const EVIL: &str = "evil.example";

/// A no-auth dashboard (`--ui`, loopback) allowing `hosts`, and its clients.
async fn start_open(redis: &TestRedis, hosts: &[&str]) -> (TestApp, Clients) {
    let mut cfg = test_config(&redis.url);
    cfg.ui.enabled = true;
    cfg.ui.http_allowed_hosts = hosts.iter().map(|h| h.to_string()).collect();
    let app = TestApp::spawn(cfg).await;
    let c = Clients::new(&app.channel, Bearer::none());
    (app, c)
}

/// The rebinding page's requests: read the queue's page (cookie, CSRF token), then purge and
/// pause `queue`, every request with `Host` and `Origin` naming the browser's host. Returns
/// the status of each.
async fn ride(b: &mut Browser, queue: &str) -> Vec<StatusCode> {
    let origin = format!("http://{}", b.host.clone().unwrap_or_default());
    let page = b.get(&format!("/ui/queues/{queue}")).await;
    let mut statuses = vec![page.status];
    let csrf = if page.status == StatusCode::OK {
        page.csrf()
    } else {
        String::new()
    };
    for action in ["purge", "pause"] {
        let p = b
            .post_from(
                &format!("/ui/queues/{queue}/{action}"),
                &[("csrf", &csrf), ("confirm", queue)],
                Some(&origin),
            )
            .await;
        statuses.push(p.status);
    }
    statuses
}

#[tokio::test]
async fn a_rebinding_host_is_refused_and_changes_nothing() {
    let redis = TestRedis::start().await;
    let (app, mut c) = start_open(&redis, &[]).await;
    let port = app.http.port();
    put(&mut c, job("rebind", "j1")).await;

    // The attacker's page: every /ui request refused, before any handler.
    let mut evil = Browser::new(app.http);
    evil.host = Some(format!("{EVIL}:{port}"));
    let statuses = ride(&mut evil, "rebind").await;
    assert!(
        statuses
            .iter()
            .all(|s| *s == StatusCode::MISDIRECTED_REQUEST),
        "{statuses:?}"
    );
    let p = evil.get("/ui/").await;
    assert!(p.body.contains("--http-allowed-hosts"), "{}", p.body);
    assert!(evil.cookie.is_none(), "no session for the rebinding page");

    // Even with a session and CSRF token obtained on the real address, a POST naming the
    // attacker's host (Host and Origin agree) is refused.
    let mut real = Browser::new(app.http);
    let csrf = real.get("/ui/queues/rebind").await.csrf();
    real.host = Some(format!("{EVIL}:{port}"));
    for action in ["purge", "pause"] {
        let p = real
            .post_from(
                &format!("/ui/queues/rebind/{action}"),
                &[("csrf", &csrf), ("confirm", "rebind")],
                Some(&format!("http://{EVIL}:{port}")),
            )
            .await;
        assert_eq!(
            p.status,
            StatusCode::MISDIRECTED_REQUEST,
            "{action}: {}",
            p.body
        );
    }
    assert!(!paused(&mut c, "rebind").await, "not paused");
    assert_eq!(
        state(&mut c, "rebind", "j1").await,
        pb::JobState::Waiting,
        "not purged"
    );

    // /metrics (no token) too; the probes answer any host.
    assert_eq!(
        evil.get("/metrics").await.status,
        StatusCode::MISDIRECTED_REQUEST
    );
    assert_eq!(evil.get("/healthz").await.status, StatusCode::OK);
    let ready = evil.get("/readyz").await.status;
    assert!(ready == StatusCode::OK || ready == StatusCode::SERVICE_UNAVAILABLE);

    // IP literals and localhost work, with a port or without.
    for host in [
        format!("127.0.0.1:{port}"),
        "127.0.0.1".to_owned(),
        format!("[::1]:{port}"),
        format!("localhost:{port}"),
        format!("dash.localhost:{port}"),
    ] {
        let mut b = Browser::new(app.http);
        b.host = Some(host.clone());
        assert_eq!(b.get("/ui/").await.status, StatusCode::OK, "{host}");
        assert_eq!(b.get("/metrics").await.status, StatusCode::OK, "{host}");
    }
    let mut local = Browser::new(app.http);
    local.host = Some(format!("localhost:{port}"));
    let csrf = local.get("/ui/queues/rebind").await.csrf();
    let p = local
        .post_from(
            "/ui/queues/rebind/pause",
            &[("csrf", &csrf)],
            Some(&format!("http://localhost:{port}")),
        )
        .await;
    assert_eq!(p.status, StatusCode::OK, "{}", p.body);
    assert!(paused(&mut c, "rebind").await, "localhost may act");
    app.stop().await.expect("stop");
}

#[tokio::test]
async fn a_name_in_http_allowed_hosts_works() {
    let redis = TestRedis::start().await;
    let (app, mut c) = start_open(&redis, &["Dash.Example"]).await;
    let port = app.http.port();
    put(&mut c, job("named", "j1")).await;
    let mut b = Browser::new(app.http);
    b.host = Some(format!("dash.example:{port}"));
    let statuses = ride(&mut b, "named").await;
    assert!(
        statuses.iter().all(|s| *s == StatusCode::OK),
        "{statuses:?}"
    );
    assert!(paused(&mut c, "named").await);
    let gone = c
        .jobs
        .get_job(pb::GetJobRequest {
            queue: "named".into(),
            job_id: "j1".into(),
        })
        .await
        .expect_err("purged");
    assert_eq!(gone.code(), tonic::Code::NotFound);
    assert_eq!(b.get("/metrics").await.status, StatusCode::OK);
    // Another name is still refused.
    b.host = Some(format!("{EVIL}:{port}"));
    assert_eq!(b.get("/ui/").await.status, StatusCode::MISDIRECTED_REQUEST);
    app.stop().await.expect("stop");
}
