//! Redis dies in the middle of a run and comes back: health turns NOT_SERVING, every RPC
//! answers UNAVAILABLE within a bound (no hang), streams stay open or end with UNAVAILABLE,
//! and once Redis is back jobwire recovers by itself: the store reconnects, the pub/sub
//! wake-up listener subscribes again, and work flows, with no restart of jobwire.

use std::time::{Duration, Instant};

use jobwire::pb;
use pb::subscribe_response::Message as Out;

use crate::harness::*;
use crate::procs::{RedisOpts, RedisProc};

/// No RPC may take longer than this while Redis is down (the store's command timeout is 3 s).
const BOUND: Duration = Duration::from_secs(10);

async fn health(app: &TestApp) -> i32 {
    let mut h = tonic_health::pb::health_client::HealthClient::new(app.channel.clone());
    h.check(tonic_health::pb::HealthCheckRequest {
        service: "jobwire.v1.JobService".into(),
    })
    .await
    .map(|r| r.into_inner().status)
    .unwrap_or(-1)
}

/// Runs `call` and checks it answers UNAVAILABLE within [`BOUND`].
async fn unavailable<T: std::fmt::Debug>(
    what: &str,
    call: impl std::future::Future<Output = Result<T, tonic::Status>>,
) {
    let t = Instant::now();
    let r = tokio::time::timeout(BOUND, call)
        .await
        .unwrap_or_else(|_| panic!("{what} hung past {BOUND:?} while redis was down"));
    let s = r.expect_err(what);
    assert_eq!(
        s.code(),
        tonic::Code::Unavailable,
        "{what}: {}",
        s.message()
    );
    println!("{what}: UNAVAILABLE after {:?}", t.elapsed());
}

/// Subscribers of queue `out`'s wake-up channel (the server listens once a worker serves it).
async fn listeners(redis: &RedisProc) -> i64 {
    let mut c = redis.conn().await;
    let (_, n): (String, i64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg("jw:wake:out")
        .query_async(&mut c)
        .await
        .expect("pubsub numsub");
    n
}

#[tokio::test]
async fn a_redis_outage_gives_unavailable_and_jobwire_recovers_without_a_restart() {
    let mut redis = RedisProc::start(RedisOpts::default()).await;
    let app = TestApp::spawn(test_config(&redis.url)).await;
    enqueue(&app, spec("out", "before")).await;
    let mut w = TestWorker::open(&app, &["out"], 2, "w").await;
    eventually(Duration::from_secs(10), || async {
        listeners(&redis).await == 1
    })
    .await;
    let l = w.lease().await;
    assert_eq!(w.ack(&l).await.code, 0);

    redis.kill().await;
    eventually(BOUND, || async { health(&app).await == 2 }).await; // NOT_SERVING
    unavailable(
        "Enqueue",
        app.jobs().enqueue(pb::EnqueueRequest {
            job: Some(spec("out", "during")),
        }),
    )
    .await;
    unavailable(
        "GetJob",
        app.jobs().get_job(pb::GetJobRequest {
            queue: "out".into(),
            job_id: "before".into(),
        }),
    )
    .await;
    unavailable(
        "Ack",
        app.workers().ack(pb::AckRequest {
            result: Vec::new(),
            queue: "out".into(),
            job_id: "before".into(),
            lease_token: "t".into(),
        }),
    )
    .await;
    unavailable(
        "ExtendLease",
        app.workers().extend_lease(pb::ExtendLeaseRequest {
            queue: "out".into(),
            job_id: "before".into(),
            lease_token: "t".into(),
            lease_duration: None,
        }),
    )
    .await;
    unavailable(
        "ListDeadLetters",
        app.dead().list_dead_letters(pb::ListDeadLettersRequest {
            queue: "out".into(),
            ..Default::default()
        }),
    )
    .await;
    // The open stream either stays open or ends with UNAVAILABLE; it never leases garbage.
    let mut stream_alive = true;
    match w.recv(Duration::from_secs(2)).await {
        Recv::Timeout => {}
        Recv::Error(s) => {
            assert_eq!(s.code(), tonic::Code::Unavailable, "{s:?}");
            stream_alive = false;
        }
        Recv::End => stream_alive = false,
        Recv::Msg(m) => assert!(!matches!(m, Out::Lease(_)), "{m:?}"),
    }

    redis.restart().await;
    eventually(Duration::from_secs(20), || async {
        health(&app).await == 1
    })
    .await; // SERVING
    eventually(Duration::from_secs(20), || async {
        listeners(&redis).await == 1
    })
    .await;
    let before = get_job(&app, "out", "before").await;
    assert_eq!(
        before.state,
        pb::JobState::Completed as i32,
        "kept by the AOF"
    );
    if !stream_alive {
        w = TestWorker::open(&app, &["out"], 2, "w").await;
    }
    enqueue(&app, spec("out", "after")).await;
    let l = w.lease().await;
    assert_eq!(l.job.as_ref().expect("job").job_id, "after");
    assert_eq!(
        w.ack(&l).await.code,
        0,
        "work flows again on the same server"
    );
}
