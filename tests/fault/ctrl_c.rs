//! Ctrl-C in a terminal sends SIGINT to the whole foreground process group. jobwire started
//! with its embedded Redis must still hand its leases back (no attempt charged) and only then
//! stop its redis-server: the child runs in its own process group, so the signal reaches
//! jobwire alone.

use std::time::Duration;

use jobwire::pb;

use crate::harness::{spec, TestWorker};
use crate::procs::{children_of, ServerProc};

/// The process group of `pid`, from /proc.
fn pgrp(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(2)?
        .parse()
        .ok()
}

fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_owned()
}

#[tokio::test]
async fn sigint_to_the_process_group_hands_leases_back_before_the_embedded_redis_stops() {
    let data = tempfile::tempdir().expect("data dir");
    let args: Vec<String> = [
        "--data-dir",
        &data.path().display().to_string(),
        "--lease-duration",
        "2s",
        "--reaper-interval",
        "100ms",
        "--heartbeat-timeout",
        "1s",
        "--shutdown-grace",
        "1s",
    ]
    .map(String::from)
    .to_vec();
    let mut server = ServerProc::spawn(args).await;
    let redis_pid = children_of(server.pid)
        .into_iter()
        .find(|p| comm(*p).starts_with("redis-server"))
        .expect("an embedded redis-server child");
    assert_eq!(
        pgrp(server.pid),
        Some(server.pid),
        "jobwire leads its group"
    );
    println!(
        "jobwire pid {} pgrp {:?}; redis-server pid {redis_pid} pgrp {:?}",
        server.pid,
        pgrp(server.pid),
        pgrp(redis_pid)
    );

    let ids = ["a", "b", "c"];
    for id in ids {
        server
            .jobs()
            .enqueue(pb::EnqueueRequest {
                job: Some(spec("ctrlc", id)),
            })
            .await
            .expect("enqueue");
    }
    let mut w = TestWorker::open_on(server.channel.clone(), &["ctrlc"], 3, "held").await;
    for _ in ids {
        assert_eq!(w.lease().await.attempt, 1);
    }

    server.sigint_group();
    let status = server.wait_exit(Duration::from_secs(30)).await;
    let log = server.log_tail();
    assert!(status.success(), "jobwire exit {status}:\n{log}");
    assert!(
        std::fs::metadata(format!("/proc/{redis_pid}")).is_err(),
        "the embedded redis-server is gone with jobwire"
    );
    for needle in [
        "handed leases back to waiting",
        "embedded redis-server stopped",
    ] {
        assert!(log.contains(needle), "log says {needle:?}:\n{log}");
    }
    let back = log.find("handed leases back").unwrap_or(usize::MAX);
    let stopped = log.find("embedded redis-server stopped").unwrap_or(0);
    assert!(
        back < stopped,
        "leases handed back before redis stopped:\n{log}"
    );
    drop(w);

    // Same data dir: every held job is waiting again with no attempt charged.
    server.restart().await;
    for id in ids {
        let job = server
            .jobs()
            .get_job(pb::GetJobRequest {
                queue: "ctrlc".into(),
                job_id: id.into(),
            })
            .await
            .expect("get job")
            .into_inner()
            .job
            .expect("job");
        assert_eq!(job.state, pb::JobState::Waiting as i32, "{job:?}");
        assert_eq!(job.attempts_made, 0, "{job:?}");
    }
    server.sigterm();
    server.wait_exit(Duration::from_secs(30)).await;
}
