//! concurrency_never_exceeded: concurrency = credits.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jobwire_client::{pb, Ctx, EnqueueOptions, Job, NewJob, Worker};

use crate::support;

#[tokio::test]
async fn concurrency_never_exceeded() {
    let (server, p) = crate::server_for("concurrency_never_exceeded").await;
    let (concurrency, jobs, handler_ms) = (
        crate::param(&p, "concurrency") as usize,
        crate::param(&p, "jobs") as usize,
        crate::param(&p, "handler_ms"),
    );
    let client = server.client().await.expect("connect");
    let q = support::queue("slots");
    let batch = (0..jobs)
        .map(|i| {
            let o = EnqueueOptions {
                job_id: Some(format!("j{i}")),
                ..Default::default()
            };
            NewJob::new(&q, "sleep", b"null".to_vec(), o)
        })
        .collect();
    for r in client.enqueue_batch(batch).await.expect("enqueue") {
        r.expect("item enqueued");
    }

    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let runs = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut worker = Worker::new(client.clone(), support::options(&q, concurrency as u32));
    {
        let (running, most, runs) = (running.clone(), most.clone(), runs.clone());
        worker.handle("sleep", move |job: Job<serde_json::Value>, _ctx: Ctx| {
            let (running, most, runs) = (running.clone(), most.clone(), runs.clone());
            async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                runs.lock().expect("lock").push(job.id().to_owned());
                tokio::time::sleep(Duration::from_millis(handler_ms)).await;
                running.fetch_sub(1, Ordering::SeqCst);
                Ok(())
            }
        });
    }
    let stats = worker.stats();
    let w = support::run(worker);

    // Sample the server's active count while the jobs run.
    let done = Arc::new(AtomicBool::new(false));
    let sampler = tokio::spawn({
        let (client, q, done) = (client.clone(), q.clone(), done.clone());
        async move {
            let mut most_active = 0u64;
            while !done.load(Ordering::SeqCst) {
                if let Ok(s) = client.get_queue_stats(&q).await {
                    most_active = most_active.max(s.active);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            most_active
        }
    });
    for i in 0..jobs {
        let j = support::finished(&client, &q, &format!("j{i}")).await;
        assert_eq!(j.state, pb::JobState::Completed as i32, "{j:?}");
        assert_eq!(j.attempts_made, 1);
    }
    done.store(true, Ordering::SeqCst);
    let most_active = sampler.await.expect("sampler");
    w.stop().await;

    let mut runs = runs.lock().expect("lock").clone();
    runs.sort();
    runs.dedup();
    assert_eq!(runs.len(), jobs, "each job ran once");
    assert_eq!(stats.get(&stats.leases), jobs as u64, "{stats:?}");
    assert_eq!(stats.get(&stats.settled), jobs as u64, "{stats:?}");
    assert_eq!(most.load(Ordering::SeqCst), concurrency, "handlers at once");
    assert!(
        most_active <= concurrency as u64,
        "the server saw {most_active} active leases at once"
    );
}
