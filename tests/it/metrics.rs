//! `/metrics`: the exact values of a scripted scenario, bounded job_name labels, and the
//! exported names (the alert rules and the dashboard may only use those). Each test uses its
//! own queue names: the recorder is process-wide, shared by every server in this binary.

use std::collections::BTreeSet;
use std::time::Duration;

use jobwire::pb;
use pb::FailDisposition as D;

use crate::harness::*;

pub async fn scrape(app: &TestApp) -> String {
    http_get(app.http, "/metrics").await
}

/// The value of a series (see [`metric_value`]).
pub fn value(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    metric_value(text, name, labels)
}

/// Every metric family name in the exposition (histogram series folded into their family).
pub fn families(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| {
            l.strip_prefix("# TYPE ")
                .and_then(|r| r.split_whitespace().next())
        })
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn a_scripted_scenario_gives_exact_counters_and_gauges() {
    let (redis, app) = TestApp::with_redis().await;
    // Three jobs waiting; make them ready 10 s ago, as if they had waited that long.
    for i in 0..3 {
        enqueue(&app, spec("m-wait", &format!("w{i}"))).await;
    }
    let mut c = redis.conn().await;
    let now_ms: i64 = {
        let (s, us): (i64, i64) = redis::cmd("TIME").query_async(&mut c).await.expect("time");
        s * 1000 + us / 1000
    };
    for i in 0..3 {
        redis
            .set_ready_ms("m-wait", &format!("w{i}"), now_ms - 10_000 - i)
            .await;
    }
    // One job failed 3 times (max_attempts 3): failures 3, retries 2, dead-lettered 1.
    enqueue(
        &app,
        pb::JobSpec {
            name: "charge-card".into(),
            max_attempts: Some(3),
            ..spec("m-fail", "f")
        },
    )
    .await;
    let mut w = TestWorker::open(&app, &["m-fail"], 1, "w").await;
    for _ in 0..3 {
        let l = w.lease().await;
        w.fail(&l, D::Retry, "502", "upstream", None).await;
    }
    let text = scrape(&app).await;
    let age = value(
        &text,
        "jobwire_queue_oldest_waiting_age_seconds",
        &[("queue", "m-wait")],
    )
    .expect("age");
    assert!((10.0..12.0).contains(&age), "oldest waiting age {age}");
    assert_eq!(
        value(
            &text,
            "jobwire_queue_jobs",
            &[("queue", "m-wait"), ("state", "waiting")]
        ),
        Some(3.0)
    );
    assert_eq!(
        value(&text, "jobwire_jobs_enqueued_total", &[("queue", "m-wait")]),
        Some(3.0)
    );
    let fail = [("queue", "m-fail"), ("job_name", "charge-card")];
    assert_eq!(
        value(
            &text,
            "jobwire_job_failures_total",
            &[fail[0], fail[1], ("disposition", "retry")]
        ),
        Some(3.0)
    );
    assert_eq!(value(&text, "jobwire_job_retries_total", &fail), Some(2.0));
    assert_eq!(
        value(
            &text,
            "jobwire_jobs_dead_lettered_total",
            &[fail[0], fail[1], ("reason", "ATTEMPTS_EXHAUSTED")]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(&text, "jobwire_jobs_leased_total", &[("queue", "m-fail")]),
        Some(3.0)
    );
    assert_eq!(
        value(
            &text,
            "jobwire_queue_jobs",
            &[("queue", "m-fail"), ("state", "dead")]
        ),
        Some(1.0)
    );
    assert!(value(
        &text,
        "jobwire_dead_letter_oldest_age_seconds",
        &[("queue", "m-fail")]
    )
    .is_some());
    assert_eq!(
        value(&text, "jobwire_workers_connected", &[("queue", "m-fail")]),
        Some(1.0)
    );
    assert_eq!(
        value(
            &text,
            "jobwire_job_run_seconds_count",
            &[("queue", "m-fail")]
        ),
        Some(3.0)
    );

    // Replay: the dead-letter depth and its oldest age go to 0 (gauges refresh within 2 s).
    app.dead()
        .replay_dead_letters(pb::ReplayDeadLettersRequest {
            queue: "m-fail".into(),
            job_ids: vec!["f".into()],
            filter: None,
        })
        .await
        .expect("replay");
    eventually(Duration::from_secs(5), || async {
        let t = scrape(&app).await;
        value(
            &t,
            "jobwire_queue_jobs",
            &[("queue", "m-fail"), ("state", "dead")],
        ) == Some(0.0)
            && value(
                &t,
                "jobwire_dead_letter_oldest_age_seconds",
                &[("queue", "m-fail")],
            ) == Some(0.0)
    })
    .await;
}

#[tokio::test]
async fn ten_thousand_job_names_do_not_make_ten_thousand_series() {
    let (_redis, app) = TestApp::with_redis().await;
    for batch in 0..10 {
        let jobs = (0..1000)
            .map(|i| pb::JobSpec {
                name: format!("name-{batch}-{i}"),
                ..spec("m-names", &format!("{batch}-{i}"))
            })
            .collect();
        app.jobs()
            .enqueue_batch(pb::EnqueueBatchRequest { jobs })
            .await
            .expect("batch");
    }
    let mut w = TestWorker::open(&app, &["m-names"], 1000, "w").await;
    w.ack_all(10_000).await;
    let text = scrape(&app).await;
    let series: Vec<&str> = text
        .lines()
        .filter(|l| {
            l.starts_with("jobwire_jobs_completed_total{") && l.contains("queue=\"m-names\"")
        })
        .collect();
    assert_eq!(series.len(), 101, "100 names and `other`");
    assert_eq!(
        value(
            &text,
            "jobwire_jobs_completed_total",
            &[("queue", "m-names"), ("job_name", "other")]
        ),
        Some(9_900.0)
    );
}

#[tokio::test]
async fn every_metric_the_alerts_and_dashboard_use_is_exported() {
    let (_redis, app) = TestApp::with_redis().await;
    // Touch every code path once so that every family has a series.
    enqueue(
        &app,
        pb::JobSpec {
            max_attempts: Some(1),
            ..spec("m-all", "a")
        },
    )
    .await;
    enqueue(&app, spec("m-all", "a")).await;
    enqueue(&app, spec("m-all", "b")).await;
    enqueue(
        &app,
        pb::JobSpec {
            max_attempts: Some(2),
            ..spec("m-all", "c")
        },
    )
    .await;
    // A job that stays waiting (no worker on its queue): the per-priority waiting age.
    enqueue(&app, spec("m-all-waiting", "w")).await;
    {
        let mut w = TestWorker::open(&app, &["m-all"], 3, "w").await;
        let mut leases = [w.lease().await, w.lease().await, w.lease().await];
        leases.sort_by_key(|l| l.job.as_ref().map(|j| j.job_id.clone()));
        w.fail(&leases[0], D::Retry, "x", "t", None).await;
        w.ack(&leases[1]).await;
        // c: its stream ends without settling; the lease expires (lease_expirations_total).
    }
    eventually(Duration::from_secs(8), || async {
        value(
            &scrape(&app).await,
            "jobwire_lease_expirations_total",
            &[("queue", "m-all")],
        )
        .unwrap_or(0.0)
            >= 1.0
    })
    .await;
    let mut exported = families(&scrape(&app).await);
    // Exported only by a server with --tls-cert (tests/security/tls.rs checks it there).
    exported.insert("jobwire_tls_cert_expiry_timestamp_seconds".to_owned());
    // Exported only by a server that watches a file (--auth-file, --tls-cert,
    // --metrics-token-file); tests/security/reload.rs counts a refused reload there.
    exported.insert("jobwire_config_reloads_total".to_owned());
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut used = BTreeSet::new();
    for file in [
        "helm/jobwire/files/alerts.yaml",
        "helm/jobwire/files/dashboard.json",
    ] {
        let text = std::fs::read_to_string(root.join(file)).expect(file);
        let code: String = text
            .lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .collect::<Vec<_>>()
            .join("\n");
        for word in code.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if word.starts_with("jobwire_") || word.starts_with("grpc_server_") {
                let family = ["_bucket", "_count", "_sum"]
                    .iter()
                    .find_map(|s| word.strip_suffix(s).filter(|f| exported.contains(*f)))
                    .unwrap_or(word);
                used.insert(family.to_owned());
            }
        }
    }
    assert!(used.len() >= 10, "the files use the metrics: {used:?}");
    let missing: Vec<_> = used.difference(&exported).collect();
    assert!(
        missing.is_empty(),
        "used but not exported: {missing:?}\nexported: {exported:?}"
    );
    // The chart's checks read the exported names from this list: it must be exactly what a
    // live server exports.
    let listed: BTreeSet<String> =
        std::fs::read_to_string(root.join("tests/chart/exported_metrics.txt"))
            .expect("exported_metrics.txt")
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(str::to_owned)
            .collect();
    assert_eq!(
        listed, exported,
        "tests/chart/exported_metrics.txt is out of date"
    );
    // HELP on every jobwire metric.
    let text = scrape(&app).await;
    for f in families(&text).iter().filter(|f| f.starts_with("jobwire_")) {
        assert!(text.contains(&format!("# HELP {f} ")), "no HELP for {f}");
    }
}

