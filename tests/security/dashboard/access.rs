//! Who gets in and what they may do: `/ui` is 404 without `--ui` (and never on the metrics
//! listener), the login, the session cookie, the token never sent back, CSRF on every POST,
//! viewers and `--ui-read-only` refused, a revoked token ends the session.

use reqwest::StatusCode;

use super::*;
use crate::harness::{test_config, TestApp, TestRedis};

#[tokio::test]
async fn the_dashboard_is_404_without_ui_and_absent_from_the_metrics_listener() {
    let redis = TestRedis::start().await;
    let app = TestApp::spawn(test_config(&redis.url)).await;
    let mut b = Browser::new(app.http);
    for path in ["/ui", "/ui/", "/ui/login", "/ui/workers", "/ui/queues/q"] {
        assert_eq!(b.get(path).await.status, StatusCode::NOT_FOUND, "{path}");
    }
    assert_eq!(
        b.post("/ui/login", &[("token", "x")]).await.status,
        StatusCode::NOT_FOUND
    );
    app.stop().await.expect("stop");

    // --ui with --metrics-addr: the dashboard is on the main port only.
    let free = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let metrics_addr = free.local_addr().expect("addr");
    drop(free);
    let mut cfg = test_config(&redis.url);
    cfg.ui.enabled = true;
    cfg.abuse.metrics_addr = Some(metrics_addr);
    let app = TestApp::spawn(cfg).await;
    assert_eq!(
        Browser::new(app.http).get("/ui/").await.status,
        StatusCode::OK
    );
    let mut m = Browser::new(metrics_addr);
    assert_eq!(m.get("/metrics").await.status, StatusCode::OK);
    assert_eq!(m.get("/ui/").await.status, StatusCode::NOT_FOUND);
    app.stop().await.expect("stop");
}

