//! A lost lease: a worker cut off from the server for longer than its lease sees its
//! attempt expire and another worker run attempt 2; when it can reach the server again,
//! ExtendLease says the lease is lost, the handler's `ctx.cancel` fires, and its result is
//! dropped (counted in `stats.lost`), never applied over the other worker's.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use jobwire_client::{pb, Client, ClientOptions, Ctx, EnqueueOptions, Job, Worker};
use support::proxy::Proxy;

#[tokio::test]
async fn a_worker_cut_off_past_its_lease_cancels_the_handler_and_drops_the_result() {
    let server = support::server(&["--lease-duration", "1s", "--reaper-interval", "100ms"]).await;
    let proxy = Proxy::start(server.grpc_port()).await;
    let direct = server.client().await.expect("connect");
    let via_proxy = Client::connect(
        &format!("127.0.0.1:{}", proxy.port),
        ClientOptions::default(),
    )
    .await
    .expect("connect through the proxy");
    let q = support::queue("lost");
    let o = EnqueueOptions {
        job_id: Some("j".into()),
        max_attempts: Some(3),
        ..Default::default()
    };
    direct
        .enqueue(&q, "j", b"null".to_vec(), o)
        .await
        .expect("enqueue");

    let started = Arc::new(AtomicBool::new(false));
    let cancelled = Arc::new(AtomicBool::new(false));
    let mut cut_off = Worker::new(via_proxy, support::options(&q, 1));
    {
        let (s, c) = (started.clone(), cancelled.clone());
        cut_off.handle("j", move |_job: Job<serde_json::Value>, ctx: Ctx| {
            let (s, c) = (s.clone(), c.clone());
            async move {
                s.store(true, Ordering::SeqCst);
                let _ = tokio::time::timeout(Duration::from_secs(30), ctx.cancel.cancelled()).await;
                c.store(ctx.cancel.is_cancelled(), Ordering::SeqCst);
                Ok(())
            }
        });
    }
    let stats = cut_off.stats();
    let w1 = support::run(cut_off);
    support::eventually(Duration::from_secs(10), "attempt 1 started", || async {
        started.load(Ordering::SeqCst).then_some(())
    })
    .await;
    proxy.block(true);
    assert!(proxy.cut() >= 1);

    let mut other = Worker::new(direct.clone(), support::options(&q, 1));
    other.handle("j", |job: Job<serde_json::Value>, _ctx: Ctx| async move {
        assert_eq!(job.attempt, 2);
        Ok(())
    });
    let w2 = support::run(other);
    let job = support::finished(&direct, &q, "j").await;
    assert_eq!(job.state, pb::JobState::Completed as i32, "{job:?}");
    assert_eq!(job.attempts_made, 2);

    proxy.block(false);
    support::eventually(Duration::from_secs(20), "the handler cancelled", || async {
        cancelled.load(Ordering::SeqCst).then_some(())
    })
    .await;
    support::eventually(Duration::from_secs(10), "the result dropped", || async {
        (stats.get(&stats.lost) == 1).then_some(())
    })
    .await;
    w1.stop().await;
    w2.stop().await;
    assert_eq!(stats.get(&stats.settled), 0, "{stats:?}");
    let job = direct.get_job(&q, "j").await.expect("job");
    assert_eq!(job.attempts_made, 2, "still the other worker's attempt");
    assert_eq!(
        job.errors[0].error_type, "LEASE_EXPIRED",
        "{:?}",
        job.errors
    );
}