#[tokio::test]
async fn the_oldest_waiting_age_looks_across_priority_levels() {
    let (redis, app) = TestApp::with_redis().await;
    enqueue(
        &app,
        pb::JobSpec {
            priority: -5,
            ..spec("m-levels", "old-low")
        },
    )
    .await;
    enqueue(
        &app,
        pb::JobSpec {
            priority: 7,
            ..spec("m-levels", "new-high")
        },
    )
    .await;
    enqueue(
        &app,
        pb::JobSpec {
            priority: 7,
            ..spec("m-levels", "newer-high")
        },
    )
    .await;
    // The low-priority job became ready 20 s ago; the high-priority ones just now.
    let mut c = redis.conn().await;
    let (s, us): (i64, i64) = redis::cmd("TIME").query_async(&mut c).await.expect("time");
    redis
        .set_ready_ms("m-levels", "old-low", s * 1000 + us / 1000 - 20_000)
        .await;
    let stats = pb::queue_service_client::QueueServiceClient::new(app.channel.clone())
        .get_queue_stats(pb::GetQueueStatsRequest {
            queue: "m-levels".into(),
        })
        .await
        .expect("stats")
        .into_inner()
        .stats
        .expect("stats");
    let age = stats.oldest_waiting_age.expect("age");
    assert!(
        (20..22).contains(&age.seconds),
        "oldest waiting age {age:?}"
    );
    assert_eq!(stats.waiting, 3);
}

