//! Dashboard sessions and logins under abuse (issue 31 item 5): a token that can view
//! nothing never gets a session (10 000 attempts evict nobody), a principal past
//! `--ui-max-sessions-per-principal` ends its own oldest session and never another's, and
//! `--ui-login-rate` answers 429 with `Retry-After`.

use reqwest::StatusCode;

use super::*;

/// The POST of the login form with `token`, from a fresh browser (no cookie).
async fn attempt(b: &mut Browser, token: &str) -> browser::Page {
    b.cookie = None;
    b.post("/ui/login", &[("token", token)]).await
}

#[tokio::test]
async fn ten_thousand_logins_of_a_token_that_can_view_nothing_evict_nobody() {
    let ops = ops();
    let nobody = Who::new("nobody", &[]);
    let feeder = Who::new("feeder", &[(&["*"], &["producer", "worker"])]);
    let s = start(&[&ops, &nobody, &feeder], false).await;
    let mut admin = Browser::new(s.app.http);
    admin.login(&ops.token.reveal()).await;

    // A producer and worker: a valid token, nothing to view.
    let mut b = Browser::new(s.app.http);
    let p = attempt(&mut b, &feeder.token.reveal()).await;
    assert_eq!(p.status, StatusCode::FORBIDDEN, "{}", p.body);
    assert!(p.body.contains("no viewer or admin role"), "{}", p.body);
    assert!(p.set_cookie().is_none());

    // 10 000 logins of a token with no grant, 8 at once: none gets a session.
    let token = nobody.token.reveal();
    let started = std::time::Instant::now();
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (addr, token) = (s.app.http, token.clone());
            tokio::spawn(async move {
                let mut b = Browser::new(addr);
                let mut seen = std::collections::BTreeMap::<u16, usize>::new();
                for _ in 0..1250 {
                    let p = attempt(&mut b, &token).await;
                    assert!(p.set_cookie().is_none(), "a session for {}", p.status);
                    *seen.entry(p.status.as_u16()).or_default() += 1;
                }
                seen
            })
        })
        .collect();
    let mut seen = std::collections::BTreeMap::<u16, usize>::new();
    for t in tasks {
        for (k, v) in t.await.expect("task") {
            *seen.entry(k).or_default() += v;
        }
    }
    let took = started.elapsed();
    assert_eq!(seen.values().sum::<usize>(), 10_000);
    assert!(
        seen.keys().all(|s| *s == 403 || *s == 429),
        "refused (no grant, then the rate limit): {seen:?}"
    );
    assert!(seen.get(&429).copied().unwrap_or(0) > 9_000, "{seen:?}");
    eprintln!("10 000 logins of a no-grant token in {took:?}: {seen:?}");

    // The admin's session lives on.
    let p = admin.get("/ui/").await;
    assert_eq!(p.status, StatusCode::OK, "{}", p.location());
    assert!(p.body.contains(r#"id="whoami">ops-oncall<"#), "{}", p.body);
}

#[tokio::test]
async fn a_principal_past_its_session_cap_ends_its_own_oldest_session_only() {
    let (ops, watcher) = (ops(), watcher());
    let s = Secured::start_with(&[&ops, &watcher], false, None, |cfg| {
        cfg.ui.enabled = true;
        cfg.ui.max_sessions_per_principal = 3;
        cfg.ui.login_rate = 10_000;
    })
    .await;
    let mut admin = Browser::new(s.app.http);
    admin.login(&ops.token.reveal()).await;

    let mut viewers = Vec::new();
    for _ in 0..30 {
        let mut b = Browser::new(s.app.http);
        b.login(&watcher.token.reveal()).await;
        viewers.push(b);
    }
    for (i, b) in viewers.iter_mut().enumerate() {
        let p = b.get("/ui/").await;
        let live = p.status == StatusCode::OK;
        assert_eq!(live, i >= 27, "session {i}: {} {}", p.status, p.location());
    }
    let p = admin.get("/ui/").await;
    assert_eq!(
        p.status,
        StatusCode::OK,
        "another principal's session lives"
    );
}

#[tokio::test]
async fn past_the_login_rate_a_login_gets_429_with_retry_after() {
    let ops = ops();
    let s = Secured::start_with(&[&ops], false, None, |cfg| {
        cfg.ui.enabled = true;
        cfg.ui.login_rate = 5;
    })
    .await;
    let mut b = Browser::new(s.app.http);
    // Bad tokens count too.
    for _ in 0..5 {
        let p = attempt(
            &mut b,
            "jw_ghost_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        )
        .await;
        assert_eq!(p.status, StatusCode::UNAUTHORIZED, "{}", p.body);
    }
    let p = attempt(&mut b, &ops.token.reveal()).await;
    assert_eq!(p.status, StatusCode::TOO_MANY_REQUESTS, "{}", p.body);
    assert!(p.set_cookie().is_none(), "no session");
    let retry: u64 = p
        .headers
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .expect("a Retry-After in seconds");
    assert!(
        (1..=12).contains(&retry),
        "one attempt refills in 12 s: {retry}"
    );
    assert!(p.body.contains("--ui-login-rate"), "{}", p.body);
}
