//! The GroupService wrappers.

use std::time::{Duration, SystemTime};

use jobwire_client::{pb, EnqueueOptions};

use crate::support;

fn with_id(id: &str) -> EnqueueOptions {
    EnqueueOptions {
        job_id: Some(id.into()),
        ..Default::default()
    }
}

#[tokio::test]
async fn group_service_wrappers() {
    let server = support::server(&[]).await;
    let client = server.client().await.expect("connect");
    let q = support::queue("groups");
    for (i, g) in ["big", "big", "big", "small"].into_iter().enumerate() {
        let o = EnqueueOptions {
            group_key: Some(g.into()),
            ..with_id(&format!("j{i}"))
        };
        client
            .enqueue(&q, "n", b"x".to_vec(), o)
            .await
            .expect("enqueue");
    }
    let page = client.list_groups(&q, 0, "").await.expect("list_groups");
    assert_eq!(page.groups_waiting, 2);
    let keys: Vec<(&str, u64)> = page
        .groups
        .iter()
        .map(|g| (g.group_key.as_str(), g.waiting))
        .collect();
    assert_eq!(keys, [("big", 3), ("small", 1)]);
    let stats = client.get_queue_stats(&q).await.expect("stats");
    assert_eq!(stats.groups_waiting, 2);
    assert_eq!(
        stats.top_groups.first().map(|g| g.group_key.as_str()),
        Some("big")
    );

    let cfg = client
        .update_group_config(
            &q,
            "big",
            pb::GroupConfig {
                weight: Some(3),
                max_active: Some(2),
                rate_limit: None,
            },
            &["weight", "max_active"],
        )
        .await
        .expect("update_group_config");
    assert_eq!((cfg.weight, cfg.max_active), (Some(3), Some(2)));
    let big = client.get_group(&q, "big").await.expect("get_group");
    assert_eq!(big.waiting, 3);
    assert_eq!(big.config.and_then(|c| c.weight), Some(3));

    let until = client
        .pause_group(&q, "small", None)
        .await
        .expect("pause_group")
        .expect("paused until");
    assert!(until > SystemTime::now() + Duration::from_secs(86_400));
    let small = client.get_group(&q, "small").await.expect("get_group");
    assert!(small.paused_until.is_some());
    client
        .resume_group(&q, "small")
        .await
        .expect("resume_group");
    let small = client.get_group(&q, "small").await.expect("get_group");
    assert!(small.paused_until.is_none());
    let until = client
        .pause_group(&q, "small", Some(Duration::from_secs(60)))
        .await
        .expect("pause_group")
        .expect("paused until");
    let left = until.duration_since(SystemTime::now()).expect("future");
    assert!(
        left > Duration::from_secs(50) && left <= Duration::from_secs(65),
        "{left:?}"
    );
}
