//! Durability of the embedded Redis with `--redis-fsync always`: SIGKILL jobwire and its
//! redis-server child right after Enqueue returned OK, start again on the same data dir, and
//! every acknowledged job is there.

use std::time::Duration;

use jobwire::pb;

use crate::harness::*;
use crate::procs::{children_of, signal, ServerProc};

#[tokio::test]
async fn every_acknowledged_job_survives_sigkill_of_jobwire_and_its_redis() {
    let data = tempfile::tempdir().expect("tempdir");
    let args: Vec<String> = vec![
        "--data-dir".into(),
        data.path().display().to_string(),
        "--redis-fsync".into(),
        "always".into(),
    ];
    let mut server = ServerProc::spawn(args).await;
    let redis_pids = children_of(server.pid);
    assert_eq!(redis_pids.len(), 1, "one embedded redis-server child");

    let mut acked = Vec::new();
    for i in 0..200 {
        let id = format!("d{i}");
        server
            .jobs()
            .enqueue(pb::EnqueueRequest {
                job: Some(pb::JobSpec {
                    payload: format!("payload {i}").into_bytes(),
                    ..spec("dur", &id)
                }),
            })
            .await
            .expect("enqueue");
        acked.push(id);
    }
    let batch: Vec<pb::JobSpec> = (0..100).map(|i| spec("dur", &format!("b{i}"))).collect();
    let r = server
        .jobs()
        .enqueue_batch(pb::EnqueueBatchRequest { jobs: batch })
        .await
        .expect("batch")
        .into_inner();
    for res in r.results {
        acked.push(res.job.expect("created").job_id);
    }
    // Right after the last OK: both die at once, nothing flushed on the way out.
    signal(redis_pids[0], "-KILL");
    server.sigkill().await;
    let sock = data.path().join("redis.sock");
    eventually(Duration::from_secs(10), || async {
        tokio::net::UnixStream::connect(&sock).await.is_err()
    })
    .await;

    server.restart().await;
    for id in &acked {
        let job = server
            .jobs()
            .get_job(pb::GetJobRequest {
                queue: "dur".into(),
                job_id: id.clone(),
            })
            .await
            .unwrap_or_else(|s| panic!("acknowledged job {id} lost: {s:?}"))
            .into_inner()
            .job
            .expect("job");
        assert_eq!(job.state, pb::JobState::Waiting as i32, "{id}");
    }
    println!(
        "{} acknowledged jobs, all present after SIGKILL",
        acked.len()
    );
    // An orderly stop also stops the embedded redis-server (a SIGKILL on drop would orphan it).
    server.sigterm();
    assert!(server.wait_exit(Duration::from_secs(30)).await.success());
}
