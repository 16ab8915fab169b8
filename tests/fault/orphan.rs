//! SIGKILL of jobwire (the OOM killer, `kill -9`, a test harness's Process.Kill) runs none of
//! its code, so nothing of jobwire can stop its embedded redis-server: the kernel must. The
//! child must not outlive jobwire (an orphan reparented to init holds the data dir's socket, and
//! the next `jobwire serve` on that --data-dir would refuse to start), and a job acknowledged
//! before the kill must be there after a restart.

use std::time::Duration;

use jobwire::pb;

use crate::harness::spec;
use crate::procs::{children_of, signal, ServerProc};

/// The state letter of `pid` from /proc (`R`, `S`, `Z`, ...); `None` once it is gone.
fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .next()?
        .chars()
        .next()
}

/// Alive: neither gone nor a zombie (in a container, PID 1 may never reap the orphan).
fn alive(pid: u32) -> bool {
    !matches!(state(pid), None | Some('Z' | 'X'))
}

#[tokio::test]
async fn sigkill_of_jobwire_takes_its_embedded_redis_down_and_the_data_dir_starts_again() {
    let data = tempfile::tempdir().expect("data dir");
    let args: Vec<String> = [
        "--data-dir",
        &data.path().display().to_string(),
        "--shutdown-grace",
        "1s",
    ]
    .map(String::from)
    .to_vec();
    let mut server = ServerProc::spawn(args).await;
    let redis_pid = children_of(server.pid)
        .into_iter()
        .find(|p| {
            std::fs::read_to_string(format!("/proc/{p}/comm"))
                .is_ok_and(|c| c.starts_with("redis-server"))
        })
        .expect("an embedded redis-server child");
    server
        .jobs()
        .enqueue(pb::EnqueueRequest {
            job: Some(spec("orphan", "before-kill")),
        })
        .await
        .expect("enqueue");

    server.sigkill().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while alive(redis_pid) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let orphaned = alive(redis_pid);
    if orphaned {
        // Do not leave it behind when the assertion fails.
        signal(redis_pid, "-KILL");
    }
    assert!(
        !orphaned,
        "the embedded redis-server {redis_pid} outlived its SIGKILLed jobwire by 5 s"
    );

    // The kernel's parent-death signal is SIGTERM, on which Redis shuts down as on SHUTDOWN:
    // it flushes and fsyncs its append-only file before it exits.
    let redis_log = std::fs::read_to_string(data.path().join("redis.log")).unwrap_or_default();
    assert!(
        redis_log.contains("Received SIGTERM"),
        "redis-server was stopped by SIGTERM:\n{redis_log}"
    );

    // Same data dir: it starts (no live server on the socket) and the job is still there.
    server.restart().await;
    let job = server
        .jobs()
        .get_job(pb::GetJobRequest {
            queue: "orphan".into(),
            job_id: "before-kill".into(),
        })
        .await
        .expect("the job enqueued before the kill")
        .into_inner()
        .job
        .expect("job");
    assert_eq!(job.state, pb::JobState::Waiting as i32, "{job:?}");
    server.sigterm();
    assert!(server.wait_exit(Duration::from_secs(30)).await.success());
}
