//! What the pages say for operators: the oldest waiting job's age is "—" when nothing waits
//! (overview and queue page), durations read in at most two human units ("30d", not
//! "30days"), an unset timeout reads "none", and an active job says how long it has run.

use reqwest::StatusCode;

use super::*;

/// The text of the element whose opening tag ends with `open` (up to the next `<`).
fn text_after<'a>(body: &'a str, open: &str) -> &'a str {
    let at = body
        .find(open)
        .unwrap_or_else(|| panic!("{open} in {body}"));
    let rest = &body[at + open.len()..];
    &rest[..rest.find('<').unwrap_or(rest.len())]
}

#[tokio::test]
async fn ages_and_unset_values_read_for_people() {
    let ops = ops();
    let s = start(&[&ops], false).await;
    let mut c = s.as_(&ops);
    // "idle" has only a dead job: nothing waits. "busy" has one waiting and one active job.
    kill(&mut c, "idle", "d1", "send", "timeout", b"{}").await;
    put(&mut c, job("busy", "a1")).await;
    let mut held = c.subscribe(&["busy"], 1).await.expect("subscribe");
    let l = held.lease().await;
    assert_eq!(l.job.as_ref().expect("job").job_id, "a1");
    put(&mut c, job("busy", "w1")).await;

    let mut b = Browser::new(s.app.http);
    b.login(&ops.token.reveal()).await;
    let p = b.get("/ui/").await;
    assert_eq!(p.status, StatusCode::OK);
    let idle_row = &p.body[p.body.find(r#"data-queue="idle""#).expect("idle row")..];
    assert_eq!(
        text_after(idle_row, r#"data-col="oldest_waiting">"#),
        "—",
        "{}",
        p.body
    );
    let busy_row = &p.body[p.body.find(r#"data-queue="busy""#).expect("busy row")..];
    let age = text_after(busy_row, r#"data-col="oldest_waiting">"#);
    assert!(is_human(age), "busy's oldest waiting: {age:?}");

    let p = b.get("/ui/queues/idle").await;
    assert_eq!(p.status, StatusCode::OK, "{}", p.body);
    assert_eq!(text_after(&p.body, r#"id="oldest-waiting">"#), "—");
    // The default dead-letter retention, 30 days, and no default timeout.
    assert!(p.body.contains(", at most 30d<"), "{}", p.body);
    assert!(
        p.body.contains("<dt>Default timeout</dt><dd>none</dd>"),
        "{}",
        p.body
    );

    let p = b.get("/ui/queues/busy/jobs/w1").await;
    assert_eq!(text_after(&p.body, r#"id="job-timeout">"#), "none");
    assert!(!p.body.contains(r#"id="running-for""#), "{}", p.body);
    let p = b.get("/ui/queues/busy/jobs/a1").await;
    let ran = text_after(&p.body, r#"id="running-for">"#);
    assert!(is_human(ran), "a1 running for {ran:?}");
    drop(held);
}

/// "850ms", "1.5s", "12s", "3m 12s", "2h 5m", "3d 4h": one or two numbers with a unit each.
fn is_human(s: &str) -> bool {
    let parts: Vec<&str> = s.split(' ').collect();
    (1..=2).contains(&parts.len())
        && parts.iter().all(|p| {
            let unit = p.trim_start_matches(|c: char| c.is_ascii_digit() || c == '.');
            unit.len() < p.len() && ["ms", "s", "m", "h", "d"].contains(&unit)
        })
}
