//! Per-queue limits and control, enforced by the server for the whole fleet: concurrency
//! limit across two replicas, pause and resume, worker-reported throttling, queue config in
//! Redis (API and file), stats, fairness across a stream's queues, retention.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use jobwire::pb;
use pb::queue_service_client::QueueServiceClient;
use pb::FailDisposition as D;
use tonic_types::StatusExt;

use crate::harness::*;

fn queues(app: &TestApp) -> QueueServiceClient<tonic::transport::Channel> {
    QueueServiceClient::new(app.channel.clone())
}

async fn configure(app: &TestApp, queue: &str, config: pb::QueueConfig) -> pb::QueueConfig {
    queues(app)
        .update_queue_config(pb::UpdateQueueConfigRequest {
            queue: queue.into(),
            config: Some(config),
            update_mask: None,
        })
        .await
        .expect("update config")
        .into_inner()
        .config
        .expect("config")
}

async fn fill(app: &TestApp, queue: &str, n: usize) {
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let jobs = chunk
            .iter()
            .map(|i| spec(queue, &format!("j{i}")))
            .collect();
        app.jobs()
            .enqueue_batch(pb::EnqueueBatchRequest { jobs })
            .await
            .expect("batch");
    }
}

#[tokio::test]
async fn max_active_holds_across_two_replicas_and_is_used_fully() {
    let redis = TestRedis::start().await;
    let a = TestApp::spawn(test_config(&redis.url)).await;
    let b = TestApp::spawn(test_config(&redis.url)).await;
    configure(
        &a,
        "conc",
        pb::QueueConfig {
            max_active: Some(3),
            ..Default::default()
        },
    )
    .await;
    fill(&a, "conc", 60).await;
    let held = Arc::new(AtomicI64::new(0));
    let peak = Arc::new(AtomicI64::new(0));
    let mut tasks = Vec::new();
    for i in 0..6 {
        let app = if i % 2 == 0 { &a } else { &b };
        let mut w = TestWorker::open(app, &["conc"], 2, &format!("w{i}")).await;
        let (held, peak) = (held.clone(), peak.clone());
        tasks.push(tokio::spawn(async move {
            let mut done = 0;
            while let Some(l) = w.lease_within(Duration::from_secs(3)).await {
                let now = held.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(30)).await;
                held.fetch_sub(1, Ordering::SeqCst);
                assert_eq!(w.ack(&l).await.code, 0);
                done += 1;
            }
            done
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.expect("worker");
    }
    assert_eq!(total, 60, "every job ran once");
    assert_eq!(
        peak.load(Ordering::SeqCst),
        3,
        "never more than max_active, and the limit was reached"
    );
}

#[tokio::test]
async fn a_paused_queue_accepts_enqueues_leases_nothing_and_resume_wakes_at_once() {
    let (_redis, app) = TestApp::with_redis().await;
    queues(&app)
        .pause_queue(pb::PauseQueueRequest {
            queue: "paused".into(),
        })
        .await
        .expect("pause");
    let mut w = TestWorker::open(&app, &["paused"], 1, "w").await;
    let r = enqueue(&app, spec("paused", "j")).await;
    assert!(r.created, "enqueue is accepted while paused");
    assert!(
        w.lease_within(Duration::from_millis(500)).await.is_none(),
        "nothing leased while paused"
    );
    let stats = queues(&app)
        .get_queue_stats(pb::GetQueueStatsRequest {
            queue: "paused".into(),
        })
        .await
        .expect("stats")
        .into_inner()
        .stats
        .expect("stats");
    assert!(stats.paused);
    assert_eq!(stats.waiting, 1);
    assert_eq!(stats.workers_connected, 1);
    queues(&app)
        .resume_queue(pb::ResumeQueueRequest {
            queue: "paused".into(),
        })
        .await
        .expect("resume");
    // The safety poll is 2 s: a lease well inside it came from the resume's wake-up.
    assert!(
        w.lease_within(Duration::from_millis(1000)).await.is_some(),
        "resume wakes the subscriber"
    );
}

#[tokio::test]
async fn a_worker_reported_rate_limit_can_pause_the_whole_queue() {
    let (_redis, app) = TestApp::with_redis().await;
    fill(&app, "throttled", 3).await;
    let mut w = TestWorker::open(&app, &["throttled"], 1, "w").await;
    let l = w.lease().await;
    let job = l.job.clone().expect("job");
    w.send(pb::subscribe_request::Message::Fail(pb::FailRequest {
        pause_group: false,
        queue: "throttled".into(),
        job_id: job.job_id.clone(),
        lease_token: l.lease_token.clone(),
        disposition: D::RateLimited as i32,
        error: Some(pb::JobError {
            message: "429 too many requests".into(),
            error_type: "rate_limited".into(),
            details: String::new(),
        }),
        retry_after: Some(ms(Duration::from_millis(800))),
        pause_queue: true,
    }));
    assert_eq!(w.settled().await.state, pb::JobState::Delayed as i32);
    let started = tokio::time::Instant::now();
    // Two other jobs wait, and the worker has a credit: still nothing for ~800 ms.
    assert!(
        w.lease_within(Duration::from_millis(600)).await.is_none(),
        "the queue is throttled"
    );
    let next = w.lease().await;
    assert!(started.elapsed() >= Duration::from_millis(600));
    assert_eq!(
        next.attempt, 1,
        "no attempt was consumed by the rate-limited return"
    );
    // pause_queue only makes sense with RATE_LIMITED.
    let s = app
        .workers()
        .fail(pb::FailRequest {
            queue: "throttled".into(),
            job_id: "x".into(),
            lease_token: "t".into(),
            disposition: D::Retry as i32,
            pause_queue: true,
            ..Default::default()
        })
        .await
        .expect_err("pause_queue with RETRY");
    assert_eq!(
        s.get_error_details()
            .bad_request()
            .map(|b| b.field_violations[0].field.clone()),
        Some("pause_queue".into())
    );
}

#[tokio::test]
async fn queue_defaults_apply_and_a_job_overrides_them() {
    let (_redis, app) = TestApp::with_redis().await;
    let backoff = pb::Backoff {
        kind: pb::BackoffKind::Fixed as i32,
        delay: Some(ms(Duration::from_millis(10))),
        jitter: 0.0,
        max_delay: None,
    };
    let c = configure(
        &app,
        "defaults",
        pb::QueueConfig {
            default_max_attempts: Some(4),
            default_backoff: Some(backoff),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(c.default_max_attempts, Some(4));
    assert_eq!(
        c.retention.expect("retention").keep_completed,
        Some(1000),
        "effective defaults are shown"
    );
    let a = enqueue(&app, spec("defaults", "a")).await.job.expect("job");
    assert_eq!(a.max_attempts, 4);
    assert_eq!(
        a.backoff.expect("backoff").kind,
        pb::BackoffKind::Fixed as i32
    );
    let b = enqueue(
        &app,
        pb::JobSpec {
            max_attempts: Some(2),
            ..spec("defaults", "b")
        },
    )
    .await
    .job
    .expect("job");
    assert_eq!(b.max_attempts, 2, "the job's own option wins");
    // An update mask changes only the named field; a named field left unset is reset.
    let c = queues(&app)
        .update_queue_config(pb::UpdateQueueConfigRequest {
            queue: "defaults".into(),
            config: Some(pb::QueueConfig {
                max_active: Some(9),
                ..Default::default()
            }),
            update_mask: Some(prost_types::FieldMask {
                paths: vec!["max_active".into(), "default_max_attempts".into()],
            }),
        })
        .await
        .expect("update")
        .into_inner()
        .config
        .expect("config");
    assert_eq!(c.max_active, Some(9));
    assert_eq!(c.default_max_attempts, None);
    assert!(
        c.default_backoff.is_some(),
        "fields outside the mask are kept"
    );
}

#[tokio::test]
async fn invalid_config_is_refused_with_the_field_and_changes_nothing() {
    let (_redis, app) = TestApp::with_redis().await;
    let cases: Vec<(pb::QueueConfig, Option<Vec<&str>>, &str)> = vec![
        (
            pb::QueueConfig {
                rate_limit: Some(pb::RateLimit {
                    max: 0,
                    period: Some(ms(Duration::from_secs(1))),
                }),
                ..Default::default()
            },
            None,
            "config.rate_limit.max",
        ),
        (
            pb::QueueConfig {
                rate_limit: Some(pb::RateLimit {
                    max: 5,
                    period: None,
                }),
                ..Default::default()
            },
            None,
            "config.rate_limit.period",
        ),
        (
            pb::QueueConfig {
                max_active: Some(0),
                ..Default::default()
            },
            None,
            "config.max_active",
        ),
        (
            pb::QueueConfig {
                default_max_attempts: Some(0),
                ..Default::default()
            },
            None,
            "config.default_max_attempts",
        ),
        (
            pb::QueueConfig {
                default_backoff: Some(pb::Backoff {
                    kind: 1,
                    jitter: 3.0,
                    ..Default::default()
                }),
                ..Default::default()
            },
            None,
            "config.default_backoff.jitter",
        ),
        (
            pb::QueueConfig::default(),
            Some(vec!["bogus"]),
            "update_mask",
        ),
    ];
    for (config, paths, field) in cases {
        let s = queues(&app)
            .update_queue_config(pb::UpdateQueueConfigRequest {
                queue: "cfg".into(),
                config: Some(config),
                update_mask: paths.map(|p| prost_types::FieldMask {
                    paths: p.into_iter().map(String::from).collect(),
                }),
            })
            .await
            .expect_err(field);
        assert_eq!(s.code(), tonic::Code::InvalidArgument);
        assert_eq!(
            s.get_error_details()
                .bad_request()
                .map(|b| b.field_violations[0].field.clone()),
            Some(field.to_owned())
        );
    }
    let c = queues(&app)
        .get_queue_config(pb::GetQueueConfigRequest {
            queue: "cfg".into(),
        })
        .await
        .expect("get")
        .into_inner()
        .config
        .expect("config");
    assert_eq!(
        (c.max_active, c.rate_limit, c.default_max_attempts),
        (None, None, None)
    );
}

#[tokio::test]
async fn the_config_file_is_applied_at_start() {
    let redis = TestRedis::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("queues.toml");
    std::fs::write(&path, "[queues.filed]\nmax_active = 4\nrate_limit = { max = 20, period = \"2s\" }\nretention = { keep_completed = 7 }\n").expect("write");
    let mut cfg = test_config(&redis.url);
    cfg.config = Some(path);
    let app = TestApp::spawn(cfg).await;
    let c = queues(&app)
        .get_queue_config(pb::GetQueueConfigRequest {
            queue: "filed".into(),
        })
        .await
        .expect("get")
        .into_inner()
        .config
        .expect("config");
    assert_eq!(c.max_active, Some(4));
    let rl = c.rate_limit.expect("rate limit");
    assert_eq!((rl.max, rl.period.map(|p| p.seconds)), (20, Some(2)));
    assert_eq!(c.retention.expect("retention").keep_completed, Some(7));
    let listed = queues(&app)
        .list_queues(pb::ListQueuesRequest {})
        .await
        .expect("list")
        .into_inner()
        .queues;
    assert!(listed.iter().any(|q| q.queue == "filed"));
}

#[tokio::test]
async fn a_stream_on_two_busy_queues_serves_both_in_turn() {
    let (_redis, app) = TestApp::with_redis().await;
    fill(&app, "fair-a", 50).await;
    fill(&app, "fair-b", 50).await;
    let mut w = TestWorker::open(&app, &["fair-a", "fair-b"], 1, "w").await;
    let mut from_a = 0;
    for _ in 0..20 {
        let l = w.lease().await;
        if l.job.as_ref().expect("job").queue == "fair-a" {
            from_a += 1;
        }
        w.ack(&l).await;
    }
    assert!(
        (8..=12).contains(&from_a),
        "{from_a} of 20 from fair-a: both queues are served"
    );
}

#[tokio::test]
async fn retention_keeps_redis_bounded_while_100k_jobs_pass() {
    let (redis, app) = TestApp::with_redis().await;
    configure(
        &app,
        "ret",
        pb::QueueConfig {
            retention: Some(pb::Retention {
                keep_completed: Some(1000),
                keep_dead: Some(10),
                ..Default::default()
            }),
            ..Default::default()
        },
    )
    .await;
    let mut c = redis.conn().await;
    let mut w = TestWorker::open(&app, &["ret"], 1000, "w").await;
    let mut before = 0;
    for round in 0..100 {
        let jobs = (0..1000)
            .map(|i| spec("ret", &format!("{round}-{i}")))
            .collect();
        app.jobs()
            .enqueue_batch(pb::EnqueueBatchRequest { jobs })
            .await
            .expect("batch");
        w.ack_all(1000).await;
        if round == 4 {
            // Retention is full from here on: memory must not grow with the jobs that follow.
            before = redis.used_memory().await;
        }
    }
    let after = redis.used_memory().await;
    let completed: i64 = redis::cmd("ZCARD")
        .arg("jw:{ret}:completed")
        .query_async(&mut c)
        .await
        .expect("zcard");
    let keys = redis.dbsize().await;
    println!("retention: 100 000 jobs; used_memory after 5 000 jobs {before} B, after 100 000 jobs {after} B; {keys} keys");
    assert_eq!(completed, 1000);
    assert!(keys < 1100, "{keys} keys after 100 000 jobs");
    assert!(
        after - before < 2_000_000,
        "used_memory grew by {} bytes over 95 000 jobs",
        after - before
    );
    // Dead letters are bounded by count too.
    for i in 0..30 {
        enqueue(&app, spec("ret", &format!("dead-{i}"))).await;
        let l = w.lease().await;
        w.fail(&l, D::NoRetry, "x", "t", None).await;
    }
    let dead: i64 = redis::cmd("ZCARD")
        .arg("jw:{ret}:dead")
        .query_async(&mut c)
        .await
        .expect("zcard");
    assert_eq!(dead, 10);
}

#[tokio::test]
async fn purge_deletes_waiting_and_delayed_but_not_leased_jobs() {
    let (_redis, app) = TestApp::with_redis().await;
    fill(&app, "purge", 5).await;
    enqueue(
        &app,
        pb::JobSpec {
            delay: Some(ms(Duration::from_secs(60))),
            ..spec("purge", "later")
        },
    )
    .await;
    let mut w = TestWorker::open(&app, &["purge"], 1, "w").await;
    let l = w.lease().await;
    let r = queues(&app)
        .purge_queue(pb::PurgeQueueRequest {
            queue: "purge".into(),
            ..Default::default()
        })
        .await
        .expect("purge")
        .into_inner();
    assert_eq!(r.deleted, 5, "4 waiting + 1 delayed");
    assert_eq!(w.ack(&l).await.code, 0, "the leased job was left alone");
}
