//! Issue 12, requirement 1: every Lua script declares every key it touches in KEYS (Redis
//! Cluster refuses a script that builds a key inside), and all the keys of one call share
//! the queue's hash slot.
//!
//! A real redis-server is watched with MONITOR (`redis-cli monitor`, a child process) while
//! a real jobwire server and a `Store` drive every script: enqueue (single, batch with
//! priorities 0, + and -, delayed, a taken id), lease, confirm, ack (with retention
//! trimming, one with a result), an ack that leases the next job (ack_lease), a progress report, fail (retry and dead), renew, release, release of a lost lease call, the
//! server's reap of an expired lease (and the due index after it), list / get / replay (by
//! ids and by filter) / delete dead jobs, queue config and pause, stats, purge and delete of
//! the queue. Then, for every FCALL or EVALSHA in the stream, each command its script ran (the lines
//! MONITOR tags `lua`) is checked: the keys Redis itself finds in it (`COMMAND GETKEYS`)
//! must all be among the call's declared keys, and the declared keys must share one hash
//! tag. Every script must have been seen, so the test cannot pass by missing one.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use jobwire::jobs::{Disposition, ProgressReport, QueueName};
use jobwire::pb;
use jobwire::store::{AckItem, FailItem, Settle, Store};

use crate::harness::*;

mod drives;
mod monitor;
use drives::{cancel_and_expiry, groups};
use monitor::{calls, hash_tag, keys_of, show, Monitor};

pub(super) const Q: &str = "dk";

/// Every script jobwire runs, by the name in its file's first comment line.
const SCRIPTS: [&str; 27] = [
    "enqueue",
    "lease",
    "ack",
    "ack_lease",
    "fail",
    "reap",
    "renew",
    "release",
    "release_call",
    "confirm_calls",
    "replay",
    "delete_dead",
    "list_dead",
    "list_jobs",
    "set_meta",
    "purge",
    "waiting_stats",
    "delete_queue",
    "get_job",
    "group_admin",
    "groups_read",
    "due",
    "intent",
    "register",
    "progress",
    "cancel",
    "delete_job",
];

pub(super) async fn lease(
    store: &Store,
    q: &QueueName,
    n: usize,
    lease_ms: u64,
) -> Vec<(String, String)> {
    let call = jobwire::store::new_lease_call_id();
    let b = store
        .lease(q, &vec!["w"; n], lease_ms, &call, &[])
        .await
        .expect("lease");
    store
        .confirm_lease_calls(q, &[call])
        .await
        .expect("confirm");
    b.jobs.into_iter().map(|l| (l.job.id, l.token)).collect()
}

pub(super) fn fail_item(id: &str, token: &str, disposition: Disposition) -> FailItem {
    FailItem {
        id: id.into(),
        token: token.into(),
        disposition,
        message: "boom".into(),
        error_type: "E".into(),
        details: "d".into(),
        retry_after_ms: None,
        pause_queue: false,
        pause_group: false,
    }
}

