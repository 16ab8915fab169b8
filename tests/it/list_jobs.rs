//! ListJobs: each state in its index's order, paged across pages while jobs come and go,
//! the name and time filters, and bad input (named field, nothing changed).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jobwire::pb;
use pb::JobState as S;
use tonic::Code;

use crate::harness::*;
use crate::refusal::refuse;

async fn page(
    app: &TestApp,
    queue: &str,
    state: S,
    page_size: i32,
    token: &str,
    filter: Option<pb::ListJobsFilter>,
) -> pb::ListJobsResponse {
    app.jobs()
        .list_jobs(pb::ListJobsRequest {
            queue: queue.into(),
            state: state as i32,
            page_size,
            page_token: token.into(),
            filter,
        })
        .await
        .expect("list jobs")
        .into_inner()
}

/// Every page of a walk from the start: the ids in order.
async fn walk(
    app: &TestApp,
    queue: &str,
    state: S,
    page_size: i32,
    filter: Option<pb::ListJobsFilter>,
) -> Vec<String> {
    let (mut ids, mut token) = (Vec::new(), String::new());
    for _ in 0..100 {
        let p = page(app, queue, state, page_size, &token, filter.clone()).await;
        for j in &p.jobs {
            assert_eq!(j.state, state as i32, "{j:?}");
        }
        ids.extend(p.jobs.into_iter().map(|j| j.job_id));
        if p.next_page_token.is_empty() {
            return ids;
        }
        token = p.next_page_token;
    }
    panic!("the walk did not end");
}

fn ids(p: &pb::ListJobsResponse) -> Vec<&str> {
    p.jobs.iter().map(|j| j.job_id.as_str()).collect()
}

fn at(ms: u64) -> Option<prost_types::Timestamp> {
    Some(prost_types::Timestamp {
        seconds: (ms / 1000) as i64,
        nanos: ((ms % 1000) * 1_000_000) as i32,
    })
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64
}

async fn put(app: &TestApp, queue: &str, id: &str, priority: i32) {
    enqueue(
        app,
        pb::JobSpec {
            priority,
            ..spec(queue, id)
        },
    )
    .await;
}

#[tokio::test]
async fn waiting_pages_in_lease_order_while_workers_lease_and_producers_enqueue() {
    let (_redis, app) = TestApp::with_redis().await;
    let q = "lw";
    for (id, pri) in [
        ("h1", 5),
        ("h2", 5),
        ("a", 0),
        ("b", 0),
        ("c", 0),
        ("d", 0),
        ("l1", -1),
    ] {
        put(&app, q, id, pri).await;
    }
    // Lease order: priority above 0 first, then 0, then below; FIFO within each.
    assert_eq!(
        walk(&app, q, S::Waiting, 2, None).await,
        ["h1", "h2", "a", "b", "c", "d", "l1"]
    );
    // No payload in a listing (GetJob has it); the rest of the record is there.
    let first = page(&app, q, S::Waiting, 1, "", None).await;
    let j = &first.jobs[0];
    assert!(j.payload.is_empty(), "{j:?}");
    assert_eq!(
        (j.name.as_str(), j.priority, j.queue.as_str()),
        ("test-job", 5, q)
    );
    assert!(j.create_time.is_some() && j.ready_time.is_some());

    let p1 = page(&app, q, S::Waiting, 3, "", None).await;
    assert_eq!(ids(&p1), ["h1", "h2", "a"]);
    // Between pages: a worker leases the first three (the page's last job among them),
    // one job joins the list's tail and one of priority 5 sorts before the token.
    let mut w = TestWorker::open(&app, &[q], 3, "w").await;
    let mut leased: Vec<String> = Vec::new();
    for _ in 0..3 {
        leased.push(w.lease().await.job.expect("job").job_id);
    }
    assert_eq!(leased, ["h1", "h2", "a"]);
    put(&app, q, "e", 0).await;
    put(&app, q, "h3", 5).await;
    let p2 = page(&app, q, S::Waiting, 3, &p1.next_page_token, None).await;
    assert_eq!(
        ids(&p2),
        ["b", "c", "d"],
        "the walk goes on after the leased a"
    );
    // Between pages again: nothing leaves; the token stands on d, still in place.
    put(&app, q, "f", 0).await;
    let mut rest = Vec::new();
    let mut token = p2.next_page_token;
    while !token.is_empty() {
        let p = page(&app, q, S::Waiting, 3, &token, None).await;
        rest.extend(ids(&p).into_iter().map(String::from));
        token = p.next_page_token;
    }
    assert_eq!(
        rest,
        ["e", "f", "l1"],
        "h3 sorted before the token: not listed"
    );
}

