//! The longest single script call at the server's own batch caps, with max-size error text,
//! on jobs that already carry a full error history (issue 11 item 1): measured with Redis's
//! SLOWLOG (every command logged, its execution time inside Redis). The figure is printed
//! (run with --nocapture); the bound asserted is generous, the measure is the point.

use std::time::Duration;

use jobwire::jobs::{DeadFilter, Disposition, LeasedJob, QueueName};
use jobwire::lease::MAX_SETTLE_BATCH;
use jobwire::pb;
use jobwire::store::{DeadSelector, FailItem, Store};

use crate::harness::*;

/// The lease loop's batch cap (src/lease/queue_loop.rs) and the reaper's (background.rs).
const LEASE_CAP: usize = 256;
const REAP_CAP: usize = 100;
const JOBS: usize = MAX_SETTLE_BATCH;

async fn lease_all(store: &Store, q: &QueueName, n: usize, lease_ms: u64) -> Vec<LeasedJob> {
    let workers = vec!["w"; LEASE_CAP];
    let mut out = Vec::new();
    while out.len() < n {
        let want = (n - out.len()).min(LEASE_CAP);
        let call = jobwire::store::new_lease_call_id();
        let b = store
            .lease(q, &workers[..want], lease_ms, &call, &[])
            .await
            .expect("lease");
        // The reply arrived, as the server confirms it: expiry then fails these leases.
        store
            .confirm_lease_calls(q, &[call])
            .await
            .expect("confirm");
        assert!(!b.jobs.is_empty(), "leased {} of {n}", out.len());
        out.extend(b.jobs);
    }
    out
}

async fn fail_all(store: &Store, q: &QueueName, leased: &[LeasedJob], d: Disposition, big: bool) {
    let items: Vec<FailItem> = leased
        .iter()
        .map(|l| FailItem {
            id: l.job.id.clone(),
            token: l.token.clone(),
            disposition: d,
            message: if big {
                "m".repeat(8 * 1024)
            } else {
                "small".into()
            },
            error_type: if big { "big".into() } else { "small".into() },
            details: if big {
                "d".repeat(64 * 1024)
            } else {
                String::new()
            },
            retry_after_ms: None,
            pause_queue: false,
        })
        .collect();
    for r in store.fail(q, &items).await.expect("fail") {
        assert!(matches!(r, jobwire::store::Settle::Done(_)), "{r:?}");
    }
}

#[tokio::test]
async fn no_script_call_holds_redis_long_at_the_batch_caps() {
    let (redis, app) = TestApp::with_redis().await;
    let store = redis.store().await;
    let q = QueueName::parse("slow").expect("queue");
    let ids: Vec<String> = (0..JOBS).map(|i| format!("j{i}")).collect();
    let jobs = ids
        .iter()
        .map(|id| pb::JobSpec {
            max_attempts: Some(1000),
            ..spec("slow", id)
        })
        .collect();
    app.jobs()
        .enqueue_batch(pb::EnqueueBatchRequest { jobs })
        .await
        .expect("enqueue");
    // Full histories: a max-size first error, then nine small ones (a full count).
    for round in 0..10 {
        let leased = lease_all(&store, &q, JOBS, 60_000).await;
        fail_all(&store, &q, &leased, Disposition::Retry, round == 0).await;
    }

    // No response timeout: SLOWLOG GET of every command takes a while to arrive.
    let mut c = redis::Client::open(redis.url.as_str())
        .expect("url")
        .get_multiplexed_async_connection_with_config(
            &redis::AsyncConnectionConfig::new().set_response_timeout(None),
        )
        .await
        .expect("connect");
    for (k, v) in [
        ("slowlog-log-slower-than", "0"),
        ("slowlog-max-len", "1000000"),
    ] {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg(k)
            .arg(v)
            .query_async(&mut c)
            .await
            .expect("config");
    }
    let _: () = redis::cmd("SLOWLOG")
        .arg("RESET")
        .query_async(&mut c)
        .await
        .expect("reset");

    // Max-size failures at the settle cap, on full histories, retried then dead-lettered.
    let leased = lease_all(&store, &q, JOBS, 60_000).await;
    fail_all(&store, &q, &leased, Disposition::Retry, true).await;
    let leased = lease_all(&store, &q, JOBS, 60_000).await;
    fail_all(&store, &q, &leased, Disposition::NoRetry, true).await;
    // Dead-letter reads and moves at their caps.
    let big = DeadFilter {
        error_type: "big".into(),
        ..Default::default()
    };
    store
        .list_dead(&q, &DeadFilter::default(), None, 1000)
        .await
        .expect("list");
    store
        .list_dead(&q, &big, None, 1000)
        .await
        .expect("list filtered");
    store
        .replay(&q, &DeadSelector::Ids(ids.clone()))
        .await
        .expect("replay ids");
    let leased = lease_all(&store, &q, JOBS, 60_000).await;
    fail_all(&store, &q, &leased, Disposition::NoRetry, true).await;
    store
        .replay(&q, &DeadSelector::Filter(big.clone()))
        .await
        .expect("replay filter");
    // Expired leases at the reaper's cap.
    let _ = lease_all(&store, &q, REAP_CAP, 1).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    store.reap(&q, REAP_CAP).await.expect("reap");
    let rest = JOBS - REAP_CAP;
    let leased = lease_all(&store, &q, rest, 60_000).await;
    fail_all(&store, &q, &leased, Disposition::NoRetry, true).await;
    store
        .delete_dead(&q, &DeadSelector::Ids(ids.clone()))
        .await
        .expect("delete ids");

    let log: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(-1)
        .query_async(&mut c)
        .await
        .expect("slowlog");
    let mut calls: Vec<(i64, String)> = Vec::new();
    for e in log {
        let redis::Value::Array(f) = e else { continue };
        let us = match &f[2] {
            redis::Value::Int(i) => *i,
            _ => continue,
        };
        let args: Vec<String> = match &f[3] {
            redis::Value::Array(a) => a
                .iter()
                .skip(11)
                .take(3)
                .map(|v| match v {
                    redis::Value::BulkString(b) => {
                        String::from_utf8_lossy(&b[..b.len().min(24)]).into_owned()
                    }
                    other => format!("{other:?}"),
                })
                .collect(),
            _ => Vec::new(),
        };
        calls.push((us, args.join(" ")));
    }
    calls.sort_by_key(|c| std::cmp::Reverse(c.0));
    let scripts = calls
        .iter()
        .filter(|(_, a)| a.starts_with("jw:wake:"))
        .count();
    println!(
        "SLOWLOG: {} commands, {scripts} script calls; the longest:",
        calls.len()
    );
    for (us, args) in calls.iter().take(12) {
        println!("  {:>8.3} ms  {args}", *us as f64 / 1000.0);
    }
    let longest = calls.first().map_or(0, |c| c.0);
    println!("longest single call: {:.3} ms", longest as f64 / 1000.0);
    assert!(longest < 100_000, "a call held Redis {longest} µs");
}
