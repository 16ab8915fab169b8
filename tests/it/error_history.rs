//! Bounded error history (issue 11 item 1): a job failed over and over with max-size errors
//! keeps its first error and the last few, counts the ones dropped, and a lease carries at
//! most the last error, so no Subscribe stream dies on an oversized message.

use std::time::Duration;

use jobwire::pb;
use pb::subscribe_request::Message as In;

use crate::harness::*;

fn max_error(i: usize) -> pb::JobError {
    pb::JobError {
        message: format!("{i:05} {}", "m".repeat(8 * 1024 - 6)),
        error_type: "rate_limited".into(),
        details: "d".repeat(64 * 1024),
    }
}

/// Bytes Redis holds for the jobs of `queue` (the test's queue holds one): the hashes of
/// their headers, bodies and error histories (src/store/scripts/common.lua), every field
/// counted (SAMPLES 0).
async fn stored_bytes(redis: &TestRedis, queue: &str) -> usize {
    let mut c = redis.conn().await;
    let mut total = 0;
    for k in ["jobs", "bodies", "errors"] {
        let n: Option<usize> = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(format!("jw:{{{queue}}}:{k}"))
            .arg("SAMPLES")
            .arg(0)
            .query_async(&mut c)
            .await
            .expect("memory usage");
        total += n.unwrap_or(0);
    }
    total
}

#[tokio::test]
async fn a_job_failed_sixty_times_with_max_size_errors_still_streams() {
    let (redis, app) = TestApp::with_redis().await;
    enqueue(&app, spec("hist", "j")).await;
    let mut w = TestWorker::open(&app, &["hist"], 1, "w").await;
    let fails = 64;
    for i in 0..fails {
        let l = match w.recv(Duration::from_secs(10)).await {
            Recv::Msg(pb::subscribe_response::Message::Lease(l)) => l,
            other => panic!("lease {i}: the stream gave {other:?}"),
        };
        let job = l.job.as_ref().expect("job");
        assert!(
            job.errors.len() <= 1,
            "a lease carries at most the last error, got {}",
            job.errors.len()
        );
        w.send(In::Fail(pb::FailRequest {
            pause_group: false,
            queue: "hist".into(),
            job_id: "j".into(),
            lease_token: l.lease_token.clone(),
            disposition: pb::FailDisposition::RateLimited as i32,
            error: Some(max_error(i)),
            retry_after: Some(ms(Duration::from_millis(1))),
            pause_queue: false,
        }));
        match w.recv(Duration::from_secs(10)).await {
            Recv::Msg(pb::subscribe_response::Message::Settled(s)) => {
                assert_eq!(s.code, 0, "fail {i}: {}", s.message)
            }
            other => panic!("fail {i}: the stream gave {other:?}"),
        }
    }
    let bytes = stored_bytes(&redis, "hist").await;
    println!("job stored in {bytes} bytes after {fails} max-size failures");
    assert!(
        bytes < 400 * 1024,
        "{bytes} bytes stored: the history is not bounded"
    );
    let job = get_job(&app, "hist", "j").await;
    let n = job.errors.len();
    assert!((2..=11).contains(&n), "{n} errors kept");
    assert!(
        job.errors[0].message.starts_with("00000 "),
        "the first error is kept"
    );
    assert!(
        job.errors[n - 1]
            .message
            .starts_with(&format!("{:05} ", fails - 1)),
        "the last error is kept"
    );
    for (k, e) in job.errors[1..].iter().enumerate() {
        let want = fails - (n - 1) + k;
        assert!(
            e.message.starts_with(&format!("{want:05} ")),
            "kept errors are the newest, in order"
        );
        assert_eq!(e.details.len(), 64 * 1024, "kept errors are whole");
    }
    assert_eq!(
        job.errors_dropped as usize,
        fails - n,
        "dropped errors are counted"
    );
}
