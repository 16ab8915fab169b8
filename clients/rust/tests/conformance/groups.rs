//! group_key_and_pause_group: a job's group key, and a rate-limited error that pauses only
//! the job's group.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jobwire_client::{pb, Ctx, EnqueueOptions, Job, JobError, Worker};
use tokio::sync::mpsc;

use crate::support;

fn in_group(id: &str, group: &str) -> EnqueueOptions {
    EnqueueOptions {
        job_id: Some(id.into()),
        group_key: Some(group.into()),
        ..Default::default()
    }
}

/// Each job id's leases: when, and the group key the handler saw.
type Leases = Arc<Mutex<HashMap<String, Vec<(Instant, String)>>>>;

#[tokio::test]
async fn group_key_and_pause_group() {
    let (server, p) = crate::server_for("group_key_and_pause_group").await;
    let pause = Duration::from_millis(crate::param(&p, "pause_ms"));
    let client = server.client().await.expect("connect");
    let q = support::queue("tenants");
    let leases: Leases = Arc::default();
    let (limited_tx, mut limited) = mpsc::unbounded_channel();
    let mut worker = Worker::new(client.clone(), support::options(&q, 4));
    {
        let leases = leases.clone();
        worker.handle_bytes("call-api", move |job: Job<Vec<u8>>, _ctx: Ctx| {
            let (leases, limited_tx) = (leases.clone(), limited_tx.clone());
            async move {
                let now = Instant::now();
                let first = {
                    let mut l = leases.lock().expect("lock");
                    let seen = l.entry(job.id().to_owned()).or_default();
                    seen.push((now, job.group_key().to_owned()));
                    job.id() == "a1" && seen.len() == 1
                };
                if first {
                    let _ = limited_tx.send(now);
                    return Err(JobError::rate_limited_group(pause));
                }
                Ok(())
            }
        });
    }
    let w = support::run(worker);
    let a1 = EnqueueOptions {
        max_attempts: Some(1),
        ..in_group("a1", "tenant-a")
    };
    client
        .enqueue(&q, "call-api", b"x".to_vec(), a1)
        .await
        .expect("enqueue");
    let limited_at = tokio::time::timeout(Duration::from_secs(20), limited.recv())
        .await
        .expect("a1 leased")
        .expect("a1");
    // The Fail (with pause_group) is applied once a1 is no longer ACTIVE.
    support::eventually(Duration::from_secs(10), "a1 handed back", || async {
        let j = client.get_job(&q, "a1").await.ok()?;
        (j.state != pb::JobState::Active as i32).then_some(())
    })
    .await;
    for (id, group) in [("a2", "tenant-a"), ("b1", "tenant-b")] {
        client
            .enqueue(&q, "call-api", b"x".to_vec(), in_group(id, group))
            .await
            .expect("enqueue");
    }
    let b1 = support::in_state(
        &client,
        &q,
        "b1",
        pb::JobState::Completed,
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(b1.group_key, "tenant-b");
    for id in ["a1", "a2"] {
        let j = client.get_job(&q, id).await.expect("get");
        assert_ne!(
            j.state,
            pb::JobState::Completed as i32,
            "{id} completed before b1 although its group is paused"
        );
    }
    for id in ["a1", "a2"] {
        let j = support::in_state(
            &client,
            &q,
            id,
            pb::JobState::Completed,
            Duration::from_secs(20),
        )
        .await;
        assert_eq!(j.group_key, "tenant-a");
        assert_eq!(j.attempts_made, 1, "{id}: RATE_LIMITED uses no attempt");
    }
    w.stop().await;
    let leases = leases.lock().expect("lock");
    for id in ["a1", "a2"] {
        let (at, group) = leases[id].last().expect("leased").clone();
        assert_eq!(group, "tenant-a");
        let gap = at.duration_since(limited_at);
        assert!(
            gap + Duration::from_millis(50) >= pause,
            "{id} leased {gap:?} after its group was paused for {pause:?}"
        );
    }
    assert_eq!(leases["b1"].len(), 1);
    assert_eq!(leases["b1"][0].1, "tenant-b");
}
