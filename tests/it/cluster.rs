//! jobwire on a Redis Cluster (3 masters + 3 replicas) and behind Sentinel (a master, a
//! replica, three sentinels): real redis-server processes (`tests/support/topology/`),
//! real gRPC. Queues are chosen so that they live on every master (checked with CLUSTER
//! KEYSLOT / COUNTKEYSINSLOT); the wake-up test measures pickup latency over sharded pub/sub
//! before and after a CLUSTER FAILOVER; the Sentinel test SIGKILLs the master.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use jobwire::pb;
use pb::queue_service_client::QueueServiceClient;
use pb::FailDisposition as D;

use crate::harness::*;
use crate::topology::{TestCluster, TestSentinel};

/// `per_master` queue names (prefix `prefix`) on each master of `c`: master port -> queues.
pub(crate) async fn queues_on_every_master(
    c: &TestCluster,
    prefix: &str,
    per_master: usize,
) -> BTreeMap<u16, Vec<String>> {
    let masters = c.masters().await;
    let mut by: BTreeMap<u16, Vec<String>> = masters.iter().map(|m| (*m, Vec::new())).collect();
    for i in 0.. {
        if by.values().all(|v| v.len() >= per_master) {
            break;
        }
        let q = format!("{prefix}{i}");
        let m = c.master_for_key(&format!("jw:{{{q}}}:waiting")).await;
        let v = by.get_mut(&m).expect("a master");
        if v.len() < per_master {
            v.push(q);
        }
    }
    by
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[tokio::test]
async fn every_transition_runs_on_queues_spread_over_all_masters() {
    let cluster = TestCluster::start(3, 1).await;
    let by_master = queues_on_every_master(&cluster, "spread-", 2).await;
    assert_eq!(by_master.len(), 3, "three masters serve slots");
    let queues: Vec<String> = by_master.values().flatten().cloned().collect();
    println!("queues by master: {by_master:?}");
    let app = TestApp::spawn(test_config(&cluster.url)).await;

    // Per queue: "ok" is acked, "bad" fails for good, "slow" times out (the reaper fails it).
    for q in &queues {
        enqueue(&app, spec(q, "ok")).await;
        enqueue(
            &app,
            pb::JobSpec {
                max_attempts: Some(1),
                ..spec(q, "bad")
            },
        )
        .await;
        enqueue(
            &app,
            pb::JobSpec {
                max_attempts: Some(1),
                timeout: Some(ms(Duration::from_millis(300))),
                ..spec(q, "slow")
            },
        )
        .await;
    }
    // The keys are where the slots say: each master holds its queues' keys.
    for (master, qs) in &by_master {
        let mut conn = cluster.conn(*master).await;
        for q in qs {
            let slot = cluster.keyslot(&format!("jw:{{{q}}}:waiting")).await;
            let n: u64 = redis::cmd("CLUSTER")
                .arg("COUNTKEYSINSLOT")
                .arg(slot)
                .query_async(&mut conn)
                .await
                .expect("countkeysinslot");
            assert!(n > 0, "queue {q} has keys on master {master} (slot {slot})");
        }
    }

    let names: Vec<&str> = queues.iter().map(String::as_str).collect();
    let mut w = TestWorker::open(&app, &names, 100, "w").await;
    for _ in 0..queues.len() * 3 {
        let l = w.lease().await;
        let id = l.job.as_ref().expect("job").job_id.clone();
        match id.as_str() {
            "ok" => assert_eq!(w.ack(&l).await.code, 0),
            "bad" => {
                let s = w.fail(&l, D::Retry, "boom", "test", None).await;
                assert_eq!(s.state, pb::JobState::Dead as i32);
            }
            _ => {} // "slow": held until its attempt times out
        }
    }
    // The reaper fails the timed-out attempts on every master.
    for q in &queues {
        let app = &app;
        eventually(Duration::from_secs(15), || async move {
            get_job(app, q, "slow").await.state == pb::JobState::Dead as i32
        })
        .await;
    }
    // Replay both dead jobs of every queue; they are leased and acked.
    for q in &queues {
        let r = app
            .dead()
            .replay_dead_letters(pb::ReplayDeadLettersRequest {
                queue: q.clone(),
                job_ids: vec!["bad".into(), "slow".into()],
                filter: None,
            })
            .await
            .expect("replay")
            .into_inner();
        assert_eq!(r.replayed_job_ids.len(), 2, "{q}: {r:?}");
    }
    for _ in 0..queues.len() * 2 {
        let l = w.lease().await;
        assert_eq!(w.ack(&l).await.code, 0);
    }
    for q in &queues {
        for id in ["ok", "bad", "slow"] {
            let job = get_job(&app, q, id).await;
            assert_eq!(job.state, pb::JobState::Completed as i32, "{q}/{id}");
        }
    }

    // ListQueues and the gauges see every queue on every master.
    let listed = QueueServiceClient::new(app.channel.clone())
        .list_queues(pb::ListQueuesRequest {})
        .await
        .expect("list")
        .into_inner()
        .queues;
    for q in &queues {
        let s = listed
            .iter()
            .find(|s| &s.queue == q)
            .unwrap_or_else(|| panic!("{q} listed"));
        assert_eq!(s.completed, 3, "{q}: {s:?}");
    }
    let app_ref = &app;
    let queues_ref = &queues;
    eventually(Duration::from_secs(10), || async move {
        let text = http_get(app_ref.http, "/metrics").await;
        queues_ref.iter().all(|q| {
            metric_value(
                &text,
                "jobwire_queue_jobs",
                &[("queue", q), ("state", "completed")],
            ) == Some(3.0)
        })
    })
    .await;
}

/// Leases `n` jobs enqueued one at a time on `producer` (another jobwire server, so the
/// consumer's loop is woken over pub/sub, not by its own enqueue) and returns the pickup
/// latencies (enqueue reply -> lease received).
async fn pickups(
    producer: &TestApp,
    w: &mut TestWorker,
    queue: &str,
    tag: &str,
    n: usize,
) -> Vec<Duration> {
    let mut out = Vec::new();
    for i in 0..n {
        let id = format!("{tag}-{i}");
        let t0 = Instant::now();
        // A call may meet the failover's last moments: retry UNAVAILABLE.
        loop {
            match producer
                .jobs()
                .enqueue(pb::EnqueueRequest {
                    job: Some(spec(queue, &id)),
                })
                .await
            {
                Ok(_) => break,
                Err(s) if s.code() == tonic::Code::Unavailable => {
                    tokio::time::sleep(Duration::from_millis(50)).await
                }
                Err(s) => panic!("enqueue: {s}"),
            }
        }
        let sent = Instant::now();
        let l = w
            .lease_within(Duration::from_secs(10))
            .await
            .unwrap_or_else(|| panic!("{id} not leased within 10 s"));
        out.push(sent.elapsed().min(t0.elapsed()));
        assert_eq!(l.job.as_ref().expect("job").job_id, id);
        assert_eq!(w.ack(&l).await.code, 0);
        // Spaced out, so that the loop is idle (waiting for a wake-up) at each enqueue.
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    out
}

#[tokio::test]
async fn cluster_wake_ups_stay_in_milliseconds_across_a_failover() {
    let cluster = TestCluster::start(3, 1).await;
    let queue = "wake-fo";
    let master = cluster
        .master_for_key(&format!("jw:{{{queue}}}:waiting"))
        .await;
    let replica = cluster.replicas_of(master).await[0];
    let consumer = TestApp::spawn(test_config(&cluster.url)).await;
    let producer = TestApp::spawn(test_config(&cluster.url)).await;
    let mut w = TestWorker::open(&consumer, &[queue], 1, "w").await;
    // Let the listener subscribe.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let mut before = pickups(&producer, &mut w, queue, "before", 20).await;
    let t = Instant::now();
    cluster.failover(replica).await;
    let failover_took = t.elapsed();
    assert_eq!(
        cluster
            .master_for_key(&format!("jw:{{{queue}}}:waiting"))
            .await,
        replica,
        "the replica serves the queue's slot now"
    );
    let mut after = pickups(&producer, &mut w, queue, "after", 20).await;
    let (b50, bmax) = (median(&mut before), *before.iter().max().expect("some"));
    let (a50, amax) = (median(&mut after), *after.iter().max().expect("some"));
    println!(
        "pickup latency over sharded pub/sub: before failover p50 {b50:?} max {bmax:?}; \
         CLUSTER FAILOVER took {failover_took:?}; after p50 {a50:?} max {amax:?} \
         (safety poll: 2 s)"
    );
    assert!(b50 < Duration::from_millis(500), "before: p50 {b50:?}");
    assert!(a50 < Duration::from_millis(500), "after: p50 {a50:?}");
}

#[tokio::test]
async fn behind_sentinel_jobwire_follows_a_promotion_without_restart() {
    let mut s = TestSentinel::start().await;
    let app = TestApp::spawn(test_config(&s.url)).await;
    let queue = "sentinel-q";
    let mut w = TestWorker::open(&app, &[queue], 1, "w").await;
    enqueue(&app, spec(queue, "before")).await;
    let l = w.lease().await;
    assert_eq!(w.ack(&l).await.code, 0);

    let killed_at = Instant::now();
    let old = s.kill_master().await;
    // Enqueue until the new master takes it (UNAVAILABLE meanwhile).
    let deadline = killed_at + Duration::from_secs(60);
    loop {
        match app
            .jobs()
            .enqueue(pb::EnqueueRequest {
                job: Some(spec(queue, "after")),
            })
            .await
        {
            Ok(_) => break,
            Err(st) => {
                assert_eq!(st.code(), tonic::Code::Unavailable, "{st}");
                assert!(Instant::now() < deadline, "no enqueue within 60 s: {st}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    let enqueued_after = killed_at.elapsed();
    let new = s.master_port().await;
    assert_ne!(new, old, "the sentinels promoted the replica");
    let l = w
        .lease_within(Duration::from_secs(30))
        .await
        .expect("the job enqueued after the promotion is leased");
    assert_eq!(l.job.as_ref().expect("job").job_id, "after");
    let leased_after = killed_at.elapsed();
    assert_eq!(w.ack(&l).await.code, 0);
    assert_eq!(
        get_job(&app, queue, "after").await.state,
        pb::JobState::Completed as i32
    );
    println!(
        "sentinel failover: master {old} SIGKILLed, {new} promoted; first enqueue accepted \
         after {enqueued_after:?}, leased after {leased_after:?} (down-after 1 s)"
    );
    // A job enqueued by another server is picked up at once: the consumer's wake-up
    // listener moved to the new master too.
    let producer = TestApp::spawn(test_config(&s.url)).await;
    let mut lat = pickups(&producer, &mut w, queue, "later", 10).await;
    let (p50, max) = (median(&mut lat), *lat.iter().max().expect("some"));
    println!("pickup over pub/sub after the promotion: p50 {p50:?} max {max:?}");
    assert!(p50 < Duration::from_millis(500), "p50 {p50:?}");
}