/// A cancelled job's Fail (issue 32, item 11): the job ends CANCELLED and never retries, so
/// the failure counts as `disposition="cancelled"`, not as a retry (which the failure-ratio
/// alert and dashboards read as a failing handler).
#[tokio::test]
async fn a_cancelled_jobs_fail_counts_as_cancelled_not_as_a_retry() {
    let (_redis, app) = TestApp::with_redis().await;
    crate::cancel::set_grace(&app, "m-cancel", Duration::from_secs(30)).await;
    let mut j = spec("m-cancel", "c1");
    j.max_attempts = Some(3);
    enqueue(&app, j).await;
    let mut w = TestWorker::open(&app, &["m-cancel"], 1, "w").await;
    let l = w.lease().await;
    let r = crate::cancel::cancel(&app, "m-cancel", "c1", "no longer needed")
        .await
        .expect("cancel");
    assert!(r.cancelled);
    assert!(w.cancel_within(Duration::from_secs(5)).await.is_some());
    let s = w.fail(&l, D::Retry, "stopped", "cancelled", None).await;
    assert_eq!(s.code, 0, "{s:?}");
    let job = get_job(&app, "m-cancel", "c1").await;
    assert_eq!(crate::cancel::state(&job), pb::JobState::Cancelled);
    let text = scrape(&app).await;
    let failures = |d: &str| {
        value(
            &text,
            "jobwire_job_failures_total",
            &[
                ("queue", "m-cancel"),
                ("job_name", "test-job"),
                ("disposition", d),
            ],
        )
        .unwrap_or(0.0)
    };
    assert_eq!(failures("retry"), 0.0, "not a retry: it ended CANCELLED");
    assert_eq!(failures("cancelled"), 1.0);
    let retries = value(
        &text,
        "jobwire_job_retries_total",
        &[("queue", "m-cancel"), ("job_name", "test-job")],
    );
    assert_eq!(retries.unwrap_or(0.0), 0.0);
}
