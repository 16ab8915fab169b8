//! The longest single script call at the server's own batch caps (issue 11 item 1), measured
//! with Redis's SLOWLOG (every command logged, its execution time inside Redis): with
//! max-size error text on jobs that already carry a full error history, and with max-size
//! payloads (1 MiB, the `--max-payload-bytes` default) through every script that touches
//! jobs. A table of the longest call of each script is printed (run with --nocapture); the
//! target is about 10 ms on a quiet machine; the bounds asserted (`check`) leave room for a
//! loaded 2-core CI box: the printed figure is the measure.

use std::collections::BTreeMap;
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
            pause_group: false,
        })
        .collect();
    for r in store.fail(q, &items).await.expect("fail") {
        assert!(matches!(r, jobwire::store::Settle::Done(_)), "{r:?}");
    }
}

#[tokio::test]
async fn no_script_call_holds_redis_long_at_the_batch_caps() {
    if single_only("reads one server's SLOWLOG (a script costs the same on a cluster's master)") {
        return;
    }
    check_in_runs(at_the_batch_caps).await;
}

/// One run of [`no_script_call_holds_redis_long_at_the_batch_caps`] on a fresh Redis: each
/// script's longest call, µs.
async fn at_the_batch_caps() -> Vec<i64> {
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

    let mut c = slowlog_start(&redis).await;

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

    slowlog_report(&mut c, "max-size errors at the batch caps").await
}

/// The scripts by SHA1 and function name (as EVALSHA and FCALL name them in SLOWLOG), from
/// the crate itself, so a
/// script whose prelude or parts change is still named.
fn script_names() -> BTreeMap<String, &'static str> {
    jobwire::store::script_hashes()
        .into_iter()
        .flat_map(|(name, sha, function)| {
            std::iter::once((sha, name)).chain(function.map(|f| (f, name)))
        })
        .collect()
}

/// A connection without response timeout (SLOWLOG GET of every command takes a while to
/// arrive), after logging every command from now on.
async fn slowlog_start(redis: &TestRedis) -> redis::aio::MultiplexedConnection {
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
    c
}

/// The bounds, robust to a loaded 2-core box (where a call may lose the CPU for tens of ms
/// midway, and the suite's other tests run beside this one: one call was seen at 142 ms) yet
/// far below what unbudgeted calls took (before the byte budget, with max-size payloads,
/// every script's longest call but purge's and list_dead's passed 50 ms: lease 289 ms,
/// enqueue 208, replay 176, reap 173, delete_dead 144; with max-size error text a fail call
/// took 1331 ms). `longest` holds each script's longest call, µs: the median of them stays
/// under 40 ms, none passes 500 ms.
fn check(mut longest: Vec<i64>) -> Result<(), String> {
    assert!(
        !longest.is_empty(),
        "no script call found in the SLOWLOG (do the hashes in script_names match the server's scripts?)"
    );
    longest.sort_unstable();
    let median = longest[longest.len() / 2];
    let max = longest.last().copied().unwrap_or(0);
    if median >= 40_000 {
        return Err(format!("median of the scripts' longest calls {median} µs"));
    }
    if max >= 500_000 {
        return Err(format!("a call held Redis {max} µs"));
    }
    Ok(())
}

