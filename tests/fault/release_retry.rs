//! Hand-backs that fail: leases that never left the server (a stalled stream's outbox, a
//! closed stream's undelivered leases) go back to waiting with `release.lua`. When Redis does
//! not answer that call (paused past `--redis-timeout`), the server must try again once it
//! answers, not leave the jobs leased to nobody until their deadline, where the reaper would
//! charge them an attempt no worker used (the gap the chaos soak found, 1 run in 6).

use std::time::Duration;

use jobwire::pb;
use pb::subscribe_request::Message as In;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::transport::Endpoint;

use crate::harness::*;
use crate::procs::{RedisOpts, RedisProc};

#[tokio::test]
async fn leases_whose_hand_back_failed_during_a_redis_pause_go_back_uncharged_after_it() {
    hand_back_over_a_pause(Duration::from_secs(20), 3000).await;
}

/// The pause outlasts the leases' deadline: when Redis answers again, the hand-back must get
/// there before the reaper, which would charge the outbox's leases an attempt (the chaos
/// soak's Redis pause and read-only faults, 1 CI run in ~10). The live stream's own leases
/// are renewed before the reaper runs, too.
#[tokio::test]
async fn leases_whose_hand_back_failed_during_a_pause_past_their_deadline_go_back_uncharged() {
    hand_back_over_a_pause(Duration::from_secs(1), 3000).await;
}

/// Leases 200 jobs to a stream that reads one and stops, pauses Redis for `pause_ms` right
/// after, and checks that the leases that never left the server come back uncharged.
async fn hand_back_over_a_pause(lease_duration: Duration, pause_ms: u64) {
    let redis = RedisProc::start(RedisOpts {
        aof: None,
        policy: "noeviction",
    })
    .await;
    let mut cfg = test_config(&redis.url);
    cfg.redis_timeout = Duration::from_millis(500);
    cfg.lease_duration = lease_duration;
    let app = TestApp::spawn(cfg).await;
    let n = 200;
    for start in (0..n).step_by(50) {
        let jobs = (start..start + 50)
            .map(|k| pb::JobSpec {
                payload: vec![7u8; 8 * 1024],
                timeout: Some(ms(Duration::from_secs(20))),
                max_attempts: Some(1),
                ..spec("held", &format!("j-{k}"))
            })
            .collect();
        app.jobs()
            .enqueue_batch(pb::EnqueueBatchRequest { jobs })
            .await
            .expect("enqueue batch");
    }
    // A stream with a 4 KiB window that reads one lease and stops: most of its 100 leases
    // wait in the server's outbox, which hands them back after about a second.
    let channel = Endpoint::from_shared(format!("http://{}", app.grpc))
        .expect("uri")
        .initial_stream_window_size(4096)
        .initial_connection_window_size(4096)
        .connect()
        .await
        .expect("connect");
    let (tx, rx) = mpsc::unbounded_channel();
    tx.send(pb::SubscribeRequest {
        message: Some(In::Open(pb::OpenStream {
            queues: vec!["held".into()],
            credits: 100,
            worker_id: "stalled".into(),
        })),
    })
    .expect("send");
    let mut rx = pb::worker_service_client::WorkerServiceClient::new(channel)
        .subscribe(UnboundedReceiverStream::new(rx))
        .await
        .expect("subscribe")
        .into_inner();
    rx.message().await.expect("read").expect("a lease");
    // Redis stops answering before the outbox's hand-back runs, for longer than it retries
    // a call (the server's timeout is 500 ms).
    let mut c = redis.conn().await;
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(pause_ms)
        .arg("ALL")
        .query_async(&mut c)
        .await
        .expect("client pause");
    let heartbeats = tokio::spawn(async move {
        for _ in 0..40 {
            if tx
                .send(pb::SubscribeRequest {
                    message: Some(In::Heartbeat(pb::Heartbeat {})),
                })
                .is_err()
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    // Paused; then poll for up to 9 s more (a lease that expired would come back too, but
    // charged: max_attempts 1 makes it dead).
    tokio::time::sleep(Duration::from_millis(pause_ms)).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(9);
    let (waiting, charged) = loop {
        let (mut waiting, mut charged) = (0, 0);
        for k in 0..n {
            let j = get_job(&app, "held", &format!("j-{k}")).await;
            if j.state == pb::JobState::Waiting as i32 {
                waiting += 1;
            }
            if j.attempts_made > 0 {
                charged += 1;
            }
        }
        if waiting >= n - 20 || tokio::time::Instant::now() >= deadline {
            break (waiting, charged);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    println!(
        "after a {pause_ms} ms pause over the outbox hand-back (leases of {lease_duration:?}): \
         {waiting} waiting, {charged} charged of {n}"
    );
    // The stream read 1; its window and tonic's encode buffer took at most ~16 more. The
    // other leases of its 100 credits never left the server and must be back.
    assert!(
        waiting >= n - 20 && charged <= 20,
        "only {waiting} of {n} jobs waiting ({charged} charged) 9 s after Redis came back: \
         the failed hand-back of the outbox was not tried again"
    );
    heartbeats.abort();
    drop(rx);
}
