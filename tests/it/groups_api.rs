//! GroupService against real Redis and real gRPC: weights, ListGroups (order, paging,
//! groups_waiting), GetGroup, UpdateGroupConfig (mask, back to the default), PauseGroup and
//! ResumeGroup, GetQueueStats and the groups gauge, ListJobs over grouped jobs, and the
//! refusals of bad input.

use std::time::Duration;

use jobwire::pb;
use pb::group_service_client::GroupServiceClient;
use pb::queue_service_client::QueueServiceClient;
use tonic::transport::Channel;

use crate::groups::fill_group;
use crate::harness::*;

fn groups(app: &TestApp) -> GroupServiceClient<Channel> {
    GroupServiceClient::new(app.channel.clone())
}

async fn set_weight(app: &TestApp, queue: &str, group: &str, weight: u32) -> pb::GroupConfig {
    groups(app)
        .update_group_config(pb::UpdateGroupConfigRequest {
            queue: queue.into(),
            group_key: group.into(),
            config: Some(pb::GroupConfig {
                weight: Some(weight),
                ..Default::default()
            }),
            update_mask: Some(prost_types::FieldMask {
                paths: vec!["weight".into()],
            }),
        })
        .await
        .expect("update group config")
        .into_inner()
        .config
        .expect("config")
}

#[tokio::test]
async fn a_group_of_weight_three_gets_three_leases_for_every_one() {
    let (_redis, app) = TestApp::with_redis().await;
    let c = set_weight(&app, "weights", "heavy", 3).await;
    assert_eq!(c.weight, Some(3));
    fill_group(&app, "weights", "heavy", 100).await;
    fill_group(&app, "weights", "light", 100).await;
    let mut w = TestWorker::open(&app, &["weights"], 1, "w").await;
    let mut heavy = 0;
    for _ in 0..40 {
        let l = w.lease().await;
        if l.job.as_ref().expect("job").group_key == "heavy" {
            heavy += 1;
        }
        assert_eq!(w.ack(&l).await.code, 0);
    }
    assert!((29..=31).contains(&heavy), "heavy got {heavy} of 40");
}

