//! The groups and cancel/expiry parts of the declared-keys test's drive (`drive` in
//! `declared_keys.rs`): they run every group and cancel script path the test checks.

use std::time::Duration;

use jobwire::jobs::{Disposition, QueueName};
use jobwire::pb;
use jobwire::store::{FailItem, Store};

use super::{fail_item, lease, Q};
use crate::harness::*;

/// The group part of [`drive`]: leaves grouped jobs waiting for the purge.
pub(super) async fn groups(app: &TestApp, store: &Store, q: &QueueName) {
    pb::queue_service_client::QueueServiceClient::new(app.channel.clone())
        .update_queue_config(pb::UpdateQueueConfigRequest {
            queue: Q.into(),
            config: Some(pb::QueueConfig {
                group_max_active: Some(1),
                group_rate_limit: Some(pb::RateLimit {
                    max: 3,
                    period: Some(ms(Duration::from_millis(100))),
                }),
                ..Default::default()
            }),
            update_mask: Some(prost_types::FieldMask {
                paths: vec!["group_max_active".into(), "group_rate_limit".into()],
            }),
        })
        .await
        .expect("config");
    let mut jobs = Vec::new();
    for (g, n) in [("g1", 4), ("g2", 3), ("", 1)] {
        for i in 0..n {
            jobs.push(pb::JobSpec {
                group_key: g.into(),
                priority: i % 2,
                ..spec(Q, &format!("grp-{g}-{i}"))
            });
        }
    }
    app.jobs()
        .enqueue_batch(pb::EnqueueBatchRequest { jobs })
        .await
        .expect("batch");
    // One of each group (max_active 1), the default group unlimited.
    let held = lease(store, q, 20, 30_000).await;
    assert_eq!(held.len(), 3, "{held:?}");
    store.ack(q, &held[..1]).await.expect("ack");
    let mut pausing = fail_item(&held[1].0, &held[1].1, Disposition::RateLimited);
    pausing.pause_group = true;
    pausing.retry_after_ms = Some(50);
    store.fail(q, &[pausing]).await.expect("fail");
    store.release(q, &held[2..]).await.expect("release");
    // A lost lease call holding a grouped job, then the reaper after the pause.
    let call = jobwire::store::new_lease_call_id();
    store
        .lease(q, &["w"; 4], 30_000, &call, &[])
        .await
        .expect("lease");
    store
        .release_lease_call(q, &call, 1000)
        .await
        .expect("release call");
    tokio::time::sleep(Duration::from_millis(120)).await;
    store.reap(q, 100).await.expect("reap");
    let held = lease(store, q, 20, 30_000).await;
    assert!(!held.is_empty());
    // The first handed back by its worker (RELEASE), the rest failed.
    let fails: Vec<FailItem> = held
        .iter()
        .enumerate()
        .map(|(i, (id, t))| {
            let d = if i == 0 {
                Disposition::Release
            } else {
                Disposition::Retry
            };
            fail_item(id, t, d)
        })
        .collect();
    store.fail(q, &fails).await.expect("fail");
    store.reap(q, 100).await.expect("reap");
    // GroupService: config, pause, resume, list, get.
    let mut groups = pb::group_service_client::GroupServiceClient::new(app.channel.clone());
    groups
        .update_group_config(pb::UpdateGroupConfigRequest {
            queue: Q.into(),
            group_key: "g1".into(),
            config: Some(pb::GroupConfig {
                weight: Some(2),
                max_active: Some(3),
                rate_limit: None,
            }),
            update_mask: None,
        })
        .await
        .expect("group config");
    groups
        .pause_group(pb::PauseGroupRequest {
            queue: Q.into(),
            group_key: "g2".into(),
            duration: Some(ms(Duration::from_secs(60))),
        })
        .await
        .expect("pause group");
    groups
        .resume_group(pb::ResumeGroupRequest {
            queue: Q.into(),
            group_key: "g2".into(),
        })
        .await
        .expect("resume group");
    let mut token = String::new();
    for _ in 0..3 {
        token = groups
            .list_groups(pb::ListGroupsRequest {
                queue: Q.into(),
                page_size: 1,
                page_token: token,
            })
            .await
            .expect("list groups")
            .into_inner()
            .next_page_token;
    }
    groups
        .get_group(pb::GetGroupRequest {
            queue: Q.into(),
            group_key: "g1".into(),
        })
        .await
        .expect("get group");
}

pub(super) async fn cancel_and_expiry(app: &TestApp, store: &Store, q: &QueueName) {
    let cancel = |id: &'static str| {
        let mut c = app.jobs();
        async move {
            c.cancel_job(pb::CancelJobRequest {
                queue: Q.into(),
                job_id: id.into(),
                reason: "dk".into(),
            })
            .await
            .expect("cancel")
        }
    };
    enqueue(app, spec(Q, "cx-w")).await;
    enqueue(
        app,
        pb::JobSpec {
            priority: 2,
            ..spec(Q, "cx-p")
        },
    )
    .await;
    enqueue(
        app,
        pb::JobSpec {
            delay: Some(ms(Duration::from_secs(60))),
            ..spec(Q, "cx-d")
        },
    )
    .await;
    enqueue(
        app,
        pb::JobSpec {
            group_key: "acme".into(),
            ..spec(Q, "cx-g")
        },
    )
    .await;
    for id in ["cx-w", "cx-p", "cx-d", "cx-g"] {
        cancel(id).await;
    }
    // Active: told, renewed (the safety net's report), then failed / released.
    enqueue(app, spec(Q, "cx-a")).await;
    enqueue(app, spec(Q, "cx-b")).await;
    let held = lease(store, q, 2, 30_000).await;
    for (id, _) in &held {
        let id: &'static str = if id == "cx-a" { "cx-a" } else { "cx-b" };
        cancel(id).await;
    }
    store.renew(q, &held, 30_000, true).await.expect("renew");
    store
        .fail(q, &[fail_item(&held[0].0, &held[0].1, Disposition::Retry)])
        .await
        .expect("fail");
    store.release(q, &held[1..]).await.expect("release");
    // By filter, over every phase.
    for i in 0..3 {
        let mut s = spec(Q, &format!("cx-m{i}"));
        s.metadata.insert("tenant".into(), "t".into());
        if i == 1 {
            s.group_key = "acme".into();
        }
        enqueue(app, s).await;
    }
    app.jobs()
        .cancel_jobs(pb::CancelJobsRequest {
            queue: Q.into(),
            filter: Some(pb::JobFilter {
                metadata_key: "tenant".into(),
                metadata_value: Some("t".into()),
                ..Default::default()
            }),
            reason: "dk".into(),
            limit: 2,
            page_token: String::new(),
        })
        .await
        .expect("cancel jobs");
    enqueue(app, spec(Q, "cx-del")).await;
    app.jobs()
        .delete_job(pb::DeleteJobRequest {
            queue: Q.into(),
            job_id: "cx-del".into(),
        })
        .await
        .expect("delete job");
    // Expiry: due at the lease, and by the reaper.
    for id in ["ex-1", "ex-2"] {
        enqueue(
            app,
            pb::JobSpec {
                ttl: Some(ms(Duration::from_millis(50))),
                ..spec(Q, id)
            },
        )
        .await;
    }
    // Past their 50 ms TTL: the lease expires them.
    tokio::time::sleep(Duration::from_millis(100)).await;
    lease(store, q, 1, 30_000).await;
    store.reap(q, 100).await.expect("reap");
}