#[tokio::test]
async fn without_an_auth_file_every_visitor_is_anonymous_and_told_so() {
    let redis = TestRedis::start().await;
    let mut cfg = test_config(&redis.url);
    cfg.ui.enabled = true;
    let app = TestApp::spawn(cfg).await;
    let mut b = Browser::new(app.http);
    // No login page: straight to the overview.
    let p = b.get("/ui/login").await;
    assert_eq!(p.status, StatusCode::SEE_OTHER);
    let p = b.get("/ui/").await;
    assert_eq!(p.status, StatusCode::OK);
    assert!(p.body.contains(r#"id="auth-off""#), "{}", p.body);
    assert!(p.body.contains(r#"id="whoami">anonymous<"#), "{}", p.body);
    assert!(
        b.cookie.is_some(),
        "an anonymous session carries the CSRF token"
    );
    app.stop().await.expect("stop");
}

#[tokio::test]
async fn login_refuses_bad_tokens_and_sets_a_strict_http_only_cookie() {
    let (ops, watcher) = (ops(), watcher());
    let s = start(&[&ops, &watcher], false).await;
    let mut b = Browser::new(s.app.http);

    // Not logged in: every page sends the browser to the login.
    let p = b.get("/ui/").await;
    assert_eq!(p.status, StatusCode::SEE_OTHER);
    assert_eq!(p.location(), "/ui/login");
    let p = b.get("/ui/login").await;
    assert_eq!(p.status, StatusCode::OK);
    assert!(p.body.contains(r#"<form id="login""#), "{}", p.body);
    assert!(
        p.body.contains(r#"type="password" name="token""#),
        "{}",
        p.body
    );

    // Bad tokens: a malformed one, a wrong secret, an unknown id, none.
    // The last character changed (to 'x', or 'y' when it already is an 'x').
    let real = ops.token.reveal();
    let last = if real.ends_with('x') { 'y' } else { 'x' };
    let wrong_secret = format!("{}{last}", &real[..real.len() - 1]);
    for bad in [
        "nope",
        wrong_secret.as_str(),
        "jw_ghost_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "",
    ] {
        let p = b.post("/ui/login", &[("token", bad)]).await;
        assert_eq!(p.status, StatusCode::UNAUTHORIZED, "{bad}: {}", p.body);
        assert!(p.body.contains(r#"class="error""#), "{}", p.body);
        assert!(p.set_cookie().is_none(), "no session for {bad}");
        if !bad.is_empty() {
            assert!(!p.body.contains(bad), "the refused token is not echoed");
        }
    }

    let p = b.login(&ops.token.reveal()).await;
    let cookie = p.set_cookie().expect("a session cookie");
    let attrs: Vec<&str> = cookie.split(';').map(str::trim).collect();
    assert!(attrs[0].starts_with("jobwire_session="), "{cookie}");
    assert!(
        attrs[0].len() > "jobwire_session=".len() + 40,
        "an opaque random id: {cookie}"
    );
    for a in ["HttpOnly", "SameSite=Strict", "Path=/ui"] {
        assert!(attrs.contains(&a), "{a} in {cookie}");
    }
    let p = b.get("/ui/").await;
    assert_eq!(p.status, StatusCode::OK, "{}", p.body);
    assert!(p.body.contains(r#"id="whoami">ops-oncall<"#), "{}", p.body);
    assert!(!p.body.contains(r#"id="auth-off""#));

    // Logout ends the session.
    let csrf = p.csrf();
    let p = b.post("/ui/logout", &[("csrf", &csrf)]).await;
    assert_eq!(p.status, StatusCode::SEE_OTHER);
    assert_eq!(p.location(), "/ui/login");
    assert_eq!(b.get("/ui/").await.status, StatusCode::SEE_OTHER);
}

#[tokio::test]
async fn the_token_never_appears_in_a_page_or_header_after_login() {
    let ops = ops();
    let s = start(&[&ops], false).await;
    let mut c = s.as_(&ops);
    kill(&mut c, "leak", "j1", "send", "timeout", b"{\"a\":1}").await;
    let token = ops.token.reveal();
    let secret = token.rsplit('_').next().expect("secret").to_owned();
    let mut b = Browser::new(s.app.http);
    let login = b.login(&token).await;
    let mut pages = vec![login];
    for path in [
        "/ui/",
        "/ui/workers",
        "/ui/queues/leak",
        "/ui/queues/leak?state=dead",
        "/ui/queues/leak/dead",
        "/ui/queues/leak/jobs/j1",
        "/ui/queues/leak/jobs/missing",
        "/ui/nothing-here",
    ] {
        pages.push(b.get(path).await);
    }
    let csrf = pages[1].csrf();
    pages.push(
        b.post(
            "/ui/queues/leak/dead",
            &[("csrf", &csrf), ("op", "replay-filter")],
        )
        .await,
    );
    for p in &pages {
        let text = p.all_text();
        assert!(!text.contains(&secret), "the token's secret leaked: {text}");
        assert!(!text.contains(&token));
    }
}

#[tokio::test]
async fn a_post_without_or_with_a_wrong_csrf_token_is_refused_and_changes_nothing() {
    let ops = ops();
    let s = start(&[&ops], false).await;
    let mut c = s.as_(&ops);
    kill(&mut c, "csrf", "j1", "send", "timeout", b"{}").await;
    let mut b = Browser::new(s.app.http);
    b.login(&ops.token.reveal()).await;
    let good = b.get("/ui/").await.csrf();
    let other = {
        // Another session's token is wrong for this one.
        let mut b2 = Browser::new(s.app.http);
        b2.login(&ops.token.reveal()).await;
        b2.get("/ui/").await.csrf()
    };
    assert_ne!(good, other);
    let posts: [(&str, Vec<(&str, &str)>); 4] = [
        ("/ui/queues/csrf/pause", vec![]),
        ("/ui/queues/csrf/jobs/j1/replay", vec![]),
        (
            "/ui/queues/csrf/dead",
            vec![("op", "delete-filter"), ("confirmed", "1")],
        ),
        (
            "/ui/queues/csrf/purge",
            vec![("confirm", "csrf"), ("include_dead", "1")],
        ),
    ];
    for (path, fields) in &posts {
        for csrf in [None, Some(""), Some(other.as_str()), Some(&good[1..])] {
            let mut f = fields.clone();
            if let Some(t) = csrf {
                f.push(("csrf", t));
            }
            let p = b.post(path, &f).await;
            assert_eq!(
                p.status,
                StatusCode::FORBIDDEN,
                "{path} csrf={csrf:?}: {}",
                p.body
            );
        }
    }
    // A forged POST without any session is refused too.
    let mut stranger = Browser::new(s.app.http);
    let p = stranger
        .post("/ui/queues/csrf/pause", &[("csrf", good.as_str())])
        .await;
    assert_eq!(p.status, StatusCode::FORBIDDEN);
    // Nothing changed.
    assert!(!paused(&mut c, "csrf").await);
    assert_eq!(state(&mut c, "csrf", "j1").await, pb::JobState::Dead);
    // A POST from another origin is refused even with the right token.
    let p = b
        .post_from(
            "/ui/queues/csrf/pause",
            &[("csrf", &good)],
            Some("http://evil.example"),
        )
        .await;
    assert_eq!(p.status, StatusCode::FORBIDDEN, "{}", p.body);
    assert!(!paused(&mut c, "csrf").await);
    let p = b
        .post_from_site(
            "/ui/queues/csrf/pause",
            &[("csrf", &good)],
            None,
            Some("cross-site"),
        )
        .await;
    assert_eq!(p.status, StatusCode::FORBIDDEN, "{}", p.body);
    assert!(!paused(&mut c, "csrf").await);
    // Chromium sends `Origin: null` from a page with `Referrer-Policy: no-referrer`: with the
    // right token (and a same-origin fetch) the action goes through.
    let p = b
        .post_from_site(
            "/ui/queues/csrf/pause",
            &[("csrf", &good)],
            Some("null"),
            Some("same-origin"),
        )
        .await;
    assert_eq!(p.status, StatusCode::OK, "{}", p.body);
    assert!(paused(&mut c, "csrf").await);
    let p = b.post("/ui/queues/csrf/resume", &[("csrf", &good)]).await;
    assert_eq!(p.status, StatusCode::OK, "{}", p.body);
    // With the right token from the dashboard's own origin, the action goes through.
    let own = format!("http://{}", s.app.http);
    let p = b
        .post_from("/ui/queues/csrf/pause", &[("csrf", &good)], Some(&own))
        .await;
    assert_eq!(p.status, StatusCode::OK, "{}", p.body);
    assert!(paused(&mut c, "csrf").await);
}

#[tokio::test]
async fn a_viewer_sees_no_actions_and_its_posts_are_refused() {
    let (ops, watcher) = (ops(), watcher());
    let s = start(&[&ops, &watcher], false).await;
    let mut c = s.as_(&ops);
    kill(&mut c, "view", "j1", "send", "timeout", b"{}").await;
    let mut b = Browser::new(s.app.http);
    b.login(&watcher.token.reveal()).await;
    let mut csrf = String::new();
    for path in [
        "/ui/",
        "/ui/workers",
        "/ui/queues/view",
        "/ui/queues/view?state=dead",
        "/ui/queues/view/dead",
        "/ui/queues/view/jobs/j1",
    ] {
        let p = b.get(path).await;
        assert_eq!(p.status, StatusCode::OK, "{path}: {}", p.body);
        assert!(
            !p.body.contains("data-action"),
            "{path} shows an action: {}",
            p.body
        );
        assert!(p.body.contains(r#"id="whoami">watcher<"#));
        csrf = p.csrf();
    }
    for (path, fields) in [
        ("/ui/queues/view/pause", vec![]),
        ("/ui/queues/view/jobs/j1/replay", vec![]),
        ("/ui/queues/view/jobs/j1/delete", vec![]),
        (
            "/ui/queues/view/dead",
            vec![("op", "replay-filter"), ("confirmed", "1")],
        ),
        (
            "/ui/queues/view/dead",
            vec![
                ("op", "delete-selected"),
                ("job_id", "j1"),
                ("confirmed", "1"),
            ],
        ),
        (
            "/ui/queues/view/purge",
            vec![("confirm", "view"), ("include_dead", "1")],
        ),
    ] {
        let mut f = fields.clone();
        f.push(("csrf", &csrf));
        let p = b.post(path, &f).await;
        assert_eq!(p.status, StatusCode::FORBIDDEN, "{path}: {}", p.body);
    }
    assert!(!paused(&mut c, "view").await);
    assert_eq!(state(&mut c, "view", "j1").await, pb::JobState::Dead);
}

#[tokio::test]
async fn read_only_hides_and_refuses_every_action_for_admins_too() {
    let ops = ops();
    let s = start(&[&ops], true).await;
    let mut c = s.as_(&ops);
    kill(&mut c, "ro", "j1", "send", "timeout", b"{}").await;
    let mut b = Browser::new(s.app.http);
    b.login(&ops.token.reveal()).await;
    let p = b.get("/ui/queues/ro/dead").await;
    assert!(p.body.contains(r#"id="read-only""#), "{}", p.body);
    assert!(!p.body.contains("data-action"), "{}", p.body);
    let p = b.get("/ui/queues/ro/jobs/j1").await;
    assert!(!p.body.contains("data-action"), "{}", p.body);
    let csrf = p.csrf();
    for path in ["/ui/queues/ro/pause", "/ui/queues/ro/jobs/j1/replay"] {
        let p = b.post(path, &[("csrf", &csrf)]).await;
        assert_eq!(p.status, StatusCode::FORBIDDEN, "{path}: {}", p.body);
    }
    assert!(!paused(&mut c, "ro").await);
    assert_eq!(state(&mut c, "ro", "j1").await, pb::JobState::Dead);
}

#[tokio::test]
async fn revoking_the_token_in_the_auth_file_ends_the_session() {
    let (ops, watcher) = (ops(), watcher());
    let s = start(&[&ops, &watcher], false).await;
    let mut b = Browser::new(s.app.http);
    b.login(&watcher.token.reveal()).await;
    assert_eq!(b.get("/ui/").await.status, StatusCode::OK);
    s.rewrite(&auth_yaml(&[&ops]));
    crate::harness::eventually(std::time::Duration::from_secs(10), || {
        let mut probe = Browser::new(s.app.http);
        let token = watcher.token.reveal();
        async move {
            probe.post("/ui/login", &[("token", &token)]).await.status == StatusCode::UNAUTHORIZED
        }
    })
    .await;
    let old_cookie = b.cookie.clone();
    let p = b.get("/ui/").await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    assert_eq!(p.location(), "/ui/login");
    // The session is gone for good, even once the token is valid again.
    s.rewrite(&auth_yaml(&[&ops, &watcher]));
    crate::harness::eventually(std::time::Duration::from_secs(10), || {
        let mut probe = Browser::new(s.app.http);
        let token = watcher.token.reveal();
        async move {
            probe.post("/ui/login", &[("token", &token)]).await.status == StatusCode::SEE_OTHER
        }
    })
    .await;
    b.cookie = old_cookie;
    assert_eq!(b.get("/ui/workers").await.status, StatusCode::SEE_OTHER);
}