/// Runs `run` (a fresh Redis each time) until [`check`] passes, at most [`RUNS`] times. A
/// script without its byte budget is slow in every run (its calls do the same work each
/// time); a call that lost the CPU to a build beside the test is not: SLOWLOG measures wall
/// time inside Redis, and one such run failed the median bound on a loaded box.
async fn check_in_runs<F, Fut>(run: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Vec<i64>>,
{
    let mut failed = Vec::new();
    for _ in 0..RUNS {
        match check(run().await) {
            Ok(()) => return,
            Err(e) => {
                println!("run failed the bound: {e}");
                failed.push(e);
            }
        }
    }
    panic!("every run failed the bounds: {failed:?}");
}

/// Runs of a scenario before the bounds count as failed (see [`check_in_runs`]).
const RUNS: usize = 3;

/// Prints the longest call of each script since [`slowlog_start`], as Redis measured it;
/// returns each script's longest call, µs.
async fn slowlog_report(c: &mut redis::aio::MultiplexedConnection, what: &str) -> Vec<i64> {
    let names = script_names();
    let log: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(-1)
        .query_async(c)
        .await
        .expect("slowlog");
    // name -> (calls, longest µs)
    let mut per: BTreeMap<String, (usize, i64)> = BTreeMap::new();
    for e in log {
        let redis::Value::Array(f) = e else { continue };
        let (redis::Value::Int(us), redis::Value::Array(args)) = (&f[2], &f[3]) else {
            continue;
        };
        let arg = |i: usize| match args.get(i) {
            Some(redis::Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
            _ => String::new(),
        };
        let cmd = arg(0).to_uppercase();
        let name = if cmd == "EVALSHA" || cmd == "FCALL" {
            names
                .get(&arg(1))
                .map_or_else(|| format!("EVALSHA {}", arg(1)), |n| format!("{n}.lua"))
        } else {
            cmd
        };
        let e = per.entry(name).or_default();
        e.0 += 1;
        e.1 = e.1.max(*us);
    }
    println!("SLOWLOG, {what}: the longest call of each script");
    let mut rows: Vec<_> = per.iter().filter(|(n, _)| n.ends_with(".lua")).collect();
    rows.sort_by_key(|(_, (_, us))| std::cmp::Reverse(*us));
    for (name, (n, us)) in &rows {
        println!(
            "  {name:<20} {n:>6} calls  longest {:>8.3} ms",
            *us as f64 / 1000.0
        );
    }
    let longest: Vec<i64> = rows.iter().map(|(_, (_, us))| *us).collect();
    println!(
        "longest script call: {:.3} ms",
        longest.first().copied().unwrap_or(0) as f64 / 1000.0
    );
    longest
}

/// The max-size payload (`--max-payload-bytes` default) and how many such jobs: enough to
/// pass every per-call byte budget several times over (a call's cost then no longer grows
/// with the count, so more jobs would only cost the test memory).
const PAYLOAD: usize = 1024 * 1024;
const BIG_JOBS: usize = 40;

#[tokio::test]
async fn no_script_call_holds_redis_long_with_max_size_payloads() {
    if single_only("reads one server's SLOWLOG (a script costs the same on a cluster's master)") {
        return;
    }
    check_in_runs(with_max_size_payloads).await;
}

/// One run of [`no_script_call_holds_redis_long_with_max_size_payloads`] on a fresh Redis:
/// each script's longest call, µs.
async fn with_max_size_payloads() -> Vec<i64> {
    let (redis, app) = TestApp::with_redis().await;
    let store = redis.store().await;
    let q = QueueName::parse("big").expect("queue");
    let ids: Vec<String> = (0..BIG_JOBS).map(|i| format!("b{i}")).collect();
    let specs = |ids: &[String]| -> Vec<pb::JobSpec> {
        ids.iter()
            .map(|id| pb::JobSpec {
                max_attempts: Some(1000),
                payload: vec![b'p'; PAYLOAD],
                ..spec("big", id)
            })
            .collect()
    };
    // The reply to a batch of taken ids carries the existing jobs, payloads included.
    let mut jobs = app.jobs().max_decoding_message_size(usize::MAX);
    let mut c = slowlog_start(&redis).await;

    // One EnqueueBatch of max-size jobs, and the same again (every id taken: the existing
    // records come back).
    for _ in 0..2 {
        jobs.enqueue_batch(pb::EnqueueBatchRequest { jobs: specs(&ids) })
            .await
            .expect("enqueue");
    }
    // Lease all at the lease loop's cap, renew them all, then a quarter each: ack, fail
    // (retry), release, and let expire for the reaper.
    let leased = lease_all(&store, &q, BIG_JOBS, 60_000).await;
    let pairs = |l: &[LeasedJob]| -> Vec<(String, String)> {
        l.iter()
            .map(|l| (l.job.id.clone(), l.token.clone()))
            .collect()
    };
    store
        .renew(&q, &pairs(&leased), 60_000, true)
        .await
        .expect("renew");
    let quarter = BIG_JOBS / 4;
    store
        .ack(&q, &pairs(&leased[..quarter]))
        .await
        .expect("ack");
    fail_all(
        &store,
        &q,
        &leased[quarter..2 * quarter],
        Disposition::Retry,
        true,
    )
    .await;
    store
        .release(&q, &pairs(&leased[2 * quarter..3 * quarter]))
        .await
        .expect("release");
    fail_all(
        &store,
        &q,
        &leased[3 * quarter..],
        Disposition::Retry,
        false,
    )
    .await;
    let leased = lease_all(&store, &q, BIG_JOBS - quarter, 1).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    store.reap(&q, REAP_CAP).await.expect("reap");
    // Dead letters: all of them die, are listed, replayed by id, die again, are replayed by
    // filter, die again and are deleted by id.
    let _ = leased;
    let big = DeadFilter {
        error_type: "big".into(),
        ..Default::default()
    };
    let rest = BIG_JOBS - quarter;
    for round in 0..3 {
        let leased = lease_all(&store, &q, rest, 60_000).await;
        fail_all(&store, &q, &leased, Disposition::NoRetry, true).await;
        match round {
            0 => {
                store
                    .list_dead(&q, &DeadFilter::default(), None, 1000)
                    .await
                    .expect("list");
                store
                    .replay(&q, &DeadSelector::Ids(ids.clone()))
                    .await
                    .expect("replay ids");
            }
            1 => {
                store
                    .replay(&q, &DeadSelector::Filter(big.clone()))
                    .await
                    .expect("replay filter");
            }
            _ => {
                store
                    .delete_dead(&q, &DeadSelector::Ids(ids.clone()))
                    .await
                    .expect("delete ids");
            }
        }
    }
    // Purge waiting jobs, then delete the queue with jobs in every state.
    jobs.enqueue_batch(pb::EnqueueBatchRequest { jobs: specs(&ids) })
        .await
        .expect("enqueue");
    store.purge(&q, true, true).await.expect("purge");
    jobs.enqueue_batch(pb::EnqueueBatchRequest { jobs: specs(&ids) })
        .await
        .expect("enqueue");
    let leased = lease_all(&store, &q, quarter, 60_000).await;
    fail_all(
        &store,
        &q,
        &leased[..quarter / 2],
        Disposition::NoRetry,
        true,
    )
    .await;
    store.delete_queue(&q, true).await.expect("delete queue");

    slowlog_report(&mut c, "max-size payloads").await
}