#[tokio::test]
async fn delayed_pages_by_due_time_and_filters_by_name_and_due_time() {
    let (redis, app) = TestApp::with_redis().await;
    let q = "ld";
    let t0 = now_ms();
    for (id, secs, name) in [
        ("x3", 300, "beta"),
        ("x1", 100, "alpha"),
        ("x2", 200, "alpha"),
    ] {
        enqueue(
            &app,
            pb::JobSpec {
                name: name.into(),
                delay: Some(ms(Duration::from_secs(secs))),
                ..spec(q, id)
            },
        )
        .await;
    }
    let p1 = page(&app, q, S::Delayed, 2, "", None).await;
    assert_eq!(ids(&p1), ["x1", "x2"]);
    // One due before the token (not listed), one after it (listed).
    for (id, secs) in [("x0", 50), ("x4", 400)] {
        enqueue(
            &app,
            pb::JobSpec {
                delay: Some(ms(Duration::from_secs(secs))),
                ..spec(q, id)
            },
        )
        .await;
    }
    let mut rest = Vec::new();
    let mut token = p1.next_page_token;
    while !token.is_empty() {
        let p = page(&app, q, S::Delayed, 2, &token, None).await;
        rest.extend(ids(&p).into_iter().map(String::from));
        token = p.next_page_token;
    }
    assert_eq!(rest, ["x3", "x4"]);
    // The name filter, and the time filter over the due time: [t0 + 150 s, t0 + 350 s).
    let named = pb::ListJobsFilter {
        name: "alpha".into(),
        ..Default::default()
    };
    assert_eq!(
        walk(&app, q, S::Delayed, 1, Some(named)).await,
        ["x1", "x2"]
    );
    let window = pb::ListJobsFilter {
        after: at(t0 + 150_000),
        before: at(t0 + 350_000),
        ..Default::default()
    };
    assert_eq!(
        walk(&app, q, S::Delayed, 10, Some(window)).await,
        ["x2", "x3"]
    );
    // The waiting list is empty: a delayed job is listed in its own state only.
    assert!(walk(&app, q, S::Waiting, 10, None).await.is_empty());
    let _ = redis;
}