#[tokio::test]
async fn list_get_update_pause_resume_and_the_queue_stats() {
    let (_redis, app) = TestApp::with_redis().await;
    let q = "gapi";
    // One leased job of "busy", which then has nothing waiting.
    fill_group(&app, q, "busy", 1).await;
    set_weight(&app, q, "busy", 1000).await;
    let mut w = TestWorker::open(&app, &[q], 1, "w").await;
    let held = w.lease().await;
    assert_eq!(held.job.as_ref().expect("job").group_key, "busy");
    fill_group(&app, q, "big", 30).await;
    fill_group(&app, q, "mid", 20).await;
    fill_group(&app, q, "", 25).await;
    fill_group(&app, q, "small", 5).await;

    // Pages of two: by waiting jobs, the default group in its place, then "busy".
    let mut seen = Vec::new();
    let mut token = String::new();
    loop {
        let page = groups(&app)
            .list_groups(pb::ListGroupsRequest {
                queue: q.into(),
                page_size: 2,
                page_token: token,
            })
            .await
            .expect("list")
            .into_inner();
        assert_eq!(page.groups_waiting, 4);
        assert!(page.groups.len() <= 2);
        seen.extend(
            page.groups
                .iter()
                .map(|g| (g.group_key.clone(), g.waiting, g.active)),
        );
        token = page.next_page_token;
        if token.is_empty() {
            break;
        }
    }
    assert_eq!(
        seen,
        [
            ("big".to_string(), 30, 0),
            (String::new(), 25, 0),
            ("mid".to_string(), 20, 0),
            ("small".to_string(), 5, 0),
            ("busy".to_string(), 0, 1),
        ]
    );

    let stats = QueueServiceClient::new(app.channel.clone())
        .get_queue_stats(pb::GetQueueStatsRequest { queue: q.into() })
        .await
        .expect("stats")
        .into_inner()
        .stats
        .expect("stats");
    assert_eq!(stats.waiting, 80);
    assert_eq!(stats.groups_waiting, 4);
    let top: Vec<(&str, u64)> = stats
        .top_groups
        .iter()
        .map(|g| (g.group_key.as_str(), g.waiting))
        .collect();
    assert_eq!(top, [("big", 30), ("", 25), ("mid", 20), ("small", 5)]);
    let text = http_get(app.http, "/metrics").await;
    assert_eq!(
        metric_value(&text, "jobwire_queue_groups_waiting", &[("queue", q)]),
        Some(4.0)
    );

    // GetGroup, then a config set and partly reset.
    let got = groups(&app)
        .get_group(pb::GetGroupRequest {
            queue: q.into(),
            group_key: "busy".into(),
        })
        .await
        .expect("get")
        .into_inner()
        .group
        .expect("group");
    assert_eq!((got.waiting, got.active), (0, 1));
    assert_eq!(got.config.and_then(|c| c.weight), Some(1000));
    let full = groups(&app)
        .update_group_config(pb::UpdateGroupConfigRequest {
            queue: q.into(),
            group_key: "mid".into(),
            config: Some(pb::GroupConfig {
                weight: Some(2),
                max_active: Some(4),
                rate_limit: Some(pb::RateLimit {
                    max: 7,
                    period: Some(ms(Duration::from_secs(2))),
                }),
            }),
            update_mask: None,
        })
        .await
        .expect("update")
        .into_inner()
        .config
        .expect("config");
    assert_eq!((full.weight, full.max_active), (Some(2), Some(4)));
    assert_eq!(full.rate_limit.map(|r| r.max), Some(7));
    let reset = groups(&app)
        .update_group_config(pb::UpdateGroupConfigRequest {
            queue: q.into(),
            group_key: "mid".into(),
            config: None,
            update_mask: Some(prost_types::FieldMask {
                paths: vec!["max_active".into(), "rate_limit".into()],
            }),
        })
        .await
        .expect("reset")
        .into_inner()
        .config
        .expect("config");
    assert_eq!(
        reset,
        pb::GroupConfig {
            weight: Some(2),
            ..Default::default()
        }
    );

    // A group that never existed reads as empty; an unknown queue lists nothing.
    let none = groups(&app)
        .get_group(pb::GetGroupRequest {
            queue: q.into(),
            group_key: "nobody".into(),
        })
        .await
        .expect("get")
        .into_inner()
        .group
        .expect("group");
    assert_eq!((none.waiting, none.active), (0, 0));
    assert!(none.paused_until.is_none());
    let empty = groups(&app)
        .list_groups(pb::ListGroupsRequest {
            queue: "no-such-queue".into(),
            ..Default::default()
        })
        .await
        .expect("list")
        .into_inner();
    assert!(empty.groups.is_empty() && empty.next_page_token.is_empty());
    assert_eq!(w.ack(&held).await.code, 0);
}

#[tokio::test]
async fn pause_group_holds_a_group_back_until_resume_group() {
    let (_redis, app) = TestApp::with_redis().await;
    let q = "gp";
    let paused = groups(&app)
        .pause_group(pb::PauseGroupRequest {
            queue: q.into(),
            group_key: "t1".into(),
            duration: None,
        })
        .await
        .expect("pause")
        .into_inner();
    assert!(paused.paused_until.expect("until").seconds > 4_000_000_000);
    fill_group(&app, q, "t1", 3).await;
    fill_group(&app, q, "t2", 3).await;
    let mut w = TestWorker::open(&app, &[q], 1, "w").await;
    for _ in 0..3 {
        let l = w.lease().await;
        assert_eq!(l.job.as_ref().expect("job").group_key, "t2");
        assert_eq!(w.ack(&l).await.code, 0);
    }
    assert!(
        w.lease_within(Duration::from_millis(400)).await.is_none(),
        "a paused group's job was leased"
    );
    let g = groups(&app)
        .get_group(pb::GetGroupRequest {
            queue: q.into(),
            group_key: "t1".into(),
        })
        .await
        .expect("get")
        .into_inner()
        .group
        .expect("group");
    assert_eq!(g.waiting, 3);
    assert!(g.paused_until.is_some());
    groups(&app)
        .resume_group(pb::ResumeGroupRequest {
            queue: q.into(),
            group_key: "t1".into(),
        })
        .await
        .expect("resume");
    // Resumed at once: the lease loop is woken, not left to its safety poll.
    for _ in 0..3 {
        let l = w
            .lease_within(Duration::from_millis(500))
            .await
            .expect("leased soon after ResumeGroup");
        assert_eq!(l.job.as_ref().expect("job").group_key, "t1");
        assert_eq!(w.ack(&l).await.code, 0);
    }
}

