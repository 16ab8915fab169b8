//! Credits across a reconnect: a stream replaced while a job still runs is opened with the
//! free slots only, and when that carried-over job settles (unary), its slot is granted to
//! the new stream. Fails if the new stream got all `concurrency` credits (three handlers at
//! once) or if the slot never came back (the quick jobs would never overlap).

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use jobwire_client::{pb, Client, ClientOptions, Ctx, EnqueueOptions, Job, Worker};
use support::proxy::Proxy;

#[tokio::test]
async fn a_replaced_stream_gets_the_free_slots_and_the_carried_lease_grants_its_slot_back() {
    let server = support::server(&["--lease-duration", "5s"]).await;
    let proxy = Proxy::start(server.grpc_port()).await;
    let direct = server.client().await.expect("connect");
    let via_proxy = Client::connect(
        &format!("127.0.0.1:{}", proxy.port),
        ClientOptions::default(),
    )
    .await
    .expect("connect through the proxy");
    let q = support::queue("regrant");
    let enqueue = |id: String, name: &'static str| {
        let (client, q) = (direct.clone(), q.clone());
        async move {
            let o = EnqueueOptions {
                job_id: Some(id),
                ..Default::default()
            };
            client
                .enqueue(&q, name, b"null".to_vec(), o)
                .await
                .expect("enqueue");
        }
    };
    enqueue("long".into(), "long").await;

    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let quick_running = Arc::new(AtomicUsize::new(0));
    let most_quick = Arc::new(AtomicUsize::new(0));
    let mut worker = Worker::new(via_proxy, support::options(&q, 2));
    let track = |r: &Arc<AtomicUsize>, m: &Arc<AtomicUsize>| {
        let now = r.fetch_add(1, Ordering::SeqCst) + 1;
        m.fetch_max(now, Ordering::SeqCst);
    };
    {
        let (r, m) = (running.clone(), most.clone());
        worker.handle("long", move |_job: Job<serde_json::Value>, _ctx: Ctx| {
            let (r, m) = (r.clone(), m.clone());
            async move {
                track(&r, &m);
                tokio::time::sleep(Duration::from_millis(2000)).await;
                r.fetch_sub(1, Ordering::SeqCst);
                Ok(())
            }
        });
    }
    {
        let (r, m, qr, qm) = (
            running.clone(),
            most.clone(),
            quick_running.clone(),
            most_quick.clone(),
        );
        worker.handle("quick", move |_job: Job<serde_json::Value>, _ctx: Ctx| {
            let (r, m, qr, qm) = (r.clone(), m.clone(), qr.clone(), qm.clone());
            async move {
                track(&r, &m);
                track(&qr, &qm);
                tokio::time::sleep(Duration::from_millis(400)).await;
                qr.fetch_sub(1, Ordering::SeqCst);
                r.fetch_sub(1, Ordering::SeqCst);
                Ok(())
            }
        });
    }
    let stats = worker.stats();
    let w = support::run(worker);
    support::eventually(Duration::from_secs(10), "long started", || async {
        (running.load(Ordering::SeqCst) == 1).then_some(())
    })
    .await;
    assert!(proxy.cut() >= 1);
    // A new stream with one credit (the other slot is the carried-over long job).
    support::eventually(Duration::from_secs(20), "a new stream", || async {
        (stats.get(&stats.streams) >= 2).then_some(())
    })
    .await;
    for i in 0..3 {
        enqueue(format!("a{i}"), "quick").await;
    }
    support::finished(&direct, &q, "long").await;
    // The long job's slot came back as a credit: quick jobs can now run two at once.
    for i in 0..6 {
        enqueue(format!("b{i}"), "quick").await;
    }
    for id in (0..3)
        .map(|i| format!("a{i}"))
        .chain((0..6).map(|i| format!("b{i}")))
    {
        let j = support::finished(&direct, &q, &id).await;
        assert_eq!(j.state, pb::JobState::Completed as i32, "{j:?}");
    }
    w.stop().await;
    assert_eq!(
        most.load(Ordering::SeqCst),
        2,
        "never more than concurrency 2"
    );
    assert_eq!(
        most_quick.load(Ordering::SeqCst),
        2,
        "after the long job settled, two quick jobs ran at once"
    );
    assert_eq!(stats.get(&stats.lost), 0, "{stats:?}");
}