/// Drives every script once or more against `redis` through `app` and `store`.
async fn drive(redis: &TestRedis, app: &TestApp, store: &Store) {
    let q = QueueName::parse(Q).expect("queue");
    let mut queues = pb::queue_service_client::QueueServiceClient::new(app.channel.clone());
    queues
        .update_queue_config(pb::UpdateQueueConfigRequest {
            queue: Q.into(),
            config: Some(pb::QueueConfig {
                retention: Some(pb::Retention {
                    keep_completed: Some(1),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            update_mask: None,
        })
        .await
        .expect("config");
    // Ids with braces and colons: a job's storage must not depend on them.
    enqueue(app, spec(Q, "one:{x}")).await;
    let mut jobs = Vec::new();
    for (i, pri) in [0, 0, 5, 5, -5, -5, 1000, -1000].into_iter().enumerate() {
        jobs.push(pb::JobSpec {
            priority: pri,
            max_attempts: Some(3),
            ..spec(Q, &format!("b{i}"))
        });
    }
    jobs.push(pb::JobSpec {
        delay: Some(ms(Duration::from_millis(50))),
        ..spec(Q, "late")
    });
    jobs.push(spec(Q, "one:{x}")); // taken: the existing job comes back
    app.jobs()
        .enqueue_batch(pb::EnqueueBatchRequest { jobs })
        .await
        .expect("batch");

    // Leases, all of them (the delayed one is promoted by the lease after its delay).
    tokio::time::sleep(Duration::from_millis(80)).await;
    let held = lease(store, &q, 20, 30_000).await;
    assert_eq!(held.len(), 10, "{held:?}");
    // Highest priority first, FIFO within a level, lowest last.
    let order: Vec<&str> = held.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(order[..3], ["b6", "b2", "b3"], "{order:?}");
    assert_eq!(order[8..], ["b5", "b7"], "{order:?}");
    store
        .renew(&q, &held[..2], 30_000, false)
        .await
        .expect("renew");
    // A progress report with a checkpoint, then acks, one with a result (kept: keep 1).
    let report = ProgressReport {
        progress: Some(40),
        message: Some("half".into()),
        checkpoint: Some(b"step-2".to_vec()),
    };
    let saved = store
        .report_progress(&q, &held[0].0, &held[0].1, &report)
        .await
        .expect("progress");
    assert!(matches!(saved, Settle::Done(_)), "{saved:?}");
    let acks: Vec<AckItem> = held[..3]
        .iter()
        .enumerate()
        .map(|(i, (id, token))| AckItem {
            id: id.clone(),
            token: token.clone(),
            result: (i == 2).then(|| b"done".to_vec()),
        })
        .collect();
    store.ack(&q, &acks).await.expect("ack");
    store.release(&q, &held[3..4]).await.expect("release");
    let fails = vec![
        fail_item(&held[4].0, &held[4].1, Disposition::Retry),
        fail_item(&held[5].0, &held[5].1, Disposition::NoRetry),
        fail_item(&held[6].0, &held[6].1, Disposition::NoRetry),
        fail_item(&held[7].0, &held[7].1, Disposition::NoRetry),
    ];
    store.fail(&q, &fails).await.expect("fail");
    // An ack that leases the next job in the same call (ack_lease.lua), with a result.
    enqueue(app, spec(Q, "next")).await;
    let call = jobwire::store::new_lease_call_id();
    let acked = [AckItem {
        id: held[8].0.clone(),
        token: held[8].1.clone(),
        result: Some(b"r".to_vec()),
    }];
    let (outcomes, batch) = store
        .ack_lease(&q, &acked, &["w"], 30_000, &call, &[])
        .await
        .expect("ack and lease");
    assert!(matches!(outcomes[..], [Settle::Done(_)]), "{outcomes:?}");
    let batch = batch.expect("the acks fit the call");
    assert_eq!(batch.jobs.len(), 1, "{batch:?}");
    store
        .confirm_lease_calls(&q, &[call])
        .await
        .expect("confirm");
    // A lease call whose reply was "lost".
    let call = jobwire::store::new_lease_call_id();
    store
        .lease(&q, &["w"], 30_000, &call, &[])
        .await
        .expect("lease");
    store
        .release_lease_call(&q, &call, 1000)
        .await
        .expect("release call");
    // An expired lease, reaped by the server's reaper (reap.lua, then due.lua).
    enqueue(
        app,
        pb::JobSpec {
            max_attempts: Some(1),
            priority: 7,
            ..spec(Q, "expires")
        },
    )
    .await;
    let short = lease(store, &q, 1, 100).await;
    assert_eq!(short[0].0, "expires");
    eventually(Duration::from_secs(10), || async {
        get_job(app, Q, "expires").await.state == pb::JobState::Dead as i32
    })
    .await;
    store.reap(&q, 100).await.expect("reap");

    // Every state listed (ListJobs), page by page with a page token, and a filter.
    for state in [
        pb::JobState::Waiting,
        pb::JobState::Delayed,
        pb::JobState::Active,
        pb::JobState::Completed,
        pb::JobState::Dead,
        pb::JobState::Cancelled,
        pb::JobState::Expired,
    ] {
        let mut token = String::new();
        for _ in 0..3 {
            token = app
                .jobs()
                .list_jobs(pb::ListJobsRequest {
                    queue: Q.into(),
                    state: state as i32,
                    page_size: 1,
                    page_token: token,
                    filter: Some(pb::ListJobsFilter {
                        name: "test-job".into(),
                        before: Some(prost_types::Timestamp {
                            seconds: 4_000_000_000,
                            nanos: 0,
                        }),
                        ..Default::default()
                    }),
                })
                .await
                .expect("list jobs")
                .into_inner()
                .next_page_token;
        }
    }

    // Dead letters: list, get (with history), replay by ids and by filter, delete.
    let mut dead = app.dead();
    let listed = dead
        .list_dead_letters(pb::ListDeadLettersRequest {
            queue: Q.into(),
            page_size: 10,
            ..Default::default()
        })
        .await
        .expect("list")
        .into_inner();
    assert_eq!(listed.dead_letters.len(), 4, "{listed:?}");
    let id = |i: usize| listed.dead_letters[i].job_id.clone();
    assert!(!get_job(app, Q, &id(0)).await.errors.is_empty());
    dead.get_dead_letter(pb::GetDeadLetterRequest {
        queue: Q.into(),
        job_id: id(0),
    })
    .await
    .expect("get dead");
    dead.replay_dead_letters(pb::ReplayDeadLettersRequest {
        queue: Q.into(),
        job_ids: vec![id(0)],
        filter: None,
    })
    .await
    .expect("replay ids");
    dead.replay_dead_letters(pb::ReplayDeadLettersRequest {
        queue: Q.into(),
        job_ids: Vec::new(),
        filter: Some(pb::DeadLetterFilter {
            job_name: "test-job".into(),
            error_type: "E".into(),
            ..Default::default()
        }),
    })
    .await
    .expect("replay filter");
    let again = lease(store, &q, 20, 30_000).await;
    let fails: Vec<FailItem> = again
        .iter()
        .map(|(id, t)| fail_item(id, t, Disposition::NoRetry))
        .collect();
    store.fail(&q, &fails).await.expect("fail");
    dead.delete_dead_letters(pb::DeleteDeadLettersRequest {
        queue: Q.into(),
        job_ids: vec![again[0].0.clone()],
        filter: None,
    })
    .await
    .expect("delete ids");
    dead.delete_dead_letters(pb::DeleteDeadLettersRequest {
        queue: Q.into(),
        job_ids: Vec::new(),
        filter: Some(pb::DeadLetterFilter {
            error_type: "E".into(),
            ..Default::default()
        }),
    })
    .await
    .expect("delete filter");

    // Groups (groups.lua): turns, a group at max_active, the group rate window, a pause by
    // a RATE_LIMITED fail, a RELEASE fail, a lost lease call and a release of grouped jobs,
    // the reaper.
    groups(app, store, &q).await;

    // Cancel, delete and expiry (cancel.lua, delete_job.lua; expiry in lease and reap).
    cancel_and_expiry(app, store, &q).await;

    // Queue operations.
    queues
        .pause_queue(pb::PauseQueueRequest { queue: Q.into() })
        .await
        .expect("pause");
    queues
        .resume_queue(pb::ResumeQueueRequest { queue: Q.into() })
        .await
        .expect("resume");
    for i in 0..3 {
        enqueue(
            app,
            pb::JobSpec {
                priority: i - 1,
                ..spec(Q, &format!("p{i}"))
            },
        )
        .await;
    }
    let stats = queues
        .get_queue_stats(pb::GetQueueStatsRequest { queue: Q.into() })
        .await
        .expect("stats")
        .into_inner()
        .stats
        .expect("stats");
    assert!(stats.waiting >= 3, "{stats:?}");
    http_get(app.http, "/metrics").await;
    queues
        .purge_queue(pb::PurgeQueueRequest {
            queue: Q.into(),
            include_completed: true,
            include_dead: true,
        })
        .await
        .expect("purge");
    enqueue(app, spec(Q, "last")).await;
    lease(store, &q, 1, 30_000).await;
    queues
        .delete_queue(pb::DeleteQueueRequest {
            queue: Q.into(),
            force: true,
        })
        .await
        .expect("delete queue");
    let _ = redis;
}

#[tokio::test]
async fn every_script_declares_every_key_it_touches_in_one_slot() {
    if single_only("MONITORs one redis-server (on a cluster each master would need its own)") {
        return;
    }
    let redis = TestRedis::start().await;
    let monitor = Monitor::start(&redis).await;
    let app = TestApp::spawn(test_config(&redis.url)).await;
    let store = redis.store().await;
    drive(&redis, &app, &store).await;
    app.stop().await.expect("stop");
    let lines = monitor.stop(&redis).await;

    let calls = calls(&lines);
    let mut c = redis.conn().await;
    let mut cache: HashMap<Vec<Vec<u8>>, Vec<Vec<u8>>> = HashMap::new();
    // script -> (calls, commands checked)
    let mut seen: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let mut undeclared: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut cross_slot: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for call in &calls {
        let e = seen.entry(call.name.clone()).or_default();
        e.0 += 1;
        e.1 += call.ran.len();
        let tag = call.keys.first().map(|k| hash_tag(k).to_vec());
        for k in &call.keys {
            if Some(hash_tag(k).to_vec()) != tag {
                cross_slot
                    .entry(call.name.clone())
                    .or_default()
                    .insert(show(k));
            }
        }
        let declared: BTreeSet<&[u8]> = call.keys.iter().map(|k| k.as_slice()).collect();
        for cmd in &call.ran {
            let name = String::from_utf8_lossy(&cmd[0]).to_uppercase();
            if ["TIME", "PUBLISH"].contains(&name.as_str()) {
                continue;
            }
            if !cache.contains_key(cmd) {
                let keys = keys_of(&mut c, cmd).await;
                cache.insert(cmd.clone(), keys);
            }
            for k in &cache[cmd] {
                if name == "SPUBLISH" {
                    // A shard channel is routed like a key: it must be in the call's slot.
                    if Some(hash_tag(k).to_vec()) != tag {
                        cross_slot
                            .entry(call.name.clone())
                            .or_default()
                            .insert(show(k));
                    }
                } else if !declared.contains(k.as_slice()) {
                    undeclared
                        .entry(call.name.clone())
                        .or_default()
                        .insert(format!("{name} {}", show(k)));
                }
            }
        }
    }
    println!("script calls seen (calls, commands checked): {seen:?}");
    let missing: Vec<&str> = SCRIPTS
        .iter()
        .copied()
        .filter(|s| !seen.contains_key(*s))
        .collect();
    assert!(missing.is_empty(), "scripts never run: {missing:?}");
    let unknown: Vec<&String> = seen
        .keys()
        .filter(|s| !SCRIPTS.contains(&s.as_str()))
        .collect();
    assert!(unknown.is_empty(), "calls of unknown scripts: {unknown:?}");
    for (script, keys) in &undeclared {
        println!("{script}: keys touched, not declared:");
        for k in keys.iter().take(8) {
            println!("    {k}");
        }
    }
    assert!(
        undeclared.is_empty(),
        "scripts touch keys they do not declare: {:?}",
        undeclared.keys().collect::<Vec<_>>()
    );
    assert!(
        cross_slot.is_empty(),
        "keys of one call in different slots: {cross_slot:?}"
    );
}
