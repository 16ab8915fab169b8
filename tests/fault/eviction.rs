//! An evicting `maxmemory-policy` set at run time (issue 32, item 9): Redis may then delete
//! any key, jobs included, without a word. jobwire refuses new jobs (Enqueue, EnqueueBatch:
//! UNAVAILABLE naming the policy and the fix) until the policy is `noeviction` again, unless
//! `--allow-eviction`. Work already stored goes on: leases, acks and fails are not refused
//! (refusing them would strand jobs that are already running).

use std::time::Duration;

use jobwire::pb;

use crate::harness::*;
use crate::procs::{redis_cmd, RedisOpts, RedisProc};

/// How long the health watch (every 500 ms) may take to see a policy change.
const PATIENCE: Duration = Duration::from_secs(15);

async fn try_enqueue(app: &TestApp, queue: &str, id: &str) -> Result<(), tonic::Status> {
    app.jobs()
        .enqueue(pb::EnqueueRequest {
            job: Some(spec(queue, id)),
        })
        .await
        .map(|_| ())
}

async fn stored(app: &TestApp, queue: &str, id: &str) -> bool {
    match app
        .jobs()
        .get_job(pb::GetJobRequest {
            queue: queue.into(),
            job_id: id.into(),
        })
        .await
    {
        Ok(_) => true,
        Err(s) if s.code() == tonic::Code::NotFound => false,
        Err(s) => panic!("GetJob {queue}/{id}: {s:?}"),
    }
}

fn assert_eviction_refusal(s: &tonic::Status) {
    assert_eq!(s.code(), tonic::Code::Unavailable, "{s:?}");
    for word in ["allkeys-lru", "noeviction", "--allow-eviction"] {
        assert!(s.message().contains(word), "{word:?} not in {s:?}");
    }
}

#[tokio::test]
async fn an_evicting_policy_refuses_new_jobs_until_noeviction_again() {
    let redis = RedisProc::start(RedisOpts::default()).await;
    let app = TestApp::spawn(test_config(&redis.url)).await;
    enqueue(&app, spec("ev", "running")).await;
    enqueue(&app, spec("ev", "waiting")).await;
    let mut w = TestWorker::open(&app, &["ev"], 1, "w").await;
    let running = w.lease().await;

    redis_cmd(
        &redis,
        &["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"],
    )
    .await;
    // Accepted until the health watch sees the policy (at most one period), then refused.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let mut accepted = 0;
    let refusal = loop {
        match try_enqueue(&app, "ev", &format!("probe{accepted}")).await {
            Ok(()) => accepted += 1,
            Err(s) => break s,
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{accepted} enqueues accepted while redis evicts"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eviction_refusal(&refusal);
    assert!(!stored(&app, "ev", &format!("probe{accepted}")).await);
    for i in 0..3 {
        let s = try_enqueue(&app, "ev", &format!("refused{i}"))
            .await
            .expect_err("refused while redis evicts");
        assert_eviction_refusal(&s);
        assert!(!stored(&app, "ev", &format!("refused{i}")).await);
    }
    let batch = app
        .jobs()
        .enqueue_batch(pb::EnqueueBatchRequest {
            jobs: vec![spec("ev", "batch0"), spec("ev", "batch1")],
        })
        .await;
    match batch {
        Err(s) => assert_eviction_refusal(&s),
        Ok(r) => {
            // Per-item outcomes: each item refused with the same status.
            let r = r.into_inner();
            assert_eq!(r.results.len(), 2, "{r:?}");
            for item in &r.results {
                let st = item.error.as_ref().unwrap_or_else(|| panic!("{r:?}"));
                assert_eq!(st.code, tonic::Code::Unavailable as i32, "{r:?}");
                assert!(st.message.contains("allkeys-lru"), "{r:?}");
            }
        }
    }
    assert!(!stored(&app, "ev", "batch0").await && !stored(&app, "ev", "batch1").await);

    // Work already stored goes on: the running job is acked, the waiting one leased and
    // acked, and reads are served.
    assert_eq!(w.ack(&running).await.code, 0);
    let waiting = w.lease().await;
    assert_eq!(waiting.job.as_ref().expect("job").job_id, "waiting");
    assert_eq!(w.ack(&waiting).await.code, 0);
    assert!(stored(&app, "ev", "running").await);

    // Back to noeviction: new jobs are accepted again.
    redis_cmd(&redis, &["CONFIG", "SET", "maxmemory-policy", "noeviction"]).await;
    eventually(PATIENCE, || async {
        try_enqueue(&app, "ev", "after").await.is_ok()
    })
    .await;
    // The jobs accepted before the watch saw the policy, then "after", each leased once.
    let mut leased = Vec::new();
    for _ in 0..=accepted {
        let l = w.lease().await;
        leased.push(l.job.as_ref().expect("job").job_id.clone());
        assert_eq!(w.ack(&l).await.code, 0);
    }
    let mut want: Vec<String> = (0..accepted).map(|i| format!("probe{i}")).collect();
    want.push("after".into());
    leased.sort();
    want.sort();
    assert_eq!(leased, want);
    println!("enqueues accepted before the refusal began: {accepted}");
}

#[tokio::test]
async fn with_allow_eviction_an_evicting_policy_refuses_nothing() {
    let redis = RedisProc::start(RedisOpts::default()).await;
    let mut cfg = test_config(&redis.url);
    cfg.allow_eviction = true;
    let app = TestApp::spawn(cfg).await;
    redis_cmd(
        &redis,
        &["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"],
    )
    .await;
    // Several health periods: every enqueue is accepted.
    for i in 0..20 {
        try_enqueue(&app, "ev", &format!("j{i}"))
            .await
            .unwrap_or_else(|s| panic!("refused with --allow-eviction: {s:?}"));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
