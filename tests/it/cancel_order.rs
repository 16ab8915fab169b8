//! A CancelLease never overtakes its Lease (issue 32, item 4): on a stream whose transport
//! is full, leases wait in the server's outbox while control messages go first; a cancel
//! of a job whose lease is still in the outbox must reach the worker after that lease, or a
//! worker (which ignores a cancel for a lease it does not hold, as every SDK does) runs and
//! acks a cancelled job and it ends COMPLETED.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use jobwire::pb;
use pb::subscribe_request::Message as In;
use pb::subscribe_response::Message as Out;
use tonic::transport::Endpoint;

use crate::cancel::{cancel, stats};
use crate::harness::*;

const JOBS: usize = 20;

#[tokio::test]
async fn a_cancel_of_a_lease_still_in_the_outbox_arrives_after_the_lease() {
    let (_redis, app) = TestApp::with_redis().await;
    let q = "cancel-order";
    for k in 0..JOBS {
        // 32 KiB payloads and a 64 KiB window: about two leases fit in the transport, the
        // rest wait in the server's outbox while the worker does not read.
        enqueue(
            &app,
            pb::JobSpec {
                payload: vec![7u8; 32 * 1024],
                ..spec(q, &format!("j-{k}"))
            },
        )
        .await;
    }
    let channel = Endpoint::from_shared(format!("http://{}", app.grpc))
        .expect("uri")
        .initial_stream_window_size(65_535)
        .initial_connection_window_size(65_535)
        .connect()
        .await
        .expect("connect");
    let mut w = TestWorker::open_on(channel, &[q], 100, "slow-reader").await;
    // Every job leased to the stream (a few in the transport, the rest in the outbox).
    eventually(Duration::from_secs(10), || async {
        stats(&app, q).await.active == JOBS as u64
    })
    .await;
    // Cancel them all at once, well within the outbox wait (1 s).
    let cancels = (0..JOBS).map(|k| {
        let app = &app;
        async move { cancel(app, q, &format!("j-{k}"), "stop").await }
    });
    for r in futures::future::join_all(cancels).await {
        let r = r.expect("cancel");
        let job = r.job.expect("job");
        assert!(r.cancelled, "{job:?}");
        assert_eq!(job.state, pb::JobState::Active as i32, "{job:?}");
    }

    // Now read like an SDK: a cancel for a lease not held is ignored; a held lease whose
    // cancel came is failed, the others are acked.
    let mut order = Vec::new();
    let mut held: HashMap<String, pb::Lease> = HashMap::new();
    let mut told: HashSet<String> = HashSet::new();
    let mut early = Vec::new();
    while held.len() < JOBS || told.len() + early.len() < JOBS {
        match w.recv(Duration::from_secs(5)).await {
            Recv::Msg(Out::Lease(l)) => {
                order.push(format!("L:{}", l.job.as_ref().expect("job").job_id));
                held.insert(l.lease_token.clone(), l);
            }
            Recv::Msg(Out::Cancel(c)) => {
                order.push(format!("C:{}", c.job_id));
                if held.contains_key(&c.lease_token) {
                    told.insert(c.lease_token);
                } else {
                    early.push(c.job_id);
                }
            }
            Recv::Msg(_) => {}
            other => panic!("stream: {other:?} after {order:?}"),
        }
    }
    let mut acked = 0;
    for (token, l) in &held {
        let job = l.job.as_ref().expect("job");
        if told.contains(token) {
            w.send(In::Fail(pb::FailRequest {
                queue: job.queue.clone(),
                job_id: job.job_id.clone(),
                lease_token: token.clone(),
                disposition: pb::FailDisposition::NoRetry as i32,
                error: Some(pb::JobError {
                    message: "cancelled".into(),
                    error_type: "cancelled".into(),
                    details: String::new(),
                }),
                ..Default::default()
            }));
        } else {
            acked += 1;
            w.send(In::Ack(pb::AckRequest {
                result: Vec::new(),
                queue: job.queue.clone(),
                job_id: job.job_id.clone(),
                lease_token: token.clone(),
            }));
        }
    }
    eventually(Duration::from_secs(10), || async {
        stats(&app, q).await.active == 0
    })
    .await;
    let mut completed = Vec::new();
    for k in 0..JOBS {
        let id = format!("j-{k}");
        let j = get_job(&app, q, &id).await;
        if j.state == pb::JobState::Completed as i32 {
            completed.push(id);
        } else {
            assert_eq!(j.state, pb::JobState::Cancelled as i32, "{id}: {j:?}");
        }
    }
    println!(
        "{JOBS} leases, {JOBS} cancels: {} cancels before their lease, {acked} acked, {} completed; order {order:?}",
        early.len(),
        completed.len()
    );
    assert!(
        early.is_empty(),
        "cancels that overtook their lease: {early:?}"
    );
    assert!(
        completed.is_empty(),
        "cancelled jobs that ended COMPLETED: {completed:?}"
    );
}