#[tokio::test]
async fn list_jobs_lists_grouped_waiting_jobs_after_the_default_group() {
    let (_redis, app) = TestApp::with_redis().await;
    fill_group(&app, "glist", "t", 3).await;
    fill_group(&app, "glist", "", 2).await;
    let mut ids = Vec::new();
    let mut token = String::new();
    loop {
        let page = app
            .jobs()
            .list_jobs(pb::ListJobsRequest {
                queue: "glist".into(),
                state: pb::JobState::Waiting as i32,
                page_size: 2,
                page_token: token,
                filter: None,
            })
            .await
            .expect("list")
            .into_inner();
        ids.extend(page.jobs.into_iter().map(|j| j.job_id));
        token = page.next_page_token;
        if token.is_empty() {
            break;
        }
    }
    assert_eq!(ids, ["-0", "-1", "t-0", "t-1", "t-2"]);
}

#[tokio::test]
async fn bad_group_input_is_refused_and_changes_nothing() {
    let (_redis, app) = TestApp::with_redis().await;
    let bad_key = app
        .jobs()
        .enqueue(pb::EnqueueRequest {
            job: Some(pb::JobSpec {
                group_key: "a\u{1}b".into(),
                ..spec("gbad", "j")
            }),
        })
        .await
        .expect_err("control character");
    assert_eq!(bad_key.code(), tonic::Code::InvalidArgument);
    assert!(
        bad_key.message().contains("group_key"),
        "{}",
        bad_key.message()
    );
    let long = app
        .jobs()
        .enqueue(pb::EnqueueRequest {
            job: Some(pb::JobSpec {
                group_key: "x".repeat(129),
                ..spec("gbad", "j")
            }),
        })
        .await
        .expect_err("too long");
    assert_eq!(long.code(), tonic::Code::InvalidArgument);
    let weight = groups(&app)
        .update_group_config(pb::UpdateGroupConfigRequest {
            queue: "gbad".into(),
            group_key: "t".into(),
            config: Some(pb::GroupConfig {
                weight: Some(0),
                ..Default::default()
            }),
            update_mask: None,
        })
        .await
        .expect_err("weight 0");
    assert_eq!(weight.code(), tonic::Code::InvalidArgument);
    assert!(weight.message().contains("weight"), "{}", weight.message());
    let empty = groups(&app)
        .pause_group(pb::PauseGroupRequest {
            queue: "gbad".into(),
            group_key: String::new(),
            duration: None,
        })
        .await
        .expect_err("no group");
    assert_eq!(empty.code(), tonic::Code::InvalidArgument);
    for (size, token) in [(1001, ""), (-1, ""), (10, "zz"), (10, "w-1")] {
        let e = groups(&app)
            .list_groups(pb::ListGroupsRequest {
                queue: "gbad".into(),
                page_size: size,
                page_token: token.into(),
            })
            .await
            .expect_err("bad page");
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{size} {token}");
    }
    let g = groups(&app)
        .get_group(pb::GetGroupRequest {
            queue: "gbad".into(),
            group_key: "t".into(),
        })
        .await
        .expect("get")
        .into_inner()
        .group
        .expect("group");
    assert_eq!(
        g.config,
        Some(pb::GroupConfig::default()),
        "nothing changed"
    );
}
