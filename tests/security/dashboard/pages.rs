//! Every page renders (200, the contract's ids) for a queue with jobs in each state, with
//! the security headers; payloads show as pretty JSON, as hex when they are not JSON, and
//! capped when big.

use reqwest::StatusCode;

use super::*;

#[tokio::test]
async fn every_page_renders_for_a_queue_with_jobs_in_each_state() {
    let ops = ops();
    let s = start(&[&ops], false).await;
    let mut c = s.as_(&ops);
    let q = "all";
    // completed, then dead, then one held (active), then waiting and delayed.
    put(&mut c, job(q, "c1")).await;
    let mut w = c.subscribe(&[q], 1).await.expect("subscribe");
    let l = w.lease().await;
    w.send(pb::subscribe_request::Message::Ack(pb::AckRequest {
        result: Vec::new(),
        queue: q.into(),
        job_id: "c1".into(),
        lease_token: l.lease_token.clone(),
    }));
    let _ = w.next(Duration::from_secs(10)).await;
    drop(w);
    kill(&mut c, q, "x1", "send", "timeout", b"{}").await;
    put(&mut c, job(q, "a1")).await;
    let mut held = c.subscribe(&[q], 1).await.expect("subscribe");
    let l = held.lease().await;
    assert_eq!(l.job.as_ref().expect("job").job_id, "a1");
    put(&mut c, job(q, "w1")).await;
    put(
        &mut c,
        pb::JobSpec {
            delay: Some(prost_types::Duration {
                seconds: 3600,
                nanos: 0,
            }),
            ..job(q, "l1")
        },
    )
    .await;
    for (id, st) in [
        ("c1", pb::JobState::Completed),
        ("x1", pb::JobState::Dead),
        ("a1", pb::JobState::Active),
        ("w1", pb::JobState::Waiting),
        ("l1", pb::JobState::Delayed),
    ] {
        assert_eq!(state(&mut c, q, id).await, st, "{id}");
    }

    let mut b = Browser::new(s.app.http);
    b.login(&ops.token.reveal()).await;
    let p = b.get("/ui/").await;
    assert_eq!(p.status, StatusCode::OK);
    for part in [
        r#"id="queues""#,
        r#"data-queue="all""#,
        r#"data-col="waiting">1<"#,
        r#"data-col="delayed">1<"#,
        r#"data-col="active">1<"#,
        r#"data-col="oldest_waiting""#,
        r#"data-col="workers""#,
        r#"data-col="paused">no<"#,
        r#"<svg class="spark"#,
        r#"href="/ui/workers""#,
    ] {
        assert!(p.body.contains(part), "{part} in {}", p.body);
    }
    assert!(
        p.body
            .contains(r#"data-col="dead"><a href="/ui/queues/all/dead">1<"#),
        "{}",
        p.body
    );
    // The sparklines count this replica's events of the last 10 minutes: c1's ack, x1's
    // failed attempt.
    for label in ["1 completed", "1 failed attempts"] {
        let attr = format!(r#"aria-label="{label} in the last 10 minutes""#);
        assert!(p.body.contains(&attr), "{attr} in {}", p.body);
    }
    for h in [
        ("content-security-policy", "script-src 'self'"),
        ("x-frame-options", "DENY"),
        ("referrer-policy", "no-referrer"),
        ("cache-control", "no-store"),
    ] {
        let v = p
            .headers
            .get(h.0)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        assert!(v.contains(h.1), "{}: {v}", h.0);
    }
    assert!(!p.body.contains("<script>"), "no inline script");

    for (id, st) in [
        ("c1", "completed"),
        ("x1", "dead"),
        ("a1", "active"),
        ("w1", "waiting"),
        ("l1", "delayed"),
    ] {
        let p = b.get(&format!("/ui/queues/{q}/jobs/{id}")).await;
        assert_eq!(p.status, StatusCode::OK, "{id}: {}", p.body);
        assert!(
            p.body.contains(&format!(r#"data-state="{st}""#)),
            "{id}: {}",
            p.body
        );
        for part in [
            "id=\"attempts\"",
            "id=\"errors\"",
            "id=\"payload\"",
            "id=\"metadata\"",
            "id=\"trace-id\"",
        ] {
            assert!(p.body.contains(part), "{part} on {id}");
        }
    }
    let p = b.get(&format!("/ui/queues/{q}")).await;
    assert_eq!(p.status, StatusCode::OK, "{}", p.body);
    for part in [r#"id="config""#, r#"id="paused""#, r#"id="job-search""#] {
        assert!(p.body.contains(part), "{part}: {}", p.body);
    }
    // The default state is waiting; each state lists exactly its job.
    assert!(p.body.contains(r#"data-job-id="w1""#), "{}", p.body);
    let ids = ["c1", "x1", "a1", "w1", "l1"];
    for (st, id) in [
        ("waiting", "w1"),
        ("delayed", "l1"),
        ("active", "a1"),
        ("completed", "c1"),
        ("dead", "x1"),
    ] {
        let p = b.get(&format!("/ui/queues/{q}?state={st}")).await;
        assert_eq!(p.status, StatusCode::OK, "{st}: {}", p.body);
        assert!(p.body.contains(r#"<table id="jobs""#), "{}", p.body);
        for other in ids {
            let row = format!(r#"data-job-id="{other}""#);
            assert_eq!(
                p.body.contains(&row),
                other == id,
                "{st} lists {other}? {}",
                p.body
            );
        }
    }
    // Search: by name (none match), by id (straight to the job's page).
    let p = b
        .get(&format!("/ui/queues/{q}?state=waiting&name=nope"))
        .await;
    assert!(!p.body.contains(r#"data-job-id="w1""#), "{}", p.body);
    let p = b.get(&format!("/ui/queues/{q}?id=w1")).await;
    assert_eq!(p.status, StatusCode::SEE_OTHER);
    assert_eq!(p.location(), "/ui/queues/all/jobs/w1");
    let p = b.get(&format!("/ui/queues/{q}/dead")).await;
    assert_eq!(p.status, StatusCode::OK);
    assert!(p.body.contains(r#"id="dlq-filter""#) && p.body.contains(r#"<table id="dead""#));
    assert!(p.body.contains(r#"data-job-id="x1""#));
    let p = b.get("/ui/workers").await;
    assert_eq!(p.status, StatusCode::OK);
    assert!(p.body.contains(r#"<table id="workers""#), "{}", p.body);
    // The stream that holds a1, with its held lease (streams the test closed may linger for
    // a moment, so no exact count).
    assert!(p.body.contains("data-stream-id="), "{}", p.body);
    assert!(
        p.body.contains(r#"data-col="held_leases">1<"#),
        "{}",
        p.body
    );
    assert!(
        p.body.contains(r#"data-col="worker">security-test"#),
        "{}",
        p.body
    );

    // Unknown job: 404 page; a bad filter: 400 naming the field; the assets are cached.
    assert_eq!(
        b.get("/ui/queues/all/jobs/nope").await.status,
        StatusCode::NOT_FOUND
    );
    let p = b.get("/ui/queues/all/dead?dead_after=yesterday").await;
    assert_eq!(p.status, StatusCode::BAD_REQUEST);
    assert!(p.body.contains("dead_after"), "{}", p.body);
    let overview = b.get("/ui/").await.body;
    for asset in ["style.css", "htmx-2.0.11.min.js"] {
        let at = overview.find(asset).expect("asset linked");
        let start = overview[..at].rfind("/ui/assets/").expect("asset url");
        let url = &overview[start..at + asset.len()];
        let a = b.get(url).await;
        assert_eq!(a.status, StatusCode::OK, "{url}");
        let cc = a
            .headers
            .get("cache-control")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        assert!(cc.contains("immutable"), "{url}: {cc}");
        let stale = url.replace("/ui/assets/", "/ui/assets/0000");
        assert_eq!(b.get(&stale).await.status, StatusCode::NOT_FOUND);
    }
    drop(held);
}

#[tokio::test]
async fn payloads_show_as_json_as_hex_when_not_json_and_capped_when_big() {
    let ops = ops();
    let s = start(&[&ops], false).await;
    let mut c = s.as_(&ops);
    put(
        &mut c,
        pb::JobSpec {
            payload: br#"{"to":"a@b.c","n":1}"#.to_vec(),
            ..job("pay", "json")
        },
    )
    .await;
    put(
        &mut c,
        pb::JobSpec {
            payload: vec![0xde, 0xad, 0xbe, 0xef, 0x00],
            ..job("pay", "bin")
        },
    )
    .await;
    put(
        &mut c,
        pb::JobSpec {
            payload: vec![0xab; 200_000],
            ..job("pay", "big")
        },
    )
    .await;
    put(
        &mut c,
        pb::JobSpec {
            payload: br#"{"x":"<script>alert(1)</script>"}"#.to_vec(),
            metadata: [(
                "traceparent".to_string(),
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".to_string(),
            )]
            .into(),
            ..job("pay", "html")
        },
    )
    .await;
    let mut b = Browser::new(s.app.http);
    b.login(&ops.token.reveal()).await;
    let p = b.get("/ui/queues/pay/jobs/json").await;
    assert!(p.body.contains(r#"data-format="json""#), "{}", p.body);
    assert!(
        p.body.contains("&quot;to&quot;: &quot;a@b.c&quot;"),
        "{}",
        p.body
    );
    let p = b.get("/ui/queues/pay/jobs/bin").await;
    assert!(
        p.body.contains(r#"data-format="hex">deadbeef00<"#),
        "{}",
        p.body
    );
    let p = b.get("/ui/queues/pay/jobs/big").await;
    assert!(
        p.body.contains(r#"id="payload-note""#),
        "capped with a note"
    );
    assert!(p.body.len() < 100_000, "page of {} bytes", p.body.len());
    let p = b.get("/ui/queues/pay/jobs/html").await;
    assert!(!p.body.contains("<script>alert"), "escaped: {}", p.body);
    assert!(
        p.body.contains("4bf92f3577b34da6a3ce929d0e0e4736"),
        "trace id shown"
    );
}
