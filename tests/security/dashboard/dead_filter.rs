//! The dead-letter page's death-time filter takes ages as well as times: `2h` is two hours
//! ago, and the page redirects once to the UTC time it names (so the next pages and the
//! actions see one window); a bad value shows the form again, as typed, with the error next to
//! the field (400) and no list. The queue page's search redirects an age the same way.

use reqwest::StatusCode;

use super::*;

#[tokio::test]
async fn ages_filter_by_death_time_and_a_bad_value_reshows_the_form() {
    let ops = ops();
    let s = start(&[&ops], false).await;
    let mut c = s.as_(&ops);
    for id in ["d1", "d2"] {
        kill(&mut c, "late", id, "send", "timeout", b"{}").await;
    }
    let mut b = Browser::new(s.app.http);
    b.login(&ops.token.reveal()).await;

    // Died in the last 2 hours: both; died more than 30 minutes ago: none.
    for (q, listed) in [
        ("dead_after=2h&error_type=timeout", true),
        ("dead_before=30m", false),
        ("dead_after=7d", true),
        ("dead_after=1h+30m", true),
    ] {
        let p = b.get(&format!("/ui/queues/late/dead?{q}")).await;
        assert_eq!(p.status, StatusCode::SEE_OTHER, "{q}: {}", p.body);
        let to = p.location().to_owned();
        assert!(to.starts_with("/ui/queues/late/dead?"), "{q}: {to}");
        // The age became a UTC time (2026-12-02T03%3A50%3A00Z), the other fields kept.
        assert!(to.contains("Z") && to.contains("%3A"), "{q}: {to}");
        assert_eq!(
            to.contains("error_type=timeout"),
            q.contains("error_type"),
            "{to}"
        );
        let p = b.get(&to).await;
        assert_eq!(p.status, StatusCode::OK, "{to}: {}", p.body);
        for id in ["d1", "d2"] {
            let row = format!(r#"data-job-id="{id}""#);
            assert_eq!(p.body.contains(&row), listed, "{q}: {id} in {}", p.body);
        }
    }

    for (q, field) in [
        ("dead_after=yesterday", "dead_after"),
        ("dead_before=3+fortnights", "dead_before"),
        ("reason=bored", "reason"),
    ] {
        let p = b
            .get(&format!("/ui/queues/late/dead?job_name=send&{q}"))
            .await;
        assert_eq!(p.status, StatusCode::BAD_REQUEST, "{q}: {}", p.body);
        assert!(
            p.body.contains(r#"id="dlq-filter""#),
            "{q}: the form: {}",
            p.body
        );
        let err = format!(r#"id="{field}-error""#);
        assert!(p.body.contains(&err), "{q}: {err} in {}", p.body);
        assert!(p.body.contains(r#"aria-invalid="true""#), "{q}: {}", p.body);
        assert!(p.body.contains(r#"value="send""#), "{q}: kept as typed");
        assert!(!p.body.contains(r#"<table id="dead""#), "{q}: no list");
    }
    // The queue page's search too: an age redirects once to the time it names.
    let p = b.get("/ui/queues/late?state=dead&after=2h").await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let to = p.location().to_owned();
    assert!(
        to.starts_with("/ui/queues/late?state=dead&after=") && to.ends_with("Z"),
        "{to}"
    );
    let p = b.get(&to).await;
    assert_eq!(p.status, StatusCode::OK, "{to}: {}", p.body);
    assert!(p.body.contains(r#"data-job-id="d1""#), "{}", p.body);
    let p = b.get("/ui/queues/late/dead?dead_after=yesterday").await;
    assert!(p.body.contains(r#"value="yesterday""#), "{}", p.body);
    assert!(
        p.body.contains("2h"),
        "the error says an age works: {}",
        p.body
    );
}