#[tokio::test]
async fn active_completed_and_dead_page_in_their_index_order() {
    let (_redis, app) = TestApp::with_redis().await;
    let q = "la";
    // Payloads of each MessagePack size class (bin 8, 16 and 32), which a listing leaves
    // out while keeping the content type and metadata behind them.
    let sizes = [3, 300, 70_000, 0, 10];
    for (i, size) in sizes.iter().enumerate() {
        enqueue(
            &app,
            pb::JobSpec {
                max_attempts: Some(1),
                payload: vec![b'x'; *size],
                content_type: format!("text/t{i}"),
                metadata: [("k".to_string(), format!("v{i}"))].into_iter().collect(),
                ..spec(q, &format!("j{i}"))
            },
        )
        .await;
    }
    let mut w = TestWorker::open(&app, &[q], 5, "w").await;
    let mut leases = Vec::new();
    for _ in 0..5 {
        leases.push(w.lease().await);
    }
    let mut active = walk(&app, q, S::Active, 2, None).await;
    active.sort();
    assert_eq!(active, ["j0", "j1", "j2", "j3", "j4"]);
    // A deadline filter: every lease ends within the next minute, none after it.
    let later = pb::ListJobsFilter {
        after: at(now_ms() + 60_000),
        ..Default::default()
    };
    assert!(walk(&app, q, S::Active, 10, Some(later)).await.is_empty());
    let active_page = page(&app, q, S::Active, 10, "", None).await;
    for j in &active_page.jobs {
        let i = &j.job_id[1..];
        assert!(j.lease_time.is_some() && j.payload.is_empty(), "{j:?}");
        assert_eq!(j.content_type, format!("text/t{i}"));
        assert_eq!(j.metadata.get("k"), Some(&format!("v{i}")));
    }

    // Completed in finish order: ack j1, j3, then j0 (a few ms apart: jobs finished in the
    // same millisecond sort by id).
    for i in [1, 3, 0] {
        let s = w.ack(&leases[i]).await;
        assert_eq!(s.code, 0);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let p1 = page(&app, q, S::Completed, 2, "", None).await;
    assert_eq!(ids(&p1), ["j1", "j3"]);
    let p2 = page(&app, q, S::Completed, 2, &p1.next_page_token, None).await;
    assert_eq!(ids(&p2), ["j0"]);
    assert!(p2.jobs[0].finish_time.is_some());
    let before_now = pb::ListJobsFilter {
        before: at(now_ms() + 1000),
        ..Default::default()
    };
    assert_eq!(
        walk(&app, q, S::Completed, 10, Some(before_now))
            .await
            .len(),
        3
    );
    let old = pb::ListJobsFilter {
        before: at(now_ms() - 3_600_000),
        ..Default::default()
    };
    assert!(walk(&app, q, S::Completed, 10, Some(old)).await.is_empty());

    // Dead in death order, with their last error.
    for i in [4, 2] {
        w.fail(&leases[i], pb::FailDisposition::Retry, "boom", "E", None)
            .await;
    }
    let dead = page(&app, q, S::Dead, 10, "", None).await;
    assert_eq!(ids(&dead), ["j4", "j2"]);
    assert_eq!(dead.jobs[0].errors.len(), 1);
    assert_eq!(dead.jobs[0].errors[0].message, "boom");
    assert!(walk(&app, q, S::Active, 10, None).await.is_empty());
    // An unknown queue lists nothing, as GetQueueStats and ListDeadLetters answer for it.
    assert!(walk(&app, "never-used", S::Dead, 10, None).await.is_empty());
}

#[tokio::test]
async fn bad_listings_name_the_field_and_change_nothing() {
    let (redis, app) = TestApp::with_redis().await;
    let q = "lb";
    for i in 0..3 {
        put(&app, q, &format!("j{i}"), 0).await;
    }
    let req = |f: &dyn Fn(&mut pb::ListJobsRequest)| {
        let mut r = pb::ListJobsRequest {
            queue: q.into(),
            state: S::Waiting as i32,
            ..Default::default()
        };
        f(&mut r);
        r
    };
    let cases: Vec<(&str, pb::ListJobsRequest, &str, &str)> = vec![
        (
            "state unspecified",
            req(&|r| r.state = S::Unspecified as i32),
            "state",
            "WAITING",
        ),
        ("state unknown", req(&|r| r.state = 99), "state", "99"),
        (
            "page too big",
            req(&|r| r.page_size = 1001),
            "page_size",
            "1000",
        ),
        (
            "page negative",
            req(&|r| r.page_size = -1),
            "page_size",
            "1000",
        ),
        (
            "garbage token",
            req(&|r| r.page_token = "garbage!".into()),
            "page_token",
            "",
        ),
        ("bad queue", req(&|r| r.queue = "a b".into()), "queue", ""),
        (
            "long name",
            req(&|r| {
                r.filter = Some(pb::ListJobsFilter {
                    name: "n".repeat(129),
                    ..Default::default()
                })
            }),
            "filter.name",
            "128",
        ),
        (
            "time before 1970",
            req(&|r| {
                r.filter = Some(pb::ListJobsFilter {
                    after: Some(prost_types::Timestamp {
                        seconds: -5,
                        nanos: 0,
                    }),
                    ..Default::default()
                })
            }),
            "filter.after",
            "1970",
        ),
    ];
    for (what, r, field, limit) in cases {
        refuse(
            &redis,
            what,
            Code::InvalidArgument,
            field,
            limit,
            app.jobs().list_jobs(r),
        )
        .await;
    }
    // A token of one state is refused for another.
    let p = page(&app, q, S::Waiting, 1, "", None).await;
    assert!(!p.next_page_token.is_empty());
    let token = p.next_page_token.clone();
    refuse(
        &redis,
        "token of another state",
        Code::InvalidArgument,
        "page_token",
        "",
        app.jobs().list_jobs(pb::ListJobsRequest {
            queue: q.into(),
            state: S::Dead as i32,
            page_token: token,
            ..Default::default()
        }),
    )
    .await;
}
